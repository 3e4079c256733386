// Element types. The numeric values equal kiln.fb.DType in schema/kiln.fbs (checked by
// static_asserts in dtype.cpp), so a DType can be stored in a bundle as-is.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace kiln {

enum class DType : std::uint8_t {
  kF32 = 0,
  kF16 = 1,
  kBF16 = 2,
  kF64 = 3,
  kI8 = 4,
  kI16 = 5,
  kI32 = 6,
  kI64 = 7,
  kU8 = 8,
  kBool = 9,
};
inline constexpr int kDTypeCount = 10;

/// Bytes per element.
std::size_t dtype_size(DType dtype);
/// Short name used in printed shapes: "f32", "i64", "b8", ...
std::string_view dtype_name(DType dtype);
/// Inverse of dtype_name; nullopt for an unknown name.
std::optional<DType> dtype_from_name(std::string_view name);
/// True for a value that names one of the enumerators (bundle bytes are hostile).
constexpr bool dtype_is_valid(std::uint8_t raw) { return raw < kDTypeCount; }
constexpr bool dtype_is_floating(DType d) {
  return d == DType::kF32 || d == DType::kF16 || d == DType::kBF16 || d == DType::kF64;
}

}  // namespace kiln

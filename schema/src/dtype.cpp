#include "kiln/format/dtype.h"

#include "kiln/format/kiln_generated.h"

namespace kiln {

static_assert(static_cast<int>(fb::DType::f32) == static_cast<int>(DType::kF32));
static_assert(static_cast<int>(fb::DType::f16) == static_cast<int>(DType::kF16));
static_assert(static_cast<int>(fb::DType::bf16) == static_cast<int>(DType::kBF16));
static_assert(static_cast<int>(fb::DType::f64) == static_cast<int>(DType::kF64));
static_assert(static_cast<int>(fb::DType::i8) == static_cast<int>(DType::kI8));
static_assert(static_cast<int>(fb::DType::i16) == static_cast<int>(DType::kI16));
static_assert(static_cast<int>(fb::DType::i32) == static_cast<int>(DType::kI32));
static_assert(static_cast<int>(fb::DType::i64) == static_cast<int>(DType::kI64));
static_assert(static_cast<int>(fb::DType::u8) == static_cast<int>(DType::kU8));
static_assert(static_cast<int>(fb::DType::boolean) == static_cast<int>(DType::kBool));
static_assert(static_cast<int>(fb::DType::MAX) + 1 == kDTypeCount);

namespace {
struct DTypeInfo {
  std::string_view name;
  std::size_t size;
};
constexpr DTypeInfo kInfo[kDTypeCount] = {
    {"f32", 4}, {"f16", 2}, {"bf16", 2}, {"f64", 8}, {"i8", 1},
    {"i16", 2}, {"i32", 4}, {"i64", 8},  {"u8", 1},  {"b8", 1},
};
}  // namespace

std::size_t dtype_size(DType dtype) { return kInfo[static_cast<int>(dtype)].size; }
std::string_view dtype_name(DType dtype) { return kInfo[static_cast<int>(dtype)].name; }

std::optional<DType> dtype_from_name(std::string_view name) {
  for (int i = 0; i < kDTypeCount; ++i) {
    if (kInfo[i].name == name) return static_cast<DType>(i);
  }
  return std::nullopt;
}

}  // namespace kiln

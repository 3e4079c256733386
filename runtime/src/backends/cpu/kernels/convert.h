// Element conversions between dtypes, with PyTorch's semantics where they are defined:
//   float -> int   truncates toward zero; NaN gives 0 and values outside int64 saturate
//                  (PyTorch leaves both undefined), then narrower ints wrap modulo 2^bits
//                  (as PyTorch does on x86: -1.0 -> u8 255);
//   any -> bool    value != 0 (NaN is true);
//   bool -> any    0 or 1;
//   int -> int     wraps modulo 2^bits;
//   f16/bf16       go through float, rounding to nearest even.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "backends/cpu/kernels/common.h"

namespace kiln::cpu::kernels {

inline float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu;
  const std::uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  if (exp != 0) return std::bit_cast<float>(sign | ((exp + 112) << 23) | (mant << 13));
  // Zero or subnormal: mant * 2^-24, exact in float.
  const float mag = static_cast<float>(mant) * 5.9604644775390625e-8f;
  return std::bit_cast<float>(sign | std::bit_cast<std::uint32_t>(mag));
}

inline std::uint16_t float_to_half(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const auto sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  const std::uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf or NaN (keep NaN quiet)
    return static_cast<std::uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
  }
  if (abs >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (abs < 0x38800000u) {
    // Result is subnormal or zero: adding 0.5 makes the FPU round the mantissa for us.
    const float r = std::bit_cast<float>(abs) + 0.5f;
    return static_cast<std::uint16_t>(sign | (std::bit_cast<std::uint32_t>(r) - 0x3f000000u));
  }
  const std::uint32_t odd = (abs >> 13) & 1u;
  const std::uint32_t rounded = abs + 0xc8000fffu + odd;  // rebias exponent and round to even
  return static_cast<std::uint16_t>(sign | (rounded >> 13));
}

inline float bf16_to_float(std::uint16_t b) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16);
}

inline std::uint16_t float_to_bf16(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x40u);
  const std::uint32_t rounded = x + 0x7fffu + ((x >> 16) & 1u);
  return static_cast<std::uint16_t>(rounded >> 16);
}

/// The value of one element as a float/double/int64 "wide" value.
template <DType D>
constexpr bool kIsFloat = D == DType::kF32 || D == DType::kF64 || D == DType::kF16 ||
                          D == DType::kBF16;

template <typename T>
inline float to_float(T v) {
  if constexpr (std::is_same_v<T, Half>) {
    return half_to_float(v.bits);
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return bf16_to_float(v.bits);
  } else {
    return static_cast<float>(v);
  }
}

/// float/double -> int64: truncation, NaN -> 0, saturating.
template <typename F>
inline std::int64_t float_to_int64(F v) {
  if (!(v == v)) return 0;
  if (v >= static_cast<F>(9.2233720368547758e18)) return std::numeric_limits<std::int64_t>::max();
  if (v <= static_cast<F>(-9.2233720368547758e18)) return std::numeric_limits<std::int64_t>::min();
  return static_cast<std::int64_t>(v);
}

/// Converts one element from dtype From to dtype To (rules at the top of this file).
template <DType To, DType From>
inline CType<To> convert(CType<From> v) {
  using TT = CType<To>;
  if constexpr (To == From) {
    return v;
  } else if constexpr (From == DType::kF16 || From == DType::kBF16) {
    return convert<To, DType::kF32>(to_float(v));
  } else if constexpr (To == DType::kBool) {
    return static_cast<TT>(v != 0 ? 1 : 0);
  } else if constexpr (From == DType::kBool) {
    return convert<To, DType::kU8>(static_cast<std::uint8_t>(v != 0 ? 1 : 0));
  } else if constexpr (To == DType::kF16) {
    return Half{float_to_half(static_cast<float>(v))};
  } else if constexpr (To == DType::kBF16) {
    return BFloat16{float_to_bf16(static_cast<float>(v))};
  } else if constexpr (kIsFloat<To>) {
    return static_cast<TT>(v);
  } else if constexpr (kIsFloat<From>) {
    if constexpr (To == DType::kI32 && From == DType::kF32) {
      // Common case kept vectorizable: in range -> plain truncation.
      if (v > -2147483648.0f && v < 2147483648.0f) return static_cast<TT>(v);
    }
    return static_cast<TT>(static_cast<std::uint64_t>(float_to_int64(v)));
  } else {
    return static_cast<TT>(v);
  }
}

/// Converts n elements between any two dtypes (src and dst must not overlap unless equal).
void convert_buffer(const void* src, DType src_dtype, void* dst, DType dst_dtype, std::int64_t n);

/// Writes `value` (converted with the rules above, as from f64) to one element at `dst`.
void store_scalar(double value, void* dst, DType dtype);
/// Fills n elements at `dst` with `value` converted to `dtype` (as store_scalar).
void fill_scalar(double value, void* dst, DType dtype, std::int64_t n);
/// Reads one element as a double (int64 values beyond 2^53 round).
double load_scalar(const void* src, DType dtype);

}  // namespace kiln::cpu::kernels

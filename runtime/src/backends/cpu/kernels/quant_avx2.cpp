// The AVX2+FMA+F16C quantized micro-kernels (quant.h); compiled with -mavx2 -mfma -mf16c.
// Only reached through quant_kernels() after simd_avx2()'s CPU checks.
//
// A step converts 16 weights of a row to two 8-float vectors (int8: one 16-byte load,
// sign-extended; int4: 8 bytes split into nibbles, interleaved back into column order and
// recentred by the zero point in the int8 domain) and multiplies them into per-group
// accumulators; each group's sum is scaled once. Four rows share each load of x and give
// the FMAs eight independent dependency chains.
#include <cstdint>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "backends/cpu/kernels/quant.h"

namespace kiln::cpu::kernels {

#if defined(__x86_64__) || defined(__i386__)
namespace {

float scale_at(const QuantWeight& w, std::int64_t index) {
  return w.scales_f16 ? _cvtsh_ss(static_cast<const std::uint16_t*>(w.scales)[index])
                      : static_cast<const float*>(w.scales)[index];
}

int zero_at(const QuantWeight& w, std::int64_t index) {
  if (w.zero_points != nullptr) return w.zero_points[index] & 0x0F;
  return w.bits == 4 ? 8 : 0;
}

// Columns [col, col + 16) of a row as 16 int8 values minus the zero point.
template <int Bits>
__m128i load16(const std::uint8_t* row, std::int64_t col, __m128i zero) {
  if constexpr (Bits == 8) {
    (void)zero;
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + col));
  } else {
    const __m128i mask = _mm_set1_epi8(0x0F);
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + col / 2));
    const __m128i lo = _mm_and_si128(b, mask);
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(b, 4), mask);
    return _mm_sub_epi8(_mm_unpacklo_epi8(lo, hi), zero);
  }
}

template <int Bits>
int scalar_value(const std::uint8_t* row, std::int64_t col, int zero) {
  if constexpr (Bits == 8) {
    return static_cast<std::int8_t>(row[col]) - zero;
  } else {
    const std::uint8_t byte = row[col / 2];
    return ((col & 1) != 0 ? byte >> 4 : byte & 0x0F) - zero;
  }
}

float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// out[i] = W(r0 + i, :) . x for i < R.
template <int Bits, int R>
void rows_block(const QuantWeight& w, const float* x, std::int64_t r0, float* out) {
  const std::int64_t groups = w.k / w.group;
  const std::int64_t row_bytes = Bits == 8 ? w.k : w.k / 2;
  const std::int64_t vec_len = w.group & ~std::int64_t{15};
  const std::uint8_t* rows[R];
  __m256 acc[R];
  float tail_acc[R];
  for (int i = 0; i < R; ++i) {
    rows[i] = w.data + (r0 + i) * row_bytes;
    acc[i] = _mm256_setzero_ps();
    tail_acc[i] = 0.0f;
  }
  for (std::int64_t g = 0; g < groups; ++g) {
    const std::int64_t c0 = g * w.group;
    __m256 ga[R][2];
    __m128i zero[R];
    int zero_s[R];
    for (int i = 0; i < R; ++i) {
      ga[i][0] = _mm256_setzero_ps();
      ga[i][1] = _mm256_setzero_ps();
      zero_s[i] = zero_at(w, (r0 + i) * groups + g);
      zero[i] = _mm_set1_epi8(static_cast<char>(zero_s[i]));
    }
    for (std::int64_t c = c0; c < c0 + vec_len; c += 16) {
      const __m256 x0 = _mm256_loadu_ps(x + c);
      const __m256 x1 = _mm256_loadu_ps(x + c + 8);
      for (int i = 0; i < R; ++i) {
        const __m128i q = load16<Bits>(rows[i], c, zero[i]);
        const __m256 w0 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q));
        const __m256 w1 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(q, 8)));
        ga[i][0] = _mm256_fmadd_ps(x0, w0, ga[i][0]);
        ga[i][1] = _mm256_fmadd_ps(x1, w1, ga[i][1]);
      }
    }
    for (int i = 0; i < R; ++i) {
      float tail = 0.0f;
      for (std::int64_t c = c0 + vec_len; c < c0 + w.group; ++c) {
        tail += x[c] * static_cast<float>(scalar_value<Bits>(rows[i], c, zero_s[i]));
      }
      const float s = scale_at(w, (r0 + i) * groups + g);
      acc[i] = _mm256_fmadd_ps(_mm256_add_ps(ga[i][0], ga[i][1]), _mm256_set1_ps(s), acc[i]);
      tail_acc[i] += tail * s;
    }
  }
  for (int i = 0; i < R; ++i) out[i] = hsum(acc[i]) + tail_acc[i];
}

template <int Bits>
void gemv_rows_bits(const QuantWeight& w, const float* x, std::int64_t row0, std::int64_t row1, float* out) {
  std::int64_t r = row0;
  for (; r + 4 <= row1; r += 4) rows_block<Bits, 4>(w, x, r, out + (r - row0));
  for (; r < row1; ++r) rows_block<Bits, 1>(w, x, r, out + (r - row0));
}

void gemv_rows(const QuantWeight& w, const float* x, std::int64_t row0, std::int64_t row1, float* out) {
  if (w.bits == 8) {
    gemv_rows_bits<8>(w, x, row0, row1, out);
  } else {
    gemv_rows_bits<4>(w, x, row0, row1, out);
  }
}

template <int Bits>
void dequantize_rows_bits(const QuantWeight& w, std::int64_t row0, std::int64_t row1, float* dst) {
  const std::int64_t groups = w.k / w.group;
  const std::int64_t row_bytes = Bits == 8 ? w.k : w.k / 2;
  const std::int64_t vec_len = w.group & ~std::int64_t{15};
  for (std::int64_t r = row0; r < row1; ++r) {
    const std::uint8_t* row = w.data + r * row_bytes;
    float* out = dst + (r - row0) * w.k;
    for (std::int64_t g = 0; g < groups; ++g) {
      const std::int64_t c0 = g * w.group;
      const int zero_s = zero_at(w, r * groups + g);
      const __m128i zero = _mm_set1_epi8(static_cast<char>(zero_s));
      const float s = scale_at(w, r * groups + g);
      const __m256 sv = _mm256_set1_ps(s);
      for (std::int64_t c = c0; c < c0 + vec_len; c += 16) {
        const __m128i q = load16<Bits>(row, c, zero);
        _mm256_storeu_ps(out + c, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), sv));
        _mm256_storeu_ps(out + c + 8, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(q, 8))), sv));
      }
      for (std::int64_t c = c0 + vec_len; c < c0 + w.group; ++c) {
        out[c] = static_cast<float>(scalar_value<Bits>(row, c, zero_s)) * s;
      }
    }
  }
}

void dequantize_rows(const QuantWeight& w, std::int64_t row0, std::int64_t row1, float* dst) {
  if (w.bits == 8) {
    dequantize_rows_bits<8>(w, row0, row1, dst);
  } else {
    dequantize_rows_bits<4>(w, row0, row1, dst);
  }
}

constexpr QuantKernels kAvx2{"avx2", gemv_rows, dequantize_rows};

}  // namespace

const QuantKernels& quant_kernels_avx2_table() { return kAvx2; }
#endif

}  // namespace kiln::cpu::kernels

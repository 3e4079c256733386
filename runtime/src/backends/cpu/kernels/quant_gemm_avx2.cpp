// The AVX2 integer-GEMM kernels (quant_gemm.h); compiled with -mavx2 -mfma -mf16c. Only
// reached through int_gemm_kernels() after simd_avx2()'s CPU checks. The AVX-512 VNNI table
// (quant_gemm_avx512vnni.cpp) reuses the quantizers and panel packers.
//
// Panels: 16 weight rows x 32 bytes are loaded as 16 vectors and transposed as a 16 x 16
// matrix of 16-bit words (a word holds one unit's bytes: four int4 columns, or two int8
// ones), then each word is widened to its 4-byte unit (nibbles split, or int8 sign-extended
// to int16). Micro-kernels: vpmaddubsw (u8 weights x s8 activations, pairs summed in int16)
// with four units summed in int16 before vpmaddwd widens them (4 x 2 x 31 x 127 < 2^15),
// or vpmaddwd for int16 pairs; the multiplies use half the FP-pipe slots of the f32 FMAs
// (kQ8: a third).
#include <cstdint>
#include <cstring>
#include <limits>

#include "backends/cpu/kernels/quant_gemm.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#include "backends/cpu/avx2_transpose.h"
#endif

namespace kiln::cpu::kernels {

#if defined(__x86_64__) || defined(__i386__)
namespace {

// Word (b0, b1) of rows 0-7 and 8-15 -> bytes (b0 & 15, b0 >> 4, b1 & 15, b1 >> 4) + offset.
void widen_q8(__m256i words, const std::int32_t (&offset)[16], std::uint8_t* dst) {
  const __m256i nibbles = _mm256_set1_epi8(0x0F);
  const __m256i lo = _mm256_cvtepu8_epi16(_mm256_castsi256_si128(words));       // rows 0-7
  const __m256i hi = _mm256_cvtepu8_epi16(_mm256_extracti128_si256(words, 1));  // rows 8-15
  const __m256i ulo = _mm256_and_si256(_mm256_or_si256(lo, _mm256_slli_epi32(lo, 4)), nibbles);
  const __m256i uhi = _mm256_and_si256(_mm256_or_si256(hi, _mm256_slli_epi32(hi, 4)), nibbles);
  _mm256_store_si256(reinterpret_cast<__m256i*>(dst),
                     _mm256_add_epi8(ulo, _mm256_load_si256(reinterpret_cast<const __m256i*>(offset))));
  _mm256_store_si256(reinterpret_cast<__m256i*>(dst + 32),
                     _mm256_add_epi8(uhi, _mm256_load_si256(reinterpret_cast<const __m256i*>(offset + 8))));
}

void widen_q16(__m256i words, std::uint8_t* dst) {
  _mm256_store_si256(reinterpret_cast<__m256i*>(dst), _mm256_cvtepi8_epi16(_mm256_castsi256_si128(words)));
  _mm256_store_si256(reinterpret_cast<__m256i*>(dst + 32), _mm256_cvtepi8_epi16(_mm256_extracti128_si256(words, 1)));
}

#include "backends/cpu/kernels/quant_gemm_pack.inc"

__m256i broadcast_unit(const std::uint8_t* p) {
  std::int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// c[r][0..cols) (+)= acc[r][0..cols) (+ bias), r < rows.
void store_tile(const IntGemmTile& t, const float (&acc)[kIntGemmMr][kIntGemmNr]) {
  for (int r = 0; r < t.rows; ++r) {
    float* c = t.c + r * t.ldc;
    if (t.cols == kIntGemmNr) {
      for (int j = 0; j < kIntGemmNr; j += 8) {
        __m256 v = _mm256_loadu_ps(acc[r] + j);
        if (t.bias != nullptr) v = _mm256_add_ps(v, _mm256_loadu_ps(t.bias + j));
        if (t.accumulate) v = _mm256_add_ps(_mm256_loadu_ps(c + j), v);
        _mm256_storeu_ps(c + j, v);
      }
      continue;
    }
    for (int j = 0; j < t.cols; ++j) {
      const float v = acc[r][j] + (t.bias != nullptr ? t.bias[j] : 0.0f);
      c[j] = t.accumulate ? c[j] + v : v;
    }
  }
}

// Rows [r0, r0 + R) x columns [16 h, 16 h + 16) of a kQ8 tile into acc (f32, per block
// scaled). Per block: int16 sums of 4 units' vpmaddubsw, widened by vpmaddwd into int32
// (starting from the block's init), converted and scaled once.
template <int R>
void q8_rows(const IntGemmTile& t, int r0, int h, float (&acc)[kIntGemmMr][kIntGemmNr]) {
  const __m256i ones = _mm256_set1_epi16(1);
  for (std::int64_t blk = 0; blk < t.blocks; ++blk) {
    const std::uint8_t* a = t.a + (blk * 8 * kIntGemmMr + r0) * 4;
    const std::uint8_t* b = t.b + (blk * 8 * kIntGemmNr + h * 16) * 4;
    __m256i sum[R][2];
    for (int r = 0; r < R; ++r) sum[r][0] = sum[r][1] = _mm256_set1_epi32(t.a_init[blk * kIntGemmMr + r0 + r]);
    for (int half = 0; half < 2; ++half) {
      __m256i p[R][2];
      for (int u = 0; u < 4; ++u) {
        const __m256i b0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(b));
        const __m256i b1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(b + 32));
        for (int r = 0; r < R; ++r) {
          const __m256i av = broadcast_unit(a + r * 4);
          const __m256i m0 = _mm256_maddubs_epi16(b0, av), m1 = _mm256_maddubs_epi16(b1, av);
          p[r][0] = u == 0 ? m0 : _mm256_add_epi16(p[r][0], m0);
          p[r][1] = u == 0 ? m1 : _mm256_add_epi16(p[r][1], m1);
        }
        a += kIntGemmMr * 4;
        b += kIntGemmNr * 4;
      }
      for (int r = 0; r < R; ++r) {
        sum[r][0] = _mm256_add_epi32(sum[r][0], _mm256_madd_epi16(p[r][0], ones));
        sum[r][1] = _mm256_add_epi32(sum[r][1], _mm256_madd_epi16(p[r][1], ones));
      }
    }
    const float* bs = t.b_scale + blk * kIntGemmNr + h * 16;
    const __m256 s0 = _mm256_load_ps(bs), s1 = _mm256_load_ps(bs + 8);
    for (int r = 0; r < R; ++r) {
      const __m256 as = _mm256_set1_ps(t.a_scale[blk * kIntGemmMr + r0 + r]);
      float* f = acc[r0 + r] + h * 16;
      _mm256_store_ps(f, _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(sum[r][0]), as), s0, _mm256_load_ps(f)));
      _mm256_store_ps(f + 8, _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(sum[r][1]), as), s1, _mm256_load_ps(f + 8)));
    }
  }
}

// The same for kQ16: vpmaddwd of the int16 pairs into int32, one block of 128 units.
template <int R>
void q16_rows(const IntGemmTile& t, int r0, int h, float (&acc)[kIntGemmMr][kIntGemmNr]) {
  for (std::int64_t blk = 0; blk < t.blocks; ++blk) {
    const std::uint8_t* a = t.a + (blk * 128 * kIntGemmMr + r0) * 4;
    const std::uint8_t* b = t.b + (blk * 128 * kIntGemmNr + h * 16) * 4;
    __m256i sum[R][2];
    for (int r = 0; r < R; ++r) sum[r][0] = sum[r][1] = _mm256_setzero_si256();
    for (int u = 0; u < 128; ++u) {
      const __m256i b0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(b));
      const __m256i b1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(b + 32));
      for (int r = 0; r < R; ++r) {
        const __m256i av = broadcast_unit(a + r * 4);
        sum[r][0] = _mm256_add_epi32(sum[r][0], _mm256_madd_epi16(b0, av));
        sum[r][1] = _mm256_add_epi32(sum[r][1], _mm256_madd_epi16(b1, av));
      }
      a += kIntGemmMr * 4;
      b += kIntGemmNr * 4;
    }
    const float* bs = t.b_scale + blk * kIntGemmNr + h * 16;
    const __m256 s0 = _mm256_load_ps(bs), s1 = _mm256_load_ps(bs + 8);
    for (int r = 0; r < R; ++r) {
      const __m256 as = _mm256_set1_ps(t.a_scale[blk * kIntGemmMr + r0 + r]);
      float* f = acc[r0 + r] + h * 16;
      _mm256_store_ps(f, _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(sum[r][0]), as), s0, _mm256_load_ps(f)));
      _mm256_store_ps(f + 8, _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(sum[r][1]), as), s1, _mm256_load_ps(f + 8)));
    }
  }
}

// Row groups of up to RowsPerPass (register budget of 16 ymm: R x 2 int16 + R x 2 int32
// sums for kQ8, R = 3; R x 2 int32 sums for kQ16, R = 4 (at 6 GCC spilled five sums, a
// store-to-load chain per unit that made batch 64 slower than f32)), both 16-column halves
// of the panel (the second only when there are columns in it).
template <int RowsPerPass, template <int> class Kernel>
void run_tile(const IntGemmTile& t) {
  alignas(32) float acc[kIntGemmMr][kIntGemmNr] = {};
  for (int h = 0; h < (t.cols > 16 ? 2 : 1); ++h) {
    for (int r0 = 0; r0 < t.rows; r0 += RowsPerPass) {
      switch (t.rows - r0 < RowsPerPass ? t.rows - r0 : RowsPerPass) {
        case 1: Kernel<1>::run(t, r0, h, acc); break;
        case 2: Kernel<2>::run(t, r0, h, acc); break;
        case 3: Kernel<3>::run(t, r0, h, acc); break;
        case 4: Kernel<4>::run(t, r0, h, acc); break;
        case 5: Kernel<5>::run(t, r0, h, acc); break;
        default: Kernel<6>::run(t, r0, h, acc); break;
      }
    }
  }
  store_tile(t, acc);
}

template <int R>
struct Q8Rows {
  static void run(const IntGemmTile& t, int r0, int h, float (&acc)[kIntGemmMr][kIntGemmNr]) {
    if constexpr (R <= 3) q8_rows<R>(t, r0, h, acc);
  }
};
template <int R>
struct Q16Rows {
  static void run(const IntGemmTile& t, int r0, int h, float (&acc)[kIntGemmMr][kIntGemmNr]) {
    if constexpr (R <= 4) q16_rows<R>(t, r0, h, acc);
  }
};

void tile_q8(const IntGemmTile& t) { run_tile<3, Q8Rows>(t); }
void tile_q16(const IntGemmTile& t) { run_tile<4, Q16Rows>(t); }

constexpr IntGemmKernels kAvx2{"avx2", quantize_q8, quantize_q16, panel_q8, panel_q16, tile_q8, tile_q16};

}  // namespace

const IntGemmKernels& int_gemm_kernels_avx2_table() { return kAvx2; }
#endif

}  // namespace kiln::cpu::kernels

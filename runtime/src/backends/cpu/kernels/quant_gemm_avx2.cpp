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

float scale_at(const QuantWeight& w, std::int64_t index) {
  return w.scales_f16 ? _cvtsh_ss(static_cast<const std::uint16_t*>(w.scales)[index])
                      : static_cast<const float*>(w.scales)[index];
}

float hmax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

std::int32_t hsum_epi32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

// quantize_block's rule over `Vectors` x 8 floats: returns the scale (0 or NaN for the
// special blocks, whose q are then 0) and q as int32 vectors.
template <int Vectors>
float quantize_vectors(const float* x, float qmax, __m256i (&q)[Vectors]) {
  const __m256 sign = _mm256_set1_ps(-0.0f), big = _mm256_set1_ps(std::numeric_limits<float>::max());
  __m256 amax = _mm256_setzero_ps(), bad = _mm256_setzero_ps();
  for (int i = 0; i < Vectors; ++i) {
    const __m256 a = _mm256_andnot_ps(sign, _mm256_loadu_ps(x + i * 8));
    bad = _mm256_or_ps(bad, _mm256_cmp_ps(a, big, _CMP_NLE_UQ));  // inf or NaN
    amax = _mm256_max_ps(amax, a);
  }
  const float scale = hmax(amax) / qmax;
  const bool finite = _mm256_movemask_ps(bad) == 0;
  if (!finite || !(scale >= std::numeric_limits<float>::min())) {
    for (int i = 0; i < Vectors; ++i) q[i] = _mm256_setzero_si256();
    return finite ? 0.0f : std::numeric_limits<float>::quiet_NaN();
  }
  const __m256 inv = _mm256_set1_ps(1.0f / scale), hi = _mm256_set1_ps(qmax), lo = _mm256_set1_ps(-qmax);
  for (int i = 0; i < Vectors; ++i) {
    const __m256 v = _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i * 8), inv), lo), hi);
    q[i] = _mm256_cvtps_epi32(v);  // round to nearest even (MXCSR default), as nearbyint
  }
  return scale;
}

void store_unit(std::uint8_t* dst, std::int32_t v) { std::memcpy(dst, &v, 4); }

void quantize_q8(const float* x, std::int64_t ldx, int rows, std::int64_t k, std::uint8_t* units, float* scale,
                 std::int32_t* init) {
  for (std::int64_t b = 0; b < k / kQ8Block; ++b) {
    for (int r = 0; r < kIntGemmMr; ++r) {
      std::uint8_t* dst = units + (b * 8 * kIntGemmMr + r) * 4;  // unit u of the block at + u * 24
      if (r >= rows) {
        scale[b * kIntGemmMr + r] = 0.0f;
        init[b * kIntGemmMr + r] = 0;
        for (int u = 0; u < 8; ++u) store_unit(dst + u * kIntGemmMr * 4, 0);
        continue;
      }
      __m256i q[4];
      scale[b * kIntGemmMr + r] = quantize_vectors<4>(x + r * ldx + b * kQ8Block, 127.0f, q);
      init[b * kIntGemmMr + r] =
          -16 * hsum_epi32(_mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3])));
      // int32 -> int8 (values in [-127, 127]): packs keep the order within 128-bit lanes,
      // the permute restores it.
      const __m256i w16a = _mm256_packs_epi32(q[0], q[1]), w16b = _mm256_packs_epi32(q[2], q[3]);
      const __m256i bytes = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(w16a, w16b), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
      alignas(32) std::int32_t v[8];
      _mm256_store_si256(reinterpret_cast<__m256i*>(v), bytes);
      for (int u = 0; u < 8; ++u) store_unit(dst + u * kIntGemmMr * 4, v[u]);
    }
  }
}

void quantize_q16(const float* x, std::int64_t ldx, int rows, std::int64_t k, std::uint8_t* units, float* scale) {
  for (std::int64_t b = 0; b < k / kQ16Block; ++b) {
    for (int r = 0; r < kIntGemmMr; ++r) {
      std::uint8_t* dst = units + (b * 128 * kIntGemmMr + r) * 4;
      if (r >= rows) {
        scale[b * kIntGemmMr + r] = 0.0f;
        for (int u = 0; u < 128; ++u) store_unit(dst + u * kIntGemmMr * 4, 0);
        continue;
      }
      __m256i q[32];
      scale[b * kIntGemmMr + r] = quantize_vectors<32>(x + r * ldx + b * kQ16Block, 32767.0f, q);
      for (int i = 0; i < 32; i += 2) {
        // Two vectors of 8 int32 -> 16 int16 (lane order fixed by the permute): 8 units.
        const __m256i w = _mm256_permute4x64_epi64(_mm256_packs_epi32(q[i], q[i + 1]), 0xD8);
        alignas(32) std::int32_t v[8];
        _mm256_store_si256(reinterpret_cast<__m256i*>(v), w);
        for (int u = 0; u < 8; ++u) store_unit(dst + (i * 4 + u) * kIntGemmMr * 4, v[u]);
      }
    }
  }
}

// The panel's weight scales (scale[b * kIntGemmNr + j], blocks of `block` columns).
void panel_scales(const QuantWeight& w, std::int64_t row0, int rows, std::int64_t col0, std::int64_t len,
                  std::int64_t block, float* scale) {
  const std::int64_t groups = w.k / w.group, nb = len / block;
  if (w.scales_f16 && w.group == block && block == kQ8Block && nb <= 16) {
    // One f16 scale per block: 16 rows' runs of nb scales transposed as 16-bit words.
    for (int h = 0; h < 2; ++h) {
      __m256i v[16];
      for (int j = 0; j < 16; ++j) {
        const int row = h * 16 + j;
        alignas(32) std::uint16_t run[16] = {};
        if (row < rows) std::memcpy(run, static_cast<const std::uint16_t*>(w.scales) + (row0 + row) * groups + col0 / block, nb * 2);
        v[j] = _mm256_load_si256(reinterpret_cast<const __m256i*>(run));
      }
      transpose16x16_epi16(v);
      for (std::int64_t b = 0; b < nb; ++b) {
        const __m128i lo = _mm256_castsi256_si128(v[b]), hi = _mm256_extracti128_si256(v[b], 1);
        _mm256_storeu_ps(scale + b * kIntGemmNr + h * 16, _mm256_cvtph_ps(lo));
        _mm256_storeu_ps(scale + b * kIntGemmNr + h * 16 + 8, _mm256_cvtph_ps(hi));
      }
    }
    return;
  }
  for (std::int64_t b = 0; b < nb; ++b) {
    const std::int64_t g = (col0 + b * block) / w.group;
    for (int j = 0; j < kIntGemmNr; ++j) scale[b * kIntGemmNr + j] = j < rows ? scale_at(w, (row0 + j) * groups + g) : 0.0f;
  }
}

// 16 weight rows' next 32 bytes (zeros for rows at or past `live`), transposed: v[t] holds
// word t (bytes 2t, 2t + 1) of each row. `tail`: only 16 bytes are left (the upper words
// are zero).
void load_words(const std::uint8_t* const (&row)[16], int live, std::int64_t offset, bool tail, __m256i (&v)[16]) {
  for (int j = 0; j < 16; ++j) {
    if (j >= live) {
      v[j] = _mm256_setzero_si256();
    } else if (tail) {
      v[j] = _mm256_zextsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row[j] + offset)));
    } else {
      v[j] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row[j] + offset));
    }
  }
  transpose16x16_epi16(v);
}

void panel_q8(const QuantWeight& w, std::int64_t row0, int rows, std::int64_t col0, std::int64_t len,
              std::uint8_t* units, float* scale) {
  const std::int64_t row_bytes = w.k / 2, groups = w.k / w.group;
  const __m256i nibbles = _mm256_set1_epi8(0x0F);
  for (int h = 0; h < 2; ++h) {
    const int live = rows - h * 16 < 0 ? 0 : (rows - h * 16 > 16 ? 16 : rows - h * 16);
    const std::uint8_t* row[16];
    for (int j = 0; j < 16; ++j) row[j] = w.data + (row0 + (j < live ? h * 16 + j : 0)) * row_bytes + col0 / 2;
    // u = q - zero + 16 per byte: 8 + q without zero points (0 for rows past `live`).
    alignas(32) std::int32_t offset[16];
    std::int64_t offset_group = -1;
    for (std::int64_t c = 0; c < len; c += 64) {
      __m256i v[16];
      const bool tail = c + 64 > len;
      load_words(row, live, c / 2, tail, v);
      for (int t = 0; t < (tail ? 8 : 16); ++t) {
        const std::int64_t g = (col0 + c + 4 * t) / w.group;
        if (g != offset_group) {
          for (int j = 0; j < 16; ++j) {
            const int zero = j >= live                 ? 16  // offset 0: the padding rows stay zero
                             : w.zero_points == nullptr ? 8
                                                        : w.zero_points[(row0 + h * 16 + j) * groups + g] & 0x0F;
            offset[j] = (16 - zero) * 0x01010101;
          }
          offset_group = g;
        }
        // Word (b0, b1) -> bytes (b0 & 15, b0 >> 4, b1 & 15, b1 >> 4): columns 4t .. 4t + 3.
        const __m256i lo = _mm256_cvtepu8_epi16(_mm256_castsi256_si128(v[t]));       // rows 0-7
        const __m256i hi = _mm256_cvtepu8_epi16(_mm256_extracti128_si256(v[t], 1));  // rows 8-15
        const __m256i ulo = _mm256_and_si256(_mm256_or_si256(lo, _mm256_slli_epi32(lo, 4)), nibbles);
        const __m256i uhi = _mm256_and_si256(_mm256_or_si256(hi, _mm256_slli_epi32(hi, 4)), nibbles);
        std::uint8_t* dst = units + ((c / 4 + t) * kIntGemmNr + h * 16) * 4;
        _mm256_store_si256(reinterpret_cast<__m256i*>(dst),
                           _mm256_add_epi8(ulo, _mm256_load_si256(reinterpret_cast<const __m256i*>(offset))));
        _mm256_store_si256(reinterpret_cast<__m256i*>(dst + 32),
                           _mm256_add_epi8(uhi, _mm256_load_si256(reinterpret_cast<const __m256i*>(offset + 8))));
      }
    }
  }
  panel_scales(w, row0, rows, col0, len, kQ8Block, scale);
}

void panel_q16(const QuantWeight& w, std::int64_t row0, int rows, std::int64_t col0, std::int64_t len,
               std::uint8_t* units, float* scale) {
  for (int h = 0; h < 2; ++h) {
    const int live = rows - h * 16 < 0 ? 0 : (rows - h * 16 > 16 ? 16 : rows - h * 16);
    const std::uint8_t* row[16];
    for (int j = 0; j < 16; ++j) row[j] = w.data + (row0 + (j < live ? h * 16 + j : 0)) * w.k + col0;
    for (std::int64_t c = 0; c < len; c += 32) {
      __m256i v[16];
      load_words(row, live, c, false, v);
      for (int t = 0; t < 16; ++t) {
        // Word (b0, b1) -> two int16: columns 2t, 2t + 1.
        std::uint8_t* dst = units + ((c / 2 + t) * kIntGemmNr + h * 16) * 4;
        _mm256_store_si256(reinterpret_cast<__m256i*>(dst), _mm256_cvtepi8_epi16(_mm256_castsi256_si128(v[t])));
        _mm256_store_si256(reinterpret_cast<__m256i*>(dst + 32), _mm256_cvtepi8_epi16(_mm256_extracti128_si256(v[t], 1)));
      }
    }
  }
  panel_scales(w, row0, rows, col0, len, kQ16Block, scale);
}

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

// Row groups of up to RowsPerPass (register budget: R x 2 int16 + R x 2 int32 sums for kQ8,
// R x 2 int32 for kQ16, of 16 ymm), both 16-column halves of the panel (the second only
// when there are columns in it).
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
  static void run(const IntGemmTile& t, int r0, int h, float (&acc)[kIntGemmMr][kIntGemmNr]) { q16_rows<R>(t, r0, h, acc); }
};

void tile_q8(const IntGemmTile& t) { run_tile<3, Q8Rows>(t); }
void tile_q16(const IntGemmTile& t) { run_tile<6, Q16Rows>(t); }

constexpr IntGemmKernels kAvx2{"avx2", quantize_q8, quantize_q16, panel_q8, panel_q16, tile_q8, tile_q16};

}  // namespace

const IntGemmKernels& int_gemm_kernels_avx2_table() { return kAvx2; }
#endif

}  // namespace kiln::cpu::kernels

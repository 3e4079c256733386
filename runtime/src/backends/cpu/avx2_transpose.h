// An 8x8 f32 and a 16x16 16-bit transpose in AVX registers, shared by the AVX2 translation
// units (the SGEMM's A packing, the quantized kernels' dequantized and integer panels). Include only from files compiled
// with -mavx2 (kiln_mark_avx2_sources). Internal linkage (an anonymous namespace): no COMDAT
// copy of AVX2 code can be shared with a baseline translation unit.
#pragma once

#include <immintrin.h>

namespace kiln::cpu {
namespace {

// r[i] holds row i (8 columns); afterwards r[j] holds column j.
[[gnu::always_inline]] inline void transpose8x8(__m256 (&r)[8]) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
  r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
  r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
  r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
  r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
  r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
  r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
  r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

// r[i] holds row i (16 16-bit elements); afterwards r[j] holds column j (element i of
// r[j] is element j of row i). Four rounds of 16 unpacks / lane permutes.
[[gnu::always_inline]] inline void transpose16x16_epi16(__m256i (&r)[16]) {
  __m256i t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm256_unpacklo_epi16(r[i], r[i + 1]);  // per 128-bit lane: columns 0-3 (8-11) of rows i, i+1
    t[i + 1] = _mm256_unpackhi_epi16(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    for (int h = 0; h < 2; ++h) {
      r[i + 2 * h] = _mm256_unpacklo_epi32(t[i + h], t[i + 2 + h]);  // columns 4h, 4h+1 of 4 rows
      r[i + 2 * h + 1] = _mm256_unpackhi_epi32(t[i + h], t[i + 2 + h]);
    }
  }
  // r[4q + 2h + e] now holds, per 128-bit lane, columns 4h + 2e and 4h + 2e + 1 (and +8 in
  // the upper lane) of rows 4q .. 4q + 3.
  for (int i = 0; i < 16; i += 8) {
    for (int e = 0; e < 4; ++e) {
      t[2 * e + i] = _mm256_unpacklo_epi64(r[i + e], r[i + 4 + e]);  // column 2e, rows i..i+7
      t[2 * e + 1 + i] = _mm256_unpackhi_epi64(r[i + e], r[i + 4 + e]);
    }
  }
  // t[c] holds column c (c + 8 in the upper lane) of rows 0-7, t[8 + c] of rows 8-15.
  for (int c = 0; c < 8; ++c) {
    r[c] = _mm256_permute2x128_si256(t[c], t[8 + c], 0x20);
    r[c + 8] = _mm256_permute2x128_si256(t[c], t[8 + c], 0x31);
  }
}

}  // namespace
}  // namespace kiln::cpu

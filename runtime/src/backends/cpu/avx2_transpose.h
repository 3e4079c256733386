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
// r[j] is element j of row i). Four rounds of 16 unpacks / lane permutes, written out (GCC
// kept the loop form's arrays on the stack).
[[gnu::always_inline]] inline void transpose16x16_epi16(__m256i (&r)[16]) {
#define KILN_UNPACK(lo, hi, op, a, b) \
  const __m256i lo = _mm256_unpacklo_##op(a, b), hi = _mm256_unpackhi_##op(a, b)
  // Per 128-bit lane: columns 0-3 (lo) / 4-7 (hi) of rows i, i + 1 as pairs (8-11 / 12-15
  // in the upper lane).
  KILN_UNPACK(a0, a1, epi16, r[0], r[1]);
  KILN_UNPACK(a2, a3, epi16, r[2], r[3]);
  KILN_UNPACK(a4, a5, epi16, r[4], r[5]);
  KILN_UNPACK(a6, a7, epi16, r[6], r[7]);
  KILN_UNPACK(a8, a9, epi16, r[8], r[9]);
  KILN_UNPACK(a10, a11, epi16, r[10], r[11]);
  KILN_UNPACK(a12, a13, epi16, r[12], r[13]);
  KILN_UNPACK(a14, a15, epi16, r[14], r[15]);
  // Columns (0, 1), (2, 3), (4, 5), (6, 7) of rows 4q .. 4q + 3 (+ 8 upper lane).
  KILN_UNPACK(b0, b1, epi32, a0, a2);
  KILN_UNPACK(b2, b3, epi32, a1, a3);
  KILN_UNPACK(b4, b5, epi32, a4, a6);
  KILN_UNPACK(b6, b7, epi32, a5, a7);
  KILN_UNPACK(b8, b9, epi32, a8, a10);
  KILN_UNPACK(b10, b11, epi32, a9, a11);
  KILN_UNPACK(b12, b13, epi32, a12, a14);
  KILN_UNPACK(b14, b15, epi32, a13, a15);
  // Column c (c + 8 upper lane) of rows 0-7 (cN) and 8-15 (dN).
  KILN_UNPACK(c0, c1, epi64, b0, b4);
  KILN_UNPACK(c2, c3, epi64, b1, b5);
  KILN_UNPACK(c4, c5, epi64, b2, b6);
  KILN_UNPACK(c6, c7, epi64, b3, b7);
  KILN_UNPACK(d0, d1, epi64, b8, b12);
  KILN_UNPACK(d2, d3, epi64, b9, b13);
  KILN_UNPACK(d4, d5, epi64, b10, b14);
  KILN_UNPACK(d6, d7, epi64, b11, b15);
#undef KILN_UNPACK
  r[0] = _mm256_permute2x128_si256(c0, d0, 0x20);
  r[8] = _mm256_permute2x128_si256(c0, d0, 0x31);
  r[1] = _mm256_permute2x128_si256(c1, d1, 0x20);
  r[9] = _mm256_permute2x128_si256(c1, d1, 0x31);
  r[2] = _mm256_permute2x128_si256(c2, d2, 0x20);
  r[10] = _mm256_permute2x128_si256(c2, d2, 0x31);
  r[3] = _mm256_permute2x128_si256(c3, d3, 0x20);
  r[11] = _mm256_permute2x128_si256(c3, d3, 0x31);
  r[4] = _mm256_permute2x128_si256(c4, d4, 0x20);
  r[12] = _mm256_permute2x128_si256(c4, d4, 0x31);
  r[5] = _mm256_permute2x128_si256(c5, d5, 0x20);
  r[13] = _mm256_permute2x128_si256(c5, d5, 0x31);
  r[6] = _mm256_permute2x128_si256(c6, d6, 0x20);
  r[14] = _mm256_permute2x128_si256(c6, d6, 0x31);
  r[7] = _mm256_permute2x128_si256(c7, d7, 0x20);
  r[15] = _mm256_permute2x128_si256(c7, d7, 0x31);
}

}  // namespace
}  // namespace kiln::cpu

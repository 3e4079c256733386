// gemv_rows_avx2 (gemv.h), compiled with -mavx2 -mfma (the *_avx2.cpp rule).
#include <algorithm>

#include "backends/cpu/kernels/gemv.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

namespace kiln::cpu::kernels {
namespace {

// Lanes [0, r) of a vector of 8 (0 <= r <= 8): the mask maskload/maskstore take.
__m256i first_lanes(std::int64_t r) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(r)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// Narrow windows (at most 64 columns, NV vectors, the last masked): the columns' sums stay
// in registers through all k rows, read once, one row after the other (a v: the rows of a
// cached V window are contiguous).
template <int NV>
void narrow(std::int64_t j, std::int64_t w, std::int64_t k, const float* a, const float* b, std::int64_t ldb, float* c) {
  __m256 acc[NV];
  for (int v = 0; v < NV; ++v) acc[v] = _mm256_setzero_ps();
  const __m256i last = w - 8 * (NV - 1) < 8 ? first_lanes(w - 8 * (NV - 1)) : _mm256_set1_epi32(-1);
  const float* row = b + j;
  for (std::int64_t kk = 0; kk < k; ++kk, row += ldb) {
    const __m256 s = _mm256_broadcast_ss(a + kk);
    for (int v = 0; v + 1 < NV; ++v) acc[v] = _mm256_fmadd_ps(s, _mm256_loadu_ps(row + 8 * v), acc[v]);
    acc[NV - 1] = _mm256_fmadd_ps(s, _mm256_maskload_ps(row + 8 * (NV - 1), last), acc[NV - 1]);
  }
  for (int v = 0; v + 1 < NV; ++v) _mm256_storeu_ps(c + j + 8 * v, acc[v]);
  _mm256_maskstore_ps(c + j + 8 * (NV - 1), last, acc[NV - 1]);
}

// Wide windows: up to 1024 columns of c at a time stay in L1 while the rows stream through
// four at a time, each read front to back (q k^T: rows of a cached K window are a whole
// cache row apart, beyond what a prefetcher follows across columns blocks).
void wide(std::int64_t j, std::int64_t w, std::int64_t k, const float* a, const float* b, std::int64_t ldb, float* c) {
  const std::int64_t full = w / 8 * 8;
  const __m256i tail = first_lanes(w - full);  // all false when w is a multiple of 8
  float* cj = c + j;
  for (std::int64_t x = 0; x < full; x += 8) _mm256_storeu_ps(cj + x, _mm256_setzero_ps());
  if (full < w) _mm256_maskstore_ps(cj + full, tail, _mm256_setzero_ps());
  std::int64_t kk = 0;
  for (; kk + 4 <= k; kk += 4) {
    const float* r0 = b + kk * ldb + j;
    const float *r1 = r0 + ldb, *r2 = r1 + ldb, *r3 = r2 + ldb;
    const __m256 s0 = _mm256_broadcast_ss(a + kk), s1 = _mm256_broadcast_ss(a + kk + 1);
    const __m256 s2 = _mm256_broadcast_ss(a + kk + 2), s3 = _mm256_broadcast_ss(a + kk + 3);
    std::int64_t x = 0;
    for (; x < full; x += 8) {
      __m256 t = _mm256_fmadd_ps(s0, _mm256_loadu_ps(r0 + x), _mm256_loadu_ps(cj + x));
      __m256 u = _mm256_mul_ps(s1, _mm256_loadu_ps(r1 + x));
      t = _mm256_fmadd_ps(s2, _mm256_loadu_ps(r2 + x), t);
      u = _mm256_fmadd_ps(s3, _mm256_loadu_ps(r3 + x), u);
      _mm256_storeu_ps(cj + x, _mm256_add_ps(t, u));
    }
    if (x < w) {
      __m256 t = _mm256_fmadd_ps(s0, _mm256_maskload_ps(r0 + x, tail), _mm256_maskload_ps(cj + x, tail));
      __m256 u = _mm256_mul_ps(s1, _mm256_maskload_ps(r1 + x, tail));
      t = _mm256_fmadd_ps(s2, _mm256_maskload_ps(r2 + x, tail), t);
      u = _mm256_fmadd_ps(s3, _mm256_maskload_ps(r3 + x, tail), u);
      _mm256_maskstore_ps(cj + x, tail, _mm256_add_ps(t, u));
    }
  }
  for (; kk < k; ++kk) {
    const float* r0 = b + kk * ldb + j;
    const __m256 s0 = _mm256_broadcast_ss(a + kk);
    std::int64_t x = 0;
    for (; x < full; x += 8) _mm256_storeu_ps(cj + x, _mm256_fmadd_ps(s0, _mm256_loadu_ps(r0 + x), _mm256_loadu_ps(cj + x)));
    if (x < w) _mm256_maskstore_ps(cj + x, tail, _mm256_fmadd_ps(s0, _mm256_maskload_ps(r0 + x, tail), _mm256_maskload_ps(cj + x, tail)));
  }
}

}  // namespace

void gemv_rows_avx2(std::int64_t j0, std::int64_t j1, std::int64_t k, const float* a, const float* b, std::int64_t ldb, float* c) {
  constexpr std::int64_t kNarrow = 64, kWide = 1024;
  for (std::int64_t j = j0; j < j1;) {
    const std::int64_t w = std::min(j1 - j, j1 - j <= kNarrow ? kNarrow : kWide);
    if (w > kNarrow) {
      wide(j, w, k, a, b, ldb, c);
    } else {
      switch ((w + 7) / 8) {
        case 1: narrow<1>(j, w, k, a, b, ldb, c); break;
        case 2: narrow<2>(j, w, k, a, b, ldb, c); break;
        case 3: narrow<3>(j, w, k, a, b, ldb, c); break;
        case 4: narrow<4>(j, w, k, a, b, ldb, c); break;
        case 5: narrow<5>(j, w, k, a, b, ldb, c); break;
        case 6: narrow<6>(j, w, k, a, b, ldb, c); break;
        case 7: narrow<7>(j, w, k, a, b, ldb, c); break;
        default: narrow<8>(j, w, k, a, b, ldb, c); break;
      }
    }
    j += w;
  }
}

}  // namespace kiln::cpu::kernels
#else
namespace kiln::cpu::kernels {
// No AVX2 here: simd_avx2() is null, so gemv_rows_f32 never calls this.
void gemv_rows_avx2(std::int64_t j0, std::int64_t j1, std::int64_t k, const float* a, const float* b, std::int64_t ldb, float* c) {
  gemv_rows_portable(j0, j1, k, a, b, ldb, c);
}
}  // namespace kiln::cpu::kernels
#endif

// The AVX2 tile copies between NCHW and NCHW8c (nchwc_impl.h): 8 pixels x 8 channels per
// 8x8 register transpose. Compiled with -mavx2 -mfma (the *_avx2.cpp rule); reached only
// through tile_kernels() after simd_avx2()'s checks.
#include <cstdint>

#include "backends/cpu/kernels/nchwc_impl.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#include "backends/cpu/avx2_transpose.h"

namespace kiln::cpu::nchwc::detail {
namespace {

// Lanes [0, n) of a vector of 8 (0 <= n <= 8).
__m256i first_lanes(std::int64_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

template <bool kFull>
void pack_rows(const float* src, std::int64_t src_stride, std::int64_t channels, std::int64_t count, float* dst) {
  std::int64_t p = 0;
  __m256 r[8];
  for (; p + 8 <= count; p += 8) {
    for (int c = 0; c < 8; ++c) {
      r[c] = kFull || c < channels ? _mm256_loadu_ps(src + c * src_stride + p) : _mm256_setzero_ps();
    }
    transpose8x8(r);
    for (int i = 0; i < 8; ++i) _mm256_storeu_ps(dst + (p + i) * 8, r[i]);
  }
  if (p == count) return;
  const std::int64_t n = count - p;
  const __m256i mask = first_lanes(n);
  for (int c = 0; c < 8; ++c) {
    r[c] = kFull || c < channels ? _mm256_maskload_ps(src + c * src_stride + p, mask) : _mm256_setzero_ps();
  }
  transpose8x8(r);
  for (std::int64_t i = 0; i < n; ++i) _mm256_storeu_ps(dst + (p + i) * 8, r[i]);
}

void pack(const float* src, std::int64_t src_stride, std::int64_t channels, std::int64_t count, float* dst) {
  if (channels == 8) {
    pack_rows<true>(src, src_stride, channels, count, dst);
  } else {
    pack_rows<false>(src, src_stride, channels, count, dst);
  }
}

template <bool kFull>
void unpack_rows(const float* src, std::int64_t count, float* dst, std::int64_t dst_stride, std::int64_t channels) {
  std::int64_t p = 0;
  __m256 r[8];
  for (; p + 8 <= count; p += 8) {
    for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + (p + i) * 8);
    transpose8x8(r);
    for (int c = 0; c < 8; ++c) {
      if (kFull || c < channels) _mm256_storeu_ps(dst + c * dst_stride + p, r[c]);
    }
  }
  if (p == count) return;
  const std::int64_t n = count - p;
  const __m256i mask = first_lanes(n);
  for (int i = 0; i < 8; ++i) r[i] = i < n ? _mm256_loadu_ps(src + (p + i) * 8) : _mm256_setzero_ps();
  transpose8x8(r);
  for (int c = 0; c < 8; ++c) {
    if (kFull || c < channels) _mm256_maskstore_ps(dst + c * dst_stride + p, mask, r[c]);
  }
}

void unpack(const float* src, std::int64_t count, float* dst, std::int64_t dst_stride, std::int64_t channels) {
  if (channels == 8) {
    unpack_rows<true>(src, count, dst, dst_stride, channels);
  } else {
    unpack_rows<false>(src, count, dst, dst_stride, channels);
  }
}

constexpr TileKernels kAvx2{pack, unpack};

}  // namespace

const TileKernels& tile_kernels_avx2() { return kAvx2; }

}  // namespace kiln::cpu::nchwc::detail

#else

namespace kiln::cpu::nchwc::detail {
// No AVX2 here: simd_avx2() is null, so tile_kernels() never calls this.
const TileKernels& tile_kernels_avx2() { return tile_kernels_portable(); }
}  // namespace kiln::cpu::nchwc::detail

#endif

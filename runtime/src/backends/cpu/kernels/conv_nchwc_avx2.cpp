// conv2d_dense's AVX2+FMA tile kernels (conv_nchwc_tile.inc in ymm registers), compiled with
// -mavx2 -mfma (the *_avx2.cpp rule). Reached only through dense_kernels_avx2(), after the
// CPU check. Uses nothing inline from shared headers (no AVX2 copy of a COMDAT function can
// replace the baseline one).
#include <cstdint>

#include "backends/cpu/kernels/conv_nchwc_kernels.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

namespace kiln::cpu::nchwc {
namespace avx2_impl {

#define KILN_NCHWC_FMA8(a, b, c) _mm256_fmadd_ps((a), (b), (c))
#include "backends/cpu/kernels/conv_nchwc_tile.inc"
#undef KILN_NCHWC_FMA8

// 16 ymm registers: P x B accumulators, B weights and a broadcast.
int preferred_width(std::int64_t out_blocks) {
  if (out_blocks == 1) return 1;
  if (out_blocks % 2 != 0 && out_blocks % 3 == 0) return 3;
  return 2;
}

constexpr DenseKernels make_kernels() {
  DenseKernels k{"avx2", kMaxWidth, {12, 6, 4, 3}, &preferred_width, {}};
  nchwc_fill<1, 12>(k);
  nchwc_fill<2, 6>(k);
  nchwc_fill<3, 4>(k);
  nchwc_fill<4, 3>(k);
  return k;
}
constexpr DenseKernels kKernels = make_kernels();

}  // namespace avx2_impl

const DenseKernels& dense_kernels_avx2_table() { return avx2_impl::kKernels; }

}  // namespace kiln::cpu::nchwc
#endif

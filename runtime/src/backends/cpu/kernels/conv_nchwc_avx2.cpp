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

// acc += x * w, always into acc's own register: with _mm256_fmadd_ps GCC writes some FMAs
// into the dying broadcast's register (vfmadd132ps) and then copies the accumulators around
// (or spills them) on every channel.
static inline __attribute__((always_inline)) __m256 fma_into(__m256 x, __m256 w, __m256 acc) {
  __asm__("vfmadd231ps %[w], %[x], %[acc]" : [acc] "+x"(acc) : [x] "x"(x), [w] "x"(w));
  return acc;
}
#define KILN_NCHWC_FMA8(a, b, c) fma_into((a), (b), (c))
#include "backends/cpu/kernels/conv_nchwc_tile.inc"
#undef KILN_NCHWC_FMA8

// 16 ymm registers: P x B accumulators, B weights and a broadcast. 6x2 and 4x3 tie on
// most layers (measured on mobilenet_v2 and resnet18); 4x3 saves the half-empty last group
// of an odd block count that 3 divides (24 -> 211 against 248 us at 144 -> 24); 3x4 spills.
int preferred_width(std::int64_t out_blocks, std::int64_t, std::int64_t) {
  if (out_blocks == 1) return 1;
  return out_blocks % 2 != 0 && out_blocks % 3 == 0 ? 3 : 2;
}

constexpr DenseKernels make_kernels() {
  // Widths 5 to 8 (AVX-512's) only for weights packed for them: one pixel at a time.
  DenseKernels k{"avx2", {12, 6, 4, 3, 1, 1, 1, 1}, &preferred_width, {}, &nchwc_winograd_input, &nchwc_winograd_output};
  nchwc_fill<1, 12>(k);
  nchwc_fill<2, 6>(k);
  nchwc_fill<3, 4>(k);
  nchwc_fill<4, 3>(k);
  nchwc_fill<5, 1>(k);
  nchwc_fill<6, 1>(k);
  nchwc_fill<7, 1>(k);
  nchwc_fill<8, 1>(k);
  return k;
}
constexpr DenseKernels kKernels = make_kernels();

}  // namespace avx2_impl

const DenseKernels& dense_kernels_avx2_table() { return avx2_impl::kKernels; }

}  // namespace kiln::cpu::nchwc
#endif

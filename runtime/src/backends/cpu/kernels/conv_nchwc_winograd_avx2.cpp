// conv2d_winograd's AVX2+FMA kernels (conv_nchwc_winograd.inc in ymm registers), compiled
// with -mavx2 -mfma (the *_avx2.cpp rule). Reached only through winograd_kernels_avx2(),
// after the CPU check. Uses nothing inline from shared headers.
#include <cstdint>

#include "backends/cpu/kernels/conv_nchwc_winograd.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

namespace kiln::cpu::nchwc {
namespace winograd_avx2_impl {

// acc + x * w into acc's own register (see conv_nchwc_avx2.cpp: GCC otherwise copies the
// accumulators around).
static inline __attribute__((always_inline)) __m256 fma_into(__m256 x, __m256 w, __m256 acc) {
  __asm__("vfmadd231ps %[w], %[x], %[acc]" : [acc] "+x"(acc) : [x] "x"(x), [w] "x"(w));
  return acc;
}
#define KILN_WINO_FMA8(a, b, c) fma_into((a), (b), (c))
#include "backends/cpu/kernels/conv_nchwc_winograd.inc"
#undef KILN_WINO_FMA8

// 16 ymm registers: rows x width accumulators, width weights and a broadcast (as
// conv2d_dense's AVX2 tiles: 6x2 or 4x3).
int preferred_width(std::int64_t out_blocks) {
  if (out_blocks == 1) return 1;
  return out_blocks % 2 != 0 && out_blocks % 3 == 0 ? 3 : 2;
}

constexpr WinogradKernels make_kernels() {
  WinogradKernels k{"avx2", {12, 6, 4, 3, 1, 1},
                    &preferred_width,
                    {{&wino4_input, &wino4_output, &wino4_weights}, {&wino2_input, &wino2_output, &wino2_weights}},
                    {}};
  wino_fill<1, 12>(k);
  wino_fill<2, 6>(k);
  wino_fill<3, 4>(k);
  wino_fill<4, 3>(k);
  wino_fill<5, 1>(k);
  wino_fill<6, 1>(k);
  return k;
}
constexpr WinogradKernels kKernels = make_kernels();

}  // namespace winograd_avx2_impl

const WinogradKernels& winograd_kernels_avx2_table() { return winograd_avx2_impl::kKernels; }

}  // namespace kiln::cpu::nchwc
#endif

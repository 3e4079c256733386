// The AVX2+FMA build of the NCHW8c depthwise row kernel (conv_nchwc_dw.inc). Compiled with
// -mavx2 -mfma -O3 (the *_avx2.cpp rule); reached only through depthwise_kernels() after
// simd_avx2()'s checks.
#include <cstdint>
#include <utility>

#include "backends/cpu/kernels/nchwc_impl.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

namespace kiln::cpu::nchwc::detail {
namespace dw_avx2 {

#define NCHWC_FMA8(a, b, c) _mm256_fmadd_ps((a), (b), (c))
#include "backends/cpu/kernels/nchwc_vec.inc"
#include "backends/cpu/kernels/conv_nchwc_dw.inc"
#undef NCHWC_FMA8

constexpr DepthwiseKernels kTable{depthwise_rows};

}  // namespace dw_avx2

const DepthwiseKernels& depthwise_kernels_avx2() { return dw_avx2::kTable; }

}  // namespace kiln::cpu::nchwc::detail

#else

namespace kiln::cpu::nchwc::detail {
// No AVX2 here: simd_avx2() is null, so depthwise_kernels() never calls this.
const DepthwiseKernels& depthwise_kernels_avx2() { return depthwise_kernels_portable(); }
}  // namespace kiln::cpu::nchwc::detail

#endif

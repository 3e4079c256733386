// The AVX2+FMA+F16C build of simd_math.inc (this file is compiled with -mavx2 -mfma
// -mf16c). Only reached through simd() after __builtin_cpu_supports checks all three.
#include <cstdint>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "backends/cpu/kernels/simd.h"

#if defined(__x86_64__) || defined(__i386__)
#include "backends/cpu/avx2_transpose.h"
#endif

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("vect-cost-model=dynamic")
#endif

namespace kiln::cpu::kernels {

#if defined(__x86_64__) || defined(__i386__)
namespace simd_avx2_impl {

#define KILN_SIMD_FMA(a, b, c) __builtin_fmaf((a), (b), (c))
#define KILN_SIMD_FMA8(a, b, c) _mm256_fmadd_ps((a), (b), (c))
#define KILN_SIMD_NAME "avx2"
#include "backends/cpu/kernels/simd_math.inc"
#undef KILN_SIMD_FMA
#undef KILN_SIMD_FMA8
#undef KILN_SIMD_NAME

}  // namespace simd_avx2_impl

const SimdKernels& simd_avx2_table() { return simd_avx2_impl::kTable; }
#endif

}  // namespace kiln::cpu::kernels

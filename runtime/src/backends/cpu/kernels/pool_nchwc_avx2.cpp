// The AVX2 build of the NCHW8c pool rows (pool_nchwc.inc). Compiled with -mavx2 -mfma -O3
// (the *_avx2.cpp rule); reached only through pool_kernels() after simd_avx2()'s checks.
#include <cstdint>

#include "backends/cpu/kernels/nchwc_impl.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

namespace kiln::cpu::nchwc::detail {
namespace pool_avx2 {

#define NCHWC_FMA8(a, b, c) _mm256_fmadd_ps((a), (b), (c))
#include "backends/cpu/kernels/nchwc_vec.inc"
#include "backends/cpu/kernels/pool_nchwc.inc"
#undef NCHWC_FMA8

constexpr PoolKernels kTable{pool_rows_of<max_row>, pool_rows_of<avg_row>, pool_rows_of<adaptive_avg_row>, mean_plane};

}  // namespace pool_avx2

const PoolKernels& pool_kernels_avx2() { return pool_avx2::kTable; }

}  // namespace kiln::cpu::nchwc::detail

#else

namespace kiln::cpu::nchwc::detail {
// No AVX2 here: simd_avx2() is null, so pool_kernels() never calls this.
const PoolKernels& pool_kernels_avx2() { return pool_kernels_portable(); }
}  // namespace kiln::cpu::nchwc::detail

#endif

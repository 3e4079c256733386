// A row vector times a matrix read in place: c[0:n] = a[0:k] B, B row-major k x n with rows
// `ldb` floats apart. The decode step's attention matmuls (M = 1) take this path: q kᵀ
// over the cached keys (k = head_dim, n = context) and a v over the cached values (k =
// context, n = head_dim), B a window of the KV cache (KernelContext::operand_window), so
// nothing is packed or copied; the SGEMM would pack all of B for one row of A.
#pragma once

#include <cstdint>

namespace kiln::cpu {
class ThreadPool;
}

namespace kiln::cpu::kernels {

/// c[j] = sum_kk a[kk] * b[kk * ldb + j] for j in [0, n) (f32 sums; the AVX2 path adds
/// rows in pairs for wide windows). ldb >= n; k may be 0 (c = 0). Reads only columns
/// [0, n) of each row and writes only c[0, n).
/// With a pool of several threads, large products are split by columns.
void gemv_rows_f32(std::int64_t n, std::int64_t k, const float* a, const float* b, std::int64_t ldb, float* c, ThreadPool* pool);

/// Columns [j0, j1) of gemv_rows_f32 on one thread: the portable loop, and the AVX2+FMA one
/// (gemv_avx2.cpp; call only when simd_avx2() is available).
void gemv_rows_portable(std::int64_t j0, std::int64_t j1, std::int64_t k, const float* a, const float* b, std::int64_t ldb, float* c);
void gemv_rows_avx2(std::int64_t j0, std::int64_t j1, std::int64_t k, const float* a, const float* b, std::int64_t ldb, float* c);

}  // namespace kiln::cpu::kernels

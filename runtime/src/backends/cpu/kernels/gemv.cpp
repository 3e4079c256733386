#include "backends/cpu/kernels/gemv.h"

#include <algorithm>

#include "backends/cpu/kernels/simd.h"
#include "backends/cpu/thread_pool.h"

namespace kiln::cpu::kernels {

void gemv_rows_portable(std::int64_t j0, std::int64_t j1, std::int64_t k, const float* a, const float* b, std::int64_t ldb, float* c) {
  std::fill(c + j0, c + j1, 0.0f);
  for (std::int64_t kk = 0; kk < k; ++kk) {
    const float s = a[kk];
    const float* row = b + kk * ldb;
    for (std::int64_t j = j0; j < j1; ++j) c[j] += s * row[j];
  }
}

void gemv_rows_f32(std::int64_t n, std::int64_t k, const float* a, const float* b, std::int64_t ldb, float* c, ThreadPool* pool) {
  if (n <= 0) return;
  const auto body = simd_avx2() != nullptr ? gemv_rows_avx2 : gemv_rows_portable;
  // Columns in chunks of 32 (the AVX2 kernel's block); a thread gets at least 64K
  // multiply-adds, so decode-sized products (64 x 1024) stay on one thread.
  constexpr std::int64_t kBlock = 32, kMinWork = 1 << 16;
  const std::int64_t blocks = (n + kBlock - 1) / kBlock;
  if (pool == nullptr || pool->num_threads() == 1 || n * std::max<std::int64_t>(k, 1) < 2 * kMinWork) {
    body(0, n, k, a, b, ldb, c);
    return;
  }
  const std::int64_t grain = pool->even_grain(blocks, kBlock * std::max<std::int64_t>(k, 1), kMinWork);
  pool->parallel_for(blocks, grain, [&](std::int64_t first, std::int64_t last) {
    body(first * kBlock, std::min(n, last * kBlock), k, a, b, ldb, c);
  });
}

}  // namespace kiln::cpu::kernels

// Packing of A and B into the micro-kernel layouts, and the public pack_b().
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "backends/cpu/gemm/gemm.h"
#include "backends/cpu/gemm/gemm_kernels.h"
#include "backends/cpu/thread_pool.h"

namespace kiln::cpu {
namespace gemm_detail {
namespace {

// Rows of op(A) contiguous along k (A not transposed): gather kMr rows per k.
void pack_a_panel_rows(const float* a, std::int64_t lda, int mr, std::int64_t kc, float* dst) {
  const float* rows[kMr];
  for (int i = 0; i < kMr; ++i) rows[i] = a + std::min(i, mr - 1) * lda;
  if (mr == kMr) {
    for (std::int64_t k = 0; k < kc; ++k) {
      for (int i = 0; i < kMr; ++i) dst[k * kMr + i] = rows[i][k];
    }
    return;
  }
  for (std::int64_t k = 0; k < kc; ++k) {
    for (int i = 0; i < kMr; ++i) dst[k * kMr + i] = i < mr ? rows[i][k] : 0.0f;
  }
}

// Columns of op(A) contiguous (A transposed, stored [K,M]): copy kMr floats per k.
void pack_a_panel_cols(const float* a, std::int64_t lda, int mr, std::int64_t kc, float* dst) {
  for (std::int64_t k = 0; k < kc; ++k) {
    const float* src = a + k * lda;
    for (int i = 0; i < kMr; ++i) dst[k * kMr + i] = i < mr ? src[i] : 0.0f;
  }
}

// B not transposed ([K,N], rows contiguous): each k is a 16-float row segment.
void pack_b_panel_rows(const float* b, std::int64_t ldb, int nr, std::int64_t k, float* dst) {
  for (std::int64_t kk = 0; kk < k; ++kk) {
    const float* src = b + kk * ldb;
    float* out = dst + kk * kNr;
    if (nr == kNr) {
      std::memcpy(out, src, sizeof(float) * kNr);
    } else {
      for (int j = 0; j < kNr; ++j) out[j] = j < nr ? src[j] : 0.0f;
    }
  }
}

// B transposed ([N,K], W rows contiguous along k): a 16 x K transpose, in k blocks so the
// destination lines being filled stay in L1.
void pack_b_panel_cols(const float* b, std::int64_t ldb, int nr, std::int64_t k, float* dst) {
  constexpr std::int64_t kBlock = 64;
  for (std::int64_t k0 = 0; k0 < k; k0 += kBlock) {
    const std::int64_t k1 = std::min(k, k0 + kBlock);
    for (int j = 0; j < kNr; ++j) {
      if (j >= nr) {
        for (std::int64_t kk = k0; kk < k1; ++kk) dst[kk * kNr + j] = 0.0f;
        continue;
      }
      const float* src = b + j * ldb;
      for (std::int64_t kk = k0; kk < k1; ++kk) dst[kk * kNr + j] = src[kk];
    }
  }
}

}  // namespace

void pack_a(const float* a, std::int64_t row_stride, std::int64_t col_stride, std::int64_t m,
            std::int64_t kc, float* out) {
  for (std::int64_t r0 = 0; r0 < m; r0 += kMr) {
    const int mr = static_cast<int>(std::min<std::int64_t>(kMr, m - r0));
    float* dst = out + (r0 / kMr) * kc * kMr;
    if (col_stride == 1) {
      pack_a_panel_rows(a + r0 * row_stride, row_stride, mr, kc, dst);
    } else {
      pack_a_panel_cols(a + r0 * row_stride, col_stride, mr, kc, dst);
    }
  }
}

void pack_b_panels(const float* b, std::int64_t k_stride, std::int64_t n_stride, std::int64_t k,
                   std::int64_t n, std::int64_t p0, std::int64_t p1, float* out) {
  for (std::int64_t p = p0; p < p1; ++p) {
    const std::int64_t j0 = p * kNr;
    const int nr = static_cast<int>(std::min<std::int64_t>(kNr, n - j0));
    float* dst = out + p * k * kNr;
    if (n_stride == 1) {
      pack_b_panel_rows(b + j0, k_stride, nr, k, dst);
    } else {
      pack_b_panel_cols(b + j0 * n_stride, n_stride, nr, k, dst);
    }
  }
}

}  // namespace gemm_detail

void PackedB::FreeDeleter::operator()(float* p) const { std::free(p); }

Result<PackedB> pack_b(const float* b, std::int64_t ldb, std::int64_t k, std::int64_t n,
                       bool trans_b, ThreadPool* pool) {
  using gemm_detail::kNr;
  if (k < 0 || n < 0) {
    return Status(StatusCode::kInvalidInput,
                  "[pack_b] negative size k=" + std::to_string(k) + " n=" + std::to_string(n));
  }
  const std::int64_t row = trans_b ? k : n;
  if (ldb < std::max<std::int64_t>(row, 1)) {
    return Status(StatusCode::kInvalidInput, "[pack_b] ldb=" + std::to_string(ldb) + " < " +
                                                 (trans_b ? "k=" : "n=") + std::to_string(row));
  }
  if (b == nullptr && k * n > 0) return Status(StatusCode::kInvalidInput, "[pack_b] b is null");
  PackedB packed;
  packed.k_ = k;
  packed.n_ = n;
  const std::size_t bytes = std::max<std::size_t>(packed.size_bytes(), 64);
  const std::size_t rounded = (bytes + 63) / 64 * 64;
  packed.data_.reset(static_cast<float*>(std::aligned_alloc(64, rounded)));
  if (!packed.data_) {
    return Status(StatusCode::kUnavailable,
                  "[pack_b] cannot allocate " + std::to_string(rounded) + " bytes");
  }
  const std::int64_t k_stride = trans_b ? 1 : ldb;
  const std::int64_t n_stride = trans_b ? ldb : 1;
  float* out = packed.data_.get();
  auto pack_range = [&](std::int64_t p0, std::int64_t p1) {
    gemm_detail::pack_b_panels(b, k_stride, n_stride, k, n, p0, p1, out);
  };
  // Grain: ~64 KiB of packed output per chunk.
  const std::int64_t grain =
      std::max<std::int64_t>(1, (16 << 10) / std::max<std::int64_t>(k * kNr, 1));
  if (pool != nullptr) {
    pool->parallel_for(packed.panels(), grain, pack_range);
  } else {
    pack_range(0, packed.panels());
  }
  return packed;
}

}  // namespace kiln::cpu

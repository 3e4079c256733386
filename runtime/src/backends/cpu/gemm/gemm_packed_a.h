// SGEMM with A packed once (the weights of a convolution run as C = W * X):
//
//   C = act(alpha * A * op(B) + beta * C + bias)
//
// The convolution kernels (kernels/conv.cpp) pack each weight matrix W [M = out channels,
// K = in channels x taps] once at load (pack_a_matrix, kept in the conv's PreparedWeights)
// and multiply it on every run with the activations as B, which sgemm_packed_a packs per
// call, or which the caller writes straight into the packed layout (an im2col that never
// builds the column matrix: PackBFn). So a run packs only the activations, each element
// once per row block.
//
// Work, per column block of B (<= 8 MiB packed): B is packed over the whole K in parallel
// (panels split over the pool), then tasks = (row block of <= 144 rows, more when there
// are few columns) x (run of >= 4 16-column panels) run the SGEMM's 6x16 micro-kernel over
// the shared packed B, one K block of A at a time. Both loops run over the pool; no
// serial phase.
//
// Numerics: as sgemm (gemm.h): the same micro-kernels and K blocking.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "backends/cpu/gemm/gemm.h"
#include "backends/cpu/thread_pool.h"
#include "kiln/runtime/status.h"

namespace kiln::cpu {

/// A ([M,K], row-major) packed for sgemm_packed_a: K split into blocks of kc() (the last
/// one shorter), each block a run of ceil(M/6) panels of kc x 6 floats (rows past M zero).
/// Immutable, move-only, safe to share read-only between threads and concurrent calls.
class PackedA {
 public:
  PackedA() = default;
  PackedA(PackedA&&) noexcept = default;
  PackedA& operator=(PackedA&&) noexcept = default;

  std::int64_t m() const { return m_; }
  std::int64_t k() const { return k_; }
  /// K block length (the last block holds k - (blocks - 1) * kc).
  std::int64_t kc() const { return kc_; }
  std::int64_t panels() const { return (m_ + 5) / 6; }
  std::size_t size_bytes() const { return static_cast<std::size_t>(panels() * 6 * k_) * sizeof(float); }
  /// The panels of K block starting at k0 (a multiple of kc()): panel p at + p * kc_len * 6,
  /// element (row 6p + i, k0 + t) at [t * 6 + i], kc_len = min(kc, k - k0).
  const float* block(std::int64_t k0) const { return data_.get() + k0 * panels() * 6; }

 private:
  struct FreeDeleter {
    void operator()(float* p) const;
  };
  friend Result<PackedA> pack_a_matrix(const float*, std::int64_t, std::int64_t, std::int64_t);

  std::int64_t m_ = 0, k_ = 0, kc_ = 1;
  std::unique_ptr<float, FreeDeleter> data_;
};

/// Packs a [M,K] (row stride lda >= K) for sgemm_packed_a; `a` is read during the call only.
/// Errors: kInvalidInput for negative sizes, lda < K or a null a with M*K > 0; kUnavailable
/// when the allocation fails.
Result<PackedA> pack_a_matrix(const float* a, std::int64_t lda, std::int64_t m, std::int64_t k);

/// Writes op(B) rows [k0, k0 + kc) x columns [j0, j0 + cols) as ceil(cols/16) panels of
/// kc x 16 floats, panel q at out + q * kc * 16, element (k0 + t, j0 + 16q + j) at
/// [t * 16 + j]; columns past `cols` in the last panel must be written (zeros or anything
/// finite: they are computed and dropped). j0 is a multiple of 16. Called concurrently from
/// the pool's threads with disjoint outputs.
using PackBFn = FunctionRef<void(std::int64_t k0, std::int64_t kc, std::int64_t j0, std::int64_t cols, float* out)>;

/// C = act(alpha * A op(B) + beta * C + bias) with A from `a` (params.a, lda and trans_a
/// are ignored) and B from params.b / ldb / trans_b. pool may be null (single-threaded).
/// Errors: kInvalidInput naming the field for negative sizes, strides below the row length,
/// null pointers with non-empty extents, a.m() != m or a.k() != k (C untouched);
/// kUnavailable when a thread's B buffer cannot be allocated (C may be partly written).
Status sgemm_packed_a(const GemmParams& params, const PackedA& a, ThreadPool* pool);

/// As sgemm_packed_a with B produced by `pack_b` (params.b, ldb and trans_b ignored).
Status sgemm_packed_a(const GemmParams& params, const PackedA& a, PackBFn pack_b, ThreadPool* pool);

}  // namespace kiln::cpu

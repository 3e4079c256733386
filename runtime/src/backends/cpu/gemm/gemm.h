// FP32 matrix multiply (SGEMM) for the CPU backend, with a fused epilogue:
//
//   C = act(alpha * op(A) * op(B) + beta * C + bias)
//
// op(A) is [M,K], op(B) is [K,N], C is [M,N]; all row-major with row strides lda/ldb/ldc
// (in elements). A linear layer y = x W^T + b with W stored [N,K] is
//   sgemm({.m = rows, .n = out, .k = in, .trans_b = true, .a = x, .lda = in, .b = w,
//          .ldb = in, .c = y, .ldc = out, .bias = b, .bias_kind = GemmBias::kPerColumn}, &pool)
// and a convolution as im2col GEMM with per-output-channel bias uses GemmBias::kPerRow.
//
// Weights are constant during inference: pack them once with pack_b() at load time and
// call sgemm_prepacked() on every run, which skips the per-call packing of B.
//
// Implementation (gemm.cpp): B is packed into 16-column panels, A into 6-row panels per
// 144 x 256 cache block; an AVX2/FMA 6x16 register-blocked micro-kernel (selected at run
// time when the CPU has AVX2 and FMA, else a portable kernel) applies the epilogue as it
// stores C. Work is split over the pool by row blocks, then column runs. M == 1 (batch-1
// decode) takes a bandwidth-bound GEMV path with no packing, split over N.
//
// Numerics: each element is a float dot product accumulated in blocks of up to a few
// hundred terms (order differs from a naive loop; error ~ K * 2^-24 * sum|a*b|). The AVX2
// GELU/SiLU use polynomial exp/erf approximations accurate to ~5e-7 absolute.
// beta == 0 means C is not read (it may hold NaN); alpha == 0 means A and B are not read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "kiln/runtime/status.h"

namespace kiln::cpu {

class ThreadPool;

/// Activation applied to each element after alpha/beta/bias.
enum class GemmActivation : std::uint8_t {
  kNone,
  kRelu,      // max(x, 0)
  kGeluTanh,  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
  kGeluErf,   // 0.5 x (1 + erf(x / sqrt(2)))
  kSilu,      // x * sigmoid(x)
  kRelu6,     // min(max(x, 0), 6): clamp(x, 0, 6), hardtanh(x, 0, 6)
  kHardswish,    // x * min(max(x + 3, 0), 6) / 6
  kHardsigmoid,  // min(max(x + 3, 0), 6) / 6
};

enum class GemmBias : std::uint8_t {
  kNone,
  kPerColumn,  // bias[N]: bias[j] added to C[i][j] (linear layers)
  kPerRow,     // bias[M]: bias[i] added to C[i][j] (convolution as GEMM)
};

/// One SGEMM call. Pointers are borrowed for the duration of the call; C must not alias
/// A, B or bias. Unused pointers may be null when their extent is 0.
struct GemmParams {
  std::int64_t m = 0, n = 0, k = 0;
  /// trans_a: A is stored [K,M] (lda >= M), else [M,K] (lda >= K).
  bool trans_a = false;
  /// trans_b: B is stored [N,K] (ldb >= K), else [K,N] (ldb >= N).
  bool trans_b = false;
  float alpha = 1.0f;
  float beta = 0.0f;
  const float* a = nullptr;
  std::int64_t lda = 0;
  const float* b = nullptr;
  std::int64_t ldb = 0;
  float* c = nullptr;
  std::int64_t ldc = 0;         // >= N
  const float* bias = nullptr;  // N or M floats per bias_kind; ignored for kNone
  GemmBias bias_kind = GemmBias::kNone;
  GemmActivation activation = GemmActivation::kNone;
};

/// op(B) packed for the micro-kernel: an opaque, immutable layout of ceil(N/16) panels,
/// each K x 16 floats (zero-padded past N), 64-byte aligned. Independent of the selected
/// ISA, so one PackedB serves every kernel. Move-only; safe to share read-only between
/// threads and concurrent sgemm_prepacked calls.
class PackedB {
 public:
  PackedB() = default;
  PackedB(PackedB&&) noexcept = default;
  PackedB& operator=(PackedB&&) noexcept = default;

  std::int64_t k() const { return k_; }
  std::int64_t n() const { return n_; }
  /// Bytes held (ceil(N/16) * 16 * K floats).
  std::size_t size_bytes() const {
    return static_cast<std::size_t>(panels() * k_ * 16) * sizeof(float);
  }

  /// Layout access for the kernels: panel p holds columns [16p, 16p+16), element (k, j)
  /// at panel(p)[k * 16 + j].
  std::int64_t panels() const { return (n_ + 15) / 16; }
  const float* panel(std::int64_t p) const { return data_.get() + p * k_ * 16; }

 private:
  struct FreeDeleter {
    void operator()(float* p) const;
  };
  friend Result<PackedB> pack_b(const float*, std::int64_t, std::int64_t, std::int64_t, bool,
                                ThreadPool*);

  std::int64_t k_ = 0;
  std::int64_t n_ = 0;
  std::unique_ptr<float, FreeDeleter> data_;
};

/// Packs op(B) ([K,N]; stored [N,K] when trans_b) for sgemm_prepacked. `b` is read during
/// the call only. pool may be null (single-threaded).
/// Errors: kInvalidInput for negative sizes, ldb too small or a null b with K*N > 0;
/// kUnavailable when the allocation fails.
Result<PackedB> pack_b(const float* b, std::int64_t ldb, std::int64_t k, std::int64_t n,
                       bool trans_b, ThreadPool* pool);

/// C = act(alpha * op(A) op(B) + beta * C + bias). pool may be null (single-threaded); small
/// problems (< ~2 MFLOP) run on the calling thread anyway. Concurrent sgemm calls from
/// different threads are safe as long as they do not share a pool (a pool serves one
/// caller at a time, see ThreadPool). Temporary packing buffers are thread-local and kept
/// between calls (grow-only: at most 8 MiB per calling thread for packed B, ~160 KiB per
/// pool thread for packed A).
/// Errors: kInvalidInput naming the field for negative sizes, strides below the row
/// length, null pointers with non-empty extents (C untouched); kUnavailable when a buffer
/// allocation fails (C may be partly written).
Status sgemm(const GemmParams& params, ThreadPool* pool);

/// As sgemm, with op(B) taken from `packed` (params.b, ldb and trans_b are ignored).
/// Errors: as sgemm, plus kInvalidInput when packed.k() != params.k or packed.n() != params.n.
Status sgemm_prepacked(const GemmParams& params, const PackedB& packed, ThreadPool* pool);

/// Instruction sets the GEMM can run on.
enum class GemmIsa : std::uint8_t {
  kAuto,    // the best one this CPU supports (the default)
  kScalar,  // portable C++ (auto-vectorized for the baseline target)
  kAvx2,    // AVX2 + FMA
  kAvx512,  // AVX-512 F/VL/BW/DQ: the AVX2 kernels plus a 12x32 micro-tile
};

/// The ISA sgemm currently uses (never kAuto).
GemmIsa active_gemm_isa();

/// Forces an ISA for every following GEMM call in the process (tests and benchmarks only;
/// not thread-safe against concurrent GEMM calls). Returns false, changing nothing, when the
/// CPU cannot run `isa`. kAuto restores the default.
bool set_gemm_isa_for_testing(GemmIsa isa);

}  // namespace kiln::cpu

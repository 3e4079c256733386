// sgemm_packed_a (gemm_packed_a.h): the driver for a prepacked A; the micro-kernels and
// B packing are the SGEMM's (gemm_kernels.h).
#include "backends/cpu/gemm/gemm_packed_a.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string>

#include "backends/cpu/gemm/gemm_kernels.h"
#include "backends/cpu/scratch_buffer.h"

namespace kiln::cpu {
namespace {

using gemm_detail::kMr;
using gemm_detail::kNr;

// K block (as gemm.cpp's kKcMax): a kc x 16 B panel plus a kc x 6 A panel stay in L1.
constexpr std::int64_t kKcMax = 256;
// Rows per task: an mc x kc block of A (144 KiB) stays in L2 while a B run streams by.
constexpr std::int64_t kMcMax = 144;
// Packed B per call (floats): at most 8 MiB, packed in column blocks of up to this.
constexpr std::int64_t kPackBudgetFloats = std::int64_t{2} << 20;
// Below this many flops the call runs on the calling thread.
constexpr double kMinParallelFlops = 2.0e6;

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

Status invalid(const std::string& message) { return Status(StatusCode::kInvalidInput, "[sgemm_packed_a] " + message); }


thread_local ScratchBuffer t_pack;  // per calling thread: the packed B block

// Tasks: m_blocks row blocks (whole 6-row panels) x n_runs column runs (whole 16-column
// panels), as even as whole panels allow.
struct Plan {
  std::int64_t m_panels, m_blocks, n_panels, n_runs;
  std::int64_t tasks() const { return m_blocks * n_runs; }
  std::int64_t m_panel(std::int64_t i) const { return i * m_panels / m_blocks; }
  std::int64_t n_panel(std::int64_t i) const { return i * n_panels / n_runs; }
};

Plan make_plan(std::int64_t m, std::int64_t cols, int threads) {
  Plan plan{};
  plan.m_panels = ceil_div(m, kMr);
  plan.n_panels = ceil_div(cols, kNr);
  plan.m_blocks = ceil_div(m, kMcMax);
  plan.n_runs = 1;
  if (threads > 1) {
    // At least 3 tasks per thread for balance (chunks are claimed dynamically): split
    // columns while runs keep >= 4 panels (each run re-reads its A block), then rows.
    const std::int64_t wanted = 3 * threads;
    while (plan.tasks() < wanted) {
      if (plan.n_panels / (plan.n_runs + 1) >= 4) {
        ++plan.n_runs;
      } else if (plan.m_blocks < plan.m_panels) {
        ++plan.m_blocks;
      } else if (plan.n_runs < plan.n_panels) {
        ++plan.n_runs;
      } else {
        break;
      }
    }
  }
  plan.m_blocks = std::clamp<std::int64_t>(plan.m_blocks, 1, plan.m_panels);
  plan.n_runs = std::clamp<std::int64_t>(plan.n_runs, 1, plan.n_panels);
  return plan;
}

struct Problem {
  const GemmParams* p;
  const PackedA* a;
  const gemm_detail::GemmKernels* kernels;
  const float* b;  // the packed B block: panel q at + q * k * 16 (PackedB's layout)
  std::int64_t col0;
};

// One task: rows of a row block x B panels [q0, q1) of the block, over the whole K.
void run_task(const Problem& pr, const Plan& plan, std::int64_t task) {
  const GemmParams& p = *pr.p;
  const std::int64_t mi = task / plan.n_runs, ni = task % plan.n_runs;
  const std::int64_t panel0 = plan.m_panel(mi), panel1 = plan.m_panel(mi + 1);
  const std::int64_t q0 = plan.n_panel(ni), q1 = plan.n_panel(ni + 1);
  const std::int64_t kc_max = pr.a->kc();
  for (std::int64_t k0 = 0; k0 < p.k; k0 += kc_max) {
    const std::int64_t kc = std::min(kc_max, p.k - k0);
    const bool last = k0 + kc >= p.k;
    gemm_detail::Epilogue e{p.alpha, k0 > 0 ? 1.0f : p.beta, nullptr, nullptr, 0.0f,
                            last ? p.activation : GemmActivation::kNone};
    const float* a_block = pr.a->block(k0);
    if (pr.kernels->wide_kernel != nullptr) {  // pairs of B panels x 12-row tiles
      for (std::int64_t q = q0; q < q1; q += 2) {
        const std::int64_t j = pr.col0 + q * kNr;
        e.bias_col = last && p.bias_kind == GemmBias::kPerColumn ? p.bias + j : nullptr;
        for (std::int64_t panel = panel0; panel < panel1; panel += 2) {
          const std::int64_t i = panel * kMr;
          e.bias_row = last && p.bias_kind == GemmBias::kPerRow ? p.bias + i : nullptr;
          const std::int64_t rows = std::min<std::int64_t>(panel + 1 < panel1 ? gemm_detail::kWideMr : kMr, p.m - i);
          const std::int64_t cols = std::min<std::int64_t>(q + 1 < q1 ? gemm_detail::kWideNr : kNr, p.n - j);
          const gemm_detail::WideTile tile{a_block + panel * kc * kMr, pr.b + q * p.k * kNr + k0 * kNr, p.k * kNr,
                                           p.c + i * p.ldc + j, p.ldc, kc, static_cast<int>(rows), static_cast<int>(cols)};
          pr.kernels->wide_kernel(tile, e);
        }
      }
      continue;
    }
    for (std::int64_t q = q0; q < q1; ++q) {
      const std::int64_t j = pr.col0 + q * kNr;
      const float* b = pr.b + q * p.k * kNr + k0 * kNr;
      e.bias_col = last && p.bias_kind == GemmBias::kPerColumn ? p.bias + j : nullptr;
      for (std::int64_t panel = panel0; panel < panel1; ++panel) {
        const std::int64_t i = panel * kMr;
        e.bias_row = last && p.bias_kind == GemmBias::kPerRow ? p.bias + i : nullptr;
        const gemm_detail::MicroTile tile{a_block + panel * kc * kMr,
                                          b,
                                          p.c + i * p.ldc + j,
                                          p.ldc,
                                          kc,
                                          static_cast<int>(std::min<std::int64_t>(kMr, p.m - i)),
                                          static_cast<int>(std::min<std::int64_t>(kNr, p.n - j))};
        pr.kernels->micro_kernel(tile, e);
      }
    }
  }
}

Status validate(const GemmParams& p, const PackedA& a, bool need_b) {
  if (p.m < 0 || p.n < 0 || p.k < 0) {
    return invalid("negative size m=" + std::to_string(p.m) + " n=" + std::to_string(p.n) + " k=" + std::to_string(p.k));
  }
  if (a.m() != p.m || a.k() != p.k) {
    return invalid("packed A is [" + std::to_string(a.m()) + "," + std::to_string(a.k()) + "] but m=" +
                   std::to_string(p.m) + " k=" + std::to_string(p.k));
  }
  const std::int64_t b_row = p.trans_b ? p.k : p.n;
  if (need_b && p.ldb < std::max<std::int64_t>(b_row, 1)) {
    return invalid("ldb=" + std::to_string(p.ldb) + " < " + (p.trans_b ? "k=" : "n=") + std::to_string(b_row));
  }
  if (p.ldc < std::max<std::int64_t>(p.n, 1)) {
    return invalid("ldc=" + std::to_string(p.ldc) + " < n=" + std::to_string(p.n));
  }
  const bool has_output = p.m > 0 && p.n > 0;
  if (has_output && p.c == nullptr) return invalid("c is null");
  if (need_b && has_output && p.k > 0 && p.b == nullptr) return invalid("b is null");
  if (has_output && p.bias_kind != GemmBias::kNone && p.bias == nullptr) return invalid("bias is null");
  return Status::Ok();
}

Status run(const GemmParams& p, const PackedA& a, PackBFn pack_b, ThreadPool* pool) {
  if (p.m == 0 || p.n == 0) return Status::Ok();
  const gemm_detail::GemmKernels& kernels = gemm_detail::active_kernels();
  if (p.k == 0 || p.alpha == 0.0f) {
    // C = act(beta C + bias): the plain SGEMM's path, which reads neither A nor B.
    GemmParams q = p;
    q.alpha = 0.0f;
    q.a = nullptr;
    q.b = nullptr;
    q.lda = std::max<std::int64_t>(p.k, 1);
    q.ldb = std::max<std::int64_t>(p.trans_b ? p.k : p.n, 1);
    return sgemm(q, nullptr);
  }
  const double flops = 2.0 * static_cast<double>(p.m) * static_cast<double>(p.n) * static_cast<double>(p.k);
  const int threads = pool != nullptr && flops >= kMinParallelFlops ? pool->num_threads() : 1;
  const std::int64_t block_cols =
      std::clamp<std::int64_t>(kPackBudgetFloats / p.k / kNr * kNr, kNr, ceil_div(p.n, kNr) * kNr);
  float* packed = t_pack.get(block_cols * p.k);
  if (packed == nullptr) return Status(StatusCode::kUnavailable, "[sgemm_packed_a] out of memory packing B");
  for (std::int64_t j0 = 0; j0 < p.n; j0 += block_cols) {
    const std::int64_t cols = std::min(block_cols, p.n - j0);
    const std::int64_t panels = ceil_div(cols, kNr);
    // Pack B (every panel over the whole K), then multiply: two parallel loops.
    auto pack = [&](std::int64_t q0, std::int64_t q1) {
      pack_b(0, p.k, j0 + q0 * kNr, std::min(cols, q1 * kNr) - q0 * kNr, packed + q0 * p.k * kNr);
    };
    const Plan plan = make_plan(p.m, cols, threads);
    const Problem pr{&p, &a, &kernels, packed, j0};
    auto body = [&](std::int64_t t0, std::int64_t t1) {
      for (std::int64_t t = t0; t < t1; ++t) run_task(pr, plan, t);
    };
    if (threads > 1) {
      pool->parallel_for(panels, std::max<std::int64_t>(1, 4096 / p.k), pack);
      pool->parallel_for(plan.tasks(), 1, body);
    } else {
      pack(0, panels);
      body(0, plan.tasks());
    }
  }
  return Status::Ok();
}

}  // namespace

void PackedA::FreeDeleter::operator()(float* p) const { std::free(p); }

Result<PackedA> pack_a_matrix(const float* a, std::int64_t lda, std::int64_t m, std::int64_t k) {
  if (m < 0 || k < 0) return invalid("pack_a_matrix: negative size m=" + std::to_string(m) + " k=" + std::to_string(k));
  if (lda < std::max<std::int64_t>(k, 1)) {
    return invalid("pack_a_matrix: lda=" + std::to_string(lda) + " < k=" + std::to_string(k));
  }
  if (a == nullptr && m * k > 0) return invalid("pack_a_matrix: a is null");
  PackedA packed;
  packed.m_ = m;
  packed.k_ = k;
  packed.kc_ = k > 0 ? ceil_div(k, ceil_div(k, kKcMax)) : 1;
  const std::size_t bytes = (std::max<std::size_t>(packed.size_bytes(), 64) + 63) / 64 * 64;
  packed.data_.reset(static_cast<float*>(std::aligned_alloc(64, bytes)));
  if (!packed.data_) {
    return Status(StatusCode::kUnavailable, "[sgemm_packed_a] cannot allocate " + std::to_string(bytes) + " bytes");
  }
  const auto& kernels = gemm_detail::active_kernels();
  for (std::int64_t k0 = 0; k0 < k; k0 += packed.kc_) {
    const std::int64_t kc = std::min(packed.kc_, k - k0);
    // pack_a's layout per K block is exactly PackedA's: panel p at + p * kc * 6.
    kernels.pack_a(a + k0, lda, 1, m, kc, packed.data_.get() + k0 * packed.panels() * kMr);
  }
  return packed;
}

Status sgemm_packed_a(const GemmParams& params, const PackedA& a, ThreadPool* pool) {
  KILN_RETURN_IF_ERROR(validate(params, a, /*need_b=*/true));
  const std::int64_t k_stride = params.trans_b ? 1 : params.ldb;
  const std::int64_t n_stride = params.trans_b ? params.ldb : 1;
  auto pack = [&](std::int64_t k0, std::int64_t kc, std::int64_t j0, std::int64_t cols, float* out) {
    gemm_detail::pack_b_panels(params.b + k0 * k_stride + j0 * n_stride, k_stride, n_stride, kc, cols, 0,
                               ceil_div(cols, kNr), out);
  };
  return run(params, a, pack, pool);
}

Status sgemm_packed_a(const GemmParams& params, const PackedA& a, PackBFn pack_b, ThreadPool* pool) {
  KILN_RETURN_IF_ERROR(validate(params, a, /*need_b=*/false));
  return run(params, a, pack_b, pool);
}

}  // namespace kiln::cpu

// The SGEMM driver: validation, ISA selection, cache blocking and threading. The kernels
// are in gemm_scalar.cpp / gemm_avx2.cpp, packing in gemm_pack.cpp.
//
// Loop structure (BLIS-style, B packed over the whole K so PackedB and per-call packing
// share one path):
//   [per-call only] for each column block of <= kPackBudgetFloats / K columns: pack B
//   parallel over tasks = (row block of <= kMcMax rows) x (run of 16-column B panels),
//   balanced (plan_blocks):
//     for each K block pc of <= kKcMax:   pack A(mc x kc) into a thread-local buffer (L2)
//       for each B panel (kc x 16, stays in L1; the next one is prefetched meanwhile):
//         for each 6-row A panel: micro-kernel on a 6x16 tile of C, epilogue at the last pc
// M == 1 skips all packing: GEMV kernels stream B (or the PackedB panels) once.
#include "backends/cpu/gemm/gemm.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

#include "backends/cpu/gemm/gemm_kernels.h"
#include "backends/cpu/kernels/simd.h"
#include "backends/cpu/scratch_buffer.h"
#include "backends/cpu/thread_pool.h"

namespace kiln::cpu {
namespace gemm_detail {

// The same choice as the vector kernels' (simd.h), KILN_CPU_ISA=baseline included.
bool cpu_has_avx2_fma() { return kernels::simd_avx2() != nullptr; }

bool cpu_has_avx512() { return kernels::cpu_avx512_usable(); }

}  // namespace gemm_detail

namespace {

using namespace gemm_detail;  // NOLINT: this file is the driver of that namespace

// Block sizes, tuned on Zen 4 (32 KiB L1d, 1 MiB L2 per core): a kc x 16 B panel (16 KiB)
// plus a 6-row A panel (6 KiB) stay in L1, an mc x kc A block (144 KiB) in L2. On a quiet
// machine kc 384 measured ~3% faster than 256, but under load (other processes evicting
// L1/L2) 256 was 1-4% faster; mc 96..144 were within noise.
constexpr std::int64_t kKcMax = 256;
// The wide (AVX-512) tile reads two B panels: kc 192 keeps the pair (24 KiB) and a 12-row
// A panel (9 KiB) in a 48 KiB L1.
#ifndef KILN_GEMM_KC_WIDE  // bench/device/gemm_probe.cpp builds variants
#define KILN_GEMM_KC_WIDE 192
#endif
constexpr std::int64_t kKcMaxWide = KILN_GEMM_KC_WIDE;
constexpr std::int64_t kMcMax = 144;
// Upper bound on the per-call packed B buffer (floats): 8 MiB, well inside a shared L3.
constexpr std::int64_t kPackBudgetFloats = std::int64_t{2} << 20;
// Below this many flops a GEMM runs on the calling thread (waking workers costs more).
constexpr double kMinParallelFlops = 2.0e6;
// GEMV: columns per epilogue pass (a stack buffer), and bytes of B per parallel chunk.
constexpr std::int64_t kGemvBlockColumns = 512;
constexpr std::int64_t kGemvMinChunkBytes = 64 << 10;

std::atomic<GemmIsa> g_forced_isa{GemmIsa::kAuto};

// The AVX-512 table by default only where 512-bit FMAs have twice the 256-bit throughput
// (measured once): on a core that splits them into 256-bit halves its wide tile gains
// nothing and was 5-8 % slower than the AVX2 tile (Zen 4). KILN_CPU_ISA=avx512 forces it.
#if defined(__x86_64__) || defined(__i386__)
bool avx512_gemm_pays() {
  static const bool pays = [] {
    const char* isa = std::getenv("KILN_CPU_ISA");
    if (isa != nullptr && std::strcmp(isa, "avx512") == 0) return true;
    return avx512_fma_speedup() >= 1.5;
  }();
  return pays;
}
#endif

const GemmKernels& select_kernels() {
#if defined(__x86_64__) || defined(__i386__)
  const GemmIsa forced = g_forced_isa.load(std::memory_order_relaxed);
  if ((forced == GemmIsa::kAvx512 || (forced == GemmIsa::kAuto && avx512_gemm_pays())) && cpu_has_avx512()) {
    return avx512_kernels();
  }
  if (forced != GemmIsa::kScalar && cpu_has_avx2_fma()) return avx2_kernels();
#endif
  return scalar_kernels();
}


thread_local ScratchBuffer t_pack_a;  // per pool thread: one mc x kc block of A
thread_local ScratchBuffer t_pack_b;  // per calling thread: packed B columns, or GEMV's x

Status invalid(const std::string& message) {
  return Status(StatusCode::kInvalidInput, "[sgemm] " + message);
}

Status check_stride(const char* name, std::int64_t ld, const char* dim, std::int64_t row) {
  if (ld >= std::max<std::int64_t>(row, 1)) return Status::Ok();
  return invalid(std::string(name) + "=" + std::to_string(ld) + " < " + dim + "=" +
                 std::to_string(row));
}

// need_b: false for sgemm_prepacked, where B comes from the PackedB.
Status validate(const GemmParams& p, bool need_b) {
  if (p.m < 0 || p.n < 0 || p.k < 0) {
    return invalid("negative size m=" + std::to_string(p.m) + " n=" + std::to_string(p.n) +
                   " k=" + std::to_string(p.k));
  }
  KILN_RETURN_IF_ERROR(p.trans_a ? check_stride("lda", p.lda, "m", p.m)
                                 : check_stride("lda", p.lda, "k", p.k));
  if (need_b) {
    KILN_RETURN_IF_ERROR(p.trans_b ? check_stride("ldb", p.ldb, "k", p.k)
                                   : check_stride("ldb", p.ldb, "n", p.n));
  }
  KILN_RETURN_IF_ERROR(check_stride("ldc", p.ldc, "n", p.n));
  const bool has_output = p.m > 0 && p.n > 0;
  const bool reads_ab = has_output && p.k > 0 && p.alpha != 0.0f;
  if (has_output && p.c == nullptr) return invalid("c is null");
  if (reads_ab && p.a == nullptr) return invalid("a is null");
  if (reads_ab && need_b && p.b == nullptr) return invalid("b is null");
  if (has_output && p.bias_kind != GemmBias::kNone && p.bias == nullptr) {
    return invalid("bias is null");
  }
  return Status::Ok();
}

Epilogue make_epilogue(const GemmParams& p) {
  return Epilogue{p.alpha, p.beta, nullptr, nullptr, 0.0f, p.activation};
}

// K == 0 or alpha == 0: C = act(beta * C + bias), without reading A or B.
Status scale_only(const GemmParams& p, const GemmKernels& kernels) {
  float* zeros = t_pack_b.get(p.n);
  if (zeros == nullptr) return Status(StatusCode::kUnavailable, "[sgemm] out of memory");
  std::fill(zeros, zeros + p.n, 0.0f);
  Epilogue e = make_epilogue(p);
  if (p.bias_kind == GemmBias::kPerColumn) e.bias_col = p.bias;
  for (std::int64_t i = 0; i < p.m; ++i) {
    e.bias_row_value = p.bias_kind == GemmBias::kPerRow ? p.bias[i] : 0.0f;
    kernels.epilogue_row(zeros, p.c + i * p.ldc, p.n, e);
  }
  return Status::Ok();
}

// ---- GEMV (M == 1) ----

// Computes columns [j0, j1) of the single output row.
void gemv_columns(const GemmParams& p, const GemmKernels& kernels, const float* x,
                  const PackedB* packed, std::int64_t j0, std::int64_t j1) {
  alignas(64) float raw[kGemvBlockColumns];
  Epilogue e = make_epilogue(p);
  e.bias_row_value = p.bias_kind == GemmBias::kPerRow ? p.bias[0] : 0.0f;
  for (std::int64_t j = j0; j < j1; j += kGemvBlockColumns) {
    const std::int64_t count = std::min(kGemvBlockColumns, j1 - j);
    if (packed != nullptr) {
      kernels.gemv_packed(x, packed->panel(j / kNr), p.k * kNr, p.k, (count + kNr - 1) / kNr, raw);
    } else if (p.trans_b) {
      kernels.gemv_rows(x, p.b + j * p.ldb, p.ldb, p.k, count, raw);
    } else {
      kernels.gemv_cols(x, p.b + j, p.ldb, p.k, count, raw);
    }
    e.bias_col = p.bias_kind == GemmBias::kPerColumn ? p.bias + j : nullptr;
    kernels.epilogue_row(raw, p.c + j, count, e);
  }
}

Status run_gemv(const GemmParams& p, const GemmKernels& kernels, const PackedB* packed,
                ThreadPool* pool) {
  const float* x = p.a;
  if (p.trans_a && p.lda != 1) {  // op(A) row 0 is strided: gather it
    float* gathered = t_pack_b.get(p.k);
    if (gathered == nullptr) return Status(StatusCode::kUnavailable, "[sgemm] out of memory");
    for (std::int64_t k = 0; k < p.k; ++k) gathered[k] = p.a[k * p.lda];
    x = gathered;
  }
  // Parallel over 16-column units, so chunks start on PackedB panel boundaries.
  const std::int64_t units = (p.n + kNr - 1) / kNr;
  const std::int64_t unit_bytes = p.k * kNr * static_cast<std::int64_t>(sizeof(float));
  std::int64_t grain = std::max<std::int64_t>(1, kGemvMinChunkBytes / unit_bytes);
  // Unpacked [K,N] B is read as one row segment per k: wide chunks keep the segments long.
  if (packed == nullptr && !p.trans_b)
    grain = std::max<std::int64_t>(grain, kGemvBlockColumns / kNr);
  auto body = [&](std::int64_t u0, std::int64_t u1) {
    gemv_columns(p, kernels, x, packed, u0 * kNr, std::min(p.n, u1 * kNr));
  };
  if (pool != nullptr) {
    pool->parallel_for(units, grain, body);
  } else {
    body(0, units);
  }
  return Status::Ok();
}

// ---- Blocked GEMM ----

// One parallel region: C columns [col0, col0 + cols) against B panels starting at `panels`
// (panel stride k * kNr, covering the whole K).
struct BlockedProblem {
  const GemmParams* p;
  const GemmKernels* kernels;
  const float* panels;
  std::int64_t col0;
  std::int64_t cols;
};

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// Tasks split the kMr-row panels of C into m_blocks row blocks and the kNr-column panels
// into n_splits column runs, as evenly as whole panels allow, so equal-sized tasks keep
// the threads balanced.
struct BlockPlan {
  std::int64_t kc;
  std::int64_t m_panels, m_blocks;
  std::int64_t n_panels, n_splits;

  std::int64_t tasks() const { return m_blocks * n_splits; }
  // Row block i spans panels [m_panel(i), m_panel(i + 1)); column run i likewise.
  std::int64_t m_panel(std::int64_t i) const { return i * m_panels / m_blocks; }
  std::int64_t n_panel(std::int64_t i) const { return i * n_panels / n_splits; }
  std::int64_t max_block_rows() const { return ceil_div(m_panels, m_blocks) * kMr; }
};

BlockPlan plan_blocks(const GemmParams& p, std::int64_t cols, int threads, bool wide) {
  BlockPlan plan{};
  const std::int64_t kc_max = wide ? kKcMaxWide : kKcMax;
  plan.kc = ceil_div(p.k, ceil_div(p.k, kc_max));
  plan.m_panels = ceil_div(p.m, kMr);
  plan.n_panels = ceil_div(cols, kNr);
  plan.m_blocks = ceil_div(p.m, kMcMax);
  plan.n_splits = 1;
  if (threads > 1) {
    // About 4 tasks per thread, a multiple of the thread count. Split rows first (down to
    // 8 panels per block, so a B panel loaded into L1 serves >= 8 micro-kernel calls), then
    // columns (>= 8 panels per run, so re-packing A for each run stays cheap).
    const std::int64_t wanted = 4 * threads;
    plan.m_blocks = std::max(plan.m_blocks, std::min(wanted, plan.m_panels / 8));
    if (plan.m_blocks < wanted) {
      plan.n_splits = std::clamp<std::int64_t>(ceil_div(wanted, plan.m_blocks), 1,
                                               std::max<std::int64_t>(1, plan.n_panels / 8));
    }
    const std::int64_t tasks = ceil_div(plan.tasks(), threads) * threads;
    if (tasks / plan.n_splits <= plan.m_panels && tasks % plan.n_splits == 0) {
      plan.m_blocks = tasks / plan.n_splits;
    }
  }
  plan.m_blocks = std::clamp<std::int64_t>(plan.m_blocks, 1, plan.m_panels);
  return plan;
}

// Prefetches cache lines [first, last) of the next B panel's k block. Spread over the
// micro-kernel calls on the current panel, this hides the first touch of a panel that is
// not in cache (B larger than L3) behind ~20 calls' worth of compute.
void prefetch_b_lines(const float* next, std::int64_t first, std::int64_t last) {
  constexpr std::int64_t kFloatsPerLine = 64 / sizeof(float);
  for (std::int64_t line = first; line < last; ++line)
    __builtin_prefetch(next + line * kFloatsPerLine);
}

// run_kblock with the wide kernel: pairs of B panels x 12-row tiles (a trailing single
// panel or 6-row panel takes the narrower forms of the same kernel).
void run_kblock_wide(const BlockedProblem& bp, Epilogue e, const float* a_packed, std::int64_t m0,
                     std::int64_t rows, std::int64_t pc, std::int64_t kc, std::int64_t p0, std::int64_t p1,
                     std::int64_t panel_lines) {
  const GemmParams& p = *bp.p;
  const bool last = pc + kc >= p.k;
  const std::int64_t stride = p.k * kNr;
  const std::int64_t lines_per_call = ceil_div(2 * panel_lines, ceil_div(rows, kWideMr));
  for (std::int64_t panel = p0; panel < p1; panel += 2) {
    const std::int64_t j = bp.col0 + panel * kNr;
    const std::int64_t width = std::min<std::int64_t>(panel + 1 < p1 ? kWideNr : kNr, p.n - j);
    const float* b = bp.panels + panel * stride + pc * kNr;
    const float* next_b = panel + 2 < p1 ? b + 2 * stride : nullptr;
    const std::int64_t next_lines = panel + 3 < p1 ? 2 * panel_lines : panel_lines;
    e.bias_col = last && p.bias_kind == GemmBias::kPerColumn ? p.bias + j : nullptr;
    for (std::int64_t ir = 0; ir < rows; ir += kWideMr) {
      if (next_b != nullptr) {  // the next pair's lines, spread over this pair's calls
        const std::int64_t first = (ir / kWideMr) * lines_per_call;
        const std::int64_t end = std::min(next_lines, first + lines_per_call);
        for (std::int64_t line = first; line < end; ++line) {
          __builtin_prefetch(line < panel_lines ? next_b + line * 16 : next_b + stride + (line - panel_lines) * 16);
        }
      }
      e.bias_row = last && p.bias_kind == GemmBias::kPerRow ? p.bias + m0 + ir : nullptr;
      const WideTile tile{a_packed + ir * kc,
                          b,
                          stride,
                          p.c + (m0 + ir) * p.ldc + j,
                          p.ldc,
                          kc,
                          static_cast<int>(std::min<std::int64_t>(kWideMr, rows - ir)),
                          static_cast<int>(width)};
      bp.kernels->wide_kernel(tile, e);
    }
  }
}

// Micro-kernel calls for one K block of one task: B panels [p0, p1) x all rows of `a_packed`.
void run_kblock(const BlockedProblem& bp, const BlockPlan& plan, const float* a_packed,
                std::int64_t m0, std::int64_t rows, std::int64_t pc, std::int64_t p0,
                std::int64_t p1) {
  const GemmParams& p = *bp.p;
  const std::int64_t kc = std::min(plan.kc, p.k - pc);
  const bool last = pc + kc >= p.k;
  Epilogue e = make_epilogue(p);
  if (pc > 0) e.beta = 1.0f;
  if (!last) e.act = GemmActivation::kNone;
  const std::int64_t panel_lines =
      ceil_div(kc * kNr * static_cast<std::int64_t>(sizeof(float)), 64);
  if (bp.kernels->wide_kernel != nullptr) {
    run_kblock_wide(bp, e, a_packed, m0, rows, pc, kc, p0, p1, panel_lines);
    return;
  }
  const std::int64_t lines_per_call = ceil_div(panel_lines, ceil_div(rows, kMr));
  for (std::int64_t panel = p0; panel < p1; ++panel) {
    const std::int64_t j = bp.col0 + panel * kNr;
    const float* b = bp.panels + panel * p.k * kNr + pc * kNr;
    const float* next_b = panel + 1 < p1 ? b + p.k * kNr : nullptr;
    e.bias_col = last && p.bias_kind == GemmBias::kPerColumn ? p.bias + j : nullptr;
    for (std::int64_t ir = 0; ir < rows; ir += kMr) {
      if (next_b != nullptr) {
        const std::int64_t first = (ir / kMr) * lines_per_call;
        prefetch_b_lines(next_b, first, std::min(panel_lines, first + lines_per_call));
      }
      e.bias_row = last && p.bias_kind == GemmBias::kPerRow ? p.bias + m0 + ir : nullptr;
      const MicroTile tile{a_packed + ir * kc,
                           b,
                           p.c + (m0 + ir) * p.ldc + j,
                           p.ldc,
                           kc,
                           static_cast<int>(std::min<std::int64_t>(kMr, rows - ir)),
                           static_cast<int>(std::min<std::int64_t>(kNr, p.n - j))};
      bp.kernels->micro_kernel(tile, e);
    }
  }
}

// One task: one row block x one run of B panels, over the whole K. False when the A
// buffer cannot be allocated.
bool run_task(const BlockedProblem& bp, const BlockPlan& plan, std::int64_t task) {
  const GemmParams& p = *bp.p;
  const std::int64_t mi = task / plan.n_splits, ni = task % plan.n_splits;
  const std::int64_t m0 = plan.m_panel(mi) * kMr;
  const std::int64_t rows = std::min(plan.m_panel(mi + 1) * kMr, p.m) - m0;
  float* a_packed = t_pack_a.get(plan.max_block_rows() * plan.kc);
  if (a_packed == nullptr) return false;
  const std::int64_t row_stride = p.trans_a ? 1 : p.lda;
  const std::int64_t col_stride = p.trans_a ? p.lda : 1;
  for (std::int64_t pc = 0; pc < p.k; pc += plan.kc) {
    const std::int64_t kc = std::min(plan.kc, p.k - pc);
    bp.kernels->pack_a(p.a + m0 * row_stride + pc * col_stride, row_stride, col_stride, rows, kc,
                       a_packed);
    run_kblock(bp, plan, a_packed, m0, rows, pc, plan.n_panel(ni), plan.n_panel(ni + 1));
  }
  return true;
}

int usable_threads(const GemmParams& p, ThreadPool* pool) {
  if (pool == nullptr) return 1;
  const double flops =
      2.0 * static_cast<double>(p.m) * static_cast<double>(p.n) * static_cast<double>(p.k);
  return flops < kMinParallelFlops ? 1 : pool->num_threads();
}

Status run_blocked(const BlockedProblem& bp, ThreadPool* pool) {
  const int threads = usable_threads(*bp.p, pool);
  const BlockPlan plan = plan_blocks(*bp.p, bp.cols, threads, bp.kernels->wide_kernel != nullptr);
  std::atomic<bool> failed{false};
  auto body = [&](std::int64_t t0, std::int64_t t1) {
    for (std::int64_t t = t0; t < t1; ++t) {
      if (!run_task(bp, plan, t)) failed.store(true, std::memory_order_relaxed);
    }
  };
  const std::int64_t tasks = plan.tasks();
  if (threads > 1) {
    pool->parallel_for(tasks, 1, body);
  } else {
    body(0, tasks);
  }
  if (failed.load()) return Status(StatusCode::kUnavailable, "[sgemm] out of memory packing A");
  return Status::Ok();
}

// Packs op(B) columns [j0, j0 + cols) into `out` (PackedB layout).
void pack_b_block(const GemmParams& p, std::int64_t j0, std::int64_t cols, float* out,
                  ThreadPool* pool, int threads) {
  const std::int64_t k_stride = p.trans_b ? 1 : p.ldb;
  const std::int64_t n_stride = p.trans_b ? p.ldb : 1;
  const float* b = p.b + j0 * n_stride;
  auto body = [&](std::int64_t q0, std::int64_t q1) {
    pack_b_panels(b, k_stride, n_stride, p.k, cols, q0, q1, out);
  };
  const std::int64_t panels = ceil_div(cols, kNr);
  if (threads > 1) {
    pool->parallel_for(panels, std::max<std::int64_t>(1, 4096 / p.k), body);
  } else {
    body(0, panels);
  }
}

Status run_unpacked(const GemmParams& p, const GemmKernels& kernels, ThreadPool* pool) {
  const std::int64_t block_cols =
      std::clamp<std::int64_t>(kPackBudgetFloats / p.k / kNr * kNr, kNr, ceil_div(p.n, kNr) * kNr);
  float* packed = t_pack_b.get(block_cols * p.k);
  if (packed == nullptr) return Status(StatusCode::kUnavailable, "[sgemm] out of memory packing B");
  const int threads = usable_threads(p, pool);
  for (std::int64_t j0 = 0; j0 < p.n; j0 += block_cols) {
    const std::int64_t cols = std::min(block_cols, p.n - j0);
    pack_b_block(p, j0, cols, packed, pool, threads);
    KILN_RETURN_IF_ERROR(run_blocked(BlockedProblem{&p, &kernels, packed, j0, cols}, pool));
  }
  return Status::Ok();
}

}  // namespace

Status sgemm(const GemmParams& params, ThreadPool* pool) {
  KILN_RETURN_IF_ERROR(validate(params, /*need_b=*/true));
  if (params.m == 0 || params.n == 0) return Status::Ok();
  const GemmKernels& kernels = select_kernels();
  if (params.k == 0 || params.alpha == 0.0f) return scale_only(params, kernels);
  if (params.m == 1) return run_gemv(params, kernels, nullptr, pool);
  return run_unpacked(params, kernels, pool);
}

Status sgemm_prepacked(const GemmParams& params, const PackedB& packed, ThreadPool* pool) {
  KILN_RETURN_IF_ERROR(validate(params, /*need_b=*/false));
  if (packed.k() != params.k || packed.n() != params.n) {
    return invalid("packed B is [" + std::to_string(packed.k()) + "," + std::to_string(packed.n()) +
                   "] but k=" + std::to_string(params.k) + " n=" + std::to_string(params.n));
  }
  if (params.m == 0 || params.n == 0) return Status::Ok();
  const GemmKernels& kernels = select_kernels();
  if (params.k == 0 || params.alpha == 0.0f) return scale_only(params, kernels);
  if (params.m == 1) return run_gemv(params, kernels, &packed, pool);
  return run_blocked(BlockedProblem{&params, &kernels, packed.panel(0), 0, params.n}, pool);
}

GemmIsa active_gemm_isa() { return select_kernels().isa; }

const gemm_detail::GemmKernels& gemm_detail::active_kernels() { return select_kernels(); }

bool set_gemm_isa_for_testing(GemmIsa isa) {
  if (isa == GemmIsa::kAvx2 && !cpu_has_avx2_fma()) return false;
  if (isa == GemmIsa::kAvx512 && !cpu_has_avx512()) return false;
  g_forced_isa.store(isa, std::memory_order_relaxed);
  return true;
}

}  // namespace kiln::cpu

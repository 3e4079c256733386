// SGEMM throughput: Kiln (1 and 2 threads, per-call packing and prepacked B) against
// OpenBLAS, plus this machine's FP32 FMA peak for reference.
//
//   kiln_gemm_bench --benchmark_min_time=1s
//
// Every case reports GFLOP/s (2*M*N*K per call, wall-clock) and pct_peak, the share of
// the FMA peak measured for the same thread count. Square cases are C = A B (A [M,K],
// B [K,N]); the M == 1 cases are linear layers y = x W^T (W stored [N,K]), so OpenBLAS gets
// both cblas_sgemm and cblas_sgemv. Numbers are noisy on a shared machine: repeat
// (--benchmark_repetitions) and take the best.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <memory>
#include <random>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#if defined(KILN_HAVE_OPENBLAS)
// openblas_config.h uses C99 _Complex, which -Wpedantic flags in C++.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpedantic"
#include <cblas.h>
#pragma GCC diagnostic pop
#endif

#include "backends/cpu/gemm/gemm.h"
#include "backends/cpu/thread_pool.h"

namespace kiln::cpu {
namespace {

ThreadPool& pool_for(int threads) {
  static ThreadPool one(1);
  static ThreadPool two(2);
  return threads == 1 ? one : two;
}

// CPU seconds used by the whole process (all threads) so far.
double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// ---- FP32 peak: independent FMA chains, enough to cover latency x pipes ----

#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) float fma_chains(std::int64_t iterations) {
  constexpr int kChains = 12;
  __m256 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm256_set1_ps(0.001f * static_cast<float>(c));
  const __m256 scale = _mm256_set1_ps(0.9999f);
  const __m256 add = _mm256_set1_ps(1e-4f);
  for (std::int64_t i = 0; i < iterations; ++i) {
#pragma GCC unroll 12
    for (int c = 0; c < kChains; ++c) acc[c] = _mm256_fmadd_ps(acc[c], scale, add);
  }
  __m256 sum = acc[0];
  for (int c = 1; c < kChains; ++c) sum = _mm256_add_ps(sum, acc[c]);
  return _mm256_cvtss_f32(sum);
}
constexpr double kFlopsPerIteration = 12 * 8 * 2;
#endif

// Runs the FMA loop on `threads` threads at once; returns total flops.
double run_fma_peak(int threads, std::int64_t iterations) {
#if defined(__x86_64__)
  float sink[8] = {};
  pool_for(threads).parallel_for(threads, 1, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t t = b; t < e; ++t) sink[t] = fma_chains(iterations);
  });
  benchmark::DoNotOptimize(sink);
  return kFlopsPerIteration * static_cast<double>(iterations) * threads;
#else
  (void)threads, (void)iterations;
  return 0.0;
#endif
}

// Best of a few short runs, cached: the pct_peak denominator.
double peak_gflops(int threads) {
  static double cached[3] = {0, 0, 0};
  if (cached[threads] == 0) {
    for (int rep = 0; rep < 20; ++rep) {
      const auto start = std::chrono::steady_clock::now();
      const double flops = run_fma_peak(threads, 1'000'000);
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      cached[threads] = std::max(cached[threads], flops / seconds * 1e-9);
    }
  }
  return cached[threads];
}

void BM_FmaPeak(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  double flops = 0;
  const double cpu_start = process_cpu_seconds();
  for (auto _ : state) flops += run_fma_peak(threads, 5'000'000);
  state.counters["GFLOP_per_cpu_s"] = flops * 1e-9 / (process_cpu_seconds() - cpu_start);
  state.counters["GFLOP/s"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsRate);
  state.counters["GFLOP/s_per_core"] =
      benchmark::Counter(flops * 1e-9 / threads, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_FmaPeak)->ArgName("threads")->Arg(1)->Arg(2)->UseRealTime();

// ---- Operands ----

struct Operands {
  std::int64_t m, n, k;
  bool trans_b;
  std::vector<float> a, b, c;

  Operands(std::int64_t m_, std::int64_t n_, std::int64_t k_, bool trans_b_)
      : m(m_), n(n_), k(k_), trans_b(trans_b_), a(m_ * k_), b(k_ * n_), c(m_ * n_) {
    std::mt19937 rng(42);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (float& x : a) x = dist(rng);
    for (float& x : b) x = dist(rng);
  }
  GemmParams params() {
    return GemmParams{.m = m,
                      .n = n,
                      .k = k,
                      .trans_b = trans_b,
                      .a = a.data(),
                      .lda = k,
                      .b = b.data(),
                      .ldb = trans_b ? k : n,
                      .c = c.data(),
                      .ldc = n};
  }
  double flops() const { return 2.0 * static_cast<double>(m * n * k); }
};

// GFLOP/s (wall clock) and pct_peak; with cpu_seconds (process CPU time spent in the timed
// loop), also GFLOP_per_cpu_s: throughput per busy core, which time-sharing with other
// processes does not dilute (spin-waiting threads, OpenBLAS's included, count as busy).
void report(benchmark::State& state, double flops_per_call, int threads, double cpu_seconds) {
  const double total = flops_per_call * static_cast<double>(state.iterations());
  state.counters["GFLOP/s"] = benchmark::Counter(total * 1e-9, benchmark::Counter::kIsRate);
  if (cpu_seconds > 0) state.counters["GFLOP_per_cpu_s"] = total * 1e-9 / cpu_seconds;
  // pct_peak = GFLOP/s / peak; expressed as a rate so the time division happens once.
  state.counters["pct_peak"] =
      benchmark::Counter(total * 1e-9 * 100.0 / peak_gflops(threads), benchmark::Counter::kIsRate);
}

// Args: m, n, k, threads, prepacked. M == 1 uses W^T (trans_b) like a linear layer.
void BM_Kiln(benchmark::State& state) {
  const std::int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  const int threads = static_cast<int>(state.range(3));
  const bool prepacked = state.range(4) != 0;
  Operands ops(m, n, k, /*trans_b=*/m == 1);
  ThreadPool& pool = pool_for(threads);
  const GemmParams params = ops.params();
  PackedB packed;
  if (prepacked) {
    Result<PackedB> r = pack_b(params.b, params.ldb, k, n, params.trans_b, &pool);
    if (!r.ok()) return state.SkipWithError(r.status().to_string().c_str());
    packed = std::move(r).value();
  }
  const double cpu_start = process_cpu_seconds();
  for (auto _ : state) {
    const Status s = prepacked ? sgemm_prepacked(params, packed, &pool) : sgemm(params, &pool);
    if (!s.ok()) return state.SkipWithError(s.to_string().c_str());
    benchmark::ClobberMemory();
  }
  report(state, ops.flops(), threads, process_cpu_seconds() - cpu_start);
}

#if defined(KILN_HAVE_OPENBLAS)
// Args: m, n, k, threads, use_gemv (M == 1 only: cblas_sgemv instead of cblas_sgemm).
void BM_OpenBlas(benchmark::State& state) {
  const std::int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  const int threads = static_cast<int>(state.range(3));
  const bool gemv = state.range(4) != 0;
  Operands ops(m, n, k, /*trans_b=*/m == 1);
  openblas_set_num_threads(threads);
  const CBLAS_TRANSPOSE tb = ops.trans_b ? CblasTrans : CblasNoTrans;
  const double cpu_start = process_cpu_seconds();
  for (auto _ : state) {
    if (gemv) {
      cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<int>(n), static_cast<int>(k), 1.0f,
                  ops.b.data(), static_cast<int>(k), ops.a.data(), 1, 0.0f, ops.c.data(), 1);
    } else {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, tb, static_cast<int>(m), static_cast<int>(n),
                  static_cast<int>(k), 1.0f, ops.a.data(), static_cast<int>(k), ops.b.data(),
                  static_cast<int>(ops.trans_b ? k : n), 0.0f, ops.c.data(), static_cast<int>(n));
    }
    benchmark::ClobberMemory();
  }
  report(state, ops.flops(), threads, process_cpu_seconds() - cpu_start);
}
#endif

void square_and_gemv_args(benchmark::internal::Benchmark* b, bool gemv_flag_only_for_m1) {
  for (std::int64_t size : {256, 1024, 2048}) {
    for (int threads : {1, 2}) {
      b->Args({size, size, size, threads, 0});
      if (!gemv_flag_only_for_m1) b->Args({size, size, size, threads, 1});
    }
  }
  // Few rows, wide weights: ConvNeXt-T's last stage (7x7 = 49 pixels, 768 <-> 3072) and a
  // ViT-B's 197 tokens.
  for (auto [m, n, k] : {std::tuple<std::int64_t, std::int64_t, std::int64_t>{49, 3072, 768}, {49, 768, 3072},
                         {197, 3072, 768}}) {
    for (int threads : {1, 2}) b->Args({m, n, k, threads, gemv_flag_only_for_m1 ? 0 : 1});
  }
  // 1 x N x K: batch-1 decode through 4096x4096 and 768 -> 3072 linear layers.
  for (auto [n, k] : {std::pair<std::int64_t, std::int64_t>{4096, 4096}, {3072, 768}}) {
    for (int threads : {1, 2}) {
      b->Args({1, n, k, threads, 0});
      b->Args({1, n, k, threads, 1});
    }
  }
}

BENCHMARK(BM_Kiln)
    ->ArgNames({"m", "n", "k", "threads", "prepacked"})
    ->Apply([](benchmark::internal::Benchmark* b) { square_and_gemv_args(b, false); })
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

#if defined(KILN_HAVE_OPENBLAS)
BENCHMARK(BM_OpenBlas)
    ->ArgNames({"m", "n", "k", "threads", "gemv"})
    ->Apply([](benchmark::internal::Benchmark* b) { square_and_gemv_args(b, true); })
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
#endif

}  // namespace
}  // namespace kiln::cpu

int main(int argc, char** argv) {
#if defined(KILN_HAVE_OPENBLAS)
  std::printf("OpenBLAS config: %s\n", openblas_get_config());
#endif
  std::printf("Kiln GEMM ISA: %s\n",
              kiln::cpu::active_gemm_isa() == kiln::cpu::GemmIsa::kAvx512 ? "avx512" : kiln::cpu::active_gemm_isa() == kiln::cpu::GemmIsa::kAvx2 ? "avx2+fma" : "scalar");
#if defined(KILN_HAVE_OPENBLAS)
  // OpenBLAS's workers spin (sched_yield) for a while after start-up and after each call
  // (THREAD_TIMEOUT, ~2^28 cycles): let the start-up spin end before measuring anything.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
#endif
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

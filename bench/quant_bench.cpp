// Weight-only quantized linear layers against f32: y[M, N] = x[M, K] W^T with
// W f32[14336, 4096] (a Llama-3-8B MLP projection), stored f32 (prepacked for the SGEMM, as
// the runtime does at load), int8 per output channel (f32 scales) or int4 in groups of 32
// (f16 scales). Batch 1 is decode (bandwidth-bound: the bytes of W per call), batch 16 and
// 64 are prefill (the int paths dequantize W straight into the SGEMM's packed B panels).
//
//   kiln_quant_bench --benchmark_repetitions=3 --benchmark_enable_random_interleaving=true
//   KILN_BENCH_THREADS=1 taskset -c 0 kiln_quant_bench ...   (single core; compare cpu time)
//
// Counters: weight_GBps (bytes of the stored weight per second; the machine's bandwidth
// bounds it at batch 1) and GFLOPs (2*M*N*K). Threads: 2 (KILN_BENCH_THREADS overrides).
// The machine is shared: interleave the cases and compare the best or median.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "backends/cpu/gemm/gemm.h"
#include "backends/cpu/kernel.h"
#include "backends/cpu/thread_pool.h"
#include "kiln/export/export.h"
#include "kiln/export/ops.h"

namespace kiln::cpu {
namespace {

constexpr std::int64_t kN = 14336, kK = 4096, kGroup = 32;

int bench_threads() {
  const char* env = std::getenv("KILN_BENCH_THREADS");
  return env != nullptr ? std::max(1, std::atoi(env)) : 2;
}

class BenchContext : public KernelContext {
 public:
  Result<TensorView> allocate_output(int, DType, std::span<const std::int64_t>) override {
    return Status(StatusCode::kInternal, "unused");
  }
  ThreadPool& pool() override {
    static ThreadPool pool(bench_threads());
    return pool;
  }
};

struct Weights {
  std::vector<float> f32;
  PackedB packed;
  std::vector<std::int8_t> q8;
  std::vector<float> scales8;
  std::vector<std::uint8_t> q4;
  std::vector<std::uint16_t> scales4;  // f16 bits
};

const Weights& weights() {
  static const Weights w = [] {
    Weights out;
    std::mt19937 rng(1);
    std::normal_distribution<float> normal(0.0f, 0.02f);
    out.f32.resize(static_cast<std::size_t>(kN * kK));
    for (float& v : out.f32) v = normal(rng);
    out.packed = std::move(pack_b(out.f32.data(), kK, kK, kN, true, nullptr)).value();
    std::uniform_int_distribution<int> byte(0, 255);
    out.q8.resize(static_cast<std::size_t>(kN * kK));
    for (auto& v : out.q8) v = static_cast<std::int8_t>(byte(rng) - 128);
    out.scales8.assign(static_cast<std::size_t>(kN), 0.0002f);
    out.q4.resize(static_cast<std::size_t>(kN * kK / 2));
    for (auto& v : out.q4) v = static_cast<std::uint8_t>(byte(rng));
    out.scales4.assign(static_cast<std::size_t>(kN * kK / kGroup), 0x1400);  // f16 ~0.001
    return out;
  }();
  return w;
}

TensorView view(DType dtype, std::initializer_list<std::int64_t> shape, const void* data) {
  TensorView v;
  v.dtype = dtype;
  v.rank = static_cast<int>(shape.size());
  std::copy(shape.begin(), shape.end(), v.shape.begin());
  v.data = const_cast<void*>(data);
  return v;
}

enum Kind { kF32 = 0, kInt8 = 1, kInt4 = 2 };

void BM_Linear(benchmark::State& state) {
  const auto kind = static_cast<Kind>(state.range(0));
  const std::int64_t m = state.range(1);
  const Weights& w = weights();
  std::vector<float> x(static_cast<std::size_t>(m * kK), 0.5f), y(static_cast<std::size_t>(m * kN));
  BenchContext ctx;
  std::vector<TensorView> in;
  std::uint64_t weight_bytes = 0;
  if (kind == kInt8) {
    in = {view(DType::kF32, {m, kK}, x.data()), view(DType::kI8, {kN, kK}, w.q8.data()),
          view(DType::kF32, {kN, 1}, w.scales8.data())};
    weight_bytes = w.q8.size() + w.scales8.size() * 4;
  } else if (kind == kInt4) {
    in = {view(DType::kF32, {m, kK}, x.data()), view(DType::kU8, {kN, kK / 2}, w.q4.data()),
          view(DType::kF16, {kN, kK / kGroup}, w.scales4.data())};
    weight_bytes = w.q4.size() + w.scales4.size() * 2;
  } else {
    weight_bytes = w.f32.size() * 4;
  }
  std::vector<TensorView> out{view(DType::kF32, {m, kN}, y.data())};
  const KernelFn linear_q = cpu_kernel(OpKind::LinearQ);
  for (auto _ : state) {
    if (kind == kF32) {
      GemmParams p;
      p.m = m, p.n = kN, p.k = kK, p.trans_b = true;
      p.a = x.data(), p.lda = kK, p.c = y.data(), p.ldc = kN;
      if (!sgemm_prepacked(p, w.packed, &ctx.pool()).ok()) state.SkipWithError("sgemm failed");
    } else if (!linear_q(ctx, in, out, {}).ok()) {
      state.SkipWithError("linear_q failed");
    }
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["weight_GBps"] =
      benchmark::Counter(static_cast<double>(weight_bytes), benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
  state.counters["GFLOPs"] = benchmark::Counter(2.0 * static_cast<double>(m * kN * kK) * 1e-9,
                                                benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(kind == kF32 ? "f32" : kind == kInt8 ? "int8" : "int4 g32");
}

BENCHMARK(BM_Linear)
    ->ArgNames({"kind", "batch"})
    ->ArgsProduct({{kF32, kInt8, kInt4}, {1}})
    ->ArgsProduct({{kF32, kInt8, kInt4}, {16, 64}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace kiln::cpu

// `kiln_quant_bench --write-bundle PATH` writes the same layer as a one-linear bundle made
// with the tracing API (x f32[1, 4096] -> f32[1, 14336], random normal weights, one
// self-test), for `kiln quantize` and `kiln bench` (docs/PERFORMANCE.md).
int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "--write-bundle") == 0) {
    const kiln::Tensor w = kiln::Tensor::randn({kiln::cpu::kN, kiln::cpu::kK}, 1);
    auto ep = kiln::export_program([&](kiln::Tensor x) { return kiln::linear(x, w); },
                                   {kiln::input("x", kiln::Tensor::randn({1, kiln::cpu::kK}, 2))}, {.name = "linear_14336x4096"});
    if (!ep.ok() || !ep->save(argv[2]).ok()) {
      std::fprintf(stderr, "export failed: %s\n", ep.ok() ? "save" : ep.status().message().c_str());
      return 1;
    }
    return 0;
  }
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

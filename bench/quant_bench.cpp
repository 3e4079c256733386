// Weight-only quantized linear layers against f32: y[M, N] = x[M, K] W^T with
// W f32[14336, 4096] (a Llama-3-8B MLP projection), stored f32 (prepacked for the SGEMM, as
// the runtime does at load), int8 per output channel (f32 scales) or int4 in groups of 32
// (f16 scales). Batch 1 is decode (bandwidth-bound: the bytes of W per call), batch 16 and
// 64 are prefill (the integer GEMM of quant_gemm.h: activations rounded per block,
// integer dot products).
//
//   kiln_quant_bench --benchmark_repetitions=3 --benchmark_enable_random_interleaving=true
//   KILN_BENCH_THREADS=1 taskset -c 0 kiln_quant_bench ...   (single core; compare cpu time)
//   kiln_quant_bench --benchmark_filter=BM_SmallBatch ...     (decode kernels per row vs the
//                                                              integer GEMM at 1-6 rows)
//   kiln_quant_bench --accuracy                               (output error vs f32, below)
//
// Counters: weight_GBps (bytes of the stored weight per second; the machine's bandwidth
// bounds it at batch 1) and GFLOPs (2*M*N*K). Threads: 2 (KILN_BENCH_THREADS overrides).
// The machine is shared: interleave the cases and compare the best or median.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/gemm/gemm.h"
#include "backends/cpu/kernel.h"
#include "backends/cpu/kernels/convert.h"
#include "backends/cpu/kernels/quant_gemm.h"
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

// Rows 1-6: the decode kernels once per row (what linear_q runs at <= 2 rows) against the
// integer GEMM on all rows (what it runs from 3): where the GEMM starts to win.
void BM_SmallBatch(benchmark::State& state) {
  const auto kind = static_cast<Kind>(state.range(0));
  const std::int64_t m = state.range(1);
  const bool gemm = state.range(2) != 0;
  const Weights& w = weights();
  std::vector<float> x(static_cast<std::size_t>(m * kK), 0.5f), y(static_cast<std::size_t>(m * kN));
  BenchContext ctx;
  const kernels::QuantWeight qw =
      kind == kInt8 ? kernels::QuantWeight{reinterpret_cast<const std::uint8_t*>(w.q8.data()), 8, kN, kK, kK, w.scales8.data(),
                                           false, nullptr}
                    : kernels::QuantWeight{w.q4.data(), 4, kN, kK, kGroup, w.scales4.data(), true, nullptr};
  const KernelFn linear_q = cpu_kernel(OpKind::LinearQ);
  for (auto _ : state) {
    if (gemm) {
      if (!kernels::int_gemm(qw, x.data(), m, nullptr, y.data(), ctx.pool(), kernels::int_gemm_kernels()).ok()) {
        state.SkipWithError("int_gemm failed");
      }
    } else {
      for (std::int64_t r = 0; r < m; ++r) {
        std::vector<TensorView> in{view(DType::kF32, {1, kK}, x.data() + r * kK),
                                   kind == kInt8 ? view(DType::kI8, {kN, kK}, w.q8.data())
                                                 : view(DType::kU8, {kN, kK / 2}, w.q4.data()),
                                   kind == kInt8 ? view(DType::kF32, {kN, 1}, w.scales8.data())
                                                 : view(DType::kF16, {kN, kK / kGroup}, w.scales4.data())};
        std::vector<TensorView> out{view(DType::kF32, {1, kN}, y.data() + r * kN)};
        if (!linear_q(ctx, in, out, {}).ok()) state.SkipWithError("linear_q failed");
      }
    }
    benchmark::DoNotOptimize(y.data());
  }
  state.SetLabel(std::string(kind == kInt8 ? "int8" : "int4 g32") + (gemm ? " integer GEMM" : " decode per row"));
}

BENCHMARK(BM_SmallBatch)
    ->ArgNames({"kind", "batch", "gemm"})
    ->ArgsProduct({{kInt8, kInt4}, {1, 2, 3, 4, 6}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// --accuracy: the layer's f32 weights (normal, sigma 0.02) quantized as `kiln quantize
// --scales max` does (int8 per channel, max|w| / 127; int4 q4_0-style groups of 32 with f16
// scales), activations normal(0, 1), and the same with 1 % of the input channels scaled
// by 30 (outlier features). For batch 1, 16 and 64 it prints the cosine and SQNR of the
// quantized output against the f32 one, and the SQNR of the quantized output against the
// dequantized weights with f32 activations: the error the activation rounding adds.
double sqnr_db(const std::vector<float>& ref, const std::vector<float>& got) {
  double signal = 0, noise = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    signal += double(ref[i]) * ref[i];
    noise += (double(got[i]) - ref[i]) * (double(got[i]) - ref[i]);
  }
  return 10.0 * std::log10(signal / noise);
}

double cosine(const std::vector<float>& a, const std::vector<float>& b) {
  double dot = 0, aa = 0, bb = 0;
  for (std::size_t i = 0; i < a.size(); ++i) dot += double(a[i]) * b[i], aa += double(a[i]) * a[i], bb += double(b[i]) * b[i];
  return dot / std::sqrt(aa * bb);
}

int accuracy() {
  const Weights& w = weights();
  // Quantized from the f32 weights (the timing cases use random codes).
  std::vector<std::int8_t> q8(w.f32.size());
  std::vector<float> s8(kN);
  std::vector<std::uint8_t> q4(w.f32.size() / 2);
  std::vector<std::uint16_t> s4(static_cast<std::size_t>(kN * kK / kGroup));
  for (std::int64_t r = 0; r < kN; ++r) {
    const float* row = w.f32.data() + r * kK;
    float amax = 0;
    for (std::int64_t c = 0; c < kK; ++c) amax = std::max(amax, std::fabs(row[c]));
    s8[r] = amax / 127.0f;
    for (std::int64_t c = 0; c < kK; ++c) q8[r * kK + c] = static_cast<std::int8_t>(std::nearbyint(row[c] / s8[r]));
    for (std::int64_t g = 0; g < kK / kGroup; ++g) {
      float extreme = 0;
      for (std::int64_t c = g * kGroup; c < (g + 1) * kGroup; ++c) extreme = std::fabs(row[c]) > std::fabs(extreme) ? row[c] : extreme;
      const std::uint16_t bits = kernels::float_to_half(extreme / -8.0f);
      const float s = kernels::half_to_float(bits);
      s4[r * (kK / kGroup) + g] = bits;
      for (std::int64_t c = g * kGroup; c < (g + 1) * kGroup; ++c) {
        const int q = s != 0 ? std::clamp(static_cast<int>(std::nearbyint(row[c] / s)) + 8, 0, 15) : 8;
        std::uint8_t& byte = q4[(r * kK + c) / 2];
        byte = static_cast<std::uint8_t>(c % 2 == 0 ? (byte & 0xF0) | q : (byte & 0x0F) | (q << 4));
      }
    }
  }
  BenchContext ctx;
  const KernelFn linear_q = cpu_kernel(OpKind::LinearQ);
  auto sgemm_into = [&](const std::vector<float>& x, std::int64_t m, const PackedB& b, std::vector<float>& y) {
    GemmParams p;
    p.m = m, p.n = kN, p.k = kK, p.trans_b = true;
    p.a = x.data(), p.lda = kK, p.c = y.data(), p.ldc = kN;
    return sgemm_prepacked(p, b, &ctx.pool()).ok();
  };
  std::printf("activations | format | batch | cosine vs f32 | SQNR vs f32 | weight-only SQNR | activation rounding SQNR\n");
  for (const bool outliers : {false, true}) {
    for (const int bits : {8, 4}) {
      // Dequantized weights: the f32-activation reference for the rounding's own error.
      std::vector<float> deq(w.f32.size());
      for (std::int64_t i = 0; i < kN * kK; ++i) {
        const std::int64_t r = i / kK, c = i % kK;
        deq[i] = bits == 8 ? q8[i] * s8[r]
                           : static_cast<float>(((c % 2 == 0 ? q4[i / 2] & 0x0F : q4[i / 2] >> 4)) - 8) *
                                 kernels::half_to_float(s4[r * (kK / kGroup) + c / kGroup]);
      }
      const PackedB packed = std::move(pack_b(deq.data(), kK, kK, kN, true, nullptr)).value();
      for (const std::int64_t m : {1, 16, 64}) {
        std::mt19937 rng(static_cast<unsigned>(100 + m));
        std::normal_distribution<float> normal(0.0f, 1.0f);
        std::vector<float> x(static_cast<std::size_t>(m * kK));
        for (float& v : x) v = normal(rng);
        if (outliers) {
          for (std::int64_t c = 0; c < kK; c += 100) {
            for (std::int64_t r = 0; r < m; ++r) x[r * kK + c] *= 30.0f;
          }
        }
        std::vector<float> y32(static_cast<std::size_t>(m * kN)), ydeq(y32.size()), yq(y32.size());
        if (!sgemm_into(x, m, w.packed, y32) || !sgemm_into(x, m, packed, ydeq)) return 1;
        std::vector<TensorView> in{view(DType::kF32, {m, kK}, x.data()),
                                   bits == 8 ? view(DType::kI8, {kN, kK}, q8.data()) : view(DType::kU8, {kN, kK / 2}, q4.data()),
                                   bits == 8 ? view(DType::kF32, {kN, 1}, s8.data())
                                             : view(DType::kF16, {kN, kK / kGroup}, s4.data())};
        std::vector<TensorView> out{view(DType::kF32, {m, kN}, yq.data())};
        if (!linear_q(ctx, in, out, {}).ok()) return 1;
        std::printf("%s | %s | %lld | %.6f | %.1f dB | %.1f dB | %.1f dB\n", outliers ? "1 % outliers x30" : "normal",
                    bits == 8 ? "int8" : "int4 g32", static_cast<long long>(m), cosine(yq, y32), sqnr_db(y32, yq),
                    sqnr_db(y32, ydeq), sqnr_db(ydeq, yq));
      }
    }
  }
  return 0;
}

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
  if (argc == 2 && std::strcmp(argv[1], "--accuracy") == 0) return kiln::cpu::accuracy();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

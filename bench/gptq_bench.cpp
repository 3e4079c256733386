// The cost of `kiln quantize`'s numbers (cli/quantize_math.h) on one square layer W[K, K]
// (int4, group 32, f16 scales, searched scales) with moments from 512 correlated rows:
// rounding to nearest against GPTQ, and GPTQ's factor in double against the blocked float
// one. Results in docs/QUANTIZATION.md ("Cost").
//
//   kiln_gptq_bench --benchmark_min_time=1
//
// The quantizer uses every core (hardware_concurrency), as `kiln quantize` does.
#include <benchmark/benchmark.h>

#include <map>
#include <random>
#include <vector>

#include "quantize_math.h"

namespace kiln::cli::quant {
namespace {

struct Layer {
  std::vector<float> w;
  std::vector<double> h;
};

// W normal; H the moments of 512 rows driven by 32 shared factors (correlated inputs).
const Layer& layer(std::int64_t k) {
  static std::map<std::int64_t, Layer> cache;
  auto it = cache.find(k);
  if (it != cache.end()) return it->second;
  std::mt19937 rng(static_cast<unsigned>(k));
  std::normal_distribution<float> normal;
  Layer l;
  l.w.resize(static_cast<std::size_t>(k * k));
  for (float& v : l.w) v = normal(rng);
  constexpr std::int64_t kRows = 512, kFactors = 32;
  std::vector<float> a(static_cast<std::size_t>(kFactors * k)), x(static_cast<std::size_t>(kRows * k));
  for (float& v : a) v = normal(rng);
  for (std::int64_t r = 0; r < kRows; ++r) {
    std::vector<float> z(kFactors);
    for (float& v : z) v = normal(rng);
    for (std::int64_t j = 0; j < k; ++j) {
      float s = 0.05f * normal(rng);
      for (std::int64_t t = 0; t < kFactors; ++t) s += z[static_cast<std::size_t>(t)] * a[static_cast<std::size_t>(t * k + j)];
      x[static_cast<std::size_t>(r * k + j)] = s;
    }
  }
  InputMoments m(k);
  if (!m.add(x.data(), kRows).ok()) std::abort();
  l.h = m.mean();
  return cache.emplace(k, std::move(l)).first->second;
}

void BM_QuantizeWeight(benchmark::State& state) {
  const std::int64_t k = state.range(0);
  const bool calibrated = state.range(1) != 0;
  const Layer& l = layer(k);
  const WeightFormat f{4, 32, true, false, true};
  double out_db = 0, nearest_db = 0;
  for (auto _ : state) {
    const QuantizedWeight q = quantize_weight(l.w.data(), k, k, false, f, calibrated ? &l.h : nullptr);
    benchmark::DoNotOptimize(q.data.data());
    out_db = q.output_sqnr_db, nearest_db = q.nearest_output_sqnr_db;
  }
  if (calibrated) {
    state.counters["out_dB"] = out_db;
    state.counters["nearest_out_dB"] = nearest_db;
  }
}
BENCHMARK(BM_QuantizeWeight)->ArgsProduct({{1024, 2048, 4096}, {0, 1}})->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_Factor(benchmark::State& state) {
  const std::int64_t k = state.range(0);
  const bool blocked = state.range(1) != 0;
  const Layer& l = layer(k);
  for (auto _ : state) {
    if (blocked) {
      auto u = gptq_factor_blocked(l.h, k, 0.01);
      if (!u.ok()) state.SkipWithError(u.status().message().c_str());
      benchmark::DoNotOptimize(u);
    } else {
      auto u = gptq_factor(l.h, k, 0.01);
      if (!u.ok()) state.SkipWithError(u.status().message().c_str());
      benchmark::DoNotOptimize(u);
    }
  }
}
BENCHMARK(BM_Factor)->ArgsProduct({{1024, 2048, 4096}, {0, 1}})->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace kiln::cli::quant

BENCHMARK_MAIN();

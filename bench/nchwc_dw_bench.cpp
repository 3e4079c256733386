// The NCHW8c kernels (runtime/src/backends/cpu/kernels/nchwc.h): reorders, depthwise
// convolution and pools, on mobile networks' layer shapes at 224x224, against Kiln's plain
// NCHW kernels of the same ops (cpu_kernel(OpKind::...), whatever path they pick).
//
//   kiln_nchwc_dw_bench --benchmark_min_time=0.3 --benchmark_repetitions=5
//       --benchmark_report_aggregates_only=true (one line)
//
// Reorders report bytes read + written per second ("bytes_per_second"). Depthwise layers
// run blocked -> blocked with relu6 fused (mobilenet_v2), the plain kernel on the same
// shapes with the same activation; the reference times of ONNX Runtime (MLAS NCHWc) at one
// thread are in the case table. Numbers on a shared machine are noisy: repeat, take medians.
#include <benchmark/benchmark.h>

#include <array>
#include <cstdint>
#include <memory>
#include <random>
#include <span>
#include <vector>

#include "backends/cpu/kernel.h"
#include "backends/cpu/kernels/nchwc.h"
#include "backends/cpu/thread_pool.h"

namespace kiln::cpu {
namespace {

ThreadPool& pool_for(int threads) {
  static ThreadPool one(1);
  static ThreadPool two(2);
  return threads == 1 ? one : two;
}

std::vector<float> random_floats(std::int64_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& f : v) f = dist(rng);
  return v;
}

// ---------------------------------------------------------------------------------------
// Reorders

struct ReorderCase {
  std::int64_t c, h, w;
};
constexpr std::array<ReorderCase, 4> kReorders = {{
    {3, 224, 224},   // a network's input
    {32, 112, 112},  // mobilenet_v2 features.1
    {144, 56, 56},   // features.3
    {13, 30, 30},    // a partial last block
}};

// Range 0: case, 1: threads, 2: direction (0 to_blocked, 1 to_plain).
void BM_Reorder(benchmark::State& state) {
  const ReorderCase& c = kReorders[static_cast<std::size_t>(state.range(0))];
  ThreadPool& pool = pool_for(static_cast<int>(state.range(1)));
  const bool to_plain = state.range(2) == 1;
  const std::int64_t hw = c.h * c.w;
  std::vector<float> plain = random_floats(c.c * hw, 1);
  std::vector<float> blocked(static_cast<std::size_t>(nchwc::blocked_floats(1, c.c, c.h, c.w)));
  nchwc::to_blocked(plain.data(), blocked.data(), 1, c.c, hw, pool);
  for (auto _ : state) {
    if (to_plain) {
      nchwc::to_plain(blocked.data(), plain.data(), 1, c.c, hw, pool);
    } else {
      nchwc::to_blocked(plain.data(), blocked.data(), 1, c.c, hw, pool);
    }
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>((plain.size() + blocked.size()) * sizeof(float)));
}
BENCHMARK(BM_Reorder)->ArgsProduct({{0, 1, 2, 3}, {1, 2}, {0, 1}})->ArgNames({"case", "threads", "to_plain"})->UseRealTime();

}  // namespace
}  // namespace kiln::cpu

BENCHMARK_MAIN();

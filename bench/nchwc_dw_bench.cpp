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

#include <algorithm>
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

// ---------------------------------------------------------------------------------------
// Depthwise convolution

struct DwCase {
  std::int64_t c, h, w, k, stride;
  FusedActivation act;
  double ort_us;  // ONNX Runtime 1.x (MLAS NCHWc), one thread, this machine; 0: not measured
};
constexpr std::array<DwCase, 11> kDepthwise = {{
    {32, 112, 112, 3, 1, FusedActivation::kRelu6, 209},  // mobilenet_v2 features.1
    {96, 112, 112, 3, 2, FusedActivation::kRelu6, 242},  // features.2
    {144, 56, 56, 3, 1, FusedActivation::kRelu6, 169},   // features.3
    {144, 56, 56, 3, 2, FusedActivation::kRelu6, 110},   // features.4
    {192, 28, 28, 3, 1, FusedActivation::kRelu6, 60},    // features.5-6
    {384, 14, 14, 3, 1, FusedActivation::kRelu6, 50},    // features.8-10
    {576, 14, 14, 3, 1, FusedActivation::kRelu6, 75},    // features.12-13
    {960, 7, 7, 3, 1, FusedActivation::kRelu6, 60},      // features.15-17
    {240, 14, 14, 5, 1, FusedActivation::kHardswish, 0}, // mobilenet_v3 5x5
    {672, 14, 14, 5, 2, FusedActivation::kSilu, 0},      // efficientnet_b0 5x5 stride 2
    {120, 28, 28, 5, 1, FusedActivation::kHardswish, 0}, // mobilenet_v3 5x5 at 28
}};

std::int64_t dw_out(std::int64_t in, const DwCase& c) { return (in + 2 * (c.k / 2) - c.k) / c.stride + 1; }

nchwc::ConvShape dw_shape(const DwCase& c) {
  nchwc::ConvShape s;
  s.in_channels = s.out_channels = s.groups = c.c;
  s.kh = s.kw = c.k;
  s.stride_h = s.stride_w = c.stride;
  s.pad_h = s.pad_w = c.k / 2;
  return s;
}

// Range 0: case, 1: threads, 2: layouts (0 blocked -> blocked, 1 plain -> plain).
void BM_NchwcDepthwise(benchmark::State& state) {
  const DwCase& c = kDepthwise[static_cast<std::size_t>(state.range(0))];
  ThreadPool& pool = pool_for(static_cast<int>(state.range(1)));
  const bool blocked = state.range(2) == 0;
  const std::int64_t oh = dw_out(c.h, c), ow = dw_out(c.w, c);
  std::vector<float> x = random_floats(nchwc::blocked_floats(1, c.c, c.h, c.w), 1);
  std::vector<float> w = random_floats(c.c * c.k * c.k, 2);
  std::vector<float> b = random_floats(c.c, 3);
  std::vector<float> y(static_cast<std::size_t>(nchwc::blocked_floats(1, c.c, oh, ow)));
  auto prepared = nchwc::prepare_depthwise(w.data(), dw_shape(c));
  if (!prepared.ok()) {
    state.SkipWithError(prepared.status().message().c_str());
    return;
  }
  const nchwc::Act xa{x.data(), 1, c.c, c.h, c.w, blocked}, ya{y.data(), 1, c.c, oh, ow, blocked};
  const nchwc::Epilogue e{b.data(), nullptr, c.act};
  for (auto _ : state) {
    const Status s = nchwc::conv2d_depthwise(xa, *prepared.value(), dw_shape(c), e, ya, pool);
    if (!s.ok()) {
      state.SkipWithError(s.message().c_str());
      return;
    }
    benchmark::ClobberMemory();
  }
  state.counters["ort_us"] = c.ort_us;
}
BENCHMARK(BM_NchwcDepthwise)
    ->ArgsProduct({{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, {1, 2}, {0, 1}})
    ->ArgNames({"case", "threads", "plain"})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

class BenchContext final : public KernelContext {
 public:
  BenchContext(ThreadPool& pool, FusedActivation act) : pool_(pool), act_(act) {}
  Result<TensorView> allocate_output(int, DType, std::span<const std::int64_t>) override {
    return Status(StatusCode::kInternal, "not used");
  }
  ThreadPool& pool() override { return pool_; }
  FusedActivation fused_activation() const override { return act_; }

 private:
  ThreadPool& pool_;
  FusedActivation act_;
};

TensorView view(std::vector<float>& data, std::initializer_list<std::int64_t> shape) {
  TensorView v;
  v.dtype = DType::kF32;
  v.rank = static_cast<int>(shape.size());
  std::copy(shape.begin(), shape.end(), v.shape.begin());
  v.data = data.data();
  return v;
}

// The plain NCHW conv2d kernel on the same layer (the executor's path before NCHW8c).
void BM_PlainDepthwise(benchmark::State& state) {
  const DwCase& c = kDepthwise[static_cast<std::size_t>(state.range(0))];
  ThreadPool& pool = pool_for(static_cast<int>(state.range(1)));
  const std::int64_t oh = dw_out(c.h, c), ow = dw_out(c.w, c);
  std::vector<float> x = random_floats(c.c * c.h * c.w, 1);
  std::vector<float> w = random_floats(c.c * c.k * c.k, 2);
  std::vector<float> b = random_floats(c.c, 3);
  std::vector<float> y(static_cast<std::size_t>(c.c * oh * ow));
  const std::array<TensorView, 3> in{view(x, {1, c.c, c.h, c.w}), view(w, {c.c, 1, c.k, c.k}), view(b, {c.c})};
  std::array<TensorView, 1> out{view(y, {1, c.c, oh, ow})};
  const std::array<std::int64_t, 2> stride{c.stride, c.stride}, pad{c.k / 2, c.k / 2}, dil{1, 1};
  std::array<AttrValue, 4> attrs{};
  attrs[0].type = attrs[1].type = attrs[2].type = AttrType::kInts;
  attrs[0].ints = stride;
  attrs[1].ints = pad;
  attrs[2].ints = dil;
  attrs[3].type = AttrType::kInt;
  attrs[3].i = c.c;
  BenchContext ctx(pool, c.act);
  const KernelFn conv = cpu_kernel(OpKind::Conv2d);
  for (auto _ : state) {
    const Status s = conv(ctx, in, out, attrs);
    if (!s.ok()) {
      state.SkipWithError(s.message().c_str());
      return;
    }
    benchmark::ClobberMemory();
  }
  state.counters["ort_us"] = c.ort_us;
}
BENCHMARK(BM_PlainDepthwise)
    ->ArgsProduct({{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, {1, 2}})
    ->ArgNames({"case", "threads"})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace kiln::cpu

BENCHMARK_MAIN();

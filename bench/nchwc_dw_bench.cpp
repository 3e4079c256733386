// The NCHW8c kernels (runtime/src/backends/cpu/kernels/nchwc.h): reorders, depthwise
// convolution and pools, on mobile networks' layer shapes at 224x224, against Kiln's plain
// NCHW kernels of the same ops (cpu_kernel(OpKind::...), whatever path they pick).
//
//   kiln_nchwc_dw_bench --benchmark_min_time=0.3 --benchmark_repetitions=5
//       --benchmark_report_aggregates_only=true (one line)
//
// Reorders report bytes read + written per second ("bytes_per_second"; a memcpy of the
// same sizes runs at ~95 GB/s on one Zen 4 core). Depthwise layers run blocked -> blocked
// (plain:0) and plain -> plain (plain:1) with the layer's activation fused (relu6 for
// mobilenet_v2, hardswish / silu for the 5x5 ones), the plain kernel on the same shapes
// with the same activation; ONNX Runtime's (MLAS NCHWc) times at one thread on this
// machine are in the case table ("ort_us", 0 = not measured). Pools run blocked ->
// blocked, blocked -> plain (a classifier's input) and plain -> plain. All buffers are
// 64-byte aligned like the executor's arena. Numbers on a shared machine are noisy: take
// the median of repetitions, under the CPU lock.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <new>
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

// 64-byte aligned, as the executor's arena hands out activations (a pixel vector across two
// cache lines loads at half speed: std::vector's 16-byte alignment costs up to 25%).
template <typename T>
struct AlignedAllocator {
  using value_type = T;
  AlignedAllocator() = default;
  template <typename U>
  AlignedAllocator(const AlignedAllocator<U>&) {}  // NOLINT: rebinding
  T* allocate(std::size_t n) {
    return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t{64}));
  }
  void deallocate(T* p, std::size_t) { ::operator delete(p, std::align_val_t{64}); }
  bool operator==(const AlignedAllocator&) const { return true; }
};
using Floats = std::vector<float, AlignedAllocator<float>>;

Floats random_floats(std::int64_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  Floats v(static_cast<std::size_t>(n));
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
  Floats plain = random_floats(c.c * hw, 1);
  Floats blocked(static_cast<std::size_t>(nchwc::blocked_floats(1, c.c, c.h, c.w)));
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
  Floats x = random_floats(nchwc::blocked_floats(1, c.c, c.h, c.w), 1);
  Floats w = random_floats(c.c * c.k * c.k, 2);
  Floats b = random_floats(c.c, 3);
  Floats y(static_cast<std::size_t>(nchwc::blocked_floats(1, c.c, oh, ow)));
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

TensorView view(Floats& data, std::initializer_list<std::int64_t> shape) {
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
  Floats x = random_floats(c.c * c.h * c.w, 1);
  Floats w = random_floats(c.c * c.k * c.k, 2);
  Floats b = random_floats(c.c, 3);
  Floats y(static_cast<std::size_t>(c.c * oh * ow));
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

// ---------------------------------------------------------------------------------------
// Pools

enum class PoolOp { kMax, kAvg, kAdaptiveAvg, kMeanHw };
struct PoolCase {
  PoolOp op;
  std::int64_t c, h, w, k, stride, pad;
  bool count_include_pad;
};
constexpr std::array<PoolCase, 6> kPools = {{
    {PoolOp::kMax, 64, 112, 112, 3, 2, 1, true},       // resnet's stem max pool
    {PoolOp::kAvg, 128, 56, 56, 2, 2, 0, true},        // densenet's transition
    {PoolOp::kAvg, 192, 35, 35, 3, 1, 1, false},       // inception's branch pool
    {PoolOp::kAdaptiveAvg, 1280, 7, 7, 0, 0, 0, true}, // mobilenet_v2's head (to 1x1)
    {PoolOp::kMeanHw, 96, 56, 56, 0, 0, 0, true},      // efficientnet_b0's squeeze-excitation
    {PoolOp::kMeanHw, 960, 7, 7, 0, 0, 0, true},       // mobilenet_v3's last one
}};

std::int64_t pool_out(const PoolCase& c, std::int64_t in) {
  return c.op == PoolOp::kMax || c.op == PoolOp::kAvg ? (in + 2 * c.pad - c.k) / c.stride + 1 : 1;
}

// Range 0: case, 1: threads, 2: layouts (0 blocked -> blocked, 1 blocked -> plain, 2 plain -> plain).
void BM_NchwcPool(benchmark::State& state) {
  const PoolCase& c = kPools[static_cast<std::size_t>(state.range(0))];
  ThreadPool& pool = pool_for(static_cast<int>(state.range(1)));
  const bool in_blocked = state.range(2) < 2, out_blocked = state.range(2) == 0;
  const std::int64_t oh = pool_out(c, c.h), ow = pool_out(c, c.w);
  Floats x = random_floats(nchwc::blocked_floats(1, c.c, c.h, c.w), 1);
  Floats y(static_cast<std::size_t>(nchwc::blocked_floats(1, c.c, oh, ow)));
  const nchwc::Act xa{x.data(), 1, c.c, c.h, c.w, in_blocked}, ya{y.data(), 1, c.c, oh, ow, out_blocked};
  const nchwc::PoolShape s{c.k, c.k, c.stride, c.stride, c.pad, c.pad, 1, 1, c.count_include_pad};
  for (auto _ : state) {
    Status st = Status::Ok();
    switch (c.op) {
      case PoolOp::kMax: st = nchwc::max_pool2d(xa, s, ya, pool); break;
      case PoolOp::kAvg: st = nchwc::avg_pool2d(xa, s, ya, pool); break;
      case PoolOp::kAdaptiveAvg: st = nchwc::adaptive_avg_pool2d(xa, ya, pool); break;
      case PoolOp::kMeanHw: st = nchwc::mean_hw(xa, ya, pool); break;
    }
    if (!st.ok()) {
      state.SkipWithError(st.message().c_str());
      return;
    }
    benchmark::ClobberMemory();
  }
}
BENCHMARK(BM_NchwcPool)
    ->ArgsProduct({{0, 1, 2, 3, 4, 5}, {1, 2}, {0, 1, 2}})
    ->ArgNames({"case", "threads", "layouts"})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// The plain kernels of the same ops (pool.cpp; mean: reduce.cpp) on the same shapes.
void BM_PlainPool(benchmark::State& state) {
  const PoolCase& c = kPools[static_cast<std::size_t>(state.range(0))];
  ThreadPool& pool = pool_for(static_cast<int>(state.range(1)));
  const std::int64_t oh = pool_out(c, c.h), ow = pool_out(c, c.w);
  Floats x = random_floats(c.c * c.h * c.w, 1);
  Floats y(static_cast<std::size_t>(c.c * oh * ow));
  const std::array<TensorView, 1> in{view(x, {1, c.c, c.h, c.w})};
  std::array<TensorView, 1> out{view(y, {1, c.c, oh, ow})};
  const std::array<std::int64_t, 2> kernel{c.k, c.k}, stride{c.stride, c.stride}, pad{c.pad, c.pad}, dil{1, 1};
  const std::array<std::int64_t, 2> size{1, 1}, dims{2, 3};
  std::array<AttrValue, 5> attrs{};
  OpKind op = OpKind::MaxPool2d;
  auto ints = [&](int i, std::span<const std::int64_t> v) {
    attrs[static_cast<std::size_t>(i)].type = AttrType::kInts;
    attrs[static_cast<std::size_t>(i)].ints = v;
  };
  auto flag = [&](int i, bool v) {
    attrs[static_cast<std::size_t>(i)].type = AttrType::kBool;
    attrs[static_cast<std::size_t>(i)].i = v ? 1 : 0;
  };
  switch (c.op) {
    case PoolOp::kMax: op = OpKind::MaxPool2d; ints(0, kernel); ints(1, stride); ints(2, pad); ints(3, dil); flag(4, false); break;
    case PoolOp::kAvg: op = OpKind::AvgPool2d; ints(0, kernel); ints(1, stride); ints(2, pad); flag(3, false); flag(4, c.count_include_pad); break;
    case PoolOp::kAdaptiveAvg: op = OpKind::AdaptiveAvgPool2d; ints(0, size); break;
    case PoolOp::kMeanHw: op = OpKind::Mean; ints(0, dims); flag(1, true); break;
  }
  BenchContext ctx(pool, FusedActivation::kNone);
  const KernelFn kernel_fn = cpu_kernel(op);
  for (auto _ : state) {
    const Status st = kernel_fn(ctx, in, out, attrs);
    if (!st.ok()) {
      state.SkipWithError(st.message().c_str());
      return;
    }
    benchmark::ClobberMemory();
  }
}
BENCHMARK(BM_PlainPool)
    ->ArgsProduct({{0, 1, 2, 3, 4, 5}, {1, 2}})
    ->ArgNames({"case", "threads"})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace kiln::cpu

BENCHMARK_MAIN();

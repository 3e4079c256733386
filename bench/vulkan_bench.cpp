// Vulkan backend vs the CPU kernels: matmul 256^3 and 1024^3 and a 3x3 conv (ResNet-like
// 64 -> 64 channels at 56x56). The Vulkan numbers are whole PreparedSegment::run calls:
// upload of the activation, the dispatches, download of the result (weights are constants,
// uploaded once at prepare). The CPU numbers are the single-threaded CPU kernel.
//
//   kiln_vulkan_bench                       # from build/<dir>/bench/
//   KILN_VULKAN_DEVICE=1 kiln_vulkan_bench  # pick another device (index or name part)
//
// Without a usable Vulkan device the Vulkan cases are skipped with the reason. Results are
// in docs/PERFORMANCE.md.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "backends/cpu/kernel.h"
#include "backends/cpu/thread_pool.h"

namespace kiln {
namespace {

using Shape = std::vector<std::int64_t>;

struct HostTensor {
  DType dtype = DType::kF32;
  Shape shape;
  std::vector<float> data;
  TensorView view() {
    TensorView v;
    v.dtype = dtype;
    v.rank = static_cast<int>(shape.size());
    for (std::size_t i = 0; i < shape.size(); ++i) v.shape[i] = shape[i];
    v.data = data.data();
    return v;
  }
};

HostTensor random_tensor(Shape shape, std::uint32_t seed) {
  HostTensor t;
  t.shape = std::move(shape);
  std::int64_t n = 1;
  for (auto d : t.shape) n *= d;
  t.data.resize(static_cast<std::size_t>(n));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  for (float& v : t.data) v = dist(rng);
  return t;
}

backend::Backend* vulkan(std::string* why) {
  static std::string reason;
  static std::unique_ptr<backend::Backend> b = [] {
    auto r = backend::create_backend("vulkan");
    if (!r.ok()) {
      reason = r.status().to_string();
      return std::unique_ptr<backend::Backend>();
    }
    std::printf("Vulkan device: %s\n", (*r)->device_description().c_str());
    return std::move(r).value();
  }();
  *why = reason;
  return b.get();
}

class Constants : public backend::ConstantSource {
 public:
  std::map<std::uint32_t, HostTensor*> tensors;
  std::span<const std::uint8_t> constant_data(std::uint32_t index) const override {
    const HostTensor* t = tensors.at(index);
    return {reinterpret_cast<const std::uint8_t*>(t->data.data()), t->data.size() * 4};
  }
};

class CpuContext : public KernelContext {
 public:
  Result<TensorView> allocate_output(int, DType, std::span<const std::int64_t>) override {
    return Status(StatusCode::kInternal, "unused");
  }
  cpu::ThreadPool& pool() override { return pool_; }

 private:
  cpu::ThreadPool pool_{1};
};

// One op: input x (host), weight w (constant), output out; attrs as given.
struct OpCase {
  OpKind op;
  HostTensor x, w;
  Shape out_shape;
  std::vector<AttrValue> attrs;
  std::vector<std::vector<std::int64_t>> ints;
  double flops = 0;
};

OpCase matmul_case(std::int64_t n) {
  OpCase c{OpKind::Matmul, random_tensor({n, n}, 1), random_tensor({n, n}, 2), {n, n}, {}, {}, 2.0 * n * n * n};
  return c;
}

OpCase conv_case() {
  OpCase c{OpKind::Conv2d, random_tensor({1, 64, 56, 56}, 3), random_tensor({64, 64, 3, 3}, 4), {1, 64, 56, 56}, {}, {}, 0};
  c.flops = 2.0 * 64 * 56 * 56 * 64 * 9;
  c.ints = {{1, 1}, {1, 1}, {1, 1}};
  for (auto& v : c.ints) {
    AttrValue a;
    a.type = AttrType::kInts;
    a.ints = v;
    c.attrs.push_back(a);
  }
  AttrValue groups;
  groups.type = AttrType::kInt;
  groups.i = 1;
  c.attrs.push_back(groups);
  return c;
}

void run_cpu(benchmark::State& state, OpCase c) {
  HostTensor out;
  out.shape = c.out_shape;
  std::int64_t n = 1;
  for (auto d : out.shape) n *= d;
  out.data.resize(static_cast<std::size_t>(n));
  CpuContext ctx;
  const TensorView ins[] = {c.x.view(), c.w.view()};
  TensorView outs[] = {out.view()};
  const KernelFn fn = cpu::cpu_kernel(c.op);
  for (auto _ : state) {
    Status st = fn(ctx, std::span<const TensorView>(ins), std::span<TensorView>(outs), c.attrs);
    if (!st.ok()) {
      state.SkipWithError(st.to_string().c_str());
      return;
    }
    benchmark::DoNotOptimize(out.data.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(c.flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void run_vulkan(benchmark::State& state, OpCase c) {
  std::string why;
  backend::Backend* b = vulkan(&why);
  if (b == nullptr) {
    state.SkipWithError(("no Vulkan: " + why).c_str());
    return;
  }
  backend::SegmentDesc desc;
  backend::SegmentTensor x, w, y;
  x.role = backend::SegmentTensor::Role::kInput;
  x.shape = c.x.shape;
  w.role = backend::SegmentTensor::Role::kConstant;
  w.shape = c.w.shape;
  w.constant = c.op == OpKind::Matmul ? static_cast<std::uint32_t>(c.x.shape[0]) : 100000;
  y.role = backend::SegmentTensor::Role::kOutput;
  y.shape = c.out_shape;
  desc.tensors = {x, w, y};
  desc.num_inputs = 1;
  desc.num_outputs = 1;
  backend::SegmentNode& node = desc.nodes.emplace_back();
  node.op = c.op;
  node.inputs = {0, 1};
  node.outputs = {2};
  node.attrs = c.attrs;
  Constants constants;
  constants.tensors[w.constant] = &c.w;
  auto seg = b->prepare(desc, constants);
  if (!seg.ok()) {
    state.SkipWithError(seg.status().to_string().c_str());
    return;
  }
  HostTensor out;
  out.shape = c.out_shape;
  std::int64_t n = 1;
  for (auto d : out.shape) n *= d;
  out.data.resize(static_cast<std::size_t>(n));
  const TensorView ins[] = {c.x.view()};
  const TensorView outs[] = {out.view()};
  for (auto _ : state) {
    Status st = (*seg)->run({ins, outs});
    if (!st.ok()) {
      state.SkipWithError(st.to_string().c_str());
      return;
    }
    benchmark::DoNotOptimize(out.data.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(c.flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["MB_moved"] = static_cast<double>((*seg)->bytes_uploaded() + (*seg)->bytes_downloaded()) / 1e6;
}

BENCHMARK_CAPTURE(run_cpu, matmul_256, matmul_case(256))->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(run_vulkan, matmul_256, matmul_case(256))->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(run_cpu, matmul_1024, matmul_case(1024))->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(run_vulkan, matmul_1024, matmul_case(1024))->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(run_cpu, conv3x3_64x56x56, conv_case())->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(run_vulkan, conv3x3_64x56x56, conv_case())->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace kiln

BENCHMARK_MAIN();

// conv2d_dense on NCHW8c activations (nchwc.h) against the plain NCHW conv2d kernel (with
// weights prepared at load, as a loaded Program runs it), on the layers of mobilenet_v2 and
// resnet18 at 224x224, batch 1.
//
//   kiln_nchwc_bench --benchmark_min_time=0.3 --benchmark_repetitions=5
//                    --benchmark_report_aggregates_only=true
//
// BM_Nchwc: blocked input and output (plain input for the stems, whose input is the
// network's; plain output where the name says so); BM_Plain: the NCHW kernel (conv.cpp: Winograd, direct, GEMM, whatever it
// picks). Both add the bias and fuse nothing else. Reports GFLOP/s as "GFLOP=x/s"
// (2 * O * OH * OW * C/groups * KH * KW per call, wall-clock; for Winograd the direct
// convolution's count, an effective rate). Range `width`: the block group width (0:
// prepare_dense's choice); `algo`: 0 the executor's choice (conv2d_winograd where
// winograd_preferred: resnet18's stride-1 3x3 layers), 1 conv2d_dense (BM_NchwcDirect).
#include <benchmark/benchmark.h>

#include <array>
#include <cstdint>
#include <memory>
#include <random>
#include <span>
#include <vector>

#include "backends/cpu/kernel.h"
#include "backends/cpu/kernels/conv_nchwc_kernels.h"
#include "backends/cpu/kernels/nchwc.h"
#include "backends/cpu/thread_pool.h"

namespace kiln::cpu {
namespace {

struct Layer {
  const char* name;
  std::int64_t c, h, w, o, k, stride, pad;
  bool plain_input = false, plain_output = false;
  std::int64_t groups = 1;
};

constexpr std::array<Layer, 35> kLayers = {{
    // mobilenet_v2 pointwise
    {"mbv2 1x1 16->96 @112", 16, 112, 112, 96, 1, 1, 0},
    {"mbv2 1x1 32->16 @112", 32, 112, 112, 16, 1, 1, 0},
    {"mbv2 1x1 144->24 @56", 144, 56, 56, 24, 1, 1, 0},
    {"mbv2 1x1 24->144 @56", 24, 56, 56, 144, 1, 1, 0},
    {"mbv2 1x1 320->1280 @7", 320, 7, 7, 1280, 1, 1, 0},
    {"mbv2 1x1 960->320 @7", 960, 7, 7, 320, 1, 1, 0},
    {"mbv2 1x1 96->24 @56", 96, 56, 56, 24, 1, 1, 0},
    {"mbv2 1x1 576->96 @14", 576, 14, 14, 96, 1, 1, 0},
    // stems (plain input)
    {"mbv2 stem 3x3 s2 3->32 @224", 3, 224, 224, 32, 3, 2, 1, true},
    {"r18 stem 7x7 s2 3->64 @224", 3, 224, 224, 64, 7, 2, 3, true},
    // resnet18 3x3
    {"r18 3x3 64 @56", 64, 56, 56, 64, 3, 1, 1},
    {"r18 3x3 128 @28", 128, 28, 28, 128, 3, 1, 1},
    {"r18 3x3 256 @14", 256, 14, 14, 256, 3, 1, 1},
    {"r18 3x3 512 @7", 512, 7, 7, 512, 3, 1, 1},
    {"r18 3x3 s2 64->128 @56", 64, 56, 56, 128, 3, 2, 1},
    {"r18 3x3 s2 128->256 @28", 128, 28, 28, 256, 3, 2, 1},
    {"r18 3x3 s2 256->512 @14", 256, 14, 14, 512, 3, 2, 1},
    // resnet18 downsamples
    {"r18 1x1 s2 64->128 @56", 64, 56, 56, 128, 1, 2, 0},
    {"r18 1x1 s2 128->256 @28", 128, 28, 28, 256, 1, 2, 0},
    {"r18 1x1 s2 256->512 @14", 256, 14, 14, 512, 1, 2, 0},
    // more mobilenet_v2 pointwise
    {"mbv2 1x1 32->192 @28", 32, 28, 28, 192, 1, 1, 0},
    {"mbv2 1x1 192->32 @28", 192, 28, 28, 32, 1, 1, 0},
    {"mbv2 1x1 64->384 @14", 64, 14, 14, 384, 1, 1, 0},
    // 23-: layer 1 and 0 on a quarter of the pixels (input and output in L2: the cache's share)
    {"1x1 32->16 @56 (L2)", 32, 56, 56, 16, 1, 1, 0},
    {"1x1 16->96 @56", 16, 56, 56, 96, 1, 1, 0},
    // 25-: plain output (a consumer that needs NCHW), grouped (RegNet-style)
    {"1x1 320->1280 @7 plain out", 320, 7, 7, 1280, 1, 1, 0, false, true},
    {"3x3 64 @56 plain out", 64, 56, 56, 64, 3, 1, 1, false, true},
    {"regnet 3x3 g4 64 @28", 64, 28, 28, 64, 3, 1, 1, false, false, 4},
    {"regnet 3x3 g24 384 @7", 384, 7, 7, 384, 3, 1, 1, false, false, 24},
    // 29-: narrow 3x3 stride-1 layers (Winograd's lower channel bound)
    {"3x3 16 @112", 16, 112, 112, 16, 3, 1, 1},
    {"3x3 32 @56", 32, 56, 56, 32, 3, 1, 1},
    // 31-: small maps (Winograd's cost rule)
    {"3x3 256 @7", 256, 7, 7, 256, 3, 1, 1},
    {"3x3 128 @7", 128, 7, 7, 128, 3, 1, 1},
    {"3x3 64 @14", 64, 14, 14, 64, 3, 1, 1},
    {"3x3 32 @8", 32, 8, 8, 32, 3, 1, 1},
}};

std::int64_t out_size(std::int64_t in, const Layer& l) { return (in + 2 * l.pad - l.k) / l.stride + 1; }

double flops(const Layer& l) {
  return 2.0 * static_cast<double>(l.o * out_size(l.h, l) * out_size(l.w, l) * l.c / l.groups * l.k * l.k);
}

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

void set_label(benchmark::State& state, const Layer& l) {
  state.SetLabel(l.name);
  state.counters["GFLOP"] = benchmark::Counter(flops(l) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_Nchwc(benchmark::State& state) {
  const Layer& l = kLayers[static_cast<std::size_t>(state.range(0))];
  const int threads = static_cast<int>(state.range(1)), width = static_cast<int>(state.range(2));
  const auto algorithm = state.range(3);
  const std::int64_t oh = out_size(l.h, l), ow = out_size(l.w, l);
  nchwc::ConvShape s;
  s.in_channels = l.c;
  s.out_channels = l.o;
  s.kh = s.kw = l.k;
  s.stride_h = s.stride_w = l.stride;
  s.pad_h = s.pad_w = l.pad;
  s.groups = l.groups;
  const std::vector<float> w = random_floats(l.o * l.c / l.groups * l.k * l.k, 2), b = random_floats(l.o, 3);
  auto prepared = width == 0 ? nchwc::prepare_dense(w.data(), s) : nchwc::prepare_dense_width(w.data(), s, width);
  if (!prepared.ok()) {
    state.SkipWithError(prepared.status().message().c_str());
    return;
  }
  // As the executor picks (layout_kernels.cpp): Winograd where supported and preferred.
  std::unique_ptr<nchwc::WinogradWeights> winograd;
  if (algorithm == 0 && nchwc::winograd_supported(s) &&
      nchwc::winograd_preferred(s, 1, out_size(l.h, l), out_size(l.w, l), threads)) {
    auto made = nchwc::prepare_winograd(w.data(), s);
    if (!made.ok()) {
      state.SkipWithError(made.status().message().c_str());
      return;
    }
    winograd = std::move(made).value();
  }
  std::vector<float> x = random_floats(nchwc::blocked_floats(1, l.c, l.h, l.w), 1);
  std::vector<float> y(static_cast<std::size_t>(nchwc::blocked_floats(1, l.o, oh, ow)));
  const nchwc::Act xa{x.data(), 1, l.c, l.h, l.w, !l.plain_input}, ya{y.data(), 1, l.o, oh, ow, !l.plain_output};
  nchwc::Epilogue e;
  e.bias = b.data();
  for (auto _ : state) {
    const Status st = winograd != nullptr ? nchwc::conv2d_winograd(xa, *winograd, s, e, ya, pool_for(threads))
                                          : nchwc::conv2d_dense(xa, **prepared, s, e, ya, pool_for(threads));
    if (!st.ok()) {
      state.SkipWithError(st.message().c_str());
      return;
    }
    benchmark::DoNotOptimize(y.data());
  }
  set_label(state, l);
}

class BenchContext final : public KernelContext {
 public:
  BenchContext(ThreadPool& pool, const PreparedWeights* prepared) : pool_(pool), prepared_(prepared) {}
  const PreparedWeights* prepared_weights(int index) const override { return index == 1 ? prepared_ : nullptr; }
  Result<TensorView> allocate_output(int, DType, std::span<const std::int64_t>) override {
    return Status(StatusCode::kInternal, "not used");
  }
  ThreadPool& pool() override { return pool_; }

 private:
  ThreadPool& pool_;
  const PreparedWeights* prepared_;
};

TensorView view(std::vector<float>& data, std::initializer_list<std::int64_t> shape) {
  TensorView v;
  v.dtype = DType::kF32;
  v.rank = static_cast<int>(shape.size());
  std::copy(shape.begin(), shape.end(), v.shape.begin());
  v.data = data.data();
  return v;
}

void BM_Plain(benchmark::State& state) {
  const Layer& l = kLayers[static_cast<std::size_t>(state.range(0))];
  const int threads = static_cast<int>(state.range(1));
  const std::int64_t oh = out_size(l.h, l), ow = out_size(l.w, l);
  std::vector<float> x = random_floats(l.c * l.h * l.w, 1), w = random_floats(l.o * l.c / l.groups * l.k * l.k, 2);
  std::vector<float> b = random_floats(l.o, 3), y(static_cast<std::size_t>(l.o * oh * ow));
  const std::array<TensorView, 3> in{view(x, {1, l.c, l.h, l.w}), view(w, {l.o, l.c / l.groups, l.k, l.k}),
                                     view(b, {l.o})};
  std::array<TensorView, 1> out{view(y, {1, l.o, oh, ow})};
  const std::array<std::int64_t, 2> stride{l.stride, l.stride}, pad{l.pad, l.pad}, dil{1, 1};
  std::array<AttrValue, 4> attrs{};
  attrs[0].type = attrs[1].type = attrs[2].type = AttrType::kInts;
  attrs[0].ints = stride;
  attrs[1].ints = pad;
  attrs[2].ints = dil;
  attrs[3].type = AttrType::kInt;
  attrs[3].i = l.groups;
  auto prepared = prepare_weights(OpKind::Conv2d, 1, in[1], attrs);
  if (!prepared.ok()) {
    state.SkipWithError(prepared.status().message().c_str());
    return;
  }
  BenchContext ctx(pool_for(threads), prepared->get());
  const KernelFn conv = cpu_kernel(OpKind::Conv2d);
  for (auto _ : state) {
    const Status st = conv(ctx, in, out, attrs);
    if (!st.ok()) {
      state.SkipWithError(st.message().c_str());
      return;
    }
    benchmark::DoNotOptimize(y.data());
  }
  set_label(state, l);
}

void NchwcArgs(benchmark::internal::Benchmark* b) {
  for (int i = 0; i < static_cast<int>(kLayers.size()); ++i) {
    for (int t : {1, 2}) b->Args({i, t, 0, 0});
  }
  b->ArgNames({"layer", "threads", "width", "algo"})->UseRealTime()->Unit(benchmark::kMicrosecond);
}

// The direct tiles where conv2d_dense would take Winograd (resnet18's stride-1 3x3 layers).
void DirectArgs(benchmark::internal::Benchmark* b) {
  for (int i : {10, 11, 12, 13, 29, 30, 31, 32, 33, 34}) {
    for (int t : {1, 2}) b->Args({i, t, 0, 1});
  }
  b->ArgNames({"layer", "threads", "width", "algo"})->UseRealTime()->Unit(benchmark::kMicrosecond);
}

// Every width on one thread (tile choice experiments).
void WidthArgs(benchmark::internal::Benchmark* b) {
  for (int i = 0; i < static_cast<int>(kLayers.size()); ++i) {
    for (int width = 1; width <= nchwc::kMaxWidth; ++width) b->Args({i, 1, width, 0});
  }
  b->ArgNames({"layer", "threads", "width", "algo"})->UseRealTime()->Unit(benchmark::kMicrosecond);
}

void PlainArgs(benchmark::internal::Benchmark* b) {
  for (int i = 0; i < static_cast<int>(kLayers.size()); ++i) {
    for (int t : {1, 2}) b->Args({i, t});
  }
  b->ArgNames({"layer", "threads"})->UseRealTime()->Unit(benchmark::kMicrosecond);
}

BENCHMARK(BM_Nchwc)->Apply(NchwcArgs);
BENCHMARK(BM_Nchwc)->Name("BM_NchwcWidth")->Apply(WidthArgs);
BENCHMARK(BM_Nchwc)->Name("BM_NchwcDirect")->Apply(DirectArgs);
BENCHMARK(BM_Plain)->Apply(PlainArgs);

}  // namespace
}  // namespace kiln::cpu

BENCHMARK_MAIN();

// conv2d_winograd (Winograd F(4x4, 3x3) on NCHW8c, nchwc.h) against conv2d_dense (the
// direct NCHW8c kernel) and the plain NCHW conv2d kernel (conv.cpp, weights prepared at
// load: its own Winograd on these layers), on the 3x3 stride-1 layers of resnet18/50 and
// RegNet-like widths at 224x224, batch 1 unless named.
//
//   kiln_nchwc_winograd_bench --benchmark_min_time=0.3 --benchmark_repetitions=5
//                             --benchmark_report_aggregates_only=true
//
// BM_Winograd / BM_Dense: blocked input and output (plain where the name says so), bias
// added, nothing else fused;
// BM_Plain: the NCHW kernel. Reports GFLOP/s-equivalent as "GFLOP=x/s": the direct
// convolution's 2 * K * C * 9 * OH * OW per call over the wall-clock time, so the three
// compare by time. BM_Winograd's `width`: the block-group width (0: prepare_winograd's
// choice); `pick` on BM_Winograd rows says what winograd_preferred would run (1: Winograd).
#include <benchmark/benchmark.h>

#include <array>
#include <cstdint>
#include <memory>
#include <random>
#include <span>
#include <vector>

#include "backends/cpu/kernel.h"
#include "backends/cpu/kernels/conv_nchwc_winograd.h"
#include "backends/cpu/kernels/nchwc.h"
#include "backends/cpu/thread_pool.h"

namespace kiln::cpu {
namespace {

struct Layer {
  const char* name;
  std::int64_t n, c, h, w, o;
  bool plain_input = false, plain_output = false;
};

constexpr std::array<Layer, 20> kLayers = {{
    // resnet18 (and resnet50's bottleneck 3x3: the same shapes)
    {"r18 64 @56", 1, 64, 56, 56, 64},
    {"r18 128 @28", 1, 128, 28, 28, 128},
    {"r18 256 @14", 1, 256, 14, 14, 256},
    {"r18 512 @7", 1, 512, 7, 7, 512},
    // RegNet-like widths (ungrouped here), not multiples of 64
    {"regnet 48 @56", 1, 48, 56, 56, 48},
    {"regnet 104 @28", 1, 104, 28, 28, 104},
    {"regnet 208 @14", 1, 208, 14, 14, 208},
    {"regnet 440 @7", 1, 440, 7, 7, 440},
    // few channels, many pixels
    {"16 @112", 1, 16, 112, 112, 16},
    {"32 @112", 1, 32, 112, 112, 32},
    {"32 @56", 1, 32, 56, 56, 32},
    {"3->32 @112", 1, 3, 112, 112, 32},
    // batch and odd sizes
    {"r18 512 @7 batch 4", 4, 512, 7, 7, 512},
    {"r18 256 @14 batch 4", 4, 256, 14, 14, 256},
    {"r18 64 @56 batch 4", 4, 64, 56, 56, 64},
    {"128 @15", 1, 128, 15, 15, 128},
    {"64->128 @28", 1, 64, 28, 28, 128},
    {"256->512 @14", 1, 256, 14, 14, 512},
    // plain activations on one side (VGG's first layer takes the network's input)
    {"vgg 3->64 @224 plain in", 1, 3, 224, 224, 64, true, false},
    {"64 @56 plain out", 1, 64, 56, 56, 64, false, true},
}};

double flops(const Layer& l) { return 2.0 * static_cast<double>(l.n * l.o * l.h * l.w * l.c * 9); }

ThreadPool& pool_for(int threads) {
  static ThreadPool one(1);
  static ThreadPool two(2);
  return threads == 1 ? one : two;
}

std::vector<float> random_floats(std::int64_t n, unsigned seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& f : v) f = dist(rng);
  return v;
}

nchwc::ConvShape shape_of(const Layer& l) {
  nchwc::ConvShape s;
  s.in_channels = l.c;
  s.out_channels = l.o;
  s.kh = s.kw = 3;
  s.pad_h = s.pad_w = 1;
  return s;
}

void set_label(benchmark::State& state, const Layer& l) {
  state.SetLabel(l.name);
  state.counters["GFLOP"] = benchmark::Counter(flops(l) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// Evicts the caches (a 64 MiB read, untimed; clean lines, so nothing is written back
// later) and reads x and y back, so that the weights come from memory and the activations
// from the caches, as in a network: its weights are touched once per inference and
// outgrow the L3, its activations were just written by the layer before.
void flush_caches(const std::vector<float>& x, const std::vector<float>& y) {
  static const std::vector<float> big(std::size_t{16} << 20, 1.0f);
  float sum = 0.0f;
  for (std::size_t i = 0; i < big.size(); i += 16) sum += big[i];
  for (std::size_t i = 0; i < x.size(); i += 16) sum += x[i];
  for (std::size_t i = 0; i < y.size(); i += 16) sum += y[i];
  benchmark::DoNotOptimize(sum);
}

template <typename Run>
void run_blocked(benchmark::State& state, const Layer& l, const Run& conv, bool cold, ThreadPool& pool) {
  const std::vector<float> b = random_floats(l.o, 3);
  std::vector<float> x = random_floats(nchwc::blocked_floats(l.n, l.c, l.h, l.w), 1);
  std::vector<float> y(static_cast<std::size_t>(nchwc::blocked_floats(l.n, l.o, l.h, l.w)));
  const nchwc::Act xa{x.data(), l.n, l.c, l.h, l.w, !l.plain_input}, ya{y.data(), l.n, l.o, l.h, l.w, !l.plain_output};
  nchwc::Epilogue e;
  e.bias = b.data();
  // One untimed call: the weights' transform (made by the first run) and the buffers.
  if (const Status st = conv(xa, e, ya); !st.ok()) {
    state.SkipWithError(st.message().c_str());
    return;
  }
  for (auto _ : state) {
    if (cold) {
      state.PauseTiming();
      flush_caches(x, y);
      // Wake the workers (asleep after the flush), as the layer before would have.
      pool.parallel_for(pool.num_threads(), 1, [](std::int64_t, std::int64_t) {});
      state.ResumeTiming();
    }
    const Status st = conv(xa, e, ya);
    if (!st.ok()) {
      state.SkipWithError(st.message().c_str());
      return;
    }
    benchmark::DoNotOptimize(y.data());
  }
  set_label(state, l);
}

void BM_Winograd(benchmark::State& state) {
  const Layer& l = kLayers[static_cast<std::size_t>(state.range(0))];
  const int threads = static_cast<int>(state.range(1)), tile = static_cast<int>(state.range(2));
  const bool cold = state.range(3) != 0;
  const int width = static_cast<int>(state.range(4));
  const nchwc::ConvShape s = shape_of(l);
  const std::vector<float> w = random_floats(l.o * l.c * 9, 2);
  auto prepared = width == 0 ? nchwc::prepare_winograd(w.data(), s) : nchwc::prepare_winograd_width(w.data(), s, width);
  if (!prepared.ok()) {
    state.SkipWithError(prepared.status().message().c_str());
    return;
  }
  const nchwc::WinogradTile chosen = tile == 4   ? nchwc::WinogradTile::kF4
                                     : tile == 2 ? nchwc::WinogradTile::kF2
                                                 : nchwc::winograd_tile(s, l.n, l.h, l.w, threads);
  run_blocked(
      state, l,
      [&](const nchwc::Act& x, const nchwc::Epilogue& e, const nchwc::Act& y) {
        return nchwc::conv2d_winograd_tile(nchwc::winograd_kernels(), chosen, x, **prepared, s, e, y,
                                           pool_for(threads));
      },
      cold, pool_for(threads));
  state.counters["pick"] = nchwc::winograd_preferred(s, l.n, l.h, l.w, threads) ? 1 : 0;
  state.counters["est_us"] = nchwc::winograd_estimate_us(chosen, s, l.n, l.h, l.w, threads);
}

void BM_Dense(benchmark::State& state) {
  const Layer& l = kLayers[static_cast<std::size_t>(state.range(0))];
  const int threads = static_cast<int>(state.range(1));
  const bool cold = state.range(2) != 0;
  const nchwc::ConvShape s = shape_of(l);
  const std::vector<float> w = random_floats(l.o * l.c * 9, 2);
  auto prepared = nchwc::prepare_dense(w.data(), s);
  if (!prepared.ok()) {
    state.SkipWithError(prepared.status().message().c_str());
    return;
  }
  run_blocked(
      state, l,
      [&](const nchwc::Act& x, const nchwc::Epilogue& e, const nchwc::Act& y) {
        return nchwc::conv2d_dense(x, **prepared, s, e, y, pool_for(threads));
      },
      cold, pool_for(threads));
  state.counters["est_us"] = nchwc::direct_estimate_us(s, l.n, l.h, l.w, threads);
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
  std::vector<float> x = random_floats(l.n * l.c * l.h * l.w, 1), w = random_floats(l.o * l.c * 9, 2);
  std::vector<float> b = random_floats(l.o, 3), y(static_cast<std::size_t>(l.n * l.o * l.h * l.w));
  const std::array<TensorView, 3> in{view(x, {l.n, l.c, l.h, l.w}), view(w, {l.o, l.c, 3, 3}), view(b, {l.o})};
  std::array<TensorView, 1> out{view(y, {l.n, l.o, l.h, l.w})};
  const std::array<std::int64_t, 2> stride{1, 1}, pad{1, 1}, dil{1, 1};
  std::array<AttrValue, 4> attrs{};
  attrs[0].type = attrs[1].type = attrs[2].type = AttrType::kInts;
  attrs[0].ints = stride;
  attrs[1].ints = pad;
  attrs[2].ints = dil;
  attrs[3].type = AttrType::kInt;
  attrs[3].i = 1;
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

// tile: 0 the cost rule's, 4 F(4x4), 2 F(2x2); cold: caches flushed before each call.
void WinogradArgs(benchmark::internal::Benchmark* b) {
  for (int i = 0; i < static_cast<int>(kLayers.size()); ++i) {
    for (int t : {1, 2}) {
      for (int tile : {0, 4, 2}) {
        for (int cold : {0, 1}) b->Args({i, t, tile, cold, 0});
      }
    }
  }
  b->ArgNames({"layer", "threads", "tile", "cold", "width"})->UseRealTime()->Unit(benchmark::kMicrosecond);
}

// Widths 2, 4 and 6 with each tile size on one thread (register tile experiments).
void WidthArgs(benchmark::internal::Benchmark* b) {
  for (int i = 0; i < static_cast<int>(kLayers.size()); ++i) {
    for (int tile : {4, 2}) {
      for (int width : {2, 4, 6}) b->Args({i, 1, tile, 0, width});
    }
  }
  b->ArgNames({"layer", "threads", "tile", "cold", "width"})->UseRealTime()->Unit(benchmark::kMicrosecond);
}

void DenseArgs(benchmark::internal::Benchmark* b) {
  for (int i = 0; i < static_cast<int>(kLayers.size()); ++i) {
    for (int t : {1, 2}) {
      for (int cold : {0, 1}) b->Args({i, t, cold});
    }
  }
  b->ArgNames({"layer", "threads", "cold"})->UseRealTime()->Unit(benchmark::kMicrosecond);
}

void LayerArgs(benchmark::internal::Benchmark* b) {
  for (int i = 0; i < static_cast<int>(kLayers.size()); ++i) {
    for (int t : {1, 2}) b->Args({i, t});
  }
  b->ArgNames({"layer", "threads"})->UseRealTime()->Unit(benchmark::kMicrosecond);
}

BENCHMARK(BM_Winograd)->Apply(WinogradArgs);
BENCHMARK(BM_Winograd)->Name("BM_WinogradWidth")->Apply(WidthArgs);
BENCHMARK(BM_Dense)->Apply(DenseArgs);
BENCHMARK(BM_Plain)->Apply(LayerArgs);

}  // namespace
}  // namespace kiln::cpu

BENCHMARK_MAIN();

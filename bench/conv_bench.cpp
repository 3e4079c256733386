// conv2d throughput: Kiln's conv2d kernel (whatever path it picks: Winograd F(4x4, 3x3) for
// 3x3 stride-1 layers with enough channels and tiles, the direct AVX2 convolution up to 64
// output channels per group, im2col + SGEMM above) against im2col +
// OpenBLAS sgemm, the classic CPU lowering (PyTorch's slow_conv2d), on the same inputs.
//
//   kiln_conv_bench --benchmark_min_time=0.5 --benchmark_repetitions=3
//
// KILN_CONV_WINOGRAD=0 gives the paths without Winograd; alternate the two in one run:
//
//   for r in 1 2 3; do for wg in 0 1; do
//     KILN_CONV_WINOGRAD=$wg kiln_conv_bench --benchmark_filter='BM_KilnConv2d/case:[4-7]/threads:2'
//   done; done
//
// prepared:1 runs with the weights prepared once at load (prepare_weights, the Winograd
// transform packed), as a loaded Program does; prepared:0 as a call with raw weights.
// Single-thread CPU time on a loaded machine (--benchmark_filter='.*/threads:1/.*'):
// compare within one run and alternate.
//
// Reports GFLOP/s as "GFLOP=x/s" (2 * N * O * OH * OW * C/groups * KH * KW per call, wall-clock;
// for Winograd the direct convolution's count, i.e. an effective rate). The shapes: cases 0-7
// the 3x3 convolutions of the convnet fixture (16 and 32 channels) and of resnet18's stages
// at 224x224 (64@56, 128@28, 256@14, 512@7); 8-11 1x1 convolutions (resnet18's stride-2
// downsample, mobilenet_v2's expand / project); 12-16 depthwise 3x3 (stride 2 and 1) and
// 5x5 of mobile networks; 17-19 more depthwise (stride 2 at 56 px, 5x5 stride 2, 32@112);
// 20 a 1x1 over 7x7 pixels (with prepared weights: the transposed GEMM, conv_pointwise.h).
// KILN_CONV_PREPACK=0 selects the older GEMM path; KILN_CONV_DEPTHWISE=rows the per-plane
// depthwise rows kernel and =0 the older direct depthwise tiles, instead of the
// channel-blocked kernel:
//
//   for m in rows blocked; do
//     KILN_CONV_DEPTHWISE=$m kiln_conv_bench --benchmark_filter='BM_KilnConv2d/case:1[2-9]/threads:./prepared:1'
//   done
//
// Numbers are noisy on a shared machine: repeat and take the best.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <random>
#include <span>
#include <vector>

#if defined(KILN_HAVE_OPENBLAS)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpedantic"
#include <cblas.h>
#pragma GCC diagnostic pop
extern "C" void openblas_set_num_threads(int);
#endif

#include "backends/cpu/kernel.h"
#include "backends/cpu/thread_pool.h"

namespace kiln::cpu {
namespace {

struct Case {
  std::int64_t n, c, h, w, o, k, stride, groups = 1;
};

// Indexed by benchmark argument.
constexpr std::array<Case, 21> kCases = {{
    {3, 16, 32, 32, 16, 3, 1},   // convnet block at 64 px, batch 3
    {2, 16, 48, 48, 16, 3, 1},   // convnet block at 96 px, batch 2
    {3, 3, 64, 64, 16, 3, 2},    // convnet stem
    {1, 32, 28, 28, 32, 3, 1},
    {1, 64, 56, 56, 64, 3, 1},   // ResNet stage 1
    {1, 128, 28, 28, 128, 3, 1}, // stage 2
    {1, 256, 14, 14, 256, 3, 1}, // stage 3
    {1, 512, 7, 7, 512, 3, 1},   // stage 4 (resnet18's layer4.1.conv1)
    // 8-: 1x1 (the GEMM paths; weights prepacked when prepared:1)
    {1, 128, 28, 28, 256, 1, 2},  // resnet18 layer3.0.downsample (stride 2)
    {1, 24, 56, 56, 144, 1, 1},   // mobilenet_v2 expand
    {1, 144, 56, 56, 24, 1, 1},   // mobilenet_v2 project
    {1, 320, 7, 7, 1280, 1, 1},   // mobilenet_v2 features.18
    // 12-: depthwise (groups = channels)
    {1, 96, 112, 112, 96, 3, 2, 96},  // mobilenet_v2 features.2 depthwise, stride 2
    {1, 144, 56, 56, 144, 3, 1, 144}, // features.3 depthwise
    {1, 384, 14, 14, 384, 3, 1, 384}, // features.7-10 depthwise
    {1, 960, 7, 7, 960, 3, 1, 960},   // features.14-17 depthwise
    {1, 240, 14, 14, 240, 5, 1, 240}, // 5x5 depthwise (EfficientNet / MobileNetV3)
    // 17-: more depthwise strides and sizes, and 1x1 over 7x7 (the transposed GEMM)
    {1, 144, 56, 56, 144, 3, 2, 144}, // mobilenet_v2 features.4 depthwise, stride 2
    {1, 672, 14, 14, 672, 5, 2, 672}, // EfficientNet-B0 5x5 stride 2
    {1, 32, 112, 112, 32, 3, 1, 32},  // mobilenet_v2 features.1 depthwise
    {1, 960, 7, 7, 320, 1, 1},        // mobilenet_v2 features.17 project (1x1 on 49 pixels)
}};

std::int64_t out_size(std::int64_t in, std::int64_t k, std::int64_t s) { return (in + 2 * (k / 2) - k) / s + 1; }

double flops(const Case& c) {
  return 2.0 * static_cast<double>(c.n * c.o * out_size(c.h, c.k, c.stride) * out_size(c.w, c.k, c.stride) * (c.c / c.groups) *
                                   c.k * c.k);
}

ThreadPool& pool_for(int threads) {
  static ThreadPool one(1);
  static ThreadPool two(2);
  return threads == 1 ? one : two;
}

class BenchContext final : public KernelContext {
 public:
  explicit BenchContext(ThreadPool& pool, const PreparedWeights* prepared = nullptr) : pool_(pool), prepared_(prepared) {}
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

std::vector<float> random_floats(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& f : v) f = dist(rng);
  return v;
}

// Range 2: 1 = weights prepared once (prepare_weights), as a loaded Program does.
void BM_KilnConv2d(benchmark::State& state) {
  const Case& c = kCases[static_cast<std::size_t>(state.range(0))];
  const int threads = static_cast<int>(state.range(1));
  const std::int64_t oh = out_size(c.h, c.k, c.stride), ow = out_size(c.w, c.k, c.stride);
  std::vector<float> x = random_floats(static_cast<std::size_t>(c.n * c.c * c.h * c.w), 1);
  std::vector<float> w = random_floats(static_cast<std::size_t>(c.o * (c.c / c.groups) * c.k * c.k), 2);
  std::vector<float> b = random_floats(static_cast<std::size_t>(c.o), 3);
  std::vector<float> y(static_cast<std::size_t>(c.n * c.o * oh * ow));
  const std::array<TensorView, 3> in{view(x, {c.n, c.c, c.h, c.w}), view(w, {c.o, c.c / c.groups, c.k, c.k}),
                                     view(b, {c.o})};
  std::array<TensorView, 1> out{view(y, {c.n, c.o, oh, ow})};
  const std::array<std::int64_t, 2> stride{c.stride, c.stride}, pad{c.k / 2, c.k / 2}, dil{1, 1};
  std::array<AttrValue, 4> attrs{};
  attrs[0].type = attrs[1].type = attrs[2].type = AttrType::kInts;
  attrs[0].ints = stride;
  attrs[1].ints = pad;
  attrs[2].ints = dil;
  attrs[3].type = AttrType::kInt;
  attrs[3].i = c.groups;
  std::unique_ptr<PreparedWeights> prepared;
  if (state.range(2) == 1) {
    auto made = prepare_weights(OpKind::Conv2d, 1, in[1], attrs);
    if (!made.ok()) {
      state.SkipWithError(made.status().message().c_str());
      return;
    }
    prepared = std::move(made).value();
  }
  BenchContext ctx(pool_for(threads), prepared.get());
  const KernelFn conv = cpu_kernel(OpKind::Conv2d);
  for (auto _ : state) {
    const Status s = conv(ctx, in, out, attrs);
    if (!s.ok()) {
      state.SkipWithError(s.message().c_str());
      return;
    }
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GFLOP"] = benchmark::Counter(flops(c) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

#if defined(KILN_HAVE_OPENBLAS)
// im2col (one image at a time, the whole patch matrix) + cblas_sgemm, then the bias.
void BM_Im2colOpenBlas(benchmark::State& state) {
  const Case& c = kCases[static_cast<std::size_t>(state.range(0))];
  if (c.groups != 1) {
    state.SkipWithError("grouped: not measured");
    return;
  }
  openblas_set_num_threads(static_cast<int>(state.range(1)));
  const std::int64_t oh = out_size(c.h, c.k, c.stride), ow = out_size(c.w, c.k, c.stride), pad = c.k / 2;
  std::vector<float> x = random_floats(static_cast<std::size_t>(c.n * c.c * c.h * c.w), 1);
  std::vector<float> w = random_floats(static_cast<std::size_t>(c.o * c.c * c.k * c.k), 2);
  std::vector<float> b = random_floats(static_cast<std::size_t>(c.o), 3);
  std::vector<float> y(static_cast<std::size_t>(c.n * c.o * oh * ow));
  std::vector<float> col(static_cast<std::size_t>(c.c * c.k * c.k * oh * ow));
  for (auto _ : state) {
    for (std::int64_t img = 0; img < c.n; ++img) {
      const float* src = x.data() + img * c.c * c.h * c.w;
      for (std::int64_t ch = 0; ch < c.c; ++ch) {
        for (std::int64_t i = 0; i < c.k; ++i) {
          for (std::int64_t j = 0; j < c.k; ++j) {
            float* dst = col.data() + ((ch * c.k + i) * c.k + j) * oh * ow;
            for (std::int64_t oy = 0; oy < oh; ++oy) {
              const std::int64_t iy = oy * c.stride - pad + i;
              for (std::int64_t ox = 0; ox < ow; ++ox) {
                const std::int64_t ix = ox * c.stride - pad + j;
                dst[oy * ow + ox] = iy >= 0 && iy < c.h && ix >= 0 && ix < c.w ? src[(ch * c.h + iy) * c.w + ix] : 0.0f;
              }
            }
          }
        }
      }
      float* out = y.data() + img * c.o * oh * ow;
      for (std::int64_t o = 0; o < c.o; ++o) std::fill(out + o * oh * ow, out + (o + 1) * oh * ow, b[static_cast<std::size_t>(o)]);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(c.o), static_cast<int>(oh * ow),
                  static_cast<int>(c.c * c.k * c.k), 1.0f, w.data(), static_cast<int>(c.c * c.k * c.k), col.data(),
                  static_cast<int>(oh * ow), 1.0f, out, static_cast<int>(oh * ow));
    }
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GFLOP"] = benchmark::Counter(flops(c) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}
#endif

void Args(benchmark::internal::Benchmark* b) {
  for (int i = 0; i < static_cast<int>(kCases.size()); ++i) {
    for (int t : {1, 2}) b->Args({i, t});
  }
  b->ArgNames({"case", "threads"})->UseRealTime()->Unit(benchmark::kMicrosecond);
}

void KilnArgs(benchmark::internal::Benchmark* b) {
  for (int i = 0; i < static_cast<int>(kCases.size()); ++i) {
    for (int t : {1, 2}) {
      for (int prepared : {0, 1}) b->Args({i, t, prepared});
    }
  }
  b->ArgNames({"case", "threads", "prepared"})->UseRealTime()->Unit(benchmark::kMicrosecond);
}

BENCHMARK(BM_KilnConv2d)->Apply(KilnArgs);
#if defined(KILN_HAVE_OPENBLAS)
BENCHMARK(BM_Im2colOpenBlas)->Apply(Args);
#endif

}  // namespace
}  // namespace kiln::cpu

BENCHMARK_MAIN();

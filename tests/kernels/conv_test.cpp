// conv2d's Winograd F(4x4, 3x3) path (conv_winograd.h) against a naive reference
// convolution in double over randomized shapes, unprepared and with weights prepared at
// load (winograd_prepare), its cost rule, and the conv2d kernel taking it for layers with
// many channels; every fused activation on every conv2d path.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string_view>
#include <vector>

#include "backends/cpu/kernels/conv_prepared.h"
#include "backends/cpu/kernels/conv_winograd.h"
#include "backends/cpu/thread_pool.h"
#include "kernel_testutil.h"

namespace kiln::cpu::testing {
namespace {

using kernels::WinogradShape;

WinogradShape shape_of(std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w, std::int64_t k,
                       std::int64_t pad_h, std::int64_t pad_w) {
  return WinogradShape{.n = n, .c = c, .h = h, .w = w, .k = k, .pad_h = pad_h, .pad_w = pad_w,
                       .oh = h + 2 * pad_h - 2, .ow = w + 2 * pad_w - 2};
}

// The exact 3x3 convolution (double) and, per output, |bias| + the sum of |w| over its output
// channel: with inputs in [-1, 1] the largest value the output could reach, the scale
// that float rounding errors are relative to (the transforms mix all 36 inputs of a tile,
// so an output whose own window is mostly padding still carries its neighbours' error).
struct Reference {
  std::vector<double> y, scale;
};

Reference reference(const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>* bias,
                    const WinogradShape& s, bool relu) {
  Reference r;
  const std::size_t size = static_cast<std::size_t>(s.n * s.k * s.oh * s.ow);
  r.y.assign(size, 0.0);
  r.scale.assign(size, 0.0);
  for (std::int64_t img = 0; img < s.n; ++img) {
    for (std::int64_t o = 0; o < s.k; ++o) {
      for (std::int64_t oy = 0; oy < s.oh; ++oy) {
        for (std::int64_t ox = 0; ox < s.ow; ++ox) {
          double sum = bias != nullptr ? (*bias)[static_cast<std::size_t>(o)] : 0.0, mag = std::abs(sum);
          for (std::int64_t t = 0; t < s.c * 9; ++t) mag += std::abs(w[static_cast<std::size_t>(o * s.c * 9 + t)]);
          for (std::int64_t c = 0; c < s.c; ++c) {
            for (std::int64_t i = 0; i < 3; ++i) {
              for (std::int64_t j = 0; j < 3; ++j) {
                const std::int64_t iy = oy - s.pad_h + i, ix = ox - s.pad_w + j;
                if (iy < 0 || iy >= s.h || ix < 0 || ix >= s.w) continue;
                const double p = static_cast<double>(x[static_cast<std::size_t>(((img * s.c + c) * s.h + iy) * s.w + ix)]) *
                                 w[static_cast<std::size_t>(((o * s.c + c) * 3 + i) * 3 + j)];
                sum += p;
              }
            }
          }
          const auto at = static_cast<std::size_t>(((img * s.k + o) * s.oh + oy) * s.ow + ox);
          r.y[at] = relu ? std::max(sum, 0.0) : sum;
          r.scale[at] = mag;
        }
      }
    }
  }
  return r;
}

std::vector<float> uniform(std::mt19937& rng, std::int64_t n) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& f : v) f = dist(rng);
  return v;
}

// Runs the Winograd path on random data and returns max |got - exact| / scale; fails the
// test on any NaN or an element past the output.
// With `prepared`, the weights are transformed and packed first (winograd_prepare) and the
// kernel runs the prepared GEMMs.
double winograd_relative_error(const WinogradShape& s, bool with_bias, bool relu, std::mt19937& rng, ThreadPool& pool,
                               bool prepared = false) {
  const std::vector<float> x = uniform(rng, s.n * s.c * s.h * s.w);
  const std::vector<float> w = uniform(rng, s.k * s.c * 9);
  const std::vector<float> b = uniform(rng, s.k);
  const std::int64_t out_size = s.n * s.k * s.oh * s.ow;
  std::vector<float> y(static_cast<std::size_t>(out_size + 16), 12345.0f);  // the tail is a canary
  std::unique_ptr<kernels::WinogradWeights> u;
  if (prepared) {
    auto made = kernels::winograd_prepare(w.data(), s.k, s.c);
    EXPECT_TRUE(made.ok()) << made.status().message();
    if (!made.ok()) return INFINITY;
    u = std::move(made).value();
  }
  const Status st =
      kernels::conv_winograd_f32(x.data(), w.data(), u.get(), with_bias ? b.data() : nullptr, y.data(), s, pool, relu);
  EXPECT_TRUE(st.ok()) << st.message();
  const Reference r = reference(x, w, with_bias ? &b : nullptr, s, relu);
  double worst = 0.0;
  for (std::size_t i = 0; i < r.y.size(); ++i) {
    const double err = std::abs(static_cast<double>(y[i]) - r.y[i]) / std::max(r.scale[i], 1e-30);
    if (std::isnan(err)) return INFINITY;
    worst = std::max(worst, err);
  }
  for (std::size_t i = static_cast<std::size_t>(out_size); i < y.size(); ++i) EXPECT_EQ(y[i], 12345.0f) << "wrote past the output";
  return worst;
}

// F(4x4, 3x3) rounding error relative to |bias| + sum |w| (inputs in [-1, 1]). A direct
// float sum's is ~1e-8 typically; the transforms scale tile values by up to 10 (B^T) and
// 19 (A^T rows) before the rounding of the 36 products, so Winograd is ~10-50x less
// accurate. Measured worst over the cases below: see docs/PERFORMANCE.md; the bound
// leaves ~2x headroom.
constexpr double kRelativeBound = 4e-6;

TEST(WinogradConv, MatchesReferenceOverRandomShapes) {
  std::mt19937 rng(14);
  ThreadPool pool(2);
  std::uniform_int_distribution<std::int64_t> batch(1, 3), channels(1, 21), size(1, 19), pad(0, 2), coin(0, 1);
  int run = 0;
  while (run < 60) {
    const std::int64_t ph = pad(rng), pw = pad(rng), h = size(rng), w = size(rng);
    if (h + 2 * ph < 3 || w + 2 * pw < 3) continue;  // no output
    const WinogradShape s = shape_of(batch(rng), channels(rng), h, w, channels(rng), ph, pw);
    const bool with_bias = coin(rng) == 1, relu = coin(rng) == 1, prepared = coin(rng) == 1;
    const double err = winograd_relative_error(s, with_bias, relu, rng, pool, prepared);
    EXPECT_LT(err, kRelativeBound) << "n=" << s.n << " c=" << s.c << " h=" << h << " w=" << w << " k=" << s.k
                                   << " pad=" << ph << "," << pw << " bias=" << with_bias << " relu=" << relu
                                   << " prepared=" << prepared;
    ++run;
  }
}

TEST(WinogradConv, StaysAccurateWithManyChannels) {
  // Longer reductions than the random cases, a 1-tile-wide edge (13 = 3 * 4 + 1) and an
  // 8-lane group plus a tail (36 outputs = 9 tiles per row), on one thread and on two.
  std::mt19937 rng(15);
  // Prepared: also a 7x7 plane (4 tiles, fewer GEMM rows than the micro-kernel's 6).
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    for (bool prepared : {false, true}) {
      for (const WinogradShape& s : {shape_of(1, 131, 13, 13, 67, 1, 1), shape_of(2, 40, 36, 20, 24, 1, 1),
                                     shape_of(1, 256, 14, 14, 32, 1, 1), shape_of(1, 96, 7, 7, 70, 1, 1)}) {
        EXPECT_LT(winograd_relative_error(s, true, false, rng, pool, prepared), kRelativeBound)
            << "c=" << s.c << " k=" << s.k << " threads=" << threads << " prepared=" << prepared;
      }
    }
  }
}

TEST(WinogradConv, PreparedSlicesOverTileCountsWithNarrowTails) {
  // Prepared weights (each U[xi] as sgemm_packed_a's A, tiles as the GEMM's columns) at
  // tile counts whose last 16-column panel has 1 (49), 4 (196, and 36 over a batch of 3)
  // or 8 (24) live columns (the SGEMM's narrow tiles), output channels not a
  // multiple of the 6-row panel, on one and two threads.
  std::mt19937 rng(19);
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    for (const WinogradShape& s : {shape_of(1, 64, 28, 28, 70, 1, 1), shape_of(1, 65, 56, 56, 64, 1, 1),
                                   shape_of(1, 72, 10, 30, 66, 1, 1), shape_of(3, 33, 9, 23, 13, 0, 1)}) {
      EXPECT_LT(winograd_relative_error(s, true, threads == 2, rng, pool, /*prepared=*/true), kRelativeBound)
          << "n=" << s.n << " c=" << s.c << " tiles=" << s.tiles() << " k=" << s.k << " threads=" << threads;
    }
  }
}

TEST(WinogradConv, HandlesRowsWiderThanItsRowBuffer) {
  // Over 1024 padded columns the input transform reads the plane with bounds checks instead
  // of through its zero-padded row copy; both ISAs, padding 0 to 2.
  std::mt19937 rng(18);
  ThreadPool pool(2);
  for (std::int64_t pad : {0, 1, 2}) {
    const WinogradShape s = shape_of(1, 3, 6, 1030 + pad, 5, pad, pad);
    EXPECT_LT(winograd_relative_error(s, true, true, rng, pool), kRelativeBound) << "pad=" << pad;
  }
}

TEST(WinogradConv, CostRuleWantsChannelsAndTiles) {
  // resnet18's 3x3 stages at 224x224: 64@56 (196 tiles) and 128@28 (49) take it; 256@14
  // (16) and 512@7 (4) have too few tiles to pay for transforming and packing the weights
  // on every call, unless a batch brings them.
  EXPECT_TRUE(kernels::winograd_profitable(shape_of(1, 64, 56, 56, 64, 1, 1), false));
  EXPECT_TRUE(kernels::winograd_profitable(shape_of(1, 128, 28, 28, 128, 1, 1), false));
  EXPECT_FALSE(kernels::winograd_profitable(shape_of(1, 256, 14, 14, 256, 1, 1), false));
  EXPECT_FALSE(kernels::winograd_profitable(shape_of(1, 512, 7, 7, 512, 1, 1), false));
  EXPECT_TRUE(kernels::winograd_profitable(shape_of(8, 512, 7, 7, 512, 1, 1), false));
  EXPECT_FALSE(kernels::winograd_profitable(shape_of(1, 16, 96, 96, 16, 1, 1), false));  // thin: the direct path
  EXPECT_FALSE(kernels::winograd_profitable(shape_of(1, 32, 28, 28, 32, 1, 1), false));
  EXPECT_FALSE(kernels::winograd_profitable(shape_of(1, 64, 28, 28, 32, 1, 1), false));
  EXPECT_FALSE(kernels::winograd_profitable(shape_of(1, 3, 224, 224, 64, 1, 1), false));
  // Weights prepared at load: from 8 tiles, so layer3 (16) takes it, layer4 (4) at batch 2.
  EXPECT_TRUE(kernels::winograd_profitable(shape_of(1, 256, 14, 14, 256, 1, 1), true));
  EXPECT_TRUE(kernels::winograd_profitable(shape_of(1, 64, 56, 56, 64, 1, 1), true));
  EXPECT_FALSE(kernels::winograd_profitable(shape_of(1, 512, 7, 7, 512, 1, 1), true));
  EXPECT_TRUE(kernels::winograd_profitable(shape_of(2, 512, 7, 7, 512, 1, 1), true));
  EXPECT_FALSE(kernels::winograd_profitable(shape_of(1, 32, 28, 28, 32, 1, 1), true));
}

TEST(WinogradConv, Conv2dKernelTakesItForWideLayers) {
  // Through cpu_kernel(OpKind::Conv2d): 72 -> 65 channels on 2 x 18 x 21 (30 tiles), bias.
  // The result is bit-identical to conv_winograd_f32's, so the kernel took that path.
  std::mt19937 rng(16);
  const WinogradShape s = shape_of(2, 72, 18, 21, 65, 1, 1);
  ASSERT_TRUE(kernels::winograd_profitable(s, false));
  Tensor x = Tensor::random(DType::kF32, {s.n, s.c, s.h, s.w}, rng, -1.0, 1.0);
  Tensor w = Tensor::random(DType::kF32, {s.k, s.c, 3, 3}, rng, -1.0, 1.0);
  Tensor b = Tensor::random(DType::kF32, {s.k}, rng, -1.0, 1.0);
  Tensor out(DType::kF32, {s.n, s.k, s.oh, s.ow});
  ASSERT_TRUE(run(OpKind::Conv2d, {&x, &w, &b}, {&out}, AttrList().ints({1, 1}).ints({1, 1}).ints({1, 1}).i(1)).ok());
  EXPECT_TRUE(out.canary_intact());
  std::vector<float> direct(static_cast<std::size_t>(out.numel()));
  ThreadPool pool(1);
  ASSERT_TRUE(kernels::conv_winograd_f32(x.as<float>(), w.as<float>(), nullptr, b.as<float>(), direct.data(), s, pool, false).ok());
  std::vector<double> want(direct.begin(), direct.end());
  EXPECT_TRUE(all_equal(out, want));
  std::vector<float> xf(x.as<float>(), x.as<float>() + x.numel()), wf(w.as<float>(), w.as<float>() + w.numel()),
      bf(b.as<float>(), b.as<float>() + b.numel());
  const Reference r = reference(xf, wf, &bf, s, false);
  for (std::size_t i = 0; i < r.y.size(); ++i) {
    ASSERT_LT(std::abs(direct[i] - r.y[i]), kRelativeBound * r.scale[i]) << "at " << i;
  }
}

// A context that asks the kernel to apply a fused activation (as the executor does for
// conv2d -> relu etc.) and, optionally, hands it prepared weights.
class FusedContext : public TestContext {
 public:
  FusedActivation act = FusedActivation::kNone;
  const PreparedWeights* prepared = nullptr;
  FusedActivation fused_activation() const override { return act; }
  const PreparedWeights* prepared_weights(int index) const override { return index == 1 ? prepared : nullptr; }
};

double activate_ref(FusedActivation act, double v) {
  switch (act) {
    case FusedActivation::kNone: return v;
    case FusedActivation::kRelu: return std::max(v, 0.0);
    case FusedActivation::kGeluTanh: return 0.5 * v * (1.0 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
    case FusedActivation::kGeluErf: return 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
    case FusedActivation::kSilu: return v / (1.0 + std::exp(-v));
    case FusedActivation::kRelu6: return std::min(std::max(v, 0.0), 6.0);
    case FusedActivation::kHardswish: return v * std::min(std::max(v + 3.0, 0.0), 6.0) / 6.0;
    case FusedActivation::kHardsigmoid: return std::min(std::max(v + 3.0, 0.0), 6.0) / 6.0;
  }
  return v;
}

TEST(Conv2dKernel, AppliesEveryFusedActivationOnEveryPath) {
  struct Case {
    Shape x, w;
    std::int64_t stride, pad, groups;
    const char* path;
  };
  const std::vector<Case> cases = {
      {{1, 8, 9, 11}, {16, 8, 3, 3}, 1, 1, 1, "direct"},
      {{2, 72, 17, 13}, {80, 72, 3, 3}, 1, 1, 1, "winograd"},
      {{2, 64, 7, 7}, {96, 64, 3, 3}, 1, 1, 1, "winograd, prepared, 8 tiles"},
      {{1, 24, 9, 9}, {130, 24, 3, 3}, 2, 1, 1, "im2col + SGEMM, 3x3 stride 2"},
      {{2, 40, 7, 5}, {129, 40, 1, 1}, 1, 0, 1, "1x1 GEMM over the planes"},
      {{1, 36, 9, 9}, {132, 36, 1, 1}, 2, 0, 1, "1x1 stride 2 (im2col)"},
      {{2, 6, 5, 7}, {6, 1, 1, 1}, 1, 0, 6, "depthwise 1x1"},
      {{1, 12, 9, 8}, {12, 1, 3, 3}, 2, 1, 12, "depthwise 3x3 stride 2 (direct)"},
  };
  const FusedActivation acts[] = {FusedActivation::kRelu, FusedActivation::kRelu6, FusedActivation::kHardswish,
                                  FusedActivation::kHardsigmoid, FusedActivation::kSilu, FusedActivation::kGeluErf};
  std::mt19937 rng(17);
  for (const Case& c : cases) {
    const std::int64_t n = c.x[0], ch = c.x[1], h = c.x[2], wd = c.x[3], o = c.w[0], cg = c.w[1], k = c.w[2];
    const std::int64_t oh = (h + 2 * c.pad - k) / c.stride + 1, ow = (wd + 2 * c.pad - k) / c.stride + 1;
    // Inputs in [-2, 2]: outputs spread over [-8, 8] and beyond, past every kink (-3, 0, 3, 6).
    Tensor x = Tensor::random(DType::kF32, c.x, rng, -2.0, 2.0);
    Tensor w = Tensor::random(DType::kF32, c.w, rng, -1.0, 1.0);
    Tensor b = Tensor::random(DType::kF32, {o}, rng, -1.0, 1.0);
    std::vector<double> sums(static_cast<std::size_t>(n * o * oh * ow));
    for (std::int64_t img = 0; img < n; ++img) {
      for (std::int64_t oc = 0; oc < o; ++oc) {
        const std::int64_t g = oc / (o / c.groups);
        for (std::int64_t y = 0; y < oh; ++y) {
          for (std::int64_t xx = 0; xx < ow; ++xx) {
            double sum = b.at(oc);
            for (std::int64_t ci = 0; ci < cg; ++ci) {
              for (std::int64_t i = 0; i < k; ++i) {
                for (std::int64_t j = 0; j < k; ++j) {
                  const std::int64_t iy = y * c.stride - c.pad + i, ix = xx * c.stride - c.pad + j;
                  if (iy < 0 || iy >= h || ix < 0 || ix >= wd) continue;
                  sum += x.at(((img * ch + g * cg + ci) * h + iy) * wd + ix) * w.at(((oc * cg + ci) * k + i) * k + j);
                }
              }
            }
            sums[static_cast<std::size_t>(((img * o + oc) * oh + y) * ow + xx)] = sum;
          }
        }
      }
    }
    std::unique_ptr<PreparedWeights> prepared;
    if (std::string_view(c.path).find("prepared") != std::string_view::npos) {
      auto made = prepare_weights(OpKind::Conv2d, 1, w.view(), AttrList().ints({1, 1}).ints({1, 1}).ints({1, 1}).i(1).span());
      ASSERT_TRUE(made.ok()) << made.status().message();
      prepared = std::move(made).value();
      ASSERT_NE(prepared, nullptr);
    }
    for (FusedActivation act : acts) {
      std::vector<double> want(sums.size());
      for (std::size_t i = 0; i < sums.size(); ++i) want[i] = activate_ref(act, sums[i]);
      Tensor out(DType::kF32, {n, o, oh, ow});
      std::vector<TensorView> ov{out.view()};
      FusedContext ctx;
      ctx.act = act;
      ctx.prepared = prepared.get();
      const Status st = run_views(OpKind::Conv2d, {x.view(), w.view(), b.view()}, ov,
                                  AttrList().ints({c.stride, c.stride}).ints({c.pad, c.pad}).ints({1, 1}).i(c.groups), &ctx);
      ASSERT_TRUE(st.ok()) << c.path << " +" << activation_name(act) << ": " << st.message();
      // Winograd's error scales with |bias| + max|x| sum|w| of the channel (kRelativeBound);
      // the activations' slopes are at most 1.5 (hardswish at 3).
      const std::int64_t plane = oh * ow;
      for (std::size_t i = 0; i < want.size(); ++i) {
        const std::int64_t oc = static_cast<std::int64_t>(i) / plane % o;
        double mag = std::abs(b.at(oc));
        for (std::int64_t t = 0; t < cg * k * k; ++t) mag += 2.0 * std::abs(w.at(oc * cg * k * k + t));
        const double tol = 1e-5 + 1e-5 * std::abs(want[i]) + 1.5 * kRelativeBound * mag;
        ASSERT_NEAR(out.as<float>()[i], want[i], tol) << c.path << " +" << activation_name(act) << " at " << i;
      }
      EXPECT_TRUE(out.canary_intact()) << c.path << " +" << activation_name(act);
    }
  }
}

TEST(Conv2dKernel, PreparesWeightsForThePathsThatUseThem) {
  std::mt19937 rng(19);
  // "winograd", "gemm", "both" or "none": the parts of the ConvWeights made.
  auto prepare = [&](Shape w_shape, std::vector<std::int64_t> stride, std::vector<std::int64_t> dilation,
                     std::int64_t groups) -> std::string {
    Tensor w = Tensor::random(DType::kF32, w_shape, rng, -1.0, 1.0);
    auto made = prepare_weights(OpKind::Conv2d, 1, w.view(), AttrList().ints(stride).ints({1, 1}).ints(dilation).i(groups).span());
    EXPECT_TRUE(made.ok()) << made.status().message();
    if (!made.ok() || *made == nullptr) return "none";
    const auto* cw = static_cast<const kernels::ConvWeights*>(made->get());
    return cw->winograd_eligible && cw->gemm != nullptr ? "both" : cw->winograd_eligible ? "winograd" : "gemm";
  };
  EXPECT_EQ(prepare({64, 64, 3, 3}, {1, 1}, {1, 1}, 1), "winograd");  // 64 outputs: the direct path otherwise
  EXPECT_EQ(prepare({512, 256, 3, 3}, {1}, {1}, 1), "both");          // Winograd, or the GEMM on small images
  EXPECT_EQ(prepare({64, 32, 3, 3}, {1, 1}, {1, 1}, 1), "none");     // direct
  EXPECT_EQ(prepare({32, 64, 3, 3}, {1, 1}, {1, 1}, 1), "none");     // direct
  EXPECT_EQ(prepare({128, 64, 3, 3}, {2, 2}, {1, 1}, 1), "gemm");    // stride 2
  EXPECT_EQ(prepare({128, 64, 3, 3}, {1, 1}, {2, 2}, 1), "gemm");    // dilated
  EXPECT_EQ(prepare({256, 64, 3, 3}, {1, 1}, {1, 1}, 2), "gemm");    // grouped, 128 outputs per group
  EXPECT_EQ(prepare({128, 64, 3, 3}, {1, 1}, {1, 1}, 2), "none");    // grouped, 64 per group: direct
  EXPECT_EQ(prepare({128, 64, 1, 1}, {1, 1}, {1, 1}, 1), "gemm");    // 1x1
  EXPECT_EQ(prepare({16, 8, 1, 1}, {1, 1}, {1, 1}, 1), "gemm");      // 1x1, few channels
  EXPECT_EQ(prepare({32, 1, 3, 3}, {1, 1}, {1, 1}, 32), "none");     // depthwise
  // Other ops and inputs: nothing to prepare.
  Tensor m = Tensor::random(DType::kF32, {64, 64}, rng, -1.0, 1.0);
  auto other = prepare_weights(OpKind::Linear, 1, m.view(), {});
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(*other, nullptr);
}

TEST(Conv2dKernel, PreparedWeightsGiveTheUnpreparedResult) {
  // resnet18's layer4 shape scaled down in channels at batch 2: 7x7, 8 tiles, where only
  // prepared weights take Winograd; and 2 x 14 x 14 (32 tiles) where both do. Both within
  // the Winograd bound of the naive reference.
  std::mt19937 rng(20);
  for (const WinogradShape& s : {shape_of(2, 96, 7, 7, 80, 1, 1), shape_of(2, 64, 14, 14, 72, 1, 1)}) {
    Tensor x = Tensor::random(DType::kF32, {s.n, s.c, s.h, s.w}, rng, -1.0, 1.0);
    Tensor w = Tensor::random(DType::kF32, {s.k, s.c, 3, 3}, rng, -1.0, 1.0);
    Tensor b = Tensor::random(DType::kF32, {s.k}, rng, -1.0, 1.0);
    const AttrList attrs = AttrList().ints({1, 1}).ints({1, 1}).ints({1, 1}).i(1);
    auto made = prepare_weights(OpKind::Conv2d, 1, w.view(), attrs.span());
    ASSERT_TRUE(made.ok() && *made != nullptr);
    Tensor out(DType::kF32, {s.n, s.k, s.oh, s.ow});
    std::vector<TensorView> ov{out.view()};
    FusedContext ctx;
    ctx.prepared = made->get();
    ASSERT_TRUE(run_views(OpKind::Conv2d, {x.view(), w.view(), b.view()}, ov, attrs, &ctx).ok());
    EXPECT_TRUE(out.canary_intact());
    std::vector<float> xf(x.as<float>(), x.as<float>() + x.numel()), wf(w.as<float>(), w.as<float>() + w.numel()),
        bf(b.as<float>(), b.as<float>() + b.numel());
    const Reference r = reference(xf, wf, &bf, s, false);
    for (std::size_t i = 0; i < r.y.size(); ++i) {
      ASSERT_LT(std::abs(out.as<float>()[i] - r.y[i]), kRelativeBound * r.scale[i]) << "at " << i << " c=" << s.c;
    }
  }
}

}  // namespace
}  // namespace kiln::cpu::testing

// conv2d's depthwise paths (one input and output channel per group) against a naive
// reference convolution in double over randomized shapes: the channel-blocked kernel
// (SimdKernels::conv_depthwise_block, the default) with channel counts around and past a
// block of 8, odd plane sizes, rectangular kernels up to 7x7, strides 1-3, padding,
// dilation, batches, every fused activation, on 1 and 2 threads; and the kernel table
// entry called directly on both instruction sets. Then 1x1 convolutions over few pixels on
// the transposed GEMM (conv_pointwise.h) against a reference, and its cost rule.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "backends/cpu/kernels/conv_pointwise.h"
#include "backends/cpu/kernels/conv_prepared.h"
#include "backends/cpu/kernels/simd.h"
#include "backends/cpu/thread_pool.h"
#include "kernel_testutil.h"

namespace kiln::cpu::testing {
namespace {

struct DepthwiseCase {
  std::int64_t n, c, h, w, kh, kw;
  std::int64_t stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w;
  bool bias;
  std::int64_t oh() const { return (h + 2 * pad_h - dilation_h * (kh - 1) - 1) / stride_h + 1; }
  std::int64_t ow() const { return (w + 2 * pad_w - dilation_w * (kw - 1) - 1) / stride_w + 1; }
  std::string text() const {
    std::ostringstream s;
    s << "x [" << n << "," << c << "," << h << "," << w << "] kernel " << kh << "x" << kw << " stride " << stride_h
      << "," << stride_w << " pad " << pad_h << "," << pad_w << " dilation " << dilation_h << "," << dilation_w
      << (bias ? " bias" : "");
    return s.str();
  }
};

double activate(FusedActivation act, double v) {
  switch (act) {
    case FusedActivation::kNone: return v;
    case FusedActivation::kRelu: return std::max(v, 0.0);
    case FusedActivation::kRelu6: return std::min(std::max(v, 0.0), 6.0);
    case FusedActivation::kHardswish: return v * std::min(std::max(v + 3.0, 0.0), 6.0) / 6.0;
    case FusedActivation::kHardsigmoid: return std::min(std::max(v + 3.0, 0.0), 6.0) / 6.0;
    case FusedActivation::kSilu: return v / (1.0 + std::exp(-v));
    case FusedActivation::kGeluErf: return 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
    case FusedActivation::kGeluTanh:
      return 0.5 * v * (1.0 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
  }
  return v;
}

// The exact depthwise convolution (before the activation).
std::vector<double> reference(const DepthwiseCase& c, const Tensor& x, const Tensor& w, const Tensor& b) {
  const std::int64_t oh = c.oh(), ow = c.ow();
  std::vector<double> y(static_cast<std::size_t>(c.n * c.c * oh * ow));
  for (std::int64_t img = 0; img < c.n; ++img) {
    for (std::int64_t ch = 0; ch < c.c; ++ch) {
      for (std::int64_t oy = 0; oy < oh; ++oy) {
        for (std::int64_t ox = 0; ox < ow; ++ox) {
          double sum = c.bias ? b.at(ch) : 0.0;
          for (std::int64_t i = 0; i < c.kh; ++i) {
            for (std::int64_t j = 0; j < c.kw; ++j) {
              const std::int64_t iy = oy * c.stride_h - c.pad_h + i * c.dilation_h;
              const std::int64_t ix = ox * c.stride_w - c.pad_w + j * c.dilation_w;
              if (iy < 0 || iy >= c.h || ix < 0 || ix >= c.w) continue;
              sum += x.at(((img * c.c + ch) * c.h + iy) * c.w + ix) * w.at((ch * c.kh + i) * c.kw + j);
            }
          }
          y[static_cast<std::size_t>(((img * c.c + ch) * oh + oy) * ow + ox)] = sum;
        }
      }
    }
  }
  return y;
}

class DepthwiseContext : public TestContext {
 public:
  explicit DepthwiseContext(ThreadPool& pool) : pool_(pool) {}
  FusedActivation act = FusedActivation::kNone;
  FusedActivation fused_activation() const override { return act; }
  ThreadPool& pool() override { return pool_; }

 private:
  ThreadPool& pool_;
};

// Runs conv2d on the case with random data for every activation and thread count and checks
// every output (and the canary past it).
void expect_matches_reference(const DepthwiseCase& c, std::mt19937& rng) {
  Tensor x = Tensor::random(DType::kF32, {c.n, c.c, c.h, c.w}, rng, -2.0, 2.0);
  Tensor w = Tensor::random(DType::kF32, {c.c, 1, c.kh, c.kw}, rng, -1.0, 1.0);
  Tensor b = Tensor::random(DType::kF32, {c.c}, rng, -1.0, 1.0);
  const std::vector<double> sums = reference(c, x, w, b);
  const FusedActivation acts[] = {FusedActivation::kNone, FusedActivation::kRelu, FusedActivation::kRelu6,
                                  FusedActivation::kHardswish, FusedActivation::kSilu};
  ThreadPool one(1), two(2);
  for (ThreadPool* pool : {&one, &two}) {
    for (FusedActivation act : acts) {
      std::vector<double> want(sums.size());
      for (std::size_t i = 0; i < sums.size(); ++i) want[i] = activate(act, sums[i]);
      Tensor out(DType::kF32, {c.n, c.c, c.oh(), c.ow()});
      std::vector<TensorView> ov{out.view()};
      std::vector<TensorView> in{x.view(), w.view()};
      if (c.bias) in.push_back(b.view());
      DepthwiseContext ctx(*pool);
      ctx.act = act;
      const Status st = run_views(OpKind::Conv2d, in, ov,
                                  AttrList()
                                      .ints({c.stride_h, c.stride_w})
                                      .ints({c.pad_h, c.pad_w})
                                      .ints({c.dilation_h, c.dilation_w})
                                      .i(c.c),
                                  &ctx);
      ASSERT_TRUE(st.ok()) << c.text() << ": " << st.message();
      // Sums of up to 49 products of magnitude <= 2 in float: a few ulp of ~100.
      ASSERT_TRUE(all_close(out, want, 1e-5, 2e-5))
          << c.text() << " +" << activation_name(act) << ", " << pool->num_threads() << " threads";
      ASSERT_TRUE(out.canary_intact()) << c.text();
    }
  }
}

TEST(DepthwiseConv, MatchesReferenceOnMobileNetShapes) {
  std::mt19937 rng(140);
  // Scaled-down mobile-network layers: 3x3 and 5x5, stride 1 and 2, planes from 1x1 to 29x29,
  // channel counts that leave 1..7 channels in the last block.
  const std::vector<DepthwiseCase> cases = {
      {1, 32, 28, 28, 3, 3, 1, 1, 1, 1, 1, 1, true},   // whole blocks, 4-pixel groups
      {1, 24, 29, 29, 3, 3, 2, 2, 1, 1, 1, 1, true},   // stride 2, odd plane
      {1, 13, 7, 7, 3, 3, 1, 1, 1, 1, 1, 1, true},     // 5 channels in the last block
      {2, 9, 14, 14, 5, 5, 1, 1, 2, 2, 1, 1, true},    // 5x5, a 1-channel block, batch 2
      {1, 20, 15, 15, 5, 5, 2, 2, 2, 2, 1, 1, false},  // 5x5 stride 2
      {1, 17, 1, 1, 3, 3, 1, 1, 1, 1, 1, 1, true},     // 1x1 plane: only the centre tap
      {1, 8, 4, 4, 3, 3, 2, 2, 1, 1, 1, 1, true},      // 2x2 output
      {3, 7, 9, 8, 3, 3, 1, 1, 1, 1, 1, 1, true},      // fewer than 8 channels, batch 3
  };
  for (const DepthwiseCase& c : cases) expect_matches_reference(c, rng);
}

TEST(DepthwiseConv, MatchesReferenceOverRandomShapes) {
  std::mt19937 rng(141);
  std::uniform_int_distribution<std::int64_t> batch(1, 2), channels(1, 21), size(1, 23), kernel(1, 7), stride(1, 3),
      dilation(1, 3), pad(0, 3), coin(0, 1);
  int ran = 0;
  for (int trial = 0; ran < 40 && trial < 400; ++trial) {
    DepthwiseCase c{batch(rng),  channels(rng), size(rng),   size(rng),     kernel(rng), kernel(rng), stride(rng),
                    stride(rng), pad(rng),      pad(rng),    1,             1,           coin(rng) == 1};
    if (coin(rng) == 1) {
      c.dilation_h = dilation(rng);
      c.dilation_w = dilation(rng);
    }
    const bool fits = c.h + 2 * c.pad_h >= c.dilation_h * (c.kh - 1) + 1 && c.w + 2 * c.pad_w >= c.dilation_w * (c.kw - 1) + 1;
    if (!fits) continue;  // the window does not fit: not a valid layer
    ++ran;
    expect_matches_reference(c, rng);
  }
  EXPECT_EQ(ran, 40);
}

TEST(DepthwiseConv, HandlesWideRowsAndTallKernels) {
  std::mt19937 rng(142);
  // Rows of 8k+r pixels around the transposes' 8-pixel groups, a 1x7 and a 7x1 kernel, a
  // kernel row count at kConvDepthwiseMaxRows, a stride wider than the kernel.
  const std::vector<DepthwiseCase> cases = {
      {1, 10, 3, 61, 1, 7, 1, 1, 0, 3, 1, 1, true},
      {1, 10, 19, 5, 7, 1, 1, 1, 3, 0, 1, 1, true},
      {1, 3, 20, 9, 16, 4, 1, 1, 2, 1, 1, 1, true},
      {1, 12, 17, 33, 2, 2, 3, 3, 0, 0, 1, 1, false},
      {1, 11, 40, 113, 3, 3, 2, 2, 1, 1, 1, 1, true},
  };
  for (const DepthwiseCase& c : cases) expect_matches_reference(c, rng);
}

// The table entry itself on every instruction set this CPU runs: one block of 5 channels,
// rows [2, 5) only (the rows outside stay untouched), relu6.
TEST(DepthwiseConv, BlockKernelWritesOnlyItsRowsAndChannels) {
  const DepthwiseCase c{1, 5, 9, 11, 3, 3, 1, 1, 1, 1, 1, 1, true};
  std::mt19937 rng(143);
  Tensor x = Tensor::random(DType::kF32, {1, c.c, c.h, c.w}, rng, -2.0, 2.0);
  Tensor w = Tensor::random(DType::kF32, {c.c, 1, 3, 3}, rng, -1.0, 1.0);
  Tensor b = Tensor::random(DType::kF32, {c.c}, rng, -1.0, 1.0);
  const std::vector<double> sums = reference(c, x, w, b);
  std::vector<const kernels::SimdKernels*> tables{&kernels::simd_baseline()};
  if (kernels::simd_avx2() != nullptr) tables.push_back(kernels::simd_avx2());
  for (const kernels::SimdKernels* table : tables) {
    std::vector<float> weights(9 * 8, std::numeric_limits<float>::quiet_NaN());  // lanes past 5: unused
    std::vector<float> bias(8, 0.0f);
    for (std::int64_t ch = 0; ch < c.c; ++ch) {
      for (std::int64_t t = 0; t < 9; ++t) weights[static_cast<std::size_t>(t * 8 + ch)] = w.as<float>()[ch * 9 + t];
      bias[static_cast<std::size_t>(ch)] = b.as<float>()[ch];
    }
    const std::int64_t oh = c.oh(), ow = c.ow();
    std::vector<float> out(static_cast<std::size_t>(c.c * oh * ow + 8), -77.0f);  // + a channel-6 canary
    std::vector<float> scratch(static_cast<std::size_t>(kernels::conv_depthwise_block_scratch_floats(3, 3, 1, 1, 1, ow)));
    kernels::ConvDepthwiseBlockArgs a{};
    a.input = x.as<float>();
    a.channels = c.c;
    a.h = c.h;
    a.w = c.w;
    a.kh = a.kw = 3;
    a.stride_h = a.stride_w = 1;
    a.pad_h = a.pad_w = 1;
    a.dilation_h = a.dilation_w = 1;
    a.weights = weights.data();
    a.bias = bias.data();
    a.lo = 0.0f;
    a.hi = 6.0f;
    a.output = out.data();
    a.oh = oh;
    a.ow = ow;
    a.scratch = scratch.data();
    table->conv_depthwise_block(a, 2, 5);
    for (std::int64_t ch = 0; ch < c.c; ++ch) {
      for (std::int64_t oy = 0; oy < oh; ++oy) {
        for (std::int64_t ox = 0; ox < ow; ++ox) {
          const std::size_t i = static_cast<std::size_t>((ch * oh + oy) * ow + ox);
          if (oy < 2 || oy >= 5) {
            ASSERT_EQ(out[i], -77.0f) << table->name << " wrote row " << oy;
          } else {
            ASSERT_NEAR(out[i], activate(FusedActivation::kRelu6, sums[i]), 2e-5) << table->name << " at " << i;
          }
        }
      }
    }
    for (std::size_t i = static_cast<std::size_t>(c.c * oh * ow); i < out.size(); ++i) {
      ASSERT_EQ(out[i], -77.0f) << table->name << " wrote past the block's channels";
    }
  }
}

// ---------------------------------------------------------------------------------------
// 1x1 convolutions over few pixels, run transposed (conv_pointwise.h) with prepared weights.

class PreparedContext : public DepthwiseContext {
 public:
  using DepthwiseContext::DepthwiseContext;
  const PreparedWeights* prepared = nullptr;
  const PreparedWeights* prepared_weights(int index) const override { return index == 1 ? prepared : nullptr; }
};

TEST(PointwiseConv, CostRulePicksUpToEightPixels) {
  EXPECT_TRUE(kernels::pointwise_transposed_profitable(64, 16, 1));       // squeeze-excitation: one pixel
  EXPECT_TRUE(kernels::pointwise_transposed_profitable(320, 1280, 4));    // a 2x2 plane
  EXPECT_TRUE(kernels::pointwise_transposed_profitable(7, 9, 8));
  EXPECT_FALSE(kernels::pointwise_transposed_profitable(320, 1280, 9));
  EXPECT_FALSE(kernels::pointwise_transposed_profitable(320, 1280, 49));  // 7x7: the SGEMM's narrow tiles
  EXPECT_FALSE(kernels::pointwise_transposed_profitable(16, 96, 12544));
  EXPECT_FALSE(kernels::pointwise_transposed_profitable(0, 16, 1));
  EXPECT_FALSE(kernels::pointwise_transposed_profitable(16, 16, 0));
}

TEST(PointwiseConv, TransposedWeightsFromThePrepackedCopyEqualTheRawOnes) {
  std::mt19937 rng(145);
  for (auto [o, c] : {std::pair<std::int64_t, std::int64_t>{13, 7}, {96, 300}, {1, 600}, {40, 257}}) {
    Tensor w = Tensor::random(DType::kF32, {o, c}, rng, -1.0, 1.0);
    auto raw = kernels::pointwise_transposed_prepare(w.as<float>(), o, c);
    auto a = pack_a_matrix(w.as<float>(), c, o, c);
    ASSERT_TRUE(raw.ok() && a.ok());
    auto from_a = kernels::pointwise_transposed_prepare(a.value());
    ASSERT_TRUE(from_a.ok());
    ASSERT_EQ(raw->k(), from_a->k());
    ASSERT_EQ(raw->n(), from_a->n());
    for (std::int64_t p = 0; p < raw->panels(); ++p) {
      for (std::int64_t i = 0; i < c * 16; ++i) {
        // Columns past n in the last panel are padding: compare only real ones.
        if (p * 16 + i % 16 >= o) continue;
        ASSERT_EQ(raw->panel(p)[i], from_a->panel(p)[i]) << o << "x" << c << " panel " << p << " at " << i;
      }
    }
  }
}

TEST(PointwiseConv, TransposedMatchesReferenceWithEveryActivation) {
  struct Case {
    std::int64_t n, c, h, w, o;
  };
  // 1 to 8 pixels, odd channel counts, batches; each is picked by the cost rule.
  const std::vector<Case> cases = {{1, 150, 2, 4, 96}, {2, 200, 1, 7, 160}, {1, 64, 1, 1, 16},
                                   {3, 9, 1, 1, 45},   {1, 100, 2, 3, 48},  {2, 130, 2, 2, 21}};
  const FusedActivation acts[] = {FusedActivation::kNone, FusedActivation::kRelu6, FusedActivation::kHardswish,
                                  FusedActivation::kSilu, FusedActivation::kHardsigmoid};
  std::mt19937 rng(144);
  ThreadPool one(1), two(2);
  for (const Case& c : cases) {
    const std::int64_t pixels = c.h * c.w;
    ASSERT_TRUE(kernels::pointwise_transposed_profitable(c.c, c.o, pixels)) << c.c << "->" << c.o << " @" << pixels;
    Tensor x = Tensor::random(DType::kF32, {c.n, c.c, c.h, c.w}, rng, -2.0, 2.0);
    Tensor w = Tensor::random(DType::kF32, {c.o, c.c, 1, 1}, rng, -1.0, 1.0);
    Tensor b = Tensor::random(DType::kF32, {c.o}, rng, -1.0, 1.0);
    const AttrList attrs = AttrList().ints({1, 1}).ints({0, 0}).ints({1, 1}).i(1);
    auto made = prepare_weights(OpKind::Conv2d, 1, w.view(), attrs.span());
    ASSERT_TRUE(made.ok()) << made.status().message();
    const auto* cw = static_cast<const kernels::ConvWeights*>(made->get());
    ASSERT_NE(cw, nullptr);
    EXPECT_TRUE(cw->pointwise_eligible);
    std::vector<double> sums(static_cast<std::size_t>(c.n * c.o * pixels));
    for (std::int64_t img = 0; img < c.n; ++img) {
      for (std::int64_t o = 0; o < c.o; ++o) {
        for (std::int64_t p = 0; p < pixels; ++p) {
          double sum = b.at(o);
          for (std::int64_t i = 0; i < c.c; ++i) sum += w.at(o * c.c + i) * x.at((img * c.c + i) * pixels + p);
          sums[static_cast<std::size_t>((img * c.o + o) * pixels + p)] = sum;
        }
      }
    }
    for (ThreadPool* pool : {&one, &two}) {
      for (FusedActivation act : acts) {
        std::vector<double> want(sums.size());
        for (std::size_t i = 0; i < sums.size(); ++i) want[i] = activate(act, sums[i]);
        Tensor out(DType::kF32, {c.n, c.o, c.h, c.w});
        std::vector<TensorView> ov{out.view()};
        PreparedContext ctx(*pool);
        ctx.act = act;
        ctx.prepared = made->get();
        const Status st = run_views(OpKind::Conv2d, {x.view(), w.view(), b.view()}, ov, attrs, &ctx);
        ASSERT_TRUE(st.ok()) << st.message();
        // Sums of up to 200 products of magnitude <= 2.
        ASSERT_TRUE(all_close(out, want, 1e-5, 5e-5)) << c.c << "->" << c.o << " @" << c.h << "x" << c.w << " +"
                                                      << activation_name(act);
        ASSERT_TRUE(out.canary_intact());
      }
    }
    EXPECT_NE(cw->pointwise, nullptr) << "the run packed W^T (took the transposed path)";
  }
}

}  // namespace
}  // namespace kiln::cpu::testing

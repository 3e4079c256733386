// conv2d with weights prepared at load (ConvWeights, conv_prepared.h): the prepacked-A
// GEMM (sgemm_packed_a, gemm_packed_a.h) on its own, and every conv path against a naive
// double-precision convolution over randomized shapes (odd sizes, channel counts that are
// not multiples of 8, padding, stride 2, dilation, groups, depthwise), on 1 and 2 threads,
// with and without prepared weights and fused activations.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/gemm/gemm.h"
#include "backends/cpu/gemm/gemm_packed_a.h"
#include "backends/cpu/kernel.h"
#include "backends/cpu/kernels/conv_prepared.h"
#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/kernels/nchwc.h"
#include "backends/cpu/thread_pool.h"
#include "kernels/kernel_testutil.h"

namespace kiln::cpu {
namespace {

using testing::AttrList;
using testing::Shape;
using testing::Tensor;

std::vector<float> uniform(std::mt19937& rng, std::int64_t n, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& x : v) x = d(rng);
  return v;
}

double activate(GemmActivation act, double v) {
  switch (act) {
    case GemmActivation::kNone: return v;
    case GemmActivation::kRelu: return std::max(v, 0.0);
    case GemmActivation::kRelu6: return std::min(std::max(v, 0.0), 6.0);
    case GemmActivation::kHardswish: return v * std::min(std::max(v + 3.0, 0.0), 6.0) / 6.0;
    case GemmActivation::kHardsigmoid: return std::min(std::max(v + 3.0, 0.0), 6.0) / 6.0;
    case GemmActivation::kSilu: return v / (1.0 + std::exp(-v));
    case GemmActivation::kGeluErf: return 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
    case GemmActivation::kGeluTanh:
      return 0.5 * v * (1.0 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
  }
  return v;
}

// ---- sgemm_packed_a ----

TEST(SgemmPackedA, MatchesNaiveProductOverShapesBlocksAndEpilogues) {
  struct Case {
    std::int64_t m, n, k;
  };
  // Around the 6x16 tile, the 256 K block (several blocks), the 144-row block, N < 16.
  const Case cases[] = {{1, 1, 1},   {5, 3, 7},     {6, 16, 8},    {7, 17, 256}, {13, 49, 257},
                        {145, 33, 70}, {64, 200, 600}, {300, 20, 40}, {32, 700, 16}};
  const GemmActivation acts[] = {GemmActivation::kNone, GemmActivation::kRelu6, GemmActivation::kHardswish};
  std::mt19937 rng(31);
  ThreadPool pool2(2);
  int variant = 0;
  for (const Case& c : cases) {
    for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool2}) {
      ++variant;
      const bool trans_b = variant % 3 == 0;
      const GemmBias bias_kind = variant % 3 == 1 ? GemmBias::kPerRow : variant % 3 == 2 ? GemmBias::kPerColumn
                                                                                       : GemmBias::kNone;
      const GemmActivation act = acts[variant % 3];
      const float alpha = variant % 4 == 0 ? 0.5f : 1.0f, beta = variant % 5 == 0 ? 0.25f : 0.0f;
      const std::int64_t lda = c.k + 3, ldb = (trans_b ? c.k : c.n) + 1, ldc = c.n + 2;
      const std::vector<float> a = uniform(rng, c.m * lda), b = uniform(rng, (trans_b ? c.n : c.k) * ldb);
      const std::vector<float> bias = uniform(rng, std::max(c.m, c.n));
      std::vector<float> out = uniform(rng, c.m * ldc);
      const std::vector<float> before = out;
      auto packed = pack_a_matrix(a.data(), lda, c.m, c.k);
      ASSERT_TRUE(packed.ok()) << packed.status().message();
      GemmParams p;
      p.m = c.m;
      p.n = c.n;
      p.k = c.k;
      p.trans_b = trans_b;
      p.alpha = alpha;
      p.beta = beta;
      p.b = b.data();
      p.ldb = ldb;
      p.c = out.data();
      p.ldc = ldc;
      p.bias = bias.data();
      p.bias_kind = bias_kind;
      p.activation = act;
      const Status st = sgemm_packed_a(p, *packed, pool);
      ASSERT_TRUE(st.ok()) << st.message();
      for (std::int64_t i = 0; i < c.m; ++i) {
        for (std::int64_t j = 0; j < ldc; ++j) {
          const float got = out[static_cast<std::size_t>(i * ldc + j)];
          if (j >= c.n) {  // past the row: untouched
            ASSERT_EQ(got, before[static_cast<std::size_t>(i * ldc + j)]) << "wrote past n at " << i << "," << j;
            continue;
          }
          double sum = 0.0, mag = 0.0;
          for (std::int64_t t = 0; t < c.k; ++t) {
            const double bv = trans_b ? b[static_cast<std::size_t>(j * ldb + t)] : b[static_cast<std::size_t>(t * ldb + j)];
            sum += a[static_cast<std::size_t>(i * lda + t)] * bv;
            mag += std::abs(a[static_cast<std::size_t>(i * lda + t)] * bv);
          }
          double want = alpha * sum + beta * before[static_cast<std::size_t>(i * ldc + j)];
          if (bias_kind == GemmBias::kPerRow) want += bias[static_cast<std::size_t>(i)];
          if (bias_kind == GemmBias::kPerColumn) want += bias[static_cast<std::size_t>(j)];
          want = activate(act, want);
          ASSERT_NEAR(got, want, 1e-5 + 1e-6 * mag) << c.m << "x" << c.n << "x" << c.k << " at " << i << "," << j;
        }
      }
    }
  }
}

TEST(SgemmPackedA, RejectsMismatchedShapesAndStrides) {
  const std::vector<float> a(12, 1.0f), b(12, 1.0f);
  std::vector<float> c(16, 0.0f);
  auto packed = pack_a_matrix(a.data(), 4, 3, 4);
  ASSERT_TRUE(packed.ok());
  EXPECT_EQ(packed->m(), 3);
  EXPECT_EQ(packed->k(), 4);
  GemmParams p;
  p.m = 3;
  p.n = 3;
  p.k = 5;  // packed A has k = 4
  p.b = b.data();
  p.ldb = 3;
  p.c = c.data();
  p.ldc = 3;
  Status st = sgemm_packed_a(p, *packed, nullptr);
  EXPECT_EQ(st.code(), StatusCode::kInvalidInput);
  EXPECT_EQ(st.message(), "[sgemm_packed_a] packed A is [3,4] but m=3 k=5");
  p.k = 4;
  p.ldb = 2;
  st = sgemm_packed_a(p, *packed, nullptr);
  EXPECT_EQ(st.code(), StatusCode::kInvalidInput);
  EXPECT_EQ(st.message(), "[sgemm_packed_a] ldb=2 < n=3");
  auto bad = pack_a_matrix(a.data(), 3, 3, 4);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "[sgemm_packed_a] pack_a_matrix: lda=3 < k=4");
  auto negative = pack_a_matrix(a.data(), 4, -1, 4);
  ASSERT_FALSE(negative.ok());
  EXPECT_EQ(negative.status().code(), StatusCode::kInvalidInput);
}

// ---- conv2d against the naive convolution ----

struct ConvCase {
  std::int64_t n, c, h, w, o, kh, kw, groups;
  std::int64_t sh, sw, ph, pw, dh, dw;
  std::int64_t oh() const { return (h + 2 * ph - dh * (kh - 1) - 1) / sh + 1; }
  std::int64_t ow() const { return (w + 2 * pw - dw * (kw - 1) - 1) / sw + 1; }
  std::string text() const {
    return std::to_string(n) + "x" + std::to_string(c) + "x" + std::to_string(h) + "x" + std::to_string(w) + " -> " +
           std::to_string(o) + " k" + std::to_string(kh) + "x" + std::to_string(kw) + " g" + std::to_string(groups) +
           " s" + std::to_string(sh) + "," + std::to_string(sw) + " p" + std::to_string(ph) + "," + std::to_string(pw) +
           " d" + std::to_string(dh) + "," + std::to_string(dw);
  }
};

// Sums and sum |x w| per output element, in double.
void naive_conv(const ConvCase& s, const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>& b,
                std::vector<double>& sum, std::vector<double>& mag) {
  const std::int64_t oh = s.oh(), ow = s.ow(), cg = s.c / s.groups, og = s.o / s.groups;
  sum.assign(static_cast<std::size_t>(s.n * s.o * oh * ow), 0.0);
  mag.assign(sum.size(), 0.0);
  for (std::int64_t img = 0; img < s.n; ++img) {
    for (std::int64_t oc = 0; oc < s.o; ++oc) {
      const std::int64_t grp = oc / og;
      for (std::int64_t y = 0; y < oh; ++y) {
        for (std::int64_t xx = 0; xx < ow; ++xx) {
          double acc = b[static_cast<std::size_t>(oc)], m = std::abs(b[static_cast<std::size_t>(oc)]);
          for (std::int64_t ci = 0; ci < cg; ++ci) {
            for (std::int64_t i = 0; i < s.kh; ++i) {
              for (std::int64_t j = 0; j < s.kw; ++j) {
                const std::int64_t iy = y * s.sh - s.ph + i * s.dh, ix = xx * s.sw - s.pw + j * s.dw;
                if (iy < 0 || iy >= s.h || ix < 0 || ix >= s.w) continue;
                const double v = x[static_cast<std::size_t>(((img * s.c + grp * cg + ci) * s.h + iy) * s.w + ix)] *
                                 w[static_cast<std::size_t>(((oc * cg + ci) * s.kh + i) * s.kw + j)];
                acc += v;
                m += std::abs(v);
              }
            }
          }
          const std::size_t at = static_cast<std::size_t>(((img * s.o + oc) * oh + y) * ow + xx);
          sum[at] = acc;
          mag[at] = m;
        }
      }
    }
  }
}

class PoolContext : public testing::PoolContext {
 public:
  using testing::PoolContext::PoolContext;
  FusedActivation fused_activation() const override { return act; }
  const PreparedWeights* prepared_weights(int index) const override { return index == 1 ? prepared : nullptr; }
  FusedActivation act = FusedActivation::kNone;
  const PreparedWeights* prepared = nullptr;
};

GemmActivation gemm_act(FusedActivation a) {
  switch (a) {
    case FusedActivation::kRelu: return GemmActivation::kRelu;
    case FusedActivation::kRelu6: return GemmActivation::kRelu6;
    case FusedActivation::kHardswish: return GemmActivation::kHardswish;
    case FusedActivation::kHardsigmoid: return GemmActivation::kHardsigmoid;
    case FusedActivation::kSilu: return GemmActivation::kSilu;
    default: return GemmActivation::kNone;
  }
}

// Runs conv2d on `s` with 1 and 2 threads, prepared and not, and compares with the naive
// convolution. Returns the prepared weights' kind ("winograd", "gemm", "both" or "none").
std::string check_conv(const ConvCase& s, FusedActivation act, std::mt19937& rng) {
  const std::vector<float> x = uniform(rng, s.n * s.c * s.h * s.w), w = uniform(rng, s.o * (s.c / s.groups) * s.kh * s.kw),
                           b = uniform(rng, s.o);
  std::vector<double> sum, mag;
  naive_conv(s, x, w, b, sum, mag);
  const AttrList attrs = AttrList().ints({s.sh, s.sw}).ints({s.ph, s.pw}).ints({s.dh, s.dw}).i(s.groups);
  Tensor xt(DType::kF32, {s.n, s.c, s.h, s.w}), wt(DType::kF32, {s.o, s.c / s.groups, s.kh, s.kw}), bt(DType::kF32, {s.o});
  std::copy(x.begin(), x.end(), xt.as<float>());
  std::copy(w.begin(), w.end(), wt.as<float>());
  std::copy(b.begin(), b.end(), bt.as<float>());
  auto made = prepare_weights(OpKind::Conv2d, 1, wt.view(), attrs.span());
  EXPECT_TRUE(made.ok()) << made.status().message();
  if (!made.ok()) return "error";
  std::string kind = "none";
  if (*made != nullptr) {
    const auto* cw = static_cast<const kernels::ConvWeights*>(made->get());
    kind = cw->winograd_eligible && cw->gemm != nullptr ? "both" : cw->winograd_eligible ? "winograd" : "gemm";
  }
  for (int threads : {1, 2}) {
    for (bool use_prepared : {false, true}) {
      PoolContext ctx(threads);
      ctx.act = act;
      ctx.prepared = use_prepared ? made->get() : nullptr;
      Tensor out(DType::kF32, {s.n, s.o, s.oh(), s.ow()});
      std::vector<TensorView> ov{out.view()};
      const Status st = testing::run_views(OpKind::Conv2d, {xt.view(), wt.view(), bt.view()}, ov, attrs, &ctx);
      EXPECT_TRUE(st.ok()) << s.text() << ": " << st.message();
      if (!st.ok()) return "error";
      EXPECT_TRUE(out.canary_intact()) << s.text();
      for (std::size_t i = 0; i < sum.size(); ++i) {
        const double want = activate(gemm_act(act), sum[i]);
        // Winograd's error grows with the magnitude (conv_winograd.h): 2e-6 per unit.
        const double tol = 1e-5 + 1e-5 * std::abs(want) + 3e-6 * mag[i];
        const double got = out.as<float>()[i];
        if (!(std::abs(got - want) <= tol)) {
          ADD_FAILURE() << s.text() << " threads=" << threads << " prepared=" << use_prepared << " act="
                        << activation_name(act) << " at " << i << ": " << got << " vs " << want;
          return "error";
        }
      }
    }
  }
  return kind;
}

TEST(Conv2dPrepacked, MatchesNaiveConvolutionOverRandomShapes) {
  std::mt19937 rng(41);
  const FusedActivation acts[] = {FusedActivation::kNone, FusedActivation::kRelu, FusedActivation::kRelu6,
                                  FusedActivation::kHardswish, FusedActivation::kSilu};
  int gemm_cases = 0;
  for (int it = 0; it < 48; ++it) {
    auto pick = [&](std::int64_t lo, std::int64_t hi) { return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng); };
    ConvCase s{};
    s.n = pick(1, 2);
    s.groups = pick(0, 3) == 0 ? pick(2, 3) : 1;
    s.c = s.groups * pick(1, 21);
    const bool wide = pick(0, 1) == 1;  // > 64 outputs per group: the GEMM path for any kernel
    s.o = s.groups * (wide ? pick(65, 131) : pick(1, 40));
    const std::int64_t sizes[] = {1, 1, 2, 3, 3, 5};
    s.kh = sizes[pick(0, 5)];
    s.kw = pick(0, 2) == 0 ? sizes[pick(0, 5)] : s.kh;
    s.sh = pick(1, 2);
    s.sw = pick(0, 3) == 0 ? 3 - s.sh : s.sh;
    s.dh = pick(0, 4) == 0 ? 2 : 1;
    s.dw = pick(0, 4) == 0 ? 2 : 1;
    s.ph = pick(0, s.kh / 2 + (s.dh - 1));
    s.pw = pick(0, s.kw / 2 + (s.dw - 1));
    s.h = pick(std::max<std::int64_t>(1, s.dh * (s.kh - 1) + 1 - 2 * s.ph), 19);
    s.w = pick(std::max<std::int64_t>(1, s.dw * (s.kw - 1) + 1 - 2 * s.pw), 23);
    const std::string kind = check_conv(s, acts[it % 5], rng);
    ASSERT_NE(kind, "error") << s.text();
    if (kind == "gemm" || kind == "both") ++gemm_cases;
    // Prepared exactly where a GEMM path runs: 1x1 kernels, or more than 64 outputs per group.
    const bool expects_gemm = (s.kh * s.kw == 1 || s.o / s.groups > 64) && !(s.c == s.groups && s.o == s.groups);
    EXPECT_EQ(kind == "gemm" || kind == "both", expects_gemm) << s.text() << " prepared " << kind;
  }
  EXPECT_GE(gemm_cases, 15);
}

TEST(Conv2dDepthwise, MatchesNaiveConvolutionOverRandomShapes) {
  // Strides 1 (the direct tiles) and 2-3 (conv_depthwise_rows), 3x3 / 5x5 / non-square
  // kernels, dilation, padding up to the window, widths around the 8- and 16-pixel vectors.
  std::mt19937 rng(43);
  const FusedActivation acts[] = {FusedActivation::kRelu6, FusedActivation::kNone, FusedActivation::kRelu,
                                  FusedActivation::kHardswish, FusedActivation::kSilu};
  for (int it = 0; it < 40; ++it) {
    auto pick = [&](std::int64_t lo, std::int64_t hi) { return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng); };
    ConvCase s{};
    s.n = pick(1, 2);
    s.c = s.o = s.groups = pick(1, 13);
    const std::int64_t sizes[] = {3, 3, 5, 1, 7};
    s.kh = sizes[pick(0, 4)];
    s.kw = pick(0, 3) == 0 ? sizes[pick(0, 4)] : s.kh;
    s.sh = pick(1, 3);
    s.sw = it % 4 == 0 ? 1 : pick(2, 3);
    s.dh = pick(0, 3) == 0 ? 2 : 1;
    s.dw = pick(0, 3) == 0 ? 2 : 1;
    s.ph = pick(0, s.dh * (s.kh - 1));
    s.pw = pick(0, s.dw * (s.kw - 1));
    s.h = pick(std::max<std::int64_t>(1, s.dh * (s.kh - 1) + 1 - 2 * s.ph), 30);
    s.w = pick(std::max<std::int64_t>(1, s.dw * (s.kw - 1) + 1 - 2 * s.pw), 45);
    EXPECT_EQ(check_conv(s, acts[it % 5], rng), "none") << s.text();
  }
}

// im2col_panels' cases over wide planes (rows of 16-pixel panels inside one output row:
// the copy when every tap lands inside the input row, the checked loads at the padded
// edges) and narrow ones (panels spanning several output rows), randomized: widths 1..70,
// kernels 1..5 with padding, strides 1-3, dilation 1-2, more than 64 outputs (the GEMM path).
TEST(Conv2dPrepacked, Im2colPanelsOverWideAndNarrowPlanes) {
  std::mt19937 rng(44);
  for (int it = 0; it < 24; ++it) {
    auto pick = [&](std::int64_t lo, std::int64_t hi) { return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng); };
    ConvCase s{};
    s.n = 1;
    s.groups = 1;
    s.c = pick(1, 6);
    s.o = pick(65, 70);
    const std::int64_t sizes[] = {1, 2, 3, 3, 5};
    s.kh = sizes[pick(0, 4)];
    s.kw = sizes[pick(0, 4)];
    s.sh = pick(1, 2);
    s.sw = it % 3 == 0 ? pick(2, 3) : 1;
    s.dh = pick(0, 3) == 0 ? 2 : 1;
    s.dw = pick(0, 3) == 0 ? 2 : 1;
    s.ph = pick(0, s.dh * (s.kh - 1));
    s.pw = pick(0, s.dw * (s.kw - 1));
    s.h = pick(std::max<std::int64_t>(1, s.dh * (s.kh - 1) + 1 - 2 * s.ph), 9);
    s.w = it % 2 == 0 ? pick(33, 70) : pick(std::max<std::int64_t>(1, s.dw * (s.kw - 1) + 1 - 2 * s.pw), 20);
    EXPECT_EQ(check_conv(s, FusedActivation::kRelu, rng), "gemm") << s.text();
  }
}

TEST(Conv2dPrepacked, CoversFixedEdgeShapes) {
  std::mt19937 rng(42);
  const ConvCase cases[] = {
      // n  c   h   w   o   kh kw g  sh sw ph pw dh dw
      {1, 64, 7, 7, 96, 3, 3, 1, 1, 1, 1, 1, 1, 1},     // winograd + gemm prepared, 4 tiles: gemm
      {1, 72, 17, 13, 80, 3, 3, 1, 1, 1, 1, 1, 1, 1},   // both prepared, winograd runs
      {2, 40, 7, 5, 129, 1, 1, 1, 1, 1, 0, 0, 1, 1},    // 1x1 over the planes, batch 2
      {1, 36, 9, 9, 132, 1, 1, 1, 2, 2, 0, 0, 1, 1},    // 1x1 stride 2 (im2col panels)
      {1, 8, 15, 15, 16, 1, 1, 1, 1, 1, 0, 0, 1, 1},    // 1x1 with few outputs: still the GEMM
      {1, 3, 23, 21, 70, 7, 7, 1, 2, 2, 3, 3, 1, 1},    // 7x7 stem, stride 2
      {2, 12, 11, 10, 130, 3, 3, 2, 1, 2, 2, 1, 2, 1},  // grouped, dilated, mixed stride
      {1, 5, 1, 1, 67, 3, 3, 1, 1, 1, 1, 1, 1, 1},      // 1x1 image, padding only
      {3, 6, 5, 4, 6, 1, 1, 6, 1, 1, 0, 0, 1, 1},       // depthwise 1x1: nothing prepared
      {1, 9, 33, 35, 9, 3, 3, 9, 2, 2, 1, 1, 1, 1},     // depthwise 3x3 stride 2 (rows kernel)
      {1, 5, 17, 40, 5, 5, 5, 5, 2, 2, 2, 2, 1, 1},     // depthwise 5x5 stride 2
      {2, 3, 9, 37, 3, 3, 3, 3, 1, 1, 1, 1, 1, 1},      // depthwise stride 1, 37 wide (rows kernel, 5 vectors)
      {1, 4, 6, 150, 4, 3, 3, 4, 1, 1, 1, 1, 1, 2},     // 150 wide: blocks of 8 vectors + a remainder, dilated
      {1, 4, 21, 9, 4, 3, 3, 4, 2, 2, 1, 1, 1, 1},      // 5 px rows: 8 rows x 1 vector blocks
  };
  const char* kinds[] = {"both", "both", "gemm", "gemm", "gemm", "gemm", "gemm", "gemm", "none", "none", "none",
                         "none", "none", "none"};
  for (std::size_t i = 0; i < std::size(cases); ++i) {
    EXPECT_EQ(check_conv(cases[i], FusedActivation::kRelu6, rng), kinds[i]) << cases[i].text();
  }
}

// Blocked weights (NCHW8c kernels): a 3x3 stride-1 weight gets Winograd's and makes its
// direct copy only when a run asks for it (nchwc_dense_for: once, the same copy after);
// other weights get their direct copy at load. The lazy copy packs what prepare_dense does.
TEST(Conv2dPrepacked, BlockedWinogradWeightsMakeTheirDirectCopyOnFirstUse) {
  if (!nchwc::kernels_available()) GTEST_SKIP() << "this build has no blocked kernels";
  std::mt19937 rng(77);
  const AttrList attrs = AttrList().ints({1, 1}).ints({1, 1}).ints({1, 1}).i(1);
  Tensor w3(DType::kF32, {24, 20, 3, 3}), w1(DType::kF32, {24, 20, 1, 1});
  const std::vector<float> v3 = uniform(rng, 24 * 20 * 9), v1 = uniform(rng, 24 * 20);
  std::copy(v3.begin(), v3.end(), w3.as<float>());
  std::copy(v1.begin(), v1.end(), w1.as<float>());
  auto made3 = prepare_weights(OpKind::Conv2d, 1, w3.view(), attrs.span(), /*blocked=*/true);
  ASSERT_TRUE(made3.ok()) << made3.status().message();
  const auto* c3 = static_cast<const kernels::ConvWeights*>(made3->get());
  ASSERT_NE(c3, nullptr);
  if (c3->nchwc_winograd == nullptr) GTEST_SKIP() << "Winograd is switched off (KILN_CONV_WINOGRAD=0)";
  EXPECT_TRUE(c3->nchwc_dense_lazy);
  EXPECT_EQ(c3->nchwc_dense, nullptr);  // nothing until a run picks the direct kernel
  const nchwc::DenseWeights* dense = c3->nchwc_dense_for(w3.as<float>());
  ASSERT_NE(dense, nullptr);
  EXPECT_EQ(c3->nchwc_dense_for(w3.as<float>()), dense);
  nchwc::ConvShape s;
  s.in_channels = 20, s.out_channels = 24, s.kh = s.kw = 3, s.pad_h = s.pad_w = 1;
  auto eager = nchwc::prepare_dense(w3.as<float>(), s);
  ASSERT_TRUE(eager.ok());
  const std::vector<float> x = uniform(rng, nchwc::blocked_floats(2, 20, 9, 7));
  std::vector<float> a(static_cast<std::size_t>(nchwc::blocked_floats(2, 24, 9, 7))), b(a.size());
  const nchwc::Act xa{const_cast<float*>(x.data()), 2, 20, 9, 7, true};
  ThreadPool pool(2);
  ASSERT_TRUE(nchwc::conv2d_dense(xa, *dense, s, {}, {a.data(), 2, 24, 9, 7, true}, pool).ok());
  ASSERT_TRUE(nchwc::conv2d_dense(xa, **eager, s, {}, {b.data(), 2, 24, 9, 7, true}, pool).ok());
  EXPECT_EQ(a, b);

  auto made1 = prepare_weights(OpKind::Conv2d, 1, w1.view(), AttrList().ints({1, 1}).ints({0, 0}).ints({1, 1}).i(1).span(),
                               /*blocked=*/true);
  ASSERT_TRUE(made1.ok()) << made1.status().message();
  const auto* c1 = static_cast<const kernels::ConvWeights*>(made1->get());
  ASSERT_NE(c1, nullptr);
  EXPECT_FALSE(c1->nchwc_dense_lazy);
  EXPECT_EQ(c1->nchwc_winograd, nullptr);
  EXPECT_NE(c1->nchwc_dense, nullptr);
  EXPECT_EQ(c1->nchwc_dense_for(w1.as<float>()), c1->nchwc_dense.get());
}

// A 3x3 weight whose attributes rule Winograd out (stride 2, dilation 2, padding 3) gets
// only the direct kernel's copy, made at load: holding Winograd's kernels as well would
// double it (resnet's strided 3x3 layers did, and read their raw weight back in besides).
TEST(Conv2dPrepacked, StridedThreeByThreeWeightsHoldOnlyTheDirectCopy) {
  if (!nchwc::kernels_available()) GTEST_SKIP() << "this build has no blocked kernels";
  Tensor w3(DType::kF32, {24, 20, 3, 3});
  std::fill(w3.as<float>(), w3.as<float>() + 24 * 20 * 9, 0.5f);
  const AttrList ruled_out[] = {AttrList().ints({2, 2}).ints({1, 1}).ints({1, 1}).i(1),
                                AttrList().ints({1, 1}).ints({2, 2}).ints({2, 2}).i(1),
                                AttrList().ints({1, 1}).ints({3, 3}).ints({1, 1}).i(1)};
  for (const AttrList& attrs : ruled_out) {
    auto made = prepare_weights(OpKind::Conv2d, 1, w3.view(), attrs.span(), /*blocked=*/true);
    ASSERT_TRUE(made.ok()) << made.status().message();
    const auto* c = static_cast<const kernels::ConvWeights*>(made->get());
    ASSERT_NE(c, nullptr);
    EXPECT_EQ(c->nchwc_winograd, nullptr);
    EXPECT_FALSE(c->nchwc_dense_lazy);
    EXPECT_NE(c->nchwc_dense, nullptr);
  }
  auto made = prepare_weights(OpKind::Conv2d, 1, w3.view(), AttrList().ints({1, 1}).ints({2, 2}).ints({1, 1}).i(1).span(),
                              /*blocked=*/true);
  ASSERT_TRUE(made.ok()) << made.status().message();
  const auto* c = static_cast<const kernels::ConvWeights*>(made->get());
  ASSERT_NE(c, nullptr);
  if (kernels::conv_winograd_enabled()) {
    EXPECT_NE(c->nchwc_winograd, nullptr);  // stride 1, padding 2: Winograd's
  }
}

// conv2d with a fused input scale (KernelContext::input_scale, the executor's
// fold_channel_scales) convolves x * s: a plain input, a blocked output, s of [1, C, 1, 1]
// (one scale for every image) and of [N, C, 1, 1]; weights smaller than an image of x
// (scaled per image) and larger (a scaled copy of x). A scale of the wrong shape is the
// kernel's clear error, not a read past it.
class ScaleContext : public PoolContext {
 public:
  using PoolContext::PoolContext;
  bool output_blocked(int index) const override { return index == 0; }
  const TensorView* input_scale(bool* blocked) const override {
    if (blocked != nullptr) *blocked = false;
    return scale;
  }
  const TensorView* scale = nullptr;
};

TEST(Conv2dPrepacked, FusedInputScaleConvolvesTheScaledInput) {
  if (!nchwc::kernels_available()) GTEST_SKIP() << "this build has no blocked kernels";
  std::mt19937 rng(91);
  struct Case {
    ConvCase conv;
    std::int64_t scale_n;
  };
  // 1x1, 20 -> 12 at 9x7 (weights < an image: scaled weights); 44 -> 70 at 3x3 (a scaled copy).
  for (const Case& c : {Case{{2, 20, 9, 7, 12, 1, 1, 1, 1, 1, 0, 0, 1, 1}, 1}, Case{{2, 20, 9, 7, 12, 1, 1, 1, 1, 1, 0, 0, 1, 1}, 2},
                        Case{{2, 44, 3, 3, 70, 1, 1, 1, 1, 1, 0, 0, 1, 1}, 2}, Case{{3, 44, 3, 3, 70, 1, 1, 1, 1, 1, 0, 0, 1, 1}, 1}}) {
    const ConvCase& s = c.conv;
    const std::vector<float> x = uniform(rng, s.n * s.c * s.h * s.w), w = uniform(rng, s.o * s.c), b = uniform(rng, s.o),
                             sc = uniform(rng, c.scale_n * s.c);
    std::vector<float> xs(x.size());
    for (std::int64_t i = 0; i < static_cast<std::int64_t>(x.size()); ++i) {
      const std::int64_t img = i / (s.c * s.h * s.w), ch = i / (s.h * s.w) % s.c;
      xs[static_cast<std::size_t>(i)] = x[static_cast<std::size_t>(i)] * sc[static_cast<std::size_t>((c.scale_n == 1 ? 0 : img) * s.c + ch)];
    }
    std::vector<double> sum, mag;
    naive_conv(s, xs, w, b, sum, mag);
    const AttrList attrs = AttrList().ints({1, 1}).ints({0, 0}).ints({1, 1}).i(1);
    Tensor xt(DType::kF32, {s.n, s.c, s.h, s.w}), wt(DType::kF32, {s.o, s.c, 1, 1}), bt(DType::kF32, {s.o}),
        st(DType::kF32, {c.scale_n, s.c, 1, 1});
    std::copy(x.begin(), x.end(), xt.as<float>());
    std::copy(w.begin(), w.end(), wt.as<float>());
    std::copy(b.begin(), b.end(), bt.as<float>());
    std::copy(sc.begin(), sc.end(), st.as<float>());
    auto made = prepare_weights(OpKind::Conv2d, 1, wt.view(), attrs.span(), /*blocked=*/true);
    ASSERT_TRUE(made.ok()) << made.status().message();
    for (int threads : {1, 2}) {
      ScaleContext ctx(threads);
      ctx.prepared = made->get();
      const TensorView sv = st.view();
      ctx.scale = &sv;
      Tensor out(DType::kF32, {s.n, nchwc::padded_channels(s.o) / nchwc::kBlock, s.oh(), s.ow(), nchwc::kBlock});
      std::vector<TensorView> ov{out.view()};
      ASSERT_TRUE(testing::run_views(OpKind::Conv2d, {xt.view(), wt.view(), bt.view()}, ov, attrs, &ctx).ok()) << s.text();
      EXPECT_TRUE(out.canary_intact());
      std::vector<float> plain(sum.size());
      nchwc::to_plain(out.as<float>(), plain.data(), s.n, s.o, s.oh() * s.ow(), ctx.pool());
      for (std::size_t i = 0; i < sum.size(); ++i) {
        ASSERT_NEAR(plain[i], sum[i], 1e-5 + 1e-5 * mag[i]) << s.text() << " scale n " << c.scale_n << " at " << i;
      }
    }
  }
  // A scale of 19 channels for 20: refused, naming the shapes.
  const AttrList attrs = AttrList().ints({1, 1}).ints({0, 0}).ints({1, 1}).i(1);
  Tensor xt(DType::kF32, {2, 20, 5, 5}), wt(DType::kF32, {12, 20, 1, 1}), bad(DType::kF32, {2, 19, 1, 1});
  auto made = prepare_weights(OpKind::Conv2d, 1, wt.view(), attrs.span(), /*blocked=*/true);
  ASSERT_TRUE(made.ok());
  ScaleContext ctx(1);
  ctx.prepared = made->get();
  const TensorView sv = bad.view();
  ctx.scale = &sv;
  Tensor out(DType::kF32, {2, 2, 5, 5, nchwc::kBlock});
  std::vector<TensorView> ov{out.view()};
  EXPECT_TRUE(testing::fails_with(testing::run_views(OpKind::Conv2d, {xt.view(), wt.view(), testing::absent()}, ov, attrs, &ctx),
                                  StatusCode::kInvalidBundle, "conv2d",
                                  "the fused input scale's shape [2, 19, 1, 1] is not [2 or 1, 20, 1, 1]"));
}

// conv2d with the 1x1 expansion making its input folded into it (KernelContext::folded_conv,
// the executor's fuse_expansions): input 0 arrives as a blocked shape without data, and the
// kernel makes it from the folded conv's own inputs. An expanded image of 64 KiB or more
// runs the fused kernel, a smaller one the expansion into scratch; both give what the two
// convs give one after the other. Folded inputs that do not fit are clear errors.
class FoldContext : public PoolContext {
 public:
  using PoolContext::PoolContext;
  bool input_blocked(int index) const override { return index == 0; }
  bool output_blocked(int index) const override { return index == 0; }
  const FoldedConv* folded_conv() const override { return folded; }
  const FoldedConv* folded = nullptr;
};

TensorView shape_only(Shape shape) {
  TensorView v;
  v.rank = static_cast<int>(shape.size());
  for (std::size_t d = 0; d < shape.size(); ++d) v.shape[d] = shape[d];
  return v;
}

TEST(Conv2dPrepacked, FoldedExpansionMakesTheDepthwiseInput) {
  if (!nchwc::kernels_available()) GTEST_SKIP() << "this build has no blocked kernels";
  std::mt19937 rng(93);
  constexpr std::int64_t n = 2, cin = 12, cexp = 20;
  const AttrList a1 = AttrList().ints({1, 1}).ints({0, 0}).ints({1, 1}).i(1);
  Tensor ew = Tensor::random(DType::kF32, {cexp, cin, 1, 1}, rng, -0.5, 0.5), eb = Tensor::random(DType::kF32, {cexp}, rng);
  Tensor dw = Tensor::random(DType::kF32, {cexp, 1, 3, 3}, rng, -1.0, 1.0), db = Tensor::random(DType::kF32, {cexp}, rng);
  auto e_made = prepare_weights(OpKind::Conv2d, 1, ew.view(), a1.span(), /*blocked=*/true);
  ASSERT_TRUE(e_made.ok()) << e_made.status().message();
  // 9x9 (an expanded image of 7.8 KB: scratch) and 40x40 at stride 1 and 2 (154 KB: fused).
  for (const auto& [hw, stride] : {std::pair<std::int64_t, std::int64_t>{9, 1}, {40, 1}, {40, 2}}) {
    const AttrList ad = AttrList().ints({stride, stride}).ints({1, 1}).ints({1, 1}).i(cexp);
    auto d_made = prepare_weights(OpKind::Conv2d, 1, dw.view(), ad.span(), /*blocked=*/true);
    ASSERT_TRUE(d_made.ok()) << d_made.status().message();
    const std::int64_t oh = (hw + 2 - 3) / stride + 1;
    Tensor x = Tensor::random(DType::kF32, {n, cin, hw, hw}, rng);
    // The two convs one after the other, plain: relu6(expand(x)), then the depthwise conv + relu.
    Tensor mid(DType::kF32, {n, cexp, hw, hw}), want(DType::kF32, {n, cexp, oh, oh});
    {
      PoolContext ctx(1);
      ctx.act = FusedActivation::kRelu6;
      std::vector<TensorView> o{mid.view()};
      ASSERT_TRUE(testing::run_views(OpKind::Conv2d, {x.view(), ew.view(), eb.view()}, o, a1, &ctx).ok());
      ctx.act = FusedActivation::kRelu;
      std::vector<TensorView> o2{want.view()};
      ASSERT_TRUE(testing::run_views(OpKind::Conv2d, {mid.view(), dw.view(), db.view()}, o2, ad, &ctx).ok());
    }
    Tensor xb(DType::kF32, {n, 2, hw, hw, nchwc::kBlock});
    ThreadPool one(1);
    nchwc::to_blocked(x.as<float>(), xb.as<float>(), n, cin, hw * hw, one);
    for (int threads : {1, 2}) {
      FoldContext ctx(threads);
      ctx.prepared = d_made->get();
      ctx.act = FusedActivation::kRelu;
      const std::vector<TensorView> folded_in{xb.view(), ew.view(), eb.view()};
      FoldedConv fc;
      fc.inputs = folded_in;
      fc.attrs = a1.span();
      fc.prepared = e_made->get();
      fc.input_blocked = true;
      fc.act = FusedActivation::kRelu6;
      ctx.folded = &fc;
      Tensor out(DType::kF32, {n, 3, oh, oh, nchwc::kBlock});
      std::vector<TensorView> ov{out.view()};
      const Status st = testing::run_views(OpKind::Conv2d, {shape_only({n, 3, hw, hw, nchwc::kBlock}), dw.view(), db.view()},
                                           ov, ad, &ctx);
      ASSERT_TRUE(st.ok()) << st.message();
      EXPECT_TRUE(out.canary_intact());
      std::vector<float> plain(static_cast<std::size_t>(n * cexp * oh * oh));
      nchwc::to_plain(out.as<float>(), plain.data(), n, cexp, oh * oh, ctx.pool());
      for (std::size_t i = 0; i < plain.size(); ++i) {
        ASSERT_NEAR(plain[i], want.as<float>()[i], 1e-5 + 1e-5 * std::abs(want.as<float>()[i]))
            << hw << "x" << hw << " stride " << stride << ", " << threads << " threads, at " << i;
      }
    }
  }

  // Folded inputs that do not fit: the folded x without data, an expansion of 28 channels
  // for a depthwise input of 24 (3 blocks), a depthwise weight of another channel count.
  const AttrList ad = AttrList().ints({1, 1}).ints({1, 1}).ints({1, 1}).i(cexp);
  auto d_made = prepare_weights(OpKind::Conv2d, 1, dw.view(), ad.span(), /*blocked=*/true);
  ASSERT_TRUE(d_made.ok());
  Tensor xb(DType::kF32, {n, 2, 6, 6, nchwc::kBlock}), wide(DType::kF32, {28, cin, 1, 1}), dw16(DType::kF32, {16, 1, 3, 3});
  FoldContext ctx(1);
  ctx.prepared = d_made->get();
  auto run_folded = [&](const TensorView& x0, const Tensor& e_weight, const Tensor& d_weight) {
    const std::vector<TensorView> folded_in{x0, e_weight.view(), testing::absent()};
    FoldedConv fc;
    fc.inputs = folded_in;
    fc.attrs = a1.span();
    fc.prepared = e_made->get();
    fc.input_blocked = true;
    ctx.folded = &fc;
    Tensor out(DType::kF32, {n, 3, 6, 6, nchwc::kBlock});
    std::vector<TensorView> ov{out.view()};
    return testing::run_views(OpKind::Conv2d, {shape_only({n, 3, 6, 6, nchwc::kBlock}), d_weight.view(), testing::absent()},
                              ov, ad, &ctx);
  };
  EXPECT_TRUE(testing::fails_with(run_folded(shape_only({n, 2, 6, 6, nchwc::kBlock}), ew, dw), StatusCode::kInvalidBundle,
                                  "conv2d", "inputs[0] has shape [2, 2, 6, 6, 8] but no data"));
  EXPECT_TRUE(testing::fails_with(run_folded(xb.view(), wide, dw), StatusCode::kInvalidBundle, "conv2d",
                                  "x holds 3 channel blocks, not the 4 of 28 channels"));
  EXPECT_TRUE(testing::fails_with(run_folded(xb.view(), ew, dw16), StatusCode::kInvalidBundle, "conv2d"));
}

}  // namespace
}  // namespace kiln::cpu

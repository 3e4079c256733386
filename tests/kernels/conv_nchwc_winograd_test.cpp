// conv2d_winograd (nchwc.h: Winograd F(4x4, 3x3) on NCHW8c) against a naive
// double-precision convolution over randomized shapes: odd sizes (partial tiles), channel
// counts that are not multiples of 8, padding 0..2 per axis, batch 1 and 3; every (plain |
// blocked) input x output layout, bias or none, residual none / plain / blocked / y
// itself, every fused activation, 1 and 2 threads, every kernel table this CPU runs, every
// block-group width. Padded output lanes must come out zero, nothing outside the outputs
// may change, unsupported shapes and mismatched extents fail with messages naming them.
//
// The tolerance: F(4x4, 3x3) rounds in the transformed domain, where B^T (entries up to 5)
// and A^T (up to 8) scale a tile's values by up to ~10x and ~19x around the products
// (conv_winograd.h), so its error is a multiple of the direct kernel's: per output,
// |got - want| <= 1e-5 + 1e-5 |want| + 2e-5 * mag, mag = |bias| + |residual| + sum |w x|
// of the output's terms. Measured (ErrorOnResnetLayersStaysSmall prints it): the worst
// element of F(4x4) stays below 2.5e-6 * mag (F(2x2): 1e-7, the direct kernel 3e-7), so
// the bound has ~8x headroom; changing one entry of A^T by 1.25e-4 (8 -> 8.001) fails six
// of these tests.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "backends/cpu/kernel.h"
#include "backends/cpu/kernels/conv_nchwc_winograd.h"
#include "backends/cpu/kernels/nchwc.h"
#include "backends/cpu/scratch_buffer.h"
#include "backends/cpu/thread_pool.h"

namespace kiln::cpu::nchwc {
namespace {

constexpr double kMagTolerance = 2e-5;

struct Case {
  std::int64_t n, cin, cout, h, w, ph, pw;
};

ConvShape shape_of(const Case& c) {
  ConvShape s;
  s.in_channels = c.cin;
  s.out_channels = c.cout;
  s.kh = s.kw = 3;
  s.pad_h = c.ph;
  s.pad_w = c.pw;
  return s;
}

std::int64_t out_h(const Case& c) { return c.h + 2 * c.ph - 2; }
std::int64_t out_w(const Case& c) { return c.w + 2 * c.pw - 2; }

std::vector<float> uniform(std::mt19937& rng, std::int64_t n, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& x : v) x = d(rng);
  return v;
}

double activate(FusedActivation act, double v) {
  switch (act) {
    case FusedActivation::kNone: return v;
    case FusedActivation::kRelu: return std::max(v, 0.0);
    case FusedActivation::kRelu6: return std::min(std::max(v, 0.0), 6.0);
    case FusedActivation::kHardswish: return v * std::min(std::max(v + 3.0, 0.0), 6.0) / 6.0;
    case FusedActivation::kHardsigmoid: return std::min(std::max(v + 3.0, 0.0), 6.0) / 6.0;
    case FusedActivation::kSilu: return v / (1.0 + std::exp(-v));
    case FusedActivation::kGeluErf: return 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
    case FusedActivation::kGeluTanh: return 0.5 * v * (1.0 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
  }
  return v;
}

constexpr FusedActivation kActivations[] = {
    FusedActivation::kNone,      FusedActivation::kRelu,        FusedActivation::kRelu6, FusedActivation::kHardswish,
    FusedActivation::kHardsigmoid, FusedActivation::kSilu,      FusedActivation::kGeluErf, FusedActivation::kGeluTanh};

// A logical [n, c, h, w] tensor (plain values) stored in either layout, inside a buffer
// with guard floats on both sides; the padded lanes of a blocked one hold `pad_value`.
constexpr std::int64_t kGuard = 64;
constexpr float kGuardValue = -12345.5f;

class Stored {
 public:
  Stored(const std::vector<float>& plain, std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w, bool blocked,
         float pad_value = 1.0e6f) {
    act_.n = n, act_.c = c, act_.h = h, act_.w = w, act_.blocked = blocked;
    buffer_.assign(static_cast<std::size_t>(act_.floats() + 2 * kGuard), kGuardValue);
    act_.data = buffer_.data() + kGuard;
    for (std::int64_t i = 0; i < act_.floats(); ++i) act_.data[i] = pad_value;
    for (std::int64_t img = 0; img < n; ++img) {
      for (std::int64_t ch = 0; ch < c; ++ch) {
        for (std::int64_t y = 0; y < h; ++y) {
          for (std::int64_t x = 0; x < w; ++x) {
            act_.data[img * act_.image_floats() + act_.offset(ch, y, x)] =
                plain[static_cast<std::size_t>(((img * c + ch) * h + y) * w + x)];
          }
        }
      }
    }
  }
  const Act& act() const { return act_; }
  Act& act() { return act_; }
  double at(std::int64_t img, std::int64_t ch, std::int64_t y, std::int64_t x) const {
    return act_.data[img * act_.image_floats() + act_.offset(ch, y, x)];
  }
  bool guards_intact() const {
    for (std::int64_t i = 0; i < kGuard; ++i) {
      if (buffer_[static_cast<std::size_t>(i)] != kGuardValue) return false;
      if (buffer_[buffer_.size() - 1 - static_cast<std::size_t>(i)] != kGuardValue) return false;
    }
    return true;
  }
  // The padded lanes of a blocked tensor: all zero.
  bool padded_lanes_zero() const {
    if (!act_.blocked || act_.c % kBlock == 0) return true;
    const std::int64_t plane = act_.h * act_.w, last = act_.c / kBlock;
    for (std::int64_t img = 0; img < act_.n; ++img) {
      for (std::int64_t p = 0; p < plane; ++p) {
        for (std::int64_t l = act_.c % kBlock; l < kBlock; ++l) {
          if (act_.data[img * act_.image_floats() + (last * plane + p) * kBlock + l] != 0.0f) return false;
        }
      }
    }
    return true;
  }

 private:
  Act act_;
  std::vector<float> buffer_;
};

enum class Residual { kNone, kPlain, kBlocked, kOutput };

struct Options {
  bool in_blocked = true, out_blocked = true, bias = true;
  Residual residual = Residual::kNone;
  FusedActivation act = FusedActivation::kNone;
  int threads = 1;
  int width = 0;  // 0: prepare_winograd's choice
};

ThreadPool& pool_for(int threads) {
  static ThreadPool one(1);
  static ThreadPool two(2);
  return threads == 1 ? one : two;
}

std::string describe(const Case& c, const Options& o) {
  return "n=" + std::to_string(c.n) + " cin=" + std::to_string(c.cin) + " cout=" + std::to_string(c.cout) + " " +
         std::to_string(c.h) + "x" + std::to_string(c.w) + " p=" + std::to_string(c.ph) + "," + std::to_string(c.pw) +
         (o.in_blocked ? " in:blocked" : " in:plain") + (o.out_blocked ? " out:blocked" : " out:plain") +
         (o.bias ? " bias" : "") + " residual=" + std::to_string(static_cast<int>(o.residual)) +
         " act=" + activation_name(o.act) + " threads=" + std::to_string(o.threads) + " width=" + std::to_string(o.width);
}

// Every kernel table this CPU runs (portable, AVX2, AVX-512).
std::vector<const WinogradKernels*> kernel_tables() {
  std::vector<const WinogradKernels*> tables{&winograd_kernels_portable()};
  if (winograd_kernels_avx2() != nullptr) tables.push_back(winograd_kernels_avx2());
  if (winograd_kernels_avx512() != nullptr) tables.push_back(winograd_kernels_avx512());
  return tables;
}

// The reference: want (after the epilogue) and mag (the sum of its terms' magnitudes).
struct Reference {
  std::vector<double> want, mag;
};

Reference reference(const Case& c, const Options& o, const std::vector<float>& x, const std::vector<float>& w,
                    const std::vector<float>& bias, const std::vector<float>& res) {
  const std::int64_t oh = out_h(c), ow = out_w(c);
  Reference r;
  r.want.resize(static_cast<std::size_t>(c.n * c.cout * oh * ow));
  r.mag.resize(r.want.size());
  for (std::int64_t img = 0; img < c.n; ++img) {
    for (std::int64_t oc = 0; oc < c.cout; ++oc) {
      for (std::int64_t oy = 0; oy < oh; ++oy) {
        for (std::int64_t ox = 0; ox < ow; ++ox) {
          double sum = o.bias ? bias[static_cast<std::size_t>(oc)] : 0.0, m = std::abs(sum);
          for (std::int64_t ci = 0; ci < c.cin; ++ci) {
            for (std::int64_t i = 0; i < 3; ++i) {
              const std::int64_t iy = oy - c.ph + i;
              if (iy < 0 || iy >= c.h) continue;
              for (std::int64_t j = 0; j < 3; ++j) {
                const std::int64_t ix = ox - c.pw + j;
                if (ix < 0 || ix >= c.w) continue;
                const double p = static_cast<double>(w[static_cast<std::size_t>(((oc * c.cin + ci) * 3 + i) * 3 + j)]) *
                                 x[static_cast<std::size_t>(((img * c.cin + ci) * c.h + iy) * c.w + ix)];
                sum += p;
                m += std::abs(p);
              }
            }
          }
          const std::size_t at = static_cast<std::size_t>(((img * c.cout + oc) * oh + oy) * ow + ox);
          if (o.residual != Residual::kNone) {
            sum += res[at];
            m += std::abs(res[at]);
          }
          r.want[at] = activate(o.act, sum);
          r.mag[at] = m;
        }
      }
    }
  }
  return r;
}

void check_conv(const Case& c, const Options& o, std::uint32_t seed) {
  SCOPED_TRACE(describe(c, o));
  std::mt19937 rng(seed);
  const std::int64_t oh = out_h(c), ow = out_w(c);
  const std::vector<float> x = uniform(rng, c.n * c.cin * c.h * c.w);
  const std::vector<float> w = uniform(rng, c.cout * c.cin * 9);
  const std::vector<float> bias = uniform(rng, c.cout);
  const std::vector<float> res = uniform(rng, c.n * c.cout * oh * ow);
  const std::vector<float> y_init(static_cast<std::size_t>(c.n * c.cout * oh * ow), std::nanf(""));
  const Reference ref = reference(c, o, x, w, bias, res);

  const ConvShape s = shape_of(c);
  for (const WinogradKernels* kernels : kernel_tables()) {
   for (WinogradTile tile : {WinogradTile::kF4, WinogradTile::kF2}) {
    for (WinogradWeightMode mode : {WinogradWeightMode::kStreamed, WinogradWeightMode::kCached}) {
    SCOPED_TRACE(std::string(kernels->name) + (tile == WinogradTile::kF4 ? " F(4x4)" : " F(2x2)") +
                 (mode == WinogradWeightMode::kStreamed ? " streamed" : " cached"));
    const int width = o.width != 0 ? o.width : kernels->preferred_width((c.cout + 7) / 8);
    auto prepared = prepare_winograd_width(w.data(), s, width, mode);
    ASSERT_TRUE(prepared.ok()) << prepared.status().message();
    Stored xs(x, c.n, c.cin, c.h, c.w, o.in_blocked);
    const bool res_in_y = o.residual == Residual::kOutput;
    Stored ys(res_in_y ? res : y_init, c.n, c.cout, oh, ow, o.out_blocked, res_in_y ? -3.0f : std::nanf(""));
    Stored rs(res, c.n, c.cout, oh, ow, o.residual == Residual::kBlocked, -7.0f);
    Epilogue e;
    e.bias = o.bias ? bias.data() : nullptr;
    e.residual = o.residual == Residual::kNone ? nullptr : res_in_y ? &ys.act() : &rs.act();
    e.act = o.act;
    const Status st = conv2d_winograd_tile(*kernels, tile, xs.act(), **prepared, s, e, ys.act(), pool_for(o.threads));
    ASSERT_TRUE(st.ok()) << st.message();
    EXPECT_TRUE(ys.guards_intact());
    EXPECT_TRUE(ys.padded_lanes_zero());
    std::int64_t bad = 0;
    for (std::int64_t img = 0; img < c.n; ++img) {
      for (std::int64_t oc = 0; oc < c.cout; ++oc) {
        for (std::int64_t oy = 0; oy < oh; ++oy) {
          for (std::int64_t ox = 0; ox < ow; ++ox) {
            const std::size_t at = static_cast<std::size_t>(((img * c.cout + oc) * oh + oy) * ow + ox);
            const double got = ys.at(img, oc, oy, ox), want = ref.want[at];
            const double tol = 1e-5 + 1e-5 * std::abs(want) + kMagTolerance * ref.mag[at];
            const double err = std::abs(got - want);
            if (!(err <= tol) && bad++ < 5) {
              ADD_FAILURE() << "y[" << img << "," << oc << "," << oy << "," << ox << "] = " << got << ", want " << want
                            << " (mag " << ref.mag[at] << ")";
            }
          }
        }
      }
    }
    EXPECT_EQ(bad, 0);
    // kCached holds the transform the run made; kStreamed never holds one.
    WinogradTile made = WinogradTile::kF4;
    EXPECT_EQ(winograd_transformed_tile(**prepared, &made), mode == WinogradWeightMode::kCached);
    if (mode == WinogradWeightMode::kCached) {
      EXPECT_EQ(made, tile);
    }
    }
   }
  }
}

// Shapes around the tiles, the borders and the channel blocks.
const Case kCases[] = {
    // n cin cout  h   w  ph pw
    {1, 3, 8, 5, 5, 1, 1},       // one tile row, 3 input channels
    {3, 13, 17, 9, 11, 1, 1},    // batch 3, partial blocks both sides, partial tiles
    {1, 17, 13, 7, 7, 0, 0},     // no padding
    {1, 8, 16, 6, 10, 2, 2},     // padding 2
    {2, 16, 24, 11, 6, 0, 2},    // mixed padding
    {1, 64, 64, 14, 14, 1, 1},   // several input blocks
    {1, 72, 40, 13, 9, 2, 1},    // 9 input blocks
    {1, 5, 9, 3, 3, 0, 0},       // one output pixel
    {1, 9, 11, 3, 4, 2, 0},      // tiles mostly in the padding
    {2, 24, 72, 8, 8, 1, 1},     // 9 output blocks
    {1, 3, 64, 19, 23, 1, 2},    // wide and odd
    {1, 40, 8, 1, 30, 2, 1},     // one input row
};

TEST(NchwcWinograd, MatchesNaiveConvolutionOnEveryLayout) {
  int variant = 0;
  std::uint32_t seed = 100;
  for (std::size_t k = 0; k < std::size(kCases); ++k) {
    for (int layout = 0; layout < 4; ++layout) {
      Options o;
      o.in_blocked = layout & 1;
      o.out_blocked = layout & 2;
      o.residual = static_cast<Residual>((k + layout) % 4);
      o.bias = (k + layout) % 4 != 1;
      o.act = kActivations[variant % 8];
      o.threads = 1 + (variant / 3) % 2;
      ++variant;
      check_conv(kCases[k], o, seed++);
    }
  }
}

TEST(NchwcWinograd, EveryActivationAndResidualOnEveryLayout) {
  const Case c{2, 13, 20, 9, 10, 1, 1};
  std::uint32_t seed = 7;
  for (FusedActivation act : kActivations) {
    for (Residual res : {Residual::kNone, Residual::kPlain, Residual::kBlocked, Residual::kOutput}) {
      for (int layout = 0; layout < 4; ++layout) {
        Options o;
        o.in_blocked = layout & 1;
        o.out_blocked = layout & 2;
        o.residual = res;
        o.act = act;
        o.threads = 2;
        check_conv(c, o, seed++);
      }
    }
  }
}

// Every register tile: widths 1..6 over output block counts 1..9 and tile counts that
// leave every row count.
TEST(NchwcWinograd, EveryWidthAndTileCount) {
  std::uint32_t seed = 900;
  for (int width = 1; width <= kWinogradMaxWidth; ++width) {
    for (std::int64_t cout : {8, 20, 40, 72}) {
      for (std::int64_t w : {2, 6, 13, 30, 63}) {
        const Case c{1, 11, cout, 5, w, 1, 1};
        Options o;
        o.width = width;
        o.in_blocked = w % 2 == 1;
        o.residual = w == 13 ? Residual::kBlocked : Residual::kNone;
        o.act = w == 6 ? FusedActivation::kRelu : FusedActivation::kNone;
        o.threads = 1 + static_cast<int>(w % 2);
        check_conv(c, o, seed++);
      }
    }
  }
}

// Randomized shapes (fixed seed): channel counts, sizes, padding per axis, batch.
TEST(NchwcWinograd, MatchesNaiveConvolutionOnRandomShapes) {
  std::mt19937 rng(2024);
  auto pick = [&](std::int64_t lo, std::int64_t hi) { return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng); };
  const std::int64_t channels[] = {1, 3, 8, 13, 17, 24, 33, 64, 72};
  for (int trial = 0; trial < 40; ++trial) {
    Case c{};
    c.cin = channels[pick(0, 8)];
    c.cout = channels[pick(0, 8)];
    c.ph = pick(0, 2);
    c.pw = pick(0, 2);
    c.n = pick(0, 3) == 0 ? 3 : 1;
    c.h = std::max<std::int64_t>(pick(1, 23), 3 - 2 * c.ph);
    c.w = std::max<std::int64_t>(pick(1, 23), 3 - 2 * c.pw);
    Options o;
    o.in_blocked = pick(0, 3) != 0;
    o.out_blocked = pick(0, 3) != 0;
    o.bias = pick(0, 1);
    o.residual = static_cast<Residual>(pick(0, 3));
    o.act = kActivations[pick(0, 7)];
    o.threads = static_cast<int>(pick(1, 2));
    o.width = static_cast<int>(pick(0, kWinogradMaxWidth));
    check_conv(c, o, static_cast<std::uint32_t>(trial));
  }
}

// Larger layers (the real networks' shapes, cut down), where the batch is cut into several
// tile groups and output chunks across the threads.
TEST(NchwcWinograd, MatchesNaiveConvolutionOnNetworkShapes) {
  const Case cases[] = {
      {1, 64, 64, 30, 28, 1, 1},
      {1, 128, 128, 14, 14, 1, 1},
      {1, 256, 64, 7, 7, 1, 1},
      {2, 64, 128, 12, 9, 1, 1},
      {3, 32, 48, 17, 17, 1, 1},
      {1, 160, 160, 20, 20, 1, 1},  // streamed: a U over 1 MiB, two tile groups (per pass)
  };
  std::uint32_t seed = 50;
  for (const Case& c : cases) {
    for (int threads : {1, 2}) {
      Options o;
      o.threads = threads;
      o.residual = threads == 2 ? Residual::kBlocked : Residual::kNone;
      o.act = threads == 2 ? FusedActivation::kRelu : FusedActivation::kRelu6;
      check_conv(c, o, seed++);
    }
  }
}

// Blocked input whose padded lanes hold large values: they must not reach a real channel
// (the padded weights are zero, and the input transform drops those lanes).
TEST(NchwcWinograd, PaddedInputLanesDoNotReachTheOutput) {
  const Case c{1, 5, 9, 6, 7, 1, 1};
  std::mt19937 rng(3);
  const std::vector<float> x = uniform(rng, c.cin * c.h * c.w), w = uniform(rng, c.cout * c.cin * 9);
  auto prepared = prepare_winograd(w.data(), shape_of(c));
  ASSERT_TRUE(prepared.ok());
  Stored a(x, 1, c.cin, c.h, c.w, true, 3.0e37f), b(x, 1, c.cin, c.h, c.w, true, -3.0e5f);
  const std::vector<float> y0(static_cast<std::size_t>(c.cout * out_h(c) * out_w(c)), 0.0f);
  Stored ya(y0, 1, c.cout, out_h(c), out_w(c), true), yb(y0, 1, c.cout, out_h(c), out_w(c), true);
  for (const WinogradKernels* k : kernel_tables()) {
    SCOPED_TRACE(k->name);
    ASSERT_TRUE(conv2d_winograd_on(*k, a.act(), **prepared, shape_of(c), {}, ya.act(), pool_for(1)).ok());
    ASSERT_TRUE(conv2d_winograd_on(*k, b.act(), **prepared, shape_of(c), {}, yb.act(), pool_for(1)).ok());
    for (std::int64_t i = 0; i < ya.act().floats(); ++i) ASSERT_EQ(ya.act().data[i], yb.act().data[i]) << i;
    EXPECT_TRUE(ya.padded_lanes_zero());
  }
}

TEST(NchwcWinograd, RunsEveryKernelTableTheCpuHas) {
  const auto tables = kernel_tables();
  ASSERT_GE(tables.size(), 1u);
  EXPECT_STREQ(tables[0]->name, "baseline");
  for (const WinogradKernels* k : tables) {
    for (const WinogradTransforms& t : k->transforms) {
      EXPECT_NE(t.input, nullptr);
      EXPECT_NE(t.output, nullptr);
    }
    for (int width = 1; width <= kWinogradMaxWidth; ++width) {
      ASSERT_GE(k->max_rows[width - 1], 1) << k->name;
      for (int p = 1; p <= k->max_rows[width - 1]; ++p) EXPECT_NE(k->gemm[width - 1][p - 1], nullptr) << k->name;
    }
  }
}

TEST(NchwcWinograd, SupportsOnly3x3Stride1Ungrouped) {
  ConvShape s;
  s.in_channels = 16, s.out_channels = 32, s.kh = s.kw = 3, s.pad_h = s.pad_w = 1;
  EXPECT_TRUE(winograd_supported(s));
  ConvShape t = s;
  t.stride_h = 2;
  EXPECT_FALSE(winograd_supported(t));
  t = s;
  t.stride_w = 2;
  EXPECT_FALSE(winograd_supported(t));
  t = s;
  t.dilation_h = 2;
  EXPECT_FALSE(winograd_supported(t));
  t = s;
  t.groups = 2;
  EXPECT_FALSE(winograd_supported(t));
  t = s;
  t.kh = t.kw = 5;
  EXPECT_FALSE(winograd_supported(t));
  t = s;
  t.kw = 1;
  EXPECT_FALSE(winograd_supported(t));
  t = s;
  t.pad_w = 3;
  EXPECT_FALSE(winograd_supported(t));
  t = s;
  t.pad_h = 0, t.pad_w = 2;
  EXPECT_TRUE(winograd_supported(t));
  std::vector<float> w(32 * 16 * 25, 0.5f);
  ConvShape five = s;
  five.kh = five.kw = 5;
  auto refused = prepare_winograd(w.data(), five);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidInput);
  EXPECT_EQ(refused.status().message(),
            "[prepare_winograd] unsupported convolution: kernel 5x5 stride 1,1 dilation 1,1 groups 1");
  ConvShape strided = s;
  strided.stride_h = strided.stride_w = 2;
  EXPECT_EQ(prepare_winograd(w.data(), strided).status().message(),
            "[prepare_winograd] unsupported convolution: kernel 3x3 stride 2,2 dilation 1,1 groups 1");
  EXPECT_FALSE(winograd_preferred(strided, 1, 56, 56, 1));
}

TEST(NchwcWinograd, RejectsMismatchedExtentsNamingThem) {
  const Case c{1, 5, 9, 6, 7, 1, 0};  // output 6x5
  const ConvShape s = shape_of(c);
  std::vector<float> w(9 * 5 * 9, 0.5f), xbuf(1000, 1.0f), ybuf(1000, 0.0f), rbuf(1000, 0.0f);
  auto prepared = prepare_winograd(w.data(), s);
  ASSERT_TRUE(prepared.ok());
  Act x{xbuf.data(), 1, 5, 6, 7, true}, y{ybuf.data(), 1, 9, 6, 5, false};
  ASSERT_TRUE(conv2d_winograd(x, **prepared, s, {}, y, pool_for(1)).ok());

  auto message = [&](const Act& xa, const Act& ya, const Epilogue& e, const ConvShape& sa) {
    const Status st = conv2d_winograd(xa, **prepared, sa, e, ya, pool_for(1));
    EXPECT_EQ(st.code(), StatusCode::kInvalidInput);
    return st.message();
  };
  Act bad = x;
  bad.c = 6;
  EXPECT_EQ(message(bad, y, {}, s), "[conv2d_winograd] x.c=6 != in_channels=5");
  bad = y;
  bad.c = 8;
  EXPECT_EQ(message(x, bad, {}, s), "[conv2d_winograd] y.c=8 != out_channels=9");
  bad = y;
  bad.n = 2;
  EXPECT_EQ(message(x, bad, {}, s), "[conv2d_winograd] y.n=2 != x.n=1");
  bad = y;
  bad.h = 4;
  EXPECT_EQ(message(x, bad, {}, s), "[conv2d_winograd] y.h=4 != output height 6 (x.h=6, pad_h=1)");
  bad = y;
  bad.w = 7;
  EXPECT_EQ(message(x, bad, {}, s), "[conv2d_winograd] y.w=7 != output width 5 (x.w=7, pad_w=0)");
  bad = x;
  bad.h = 0;
  EXPECT_EQ(message(bad, y, {}, s), "[conv2d_winograd] x has extents [1, 5, 0, 7] blocked");
  bad = x;
  bad.data = nullptr;
  EXPECT_EQ(message(bad, y, {}, s), "[conv2d_winograd] x.data is null");
  Act same_x = y;
  same_x.data = xbuf.data();
  EXPECT_EQ(message(x, same_x, {}, s), "[conv2d_winograd] x and y share their data");
  Act res{rbuf.data(), 1, 9, 6, 4, true};
  Epilogue e;
  e.residual = &res;
  EXPECT_EQ(message(x, y, e, s), "[conv2d_winograd] residual [1, 9, 6, 4] blocked != y [1, 9, 6, 5] plain");
  Act same{ybuf.data(), 1, 9, 6, 5, true};
  e.residual = &same;
  EXPECT_EQ(message(x, y, e, s), "[conv2d_winograd] residual shares y's data in another layout");
  ConvShape other = s;
  other.out_channels = 10;
  EXPECT_EQ(message(x, y, {}, other),
            "[conv2d_winograd] weights prepared for in_channels=5 out_channels=9, called with in_channels=5 "
            "out_channels=10");
  ConvShape strided = s;
  strided.stride_h = 2;
  EXPECT_EQ(message(x, y, {}, strided),
            "[conv2d_winograd] unsupported convolution: kernel 3x3 stride 2,1 dilation 1,1 groups 1 padding 1,0 "
            "(3x3, stride 1, dilation 1, groups 1, padding <= 2 only)");
  Act small_x{xbuf.data(), 1, 5, 1, 7, true};  // 1 row without padding: no output row
  ConvShape unpadded = s;
  unpadded.pad_h = 0;
  Act y_any{ybuf.data(), 1, 9, 1, 5, true};
  EXPECT_EQ(message(small_x, y_any, {}, unpadded), "[conv2d_winograd] y.h=1 != output height -1 (x.h=1, pad_h=0)");
}

// kStreamed (the default): the weights hold their kernels packed (1x, padded to whole
// blocks), copied at prepare, and never a transform; every run transforms what it needs,
// for either tile size.
TEST(NchwcWinograd, StreamedWeightsHoldOnlyThePackedKernels) {
  const Case c{1, 60, 20, 8, 8, 1, 1};  // 64 x 24 padded channels
  std::vector<float> w(20 * 60 * 9, 0.25f), x(static_cast<std::size_t>(blocked_floats(1, 60, 8, 8)), 1.0f),
      y(static_cast<std::size_t>(blocked_floats(1, 20, 8, 8)));
  const Act xa{x.data(), 1, 60, 8, 8, true}, ya{y.data(), 1, 20, 8, 8, true};
  EXPECT_EQ(winograd_weight_mode(), WinogradWeightMode::kStreamed);  // unless KILN_WINOGRAD_WEIGHTS=cached
  auto prepared = prepare_winograd_width(w.data(), shape_of(c), 2, WinogradWeightMode::kStreamed);
  ASSERT_TRUE(prepared.ok());
  EXPECT_EQ(winograd_weight_bytes(**prepared), 24 * 64 * 9 * 4);
  w.assign(w.size(), -1.0f);  // the kernels were copied: the source may change
  for (WinogradTile tile : {WinogradTile::kF4, WinogradTile::kF2, WinogradTile::kF4}) {
    for (int threads : {1, 2}) {
      y.assign(y.size(), 0.0f);
      ASSERT_TRUE(conv2d_winograd_tile(winograd_kernels(), tile, xa, **prepared, shape_of(c), {}, ya, pool_for(threads)).ok());
      // An interior pixel of the last output channel: 60 channels x 9 taps x 0.25.
      EXPECT_NEAR(y[static_cast<std::size_t>(((2 * 8 + 3) * 8 + 3) * 8 + 3)], 135.0f, 1e-3f);
      WinogradTile made = WinogradTile::kF4;
      EXPECT_FALSE(winograd_transformed_tile(**prepared, &made));
      EXPECT_EQ(winograd_weight_bytes(**prepared), 24 * 64 * 9 * 4);
    }
  }
}

// kCached: the transform is made by the first run, for the tile size it asks, and the
// packed kernels dropped; a later run asking the other tile size runs the one made.
TEST(NchwcWinograd, CachedWeightsTransformOnTheFirstRun) {
  const Case c{1, 64, 64, 8, 8, 1, 1};
  std::vector<float> w(64 * 64 * 9, 0.25f), x(static_cast<std::size_t>(blocked_floats(1, 64, 8, 8)), 1.0f),
      y(static_cast<std::size_t>(blocked_floats(1, 64, 8, 8)));
  const Act xa{x.data(), 1, 64, 8, 8, true}, ya{y.data(), 1, 64, 8, 8, true};
  for (WinogradTile first : {WinogradTile::kF4, WinogradTile::kF2}) {
    auto prepared = prepare_winograd_width(w.data(), shape_of(c), 2, WinogradWeightMode::kCached);
    ASSERT_TRUE(prepared.ok());
    EXPECT_EQ(winograd_weight_bytes(**prepared), 64 * 64 * 9 * 4);
    WinogradTile made = WinogradTile::kF4;
    EXPECT_FALSE(winograd_transformed_tile(**prepared, &made));
    std::vector<float> changed(w.size(), -1.0f);  // the weights were copied: the source may change
    std::swap(w, changed);
    ASSERT_TRUE(conv2d_winograd_tile(winograd_kernels(), first, xa, **prepared, shape_of(c), {}, ya, pool_for(2)).ok());
    std::swap(w, changed);
    ASSERT_TRUE(winograd_transformed_tile(**prepared, &made));
    EXPECT_EQ(made, first);
    const std::int64_t values = winograd_values(first);
    EXPECT_GE(winograd_weight_bytes(**prepared), values * 64 * 64 * 4);
    EXPECT_LT(winograd_weight_bytes(**prepared), values * 64 * 64 * 4 + 4096);
    // An interior pixel: 64 channels x 9 taps x 0.25.
    EXPECT_NEAR(y[static_cast<std::size_t>((3 * 8 + 3) * 8)], 144.0f, 1e-3f);
    // The other tile size asked later: the one made runs.
    const WinogradTile other = first == WinogradTile::kF4 ? WinogradTile::kF2 : WinogradTile::kF4;
    y.assign(y.size(), 0.0f);
    ASSERT_TRUE(conv2d_winograd_tile(winograd_kernels(), other, xa, **prepared, shape_of(c), {}, ya, pool_for(1)).ok());
    ASSERT_TRUE(winograd_transformed_tile(**prepared, &made));
    EXPECT_EQ(made, first);
    EXPECT_NEAR(y[static_cast<std::size_t>((3 * 8 + 3) * 8)], 144.0f, 1e-3f);
  }
}

// The cost rule (measured on this CPU: bench/nchwc_winograd_bench.cpp): Winograd F(4x4) on
// resnet's 56x56 .. 28x28 layers, F(2x2) on the 7x7 ones (whose F(4x4) transform, 37.7 MB,
// streams from memory for 4 tiles), the direct kernel where a layer has too few pixels to
// pay for streaming its transformed weights.
TEST(NchwcWinograd, CostRulePicksTheFasterKernel) {
  ConvShape s;
  s.kh = s.kw = 3, s.pad_h = s.pad_w = 1;
  for (int threads : {1, 2}) {
    SCOPED_TRACE(threads);
    s.in_channels = s.out_channels = 64;
    EXPECT_TRUE(winograd_preferred(s, 1, 56, 56, threads));
    EXPECT_EQ(winograd_tile(s, 1, 56, 56, threads), WinogradTile::kF4);
    s.in_channels = s.out_channels = 128;
    EXPECT_TRUE(winograd_preferred(s, 1, 28, 28, threads));
    EXPECT_EQ(winograd_tile(s, 1, 28, 28, threads), WinogradTile::kF4);
    s.in_channels = s.out_channels = 256;
    EXPECT_TRUE(winograd_preferred(s, 1, 14, 14, threads));
    s.in_channels = s.out_channels = 512;
    EXPECT_TRUE(winograd_preferred(s, 1, 7, 7, threads));
    EXPECT_EQ(winograd_tile(s, 1, 7, 7, threads), WinogradTile::kF2);
    EXPECT_FALSE(winograd_preferred(s, 1, 2, 2, threads));
    EXPECT_LT(winograd_estimate_us(WinogradTile::kF2, s, 1, 7, 7, threads), direct_estimate_us(s, 1, 7, 7, threads));
  }
}

// The error of F(4x4, 3x3) and F(2x2, 3x3) against the double reference on resnet layer
// shapes with kaiming-uniform weights (bound sqrt(6 / fan_in), fan_in = 9 c), uniform bias
// in [-0.1, 0.1] and inputs in [-1, 1] (the best ISA, 2 threads), next to conv2d_dense's:
// printed (the numbers in conv_nchwc_winograd.h), and bounded here well inside the
// fixtures' tolerance (rtol 1e-4, atol 1e-5 against PyTorch) relative to the outputs'
// scale (their RMS, ~0.8).
TEST(NchwcWinograd, ErrorOnResnetLayersStaysSmall) {
  const Case cases[] = {{1, 64, 64, 56, 56, 1, 1}, {1, 128, 128, 28, 28, 1, 1}, {1, 256, 256, 14, 14, 1, 1},
                        {1, 512, 512, 7, 7, 1, 1}};
  std::uint32_t seed = 11;
  for (const Case& c : cases) {
    std::mt19937 rng(seed++);
    const float bound = static_cast<float>(std::sqrt(6.0 / (9.0 * static_cast<double>(c.cin))));
    const std::vector<float> x = uniform(rng, c.n * c.cin * c.h * c.w);
    const std::vector<float> w = uniform(rng, c.cout * c.cin * 9, -bound, bound);
    const std::vector<float> bias = uniform(rng, c.cout, -0.1f, 0.1f);
    Options o;
    const Reference ref = reference(c, o, x, w, bias, {});
    const std::int64_t oh = out_h(c), ow = out_w(c);
    double rms = 0.0;
    for (double v : ref.want) rms += v * v;
    rms = std::sqrt(rms / static_cast<double>(ref.want.size()));
    const ConvShape s = shape_of(c);
    const Stored xs(x, c.n, c.cin, c.h, c.w, true);
    for (int kernel = 0; kernel < 3; ++kernel) {  // F(4x4), F(2x2), direct
      Stored ys(std::vector<float>(ref.want.size(), 0.0f), c.n, c.cout, oh, ow, true);
      Epilogue e;
      e.bias = bias.data();
      Status st;
      if (kernel < 2) {
        auto prepared = prepare_winograd(w.data(), s);
        ASSERT_TRUE(prepared.ok());
        st = conv2d_winograd_tile(winograd_kernels(), kernel == 0 ? WinogradTile::kF4 : WinogradTile::kF2, xs.act(),
                                  **prepared, s, e, ys.act(), pool_for(2));
      } else {
        auto prepared = prepare_dense(w.data(), s);
        ASSERT_TRUE(prepared.ok());
        st = conv2d_dense(xs.act(), **prepared, s, e, ys.act(), pool_for(2));
      }
      ASSERT_TRUE(st.ok()) << st.message();
      double max_abs = 0.0, max_mag = 0.0, sum_sq = 0.0;
      for (std::int64_t oc = 0; oc < c.cout; ++oc) {
        for (std::int64_t oy = 0; oy < oh; ++oy) {
          for (std::int64_t ox = 0; ox < ow; ++ox) {
            const std::size_t at = static_cast<std::size_t>((oc * oh + oy) * ow + ox);
            const double err = std::abs(ys.at(0, oc, oy, ox) - ref.want[at]);
            max_abs = std::max(max_abs, err);
            max_mag = std::max(max_mag, err / ref.mag[at]);
            sum_sq += err * err;
          }
        }
      }
      const double rms_err = std::sqrt(sum_sq / static_cast<double>(ref.want.size()));
      std::printf("%-6s %3lld@%-2lld: max abs err %.2e (%.2e of output RMS %.2f), RMS err %.2e, max err/mag %.2e\n",
                  kernel == 0 ? "F(4x4)" : kernel == 1 ? "F(2x2)" : "direct", static_cast<long long>(c.cin),
                  static_cast<long long>(c.h), max_abs, max_abs / rms, rms, rms_err, max_mag);
      EXPECT_LT(max_abs, 2e-4 * rms);
      EXPECT_LT(max_mag, kMagTolerance / 4);
    }
  }
}

// KernelContext::workspace: a run given memory takes its threads' buffers (and the U it
// makes for the run) from the workspace's start, smaller buffers when that is what fits,
// and its own buffers when nothing fits or the workspace is not 64-byte aligned. Outputs
// match a run without one (bit for bit on the SIMD tables; the portable one, compiled for
// any CPU, may contract other products into FMAs when the tile groups change size).
TEST(NchwcWinograd, AWorkspaceHoldsTheBuffersAndChangesNoOutput) {
  const float canary = std::bit_cast<float>(0x7fc0beefu);  // a NaN no kernel writes
  const Case cases[] = {
      {1, 64, 64, 28, 28, 1, 1},    // several tile groups at 2 threads: a U made for the run
      {1, 128, 128, 14, 14, 1, 1},  // streamed U, per pass
      {2, 13, 17, 9, 11, 1, 1},     // partial blocks, a batch
  };
  std::uint32_t seed = 900;
  struct Variant {
    bool blocked;
    int threads;
    WinogradTile tile;
  };
  const Variant variants[] = {{true, 2, WinogradTile::kF4},
                              {false, 1, WinogradTile::kF2},
                              {false, 2, WinogradTile::kF4},
                              {true, 1, WinogradTile::kF2}};
  for (const Case& c : cases) {
    for (const auto& [blocked, threads, tile] : variants) {
      SCOPED_TRACE(describe(c, {.in_blocked = blocked, .out_blocked = blocked, .threads = threads}) +
                   (tile == WinogradTile::kF4 ? " F(4x4)" : " F(2x2)"));
      std::mt19937 rng(seed++);
      const std::int64_t oh = out_h(c), ow = out_w(c);
      const std::vector<float> x = uniform(rng, c.n * c.cin * c.h * c.w), w = uniform(rng, c.cout * c.cin * 9);
      const std::vector<float> bias = uniform(rng, c.cout), y0(static_cast<std::size_t>(c.n * c.cout * oh * ow));
      const ConvShape s = shape_of(c);
      auto prepared = prepare_winograd_width(w.data(), s, winograd_kernels().preferred_width((c.cout + 7) / 8),
                                             WinogradWeightMode::kStreamed);
      ASSERT_TRUE(prepared.ok());
      const Stored xs(x, c.n, c.cin, c.h, c.w, blocked);
      Epilogue e;
      e.bias = bias.data();
      e.act = FusedActivation::kRelu;
      // y of a run with `workspace`; `ws` keeps what the run left in it.
      auto run = [&](std::span<std::byte> workspace) {
        Stored ys(y0, c.n, c.cout, oh, ow, blocked);
        const Status st = conv2d_winograd_tile(winograd_kernels(), tile, xs.act(), **prepared, s, e, ys.act(),
                                               pool_for(threads), workspace);
        EXPECT_TRUE(st.ok()) << st.message();
        std::vector<float> y(static_cast<std::size_t>(ys.act().floats()));
        std::copy(ys.act().data, ys.act().data + ys.act().floats(), y.begin());
        return y;
      };
      const std::vector<float> want = run({});
      auto same = [&](const std::vector<float>& got) {
        if (got.size() != want.size()) return false;
        for (std::size_t i = 0; i < got.size(); ++i) {
          if (!(std::abs(got[i] - want[i]) <= 1e-5f * (1.0f + std::abs(want[i])))) return false;
        }
        return true;
      };
      const std::size_t big = 4u << 20;
      std::vector<float> ws(big / 4 + 16, canary);
      auto* base = reinterpret_cast<std::byte*>(ws.data());
      base += (64 - reinterpret_cast<std::uintptr_t>(base) % 64) % 64;
      auto written_to = [&] {  // bytes up to the last one the run changed, in 64-byte lines
        std::size_t k = big / 4;
        while (k > 0 && std::bit_cast<std::uint32_t>(reinterpret_cast<float*>(base)[k - 1]) == 0x7fc0beefu) --k;
        return (k * 4 + 63) / 64 * 64;
      };
      auto reset = [&] { std::fill(ws.begin(), ws.end(), canary); };
      // A large workspace: used from its start, the output unchanged.
      EXPECT_TRUE(same(run({base, big})));
      const std::size_t used = written_to();
      EXPECT_GT(used, 0u) << "the run used its own buffers";
      EXPECT_LT(used, big);
      // Exactly that much.
      reset();
      EXPECT_TRUE(same(run({base, used})));
      EXPECT_LE(written_to(), used);
      // Less: smaller buffers or the run's own, never a byte outside.
      for (std::size_t size : {used - 64, used / 2, used / 4}) {
        reset();
        std::vector<float> before(ws.begin() + static_cast<std::ptrdiff_t>(size / 4 + 16), ws.end());
        EXPECT_TRUE(same(run({base, size}))) << "workspace of " << size << " bytes";
        EXPECT_TRUE(std::equal(before.begin(), before.end(), ws.begin() + static_cast<std::ptrdiff_t>(size / 4 + 16),
                               [](float a, float b) { return std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b); }))
            << "bytes past a workspace of " << size << " changed";
      }
      // Too small for anything, or misaligned: untouched.
      reset();
      EXPECT_TRUE(same(run({base, 1024})));
      EXPECT_EQ(written_to(), 0u);
      EXPECT_TRUE(same(run({base + 4, big - 64})));
      EXPECT_EQ(written_to(), 0u);
    }
  }
}

// winograd_workspace_bytes: what a run takes from a workspace as large as it asks (its
// threads' buffers, and the U it makes for the run), and 0 for a layer whose per-thread
// buffers are small enough to stay the threads' own (in their cores' L2).
TEST(NchwcWinograd, WorkspaceBytesAreWhatARunTakes) {
  const float canary = std::bit_cast<float>(0x7fc0beefu);
  struct Layer {
    Case c;
    int threads;
    bool planned;
    bool blocked = true;
  };
  const Layer layers[] = {
      {{1, 256, 256, 14, 14, 1, 1}, 2, true},         // resnet's 256@14: ~1.2 MB a thread
      {{1, 64, 64, 56, 56, 1, 1}, 2, true},           // resnet's 64@56, with a U for the run
      {{1, 16, 64, 13, 13, 1, 1}, 2, false},          // a small expand conv: its own buffers
      {{3, 256, 256, 14, 14, 1, 1}, 1, true, false},  // plain x and y (a blocked-kernel conv)
  };
  for (const Layer& layer : layers) {
    const Case& c = layer.c;
    SCOPED_TRACE(describe(c, {.in_blocked = layer.blocked, .out_blocked = layer.blocked, .threads = layer.threads}));
    std::mt19937 rng(77);
    const std::vector<float> w = uniform(rng, c.cout * c.cin * 9), x = uniform(rng, c.n * c.cin * c.h * c.w);
    const ConvShape s = shape_of(c);
    auto prepared = prepare_winograd(w.data(), s);
    ASSERT_TRUE(prepared.ok());
    const Stored xs(x, c.n, c.cin, c.h, c.w, layer.blocked);
    Stored ys(std::vector<float>(static_cast<std::size_t>(c.n * c.cout * out_h(c) * out_w(c))), c.n, c.cout, out_h(c),
              out_w(c), layer.blocked);
    const std::uint64_t bytes = winograd_workspace_bytes(**prepared, s, xs.act(), ys.act(), false, layer.threads);
    EXPECT_EQ(bytes > 0, layer.planned) << bytes;
    if (bytes == 0) continue;
    EXPECT_EQ(bytes % 64, 0u);
    // A run given exactly that much uses it (a slot: which one depends on the threads that
    // got chunks), and nothing past it.
    std::vector<float> ws(bytes / 4 + 64, canary);
    auto* base = reinterpret_cast<std::byte*>(ws.data());
    const std::size_t skip = (64 - reinterpret_cast<std::uintptr_t>(base) % 64) % 64;
    base += skip;
    ASSERT_TRUE(conv2d_winograd(xs.act(), **prepared, s, {}, ys.act(), pool_for(layer.threads), {base, bytes}).ok());
    std::size_t written = 0;
    for (std::size_t k = 0; k < bytes / 4; ++k) written += std::bit_cast<std::uint32_t>(reinterpret_cast<float*>(base)[k]) != 0x7fc0beefu;
    EXPECT_GT(written, 0u) << "the workspace was not used";
    for (std::size_t k = (skip + bytes) / 4; k < ws.size(); ++k) {
      ASSERT_EQ(std::bit_cast<std::uint32_t>(ws[k]), 0x7fc0beefu) << "float " << k << " past the workspace";
    }
  }
}

TEST(WorkspaceSlots, EachBodyGetsItsOwnSlotItsThreadsFirst) {
  std::vector<float> memory(3 * 32);
  WorkspaceSlots slots(memory.data(), 32, 3);
  float* a = slots.acquire(1);
  EXPECT_EQ(a, memory.data() + 32);
  float* b = slots.acquire(1);  // taken: the next one
  EXPECT_EQ(b, memory.data() + 64);
  float* c = slots.acquire(7);  // 7 % 3 = 1, then 2, then 0
  EXPECT_EQ(c, memory.data());
  EXPECT_EQ(slots.acquire(0), nullptr);  // all taken
  slots.release(a);
  EXPECT_EQ(slots.acquire(0), memory.data() + 32);
  slots.release(nullptr);  // nothing
  WorkspaceSlots none(nullptr, 32, 4);
  EXPECT_TRUE(none.empty());
  EXPECT_EQ(none.acquire(0), nullptr);
}

}  // namespace
}  // namespace kiln::cpu::nchwc

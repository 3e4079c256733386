// conv2d_dense (nchwc.h) against a naive double-precision convolution over randomized
// shapes: odd sizes, channel counts that are not multiples of 8, padding 0..3 (and windows
// wholly in the padding), strides 1..3, dilation, grouped convolutions, 1x1 to 7x7 kernels,
// batch 1 and 3; every (plain | blocked) input x output layout, bias or none, residual
// none / plain / blocked / y itself, every fused activation, 1 and 2 threads, every tile
// width. Padded output lanes must come out finite, nothing outside the outputs may change,
// and mismatched extents fail with messages naming them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/kernel.h"
#include "backends/cpu/kernels/conv_nchwc_kernels.h"
#include "backends/cpu/kernels/nchwc.h"
#include "backends/cpu/thread_pool.h"

namespace kiln::cpu::nchwc {
namespace {

struct Case {
  std::int64_t n, cin, cout, groups, h, w, kh, kw, sh, sw, ph, pw, dh, dw;
};

ConvShape shape_of(const Case& c) {
  ConvShape s;
  s.in_channels = c.cin;
  s.out_channels = c.cout;
  s.groups = c.groups;
  s.kh = c.kh;
  s.kw = c.kw;
  s.stride_h = c.sh;
  s.stride_w = c.sw;
  s.pad_h = c.ph;
  s.pad_w = c.pw;
  s.dilation_h = c.dh;
  s.dilation_w = c.dw;
  return s;
}

std::int64_t out_h(const Case& c) { return (c.h + 2 * c.ph - c.dh * (c.kh - 1) - 1) / c.sh + 1; }
std::int64_t out_w(const Case& c) { return (c.w + 2 * c.pw - c.dw * (c.kw - 1) - 1) / c.sw + 1; }

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
            act_.data[img * act_.image_floats() + act_.offset(ch, y, x)] = plain[static_cast<std::size_t>(((img * c + ch) * h + y) * w + x)];
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
  // Every stored float finite (the padded lanes of a blocked output included).
  bool all_finite() const {
    for (std::int64_t i = 0; i < act_.floats(); ++i) {
      if (!std::isfinite(act_.data[i])) return false;
    }
    return true;
  }

 private:
  Act act_;
  std::vector<float> buffer_;
};

enum class Residual { kNone, kPlain, kBlocked, kOutput };

// Winograd's error bound per unit of sum |w| + |bias| + |residual|, with inputs in [-1, 1]
// (the plain path's test allows 1.7e-6; here the direct tolerance alone has held so far).
constexpr double kWinogradTolerance = 2e-6;

struct Options {
  bool in_blocked = true, out_blocked = true, bias = true;
  Residual residual = Residual::kNone;
  FusedActivation act = FusedActivation::kNone;
  int threads = 1;
  int width = 0;  // 0: prepare_dense's choice
};

ThreadPool& pool_for(int threads) {
  static ThreadPool one(1);
  static ThreadPool two(2);
  return threads == 1 ? one : two;
}

std::string describe(const Case& c, const Options& o) {
  return "n=" + std::to_string(c.n) + " cin=" + std::to_string(c.cin) + " cout=" + std::to_string(c.cout) +
         " groups=" + std::to_string(c.groups) + " " + std::to_string(c.h) + "x" + std::to_string(c.w) + " k=" +
         std::to_string(c.kh) + "x" + std::to_string(c.kw) + " s=" + std::to_string(c.sh) + "," + std::to_string(c.sw) +
         " p=" + std::to_string(c.ph) + "," + std::to_string(c.pw) + " d=" + std::to_string(c.dh) + "," +
         std::to_string(c.dw) + (o.in_blocked ? " in:blocked" : " in:plain") + (o.out_blocked ? " out:blocked" : " out:plain") +
         (o.bias ? " bias" : "") + " residual=" + std::to_string(static_cast<int>(o.residual)) +
         " act=" + activation_name(o.act) + " threads=" + std::to_string(o.threads) + " width=" + std::to_string(o.width);
}

// Every kernel table this CPU runs (portable, AVX2, AVX-512), so one run of the suite
// covers all of them.
std::vector<const DenseKernels*> kernel_tables() {
  std::vector<const DenseKernels*> tables{&dense_kernels_portable()};
  if (dense_kernels_avx2() != nullptr) tables.push_back(dense_kernels_avx2());
  if (dense_kernels_avx512() != nullptr) tables.push_back(dense_kernels_avx512());
  return tables;
}

void check_conv(const Case& c, const Options& o, std::uint32_t seed) {
  SCOPED_TRACE(describe(c, o));
  std::mt19937 rng(seed);
  const std::int64_t oh = out_h(c), ow = out_w(c), cin_g = c.cin / c.groups, cout_g = c.cout / c.groups;
  const std::vector<float> x = uniform(rng, c.n * c.cin * c.h * c.w);
  const std::vector<float> w = uniform(rng, c.cout * cin_g * c.kh * c.kw);
  const std::vector<float> bias = uniform(rng, c.cout);
  const std::vector<float> res = uniform(rng, c.n * c.cout * oh * ow);
  const std::vector<float> y_init(static_cast<std::size_t>(c.n * c.cout * oh * ow), std::nanf(""));

  // The reference, and the magnitude of its terms (the tolerance); Winograd's error scales
  // with the weights and the bias rather than the products (conv_winograd.h): wide.
  std::vector<double> want(y_init.size()), mag(y_init.size()), wide(y_init.size());
  for (std::int64_t img = 0; img < c.n; ++img) {
    for (std::int64_t oc = 0; oc < c.cout; ++oc) {
      const std::int64_t g = oc / cout_g;
      for (std::int64_t oy = 0; oy < oh; ++oy) {
        for (std::int64_t ox = 0; ox < ow; ++ox) {
          double sum = o.bias ? bias[static_cast<std::size_t>(oc)] : 0.0, m = std::abs(sum);
          for (std::int64_t ci = 0; ci < cin_g; ++ci) {
            for (std::int64_t i = 0; i < c.kh; ++i) {
              const std::int64_t iy = oy * c.sh - c.ph + i * c.dh;
              if (iy < 0 || iy >= c.h) continue;
              for (std::int64_t j = 0; j < c.kw; ++j) {
                const std::int64_t ix = ox * c.sw - c.pw + j * c.dw;
                if (ix < 0 || ix >= c.w) continue;
                const double p = static_cast<double>(w[static_cast<std::size_t>(((oc * cin_g + ci) * c.kh + i) * c.kw + j)]) *
                                 x[static_cast<std::size_t>(((img * c.cin + g * cin_g + ci) * c.h + iy) * c.w + ix)];
                sum += p;
                m += std::abs(p);
              }
            }
          }
          const std::size_t at = static_cast<std::size_t>(((img * c.cout + oc) * oh + oy) * ow + ox);
          double wsum = o.bias ? std::abs(bias[static_cast<std::size_t>(oc)]) : 0.0;
          for (std::int64_t k = 0; k < cin_g * c.kh * c.kw; ++k) wsum += std::abs(w[static_cast<std::size_t>(oc * cin_g * c.kh * c.kw + k)]);
          if (o.residual != Residual::kNone) {
            sum += res[at];
            m += std::abs(res[at]);
            wsum += std::abs(res[at]);
          }
          want[at] = activate(o.act, sum);
          mag[at] = m;
          wide[at] = wsum;
        }
      }
    }
  }

  const ConvShape s = shape_of(c);
  auto dense = o.width == 0 ? prepare_dense(w.data(), s) : prepare_dense_width(w.data(), s, o.width);
  ASSERT_TRUE(dense.ok()) << dense.status().message();
  const bool winograd = winograd_supported(s);
  Result<std::unique_ptr<WinogradWeights>> transformed = Status(StatusCode::kUnsupported, "");
  if (winograd) {
    transformed = prepare_winograd(w.data(), s);
    ASSERT_TRUE(transformed.ok()) << transformed.status().message();
  }
  for (const DenseKernels* kernels : kernel_tables()) {
   for (bool use_winograd : {false, true}) {
    if (use_winograd && !winograd) continue;
    SCOPED_TRACE(std::string(kernels->name) + (use_winograd ? " winograd" : " direct"));
    Stored xs(x, c.n, c.cin, c.h, c.w, o.in_blocked);
    const bool res_in_y = o.residual == Residual::kOutput;
    Stored ys(res_in_y ? res : y_init, c.n, c.cout, oh, ow, o.out_blocked, res_in_y ? -3.0f : std::nanf(""));
    Stored rs(res, c.n, c.cout, oh, ow, o.residual == Residual::kBlocked, -7.0f);
    Epilogue e;
    e.bias = o.bias ? bias.data() : nullptr;
    e.residual = o.residual == Residual::kNone ? nullptr : res_in_y ? &ys.act() : &rs.act();
    e.act = o.act;
    const Status st =
        use_winograd ? conv2d_winograd(xs.act(), **transformed, s, e, ys.act(), pool_for(o.threads))
                     : conv2d_dense_on(*kernels, xs.act(), **dense, s, e, ys.act(), pool_for(o.threads));
    ASSERT_TRUE(st.ok()) << st.message();
    EXPECT_TRUE(ys.guards_intact());
    EXPECT_TRUE(ys.all_finite());
    std::int64_t bad = 0;
    for (std::int64_t img = 0; img < c.n; ++img) {
      for (std::int64_t oc = 0; oc < c.cout; ++oc) {
        for (std::int64_t oy = 0; oy < oh; ++oy) {
          for (std::int64_t ox = 0; ox < ow; ++ox) {
            const std::size_t at = static_cast<std::size_t>(((img * c.cout + oc) * oh + oy) * ow + ox);
            const double got = ys.at(img, oc, oy, ox);
            const double tol = 1e-5 + 1e-5 * std::abs(want[at]) + 3e-6 * mag[at] +
                               (use_winograd ? kWinogradTolerance * wide[at] : 0.0);
            if (!(std::abs(got - want[at]) <= tol) && bad++ < 5) {
              ADD_FAILURE() << "y[" << img << "," << oc << "," << oy << "," << ox << "] = " << got << ", want "
                            << want[at];
            }
          }
        }
      }
    }
    EXPECT_EQ(bad, 0);
   }
  }
}

// Shapes around the tiles, the borders and the channel blocks.
const Case kCases[] = {
    // n cin cout g   h   w  kh kw sh sw ph pw dh dw
    {1, 3, 32, 1, 17, 19, 3, 3, 2, 2, 1, 1, 1, 1},   // stem 3x3 s2 (plain input)
    {1, 3, 16, 1, 23, 21, 7, 7, 2, 2, 3, 3, 1, 1},   // stem 7x7 s2
    {3, 5, 13, 1, 9, 11, 3, 3, 1, 1, 1, 1, 1, 1},    // batch 3, partial blocks both sides
    {1, 17, 13, 1, 7, 7, 1, 1, 1, 1, 0, 0, 1, 1},    // 1x1
    {2, 16, 32, 2, 10, 9, 3, 3, 1, 1, 1, 1, 1, 1},   // grouped
    {1, 13, 17, 1, 12, 13, 5, 5, 3, 3, 2, 2, 1, 1},  // 5x5 stride 3
    {1, 16, 24, 1, 15, 14, 3, 3, 1, 1, 2, 2, 2, 2},  // dilation 2
    {1, 8, 8, 1, 5, 5, 3, 3, 1, 1, 3, 3, 1, 1},      // windows wholly in the padding
    {3, 24, 40, 1, 6, 5, 1, 1, 2, 2, 0, 0, 1, 1},    // 1x1 stride 2, 5 output blocks
    {1, 32, 64, 4, 8, 8, 3, 3, 2, 1, 1, 0, 1, 3},    // grouped, mixed strides and dilation
    {1, 64, 48, 1, 14, 14, 3, 3, 1, 1, 1, 1, 1, 1},  // several input blocks
    {1, 40, 72, 1, 29, 31, 1, 1, 1, 1, 0, 0, 1, 1},  // 1x1, many pixels, 9 output blocks
    {1, 3, 8, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1},      // one pixel
    {2, 9, 11, 1, 4, 6, 2, 3, 1, 2, 1, 0, 2, 1},     // even kernel height
    {1, 16, 16, 1, 3, 3, 7, 7, 1, 1, 3, 3, 1, 1},    // kernel larger than the input
    {1, 24, 24, 3, 11, 10, 3, 3, 2, 2, 1, 1, 1, 1},  // groups of one block, stride 2
    {1, 7, 5, 1, 13, 6, 5, 3, 1, 1, 2, 0, 1, 2},     // cout < 8
};

TEST(NchwcDense, MatchesNaiveConvolutionOnEveryLayout) {
  int variant = 0;
  std::uint32_t seed = 100;
  for (std::size_t k = 0; k < std::size(kCases); ++k) {
    for (int layout = 0; layout < 4; ++layout) {
      Options o;
      o.in_blocked = layout & 1;
      o.out_blocked = layout & 2;
      o.residual = static_cast<Residual>((k + layout) % 3);
      o.bias = (k + layout) % 4 != 1;
      o.act = kActivations[variant % 8];
      o.threads = 1 + (variant / 3) % 2;
      ++variant;
      check_conv(kCases[k], o, seed++);
    }
  }
}

TEST(NchwcDense, EveryActivationAndResidualOnEveryLayout) {
  const Case c{2, 13, 20, 1, 9, 8, 3, 3, 1, 1, 1, 1, 1, 1};
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

// Every tile kernel: widths 1..4 over output block counts 1..6 and pixel counts that
// leave every tail size.
TEST(NchwcDense, EveryTileWidthAndPixelCount) {
  std::uint32_t seed = 900;
  for (int width = 1; width <= kMaxWidth; ++width) {
    for (std::int64_t cout : {8, 16, 20, 40, 48}) {
      for (std::int64_t w : {1, 2, 3, 5, 7, 11, 13, 16, 17}) {
        const Case c{1, 11, cout, 1, 3, w, 3, 3, 1, 1, 1, 1, 1, 1};
        Options o;
        o.width = width;
        o.in_blocked = w % 2 == 1;
        o.out_blocked = w != 7;
        o.residual = w == 5 ? Residual::kBlocked : Residual::kNone;
        o.act = w == 3 ? FusedActivation::kRelu : FusedActivation::kNone;
        o.threads = 1 + w % 2;
        check_conv(c, o, seed++);
      }
    }
  }
}

// Randomized shapes (fixed seed): any channel count, kernel, stride, padding, dilation.
TEST(NchwcDense, MatchesNaiveConvolutionOnRandomShapes) {
  std::mt19937 rng(2024);
  auto pick = [&](std::int64_t lo, std::int64_t hi) { return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng); };
  for (int trial = 0; trial < 40; ++trial) {
    Case c{};
    c.groups = pick(0, 3) == 0 ? pick(2, 3) : 1;
    c.cin = c.groups > 1 ? 8 * c.groups * pick(1, 2) : pick(1, 20);
    c.cout = c.groups > 1 ? 8 * c.groups * pick(1, 2) : pick(1, 36);
    c.kh = pick(1, 4) * 2 - 1;
    c.kw = pick(0, 3) == 0 ? pick(1, 5) : c.kh;
    c.sh = pick(1, 3);
    c.sw = pick(0, 1) == 0 ? c.sh : pick(1, 3);
    c.dh = pick(0, 3) == 0 ? 2 : 1;
    c.dw = pick(0, 3) == 0 ? 2 : 1;
    c.ph = pick(0, 3);
    c.pw = pick(0, 3);
    c.n = pick(0, 4) == 0 ? 3 : 1;
    c.h = std::max<std::int64_t>(pick(1, 19), c.dh * (c.kh - 1) + 1 - 2 * c.ph);
    c.w = std::max<std::int64_t>(pick(1, 19), c.dw * (c.kw - 1) + 1 - 2 * c.pw);
    Options o;
    o.in_blocked = pick(0, 1);
    o.out_blocked = pick(0, 1);
    o.bias = pick(0, 1);
    o.residual = static_cast<Residual>(pick(0, 3));
    o.act = kActivations[pick(0, 7)];
    o.threads = static_cast<int>(pick(1, 2));
    o.width = static_cast<int>(pick(0, kMaxWidth));
    check_conv(c, o, static_cast<std::uint32_t>(trial));
  }
}

// Larger layers (the real networks' shapes, cut down), where the work is split into bands
// and block-group chunks across the threads.
TEST(NchwcDense, MatchesNaiveConvolutionOnNetworkShapes) {
  const Case cases[] = {
      {1, 16, 96, 1, 56, 40, 1, 1, 1, 1, 0, 0, 1, 1},
      {1, 64, 64, 1, 20, 18, 3, 3, 1, 1, 1, 1, 1, 1},
      {1, 3, 32, 1, 64, 48, 3, 3, 2, 2, 1, 1, 1, 1},
      {1, 256, 64, 1, 7, 7, 3, 3, 1, 1, 1, 1, 1, 1},
      {1, 128, 256, 1, 14, 14, 1, 1, 2, 2, 0, 0, 1, 1},
      {1, 64, 64, 8, 12, 12, 3, 3, 1, 1, 1, 1, 1, 1},
      // Weights (0.69 MB) outweigh the input (0.27 MB): two threads split the 2 block
      // groups, each over both of the 2 pixel bands (input rows of 19 KB).
      {1, 344, 56, 1, 14, 14, 3, 3, 1, 1, 1, 1, 1, 1},
  };
  std::uint32_t seed = 50;
  for (const Case& c : cases) {
    for (int threads : {1, 2}) {
      Options o;
      o.threads = threads;
      o.in_blocked = c.cin != 3;
      o.residual = threads == 2 ? Residual::kBlocked : Residual::kNone;
      o.act = threads == 2 ? FusedActivation::kRelu : FusedActivation::kRelu6;
      check_conv(c, o, seed++);
    }
  }
}

// Weights too large for L2 per block group (1,036 input channels x 9 taps; ASPP's are 2,048):
// the input blocks run in slices, the later ones adding to the partial sums in the output.
// Interior regions split, border ones (fewer taps) do not; plain input with a partial last
// block (only the last slice reads 4 channels of it), both output layouts (the plain one
// through the blocked scratch), residuals, activations and two threads.
TEST(NchwcDense, InputChannelSlicesOfLargeWeights) {
  const Case c{1, 1036, 40, 1, 9, 9, 3, 3, 1, 1, 2, 2, 2, 2};
  std::uint32_t seed = 90;
  for (int variant = 0; variant < 4; ++variant) {
    Options o;
    o.in_blocked = variant % 2 == 0;
    o.out_blocked = variant < 2;
    o.threads = 1 + variant % 2;
    o.residual = variant == 0 ? Residual::kBlocked : variant == 3 ? Residual::kPlain : Residual::kNone;
    o.act = variant % 2 == 0 ? FusedActivation::kRelu6 : FusedActivation::kHardswish;
    check_conv(c, o, seed++);
  }
}

// Winograd F(4x4, 3x3): odd sizes (partial edge tiles), padding 0..2, channel counts that
// are not multiples of 8, batch 3, every layout pair, residuals, activations (check_conv
// runs the direct path too, and Winograd wherever winograd_supported: these and every other
// 3x3 stride-1 case of the suite).
TEST(NchwcDense, WinogradMatchesNaiveConvolution) {
  const Case cases[] = {
      {1, 16, 16, 1, 8, 8, 3, 3, 1, 1, 1, 1, 1, 1},    {1, 17, 20, 1, 9, 13, 3, 3, 1, 1, 1, 1, 1, 1},
      {3, 32, 24, 1, 10, 7, 3, 3, 1, 1, 0, 0, 1, 1},   {1, 24, 40, 1, 15, 11, 3, 3, 1, 1, 2, 2, 1, 1},
      {1, 64, 64, 1, 14, 14, 3, 3, 1, 1, 1, 1, 1, 1},  {2, 48, 72, 1, 21, 19, 3, 3, 1, 1, 1, 0, 1, 1},
      {1, 256, 32, 1, 7, 7, 3, 3, 1, 1, 1, 1, 1, 1},   {1, 20, 16, 1, 4, 3, 3, 3, 1, 1, 1, 2, 1, 1},
      {1, 3, 16, 1, 9, 9, 3, 3, 1, 1, 1, 1, 1, 1},     {2, 5, 3, 1, 2, 2, 3, 3, 1, 1, 2, 1, 1, 1},
  };
  std::uint32_t seed = 300;
  int variant = 0;
  for (const Case& c : cases) {
    ASSERT_TRUE(winograd_supported(shape_of(c)));
    for (int layout = 0; layout < 4; ++layout) {
      Options o;
      o.in_blocked = layout & 1;
      o.out_blocked = layout & 2;
      o.threads = 1 + variant % 2;
      o.residual = static_cast<Residual>(variant % 4);
      o.act = kActivations[variant % 8];
      o.bias = variant % 3 != 2;
      ++variant;
      check_conv(c, o, seed++);
    }
  }
}

// Winograd's supported shapes, cost rule and refusals: conv_nchwc_winograd_test.cpp.

// Blocked input whose padded lanes are not finite-but-zero: a kernel that let them reach
// a real channel would show it (the padded weights are zero).
TEST(NchwcDense, PaddedInputLanesDoNotReachTheOutput) {
  const Case c{1, 5, 9, 1, 6, 7, 3, 3, 1, 1, 1, 1, 1, 1};
  std::mt19937 rng(3);
  const std::vector<float> x = uniform(rng, c.cin * c.h * c.w), w = uniform(rng, c.cout * c.cin * 9);
  auto prepared = prepare_dense(w.data(), shape_of(c));
  ASSERT_TRUE(prepared.ok());
  Stored a(x, 1, c.cin, c.h, c.w, true, 1.0e6f), b(x, 1, c.cin, c.h, c.w, true, -3.0e5f);
  const std::vector<float> y0(static_cast<std::size_t>(c.cout * out_h(c) * out_w(c)), 0.0f);
  Stored ya(y0, 1, c.cout, out_h(c), out_w(c), true), yb(y0, 1, c.cout, out_h(c), out_w(c), true);
  ASSERT_TRUE(conv2d_dense(a.act(), **prepared, shape_of(c), {}, ya.act(), pool_for(1)).ok());
  ASSERT_TRUE(conv2d_dense(b.act(), **prepared, shape_of(c), {}, yb.act(), pool_for(1)).ok());
  for (std::int64_t i = 0; i < ya.act().floats(); ++i) ASSERT_EQ(ya.act().data[i], yb.act().data[i]) << i;
  // The output's padded lanes (block 1, lanes 1..7): zeros (no bias, no residual).
  const std::int64_t plane = out_h(c) * out_w(c);
  for (std::int64_t p = 0; p < plane; ++p) {
    for (std::int64_t l = c.cout % 8; l < 8; ++l) EXPECT_EQ(ya.act().data[(plane + p) * 8 + l], 0.0f) << p << "," << l;
  }
}

TEST(NchwcDense, RunsEveryKernelTableTheCpuHas) {
  // The suite compares each of these; the portable one always runs.
  const auto tables = kernel_tables();
  ASSERT_GE(tables.size(), 1u);
  EXPECT_STREQ(tables[0]->name, "baseline");
  for (const DenseKernels* k : tables) {
    for (int width = 1; width <= kMaxWidth; ++width) {
      ASSERT_GE(k->max_pixels[width - 1], 1) << k->name;
      for (int p = 1; p <= k->max_pixels[width - 1]; ++p) {
        EXPECT_NE(k->fn[0][width - 1][p - 1], nullptr) << k->name << " " << width << "x" << p;
        EXPECT_NE(k->fn[1][width - 1][p - 1], nullptr) << k->name << " " << width << "x" << p;
      }
    }
  }
}

TEST(NchwcDense, SupportsUngroupedAndBlockAlignedGroups) {
  ConvShape s;
  s.in_channels = 3, s.out_channels = 5;
  EXPECT_TRUE(dense_supported(s));
  s.in_channels = 16, s.out_channels = 32, s.groups = 2;
  EXPECT_TRUE(dense_supported(s));
  s.out_channels = 24;  // 12 per group
  EXPECT_FALSE(dense_supported(s));
  s.in_channels = s.out_channels = s.groups = 16;  // depthwise
  EXPECT_FALSE(dense_supported(s));
  s = ConvShape{};
  s.in_channels = s.out_channels = 8;
  s.stride_h = 0;
  EXPECT_FALSE(dense_supported(s));
}

TEST(NchwcDense, RejectsMismatchedExtentsNamingThem) {
  const Case c{1, 5, 9, 1, 6, 7, 3, 3, 2, 1, 1, 0, 1, 1};  // output 3x5
  const ConvShape s = shape_of(c);
  std::vector<float> w(9 * 5 * 9, 0.5f), xbuf(1000, 1.0f), ybuf(1000, 0.0f), rbuf(1000, 0.0f);
  auto prepared = prepare_dense(w.data(), s);
  ASSERT_TRUE(prepared.ok());
  Act x{xbuf.data(), 1, 5, 6, 7, true}, y{ybuf.data(), 1, 9, 3, 5, false};
  ASSERT_TRUE(conv2d_dense(x, **prepared, s, {}, y, pool_for(1)).ok());

  auto message = [&](const Act& xa, const Act& ya, const Epilogue& e, const ConvShape& sa) {
    const Status st = conv2d_dense(xa, **prepared, sa, e, ya, pool_for(1));
    EXPECT_EQ(st.code(), StatusCode::kInvalidInput);
    return st.message();
  };
  Act bad = x;
  bad.c = 6;
  EXPECT_EQ(message(bad, y, {}, s), "[conv2d_dense] x.c=6 != in_channels=5");
  bad = y;
  bad.c = 8;
  EXPECT_EQ(message(x, bad, {}, s), "[conv2d_dense] y.c=8 != out_channels=9");
  bad = y;
  bad.n = 2;
  EXPECT_EQ(message(x, bad, {}, s), "[conv2d_dense] y.n=2 != x.n=1");
  bad = y;
  bad.h = 4;
  EXPECT_EQ(message(x, bad, {}, s),
            "[conv2d_dense] y.h=4 != output height 3 (x.h=6, kh=3, stride_h=2, pad_h=1, dilation_h=1)");
  bad = y;
  bad.w = 7;
  EXPECT_EQ(message(x, bad, {}, s),
            "[conv2d_dense] y.w=7 != output width 5 (x.w=7, kw=3, stride_w=1, pad_w=0, dilation_w=1)");
  bad = x;
  bad.h = 0;
  EXPECT_EQ(message(bad, y, {}, s), "[conv2d_dense] x has extents [1, 5, 0, 7] blocked");
  bad = x;
  bad.data = nullptr;
  EXPECT_EQ(message(bad, y, {}, s), "[conv2d_dense] x.data is null");
  Act res{rbuf.data(), 1, 9, 3, 4, true};
  Epilogue e;
  e.residual = &res;
  EXPECT_EQ(message(x, y, e, s), "[conv2d_dense] residual [1, 9, 3, 4] blocked != y [1, 9, 3, 5] plain");
  Act same{ybuf.data(), 1, 9, 3, 5, true};
  e.residual = &same;
  EXPECT_EQ(message(x, y, e, s), "[conv2d_dense] residual shares y's data in another layout");
  ConvShape other = s;
  other.out_channels = 10;
  EXPECT_EQ(message(x, y, {}, other),
            "[conv2d_dense] weights prepared for in_channels=5 out_channels=9 groups=1 kernel 3x3, called with "
            "in_channels=5 out_channels=10 groups=1 kernel 3x3");
  ConvShape tall = s;
  tall.kh = 9;  // a window taller than the padded input
  auto tall_w = prepare_dense(std::vector<float>(9 * 5 * 27, 0.0f).data(), tall);
  ASSERT_TRUE(tall_w.ok());
  const Status st = conv2d_dense(x, **tall_w, tall, {}, y, pool_for(1));
  EXPECT_EQ(st.message(),
            "[conv2d_dense] y.h=3 != output height -1 (x.h=6, kh=9, stride_h=2, pad_h=1, dilation_h=1)");
  ConvShape grouped;
  grouped.in_channels = 16, grouped.out_channels = 12, grouped.groups = 2;
  const auto unsupported = prepare_dense(w.data(), grouped);
  ASSERT_FALSE(unsupported.ok());
  EXPECT_EQ(unsupported.status().message(),
            "[prepare_dense] unsupported convolution: in_channels=16 out_channels=12 groups=2");
}

}  // namespace
}  // namespace kiln::cpu::nchwc

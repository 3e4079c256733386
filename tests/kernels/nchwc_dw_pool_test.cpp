// The NCHW8c reorders, depthwise convolution (alone and with a 1x1 expansion computed into
// it) and pools (kernels/nchwc.h) against naive
// references in double over randomized shapes: channel counts that leave 1..7 lanes of the
// last block padded, odd planes, kernels 1x1..7x7, strides 1-3, padding, dilation,
// batches, every (plain | blocked) input x output layout, bias and residual (none, plain,
// blocked), every fused activation, on 1 and 2 threads. Blocked inputs carry junk in their
// padded lanes (which must never reach a real channel); blocked outputs must leave finite
// values there, and every output buffer is followed by canaries that must stay intact.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <thread>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "backends/cpu/kernels/nchwc.h"
#include "backends/cpu/kernels/nchwc_impl.h"
#include "backends/cpu/thread_pool.h"

namespace kiln::cpu::nchwc {
namespace {

constexpr float kCanary = -12345.0f;
constexpr std::int64_t kCanaries = 16;

// An activation buffer in one layout with `canaries` canaries after its floats (outputs),
// or none (inputs: allocated to the float, so that a read past the end is an error under
// valgrind or ASan).
struct Buffer {
  Act act;
  std::vector<float> storage;
  std::int64_t canaries;

  Buffer(std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w, bool blocked, float fill,
         std::int64_t canary_count = kCanaries)
      : canaries(canary_count) {
    act.n = n;
    act.c = c;
    act.h = h;
    act.w = w;
    act.blocked = blocked;
    storage.assign(static_cast<std::size_t>(act.floats() + canaries), fill);
    std::fill(storage.end() - canaries, storage.end(), kCanary);
    act.data = storage.data();
  }
  float& at(std::int64_t img, std::int64_t ch, std::int64_t y, std::int64_t x) {
    return act.data[img * act.image_floats() + act.offset(ch, y, x)];
  }
  bool canary_intact() const {
    return std::all_of(storage.end() - canaries, storage.end(), [](float v) { return v == kCanary; });
  }
  // Every padded lane of a blocked buffer is finite (true for plain ones).
  bool padded_lanes_finite() const {
    if (!act.blocked) return true;
    const std::int64_t cp = padded_channels(act.c);
    for (std::int64_t img = 0; img < act.n; ++img) {
      for (std::int64_t ch = act.c; ch < cp; ++ch) {
        for (std::int64_t i = 0; i < act.h * act.w; ++i) {
          if (!std::isfinite(act.data[img * act.image_floats() + act.offset(ch, i / act.w, i % act.w)])) return false;
        }
      }
    }
    return true;
  }
};

// A logical [n, c, h, w] tensor of random values, stored in the given layout with `junk` in
// the padded lanes.
struct Tensor4 {
  std::int64_t n, c, h, w;
  std::vector<float> values;  // plain order

  Tensor4(std::int64_t n_, std::int64_t c_, std::int64_t h_, std::int64_t w_, std::mt19937& rng, float lo = -2.0f,
          float hi = 2.0f)
      : n(n_), c(c_), h(h_), w(w_), values(static_cast<std::size_t>(n_ * c_ * h_ * w_)) {
    std::uniform_real_distribution<float> dist(lo, hi);
    for (float& v : values) v = dist(rng);
  }
  double at(std::int64_t img, std::int64_t ch, std::int64_t y, std::int64_t x) const {
    return values[static_cast<std::size_t>(((img * c + ch) * h + y) * w + x)];
  }
  // As an input (no canaries).
  Buffer input(bool blocked, float junk = 1.0e3f) const { return store(blocked, junk, 0); }
  Buffer store(bool blocked, float junk = 1.0e3f, std::int64_t canaries = kCanaries) const {
    Buffer b(n, c, h, w, blocked, junk, canaries);
    for (std::int64_t img = 0; img < n; ++img) {
      for (std::int64_t ch = 0; ch < c; ++ch) {
        for (std::int64_t y = 0; y < h; ++y) {
          for (std::int64_t x = 0; x < w; ++x) b.at(img, ch, y, x) = static_cast<float>(at(img, ch, y, x));
        }
      }
    }
    return b;
  }
};

std::string layouts(bool in_blocked, bool out_blocked) {
  return std::string(in_blocked ? "blocked" : "plain") + " -> " + (out_blocked ? "blocked" : "plain");
}

// ---------------------------------------------------------------------------------------
// for_each_band: every (image, block, row) exactly once, in bands, in both split orders

TEST(NchwcBands, EveryRowOnceInBothSplitOrders) {
  ThreadPool one(1), two(2), three(3);
  struct Shape {
    std::int64_t n, blocks, oh, band, row_cost;
  };
  // Costs large enough that the pool splits the work (grain 1 << 14), odd row counts,
  // bands shorter and longer than a thread's rows, more threads than rows.
  const Shape shapes[] = {{1, 4, 112, 16, 4096}, {1, 144, 7, 146, 4096}, {2, 5, 13, 4, 8192},
                          {1, 3, 1, 8, 65536},   {3, 7, 2, 1, 65536},    {1, 60, 14, 146, 1}};
  for (ThreadPool* pool : {&one, &two, &three}) {
    for (const Shape& sh : shapes) {
      for (const bool by_rows : {false, true}) {
        SCOPED_TRACE("threads=" + std::to_string(pool->num_threads()) + " n=" + std::to_string(sh.n) +
                     " blocks=" + std::to_string(sh.blocks) + " oh=" + std::to_string(sh.oh) +
                     " band=" + std::to_string(sh.band) + (by_rows ? " by rows" : " by blocks"));
        std::vector<std::atomic<int>> seen(static_cast<std::size_t>(sh.n * sh.blocks * sh.oh));
        std::atomic<bool> bad_call{false};
        const bool ok = detail::for_each_band(
            *pool, sh.n, sh.blocks, sh.oh, sh.band, sh.row_cost, 16, by_rows,
            [&](std::int64_t image, std::int64_t block, std::int64_t oy0, std::int64_t oy1, float* scratch) {
              if (image < 0 || image >= sh.n || block < 0 || block >= sh.blocks || oy0 < 0 || oy1 > sh.oh ||
                  oy0 >= oy1 || oy1 - oy0 > sh.band || scratch == nullptr ||
                  reinterpret_cast<std::uintptr_t>(scratch) % 64 != 0) {
                bad_call = true;
                return;
              }
              scratch[15] = 1.0f;  // the chunk's own 16 floats
              for (std::int64_t y = oy0; y < oy1; ++y) ++seen[static_cast<std::size_t>((image * sh.blocks + block) * sh.oh + y)];
            });
        ASSERT_TRUE(ok);
        EXPECT_FALSE(bad_call.load());
        for (std::size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i].load(), 1) << "row index " << i;
      }
    }
  }
}

// Split by rows, each thread of the pool runs the same rows of every block: thread t the
// t-th of num_threads() equal row shares (thread_pool.h's shares), so a layer reads the
// rows its own core wrote.
TEST(NchwcBands, RowSplitGivesEachThreadItsRowsOfEveryBlock) {
  ThreadPool two(2);
  constexpr std::int64_t kBlocks = 6, kRows = 56;
  std::vector<std::atomic<std::uint64_t>> owner(kBlocks * kRows);
  for (int round = 0; round < 50; ++round) {
    const bool ok = detail::for_each_band(two, 1, kBlocks, kRows, 8, 1 << 12, 0, true,
                                          [&](std::int64_t, std::int64_t block, std::int64_t oy0, std::int64_t oy1, float*) {
                                            const auto me = std::hash<std::thread::id>{}(std::this_thread::get_id());
                                            // ~20 us per band: long enough for the worker to take its share.
                                            const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(20);
                                            while (std::chrono::steady_clock::now() < until) {
                                            }
                                            for (std::int64_t y = oy0; y < oy1; ++y) owner[static_cast<std::size_t>(block * kRows + y)] = me;
                                          });
    ASSERT_TRUE(ok);
    // Every block's row y ran on the thread that ran block 0's row y (stealing aside:
    // a chunk another thread took is run whole, so compare shares, not single rows).
    std::int64_t same = 0;
    for (std::int64_t b = 0; b < kBlocks; ++b) {
      for (std::int64_t y = 0; y < kRows; ++y) same += owner[static_cast<std::size_t>(b * kRows + y)] == owner[static_cast<std::size_t>(y)];
    }
    const bool both = std::any_of(owner.begin(), owner.end(), [&](const auto& o) { return o != owner[0]; });
    if (both && same == kBlocks * kRows) return;  // a round on both threads without stealing
  }
  ADD_FAILURE() << "in 50 rounds, no round on both threads ran each row of every block on one thread";
}

// ---------------------------------------------------------------------------------------
// Reorders

TEST(NchwcReorder, ToBlockedZeroesPaddedLanesAndRoundTrips) {
  std::mt19937 rng(1401);
  std::uniform_int_distribution<std::int64_t> batch(1, 3), channels(1, 35), pixels(1, 1200);
  ThreadPool one(1), two(2);
  for (int trial = 0; trial < 40; ++trial) {
    const std::int64_t n = batch(rng), c = trial < 8 ? trial + 1 : channels(rng), hw = pixels(rng);
    const Tensor4 t(n, c, 1, hw, rng);
    for (ThreadPool* pool : {&one, &two}) {
      Buffer blocked(n, c, 1, hw, true, std::numeric_limits<float>::quiet_NaN());
      to_blocked(t.values.data(), blocked.act.data, n, c, hw, *pool);
      ASSERT_TRUE(blocked.canary_intact()) << "c=" << c << " hw=" << hw;
      for (std::int64_t img = 0; img < n; ++img) {
        for (std::int64_t ch = 0; ch < padded_channels(c); ++ch) {
          for (std::int64_t p = 0; p < hw; ++p) {
            const float got = blocked.at(img, ch, 0, p);
            const double want = ch < c ? t.at(img, ch, 0, p) : 0.0;
            ASSERT_EQ(got, want) << "n=" << n << " c=" << c << " hw=" << hw << " at (" << img << "," << ch << "," << p
                                 << "), " << pool->num_threads() << " threads";
          }
        }
      }
      Buffer plain(n, c, 1, hw, false, std::numeric_limits<float>::quiet_NaN());
      to_plain(blocked.act.data, plain.act.data, n, c, hw, *pool);
      ASSERT_TRUE(plain.canary_intact()) << "c=" << c << " hw=" << hw;
      ASSERT_TRUE(std::equal(t.values.begin(), t.values.end(), plain.storage.begin()))
          << "n=" << n << " c=" << c << " hw=" << hw;
    }
  }
}

TEST(NchwcReorder, ToPlainIgnoresPaddedLanes) {
  std::mt19937 rng(1402);
  ThreadPool two(2);
  const Tensor4 t(2, 13, 5, 7, rng);
  const Buffer blocked = t.input(true, std::numeric_limits<float>::infinity());
  Buffer plain(2, 13, 5, 7, false, 0.0f);
  to_plain(blocked.act.data, plain.act.data, 2, 13, 35, two);
  EXPECT_TRUE(std::equal(t.values.begin(), t.values.end(), plain.storage.begin()));
  EXPECT_TRUE(plain.canary_intact());
}

// Both instruction sets' tile copies, whatever the process picked: every channel count and
// run length around the 8x8 transposes, with strides wider than the runs.
TEST(NchwcReorder, TileCopiesAgreeOnEveryInstructionSet) {
  std::vector<const detail::TileKernels*> tables{&detail::tile_kernels_portable()};
  if (detail::use_avx2()) tables.push_back(&detail::tile_kernels_avx2());
  std::mt19937 rng(1403);
  for (const detail::TileKernels* k : tables) {
    for (std::int64_t channels = 1; channels <= 8; ++channels) {
      for (std::int64_t count = 0; count <= 27; ++count) {
        const std::int64_t stride = count + 5;
        const Tensor4 t(1, 8, 1, stride, rng);
        std::vector<float> packed(static_cast<std::size_t>(count * 8 + kCanaries), kCanary);
        k->pack(t.values.data(), stride, channels, count, packed.data());
        for (std::int64_t p = 0; p < count; ++p) {
          for (std::int64_t c = 0; c < 8; ++c) {
            ASSERT_EQ(packed[static_cast<std::size_t>(p * 8 + c)], c < channels ? t.at(0, c, 0, p) : 0.0)
                << "channels=" << channels << " count=" << count;
          }
        }
        ASSERT_EQ(packed[static_cast<std::size_t>(count * 8)], kCanary);
        std::vector<float> unpacked(static_cast<std::size_t>(8 * stride), kCanary);
        k->unpack(packed.data(), count, unpacked.data(), stride, channels);
        for (std::int64_t c = 0; c < 8; ++c) {
          for (std::int64_t p = 0; p < stride; ++p) {
            const double want = c < channels && p < count ? t.at(0, c, 0, p) : kCanary;
            ASSERT_EQ(unpacked[static_cast<std::size_t>(c * stride + p)], want)
                << "channels=" << channels << " count=" << count << " c=" << c << " p=" << p;
          }
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------
// Depthwise convolution

constexpr FusedActivation kActivations[] = {
    FusedActivation::kNone,      FusedActivation::kRelu,        FusedActivation::kRelu6,
    FusedActivation::kHardswish, FusedActivation::kHardsigmoid, FusedActivation::kSilu,
    FusedActivation::kGeluErf,   FusedActivation::kGeluTanh,
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

enum class Residual { kNone, kPlain, kBlocked };

struct DwCase {
  std::int64_t n, c, h, w, kh, kw;
  std::int64_t stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w;
  bool bias;
  std::int64_t oh() const { return (h + 2 * pad_h - dilation_h * (kh - 1) - 1) / stride_h + 1; }
  std::int64_t ow() const { return (w + 2 * pad_w - dilation_w * (kw - 1) - 1) / stride_w + 1; }
  bool valid() const { return oh() >= 1 && ow() >= 1; }
  ConvShape shape() const {
    ConvShape s;
    s.in_channels = s.out_channels = s.groups = c;
    s.kh = kh;
    s.kw = kw;
    s.stride_h = stride_h;
    s.stride_w = stride_w;
    s.pad_h = pad_h;
    s.pad_w = pad_w;
    s.dilation_h = dilation_h;
    s.dilation_w = dilation_w;
    return s;
  }
  std::string text() const {
    std::ostringstream s;
    s << "x [" << n << "," << c << "," << h << "," << w << "] kernel " << kh << "x" << kw << " stride " << stride_h
      << "," << stride_w << " pad " << pad_h << "," << pad_w << " dilation " << dilation_h << "," << dilation_w
      << (bias ? " bias" : "");
    return s.str();
  }
};

// The exact convolution plus bias (before the residual and the activation), [n][c][oh][ow].
std::vector<double> dw_reference(const DwCase& c, const Tensor4& x, const std::vector<float>& w,
                                 const std::vector<float>& b) {
  const std::int64_t oh = c.oh(), ow = c.ow();
  std::vector<double> y(static_cast<std::size_t>(c.n * c.c * oh * ow));
  for (std::int64_t img = 0; img < c.n; ++img) {
    for (std::int64_t ch = 0; ch < c.c; ++ch) {
      for (std::int64_t oy = 0; oy < oh; ++oy) {
        for (std::int64_t ox = 0; ox < ow; ++ox) {
          double sum = c.bias ? b[static_cast<std::size_t>(ch)] : 0.0;
          for (std::int64_t i = 0; i < c.kh; ++i) {
            for (std::int64_t j = 0; j < c.kw; ++j) {
              const std::int64_t iy = oy * c.stride_h - c.pad_h + i * c.dilation_h;
              const std::int64_t ix = ox * c.stride_w - c.pad_w + j * c.dilation_w;
              if (iy < 0 || iy >= c.h || ix < 0 || ix >= c.w) continue;
              sum += x.at(img, ch, iy, ix) * w[static_cast<std::size_t>((ch * c.kh + i) * c.kw + j)];
            }
          }
          y[static_cast<std::size_t>(((img * c.c + ch) * oh + oy) * ow + ox)] = sum;
        }
      }
    }
  }
  return y;
}

// Every real element of `got` within tolerance of act(sums + residual), padded lanes finite,
// canaries intact.
::testing::AssertionResult dw_output_matches(Buffer& got, const std::vector<double>& sums, const Tensor4* residual,
                                             FusedActivation act) {
  const Act& y = got.act;
  for (std::int64_t img = 0; img < y.n; ++img) {
    for (std::int64_t ch = 0; ch < y.c; ++ch) {
      for (std::int64_t oy = 0; oy < y.h; ++oy) {
        for (std::int64_t ox = 0; ox < y.w; ++ox) {
          double v = sums[static_cast<std::size_t>(((img * y.c + ch) * y.h + oy) * y.w + ox)];
          if (residual != nullptr) v += residual->at(img, ch, oy, ox);
          const double want = activate(act, v);
          const float g = got.at(img, ch, oy, ox);
          if (!(std::abs(g - want) <= 5e-5 + 1e-5 * std::abs(want))) {
            return ::testing::AssertionFailure() << "y(" << img << "," << ch << "," << oy << "," << ox << ") = " << g
                                                 << ", want " << want;
          }
        }
      }
    }
  }
  if (!got.padded_lanes_finite()) return ::testing::AssertionFailure() << "a padded lane is not finite";
  if (!got.canary_intact()) return ::testing::AssertionFailure() << "wrote past the output";
  return ::testing::AssertionSuccess();
}

// Runs the case in every layout pair, with no / plain / blocked residual, on 1 and 2
// threads; activations: all of them when `every_act`, else one per run, rotating.
void expect_depthwise_matches(const DwCase& c, std::mt19937& rng, bool every_act) {
  ASSERT_TRUE(c.valid()) << c.text();
  ASSERT_TRUE(depthwise_supported(c.shape())) << c.text();
  const Tensor4 x(c.n, c.c, c.h, c.w, rng);
  const Tensor4 wt(c.c, 1, c.kh, c.kw, rng, -1.0f, 1.0f);
  const Tensor4 bt(1, 1, 1, c.c, rng, -1.0f, 1.0f);
  const Tensor4 residual(c.n, c.c, c.oh(), c.ow(), rng);
  const std::vector<double> sums = dw_reference(c, x, wt.values, bt.values);
  auto prepared = prepare_depthwise(wt.values.data(), c.shape());
  ASSERT_TRUE(prepared.ok()) << prepared.status().message();
  const DepthwiseWeights& weights = *prepared.value();
  ThreadPool one(1), two(2);
  int rotation = 0;
  for (ThreadPool* pool : {&one, &two}) {
    for (bool in_blocked : {false, true}) {
      const Buffer xb = x.input(in_blocked);
      for (bool out_blocked : {false, true}) {
        for (Residual r : {Residual::kNone, Residual::kPlain, Residual::kBlocked}) {
          const Buffer rb = residual.input(r == Residual::kBlocked);
          for (FusedActivation act : kActivations) {
            if (!every_act && (rotation++ % 4) != 0) continue;
            Buffer y(c.n, c.c, c.oh(), c.ow(), out_blocked, std::numeric_limits<float>::quiet_NaN());
            Epilogue e;
            e.bias = c.bias ? bt.values.data() : nullptr;
            e.residual = r == Residual::kNone ? nullptr : &rb.act;
            e.act = act;
            const Status st = conv2d_depthwise(xb.act, weights, c.shape(), e, y.act, *pool);
            ASSERT_TRUE(st.ok()) << st.message();
            ASSERT_TRUE(dw_output_matches(y, sums, r == Residual::kNone ? nullptr : &residual, act))
                << c.text() << ", " << layouts(in_blocked, out_blocked) << ", residual " << static_cast<int>(r) << ", "
                << activation_name(act) << ", " << pool->num_threads() << " threads";
          }
        }
      }
    }
  }
}

TEST(NchwcDepthwise, MatchesReferenceOnMobileNetShapes) {
  std::mt19937 rng(1410);
  // Scaled-down mobile-network layers: 3x3, 5x5, 7x7 at stride 1 and 2 (the register tiles),
  // planes from 1x1 to 29x29 (tiles of 1..8 pixels, windows crossing both edges), channel
  // counts leaving 0..7 padded lanes.
  const std::vector<DwCase> cases = {
      {1, 32, 28, 28, 3, 3, 1, 1, 1, 1, 1, 1, true},  {1, 24, 29, 29, 3, 3, 2, 2, 1, 1, 1, 1, true},
      {1, 13, 7, 7, 3, 3, 1, 1, 1, 1, 1, 1, true},    {2, 9, 14, 14, 5, 5, 1, 1, 2, 2, 1, 1, true},
      {1, 20, 15, 15, 5, 5, 2, 2, 2, 2, 1, 1, false}, {1, 17, 1, 1, 3, 3, 1, 1, 1, 1, 1, 1, true},
      {1, 8, 4, 4, 3, 3, 2, 2, 1, 1, 1, 1, true},     {3, 3, 9, 8, 3, 3, 1, 1, 1, 1, 1, 1, true},
      {1, 96, 19, 21, 7, 7, 1, 1, 3, 3, 1, 1, true},  {1, 1, 17, 23, 7, 7, 2, 2, 3, 3, 1, 1, false},
  };
  for (const DwCase& c : cases) expect_depthwise_matches(c, rng, true);
}

TEST(NchwcDepthwise, MatchesReferenceOverRandomShapes) {
  std::mt19937 rng(1411);
  std::uniform_int_distribution<std::int64_t> batch(1, 3), channels(1, 21), size(1, 23), kernel(1, 7), stride(1, 3),
      dilation(1, 2), pad(0, 3), coin(0, 1);
  int ran = 0;
  for (int trial = 0; ran < 40 && trial < 400; ++trial) {
    DwCase c{batch(rng) == 3 ? 3 : 1, channels(rng), size(rng), size(rng), kernel(rng), kernel(rng), stride(rng),
             stride(rng), pad(rng), pad(rng), 1, 1, coin(rng) == 1};
    if (coin(rng) == 1) {
      c.dilation_h = dilation(rng);
      c.dilation_w = dilation(rng);
    }
    if (!c.valid()) continue;  // the window does not fit: not a valid layer
    ++ran;
    expect_depthwise_matches(c, rng, false);
  }
  EXPECT_EQ(ran, 40);
}

TEST(NchwcDepthwise, HandlesWideRowsAndTallKernels) {
  std::mt19937 rng(1412);
  // Rows of 8k+r pixels (tiles of every width), 1x7 and 7x1 kernels (the generic tile), a
  // 16-row kernel, a stride wider than the kernel, padding wider than the plane.
  const std::vector<DwCase> cases = {
      {1, 10, 3, 61, 1, 7, 1, 1, 0, 3, 1, 1, true},   {1, 10, 19, 5, 7, 1, 1, 1, 3, 0, 1, 1, true},
      {1, 3, 20, 9, 16, 4, 1, 1, 2, 1, 1, 1, true},   {1, 12, 17, 33, 2, 2, 3, 3, 0, 0, 1, 1, false},
      {1, 11, 40, 113, 3, 3, 2, 2, 1, 1, 1, 1, true}, {1, 9, 2, 3, 3, 3, 1, 1, 3, 3, 1, 1, true},
      {1, 16, 9, 57, 5, 5, 2, 2, 2, 2, 1, 1, true},
      // Planes over several bands (~2K pixels each), dilated rows across band edges; with 2
      // threads, chunks that start inside an image's block.
      {1, 5, 50, 90, 5, 3, 1, 2, 2, 1, 2, 1, true},   {2, 9, 70, 70, 3, 3, 2, 2, 1, 1, 1, 1, false},
      {3, 5, 31, 40, 3, 3, 1, 1, 1, 1, 1, 1, true},
  };
  for (const DwCase& c : cases) expect_depthwise_matches(c, rng, false);
}

// y may be the residual itself (y = act(conv(x) + y)), in either layout.
TEST(NchwcDepthwise, ResidualMayBeTheOutput) {
  std::mt19937 rng(1413);
  const DwCase c{2, 13, 11, 10, 3, 3, 1, 1, 1, 1, 1, 1, true};
  const Tensor4 x(c.n, c.c, c.h, c.w, rng), wt(c.c, 1, 3, 3, rng), bt(1, 1, 1, c.c, rng), residual(c.n, c.c, 11, 10, rng);
  const std::vector<double> sums = dw_reference(c, x, wt.values, bt.values);
  auto prepared = prepare_depthwise(wt.values.data(), c.shape());
  ASSERT_TRUE(prepared.ok());
  ThreadPool two(2);
  for (bool blocked : {false, true}) {
    const Buffer xb = x.input(blocked);
    Buffer y = residual.store(blocked, 0.0f);
    Epilogue e{bt.values.data(), &y.act, FusedActivation::kRelu6};
    ASSERT_TRUE(conv2d_depthwise(xb.act, *prepared.value(), c.shape(), e, y.act, two).ok());
    EXPECT_TRUE(dw_output_matches(y, sums, &residual, FusedActivation::kRelu6)) << (blocked ? "blocked" : "plain");
  }
}

TEST(NchwcDepthwise, SupportsOnlyOneChannelPerGroup) {
  ConvShape s;
  s.in_channels = s.out_channels = s.groups = 24;
  s.kh = s.kw = 3;
  EXPECT_TRUE(depthwise_supported(s));
  s.groups = 12;
  EXPECT_FALSE(depthwise_supported(s));
  s.groups = 24;
  s.out_channels = 48;
  EXPECT_FALSE(depthwise_supported(s));
}

// ---------------------------------------------------------------------------------------
// conv2d_expand_depthwise: a 1x1 expansion computed band by band into the depthwise conv

struct ExpandCase {
  DwCase dw;               // the depthwise convolution (its channels: the expansion's outputs)
  std::int64_t in_channels;
  bool expand_bias;
  std::string text() const { return dw.text() + " expanded from " + std::to_string(in_channels) + " channels" + (expand_bias ? " (bias)" : ""); }
};

// e = act_e(conv1x1(x) + bias_e), rounded to float as a kernel stores it, [n][c][h][w].
Tensor4 expansion_reference(const ExpandCase& c, const Tensor4& x, const std::vector<float>& w, const std::vector<float>& b,
                            FusedActivation act, std::mt19937& rng) {
  Tensor4 e(c.dw.n, c.dw.c, c.dw.h, c.dw.w, rng);
  for (std::int64_t img = 0; img < c.dw.n; ++img) {
    for (std::int64_t o = 0; o < c.dw.c; ++o) {
      for (std::int64_t p = 0; p < c.dw.h * c.dw.w; ++p) {
        double sum = c.expand_bias ? b[static_cast<std::size_t>(o)] : 0.0;
        for (std::int64_t i = 0; i < c.in_channels; ++i) {
          sum += x.at(img, i, p / c.dw.w, p % c.dw.w) * w[static_cast<std::size_t>(o * c.in_channels + i)];
        }
        e.values[static_cast<std::size_t>((img * c.dw.c + o) * c.dw.h * c.dw.w + p)] = static_cast<float>(activate(act, sum));
      }
    }
  }
  return e;
}

// The fused kernel against the double reference of the two convolutions (through the
// float-rounded expansion), for plain and blocked x, no / blocked residual, both
// activations rotating, 1..3 threads.
void expect_expand_depthwise_matches(const ExpandCase& c, std::mt19937& rng) {
  ASSERT_TRUE(c.dw.valid()) << c.text();
  const Tensor4 x(c.dw.n, c.in_channels, c.dw.h, c.dw.w, rng);
  const Tensor4 ew(c.dw.c, c.in_channels, 1, 1, rng, -0.5f, 0.5f), eb(1, 1, 1, c.dw.c, rng, -1.0f, 1.0f);
  const Tensor4 wt(c.dw.c, 1, c.dw.kh, c.dw.kw, rng, -1.0f, 1.0f), bt(1, 1, 1, c.dw.c, rng, -1.0f, 1.0f);
  const Tensor4 residual(c.dw.n, c.dw.c, c.dw.oh(), c.dw.ow(), rng);
  ConvShape es;
  es.in_channels = c.in_channels;
  es.out_channels = c.dw.c;
  auto expand = prepare_dense(ew.values.data(), es);
  ASSERT_TRUE(expand.ok()) << expand.status().message();
  auto depthwise = prepare_depthwise(wt.values.data(), c.dw.shape());
  ASSERT_TRUE(depthwise.ok()) << depthwise.status().message();
  ThreadPool one(1), two(2), three(3);
  int rotation = 0;
  for (ThreadPool* pool : {&one, &two, &three}) {
    for (bool in_blocked : {false, true}) {
      const Buffer xb = x.input(in_blocked);
      for (bool with_residual : {false, true}) {
        const FusedActivation expand_act = kActivations[rotation % 8];
        const FusedActivation act = kActivations[(rotation * 3 + 1) % 8];
        ++rotation;
        const Tensor4 e = expansion_reference(c, x, ew.values, eb.values, expand_act, rng);
        const std::vector<double> sums = dw_reference(c.dw, e, wt.values, bt.values);
        const Buffer rb = residual.input(true);
        Buffer y(c.dw.n, c.dw.c, c.dw.oh(), c.dw.ow(), true, std::numeric_limits<float>::quiet_NaN());
        const Epilogue ee{c.expand_bias ? eb.values.data() : nullptr, nullptr, expand_act};
        const Epilogue de{c.dw.bias ? bt.values.data() : nullptr, with_residual ? &rb.act : nullptr, act};
        const Status st = conv2d_expand_depthwise(xb.act, *expand.value(), es, ee, *depthwise.value(), c.dw.shape(), de,
                                                  y.act, *pool);
        ASSERT_TRUE(st.ok()) << st.message();
        ASSERT_TRUE(dw_output_matches(y, sums, with_residual ? &residual : nullptr, act))
            << c.text() << ", x " << (in_blocked ? "blocked" : "plain") << (with_residual ? ", residual" : "")
            << ", expansion " << activation_name(expand_act) << ", " << activation_name(act) << ", "
            << pool->num_threads() << " threads";
      }
    }
  }
}

TEST(NchwcExpandDepthwise, MatchesReferenceOnInvertedBottlenecks) {
  std::mt19937 rng(1420);
  // Scaled-down inverted bottlenecks: 3x3 and 5x5 at stride 1 and 2, expansions from 1..40
  // input channels (1..5 blocks, the last partial) to 8..150 channels (block groups of every
  // width, the last narrower), planes from 1x1 to 113 wide and 70 tall (several bands per
  // thread, whose shared rows move), dilation, batches of 2 and 3.
  const std::vector<ExpandCase> cases = {
      {{1, 96, 40, 41, 3, 3, 2, 2, 1, 1, 1, 1, true}, 16, true},
      {{1, 144, 28, 28, 3, 3, 1, 1, 1, 1, 1, 1, true}, 24, true},
      {{2, 40, 15, 13, 5, 5, 2, 2, 2, 2, 1, 1, false}, 7, false},
      {{1, 150, 7, 7, 5, 5, 1, 1, 2, 2, 1, 1, true}, 40, true},
      {{1, 13, 1, 1, 3, 3, 1, 1, 1, 1, 1, 1, true}, 3, true},
      {{3, 8, 9, 8, 3, 3, 1, 1, 1, 1, 1, 1, true}, 1, true},
      {{1, 24, 70, 113, 3, 3, 1, 1, 1, 1, 1, 1, true}, 9, true},
      {{1, 17, 33, 31, 3, 3, 1, 2, 2, 1, 2, 1, true}, 12, false},
      {{1, 20, 6, 5, 7, 7, 2, 2, 3, 3, 1, 1, true}, 20, true},
  };
  for (const ExpandCase& c : cases) expect_expand_depthwise_matches(c, rng);
}

TEST(NchwcExpandDepthwise, MatchesReferenceOverRandomShapes) {
  std::mt19937 rng(1421);
  std::uniform_int_distribution<std::int64_t> in_channels(1, 33), channels(1, 70), size(1, 40), kernel(1, 5), stride(1, 2),
      pad(0, 2), coin(0, 1);
  int ran = 0;
  for (int trial = 0; ran < 16 && trial < 200; ++trial) {
    const std::int64_t k = kernel(rng);
    const ExpandCase c{{coin(rng) == 1 ? 2 : 1, channels(rng), size(rng), size(rng), k, k, stride(rng), stride(rng),
                        pad(rng), pad(rng), 1, 1, coin(rng) == 1},
                       in_channels(rng), coin(rng) == 1};
    // The window must fit (oh() truncates a negative span toward zero).
    if (!c.dw.valid() || c.dw.h + 2 * c.dw.pad_h < c.dw.kh || c.dw.w + 2 * c.dw.pad_w < c.dw.kw) continue;
    ++ran;
    expect_expand_depthwise_matches(c, rng);
  }
  EXPECT_EQ(ran, 16);
}

// It needs a blocked y, a 1x1 expansion into the depthwise conv's channels, a blocked
// residual: anything else is kInvalidInput, with nothing written.
TEST(NchwcExpandDepthwise, RejectsWhatItDoesNotRun) {
  std::mt19937 rng(1422);
  const DwCase d{1, 16, 8, 8, 3, 3, 1, 1, 1, 1, 1, 1, true};
  const Tensor4 x(1, 8, 8, 8, rng), ew(16, 8, 1, 1, rng), wt(16, 1, 3, 3, rng);
  ConvShape es;
  es.in_channels = 8;
  es.out_channels = 16;
  auto expand = prepare_dense(ew.values.data(), es);
  auto depthwise = prepare_depthwise(wt.values.data(), d.shape());
  ASSERT_TRUE(expand.ok() && depthwise.ok());
  ThreadPool two(2);
  const Buffer xb = x.input(true);
  const Epilogue none;
  Buffer plain_y(1, 16, 8, 8, false, 7.0f);
  EXPECT_EQ(conv2d_expand_depthwise(xb.act, *expand.value(), es, none, *depthwise.value(), d.shape(), none, plain_y.act, two).code(),
            StatusCode::kInvalidInput);
  Buffer small_y(1, 16, 7, 8, true, 7.0f);
  EXPECT_EQ(conv2d_expand_depthwise(xb.act, *expand.value(), es, none, *depthwise.value(), d.shape(), none, small_y.act, two).code(),
            StatusCode::kInvalidInput);
  ConvShape strided = es;
  strided.stride_h = 2;
  Buffer y(1, 16, 8, 8, true, 7.0f);
  EXPECT_EQ(conv2d_expand_depthwise(xb.act, *expand.value(), strided, none, *depthwise.value(), d.shape(), none, y.act, two).code(),
            StatusCode::kInvalidInput);
  const Buffer plain_residual = Tensor4(1, 16, 8, 8, rng).input(false);
  const Epilogue with_plain{nullptr, &plain_residual.act, FusedActivation::kNone};
  EXPECT_EQ(conv2d_expand_depthwise(xb.act, *expand.value(), es, none, *depthwise.value(), d.shape(), with_plain, y.act, two).code(),
            StatusCode::kInvalidInput);
  EXPECT_TRUE(std::all_of(y.storage.begin(), y.storage.end() - y.canaries, [](float v) { return v == 7.0f; }));
}

// ---------------------------------------------------------------------------------------
// Pools

// pool.cpp's output size (window_output_size): floor or ceil, and a ceil window that would
// start in the right padding dropped.
std::int64_t pool_out(std::int64_t in, std::int64_t k, std::int64_t stride, std::int64_t pad, std::int64_t dilation,
                      bool ceil_mode) {
  const std::int64_t num = in + 2 * pad - (dilation * (k - 1) + 1) + (ceil_mode ? stride - 1 : 0);
  std::int64_t out = (num >= 0 ? num / stride : -((-num + stride - 1) / stride)) + 1;
  if (ceil_mode && out > 0 && (out - 1) * stride >= in + pad) --out;
  return out;
}

struct PoolCase {
  std::int64_t n, c, h, w, kh, kw, stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w;
  bool ceil_mode, count_include_pad;
  PoolShape shape() const {
    return PoolShape{kh, kw, stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, count_include_pad};
  }
  std::int64_t oh(bool dilated) const { return pool_out(h, kh, stride_h, pad_h, dilated ? dilation_h : 1, ceil_mode); }
  std::int64_t ow(bool dilated) const { return pool_out(w, kw, stride_w, pad_w, dilated ? dilation_w : 1, ceil_mode); }
  std::string text() const {
    std::ostringstream s;
    s << "x [" << n << "," << c << "," << h << "," << w << "] kernel " << kh << "x" << kw << " stride " << stride_h
      << "," << stride_w << " pad " << pad_h << "," << pad_w << " dilation " << dilation_h << "," << dilation_w
      << (ceil_mode ? " ceil" : "") << (count_include_pad ? " count_include_pad" : "");
    return s.str();
  }
};

double max_reference(const PoolCase& c, const Tensor4& x, std::int64_t img, std::int64_t ch, std::int64_t oy,
                     std::int64_t ox) {
  double m = -std::numeric_limits<double>::infinity();
  for (std::int64_t i = 0; i < c.kh; ++i) {
    for (std::int64_t j = 0; j < c.kw; ++j) {
      const std::int64_t iy = oy * c.stride_h - c.pad_h + i * c.dilation_h;
      const std::int64_t ix = ox * c.stride_w - c.pad_w + j * c.dilation_w;
      if (iy < 0 || iy >= c.h || ix < 0 || ix >= c.w) continue;
      const double v = x.at(img, ch, iy, ix);
      if (std::isnan(v)) return v;
      m = std::max(m, v);
    }
  }
  return m;
}

double avg_reference(const PoolCase& c, const Tensor4& x, std::int64_t img, std::int64_t ch, std::int64_t oy,
                     std::int64_t ox) {
  const std::int64_t y0 = oy * c.stride_h - c.pad_h, y1 = std::min(y0 + c.kh, c.h + c.pad_h);
  const std::int64_t x0 = ox * c.stride_w - c.pad_w, x1 = std::min(x0 + c.kw, c.w + c.pad_w);
  double sum = 0.0;
  std::int64_t inside = 0;
  for (std::int64_t iy = std::max<std::int64_t>(y0, 0); iy < std::min(y1, c.h); ++iy) {
    for (std::int64_t ix = std::max<std::int64_t>(x0, 0); ix < std::min(x1, c.w); ++ix) {
      sum += x.at(img, ch, iy, ix);
      ++inside;
    }
  }
  if (inside == 0) return 0.0;
  return sum / static_cast<double>(c.count_include_pad ? (y1 - y0) * (x1 - x0) : inside);
}

// Every real element of `got` within tolerance of want(img, ch, oy, ox) (exactly, with
// NaN equal to NaN, when `exact`), padded lanes finite, canaries intact.
template <typename Want>
::testing::AssertionResult pool_output_matches(Buffer& got, bool exact, const Want& want) {
  const Act& y = got.act;
  for (std::int64_t img = 0; img < y.n; ++img) {
    for (std::int64_t ch = 0; ch < y.c; ++ch) {
      for (std::int64_t oy = 0; oy < y.h; ++oy) {
        for (std::int64_t ox = 0; ox < y.w; ++ox) {
          const double w = want(img, ch, oy, ox);
          const float g = got.at(img, ch, oy, ox);
          const bool ok = exact ? (std::isnan(w) ? std::isnan(g) : g == w)
                                : std::abs(g - w) <= 1e-6 + 1e-5 * std::abs(w);
          if (!ok) {
            return ::testing::AssertionFailure() << "y(" << img << "," << ch << "," << oy << "," << ox << ") = " << g
                                                 << ", want " << w;
          }
        }
      }
    }
  }
  if (!got.padded_lanes_finite()) return ::testing::AssertionFailure() << "a padded lane is not finite";
  if (!got.canary_intact()) return ::testing::AssertionFailure() << "wrote past the output";
  return ::testing::AssertionSuccess();
}

// Calls run(x, y, pool) for every layout pair and thread count and checks y against want.
template <typename Run, typename Want>
void expect_pool_matches(const std::string& what, const Tensor4& x, std::int64_t oh, std::int64_t ow, bool exact,
                         const Run& run, const Want& want) {
  ThreadPool one(1), two(2);
  for (ThreadPool* pool : {&one, &two}) {
    for (bool in_blocked : {false, true}) {
      const Buffer xb = x.input(in_blocked);
      for (bool out_blocked : {false, true}) {
        Buffer y(x.n, x.c, oh, ow, out_blocked, std::numeric_limits<float>::quiet_NaN());
        const Status st = run(xb.act, y.act, *pool);
        ASSERT_TRUE(st.ok()) << st.message();
        ASSERT_TRUE(pool_output_matches(y, exact, want))
            << what << ", " << layouts(in_blocked, out_blocked) << ", " << pool->num_threads() << " threads";
      }
    }
  }
}

void expect_max_pool_matches(const PoolCase& c, const Tensor4& x) {
  expect_pool_matches(
      "max_pool2d " + c.text(), x, c.oh(true), c.ow(true), true,
      [&](const Act& xa, const Act& ya, ThreadPool& pool) { return max_pool2d(xa, c.shape(), ya, pool); },
      [&](std::int64_t img, std::int64_t ch, std::int64_t oy, std::int64_t ox) {
        return max_reference(c, x, img, ch, oy, ox);
      });
}

void expect_avg_pool_matches(const PoolCase& c, const Tensor4& x) {
  expect_pool_matches(
      "avg_pool2d " + c.text(), x, c.oh(false), c.ow(false), false,
      [&](const Act& xa, const Act& ya, ThreadPool& pool) { return avg_pool2d(xa, c.shape(), ya, pool); },
      [&](std::int64_t img, std::int64_t ch, std::int64_t oy, std::int64_t ox) {
        return avg_reference(c, x, img, ch, oy, ox);
      });
}

// Random pools with pool.cpp's constraint (padding at most half the kernel).
PoolCase random_pool(std::mt19937& rng) {
  std::uniform_int_distribution<std::int64_t> channels(1, 21), size(1, 23), kernel(1, 5), stride(1, 3),
      dilation(1, 2), coin(0, 1);
  for (;;) {
    PoolCase c{coin(rng) == 1 ? 3 : 1, channels(rng), size(rng), size(rng), kernel(rng), kernel(rng), stride(rng),
               stride(rng), 0, 0, 1, 1, coin(rng) == 1, coin(rng) == 1};
    c.pad_h = std::uniform_int_distribution<std::int64_t>(0, c.kh / 2)(rng);
    c.pad_w = std::uniform_int_distribution<std::int64_t>(0, c.kw / 2)(rng);
    if (coin(rng) == 1) {
      c.dilation_h = dilation(rng);
      c.dilation_w = dilation(rng);
    }
    if (c.oh(true) >= 1 && c.ow(true) >= 1 && c.oh(false) >= 1 && c.ow(false) >= 1) return c;
  }
}

TEST(NchwcPool, MaxAndAvgMatchReferenceOnNetworkShapes) {
  std::mt19937 rng(1420);
  const std::vector<PoolCase> cases = {
      {1, 64, 28, 28, 3, 3, 2, 2, 1, 1, 1, 1, false, true},   // resnet's stem max pool, scaled down
      {1, 13, 27, 27, 3, 3, 2, 2, 0, 0, 1, 1, true, true},    // ceil_mode: a last partial window
      {2, 17, 7, 9, 2, 2, 2, 2, 0, 0, 1, 1, true, false},     // ceil_mode on odd planes
      {1, 24, 13, 40, 3, 3, 1, 1, 1, 1, 1, 1, false, false},  // stride 1, count_include_pad off
      {1, 9, 14, 14, 5, 3, 3, 2, 2, 1, 2, 2, true, true},     // dilation (max) and stride 3
      {3, 3, 5, 5, 5, 5, 1, 1, 2, 2, 1, 1, false, false},     // windows mostly padding
      {1, 11, 61, 67, 3, 3, 2, 2, 1, 1, 2, 2, true, true},    // several bands of rows
      {2, 5, 90, 45, 4, 2, 1, 1, 2, 1, 1, 1, false, false},
      {3, 5, 61, 45, 3, 3, 1, 1, 1, 1, 1, 1, false, true},    // 2 threads: a chunk starts mid-image
  };
  for (const PoolCase& c : cases) {
    const Tensor4 x(c.n, c.c, c.h, c.w, rng);
    expect_max_pool_matches(c, x);
    expect_avg_pool_matches(c, x);
  }
}

TEST(NchwcPool, MaxAndAvgMatchReferenceOverRandomShapes) {
  std::mt19937 rng(1421);
  for (int trial = 0; trial < 40; ++trial) {
    const PoolCase c = random_pool(rng);
    const Tensor4 x(c.n, c.c, c.h, c.w, rng);
    expect_max_pool_matches(c, x);
    expect_avg_pool_matches(c, x);
  }
}

TEST(NchwcPool, MaxPropagatesNanAndKeepsInfinities) {
  std::mt19937 rng(1422);
  const PoolCase c{1, 11, 12, 19, 3, 3, 2, 2, 1, 1, 1, 1, true, true};
  Tensor4 x(c.n, c.c, c.h, c.w, rng);
  std::uniform_int_distribution<std::size_t> at(0, x.values.size() - 1);
  for (int i = 0; i < 12; ++i) x.values[at(rng)] = std::numeric_limits<float>::quiet_NaN();
  for (int i = 0; i < 12; ++i) x.values[at(rng)] = std::numeric_limits<float>::infinity();
  for (std::size_t i = 0; i < x.values.size(); i += 3) x.values[i] = -std::numeric_limits<float>::infinity();
  for (std::int64_t y = 0; y < c.h; ++y) {  // a channel of -inf only: windows of -inf
    for (std::int64_t xx = 0; xx < c.w; ++xx) {
      x.values[static_cast<std::size_t>((9 * c.h + y) * c.w + xx)] = -std::numeric_limits<float>::infinity();
    }
  }
  expect_max_pool_matches(c, x);
}

TEST(NchwcPool, AdaptiveAvgMatchesReference) {
  std::mt19937 rng(1423);
  std::uniform_int_distribution<std::int64_t> channels(1, 21), size(1, 23), coin(0, 1);
  for (int trial = 0; trial < 30; ++trial) {
    const std::int64_t n = coin(rng) == 1 ? 3 : 1, c = channels(rng);
    const std::int64_t h = trial < 3 ? 60 + trial : size(rng), w = trial < 3 ? 70 : size(rng);  // several bands
    // Global (1x1), classifier-style 7x7, and bins both narrower and wider than a pixel.
    const std::int64_t oh = trial % 3 == 0 ? 1 : trial % 3 == 1 ? std::min<std::int64_t>(7, h + 2) : size(rng);
    const std::int64_t ow = trial % 3 == 0 ? 1 : trial % 3 == 1 ? std::min<std::int64_t>(7, w + 2) : size(rng);
    const Tensor4 x(n, c, h, w, rng);
    std::ostringstream what;
    what << "adaptive_avg_pool2d [" << n << "," << c << "," << h << "," << w << "] -> " << oh << "x" << ow;
    expect_pool_matches(
        what.str(), x, oh, ow, false,
        [&](const Act& xa, const Act& ya, ThreadPool& pool) { return adaptive_avg_pool2d(xa, ya, pool); },
        [&](std::int64_t img, std::int64_t ch, std::int64_t oy, std::int64_t ox) {
          const std::int64_t y0 = oy * h / oh, y1 = ((oy + 1) * h + oh - 1) / oh;
          const std::int64_t x0 = ox * w / ow, x1 = ((ox + 1) * w + ow - 1) / ow;
          double sum = 0.0;
          for (std::int64_t iy = y0; iy < y1; ++iy) {
            for (std::int64_t ix = x0; ix < x1; ++ix) sum += x.at(img, ch, iy, ix);
          }
          return sum / static_cast<double>((y1 - y0) * (x1 - x0));
        });
  }
}

TEST(NchwcPool, MeanHwMatchesReference) {
  std::mt19937 rng(1424);
  std::uniform_int_distribution<std::int64_t> channels(1, 40), size(1, 60), coin(0, 1);
  for (int trial = 0; trial < 30; ++trial) {
    const std::int64_t n = coin(rng) == 1 ? 3 : 1, c = channels(rng), h = size(rng), w = size(rng);
    const Tensor4 x(n, c, h, w, rng, -1.0f, 3.0f);
    std::ostringstream what;
    what << "mean_hw [" << n << "," << c << "," << h << "," << w << "]";
    expect_pool_matches(
        what.str(), x, 1, 1, false, [&](const Act& xa, const Act& ya, ThreadPool& pool) { return mean_hw(xa, ya, pool); },
        [&](std::int64_t img, std::int64_t ch, std::int64_t, std::int64_t) {
          double sum = 0.0;
          for (std::int64_t iy = 0; iy < h; ++iy) {
            for (std::int64_t ix = 0; ix < w; ++ix) sum += x.at(img, ch, iy, ix);
          }
          return sum / static_cast<double>(h * w);
        });
  }
}

}  // namespace
}  // namespace kiln::cpu::nchwc

// The NCHW8c reorders, depthwise convolution and pools (kernels/nchwc.h) against naive
// references in double over randomized shapes: channel counts that leave 1..7 lanes of the
// last block padded, odd planes, kernels 1x1..7x7, strides 1-3, padding, dilation,
// batches, every (plain | blocked) input x output layout, bias and residual (none, plain,
// blocked), every fused activation, on 1 and 2 threads. Blocked inputs carry junk in their
// padded lanes (which must never reach a real channel); blocked outputs must leave finite
// values there, and every output buffer is followed by canaries that must stay intact.
#include <gtest/gtest.h>

#include <algorithm>
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

// An activation buffer in one layout with canaries after its floats.
struct Buffer {
  Act act;
  std::vector<float> storage;

  Buffer(std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w, bool blocked, float fill) {
    act.n = n;
    act.c = c;
    act.h = h;
    act.w = w;
    act.blocked = blocked;
    storage.assign(static_cast<std::size_t>(act.floats() + kCanaries), fill);
    std::fill(storage.end() - kCanaries, storage.end(), kCanary);
    act.data = storage.data();
  }
  float& at(std::int64_t img, std::int64_t ch, std::int64_t y, std::int64_t x) {
    return act.data[img * act.image_floats() + act.offset(ch, y, x)];
  }
  bool canary_intact() const {
    return std::all_of(storage.end() - kCanaries, storage.end(), [](float v) { return v == kCanary; });
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
  Buffer store(bool blocked, float junk = 1.0e3f) const {
    Buffer b(n, c, h, w, blocked, junk);
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
  const Buffer blocked = t.store(true, std::numeric_limits<float>::infinity());
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

}  // namespace
}  // namespace kiln::cpu::nchwc

// max_pool2d, avg_pool2d and the adaptive pools against direct reference loops that follow
// PyTorch's definitions.
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "kernel_testutil.h"

namespace kiln::cpu::testing {
namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();

std::int64_t pool_out(std::int64_t in, std::int64_t k, std::int64_t s, std::int64_t p, std::int64_t d, bool ceil_mode) {
  const std::int64_t num = in + 2 * p - d * (k - 1) - 1 + (ceil_mode ? s - 1 : 0);
  std::int64_t out = static_cast<std::int64_t>(std::floor(static_cast<double>(num) / static_cast<double>(s))) + 1;
  if (ceil_mode && (out - 1) * s >= in + p) --out;
  return out;
}

struct PoolCase {
  Shape x;
  std::int64_t k[2], s[2], p[2], d[2];
  bool ceil_mode;
};

const std::vector<PoolCase>& pool_cases() {
  static const std::vector<PoolCase> kCases = {
      {{1, 2, 8, 8}, {2, 2}, {2, 2}, {0, 0}, {1, 1}, false}, {{2, 3, 7, 9}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, true},
      {{3, 5, 5}, {3, 2}, {1, 2}, {1, 0}, {1, 1}, false},    {{1, 1, 10, 11}, {3, 3}, {3, 3}, {1, 1}, {2, 2}, true},
      {{1, 2, 6, 6}, {4, 4}, {3, 3}, {2, 2}, {1, 1}, true},  {{0, 2, 4, 4}, {2, 2}, {2, 2}, {0, 0}, {1, 1}, false},
      {{1, 1, 1, 1}, {1, 1}, {1, 1}, {0, 0}, {1, 1}, false}};
  return kCases;
}

TEST(MaxPool2dKernel, MatchesReferenceWithDilationAndCeilMode) {
  std::mt19937 rng(1);
  for (DType dt : {DType::kF32, DType::kF64, DType::kI64, DType::kF16}) {
    for (const PoolCase& c : pool_cases()) {
      const bool batched = c.x.size() == 4;
      const std::int64_t planes = batched ? c.x[0] * c.x[1] : c.x[0];
      const std::int64_t h = c.x[c.x.size() - 2], w = c.x.back();
      const std::int64_t oh = pool_out(h, c.k[0], c.s[0], c.p[0], c.d[0], c.ceil_mode);
      const std::int64_t ow = pool_out(w, c.k[1], c.s[1], c.p[1], c.d[1], c.ceil_mode);
      Tensor x = Tensor::random(dt, c.x, rng, -9, 9);
      Shape os = c.x;
      os[os.size() - 2] = oh;
      os.back() = ow;
      std::vector<double> want;
      for (std::int64_t pl = 0; pl < planes; ++pl) {
        for (std::int64_t y = 0; y < oh; ++y) {
          for (std::int64_t xx = 0; xx < ow; ++xx) {
            double m = -std::numeric_limits<double>::infinity();
            for (std::int64_t i = 0; i < c.k[0]; ++i) {
              for (std::int64_t j = 0; j < c.k[1]; ++j) {
                const std::int64_t iy = y * c.s[0] - c.p[0] + i * c.d[0], ix = xx * c.s[1] - c.p[1] + j * c.d[1];
                if (iy >= 0 && iy < h && ix >= 0 && ix < w) m = std::max(m, x.at((pl * h + iy) * w + ix));
              }
            }
            want.push_back(m);
          }
        }
      }
      Tensor out(dt, os);
      const Status s = run(OpKind::MaxPool2d, {&x}, {&out},
                           AttrList().ints({c.k[0], c.k[1]}).ints({c.s[0], c.s[1]}).ints({c.p[0], c.p[1]})
                               .ints({c.d[0], c.d[1]}).b(c.ceil_mode));
      ASSERT_TRUE(s.ok()) << shape_string(c.x) << ": " << s.message();
      EXPECT_TRUE(all_equal(out, want)) << dtype_name(dt) << shape_string(c.x);
    }
  }
}

TEST(MaxPool2dKernel, NaNPropagatesAndStrideDefaultsToKernel) {
  Tensor x = Tensor::of(DType::kF32, {1, 1, 2, 4}, {1, kNaN, 3, 4, 5, 6, 7, 8});
  Tensor out(DType::kF32, {1, 1, 1, 2});
  ASSERT_TRUE(run(OpKind::MaxPool2d, {&x}, {&out}, AttrList().ints({2}).ints({}).ints({0}).ints({1}).b(false)).ok());
  EXPECT_TRUE(std::isnan(out.at(0)));
  EXPECT_EQ(out.at(1), 8);
  EXPECT_TRUE(fails_with(run(OpKind::MaxPool2d, {&x}, {&out}, AttrList().ints({2}).ints({}).ints({2}).ints({1}).b(false)),
                         StatusCode::kInvalidBundle, "max_pool2d", "padding[0]=2"));
  Tensor x2(DType::kF32, {4, 4});
  EXPECT_TRUE(fails_with(run(OpKind::MaxPool2d, {&x2}, {&out}, AttrList().ints({2}).ints({}).ints({0}).ints({1}).b(false)),
                         StatusCode::kInvalidBundle, "max_pool2d", "3-D"));
}

TEST(AvgPool2dKernel, CountIncludePadAndCeilMode) {
  std::mt19937 rng(2);
  for (DType dt : {DType::kF32, DType::kF64}) {
    for (const PoolCase& c : pool_cases()) {
      for (bool include_pad : {true, false}) {
        const bool batched = c.x.size() == 4;
        const std::int64_t planes = batched ? c.x[0] * c.x[1] : c.x[0];
        const std::int64_t h = c.x[c.x.size() - 2], w = c.x.back();
        const std::int64_t oh = pool_out(h, c.k[0], c.s[0], c.p[0], 1, c.ceil_mode);
        const std::int64_t ow = pool_out(w, c.k[1], c.s[1], c.p[1], 1, c.ceil_mode);
        Tensor x = Tensor::random(dt, c.x, rng, -9, 9);
        Shape os = c.x;
        os[os.size() - 2] = oh;
        os.back() = ow;
        std::vector<double> want;
        for (std::int64_t pl = 0; pl < planes; ++pl) {
          for (std::int64_t y = 0; y < oh; ++y) {
            for (std::int64_t xx = 0; xx < ow; ++xx) {
              // PyTorch: the window is cut at the padded border for the divisor, at the
              // input border for the sum.
              const std::int64_t y0 = y * c.s[0] - c.p[0], x0 = xx * c.s[1] - c.p[1];
              const std::int64_t y1 = std::min(y0 + c.k[0], h + c.p[0]), x1 = std::min(x0 + c.k[1], w + c.p[1]);
              double sum = 0;
              std::int64_t count = 0;
              for (std::int64_t iy = std::max<std::int64_t>(y0, 0); iy < std::min(y1, h); ++iy) {
                for (std::int64_t ix = std::max<std::int64_t>(x0, 0); ix < std::min(x1, w); ++ix) {
                  sum += x.at((pl * h + iy) * w + ix);
                  ++count;
                }
              }
              const std::int64_t divisor = include_pad ? (y1 - y0) * (x1 - x0) : count;
              want.push_back(count == 0 ? 0 : sum / static_cast<double>(divisor));
            }
          }
        }
        Tensor out(dt, os);
        ASSERT_TRUE(run(OpKind::AvgPool2d, {&x}, {&out},
                        AttrList().ints({c.k[0], c.k[1]}).ints({c.s[0], c.s[1]}).ints({c.p[0], c.p[1]}).b(c.ceil_mode)
                            .b(include_pad)).ok());
        EXPECT_TRUE(all_close(out, want, 1e-5, 1e-5)) << shape_string(c.x) << " include_pad " << include_pad;
      }
    }
  }
}

TEST(AdaptivePoolKernels, PyTorchWindows) {
  std::mt19937 rng(3);
  const std::vector<std::tuple<Shape, std::int64_t, std::int64_t>> cases = {
      {{1, 2, 7, 9}, 3, 4}, {{2, 3, 8, 8}, 1, 1}, {{3, 5, 4}, 5, 4}, {{1, 1, 3, 3}, 7, 2}, {{1, 2, 6, 6}, 0, 2}};
  for (const auto& [xs, oh, ow] : cases) {
    const std::int64_t h = xs[xs.size() - 2], w = xs.back();
    const std::int64_t planes = numel_of(xs) / (h * w);
    for (bool is_max : {false, true}) {
      for (DType dt : {DType::kF32, DType::kF64}) {
        Tensor x = Tensor::random(dt, xs, rng, -5, 5);
        std::vector<double> want;
        for (std::int64_t p = 0; p < planes; ++p) {
          for (std::int64_t i = 0; i < oh; ++i) {
            for (std::int64_t j = 0; j < ow; ++j) {
              const std::int64_t y0 = i * h / oh, y1 = ((i + 1) * h + oh - 1) / oh;
              const std::int64_t x0 = j * w / ow, x1 = ((j + 1) * w + ow - 1) / ow;
              double acc = is_max ? -1e300 : 0;
              for (std::int64_t y = y0; y < y1; ++y) {
                for (std::int64_t xx = x0; xx < x1; ++xx) {
                  const double v = x.at((p * h + y) * w + xx);
                  acc = is_max ? std::max(acc, v) : acc + v;
                }
              }
              want.push_back(is_max ? acc : acc / static_cast<double>((y1 - y0) * (x1 - x0)));
            }
          }
        }
        Shape os = xs;
        os[os.size() - 2] = oh;
        os.back() = ow;
        Tensor out(dt, os);
        const OpKind op = is_max ? OpKind::AdaptiveMaxPool2d : OpKind::AdaptiveAvgPool2d;
        ASSERT_TRUE(run(op, {&x}, {&out}, AttrList().ints({oh, ow})).ok());
        EXPECT_TRUE(all_close(out, want, 1e-5, 1e-5)) << op_name(op) << shape_string(xs);
      }
    }
  }
  Tensor x(DType::kF32, {1, 1, 4, 4}), out(DType::kF32, {1, 1, 2, 3});
  EXPECT_TRUE(fails_with(run(OpKind::AdaptiveAvgPool2d, {&x}, {&out}, AttrList().ints({2, 2})),
                         StatusCode::kInvalidBundle, "adaptive_avg_pool2d", "out.shape"));
  EXPECT_TRUE(fails_with(run(OpKind::AdaptiveAvgPool2d, {&x}, {&out}, AttrList().ints({2, -1})),
                         StatusCode::kInvalidBundle, "adaptive_avg_pool2d", "output_size[1]=-1"));
}

}  // namespace
}  // namespace kiln::cpu::testing

// batch_norm, layer_norm, softmax, log_softmax against double references, plus the two
// SIMD tables (baseline and AVX2) against libm.
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "backends/cpu/kernels/simd.h"
#include "kernel_testutil.h"

namespace kiln::cpu::testing {
namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

TEST(SoftmaxKernels, AlongEveryDimStable) {
  std::mt19937 rng(1);
  for (DType dt : {DType::kF32, DType::kF64, DType::kBF16}) {
    // {9, 37}, {5, 4, 13}: rows taken 4 at a time, then one by one.
    for (const Shape& shape : std::vector<Shape>{{7}, {3, 5}, {2, 3, 4}, {2, 0, 3}, {4, 1000}, {3, 300, 2}, {1}, {9, 37},
                                                 {5, 4, 13}}) {
      Tensor x = Tensor::random(dt, shape, rng, -50, 50);  // large spread: needs the max shift
      for (int dim = 0; dim < static_cast<int>(shape.size()); ++dim) {
        for (bool log : {false, true}) {
          // Per-slice max and sum, keyed by the index with `dim` zeroed.
          const auto slice = [&](std::int64_t i) {
            auto idx = unravel(i, shape);
            idx[dim] = 0;
            return static_cast<std::size_t>(ravel(idx, shape));
          };
          std::vector<double> mx(static_cast<std::size_t>(x.numel()), -kInf), sum(mx.size(), 0.0);
          for (std::int64_t i = 0; i < x.numel(); ++i) mx[slice(i)] = std::max(mx[slice(i)], x.at(i));
          for (std::int64_t i = 0; i < x.numel(); ++i) sum[slice(i)] += std::exp(x.at(i) - mx[slice(i)]);
          std::vector<double> want(static_cast<std::size_t>(x.numel()));
          for (std::int64_t i = 0; i < x.numel(); ++i) {
            const double m = mx[slice(i)], s = sum[slice(i)];
            want[static_cast<std::size_t>(i)] = log ? x.at(i) - m - std::log(s) : std::exp(x.at(i) - m) / s;
          }
          Tensor out(dt, shape);
          const OpKind op = log ? OpKind::LogSoftmax : OpKind::Softmax;
          ASSERT_TRUE(run(op, {&x}, {&out}, AttrList().i(dim)).ok());
          const double tol = dt == DType::kBF16 ? 2e-2 : 1e-5;
          EXPECT_TRUE(all_close(out, want, tol, tol)) << op_name(op) << " " << dtype_name(dt) << shape_string(shape)
                                                      << " dim " << dim;
        }
      }
    }
  }
}

TEST(SoftmaxKernels, NaNRowsAndScalars) {
  Tensor x = Tensor::of(DType::kF32, {2, 3}, {1, kNaN, 2, 1, 2, 3});
  Tensor out(DType::kF32, {2, 3});
  ASSERT_TRUE(run(OpKind::Softmax, {&x}, {&out}, AttrList().i(1)).ok());
  EXPECT_TRUE(std::isnan(out.at(0)) && std::isnan(out.at(2)));
  EXPECT_FALSE(std::isnan(out.at(3)));
  // Rows 4 at a time: a NaN row, a fully masked row (all -inf: NaN, as in PyTorch), a row
  // with one finite element, and a plain one.
  const double inf = kInf;
  Tensor m = Tensor::of(DType::kF32, {5, 3}, {1, kNaN, 2, -inf, -inf, -inf, -inf, 4, -inf, 0, 0, 0, 1, 2, 3});
  Tensor mo(DType::kF32, {5, 3});
  ASSERT_TRUE(run(OpKind::Softmax, {&m}, {&mo}, AttrList().i(1)).ok());
  for (int i = 0; i < 6; ++i) EXPECT_TRUE(std::isnan(mo.at(i))) << i;
  for (int i = 6; i < 15; ++i) {
    const double want[] = {0, 1, 0, 1.0 / 3, 1.0 / 3, 1.0 / 3, 0.09003057317, 0.24472847105, 0.66524095577};
    EXPECT_NEAR(mo.at(i), want[i - 6], 1e-6) << i;
  }
  Tensor s = Tensor::of(DType::kF32, {}, {5});
  Tensor so(DType::kF32, {});
  ASSERT_TRUE(run(OpKind::Softmax, {&s}, {&so}, AttrList().i(0)).ok());
  EXPECT_EQ(so.at(0), 1);
  ASSERT_TRUE(run(OpKind::LogSoftmax, {&s}, {&so}, AttrList().i(0)).ok());
  EXPECT_EQ(so.at(0), 0);
  EXPECT_TRUE(fails_with(run(OpKind::Softmax, {&x}, {&out}, AttrList().i(2)), StatusCode::kInvalidBundle, "softmax", "dim=2"));
  Tensor xi(DType::kI64, {2, 3});
  EXPECT_TRUE(fails_with(run(OpKind::Softmax, {&xi}, {&xi}, AttrList().i(1)), StatusCode::kUnsupported, "softmax"));
}

TEST(LayerNormKernel, OverTrailingDimsWithOptionalAffine) {
  std::mt19937 rng(2);
  for (DType dt : {DType::kF32, DType::kF64, DType::kF16}) {
    for (const auto& [shape, nr] : std::vector<std::pair<Shape, int>>{
             {{4, 8}, 1}, {{2, 3, 5}, 2}, {{3, 1001}, 1}, {{6}, 1}, {{0, 4}, 1}, {{2, 3}, 0}, {{2, 2, 3}, 3}}) {
      Tensor x = Tensor::random(dt, shape, rng, -3, 5);
      const Shape ns(shape.end() - nr, shape.end());
      Tensor w = Tensor::random(dt, ns, rng);
      Tensor b = Tensor::random(dt, ns, rng);
      const std::int64_t n = numel_of(ns), rows = n == 0 ? 0 : x.numel() / n;
      for (int affine = 0; affine < 4; ++affine) {  // bit 0: weight, bit 1: bias
        std::vector<double> want(static_cast<std::size_t>(x.numel()));
        for (std::int64_t r = 0; r < rows; ++r) {
          double mean = 0, var = 0;
          for (std::int64_t i = 0; i < n; ++i) mean += x.at(r * n + i);
          mean /= static_cast<double>(n);
          for (std::int64_t i = 0; i < n; ++i) var += (x.at(r * n + i) - mean) * (x.at(r * n + i) - mean);
          var /= static_cast<double>(n);
          for (std::int64_t i = 0; i < n; ++i) {
            want[static_cast<std::size_t>(r * n + i)] = (x.at(r * n + i) - mean) / std::sqrt(var + 1e-5) *
                                                            ((affine & 1) ? w.at(i) : 1.0) +
                                                        ((affine & 2) ? b.at(i) : 0.0);
          }
        }
        Tensor out(dt, shape);
        std::vector<TensorView> in{x.view(), (affine & 1) ? w.view() : absent()};
        if (affine & 2) in.push_back(b.view());
        std::vector<TensorView> ov{out.view()};
        ASSERT_TRUE(run_views(OpKind::LayerNorm, in, ov, AttrList().i(nr).f(1e-5)).ok());
        const double tol = dt == DType::kF16 ? 1e-2 : 1e-4;
        EXPECT_TRUE(all_close(out, want, tol, tol)) << dtype_name(dt) << shape_string(shape) << " affine " << affine;
      }
    }
  }
  Tensor x(DType::kF32, {2, 3}), w(DType::kF32, {2}), out(DType::kF32, {2, 3});
  EXPECT_TRUE(fails_with(run(OpKind::LayerNorm, {&x, &w}, {&out}, AttrList().i(1).f(1e-5)), StatusCode::kInvalidBundle,
                         "layer_norm", "weight.shape=[2] but expected [3]"));
  EXPECT_TRUE(fails_with(run(OpKind::LayerNorm, {&x}, {&out}, AttrList().i(3).f(1e-5)), StatusCode::kInvalidBundle,
                         "layer_norm", "normalized_rank=3"));
}

TEST(BatchNormKernel, InferenceWithRunningStatistics) {
  std::mt19937 rng(3);
  for (DType dt : {DType::kF32, DType::kF64}) {
    for (const Shape& shape : std::vector<Shape>{{2, 3}, {2, 3, 4, 5}, {1, 4, 7}, {0, 2, 3}}) {
      const std::int64_t c = shape[1];
      Tensor x = Tensor::random(dt, shape, rng, -3, 3);
      Tensor w = Tensor::random(dt, {c}, rng), b = Tensor::random(dt, {c}, rng);
      Tensor mean = Tensor::random(dt, {c}, rng), var = Tensor::random(dt, {c}, rng, 0.1, 2);
      const std::int64_t plane = numel_of(shape) / std::max<std::int64_t>(1, shape[0] * c);
      for (bool affine : {true, false}) {
        std::vector<double> want(static_cast<std::size_t>(x.numel()));
        for (std::int64_t i = 0; i < x.numel(); ++i) {
          const std::int64_t ch = (i / plane) % c;
          want[static_cast<std::size_t>(i)] = (x.at(i) - mean.at(ch)) / std::sqrt(var.at(ch) + 1e-3) *
                                                  (affine ? w.at(ch) : 1.0) + (affine ? b.at(ch) : 0.0);
        }
        Tensor out(dt, shape);
        std::vector<TensorView> in{x.view(), affine ? w.view() : absent(), affine ? b.view() : absent(), mean.view(),
                                   var.view()};
        std::vector<TensorView> ov{out.view()};
        ASSERT_TRUE(run_views(OpKind::BatchNorm, in, ov, AttrList().f(1e-3)).ok());
        EXPECT_TRUE(all_close(out, want, 1e-5, 1e-5)) << shape_string(shape);
      }
    }
  }
  Tensor x(DType::kF32, {2, 3}), p(DType::kF32, {3}), q(DType::kF32, {4}), out(DType::kF32, {2, 3});
  EXPECT_TRUE(fails_with(run(OpKind::BatchNorm, {&x, &p, &p, &q, &p}, {&out}, AttrList().f(1e-5)),
                         StatusCode::kInvalidBundle, "batch_norm", "running_mean.shape=[4]"));
  std::vector<TensorView> ov{out.view()};
  EXPECT_TRUE(fails_with(run_views(OpKind::BatchNorm, {x.view(), p.view(), p.view(), absent(), absent()}, ov,
                                   AttrList().f(1e-5)),
                         StatusCode::kUnsupported, "batch_norm", "training"));
}

TEST(SimdTables, BaselineAndAvx2AgreeWithLibm) {
  std::vector<float> x;
  for (double v = -30; v <= 30; v += 0.0173) x.push_back(static_cast<float>(v));
  x.push_back(static_cast<float>(kNaN));
  x.push_back(static_cast<float>(kInf));
  x.push_back(static_cast<float>(-kInf));
  std::vector<const kernels::SimdKernels*> tables{&kernels::simd_baseline()};
  if (kernels::simd_avx2() != nullptr) tables.push_back(kernels::simd_avx2());
  for (const kernels::SimdKernels* t : tables) {
    std::vector<float> y(x.size());
    const auto check = [&](void (*fn)(const float*, float*, std::int64_t), double (*ref)(double), const char* name) {
      fn(x.data(), y.data(), static_cast<std::int64_t>(x.size()));
      for (std::size_t i = 0; i < x.size(); ++i) {
        const double want = ref(x[i]);
        if (std::isnan(want)) {
          ASSERT_TRUE(std::isnan(y[i])) << t->name << " " << name << "(" << x[i] << ")";
        } else if (std::isinf(want)) {
          ASSERT_EQ(y[i], want) << t->name << " " << name << "(" << x[i] << ")";
        } else {
          ASSERT_NEAR(y[i], want, 1e-6 + 2e-6 * std::fabs(want)) << t->name << " " << name << "(" << x[i] << ")";
        }
      }
    };
    check(t->exp, [](double v) { return v > 88.7 ? kInf : std::exp(v); }, "exp");
    check(t->tanh, [](double v) { return std::tanh(v); }, "tanh");
    check(t->sigmoid, [](double v) { return 1 / (1 + std::exp(-v)); }, "sigmoid");
    check(t->gelu_erf, [](double v) { return 0.5 * v * std::erfc(-v / std::sqrt(2.0)); }, "gelu");
  }
}

}  // namespace
}  // namespace kiln::cpu::testing

// matmul (numpy semantics), linear, bmm and conv2d against naive reference loops.
#include <random>
#include <vector>

#include "backends/cpu/kernels/kernels.h"
#include "kernel_testutil.h"

namespace kiln::cpu::testing {
namespace {

// Reference numpy matmul in double.
Tensor reference_matmul(const Tensor& a, const Tensor& b, DType dtype) {
  Shape as = a.shape(), bs = b.shape();
  const bool a_vec = as.size() == 1, b_vec = bs.size() == 1;
  if (a_vec) as.insert(as.begin(), 1);
  if (b_vec) bs.push_back(1);
  const std::int64_t m = as[as.size() - 2], k = as.back(), n = bs.back();
  const Shape abatch(as.begin(), as.end() - 2), bbatch(bs.begin(), bs.end() - 2);
  const Shape batch = broadcast_shapes(abatch, bbatch);
  Shape out_shape = batch;
  if (!a_vec) out_shape.push_back(m);
  if (!b_vec) out_shape.push_back(n);
  Tensor out(dtype, out_shape);
  const std::int64_t nb = numel_of(batch);
  for (std::int64_t bi = 0; bi < nb; ++bi) {
    const auto idx = unravel(bi, batch);
    const std::int64_t ao = broadcast_offset(idx, abatch) * m * k;
    const std::int64_t bo = broadcast_offset(idx, bbatch) * k * n;
    for (std::int64_t i = 0; i < m; ++i) {
      for (std::int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (std::int64_t kk = 0; kk < k; ++kk) s += a.at(ao + i * k + kk) * b.at(bo + kk * n + j);
        out.set((bi * m + i) * n + j, s);
      }
    }
  }
  return out;
}

TEST(MatmulKernel, NumpySemanticsWithBroadcastBatches) {
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{5}, {5}},          {{3, 5}, {5}},          {{5}, {5, 4}},       {{3, 5}, {5, 4}},      {{2, 3, 5}, {5, 4}},
      {{3, 5}, {2, 5, 4}}, {{2, 1, 3, 5}, {4, 5, 2}}, {{2, 3, 5}, {5}},  {{5}, {3, 5, 2}},      {{0, 5}, {5, 3}},
      {{3, 0}, {0, 4}},    {{3, 5}, {5, 0}},       {{1, 1}, {1, 1}},    {{37, 129}, {129, 65}}, {{2, 7, 300}, {300, 9}},
      {{6, 1}, {1, 513}}};
  std::mt19937 rng(1);
  for (DType dt : {DType::kF32, DType::kF64, DType::kI64, DType::kI32, DType::kBF16}) {
    for (const auto& [sa, sb] : cases) {
      Tensor a = Tensor::random(dt, sa, rng, -3, 3);
      Tensor b = Tensor::random(dt, sb, rng, -3, 3);
      const Tensor want = reference_matmul(a, b, DType::kF64);
      Tensor out(dt, want.shape());
      const Status s = run(OpKind::Matmul, {&a, &b}, {&out});
      ASSERT_TRUE(s.ok()) << shape_string(sa) << " x " << shape_string(sb) << ": " << s.message();
      const double tol = dt == DType::kBF16 ? 1e-2 : (dtype_is_floating(dt) ? 1e-5 : 0);
      std::vector<double> w = want.values();
      if (dt == DType::kBF16) w = Tensor::of(dt, want.shape(), w).values();
      EXPECT_TRUE(all_close(out, w, tol, tol * 10)) << dtype_name(dt) << " " << shape_string(sa) << " x " << shape_string(sb);
    }
  }
}

TEST(MatmulKernel, RejectsMismatchedShapes) {
  Tensor a(DType::kF32, {3, 63}), b(DType::kF32, {64, 2}), out(DType::kF32, {3, 2});
  EXPECT_TRUE(fails_with(run(OpKind::Matmul, {&a, &b}, {&out}), StatusCode::kInvalidBundle, "matmul",
                         "a.shape[1]=63 != b.shape[0]=64"));
  Tensor b2(DType::kF32, {63, 2}), wrong(DType::kF32, {3, 3});
  EXPECT_TRUE(fails_with(run(OpKind::Matmul, {&a, &b2}, {&wrong}), StatusCode::kInvalidBundle, "matmul", "out.shape"));
  Tensor s(DType::kF32, {});
  EXPECT_TRUE(fails_with(run(OpKind::Matmul, {&s, &b2}, {&out}), StatusCode::kInvalidBundle, "matmul", "at least 1-D"));
  Tensor ba(DType::kF32, {2, 3, 4}), bb(DType::kF32, {3, 4, 5}), bo(DType::kF32, {3, 3, 5});
  EXPECT_TRUE(fails_with(run(OpKind::Matmul, {&ba, &bb}, {&bo}), StatusCode::kInvalidBundle, "matmul"));
  Tensor bi(DType::kI64, {63, 2});
  EXPECT_TRUE(fails_with(run(OpKind::Matmul, {&a, &bi}, {&out}), StatusCode::kUnsupported, "matmul", "mixed"));
}

TEST(MatmulKernel, MatmulF32HandlesStridesAndTransposedB) {
  std::mt19937 rng(4);
  for (const auto& [m, n, k] : std::vector<std::tuple<int, int, int>>{{1, 7, 9}, {4, 3, 2}, {9, 300, 130}, {70, 5, 257}}) {
    for (bool trans : {false, true}) {
      const std::int64_t lda = k + 3, ldb = (trans ? k : n) + 2, ldc = n + 5;
      Tensor a = Tensor::random(DType::kF32, {m * lda}, rng);
      Tensor b = Tensor::random(DType::kF32, {(trans ? n : k) * ldb}, rng);
      Tensor c = Tensor::random(DType::kF32, {m * ldc}, rng);
      std::vector<double> want = c.values();
      for (int i = 0; i < m; ++i) {
        for (int j = 0; j < n; ++j) {
          double s = 0;
          for (int kk = 0; kk < k; ++kk) s += a.at(i * lda + kk) * b.at(trans ? j * ldb + kk : kk * ldb + j);
          want[static_cast<std::size_t>(i * ldc + j)] = s;
        }
      }
      kernels::matmul_f32(m, n, k, a.as<float>(), lda, b.as<float>(), ldb, trans, c.as<float>(), ldc);
      EXPECT_TRUE(all_close(c, want, 1e-4, 1e-4)) << m << "x" << n << "x" << k << " trans " << trans;
    }
  }
}

TEST(LinearKernel, WithAndWithoutBias) {
  std::mt19937 rng(2);
  for (DType dt : {DType::kF32, DType::kF64, DType::kF16}) {
    for (const Shape& xs : std::vector<Shape>{{4}, {3, 4}, {2, 5, 4}, {0, 4}, {33, 4}}) {
      for (int bias_mode = 0; bias_mode < 3; ++bias_mode) {  // 0: two inputs, 1: absent, 2: present
        const std::int64_t n = 6, k = 4;
        Tensor x = Tensor::random(dt, xs, rng);
        Tensor w = Tensor::random(dt, {n, k}, rng);
        Tensor b = Tensor::random(dt, {n}, rng);
        Shape os = xs;
        os.back() = n;
        std::vector<double> want(static_cast<std::size_t>(numel_of(os)));
        const std::int64_t rows = numel_of(xs) / k;
        for (std::int64_t r = 0; r < rows; ++r) {
          for (std::int64_t j = 0; j < n; ++j) {
            double s = bias_mode == 2 ? b.at(j) : 0;
            for (std::int64_t kk = 0; kk < k; ++kk) s += x.at(r * k + kk) * w.at(j * k + kk);
            want[static_cast<std::size_t>(r * n + j)] = s;
          }
        }
        Tensor out(dt, os);
        std::vector<TensorView> in{x.view(), w.view()};
        if (bias_mode == 1) in.push_back(absent());
        if (bias_mode == 2) in.push_back(b.view());
        std::vector<TensorView> ov{out.view()};
        ASSERT_TRUE(run_views(OpKind::Linear, in, ov, {}).ok());
        const double tol = dt == DType::kF16 ? 1e-2 : 1e-5;
        EXPECT_TRUE(all_close(out, want, tol, tol)) << dtype_name(dt) << shape_string(xs) << " bias " << bias_mode;
      }
    }
  }
  Tensor x(DType::kF32, {3, 4}), w(DType::kF32, {6, 5}), out(DType::kF32, {3, 6}), b(DType::kF32, {5});
  EXPECT_TRUE(fails_with(run(OpKind::Linear, {&x, &w}, {&out}), StatusCode::kInvalidBundle, "linear",
                         "x.shape[1]=4 != weight.shape[1]=5"));
  Tensor w2(DType::kF32, {6, 4});
  EXPECT_TRUE(fails_with(run(OpKind::Linear, {&x, &w2, &b}, {&out}), StatusCode::kInvalidBundle, "linear", "bias.shape"));
}

TEST(BmmKernel, BatchedProducts) {
  std::mt19937 rng(3);
  for (DType dt : {DType::kF32, DType::kI64}) {
    Tensor a = Tensor::random(dt, {3, 4, 5}, rng, -3, 3);
    Tensor b = Tensor::random(dt, {3, 5, 2}, rng, -3, 3);
    const Tensor want = reference_matmul(a, b, DType::kF64);
    Tensor out(dt, {3, 4, 2});
    ASSERT_TRUE(run(OpKind::Bmm, {&a, &b}, {&out}).ok());
    EXPECT_TRUE(all_close(out, want.values(), 1e-5, 1e-5));
  }
  Tensor a(DType::kF32, {3, 4, 5}), b(DType::kF32, {2, 5, 2}), out(DType::kF32, {3, 4, 2});
  EXPECT_TRUE(fails_with(run(OpKind::Bmm, {&a, &b}, {&out}), StatusCode::kInvalidBundle, "bmm", "a.shape[0]=3"));
  Tensor a2(DType::kF32, {4, 5});
  EXPECT_TRUE(fails_with(run(OpKind::Bmm, {&a2, &b}, {&out}), StatusCode::kInvalidBundle, "bmm", "3-D"));
}

// ---------------------------------------------------------------------------------------
// conv2d

struct ConvCase {
  Shape x;          // [N, C, H, W] or [C, H, W]
  Shape w;          // [O, C/g, kh, kw]
  Shape stride, padding, dilation;
  std::int64_t groups;
  bool bias;
};

std::int64_t conv_out(std::int64_t in, std::int64_t k, std::int64_t s, std::int64_t p, std::int64_t d) {
  return (in + 2 * p - d * (k - 1) - 1) / s + 1;
}

TEST(Conv2dKernel, MatchesDirectConvolution) {
  const std::vector<ConvCase> cases = {
      {{1, 3, 8, 8}, {4, 3, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, true},
      {{2, 4, 9, 7}, {6, 2, 3, 2}, {2, 1}, {1, 0}, {1, 2}, 2, true},
      {{1, 6, 10, 10}, {6, 1, 3, 3}, {1, 1}, {2, 2}, {2, 2}, 6, false},   // depthwise, dilated
      {{2, 5, 6, 6}, {7, 5, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 1, true},      // 1x1 direct path
      {{3, 7, 5}, {2, 3, 5, 5}, {3, 3}, {2, 2}, {1, 1}, 1, false},        // unbatched, kernel > input
      {{1, 2, 13, 11}, {4, 2, 4, 3}, {3, 2}, {0, 1}, {1, 1}, 1, true},
      {{0, 2, 5, 5}, {3, 2, 3, 3}, {1, 1}, {0, 0}, {1, 1}, 1, true},      // empty batch
      {{1, 3, 40, 40}, {8, 3, 5, 5}, {1, 1}, {2, 2}, {1, 1}, 1, true},
      // Direct path: a 24 + 16-wide (13 valid) row tail, a strided stem, strides with
      // dilations and a 5-channel block tail, groups; then im2col (72 outputs per group).
      {{2, 16, 9, 37}, {16, 16, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, true},
      {{1, 3, 33, 50}, {16, 3, 3, 3}, {2, 2}, {1, 1}, {1, 1}, 1, true},
      {{1, 8, 20, 29}, {5, 8, 3, 3}, {3, 2}, {2, 1}, {2, 3}, 1, false},
      {{2, 8, 10, 10}, {12, 4, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 2, true},
      {{1, 4, 12, 12}, {72, 4, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1, true},
      // Depthwise on the direct path (4 channels a tile, a 1-channel tail block), strided
      // 5x5; a channel multiplier of 2 (one input, two outputs per group); depthwise 1x1.
      {{2, 9, 11, 13}, {9, 1, 5, 5}, {2, 2}, {2, 2}, {1, 1}, 9, true},
      {{1, 3, 7, 9}, {6, 1, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 3, true},
      {{2, 5, 4, 4}, {5, 1, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 5, true},
  };
  std::mt19937 rng(8);
  for (const ConvCase& c : cases) {
    const bool batched = c.x.size() == 4;
    const std::int64_t n = batched ? c.x[0] : 1, ch = c.x[batched ? 1 : 0], h = c.x[batched ? 2 : 1],
                       wd = c.x[batched ? 3 : 2];
    const std::int64_t o = c.w[0], cg = c.w[1], kh = c.w[2], kw = c.w[3], og = o / c.groups;
    const std::int64_t oh = conv_out(h, kh, c.stride[0], c.padding[0], c.dilation[0]);
    const std::int64_t ow = conv_out(wd, kw, c.stride[1], c.padding[1], c.dilation[1]);
    Tensor x = Tensor::random(DType::kF32, c.x, rng);
    Tensor w = Tensor::random(DType::kF32, c.w, rng);
    Tensor b = Tensor::random(DType::kF32, {o}, rng);
    Shape os = batched ? Shape{n, o, oh, ow} : Shape{o, oh, ow};
    std::vector<double> want(static_cast<std::size_t>(numel_of(os)));
    for (std::int64_t in = 0; in < n; ++in) {
      for (std::int64_t oc = 0; oc < o; ++oc) {
        const std::int64_t g = oc / og;
        for (std::int64_t y = 0; y < oh; ++y) {
          for (std::int64_t xx = 0; xx < ow; ++xx) {
            double s = c.bias ? b.at(oc) : 0;
            for (std::int64_t ci = 0; ci < cg; ++ci) {
              for (std::int64_t i = 0; i < kh; ++i) {
                for (std::int64_t j = 0; j < kw; ++j) {
                  const std::int64_t iy = y * c.stride[0] - c.padding[0] + i * c.dilation[0];
                  const std::int64_t ix = xx * c.stride[1] - c.padding[1] + j * c.dilation[1];
                  if (iy < 0 || iy >= h || ix < 0 || ix >= wd) continue;
                  s += x.at(((in * ch + g * cg + ci) * h + iy) * wd + ix) * w.at(((oc * cg + ci) * kh + i) * kw + j);
                }
              }
            }
            want[static_cast<std::size_t>(((in * o + oc) * oh + y) * ow + xx)] = s;
          }
        }
      }
    }
    Tensor out(DType::kF32, os);
    std::vector<TensorView> in{x.view(), w.view()};
    if (c.bias) in.push_back(b.view());
    std::vector<TensorView> ov{out.view()};
    const Status s = run_views(OpKind::Conv2d, in, ov,
                               AttrList().ints(c.stride).ints(c.padding).ints(c.dilation).i(c.groups));
    ASSERT_TRUE(s.ok()) << shape_string(c.x) << ": " << s.message();
    EXPECT_TRUE(all_close(out, want, 1e-4, 1e-4)) << shape_string(c.x) << " " << shape_string(c.w);
  }
}

TEST(Conv2dKernel, RejectsInconsistentGeometry) {
  Tensor x(DType::kF32, {1, 4, 8, 8}), w(DType::kF32, {6, 3, 3, 3}), out(DType::kF32, {1, 6, 6, 6});
  const auto attrs = [](std::int64_t groups) { return AttrList().ints({1}).ints({0}).ints({1}).i(groups); };
  EXPECT_TRUE(fails_with(run(OpKind::Conv2d, {&x, &w}, {&out}, attrs(1)), StatusCode::kInvalidBundle, "conv2d",
                         "weight.shape[1]=3"));
  EXPECT_TRUE(fails_with(run(OpKind::Conv2d, {&x, &w}, {&out}, attrs(3)), StatusCode::kInvalidBundle, "conv2d", "groups=3"));
  Tensor w2(DType::kF32, {6, 4, 9, 3});
  EXPECT_TRUE(fails_with(run(OpKind::Conv2d, {&x, &w2}, {&out}, attrs(1)), StatusCode::kInvalidBundle, "conv2d",
                         "too small"));
  Tensor w3(DType::kF32, {6, 4, 3, 3}), bad(DType::kF32, {1, 6, 7, 6});
  EXPECT_TRUE(fails_with(run(OpKind::Conv2d, {&x, &w3}, {&bad}, attrs(1)), StatusCode::kInvalidBundle, "conv2d", "out.shape"));
  EXPECT_TRUE(fails_with(run(OpKind::Conv2d, {&x, &w3}, {&out}, AttrList().ints({0}).ints({0}).ints({1}).i(1)),
                         StatusCode::kInvalidBundle, "conv2d", "stride[0]=0"));
  Tensor xi(DType::kI64, {1, 4, 8, 8});
  EXPECT_TRUE(fails_with(run(OpKind::Conv2d, {&xi, &w3}, {&out}, attrs(1)), StatusCode::kUnsupported, "conv2d"));
}

}  // namespace
}  // namespace kiln::cpu::testing

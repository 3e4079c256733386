// Indexing (embedding, gather, index_select, index) and data-dependent kernels (nonzero,
// masked_select, item).
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/kernels/kernels.h"
#include "kernel_testutil.h"

namespace kiln::cpu::testing {
namespace {

Tensor iota(DType dt, const Shape& shape) {
  Tensor t(dt, shape);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.set(i, static_cast<double>(i % 120));
  return t;
}

Tensor random_indices(DType dt, const Shape& shape, std::int64_t lo, std::int64_t hi, std::mt19937& rng) {
  Tensor t(dt, shape);
  std::uniform_int_distribution<std::int64_t> dist(lo, hi - 1);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.set(i, static_cast<double>(dist(rng)));
  return t;
}

TEST(EmbeddingKernel, LooksUpRowsAndRejectsOutOfRange) {
  std::mt19937 rng(1);
  for (DType idt : {DType::kI64, DType::kI32}) {
    for (DType dt : {DType::kF32, DType::kF16, DType::kI64}) {
      for (const Shape& is : std::vector<Shape>{{5}, {2, 3}, {}, {0}, {4, 1, 2}}) {
        Tensor w = iota(dt, {10, 3});
        Tensor idx = random_indices(idt, is, 0, 10, rng);
        Shape os = is;
        os.push_back(3);
        std::vector<double> want;
        for (std::int64_t i = 0; i < idx.numel(); ++i) {
          for (int j = 0; j < 3; ++j) want.push_back(w.at(static_cast<std::int64_t>(idx.at(i)) * 3 + j));
        }
        Tensor out(dt, os);
        ASSERT_TRUE(run(OpKind::Embedding, {&w, &idx}, {&out}).ok());
        EXPECT_TRUE(all_equal(out, want));
      }
    }
  }
  Tensor w(DType::kF32, {8, 2});
  Tensor idx = Tensor::of(DType::kI64, {6}, {0, 1, 2, 3, 4, 10});
  Tensor out(DType::kF32, {6, 2});
  EXPECT_TRUE(fails_with(run(OpKind::Embedding, {&w, &idx}, {&out}), StatusCode::kInvalidInput, "embedding",
                         "indices[5]=10 out of range [0, 8)"));
  Tensor neg = Tensor::of(DType::kI32, {1}, {-1});
  Tensor out1(DType::kF32, {1, 2});
  EXPECT_TRUE(fails_with(run(OpKind::Embedding, {&w, &neg}, {&out1}), StatusCode::kInvalidInput, "embedding", "-1"));
  Tensor fidx(DType::kF32, {1});
  EXPECT_TRUE(fails_with(run(OpKind::Embedding, {&w, &fidx}, {&out1}), StatusCode::kUnsupported, "embedding"));
}

TEST(GatherKernel, AlongEveryDim) {
  std::mt19937 rng(2);
  const Shape xs = {3, 4, 5};
  for (DType dt : {DType::kF32, DType::kI64, DType::kBF16, DType::kBool}) {
    Tensor x = iota(dt, xs);
    for (int dim = 0; dim < 3; ++dim) {
      for (const Shape& is : std::vector<Shape>{{3, 4, 5}, {2, 3, 4}, {1, 1, 7}, {0, 2, 2}}) {
        Shape s = is;
        for (int d = 0; d < 3; ++d) {
          if (d != dim) s[d] = std::min(s[d], xs[d]);
        }
        Tensor idx = random_indices(DType::kI64, s, 0, xs[dim], rng);
        std::vector<double> want;
        for (std::int64_t i = 0; i < idx.numel(); ++i) {
          auto p = unravel(i, s);
          p[dim] = static_cast<std::int64_t>(idx.at(i));
          want.push_back(x.at(ravel(p, xs)));
        }
        Tensor out(dt, s);
        ASSERT_TRUE(run(OpKind::Gather, {&x, &idx}, {&out}, AttrList().i(dim)).ok()) << dim << shape_string(s);
        EXPECT_TRUE(all_equal(out, want)) << dim << shape_string(s);
      }
    }
  }
  Tensor x = iota(DType::kF32, {2, 3});
  Tensor idx = Tensor::of(DType::kI32, {2, 1}, {0, 3});
  Tensor out(DType::kF32, {2, 1});
  EXPECT_TRUE(fails_with(run(OpKind::Gather, {&x, &idx}, {&out}, AttrList().i(1)), StatusCode::kInvalidInput, "gather",
                         "indices[1]=3"));
  Tensor big(DType::kI64, {3, 1});
  Tensor out3(DType::kF32, {3, 1});
  EXPECT_TRUE(fails_with(run(OpKind::Gather, {&x, &big}, {&out3}, AttrList().i(1)), StatusCode::kInvalidBundle, "gather",
                         "indices.shape[0]=3 > x.shape[0]=2"));
}

TEST(IndexSelectKernel, SelectsSlicesAlongDim) {
  std::mt19937 rng(3);
  const Shape xs = {4, 5, 3};
  for (DType dt : {DType::kF32, DType::kI8, DType::kF64}) {
    Tensor x = iota(dt, xs);
    for (int dim = 0; dim < 3; ++dim) {
      for (std::int64_t n : {0, 1, 6}) {
        Tensor idx = random_indices(DType::kI32, {n}, 0, xs[dim], rng);
        Shape os = xs;
        os[dim] = n;
        std::vector<double> want;
        for (std::int64_t i = 0; i < numel_of(os); ++i) {
          auto p = unravel(i, os);
          p[dim] = static_cast<std::int64_t>(idx.at(p[dim]));
          want.push_back(x.at(ravel(p, xs)));
        }
        Tensor out(dt, os);
        ASSERT_TRUE(run(OpKind::IndexSelect, {&x, &idx}, {&out}, AttrList().i(dim)).ok());
        EXPECT_TRUE(all_equal(out, want));
      }
    }
  }
  Tensor x = iota(DType::kF32, {3});
  Tensor idx = Tensor::of(DType::kI64, {2}, {2, -1});
  Tensor out(DType::kF32, {2});
  EXPECT_TRUE(fails_with(run(OpKind::IndexSelect, {&x, &idx}, {&out}, AttrList().i(0)), StatusCode::kInvalidInput,
                         "index_select", "indices[1]=-1"));
  Tensor s = iota(DType::kF32, {});
  Tensor three = Tensor::of(DType::kI64, {3}, {0, 0, 0});
  Tensor so(DType::kF32, {});
  EXPECT_TRUE(fails_with(run(OpKind::IndexSelect, {&s, &three}, {&so}, AttrList().i(0)), StatusCode::kInvalidBundle,
                         "index_select"));
}

TEST(IndexKernel, AdvancedIndexingOnAdjacentDims) {
  std::mt19937 rng(4);
  const Shape xs = {3, 4, 5, 2};
  Tensor x = iota(DType::kF32, xs);
  struct Case {
    std::int64_t first;
    std::vector<Shape> index_shapes;
  };
  const std::vector<Case> cases = {{0, {{6}}},          {1, {{2, 3}}},        {1, {{3, 1}, {1, 4}}}, {2, {{}}},
                                   {0, {{2}, {2}, {2}}}, {3, {{5}}},           {1, {{0}}},            {2, {{2, 2}, {2}}}};
  for (const Case& c : cases) {
    std::vector<Tensor> idx;
    Shape b;
    for (std::size_t k = 0; k < c.index_shapes.size(); ++k) {
      const std::int64_t size = xs[c.first + k];
      idx.push_back(random_indices(k % 2 ? DType::kI32 : DType::kI64, c.index_shapes[k], -size, size, rng));
      b = broadcast_shapes(b, c.index_shapes[k]);
    }
    const auto k = static_cast<std::int64_t>(idx.size());
    Shape os(xs.begin(), xs.begin() + c.first);
    os.insert(os.end(), b.begin(), b.end());
    os.insert(os.end(), xs.begin() + c.first + k, xs.end());
    std::vector<double> want;
    for (std::int64_t i = 0; i < numel_of(os); ++i) {
      const auto oi = unravel(i, os);
      std::vector<std::int64_t> bi(oi.begin() + c.first, oi.begin() + c.first + static_cast<std::int64_t>(b.size()));
      std::vector<std::int64_t> xi(oi.begin(), oi.begin() + c.first);
      for (std::int64_t t = 0; t < k; ++t) {
        std::int64_t v = static_cast<std::int64_t>(idx[t].at(broadcast_offset(bi, c.index_shapes[t])));
        if (v < 0) v += xs[c.first + t];
        xi.push_back(v);
      }
      xi.insert(xi.end(), oi.begin() + c.first + static_cast<std::int64_t>(b.size()), oi.end());
      want.push_back(x.at(ravel(xi, xs)));
    }
    std::vector<const Tensor*> ins{&x};
    std::vector<std::int64_t> dims;
    for (std::int64_t t = 0; t < k; ++t) {
      ins.push_back(&idx[t]);
      dims.push_back(c.first + t);
    }
    Tensor out(DType::kF32, os);
    ASSERT_TRUE(run(OpKind::Index, ins, {&out}, AttrList().ints(dims)).ok()) << shape_string(os);
    EXPECT_TRUE(all_equal(out, want)) << "first " << c.first << " out " << shape_string(os);
  }
  Tensor i0 = Tensor::of(DType::kI64, {1}, {3});
  Tensor out(DType::kF32, {3, 2, 5, 2});
  EXPECT_TRUE(fails_with(run(OpKind::Index, {&x, &i0}, {&out}, AttrList().ints({1})), StatusCode::kInvalidBundle, "index",
                         "out.shape=[3, 2, 5, 2] but expected [3, 1, 5, 2]"));
  Tensor o2(DType::kF32, {1, 4, 5, 2});
  Tensor i3 = Tensor::of(DType::kI64, {1}, {3});
  EXPECT_TRUE(fails_with(run(OpKind::Index, {&x, &i3}, {&o2}, AttrList().ints({0})), StatusCode::kInvalidInput, "index",
                         "out of range for dim 0 of size 3"));
  Tensor mask(DType::kBool, {3});
  EXPECT_TRUE(fails_with(run(OpKind::Index, {&x, &mask}, {&o2}, AttrList().ints({0})), StatusCode::kUnsupported, "index",
                         "boolean mask"));
  Tensor j(DType::kI64, {1});
  Tensor o3(DType::kF32, {1, 4, 2});
  EXPECT_TRUE(fails_with(run(OpKind::Index, {&x, &j, &j}, {&o3}, AttrList().ints({0, 2})), StatusCode::kUnsupported,
                         "index", "non-adjacent"));
}

// Gathers large enough to be split over the threads: the core ATen IR's bilinear
// upsampling (x[:, :, y[:, None], x_idx] of a [1, 21, 28, 28] map to 224 x 224), every
// element size, negative indices, and whole rows (index_select of 64-float rows, an
// embedding of 4,096 tokens) on 1, 2 and 3 threads; exact against an index-by-index
// reference, nothing written past the output.
TEST(IndexKernel, LargeGathersOnEveryThreadCount) {
  std::mt19937 rng(31);
  for (DType dt : {DType::kF32, DType::kI64, DType::kF16, DType::kI8}) {
    const Shape xs = {1, 21, 28, 28};
    Tensor x(dt, xs);
    for (std::int64_t i = 0; i < x.numel(); ++i) x.set(i, static_cast<double>(i % (dt == DType::kI8 ? 127 : 2039)));
    Tensor yi = random_indices(DType::kI64, {224, 1}, -28, 28, rng);
    Tensor xi = random_indices(DType::kI64, {224}, -28, 28, rng);
    std::vector<double> want;
    for (std::int64_t c = 0; c < 21; ++c) {
      for (std::int64_t r = 0; r < 224; ++r) {
        for (std::int64_t q = 0; q < 224; ++q) {
          std::int64_t a = static_cast<std::int64_t>(yi.at(r)), b = static_cast<std::int64_t>(xi.at(q));
          if (a < 0) a += 28;
          if (b < 0) b += 28;
          want.push_back(x.at((c * 28 + a) * 28 + b));
        }
      }
    }
    for (int threads : {1, 2, 3}) {
      PoolContext ctx(threads);
      Tensor out(dt, {1, 21, 224, 224});
      std::vector<TensorView> outs{out.view()};
      ASSERT_TRUE(run_views(OpKind::Index, {x.view(), yi.view(), xi.view()}, outs, AttrList().ints({2, 3}), &ctx).ok());
      EXPECT_TRUE(all_equal(out, want)) << dtype_name(dt) << ", " << threads << " threads";
      EXPECT_TRUE(out.canary_intact());
    }
  }
  Tensor table = iota(DType::kF32, {1000, 64});
  Tensor ids = random_indices(DType::kI64, {4096}, 0, 1000, rng);
  std::vector<double> want;
  for (std::int64_t i = 0; i < 4096; ++i) {
    for (std::int64_t j = 0; j < 64; ++j) want.push_back(table.at(static_cast<std::int64_t>(ids.at(i)) * 64 + j));
  }
  for (int threads : {1, 2, 3}) {
    PoolContext ctx(threads);
    for (OpKind op : {OpKind::Embedding, OpKind::IndexSelect}) {
      Tensor out(DType::kF32, {4096, 64});
      std::vector<TensorView> outs{out.view()};
      const Status st = op == OpKind::Embedding ? run_views(op, {table.view(), ids.view()}, outs, AttrList(), &ctx)
                                                : run_views(op, {table.view(), ids.view()}, outs, AttrList().i(0), &ctx);
      ASSERT_TRUE(st.ok()) << st.message();
      EXPECT_TRUE(all_equal(out, want)) << threads << " threads";
      EXPECT_TRUE(out.canary_intact());
    }
  }
}

// gather_lerp2 (the executor's fused bilinear interpolation, executor/program.cpp): out =
// top + (bottom - top) * w2, top = g0 + (g1 - g0) * w0, bottom = g2 + (g3 - g2) * w1, each g
// a gather on x's last two dims. The separable path (upsampling: one row index per output
// row, one column index per output column) and the general one (taken when the gathers do
// not share their row index tensors) against a double reference, on 1 and 2 threads; then
// every check a program that lied about its shapes would reach.
struct LerpCase {
  Tensor x, ya, yc, xa, xc, w0, w2;
  std::int64_t oh, ow;
};

LerpCase lerp_case(std::mt19937& rng) {
  LerpCase c;
  const std::int64_t h = 6, w = 7;
  c.oh = 11, c.ow = 13;
  c.x = Tensor::random(DType::kF32, {2, 3, h, w}, rng);
  c.ya = Tensor(DType::kI64, {c.oh, 1});
  c.yc = Tensor(DType::kI64, {c.oh, 1});
  c.w2 = Tensor(DType::kF32, {c.oh, 1});
  for (std::int64_t by = 0; by < c.oh; ++by) {
    const double src = (static_cast<double>(by) + 0.5) * h / static_cast<double>(c.oh) - 0.5;
    const auto lo = static_cast<std::int64_t>(std::max(0.0, std::floor(src)));
    c.ya.set(by, static_cast<double>(lo));
    c.yc.set(by, static_cast<double>(std::min(lo + 1, h - 1)));
    c.w2.set(by, std::max(0.0, src - static_cast<double>(lo)));
  }
  c.xa = Tensor(DType::kI64, {1, c.ow});
  c.xc = Tensor(DType::kI64, {1, c.ow});
  c.w0 = Tensor(DType::kF32, {1, c.ow});
  for (std::int64_t bx = 0; bx < c.ow; ++bx) {
    const double src = (static_cast<double>(bx) + 0.5) * w / static_cast<double>(c.ow) - 0.5;
    const auto lo = static_cast<std::int64_t>(std::max(0.0, std::floor(src)));
    c.xa.set(bx, static_cast<double>(lo));
    c.xc.set(bx, static_cast<double>(std::min(lo + 1, w - 1)));
    c.w0.set(bx, std::max(0.0, src - static_cast<double>(lo)));
  }
  return c;
}

std::vector<double> lerp_reference(const LerpCase& c) {
  const Shape& xs = c.x.shape();
  std::vector<double> out;
  for (std::int64_t p = 0; p < xs[0] * xs[1]; ++p) {
    for (std::int64_t by = 0; by < c.oh; ++by) {
      for (std::int64_t bx = 0; bx < c.ow; ++bx) {
        auto g = [&](const Tensor& r, const Tensor& col) {
          return c.x.at((p * xs[2] + static_cast<std::int64_t>(r.at(by))) * xs[3] + static_cast<std::int64_t>(col.at(bx)));
        };
        const double top = g(c.ya, c.xa) + (g(c.ya, c.xc) - g(c.ya, c.xa)) * c.w0.at(bx);
        const double bottom = g(c.yc, c.xa) + (g(c.yc, c.xc) - g(c.yc, c.xa)) * c.w0.at(bx);
        out.push_back(top + (bottom - top) * c.w2.at(by));
      }
    }
  }
  return out;
}

TEST(GatherLerp2Kernel, SeparableAndGeneralPathsMatchTheReference) {
  std::mt19937 rng(2024);
  const LerpCase c = lerp_case(rng);
  const std::vector<double> want = lerp_reference(c);
  const std::int64_t dims[] = {2, 3};
  const Tensor ya_copy = Tensor::of(DType::kI64, c.ya.shape(), c.ya.values());
  for (bool separable : {true, false}) {
    for (int threads : {1, 2}) {
      SCOPED_TRACE(std::string(separable ? "separable" : "general") + ", threads " + std::to_string(threads));
      const TensorView g0[] = {c.ya.view(), c.xa.view()}, g1[] = {(separable ? c.ya : ya_copy).view(), c.xc.view()};
      const TensorView g2[] = {c.yc.view(), c.xa.view()}, g3[] = {c.yc.view(), c.xc.view()};
      Tensor out(DType::kF32, {2, 3, c.oh, c.ow});
      TensorView ov = out.view();
      PoolContext ctx(threads);
      const Status st = kernels::gather_lerp2(ctx, c.x.view(), dims, {g0, g1, g2, g3}, {c.w0.view(), c.w0.view(), c.w2.view()}, ov);
      ASSERT_TRUE(st.ok()) << st.message();
      EXPECT_TRUE(all_close(out, want, 1e-5, 1e-6));
      EXPECT_TRUE(out.canary_intact());
    }
  }
}

TEST(GatherLerp2Kernel, ShapesThatDisagreeAtRunTimeAreTheBundlesError) {
  std::mt19937 rng(7);
  const LerpCase c = lerp_case(rng);
  const std::int64_t dims[] = {2, 3};
  const TensorView g0[] = {c.ya.view(), c.xa.view()}, g1[] = {c.ya.view(), c.xc.view()};
  const TensorView g2[] = {c.yc.view(), c.xa.view()};
  Tensor out(DType::kF32, {2, 3, c.oh, c.ow});
  TensorView ov = out.view();
  TestContext ctx;
  // A gather whose column index has one column fewer.
  const Tensor narrow(DType::kI64, {1, c.ow - 1});
  const TensorView g3_narrow[] = {c.yc.view(), narrow.view()};
  EXPECT_TRUE(fails_with(kernels::gather_lerp2(ctx, c.x.view(), dims, {g0, g1, g2, g3_narrow}, {c.w0.view(), c.w0.view(), c.w2.view()}, ov),
                         StatusCode::kInvalidBundle, "index", "have index shapes that differ at run time"));
  const TensorView g3[] = {c.yc.view(), c.xc.view()};
  // An output of another shape.
  Tensor small(DType::kF32, {2, 3, c.oh, c.ow - 1});
  TensorView sv = small.view();
  EXPECT_TRUE(fails_with(kernels::gather_lerp2(ctx, c.x.view(), dims, {g0, g1, g2, g3}, {c.w0.view(), c.w0.view(), c.w2.view()}, sv),
                         StatusCode::kInvalidBundle, "index", "out.shape=[2, 3, 11, 12] does not match the gathers of x.shape=[2, 3, 6, 7]"));
  // A weight of a higher rank than the output, and one that does not broadcast.
  const Tensor deep(DType::kF32, {1, 1, 1, 1, c.ow});
  EXPECT_TRUE(fails_with(kernels::gather_lerp2(ctx, c.x.view(), dims, {g0, g1, g2, g3}, {deep.view(), c.w0.view(), c.w2.view()}, ov),
                         StatusCode::kInvalidBundle, "index", "a fused bilinear interpolation's weight of rank 5 for out.shape=[2, 3, 11, 13]"));
  const Tensor odd(DType::kF32, {1, 5});
  EXPECT_TRUE(fails_with(kernels::gather_lerp2(ctx, c.x.view(), dims, {g0, g1, g2, g3}, {c.w0.view(), odd.view(), c.w2.view()}, ov),
                         StatusCode::kInvalidBundle, "index", "weight.shape=[1, 5] does not broadcast over the index dims"));
  const Tensor per_plane(DType::kF32, {3, 1, 1});  // sized along x's channels, before the indexed dims
  EXPECT_TRUE(fails_with(kernels::gather_lerp2(ctx, c.x.view(), dims, {g0, g1, g2, g3}, {c.w0.view(), c.w0.view(), per_plane.view()}, ov),
                         StatusCode::kInvalidBundle, "index", "does not broadcast over the index dims"));
  // An index out of range: the index kernel's own check.
  Tensor far = Tensor::of(DType::kI64, c.xc.shape(), c.xc.values());
  far.set(4, 7.0);
  const TensorView g3_far[] = {c.yc.view(), far.view()};
  const Status st = kernels::gather_lerp2(ctx, c.x.view(), dims, {g0, g1, g2, g3_far}, {c.w0.view(), c.w0.view(), c.w2.view()}, ov);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("7"), std::string::npos) << st.message();
  // Not f32, or dims that are not x's last ones: an inconsistent program.
  const Tensor xi(DType::kI32, {2, 3, 6, 7});
  EXPECT_EQ(kernels::gather_lerp2(ctx, xi.view(), dims, {g0, g1, g2, g3}, {c.w0.view(), c.w0.view(), c.w2.view()}, ov).code(),
            StatusCode::kInternal);
  const std::int64_t early[] = {1, 2};
  EXPECT_EQ(kernels::gather_lerp2(ctx, c.x.view(), early, {g0, g1, g2, g3}, {c.w0.view(), c.w0.view(), c.w2.view()}, ov).code(),
            StatusCode::kInternal);
}

TEST(NonzeroKernel, AllocatesIndicesOfNonzeroElements) {
  for (DType dt : {DType::kF32, DType::kBool, DType::kI64, DType::kF16}) {
    Tensor x = Tensor::of(dt, {2, 3}, {0, 1, 0, -0.0, 2, 3});
    std::vector<TensorView> out{TensorView{.dtype = DType::kI64}};
    TestContext ctx;
    ASSERT_TRUE(run_views(OpKind::Nonzero, {x.view()}, out, {}, &ctx).ok());
    ASSERT_EQ(ctx.allocated.count(0), 1u);
    const Tensor& y = ctx.allocated[0];
    EXPECT_EQ(y.shape(), (Shape{3, 2}));
    EXPECT_TRUE(all_equal(y, {0, 1, 1, 1, 1, 2}));
    EXPECT_EQ(out[0].data, y.data());
  }
  Tensor z(DType::kF32, {4});
  std::vector<TensorView> out{TensorView{.dtype = DType::kI64}};
  TestContext ctx;
  ASSERT_TRUE(run_views(OpKind::Nonzero, {z.view()}, out, {}, &ctx).ok());
  EXPECT_EQ(ctx.allocated[0].shape(), (Shape{0, 1}));
  Tensor s = Tensor::of(DType::kI32, {}, {5});
  ASSERT_TRUE(run_views(OpKind::Nonzero, {s.view()}, out, {}, &ctx).ok());
  EXPECT_EQ(ctx.allocated[0].shape(), (Shape{1, 0}));
}

TEST(MaskedSelectKernel, SelectsInRowMajorOrderWithBroadcast) {
  std::mt19937 rng(6);
  for (const auto& [xs, ms] : std::vector<std::pair<Shape, Shape>>{{{3, 4}, {3, 4}}, {{3, 4}, {4}}, {{3, 1}, {1, 5}},
                                                                  {{2, 3}, {}}, {{0, 3}, {3}}}) {
    Tensor x = iota(DType::kF32, xs);
    Tensor m = Tensor::random(DType::kBool, ms, rng, 0, 2);
    const Shape full = broadcast_shapes(xs, ms);
    std::vector<double> want;
    for (std::int64_t i = 0; i < numel_of(full); ++i) {
      const auto idx = unravel(i, full);
      if (m.at(broadcast_offset(idx, ms)) != 0) want.push_back(x.at(broadcast_offset(idx, xs)));
    }
    std::vector<TensorView> out{TensorView{.dtype = DType::kF32}};
    TestContext ctx;
    ASSERT_TRUE(run_views(OpKind::MaskedSelect, {x.view(), m.view()}, out, {}, &ctx).ok());
    EXPECT_EQ(ctx.allocated[0].shape(), (Shape{static_cast<std::int64_t>(want.size())}));
    EXPECT_TRUE(all_equal(ctx.allocated[0], want));
  }
  Tensor x(DType::kF32, {2, 3}), m(DType::kBool, {4});
  std::vector<TensorView> out{TensorView{}};
  EXPECT_TRUE(fails_with(run_views(OpKind::MaskedSelect, {x.view(), m.view()}, out, {}), StatusCode::kInvalidBundle,
                         "masked_select", "do not broadcast"));
}

TEST(ItemKernel, CopiesTheSingleElement) {
  for (DType dt : {DType::kF32, DType::kI64, DType::kBool, DType::kF16}) {
    Tensor x = Tensor::of(dt, {1, 1}, {1});
    Tensor out(dt, {});
    ASSERT_TRUE(run(OpKind::Item, {&x}, {&out}).ok());
    EXPECT_EQ(out.at(0), 1);
  }
  Tensor x(DType::kF32, {2}), out(DType::kF32, {});
  EXPECT_TRUE(fails_with(run(OpKind::Item, {&x}, {&out}), StatusCode::kInvalidBundle, "item", "exactly one"));
  Tensor one(DType::kF32, {1}), wrong(DType::kI32, {});
  EXPECT_TRUE(fails_with(run(OpKind::Item, {&one}, {&wrong}), StatusCode::kInvalidBundle, "item", "out.dtype"));
  std::vector<TensorView> unallocated{TensorView{.dtype = DType::kF32}};
  TestContext ctx;
  ASSERT_TRUE(run_views(OpKind::Item, {one.view()}, unallocated, {}, &ctx).ok());
  EXPECT_EQ(ctx.allocated[0].shape(), Shape{});
}

}  // namespace
}  // namespace kiln::cpu::testing

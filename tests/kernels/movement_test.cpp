// Data movement (reshape, permute, slice, cat, split, expand, pad, flip) and creation
// (full, arange, tril, triu) against index-by-index references, over several dtypes.
#include <algorithm>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "kernel_testutil.h"

namespace kiln::cpu::testing {
namespace {

const DType kDtypes[] = {DType::kF32, DType::kI64, DType::kF16, DType::kBool, DType::kI8, DType::kF64};

// x filled with 0, 1, 2, ... (mod 100 for narrow dtypes; 0/1 for bool).
Tensor iota(DType dt, const Shape& shape) {
  Tensor t(dt, shape);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.set(i, dt == DType::kBool ? (i % 3 == 0) : static_cast<double>(i % 100));
  return t;
}

TEST(ReshapeKernel, CopiesBytesAndChecksNumel) {
  for (DType dt : kDtypes) {
    Tensor x = iota(dt, {2, 3, 4});
    Tensor out(dt, {4, 6});
    ASSERT_TRUE(run(OpKind::Reshape, {&x}, {&out}, AttrList().exprs({4, 6})).ok());
    EXPECT_TRUE(all_equal(out, x.values()));
  }
  Tensor x(DType::kF32, {2, 3}), bad(DType::kF32, {7});
  EXPECT_TRUE(fails_with(run(OpKind::Reshape, {&x}, {&bad}, AttrList().exprs({7})), StatusCode::kInvalidBundle, "reshape",
                         "6 elements"));
}

TEST(PermuteKernel, AllPermutationsOfRank4) {
  const Shape shape = {2, 3, 4, 5};
  for (DType dt : kDtypes) {
    Tensor x = iota(dt, shape);
    std::vector<std::int64_t> perm = {0, 1, 2, 3};
    do {
      Shape os;
      for (auto p : perm) os.push_back(shape[p]);
      std::vector<double> want(static_cast<std::size_t>(x.numel()));
      for (std::int64_t i = 0; i < x.numel(); ++i) {
        const auto oi = unravel(i, os);
        std::vector<std::int64_t> xi(4);
        for (int d = 0; d < 4; ++d) xi[perm[d]] = oi[d];
        want[i] = x.at(ravel(xi, shape));
      }
      Tensor out(dt, os);
      ASSERT_TRUE(run(OpKind::Permute, {&x}, {&out}, AttrList().ints(perm)).ok());
      EXPECT_TRUE(all_equal(out, want)) << shape_string(perm);
    } while (std::next_permutation(perm.begin(), perm.end()));
  }
  Tensor x(DType::kF32, {2, 3}), out(DType::kF32, {3, 2});
  EXPECT_TRUE(fails_with(run(OpKind::Permute, {&x}, {&out}, AttrList().ints({0, 0})), StatusCode::kInvalidBundle, "permute",
                         "repeated"));
  EXPECT_TRUE(fails_with(run(OpKind::Permute, {&x}, {&out}, AttrList().ints({0, 1})), StatusCode::kInvalidBundle, "permute",
                         "out.shape"));
}

// Permutes large enough for the 8 x 8 register transposes and for the split over threads
// (256 KiB and more): ConvNeXt's NCHW <-> NHWC, Swin's window partition, odd sizes with
// partial tiles, every element size, on 1, 2 and 3 threads; exact against an index-by-index
// reference, nothing written past the output.
TEST(PermuteKernel, LargeTransposesAndWindowsOnEveryThreadCount) {
  struct Case {
    Shape shape;
    std::vector<std::int64_t> perm;
  };
  const Case cases[] = {
      {{1, 96, 56, 56}, {0, 2, 3, 1}}, {{1, 56, 56, 96}, {0, 3, 1, 2}},   {{2, 8, 7, 8, 7, 24}, {0, 1, 3, 2, 4, 5}},
      {{3, 37, 29, 41}, {0, 3, 1, 2}}, {{3, 37, 29, 41}, {2, 0, 3, 1}},   {{1, 300, 1, 513}, {0, 3, 2, 1}},
      {{64, 1031}, {1, 0}},            {{5, 12, 197, 64}, {0, 2, 1, 3}},
  };
  for (DType dt : {DType::kF32, DType::kI64, DType::kF16, DType::kI8}) {
    const std::int64_t modulus = dt == DType::kF16 ? 2039 : dt == DType::kI8 ? 127 : std::int64_t{1} << 40;
    for (const Case& c : cases) {
      Tensor x(dt, c.shape);
      for (std::int64_t i = 0; i < x.numel(); ++i) x.set(i, static_cast<double>(i % modulus));
      Shape os;
      for (auto p : c.perm) os.push_back(c.shape[static_cast<std::size_t>(p)]);
      std::vector<double> want(static_cast<std::size_t>(x.numel()));
      for (std::int64_t i = 0; i < x.numel(); ++i) {
        const auto oi = unravel(i, os);
        std::vector<std::int64_t> xi(c.perm.size());
        for (std::size_t d = 0; d < c.perm.size(); ++d) xi[static_cast<std::size_t>(c.perm[d])] = oi[d];
        want[static_cast<std::size_t>(i)] = x.at(ravel(xi, c.shape));
      }
      for (int threads : {1, 2, 3}) {
        Tensor out(dt, os);
        std::vector<TensorView> outs{out.view()};
        PoolContext ctx(threads);
        ASSERT_TRUE(run_views(OpKind::Permute, {x.view()}, outs, AttrList().ints(c.perm), &ctx).ok());
        EXPECT_TRUE(all_equal(out, want)) << shape_string(c.shape) << " perm " << shape_string(c.perm) << ", " << threads
                                          << " threads";
        EXPECT_TRUE(out.canary_intact());
      }
    }
  }
}

// Slices, flips and expands of 256 KiB and more are split over the threads like permutes:
// strided, negative and zero source strides, on 1, 2 and 3 threads.
TEST(MovementKernels, LargeSlicesFlipsAndExpandsOnEveryThreadCount) {
  const Shape shape = {6, 61, 47, 33};
  Tensor x(DType::kF32, shape);
  for (std::int64_t i = 0; i < x.numel(); ++i) x.set(i, static_cast<double>(i));
  for (int threads : {1, 2, 3}) {
    PoolContext ctx(threads);
    {  // x[:, 3:59:2]
      Shape os = shape;
      os[1] = 28;
      std::vector<double> want;
      for (std::int64_t i = 0; i < x.numel() / shape[1] * 28; ++i) {
        auto oi = unravel(i, os);
        oi[1] = 3 + 2 * oi[1];
        want.push_back(x.at(ravel(oi, shape)));
      }
      Tensor out(DType::kF32, os);
      std::vector<TensorView> outs{out.view()};
      ASSERT_TRUE(run_views(OpKind::Slice, {x.view()}, outs, AttrList().i(1).i(3).i(59).i(2), &ctx).ok());
      EXPECT_TRUE(all_equal(out, want)) << "slice, " << threads << " threads";
      EXPECT_TRUE(out.canary_intact());
    }
    {  // flip dims 0 and 3
      std::vector<double> want;
      for (std::int64_t i = 0; i < x.numel(); ++i) {
        auto oi = unravel(i, shape);
        oi[0] = shape[0] - 1 - oi[0];
        oi[3] = shape[3] - 1 - oi[3];
        want.push_back(x.at(ravel(oi, shape)));
      }
      Tensor out(DType::kF32, shape);
      std::vector<TensorView> outs{out.view()};
      ASSERT_TRUE(run_views(OpKind::Flip, {x.view()}, outs, AttrList().ints({0, 3}), &ctx).ok());
      EXPECT_TRUE(all_equal(out, want)) << "flip, " << threads << " threads";
      EXPECT_TRUE(out.canary_intact());
    }
    {  // [61, 1, 33] -> [9, 61, 47, 33]
      const Shape small = {61, 1, 33}, os = {9, 61, 47, 33};
      Tensor y(DType::kF32, small);
      for (std::int64_t i = 0; i < y.numel(); ++i) y.set(i, static_cast<double>(i));
      std::vector<double> want;
      for (std::int64_t i = 0; i < 9 * 61 * 47 * 33; ++i) {
        const auto oi = unravel(i, os);
        want.push_back(y.at((oi[1] * 33) + oi[3]));
      }
      Tensor out(DType::kF32, os);
      std::vector<TensorView> outs{out.view()};
      ASSERT_TRUE(run_views(OpKind::Expand, {y.view()}, outs, AttrList().exprs(os), &ctx).ok());
      EXPECT_TRUE(all_equal(out, want)) << "expand, " << threads << " threads";
      EXPECT_TRUE(out.canary_intact());
    }
  }
}

TEST(SliceKernel, PythonStyleClampingAndSteps) {
  const Shape shape = {4, 7, 3};
  const std::int64_t kBig = std::numeric_limits<std::int64_t>::max(), kSmall = std::numeric_limits<std::int64_t>::min();
  const std::vector<std::tuple<std::int64_t, std::int64_t, std::int64_t>> ranges = {
      {0, 7, 1}, {1, 5, 2}, {-3, kBig, 1}, {kSmall, -2, 3}, {5, 2, 1}, {-100, 100, 4}, {7, 9, 1}, {2, 3, kBig}};
  for (DType dt : kDtypes) {
    Tensor x = iota(dt, shape);
    for (int dim = 0; dim < 3; ++dim) {
      for (const auto& [start, end, step] : ranges) {
        const std::int64_t size = shape[dim];
        // Reference clamping written independently from the kernel's.
        const auto clampi = [size](std::int64_t v) {
          if (v < 0) v = std::max<std::int64_t>(v, -size) + size;
          return std::min(v, size);
        };
        std::vector<std::int64_t> picked;
        for (std::int64_t i = clampi(start); i < clampi(end); i += std::min<std::int64_t>(step, size + 1)) picked.push_back(i);
        Shape os = shape;
        os[dim] = static_cast<std::int64_t>(picked.size());
        std::vector<double> want;
        for (std::int64_t i = 0; i < numel_of(os); ++i) {
          auto idx = unravel(i, os);
          idx[dim] = picked[idx[dim]];
          want.push_back(x.at(ravel(idx, shape)));
        }
        Tensor out(dt, os);
        ASSERT_TRUE(run(OpKind::Slice, {&x}, {&out}, AttrList().i(dim).i(start).i(end).i(step)).ok())
            << dim << " " << start << ":" << end << ":" << step;
        EXPECT_TRUE(all_equal(out, want));
      }
    }
  }
  Tensor x(DType::kF32, {4}), out(DType::kF32, {2});
  EXPECT_TRUE(fails_with(run(OpKind::Slice, {&x}, {&out}, AttrList().i(0).i(0).i(4).i(0)), StatusCode::kInvalidBundle,
                         "slice", "step=0"));
  EXPECT_TRUE(fails_with(run(OpKind::Slice, {&x}, {&out}, AttrList().i(0).i(0).i(3).i(1)), StatusCode::kInvalidBundle,
                         "slice", "out.shape=[2] but expected [3]"));
  EXPECT_TRUE(fails_with(run(OpKind::Slice, {&x}, {&out}, AttrList().i(1).i(0).i(3).i(1)), StatusCode::kInvalidBundle,
                         "slice", "dim=1"));
}

// Large concatenations run on every thread, each copying its share of the rows after the
// concatenated dim: every element lands where the one-thread copy puts it, for 4-D (NCHW)
// and 5-D (NCHW8c) shapes, rows that do not divide among the threads, more threads than
// rows, and every dim.
TEST(CatSplitKernels, SharedCopyMatchesOneThread) {
  const std::vector<Shape> bases = {{2, 0, 37, 29}, {1, 0, 13, 31, 8}, {3, 0, 2, 300}};
  int shared = 0;
  for (const Shape& base : bases) {
    for (int dim = 0; dim < static_cast<int>(base.size()); ++dim) {
      for (int threads : {2, 3}) {
        std::vector<Tensor> ins;
        Shape full = base;
        full[1] = 24;
        full[dim] = 0;
        for (std::int64_t size : {12, 8, 20}) {
          Shape ps = base;
          ps[1] = 24;
          ps[dim] = size;
          full[dim] += size;
          Tensor t = iota(DType::kF32, ps);
          for (std::int64_t i = 0; i < t.numel(); ++i) t.as<float>()[i] += static_cast<float>(size) * 1e6f;
          ins.push_back(std::move(t));
        }
        std::vector<const Tensor*> ptrs;
        std::vector<TensorView> views;
        for (const Tensor& t : ins) ptrs.push_back(&t), views.push_back(t.view());
        Tensor want(DType::kF32, full), got(DType::kF32, full);
        ASSERT_TRUE(run(OpKind::Cat, ptrs, {&want}, AttrList().i(dim)).ok());
        PoolContext ctx(threads);
        std::vector<TensorView> outs{got.view()};
        ASSERT_TRUE(run_views(OpKind::Cat, views, outs, AttrList().i(dim), &ctx).ok());
        shared += want.numel() * 4 >= (256 << 10);  // large enough to be shared out
        ASSERT_EQ(std::memcmp(want.data(), got.data(), static_cast<std::size_t>(want.numel()) * 4), 0)
            << "shape " << shape_string(full) << " dim " << dim << " threads " << threads;
      }
    }
  }
  EXPECT_GE(shared, 16);
}

TEST(CatSplitKernels, RoundTripAlongEveryDim) {
  for (DType dt : kDtypes) {
    for (int dim = 0; dim < 3; ++dim) {
      const std::vector<std::int64_t> sizes = {2, 0, 3, 1};
      Shape full = {3, 4, 5};
      full[dim] = 6;
      Tensor x = iota(dt, full);
      std::vector<Tensor> parts;
      std::vector<Tensor*> outs;
      for (std::int64_t s : sizes) {
        Shape ps = full;
        ps[dim] = s;
        parts.emplace_back(dt, ps);
      }
      for (Tensor& p : parts) outs.push_back(&p);
      ASSERT_TRUE(run(OpKind::Split, {&x}, outs, AttrList().i(dim).exprs(sizes)).ok());
      std::int64_t offset = 0;
      for (std::size_t k = 0; k < parts.size(); ++k) {
        std::vector<double> want;
        for (std::int64_t i = 0; i < parts[k].numel(); ++i) {
          auto idx = unravel(i, parts[k].shape());
          idx[dim] += offset;
          want.push_back(x.at(ravel(idx, full)));
        }
        EXPECT_TRUE(all_equal(parts[k], want)) << "part " << k;
        offset += sizes[k];
      }
      Tensor back(dt, full);
      std::vector<const Tensor*> ins;
      for (const Tensor& p : parts) ins.push_back(&p);
      Tensor legacy_empty(dt, {0});
      ins.insert(ins.begin() + 1, &legacy_empty);  // PyTorch skips 1-D empty tensors
      ASSERT_TRUE(run(OpKind::Cat, ins, {&back}, AttrList().i(dim)).ok());
      EXPECT_TRUE(all_equal(back, x.values()));
    }
  }
  Tensor a(DType::kF32, {2, 3}), b(DType::kF32, {2, 4}), out(DType::kF32, {4, 3});
  EXPECT_TRUE(fails_with(run(OpKind::Cat, {&a, &b}, {&out}, AttrList().i(0)), StatusCode::kInvalidBundle, "cat",
                         "inputs[1].shape=[2, 4]"));
  Tensor c(DType::kF32, {2, 3});
  Tensor wrong(DType::kF32, {5, 3});
  EXPECT_TRUE(fails_with(run(OpKind::Cat, {&a, &c}, {&wrong}, AttrList().i(0)), StatusCode::kInvalidBundle, "cat", "sum to 4"));
  Tensor p1(DType::kF32, {1, 3}), p2(DType::kF32, {2, 3});
  EXPECT_TRUE(fails_with(run(OpKind::Split, {&a}, {&p1, &p2}, AttrList().i(0).exprs({1, 2})), StatusCode::kInvalidBundle,
                         "split"));
  EXPECT_TRUE(fails_with(run(OpKind::Split, {&a}, {&p1}, AttrList().i(0).exprs({1, 1})), StatusCode::kInvalidBundle,
                         "split", "2 entries for 1 outputs"));
}

TEST(ExpandKernel, BroadcastsToOutputShape) {
  for (DType dt : kDtypes) {
    for (const auto& [xs, os] : std::vector<std::pair<Shape, Shape>>{
             {{3, 1}, {3, 4}}, {{4}, {2, 3, 4}}, {{}, {2, 2}}, {{1, 1, 5}, {2, 3, 5}}, {{2, 1, 3}, {2, 0, 3}}, {{3}, {3}},
             // nearest upsampling's expands: each element repeated, rows repeated
             {{2, 3, 5, 1}, {2, 3, 5, 2}}, {{2, 3, 1, 5}, {2, 3, 2, 5}}, {{4, 1, 1}, {4, 3, 7}}}) {
      Tensor x = iota(dt, xs);
      std::vector<double> want;
      for (std::int64_t i = 0; i < numel_of(os); ++i) want.push_back(x.at(broadcast_offset(unravel(i, os), xs)));
      Tensor out(dt, os);
      ASSERT_TRUE(run(OpKind::Expand, {&x}, {&out}, AttrList().exprs(os)).ok());
      EXPECT_TRUE(all_equal(out, want)) << shape_string(xs) << " -> " << shape_string(os);
    }
  }
  Tensor x(DType::kF32, {3, 2}), out(DType::kF32, {3, 4});
  EXPECT_TRUE(fails_with(run(OpKind::Expand, {&x}, {&out}, AttrList().exprs({3, 4})), StatusCode::kInvalidBundle, "expand",
                         "does not broadcast"));
}

TEST(PadKernel, ConstantPadWithNegativeCrops) {
  const std::vector<std::vector<std::int64_t>> pad_sets = {
      {1, 2}, {0, 0, 2, 1}, {-1, 2}, {1, -2, -1, 1}, {2, 2, 1, 1, 1, 0}, {}, {-3, -1}};
  const Shape shape = {2, 3, 4};
  for (DType dt : {DType::kF32, DType::kI64, DType::kBF16, DType::kU8}) {
    Tensor x = iota(dt, shape);
    for (const auto& pads : pad_sets) {
      Shape os = shape;
      std::vector<std::int64_t> left(3, 0);
      for (std::size_t i = 0; i < pads.size() / 2; ++i) {
        const std::size_t d = 2 - i;
        left[d] = pads[2 * i];
        os[d] += pads[2 * i] + pads[2 * i + 1];
      }
      std::vector<double> want;
      for (std::int64_t i = 0; i < numel_of(os); ++i) {
        auto idx = unravel(i, os);
        bool inside = true;
        for (int d = 0; d < 3; ++d) {
          idx[d] -= left[d];
          inside &= idx[d] >= 0 && idx[d] < shape[d];
        }
        want.push_back(inside ? x.at(ravel(idx, shape)) : 7);
      }
      Tensor out(dt, os);
      ASSERT_TRUE(run(OpKind::Pad, {&x}, {&out}, AttrList().ints(pads).f(7)).ok()) << shape_string(pads);
      EXPECT_TRUE(all_equal(out, want)) << shape_string(pads);
    }
  }
  // Padding size-1 dims interleaves x with the fill (a transposed convolution's input
  // dilation): the surviving box is strided in the output.
  {
    Tensor x = iota(DType::kF32, {2, 3, 1, 4, 1});
    Tensor out(DType::kF32, {2, 3, 2, 4, 2});
    ASSERT_TRUE(run(OpKind::Pad, {&x}, {&out}, AttrList().ints({0, 1, 0, 0, 0, 1}).f(-1)).ok());
    std::vector<double> want;
    for (std::int64_t i = 0; i < out.numel(); ++i) {
      const auto idx = unravel(i, {2, 3, 2, 4, 2});
      want.push_back(idx[2] == 0 && idx[4] == 0 ? x.at(ravel({idx[0], idx[1], 0, idx[3], 0}, {2, 3, 1, 4, 1})) : -1);
    }
    EXPECT_TRUE(all_equal(out, want));
  }
  Tensor x(DType::kF32, {2, 3}), out(DType::kF32, {2, 3});
  EXPECT_TRUE(fails_with(run(OpKind::Pad, {&x}, {&out}, AttrList().ints({1}).f(0)), StatusCode::kInvalidBundle, "pad",
                         "even"));
  EXPECT_TRUE(fails_with(run(OpKind::Pad, {&x}, {&out}, AttrList().ints({-2, -2}).f(0)), StatusCode::kInvalidBundle, "pad",
                         "negative size"));
}

TEST(FlipKernel, AnySubsetOfDims) {
  const Shape shape = {3, 4, 5};
  for (DType dt : kDtypes) {
    Tensor x = iota(dt, shape);
    for (const auto& dims : std::vector<std::vector<std::int64_t>>{{}, {0}, {2}, {0, 2}, {1, 0, 2}}) {
      std::vector<double> want;
      for (std::int64_t i = 0; i < x.numel(); ++i) {
        auto idx = unravel(i, shape);
        for (auto d : dims) idx[d] = shape[d] - 1 - idx[d];
        want.push_back(x.at(ravel(idx, shape)));
      }
      Tensor out(dt, shape);
      ASSERT_TRUE(run(OpKind::Flip, {&x}, {&out}, AttrList().ints(dims)).ok());
      EXPECT_TRUE(all_equal(out, want)) << shape_string(dims);
    }
  }
  Tensor x(DType::kF32, {2}), out(DType::kF32, {2});
  EXPECT_TRUE(fails_with(run(OpKind::Flip, {&x}, {&out}, AttrList().ints({1})), StatusCode::kInvalidBundle, "flip"));
}

TEST(CreationKernels, FullAndArange) {
  for (DType dt : kDtypes) {
    Tensor out(dt, {2, 3});
    ASSERT_TRUE(run(OpKind::Full, {}, {&out}, AttrList().exprs({2, 3}).f(2.5).dtype(dt)).ok());
    const double v = Tensor::of(dt, {}, {2.5}).at(0);
    EXPECT_TRUE(all_equal(out, std::vector<double>(6, v)));
  }
  const std::vector<std::tuple<std::int64_t, std::int64_t, std::int64_t>> ranges = {
      {0, 10, 1}, {3, 10, 3}, {10, 0, -3}, {5, 5, 1}, {5, 0, 1}, {-4, 4, 5}};
  for (DType dt : {DType::kI64, DType::kF32, DType::kI32, DType::kF16}) {
    for (const auto& [start, end, step] : ranges) {
      std::vector<double> want;
      for (std::int64_t v = start; step > 0 ? v < end : v > end; v += step) want.push_back(static_cast<double>(v));
      Tensor out(dt, {static_cast<std::int64_t>(want.size())});
      ASSERT_TRUE(run(OpKind::Arange, {}, {&out}, AttrList().i(start).i(end).i(step).dtype(dt)).ok());
      EXPECT_TRUE(all_equal(out, want)) << start << ":" << end << ":" << step;
    }
  }
  Tensor out(DType::kI64, {4});
  EXPECT_TRUE(fails_with(run(OpKind::Arange, {}, {&out}, AttrList().i(0).i(10).i(1).dtype(DType::kI64)),
                         StatusCode::kInvalidBundle, "arange", "give 10 elements"));
  EXPECT_TRUE(fails_with(run(OpKind::Arange, {}, {&out}, AttrList().i(0).i(10).i(0).dtype(DType::kI64)),
                         StatusCode::kInvalidBundle, "arange", "step"));
  EXPECT_TRUE(fails_with(run(OpKind::Arange, {}, {&out}, AttrList().i(std::numeric_limits<std::int64_t>::min())
                                                             .i(std::numeric_limits<std::int64_t>::max()).i(1)
                                                             .dtype(DType::kI64)),
                         StatusCode::kInvalidBundle, "arange"));
  Tensor f(DType::kF32, {2, 3});
  EXPECT_TRUE(fails_with(run(OpKind::Full, {}, {&f}, AttrList().exprs({3, 2}).f(1).dtype(DType::kF32)),
                         StatusCode::kInvalidBundle, "full", "out.shape"));
  EXPECT_TRUE(fails_with(run(OpKind::Full, {}, {&f}, AttrList().exprs({2, 3}).f(1).dtype(DType::kI64)),
                         StatusCode::kInvalidBundle, "full", "out.dtype"));
}

TEST(TriangleKernels, TrilTriuWithDiagonals) {
  for (DType dt : kDtypes) {
    for (const Shape& shape : std::vector<Shape>{{4, 4}, {3, 5}, {2, 5, 3}, {2, 0, 3}}) {
      Tensor x = iota(dt, shape);
      for (std::int64_t diag : {-2, -1, 0, 1, 3, 100, -100}) {
        for (bool lower : {true, false}) {
          std::vector<double> want;
          for (std::int64_t i = 0; i < x.numel(); ++i) {
            const auto idx = unravel(i, shape);
            const std::int64_t r = idx[idx.size() - 2], c = idx.back();
            const bool keep = lower ? c - r <= diag : c - r >= diag;
            want.push_back(keep ? x.at(i) : 0);
          }
          Tensor out(dt, shape);
          ASSERT_TRUE(run(lower ? OpKind::Tril : OpKind::Triu, {&x}, {&out}, AttrList().i(diag)).ok());
          EXPECT_TRUE(all_equal(out, want)) << shape_string(shape) << " diag " << diag << " lower " << lower;
        }
      }
    }
  }
  Tensor v(DType::kF32, {3});
  EXPECT_TRUE(fails_with(run(OpKind::Tril, {&v}, {&v}, AttrList().i(0)), StatusCode::kInvalidBundle, "tril", "2-D"));
}

}  // namespace
}  // namespace kiln::cpu::testing

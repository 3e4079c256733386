// pad_border (reflect / replicate / circular) and index_put against naive references.
#include <random>
#include <vector>

#include "kernel_testutil.h"

namespace kiln::cpu::testing {
namespace {

std::int64_t border_source(const std::string& mode, std::int64_t i, std::int64_t l, std::int64_t n) {
  std::int64_t j = i - l;
  if (mode == "reflect") {
    while (j < 0 || j >= n) j = j < 0 ? -j : 2 * (n - 1) - j;
    return j;
  }
  if (mode == "replicate") return std::min(std::max<std::int64_t>(j, 0), n - 1);
  return ((j % n) + n) % n;
}

TEST(PadBorderKernel, MatchesReferenceForEveryModeDtypeAndRank) {
  std::mt19937 rng(11);
  for (const std::string mode : {"reflect", "replicate", "circular"}) {
    for (DType dt : {DType::kF32, DType::kF64, DType::kI64, DType::kI8, DType::kF16, DType::kBool}) {
      for (int rank = 1; rank <= 4; ++rank) {
        const Shape s = random_shape(rng, rank, 2, 5);
        const int padded = std::min(rank, 3);
        std::vector<std::int64_t> pads;
        Shape os = s;
        for (int i = 0; i < padded; ++i) {
          const std::int64_t n = s[static_cast<std::size_t>(rank - 1 - i)];
          const std::int64_t max_pad = mode == "reflect" ? n - 1 : mode == "circular" ? n : 4;
          const std::int64_t l = std::uniform_int_distribution<std::int64_t>(0, max_pad)(rng);
          const std::int64_t r = std::uniform_int_distribution<std::int64_t>(0, max_pad)(rng);
          pads.push_back(l);
          pads.push_back(r);
          os[static_cast<std::size_t>(rank - 1 - i)] += l + r;
        }
        Tensor x = Tensor::random(dt, s, rng, -50, 50), out(dt, os);
        ASSERT_TRUE(run(OpKind::PadBorder, {&x}, {&out}, AttrList().ints(pads).s(mode)).ok()) << mode;
        std::vector<double> want;
        for (std::int64_t f = 0; f < numel_of(os); ++f) {
          auto idx = unravel(f, os);
          for (int i = 0; i < padded; ++i) {
            const auto d = static_cast<std::size_t>(rank - 1 - i);
            idx[d] = border_source(mode, idx[d], pads[2 * static_cast<std::size_t>(i)], s[d]);
          }
          want.push_back(x.at(ravel(idx, s)));
        }
        EXPECT_TRUE(all_equal(out, want)) << mode << " " << dtype_name(dt) << " " << shape_string(s);
        EXPECT_TRUE(out.canary_intact());
      }
    }
  }
}

TEST(PadBorderKernel, PyTorchExamples) {
  // F.pad(torch.arange(4.), (2, 3), mode=...) as printed by PyTorch.
  Tensor x = Tensor::of(DType::kF32, {1, 4}, {0, 1, 2, 3}), out(DType::kF32, {1, 9});
  ASSERT_TRUE(run(OpKind::PadBorder, {&x}, {&out}, AttrList().ints({2, 3}).s("reflect")).ok());
  EXPECT_TRUE(all_equal(out, {2, 1, 0, 1, 2, 3, 2, 1, 0}));
  ASSERT_TRUE(run(OpKind::PadBorder, {&x}, {&out}, AttrList().ints({2, 3}).s("replicate")).ok());
  EXPECT_TRUE(all_equal(out, {0, 0, 0, 1, 2, 3, 3, 3, 3}));
  ASSERT_TRUE(run(OpKind::PadBorder, {&x}, {&out}, AttrList().ints({2, 3}).s("circular")).ok());
  EXPECT_TRUE(all_equal(out, {2, 3, 0, 1, 2, 3, 0, 1, 2}));
}

TEST(PadBorderKernel, LargeOutputsSplitOverThePool) {
  std::mt19937 rng(2);
  Tensor x = Tensor::random(DType::kF32, {4, 64, 64}, rng), out(DType::kF32, {4, 70, 66});
  ASSERT_TRUE(run(OpKind::PadBorder, {&x}, {&out}, AttrList().ints({1, 1, 3, 3}).s("reflect")).ok());
  for (std::int64_t f = 0; f < out.numel(); f += 101) {
    auto idx = unravel(f, {4, 70, 66});
    idx[2] = border_source("reflect", idx[2], 1, 64);
    idx[1] = border_source("reflect", idx[1], 3, 64);
    ASSERT_EQ(out.at(f), x.at(ravel(idx, {4, 64, 64}))) << f;
  }
}

TEST(PadBorderKernel, RejectsBadPadsModesAndShapes) {
  Tensor x = Tensor::of(DType::kF32, {1, 3}, {1, 2, 3}), out(DType::kF32, {1, 6});
  EXPECT_TRUE(fails_with(run(OpKind::PadBorder, {&x}, {&out}, AttrList().ints({3, 0}).s("reflect")),
                         StatusCode::kInvalidBundle, "pad_border", "reflect pads (3, 0) on dim 1 must be < its size 3"));
  EXPECT_TRUE(fails_with(run(OpKind::PadBorder, {&x}, {&out}, AttrList().ints({4, -1}).s("replicate")),
                         StatusCode::kInvalidBundle, "pad_border", "pads (4, -1)"));
  EXPECT_TRUE(fails_with(run(OpKind::PadBorder, {&x}, {&out}, AttrList().ints({2, 1}).s("symmetric")),
                         StatusCode::kInvalidBundle, "pad_border", "mode='symmetric'"));
  EXPECT_TRUE(fails_with(run(OpKind::PadBorder, {&x}, {&out}, AttrList().ints({4, 0}).s("circular")),
                         StatusCode::kInvalidBundle, "pad_border", "circular pads (4, 0)"));
  Tensor wrong(DType::kF32, {1, 5});
  EXPECT_TRUE(fails_with(run(OpKind::PadBorder, {&x}, {&wrong}, AttrList().ints({2, 1}).s("replicate")),
                         StatusCode::kInvalidBundle, "pad_border"));
  Tensor empty(DType::kF32, {1, 0}), eout(DType::kF32, {1, 2});
  EXPECT_TRUE(fails_with(run(OpKind::PadBorder, {&empty}, {&eout}, AttrList().ints({1, 1}).s("replicate")),
                         StatusCode::kInvalidBundle, "pad_border", "empty dim 1"));
}

// index_put reference: out = x; for every position of the indexed shape, the x position.
TEST(IndexPutKernel, MatchesReferenceWithBroadcastIndicesAndValues) {
  std::mt19937 rng(9);
  for (DType dt : {DType::kF32, DType::kI64, DType::kI32, DType::kF64}) {
    for (bool accumulate : {false, true}) {
      const Shape xs{3, 5, 4, 2};
      Tensor x = Tensor::random(dt, xs, rng, -9, 9);
      // indices on dims 1, 2: [2, 1] and [3] broadcast to [2, 3]; negative ones count from the end.
      Tensor i0 = Tensor::of(DType::kI64, {2, 1}, {4, -2});
      Tensor i1 = Tensor::of(DType::kI32, {3}, {0, 3, -1});
      const Shape ishape{3, 2, 3, 2};
      Tensor values = Tensor::random(dt, {2, 1, 2}, rng, -9, 9);  // right-aligned: broadcasts over dims 0 and 2
      Tensor out(dt, xs);
      ASSERT_TRUE(run(OpKind::IndexPut, {&x, &values, &i0, &i1}, {&out}, AttrList().ints({1, 2}).b(accumulate)).ok());
      std::vector<double> want = x.values();
      for (std::int64_t f = 0; f < numel_of(ishape); ++f) {
        const auto ii = unravel(f, ishape);
        std::int64_t a = static_cast<std::int64_t>(i0.at(ii[1]));
        std::int64_t b = static_cast<std::int64_t>(i1.at(ii[2]));
        if (a < 0) a += 5;
        if (b < 0) b += 4;
        const std::int64_t pos = ravel({ii[0], a, b, ii[3]}, xs);
        const double v = values.at(broadcast_offset(ii, {2, 1, 2}));
        want[static_cast<std::size_t>(pos)] = accumulate ? want[static_cast<std::size_t>(pos)] + v : v;
      }
      // f32 sums round once per add; the reference adds in double.
      EXPECT_TRUE(dt == DType::kF32 ? all_close(out, want) : all_equal(out, want)) << dtype_name(dt) << " accumulate " << accumulate;
      EXPECT_TRUE(out.canary_intact());
    }
  }
}

TEST(IndexPutKernel, RepeatedIndicesAccumulateOrLastWriteWins) {
  Tensor x = Tensor::of(DType::kF32, {5}, {0, 0, 0, 0, 0});
  Tensor idx = Tensor::of(DType::kI64, {4}, {1, 3, 1, 1});
  Tensor v = Tensor::of(DType::kF32, {4}, {1, 2, 3, 4});
  Tensor out(DType::kF32, {5});
  ASSERT_TRUE(run(OpKind::IndexPut, {&x, &v, &idx}, {&out}, AttrList().ints({0}).b(true)).ok());
  EXPECT_TRUE(all_equal(out, {0, 8, 0, 2, 0}));
  ASSERT_TRUE(run(OpKind::IndexPut, {&x, &v, &idx}, {&out}, AttrList().ints({0}).b(false)).ok());
  EXPECT_TRUE(all_equal(out, {0, 4, 0, 2, 0}));
  Tensor bx = Tensor::of(DType::kBool, {3}, {0, 0, 1}), bv = Tensor::of(DType::kBool, {}, {1}), bout(DType::kBool, {3});
  Tensor bi = Tensor::of(DType::kI64, {1}, {0});
  ASSERT_TRUE(run(OpKind::IndexPut, {&bx, &bv, &bi}, {&bout}, AttrList().ints({0}).b(true)).ok());
  EXPECT_TRUE(all_equal(bout, {1, 0, 1}));
}

TEST(IndexPutKernel, RejectsOutOfRangeIndicesBadValuesAndDims) {
  Tensor x = Tensor::of(DType::kF32, {3, 2}, {0, 0, 0, 0, 0, 0}), out(DType::kF32, {3, 2});
  Tensor idx = Tensor::of(DType::kI64, {2}, {0, 3});
  Tensor v = Tensor::of(DType::kF32, {}, {1});
  EXPECT_TRUE(fails_with(run(OpKind::IndexPut, {&x, &v, &idx}, {&out}, AttrList().ints({0}).b(false)),
                         StatusCode::kInvalidInput, "index_put", "out of range for dim 0 of size 3"));
  Tensor ok_idx = Tensor::of(DType::kI64, {2}, {0, 1});
  Tensor bad_v = Tensor::of(DType::kF32, {3}, {1, 2, 3});
  EXPECT_TRUE(fails_with(run(OpKind::IndexPut, {&x, &bad_v, &ok_idx}, {&out}, AttrList().ints({0}).b(false)),
                         StatusCode::kInvalidBundle, "index_put", "does not broadcast to the indexed shape [2, 2]"));
  Tensor v64 = Tensor::of(DType::kF64, {}, {1});
  EXPECT_TRUE(fails_with(run(OpKind::IndexPut, {&x, &v64, &ok_idx}, {&out}, AttrList().ints({0}).b(false)),
                         StatusCode::kInvalidBundle, "index_put", "values"));
  EXPECT_TRUE(fails_with(run(OpKind::IndexPut, {&x, &v, &ok_idx, &ok_idx}, {&out}, AttrList().ints({0, 0}).b(false)),
                         StatusCode::kUnsupported, "index_put", "non-adjacent"));
  Tensor mask = Tensor::of(DType::kBool, {3}, {1, 0, 1});
  EXPECT_TRUE(fails_with(run(OpKind::IndexPut, {&x, &v, &mask}, {&out}, AttrList().ints({0}).b(false)),
                         StatusCode::kUnsupported, "index_put", "boolean mask"));
}

}  // namespace
}  // namespace kiln::cpu::testing

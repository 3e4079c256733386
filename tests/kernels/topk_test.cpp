// topk against a reference that fully sorts each slice (stable, NaN largest).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "kernel_testutil.h"

namespace kiln::cpu::testing {
namespace {

// Reference: for each slice along `dim`, indices stably sorted by value.
void reference(const Tensor& x, std::int64_t k, std::int64_t dim, bool largest, std::vector<double>& values,
               std::vector<double>& indices) {
  const Shape& s = x.shape();
  Shape os = s;
  os[static_cast<std::size_t>(dim)] = k;
  values.assign(static_cast<std::size_t>(numel_of(os)), 0);
  indices.assign(values.size(), 0);
  for (std::int64_t flat = 0; flat < numel_of(os); ++flat) {
    std::vector<std::int64_t> oi = unravel(flat, os);
    const std::int64_t r = oi[static_cast<std::size_t>(dim)];
    std::vector<std::pair<double, std::int64_t>> slice;
    for (std::int64_t j = 0; j < s[static_cast<std::size_t>(dim)]; ++j) {
      std::vector<std::int64_t> ii = oi;
      ii[static_cast<std::size_t>(dim)] = j;
      slice.emplace_back(x.at(ravel(ii, s)), j);
    }
    std::stable_sort(slice.begin(), slice.end(), [&](const auto& a, const auto& b) {
      const bool na = std::isnan(a.first), nb = std::isnan(b.first);
      if (na || nb) return largest ? (na && !nb) : (!na && nb);
      return largest ? a.first > b.first : a.first < b.first;
    });
    values[static_cast<std::size_t>(flat)] = slice[static_cast<std::size_t>(r)].first;
    indices[static_cast<std::size_t>(flat)] = static_cast<double>(slice[static_cast<std::size_t>(r)].second);
  }
}

TEST(TopkKernel, MatchesReferenceOverDimsDtypesAndDirections) {
  std::mt19937 rng(7);
  for (DType dt : {DType::kF32, DType::kF64, DType::kI64, DType::kI32}) {
    for (int rank = 1; rank <= 3; ++rank) {
      const Shape s = random_shape(rng, rank, 1, 6);
      for (std::int64_t dim = 0; dim < rank; ++dim) {
        for (bool largest : {true, false}) {
          const std::int64_t n = s[static_cast<std::size_t>(dim)];
          const std::int64_t k = std::uniform_int_distribution<std::int64_t>(0, n)(rng);
          Tensor x = Tensor::random(dt, s, rng, -4, 4);  // integers: many ties
          Shape os = s;
          os[static_cast<std::size_t>(dim)] = k;
          Tensor values(dt, os), indices(DType::kI64, os);
          ASSERT_TRUE(run(OpKind::Topk, {&x}, {&values, &indices}, AttrList().i(k).i(dim).b(largest).b(true)).ok());
          std::vector<double> want_v, want_i;
          reference(x, k, dim, largest, want_v, want_i);
          EXPECT_TRUE(all_equal(values, want_v)) << shape_string(s) << " dim " << dim << " k " << k;
          EXPECT_TRUE(all_equal(indices, want_i)) << shape_string(s) << " dim " << dim << " k " << k;
          EXPECT_TRUE(values.canary_intact() && indices.canary_intact());
        }
      }
    }
  }
}

TEST(TopkKernel, NaNIsLargestAndTiesKeepLowerIndex) {
  const double nan = std::nan("");
  Tensor x = Tensor::of(DType::kF32, {6}, {1, nan, 3, 3, -1, nan});
  Tensor v(DType::kF32, {3}), i(DType::kI64, {3});
  ASSERT_TRUE(run(OpKind::Topk, {&x}, {&v, &i}, AttrList().i(3).i(0).b(true).b(true)).ok());
  EXPECT_TRUE(std::isnan(v.at(0)) && std::isnan(v.at(1)));
  EXPECT_EQ(v.at(2), 3);
  EXPECT_TRUE(all_equal(i, {1, 5, 2}));
  ASSERT_TRUE(run(OpKind::Topk, {&x}, {&v, &i}, AttrList().i(3).i(0).b(false).b(true)).ok());
  EXPECT_TRUE(all_equal(v, {-1, 1, 3}));
  EXPECT_TRUE(all_equal(i, {4, 0, 2}));
}

TEST(TopkKernel, RejectsKLargerThanTheDimAndWrongOutputs) {
  Tensor x = Tensor::of(DType::kF32, {2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor v(DType::kF32, {2, 4}), i(DType::kI64, {2, 4});
  EXPECT_TRUE(fails_with(run(OpKind::Topk, {&x}, {&v, &i}, AttrList().i(4).i(1).b(true).b(true)), StatusCode::kInvalidInput, "topk", "k=4"));
  Tensor v2(DType::kF32, {2, 2}), bad_i(DType::kF32, {2, 2});
  EXPECT_FALSE(run(OpKind::Topk, {&x}, {&v2, &bad_i}, AttrList().i(2).i(1).b(true).b(true)).ok());
}

}  // namespace
}  // namespace kiln::cpu::testing

// Reductions, argmax/argmin and cumsum against reference loops over every subset of dims.
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "kernel_testutil.h"

namespace kiln::cpu::testing {
namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();

struct Reduction {
  Shape out_shape;
  std::vector<std::vector<double>> groups;  // the input values reduced into each output
};

// Groups x's values by output element for `dims` (empty = all) and keepdim.
Reduction group(const Tensor& x, const std::vector<std::int64_t>& dims, bool keepdim) {
  const Shape& shape = x.shape();
  std::vector<bool> reduced(shape.size(), dims.empty());
  for (std::int64_t d : dims) reduced[static_cast<std::size_t>(d)] = true;
  Reduction r;
  Shape kept;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (!reduced[d]) {
      r.out_shape.push_back(shape[d]);
      kept.push_back(shape[d]);
    } else if (keepdim) {
      r.out_shape.push_back(1);
    }
  }
  r.groups.resize(static_cast<std::size_t>(numel_of(kept)));
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    const auto idx = unravel(i, shape);
    std::vector<std::int64_t> k;
    for (std::size_t d = 0; d < shape.size(); ++d) {
      if (!reduced[d]) k.push_back(idx[d]);
    }
    r.groups[static_cast<std::size_t>(ravel(k, kept))].push_back(x.at(i));
  }
  return r;
}

std::vector<std::vector<std::int64_t>> dim_subsets(int rank) {
  std::vector<std::vector<std::int64_t>> subsets;
  for (int mask = 0; mask < (1 << rank); ++mask) {
    std::vector<std::int64_t> dims;
    for (int d = 0; d < rank; ++d) {
      if (mask & (1 << d)) dims.push_back(d);
    }
    subsets.push_back(dims);
  }
  return subsets;
}

const std::vector<Shape>& shapes() {
  static const std::vector<Shape> kShapes = {{}, {5}, {3, 4}, {2, 3, 4}, {2, 0, 3}, {4, 1, 5}, {2, 3, 2, 3}, {1, 300}};
  return kShapes;
}

using GroupRef = std::function<double(const std::vector<double>&)>;

void check_reduce(OpKind op, DType in_dtype, DType out_dtype, const GroupRef& ref, double lo, double hi,
                  double rtol = 1e-5) {
  std::mt19937 rng(static_cast<unsigned>(static_cast<int>(op)));
  for (const Shape& shape : shapes()) {
    Tensor x = Tensor::random(in_dtype, shape, rng, lo, hi);
    for (const auto& dims : dim_subsets(static_cast<int>(shape.size()))) {
      for (bool keepdim : {false, true}) {
        const Reduction r = group(x, dims, keepdim);
        if (op == OpKind::Amax || op == OpKind::Amin) {
          bool empty = false;
          for (const auto& g : r.groups) empty |= g.empty();
          if (empty) continue;  // an error; tested separately
        }
        std::vector<double> want;
        for (const auto& g : r.groups) want.push_back(Tensor::of(out_dtype, {}, {ref(g)}).at(0));
        Tensor out(out_dtype, r.out_shape);
        const Status s = run(op, {&x}, {&out}, AttrList().ints(dims).b(keepdim));
        ASSERT_TRUE(s.ok()) << op_name(op) << " " << shape_string(shape) << ": " << s.message();
        EXPECT_TRUE(all_close(out, want, rtol, 1e-5))
            << op_name(op) << " " << dtype_name(in_dtype) << " " << shape_string(shape) << " dims "
            << shape_string(dims) << " keepdim " << keepdim;
      }
    }
  }
}

double sum_of(const std::vector<double>& g) {
  double s = 0;
  for (double v : g) s += v;
  return s;
}

TEST(ReduceKernels, SumProdMeanOverEveryDimSubset) {
  for (DType dt : {DType::kF32, DType::kF64}) {
    check_reduce(OpKind::Sum, dt, dt, sum_of, -2, 2);
    check_reduce(OpKind::Mean, dt, dt, [](const auto& g) { return sum_of(g) / static_cast<double>(g.size()); }, -2, 2);
    check_reduce(OpKind::Prod, dt, dt, [](const auto& g) {
      double p = 1;
      for (double v : g) p *= v;
      return p;
    }, 0.9, 1.1);
  }
  check_reduce(OpKind::Sum, DType::kI32, DType::kI64, sum_of, -100, 100, 0);
  check_reduce(OpKind::Sum, DType::kI64, DType::kI64, sum_of, -100, 100, 0);
  check_reduce(OpKind::Sum, DType::kBool, DType::kI64, sum_of, 0, 2, 0);
  check_reduce(OpKind::Sum, DType::kF16, DType::kF16, sum_of, -2, 2, 1e-2);
  check_reduce(OpKind::Prod, DType::kI64, DType::kI64, [](const auto& g) {
    double p = 1;
    for (double v : g) p *= v;
    return p;
  }, -2, 3, 0);
}

TEST(ReduceKernels, AmaxAminAnyAll) {
  const GroupRef mx = [](const auto& g) { return *std::max_element(g.begin(), g.end()); };
  const GroupRef mn = [](const auto& g) { return *std::min_element(g.begin(), g.end()); };
  for (DType dt : {DType::kF32, DType::kF64, DType::kI32, DType::kI64, DType::kU8, DType::kBF16}) {
    check_reduce(OpKind::Amax, dt, dt, mx, 0, 100, 0);
    check_reduce(OpKind::Amin, dt, dt, mn, 0, 100, 0);
  }
  const GroupRef any = [](const auto& g) { return double(std::any_of(g.begin(), g.end(), [](double v) { return v != 0; })); };
  const GroupRef all = [](const auto& g) { return double(std::all_of(g.begin(), g.end(), [](double v) { return v != 0; })); };
  for (DType dt : {DType::kBool, DType::kF32, DType::kI64}) {
    check_reduce(OpKind::Any, dt, DType::kBool, any, 0, 1.3, 0);
    check_reduce(OpKind::All, dt, DType::kBool, all, 0, 1.3, 0);
  }
}

TEST(ReduceKernels, AmaxPropagatesNaNAndHandlesInfinities) {
  Tensor x = Tensor::of(DType::kF32, {2, 3}, {1, kNaN, 3, -std::numeric_limits<double>::infinity(),
                                              -std::numeric_limits<double>::infinity(),
                                              -std::numeric_limits<double>::infinity()});
  Tensor out(DType::kF32, {2});
  ASSERT_TRUE(run(OpKind::Amax, {&x}, {&out}, AttrList().ints({1}).b(false)).ok());
  EXPECT_TRUE(std::isnan(out.at(0)));
  EXPECT_EQ(out.at(1), -std::numeric_limits<double>::infinity());
}

TEST(ReduceKernels, VarianceWithCorrection) {
  for (double correction : {0.0, 1.0, 2.0}) {
    const GroupRef var = [correction](const std::vector<double>& g) {
      const double mean = sum_of(g) / static_cast<double>(g.size());
      double m2 = 0;
      for (double v : g) m2 += (v - mean) * (v - mean);
      return m2 / std::max(0.0, static_cast<double>(g.size()) - correction);
    };
    std::mt19937 rng(77);
    for (const Shape& shape : shapes()) {
      for (DType dt : {DType::kF32, DType::kF64}) {
        Tensor x = Tensor::random(dt, shape, rng, 5, 9);
        for (const auto& dims : dim_subsets(static_cast<int>(shape.size()))) {
          const Reduction r = group(x, dims, true);
          std::vector<double> want;
          for (const auto& g : r.groups) want.push_back(var(g));
          Tensor out(dt, r.out_shape);
          ASSERT_TRUE(run(OpKind::Var, {&x}, {&out}, AttrList().ints(dims).f(correction).b(true)).ok());
          EXPECT_TRUE(all_close(out, want, 1e-5, 1e-6)) << shape_string(shape) << " dims " << shape_string(dims);
        }
      }
    }
  }
}

TEST(ReduceKernels, EmptyReductionsGiveIdentities) {
  Tensor x(DType::kF32, {3, 0});
  Tensor out(DType::kF32, {3});
  ASSERT_TRUE(run(OpKind::Sum, {&x}, {&out}, AttrList().ints({1}).b(false)).ok());
  EXPECT_TRUE(all_equal(out, {0, 0, 0}));
  ASSERT_TRUE(run(OpKind::Prod, {&x}, {&out}, AttrList().ints({1}).b(false)).ok());
  EXPECT_TRUE(all_equal(out, {1, 1, 1}));
  ASSERT_TRUE(run(OpKind::Mean, {&x}, {&out}, AttrList().ints({1}).b(false)).ok());
  EXPECT_TRUE(all_equal(out, {kNaN, kNaN, kNaN}));
  Tensor b(DType::kBool, {3});
  ASSERT_TRUE(run(OpKind::All, {&x}, {&b}, AttrList().ints({1}).b(false)).ok());
  EXPECT_TRUE(all_equal(b, {1, 1, 1}));
  EXPECT_TRUE(fails_with(run(OpKind::Amax, {&x}, {&out}, AttrList().ints({1}).b(false)), StatusCode::kInvalidInput,
                         "amax", "zero elements"));
}

TEST(ReduceKernels, LongRowsStayAccurate) {
  std::mt19937 rng(5);
  Tensor x = Tensor::random(DType::kF32, {3, 100003}, rng, 0.5, 1.5);
  Tensor out(DType::kF32, {3});
  ASSERT_TRUE(run(OpKind::Sum, {&x}, {&out}, AttrList().ints({1}).b(false)).ok());
  for (int r = 0; r < 3; ++r) {
    double s = 0;
    for (int i = 0; i < 100003; ++i) s += x.at(r * 100003 + i);
    EXPECT_NEAR(out.at(r), s, std::fabs(s) * 1e-6);
  }
}

TEST(ReduceKernels, RejectsBadDimsAndShapes) {
  Tensor x(DType::kF32, {2, 3}), out(DType::kF32, {2});
  EXPECT_TRUE(fails_with(run(OpKind::Sum, {&x}, {&out}, AttrList().ints({2}).b(false)), StatusCode::kInvalidBundle,
                         "sum", "dims[0]=2 outside [0, 2)"));
  EXPECT_TRUE(fails_with(run(OpKind::Sum, {&x}, {&out}, AttrList().ints({-1}).b(false)), StatusCode::kInvalidBundle,
                         "sum"));
  EXPECT_TRUE(fails_with(run(OpKind::Sum, {&x}, {&out}, AttrList().ints({1, 1}).b(false)), StatusCode::kInvalidBundle,
                         "sum", "repeated"));
  EXPECT_TRUE(fails_with(run(OpKind::Sum, {&x}, {&out}, AttrList().ints({0}).b(false)), StatusCode::kInvalidBundle,
                         "sum", "out.shape=[2] but expected [3]"));
  Tensor out_i(DType::kI64, {2});
  EXPECT_TRUE(fails_with(run(OpKind::Mean, {&x}, {&out_i}, AttrList().ints({1}).b(false)), StatusCode::kUnsupported,
                         "mean"));
  EXPECT_TRUE(fails_with(run(OpKind::Sum, {&x}, {&out}, AttrList().ints({1}).b(false).dtype(DType::kF64)),
                         StatusCode::kInvalidBundle, "sum", "out.dtype=f32"));
  Tensor xi(DType::kI64, {2, 3}), oi(DType::kI64, {2});
  EXPECT_TRUE(fails_with(run(OpKind::Var, {&xi}, {&oi}, AttrList().ints({1}).f(1).b(false)), StatusCode::kUnsupported,
                         "var"));
}

// ---------------------------------------------------------------------------------------
// argmax / argmin

TEST(ArgKernels, FirstOccurrenceAlongEveryDim) {
  std::mt19937 rng(21);
  for (DType dt : {DType::kF32, DType::kI64, DType::kI32, DType::kF64, DType::kF16, DType::kBool}) {
    for (const Shape& shape : std::vector<Shape>{{7}, {3, 4}, {2, 3, 5}, {4, 1, 3}, {2, 300}}) {
      Tensor x = Tensor::random(dt, shape, rng, 0, 4);  // few distinct values: many ties
      for (int dim = 0; dim < static_cast<int>(shape.size()); ++dim) {
        for (bool keepdim : {false, true}) {
          for (bool is_max : {true, false}) {
            const Reduction r = group(x, {dim}, keepdim);
            std::vector<double> want;
            for (const auto& g : r.groups) {
              const auto it = is_max ? std::max_element(g.begin(), g.end()) : std::min_element(g.begin(), g.end());
              want.push_back(static_cast<double>(it - g.begin()));
            }
            Tensor out(DType::kI64, r.out_shape);
            const OpKind op = is_max ? OpKind::Argmax : OpKind::Argmin;
            ASSERT_TRUE(run(op, {&x}, {&out}, AttrList().i(dim).b(keepdim)).ok());
            EXPECT_TRUE(all_equal(out, want)) << op_name(op) << " " << dtype_name(dt) << shape_string(shape) << " dim "
                                              << dim;
          }
        }
      }
    }
  }
}

TEST(ArgKernels, NaNWinsAndErrors) {
  Tensor x = Tensor::of(DType::kF32, {5}, {1, 7, kNaN, 9, kNaN});
  Tensor out(DType::kI64, {});
  ASSERT_TRUE(run(OpKind::Argmax, {&x}, {&out}, AttrList().i(0).b(false)).ok());
  EXPECT_EQ(out.at(0), 2);
  ASSERT_TRUE(run(OpKind::Argmin, {&x}, {&out}, AttrList().i(0).b(false)).ok());
  EXPECT_EQ(out.at(0), 2);
  Tensor e(DType::kF32, {0, 3}), eo(DType::kI64, {3});
  EXPECT_TRUE(fails_with(run(OpKind::Argmax, {&e}, {&eo}, AttrList().i(0).b(false)), StatusCode::kInvalidInput, "argmax"));
  Tensor o32(DType::kI32, {});
  EXPECT_TRUE(fails_with(run(OpKind::Argmax, {&x}, {&o32}, AttrList().i(0).b(false)), StatusCode::kInvalidBundle, "argmax",
                         "out.dtype=i32"));
  EXPECT_TRUE(fails_with(run(OpKind::Argmax, {&x}, {&out}, AttrList().i(1).b(false)), StatusCode::kInvalidBundle, "argmax",
                         "dim=1"));
}

// ---------------------------------------------------------------------------------------
// cumsum

TEST(CumsumKernel, RunningSumsAlongEveryDim) {
  std::mt19937 rng(31);
  const std::vector<std::pair<DType, DType>> types = {{DType::kF32, DType::kF32}, {DType::kF64, DType::kF64},
                                                      {DType::kI32, DType::kI64}, {DType::kI64, DType::kI64},
                                                      {DType::kBool, DType::kI64}, {DType::kI32, DType::kI32}};
  for (const auto& [in_dt, out_dt] : types) {
    for (const Shape& shape : std::vector<Shape>{{9}, {3, 4}, {2, 3, 5}, {2, 0, 3}, {3, 300}}) {
      Tensor x = Tensor::random(in_dt, shape, rng, -5, 5);
      for (int dim = 0; dim < static_cast<int>(shape.size()); ++dim) {
        std::vector<double> want(static_cast<std::size_t>(x.numel()));
        for (std::int64_t i = 0; i < x.numel(); ++i) {
          auto idx = unravel(i, shape);
          double s = 0;
          const std::int64_t upto = idx[dim];
          for (std::int64_t k = 0; k <= upto; ++k) {
            idx[dim] = k;
            s += x.at(ravel(idx, shape));
          }
          want[i] = s;
        }
        Tensor out(out_dt, shape);
        ASSERT_TRUE(run(OpKind::Cumsum, {&x}, {&out}, AttrList().i(dim)).ok());
        EXPECT_TRUE(all_close(out, want, 1e-5, 1e-5)) << dtype_name(in_dt) << shape_string(shape) << " dim " << dim;
      }
    }
  }
  Tensor s = Tensor::of(DType::kF32, {}, {4});
  Tensor so(DType::kF32, {});
  ASSERT_TRUE(run(OpKind::Cumsum, {&s}, {&so}, AttrList().i(0)).ok());
  EXPECT_EQ(so.at(0), 4);
  Tensor x(DType::kF32, {2, 3}), bad(DType::kF32, {3, 2});
  EXPECT_TRUE(fails_with(run(OpKind::Cumsum, {&x}, {&bad}, AttrList().i(0)), StatusCode::kInvalidBundle, "cumsum"));
  EXPECT_TRUE(fails_with(run(OpKind::Cumsum, {&x}, {&x}, AttrList().i(2)), StatusCode::kInvalidBundle, "cumsum", "dim=2"));
}

}  // namespace
}  // namespace kiln::cpu::testing

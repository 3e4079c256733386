// Elementwise kernels (binary, unary, cast, where, masked_fill) against reference
// implementations computed here in double / int64.
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "kernel_testutil.h"

namespace kiln::cpu::testing {
namespace {

using Ref2 = std::function<double(double, double)>;
using Ref1 = std::function<double(double)>;

const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

// Shape pairs covering same shape, scalars, broadcasting both ways, rank mismatch, empty.
std::vector<std::pair<Shape, Shape>> binary_shapes() {
  return {{{2, 3}, {2, 3}},     {{7}, {7}},           {{}, {}},          {{5, 3}, {}},
          {{}, {4}},            {{3, 1, 5}, {4, 1}},  {{4, 1}, {3, 1, 5}}, {{2, 3, 4}, {4}},
          {{2, 3, 4}, {3, 1}},  {{0, 3}, {3}},        {{1, 0}, {5, 1}},  {{33}, {1}},
          {{1, 1, 17}, {2, 3, 1}}, {{2, 1, 3, 1}, {1, 4, 1, 5}}, {{257}, {257}},
          // flat runs over kParallelElements, split over the pool
          {{257, 257}, {257, 257}}, {{66001}, {}}, {{}, {66001}},
          // one operand broadcast over the middle dims of the other with a short inner row
          // (a channel scale on blocked NCHW8c tensors), either operand the small one
          {{2, 3, 5, 7, 8}, {2, 3, 1, 1, 8}}, {{2, 3, 1, 1, 8}, {2, 3, 5, 7, 8}}, {{3, 40, 16}, {3, 1, 16}},
          {{1, 2, 9, 9, 8}, {1, 2, 1, 1, 8}}};
}

Tensor expected_binary(const Tensor& a, const Tensor& b, DType out_dtype, const Ref2& ref) {
  const Shape shape = broadcast_shapes(a.shape(), b.shape());
  Tensor want(out_dtype, shape);
  for (std::int64_t i = 0; i < want.numel(); ++i) {
    const auto idx = unravel(i, shape);
    want.set(i, ref(a.at(broadcast_offset(idx, a.shape())), b.at(broadcast_offset(idx, b.shape()))));
  }
  return want;
}

// Runs `op` over every shape pair with random inputs and compares with `ref`.
void check_binary(OpKind op, DType dtype, DType out_dtype, const Ref2& ref, double lo, double hi,
                  const AttrList& attrs = {}, double rtol = 1e-6, bool nonzero_b = false) {
  std::mt19937 rng(static_cast<unsigned>(static_cast<int>(op) * 31 + static_cast<int>(dtype)));
  for (const auto& [sa, sb] : binary_shapes()) {
    Tensor a = Tensor::random(dtype, sa, rng, lo, hi);
    Tensor b = Tensor::random(dtype, sb, rng, lo, hi);
    if (nonzero_b) {
      for (std::int64_t i = 0; i < b.numel(); ++i) {
        if (b.at(i) == 0) b.set(i, 3);
      }
    }
    const Tensor want = expected_binary(a, b, out_dtype, ref);
    Tensor out(out_dtype, want.shape());
    const Status s = run(op, {&a, &b}, {&out}, attrs);
    ASSERT_TRUE(s.ok()) << op_name(op) << " " << shape_string(sa) << " " << shape_string(sb) << ": " << s.message();
    EXPECT_TRUE(all_close(out, want.values(), rtol, 1e-6))
        << op_name(op) << " " << dtype_name(dtype) << " " << shape_string(sa) << " x " << shape_string(sb);
  }
}

double py_mod(double a, double b) {
  const double r = std::fmod(a, b);
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}

TEST(BinaryKernels, ArithmeticMatchesReferenceForAllDtypesAndBroadcasts) {
  for (DType dt : {DType::kF32, DType::kF64, DType::kI32, DType::kI64, DType::kI16, DType::kI8, DType::kU8}) {
    const bool is_int = !dtype_is_floating(dt);
    const double lo = dt == DType::kU8 ? 0 : -10, hi = 10;
    check_binary(OpKind::Add, dt, dt, [](double a, double b) { return a + b; }, lo, hi);
    check_binary(OpKind::Sub, dt, dt, [](double a, double b) { return a - b; }, dt == DType::kU8 ? 10 : lo, hi);
    check_binary(OpKind::Mul, dt, dt, [](double a, double b) { return a * b; }, lo, hi);
    check_binary(OpKind::Maximum, dt, dt, [](double a, double b) { return std::max(a, b); }, lo, hi);
    check_binary(OpKind::Minimum, dt, dt, [](double a, double b) { return std::min(a, b); }, lo, hi);
    if (is_int) {
      check_binary(OpKind::Div, dt, dt, [](double a, double b) { return std::trunc(a / b); }, lo, hi,
                   AttrList().s("trunc"), 0, true);
      check_binary(OpKind::Div, dt, dt, [](double a, double b) { return std::floor(a / b); }, lo, hi,
                   AttrList().s("floor"), 0, true);
    }
  }
  for (DType dt : {DType::kI32, DType::kI64}) {
    check_binary(OpKind::Remainder, dt, dt, py_mod, -10, 10, {}, 0, true);
  }
}

TEST(BinaryKernels, FloatDivisionPowRemainder) {
  for (DType dt : {DType::kF32, DType::kF64}) {
    check_binary(OpKind::Div, dt, dt, [](double a, double b) { return a / b; }, -4, 4, {}, 1e-6, true);
    check_binary(OpKind::Div, dt, dt, [](double a, double b) { return a / b; }, -4, 4, AttrList().none(), 1e-6, true);
    check_binary(OpKind::Div, dt, dt, [](double a, double b) { return std::trunc(a / b); }, -9, 9,
                 AttrList().s("trunc"), 1e-6, true);
    check_binary(OpKind::Div, dt, dt, [](double a, double b) { return std::floor(a / b); }, -9, 9,
                 AttrList().s("floor"), 1e-6, true);
    check_binary(OpKind::Pow, dt, dt, [](double a, double b) { return std::pow(a, b); }, 0.25, 3);
    check_binary(OpKind::Remainder, dt, dt, py_mod, -9, 9, {}, 1e-5, true);
  }
}

TEST(BinaryKernels, IntegerTrueDivisionOutputsFloat) {
  check_binary(OpKind::Div, DType::kI64, DType::kF32, [](double a, double b) { return a / b; }, -20, 20, {}, 1e-6,
               true);
  check_binary(OpKind::Div, DType::kI32, DType::kF64, [](double a, double b) { return a / b; }, -20, 20, {}, 1e-12,
               true);
}

TEST(BinaryKernels, IntegerPowFollowsPowi) {
  Tensor a = Tensor::of(DType::kI64, {8}, {2, -3, 1, -1, -1, 5, 0, 7});
  Tensor b = Tensor::of(DType::kI64, {8}, {10, 3, -4, -3, -2, 0, 0, -1});
  Tensor out(DType::kI64, {8});
  ASSERT_TRUE(run(OpKind::Pow, {&a, &b}, {&out}).ok());
  EXPECT_TRUE(all_equal(out, {1024, -27, 1, -1, 1, 1, 1, 0}));
}

TEST(BinaryKernels, RemainderAndFloorDivisionFollowPython) {
  Tensor a = Tensor::of(DType::kI32, {6}, {7, -7, 7, -7, 0, -2147483648.0});
  Tensor b = Tensor::of(DType::kI32, {6}, {3, 3, -3, -3, 5, -1});
  Tensor rem(DType::kI32, {6});
  ASSERT_TRUE(run(OpKind::Remainder, {&a, &b}, {&rem}).ok());
  EXPECT_TRUE(all_equal(rem, {1, 2, -2, -1, 0, 0}));
  Tensor q(DType::kI32, {6});
  ASSERT_TRUE(run(OpKind::Div, {&a, &b}, {&q}, AttrList().s("floor")).ok());
  EXPECT_TRUE(all_equal(q, {2, -3, -3, 2, 0, -2147483648.0}));  // INT_MIN / -1 wraps
  Tensor fa = Tensor::of(DType::kF32, {4}, {5.5, -5.5, 5.5, -0.0});
  Tensor fb = Tensor::of(DType::kF32, {4}, {2, 2, -2, 3});
  Tensor frem(DType::kF32, {4});
  ASSERT_TRUE(run(OpKind::Remainder, {&fa, &fb}, {&frem}).ok());
  EXPECT_TRUE(all_equal(frem, {1.5, 0.5, -0.5, 0}));
  Tensor fq(DType::kF32, {4});
  ASSERT_TRUE(run(OpKind::Div, {&fa, &fb}, {&fq}, AttrList().s("floor")).ok());
  EXPECT_TRUE(all_equal(fq, {2, -3, -3, -0.0}));
}

TEST(BinaryKernels, IntegerDivisionByZeroIsAnError) {
  Tensor a = Tensor::of(DType::kI64, {3}, {1, 2, 3});
  Tensor b = Tensor::of(DType::kI64, {3}, {1, 0, 1});
  Tensor out(DType::kI64, {3});
  EXPECT_TRUE(fails_with(run(OpKind::Div, {&a, &b}, {&out}, AttrList().s("trunc")), StatusCode::kInvalidInput, "div",
                         "division by zero"));
  EXPECT_TRUE(fails_with(run(OpKind::Remainder, {&a, &b}, {&out}), StatusCode::kInvalidInput, "remainder"));
  Tensor fout(DType::kF32, {3});
  EXPECT_TRUE(run(OpKind::Div, {&a, &b}, {&fout}).ok());  // true division: inf
  EXPECT_EQ(fout.at(1), kInf);
  EXPECT_TRUE(fails_with(run(OpKind::Div, {&a, &a}, {&out}), StatusCode::kInvalidBundle, "div", "floating out.dtype"));
}

TEST(BinaryKernels, IntegerArithmeticWraps) {
  Tensor a = Tensor::of(DType::kI32, {2}, {2147483647.0, -2147483648.0});
  Tensor b = Tensor::of(DType::kI32, {2}, {1, 1});
  Tensor out(DType::kI32, {2});
  ASSERT_TRUE(run(OpKind::Add, {&a, &b}, {&out}).ok());
  EXPECT_TRUE(all_equal(out, {-2147483648.0, -2147483647.0}));
  ASSERT_TRUE(run(OpKind::Sub, {&a, &b}, {&out}).ok());
  EXPECT_TRUE(all_equal(out, {2147483646.0, 2147483647.0}));
}

TEST(BinaryKernels, MaximumMinimumPropagateNaN) {
  Tensor a = Tensor::of(DType::kF32, {3}, {kNaN, 1, 2});
  Tensor b = Tensor::of(DType::kF32, {3}, {1, kNaN, 3});
  Tensor out(DType::kF32, {3});
  ASSERT_TRUE(run(OpKind::Maximum, {&a, &b}, {&out}).ok());
  EXPECT_TRUE(all_equal(out, {kNaN, kNaN, 3}));
  ASSERT_TRUE(run(OpKind::Minimum, {&a, &b}, {&out}).ok());
  EXPECT_TRUE(all_equal(out, {kNaN, kNaN, 2}));
}

TEST(BinaryKernels, ComparisonsOutputBool) {
  const std::vector<std::pair<OpKind, Ref2>> ops = {
      {OpKind::Eq, [](double a, double b) { return double(a == b); }},
      {OpKind::Ne, [](double a, double b) { return double(a != b); }},
      {OpKind::Lt, [](double a, double b) { return double(a < b); }},
      {OpKind::Le, [](double a, double b) { return double(a <= b); }},
      {OpKind::Gt, [](double a, double b) { return double(a > b); }},
      {OpKind::Ge, [](double a, double b) { return double(a >= b); }}};
  for (const auto& [op, ref] : ops) {
    for (DType dt : {DType::kF32, DType::kF64, DType::kI32, DType::kI64, DType::kBool, DType::kF16, DType::kU8}) {
      check_binary(op, dt, DType::kBool, ref, 0, 3);
    }
  }
}

TEST(BinaryKernels, LogicalOpsOnBool) {
  check_binary(OpKind::LogicalAnd, DType::kBool, DType::kBool, [](double a, double b) { return double(a && b); }, 0, 2);
  check_binary(OpKind::LogicalOr, DType::kBool, DType::kBool, [](double a, double b) { return double(a || b); }, 0, 2);
  check_binary(OpKind::LogicalXor, DType::kBool, DType::kBool, [](double a, double b) { return double((a != 0) != (b != 0)); },
               0, 2);
}

TEST(BinaryKernels, HalfTypesComputeThroughFloat) {
  for (DType dt : {DType::kF16, DType::kBF16}) {
    check_binary(OpKind::Add, dt, dt, [](double a, double b) { return a + b; }, -4, 4, {}, 1e-2);
    check_binary(OpKind::Mul, dt, dt, [](double a, double b) { return a * b; }, -4, 4, {}, 1e-2);
    check_binary(OpKind::Div, dt, dt, [](double a, double b) { return a / b; }, 1, 4, {}, 1e-2);
  }
}

TEST(BinaryKernels, InPlaceOutputAliasingAnInputWorks) {
  std::mt19937 rng(5);
  Tensor a = Tensor::random(DType::kF32, {100}, rng);
  Tensor b = Tensor::random(DType::kF32, {100}, rng);
  std::vector<double> want(100);
  for (int i = 0; i < 100; ++i) want[i] = static_cast<float>(a.at(i)) + static_cast<float>(b.at(i));
  std::vector<TensorView> out{a.view()};
  ASSERT_TRUE(run_views(OpKind::Add, {a.view(), b.view()}, out, {}).ok());
  EXPECT_TRUE(all_close(a, want));
}

TEST(BinaryKernels, RejectsBadShapesAndDtypes) {
  Tensor a(DType::kF32, {2, 3}), b(DType::kF32, {4}), out(DType::kF32, {2, 3});
  EXPECT_TRUE(fails_with(run(OpKind::Add, {&a, &b}, {&out}), StatusCode::kInvalidBundle, "add", "do not broadcast"));
  Tensor b2(DType::kF32, {3}), wrong(DType::kF32, {3, 3});
  EXPECT_TRUE(fails_with(run(OpKind::Add, {&a, &b2}, {&wrong}), StatusCode::kInvalidBundle, "add", "out.shape=[3, 3]"));
  Tensor bi(DType::kI64, {3});
  EXPECT_TRUE(fails_with(run(OpKind::Mul, {&a, &bi}, {&out}), StatusCode::kUnsupported, "mul", "mixed"));
  Tensor ob(DType::kBool, {2, 3});
  EXPECT_TRUE(fails_with(run(OpKind::Sub, {&a, &b2}, {&ob}), StatusCode::kInvalidBundle, "sub", "dtype"));
  EXPECT_TRUE(fails_with(run(OpKind::Lt, {&a, &b2}, {&out}), StatusCode::kInvalidBundle, "lt", "expected b8"));
  Tensor ba(DType::kBool, {2}), bo(DType::kBool, {2});
  EXPECT_TRUE(fails_with(run(OpKind::Add, {&ba, &ba}, {&bo}), StatusCode::kUnsupported, "add", "dtype b8"));
  Tensor fa(DType::kF32, {2});
  EXPECT_TRUE(fails_with(run(OpKind::LogicalAnd, {&fa, &fa}, {&bo}), StatusCode::kUnsupported, "logical_and"));
  EXPECT_TRUE(fails_with(run(OpKind::Div, {&fa, &fa}, {&fa}, AttrList().s("round")), StatusCode::kInvalidBundle, "div",
                         "rounding_mode"));
  EXPECT_TRUE(fails_with(run(OpKind::Add, {&fa}, {&fa}), StatusCode::kInvalidBundle, "add", "expects 2 inputs"));
}

// ---------------------------------------------------------------------------------------
// Unary

void check_unary(OpKind op, DType dtype, const Ref1& ref, double lo, double hi, const AttrList& attrs = {},
                 double rtol = 1e-5, double atol = 1e-6, DType out_dtype = DType::kF32, bool same_out = true) {
  std::mt19937 rng(static_cast<unsigned>(static_cast<int>(op) * 7 + 1));
  // {66001}: over kParallelElements, so the run is split over the pool.
  for (const Shape& shape : std::vector<Shape>{{}, {1}, {7}, {3, 5}, {0, 4}, {2, 3, 37}, {1000}, {66001}}) {
    Tensor x = Tensor::random(dtype, shape, rng, lo, hi);
    const DType od = same_out ? dtype : out_dtype;
    std::vector<double> want(static_cast<std::size_t>(x.numel()));
    for (std::int64_t i = 0; i < x.numel(); ++i) {
      Tensor one = Tensor::of(od, {}, {ref(x.at(i))});  // round the reference to the out dtype
      want[i] = one.at(0);
    }
    Tensor out(od, shape);
    const Status s = run(op, {&x}, {&out}, attrs);
    ASSERT_TRUE(s.ok()) << op_name(op) << " " << dtype_name(dtype) << ": " << s.message();
    EXPECT_TRUE(all_close(out, want, rtol, atol)) << op_name(op) << " " << dtype_name(dtype) << " " << shape_string(shape);
  }
}

double gelu_ref(double v) { return 0.5 * v * std::erfc(-v / std::sqrt(2.0)); }
double gelu_tanh_ref(double v) {
  return v / (1.0 + std::exp(-2.0 * std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
}

TEST(UnaryKernels, FloatMathMatchesLibm) {
  const std::vector<std::tuple<OpKind, Ref1, double, double>> ops = {
      {OpKind::Exp, [](double v) { return std::exp(v); }, -20, 20},
      {OpKind::Log, [](double v) { return std::log(v); }, 0.01, 100},
      {OpKind::Sqrt, [](double v) { return std::sqrt(v); }, 0, 100},
      {OpKind::Rsqrt, [](double v) { return 1 / std::sqrt(v); }, 0.01, 100},
      {OpKind::Reciprocal, [](double v) { return 1 / v; }, 0.1, 10},
      {OpKind::Sin, [](double v) { return std::sin(v); }, -6, 6},
      {OpKind::Cos, [](double v) { return std::cos(v); }, -6, 6},
      {OpKind::Tanh, [](double v) { return std::tanh(v); }, -10, 10},
      {OpKind::Sigmoid, [](double v) { return 1 / (1 + std::exp(-v)); }, -20, 20},
      {OpKind::Silu, [](double v) { return v / (1 + std::exp(-v)); }, -20, 20},
      {OpKind::Erf, [](double v) { return std::erf(v); }, -3, 3},
      {OpKind::Atan, [](double v) { return std::atan(v); }, -20, 20},
      {OpKind::Asin, [](double v) { return std::asin(v); }, -1, 1},
      {OpKind::Acos, [](double v) { return std::acos(v); }, -1, 1},
      {OpKind::Tan, [](double v) { return std::tan(v); }, -1.4, 1.4},
      {OpKind::Sinh, [](double v) { return std::sinh(v); }, -8, 8},
      {OpKind::Cosh, [](double v) { return std::cosh(v); }, -8, 8},
      {OpKind::Asinh, [](double v) { return std::asinh(v); }, -50, 50},
      {OpKind::Acosh, [](double v) { return std::acosh(v); }, 1, 50},
      {OpKind::Atanh, [](double v) { return std::atanh(v); }, -0.99, 0.99},
      {OpKind::Hardswish, [](double v) { return v * std::clamp(v + 3, 0.0, 6.0) / 6; }, -5, 5},
      {OpKind::Hardsigmoid, [](double v) { return std::clamp(v + 3, 0.0, 6.0) / 6; }, -5, 5},
  };
  for (const auto& [op, ref, lo, hi] : ops) {
    for (DType dt : {DType::kF32, DType::kF64}) check_unary(op, dt, ref, lo, hi);
    check_unary(op, DType::kBF16, ref, lo, hi, {}, 1e-2, 1e-2);
    check_unary(op, DType::kF16, ref, std::max(lo, -8.0), std::min(hi, 8.0), {}, 2e-3, 2e-3);
  }
}

TEST(UnaryKernels, GeluBothApproximations) {
  for (DType dt : {DType::kF32, DType::kF64}) {
    check_unary(OpKind::Gelu, dt, gelu_ref, -8, 8, AttrList().s("none"));
    check_unary(OpKind::Gelu, dt, gelu_tanh_ref, -8, 8, AttrList().s("tanh"));
  }
  Tensor x(DType::kF32, {2});
  EXPECT_TRUE(fails_with(run(OpKind::Gelu, {&x}, {&x}, AttrList().s("fast")), StatusCode::kInvalidBundle, "gelu"));
}

TEST(UnaryKernels, SignedOpsOnAllNumericDtypes) {
  for (DType dt : {DType::kF32, DType::kF64, DType::kI32, DType::kI64, DType::kI8, DType::kI16}) {
    check_unary(OpKind::Neg, dt, [](double v) { return -v; }, -50, 50, {}, 0, 0);
    check_unary(OpKind::Abs, dt, [](double v) { return std::fabs(v); }, -50, 50, {}, 0, 0);
    check_unary(OpKind::Relu, dt, [](double v) { return v < 0 ? 0 : v; }, -50, 50, {}, 0, 0);
    check_unary(OpKind::Sign, dt, [](double v) { return double((v > 0) - (v < 0)); }, -50, 50, {}, 0, 0);
    check_unary(OpKind::Floor, dt, [](double v) { return std::floor(v); }, -50, 50, {}, 0, 0);
    check_unary(OpKind::Ceil, dt, [](double v) { return std::ceil(v); }, -50, 50, {}, 0, 0);
    check_unary(OpKind::Round, dt, [](double v) { return std::nearbyint(v); }, -50, 50, {}, 0, 0);
  }
  Tensor x = Tensor::of(DType::kF32, {6}, {0.5, 1.5, 2.5, -0.5, -1.5, kNaN});
  Tensor out(DType::kF32, {6});
  ASSERT_TRUE(run(OpKind::Round, {&x}, {&out}).ok());
  EXPECT_TRUE(all_equal(out, {0, 2, 2, -0.0, -2, kNaN}));
  ASSERT_TRUE(run(OpKind::Relu, {&x}, {&out}).ok());
  EXPECT_TRUE(all_equal(out, {0.5, 1.5, 2.5, 0, 0, kNaN}));
  Tensor imin = Tensor::of(DType::kI32, {1}, {-2147483648.0});
  Tensor iout(DType::kI32, {1});
  ASSERT_TRUE(run(OpKind::Abs, {&imin}, {&iout}).ok());
  EXPECT_TRUE(all_equal(iout, {-2147483648.0}));
}

TEST(UnaryKernels, ClampWithOptionalBounds) {
  for (DType dt : {DType::kF32, DType::kF64, DType::kI64, DType::kI32}) {
    check_unary(OpKind::Clamp, dt, [](double v) { return std::clamp(v, -1.0, 2.0); }, -5, 5,
                AttrList().f(-1).f(2), 0, 0);
    check_unary(OpKind::Clamp, dt, [](double v) { return std::max(v, -1.0); }, -5, 5, AttrList().f(-1).none(), 0, 0);
    check_unary(OpKind::Clamp, dt, [](double v) { return std::min(v, 2.0); }, -5, 5, AttrList().none().f(2), 0, 0);
    check_unary(OpKind::Clamp, dt, [](double v) { return v; }, -5, 5, AttrList().none().none(), 0, 0);
    check_unary(OpKind::Clamp, dt, [](double) { return 1.0; }, -5, 5, AttrList().f(3).f(1), 0, 0);  // min > max
  }
  Tensor x = Tensor::of(DType::kF32, {1}, {kNaN});
  Tensor out(DType::kF32, {1});
  ASSERT_TRUE(run(OpKind::Clamp, {&x}, {&out}, AttrList().f(0).f(1)).ok());
  EXPECT_TRUE(std::isnan(out.at(0)));
}

TEST(UnaryKernels, LeakyReluAndLogicalNot) {
  for (DType dt : {DType::kF32, DType::kF64}) {
    check_unary(OpKind::LeakyRelu, dt, [](double v) { return v > 0 ? v : 0.125 * v; }, -5, 5, AttrList().f(0.125));
  }
  for (DType dt : {DType::kBool, DType::kF32, DType::kI64, DType::kU8}) {
    check_unary(OpKind::LogicalNot, dt, [](double v) { return double(v == 0); }, 0, 3, {}, 0, 0, DType::kBool, false);
  }
}

TEST(UnaryKernels, SpecialValues) {
  Tensor x = Tensor::of(DType::kF32, {6}, {kInf, -kInf, kNaN, 0, -0.0, 100});
  Tensor out(DType::kF32, {6});
  ASSERT_TRUE(run(OpKind::Exp, {&x}, {&out}).ok());
  EXPECT_TRUE(all_equal(out, {kInf, 0, kNaN, 1, 1, kInf}));
  ASSERT_TRUE(run(OpKind::Tanh, {&x}, {&out}).ok());
  EXPECT_TRUE(all_equal(out, {1, -1, kNaN, 0, -0.0, 1}));
  ASSERT_TRUE(run(OpKind::Sigmoid, {&x}, {&out}).ok());
  EXPECT_TRUE(all_equal(out, {1, 0, kNaN, 0.5, 0.5, 1}));
}

TEST(UnaryKernels, RejectsWrongDtypeAndShape) {
  Tensor i(DType::kI64, {3}), f(DType::kF32, {3}), f4(DType::kF32, {4});
  EXPECT_TRUE(fails_with(run(OpKind::Exp, {&i}, {&i}), StatusCode::kUnsupported, "exp", "dtype i64"));
  EXPECT_TRUE(fails_with(run(OpKind::Exp, {&f}, {&f4}), StatusCode::kInvalidBundle, "exp", "out.shape=[4]"));
  Tensor i3(DType::kI64, {3});
  EXPECT_TRUE(fails_with(run(OpKind::Neg, {&f}, {&i3}), StatusCode::kInvalidBundle, "neg", "out.dtype=i64"));
  EXPECT_TRUE(fails_with(run(OpKind::LeakyRelu, {&f}, {&f}), StatusCode::kInvalidBundle, "leaky_relu",
                         "missing attribute 'negative_slope'"));
  EXPECT_TRUE(fails_with(run(OpKind::Clamp, {&f}, {&f}, AttrList().s("x")), StatusCode::kInvalidBundle, "clamp",
                         "attribute 'min' has type string"));
}

// ---------------------------------------------------------------------------------------
// Cast, identity

TEST(CastKernel, ConvertsBetweenAllDtypes) {
  const std::vector<double> src = {0, 1, -1, 2.75, -2.75, 100, -100, 127, 0.5};
  const DType all[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kF64, DType::kI8,
                       DType::kI16, DType::kI32, DType::kI64, DType::kU8, DType::kBool};
  for (DType from : all) {
    for (DType to : all) {
      std::vector<double> in_values = src;
      if (from == DType::kU8) {
        for (double& v : in_values) v = std::fabs(v);
      }
      Tensor x = Tensor::of(from, {static_cast<std::int64_t>(src.size())}, in_values);
      std::vector<double> want;
      for (std::int64_t i = 0; i < x.numel(); ++i) {
        const double v = x.at(i);
        double w;
        if (to == DType::kBool) {
          w = v != 0;
        } else if (dtype_is_floating(to)) {
          w = v;
        } else {
          w = static_cast<double>(static_cast<std::int64_t>(std::trunc(v)));  // wrap below
          if (to == DType::kU8) w = static_cast<std::uint8_t>(static_cast<std::int64_t>(w));
          if (to == DType::kI8) w = static_cast<std::int8_t>(static_cast<std::int64_t>(w));
        }
        Tensor one = Tensor::of(to, {}, {w});
        want.push_back(one.at(0));
      }
      Tensor out(to, x.shape());
      ASSERT_TRUE(run(OpKind::Cast, {&x}, {&out}, AttrList().dtype(to)).ok());
      EXPECT_TRUE(all_equal(out, want)) << dtype_name(from) << " -> " << dtype_name(to);
    }
  }
}

TEST(CastKernel, FloatToIntEdgeCases) {
  Tensor x = Tensor::of(DType::kF32, {5}, {kNaN, 1e20, -1e20, -1.0, 2.9});
  Tensor i64(DType::kI64, {5});
  ASSERT_TRUE(run(OpKind::Cast, {&x}, {&i64}, AttrList().dtype(DType::kI64)).ok());
  EXPECT_EQ(i64.as<std::int64_t>()[0], 0);
  EXPECT_EQ(i64.as<std::int64_t>()[1], std::numeric_limits<std::int64_t>::max());
  EXPECT_EQ(i64.as<std::int64_t>()[2], std::numeric_limits<std::int64_t>::min());
  Tensor u8(DType::kU8, {5});
  ASSERT_TRUE(run(OpKind::Cast, {&x}, {&u8}, AttrList().dtype(DType::kU8)).ok());
  EXPECT_EQ(u8.as<std::uint8_t>()[3], 255);  // -1.0 -> 255, as PyTorch on x86
  EXPECT_EQ(u8.as<std::uint8_t>()[4], 2);
  Tensor b(DType::kBool, {5});
  ASSERT_TRUE(run(OpKind::Cast, {&x}, {&b}, AttrList().dtype(DType::kBool)).ok());
  EXPECT_TRUE(all_equal(b, {1, 1, 1, 1, 1}));
}

TEST(CastKernel, HalfRoundTripIsExactForRepresentableValues) {
  std::vector<double> values;
  for (int bits = 0; bits < 0x7c00; bits += 7) {  // positive finite halves, incl. subnormals
    const double h = half_bits_to_double(static_cast<std::uint16_t>(bits));
    values.push_back(h);
    values.push_back(-h);
  }
  Tensor x = Tensor::of(DType::kF32, {static_cast<std::int64_t>(values.size())}, values);
  Tensor h(DType::kF16, x.shape()), back(DType::kF32, x.shape());
  ASSERT_TRUE(run(OpKind::Cast, {&x}, {&h}, AttrList().dtype(DType::kF16)).ok());
  ASSERT_TRUE(run(OpKind::Cast, {&h}, {&back}, AttrList().dtype(DType::kF32)).ok());
  EXPECT_TRUE(all_equal(back, values));
  // Rounding of values between halves (random, plus exact ties, subnormals and overflow)
  // matches the reference; 4099 elements also exercise the vector loop's tail.
  std::mt19937 rng(3);
  Tensor r = Tensor::random(DType::kF32, {4099}, rng, -70000, 70000);
  const float specials[] = {1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048, 65504.0f, 65519.0f, 65520.0f, 3e-8f, 2.98023224e-8f,
                            -6.1e-5f, 1e-10f};
  for (std::size_t i = 0; i < std::size(specials); ++i) r.as<float>()[i] = specials[i];
  for (std::int64_t i = 100; i < 1000; ++i) r.as<float>()[i] *= 1e-8f;  // subnormal halves
  Tensor rh(DType::kF16, r.shape());
  ASSERT_TRUE(run(OpKind::Cast, {&r}, {&rh}, AttrList().dtype(DType::kF16)).ok());
  for (std::int64_t i = 0; i < r.numel(); ++i) {
    ASSERT_EQ(rh.as<std::uint16_t>()[i], float_to_half_bits(r.as<float>()[i])) << r.as<float>()[i];
  }
  // f64 -> f16 takes the software conversion (f32 -> f16 may use F16C).
  Tensor r64 = Tensor::of(DType::kF64, r.shape(), r.values());
  Tensor rh2(DType::kF16, r.shape());
  ASSERT_TRUE(run(OpKind::Cast, {&r64}, {&rh2}, AttrList().dtype(DType::kF16)).ok());
  for (std::int64_t i = 0; i < r.numel(); ++i) {
    ASSERT_EQ(rh2.as<std::uint16_t>()[i], float_to_half_bits(r.as<float>()[i])) << r.as<float>()[i];
  }
}

TEST(CastKernel, RejectsMismatchedOutput) {
  Tensor x(DType::kF32, {3}), out(DType::kI32, {3}), out4(DType::kI64, {4});
  EXPECT_TRUE(fails_with(run(OpKind::Cast, {&x}, {&out}, AttrList().dtype(DType::kI64)), StatusCode::kInvalidBundle,
                         "cast", "out.dtype=i32"));
  EXPECT_TRUE(fails_with(run(OpKind::Cast, {&x}, {&out4}, AttrList().dtype(DType::kI64)), StatusCode::kInvalidBundle,
                         "cast", "out.shape"));
}

TEST(IdentityKernel, CopiesAnyDtype) {
  std::mt19937 rng(9);
  for (DType dt : {DType::kF16, DType::kI8, DType::kI64, DType::kBool}) {
    Tensor x = Tensor::random(dt, {3, 4}, rng, 0, 5);
    Tensor out(dt, {3, 4});
    ASSERT_TRUE(run(OpKind::Identity, {&x}, {&out}).ok());
    EXPECT_TRUE(all_equal(out, x.values()));
  }
}

// ---------------------------------------------------------------------------------------
// where, masked_fill

TEST(WhereKernel, SelectsWithThreeWayBroadcast) {
  std::mt19937 rng(11);
  const std::vector<std::tuple<Shape, Shape, Shape>> shapes = {
      {{4, 5}, {4, 5}, {4, 5}}, {{4, 1}, {5}, {}}, {{}, {3, 2}, {2}}, {{2, 1, 3}, {1, 4, 1}, {3}}, {{0, 2}, {2}, {1}},
      {{19}, {19}, {1}}};
  for (DType dt : {DType::kF32, DType::kI64, DType::kF16, DType::kI8, DType::kBool}) {
    for (const auto& [sc, sa, sb] : shapes) {
      Tensor c = Tensor::random(DType::kBool, sc, rng, 0, 2);
      Tensor a = Tensor::random(dt, sa, rng, -5, 5);
      Tensor b = Tensor::random(dt, sb, rng, -5, 5);
      const Shape shape = broadcast_shapes(broadcast_shapes(sc, sa), sb);
      std::vector<double> want(static_cast<std::size_t>(numel_of(shape)));
      for (std::size_t i = 0; i < want.size(); ++i) {
        const auto idx = unravel(static_cast<std::int64_t>(i), shape);
        want[i] = c.at(broadcast_offset(idx, sc)) != 0 ? a.at(broadcast_offset(idx, sa)) : b.at(broadcast_offset(idx, sb));
      }
      Tensor out(dt, shape);
      ASSERT_TRUE(run(OpKind::Where, {&c, &a, &b}, {&out}).ok());
      EXPECT_TRUE(all_equal(out, want)) << shape_string(sc) << shape_string(sa) << shape_string(sb);
    }
  }
  Tensor c(DType::kF32, {2}), a(DType::kF32, {2}), o(DType::kF32, {2}), i(DType::kI64, {2});
  EXPECT_TRUE(fails_with(run(OpKind::Where, {&c, &a, &a}, {&o}), StatusCode::kUnsupported, "where", "condition"));
  Tensor cb(DType::kBool, {2});
  EXPECT_TRUE(fails_with(run(OpKind::Where, {&cb, &a, &i}, {&o}), StatusCode::kUnsupported, "where", "mixed"));
}

TEST(MaskedFillKernel, FillsWhereMaskIsTrueConvertingTheValue) {
  std::mt19937 rng(12);
  for (DType dt : {DType::kF32, DType::kI64, DType::kBF16}) {
    for (const auto& [sx, sm] : std::vector<std::pair<Shape, Shape>>{{{3, 4}, {3, 4}}, {{3, 4}, {4}}, {{2, 3}, {}},
                                                                     {{0, 3}, {1, 3}}, {{2, 2, 5}, {2, 1, 1}}}) {
      Tensor x = Tensor::random(dt, sx, rng, -5, 5);
      Tensor m = Tensor::random(DType::kBool, sm, rng, 0, 2);
      Tensor v = Tensor::of(DType::kF64, {}, {-2.5});
      const double fill = Tensor::of(dt, {}, {-2.5}).at(0);
      std::vector<double> want(static_cast<std::size_t>(x.numel()));
      for (std::size_t i = 0; i < want.size(); ++i) {
        const auto idx = unravel(static_cast<std::int64_t>(i), sx);
        want[i] = m.at(broadcast_offset(idx, sm)) != 0 ? fill : x.at(static_cast<std::int64_t>(i));
      }
      Tensor out(dt, sx);
      ASSERT_TRUE(run(OpKind::MaskedFill, {&x, &m, &v}, {&out}).ok());
      EXPECT_TRUE(all_equal(out, want));
    }
  }
  Tensor x(DType::kF32, {2}), m(DType::kBool, {3}), v(DType::kF32, {2}), out(DType::kF32, {2});
  EXPECT_TRUE(fails_with(run(OpKind::MaskedFill, {&x, &m, &v}, {&out}), StatusCode::kInvalidBundle, "masked_fill"));
  Tensor m2(DType::kBool, {2, 2}), v0(DType::kF32, {});
  EXPECT_TRUE(fails_with(run(OpKind::MaskedFill, {&x, &m2, &v0}, {&out}), StatusCode::kInvalidBundle, "masked_fill"));
}

}  // namespace
}  // namespace kiln::cpu::testing

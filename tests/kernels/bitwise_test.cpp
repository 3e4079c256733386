// Bitwise kernels: and/or/xor/not on every integer dtype and bool against int64 references,
// shifts against values PyTorch 2.6 printed (shift counts outside [0, bits)), broadcasting,
// and the dtype errors.
#include <random>
#include <vector>

#include "kernel_testutil.h"

namespace kiln::cpu::testing {
namespace {

// Wraps v into dtype dt's range (two's complement), as the kernels' results are.
double wrap(DType dt, std::int64_t v) {
  switch (dt) {
    case DType::kI8: return static_cast<std::int8_t>(v);
    case DType::kI16: return static_cast<std::int16_t>(v);
    case DType::kI32: return static_cast<std::int32_t>(v);
    case DType::kU8: return static_cast<std::uint8_t>(v);
    default: return static_cast<double>(v);
  }
}

TEST(BitwiseKernel, AndOrXorNotMatchInt64ReferenceOnEveryIntegerDtype) {
  std::mt19937 rng(3);
  for (DType dt : {DType::kI8, DType::kI16, DType::kI32, DType::kI64, DType::kU8}) {
    const double lo = dt == DType::kU8 ? 0 : -100, hi = 100;
    const Shape sa{3, 1, 4}, sb{5, 4}, so{3, 5, 4};
    Tensor a = Tensor::random(dt, sa, rng, lo, hi), b = Tensor::random(dt, sb, rng, lo, hi);
    for (OpKind op : {OpKind::BitwiseAnd, OpKind::BitwiseOr, OpKind::BitwiseXor}) {
      Tensor out(dt, so);
      ASSERT_TRUE(run(op, {&a, &b}, {&out}).ok()) << op_name(op);
      std::vector<double> want;
      for (std::int64_t i = 0; i < numel_of(so); ++i) {
        const auto idx = unravel(i, so);
        const auto x = static_cast<std::int64_t>(a.at(broadcast_offset(idx, sa)));
        const auto y = static_cast<std::int64_t>(b.at(broadcast_offset(idx, sb)));
        want.push_back(wrap(dt, op == OpKind::BitwiseAnd ? (x & y) : op == OpKind::BitwiseOr ? (x | y) : (x ^ y)));
      }
      EXPECT_TRUE(all_equal(out, want)) << op_name(op) << " " << dtype_name(dt);
      EXPECT_TRUE(out.canary_intact());
    }
    Tensor n(dt, sa);
    ASSERT_TRUE(run(OpKind::BitwiseNot, {&a}, {&n}).ok());
    std::vector<double> want;
    for (double v : a.values()) want.push_back(wrap(dt, ~static_cast<std::int64_t>(v)));
    EXPECT_TRUE(all_equal(n, want)) << dtype_name(dt);
  }
}

TEST(BitwiseKernel, BoolsAreLogical) {
  Tensor a = Tensor::of(DType::kBool, {4}, {0, 0, 1, 1}), b = Tensor::of(DType::kBool, {4}, {0, 1, 0, 1});
  a.as<std::uint8_t>()[3] = 7;  // any non-zero byte is true
  Tensor o(DType::kBool, {4});
  ASSERT_TRUE(run(OpKind::BitwiseAnd, {&a, &b}, {&o}).ok());
  EXPECT_TRUE(all_equal(o, {0, 0, 0, 1}));
  ASSERT_TRUE(run(OpKind::BitwiseOr, {&a, &b}, {&o}).ok());
  EXPECT_TRUE(all_equal(o, {0, 1, 1, 1}));
  ASSERT_TRUE(run(OpKind::BitwiseXor, {&a, &b}, {&o}).ok());
  EXPECT_TRUE(all_equal(o, {0, 1, 1, 0}));
  ASSERT_TRUE(run(OpKind::BitwiseNot, {&a}, {&o}).ok());
  EXPECT_TRUE(all_equal(o, {1, 1, 0, 0}));
}

// Expected values printed by PyTorch 2.6 (`a << b`, `a >> b`).
TEST(BitwiseKernel, ShiftsFollowPyTorchOutsideTheBitWidth) {
  Tensor a = Tensor::of(DType::kI8, {6}, {5, -5, 127, -128, 1, -1});
  Tensor b = Tensor::of(DType::kI8, {6}, {1, 1, 7, 7, 8, 9});
  Tensor o(DType::kI8, {6});
  ASSERT_TRUE(run(OpKind::BitwiseLeftShift, {&a, &b}, {&o}).ok());
  EXPECT_TRUE(all_equal(o, {10, -10, -128, 0, 0, 0}));
  ASSERT_TRUE(run(OpKind::BitwiseRightShift, {&a, &b}, {&o}).ok());
  EXPECT_TRUE(all_equal(o, {2, -3, 0, -1, 0, -1}));
  Tensor neg = Tensor::of(DType::kI8, {}, {-1});
  ASSERT_TRUE(run(OpKind::BitwiseRightShift, {&a, &neg}, {&o}).ok());
  EXPECT_TRUE(all_equal(o, {0, -1, 0, -1, 0, -1}));
  ASSERT_TRUE(run(OpKind::BitwiseLeftShift, {&a, &neg}, {&o}).ok());
  EXPECT_TRUE(all_equal(o, {0, 0, 0, 0, 0, 0}));

  Tensor u = Tensor::of(DType::kU8, {3}, {200, 3, 255}), ub = Tensor::of(DType::kU8, {3}, {1, 7, 8});
  Tensor uo(DType::kU8, {3});
  ASSERT_TRUE(run(OpKind::BitwiseLeftShift, {&u, &ub}, {&uo}).ok());
  EXPECT_TRUE(all_equal(uo, {144, 128, 0}));
  ASSERT_TRUE(run(OpKind::BitwiseRightShift, {&u, &ub}, {&uo}).ok());
  EXPECT_TRUE(all_equal(uo, {100, 0, 0}));
  Tensor u200 = Tensor::of(DType::kU8, {}, {200});
  ASSERT_TRUE(run(OpKind::BitwiseRightShift, {&u, &u200}, {&uo}).ok());
  EXPECT_TRUE(all_equal(uo, {0, 0, 0}));

  Tensor x = Tensor::of(DType::kI64, {3}, {-7, 100, 3});
  Tensor xo(DType::kI64, {3});
  for (auto [count, want] : {std::pair{63.0, std::vector<double>{-1, 0, 0}}, {64.0, {-1, 0, 0}}}) {
    Tensor c = Tensor::of(DType::kI64, {}, {count});
    ASSERT_TRUE(run(OpKind::BitwiseRightShift, {&x, &c}, {&xo}).ok());
    EXPECT_TRUE(all_equal(xo, want)) << count;
  }
  Tensor c64 = Tensor::of(DType::kI64, {}, {64});
  ASSERT_TRUE(run(OpKind::BitwiseLeftShift, {&x, &c64}, {&xo}).ok());
  EXPECT_TRUE(all_equal(xo, {0, 0, 0}));
  Tensor c62 = Tensor::of(DType::kI64, {}, {62});
  ASSERT_TRUE(run(OpKind::BitwiseLeftShift, {&x, &c62}, {&xo}).ok());
  EXPECT_EQ(xo.as<std::int64_t>()[0], INT64_C(4611686018427387904));
  EXPECT_EQ(xo.as<std::int64_t>()[1], 0);
  EXPECT_EQ(xo.as<std::int64_t>()[2], -INT64_C(4611686018427387904));

  Tensor i = Tensor::of(DType::kI32, {2}, {-9, 9}), ic = Tensor::of(DType::kI32, {2}, {31, 30}), io(DType::kI32, {2});
  ASSERT_TRUE(run(OpKind::BitwiseRightShift, {&i, &ic}, {&io}).ok());
  EXPECT_TRUE(all_equal(io, {-1, 0}));
}

TEST(BitwiseKernel, LargeFlatInputsSplitOverThePool) {
  std::mt19937 rng(5);
  const std::int64_t n = 200000;
  Tensor a = Tensor::random(DType::kI32, {n}, rng, -1000, 1000), b = Tensor::random(DType::kI32, {n}, rng, 0, 40);
  Tensor o(DType::kI32, {n});
  ASSERT_TRUE(run(OpKind::BitwiseLeftShift, {&a, &b}, {&o}).ok());
  for (std::int64_t i = 0; i < n; i += 997) {
    const auto x = static_cast<std::int32_t>(a.at(i));
    const auto s = static_cast<std::int32_t>(b.at(i));
    const std::int32_t want = s >= 32 ? 0 : static_cast<std::int32_t>(static_cast<std::uint32_t>(x) << s);
    ASSERT_EQ(o.as<std::int32_t>()[i], want) << i;
  }
}

TEST(BitwiseKernel, RejectsFloatsMixedDtypesBoolShiftsAndBadShapes) {
  Tensor f = Tensor::of(DType::kF32, {2}, {1, 2}), fo(DType::kF32, {2});
  EXPECT_TRUE(fails_with(run(OpKind::BitwiseAnd, {&f, &f}, {&fo}), StatusCode::kUnsupported, "bitwise_and", "f32"));
  EXPECT_TRUE(fails_with(run(OpKind::BitwiseNot, {&f}, {&fo}), StatusCode::kUnsupported, "bitwise_not", "f32"));
  Tensor i = Tensor::of(DType::kI32, {2}, {1, 2}), l = Tensor::of(DType::kI64, {2}, {1, 2}), io(DType::kI32, {2});
  EXPECT_TRUE(fails_with(run(OpKind::BitwiseOr, {&i, &l}, {&io}), StatusCode::kUnsupported, "bitwise_or", "mixed input dtypes"));
  Tensor bl = Tensor::of(DType::kBool, {2}, {1, 0}), blo(DType::kBool, {2});
  EXPECT_TRUE(fails_with(run(OpKind::BitwiseLeftShift, {&bl, &bl}, {&blo}), StatusCode::kUnsupported,
                         "bitwise_left_shift", "shifts take integers"));
  Tensor wrong(DType::kI32, {3});
  EXPECT_TRUE(fails_with(run(OpKind::BitwiseXor, {&i, &i}, {&wrong}), StatusCode::kInvalidBundle, "bitwise_xor"));
  EXPECT_TRUE(fails_with(run(OpKind::BitwiseNot, {&i}, {&wrong}), StatusCode::kInvalidBundle, "bitwise_not"));
  Tensor wrong_dtype(DType::kI64, {2});
  EXPECT_TRUE(fails_with(run(OpKind::BitwiseRightShift, {&i, &i}, {&wrong_dtype}), StatusCode::kInvalidBundle,
                         "bitwise_right_shift"));
}

}  // namespace
}  // namespace kiln::cpu::testing

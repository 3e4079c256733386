// Interval arithmetic with infinities, signs and Python floor / modulo semantics.
#include "kiln/export/symbolic/range.h"

#include <gtest/gtest.h>

#include <random>

namespace kiln::sym {
namespace {

constexpr ValueRange R(std::int64_t lo, std::int64_t hi) { return {lo, hi}; }
const ValueRange kTrue = ValueRange::boolean(true);
const ValueRange kFalse = ValueRange::boolean(false);
const ValueRange kUnknown = ValueRange::boolean(std::nullopt);

TEST(ValueRange, BasicsAndPrinting) {
  EXPECT_EQ(ValueRange::size(), R(0, kPosInf));
  EXPECT_TRUE(ValueRange::point(3).is_point());
  EXPECT_FALSE(ValueRange::at_least(3).is_point());
  EXPECT_TRUE(R(3, 2).is_empty());
  EXPECT_TRUE(R(2, 9).contains(9));
  EXPECT_TRUE(R(2, 9).contains(R(3, 4)));
  EXPECT_FALSE(R(2, 9).contains(R(3, 10)));
  EXPECT_EQ(to_string(R(2, 1024)), "[2, 1024]");
  EXPECT_EQ(to_string(ValueRange::size()), "[0, inf]");
  EXPECT_EQ(to_string(ValueRange::at_most(-1)), "[-inf, -1]");
  EXPECT_EQ(to_string(R(5, 1)), "[]");
  EXPECT_EQ(intersect(R(0, 10), R(5, 20)), R(5, 10));
  EXPECT_TRUE(intersect(R(0, 3), R(5, 20)).is_empty());
  EXPECT_EQ(unite(R(0, 3), R(5, 20)), R(0, 20));
  EXPECT_EQ(kTrue.as_bool(), true);
  EXPECT_EQ(kFalse.as_bool(), false);
  EXPECT_EQ(kUnknown.as_bool(), std::nullopt);
}

TEST(ValueRange, AddSubNegWithInfinities) {
  EXPECT_EQ(range_add(R(1, 2), R(10, 20)), R(11, 22));
  EXPECT_EQ(range_add(R(1, kPosInf), R(-5, 3)), R(-4, kPosInf));
  EXPECT_EQ(range_add(ValueRange::unbounded(), R(1, 1)), ValueRange::unbounded());
  EXPECT_EQ(range_sub(R(0, 10), R(1, kPosInf)), R(kNegInf, 9));
  EXPECT_EQ(range_neg(R(kNegInf, 3)), R(-3, kPosInf));
  EXPECT_EQ(range_neg(R(-4, 7)), R(-7, 4));
  // Finite bounds that overflow saturate to infinity (looser, never wrapped).
  EXPECT_EQ(range_add(R(kPosInf - 10, kPosInf - 1), R(100, 100)), R(kPosInf, kPosInf));
  EXPECT_EQ(range_add(R(-5, kPosInf - 1), R(0, 100)), R(-5, kPosInf));
}

TEST(ValueRange, MulHandlesSignsZeroAndInfinity) {
  EXPECT_EQ(range_mul(R(2, 3), R(4, 5)), R(8, 15));
  EXPECT_EQ(range_mul(R(-2, 3), R(4, 5)), R(-10, 15));
  EXPECT_EQ(range_mul(R(-2, 3), R(-5, -4)), R(-15, 10));
  EXPECT_EQ(range_mul(R(-2, -1), R(-5, -4)), R(4, 10));
  EXPECT_EQ(range_mul(R(0, kPosInf), R(2, 2)), R(0, kPosInf));
  EXPECT_EQ(range_mul(R(0, kPosInf), R(-2, 2)), ValueRange::unbounded());
  EXPECT_EQ(range_mul(ValueRange::unbounded(), R(0, 0)), R(0, 0));
  EXPECT_EQ(range_mul(R(1, kPosInf), R(1, kPosInf)), R(1, kPosInf));
  EXPECT_EQ(range_mul(R(1LL << 62, 1LL << 62), R(4, 4)), R(kPosInf, kPosInf));
}

TEST(ValueRange, FloorDivIsPythonFloor) {
  EXPECT_EQ(range_floordiv(R(7, 7), R(2, 2)), R(3, 3));
  EXPECT_EQ(range_floordiv(R(-7, -7), R(2, 2)), R(-4, -4));
  EXPECT_EQ(range_floordiv(R(7, 7), R(-2, -2)), R(-4, -4));
  EXPECT_EQ(range_floordiv(R(-7, 9), R(2, 4)), R(-4, 4));
  EXPECT_EQ(range_floordiv(R(0, kPosInf), R(4, 4)), R(0, kPosInf));
  EXPECT_EQ(range_floordiv(R(5, 100), R(1, kPosInf)), R(0, 100));
  EXPECT_EQ(range_floordiv(R(-5, 100), R(1, kPosInf)), R(-5, 100));
  EXPECT_EQ(range_floordiv(R(-100, -5), R(1, kPosInf)), R(-100, -1));
  EXPECT_EQ(range_floordiv(R(kNegInf, -1), R(2, 2)), R(kNegInf, -1));
  // A divisor range through zero: both signs, zero skipped.
  EXPECT_EQ(range_floordiv(R(10, 10), R(-2, 2)), R(-10, 10));
  EXPECT_EQ(range_floordiv(R(1, 5), R(0, 0)), ValueRange::unbounded());
}

TEST(ValueRange, CeilDiv) {
  EXPECT_EQ(range_ceildiv(R(7, 7), R(2, 2)), R(4, 4));
  EXPECT_EQ(range_ceildiv(R(-7, -7), R(2, 2)), R(-3, -3));
  EXPECT_EQ(range_ceildiv(R(1, 9), R(4, 4)), R(1, 3));
  EXPECT_EQ(range_ceildiv(R(0, kPosInf), R(8, 8)), R(0, kPosInf));
}

TEST(ValueRange, ModIsPythonModulo) {
  EXPECT_EQ(range_mod(R(7, 7), R(3, 3)), R(1, 1));
  EXPECT_EQ(range_mod(R(-7, -7), R(3, 3)), R(2, 2));
  EXPECT_EQ(range_mod(R(7, 7), R(-3, -3)), R(-2, -2));
  EXPECT_EQ(range_mod(R(0, 100), R(4, 4)), R(0, 3));
  EXPECT_EQ(range_mod(R(0, 2), R(4, 4)), R(0, 2));     // already below the divisor
  EXPECT_EQ(range_mod(R(5, 6), R(4, 4)), R(1, 2));     // within one period
  EXPECT_EQ(range_mod(R(-50, 50), R(4, 4)), R(0, 3));
  EXPECT_EQ(range_mod(R(0, kPosInf), R(1, kPosInf)), R(0, kPosInf));
  EXPECT_EQ(range_mod(R(0, 100), R(-4, -4)), R(-3, 0));
  EXPECT_EQ(range_mod(R(3, 3), R(2, 10)), R(0, 3));
}

TEST(ValueRange, MinMax) {
  EXPECT_EQ(range_min(R(1, 10), R(5, 7)), R(1, 7));
  EXPECT_EQ(range_max(R(1, 10), R(5, 7)), R(5, 10));
  EXPECT_EQ(range_max(R(kNegInf, 3), R(1, 1)), R(1, 3));
}

TEST(ValueRange, ComparisonsGiveTrueFalseOrUnknown) {
  EXPECT_EQ(range_lt(R(0, 3), R(4, 9)), kTrue);
  EXPECT_EQ(range_lt(R(0, 4), R(4, 9)), kUnknown);
  EXPECT_EQ(range_lt(R(9, 12), R(4, 9)), kFalse);
  EXPECT_EQ(range_le(R(0, 4), R(4, 9)), kTrue);
  EXPECT_EQ(range_ge(R(2, kPosInf), R(1, 1)), kTrue);
  EXPECT_EQ(range_gt(R(2, kPosInf), R(2, 2)), kUnknown);
  EXPECT_EQ(range_eq(R(3, 3), R(3, 3)), kTrue);
  EXPECT_EQ(range_eq(R(0, 2), R(3, 5)), kFalse);
  EXPECT_EQ(range_eq(R(0, 3), R(3, 5)), kUnknown);
  EXPECT_EQ(range_ne(R(0, 2), R(3, 5)), kTrue);
  EXPECT_EQ(range_lt(ValueRange::unbounded(), R(0, 0)), kUnknown);
  EXPECT_EQ(range_and(kTrue, kUnknown), kUnknown);
  EXPECT_EQ(range_and(kFalse, kUnknown), kFalse);
  EXPECT_EQ(range_or(kTrue, kUnknown), kTrue);
  EXPECT_EQ(range_or(kFalse, kFalse), kFalse);
  EXPECT_EQ(range_not(kTrue), kFalse);
  EXPECT_EQ(range_not(kUnknown), kUnknown);
}

// Every op on random small ranges contains every value it can produce.
TEST(ValueRange, RandomizedSoundness) {
  std::mt19937_64 rng(17);
  std::uniform_int_distribution<std::int64_t> bound(-9, 9);
  auto floordiv = [](std::int64_t a, std::int64_t b) {
    std::int64_t q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
  };
  for (int i = 0; i < 300; ++i) {
    std::int64_t a0 = bound(rng), a1 = bound(rng), b0 = bound(rng), b1 = bound(rng);
    const ValueRange a = R(std::min(a0, a1), std::max(a0, a1)), b = R(std::min(b0, b1), std::max(b0, b1));
    for (std::int64_t x = a.lo; x <= a.hi; ++x) {
      for (std::int64_t y = b.lo; y <= b.hi; ++y) {
        ASSERT_TRUE(range_add(a, b).contains(x + y));
        ASSERT_TRUE(range_mul(a, b).contains(x * y));
        ASSERT_TRUE(range_min(a, b).contains(std::min(x, y)));
        if (y == 0) continue;
        const std::int64_t q = floordiv(x, y);
        ASSERT_TRUE(range_floordiv(a, b).contains(q)) << x << "//" << y << " " << to_string(range_floordiv(a, b));
        ASSERT_TRUE(range_mod(a, b).contains(x - q * y)) << x << "%" << y << " " << to_string(range_mod(a, b));
        ASSERT_TRUE(range_ceildiv(a, b).contains(-floordiv(-x, y)));
      }
    }
  }
}

}  // namespace
}  // namespace kiln::sym

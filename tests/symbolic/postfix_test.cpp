// Postfix tokens: the schema's encoding, round trips, and hostile input.
#include "kiln/export/symbolic/postfix.h"

#include <gtest/gtest.h>

#include <random>

#include "kiln/export/symbolic/print.h"

namespace kiln::sym {
namespace {

ExprToken tok(ExprOp op, std::int64_t value = 0) { return {static_cast<std::uint8_t>(op), value}; }

const Expr s0 = Expr::symbol(0);
const Expr s1 = Expr::symbol(1);

TEST(Postfix, EncodesWithSchemaCodes) {
  // s0 + 3: the constant is the Add's first operand.
  EXPECT_EQ(to_postfix(s0 + 3), (std::vector<ExprToken>{{0, 3}, {1, 0}, {2, 2}}));
  EXPECT_EQ(to_postfix(floordiv(s1, 2)),
            (std::vector<ExprToken>{tok(ExprOp::Sym, 1), tok(ExprOp::Const, 2), tok(ExprOp::FloorDiv)}));
  EXPECT_EQ(to_postfix(ge(s0, 2)),
            (std::vector<ExprToken>{tok(ExprOp::Sym, 0), tok(ExprOp::Const, 2), tok(ExprOp::Ge)}));
  const Expr three = sym_or(eq(s0, 1), eq(s0, 3), eq(s0, 5));
  const auto t = to_postfix(three);
  EXPECT_EQ(t.back(), tok(ExprOp::Or, 3));  // n-ary ops carry their arity
  EXPECT_EQ(t.size(), 10u);
  EXPECT_EQ(static_cast<int>(ExprOp::CeilDiv), 18);
}

TEST(Postfix, BooleanConstantsUseAComparisonOfConstants) {
  EXPECT_EQ(to_postfix(Expr::boolean(true)),
            (std::vector<ExprToken>{tok(ExprOp::Const, 0), tok(ExprOp::Const, 0), tok(ExprOp::Eq)}));
  EXPECT_EQ(*from_postfix(to_postfix(Expr::boolean(true))), Expr::boolean(true));
  EXPECT_EQ(*from_postfix(to_postfix(Expr::boolean(false))), Expr::boolean(false));
}

TEST(Postfix, RoundTripsCanonicalExpressions) {
  const Expr s2 = Expr::symbol(2);
  const Expr cases[] = {
      Expr(0), Expr(-7), s0, s0 + 3, 2 * s0 - s1, s0 * s1 * s1, floordiv(s0 + 1, 2), mod(s0, 16),
      ceildiv(s0, 4), max(1, s0), min({s0, s1, s2 + 3}), 2 * mod(s0, 2), s0 * (s1 + 1),
      ge(s0, 2), le(s0 + s1, 10), eq(mod(s0, 16), 0), ne(s0, s1), sym_and(ge(s0, 2), le(s0, 9), ne(s0, 5)),
      sym_or(eq(s0, 1), ge(s1, 3)), sym_not(sym_or(eq(s0, 1), ge(s1, 3))),
      floordiv(s0, s1), mod(s0, s1), floordiv(s0, 0),
      Expr(INT64_MAX) + 1,  // an unfolded overflow
  };
  for (Expr e : cases) {
    auto back = from_postfix(to_postfix(e));
    ASSERT_TRUE(back.ok()) << e << ": " << back.status().message();
    EXPECT_EQ(*back, e) << e;
  }
}

TEST(Postfix, AcceptsNonCanonicalInputAndCanonicalizes) {
  // 5 <= s0 + 1 written by another producer: Neg and Lt are accepted too.
  const std::vector<ExprToken> t = {tok(ExprOp::Const, 5), tok(ExprOp::Sym, 0), tok(ExprOp::Const, 1),
                                    tok(ExprOp::Add, 2), tok(ExprOp::Le)};
  EXPECT_EQ(*from_postfix(t), ge(s0, 4));
  const std::vector<ExprToken> neg = {tok(ExprOp::Sym, 0), tok(ExprOp::Neg)};
  EXPECT_EQ(*from_postfix(neg), -s0);
  const std::vector<ExprToken> less = {tok(ExprOp::Sym, 0), tok(ExprOp::Sym, 1), tok(ExprOp::Lt)};
  EXPECT_EQ(*from_postfix(less), lt(s0, s1));
}

void expect_rejected(const std::vector<ExprToken>& t, const std::string& needle, const PostfixLimits& limits = {}) {
  auto r = from_postfix(t, limits);
  ASSERT_FALSE(r.ok()) << "accepted: " << *r;
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidBundle);
  EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
}

TEST(Postfix, RejectsMalformedInput) {
  expect_rejected({}, "empty");
  expect_rejected({tok(ExprOp::Add, 2)}, "Add arity 2 with 0 values");
  expect_rejected({tok(ExprOp::Sym, 0), tok(ExprOp::Neg), tok(ExprOp::FloorDiv)}, "stack underflow");
  expect_rejected({tok(ExprOp::Sym, 0), tok(ExprOp::Sym, 1)}, "2 values left");
  expect_rejected({{19, 0}}, "unknown op code 19");
  expect_rejected({{255, 0}}, "unknown op code 255");
  expect_rejected({tok(ExprOp::Sym, 0), tok(ExprOp::Sym, 1), tok(ExprOp::Add, 1)}, "arity 1");
  expect_rejected({tok(ExprOp::Sym, 0), tok(ExprOp::Sym, 1), tok(ExprOp::Add, 3)}, "arity 3");
  expect_rejected({tok(ExprOp::Sym, 0), tok(ExprOp::Sym, 1), tok(ExprOp::Add, -1)}, "arity -1");
  expect_rejected({tok(ExprOp::Sym, -1)}, "symbol id -1");
  expect_rejected({tok(ExprOp::Sym, 5)}, "symbol id 5", PostfixLimits{5, 256});
  // Type errors: And over ints, Add over bools, Not over an int, a comparison of bools.
  expect_rejected({tok(ExprOp::Sym, 0), tok(ExprOp::Sym, 1), tok(ExprOp::And, 2)}, "[And] operand 0 is an integer");
  const ExprToken s0_ge_1[] = {tok(ExprOp::Sym, 0), tok(ExprOp::Const, 1), tok(ExprOp::Ge)};
  auto two_bools_then = [&](ExprToken op) {
    std::vector<ExprToken> t(std::begin(s0_ge_1), std::end(s0_ge_1));
    t.insert(t.end(), std::begin(s0_ge_1), std::end(s0_ge_1));
    t.push_back(op);
    return t;
  };
  expect_rejected(two_bools_then(tok(ExprOp::Add, 2)), "[Add] operand 0 is a boolean");
  expect_rejected({tok(ExprOp::Sym, 0), tok(ExprOp::Not)}, "[Not]");
  expect_rejected(two_bools_then(tok(ExprOp::Eq)), "[Eq]");
}

TEST(Postfix, RejectsExpressionsDeeperThanTheLimit) {
  std::vector<ExprToken> t = {tok(ExprOp::Sym, 0)};
  for (int i = 0; i < 300; ++i) {
    t.push_back(tok(ExprOp::Sym, 1));
    t.push_back(tok(ExprOp::Mod));
  }
  expect_rejected(t, "deeper than 256");
  t.resize(2 * 100 + 1);
  EXPECT_TRUE(from_postfix(t).ok());
}

TEST(Postfix, RandomTokenStreamsNeverCrash) {
  std::mt19937_64 rng(3);
  int accepted = 0;
  for (int i = 0; i < 3000; ++i) {
    std::vector<ExprToken> t(std::uniform_int_distribution<int>(1, 12)(rng));
    for (ExprToken& x : t) {
      x.op = static_cast<std::uint8_t>(std::uniform_int_distribution<int>(0, 20)(rng));
      x.value = std::uniform_int_distribution<std::int64_t>(-2, 4)(rng);
    }
    auto r = from_postfix(t, PostfixLimits{4, 256});
    if (!r.ok()) continue;
    ++accepted;
    auto again = from_postfix(to_postfix(*r));  // whatever was accepted round-trips
    ASSERT_TRUE(again.ok());
    ASSERT_EQ(*again, *r);
  }
  EXPECT_GT(accepted, 10);
}

}  // namespace
}  // namespace kiln::sym

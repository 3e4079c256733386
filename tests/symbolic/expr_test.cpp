// Canonical form of expressions: equal expressions are the same node.
#include "kiln/export/symbolic/expr.h"

#include <gtest/gtest.h>

#include <limits>

#include "kiln/export/symbolic/print.h"

namespace kiln::sym {
namespace {

constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
constexpr std::int64_t kMin = std::numeric_limits<std::int64_t>::min();

class ExprTest : public ::testing::Test {
 protected:
  Expr s0 = Expr::symbol(0), s1 = Expr::symbol(1), s2 = Expr::symbol(2);
  static Expr c(std::int64_t v) { return Expr::constant(v); }
  static Expr T() { return Expr::boolean(true); }
  static Expr F() { return Expr::boolean(false); }
};

TEST_F(ExprTest, InterningMakesEqualNodesIdentical) {
  EXPECT_EQ(s0 + 1, s0 + 1);
  EXPECT_EQ((s0 + 1).hash(), (1 + s0).hash());
  EXPECT_EQ(Expr(), c(0));
  EXPECT_EQ(Expr(7), c(7));
  EXPECT_FALSE(s0 == s1);
  EXPECT_TRUE(s0.is_symbol());
  EXPECT_EQ(s1.symbol_id(), 1);
  EXPECT_EQ(c(5).constant_value(), 5);
  EXPECT_EQ(T().bool_value(), true);
  EXPECT_FALSE(c(1) == T());  // int 1 and bool true differ
}

TEST_F(ExprTest, AddFoldsConstantsAndCombinesLikeTerms) {
  EXPECT_EQ(c(2) + c(3), c(5));
  EXPECT_EQ(2 * s0 + 3 * s0, 5 * s0);
  EXPECT_EQ(s0 - s0, c(0));
  EXPECT_EQ(s0 + s1, s1 + s0);
  EXPECT_EQ((s0 + 1) + (s1 + 2), s1 + (s0 + 3));
  EXPECT_EQ(s0 + s1 - s1, s0);
  EXPECT_EQ(s0 + 0, s0);
  EXPECT_EQ(add({}), c(0));
  EXPECT_EQ(add(std::vector<Expr>{s0, s0, s0}), 3 * s0);
  EXPECT_EQ((s0 + 3).op(), ExprOp::Add);
  EXPECT_EQ((s0 + 3).args()[0], c(3));  // the constant comes first
}

TEST_F(ExprTest, MulFoldsAndDistributesConstants) {
  EXPECT_EQ(s0 * 0, c(0));
  EXPECT_EQ(s0 * 1, s0);
  EXPECT_EQ(2 * (3 * s0), 6 * s0);
  EXPECT_EQ(s0 * s1, s1 * s0);
  EXPECT_EQ(2 * (s0 + 1), 2 * s0 + 2);
  EXPECT_EQ(-(s0 - s1), s1 - s0);
  EXPECT_EQ(-(-s0), s0);
  EXPECT_EQ(mul({}), c(1));
  EXPECT_EQ((s0 * s1) * s2, s0 * (s1 * s2));
  EXPECT_EQ(s0 * s0 * 2 - s0 * s0, s0 * s0);
  EXPECT_NE(s0 * (s1 + 1), s0 * s1 + s0);  // products of sums are not expanded
}

TEST_F(ExprTest, NegIsMulByMinusOne) {
  EXPECT_EQ((-s0).op(), ExprOp::Mul);
  EXPECT_EQ(-s0, -1 * s0);
  EXPECT_EQ(-c(4), c(-4));
}

TEST_F(ExprTest, FloorDivConstantFoldingUsesPythonSemantics) {
  EXPECT_EQ(floordiv(c(7), c(2)), c(3));
  EXPECT_EQ(floordiv(c(-7), c(2)), c(-4));
  EXPECT_EQ(floordiv(c(7), c(-2)), c(-4));
  EXPECT_EQ(floordiv(c(-7), c(-2)), c(3));
  EXPECT_EQ(floordiv(c(kMin), c(-1)).op(), ExprOp::FloorDiv);  // overflow: not folded
  EXPECT_EQ(floordiv(s0, c(0)).op(), ExprOp::FloorDiv);       // division by zero stays
  EXPECT_EQ(floordiv(c(5), c(0)).op(), ExprOp::FloorDiv);
}

TEST_F(ExprTest, FloorDivSimplifies) {
  EXPECT_EQ(floordiv(4 * s0, 4), s0);
  EXPECT_EQ(floordiv(s0 * 4 + 8, 4), s0 + 2);
  EXPECT_EQ(floordiv(s0, 1), s0);
  EXPECT_EQ(floordiv(4 * s0 + 2, 4), floordiv(2 * s0 + 1, 2));  // gcd
  EXPECT_EQ(floordiv(8 * s0 + s1, 4), 2 * s0 + floordiv(s1, 4));
  EXPECT_EQ(floordiv(floordiv(s0, 2), 3), floordiv(s0, 6));
  EXPECT_EQ(floordiv(s0, -2), floordiv(-s0, 2));
  EXPECT_EQ(floordiv(4 * s0 + 1, 4), s0);  // floor(1/4) == 0
  EXPECT_EQ(floordiv(s0, s1).op(), ExprOp::FloorDiv);
}

TEST_F(ExprTest, ModSimplifies) {
  EXPECT_EQ(mod(c(7), c(3)), c(1));
  EXPECT_EQ(mod(c(-7), c(3)), c(2));
  EXPECT_EQ(mod(c(7), c(-3)), c(-2));
  EXPECT_EQ(mod(c(-7), c(-3)), c(-1));
  EXPECT_EQ(mod(c(kMin), c(-1)), c(0));
  EXPECT_EQ(mod(4 * s0, 2), c(0));
  EXPECT_EQ(mod(4 * s0, 4), c(0));
  EXPECT_EQ(mod(s0, 1), c(0));
  EXPECT_EQ(mod(s0 + 5, 4), mod(s0 + 1, 4));
  EXPECT_EQ(mod(5 * s0, 4), mod(s0, 4));
  EXPECT_EQ(mod(2 * s0, 4), 2 * mod(s0, 2));
  EXPECT_EQ(mod(mod(s0, 8), 4), mod(s0, 4));
  EXPECT_EQ(mod(mod(s0, 4), 4), mod(s0, 4));
  EXPECT_EQ(mod(s0, c(0)).op(), ExprOp::Mod);
}

TEST_F(ExprTest, CeilDivSimplifies) {
  EXPECT_EQ(ceildiv(c(7), c(2)), c(4));
  EXPECT_EQ(ceildiv(c(-7), c(2)), c(-3));
  EXPECT_EQ(ceildiv(c(7), c(-2)), c(-3));
  EXPECT_EQ(ceildiv(4 * s0 + 8, 4), s0 + 2);
  EXPECT_EQ(ceildiv(4 * s0 + 1, 4), s0 + 1);
  EXPECT_EQ(ceildiv(s0, 1), s0);
  EXPECT_EQ(ceildiv(s0, 4).op(), ExprOp::CeilDiv);
}

TEST_F(ExprTest, MinMaxFoldFlattenAndDeduplicate) {
  EXPECT_EQ(max(c(3), c(5)), c(5));
  EXPECT_EQ(min(c(3), c(5)), c(3));
  EXPECT_EQ(max(s0, s0), s0);
  EXPECT_EQ(max(s0, max(s1, 2)), max({c(2), s1, s0}));
  EXPECT_EQ(max(max(s0, 1), 3), max(s0, 3));
  EXPECT_EQ(max(s0, s0 + 1), s0 + 1);
  EXPECT_EQ(min(s0, s0 + 1), s0);
  EXPECT_EQ(max(1, s0).args()[0], c(1));
  EXPECT_EQ(max(std::vector<Expr>{s0}), s0);
}

TEST_F(ExprTest, ComparisonsAreNormalized) {
  EXPECT_EQ(gt(s0 + 1, 5), ge(s0, 5));
  EXPECT_EQ(lt(s0, s1), gt(s1, s0));
  EXPECT_EQ(le(5, s0), ge(s0, 5));
  EXPECT_EQ(lt(s0, 5), le(s0, 4));
  EXPECT_EQ(eq(s0, 4), eq(4, s0));
  EXPECT_EQ(eq(s0 + 1, s1 + 1), eq(s0, s1));
  EXPECT_EQ(eq(s1, s0), eq(s0, s1));
  EXPECT_EQ(ge(2 * s0, 4), ge(s0, 2));
  EXPECT_EQ(ge(2 * s0, 5), ge(s0, 3));
  EXPECT_EQ(le(2 * s0, 5), le(s0, 2));
  EXPECT_EQ(ge(-s0, -3), le(s0, 3));
  EXPECT_EQ(ge(s0, 5).op(), ExprOp::Ge);
  EXPECT_EQ(le(s0, 5).op(), ExprOp::Le);
}

TEST_F(ExprTest, ComparisonsFoldConstants) {
  EXPECT_EQ(lt(c(2), c(3)), T());
  EXPECT_EQ(ge(c(2), c(3)), F());
  EXPECT_EQ(eq(s0, s0), T());
  EXPECT_EQ(ne(s0 + 1, s0), T());
  EXPECT_EQ(eq(2 * s0, 5), F());  // no integer solution
  EXPECT_EQ(ne(2 * s0, 5), T());
  EXPECT_EQ(le(s0, s0 + 1), T());
  EXPECT_EQ(lt(c(kMax), c(kMin)), F());
}

TEST_F(ExprTest, NotIsPushedInward) {
  EXPECT_EQ(sym_not(lt(s0, s1)), ge(s0, s1));
  EXPECT_EQ(sym_not(eq(s0, 4)), ne(s0, 4));
  EXPECT_EQ(sym_not(sym_not(ge(s0, 2))), ge(s0, 2));
  EXPECT_EQ(sym_not(sym_and(ge(s0, 2), le(s1, 3))), sym_or(le(s0, 1), ge(s1, 4)));
  EXPECT_EQ(sym_not(T()), F());
}

TEST_F(ExprTest, AndOrFlattenDeduplicateAndFold) {
  const Expr a = ge(s0, 2), b = eq(s1, 3), d = ne(s2, 0);
  EXPECT_EQ(sym_and(a, T()), a);
  EXPECT_EQ(sym_and(a, F()), F());
  EXPECT_EQ(sym_or(a, T()), T());
  EXPECT_EQ(sym_or(a, F()), a);
  EXPECT_EQ(sym_and(a, a), a);
  EXPECT_EQ(sym_and(a, sym_and(b, d)), sym_and(d, b, a));
  EXPECT_EQ(sym_or(a, sym_or(b, d)), sym_or({d, b, a}));
  EXPECT_EQ(sym_and(a, sym_not(a)), F());
  EXPECT_EQ(sym_or(a, sym_not(a)), T());
  EXPECT_EQ(sym_and({}), T());
  EXPECT_EQ(sym_or({}), F());
  EXPECT_EQ(sym_or(a, b, d).args().size(), 3u);
}

TEST_F(ExprTest, AndMergesBoundsOfOneExpression) {
  EXPECT_EQ(sym_and(ge(s0, 2), ge(s0, 3)), ge(s0, 3));
  EXPECT_EQ(sym_and(ge(s0, 3), le(s0, 3)), eq(s0, 3));
  EXPECT_EQ(sym_and(ge(s0, 4), le(s0, 3)), F());
  EXPECT_EQ(sym_and(eq(s0, 3), ge(s0, 2)), eq(s0, 3));
  EXPECT_EQ(sym_and(eq(s0, 3), ne(s0, 3)), F());
  EXPECT_EQ(sym_and(ge(s0, 2), ne(s0, 2)), ge(s0, 3));
  EXPECT_EQ(sym_and(ge(s0, 2), le(s0, 9), ne(s0, 5)).args().size(), 3u);
}

TEST_F(ExprTest, OverflowNeverFoldsOrWraps) {
  const Expr big = c(kMax);
  const Expr sum = big + 1;  // stays a sum of constants, operands as given
  EXPECT_EQ(sum.op(), ExprOp::Add);
  EXPECT_EQ(sum.args()[0], big);
  EXPECT_EQ((big * 2).op(), ExprOp::Mul);
  EXPECT_EQ((c(kMax) * s0 + c(kMax) * s0).op(), ExprOp::Add);  // coefficients would overflow
  EXPECT_EQ((-c(kMin)).op(), ExprOp::Mul);
  EXPECT_EQ((sum + s0 - s0).op(), ExprOp::Add);  // never folded back into range
  EXPECT_FALSE(evaluate(sum, std::span<const std::int64_t>()).ok());
  const std::int64_t one[] = {1};
  EXPECT_EQ(add(std::vector<Expr>{c(kMax) * s0, c(kMax) * s0, c(-kMax) * s0}), c(kMax) * s0);  // exact sum
  const Expr unfolded = c(kMax) * s0 + c(kMax) * s0;
  EXPECT_EQ(unfolded.args().size(), 2u);  // coefficients kept apart
  EXPECT_FALSE(evaluate(unfolded, one).ok());
  const std::int64_t zero[] = {0};
  EXPECT_EQ(*evaluate(unfolded, zero), 0);
  // Evaluation reports an overflow only when the result does not fit, whatever the order.
  const std::int64_t near_max[] = {kMax, 5};
  EXPECT_EQ(*evaluate(s0 + s1 - 10, near_max), kMax - 5);
  EXPECT_FALSE(lt(s0, c(kMin)).is_constant());  // s0 <= kMin - 1 is not representable
  EXPECT_EQ(sym_not(le(s0, c(kMax))).op(), ExprOp::Gt);
}

TEST_F(ExprTest, TypeErrorsThrowFromBuildersAndAreValuesFromTryBuild) {
  EXPECT_THROW(s0 + ge(s0, 1), std::invalid_argument);
  EXPECT_THROW(sym_and(s0, ge(s0, 1)), std::invalid_argument);
  EXPECT_THROW(lt(T(), s0), std::invalid_argument);
  EXPECT_THROW(max(std::vector<Expr>{}), std::invalid_argument);
  EXPECT_THROW(Expr::symbol(-1), std::invalid_argument);
  const Expr args[] = {s0, s1};
  auto r = try_build(ExprOp::And, 0, args);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("[And] operand 0 is an integer"), std::string::npos);
  EXPECT_FALSE(try_build(ExprOp::FloorDiv, 0, std::span<const Expr>(args, 1)).ok());
  EXPECT_FALSE(try_build(ExprOp::Sym, -1, {}).ok());
  EXPECT_FALSE(try_build(static_cast<ExprOp>(40), 0, {}).ok());
  EXPECT_EQ(*try_build(ExprOp::Neg, 0, std::span<const Expr>(args, 1)), -s0);
}

TEST_F(ExprTest, TypingOfResults) {
  EXPECT_TRUE(ge(s0, 1).is_bool());
  EXPECT_TRUE(sym_or(ge(s0, 1), eq(s1, 2)).is_bool());
  EXPECT_TRUE(max(s0, 1).is_int());
  EXPECT_TRUE(T().is_bool());
}

TEST_F(ExprTest, CanonicalOrderIsStructuralAndTotal) {
  EXPECT_LT(canonical_compare(c(5), s0), 0);
  EXPECT_LT(canonical_compare(s0, s1), 0);
  EXPECT_LT(canonical_compare(s1, s0 * s1), 0);
  EXPECT_LT(canonical_compare(s0 + 1, ge(s0, 1)), 0);  // ints before bools
  EXPECT_EQ(canonical_compare(s0 + 1, s0 + 1), 0);
  EXPECT_GT(canonical_compare(s1, s0), 0);
}

TEST_F(ExprTest, FreeSymbolsSubstituteEvaluate) {
  const Expr e = max(s2 + s0, floordiv(s1, 2));
  EXPECT_EQ(free_symbols(e), (std::vector<int>{0, 1, 2}));
  EXPECT_TRUE(contains_symbol(e, 1));
  EXPECT_FALSE(contains_symbol(e, 3));
  EXPECT_EQ(substitute(e, {{2, c(5)}, {1, 2 * s0}}), s0 + 5);
  EXPECT_EQ(substitute(eq(s0, s1), {{1, s0}}), T());
  const std::int64_t values[] = {3, -7, 4};
  EXPECT_EQ(*evaluate(e, values), 7);
  EXPECT_EQ(*evaluate(floordiv(s1, 2), values), -4);
  EXPECT_EQ(*evaluate(mod(s1, 3), values), 2);
  EXPECT_EQ(*evaluate(ceildiv(s1, 2), values), -3);
  EXPECT_EQ(*evaluate(ge(s0, 3), values), 1);
  EXPECT_EQ(*evaluate(sym_or(eq(s0, 1), eq(s0, 4)), values), 0);
  auto missing = evaluate(s0 + Expr::symbol(9), values);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("symbol 9"), std::string::npos);
  const std::int64_t zero[] = {0, 0, 0};
  auto div0 = evaluate(floordiv(s1, s0), zero);
  ASSERT_FALSE(div0.ok());
  EXPECT_NE(div0.status().message().find("division by zero"), std::string::npos);
  const std::int64_t huge[] = {kMax, 1, 0};
  EXPECT_FALSE(evaluate(s0 + s1, huge).ok());
  EXPECT_FALSE(evaluate(s0 * 2, huge).ok());
}

TEST_F(ExprTest, CompoundAssignment) {
  Expr e = s0;
  e += 2;
  e *= 3;
  e -= s0;
  EXPECT_EQ(e, 2 * s0 + 6);
}

}  // namespace
}  // namespace kiln::sym

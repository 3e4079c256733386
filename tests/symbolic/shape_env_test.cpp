// ShapeEnv: symbols, ranges, replacements, divisibility, axioms, queries, guard analysis.
#include "kiln/export/symbolic/shape_env.h"

#include <gtest/gtest.h>

#include "kiln/export/symbolic/print.h"

namespace kiln::sym {
namespace {

class ShapeEnvTest : public ::testing::Test {
 protected:
  // s0: batch in [2, 1024] (hint 8); u0: unbacked size; s1: in [1, 64] (hint 16).
  void SetUp() override {
    b = Expr::symbol(env.create_backed_symbol("batch", {2, 1024}, 8).value());
    u = Expr::symbol(env.create_unbacked_symbol(/*is_size=*/true));
    s1 = Expr::symbol(env.create_backed_symbol("", {1, 64}, 16).value());
  }
  std::string str(Expr e) const { return to_string(e, &env); }
  ShapeEnv env;
  Expr b, u, s1;
};

TEST_F(ShapeEnvTest, SymbolsAreNamedAndDescribed) {
  EXPECT_EQ(env.num_symbols(), 3u);
  const SymbolInfo& s0 = env.symbol(b.symbol_id());
  EXPECT_EQ(s0.name, "s0");
  EXPECT_EQ(s0.kind, SymbolKind::Backed);
  EXPECT_EQ(s0.user_name, "batch");
  EXPECT_EQ(s0.hint, 8);
  EXPECT_EQ(s0.range, ValueRange(2, 1024));
  const SymbolInfo& u0 = env.symbol(u.symbol_id());
  EXPECT_EQ(u0.name, "u0");
  EXPECT_EQ(u0.kind, SymbolKind::Unbacked);
  EXPECT_EQ(u0.range, ValueRange::size());
  EXPECT_FALSE(u0.hint.has_value());
  EXPECT_EQ(env.symbol(s1.symbol_id()).name, "s1");
  const int u1 = env.create_unbacked_symbol(false);
  EXPECT_EQ(env.symbol(u1).name, "u1");
  EXPECT_EQ(env.symbol(u1).range, ValueRange::unbounded());
  EXPECT_EQ(env.find_symbol("u0"), u.symbol_id());
  EXPECT_EQ(env.find_symbol("s9"), std::nullopt);
}

TEST_F(ShapeEnvTest, CreateBackedSymbolRejectsBadHintsAndRanges) {
  auto bad_hint = env.create_backed_symbol("batch", {2, 1024}, 1);
  ASSERT_FALSE(bad_hint.ok());
  EXPECT_NE(bad_hint.status().message().find("hint 1 outside range [2, 1024]"), std::string::npos);
  EXPECT_NE(bad_hint.status().message().find("'batch'"), std::string::npos);
  EXPECT_FALSE(env.create_backed_symbol("", {5, 4}, 5).ok());
  EXPECT_EQ(env.num_symbols(), 3u);  // nothing was created
}

TEST_F(ShapeEnvTest, BoundEvaluatesIntervals) {
  EXPECT_EQ(env.bound(b + 1), ValueRange(3, 1025));
  EXPECT_EQ(env.bound(2 * b - s1), ValueRange(4 - 64, 2048 - 1));
  EXPECT_EQ(env.bound(floordiv(b, 2)), ValueRange(1, 512));
  EXPECT_EQ(env.bound(mod(u, 8)), ValueRange(0, 7));
  EXPECT_EQ(env.bound(u * b), ValueRange(0, kPosInf));
  EXPECT_EQ(env.bound(max(u, 3)), ValueRange(3, kPosInf));
  EXPECT_EQ(env.bound(ge(b, 2)), ValueRange::boolean(true));
  EXPECT_EQ(env.bound(ge(b, 3)), ValueRange::boolean(std::nullopt));
}

TEST_F(ShapeEnvTest, StaticallyKnownUsesRanges) {
  EXPECT_EQ(env.statically_known(ge(b, 1)), true);
  EXPECT_EQ(env.statically_known(gt(b, 1)), true);
  EXPECT_EQ(env.statically_known(lt(b, 2)), false);
  EXPECT_EQ(env.statically_known(gt(b, 3)), std::nullopt);
  EXPECT_EQ(env.statically_known(ge(u, 0)), true);
  EXPECT_EQ(env.statically_known(ge(u, 1)), std::nullopt);
  EXPECT_EQ(env.statically_known(ne(b, 0)), true);
  EXPECT_EQ(env.statically_known(eq(mod(u, 1), 0)), true);
  EXPECT_EQ(env.statically_known(le(b + s1, 1088)), true);
  EXPECT_EQ(env.statically_known(b + 1), std::nullopt);  // not boolean
  EXPECT_TRUE(env.statically_known_true(sym_or(ge(b, 2), eq(u, 7))));
}

TEST_F(ShapeEnvTest, ConstrainRangeNarrowsAndSpecializes) {
  ASSERT_TRUE(env.constrain_range(b.symbol_id(), 4, kPosInf).ok());
  EXPECT_EQ(env.symbol(b.symbol_id()).range, ValueRange(4, 1024));
  EXPECT_EQ(env.statically_known(gt(b, 3)), true);
  auto empty = env.constrain_range(b.symbol_id(), 2000, 3000);
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.message().find("s0"), std::string::npos);
  EXPECT_EQ(env.symbol(b.symbol_id()).range, ValueRange(4, 1024));  // unchanged
  ASSERT_TRUE(env.constrain_range(s1.symbol_id(), 16, 16).ok());    // one value: replaced
  EXPECT_EQ(env.replacement(s1.symbol_id()), Expr(16));
  EXPECT_EQ(env.simplify(s1 * 2 + b), b + 32);
  EXPECT_FALSE(env.constrain_range(99, 0, 1).ok());
}

TEST_F(ShapeEnvTest, ReplacementsAreAppliedBySimplify) {
  const Expr s2 = Expr::symbol(env.create_backed_symbol("", {1, 64}, 8).value());
  ASSERT_TRUE(env.replace(s2.symbol_id(), b).ok());  // s2 == s0
  const Expr s1 = s2;  // (the checks below read naturally with s1)
  EXPECT_EQ(env.simplify(s1 - b), Expr(0));
  EXPECT_EQ(env.statically_known(eq(b, s1)), true);
  EXPECT_EQ(env.symbol(b.symbol_id()).range, ValueRange(2, 64));  // s0 learnt s1's range
  EXPECT_EQ(env.free_symbols(s1 + u), (std::vector<int>{b.symbol_id(), u.symbol_id()}));
  EXPECT_EQ(env.evaluate_with_hints(s1 * 2), 16);
  // Replacing s0 now updates the earlier replacement too.
  ASSERT_TRUE(env.replace(b.symbol_id(), Expr(8)).ok());
  EXPECT_EQ(env.simplify(s1), Expr(8));
  EXPECT_EQ(env.replacement(s1.symbol_id()), Expr(8));
}

TEST_F(ShapeEnvTest, ReplaceRejectsCyclesContradictionsAndHintMismatch) {
  EXPECT_FALSE(env.replace(b.symbol_id(), b + 1).ok());
  EXPECT_FALSE(env.replace(b.symbol_id(), Expr(5000)).ok());  // outside [2, 1024]
  auto hint = env.replace(b.symbol_id(), Expr(9));            // hint is 8
  ASSERT_FALSE(hint.ok());
  EXPECT_NE(hint.message().find("contradicts hint 8"), std::string::npos);
  EXPECT_FALSE(env.replace(b.symbol_id(), ge(u, 1)).ok());
  EXPECT_TRUE(env.replace(b.symbol_id(), b).ok());  // trivial
  EXPECT_EQ(env.replacement(b.symbol_id()), std::nullopt);
}

TEST_F(ShapeEnvTest, DerivedReplacementNarrowsTheFreeSymbol) {
  // A derived dim: s1 == 2*s0 + 2. s1 in [1, 64] => s0 in [2, 31].
  const int s2 = env.create_backed_symbol("", {1, 64}, 18).value();
  ASSERT_TRUE(env.replace(s2, 2 * b + 2).ok());
  EXPECT_EQ(env.symbol(b.symbol_id()).range, ValueRange(2, 31));
  EXPECT_EQ(env.simplify(floordiv(Expr::symbol(s2), 2)), b + 1);
}

TEST_F(ShapeEnvTest, DivisibilityFactsSimplifyAndRoundRanges) {
  ASSERT_TRUE(env.add_divisibility(b, 4).ok());
  EXPECT_EQ(env.symbol(b.symbol_id()).divisor, 4);
  EXPECT_EQ(env.symbol(b.symbol_id()).range, ValueRange(4, 1024));  // rounded to multiples
  EXPECT_EQ(env.simplify(floordiv(b, 4) * 4), b);
  EXPECT_EQ(env.simplify(mod(b, 4)), Expr(0));
  EXPECT_EQ(env.simplify(mod(b, 2)), Expr(0));
  EXPECT_EQ(env.simplify(mod(3 * b + 8, 4)), Expr(0));
  EXPECT_EQ(env.simplify(b - floordiv(b, 4) * 4), Expr(0));
  EXPECT_EQ(env.simplify(ceildiv(b, 4)), floordiv(b, 4));
  EXPECT_NE(env.simplify(mod(b, 8)), Expr(0));
  EXPECT_EQ(env.statically_known(eq(mod(b, 4), 0)), true);
  EXPECT_EQ(env.statically_known(eq(b, 6)), false);  // 6 is not a multiple of 4
  EXPECT_FALSE(env.add_divisibility(Expr(6), 4).ok());
  EXPECT_TRUE(env.add_divisibility(Expr(8), 4).ok());
  EXPECT_FALSE(env.add_divisibility(b, 0).ok());
  // A fact about a compound expression.
  ASSERT_TRUE(env.add_divisibility(s1 + 1, 3).ok());
  EXPECT_EQ(env.simplify(mod(s1 + 1, 3)), Expr(0));
  EXPECT_EQ(env.simplify(mod(2 * s1 + 2, 3)), Expr(0));
}

TEST_F(ShapeEnvTest, DivisibilityFactsAreNormalized) {
  ASSERT_TRUE(env.add_divisibility(4 * b, 8).ok());  // 4*s0 % 8 == 0  <=>  s0 % 2 == 0
  EXPECT_EQ(env.symbol(b.symbol_id()).divisor, 2);
  ASSERT_TRUE(env.add_divisibility(-s1 - 1, 3).ok());
  EXPECT_EQ(env.simplify(mod(s1 + 1, 3)), Expr(0));
  ASSERT_TRUE(env.add_axiom(eq(mod(2 * u, 6), 0)).ok());  // 2*(u0 % 3) == 0
  EXPECT_EQ(env.symbol(u.symbol_id()).divisor, 3);
}

TEST_F(ShapeEnvTest, DivisibilityWithoutMultiplesInRangeIsAContradiction) {
  ASSERT_TRUE(env.constrain_range(s1.symbol_id(), 5, 7).ok());
  EXPECT_FALSE(env.add_divisibility(s1, 8).ok());
}

TEST_F(ShapeEnvTest, AxiomsNarrowUnbackedRanges) {
  // check(u0 >= 2); check(u0 <= 10)
  ASSERT_TRUE(env.add_axiom(ge(u, 2)).ok());
  ASSERT_TRUE(env.add_axiom(le(u, 10)).ok());
  EXPECT_EQ(env.symbol(u.symbol_id()).range, ValueRange(2, 10));
  EXPECT_EQ(env.statically_known(ge(u, 1)), true);
  EXPECT_EQ(env.statically_known(gt(u, 10)), false);
  EXPECT_EQ(env.statically_known(ge(u, 3)), std::nullopt);
  EXPECT_FALSE(env.add_axiom(ge(u, 20)).ok());  // contradiction
  EXPECT_FALSE(env.add_axiom(u + 1).ok());      // not boolean
  ASSERT_TRUE(env.add_axiom(ne(u, 2)).ok());    // at the edge: narrows
  EXPECT_EQ(env.symbol(u.symbol_id()).range, ValueRange(3, 10));
}

TEST_F(ShapeEnvTest, AxiomEqualitiesBecomeReplacementsOrDivisibility) {
  ASSERT_TRUE(env.add_axiom(eq(u, 4)).ok());
  EXPECT_EQ(env.replacement(u.symbol_id()), Expr(4));
  const Expr s2 = Expr::symbol(env.create_backed_symbol("", {1, 64}, 8).value());
  ASSERT_TRUE(env.add_axiom(eq(s2, b)).ok());
  EXPECT_EQ(env.simplify(s2), b);
  EXPECT_FALSE(env.add_axiom(eq(s1, b)).ok());  // hints 16 and 8 disagree
  ASSERT_TRUE(env.add_axiom(eq(mod(b, 16), 0)).ok());
  EXPECT_EQ(env.symbol(b.symbol_id()).divisor, 16);
  EXPECT_EQ(env.statically_known(eq(mod(s2, 8), 0)), true);
}

TEST_F(ShapeEnvTest, CompoundAxiomsAreRemembered) {
  const int u1 = env.create_unbacked_symbol(true);
  const Expr v = Expr::symbol(u1);
  ASSERT_TRUE(env.add_axiom(le(u + v, 10)).ok());
  EXPECT_EQ(env.statically_known(le(u + v, 12)), true);
  EXPECT_EQ(env.statically_known(ge(u + v, 11)), false);
  EXPECT_EQ(env.bound(u + v), ValueRange(0, 10));
  // A disjunction (SEMANTICS: sym_or kept in one assert) implies any wider disjunction.
  const Expr any_odd = sym_or(eq(v, 1), eq(v, 3), eq(v, 5));
  EXPECT_EQ(env.statically_known(any_odd), std::nullopt);
  ASSERT_TRUE(env.add_axiom(any_odd).ok());
  EXPECT_EQ(env.statically_known(any_odd), true);
  EXPECT_EQ(env.statically_known(sym_or(eq(v, 1), eq(v, 3), eq(v, 5), eq(v, 7))), true);
  EXPECT_EQ(env.statically_known(sym_and(ne(v, 1), ne(v, 3), ne(v, 5))), false);
  EXPECT_EQ(env.axioms().size(), 1u);
  // Conjunctions are split.
  ASSERT_TRUE(env.add_axiom(sym_and(ge(b, 16), le(b, 512))).ok());
  EXPECT_EQ(env.symbol(b.symbol_id()).range, ValueRange(16, 512));
}

TEST_F(ShapeEnvTest, SimplifyUsesRangesForModMinMaxAndDivision) {
  ASSERT_TRUE(env.add_axiom(le(u, 7)).ok());
  EXPECT_EQ(env.simplify(mod(u, 8)), u);
  EXPECT_EQ(env.simplify(floordiv(u, 8)), Expr(0));
  EXPECT_EQ(env.simplify(max(1, b)), b);
  EXPECT_EQ(env.simplify(min(b, 0)), Expr(0));
  EXPECT_EQ(env.simplify(max(u, b + 10)), b + 10);
  EXPECT_EQ(env.simplify(ge(b, 1)), Expr::boolean(true));
  EXPECT_EQ(env.simplify(sym_and(ge(b, 1), ge(s1, 3))), ge(s1, 3));
}

TEST_F(ShapeEnvTest, EvaluateWithHints) {
  EXPECT_EQ(env.evaluate_with_hints(b * s1 + 1), 129);
  EXPECT_EQ(env.evaluate_with_hints(gt(b, 4)), 1);
  EXPECT_EQ(env.evaluate_with_hints(b + u), std::nullopt);  // unbacked
  EXPECT_EQ(env.evaluate_with_hints(floordiv(b, b - 8)), std::nullopt);  // division by zero
  ASSERT_TRUE(env.replace(u.symbol_id(), b + 1).ok());  // now computable
  EXPECT_EQ(env.evaluate_with_hints(b + u), 17);
}

TEST_F(ShapeEnvTest, AnalyzeGuardClassifiesSingleSymbolGuards) {
  GuardAnalysis g = env.analyze_guard(gt(b, 3));  // x.size(0) > 3
  EXPECT_EQ(g.kind, GuardKind::Range);
  EXPECT_EQ(g.symbol, b.symbol_id());
  EXPECT_EQ(g.range, ValueRange(4, 1024));
  g = env.analyze_guard(le(3 * b + 1, 100));  // linear: 3*s0 <= 99
  EXPECT_EQ(g.kind, GuardKind::Range);
  EXPECT_EQ(g.range, ValueRange(2, 33));
  g = env.analyze_guard(sym_not(gt(b, 100)));
  EXPECT_EQ(g.range, ValueRange(2, 100));
  g = env.analyze_guard(ne(b, 2));  // at the range edge
  EXPECT_EQ(g.kind, GuardKind::Range);
  EXPECT_EQ(g.range, ValueRange(3, 1024));
  EXPECT_EQ(env.analyze_guard(ne(b, 5)).kind, GuardKind::Other);
  g = env.analyze_guard(eq(b, 4));  // specialization
  EXPECT_EQ(g.kind, GuardKind::Replacement);
  EXPECT_EQ(g.replacement, Expr(4));
  EXPECT_EQ(g.range, ValueRange::point(4));
  EXPECT_EQ(env.analyze_guard(ge(b, 2)).kind, GuardKind::AlwaysTrue);
  EXPECT_EQ(env.analyze_guard(gt(b, 5000)).kind, GuardKind::AlwaysFalse);
}

TEST_F(ShapeEnvTest, AnalyzeGuardFindsDivisibilityAndRelations) {
  GuardAnalysis g = env.analyze_guard(eq(mod(b, 4), 0));
  EXPECT_EQ(g.kind, GuardKind::Divisibility);
  EXPECT_EQ(g.symbol, b.symbol_id());
  EXPECT_EQ(g.divisor, 4);
  g = env.analyze_guard(eq(b, s1));  // undeclared equality: s1 := s0
  EXPECT_EQ(g.kind, GuardKind::Replacement);
  EXPECT_EQ(g.symbol, s1.symbol_id());
  EXPECT_EQ(g.replacement, b);
  g = env.analyze_guard(eq(s1, b + 1));
  EXPECT_EQ(g.kind, GuardKind::Replacement);
  EXPECT_EQ(g.symbol, s1.symbol_id());
  EXPECT_EQ(g.replacement, b + 1);
  g = env.analyze_guard(eq(b, 32 * s1));  // derived dim: s0 := 32*s1
  EXPECT_EQ(g.kind, GuardKind::Replacement);
  EXPECT_EQ(g.symbol, b.symbol_id());
  EXPECT_EQ(g.replacement, 32 * s1);
  EXPECT_EQ(env.analyze_guard(ge(b + s1, 10)).kind, GuardKind::Other);
  EXPECT_EQ(env.analyze_guard(b).kind, GuardKind::Other);  // not boolean
}

TEST_F(ShapeEnvTest, AnalyzeGuardFindsDivisibilityWrittenAsExactDivision) {
  // reshape({-1, 32}) requires (s0//32)*32 == s0: the same fact as s0 % 32 == 0.
  for (Expr guard : {eq(floordiv(b, 32) * 32, b), eq(b, 32 * floordiv(b, 32)), eq(floordiv(4 * b, 32) * 32, 4 * b)}) {
    const GuardAnalysis g = env.analyze_guard(guard);
    EXPECT_EQ(g.kind, GuardKind::Divisibility) << to_string(guard, &env);
    EXPECT_EQ(g.symbol, b.symbol_id());
    EXPECT_EQ(g.divisor, guard == eq(floordiv(4 * b, 32) * 32, 4 * b) ? 8 : 32) << to_string(guard, &env);
  }
  // Not an exact division: other coefficients, or another symbol's quotient.
  EXPECT_EQ(env.analyze_guard(eq(floordiv(b, 32) * 16, b)).kind, GuardKind::Other);
  EXPECT_EQ(env.analyze_guard(eq(floordiv(s1, 32) * 32, b)).kind, GuardKind::Replacement);  // s0 := 32*(s1//32)
}

TEST_F(ShapeEnvTest, AnalyzeGuardRespectsDivisibility) {
  ASSERT_TRUE(env.add_divisibility(b, 8).ok());
  EXPECT_EQ(env.analyze_guard(ge(b, 10)).range, ValueRange(16, 1024));
}

TEST_F(ShapeEnvTest, SpecializationCopiesReasonUnderAnAxiom) {
  ShapeEnv spec = env;  // the `s0 % 16 == 0` specialization
  ASSERT_TRUE(spec.add_axiom(eq(mod(b, 16), 0)).ok());
  EXPECT_EQ(spec.statically_known(eq(mod(b, 4), 0)), true);
  EXPECT_EQ(spec.simplify(floordiv(b, 16) * 16), b);
  EXPECT_EQ(env.statically_known(eq(mod(b, 4), 0)), std::nullopt);  // the original is untouched
  ShapeEnv s32 = env;  // the `s0 == 32` specialization
  EXPECT_FALSE(s32.add_axiom(eq(b, 32)).ok());  // the example (hint 8) contradicts it
  s32.forget_hints();
  ASSERT_TRUE(s32.add_axiom(eq(b, 32)).ok());
  EXPECT_EQ(s32.simplify(floordiv(b, 4) + s1), s1 + 8);
  EXPECT_EQ(s32.evaluate_with_hints(s1), std::nullopt);
}

TEST_F(ShapeEnvTest, PrintingUsesSymbolNames) {
  EXPECT_EQ(str(b + s1), "s0 + s1");
  EXPECT_EQ(str(ge(u, 2)), "u0 >= 2");
  EXPECT_EQ(to_string(b + 1), "sym0 + 1");  // without an environment
}

}  // namespace
}  // namespace kiln::sym

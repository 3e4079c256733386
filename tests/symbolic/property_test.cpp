// Randomized checks of the whole engine against a direct (non-canonicalizing) reference
// evaluator: canonicalization, simplification under ranges and facts, range soundness,
// idempotence, postfix and print/parse round trips.
#include <gtest/gtest.h>

#include <array>
#include <cstdlib>
#include <random>

#include "kiln/export/symbolic/symbolic.h"
#include "symbolic/random_expr_testutil.h"

namespace kiln::sym {
namespace {

using testutil::RandomExprGen;
using testutil::RefNode;

constexpr int kSymbols = 3;

// KILN_SYM_SEED=<n> varies the seeds and KILN_SYM_SCALE=<k> multiplies the iteration counts,
// for longer bug hunts; the defaults keep the suite fast and deterministic.
std::uint64_t seed(std::uint64_t base) {
  const char* s = std::getenv("KILN_SYM_SEED");
  return s ? base ^ (std::strtoull(s, nullptr, 10) * 0x9e3779b97f4a7c15ULL) : base;
}
int scale() {
  const char* s = std::getenv("KILN_SYM_SCALE");
  return s ? std::max(1, std::atoi(s)) : 1;
}

std::optional<int> resolve_s(std::string_view name) {
  if (name.size() < 4 || name.substr(0, 3) != "sym") return std::nullopt;
  return std::stoi(std::string(name.substr(3)));
}

TEST(Property, CanonicalFormEvaluatesLikeTheReference) {
  RandomExprGen gen(seed(1234), kSymbols);
  std::mt19937_64 rng(seed(99));
  std::uniform_int_distribution<std::int64_t> value(-12, 12);
  int compared = 0;
  for (int i = 0; i < 1500 * scale(); ++i) {
    const RefNode n = gen.any(4);
    const Expr e = testutil::build(n);
    for (int k = 0; k < 6; ++k) {
      std::int64_t vals[kSymbols] = {value(rng), value(rng), value(rng)};
      auto want = testutil::ref_eval(n, vals);
      if (!want) continue;
      auto got = evaluate(e, vals);
      ASSERT_TRUE(got.ok()) << testutil::describe(n) << " -> " << to_string(e) << ": " << got.status().message();
      ASSERT_EQ(*got, *want) << testutil::describe(n) << " -> " << to_string(e) << " at " << vals[0] << ","
                             << vals[1] << "," << vals[2];
      ++compared;
    }
  }
  EXPECT_GT(compared, 4000);
}

void check_idempotent(Expr e) {
  if (e.args().empty()) return;
  auto rebuilt = try_build(e.op(), 0, e.args());
  ASSERT_TRUE(rebuilt.ok());
  ASSERT_EQ(*rebuilt, e) << to_string(e) << " rebuilt as " << to_string(*rebuilt);
  for (Expr a : e.args()) check_idempotent(a);
}

TEST(Property, CanonicalFormIsIdempotentAndRoundTrips) {
  RandomExprGen gen(seed(777), kSymbols);
  for (int i = 0; i < 1500 * scale(); ++i) {
    const Expr e = testutil::build(gen.any(4));
    check_idempotent(e);
    auto back = from_postfix(to_postfix(e));
    ASSERT_TRUE(back.ok()) << to_string(e) << ": " << back.status().message();
    ASSERT_EQ(*back, e) << to_string(e);
    const std::string text = to_string(e);
    auto parsed = parse_expr(text, resolve_s);
    ASSERT_TRUE(parsed.ok()) << text << ": " << parsed.status().message();
    ASSERT_EQ(*parsed, e) << text << " parsed back as " << to_string(*parsed);
  }
}

TEST(Property, BoundsContainEveryValueAndSimplifyPreservesValues) {
  RandomExprGen gen(seed(4242), kSymbols);
  std::mt19937_64 rng(seed(5));
  for (int round = 0; round < 60 * scale(); ++round) {
    ShapeEnv env;
    std::int64_t lo[kSymbols], hi[kSymbols];
    for (int s = 0; s < kSymbols; ++s) {
      lo[s] = std::uniform_int_distribution<std::int64_t>(-6, 4)(rng);
      hi[s] = lo[s] + std::uniform_int_distribution<std::int64_t>(1, 9)(rng);
      ASSERT_TRUE(env.create_backed_symbol("", {lo[s], hi[s]}, lo[s]).ok());
    }
    if (round % 3 == 1) {  // a divisibility fact on s0
      const std::int64_t d = std::uniform_int_distribution<std::int64_t>(2, 3)(rng);
      if (!env.add_divisibility(Expr::symbol(0), d).ok()) continue;
    }
    for (int i = 0; i < 40; ++i) {
      const RefNode n = gen.any(3);
      const Expr e = testutil::build(n);
      const Expr simplified = env.simplify(e);
      const ValueRange r = env.bound(e);
      for (int k = 0; k < 8; ++k) {
        std::int64_t vals[kSymbols];
        for (int s = 0; s < kSymbols; ++s) {
          const ValueRange sr = env.symbol(s).range;
          const std::int64_t d = env.symbol(s).divisor;  // ranges are rounded to multiples
          vals[s] = d * std::uniform_int_distribution<std::int64_t>(sr.lo / d, sr.hi / d)(rng);
        }
        auto want = testutil::ref_eval(n, vals);
        if (!want) continue;
        ASSERT_TRUE(r.contains(*want)) << testutil::describe(n) << " = " << *want << " outside " << to_string(r);
        auto got = evaluate(simplified, vals);
        ASSERT_TRUE(got.ok()) << to_string(simplified) << ": " << got.status().message();
        ASSERT_EQ(*got, *want) << testutil::describe(n) << " simplified to " << to_string(simplified);
        if (e.is_bool()) {
          auto known = env.statically_known(e);
          if (known) {
            ASSERT_EQ(*known, *want != 0) << testutil::describe(n);
          }
        }
      }
    }
  }
}

// Random facts (axioms: ranges, equalities, divisibility, compound conditions), then random
// queries: every answer must agree with every assignment of values that satisfies the facts.
TEST(Property, FactsNeverContradictSatisfyingValues) {
  RandomExprGen gen(seed(2024), kSymbols);
  std::mt19937_64 rng(seed(11));
  std::uniform_int_distribution<std::int64_t> value(-8, 8);
  int checked = 0;
  for (int round = 0; round < 150 * scale(); ++round) {
    ShapeEnv env;
    for (int s = 0; s < kSymbols; ++s) ASSERT_TRUE(env.create_backed_symbol("", {-8, 8}, 0).ok());
    env.forget_hints();
    std::vector<RefNode> facts;
    std::string given = " given";
    for (int f = 0; f < 2; ++f) {
      RefNode fact = gen.bool_expr(2);
      if (!env.add_axiom(testutil::build(fact)).ok()) continue;
      facts.push_back(fact);
      given += " " + testutil::describe(fact);
    }
    // Assignments satisfying every accepted fact (rejection sampling).
    std::vector<std::array<std::int64_t, kSymbols>> models;
    for (int k = 0; k < 400 && models.size() < 12; ++k) {
      std::array<std::int64_t, kSymbols> v = {value(rng), value(rng), value(rng)};
      bool ok = true;
      for (const RefNode& f : facts) ok = ok && testutil::ref_eval(f, v) == 1;
      if (ok) models.push_back(v);
    }
    for (int q = 0; q < 20; ++q) {
      const RefNode n = gen.any(3);
      const Expr e = testutil::build(n);
      const Expr simplified = env.simplify(e);
      const ValueRange r = env.bound(e);
      const auto known = env.statically_known(e);
      for (const auto& v : models) {
        auto want = testutil::ref_eval(n, v);
        if (!want) continue;
        ++checked;
        ASSERT_TRUE(r.contains(*want)) << testutil::describe(n) << " = " << *want << " outside " << to_string(r)
                                       << given << " at " << v[0] << "," << v[1] << "," << v[2];
        auto got = evaluate(simplified, v);
        ASSERT_TRUE(got.ok() && *got == *want) << testutil::describe(n) << " simplified to " << simplified << given;
        if (known) {
          ASSERT_EQ(*known, *want != 0) << testutil::describe(n) << given;
        }
      }
    }
  }
  EXPECT_GT(checked, 1000);
}

TEST(Property, ConstantsNearInt64LimitsNeverMisbehave) {
  // Folds that would overflow are skipped; whatever is built must still evaluate to the
  // reference value whenever both evaluations succeed, and must round-trip.
  RandomExprGen gen(seed(31337), kSymbols, /*big_constants=*/true);
  std::mt19937_64 rng(seed(8));
  for (int i = 0; i < 1500 * scale(); ++i) {
    const RefNode n = gen.any(3);
    const Expr e = testutil::build(n);
    auto back = from_postfix(to_postfix(e));
    ASSERT_TRUE(back.ok()) << back.status().message();
    ASSERT_EQ(*back, e) << testutil::describe(n);
    for (int k = 0; k < 4; ++k) {
      std::int64_t vals[kSymbols];
      for (std::int64_t& v : vals) v = std::uniform_int_distribution<std::int64_t>(-20, 20)(rng);
      auto want = testutil::ref_eval(n, vals);
      auto got = evaluate(e, vals);
      if (want && got.ok()) {
        ASSERT_EQ(*got, *want) << testutil::describe(n) << " -> " << e;
      }
    }
  }
}

}  // namespace
}  // namespace kiln::sym

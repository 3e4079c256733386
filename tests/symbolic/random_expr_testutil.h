// Random expression trees for property tests, with a reference evaluator that follows the
// ops' definitions directly (no canonicalization, checked arithmetic).
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "kiln/export/symbolic/expr.h"

namespace kiln::sym::testutil {

struct RefNode {
  ExprOp op;
  std::int64_t value = 0;  // Const literal / Sym id
  std::vector<RefNode> kids;
};

class RandomExprGen {
 public:
  /// `big_constants`: constants near the int64 limits, to exercise overflow handling.
  RandomExprGen(std::uint64_t seed, int symbols, bool big_constants = false)
      : rng_(seed), symbols_(symbols), big_(big_constants) {}
  RefNode int_expr(int depth);
  RefNode bool_expr(int depth);
  RefNode any(int depth) { return coin(2) ? bool_expr(depth) : int_expr(depth); }

 private:
  bool coin(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng_) == 0; }
  int pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng_); }
  std::int64_t constant(int span, int offset);
  std::mt19937_64 rng_;
  int symbols_;
  bool big_;
};

/// Builds the node with the public builders (canonicalizing).
Expr build(const RefNode& n);
/// Python semantics; nullopt on division by zero or overflow.
std::optional<std::int64_t> ref_eval(const RefNode& n, std::span<const std::int64_t> values);
/// A readable dump of the uncanonicalized tree.
std::string describe(const RefNode& n);

}  // namespace kiln::sym::testutil

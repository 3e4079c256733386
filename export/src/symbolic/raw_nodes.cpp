// Recognizing "poisoned" nodes: ones no canonical builder returns. They come from a fold that
// would overflow int64 (the builder then keeps its operands as given, see detail::guarded).
// Builders leave such nodes, and everything built over them, untouched, so that rebuilding
// any node from its operands gives the node back (postfix round trips hold). Everything
// here runs inside `intern` and must not intern.
#include <algorithm>

#include "symbolic/detail.h"

namespace kiln::sym::detail {
namespace {

// The factors of a term's base: `c*x*y` -> [x, y], anything else -> [itself].
std::span<const Expr> base_factors(const Expr& t) {
  auto args = t.args();
  return t.op() == ExprOp::Mul && args[0].is_constant() ? args.subspan(1) : std::span<const Expr>(&t, 1);
}

std::int64_t coef_of(const Expr& t) {
  auto c = t.op() == ExprOp::Mul ? t.args()[0].constant_value() : std::nullopt;
  return c ? *c : 1;
}

// canonical_compare of two terms' bases, without interning a multi-factor base as a Mul.
int compare_bases(const Expr& a, const Expr& b) {
  auto x = base_factors(a), y = base_factors(b);
  auto as_product = [](std::span<const Expr> f) -> std::optional<std::span<const Expr>> {
    if (f.size() > 1) return f;
    if (f[0].op() == ExprOp::Mul) return f[0].args();
    return std::nullopt;
  };
  auto px = as_product(x), py = as_product(y);
  if (!px && !py) return canonical_compare(x[0], y[0]);
  if (!px || !py) return op_rank(px ? ExprOp::Mul : x[0].op()) < op_rank(py ? ExprOp::Mul : y[0].op()) ? -1 : 1;
  const std::size_t n = std::min(px->size(), py->size());
  for (std::size_t i = 0; i < n; ++i) {
    if (int c = canonical_compare((*px)[i], (*py)[i])) return c;
  }
  return px->size() == py->size() ? 0 : (px->size() < py->size() ? -1 : 1);
}

// Content 1 and a positive leading coefficient, as a factor of a canonical product has.
bool is_primitive_sum(const Expr& s) {
  std::optional<std::int64_t> g = 0;
  std::optional<std::int64_t> lead;
  for (const Expr& a : s.args()) {
    auto c = a.constant_value();
    if (!c && !lead) lead = coef_of(a);
    if (g) g = gcd64(*g, c ? *c : coef_of(a));
  }
  return g == 1 && lead && *lead > 0;
}

bool sum_poisoned(std::span<const Expr> args) {
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i].op() == ExprOp::Add) return true;
    if (args[i].is_constant()) {
      if (i > 0) return true;  // one constant, first
      continue;
    }
    if (i > 0 && !args[i - 1].is_constant() && compare_bases(args[i - 1], args[i]) >= 0) return true;
  }
  return false;
}

bool product_poisoned(std::span<const Expr> args) {
  std::size_t constants = 0;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i].op() == ExprOp::Mul) return true;
    if (auto c = args[i].constant_value()) {
      if (i > 0 || *c == 0 || *c == 1) return true;
      ++constants;
    } else if (i > 0 && !args[i - 1].is_constant() && canonical_compare(args[i - 1], args[i]) > 0) {
      return true;
    }
  }
  const std::size_t factors = args.size() - constants;
  if (constants == 1 && factors == 1) return args[1].op() == ExprOp::Add;  // would distribute
  if (factors < 2) return false;
  return std::any_of(args.begin(), args.end(), [](const Expr& f) { return f.op() == ExprOp::Add && !is_primitive_sum(f); });
}

}  // namespace

bool structurally_poisoned(ExprOp op, std::span<const Expr> args) {
  for (Expr a : args) {
    if (is_poisoned(a)) return true;
  }
  switch (op) {
    case ExprOp::Add: return sum_poisoned(args);
    case ExprOp::Mul: return product_poisoned(args);
    case ExprOp::Lt:
    case ExprOp::Gt:
    case ExprOp::Not: return true;
    case ExprOp::Eq:
    case ExprOp::Ne:
    case ExprOp::Le:
    case ExprOp::Ge: {  // canonical: `e OP c`, e without constant, positive leading coefficient
      const Expr lhs = args[0];
      if (!args[1].constant_value() || lhs.is_constant()) return true;
      auto terms = lhs.op() == ExprOp::Add ? lhs.args() : std::span<const Expr>(&lhs, 1);
      std::optional<std::int64_t> g = 0;
      for (const Expr& t : terms) {
        if (t.is_constant()) return true;
        if (g) g = gcd64(*g, coef_of(t));
      }
      return coef_of(terms[0]) <= 0 || g != 1;  // and coprime coefficients
    }
    default: return false;
  }
}

}  // namespace kiln::sym::detail

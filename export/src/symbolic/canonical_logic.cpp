// Canonicalizing builders for comparisons and boolean connectives (see expr.h).
#include <algorithm>
#include <limits>
#include <map>

#include "symbolic/detail.h"

namespace kiln::sym::detail {
namespace {

bool fold_compare(ExprOp op, std::int64_t d) {  // "d OP 0"
  switch (op) {
    case ExprOp::Eq: return d == 0;
    case ExprOp::Ne: return d != 0;
    case ExprOp::Lt: return d < 0;
    case ExprOp::Le: return d <= 0;
    case ExprOp::Gt: return d > 0;
    default: return d >= 0;
  }
}

// `e OP c` with op in {Eq, Ne, Le, Ge}: positive leading coefficient, coprime coefficients.
std::optional<Expr> normalize(ExprOp op, LinearForm e, std::int64_t c) {
  if (e.terms[0].coef < 0) {
    for (Term& t : e.terms) {
      auto n = checked_neg(t.coef);
      if (!n) {
        note_overflow();
        return std::nullopt;
      }
      t.coef = *n;
    }
    auto n = checked_neg(c);
    if (!n) {
      note_overflow();
      return std::nullopt;
    }
    c = *n;
    if (op == ExprOp::Le) op = ExprOp::Ge;
    else if (op == ExprOp::Ge) op = ExprOp::Le;
  }
  e.constant = 0;
  auto g = content(e);
  if (!g) return std::nullopt;
  if (*g > 1) {
    const bool divisible = c % *g == 0;
    if (op == ExprOp::Eq && !divisible) return Expr::boolean(false);
    if (op == ExprOp::Ne && !divisible) return Expr::boolean(true);
    c = op == ExprOp::Ge ? *py_ceildiv(c, *g) : *py_floordiv(c, *g);
    e = divide(e, *g);
  }
  return intern2(op, true, from_linear(e), Expr::constant(c));
}

Expr compare_impl(ExprOp op, Expr a, Expr b) {
  auto raw = [&] { return intern2(op, true, a, b); };
  if (auto ka = a.constant_value(), kb = b.constant_value(); ka && kb) {
    return Expr::boolean(fold_compare(op, *ka < *kb ? -1 : *ka > *kb ? 1 : 0));
  }
  auto form = to_linear(sub2(a, b));
  if (!form) return raw();
  if (form->terms.empty()) return Expr::boolean(fold_compare(op, form->constant));
  // d = e + k;  d OP 0  <=>  e OP -k; over the integers x < c is x <= c - 1.
  auto c = checked_neg(form->constant);
  if (c && op == ExprOp::Lt) c = checked_sub(*c, 1);
  if (c && op == ExprOp::Gt) c = checked_add(*c, 1);
  if (!c) {
    note_overflow();
    return raw();
  }
  ExprOp nop = op == ExprOp::Lt ? ExprOp::Le : op == ExprOp::Gt ? ExprOp::Ge : op;
  auto out = normalize(nop, std::move(*form), *c);
  return out ? *out : raw();
}

}  // namespace

Expr build_not(Expr a) {
  if (auto v = a.bool_value()) return Expr::boolean(!*v);
  if (is_poisoned(a)) return intern(ExprOp::Not, true, 0, std::span<const Expr>(&a, 1));
  auto args = a.args();
  switch (a.op()) {
    case ExprOp::Eq: return build_compare(ExprOp::Ne, args[0], args[1]);
    case ExprOp::Ne: return build_compare(ExprOp::Eq, args[0], args[1]);
    case ExprOp::Lt: return build_compare(ExprOp::Ge, args[0], args[1]);
    case ExprOp::Le: return build_compare(ExprOp::Gt, args[0], args[1]);
    case ExprOp::Gt: return build_compare(ExprOp::Le, args[0], args[1]);
    case ExprOp::Ge: return build_compare(ExprOp::Lt, args[0], args[1]);
    case ExprOp::Not: return args[0];
    case ExprOp::And:
    case ExprOp::Or: {
      std::vector<Expr> negated;
      for (Expr x : args) negated.push_back(build_not(x));
      return build_logic(a.op() == ExprOp::And ? ExprOp::Or : ExprOp::And, negated);
    }
    default: {
      const Expr one[] = {a};
      return intern(ExprOp::Not, true, 0, one);
    }
  }
}

namespace {

struct Bounds {
  std::optional<std::int64_t> lo, hi;
  std::vector<std::int64_t> excluded;
  int count = 0;
};

// In a conjunction, merges `e >= c`, `e <= c`, `e == c`, `e != c` over the same `e`.
// Returns false when the conjunction is unsatisfiable.
bool merge_bounds(std::vector<Expr>& xs) {
  std::map<Expr, Bounds, ExprLess> by_lhs;
  std::vector<Expr> others;
  for (Expr x : xs) {
    auto c = is_comparison(x.op()) ? x.args()[1].constant_value() : std::nullopt;
    if (!c || x.op() == ExprOp::Lt || x.op() == ExprOp::Gt) {
      others.push_back(x);
      continue;
    }
    Bounds& b = by_lhs[x.args()[0]];
    ++b.count;
    if (x.op() == ExprOp::Ne) b.excluded.push_back(*c);
    if (x.op() == ExprOp::Eq || x.op() == ExprOp::Ge) b.lo = b.lo ? std::max(*b.lo, *c) : *c;
    if (x.op() == ExprOp::Eq || x.op() == ExprOp::Le) b.hi = b.hi ? std::min(*b.hi, *c) : *c;
  }
  for (auto& [e, b] : by_lhs) {
    std::sort(b.excluded.begin(), b.excluded.end());
    auto is_excluded = [&](std::int64_t v) { return std::binary_search(b.excluded.begin(), b.excluded.end(), v); };
    while (b.lo && is_excluded(*b.lo) && *b.lo < std::numeric_limits<std::int64_t>::max()) ++*b.lo;
    while (b.hi && is_excluded(*b.hi) && *b.hi > std::numeric_limits<std::int64_t>::min()) --*b.hi;
    if (b.lo && b.hi && *b.lo > *b.hi) return false;
    if (b.lo && b.hi && *b.lo == *b.hi) {
      if (is_excluded(*b.lo)) return false;
      others.push_back(intern2(ExprOp::Eq, true, e, Expr::constant(*b.lo)));
      continue;
    }
    if (b.lo) others.push_back(intern2(ExprOp::Ge, true, e, Expr::constant(*b.lo)));
    if (b.hi) others.push_back(intern2(ExprOp::Le, true, e, Expr::constant(*b.hi)));
    for (std::int64_t v : b.excluded) {
      if ((!b.lo || v > *b.lo) && (!b.hi || v < *b.hi)) others.push_back(intern2(ExprOp::Ne, true, e, Expr::constant(v)));
    }
  }
  xs = std::move(others);
  return true;
}

Expr logic_impl(ExprOp op, std::span<const Expr> xs) {
  const bool absorbing = op == ExprOp::Or;  // Or: true absorbs; And: false absorbs
  std::vector<Expr> args;
  for (Expr x : xs) {
    for (Expr a : x.op() == op ? x.args() : std::span<const Expr>(&x, 1)) {
      if (auto v = a.bool_value()) {
        if (*v == absorbing) return Expr::boolean(absorbing);
      } else {
        args.push_back(a);
      }
    }
  }
  if (op == ExprOp::And && !merge_bounds(args)) return Expr::boolean(false);
  std::sort(args.begin(), args.end(), ExprLess{});
  args.erase(std::unique(args.begin(), args.end()), args.end());
  for (Expr a : args) {
    SpeculativeScope probe;
    if (std::binary_search(args.begin(), args.end(), build_not(a), ExprLess{})) return Expr::boolean(absorbing);
  }
  if (args.empty()) return Expr::boolean(!absorbing);
  if (args.size() == 1) return args[0];
  return intern(op, true, 0, args);
}

}  // namespace

Expr build_compare(ExprOp op, Expr a, Expr b) {
  const Expr args[] = {a, b};
  return guarded(op, true, args, [&] { return compare_impl(op, a, b); });
}

Expr build_logic(ExprOp op, std::span<const Expr> xs) {
  return guarded(op, true, xs, [&] { return logic_impl(op, xs); });
}

}  // namespace kiln::sym::detail

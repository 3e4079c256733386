// ShapeEnv queries: simplify, bound, statically_known, hints, guard analysis. All const.
#include <algorithm>

#include "kiln/export/symbolic/shape_env.h"
#include "symbolic/detail.h"

namespace kiln::sym {

struct ShapeEnv::QueryCache {
  std::unordered_map<Expr, Expr> simplified;
  std::unordered_map<Expr, ValueRange> bounds;
};

namespace {

std::optional<std::int64_t> positive_constant(Expr e) {
  auto k = e.constant_value();
  return k && *k > 0 ? k : std::nullopt;
}

bool args_constant_rhs(Expr e) { return e.args()[1].constant_value().has_value(); }

std::span<const Expr> disjuncts(const Expr& e) {
  return e.op() == ExprOp::Or ? e.args() : std::span<const Expr>(&e, 1);
}

// a implies b when a's disjuncts are a subset of b's.
bool implies(Expr a, Expr b) {
  if (a == b) return true;
  auto da = disjuncts(a), db = disjuncts(b);
  return std::all_of(da.begin(), da.end(), [&](Expr x) { return std::find(db.begin(), db.end(), x) != db.end(); });
}

}  // namespace

Expr ShapeEnv::simplify(Expr e) const {
  QueryCache cache;
  return simplify_rec(e, cache);
}

Expr ShapeEnv::simplify_rec(Expr e, QueryCache& cache) const {
  if (e.is_constant()) return e;
  if (e.is_symbol()) {
    auto it = replacements_.find(e.symbol_id());
    return it == replacements_.end() ? e : simplify_rec(it->second, cache);
  }
  if (auto it = cache.simplified.find(e); it != cache.simplified.end()) return it->second;
  std::vector<Expr> args;
  bool changed = false;
  for (Expr a : e.args()) {
    args.push_back(simplify_rec(a, cache));
    changed |= !(args.back() == a);
  }
  Expr rebuilt = e;
  if (changed) {
    auto r = try_build(e.op(), 0, args);
    if (r.ok()) rebuilt = *r;  // cannot fail: replacements keep types
  }
  Expr out = simplify_node(rebuilt, cache);
  cache.simplified.emplace(e, out);
  return out;
}

bool ShapeEnv::divisible(Expr x, std::int64_t k) const {
  const std::int64_t d = divisor_of(x);
  return d == 0 || d % k == 0;
}

// Top-level rules on a node whose operands are already simplified.
Expr ShapeEnv::simplify_node(Expr e, QueryCache& cache) const {
  if (e.is_bool()) return simplify_bool(e, cache);
  if (auto r = bound_rec(e, cache); r.is_point()) return Expr::constant(r.lo);
  auto args = e.args();
  switch (e.op()) {
    case ExprOp::Mod: {
      auto k = positive_constant(args[1]);
      if (!k) break;
      if (divisible(args[0], *k)) return Expr::constant(0);
      const ValueRange b = bound_rec(args[0], cache);
      if (b.lo >= 0 && b.hi < *k) return args[0];
      break;
    }
    case ExprOp::CeilDiv: {
      auto k = positive_constant(args[1]);
      if (k && divisible(args[0], *k)) return detail::build_floordiv(args[0], args[1]);
      break;
    }
    case ExprOp::Mul: return cancel_exact_division(e, cache);
    case ExprOp::Min:
    case ExprOp::Max: return drop_dominated(e, cache);
    default: break;
  }
  return e;
}

Expr ShapeEnv::simplify_bool(Expr e, QueryCache& cache) const {
  if (e.is_constant()) return e;
  if ((e.op() == ExprOp::Eq || e.op() == ExprOp::Ne) && args_constant_rhs(e)) {
    const std::int64_t d = divisor_of(e.args()[0]);  // e == c has no solution if d does not divide c
    if (d > 1 && *detail::py_mod(*e.args()[1].constant_value(), d) != 0) return Expr::boolean(e.op() == ExprOp::Ne);
  }
  if (is_axiom(e)) return Expr::boolean(true);
  if (is_axiom(detail::build_not(e))) return Expr::boolean(false);
  if (auto v = bound_rec(e, cache).as_bool()) return Expr::boolean(*v);
  return e;
}

// c * (x // k) * rest == (c / k) * x * rest when k divides both x and c.
Expr ShapeEnv::cancel_exact_division(Expr e, QueryCache& cache) const {
  auto args = e.args();
  auto c = args[0].constant_value();
  for (std::size_t i = 1; c && i < args.size(); ++i) {
    auto k = args[i].op() == ExprOp::FloorDiv ? positive_constant(args[i].args()[1]) : std::nullopt;
    if (!k || *c % *k != 0 || !divisible(args[i].args()[0], *k)) continue;
    std::vector<Expr> factors(args.begin(), args.end());
    factors[0] = Expr::constant(*c / *k);
    factors[i] = args[i].args()[0];
    return simplify_node(detail::build_mul(factors), cache);
  }
  return e;
}

// Max drops an operand whose range lies below another's (Min: above).
Expr ShapeEnv::drop_dominated(Expr e, QueryCache& cache) const {
  auto args = e.args();
  const bool is_max = e.op() == ExprOp::Max;
  std::vector<Expr> kept;
  for (Expr a : args) {
    const ValueRange ra = bound_rec(a, cache);
    const bool dominated = std::any_of(args.begin(), args.end(), [&](Expr b) {
      if (a == b) return false;
      const ValueRange rb = bound_rec(b, cache);
      return is_max ? ra.hi <= rb.lo : ra.lo >= rb.hi;
    });
    if (!dominated) kept.push_back(a);
  }
  if (kept.empty()) kept.push_back(args[0]);  // all ranges equal points: any operand will do
  return kept.size() != args.size() ? detail::build_minmax(e.op(), kept) : e;
}

ValueRange ShapeEnv::bound(Expr e) const {
  QueryCache cache;
  return bound_rec(simplify_rec(e, cache), cache);
}

ValueRange ShapeEnv::bound_rec(Expr e, QueryCache& cache) const {
  if (auto it = cache.bounds.find(e); it != cache.bounds.end()) return it->second;
  ValueRange r = bound_node(e, cache);
  if (auto it = expr_bounds_.find(e); it != expr_bounds_.end()) r = intersect(r, it->second);
  if (e.is_bool() && !e.is_constant()) {
    if (is_axiom(e)) r = ValueRange::boolean(true);
    else if (is_axiom(detail::build_not(e))) r = ValueRange::boolean(false);
  }
  cache.bounds.emplace(e, r);
  return r;
}

ValueRange ShapeEnv::bound_node(Expr e, QueryCache& cache) const {
  auto args = e.args();
  switch (e.op()) {
    case ExprOp::Const: return e.is_bool() ? ValueRange::boolean(*e.bool_value()) : ValueRange::point(*e.constant_value());
    case ExprOp::Sym: {
      const ValueRange own = symbol(e.symbol_id()).range;
      auto it = replacements_.find(e.symbol_id());
      return it == replacements_.end() ? own : intersect(own, bound_rec(it->second, cache));
    }
    case ExprOp::Neg: return range_neg(bound_rec(args[0], cache));
    case ExprOp::Not: return range_not(bound_rec(args[0], cache));
    default: break;
  }
  using RangeOp = ValueRange (*)(const ValueRange&, const ValueRange&);
  RangeOp f = nullptr;
  switch (e.op()) {
    case ExprOp::Add: f = range_add; break;
    case ExprOp::Mul: f = range_mul; break;
    case ExprOp::Min: f = range_min; break;
    case ExprOp::Max: f = range_max; break;
    case ExprOp::And: f = range_and; break;
    case ExprOp::Or: f = range_or; break;
    case ExprOp::FloorDiv: f = range_floordiv; break;
    case ExprOp::CeilDiv: f = range_ceildiv; break;
    case ExprOp::Mod: f = range_mod; break;
    case ExprOp::Eq: f = range_eq; break;
    case ExprOp::Ne: f = range_ne; break;
    case ExprOp::Lt: f = range_lt; break;
    case ExprOp::Le: f = range_le; break;
    case ExprOp::Gt: f = range_gt; break;
    default: f = range_ge; break;
  }
  ValueRange r = bound_rec(args[0], cache);
  for (std::size_t i = 1; i < args.size(); ++i) r = f(r, bound_rec(args[i], cache));
  return r;
}

std::int64_t ShapeEnv::divisor_of(Expr e) const {
  std::int64_t d = 1;
  if (auto c = e.constant_value()) {
    auto g = detail::gcd64(*c, 0);
    d = g ? *g : 1;
  } else if (e.is_symbol()) {
    d = symbol(e.symbol_id()).divisor;
  } else if (e.op() == ExprOp::Mul) {
    for (Expr f : e.args()) {
      auto p = detail::checked_mul(d, divisor_of(f));
      if (!p) break;  // the partial product still divides e
      d = *p;
    }
  } else if (e.op() == ExprOp::Add) {
    d = 0;
    for (Expr t : e.args()) d = detail::gcd64(d, divisor_of(t)).value_or(1);
  }
  if (d == 0 || expr_divisors_.empty()) return d;
  // A recorded fact about e, or about e / g for its content g (`2*s1 + 2` from `s1 + 1`).
  auto known = [&](Expr x, std::int64_t scale) {
    auto it = expr_divisors_.find(x);
    auto k = it == expr_divisors_.end() ? std::nullopt : detail::checked_mul(it->second, scale);
    auto g = k ? detail::gcd64(d, *k) : std::nullopt;
    auto l = g && *g != 0 ? detail::checked_mul(d / *g, *k) : std::nullopt;
    if (l) d = *l;
  };
  known(e, 1);
  auto form = e.op() == ExprOp::Add ? detail::to_linear(e) : std::nullopt;
  auto g = form ? detail::content(*form) : std::nullopt;
  if (g && *g > 1) {
    detail::LinearForm unit = detail::divide(*form, *g);
    known(detail::from_linear(unit), *g);
    if (!unit.terms.empty() && unit.terms[0].coef < 0) known(-detail::from_linear(unit), *g);
  }
  return d;
}

bool ShapeEnv::is_axiom(Expr b) const { return std::find(axioms_.begin(), axioms_.end(), b) != axioms_.end(); }

std::optional<bool> ShapeEnv::statically_known(Expr e) const {
  if (!e.is_bool()) return std::nullopt;
  QueryCache cache;
  const Expr s = simplify_rec(e, cache);
  if (auto v = s.bool_value()) return *v;
  const Expr not_s = detail::build_not(s);
  for (Expr a : axioms_) {
    if (implies(a, s)) return true;
    if (implies(a, not_s)) return false;
  }
  return std::nullopt;
}

std::optional<std::int64_t> ShapeEnv::evaluate_with_hints(Expr e) const {
  auto r = evaluate(simplify(e), [this](int id) -> std::optional<std::int64_t> {
    return is_valid_symbol(id) ? symbol(id).hint : std::nullopt;
  });
  return r.ok() ? std::optional<std::int64_t>(*r) : std::nullopt;
}

std::vector<int> ShapeEnv::free_symbols(Expr e) const { return sym::free_symbols(simplify(e)); }

namespace {

// (symbol, k) when `e == c` says `s == k*(s//k)`, that is `s % k == 0`: the linear form
// `a*s - a*k*(s//k)` with c == 0 (either sign).
std::optional<std::pair<int, std::int64_t>> exact_division_of_symbol(Expr e, std::int64_t c) {
  auto form = detail::to_linear(e);
  if (c != 0 || !form || form->constant != 0 || form->terms.size() != 2) return std::nullopt;
  for (int i = 0; i < 2; ++i) {
    const detail::Term& x = form->terms[static_cast<std::size_t>(i)];
    const detail::Term& q = form->terms[static_cast<std::size_t>(1 - i)];
    if (!x.base.is_symbol() || q.base.op() != ExprOp::FloorDiv || q.base.args()[0] != x.base) continue;
    const auto k = positive_constant(q.base.args()[1]);
    const auto ak = k ? detail::checked_mul(x.coef, *k) : std::nullopt;
    if (ak && *k > 1 && q.coef == -*ak) return std::make_pair(x.base.symbol_id(), *k);
  }
  return std::nullopt;
}

}  // namespace

GuardAnalysis ShapeEnv::analyze_guard(Expr guard) const {
  GuardAnalysis out;
  if (!guard.is_bool()) return out;
  if (auto v = statically_known(guard)) {
    out.kind = *v ? GuardKind::AlwaysTrue : GuardKind::AlwaysFalse;
    return out;
  }
  const Expr g = simplify(guard);
  auto c = is_comparison(g.op()) ? g.args()[1].constant_value() : std::nullopt;
  if (!c) return out;
  const Expr e = g.args()[0];
  if (e.is_symbol() && g.op() != ExprOp::Eq) {
    const SymbolInfo& info = symbol(e.symbol_id());
    ValueRange r = info.range;
    if (g.op() == ExprOp::Ge) r.lo = std::max(r.lo, *c);
    else if (g.op() == ExprOp::Le) r.hi = std::min(r.hi, *c);
    else if (g.op() == ExprOp::Ne && *c == r.lo) r.lo = *c + 1;  // finite: statically_known failed
    else if (g.op() == ExprOp::Ne && *c == r.hi) r.hi = *c - 1;
    else return out;
    out.kind = GuardKind::Range;
    out.symbol = e.symbol_id();
    out.range = detail::round_to_divisor(r, info.divisor);
    return out;
  }
  if (g.op() != ExprOp::Eq) return out;
  if (*c == 0 && e.op() == ExprOp::Mod && e.args()[0].is_symbol()) {
    if (auto k = positive_constant(e.args()[1])) {
      out.kind = GuardKind::Divisibility;
      out.symbol = e.args()[0].symbol_id();
      out.divisor = *k;
      return out;
    }
  }
  if (auto d = exact_division_of_symbol(e, *c)) {  // s == k*(s//k), as reshape({-1, k}) requires
    out.kind = GuardKind::Divisibility;
    out.symbol = d->first;
    out.divisor = d->second;
    return out;
  }
  if (auto solved = solve_for_symbol(e, *c)) {
    out.kind = GuardKind::Replacement;
    out.symbol = solved->first;
    out.replacement = solved->second;
    if (auto v = solved->second.constant_value()) out.range = ValueRange::point(*v);
  }
  return out;
}

}  // namespace kiln::sym

// ShapeEnv: the symbol table and recording facts (ranges, replacements, divisibility, axioms).
#include "kiln/export/symbolic/shape_env.h"

#include <algorithm>

#include "kiln/export/symbolic/print.h"
#include "symbolic/detail.h"

namespace kiln::sym {
namespace {

Status env_error(const std::string& message) {
  return Status(StatusCode::kExportError, "[ShapeEnv] " + message);
}

std::optional<std::int64_t> lcm64(std::int64_t a, std::int64_t b) {
  auto g = detail::gcd64(a, b);
  if (!g || *g == 0) return std::nullopt;
  return detail::checked_mul(a / *g, b);
}

}  // namespace

namespace detail {
ValueRange round_to_divisor(ValueRange r, std::int64_t d) {
  if (d <= 1 || r.is_empty()) return r;
  const ValueRange empty{1, 0};
  if (r.lo != kNegInf) {
    auto lo = detail::checked_mul(*detail::py_ceildiv(r.lo, d), d);
    if (!lo || *lo == kPosInf) return empty;
    r.lo = *lo;
  }
  if (r.hi != kPosInf) {
    auto hi = detail::checked_mul(*detail::py_floordiv(r.hi, d), d);
    if (!hi || *hi == kNegInf) return empty;
    r.hi = *hi;
  }
  return r;
}
}  // namespace detail

using detail::round_to_divisor;

// Runs a mutation; if it fails, the environment is restored to its state before the call.
// Facts applied by nested calls belong to the outermost transaction.
template <typename F>
Status ShapeEnv::transaction(F&& body) {
  if (in_transaction_) return body();
  ShapeEnv saved = *this;
  in_transaction_ = true;
  Status st = body();
  in_transaction_ = false;
  if (!st.ok()) *this = std::move(saved);
  return st;
}

Status ShapeEnv::constrain_range(int sym, std::int64_t lo, std::int64_t hi) {
  return transaction([&] { return constrain_range_impl(sym, lo, hi); });
}
Status ShapeEnv::replace(int sym, Expr e) {
  return transaction([&] { return replace_impl(sym, e); });
}
Status ShapeEnv::add_divisibility(Expr e, std::int64_t k) {
  return transaction([&] { return add_divisibility_impl(e, k); });
}
Status ShapeEnv::add_axiom(Expr fact) {
  return transaction([&] { return add_axiom_impl(fact); });
}

void ShapeEnv::forget_hints() {
  for (SymbolInfo& info : symbols_) info.hint.reset();
}

Result<int> ShapeEnv::create_backed_symbol(std::string_view user_name, ValueRange range, std::int64_t hint) {
  const std::string label = "s" + std::to_string(backed_count_) +
                            (user_name.empty() ? "" : " ('" + std::string(user_name) + "')");
  if (range.is_empty()) return env_error(label + ": empty range " + to_string(range));
  if (!range.contains(hint)) {
    return env_error(label + ": hint " + std::to_string(hint) + " outside range " + to_string(range));
  }
  SymbolInfo info;
  info.name = "s" + std::to_string(backed_count_++);
  info.kind = SymbolKind::Backed;
  info.range = range;
  info.hint = hint;
  info.user_name = std::string(user_name);
  symbols_.push_back(std::move(info));
  return static_cast<int>(symbols_.size() - 1);
}

int ShapeEnv::create_unbacked_symbol(bool is_size) {
  SymbolInfo info;
  info.name = "u" + std::to_string(unbacked_count_++);
  info.kind = SymbolKind::Unbacked;
  info.range = is_size ? ValueRange::size() : ValueRange::unbounded();
  info.is_size = is_size;
  symbols_.push_back(std::move(info));
  return static_cast<int>(symbols_.size() - 1);
}

std::optional<int> ShapeEnv::find_symbol(std::string_view name) const {
  for (std::size_t i = 0; i < symbols_.size(); ++i) {
    if (symbols_[i].name == name) return static_cast<int>(i);
  }
  return std::nullopt;
}

std::optional<Expr> ShapeEnv::replacement(int sym) const {
  auto it = replacements_.find(sym);
  if (it == replacements_.end()) return std::nullopt;
  return simplify(it->second);
}

Status ShapeEnv::set_range(int sym, ValueRange r) {
  SymbolInfo& info = symbols_[static_cast<std::size_t>(sym)];
  r = round_to_divisor(intersect(info.range, r), info.divisor);
  if (r.is_empty()) {
    return env_error("symbol " + info.name + ": range " + to_string(info.range) + " narrowed by " +
                     to_string(r) + (info.divisor > 1 ? " (multiple of " + std::to_string(info.divisor) + ")" : "") +
                     " is empty");
  }
  if (r == info.range) return Status::Ok();
  info.range = r;
  if (auto it = replacements_.find(sym); it != replacements_.end()) return narrow_expression(it->second, r);
  if (r.is_point()) return replace(sym, Expr::constant(r.lo));
  return Status::Ok();
}

Status ShapeEnv::constrain_range_impl(int sym, std::int64_t lo, std::int64_t hi) {
  if (!is_valid_symbol(sym)) return env_error("constrain_range: no symbol " + std::to_string(sym));
  ValueRange r{lo, hi};
  if (r.is_empty()) return env_error("constrain_range: empty range " + to_string(r));
  return set_range(sym, r);
}

Status ShapeEnv::narrow_expression(Expr e, ValueRange r) {
  if (r.lo != kNegInf) KILN_RETURN_IF_ERROR(apply_comparison(simplify(ge(e, r.lo))));
  if (r.hi != kPosInf) KILN_RETURN_IF_ERROR(apply_comparison(simplify(le(e, r.hi))));
  return Status::Ok();
}

Status ShapeEnv::replace_impl(int sym, Expr e) {
  if (!is_valid_symbol(sym)) return env_error("replace: no symbol " + std::to_string(sym));
  if (e.is_bool()) return env_error("replace: boolean replacement for " + symbol(sym).name);
  e = simplify(e);
  if (e == Expr::symbol(sym)) return Status::Ok();
  if (auto current = replacement(sym)) return add_axiom(eq(*current, e));
  const SymbolInfo info = symbol(sym);
  const std::string what = info.name + " := " + to_string(e, this);
  if (contains_symbol(e, sym)) return env_error("replace: " + what + " is cyclic");
  if (intersect(bound(e), info.range).is_empty()) {
    return env_error("replace: " + what + " contradicts range " + to_string(info.range));
  }
  if (auto v = info.hint ? evaluate_with_hints(e) : std::nullopt; v && *v != *info.hint) {
    return env_error("replace: " + what + " = " + std::to_string(*v) + " contradicts hint " + std::to_string(*info.hint));
  }
  replacements_[sym] = e;
  symbols_[static_cast<std::size_t>(sym)].range = intersect(info.range, bound(e));
  KILN_RETURN_IF_ERROR(refresh());
  KILN_RETURN_IF_ERROR(narrow_expression(e, info.range));
  if (info.divisor > 1) KILN_RETURN_IF_ERROR(add_divisibility(e, info.divisor));
  return Status::Ok();
}

Status ShapeEnv::add_divisibility_impl(Expr e, std::int64_t k) {
  if (k < 1) return env_error("add_divisibility: divisor " + std::to_string(k) + " < 1");
  if (e.is_bool()) return env_error("add_divisibility: boolean expression");
  e = simplify(e);
  if (auto c = e.constant_value()) {
    if (*detail::py_mod(*c, k) == 0) return Status::Ok();
    return env_error("add_divisibility: " + std::to_string(*c) + " is not a multiple of " + std::to_string(k));
  }
  if (auto form = detail::to_linear(e); form && !form->terms.empty()) {  // (4*s0) % 8 -> s0 % 2
    auto g = detail::content(*form);
    const std::int64_t h = g ? *detail::gcd64(*g, k) : 1;
    const bool negative = form->terms[0].coef < 0;
    if (h > 1 || negative) {
      const Expr unit = detail::from_linear(detail::divide(*form, h));
      return add_divisibility(negative ? -unit : unit, k / h);
    }
  }
  const std::int64_t known = divisor_of(e);
  if (k == 1 || known == 0 || known % k == 0) return Status::Ok();
  auto l = lcm64(std::max<std::int64_t>(known, 1), k);
  if (!l) return Status::Ok();  // too large to represent: forget the fact (still sound)
  if (e.is_symbol()) {
    symbols_[static_cast<std::size_t>(e.symbol_id())].divisor = *l;
    return set_range(e.symbol_id(), ValueRange::unbounded());  // re-rounds the range
  }
  expr_divisors_[e] = *l;
  return Status::Ok();
}

std::optional<std::pair<int, Expr>> ShapeEnv::solve_for_symbol(Expr lhs, std::int64_t rhs) const {
  auto form = detail::to_linear(lhs);
  if (!form) return std::nullopt;
  std::optional<std::size_t> pick;
  for (std::size_t i = 0; i < form->terms.size(); ++i) {
    const detail::Term& t = form->terms[i];
    if (!t.base.is_symbol() || (t.coef != 1 && t.coef != -1)) continue;
    bool alone = true;  // the symbol must not occur in another term
    for (std::size_t j = 0; j < form->terms.size() && alone; ++j) {
      alone = j == i || !contains_symbol(form->terms[j].base, t.base.symbol_id());
    }
    if (alone && (!pick || t.base.symbol_id() > form->terms[*pick].base.symbol_id())) pick = i;
  }
  if (!pick) return std::nullopt;
  const detail::Term t = form->terms[*pick];
  form->terms.erase(form->terms.begin() + static_cast<std::ptrdiff_t>(*pick));
  Expr rest = detail::from_linear(*form);  // coef*s + rest == rhs
  Expr value = t.coef == 1 ? Expr::constant(rhs) - rest : rest - Expr::constant(rhs);
  return std::make_pair(t.base.symbol_id(), value);
}

Status ShapeEnv::apply_comparison(Expr f) {
  if (auto v = f.bool_value()) return *v ? Status::Ok() : env_error("fact contradicts known facts");
  auto c = is_comparison(f.op()) ? f.args()[1].constant_value() : std::nullopt;
  if (!c || f.op() == ExprOp::Lt || f.op() == ExprOp::Gt) {
    axioms_.push_back(f);
    return Status::Ok();
  }
  const Expr e = f.args()[0];
  const ExprOp op = f.op();
  if (e.is_symbol()) {
    const int s = e.symbol_id();
    const ValueRange r = symbol(s).range;
    if (op == ExprOp::Ge) return set_range(s, ValueRange::at_least(*c));
    if (op == ExprOp::Le) return set_range(s, ValueRange::at_most(*c));
    if (op == ExprOp::Eq) return replace(s, Expr::constant(*c));
    if (*c == r.lo && r.lo != kPosInf) return set_range(s, ValueRange::at_least(*c + 1));
    if (*c == r.hi && r.hi != kNegInf) return set_range(s, ValueRange::at_most(*c - 1));
    axioms_.push_back(f);
    return Status::Ok();
  }
  if (op == ExprOp::Eq && *c == 0 && e.op() == ExprOp::Mod) {
    auto k = e.args()[1].constant_value();
    if (k && *k > 0) return add_divisibility(e.args()[0], *k);
  }
  if (op == ExprOp::Eq) {
    if (auto solved = solve_for_symbol(e, *c)) return replace(solved->first, solved->second);
  }
  if (op == ExprOp::Ne) {
    axioms_.push_back(f);
    return Status::Ok();
  }
  ValueRange r = op == ExprOp::Eq ? ValueRange::point(*c) : op == ExprOp::Ge ? ValueRange::at_least(*c) : ValueRange::at_most(*c);
  auto it = expr_bounds_.find(e);
  r = intersect(r, it == expr_bounds_.end() ? ValueRange::unbounded() : it->second);
  if (r.is_empty()) return env_error("fact " + to_string(f, this) + " contradicts known facts");
  if (r.is_point()) {
    if (auto solved = solve_for_symbol(e, r.lo)) return replace(solved->first, solved->second);
  }
  expr_bounds_[e] = r;
  return Status::Ok();
}

Status ShapeEnv::add_axiom_impl(Expr fact) {
  if (!fact.is_bool()) return env_error("add_axiom: integer expression " + to_string(fact, this));
  const Expr f = simplify(fact);
  if (auto v = f.bool_value()) {
    if (*v) return Status::Ok();
    return env_error("axiom " + to_string(fact, this) + " is false given the known facts");
  }
  if (f.op() == ExprOp::And) {
    for (Expr part : f.args()) KILN_RETURN_IF_ERROR(add_axiom(part));
    return Status::Ok();
  }
  if (is_comparison(f.op())) return apply_comparison(f);
  if (!is_axiom(f)) axioms_.push_back(f);
  return Status::Ok();
}

Status ShapeEnv::refresh() {
  for (auto& [sym, e] : replacements_) e = simplify(e);
  auto bounds = std::move(expr_bounds_);
  auto divisors = std::move(expr_divisors_);
  auto axioms = std::move(axioms_);
  expr_bounds_.clear();
  expr_divisors_.clear();
  axioms_.clear();
  for (const auto& [e, k] : divisors) KILN_RETURN_IF_ERROR(add_divisibility(e, k));
  for (const auto& [e, r] : bounds) KILN_RETURN_IF_ERROR(narrow_expression(e, r));
  for (Expr a : axioms) KILN_RETURN_IF_ERROR(add_axiom(a));
  return Status::Ok();
}

}  // namespace kiln::sym

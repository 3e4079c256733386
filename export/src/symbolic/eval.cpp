// Walks over expressions: free symbols, substitution, exact evaluation.
#include <algorithm>
#include <limits>
#include <stdexcept>
#include <unordered_set>

#include "symbolic/detail.h"

namespace kiln::sym {
namespace {

void collect_symbols(Expr e, std::unordered_set<Expr>& seen, std::vector<int>& out) {
  if (!seen.insert(e).second) return;
  if (e.is_symbol()) out.push_back(e.symbol_id());
  for (Expr a : e.args()) collect_symbols(a, seen, out);
}

Expr substitute_rec(Expr e, const std::unordered_map<int, Expr>& repl, std::unordered_map<Expr, Expr>& memo) {
  if (e.is_symbol()) {
    auto it = repl.find(e.symbol_id());
    return it == repl.end() ? e : it->second;
  }
  if (e.args().empty()) return e;
  if (auto it = memo.find(e); it != memo.end()) return it->second;
  std::vector<Expr> args;
  bool changed = false;
  for (Expr a : e.args()) {
    args.push_back(substitute_rec(a, repl, memo));
    changed |= !(args.back() == a);
  }
  Expr out = e;
  if (changed) {
    auto r = try_build(e.op(), 0, args);
    if (!r.ok()) throw std::invalid_argument("[substitute] " + r.status().message());
    out = *r;
  }
  memo.emplace(e, out);
  return out;
}

using ValueOf = std::function<std::optional<std::int64_t>(int)>;

Status eval_error(Expr e, const std::string& what) {
  return Status(StatusCode::kInvalidInput, std::string("[evaluate] ") + expr_op_name(e.op()) + ": " + what);
}

Result<std::int64_t> eval_rec(Expr e, const ValueOf& value_of);

__extension__ using Wide = __int128;

// Sums and products accumulate in 128 bits, so only a result outside int64 is an overflow
// (not an intermediate that the operand order happened to produce).
Result<std::int64_t> eval_nary(Expr e, const ValueOf& value_of) {
  const ExprOp op = e.op();
  Wide acc = op == ExprOp::Mul || op == ExprOp::And ? 1 : 0;
  bool first = true, overflow = false;
  for (Expr a : e.args()) {
    KILN_ASSIGN_OR_RETURN(std::int64_t v, eval_rec(a, value_of));
    switch (op) {
      case ExprOp::Add: overflow |= __builtin_add_overflow(acc, v, &acc); break;
      case ExprOp::Mul: overflow |= __builtin_mul_overflow(acc, v, &acc); break;
      case ExprOp::Min: acc = first ? v : std::min<Wide>(acc, v); break;
      case ExprOp::Max: acc = first ? v : std::max<Wide>(acc, v); break;
      case ExprOp::And: if (!v) return 0; break;
      default: if (v) return 1; break;  // Or
    }
    first = false;
  }
  if (op == ExprOp::Mul && acc == 0) return 0;  // a zero factor decides, whatever overflowed
  if (overflow || acc < std::numeric_limits<std::int64_t>::min() || acc > std::numeric_limits<std::int64_t>::max()) {
    return eval_error(e, "integer overflow");
  }
  return static_cast<std::int64_t>(acc);
}

Result<std::int64_t> eval_binary(Expr e, std::int64_t a, std::int64_t b) {
  std::optional<std::int64_t> r;
  switch (e.op()) {
    case ExprOp::FloorDiv: r = detail::py_floordiv(a, b); break;
    case ExprOp::CeilDiv: r = detail::py_ceildiv(a, b); break;
    case ExprOp::Mod: r = detail::py_mod(a, b); break;
    case ExprOp::Eq: return a == b;
    case ExprOp::Ne: return a != b;
    case ExprOp::Lt: return a < b;
    case ExprOp::Le: return a <= b;
    case ExprOp::Gt: return a > b;
    default: return a >= b;  // Ge
  }
  if (!r) return eval_error(e, b == 0 ? "division by zero" : "integer overflow");
  return *r;
}

Result<std::int64_t> eval_rec(Expr e, const ValueOf& value_of) {
  switch (e.op()) {
    case ExprOp::Const: return e.bool_value() ? static_cast<std::int64_t>(*e.bool_value()) : *e.constant_value();
    case ExprOp::Sym: {
      auto v = value_of(e.symbol_id());
      if (!v) return eval_error(e, "no value for symbol " + std::to_string(e.symbol_id()));
      return *v;
    }
    case ExprOp::Neg: {
      KILN_ASSIGN_OR_RETURN(std::int64_t v, eval_rec(e.args()[0], value_of));
      auto r = detail::checked_neg(v);
      if (!r) return eval_error(e, "integer overflow");
      return *r;
    }
    case ExprOp::Not: {
      KILN_ASSIGN_OR_RETURN(std::int64_t v, eval_rec(e.args()[0], value_of));
      return v == 0 ? 1 : 0;
    }
    default: break;
  }
  if (is_nary(e.op())) return eval_nary(e, value_of);
  KILN_ASSIGN_OR_RETURN(std::int64_t a, eval_rec(e.args()[0], value_of));
  KILN_ASSIGN_OR_RETURN(std::int64_t b, eval_rec(e.args()[1], value_of));
  return eval_binary(e, a, b);
}

}  // namespace

std::vector<int> free_symbols(Expr e) {
  std::unordered_set<Expr> seen;
  std::vector<int> out;
  collect_symbols(e, seen, out);
  std::sort(out.begin(), out.end());
  return out;
}

bool contains_symbol(Expr e, int id) {
  const std::vector<int> ids = free_symbols(e);
  return std::binary_search(ids.begin(), ids.end(), id);
}

Expr substitute(Expr e, const std::unordered_map<int, Expr>& replacements) {
  if (replacements.empty()) return e;
  std::unordered_map<Expr, Expr> memo;
  return substitute_rec(e, replacements, memo);
}

Result<std::int64_t> evaluate(Expr e, const ValueOf& value_of) { return eval_rec(e, value_of); }

Result<std::int64_t> evaluate(Expr e, std::span<const std::int64_t> values) {
  return eval_rec(e, [values](int id) -> std::optional<std::int64_t> {
    if (id < 0 || static_cast<std::size_t>(id) >= values.size()) return std::nullopt;
    return values[static_cast<std::size_t>(id)];
  });
}

}  // namespace kiln::sym

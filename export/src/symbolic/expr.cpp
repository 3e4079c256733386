// Expr handles, the global interning pool, the canonical order and the public builders.
#include "kiln/export/symbolic/expr.h"

#include <algorithm>
#include <mutex>
#include <stdexcept>
#include <unordered_map>

#include "symbolic/detail.h"

namespace kiln::sym {
namespace detail {
namespace {

std::size_t mix(std::size_t h, std::uint64_t v) {
  std::uint64_t x = v + 0x9e3779b97f4a7c15ULL + (static_cast<std::uint64_t>(h) << 6) + (h >> 2);
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return static_cast<std::size_t>(h ^ x ^ (x >> 31));
}

struct Pool {
  std::mutex mu;
  std::unordered_multimap<std::size_t, const ExprNode*> nodes;
};

Pool& pool() {
  static Pool* p = new Pool;  // never destroyed: Exprs may outlive static destructors
  return *p;
}

bool same_node(const ExprNode& n, ExprOp op, bool is_bool, std::int64_t value,
               std::span<const Expr> args) {
  if (n.op != op || n.is_bool != is_bool || n.value != value || n.args.size() != args.size()) {
    return false;
  }
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (!(n.args[i] == args[i])) return false;
  }
  return true;
}

}  // namespace

Expr intern(ExprOp op, bool is_bool, std::int64_t value, std::span<const Expr> args) {
  std::size_t h = mix(mix(static_cast<std::size_t>(op), is_bool), static_cast<std::uint64_t>(value));
  std::uint32_t depth = 0;
  for (Expr a : args) {
    h = mix(h, a.hash());
    depth = std::max(depth, a.depth());
  }
  const bool poisoned = structurally_poisoned(op, args);
  Pool& p = pool();
  std::lock_guard<std::mutex> lock(p.mu);
  auto [first, last] = p.nodes.equal_range(h);
  for (auto it = first; it != last; ++it) {
    if (same_node(*it->second, op, is_bool, value, args)) return ExprAccess::wrap(it->second);
  }
  auto* node = new ExprNode{op, is_bool, value, std::vector<Expr>(args.begin(), args.end()), h,
                            depth + 1, poisoned};
  p.nodes.emplace(h, node);
  return ExprAccess::wrap(node);
}

bool is_poisoned(Expr e) { return ExprAccess::node(e)->poisoned; }

std::string type_error(ExprOp op, std::span<const Expr> args) {
  const std::string name = std::string("[") + expr_op_name(op) + "] ";
  const auto n = args.size();
  const bool bool_ops = op == ExprOp::And || op == ExprOp::Or || op == ExprOp::Not;
  if (static_cast<int>(op) >= kExprOpCount) return "[expr] unknown op code " + std::to_string(static_cast<int>(op));
  if (op == ExprOp::Const || op == ExprOp::Sym) {
    if (n != 0) return name + "takes no operands";
    return {};
  }
  if (is_nary(op)) {
    if (n < 1) return name + "needs at least one operand";
  } else if (op == ExprOp::Neg || op == ExprOp::Not) {
    if (n != 1) return name + "takes 1 operand, got " + std::to_string(n);
  } else if (n != 2) {
    return name + "takes 2 operands, got " + std::to_string(n);
  }
  for (std::size_t i = 0; i < n; ++i) {
    if (args[i].is_bool() != bool_ops) {
      return name + "operand " + std::to_string(i) + " is " + (args[i].is_bool() ? "a boolean" : "an integer") +
             " expression, expected " + (bool_ops ? "a boolean" : "an integer");
    }
  }
  return {};
}

}  // namespace detail

using detail::ExprAccess;

namespace {

const detail::ExprNode* node(Expr e) { return ExprAccess::node(e); }

void check_or_throw(ExprOp op, std::span<const Expr> args) {
  std::string err = detail::type_error(op, args);
  if (!err.empty()) throw std::invalid_argument(err);
}

Expr checked_binary(ExprOp op, Expr a, Expr b, Expr (*build)(Expr, Expr)) {
  const Expr args[] = {a, b};
  check_or_throw(op, args);
  return build(a, b);
}

}  // namespace

int detail::op_rank(ExprOp op) {
  switch (op) {
    case ExprOp::Const: return 0;
    case ExprOp::Sym: return 1;
    case ExprOp::Mul: return 2;
    case ExprOp::Add: return 3;
    case ExprOp::FloorDiv: return 4;
    case ExprOp::CeilDiv: return 5;
    case ExprOp::Mod: return 6;
    case ExprOp::Min: return 7;
    case ExprOp::Max: return 8;
    case ExprOp::Neg: return 9;
    default: return 10 + static_cast<int>(op);  // comparisons, And, Or, Not
  }
}

const char* expr_op_name(ExprOp op) {
  static const char* const kNames[kExprOpCount] = {
      "Const", "Sym", "Add", "Mul", "FloorDiv", "Mod", "Min", "Max", "Neg", "Eq",
      "Ne",    "Lt",  "Le",  "Gt",  "Ge",       "And", "Or",  "Not", "CeilDiv"};
  const auto i = static_cast<int>(op);
  return i < kExprOpCount ? kNames[i] : "?";
}

bool is_nary(ExprOp op) {
  return op == ExprOp::Add || op == ExprOp::Mul || op == ExprOp::Min || op == ExprOp::Max ||
         op == ExprOp::And || op == ExprOp::Or;
}

bool is_comparison(ExprOp op) { return op >= ExprOp::Eq && op <= ExprOp::Ge; }

Expr::Expr() : Expr(constant(0)) {}
Expr Expr::constant(std::int64_t value) { return detail::intern(ExprOp::Const, false, value, {}); }
Expr Expr::boolean(bool value) { return detail::intern(ExprOp::Const, true, value ? 1 : 0, {}); }
Expr Expr::symbol(int id) {
  if (id < 0) throw std::invalid_argument("[Sym] negative symbol id " + std::to_string(id));
  return detail::intern(ExprOp::Sym, false, id, {});
}

ExprOp Expr::op() const { return node_->op; }
bool Expr::is_bool() const { return node_->is_bool; }
std::optional<std::int64_t> Expr::constant_value() const {
  if (node_->op != ExprOp::Const || node_->is_bool) return std::nullopt;
  return node_->value;
}
std::optional<bool> Expr::bool_value() const {
  if (node_->op != ExprOp::Const || !node_->is_bool) return std::nullopt;
  return node_->value != 0;
}
int Expr::symbol_id() const { return node_->op == ExprOp::Sym ? static_cast<int>(node_->value) : -1; }
std::span<const Expr> Expr::args() const { return node_->args; }
std::size_t Expr::hash() const { return node_->hash; }
std::uint32_t Expr::depth() const { return node_->depth; }

Expr& Expr::operator+=(Expr other) { return *this = *this + other; }
Expr& Expr::operator-=(Expr other) { return *this = *this - other; }
Expr& Expr::operator*=(Expr other) { return *this = *this * other; }

int canonical_compare(Expr a, Expr b) {
  if (a == b) return 0;
  const detail::ExprNode* x = node(a);
  const detail::ExprNode* y = node(b);
  if (x->is_bool != y->is_bool) return x->is_bool ? 1 : -1;
  const int rx = detail::op_rank(x->op), ry = detail::op_rank(y->op);
  if (rx != ry) return rx < ry ? -1 : 1;
  if (x->value != y->value) return x->value < y->value ? -1 : 1;
  const std::size_t n = std::min(x->args.size(), y->args.size());
  for (std::size_t i = 0; i < n; ++i) {
    if (int c = canonical_compare(x->args[i], y->args[i])) return c;
  }
  if (x->args.size() != y->args.size()) return x->args.size() < y->args.size() ? -1 : 1;
  return 0;
}

Expr operator+(Expr a, Expr b) {
  const Expr args[] = {a, b};
  check_or_throw(ExprOp::Add, args);
  return detail::build_add(args);
}
Expr operator-(Expr a, Expr b) {
  const Expr args[] = {a, b};
  check_or_throw(ExprOp::Add, args);
  return detail::sub2(a, b);
}
Expr operator*(Expr a, Expr b) {
  const Expr args[] = {a, b};
  check_or_throw(ExprOp::Mul, args);
  return detail::build_mul(args);
}
Expr operator-(Expr a) {
  const Expr args[] = {a};
  check_or_throw(ExprOp::Neg, args);
  return detail::negate(a);
}
Expr add(std::span<const Expr> terms) {
  if (terms.empty()) return Expr::constant(0);
  check_or_throw(ExprOp::Add, terms);
  return detail::build_add(terms);
}
Expr mul(std::span<const Expr> factors) {
  if (factors.empty()) return Expr::constant(1);
  check_or_throw(ExprOp::Mul, factors);
  return detail::build_mul(factors);
}
Expr floordiv(Expr a, Expr b) { return checked_binary(ExprOp::FloorDiv, a, b, detail::build_floordiv); }
Expr ceildiv(Expr a, Expr b) { return checked_binary(ExprOp::CeilDiv, a, b, detail::build_ceildiv); }
Expr mod(Expr a, Expr b) { return checked_binary(ExprOp::Mod, a, b, detail::build_mod); }
Expr min(Expr a, Expr b) { return min({a, b}); }
Expr max(Expr a, Expr b) { return max({a, b}); }
Expr min(std::span<const Expr> xs) {
  check_or_throw(ExprOp::Min, xs);
  return detail::build_minmax(ExprOp::Min, xs);
}
Expr max(std::span<const Expr> xs) {
  check_or_throw(ExprOp::Max, xs);
  return detail::build_minmax(ExprOp::Max, xs);
}

namespace {
Expr compare(ExprOp op, Expr a, Expr b) {
  const Expr args[] = {a, b};
  check_or_throw(op, args);
  return detail::build_compare(op, a, b);
}
}  // namespace

Expr eq(Expr a, Expr b) { return compare(ExprOp::Eq, a, b); }
Expr ne(Expr a, Expr b) { return compare(ExprOp::Ne, a, b); }
Expr lt(Expr a, Expr b) { return compare(ExprOp::Lt, a, b); }
Expr le(Expr a, Expr b) { return compare(ExprOp::Le, a, b); }
Expr gt(Expr a, Expr b) { return compare(ExprOp::Gt, a, b); }
Expr ge(Expr a, Expr b) { return compare(ExprOp::Ge, a, b); }

Expr sym_and(std::span<const Expr> xs) {
  if (xs.empty()) return Expr::boolean(true);
  check_or_throw(ExprOp::And, xs);
  return detail::build_logic(ExprOp::And, xs);
}
Expr sym_or(std::span<const Expr> xs) {
  if (xs.empty()) return Expr::boolean(false);
  check_or_throw(ExprOp::Or, xs);
  return detail::build_logic(ExprOp::Or, xs);
}
Expr sym_not(Expr a) {
  const Expr args[] = {a};
  check_or_throw(ExprOp::Not, args);
  return detail::build_not(a);
}

Result<Expr> try_build(ExprOp op, std::int64_t value, std::span<const Expr> args) {
  std::string err = detail::type_error(op, args);
  if (!err.empty()) return Status(StatusCode::kInvalidInput, err);
  switch (op) {
    case ExprOp::Const: return Expr::constant(value);
    case ExprOp::Sym:
      if (value < 0 || value > INT32_MAX) {
        return Status(StatusCode::kInvalidInput, "[Sym] symbol id " + std::to_string(value) + " out of range");
      }
      return Expr::symbol(static_cast<int>(value));
    case ExprOp::Add: return detail::build_add(args);
    case ExprOp::Mul: return detail::build_mul(args);
    case ExprOp::FloorDiv: return detail::build_floordiv(args[0], args[1]);
    case ExprOp::CeilDiv: return detail::build_ceildiv(args[0], args[1]);
    case ExprOp::Mod: return detail::build_mod(args[0], args[1]);
    case ExprOp::Min:
    case ExprOp::Max: return detail::build_minmax(op, args);
    case ExprOp::Neg: return detail::negate(args[0]);
    case ExprOp::And:
    case ExprOp::Or: return detail::build_logic(op, args);
    case ExprOp::Not: return detail::build_not(args[0]);
    default: return detail::build_compare(op, args[0], args[1]);
  }
}

}  // namespace kiln::sym

#include "symbolic/random_expr_testutil.h"

#include <algorithm>
#include <limits>

namespace kiln::sym::testutil {
namespace {

using I = std::int64_t;

std::optional<I> floordiv_ref(I a, I b) {
  if (b == 0 || (a == std::numeric_limits<I>::min() && b == -1)) return std::nullopt;
  I q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

std::optional<I> mod_ref(I a, I b) {
  auto q = floordiv_ref(a, b);
  if (!q) return b == -1 ? std::optional<I>(0) : std::nullopt;
  I p;
  if (__builtin_mul_overflow(*q, b, &p)) return std::nullopt;
  return a - p;
}

}  // namespace

std::int64_t RandomExprGen::constant(int span, int offset) {
  constexpr I kBig[] = {std::numeric_limits<I>::max(), std::numeric_limits<I>::min(),
                        std::numeric_limits<I>::max() - 1, std::numeric_limits<I>::min() + 1,
                        I{1} << 62, -(I{1} << 62), I{1} << 32, 3037000500};
  if (big_ && coin(2)) return kBig[pick(8)];
  return static_cast<I>(pick(span)) - offset;
}

RefNode RandomExprGen::int_expr(int depth) {
  if (depth <= 0 || coin(4)) {
    if (coin(2)) return {ExprOp::Sym, pick(symbols_), {}};
    return {ExprOp::Const, constant(13, 4), {}};
  }
  static const ExprOp kOps[] = {ExprOp::Add, ExprOp::Add, ExprOp::Mul, ExprOp::Mul, ExprOp::FloorDiv,
                                ExprOp::Mod, ExprOp::CeilDiv, ExprOp::Min, ExprOp::Max, ExprOp::Neg};
  const ExprOp op = kOps[pick(10)];
  RefNode n{op, 0, {}};
  if (op == ExprOp::Neg) {
    n.kids.push_back(int_expr(depth - 1));
  } else if (op == ExprOp::FloorDiv || op == ExprOp::Mod || op == ExprOp::CeilDiv) {
    n.kids.push_back(int_expr(depth - 1));
    // Mostly constant divisors (the interesting canonical rules), sometimes symbolic.
    n.kids.push_back(coin(4) ? int_expr(depth - 1) : RefNode{ExprOp::Const, constant(9, 4), {}});
  } else {
    const int arity = 2 + (coin(3) ? 1 : 0);
    for (int i = 0; i < arity; ++i) n.kids.push_back(int_expr(depth - 1));
  }
  return n;
}

RefNode RandomExprGen::bool_expr(int depth) {
  if (depth <= 1 || coin(2)) {
    static const ExprOp kCmp[] = {ExprOp::Eq, ExprOp::Ne, ExprOp::Lt, ExprOp::Le, ExprOp::Gt, ExprOp::Ge};
    return {kCmp[pick(6)], 0, {int_expr(depth - 1), int_expr(depth - 1)}};
  }
  const int k = pick(3);
  if (k == 2) return {ExprOp::Not, 0, {bool_expr(depth - 1)}};
  RefNode n{k == 0 ? ExprOp::And : ExprOp::Or, 0, {}};
  const int arity = 2 + (coin(3) ? 1 : 0);
  for (int i = 0; i < arity; ++i) n.kids.push_back(bool_expr(depth - 1));
  return n;
}

Expr build(const RefNode& n) {
  std::vector<Expr> k;
  for (const RefNode& c : n.kids) k.push_back(build(c));
  switch (n.op) {
    case ExprOp::Const: return Expr::constant(n.value);
    case ExprOp::Sym: return Expr::symbol(static_cast<int>(n.value));
    case ExprOp::Add: return add(k);
    case ExprOp::Mul: return mul(k);
    case ExprOp::FloorDiv: return floordiv(k[0], k[1]);
    case ExprOp::CeilDiv: return ceildiv(k[0], k[1]);
    case ExprOp::Mod: return mod(k[0], k[1]);
    case ExprOp::Min: return min(k);
    case ExprOp::Max: return max(k);
    case ExprOp::Neg: return -k[0];
    case ExprOp::Eq: return eq(k[0], k[1]);
    case ExprOp::Ne: return ne(k[0], k[1]);
    case ExprOp::Lt: return lt(k[0], k[1]);
    case ExprOp::Le: return le(k[0], k[1]);
    case ExprOp::Gt: return gt(k[0], k[1]);
    case ExprOp::Ge: return ge(k[0], k[1]);
    case ExprOp::And: return sym_and(k);
    case ExprOp::Or: return sym_or(k);
    case ExprOp::Not: return sym_not(k[0]);
  }
  return Expr();
}

std::optional<I> ref_eval(const RefNode& n, std::span<const I> values) {
  std::vector<I> v;
  for (const RefNode& c : n.kids) {
    auto x = ref_eval(c, values);
    if (!x) return std::nullopt;
    v.push_back(*x);
  }
  I r = 0;
  switch (n.op) {
    case ExprOp::Const: return n.value;
    case ExprOp::Sym: return values[static_cast<std::size_t>(n.value)];
    case ExprOp::Add:
      for (I x : v) if (__builtin_add_overflow(r, x, &r)) return std::nullopt;
      return r;
    case ExprOp::Mul:
      r = 1;
      for (I x : v) if (__builtin_mul_overflow(r, x, &r)) return std::nullopt;
      return r;
    case ExprOp::FloorDiv: return floordiv_ref(v[0], v[1]);
    case ExprOp::CeilDiv: {
      if (v[0] == std::numeric_limits<I>::min()) return std::nullopt;
      auto q = floordiv_ref(-v[0], v[1]);
      if (!q || *q == std::numeric_limits<I>::min()) return std::nullopt;
      return -*q;
    }
    case ExprOp::Mod: return mod_ref(v[0], v[1]);
    case ExprOp::Min: return *std::min_element(v.begin(), v.end());
    case ExprOp::Max: return *std::max_element(v.begin(), v.end());
    case ExprOp::Neg:
      if (v[0] == std::numeric_limits<I>::min()) return std::nullopt;
      return -v[0];
    case ExprOp::Eq: return v[0] == v[1];
    case ExprOp::Ne: return v[0] != v[1];
    case ExprOp::Lt: return v[0] < v[1];
    case ExprOp::Le: return v[0] <= v[1];
    case ExprOp::Gt: return v[0] > v[1];
    case ExprOp::Ge: return v[0] >= v[1];
    case ExprOp::And: return std::all_of(v.begin(), v.end(), [](I x) { return x != 0; });
    case ExprOp::Or: return std::any_of(v.begin(), v.end(), [](I x) { return x != 0; });
    case ExprOp::Not: return v[0] == 0;
  }
  return std::nullopt;
}

std::string describe(const RefNode& n) {
  if (n.op == ExprOp::Const) return std::to_string(n.value);
  if (n.op == ExprOp::Sym) return "sym" + std::to_string(n.value);
  std::string s = std::string(expr_op_name(n.op)) + "(";
  for (std::size_t i = 0; i < n.kids.size(); ++i) s += (i ? ", " : "") + describe(n.kids[i]);
  return s + ")";
}

}  // namespace kiln::sym::testutil

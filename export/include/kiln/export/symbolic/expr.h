// Symbolic integer / boolean expressions over shape symbols (`s0`, `u0`, ...).
//
// An `Expr` is an immutable handle to an interned (hash-consed) node: copying it copies a
// pointer, and every builder below returns the expression in *canonical form*, so two
// expressions that canonicalize alike are the same node and `a == b` is a pointer compare.
//
//   Expr s0 = Expr::symbol(0), s1 = Expr::symbol(1);
//   Expr n = 2 * s0 + 3 * s0 - 1;              // 5*s0 - 1
//   Expr p = floordiv(4 * s0 + 8, 4);          // s0 + 2
//   Expr b = sym_and(ge(s0, 2), lt(s0, s1));   // s0 >= 2 and s0 - s1 <= -1
//
// Canonical form (what the builders guarantee):
//  * constants folded (Python floor semantics for `//` and `%`);
//  * Add / Mul / Min / Max / And / Or are flattened and their operands sorted in one fixed
//    structural order (`canonical_compare`), independent of pointer values and of the order
//    the expressions were built in;
//  * Add combines like terms (`2*s0 + 3*s0 -> 5*s0`, `s0 - s0 -> 0`); its constant (if any)
//    is its first operand; each term is `base` or `Mul(coef, base...)`;
//  * Mul folds constants (coefficient first), `x*0 -> 0`, `x*1 -> x`, and distributes a
//    constant over a sum (`2*(s0 + 1) -> 2*s0 + 2`); products of sums are not expanded, but
//    in a product of several factors each sum gives its gcd and sign to the coefficient
//    (`(-2*s0 - 2)*s1 -> -2*(s0 + 1)*s1`);
//  * Neg is never stored: `-x` is `Mul(-1, x)`;
//  * FloorDiv / CeilDiv by a constant: negative divisors made positive, numerator and divisor
//    divided by their common gcd, terms whose coefficient the divisor divides moved out
//    (`(4*s0 + 8)//4 -> s0 + 2`), nested constant divisions merged (`(x//2)//3 -> x//6`);
//  * Mod by a constant k: coefficients and constant reduced modulo k, common gcd factored out
//    (`(2*s0) % 4 -> 2*(s0 % 2)`, `(4*s0) % 2 -> 0`), `(x % 8) % 4 -> x % 4`;
//  * Min / Max: constants folded into one, duplicates and operands that differ from another
//    by a constant (`Max(s0, s0 + 1) -> s0 + 1`) removed;
//  * comparisons become `e OP c` with OP one of Eq, Ne, Le, Ge, `c` a constant, `e` a sum
//    whose first term has a positive coefficient and whose coefficients share no common
//    factor: `s0 + 1 > 5`, `s0 >= 5` and `5 <= s0` are the same node; `a < b` and `b > a`
//    are too (integers: `x < c` is `x <= c - 1`). Constant comparisons fold to true/false;
//  * Not is pushed inward (`not(a < b) -> a >= b`, De Morgan over And/Or), so Not nodes only
//    remain over comparisons that could not be normalized (overflow);
//  * And / Or deduplicated, constants folded, `x and not x -> false`; And also merges bounds
//    of one expression (`s0 >= 2 and s0 >= 3 -> s0 >= 3`).
//
// Overflow: folding never wraps and never has undefined behaviour. When a fold at a node
// would leave int64 (`INT64_MAX + 1`, a coefficient product too large), that node keeps its
// operands as given, unsorted and unfolded, and so does every node built over it. Such an
// expression still evaluates exactly (an error only if a result leaves int64) and still
// round-trips through postfix (every built node is a fixed point of its builder), but two
// such expressions are equal only if they were written alike. Sizes never get near this.
//
// Typing: every expression is either int- or bool-typed. Arithmetic, Min/Max and the
// comparisons take ints; And/Or/Not take bools. Builders throw `std::invalid_argument` on a
// type error (a programming error); `try_build` reports it as a value instead, and the
// deserializers (postfix.h, srepr.h) validate input so they never throw.
//
// Thread safety: the interning pool is global and guarded by a mutex; Exprs may be built
// and shared freely across threads. Nodes live until the process exits.
//
// Depth: the algorithms here recurse on expression depth. Shape expressions are shallow;
// the deserializers (postfix.h, parse.h) reject deep input from files.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "kiln/base/status.h"

namespace kiln::sym {

/// Expression node kinds; the numeric codes are exactly those of `kiln.fb.ExprOp`
/// (schema/kiln.fbs), which the serializer relies on.
enum class ExprOp : std::uint8_t {
  Const = 0,     // literal (int, or bool 0/1 when bool-typed)
  Sym = 1,       // symbol id
  Add = 2,       // n-ary
  Mul = 3,       // n-ary
  FloorDiv = 4,  // floor(a / b)
  Mod = 5,       // Python: result has the sign of b
  Min = 6,       // n-ary
  Max = 7,       // n-ary
  Neg = 8,       // never stored (Mul by -1); accepted by the deserializers
  Eq = 9,
  Ne = 10,
  Lt = 11,
  Le = 12,
  Gt = 13,
  Ge = 14,
  And = 15,  // n-ary
  Or = 16,   // n-ary
  Not = 17,
  CeilDiv = 18,  // ceil(a / b)
};
inline constexpr int kExprOpCount = 19;

/// "Add", "FloorDiv", ...; "?" for a code outside ExprOp.
const char* expr_op_name(ExprOp op);
/// True for Add, Mul, Min, Max, And, Or.
bool is_nary(ExprOp op);
/// True for Eq, Ne, Lt, Le, Gt, Ge.
bool is_comparison(ExprOp op);

namespace detail {
struct ExprNode;
struct ExprAccess;
}  // namespace detail

class Expr {
 public:
  /// The integer constant 0.
  Expr();
  /// An integer constant (implicit, so `s0 + 1` works). Unsigned values above INT64_MAX
  /// wrap (C++20 conversion rules); do not pass them.
  template <std::integral T>
    requires(!std::same_as<T, bool>)
  Expr(T value) : Expr(constant(static_cast<std::int64_t>(value))) {}  // NOLINT

  static Expr constant(std::int64_t value);
  static Expr boolean(bool value);
  /// The symbol with this id (ids are ShapeEnv symbol-table indices). Throws
  /// std::invalid_argument when id < 0.
  static Expr symbol(int id);

  ExprOp op() const;
  bool is_bool() const;
  bool is_int() const { return !is_bool(); }
  /// An integer or boolean constant.
  bool is_constant() const { return op() == ExprOp::Const; }
  bool is_symbol() const { return op() == ExprOp::Sym; }
  /// The value of an integer constant; nullopt otherwise.
  std::optional<std::int64_t> constant_value() const;
  /// The value of a boolean constant; nullopt otherwise.
  std::optional<bool> bool_value() const;
  /// The symbol id of a Sym; -1 otherwise.
  int symbol_id() const;
  /// Operands (empty for Const and Sym), in canonical order.
  std::span<const Expr> args() const;
  /// Structural hash: deterministic across runs (does not depend on addresses).
  std::size_t hash() const;
  /// 1 for leaves; 1 + max operand depth otherwise.
  std::uint32_t depth() const;

  friend bool operator==(Expr a, Expr b) { return a.node_ == b.node_; }

  Expr& operator+=(Expr other);
  Expr& operator-=(Expr other);
  Expr& operator*=(Expr other);

 private:
  explicit Expr(const detail::ExprNode* node) : node_(node) {}
  friend struct detail::ExprAccess;
  const detail::ExprNode* node_;
};

/// A total order on expressions, the one canonical operand order uses: ints before bools,
/// then by kind (Const < Sym < Mul < Add < ...), constants by value, symbols by id, others
/// by operands. Deterministic across runs. Returns <0, 0 or >0.
int canonical_compare(Expr a, Expr b);
struct ExprLess {
  bool operator()(Expr a, Expr b) const { return canonical_compare(a, b) < 0; }
};

// ---- arithmetic (int operands; throw std::invalid_argument on a bool operand) ----------
Expr operator+(Expr a, Expr b);
Expr operator-(Expr a, Expr b);
Expr operator*(Expr a, Expr b);
Expr operator-(Expr a);
Expr add(std::span<const Expr> terms);    // 0 when empty
Expr mul(std::span<const Expr> factors);  // 1 when empty
/// floor(a / b). Division by a constant 0 stays symbolic (evaluation reports the error).
Expr floordiv(Expr a, Expr b);
/// ceil(a / b).
Expr ceildiv(Expr a, Expr b);
/// Python modulo: the result has the sign of b (`-7 % 3 == 2`, `7 % -3 == -2`).
Expr mod(Expr a, Expr b);
Expr min(Expr a, Expr b);
Expr max(Expr a, Expr b);
/// n-ary Min / Max. Precondition: at least one operand (throws otherwise).
Expr min(std::span<const Expr> xs);
Expr max(std::span<const Expr> xs);
inline Expr min(std::initializer_list<Expr> xs) { return min(std::span<const Expr>(xs.begin(), xs.size())); }
inline Expr max(std::initializer_list<Expr> xs) { return max(std::span<const Expr>(xs.begin(), xs.size())); }

// ---- comparisons (int operands, bool result) --------------------------------------------
Expr eq(Expr a, Expr b);
Expr ne(Expr a, Expr b);
Expr lt(Expr a, Expr b);
Expr le(Expr a, Expr b);
Expr gt(Expr a, Expr b);
Expr ge(Expr a, Expr b);

// ---- logic (bool operands; throw std::invalid_argument on an int operand) ----------------
Expr sym_and(std::span<const Expr> xs);  // true when empty
Expr sym_or(std::span<const Expr> xs);   // false when empty
Expr sym_not(Expr a);
inline Expr sym_and(std::initializer_list<Expr> xs) { return sym_and(std::span<const Expr>(xs.begin(), xs.size())); }
inline Expr sym_or(std::initializer_list<Expr> xs) { return sym_or(std::span<const Expr>(xs.begin(), xs.size())); }
/// Variadic forms: `sym_or(eq(u0, 1), eq(u0, 3), eq(u0, 5))`.
template <std::convertible_to<Expr>... Rest>
Expr sym_and(Expr first, Rest... rest) { return sym_and({first, Expr(rest)...}); }
template <std::convertible_to<Expr>... Rest>
Expr sym_or(Expr first, Rest... rest) { return sym_or({first, Expr(rest)...}); }

/// Builds `op` over `args` in canonical form, validating instead of throwing: the operand
/// count (n-ary ops need >= 1, Neg/Not 1, binary ops 2, leaves 0) and operand types.
/// `value` is the literal for Const (int) and the symbol id for Sym (0 <= id <= INT32_MAX);
/// ignored otherwise. Errors are kInvalidInput with a message naming the op.
Result<Expr> try_build(ExprOp op, std::int64_t value, std::span<const Expr> args);

/// Symbol ids occurring in `e`, sorted ascending, without duplicates.
std::vector<int> free_symbols(Expr e);
/// True when `e` mentions symbol `id`.
bool contains_symbol(Expr e, int id);

/// Replaces symbols by expressions (ids absent from the map stay) and re-canonicalizes.
/// Precondition: each replacement has int type.
Expr substitute(Expr e, const std::unordered_map<int, Expr>& replacements);

/// Evaluates `e` exactly with `values[id]` as the value of symbol `id`. Booleans evaluate to
/// 0 / 1; And / Or stop at the first deciding operand. Sums and products accumulate in 128
/// bits, so only an op whose result leaves int64 fails. Errors (kInvalidInput): a symbol id
/// >= values.size(), division or modulo by zero, overflow; the message names the op.
Result<std::int64_t> evaluate(Expr e, std::span<const std::int64_t> values);
/// As above, with values supplied by a lookup (nullopt = unknown symbol -> error).
Result<std::int64_t> evaluate(Expr e, const std::function<std::optional<std::int64_t>(int)>& value_of);

}  // namespace kiln::sym

template <>
struct std::hash<kiln::sym::Expr> {
  std::size_t operator()(kiln::sym::Expr e) const noexcept { return e.hash(); }
};

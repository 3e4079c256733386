// Internals shared by the symbolic sources: the interned node, raw interning, checked
// integer helpers and the linear view of a sum.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kiln/export/symbolic/expr.h"
#include "kiln/export/symbolic/range.h"

namespace kiln::sym::detail {

struct ExprNode {
  ExprOp op;
  bool is_bool;
  std::int64_t value;  // Const literal / Sym id; 0 otherwise
  std::vector<Expr> args;
  std::size_t hash;
  std::uint32_t depth;
  // A sum or product of constants whose fold overflowed, or anything containing one. Derived
  // from the structure, so it is not part of the node's identity.
  bool poisoned;
};

struct ExprAccess {
  static const ExprNode* node(Expr e) { return e.node_; }
  static Expr wrap(const ExprNode* n) { return Expr(n); }
};

/// Interns a node exactly as given (no canonicalization).
Expr intern(ExprOp op, bool is_bool, std::int64_t value, std::span<const Expr> args);
inline Expr intern2(ExprOp op, bool is_bool, Expr a, Expr b) {
  const Expr args[] = {a, b};
  return intern(op, is_bool, 0, args);
}

// ---- overflow tracking -------------------------------------------------------------------
// A builder whose computation skipped a fold because of overflow returns its operands
// unchanged as a "raw" node instead (see `guarded`). Rebuilding such a node from its operands
// overflows again and gives the same node, so every built node is a fixed point of its
// builder: postfix round trips hold even for expressions near the int64 limits.
inline thread_local std::uint64_t overflow_count = 0;
inline void note_overflow() { ++overflow_count; }
/// Probes (is the complement present? do two operands differ by a constant?) must not taint
/// the enclosing builder: this restores the count on exit.
struct SpeculativeScope {
  std::uint64_t saved = overflow_count;
  ~SpeculativeScope() { overflow_count = saved; }
};
Expr intern(ExprOp op, bool is_bool, std::int64_t value, std::span<const Expr> args);
bool is_poisoned(Expr e);
/// Whether a node with these operands is one no canonical builder returns: an overflow
/// fallback (unsorted, unfolded or undistributed operands) or one over such a node.
/// Never interns (it runs inside `intern`).
bool structurally_poisoned(ExprOp op, std::span<const Expr> args);
/// The kind order used by canonical_compare (Const < Sym < Mul < Add < ...).
int op_rank(ExprOp op);
/// Runs `build` unless an operand is poisoned (then the node stays as given: canonicalizing
/// around a constant that does not fit int64 could fold it into one that does, and break the
/// fixed-point property), and returns the operands as given if `build` hit an overflow.
template <typename F>
Expr guarded(ExprOp op, bool is_bool, std::span<const Expr> args, F build) {
  if (args.size() == 1 && is_nary(op)) return args[0];
  for (Expr a : args) {
    if (is_poisoned(a)) return intern(op, is_bool, 0, args);
  }
  const std::uint64_t before = overflow_count;
  Expr r = build();
  return overflow_count != before ? intern(op, is_bool, 0, args) : r;
}

// ---- checked integer arithmetic (nullopt on overflow or division by zero) ----------------
inline std::optional<std::int64_t> checked_add(std::int64_t a, std::int64_t b) {
  std::int64_t r;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}
inline std::optional<std::int64_t> checked_sub(std::int64_t a, std::int64_t b) {
  std::int64_t r;
  if (__builtin_sub_overflow(a, b, &r)) return std::nullopt;
  return r;
}
inline std::optional<std::int64_t> checked_mul(std::int64_t a, std::int64_t b) {
  std::int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}
inline std::optional<std::int64_t> checked_neg(std::int64_t a) { return checked_sub(0, a); }
/// Python floor division.
std::optional<std::int64_t> py_floordiv(std::int64_t a, std::int64_t b);
/// Python modulo (sign of b).
std::optional<std::int64_t> py_mod(std::int64_t a, std::int64_t b);
/// ceil(a / b).
std::optional<std::int64_t> py_ceildiv(std::int64_t a, std::int64_t b);
/// gcd of |a| and |b| (0 when both are 0); nullopt when the result is 2^63.
std::optional<std::int64_t> gcd64(std::int64_t a, std::int64_t b);

// ---- linear view -----------------------------------------------------------------------
struct Term {
  std::int64_t coef;
  Expr base;  // not a Const, not an Add, no constant coefficient
};
/// e == constant + sum(coef * base).
struct LinearForm {
  std::int64_t constant = 0;
  std::vector<Term> terms;
};
/// Splits a non-constant int expression into coefficient and base.
Term split_term(Expr e);
/// nullopt only when the constants of a (non-canonical, overflow-fallback) sum overflow.
std::optional<LinearForm> to_linear(Expr e);
Expr from_linear(const LinearForm& form);
/// gcd of all coefficients and the constant (>= 1 unless everything is 0); nullopt on overflow.
std::optional<std::int64_t> content(const LinearForm& form);
/// Divides every coefficient and the constant by `g` (which must divide them all).
LinearForm divide(const LinearForm& form, std::int64_t g);

/// Shrinks a range to the multiples of d it holds (may become empty).
ValueRange round_to_divisor(ValueRange r, std::int64_t d);

/// Error message for a type error, or empty when the operands suit `op`.
std::string type_error(ExprOp op, std::span<const Expr> args);

// ---- builders used across files ----------------------------------------------------------
Expr build_add(std::span<const Expr> xs);
Expr build_mul(std::span<const Expr> xs);
Expr build_floordiv(Expr a, Expr b);
Expr build_ceildiv(Expr a, Expr b);
Expr build_mod(Expr a, Expr b);
Expr build_minmax(ExprOp op, std::span<const Expr> xs);
Expr build_compare(ExprOp op, Expr a, Expr b);
Expr build_logic(ExprOp op, std::span<const Expr> xs);
Expr build_not(Expr a);

inline Expr add2(Expr a, Expr b) {
  const Expr xs[] = {a, b};
  return build_add(xs);
}
inline Expr mul2(Expr a, Expr b) {
  const Expr xs[] = {a, b};
  return build_mul(xs);
}
inline Expr negate(Expr a) { return mul2(Expr::constant(-1), a); }
inline Expr sub2(Expr a, Expr b) { return add2(a, negate(b)); }

}  // namespace kiln::sym::detail

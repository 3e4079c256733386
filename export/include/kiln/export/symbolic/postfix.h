// Postfix (reverse Polish) serialization of expressions, in the bundle's format
// (`kiln.fb.ExprToken`, schema/kiln.fbs):
//  * `op` is the numeric ExprOp code; leaves push one value, operators pop their operands
//    (left to right in push order) and push the result;
//  * Const carries the literal in `value`, Sym the symbol id; the n-ary ops (Add, Mul, Min,
//    Max, And, Or) carry their operand count (>= 2); `value` is 0 for every other op.
//  * The format has no boolean literal: true is written `Const 0, Const 0, Eq` and false
//    `Const 0, Const 1, Eq` (any evaluator folds them; `from_postfix` rebuilds the constants).
//
// `from_postfix(to_postfix(e)) == e` for every canonical expression.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kiln/base/status.h"
#include "kiln/export/symbolic/expr.h"

namespace kiln::sym {

struct ExprToken {
  std::uint8_t op = 0;  // an ExprOp code
  std::int64_t value = 0;
  friend bool operator==(const ExprToken&, const ExprToken&) = default;
};

/// Appends the tokens of `e` to `out`.
void append_postfix(Expr e, std::vector<ExprToken>& out);
std::vector<ExprToken> to_postfix(Expr e);

struct PostfixLimits {
  /// Symbol ids must be < this (e.g. the bundle's symbol count).
  std::int64_t symbol_count = std::int64_t{1} << 31;
  /// Deeper expressions are rejected (keeps the recursive algorithms' stacks bounded).
  std::uint32_t max_depth = 256;
};

/// Rebuilds a canonical expression from tokens that come from a file: never trusts them.
/// Errors (kInvalidBundle), each naming the token index: empty input, unknown op code,
/// stack underflow, an n-ary arity < 2 or larger than the stack, a symbol id out of
/// [0, symbol_count), a type error (`And` over ints, `Add` over bools, ...), too deep, or
/// more than one value left at the end.
Result<Expr> from_postfix(std::span<const ExprToken> tokens, const PostfixLimits& limits = {});

}  // namespace kiln::sym

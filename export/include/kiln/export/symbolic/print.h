// Printing expressions in a readable, Python-like form (close to PyTorch's own messages).
// The output is stable: golden tests and runtime-assert messages depend on it.
//
//   s0 + 3          2*s0 - 1        -s0 + 4        s0*s1        s0**2
//   (s0//2)         ((s0 + 1)//2)   s0 % 4         2*(s0 % 4)   CeilDiv(s0, 4)
//   Max(1, s0)      Min(s0, s1)
//   u0 >= 2         s0 <= 1024      s0 == 4        s0 != 1      s0 % 16 == 0
//   s0 >= s1        (s0 - s1 >= 0: a zero right side prints as a comparison of two sides)
//   u0 == 1 or u0 == 3          s0 >= 2 and (u0 == 1 or u0 == 3)      not (...)
//   True / False
//
// Rules: sums print their terms in canonical order with the constant last; a term with a
// negative coefficient prints as `- k*x`; FloorDiv is always parenthesized like PyTorch;
// operands are parenthesized by Python precedence (so the text is a valid Python
// expression that evaluates to the same value, given integer symbols).
#pragma once

#include <functional>
#include <iosfwd>
#include <string>

#include "kiln/export/symbolic/expr.h"

namespace kiln::sym {

class ShapeEnv;

/// Returns the printed name of symbol `id`.
using SymbolNamer = std::function<std::string(int id)>;

/// Prints `e` naming symbols after `env` (`s0`, `u1`); an id unknown to `env`, or any id
/// when `env` is null, prints as `sym<id>`.
std::string to_string(Expr e, const ShapeEnv* env = nullptr);
/// Prints `e` with caller-chosen symbol names.
std::string to_string(Expr e, const SymbolNamer& name);
/// `to_string(e)` (symbols as `sym<id>`), for logs and test failure messages.
std::ostream& operator<<(std::ostream& os, Expr e);

}  // namespace kiln::sym

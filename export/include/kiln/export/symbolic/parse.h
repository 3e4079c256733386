// Parsing expressions written by other tools.
//
// `parse_srepr` reads sympy `srepr` strings as stored in torch.export `.pt2` archives
// (`"expr_str": "Mul(Integer(16), Symbol('s27', positive=True, integer=True))"`):
//   Symbol('s77', ...)            keyword arguments ignored; the name goes to `resolve_symbol`
//   Integer(3)  Integer(-3)       int64 only
//   Add  Mul  Max  Min  And  Or   n-ary
//   FloorDiv  Mod  PythonMod  CleanDiv (exact division, read as FloorDiv)
//   ModularIndexing(x, d, m)      (x // d) % m
//   CeilToInt(IntTrueDiv(a, b))   CeilDiv(a, b); FloorToInt(IntTrueDiv(a, b)) likewise
//   Pow(x, Integer(k))            0 <= k <= 64, as a product
//   Eq/Equality  Ne/Unequality  StrictLessThan  LessThan  StrictGreaterThan  GreaterThan
//   Not  true  false  True  False  BooleanTrue()  BooleanFalse()  Identity(x)
// Rejected with kUnsupported, naming the construct: Rational, Float, a bare IntTrueDiv /
// CeilToInt / FloorToInt / TruncToInt / ToFloat, Pow with another exponent, infinities
// (oo, int_oo), and any other function. Malformed text (bad syntax, wrong operand count or
// type, integer out of int64, nesting deeper than 256) is kInvalidInput. Every message
// starts with "[parse_srepr]" and gives the byte offset.
//
// `parse_expr` reads the printed form of print.h and PyTorch messages
// (`s0 + 3`, `(s0//2)`, `s0 % 4`, `Max(1, s0)`, `u0 >= 2`, `Eq(s0, 4)`, `s0 == 4`,
// `u0 == 1 or u0 == 3`, `not (s0 > 2)`, `s0**2`, `CeilDiv(s0, 4)`, `Mod(s0, 4)`, `True`):
// Python operator precedence, `Eq/Ne/Lt/Le/Gt/Ge/Mod/FloorDiv/CeilDiv/Min/Max` call forms,
// `&`, `|` and `~` as PyTorch's sympy printer writes and / or / not. Errors as above with
// "[parse_expr]". `parse_expr(to_string(e, names), resolve) == e` for canonical `e`.
#pragma once

#include <functional>
#include <optional>
#include <string_view>

#include "kiln/base/status.h"
#include "kiln/export/symbolic/expr.h"

namespace kiln::sym {

/// Maps a symbol name ("s77", "u0") to a symbol id; nullopt rejects the name.
using SymbolResolver = std::function<std::optional<int>(std::string_view name)>;

Result<Expr> parse_srepr(std::string_view text, const SymbolResolver& resolve_symbol);
Result<Expr> parse_expr(std::string_view text, const SymbolResolver& resolve_symbol);

}  // namespace kiln::sym

// Asking the shape engine about symbolic conditions without (or with explicit) guards.
// SEMANTICS.md, "Guards -> constraints or runtime asserts".
#pragma once

#include <initializer_list>
#include <string>

#include "kiln/export/tensor.h"

namespace kiln {

/// Records that `condition` must hold: narrows ranges (`check(n >= 2)` makes u0 >= 2) and
/// becomes a runtime assert checked right after the node binding its last unbacked symbol
/// (or on the inputs). In eager mode a false condition throws. A condition that is
/// provably false fails export with kExportError naming `loc`.
void check(const SymBool& condition, SourceLoc loc = SourceLoc::current());

/// The answer when the shape engine can decide it, else false. Never records anything.
bool guard_or_false(const SymBool& condition);
/// The answer when the shape engine can decide it, else true. Never records anything.
bool guard_or_true(const SymBool& condition);
/// True only if `condition` provably holds. Never records anything.
bool statically_known_true(const SymBool& condition);

/// Variadic and/or kept as one expression (one assert when checked).
SymBool sym_and(std::initializer_list<SymBool> conditions);
SymBool sym_or(std::initializer_list<SymBool> conditions);
template <typename... Rest>
SymBool sym_and(const SymBool& a, const SymBool& b, const Rest&... rest) { return sym_and({a, b, SymBool(rest)...}); }
template <typename... Rest>
SymBool sym_or(const SymBool& a, const SymBool& b, const Rest&... rest) { return sym_or({a, b, SymBool(rest)...}); }

}  // namespace kiln

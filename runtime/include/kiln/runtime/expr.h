// Evaluating and printing the bundle's symbolic expressions (postfix token slices of
// Program.expr_tokens; see schema/kiln.fbs). Only call these on a verified Bundle: the
// verifier guarantees well-formed, well-typed expressions over known symbols.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "kiln/runtime/status.h"

namespace kiln::fb {
struct Program;
}

namespace kiln {

/// Evaluates expression `id` with `symbols[s]` as the value of symbol s. Booleans come out
/// as 0/1. Fails with kInvalidInput on division or modulo by zero and on int64 overflow.
Result<std::int64_t> evaluate_expr(const fb::Program& program, std::uint32_t id,
                                   std::span<const std::int64_t> symbols);

/// Python-like text of expression `id`: "s0 + 3", "(s0//2)", "u0 >= 2", "s0 % 16 == 0".
std::string expr_to_string(const fb::Program& program, std::uint32_t id);

/// "f32[s0, 64]" for a dtype name and a list of expression ids.
std::string shape_to_string(const fb::Program& program, std::string_view dtype,
                            std::span<const std::uint32_t> dims);

}  // namespace kiln

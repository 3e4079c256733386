// Turning a finished trace into a strict program: simplification under everything the
// trace learned, runtime asserts for unbacked ranges, dead-code elimination, value names,
// and the specialized graphs.
#pragma once

#include <utility>
#include <vector>

#include "kiln/export/dim.h"
#include "kiln/export/ir.h"
#include "trace/context.h"

namespace kiln::detail {

void finalize(TraceContext& ctx, const std::vector<std::pair<const Dim*, int>>& named_dims);

/// Simplifies every shape and attribute expression of `g` under `env`. Asserts are left
/// as they are: under the environment that recorded them they would read as `True`.
void simplify_graph(ir::Graph& g, const sym::ShapeEnv& env);
/// Drops the asserts that `env` proves (a specialization's predicate over declared ranges).
void prune_asserts(ir::Graph& g, const sym::ShapeEnv& env);

/// Removes nodes whose results are never used (keeping nodes that bind unbacked
/// symbols), then values nothing refers to; renumbers nodes and values.
void eliminate_dead_code(ir::Graph& g);
/// Replaces repeated pure nodes (same op, inputs, attributes) by their first occurrence.
void eliminate_common_subexpressions(ir::Graph& g);

}  // namespace kiln::detail

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
/// Asserts over symbols `env` does not have (created after it was copied) are kept.
void prune_asserts(ir::Graph& g, const sym::ShapeEnv& env);

/// Removes nodes whose results are never used (keeping nodes that bind unbacked
/// symbols), then values nothing refers to; renumbers nodes and values.
void eliminate_dead_code(ir::Graph& g);
/// Folds every inference batch_norm whose input is a conv2d used nowhere else, with constant
/// f32 weights and statistics, into that conv2d's weights and bias (the batch_norm's
/// result then comes from the conv2d; the batch_norm is left for eliminate_dead_code).
/// New constants are appended to `p`; returns how many were folded.
int fold_batch_norms(ir::Program& p, ir::Graph& g);
/// Rewrites every 3x3 stride-1 "same" convolution with dilation d >= 2 (static shapes, >= 64
/// channels in and out, H and W multiples of d) as the same undilated convolution over the
/// d*d phase images of its input (space-to-batch: reshape, permute, reshape; and back after):
/// equal results, and the CPU runs the phases with Winograd, which dilated 3x3 convolutions
/// cannot use (deeplabv3's dilated ResNet: ~2x per such layer). Returns how many.
int phase_split_dilated_convs(ir::Graph& g);
/// Drops the constants no graph refers to and renumbers the rest.
void drop_unused_constants(ir::Program& p);
/// Replaces repeated pure nodes (same op, inputs, attributes) by their first occurrence.
void eliminate_common_subexpressions(ir::Graph& g);

}  // namespace kiln::detail

// Semantic verification of a program that already passed the FlatBuffers Verifier.
#pragma once

#include <cstdint>
#include <vector>

#include "kiln/format/file_format.h"
#include "kiln/runtime/bundle.h"
#include "kiln/runtime/status.h"

namespace kiln::fb {
struct Program;
}

namespace kiln {

/// The deepest nesting of subgraph calls (cond / while_loop / invoke_subgraph) a verified
/// bundle may have: the executor recurses once per level.
inline constexpr std::uint32_t kMaxSubgraphDepth = 64;

/// Checks every index, ordering, typing and reference rule of docs/FORMAT.md ("Semantic
/// rules"). Fills `expr_info` (one entry per expression). Returns kInvalidBundle naming the
/// first violation and where it is ("graph 0 (main), node 12: input 3 is value 40, defined
/// later").
Status verify_program(const fb::Program& program, const std::vector<format::SegmentEntry>& segments,
                      std::vector<ExprInfo>& expr_info);

}  // namespace kiln

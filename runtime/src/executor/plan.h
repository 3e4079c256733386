// Planning one graph call for one input signature (shape time, before any kernel runs):
// every static shape and expression attribute evaluated, the inputs and outputs of each
// accelerator segment found, reshapes aliased to their inputs, elementwise outputs written
// over dying inputs, and the remaining tensors placed into one arena (memory_plan.h).
// Pure: reads the program and the symbol values, allocates no tensor memory, runs nothing.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "backends/backend.h"
#include "backends/cpu/thread_pool.h"
#include "executor/program_impl.h"
#include "kernel/kernel.h"

namespace kiln {

/// How the new value of a state tensor (Signature.states) reaches the Session's buffer,
/// decided per entry plan (plan_state_updates in plan.cpp).
enum class StateUpdate : std::uint8_t {
  kCopy,       // computed into the arena (or is a constant or another input): copied in after the run
  kInPlace,    // its producer (cpu::updates_in_place) writes over the state's buffer, which it
               // alone reads from then on; the executor saves the elements it overwrites first
  kUnchanged,  // the graph returns the state's own input value
  kDevice,     // kept in the Session's device buffer (an accelerator runs every node reading it, and
               // updates it in place there with an index_put, or leaves it unchanged): segments
               // read and write it where it lies (backend::SegmentTensor::Role::kDevice)
};

/// Everything one graph call needs for one input signature.
struct GraphPlan {
  std::uint32_t graph = 0;            // the graph that runs (a specialization for the entry)
  std::string variant;                // entry only: "generic" or the specialization's label
  std::vector<std::int64_t> symbols;  // symbol values after binding the inputs
  std::vector<std::uint8_t> bound;
  std::vector<TensorView> views;      // per value: the planned shape; data: constants only
  std::vector<std::int64_t> offset;   // per value: arena offset, -1 if not in the arena
  std::vector<std::int32_t> alias;    // per value: a value outside the arena whose bytes it shares
  std::vector<std::uint8_t> dynamic;  // per value: sized at run time
  std::vector<NodeAttrs> attrs;       // per node: evaluated attributes
  std::vector<std::uint8_t> attrs_ready;
  std::vector<std::uint8_t> segment_on_cpu;  // per accelerator segment: shapes not static
  std::vector<std::unique_ptr<backend::PreparedSegment>> prepared;
  std::vector<std::vector<std::uint32_t>> segment_inputs, segment_outputs;  // per segment: host-side values
  /// Entry plans of programs with state: per state, how its new value is stored; per node,
  /// the state it updates in place (-1: none). Empty otherwise.
  std::vector<StateUpdate> state_update;
  std::vector<std::int32_t> node_state;
  /// kDevice states: per value, the state it is (its input or new value; -1: none, or empty
  /// when no state is kDevice); per state, whether a segment writes it; per segment, the
  /// bytes of device state its in-place updates write (0: none, so no undo either).
  std::vector<std::int32_t> device_state_of;
  std::vector<std::uint8_t> device_state_written;
  std::vector<std::uint64_t> segment_state_bytes;
  /// The arena the planned tensors need (saturates at UINT64_MAX when a tensor's size does
  /// not fit in 64 bits), and what they would take without reuse.
  std::uint64_t arena_bytes = 0, naive_bytes = 0;
  /// Per node whose kernel can use working memory (NodeInfo::workspace): the arena bytes
  /// planned for it, alive at that node only, as {offset, bytes} (64-byte aligned; bytes 0:
  /// none), as much as cpu::workspace_bytes asks. Empty when no node asks.
  /// KernelContext::workspace.
  std::vector<std::pair<std::uint64_t, std::uint64_t>> workspace;
  /// The planned tensor with the most bytes, -1 if none: what a memory-limit error names.
  std::int32_t largest = -1;
  std::uint64_t largest_bytes = 0;

  // What update_plan needs to re-evaluate this plan for other symbol values (entry plans:
  // the same input shapes, other int inputs, e.g. a KV cache decode step's input_pos).
  std::vector<std::int64_t> int_args;    // entry only: the int inputs it was planned for
  std::vector<std::uint64_t> reserved;   // per value in the arena: the bytes its place holds
  std::vector<std::vector<std::uint32_t>> attr_symbols;  // per node: symbols its evaluated attributes mention
  // Decisions that held for the planned sizes and must hold for new ones: values sharing
  // bytes (a reshape aliasing its input, a state updated in place) have equal byte sizes;
  // an elementwise output written over an input has the input's shape.
  std::vector<std::pair<std::uint32_t, std::uint32_t>> same_bytes, same_shape;
};

/// The load-time part of keeping state `k` of entry graph `g` on the device (docs/FORMAT.md,
/// "State"), given which nodes run in device segments: its input value is f32 and read by
/// device nodes only, and its new value is that input (read by some device node) or the
/// output of an index_put of a device node updating it in place (its last reader), read by
/// device nodes only; the graph returns neither anywhere else. Returns the updating node,
/// -1 when the state is only read there, or -2 when it cannot live on the device.
std::int32_t device_state_update(const fb::Program& p, const GraphInfo& info, const fb::Graph& graph, std::uint32_t k,
                                 cpu::FunctionRef<bool(std::int32_t)> on_device);

/// Bytes of a tensor of `dtype` and `shape`, or nullopt when that does not fit in 64 bits
/// (or a dim is negative).
std::optional<std::uint64_t> checked_nbytes(DType dtype, std::span<const std::int64_t> shape);

/// Plans graph `g` of `program` with the given symbol values (`bound[s]`: symbol s has a
/// value; the others are bound inside the graph, by the nodes that produce them). `entry`:
/// g is the entry graph or a specialization, whose trailing inputs and outputs are the
/// state tensors (their updates are planned: GraphPlan::state_update). Fails with
/// kInvalidInput when a shape evaluates negative or an expression overflows. `device_state`
/// (an entry plan with an accelerator): states whose every reader and update runs in device
/// segments are planned kDevice.
///
/// `headroom` (empty: none): other values of the symbols under which the arena places each
/// tensor with room for the larger of its sizes under `symbols` and under `headroom`, so
/// that update_plan can reuse the plan for symbol values up to those (a decoder's next
/// positions). The shapes, attributes and decisions are those of `symbols`.
///
/// `threads`: the threads the kernels will run on (the Session's pool), for the working
/// memory they ask (GraphPlan::workspace).
Result<std::unique_ptr<GraphPlan>> plan_graph(const Program& program, std::uint32_t g, std::span<const std::int64_t> symbols,
                                              std::span<const std::uint8_t> bound, bool entry = false, bool device_state = false,
                                              std::span<const std::int64_t> headroom = {}, int threads = 1);

/// Re-evaluates `plan` for new values of symbols already bound in it (the same `bound`):
/// the shapes and attributes that mention a changed symbol. Returns false, leaving `plan`
/// unusable (the caller plans afresh), when the plan does not hold for the new values: a
/// tensor needs more bytes than its place in the arena holds, a size or attribute fails to
/// evaluate, a reuse decision (same_bytes, same_shape) no longer holds, or an accelerator
/// segment's shapes or attributes change. When it returns true, the plan has the shapes and
/// attributes plan_graph would give for `symbols`, and keeps its own reuse decisions and
/// arena placement, which still hold: every tensor fits its place, disjoint from every
/// other tensor alive at the same time.
bool update_plan(const Program& program, GraphPlan& plan, std::span<const std::int64_t> symbols);

}  // namespace kiln

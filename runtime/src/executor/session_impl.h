// Internal state of a Session, shared by the files that run a bundle:
//   bind.cpp          binding and checking a call's inputs, choosing the variant, asserts,
//                     symbols bound by nodes (once per signature, and after binding nodes);
//   plan.cpp          plan_graph: shapes, attributes, segments, memory (once per signature);
//   session.cpp       the run loop: run_graph, run_node, run_segment, Session::run;
//   control_flow.cpp  cond, while_loop and invoke_subgraph nodes.
//   observe.cpp       SessionOptions::observer: nodes' outputs to the caller.
//
// Every graph call (the entry graph, and each subgraph a control-flow node calls) goes
// through run_graph. Its inputs form a *signature* (dtypes, ranks, dims, int values): the
// first time a signature is seen, the inputs are bound and checked, the variant chosen,
// and the call planned (GraphPlan); later calls with the same signature restore that state
// and go straight to the kernels. Tensors whose sizes depend on unbacked symbols are sized
// at run time, on the heap.
//
// Memory sized from input values or data is allocated without throwing: running out is a
// Status, never a terminate (the runtime builds with -fno-exceptions).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "backends/cpu/thread_pool.h"
#include "executor/plan.h"
#include "executor/program_impl.h"
#include "kernel/kernel.h"
#include "kiln/format/kiln_generated.h"
#include "kiln/runtime/expr.h"
#include "kiln/runtime/program.h"

namespace kiln {

inline Status bad_input(const std::string& m) { return Status(StatusCode::kInvalidInput, m); }

// Allocation of `bytes` for `what` failed (kUnavailable, as when no device memory is left).
inline Status out_of_memory(std::uint64_t bytes, const std::string& what) {
  return Status(StatusCode::kUnavailable, "out of memory: " + std::to_string(bytes) + " bytes for " + what);
}

// The expression ids of a shape; a 0-d tensor's shape vector may be absent.
inline std::span<const std::uint32_t> dims_of(const flatbuffers::Vector<std::uint32_t>* shape) {
  if (shape == nullptr) return {};
  return {shape->data(), shape->size()};
}

inline TensorView make_view(DType dtype, std::span<const std::int64_t> shape, void* data) {
  TensorView v;
  v.dtype = dtype;
  v.rank = static_cast<int>(shape.size());
  for (std::size_t i = 0; i < shape.size() && i < kMaxRank; ++i) v.shape[i] = shape[i];
  v.data = data;
  return v;
}

// " (model.cpp:12, fc)" for a debug entry, "" without one.
inline std::string location(const fb::Program& p, std::uint32_t debug) {
  const DebugLocation d = debug_location(p, debug);
  return d.empty() ? "" : " (" + d.text() + ")";
}

// One input or output of a graph call: an int or a tensor view (not owned).
struct CallArg {
  bool is_int = false;
  std::int64_t i = 0;
  TensorView t;
};

// `value` with its tensor bytes copied into `storage` (a callee's result that must outlive
// the callee's memory: cond/invoke_subgraph outputs, while_loop carries). Fails when the
// bytes cannot be allocated.
Result<CallArg> owned_copy(const CallArg& value, std::unique_ptr<std::uint8_t[]>& storage);

struct SignatureKey {
  std::vector<std::int64_t> words;
  bool operator==(const SignatureKey&) const = default;
};
struct SignatureHash {
  std::size_t operator()(const SignatureKey& k) const {
    std::uint64_t h = 1469598103934665603ull;
    for (std::int64_t w : k.words) h = (h ^ static_cast<std::uint64_t>(w)) * 1099511628211ull;
    return static_cast<std::size_t>(h);
  }
};

// Receives a graph call's outputs while the callee's memory is still alive.
using OutputSink = cpu::FunctionRef<Status(std::size_t index, const CallArg& value)>;

struct Session::Impl {
  const Program& program;
  const fb::Program& p;
  const Program::Impl& prog;
  cpu::ThreadPool pool;
  SessionOptions options;
  std::vector<std::int64_t> symbols;
  std::vector<std::uint8_t> bound;
  std::vector<std::string> bound_from;  // "x.size(0)" per symbol, for messages
  RunStats stats;
  // Per called graph id: plans by signature, and the arena its frames use.
  std::vector<std::unordered_map<SignatureKey, std::unique_ptr<GraphPlan>, SignatureHash>> plans;
  struct Arena {
    std::unique_ptr<std::uint8_t[]> storage;
    std::uint64_t capacity = 0;
    std::uint8_t* base = nullptr;
  };
  std::vector<Arena> arenas;  // per graph id that runs
  SignatureKey scratch_key;
  std::vector<std::uint32_t> backed_symbols;
  std::uint64_t heap_live = 0, heap_peak = 0;  // tensors sized at run time, this run
  std::vector<std::uint64_t> arena_used;       // per graph id: the largest arena this run used
  std::uint64_t memory_limit = 0;              // options.max_memory_bytes, or the default
  std::uint64_t outputs_live = 0;              // bytes of outputs copied to the caller, this run
  std::int64_t nodes_executed = 0;             // this run, against options.max_nodes_executed
  std::vector<const NodeInfo*> calls;          // the control-flow nodes running now, outermost first
  // State (Signature.states): the values the next run reads (`state`), and the buffers a
  // run copies new values into (`state_next`; swapped in when the run succeeds; allocated
  // only for states some run copied, so a cache updated in place is held once). A state the
  // plan updates in place (StateUpdate::kInPlace) is written in `state` directly: run_node
  // first saves the elements the write changes in the undo log, and a failed run puts them
  // back (newest first), so a failed run changes nothing either way.
  std::vector<HostTensor> state, state_next;
  std::vector<std::uint8_t> state_copied;  // per state: this run's new value is in state_next
  struct UndoRecord {
    std::uint8_t* at;       // in a state buffer
    std::size_t saved;      // offset of the old bytes in undo_bytes
    std::size_t bytes;
  };
  std::vector<UndoRecord> undo;
  std::vector<std::uint8_t> undo_bytes;        // capacity kept across runs
  std::vector<cpu::ElementRange> state_writes;  // scratch for cpu::in_place_writes
  // State kept on the accelerator (StateUpdate::kDevice): per state, its device buffer (made
  // the first time a plan keeps it there, then kept: prepared segments bind it), and which
  // copy is behind: `host_stale` (a run wrote the device copy: download before the host
  // reads it) or `device_stale` (set/restore/reset or a host-side run changed the host copy,
  // or no device copy yet: upload before a run keeps it on the device). Never both.
  std::vector<std::unique_ptr<backend::DeviceBuffer>> device_state;
  std::vector<backend::DeviceBuffer*> device_buffers;  // device_state's pointers, for SegmentDesc
  std::vector<std::uint8_t> host_stale, device_stale;
  std::vector<backend::PreparedSegment*> device_writes;  // this run: segments that wrote device state
  GraphPlan* entry_plan = nullptr;                       // this run's entry plan

  // One graph call in progress.
  struct Frame {
    GraphPlan* plan = nullptr;
    const GraphInfo* info = nullptr;
    const fb::Graph* graph = nullptr;
    std::uint32_t graph_id = 0;
    std::uint8_t* arena = nullptr;  // the plan's arena (GraphPlan::offset, workspace)
    std::vector<TensorView> views;
    std::vector<std::unique_ptr<std::uint8_t[]>> heap;  // per value, when sized at run time
    std::vector<std::size_t> heap_size;                 // bytes of heap[v]
  };
  // Takes a frame's heap tensors off heap_live when the frame ends (they are freed then).
  struct HeapRelease {
    Impl& impl;
    Frame& f;
    ~HeapRelease() {
      for (std::size_t b : f.heap_size) impl.heap_live -= b;
    }
  };

  Impl(const Program& program_, SessionOptions o);

  Result<std::int64_t> eval(std::uint32_t expr) const { return evaluate_expr(p, expr, symbols); }
  std::string graph_name(std::uint32_t g) const;

  // bind.cpp
  Status bind_entry(std::span<const CallArg> args);
  Status solve_derived(std::span<const std::uint32_t> shape_exprs, const CallArg& arg, const std::string& name);
  Status check_entry_ranges_and_dims(std::span<const CallArg> args);
  Status bind_subgraph(std::uint32_t g, std::span<const CallArg> args);
  Result<std::uint32_t> choose_variant(std::string& label);
  Status check_asserts(const Frame& f, std::size_t slot);
  Status bind_node(Frame& f, std::uint32_t n);

  // session.cpp
  Status run(std::span<const HostValue> inputs, RunResult& result);
  void reset_state();
  // The index of state `name`, or kInvalidInput naming it and the states there are.
  Result<std::size_t> state_index(const std::string& name) const;
  // Ok when `value` fits state k (dtype, shape, bytes); else kInvalidInput naming it.
  Status check_state_value(std::size_t k, const HostTensor& value) const;
  Status run_graph(std::uint32_t called, std::span<const CallArg> args, bool entry, OutputSink sink, std::string* variant);
  // The plan of an entry call whose int inputs differ from those `slot`'s plan was made
  // for (updated, or made again into `slot`).
  Result<GraphPlan*> replan_entry(std::span<const CallArg> args, std::unique_ptr<GraphPlan>& slot);
  Status run_node(Frame& f, std::uint32_t n);
  struct FoldedExpansion;  // session.cpp: what run_node gives a depthwise conv2d's kernel
  Status run_segment(Frame& f, std::uint32_t s);
  Status slice_window(const Frame& f, std::uint32_t n, TensorView& b, OperandWindow& window);
  Status run_gather_lerp(Frame& f, const NodeInfo& ni, KernelContext& ctx, TensorView& out);
  // Before node n of f writes its state in place: saves the elements it will change (all of
  // the state when the writes add up to more) in the undo log and counts them in
  // stats.state_bytes_written. Fails, naming the node, where its kernel would (an index out
  // of range), having saved nothing.
  Status save_state_writes(const Frame& f, std::uint32_t n, std::span<const TensorView> ins, std::span<const AttrValue> attrs);
  // Puts back what the undo log saved (a failed run) and empties it; then has every segment
  // of this run that wrote device state put back what it overwrote (newest first).
  Status undo_state_writes();
  // The host copy of state k, downloaded first when the device's is newer (counted in
  // stats.bytes_downloaded when `in_run`).
  Status sync_host(std::size_t k, bool in_run);
  // Before an entry plan runs: its kDevice states uploaded where the device copy is behind,
  // the others downloaded where the host copy is.
  Status sync_states(const GraphPlan& plan);
  // A new entry plan with kDevice states: makes their device buffers and prepares the
  // segments that bind them. False when the device refuses one (a buffer, a segment's
  // shapes): the caller plans again with the state on the host.
  Result<bool> prepare_device_states(GraphPlan& plan);
  Result<std::unique_ptr<GraphPlan>> plan_for_state(std::uint32_t g, bool entry, std::span<const std::int64_t> headroom);
  Status prepare_segment(Frame& f, std::uint32_t s);
  Result<std::uint8_t*> arena_for(const Frame& f, std::uint64_t bytes);
  // Heap bytes for value v of frame f (freeing what v held before: a re-sized loop carry).
  Result<void*> heap_alloc(Frame& f, std::uint32_t v, std::size_t bytes);

  // Limits (session.cpp). Bytes held now: arenas and heap tensors.
  std::uint64_t bytes_in_use() const;
  // Ok when `bytes` more (after freeing `freed`) stay within the memory limit; else
  // kInvalidInput naming the inputs whose values imply the size of value `value` of frame
  // `f` (-1: none known; not named when `f`'s symbols are not the current ones, as in a
  // callee's output sink), its producing node, the bytes and the limit.
  Status reserve(std::uint64_t bytes, std::uint64_t freed, const Frame& f, std::int32_t value, bool name_symbols = true) const;
  // Counts `nodes` more executed nodes against the run budget.
  Status count_nodes(const Frame& f, std::uint32_t n, std::uint32_t nodes);

  // control_flow.cpp
  Status run_control_flow(Frame& f, std::uint32_t n);
  Status store_output(Frame& f, std::uint32_t n, std::size_t k, const CallArg& value);

  // observe.cpp (SessionOptions::observer)
  // Hands nodes first..last of `f` (just run) to options.observer.
  void observe_nodes(const Frame& f, std::uint32_t first, std::uint32_t last);
  // Segment s's host-side outputs: the planned ones, plus with an observer every value its
  // nodes produce (given heap bytes of their own here).
  Result<const std::vector<std::uint32_t>*> segment_outputs(Frame& f, std::uint32_t s);
  std::vector<std::uint32_t> observed_outputs;  // segment_outputs' storage with an observer
};

}  // namespace kiln

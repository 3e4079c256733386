// The tracing machinery behind Tensor/SymInt/SymBool: the active trace, guards, node
// recording, and the eager path. Internal to kiln_export.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "kiln/export/dim.h"
#include "kiln/export/ir.h"
#include "kiln/export/tensor.h"

namespace kiln::detail {

struct TensorImpl {
  DType dtype = DType::kF32;
  std::vector<sym::Expr> shape;  // constants for eager tensors
  // Traced: the value id in the context's current graph.
  class TraceContext* ctx = nullptr;
  int graph = -1;
  int value = -1;
  // Eager: the bytes (C-contiguous, little-endian).
  std::shared_ptr<std::vector<std::uint8_t>> data;
  // Parameters: full dotted name and owning module path.
  std::string param_name;
  std::string module_path;
  /// Module::register_parameter / register_buffer: what the name refers to in messages.
  enum class Role : std::uint8_t { kNone, kParameter, kBuffer, kState } role = Role::kNone;
  bool is_state() const { return role == Role::kState; }
};

/// "parameter 'fc.weight'", "buffer 'bn.running_mean'", "state 'k_cache'".
std::string describe_param(const TensorImpl& impl);

/// A state tensor met while tracing: entry-graph input `input` holds its value when a run
/// starts; `current` its latest value (the result of the last in-place update, or `input`).
struct TracedState {
  std::shared_ptr<TensorImpl> impl;
  int index = -1;  // into Program::states
  int input = -1;
  int current = -1;
};

/// How a backed symbol may be constrained (from the user's Dim).
struct SymbolPolicy {
  Dim::Kind kind = Dim::Kind::kAuto;  // kNamed = strict
  std::string dim_name;               // the Dim's name ("batch"), if named
  std::string source;                 // "x.size()[0]" or "n"
  sym::ValueRange declared;
  const void* dim_id = nullptr;
};

/// A subgraph being traced (a cond branch, a while_loop body, a compile region): nested
/// tracers push one frame each. Free tensors used inside are lifted to extra inputs of the
/// subgraph, recorded here as (value id in the parent graph, input value id in this graph).
struct SubgraphFrame {
  int graph = -1;
  int parent = -1;
  std::size_t symbol_mark = 0;   // symbols with ids >= this were created inside (local)
  std::vector<std::pair<int, int>> lifted;
  std::string op;                // "cond", "while_loop", "invoke_subgraph": for messages
  std::string role;              // "true_fn", "body_fn", ...
};

/// Output of an op before it exists: dtype and symbolic shape.
struct OutSpec {
  DType dtype = DType::kF32;
  std::vector<sym::Expr> shape;
  bool allocated_by_kernel = false;  // data-dependent size (eager mode: the kernel allocates)
};

class TraceContext {
 public:
  ir::Program program;
  int graph_index = 0;
  std::vector<std::string> module_stack;
  std::unordered_map<int, SymbolPolicy> policies;
  std::unordered_map<const TensorImpl*, int> lifted;      // eager tensor -> constant index
  std::vector<std::shared_ptr<TensorImpl>> lifted_alive;  // keeps those addresses from being reused
  std::unordered_map<int, ir::NodeMeta> range_meta;       // symbol -> where its range was narrowed
  std::unordered_map<int, ir::NodeMeta> range_lo_meta;    // unbacked symbol -> the check that set its lower bound
  std::unordered_map<int, ir::NodeMeta> range_hi_meta;    // ... its upper bound
  std::unordered_map<int, int> binder;                    // unbacked symbol -> binding node
  std::vector<SubgraphFrame> frames;                      // nested subgraph traces, innermost last
  /// A compile region's subgraph, and the symbols its trace created ([symbol_mark, symbol_end)).
  struct RegionTrace {
    int graph = -1;
    std::size_t symbol_mark = 0, symbol_end = 0;
  };
  std::unordered_map<const void*, std::vector<RegionTrace>> regions;  // compile region -> its subgraphs
  std::unordered_map<std::string, int> subgraph_counts;   // "cond" -> subgraphs named so far
  /// The shape environment right after the inputs were bound: declared ranges only.
  std::optional<sym::ShapeEnv> declared_env;
  /// State tensors in the order the trace first used them (Program::states order).
  std::vector<TracedState> states;
  /// The state of `impl` (registering it on first use: a StateSpec, its initial value as a
  /// constant, an entry-graph input after the user inputs).
  TracedState& state_of(const std::shared_ptr<TensorImpl>& impl);
  /// Makes `value` (a value of the entry graph) the latest value of state `impl`.
  void update_state(const std::shared_ptr<TensorImpl>& impl, int value);

  ir::Graph& graph() { return program.graphs[static_cast<std::size_t>(graph_index)]; }
  sym::ShapeEnv& env() { return program.env; }

  /// Decides `e` (a guard from user code at `loc`): see SEMANTICS.md.
  bool guard(sym::Expr e, const SourceLoc& loc);
  /// check(): records a deferred runtime assert and narrows ranges.
  void check(sym::Expr e, const SourceLoc& loc);
  /// Value id of `t` in the current graph (lifting eager tensors to constants, and tensors
  /// of enclosing graphs to subgraph inputs).
  int value_of(const Tensor& t);
  /// Value id of `t` in graph `g`, which is the current graph or one of its callers.
  int value_in(int g, const Tensor& t);
  /// The Constant value of eager tensor `t` in graph `g` (registering the constant).
  int constant_in(int g, const Tensor& t);
  /// The frame tracing graph `g`, or nullptr for the entry graph.
  SubgraphFrame* frame_of(int g);
  /// Records that node `node` of the current graph binds unbacked symbol `sym`.
  void note_binding(int sym, int node);
  /// The graph whose bindings bind `sym`, or -1.
  int binding_graph(int sym) const;
  /// Throws the higher-order-op input-mutation error when an in-place op at `loc` would
  /// update `t` inside a subgraph that did not create it.
  void check_mutation(const Tensor& t, std::string_view op, const SourceLoc& loc);
  ir::NodeMeta meta(const SourceLoc& loc, std::string user_op, const std::vector<Tensor>& inputs) const;
  /// Records a node and returns its outputs as traced tensors.
  std::vector<Tensor> add_node(OpKind op, const std::vector<Tensor>& inputs, std::vector<ir::Attr> attrs,
                               const std::vector<OutSpec>& outs, const ir::NodeMeta& meta);
  Tensor make_tensor(int value);
  std::string symbol_text(sym::Expr e) const;
  /// "batch" / "x.size()[0]" for messages.
  std::string describe_symbol(int sym) const;

 private:
  [[noreturn]] void violation(const std::string& message, const SourceLoc& loc) const;
  void refine(int sym, sym::ValueRange range, sym::Expr fact, const SourceLoc& loc);
  /// A guard relates `replaced` to `replacement` (`s1 == s0`, `s1 == 2*s0`): a constraint
  /// violation when a strict or DYNAMIC dim is involved; AUTO dims accept it.
  void check_relation(int replaced, sym::Expr replacement, const SourceLoc& loc) const;
  /// Every symbol's current range, by id.
  std::vector<sym::ValueRange> ranges() const;
  /// Records `loc` in range_meta for each symbol whose range differs from `before`.
  void note_narrowed(const std::vector<sym::ValueRange>& before, const SourceLoc& loc, const char* what);
  void add_input_assert(sym::Expr fact, const SourceLoc& loc);
};

/// The trace active on this thread, or nullptr (eager mode).
TraceContext* current_trace();
void set_current_trace(TraceContext* ctx);

/// "model.cpp:12" (basename) for messages and debug info.
std::string loc_text(const SourceLoc& loc);
ir::SourceLocation to_ir(const SourceLoc& loc);

/// Throws ExportError with "[op] message (file:line)".
[[noreturn]] void op_error(std::string_view op, const std::string& message, const SourceLoc& loc,
                           StatusCode code = StatusCode::kExportError);

/// Runs `op`: records a node while tracing (if any input is traced, or it has no inputs),
/// else computes eagerly with the CPU kernels (constant folding during a trace).
std::vector<Tensor> run_op(OpKind op, const std::vector<Tensor>& inputs, std::vector<ir::Attr> attrs,
                           const std::vector<OutSpec>& outs, const SourceLoc& loc, std::string user_op);

/// Eager execution of one op on concrete tensors (eager.cpp).
std::vector<Tensor> run_eager(OpKind op, const std::vector<Tensor>& inputs, const std::vector<ir::Attr>& attrs,
                              const std::vector<OutSpec>& outs, const SourceLoc& loc);

/// An eager tensor with freshly allocated, zeroed storage.
Tensor make_eager(DType dtype, std::vector<std::int64_t> shape);

}  // namespace kiln::detail

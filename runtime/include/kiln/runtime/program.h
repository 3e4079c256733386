// Running a bundle: Program (loaded, immutable, shareable across threads) and Session
// (one per thread; owns scratch memory and the thread pool).
//
//   auto bundle = Bundle::open("model.kiln");             // verify
//   auto program = Program::load(std::move(*bundle));     // resolve kernels (kUnsupported
//                                                         //  lists every op this build lacks)
//   Session session(*program, {.threads = 2});
//   auto result = session.run({HostValue::tensor(x), HostValue::integer(3)});
//   // result->outputs, result->variant ("generic" or a specialization's label)
//   session.read_state("k_cache_0");                        // state (mutable buffers), if any
//
// run() checks the inputs before anything runs: count, kinds, dtypes, ranks, static dims,
// static int values, every declared range (lower bounds included), equalities and derived
// dims, and the runtime asserts over the inputs. A failure is kInvalidInput naming the
// input, the dim, the constraint and the source line recorded at export. Unbacked symbols
// are bound right after the node producing them; their asserts are checked then.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kiln/format/dtype.h"
#include "kiln/runtime/bundle.h"
#include "kiln/runtime/status.h"

namespace kiln {

/// A dense C-contiguous tensor owned by the caller or the runtime.
struct HostTensor {
  DType dtype = DType::kF32;
  std::vector<std::int64_t> shape;
  std::vector<std::uint8_t> data;

  std::int64_t numel() const {
    std::int64_t n = 1;
    for (std::int64_t d : shape) n *= d;
    return n;
  }
  /// Element i (C order) of any dtype as a double (halves widened, bool as 0/1); i must be
  /// below numel() and data must hold numel() elements.
  double element(std::int64_t i) const;
};

/// An input or output: a tensor or an int.
struct HostValue {
  bool is_int = false;
  std::int64_t int_value = 0;
  HostTensor tensor;

  static HostValue integer(std::int64_t v) { return {true, v, {}}; }
  static HostValue of(HostTensor t) { return {false, 0, std::move(t)}; }
};

struct RunResult {
  std::vector<HostValue> outputs;  // signature order
  std::string variant;             // "generic" or the specialization's label
};

struct ProgramOptions {
  /// "cpu"; "vulkan" (kUnavailable, saying why, when no usable device exists); or "auto"
  /// (Vulkan when usable, else the CPU; backend_notice() says why).
  std::string backend = "cpu";
  /// Vulkan: enable the Khronos validation layer and fail on any message.
  bool validation = false;
  /// Vulkan: persist compiled pipelines in this file (VkPipelineCache); empty = none.
  std::string pipeline_cache_path;
  /// CPU: pack constant weights of linear/matmul once at load for the SGEMM, and transform
  /// and pack 3x3 conv2d weights for the Winograd path (costs one extra copy of those
  /// weights in memory, four for Winograd; saves redoing it on every run).
  bool prepack_weights = true;
  /// CPU: let a linear/conv2d kernel apply the activation node after it (linear+relu), and
  /// let a matmul read its B operand straight from the tensor a slice (step 1, along one of
  /// its last two dims, read only by that matmul) cuts it from, with no copy (attention
  /// over a KV cache's first N positions), and let a blocked depthwise conv2d make its input
  /// from the 1x1 expansion conv2d before it band by band in cache, without that
  /// expansion's output in memory (an inverted bottleneck; KILN_FUSE_EXPANSIONS=0 turns just
  /// this off). Off, every node computes its own output: what a
  /// SessionOptions::observer needs to see the pre-activation value of such a node (`kiln
  /// compare` loads with false). A Session with an observer computes folded slices anyway.
  bool fuse_activations = true;
  /// CPU: keep 4-D f32 activations between convolutions, pools and the elementwise ops
  /// between them in the blocked NCHW8c layout (8 channels per pixel side by side; the
  /// layout pass, docs/ARCHITECTURE.md "Layouts"), reordering only where a node needs plain
  /// NCHW. Off (or the environment variable KILN_LAYOUT=plain), every value is plain NCHW.
  bool blocked_layout = true;
};

/// Where one node of a graph runs, as decided at load (Program::placement).
struct NodePlacement {
  std::uint32_t node = 0;
  /// The op; "linear+gelu" when the executor fused the next node's activation into it.
  std::string op;
  /// "cpu" or the accelerator's name ("vulkan").
  std::string backend;
  /// The accelerator segment (consecutive nodes run as one submission); -1 on the CPU.
  std::int32_t segment = -1;
  /// An activation (or residual add, or a node of an activation pattern) whose work an
  /// earlier node's kernel does: it only passes the bytes on.
  bool fused_away = false;
  /// That earlier node (fused_away); -1 for every other node.
  std::int32_t fused_into = -1;
  /// A node folded into a later one, which does its work (and this node computes nothing,
  /// unless an observer watches): a squeeze-excitation's mul into the conv after it, a slice
  /// into the matmul reading it, a bilinear interpolation's gathers and lerps into its last
  /// add, an inverted bottleneck's 1x1 expansion (and its activation) into the depthwise conv
  /// after it. That node's index; -1 for every other node.
  std::int32_t folded_into = -1;
  /// Where its tensors are blocked (the layout pass): "" when every input and output is
  /// plain; else e.g. "nchw8c" (all of them), "nchw -> nchw8c" (a conv reading the plain
  /// network input), "nchw8c -> nchw" (a pool feeding a flatten).
  std::string layout;
  /// "model.cpp:41, fc" when the bundle has debug info.
  std::string where;
};

/// Where a state tensor lives between runs, as decided at load (Program::state_placement).
struct StatePlacement {
  std::string name;
  /// "cpu" (the Session's host memory) or the accelerator's name ("vulkan"): every node
  /// reading or updating the state runs there, so a Session keeps it in device memory,
  /// downloading it only when read (docs/FORMAT.md, "State"). A call whose shapes the device
  /// refuses (limits) keeps it on the host for that call.
  std::string backend;
};

class Program {
 public:
  /// Takes ownership of a verified bundle and resolves a kernel for every op. With an
  /// accelerator, nodes it supports run there in segments; every other node on the CPU.
  static Result<std::shared_ptr<const Program>> load(std::unique_ptr<Bundle> bundle, const ProgramOptions& options = {});
  ~Program();

  /// "cpu" or "vulkan".
  std::string backend_name() const;
  /// The instruction sets the CPU kernels use on this machine, as the CPU and
  /// KILN_CPU_ISA chose them: "gemm avx512, conv avx512, vector avx2" (gemm: avx512 only
  /// where 512-bit FMAs measured twice the 256-bit throughput, or with KILN_CPU_ISA=avx512).
  static std::string cpu_kernel_isas();
  /// Why `auto` chose the CPU; empty otherwise.
  const std::string& backend_notice() const;
  /// Every node of graph `graph` (0-based; empty when out of range) with where it runs.
  std::vector<NodePlacement> placement(std::uint32_t graph) const;
  /// Every state tensor (in the bundle's order) with where it lives between runs (the entry
  /// graph's rule; a specialization may differ).
  std::vector<StatePlacement> state_placement() const;

  /// Bytes of mapped weight pages released after load: constants that only prepared
  /// (prepacked) conv2d kernels read leave the resident set (Bundle::release_pages), so a
  /// process holds those weights about once (the prepared copy), not twice. 0 when the
  /// bundle is held in memory (`use_mmap = false`, zstd segments) or nothing was prepared.
  std::size_t released_weight_bytes() const;

  const Bundle& bundle() const { return *bundle_; }

  struct Impl;  // executor/program_impl.h

 private:
  friend struct ProgramInternals;
  Program() = default;
  std::unique_ptr<Bundle> bundle_;
  std::unique_ptr<Impl> impl_;
};

/// One output of an observed node (NodeObservation). The views are valid only during the
/// observer call; copy what you keep.
struct ObservedValue {
  enum class Kind : std::uint8_t { kTensor, kInt, kAbsent };
  Kind kind = Kind::kTensor;
  std::int64_t int_value = 0;               // kInt (a SymInt/SymBool output)
  DType dtype = DType::kF32;                // kTensor
  std::span<const std::int64_t> shape;      // kTensor
  std::span<const std::uint8_t> data;       // kTensor: dense, C order, shape's bytes
};

/// What SessionOptions::observer receives right after a node ran.
struct NodeObservation {
  std::uint32_t graph = 0;  // Program.graphs index: the variant that ran, or a subgraph
  std::uint32_t node = 0;   // index of the node in that graph
  /// 0 for the graph run() called (the entry or the specialization chosen); 1 + the
  /// nesting for nodes of a subgraph called by cond/while_loop/invoke_subgraph (a loop's
  /// body is observed on every iteration). The control-flow node itself is observed at its
  /// own depth after the call returns, with its outputs.
  std::uint32_t depth = 0;
  std::span<const ObservedValue> outputs;  // one per node output, in order
};

/// Called by Session::run after every executed node, on the calling thread. With an
/// accelerator, a segment's nodes are observed after the segment ran, in node order, and
/// every value they produce is downloaded to host memory for it (slow: a debugging aid).
using NodeObserver = std::function<void(const NodeObservation&)>;

struct SessionOptions {
  int threads = 1;
  /// Record per-node timings (RunStats::ops); costs two clock reads per node.
  bool profile = false;
  /// The most iterations a while_loop may run (a loop's own max_iterations attribute, when
  /// present, wins); more is a kInvalidInput error rather than a hang.
  std::int64_t max_loop_iterations = 1'000'000;
  /// The most bytes of tensor memory one run may hold: planned arenas, tensors sized at run
  /// time (data-dependent sizes, item() values), control-flow results and while_loop
  /// carries, and the outputs copied to the caller. Checked before each allocation; more is
  /// kInvalidInput naming the input values that imply the size, the node, the bytes
  /// needed and the limit (rather than an out-of-memory abort). 0 = default_max_memory_bytes().
  std::uint64_t max_memory_bytes = 0;
  /// The most nodes one run may execute, counting every node of every subgraph call and
  /// loop iteration; more ends the run with kInvalidInput naming the budget and the
  /// control-flow node it ran out in. Bounds the time of loops that never end and of calls
  /// that multiply (subgraphs that each call the next one twice).
  std::int64_t max_nodes_executed = 100'000'000;
  /// When set, receives every node's outputs as the run goes (NodeObserver): for
  /// debugging numerics (`kiln compare`). Empty (the default) costs one test per node.
  /// Intermediates then also count against max_memory_bytes where they are downloaded
  /// from an accelerator. With activation fusion (ProgramOptions::fuse_activations) a
  /// fused linear/conv2d reports its output after the activation.
  NodeObserver observer;
};

/// SessionOptions::max_memory_bytes when 0: three quarters of the physical memory (8 GiB
/// when the system does not say).
std::uint64_t default_max_memory_bytes();

/// What the last run() did.
struct RunStats {
  /// Peak bytes of intermediate and output tensors: the planned arenas of the graphs that
  /// ran plus the most bytes of tensors sized at run time (data-dependent sizes) alive at
  /// once (a while_loop's carries of one iteration, not of all of them).
  std::uint64_t peak_bytes = 0;
  /// The planned arena of the graph that ran, and what its tensors would take without
  /// reuse (every intermediate alive until the end).
  std::uint64_t arena_bytes = 0;
  std::uint64_t unplanned_bytes = 0;
  /// Whether this run's input-shape signature was already planned (no shape evaluation).
  bool plan_cached = false;
  /// Whether this run's input shapes were planned with other int inputs (a decode step's
  /// new position) and that plan was re-evaluated for these (sizes and attributes, checked
  /// to fit its memory plan) instead of made again.
  bool plan_reused = false;
  /// Accelerator traffic of the run.
  std::uint64_t bytes_uploaded = 0;
  std::uint64_t bytes_downloaded = 0;
  /// Bytes of state tensors the run wrote: the elements an in-place update changed (a KV
  /// cache decode step: the new K/V rows) plus every new value copied in whole.
  std::uint64_t state_bytes_written = 0;
  struct Op {
    std::string op;
    std::string where;  // "model.cpp:41, fc" when the bundle has debug info
    double ms = 0.0;
  };
  std::vector<Op> ops;  // per executed node, when profiling
};

/// The values of every state tensor of a Session at one moment (Session::snapshot_state),
/// in the bundle's state order; restore it into a Session of the same Program.
struct StateSnapshot {
  std::vector<std::string> names;
  std::vector<HostTensor> values;
};

class Session {
 public:
  /// `program` must outlive the session.
  explicit Session(const Program& program, SessionOptions options = {});
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  /// Runs the program on `inputs` (signature order).
  Result<RunResult> run(std::span<const HostValue> inputs);
  /// The same, writing into `result`, whose output buffers are reused: a serving loop that
  /// passes the same RunResult every time allocates nothing once shapes repeat. On error,
  /// `result` holds unspecified (valid) contents.
  Status run(std::span<const HostValue> inputs, RunResult& result);
  /// Statistics of the most recent run().
  const RunStats& last_stats() const;

  // State (a bundle with state tensors: mutable buffers such as a KV cache). The Session
  // owns the values; a new Session holds the bundle's initial values. run() reads them and
  // replaces them with the values the graph computes, only when the run succeeds: a failed
  // run leaves every state tensor as it was. A row write into a state that nothing reads
  // afterwards (a KV cache's index_put) is done in place on the Session's buffer, saving the
  // overwritten rows first so a failed run can put them back; other new values are copied
  // in (RunStats::state_bytes_written; docs/FORMAT.md, "State"). With the Vulkan backend a
  // state that only device nodes read and update stays on the device between runs and is
  // downloaded only when read (read_state, snapshot_state); set/restore/reset upload it at
  // the next run.

  /// The state tensors' names, in the bundle's order (empty for a stateless program).
  std::vector<std::string> state_names() const;
  /// Puts every state tensor back to its initial value.
  void reset_state();
  /// A copy of state tensor `name`; kInvalidInput naming it when there is none.
  Result<HostTensor> read_state(const std::string& name) const;
  /// Replaces state tensor `name`, checked like an input (dtype, shape, byte count):
  /// kInvalidInput naming the state and the constraint.
  Status set_state(const std::string& name, const HostTensor& value);
  /// A copy of every state tensor (empty when one cannot be downloaded from the device:
  /// a lost device; restore_state refuses that).
  StateSnapshot snapshot_state() const;
  /// Restores a snapshot taken from a Session of the same Program (every state, checked
  /// like set_state; nothing changes when one does not fit).
  Status restore_state(const StateSnapshot& snapshot);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln

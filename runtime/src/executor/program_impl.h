// Internal state of a loaded Program: kernels resolved per op, and per graph the static
// facts the executor needs on every run (producers, last uses, which outputs a kernel
// sizes itself, where asserts and bindings sit), computed once at load.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "backends/backend.h"
#include "backends/cpu/gemm/gemm.h"
#include "backends/cpu/kernel.h"
#include "kernel/kernel.h"
#include "kiln/format/fb_count.h"
#include "kiln/format/kiln_generated.h"
#include "kiln/format/ops.h"
#include "kiln/runtime/program.h"

namespace kiln {

struct NodeInfo {
  OpKind op = OpKind::Identity;
  KernelFn kernel = nullptr;  // nullptr for higher-order ops
  bool hop = false;
  std::vector<std::uint32_t> inputs, outputs, subgraphs;
  std::vector<bool> kernel_allocates;  // per output: its size is decided by the kernel
  bool has_exprs = false;              // some attribute is an expression
  bool alias_ok = false;               // reshape/identity: the output may share the input's bytes
  bool inplace_ok = false;             // elementwise: the output may overwrite a dying input
  std::uint32_t debug = 0;
  std::int32_t segment = -1;           // accelerator segment this node belongs to
  const cpu::PackedB* packed_b = nullptr;  // input 1 (a constant weight) packed at load
  const cpu::PreparedWeights* prepared = nullptr;  // input 1 prepared at load (cpu::prepare_weights)
  bool blocked_weights = false;                     // `prepared` is for the blocked (NCHW8c) kernels
  bool workspace = false;  // its kernel can use free arena bytes as working memory (GraphPlan::workspace)
  // A conv2d whose input and output are plain but that runs the blocked kernels anyway,
  // converting at its edges (KernelContext::blocked_kernel): a dense conv with a spatial
  // kernel and enough channels between layout-sensitive ops (a conv3d's taps between their
  // permutes), where the blocked direct and Winograd kernels beat the plain ones.
  bool blocked_kernel = false;
  // Activation fusion (CPU nodes): this node's kernel applies `fused_act` to its output,
  // and the activation node after it is `fused_away` (its output aliases this one's).
  cpu::FusedActivation fused_act = cpu::FusedActivation::kNone;
  bool fused_away = false;
  std::int32_t fused_into = -1;  // fused_away: the node whose kernel does this one's work
  // Residual fusion (fuse_residual_adds): this conv2d adds value `residual` to its output
  // before the activation (y = act(conv + bias + residual)), and the add node after it is
  // fused_away, its output sharing this node's bytes through its input `alias_input`.
  std::int32_t residual = -1;
  // Channel-scale folding (fold_channel_scales): a mul(x, s) with s [N or 1, C, 1, 1] whose
  // only reader is this blocked conv2d is `folded` (it computes nothing, unless an observer
  // watches); this conv2d reads x and gets s as KernelContext::input_scale. `scale_mul` is
  // the mul node, `scale_operand` the index of s among its inputs.
  std::int32_t scale_mul = -1;
  std::uint8_t scale_operand = 1;
  // Expansion folding (fuse_expansions, program.cpp): this blocked depthwise conv2d makes
  // its input itself from the 1x1 conv2d `expansion` (KernelContext::folded_conv), which
  // is `folded` (it computes nothing, unless an observer watches); that conv's output has
  // no bytes, and its inputs live until this node runs.
  std::int32_t expansion = -1;
  std::uint8_t alias_input = 0;  // alias_ok / fused_away: the input whose bytes the output shares
  // Slice folding (CPU, f32): a slice along one of the last two dims whose only reader is
  // a matmul's B is `folded` (it computes nothing); that matmul's `b_slice` is the slice
  // node, and it reads B as a window of the slice's input (OperandWindow), with no copy.
  bool folded = false;
  std::int32_t b_slice = -1;
  // A folded node (any fold below or above): the node that does its work instead
  // (Program::placement's folded_into).
  std::int32_t folded_into = -1;
  // Gather-lerp fusion (fuse_gather_lerps, program.cpp): this add computes bilinear
  // interpolation spelled as four index nodes and three lerps in one pass
  // (cpu::kernels::gather_lerp2, from GraphInfo::gather_lerps[gather_lerp]); the other ten
  // nodes are `folded`.
  std::int32_t gather_lerp = -1;
  // Layouts (executor/layout.cpp): bit k set when input/output k is stored blocked
  // (NCHW8c). Its TensorView is then the physical [N, ceil(C/8), H, W, 8] (every plan and
  // kernel sees that shape); the kernel learns the layout from KernelContext::blocked.
  std::uint32_t in_blocked = 0, out_blocked = 0;
};

// The op's name, with "+relu" (etc.) when an activation was fused into it: how profiles
// and Program::placement name a node. `folds` false: as a run with an observer executes it,
// without the nodes folded into it (those then run on their own).
inline std::string op_label(const NodeInfo& ni, bool folds = true) {
  std::string name(op_info(ni.op).name);
  if (folds && ni.gather_lerp >= 0) return "index+lerp";
  if (folds && ni.scale_mul >= 0) name = "mul+" + name;
  if (folds && ni.expansion >= 0) name = "conv1x1>" + name;
  if (ni.residual >= 0) name += "+add";
  if (ni.fused_act != cpu::FusedActivation::kNone) name = name + "+" + cpu::activation_name(ni.fused_act);
  return name;
}

struct ValueInfo {
  fb::ValueKind kind = fb::ValueKind::Tensor;
  DType dtype = DType::kF32;
  const flatbuffers::Vector<std::uint32_t>* shape = nullptr;
  std::uint32_t expr = 0;
  std::uint32_t constant = 0;
  std::int32_t producer = -1;  // node index; -1 for graph inputs, constants, symbolic values
  std::int32_t last_use = -1;  // last node reading it; nodes.size() for graph outputs
  bool graph_input = false;
  bool graph_output = false;
  bool blocked = false;                // stored NCHW8c (layout.cpp): its planned view is the physical shape
  std::vector<std::uint32_t> symbols;  // symbols its shape mentions
};

/// A blocked value's physical view: logical [N, C, H, W] -> [N, ceil(C/8), H, W, 8].
/// Leaves other views unchanged.
void to_physical(const ValueInfo& vi, TensorView& view);

struct Segment {
  std::uint32_t first = 0, last = 0;  // node range [first, last]
};

// The operands of a gather-lerp fusion (NodeInfo::gather_lerp): x, the index tensors of
// each of the four gathers (on x's last dims `dims`), and the three lerp weights, in
// cpu::kernels::gather_lerp2's order.
struct GatherLerp {
  std::uint32_t x = 0;
  std::vector<std::int64_t> dims;
  std::array<std::vector<std::uint32_t>, 4> indices;
  std::array<std::uint32_t, 3> weights{};
};

struct GraphInfo {
  std::vector<NodeInfo> nodes;
  std::vector<GatherLerp> gather_lerps;
  std::vector<ValueInfo> values;
  std::vector<std::vector<std::uint32_t>> asserts_after;  // [0]: on entry; [n + 1]: after node n
  std::vector<std::vector<std::uint32_t>> bindings_of;    // per node
  std::vector<bool> bound_inside;                         // per symbol: bound by a node of this graph
  std::vector<Segment> segments;
};

/// Per value of a graph: how many node inputs read it (`count`), and the last node that
/// does (`last`, -1 when none); for the load-time fusions.
struct ValueReaders {
  std::vector<std::uint32_t> count;
  std::vector<std::int32_t> last;
};
ValueReaders readers_of(const GraphInfo& info);
/// Whether values a and b of `info` have the same symbolic shape (the same expression in
/// every dim).
bool same_value_shape(const GraphInfo& info, std::uint32_t a, std::uint32_t b);
/// The value of a shape expression that mentions no symbol; nullopt otherwise.
std::optional<std::int64_t> static_value(const fb::Program& p, std::uint32_t expr);
/// The value of a one-element f32 constant of `info`; nullopt for anything else.
std::optional<float> constant_f32_scalar(const Bundle& bundle, const GraphInfo& info, std::uint32_t v);

/// Decides which values of graph `info` are stored NCHW8c (ValueInfo::blocked) and sets
/// the nodes' in_blocked/out_blocked masks (executor/layout.cpp). Runs after the
/// accelerator partition and activation fusion.
void plan_layouts(const fb::Program& p, const Bundle& bundle, std::uint32_t g, GraphInfo& info);

/// Folds a squeeze-excitation's channel scale into the convolution that reads it: a CPU
/// mul(x, s), x a 4-D f32 tensor and s of shape [N or 1, C, 1, 1], whose output only a
/// blocked conv2d (after plan_layouts) reads as its input, becomes that conv's
/// NodeInfo::scale_mul (executor/layout.cpp). Saves a full pass over x.
void fold_channel_scales(const fb::Program& p, const Bundle& bundle, std::uint32_t g, GraphInfo& info);

// A node's attributes as kernels take them (AttrValue), with storage for their spans.
struct NodeAttrs {
  std::vector<AttrValue> values;
  std::vector<std::vector<std::int64_t>> ints;
  std::vector<std::vector<double>> floats;
};

/// Converts `node`'s attributes (the one place fb::Attr becomes AttrValue). With `symbols`,
/// expression attributes are evaluated (kExpr into `i`, kExprs into `ints`); a failed
/// evaluation is returned. Without, they keep their type and carry no values (enough for
/// Backend::supports).
Status read_attrs(const fb::Program& p, const fb::Node& node, std::optional<std::span<const std::int64_t>> symbols, NodeAttrs& out);

struct Program::Impl {
  std::vector<OpKind> kinds;           // per Program.op_names index
  std::vector<KernelFn> kernels;  // per Program.op_names index
  std::vector<GraphInfo> graphs;
  std::map<std::pair<std::uint32_t, bool>, cpu::PackedB> packed;  // (constant, transposed) -> packed
  std::vector<std::unique_ptr<cpu::PreparedWeights>> prepared;     // what NodeInfo::prepared points to
  std::size_t released_weight_bytes = 0;  // mapped weight pages released after preparing (release_prepared_constants)
  std::unique_ptr<backend::Backend> accelerator;  // null: CPU only
  std::string backend_notice;                     // why `auto` fell back to the CPU
};

/// The executor's way into a Program's internals (Program::Impl is not public API).
struct ProgramInternals {
  static const Program::Impl& of(const Program& program) { return *program.impl_; }
};

}  // namespace kiln

// Program::load: resolve a CPU kernel for every op, check node arities and attribute kinds
// against the op table so that execution never meets a malformed node, precompute the
// per-graph facts every run needs, and (with an accelerator) partition graphs into
// segments of consecutive nodes the accelerator supports.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <map>
#include <string_view>

#include "backends/cpu/kernel.h"
#include "backends/cpu/kernels/conv_prepared.h"
#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/kernels/nchwc.h"
#include "executor/plan.h"
#include "executor/program_impl.h"
#include "kiln/format/kiln_generated.h"
#include "kiln/runtime/expr.h"

namespace kiln {
namespace {

// KILN_LAYOUT=plain: every value plain NCHW whatever ProgramOptions::blocked_layout says
// (a before/after switch for benchmarks and triage, like the kernels' KILN_CONV_* ones).
bool layout_switched_off() {
  const char* v = std::getenv("KILN_LAYOUT");
  return v != nullptr && std::string_view(v) == "plain";
}

bool attr_matches(fb::AttrKind kind, const AttrSpec& spec) {
  if (kind == fb::AttrKind::None) return spec.optional;
  return static_cast<int>(kind) == static_cast<int>(spec.type);
}

Status check_node(const fb::Program& p, const Program::Impl& impl, std::uint32_t g, std::uint32_t n) {
  const auto* graph = p.graphs()->Get(g);
  const auto* node = graph->nodes()->Get(n);
  const OpKind kind = impl.kinds[node->op()];
  const OpInfo& info = op_info(kind);
  const std::string where = "graph " + std::to_string(g) + ", node " + std::to_string(n) + " (" + std::string(info.name) + ")";
  const auto ins = static_cast<int>(count(node->inputs())), outs = static_cast<int>(count(node->outputs()));
  if (ins < info.min_inputs || (info.max_inputs >= 0 && ins > info.max_inputs)) {
    return Status(StatusCode::kInvalidBundle, where + ": " + std::to_string(ins) + " inputs, expected " + std::to_string(info.min_inputs) +
                                                  (info.max_inputs < 0 ? " or more" : ".." + std::to_string(info.max_inputs)));
  }
  if (info.num_outputs >= 0 && outs != info.num_outputs) {
    return Status(StatusCode::kInvalidBundle, where + ": " + std::to_string(outs) + " outputs, expected " + std::to_string(info.num_outputs));
  }
  const std::uint32_t n_attrs = count(node->attrs());
  for (std::uint32_t k = 0; k < info.attrs.size(); ++k) {
    const fb::AttrKind ak = k < n_attrs ? node->attrs()->Get(k)->kind() : fb::AttrKind::None;
    if (!attr_matches(ak, info.attrs[k])) {
      return Status(StatusCode::kInvalidBundle, where + ": attribute " + std::string(info.attrs[k].name) + " has kind " +
                                                    fb::EnumNameAttrKind(ak) + ", expected a different kind");
    }
  }
  const bool hop = kind == OpKind::Cond || kind == OpKind::WhileLoop || kind == OpKind::InvokeSubgraph;
  const std::uint32_t subs = count(node->subgraphs());
  auto bad = [&](const std::string& m) { return Status(StatusCode::kInvalidBundle, where + ": " + m); };
  if (!hop) {
    if (subs != 0) return bad("only control-flow ops call subgraphs");
    for (std::uint32_t k = 0; k < count(node->inputs()); ++k) {
      const auto vk = graph->values()->Get(node->inputs()->Get(k))->kind();
      if (vk == fb::ValueKind::SymInt || vk == fb::ValueKind::SymBool) return bad("input " + std::to_string(k) + " is symbolic; only control-flow ops take symbolic operands");
    }
    return Status::Ok();
  }
  // Control flow: the calling convention of docs/FORMAT.md ("Higher-order ops").
  auto graph_in = [&](std::uint32_t sg) { return count(p.graphs()->Get(sg)->inputs()); };
  auto graph_out = [&](std::uint32_t sg) { return count(p.graphs()->Get(sg)->outputs()); };
  if (kind == OpKind::Cond) {
    if (subs != 2) return bad("cond calls 2 subgraphs, not " + std::to_string(subs));
    for (std::uint32_t k = 0; k < 2; ++k) {
      const std::uint32_t sg = node->subgraphs()->Get(k);
      if (graph_in(sg) != static_cast<std::uint32_t>(ins - 1)) return bad("branch graph " + std::to_string(sg) + " takes " + std::to_string(graph_in(sg)) + " inputs, the cond passes " + std::to_string(ins - 1));
      if (graph_out(sg) != static_cast<std::uint32_t>(outs)) return bad("branch graph " + std::to_string(sg) + " returns " + std::to_string(graph_out(sg)) + " outputs, the cond has " + std::to_string(outs));
    }
  } else if (kind == OpKind::WhileLoop) {
    if (subs != 2) return bad("while_loop calls 2 subgraphs, not " + std::to_string(subs));
    if (outs > ins) return bad("more carries than inputs");
    const std::uint32_t cg = node->subgraphs()->Get(0), bg = node->subgraphs()->Get(1);
    if (graph_in(cg) != static_cast<std::uint32_t>(ins) || graph_in(bg) != static_cast<std::uint32_t>(ins)) return bad("loop graphs must take all " + std::to_string(ins) + " inputs");
    if (graph_out(cg) != 1) return bad("the loop condition graph must return one value");
    if (graph_out(bg) != static_cast<std::uint32_t>(outs)) return bad("the loop body must return the " + std::to_string(outs) + " carries");
  } else {
    if (subs != 1) return bad("invoke_subgraph calls 1 subgraph, not " + std::to_string(subs));
    const std::uint32_t sg = node->subgraphs()->Get(0);
    if (graph_in(sg) != static_cast<std::uint32_t>(ins) || graph_out(sg) != static_cast<std::uint32_t>(outs)) return bad("the subgraph's inputs/outputs do not match the call");
  }
  return Status::Ok();
}

void collect_symbols(const fb::Program& p, std::uint32_t expr, std::vector<std::uint32_t>& out) {
  const auto* ref = p.exprs()->Get(expr);
  for (std::uint32_t t = ref->start(); t < ref->start() + ref->length(); ++t) {
    const auto* tok = p.expr_tokens()->Get(t);
    if (tok->op() == fb::ExprOp::Sym) {
      const auto s = static_cast<std::uint32_t>(tok->value());
      if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(s);
    }
  }
}

bool is_alias_op(OpKind k) { return k == OpKind::Reshape || k == OpKind::Identity; }

// A pad whose amounts are all zero (known before the run): a copy, so its output may share
// its input's bytes like a reshape (Swin pads its windows to multiples of 7 that 56, 28, 14
// and 7 already are).
bool is_zero_pad(const fb::Program& p, const fb::Node& node) {
  const auto* attrs = node.attrs();
  if (count(attrs) < 1) return false;
  const fb::Attr* pads = attrs->Get(0);
  if (pads->kind() == fb::AttrKind::Ints) {
    return pads->ints() != nullptr && std::all_of(pads->ints()->begin(), pads->ints()->end(), [](std::int64_t v) { return v == 0; });
  }
  if (pads->kind() == fb::AttrKind::Exprs && pads->exprs() != nullptr) {
    return std::all_of(pads->exprs()->begin(), pads->exprs()->end(),
                       [&](std::uint32_t e) { return static_value(p, e) == std::optional<std::int64_t>(0); });
  }
  return false;
}

bool is_inplace_op(OpKind k) {
  switch (k) {
    case OpKind::Add: case OpKind::Sub: case OpKind::Mul: case OpKind::Div: case OpKind::Pow:
    case OpKind::Maximum: case OpKind::Minimum:
    case OpKind::Neg: case OpKind::Abs: case OpKind::Exp: case OpKind::Log: case OpKind::Sqrt:
    case OpKind::Rsqrt: case OpKind::Reciprocal: case OpKind::Sin: case OpKind::Cos: case OpKind::Tanh:
    case OpKind::Sigmoid: case OpKind::Relu: case OpKind::Gelu: case OpKind::Silu: case OpKind::Hardswish:
    case OpKind::Hardsigmoid: case OpKind::Erf: case OpKind::Floor: case OpKind::Ceil: case OpKind::Round:
    case OpKind::Sign: case OpKind::Clamp: case OpKind::LeakyRelu:
    case OpKind::Atan: case OpKind::Asin: case OpKind::Acos: case OpKind::Tan: case OpKind::Sinh: case OpKind::Cosh: case OpKind::Asinh: case OpKind::Acosh: case OpKind::Atanh:
      return true;
    default:
      return false;
  }
}

GraphInfo analyze(const fb::Program& p, const Program::Impl& impl, std::uint32_t g) {
  const auto* graph = p.graphs()->Get(g);
  GraphInfo info;
  const std::uint32_t nv = count(graph->values()), nn = count(graph->nodes());
  info.values.resize(nv);
  info.nodes.resize(nn);
  info.asserts_after.resize(nn + 1);
  info.bindings_of.resize(nn);
  info.bound_inside.assign(count(p.symbols()), false);
  for (std::uint32_t v = 0; v < nv; ++v) {
    const auto* val = graph->values()->Get(v);
    ValueInfo& vi = info.values[v];
    vi.kind = val->kind();
    vi.dtype = static_cast<DType>(val->dtype());
    vi.shape = val->shape();
    vi.expr = val->expr();
    vi.constant = val->constant();
    for (std::uint32_t d = 0; d < count(val->shape()); ++d) collect_symbols(p, val->shape()->Get(d), vi.symbols);
  }
  for (std::uint32_t k = 0; k < count(graph->inputs()); ++k) info.values[graph->inputs()->Get(k)].graph_input = true;
  for (std::uint32_t b = 0; b < count(graph->bindings()); ++b) {
    const auto* ub = graph->bindings()->Get(b);
    info.bindings_of[ub->node()].push_back(b);
    info.bound_inside[ub->symbol()] = true;
  }
  for (std::uint32_t n = 0; n < nn; ++n) {
    const auto* node = graph->nodes()->Get(n);
    NodeInfo& ni = info.nodes[n];
    ni.op = impl.kinds[node->op()];
    ni.kernel = impl.kernels[node->op()];
    ni.hop = ni.op == OpKind::Cond || ni.op == OpKind::WhileLoop || ni.op == OpKind::InvokeSubgraph;
    if (node->inputs()) ni.inputs.assign(node->inputs()->begin(), node->inputs()->end());
    if (node->outputs()) ni.outputs.assign(node->outputs()->begin(), node->outputs()->end());
    if (node->subgraphs()) ni.subgraphs.assign(node->subgraphs()->begin(), node->subgraphs()->end());
    ni.debug = node->debug();
    ni.alias_ok = is_alias_op(ni.op) || (ni.op == OpKind::Pad && is_zero_pad(p, *node));
    ni.inplace_ok = is_inplace_op(ni.op);
    for (std::uint32_t k = 0; k < count(node->attrs()); ++k) {
      const auto kind = node->attrs()->Get(k)->kind();
      if (kind == fb::AttrKind::Expr || kind == fb::AttrKind::Exprs) ni.has_exprs = true;
    }
    for (std::uint32_t in : ni.inputs) info.values[in].last_use = static_cast<std::int32_t>(n);
    for (std::uint32_t out : ni.outputs) info.values[out].producer = static_cast<std::int32_t>(n);
    // An output whose shape mentions a symbol this very node binds is sized by the kernel.
    ni.kernel_allocates.assign(ni.outputs.size(), false);
    for (std::uint32_t b : info.bindings_of[n]) {
      const std::uint32_t sym = graph->bindings()->Get(b)->symbol();
      for (std::size_t k = 0; k < ni.outputs.size(); ++k) {
        const auto& syms = info.values[ni.outputs[k]].symbols;
        if (std::find(syms.begin(), syms.end(), sym) != syms.end()) ni.kernel_allocates[k] = true;
      }
    }
  }
  for (std::uint32_t k = 0; k < count(graph->outputs()); ++k) {
    ValueInfo& vi = info.values[graph->outputs()->Get(k)];
    vi.graph_output = true;
    vi.last_use = static_cast<std::int32_t>(nn);
  }
  for (std::uint32_t a = 0; a < count(graph->asserts()); ++a) {
    const std::int32_t after = graph->asserts()->Get(a)->after_node();
    info.asserts_after[static_cast<std::size_t>(after + 1)].push_back(a);
  }
  return info;
}

// The activation node `n` (act) computes, as a fused activation; kNone for other nodes.
cpu::FusedActivation activation_kind(const fb::Graph& graph, std::uint32_t n, const NodeInfo& act) {
  cpu::FusedActivation kind = cpu::FusedActivation::kNone;
  if (act.op == OpKind::Relu) kind = cpu::FusedActivation::kRelu;
  if (act.op == OpKind::Silu) kind = cpu::FusedActivation::kSilu;
  if (act.op == OpKind::Hardswish) kind = cpu::FusedActivation::kHardswish;
  if (act.op == OpKind::Hardsigmoid) kind = cpu::FusedActivation::kHardsigmoid;
  if (act.op == OpKind::Clamp) {  // ReLU6 (clamp or hardtanh to [0, 6]); clamp(min=0) is a relu
    const auto* attrs = graph.nodes()->Get(n)->attrs();
    auto bound = [&](std::uint32_t k) -> std::optional<double> {
      if (count(attrs) <= k || attrs->Get(k)->kind() != fb::AttrKind::Float) return std::nullopt;
      return attrs->Get(k)->f();
    };
    const auto lo = bound(0), hi = bound(1);
    if (lo == 0.0 && hi == 6.0) kind = cpu::FusedActivation::kRelu6;
    if (lo == 0.0 && !hi) kind = cpu::FusedActivation::kRelu;
  }
  if (act.op == OpKind::Gelu) {
    const auto* attrs = graph.nodes()->Get(n)->attrs();
    const auto* approx = count(attrs) > 0 ? attrs->Get(0)->s() : nullptr;
    const std::string_view a = approx != nullptr ? approx->string_view() : std::string_view("none");
    kind = a == "none" ? cpu::FusedActivation::kGeluErf : a == "tanh" ? cpu::FusedActivation::kGeluTanh
                                                                     : cpu::FusedActivation::kNone;
  }
  return kind;
}

// A linear/conv2d on the CPU whose f32 result only an activation reads, directly or through
// reshapes that alone read what they pass on (the core ATen IR's linear on [B, S, K] is
// view -> addmm -> view), takes that activation into its kernel; the activation node then
// passes the bytes on. An elementwise activation commutes with a reshape, and nothing else
// reads the values between, so only the activation's output sees the change.
void fuse_activations(const fb::Program& p, std::uint32_t g, GraphInfo& info) {
  const auto* graph = p.graphs()->Get(g);
  const ValueReaders readers = readers_of(info);
  // The node that alone reads f32 tensor v (not a graph output), or -1.
  auto only_reader = [&](std::uint32_t v) -> std::int32_t {
    const ValueInfo& vi = info.values[v];
    if (readers.count[v] != 1 || vi.graph_output || vi.kind != fb::ValueKind::Tensor || vi.dtype != DType::kF32) return -1;
    return readers.last[v];
  };
  auto single_io = [&](std::int32_t m) {
    const NodeInfo& ni = info.nodes[static_cast<std::size_t>(m)];
    return ni.segment < 0 && ni.inputs.size() >= 1 && ni.outputs.size() == 1 && !ni.fused_away &&
           info.bindings_of[static_cast<std::size_t>(m)].empty();
  };
  for (std::uint32_t n = 0; n < info.nodes.size(); ++n) {
    NodeInfo& producer = info.nodes[n];
    if (producer.segment >= 0 || producer.outputs.size() != 1 || !info.bindings_of[n].empty() || producer.fused_away ||
        producer.fused_act != cpu::FusedActivation::kNone) {
      continue;
    }
    std::uint32_t v = producer.outputs[0];
    std::int32_t a = only_reader(v);
    while (a >= 0 && is_alias_op(info.nodes[static_cast<std::size_t>(a)].op) && single_io(a) &&
           info.nodes[static_cast<std::size_t>(a)].inputs[0] == v) {
      v = info.nodes[static_cast<std::size_t>(a)].outputs[0];
      a = only_reader(v);
    }
    if (a < 0 || !single_io(a)) continue;
    NodeInfo& act = info.nodes[static_cast<std::size_t>(a)];
    if (act.inputs.size() != 1 || act.inputs[0] != v || info.values[act.outputs[0]].dtype != DType::kF32) continue;
    const cpu::FusedActivation kind = activation_kind(*graph, static_cast<std::uint32_t>(a), act);
    if (!cpu::kernel_fuses(producer.op, kind)) continue;
    producer.fused_act = kind;
    act.fused_away = true;
    act.fused_into = static_cast<std::int32_t>(n);
    act.alias_ok = true;
    act.inplace_ok = false;
  }
}

}  // namespace

ValueReaders readers_of(const GraphInfo& info) {
  ValueReaders r{std::vector<std::uint32_t>(info.values.size(), 0), std::vector<std::int32_t>(info.values.size(), -1)};
  for (std::uint32_t n = 0; n < info.nodes.size(); ++n) {
    for (std::uint32_t v : info.nodes[n].inputs) ++r.count[v], r.last[v] = static_cast<std::int32_t>(n);
  }
  return r;
}

bool same_value_shape(const GraphInfo& info, std::uint32_t a, std::uint32_t b) {
  const ValueInfo &x = info.values[a], &y = info.values[b];
  // A value without a shape (a symbolic int or bool, or none) is never "the same shape".
  if (x.shape == nullptr || y.shape == nullptr) return false;
  return count(x.shape) == count(y.shape) && std::equal(x.shape->begin(), x.shape->end(), y.shape->begin());
}

std::optional<float> constant_f32_scalar(const Bundle& bundle, const GraphInfo& info, std::uint32_t v) {
  const ValueInfo& vi = info.values[v];
  if (vi.kind != fb::ValueKind::Constant || vi.dtype != DType::kF32) return std::nullopt;
  const auto data = bundle.constant_data(vi.constant);
  if (data.size() != sizeof(float)) return std::nullopt;
  float f;
  std::memcpy(&f, data.data(), sizeof f);
  return f;
}

namespace {

// A conv2d run by a blocked kernel (weights prepared for NCHW8c) whose f32 result only an
// add reads, the add's other operand computed before the conv and of the add's shape
// (a residual connection), takes the add into its epilogue: y = act(conv + bias +
// residual). An activation that alone reads the add's result follows it in. The add and
// that activation then pass the conv's bytes on (fused_away).
void fuse_residual_adds(const fb::Program& p, std::uint32_t g, GraphInfo& info) {
  const auto* graph = p.graphs()->Get(g);
  const ValueReaders value_readers = readers_of(info);
  const std::vector<std::uint32_t>& readers = value_readers.count;
  const std::vector<std::int32_t>& reader = value_readers.last;
  auto same_shape = [&](std::uint32_t a, std::uint32_t b) { return same_value_shape(info, a, b); };
  auto plain_f32 = [&](std::uint32_t v) {
    const ValueInfo& vi = info.values[v];
    return vi.kind == fb::ValueKind::Tensor && vi.dtype == DType::kF32 && !vi.graph_output;
  };
  for (std::uint32_t m = 0; m < info.nodes.size(); ++m) {
    NodeInfo& add = info.nodes[m];
    if (add.op != OpKind::Add || add.segment >= 0 || add.inputs.size() != 2 || add.outputs.size() != 1 || add.fused_away ||
        !info.bindings_of[m].empty() || add.inputs[0] == add.inputs[1]) {
      continue;
    }
    // The operand produced last: the conv that can take the add.
    const std::uint8_t k = info.values[add.inputs[1]].producer > info.values[add.inputs[0]].producer ? 1 : 0;
    const std::uint32_t v = add.inputs[k], s = add.inputs[1 - k];
    const std::int32_t n = info.values[v].producer;
    if (n < 0) continue;
    NodeInfo& conv = info.nodes[static_cast<std::size_t>(n)];
    if (conv.op != OpKind::Conv2d || !conv.blocked_weights || conv.segment >= 0 || conv.residual >= 0 ||
        conv.fused_act != cpu::FusedActivation::kNone || conv.outputs.size() != 1 || !info.bindings_of[static_cast<std::size_t>(n)].empty() ||
        readers[v] != 1 || !plain_f32(v) || info.values[s].kind != fb::ValueKind::Tensor || info.values[s].dtype != DType::kF32 ||
        info.values[s].producer >= n || !same_shape(v, add.outputs[0]) || !same_shape(s, add.outputs[0])) {
      continue;
    }
    conv.residual = static_cast<std::int32_t>(s);
    add.fused_away = true;
    add.fused_into = n;
    add.alias_ok = true;
    add.inplace_ok = false;
    add.alias_input = k;
    const std::uint32_t w = add.outputs[0];
    if (readers[w] != 1 || !plain_f32(w)) continue;
    NodeInfo& act = info.nodes[static_cast<std::size_t>(reader[w])];
    if (act.segment >= 0 || act.inputs.size() != 1 || act.outputs.size() != 1 || act.fused_away ||
        !info.bindings_of[static_cast<std::size_t>(reader[w])].empty() || info.values[act.outputs[0]].dtype != DType::kF32) {
      continue;
    }
    const cpu::FusedActivation kind = activation_kind(*graph, static_cast<std::uint32_t>(reader[w]), act);
    if (kind == cpu::FusedActivation::kNone || !cpu::kernel_fuses(conv.op, kind)) continue;
    conv.fused_act = kind;
    act.fused_away = true;
    act.fused_into = n;
    act.alias_ok = true;
    act.inplace_ok = false;
  }
}

// An inverted bottleneck's expansion: a 1x1 conv2d (stride 1, no padding, one group, no
// residual or input scale fused into it) with blocked weights and output, whose f32 result
// (or that of the activation fused into it) only a blocked depthwise conv2d reads, is
// folded into that conv2d (NodeInfo::expansion; the activation node is folded too):
// its kernel makes the expanded rows band by band into a buffer that stays in L2
// (nchwc::conv2d_expand_depthwise) instead of writing the whole expanded tensor, the
// biggest of the block, to memory and reading it back. The expansion computes nothing
// (unless an observer watches) and its output gets no bytes; its inputs live until the
// depthwise conv2d runs.
void fuse_expansions(const fb::Program& p, std::uint32_t g, GraphInfo& info) {
  const ValueReaders value_readers = readers_of(info);
  std::vector<std::vector<std::uint32_t>> all_readers(info.values.size());
  for (std::uint32_t n = 0; n < info.nodes.size(); ++n) {
    for (std::uint32_t v : info.nodes[n].inputs) {
      if (all_readers[v].empty() || all_readers[v].back() != n) all_readers[v].push_back(n);
    }
  }
  const auto usable = [&](const NodeInfo& ni, std::uint32_t n) {
    return ni.op == OpKind::Conv2d && ni.segment < 0 && ni.blocked_weights && ni.prepared != nullptr && !ni.folded &&
           !ni.fused_away && ni.scale_mul < 0 && ni.expansion < 0 && ni.outputs.size() == 1 && ni.inputs.size() >= 2 &&
           (ni.out_blocked & 1u) != 0 && info.bindings_of[n].empty();
  };
  for (std::uint32_t d = 0; d < info.nodes.size(); ++d) {
    NodeInfo& dw = info.nodes[d];
    if (!usable(dw, d) || (dw.in_blocked & 1u) == 0 || static_cast<const cpu::kernels::ConvWeights*>(dw.prepared)->nchwc_depthwise == nullptr ||
        (dw.residual >= 0 && !info.values[static_cast<std::size_t>(dw.residual)].blocked)) {
      continue;
    }
    const std::uint32_t e = dw.inputs[0];
    const ValueInfo& ev = info.values[e];
    if (ev.kind != fb::ValueKind::Tensor || ev.dtype != DType::kF32 || ev.graph_output || value_readers.count[e] != 1 ||
        ev.producer < 0 || std::find(dw.inputs.begin() + 1, dw.inputs.end(), e) != dw.inputs.end() ||
        static_cast<std::int32_t>(e) == dw.residual) {
      continue;
    }
    // The expansion, or the nodes of the activation fused into it (fused_away, passing its
    // bytes on: one node, or a pattern as silu's mul(x, sigmoid(x))), followed back along
    // the inputs whose bytes they pass on.
    auto en = static_cast<std::uint32_t>(ev.producer);
    for (int steps = 0; en < info.nodes.size() && info.nodes[en].fused_away && info.nodes[en].op != OpKind::Conv2d && steps < 8; ++steps) {
      const NodeInfo& a = info.nodes[en];
      const std::int32_t prev = a.alias_input < a.inputs.size() ? info.values[a.inputs[a.alias_input]].producer : -1;
      en = prev < 0 ? static_cast<std::uint32_t>(info.nodes.size()) : static_cast<std::uint32_t>(prev);
    }
    if (en >= info.nodes.size() || info.nodes[en].op != OpKind::Conv2d) continue;
    std::vector<std::uint32_t> chain;
    if (en != static_cast<std::uint32_t>(ev.producer)) {
      // Every reader of the expansion's output and of the activation's values is an
      // activation node (a fused_away one reading only those values), except `dw` reading e.
      if (info.nodes[en].fused_act == cpu::FusedActivation::kNone || info.nodes[en].outputs.size() != 1) continue;
      std::vector<std::uint32_t> values{info.nodes[en].outputs[0]};
      bool ok = true;
      for (std::size_t i = 0; i < values.size() && ok; ++i) {
        const std::uint32_t u = values[i];
        if (info.values[u].graph_output) ok = false;
        for (std::uint32_t r : all_readers[u]) {
          if (!ok || (r == d && u == e) || std::find(chain.begin(), chain.end(), r) != chain.end()) continue;
          const NodeInfo& a = info.nodes[r];
          ok = a.fused_away && !a.folded && a.op != OpKind::Conv2d && a.segment < 0 && a.outputs.size() == 1 &&
               info.bindings_of[r].empty() && chain.size() < 8;
          if (ok) {
            chain.push_back(r);
            values.push_back(a.outputs[0]);
          }
        }
      }
      if (!ok || std::find(values.begin(), values.end(), e) == values.end()) continue;
      for (std::uint32_t r : chain) {
        for (std::uint32_t in : info.nodes[r].inputs) {
          if (info.values[in].kind != fb::ValueKind::Constant && std::find(values.begin(), values.end(), in) == values.end()) ok = false;
        }
      }
      if (!ok) continue;
    }
    NodeInfo& ex = info.nodes[en];
    if (!usable(ex, en) || ex.residual >= 0 || ex.has_exprs || ex.gather_lerp >= 0 || ex.b_slice >= 0) continue;
    const auto* weights = static_cast<const cpu::kernels::ConvWeights*>(ex.prepared);
    const cpu::nchwc::ConvShape& es = weights->nchwc_shape;
    if (weights->nchwc_dense == nullptr || es.kh != 1 || es.kw != 1 || es.groups != 1) continue;
    NodeAttrs attrs;
    if (!read_attrs(p, *p.graphs()->Get(g)->nodes()->Get(en), std::nullopt, attrs).ok() || attrs.values.size() < 4 ||
        attrs.values[3].type != AttrType::kInt || attrs.values[3].i != 1 || !cpu::kernels::conv_attrs_winograd(attrs.values, 0)) {
      continue;
    }
    ex.folded = true;
    ex.folded_into = static_cast<std::int32_t>(d);
    for (std::uint32_t r : chain) {
      info.nodes[r].folded = true;
      info.nodes[r].folded_into = static_cast<std::int32_t>(d);
    }
    dw.expansion = static_cast<std::int32_t>(en);
    for (std::uint32_t v : ex.inputs) info.values[v].last_use = std::max(info.values[v].last_use, static_cast<std::int32_t>(d));
  }
}

// Bilinear interpolation as the core ATen IR spells it (upsample_bilinear2d decomposed,
// F.interpolate(mode="bilinear")): four gathers index(x, ...) from one x on its last dims,
// and three lerps, each lerp(a, b, w) = add(a, mul(sub(b, a), w)) with add's and mul's
// operands in either order:
//   top = lerp(g0, g1, w0), bot = lerp(g2, g3, w1), out = lerp(top, bot, w2).
// Each intermediate is read only inside the pattern, every value is a plain f32 tensor and
// each weight broadcasts over the index dims only (statically). The final add then computes
// it all in one pass (cpu::kernels::gather_lerp2, with the separate ops' roundings); the
// other ten nodes are folded, and x, the index tensors and the weights live until it runs.
// A segmentation head's upsampling to 224 x 224 writes one full-size tensor instead of
// thirteen.
class GatherLerpFusion {
 public:
  GatherLerpFusion(const fb::Program& p, std::uint32_t g, GraphInfo& info)
      : p_(p), graph_(*p.graphs()->Get(g)), info_(info), readers_(readers_of(info)) {}

  void run() {
    for (std::uint32_t n = 0; n < info_.nodes.size(); ++n) {
      if (info_.nodes[n].op != OpKind::Add) continue;
      std::vector<std::uint32_t> folded;
      GatherLerp gl;
      const auto out_lerp = lerp(n, folded);
      if (!out_lerp) continue;
      const auto top = lerp_of(out_lerp->a, 2, folded), bot = lerp_of(out_lerp->b, 1, folded);
      if (!top || !bot) continue;
      const std::uint32_t g[4] = {top->a, top->b, bot->a, bot->b};
      const std::uint32_t g_readers[4] = {2, 1, 2, 1};
      bool ok = true;
      for (int j = 0; j < 4 && ok; ++j) ok = gather(g[j], g_readers[j], j, gl, folded);
      const std::uint32_t out = info_.nodes[n].outputs[0];
      gl.weights = {top->w, bot->w, out_lerp->w};
      for (int j = 0; ok && j < 3; ++j) ok = weight_fits(gl.weights[static_cast<std::size_t>(j)], out, gl);
      if (!ok) continue;
      for (std::uint32_t m : folded) {
        info_.nodes[m].folded = true;
        info_.nodes[m].folded_into = static_cast<std::int32_t>(n);
      }
      info_.nodes[n].gather_lerp = static_cast<std::int32_t>(info_.gather_lerps.size());
      // x, the index tensors and the weights are read by the final add now: alive (and
      // unchanged) until it runs.
      auto keep = [&](std::uint32_t v) { info_.values[v].last_use = std::max(info_.values[v].last_use, static_cast<std::int32_t>(n)); };
      keep(gl.x);
      for (const auto& idx : gl.indices) for (std::uint32_t v : idx) keep(v);
      for (std::uint32_t v : gl.weights) keep(v);
      info_.gather_lerps.push_back(std::move(gl));
    }
  }

 private:
  struct Lerp {
    std::uint32_t a, b, w;
  };

  // A node the fusion may take: on the CPU, plain layout, untouched by other fusions.
  bool free_node(std::uint32_t n, OpKind op, std::size_t inputs) const {
    const NodeInfo& ni = info_.nodes[n];
    return ni.op == op && ni.segment < 0 && ni.inputs.size() == inputs && ni.outputs.size() == 1 && !ni.fused_away &&
           !ni.folded && ni.fused_act == cpu::FusedActivation::kNone && ni.residual < 0 && ni.scale_mul < 0 &&
           ni.b_slice < 0 && ni.gather_lerp < 0 && ni.in_blocked == 0 && ni.out_blocked == 0 &&
           info_.bindings_of[n].empty() && !ni.kernel_allocates[0];
  }
  bool plain_f32(std::uint32_t v) const {
    const ValueInfo& vi = info_.values[v];
    return (vi.kind == fb::ValueKind::Tensor || vi.kind == fb::ValueKind::Constant) && vi.dtype == DType::kF32 && !vi.blocked;
  }
  // v: an intermediate of the pattern, read by exactly `readers` nodes and not a graph
  // output, produced by a free node of kind `op`; that node or -1.
  std::int32_t inner(std::uint32_t v, std::uint32_t readers, OpKind op, std::size_t inputs) const {
    const ValueInfo& vi = info_.values[v];
    if (vi.kind != fb::ValueKind::Tensor || vi.graph_output || readers_.count[v] != readers || !plain_f32(v) || vi.producer < 0) return -1;
    const auto m = static_cast<std::uint32_t>(vi.producer);
    return free_node(m, op, inputs) ? static_cast<std::int32_t>(m) : -1;
  }
  // The lerp whose add is node n (its sub and mul appended to `folded`).
  std::optional<Lerp> lerp(std::uint32_t n, std::vector<std::uint32_t>& folded) const {
    if (!free_node(n, OpKind::Add, 2) || !plain_f32(info_.nodes[n].outputs[0])) return std::nullopt;
    const NodeInfo& add = info_.nodes[n];
    for (int k = 0; k < 2; ++k) {
      const std::uint32_t a = add.inputs[static_cast<std::size_t>(k)], m = add.inputs[static_cast<std::size_t>(1 - k)];
      const std::int32_t mul = inner(m, 1, OpKind::Mul, 2);
      if (mul < 0 || !same_value_shape(info_, m, add.outputs[0])) continue;
      const NodeInfo& mn = info_.nodes[static_cast<std::size_t>(mul)];
      for (int j = 0; j < 2; ++j) {
        const std::uint32_t d = mn.inputs[static_cast<std::size_t>(j)], w = mn.inputs[static_cast<std::size_t>(1 - j)];
        const std::int32_t sub = inner(d, 1, OpKind::Sub, 2);
        if (sub < 0 || info_.nodes[static_cast<std::size_t>(sub)].inputs[1] != a || !plain_f32(w) || !same_value_shape(info_, d, m)) continue;
        const std::uint32_t b = info_.nodes[static_cast<std::size_t>(sub)].inputs[0];
        if (b == a || !same_value_shape(info_, a, m) || !same_value_shape(info_, b, m)) continue;
        folded.push_back(static_cast<std::uint32_t>(sub));
        folded.push_back(static_cast<std::uint32_t>(mul));
        return Lerp{a, b, w};
      }
    }
    return std::nullopt;
  }
  // The lerp computing intermediate v (read by `readers` nodes); its add joins `folded`.
  std::optional<Lerp> lerp_of(std::uint32_t v, std::uint32_t readers, std::vector<std::uint32_t>& folded) const {
    const std::int32_t add = inner(v, readers, OpKind::Add, 2);
    if (add < 0) return std::nullopt;
    auto l = lerp(static_cast<std::uint32_t>(add), folded);
    if (l) folded.push_back(static_cast<std::uint32_t>(add));
    return l;
  }
  // Gather j: v = index(x, ...) on x's last dims, the same x and dims as the others.
  bool gather(std::uint32_t v, std::uint32_t readers, int j, GatherLerp& gl, std::vector<std::uint32_t>& folded) const {
    const ValueInfo& vi = info_.values[v];
    if (vi.kind != fb::ValueKind::Tensor || vi.graph_output || readers_.count[v] != readers || !plain_f32(v) || vi.producer < 0) return false;
    const auto m = static_cast<std::uint32_t>(vi.producer);
    const NodeInfo& ni = info_.nodes[m];
    if (ni.inputs.size() < 2 || !free_node(m, OpKind::Index, ni.inputs.size())) return false;
    const auto* attrs = graph_.nodes()->Get(m)->attrs();
    if (count(attrs) < 1 || attrs->Get(0)->kind() != fb::AttrKind::Ints || attrs->Get(0)->ints() == nullptr) return false;
    const std::vector<std::int64_t> dims(attrs->Get(0)->ints()->begin(), attrs->Get(0)->ints()->end());
    const std::uint32_t x = ni.inputs[0];
    if (!plain_f32(x) || dims.empty() || dims.size() + 1 != ni.inputs.size()) return false;
    if (dims[0] < 0 || dims[0] + static_cast<std::int64_t>(dims.size()) != static_cast<std::int64_t>(count(info_.values[x].shape))) return false;
    for (std::size_t i = 1; i < dims.size(); ++i) {
      if (dims[i] != dims[0] + static_cast<std::int64_t>(i)) return false;
    }
    if (j == 0) {
      // The kernel addresses a plane of the indexed dims with 32-bit offsets: planes known
      // before the run and below 2^31 elements only (others run unfused).
      std::int64_t plane = 1;
      for (std::int64_t d : dims) {
        const std::optional<std::int64_t> size = static_value(p_, info_.values[x].shape->Get(static_cast<std::uint32_t>(d)));
        if (!size || *size <= 0 || *size > INT32_MAX / plane) return false;
        plane *= *size;
      }
      gl.x = x;
      gl.dims = dims;
    } else if (x != gl.x || dims != gl.dims) {
      return false;
    }
    gl.indices[static_cast<std::size_t>(j)].assign(ni.inputs.begin() + 1, ni.inputs.end());
    folded.push_back(m);
    return true;
  }
  // Weight w broadcasts into `out` with size 1 on x's dims before the indexed ones, known
  // before the run.
  bool weight_fits(std::uint32_t w, std::uint32_t out, const GatherLerp& gl) const {
    const ValueInfo &wi = info_.values[w], &oi = info_.values[out];
    const std::uint32_t wr = count(wi.shape), orank = count(oi.shape);
    if (wr > orank) return false;
    for (std::uint32_t d = 0; d < orank; ++d) {
      const std::optional<std::int64_t> od = static_value(p_, oi.shape->Get(d));
      const std::optional<std::int64_t> wd = d + wr >= orank ? static_value(p_, wi.shape->Get(d + wr - orank)) : std::optional<std::int64_t>(1);
      if (!od || !wd) return false;
      if (*wd != 1 && (static_cast<std::int64_t>(d) < gl.dims[0] || *wd != *od)) return false;
    }
    return true;
  }

  const fb::Program& p_;
  const fb::Graph& graph_;
  GraphInfo& info_;
  const ValueReaders readers_;
};

// Activations that the core ATen IR spells out in elementwise ops, recognized after a
// linear/conv2d on the CPU whose f32 result x only the pattern reads, and taken into that
// node's kernel like a single activation node (the pattern's nodes then pass its bytes on):
//   silu         mul(x, sigmoid(x))
//   hardsigmoid  div(clamp(add(x, 3), 0, 6), 6)   (clamp as one node or as min=0 then max=6;
//   hardswish    div(mul(x, clamp(...)), 6), mul(x, div(clamp(...), 6))   div as mul by 1/6)
class ActivationPatterns {
 public:
  ActivationPatterns(const fb::Program& p, const Bundle& bundle, std::uint32_t g, GraphInfo& info)
      : bundle_(bundle), graph_(*p.graphs()->Get(g)), info_(info), readers_(info.values.size()) {
    for (std::uint32_t n = 0; n < info.nodes.size(); ++n) {
      for (std::uint32_t v : info.nodes[n].inputs) readers_[v].push_back(n);
    }
  }

  void run() {
    for (std::uint32_t n = 0; n < info_.nodes.size(); ++n) {
      NodeInfo& producer = info_.nodes[n];
      if ((producer.op != OpKind::Conv2d && producer.op != OpKind::Linear) || producer.segment >= 0 ||
          producer.outputs.size() != 1 || producer.fused_act != cpu::FusedActivation::kNone || producer.fused_away ||
          !info_.bindings_of[n].empty() || !plain_tensor(producer.outputs[0])) {
        continue;
      }
      std::vector<std::uint32_t> chain;
      const cpu::FusedActivation kind = match(producer.outputs[0], chain);
      if (kind == cpu::FusedActivation::kNone || !cpu::kernel_fuses(producer.op, kind)) continue;
      producer.fused_act = kind;
      for (std::uint32_t c : chain) {
        NodeInfo& ni = info_.nodes[c];
        ni.fused_away = true;
        ni.fused_into = static_cast<std::int32_t>(n);
        ni.alias_ok = true;
        ni.inplace_ok = false;
        // Alias the operand that is x or an earlier node of the pattern (all share x's bytes).
        for (std::uint8_t k = 0; k < ni.inputs.size(); ++k) {
          if (info_.values[ni.inputs[k]].kind != fb::ValueKind::Constant) {
            ni.alias_input = k;
            break;
          }
        }
      }
    }
  }

 private:
  // An f32 tensor (the pattern's result may be a graph output)...
  bool f32_tensor(std::uint32_t v) const {
    const ValueInfo& vi = info_.values[v];
    return vi.kind == fb::ValueKind::Tensor && vi.dtype == DType::kF32;
  }
  // ... its intermediate values may not.
  bool plain_tensor(std::uint32_t v) const { return f32_tensor(v) && !info_.values[v].graph_output; }
  std::optional<float> scalar(std::uint32_t v) const { return constant_f32_scalar(bundle_, info_, v); }
  bool near(std::optional<float> v, float want) const { return v && std::fabs(*v - want) <= 1e-6f * std::fabs(want); }
  // The one CPU node reading v (an elementwise candidate), or -1.
  std::int32_t only_reader(std::uint32_t v) const {
    if (readers_[v].size() != 1 || !plain_tensor(v)) return -1;
    const std::uint32_t n = readers_[v][0];
    const NodeInfo& ni = info_.nodes[n];
    if (ni.segment >= 0 || ni.outputs.size() != 1 || ni.fused_away || !info_.bindings_of[n].empty() ||
        info_.values[ni.outputs[0]].dtype != DType::kF32) {
      return -1;
    }
    return static_cast<std::int32_t>(n);
  }
  // Node n is op(a, constant ~ c) (or op(constant, a) when `commutes`) with a == v.
  bool binary_with(std::uint32_t n, OpKind op, std::uint32_t v, float c, bool commutes) const {
    const NodeInfo& ni = info_.nodes[n];
    if (ni.op != op || ni.inputs.size() != 2) return false;
    if (ni.inputs[0] == v && near(scalar(ni.inputs[1]), c)) return true;
    return commutes && ni.inputs[1] == v && near(scalar(ni.inputs[0]), c);
  }
  // Node n is mul(a, b) with {a, b} == {u, v}.
  bool mul_of(std::uint32_t n, std::uint32_t u, std::uint32_t v) const {
    const NodeInfo& ni = info_.nodes[n];
    return ni.op == OpKind::Mul && ni.inputs.size() == 2 &&
           ((ni.inputs[0] == u && ni.inputs[1] == v) || (ni.inputs[0] == v && ni.inputs[1] == u));
  }
  // v / 6 (div by 6 or mul by 1/6) as its single reader: that node, else -1.
  std::int32_t sixth(std::uint32_t v) const {
    const std::int32_t n = only_reader(v);
    if (n < 0) return -1;
    const auto u = static_cast<std::uint32_t>(n);
    return binary_with(u, OpKind::Div, v, 6.0f, false) || binary_with(u, OpKind::Mul, v, 1.0f / 6.0f, true) ? n : -1;
  }
  // The clamp(s) to [0, 6] reading v as a chain: the last one's output, appended to `chain`.
  std::optional<std::uint32_t> relu6_of(std::uint32_t v, std::vector<std::uint32_t>& chain) const {
    double lo = -INFINITY, hi = INFINITY;
    std::uint32_t cur = v;
    for (int steps = 0; steps < 2; ++steps) {
      const std::int32_t n = only_reader(cur);
      if (n < 0 || info_.nodes[static_cast<std::size_t>(n)].op != OpKind::Clamp) break;
      const auto* attrs = graph_.nodes()->Get(static_cast<std::uint32_t>(n))->attrs();
      for (std::uint32_t k = 0; k < 2 && k < count(attrs); ++k) {
        if (attrs->Get(k)->kind() != fb::AttrKind::Float) continue;
        if (k == 0) lo = std::max(lo, attrs->Get(k)->f());
        if (k == 1) hi = std::min(hi, attrs->Get(k)->f());
      }
      chain.push_back(static_cast<std::uint32_t>(n));
      cur = info_.nodes[static_cast<std::size_t>(n)].outputs[0];
      if (lo == 0.0 && hi == 6.0) return cur;
    }
    return std::nullopt;
  }

  cpu::FusedActivation match(std::uint32_t x, std::vector<std::uint32_t>& chain) const {
    const std::vector<std::uint32_t>& r = readers_[x];
    // silu: sigmoid(x) read only by mul(x, sigmoid(x)).
    if (r.size() == 2) {
      for (int i = 0; i < 2; ++i) {
        const std::uint32_t s = r[static_cast<std::size_t>(i)], m = r[static_cast<std::size_t>(1 - i)];
        if (info_.nodes[s].op != OpKind::Sigmoid || info_.nodes[s].segment >= 0 || info_.nodes[s].outputs.size() != 1) continue;
        const std::uint32_t sv = info_.nodes[s].outputs[0];
        if (only_reader(sv) == static_cast<std::int32_t>(m) && mul_of(m, x, sv) && f32_tensor(info_.nodes[m].outputs[0]) &&
            info_.nodes[m].segment < 0) {
          chain = {s, m};
          return cpu::FusedActivation::kSilu;
        }
      }
    }
    // hardsigmoid / hardswish: add(x, 3) first.
    std::int32_t add = -1, mul = -1;
    for (std::uint32_t n : r) {
      if (binary_with(n, OpKind::Add, x, 3.0f, true) && add < 0) add = static_cast<std::int32_t>(n);
      else if (info_.nodes[n].op == OpKind::Mul && mul < 0) mul = static_cast<std::int32_t>(n);
      else return cpu::FusedActivation::kNone;
    }
    if (add < 0 || info_.nodes[static_cast<std::size_t>(add)].segment >= 0) return cpu::FusedActivation::kNone;
    chain = {static_cast<std::uint32_t>(add)};
    const auto h = relu6_of(info_.nodes[static_cast<std::size_t>(add)].outputs[0], chain);
    if (!h) return cpu::FusedActivation::kNone;
    if (mul < 0) {  // hardsigmoid: relu6(x + 3) / 6
      const std::int32_t d = sixth(*h);
      if (d < 0) return cpu::FusedActivation::kNone;
      chain.push_back(static_cast<std::uint32_t>(d));
      return cpu::FusedActivation::kHardsigmoid;
    }
    const auto m = static_cast<std::uint32_t>(mul);
    if (info_.nodes[m].segment >= 0 || info_.nodes[m].outputs.size() != 1) return cpu::FusedActivation::kNone;
    if (mul_of(m, x, *h) && only_reader(*h) == mul) {  // (x * relu6(x + 3)) / 6
      const std::int32_t d = sixth(info_.nodes[m].outputs[0]);
      if (d < 0) return cpu::FusedActivation::kNone;
      chain.push_back(m);
      chain.push_back(static_cast<std::uint32_t>(d));
      return cpu::FusedActivation::kHardswish;
    }
    const std::int32_t d = sixth(*h);  // x * (relu6(x + 3) / 6)
    if (d < 0 || !mul_of(m, x, info_.nodes[static_cast<std::size_t>(d)].outputs[0]) ||
        only_reader(info_.nodes[static_cast<std::size_t>(d)].outputs[0]) != mul || !f32_tensor(info_.nodes[m].outputs[0])) {
      return cpu::FusedActivation::kNone;
    }
    chain.push_back(static_cast<std::uint32_t>(d));
    chain.push_back(m);
    return cpu::FusedActivation::kHardswish;
  }

  const Bundle& bundle_;
  const fb::Graph& graph_;
  GraphInfo& info_;
  std::vector<std::vector<std::uint32_t>> readers_;
};

// A CPU slice with step 1 along one of the last two dims of an f32 tensor, whose only
// reader is a CPU matmul's B operand (attention over the first N positions of a KV cache),
// is folded into that matmul: the matmul reads B in place inside the slice's input, so
// the slice's input must stay alive (and unchanged) until the matmul.
void fold_slices(const fb::Program& p, std::uint32_t g, GraphInfo& info) {
  const auto* graph = p.graphs()->Get(g);
  const ValueReaders value_readers = readers_of(info);
  const std::vector<std::uint32_t>& readers = value_readers.count;
  const std::vector<std::int32_t>& reader = value_readers.last;
  for (std::uint32_t n = 0; n < info.nodes.size(); ++n) {
    NodeInfo& slice = info.nodes[n];
    if (slice.op != OpKind::Slice || slice.segment >= 0 || slice.inputs.size() != 1 || slice.outputs.size() != 1 ||
        !info.bindings_of[n].empty() || slice.kernel_allocates[0] || slice.fused_away) {
      continue;
    }
    const std::uint32_t x = slice.inputs[0], v = slice.outputs[0];
    const ValueInfo &xi = info.values[x], &vi = info.values[v];
    if (readers[v] != 1 || vi.graph_output || vi.kind != fb::ValueKind::Tensor || vi.dtype != DType::kF32 ||
        xi.kind == fb::ValueKind::None || xi.dtype != DType::kF32) {
      continue;
    }
    const auto rank = static_cast<std::int64_t>(count(xi.shape));
    if (rank < 2 || count(vi.shape) != static_cast<std::uint32_t>(rank)) continue;
    const auto* attrs = graph->nodes()->Get(n)->attrs();
    if (count(attrs) < 4 || attrs->Get(0)->kind() != fb::AttrKind::Int || attrs->Get(3)->kind() != fb::AttrKind::Int ||
        attrs->Get(3)->i() != 1) {
      continue;
    }
    std::int64_t dim = attrs->Get(0)->i();
    if (dim < 0) dim += rank;
    if (dim != rank - 1 && dim != rank - 2) continue;
    const std::int32_t r = reader[v];
    NodeInfo& mm = info.nodes[static_cast<std::size_t>(r)];
    if (mm.op != OpKind::Matmul || mm.segment >= 0 || mm.inputs.size() != 2 || mm.inputs[1] != v || mm.inputs[0] == v ||
        mm.b_slice >= 0) {
      continue;
    }
    slice.folded = true;
    slice.folded_into = r;
    mm.b_slice = static_cast<std::int32_t>(n);
    info.values[x].last_use = std::max(info.values[x].last_use, r);
  }
}

// Consecutive nodes the accelerator supports form a segment. Nodes that bind symbols or
// produce kernel-sized outputs, and control flow, stay on the CPU.
void partition(const fb::Program& p, std::uint32_t g, const backend::Backend& acc, GraphInfo& info) {
  const auto* graph = p.graphs()->Get(g);
  std::int32_t open = -1;
  for (std::uint32_t n = 0; n < info.nodes.size(); ++n) {
    NodeInfo& ni = info.nodes[n];
    bool ok = !ni.hop && info.bindings_of[n].empty();
    std::vector<DType> in_dt, out_dt;
    for (std::uint32_t v : ni.inputs) in_dt.push_back(info.values[v].dtype);
    for (std::uint32_t v : ni.outputs) out_dt.push_back(info.values[v].dtype);
    if (ok) {
      NodeAttrs attrs;
      ok = read_attrs(p, *graph->nodes()->Get(n), std::nullopt, attrs).ok();
      ok = ok && acc.supports(ni.op, in_dt, out_dt, attrs.values);
    }
    if (!ok) {
      open = -1;
      continue;
    }
    if (open < 0) {
      open = static_cast<std::int32_t>(info.segments.size());
      info.segments.push_back({n, n});
    }
    info.segments[static_cast<std::size_t>(open)].last = n;
    ni.segment = open;
  }
}

// KILN_CONV_PLAIN_BLOCKED=0: plain convolutions keep the plain kernels (to compare); read once.
bool plain_blocked_enabled() {
  static const bool enabled = [] {
    const char* v = std::getenv("KILN_CONV_PLAIN_BLOCKED");
    return v == nullptr || std::string_view(v) != "0";
  }();
  return enabled;
}

// KILN_FUSE_EXPANSIONS=0: no expansion folded into its depthwise conv2d (a before/after
// switch for benchmarks, like KILN_CONV_PLAIN_BLOCKED).
bool expansions_enabled() {
  static const bool enabled = [] {
    const char* v = std::getenv("KILN_FUSE_EXPANSIONS");
    return v == nullptr || std::string_view(v) != "0";
  }();
  return enabled;
}

// A CPU conv2d's constant f32 weight, prepared once by its kernel (cpu::prepare_weights:
// the Winograd transform, packed). Runs without memory for it prepare nothing.
Status prepare_conv_weight(const fb::Program& p, const Bundle& bundle, Program::Impl& impl, std::uint32_t g, std::uint32_t n,
                           bool blocked_kernels) {
  NodeInfo& ni = impl.graphs[g].nodes[n];
  const ValueInfo& w = impl.graphs[g].values[ni.inputs[1]];
  if (w.kind != fb::ValueKind::Constant || w.dtype != DType::kF32) return Status::Ok();
  const auto* c = p.constants()->Get(w.constant);
  if (c->shape() == nullptr || c->shape()->size() != 4) return Status::Ok();
  TensorView view;
  view.rank = 4;
  std::int64_t numel = 1;
  for (int d = 0; d < 4; ++d) {
    view.shape[static_cast<std::size_t>(d)] = c->shape()->Get(static_cast<flatbuffers::uoffset_t>(d));
    if (view.shape[static_cast<std::size_t>(d)] < 0) return Status::Ok();
    numel *= view.shape[static_cast<std::size_t>(d)];
  }
  const auto data = bundle.constant_data(w.constant);
  if (data.size() != static_cast<std::size_t>(numel) * 4) return Status::Ok();
  view.data = const_cast<std::uint8_t*>(reinterpret_cast<const std::uint8_t*>(data.data()));
  NodeAttrs attrs;
  KILN_RETURN_IF_ERROR(read_attrs(p, *p.graphs()->Get(g)->nodes()->Get(n), std::nullopt, attrs));
  // A plain conv between layout-sensitive ops still takes the blocked kernels when it has a
  // spatial kernel and enough channels: they convert its input and output at the edges
  // (about one pass over each) and beat the plain im2col GEMM and the plain Winograd,
  // whose buffers hold every tile of the batch. KILN_CONV_PLAIN_BLOCKED=0: plain kernels.
  if (blocked_kernels && ni.in_blocked == 0 && ni.out_blocked == 0 && ni.scale_mul < 0 && plain_blocked_enabled() && attrs.values.size() >= 4 &&
      attrs.values[3].type == AttrType::kInt && attrs.values[3].i == 1) {
    cpu::nchwc::ConvShape s;
    s.out_channels = view.shape[0], s.in_channels = view.shape[1], s.kh = view.shape[2], s.kw = view.shape[3], s.groups = 1;
    ni.blocked_kernel = s.kh * s.kw > 1 && s.in_channels >= 32 && s.out_channels >= 32 && cpu::nchwc::dense_supported(s);
  }
  const bool blocked = ni.in_blocked != 0 || ni.out_blocked != 0 || ni.blocked_kernel;
  auto prepared = cpu::prepare_weights(ni.op, 1, view, attrs.values, blocked);
  if (!prepared.ok()) return prepared.status().code() == StatusCode::kUnavailable ? Status::Ok() : prepared.status();
  if (*prepared == nullptr) {
    ni.blocked_kernel = false;
    return Status::Ok();
  }
  impl.prepared.push_back(std::move(prepared).value());
  ni.prepared = impl.prepared.back().get();
  ni.blocked_weights = blocked;
  // The blocked Winograd kernel's per-thread transforms and products (~1 MiB a thread).
  ni.workspace = blocked && static_cast<const cpu::kernels::ConvWeights*>(ni.prepared)->nchwc_winograd != nullptr;
  return Status::Ok();
}

// How many times each constant is read (by nodes, as a graph output, as a state's initial
// value): a constant whose every read is by a node holding a prepared copy of it
// (a prepared conv2d, a linear/matmul with its B packed) can leave the resident set.
std::vector<std::uint32_t> constant_uses(const fb::Program& p, const Program::Impl& impl) {
  std::vector<std::uint32_t> uses(count(p.constants()), 0);
  for (const GraphInfo& info : impl.graphs) {
    for (const ValueInfo& v : info.values) {
      if (v.kind == fb::ValueKind::Constant && v.graph_output && v.constant < uses.size()) ++uses[v.constant];
    }
    for (const NodeInfo& ni : info.nodes) {
      for (std::uint32_t in : ni.inputs) {
        const ValueInfo& v = info.values[in];
        if (v.kind == fb::ValueKind::Constant && v.constant < uses.size()) ++uses[v.constant];
      }
    }
  }
  for (std::uint32_t k = 0; k < count(p.signature()->states()); ++k) {  // initial values are read at reset
    const std::uint32_t c = p.signature()->states()->Get(k)->initial();
    if (c < uses.size()) ++uses[c];
  }
  return uses;
}

// Constant weights of linear layers and matmuls, packed once for the SGEMM so that runs
// skip the per-call packing of B; conv2d weights prepared by their kernel. A weight whose
// every reader now holds a prepared copy has its mapped pages dropped from the resident set
// right after its last copy is made (Bundle::release_pages), not after all of them, so that
// load never holds every weight twice: the process holds the weights about once. A path that
// still reads the raw weight (a kernel declining its prepared copy) faults its pages back in
// from the file, once. Returns the bytes released.
Result<std::size_t> pack_weights(const fb::Program& p, const Bundle& bundle, Program::Impl& impl, bool blocked_kernels) {
  const std::vector<std::uint32_t> uses = constant_uses(p, impl);
  std::vector<std::uint32_t> covered(uses.size(), 0);
  std::size_t released = 0;
  auto prepared_copy_of = [&](const GraphInfo& info, std::uint32_t value) {
    const ValueInfo& v = info.values[value];
    if (v.kind != fb::ValueKind::Constant || v.constant >= uses.size()) return;
    if (++covered[v.constant] == uses[v.constant]) released += bundle.release_pages(bundle.constant_data(v.constant));
  };
  // Largest weights first: while a weight is copied, its mapped pages are resident too,
  // so the load peaks at the copies made so far plus the weight being copied. Copying the
  // largest last (resnet18's 9.4 MB layer4 kernels) would hold about that much more than
  // the copies alone; copying the smallest last holds a few pages more.
  struct Candidate {
    std::uint64_t bytes;
    std::uint32_t g, n;
  };
  std::vector<Candidate> order;
  for (std::uint32_t g = 0; g < impl.graphs.size(); ++g) {
    const GraphInfo& info = impl.graphs[g];
    for (std::uint32_t n = 0; n < info.nodes.size(); ++n) {
      const NodeInfo& ni = info.nodes[n];
      if ((ni.op != OpKind::Conv2d && ni.op != OpKind::Linear && ni.op != OpKind::Matmul) || ni.segment >= 0 ||
          ni.inputs.size() < 2) {
        continue;
      }
      const ValueInfo& w = info.values[ni.inputs[1]];
      const std::uint64_t bytes = w.kind == fb::ValueKind::Constant ? bundle.constant_data(w.constant).size() : 0;
      order.push_back({bytes, g, n});
    }
  }
  std::stable_sort(order.begin(), order.end(), [](const Candidate& a, const Candidate& b) { return a.bytes > b.bytes; });
  for (const Candidate& cand : order) {
    const std::uint32_t g = cand.g, n = cand.n;
    GraphInfo& info = impl.graphs[g];
    {
      NodeInfo& ni = info.nodes[n];
      if (ni.op == OpKind::Conv2d) {
        KILN_RETURN_IF_ERROR(prepare_conv_weight(p, bundle, impl, g, n, blocked_kernels));
        if (ni.prepared != nullptr) prepared_copy_of(info, ni.inputs[1]);
        continue;
      }
      const ValueInfo& a = info.values[ni.inputs[0]];
      const ValueInfo& w = info.values[ni.inputs[1]];
      if (w.kind != fb::ValueKind::Constant || w.dtype != DType::kF32 || a.dtype != DType::kF32) continue;
      const auto* c = p.constants()->Get(w.constant);
      if (c->shape() == nullptr || c->shape()->size() != 2) continue;
      const bool trans = ni.op == OpKind::Linear;
      const std::int64_t rows = c->shape()->Get(0), cols = c->shape()->Get(1);
      const auto key = std::make_pair(w.constant, trans);
      auto it = impl.packed.find(key);
      if (it == impl.packed.end()) {
        const auto data = bundle.constant_data(w.constant);
        if (data.size() != static_cast<std::size_t>(rows * cols) * 4) continue;
        auto packed = cpu::pack_b(reinterpret_cast<const float*>(data.data()), cols, trans ? cols : rows, trans ? rows : cols, trans, nullptr);
        if (!packed.ok()) {
          if (packed.status().code() == StatusCode::kUnavailable) continue;  // no memory: pack per call
          return packed.status();
        }
        it = impl.packed.emplace(key, std::move(packed).value()).first;
      }
      ni.packed_b = &it->second;
      prepared_copy_of(info, ni.inputs[1]);
    }
  }
  return released;
}

}  // namespace

Status read_attrs(const fb::Program& p, const fb::Node& node, std::optional<std::span<const std::int64_t>> symbols, NodeAttrs& out) {
  const std::uint32_t na = count(node.attrs());
  out.values.clear();
  out.ints.clear();
  out.floats.clear();
  // Spans point into the inner vectors, whose buffers stay put when the outer ones grow.
  out.ints.reserve(na);
  out.floats.reserve(na);
  for (std::uint32_t k = 0; k < na; ++k) {
    const auto* a = node.attrs()->Get(k);
    AttrValue v;
    v.type = static_cast<AttrType>(a->kind());
    v.i = a->i();
    v.f = a->f();
    if (a->s()) v.s = a->s()->string_view();
    if (a->ints()) out.ints.emplace_back(a->ints()->begin(), a->ints()->end()), v.ints = out.ints.back();
    if (a->floats()) out.floats.emplace_back(a->floats()->begin(), a->floats()->end()), v.floats = out.floats.back();
    if (symbols && (a->kind() == fb::AttrKind::Expr || a->kind() == fb::AttrKind::Exprs)) {
      std::vector<std::int64_t> values;
      for (std::uint32_t e = 0; e < count(a->exprs()); ++e) {
        auto x = evaluate_expr(p, a->exprs()->Get(e), *symbols);
        if (!x.ok()) return x.status();
        values.push_back(*x);
      }
      if (a->kind() == fb::AttrKind::Expr) v.i = values.empty() ? 0 : values[0];
      out.ints.push_back(std::move(values));
      v.ints = out.ints.back();
    }
    out.values.push_back(v);
  }
  return Status::Ok();
}

Program::~Program() = default;

const std::string& Program::backend_notice() const { return impl_->backend_notice; }
std::string Program::cpu_kernel_isas() { return cpu::kernel_isa_summary(); }

std::string Program::backend_name() const { return impl_->accelerator ? std::string(impl_->accelerator->name()) : "cpu"; }

Result<std::shared_ptr<const Program>> Program::load(std::unique_ptr<Bundle> bundle, const ProgramOptions& options) {
  auto program = std::shared_ptr<Program>(new Program());
  program->impl_ = std::make_unique<Impl>();
  Impl& impl = *program->impl_;
  const fb::Program& p = bundle->program();
  std::map<std::string, int> missing;  // op name -> node count
  const std::uint32_t n_ops = count(p.op_names());
  std::vector<bool> op_missing(n_ops, false);
  impl.kinds.resize(n_ops, OpKind::Identity);
  impl.kernels.resize(n_ops, nullptr);
  for (std::uint32_t i = 0; i < n_ops; ++i) {
    const std::string name = p.op_names()->Get(i)->str();
    const auto kind = op_from_name(name);
    if (kind) {
      impl.kinds[i] = *kind;
      impl.kernels[i] = cpu::cpu_kernel(*kind);
    }
    const bool hop = kind && (*kind == OpKind::Cond || *kind == OpKind::WhileLoop || *kind == OpKind::InvokeSubgraph);
    if (!kind || (impl.kernels[i] == nullptr && !hop)) {
      op_missing[i] = true;
      missing[name] = 0;
    }
  }
  for (std::uint32_t g = 0; g < count(p.graphs()); ++g) {
    for (std::uint32_t n = 0; n < count(p.graphs()->Get(g)->nodes()); ++n) {
      const std::uint32_t op = p.graphs()->Get(g)->nodes()->Get(n)->op();
      if (op_missing[op]) missing[p.op_names()->Get(op)->str()]++;
    }
  }
  if (!missing.empty()) {
    std::string list;
    for (const auto& [name, nodes] : missing) {
      list += (list.empty() ? "" : ", ") + name + " (" + std::to_string(nodes) + (nodes == 1 ? " node)" : " nodes)");
    }
    return Status(StatusCode::kUnsupported, "this build cannot run " + std::to_string(missing.size()) + " op" +
                                                (missing.size() == 1 ? "" : "s") + " used by the bundle: " + list);
  }
  for (std::uint32_t g = 0; g < count(p.graphs()); ++g) {
    for (std::uint32_t n = 0; n < count(p.graphs()->Get(g)->nodes()); ++n) KILN_RETURN_IF_ERROR(check_node(p, impl, g, n));
  }
  for (std::uint32_t g = 0; g < count(p.graphs()); ++g) impl.graphs.push_back(analyze(p, impl, g));

  if (options.backend != "cpu") {
    if (options.backend != "vulkan" && options.backend != "auto") {
      return Status(StatusCode::kUsage, "unknown backend '" + options.backend + "' (cpu, vulkan, auto)");
    }
    backend::BackendOptions bo;
    bo.validation = options.validation;
    bo.pipeline_cache_path = options.pipeline_cache_path;
    auto acc = backend::create_backend("vulkan", bo);
    if (!acc.ok()) {
      if (options.backend == "vulkan") return acc.status();
      impl.backend_notice = "using the CPU backend: " + acc.status().message();
    } else {
      impl.accelerator = std::move(acc).value();
      for (std::uint32_t g = 0; g < count(p.graphs()); ++g) partition(p, g, *impl.accelerator, impl.graphs[g]);
    }
  }
  if (options.fuse_activations) {
    for (std::uint32_t g = 0; g < count(p.graphs()); ++g) {
      fuse_activations(p, g, impl.graphs[g]);
      ActivationPatterns(p, *bundle, g, impl.graphs[g]).run();
      fold_slices(p, g, impl.graphs[g]);
    }
  }
  const bool blocked_kernels = options.blocked_layout && !layout_switched_off() && cpu::nchwc::kernels_available();
  if (blocked_kernels) {
    for (std::uint32_t g = 0; g < count(p.graphs()); ++g) {
      plan_layouts(p, *bundle, g, impl.graphs[g]);
      if (options.fuse_activations) fold_channel_scales(p, *bundle, g, impl.graphs[g]);
    }
  }
  if (options.prepack_weights) {
    KILN_ASSIGN_OR_RETURN(impl.released_weight_bytes, pack_weights(p, *bundle, impl, blocked_kernels));
  }
  if (options.fuse_activations) {
    for (std::uint32_t g = 0; g < count(p.graphs()); ++g) {
      fuse_residual_adds(p, g, impl.graphs[g]);
      if (blocked_kernels && expansions_enabled()) fuse_expansions(p, g, impl.graphs[g]);
      GatherLerpFusion(p, g, impl.graphs[g]).run();
    }
  }
  program->bundle_ = std::move(bundle);
  return std::shared_ptr<const Program>(std::move(program));
}

std::size_t Program::released_weight_bytes() const { return impl_->released_weight_bytes; }

std::vector<NodePlacement> Program::placement(std::uint32_t graph) const {
  std::vector<NodePlacement> out;
  if (graph >= impl_->graphs.size()) return out;
  const fb::Program& p = bundle_->program();
  const auto* nodes = p.graphs()->Get(graph)->nodes();
  const GraphInfo& info = impl_->graphs[graph];
  for (std::uint32_t n = 0; n < info.nodes.size(); ++n) {
    const NodeInfo& ni = info.nodes[n];
    NodePlacement pl;
    pl.node = n;
    pl.op = op_label(ni);
    pl.segment = ni.segment;
    pl.backend = ni.segment >= 0 && impl_->accelerator != nullptr ? backend_name() : "cpu";
    pl.fused_away = ni.fused_away && !ni.folded;
    pl.fused_into = pl.fused_away ? ni.fused_into : -1;
    pl.folded_into = ni.folded ? ni.folded_into : -1;
    if (ni.in_blocked != 0 || ni.out_blocked != 0) {
      // The layout of input 0 and output 0 (a follower's operands share its output's).
      const char* in = (ni.in_blocked & 1u) != 0 ? "nchw8c" : "nchw";
      const char* out = (ni.out_blocked & 1u) != 0 ? "nchw8c" : "nchw";
      pl.layout = std::string_view(in) == out ? std::string(in) : std::string(in) + " -> " + out;
    } else if (ni.blocked_kernel) {
      pl.layout = "nchw (blocked kernel)";
    }
    pl.where = debug_location(p, nodes->Get(n)->debug()).text();
    out.push_back(std::move(pl));
  }
  return out;
}

std::vector<StatePlacement> Program::state_placement() const {
  std::vector<StatePlacement> out;
  const fb::Program& p = bundle_->program();
  const auto* states = p.signature()->states();
  const GraphInfo& info = impl_->graphs[p.entry_graph()];
  auto on_device = [&](std::int32_t n) { return info.nodes[static_cast<std::size_t>(n)].segment >= 0; };
  for (std::uint32_t k = 0; k < count(states); ++k) {
    const bool device = impl_->accelerator != nullptr &&
                        device_state_update(p, info, *p.graphs()->Get(p.entry_graph()), k, on_device) >= -1;
    out.push_back({states->Get(k)->name()->str(), device ? backend_name() : "cpu"});
  }
  return out;
}

}  // namespace kiln

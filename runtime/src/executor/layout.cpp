// The layout pass (issue 14): which 4-D f32 activations of a graph the CPU stores blocked,
// NCHW8c (backends/cpu/kernels/nchwc.h), decided once at load.
//
// Two kinds of CPU nodes take part:
// - layout kernels read their activation (input 0) and write output 0 in either layout,
//   converting at the edge themselves: conv2d (dense, grouped by multiples of 8, depthwise;
//   constant weights), max/avg/adaptive-avg pools, mean over H and W, inference batch_norm
//   (constant statistics; the ones not folded into a conv, as densenet's before its convs). A network's first
//   convolution reads the plain input and writes blocked; a pool before a flatten reads
//   blocked and writes plain.
// - followers run unchanged on the physical views: the activations that keep finite values
//   finite (relu, clamp, hardswish, hardsigmoid, sigmoid, silu, gelu, tanh, leaky_relu, neg,
//   abs), an activation fused into the node before it, add/sub/mul/maximum/minimum whose
//   tensor operands have the output's channels (channel broadcasting [N,C,1,1] lines up lane
//   for lane) or are broadcast scalars, and cat along channels of multiples of 8. Every
//   non-scalar operand of a follower and its output share one layout.
// A value is blocked when it is a 4-D f32 tensor with a static channel count, sized before
// the graph runs, neither a graph input nor output, produced by a layout kernel or follower
// and read only by them; a follower whose values cannot all be blocked makes all of them
// plain, which may undo its neighbours' in turn (a fixed point). So reorders happen only
// inside layout kernels, at the edges of a blocked region, never between two blocked ops.
#include <algorithm>
#include <cmath>
#include <optional>

#include "backends/cpu/kernels/nchwc.h"
#include "executor/program_impl.h"
#include "kiln/format/fb_count.h"
#include "kiln/format/kiln_generated.h"
#include "kiln/runtime/bundle.h"
#include "kiln/runtime/expr.h"

namespace kiln {

void to_physical(const ValueInfo& vi, TensorView& view) {
  if (!vi.blocked || view.rank != 4) return;
  const std::int64_t c = view.shape[1];
  view.shape[1] = cpu::nchwc::padded_channels(c) / cpu::nchwc::kBlock;
  view.shape[4] = cpu::nchwc::kBlock;
  view.rank = 5;
}

std::optional<std::int64_t> static_value(const fb::Program& p, std::uint32_t expr) {
  if (p.exprs() == nullptr || expr >= p.exprs()->size()) return std::nullopt;
  const auto* ref = p.exprs()->Get(expr);
  for (std::uint32_t t = ref->start(); t < ref->start() + ref->length(); ++t) {
    if (p.expr_tokens()->Get(t)->op() == fb::ExprOp::Sym) return std::nullopt;
  }
  auto v = evaluate_expr(p, expr, {});
  if (!v.ok()) return std::nullopt;
  return *v;
}

namespace {

enum class Role : std::uint8_t {
  kNone,
  kKernel,  // input 0 and output 0 in either layout
  kFollow,  // runs on physical views: its layout operands and output share one layout
};

struct Pass {
  const fb::Program& p;
  const Bundle& bundle;
  const fb::Graph& graph;
  GraphInfo& info;
  std::vector<Role> role;
  // Per node, per input: whether it is a layout operand (a follower's non-scalar tensor
  // operand, a layout kernel's input 0).
  std::vector<std::vector<bool>> operand;

  std::optional<std::int64_t> dim(std::uint32_t v, std::uint32_t d) const {
    const ValueInfo& vi = info.values[v];
    if (vi.shape == nullptr || d >= vi.shape->size()) return std::nullopt;
    return static_value(p, vi.shape->Get(d));
  }
  std::uint32_t rank(std::uint32_t v) const { return count(info.values[v].shape); }
  bool f32_tensor(std::uint32_t v) const {
    const ValueInfo& vi = info.values[v];
    return vi.kind == fb::ValueKind::Tensor && vi.dtype == DType::kF32;
  }
  // A tensor of one element (every dim statically 1): broadcast against anything.
  bool scalar(std::uint32_t v) const {
    const ValueInfo& vi = info.values[v];
    if (vi.kind != fb::ValueKind::Tensor && vi.kind != fb::ValueKind::Constant) return false;
    for (std::uint32_t d = 0; d < rank(v); ++d) {
      if (dim(v, d) != 1) return false;
    }
    return true;
  }
  // Dim d of `a` broadcasts to dim d of `out` lane for lane: the same size, or 1.
  bool broadcasts(std::uint32_t a, std::uint32_t out, std::uint32_t d) const {
    const std::uint32_t ea = info.values[a].shape->Get(d), eo = info.values[out].shape->Get(d);
    if (ea == eo) return true;
    const auto sa = dim(a, d), so = dim(out, d);
    return sa == 1 || (sa && so && *sa == *so);
  }

  std::optional<float> constant_scalar(std::uint32_t v) const { return constant_f32_scalar(bundle, info, v); }

  // A value the blocked layout can hold at all.
  bool blockable(std::uint32_t v) const {
    const ValueInfo& vi = info.values[v];
    if (vi.kind != fb::ValueKind::Tensor || vi.dtype != DType::kF32 || rank(v) != 4 || vi.graph_input ||
        vi.graph_output || vi.producer < 0) {
      return false;
    }
    for (std::uint32_t s : vi.symbols) {
      if (info.bound_inside[s]) return false;  // sized at run time
    }
    const auto c = dim(v, 1);
    return c && *c >= 1;
  }

  Role classify(std::uint32_t n);
  void run();
};

Role Pass::classify(std::uint32_t n) {
  const NodeInfo& ni = info.nodes[n];
  if (ni.segment >= 0 || ni.hop || ni.folded || ni.b_slice >= 0 || !info.bindings_of[n].empty() || ni.outputs.size() != 1 ||
      ni.inputs.empty() || ni.kernel_allocates[0] || !f32_tensor(ni.outputs[0])) {
    return Role::kNone;
  }
  // Every role's output is 4-D, but mean(keepdim=False)'s [N, C] (which is plain).
  if (rank(ni.outputs[0]) != 4 && !(ni.op == OpKind::Mean && rank(ni.outputs[0]) == 2)) return Role::kNone;
  const std::uint32_t x = ni.inputs[0], y = ni.outputs[0];
  const auto* node = graph.nodes()->Get(n);
  auto follow_all = [&] {
    operand[n].assign(ni.inputs.size(), true);
    return Role::kFollow;
  };
  if (ni.fused_away) {  // its bytes are its producer's: every tensor operand follows (constants do not matter)
    operand[n].assign(ni.inputs.size(), false);
    for (std::size_t k = 0; k < ni.inputs.size(); ++k) operand[n][k] = info.values[ni.inputs[k]].kind != fb::ValueKind::Constant;
    return Role::kFollow;
  }
  switch (ni.op) {
    case OpKind::Conv2d: {
      const ValueInfo& w = info.values[ni.inputs[1]];
      if (!f32_tensor(x) || rank(x) != 4 || w.kind != fb::ValueKind::Constant || w.dtype != DType::kF32 || rank(ni.inputs[1]) != 4) {
        return Role::kNone;
      }
      if (ni.inputs.size() > 2 && info.values[ni.inputs[2]].kind != fb::ValueKind::Constant &&
          info.values[ni.inputs[2]].kind != fb::ValueKind::None) {
        return Role::kNone;  // a computed bias
      }
      cpu::nchwc::ConvShape s;
      const auto cin = dim(x, 1), cout = dim(ni.inputs[1], 0), kh = dim(ni.inputs[1], 2), kw = dim(ni.inputs[1], 3);
      if (!cin || !cout || !kh || !kw) return Role::kNone;
      s.in_channels = *cin;
      s.out_channels = *cout;
      s.kh = *kh;
      s.kw = *kw;
      s.groups = node->attrs()->Get(3)->i();
      if (s.groups < 1 || s.in_channels % s.groups != 0 || s.out_channels % s.groups != 0) return Role::kNone;
      if (!cpu::nchwc::dense_supported(s) && !cpu::nchwc::depthwise_supported(s)) return Role::kNone;
      operand[n].assign(ni.inputs.size(), false);
      operand[n][0] = true;
      return Role::kKernel;
    }
    case OpKind::BatchNorm: {  // inference: every parameter a constant (or absent)
      if (!f32_tensor(x) || rank(x) != 4) return Role::kNone;
      for (std::size_t k = 1; k < ni.inputs.size(); ++k) {
        const fb::ValueKind kind = info.values[ni.inputs[k]].kind;
        if (kind != fb::ValueKind::Constant && kind != fb::ValueKind::None) return Role::kNone;
      }
      operand[n].assign(ni.inputs.size(), false);
      operand[n][0] = true;
      return Role::kKernel;
    }
    case OpKind::MaxPool2d:
    case OpKind::AvgPool2d:
    case OpKind::AdaptiveAvgPool2d:
      if (!f32_tensor(x) || rank(x) != 4) return Role::kNone;
      operand[n].assign(1, true);
      return Role::kKernel;
    case OpKind::Mean: {
      if (!f32_tensor(x) || rank(x) != 4) return Role::kNone;
      const auto* dims = node->attrs()->Get(0)->ints();
      if (dims == nullptr || dims->size() != 2) return Role::kNone;
      const std::int64_t a = dims->Get(0), b = dims->Get(1);
      if (std::min(a, b) != 2 || std::max(a, b) != 3) return Role::kNone;
      operand[n].assign(1, true);
      return Role::kKernel;  // keepdim false gives a 2-D output: plain (blockable() says so)
    }
    case OpKind::Clamp: {
      for (std::uint32_t k = 0; k < 2 && k < count(node->attrs()); ++k) {
        const auto* a = node->attrs()->Get(k);
        if (a->kind() == fb::AttrKind::Float && !std::isfinite(a->f())) return Role::kNone;
      }
      return rank(x) == 4 ? follow_all() : Role::kNone;
    }
    case OpKind::Relu: case OpKind::Hardswish: case OpKind::Hardsigmoid: case OpKind::Sigmoid: case OpKind::Silu:
    case OpKind::Gelu: case OpKind::Tanh: case OpKind::LeakyRelu: case OpKind::Neg: case OpKind::Abs:
      return f32_tensor(x) && rank(x) == 4 ? follow_all() : Role::kNone;
    case OpKind::Div: {  // by a finite nonzero constant only (padded lanes stay finite)
      const bool rounding = count(node->attrs()) > 0 && node->attrs()->Get(0)->kind() != fb::AttrKind::None;
      const std::optional<float> d = constant_scalar(ni.inputs[1]);
      if (ni.inputs.size() != 2 || rounding || !d || *d == 0.0f || !std::isfinite(*d)) return Role::kNone;
      if (!f32_tensor(x) || rank(x) != 4 || info.values[ni.inputs[1]].dtype != DType::kF32) return Role::kNone;
      for (std::uint32_t d = 0; d < 4; ++d) {
        if (!broadcasts(x, y, d)) return Role::kNone;
      }
      operand[n].assign(2, false);
      operand[n][0] = true;
      return Role::kFollow;
    }
    case OpKind::Add: case OpKind::Sub: case OpKind::Mul: case OpKind::Maximum: case OpKind::Minimum: {
      operand[n].assign(ni.inputs.size(), false);
      bool any = false;
      for (std::size_t k = 0; k < ni.inputs.size(); ++k) {
        const std::uint32_t a = ni.inputs[k];
        if (info.values[a].dtype != DType::kF32) return Role::kNone;
        if (scalar(a)) continue;
        if (!f32_tensor(a) || rank(a) != 4 || dim(a, 1) != dim(y, 1) || !dim(y, 1)) return Role::kNone;
        for (std::uint32_t d : {0u, 2u, 3u}) {
          if (!broadcasts(a, y, d)) return Role::kNone;
        }
        operand[n][k] = true;
        any = true;
      }
      return any ? Role::kFollow : Role::kNone;
    }
    case OpKind::Cat: {
      if (node->attrs()->Get(0)->i() != 1) return Role::kNone;
      for (std::uint32_t a : ni.inputs) {
        const auto c = dim(a, 1);
        if (!f32_tensor(a) || rank(a) != 4 || !c || *c % cpu::nchwc::kBlock != 0) return Role::kNone;
      }
      return follow_all();
    }
    default:
      return Role::kNone;
  }
}

void Pass::run() {
  const std::size_t nn = info.nodes.size(), nv = info.values.size();
  role.assign(nn, Role::kNone);
  operand.assign(nn, {});
  for (std::uint32_t n = 0; n < nn; ++n) role[n] = classify(n);
  // Values some node reads in a position that must be plain.
  std::vector<bool> plain_reader(nv, false);
  for (std::uint32_t n = 0; n < nn; ++n) {
    const NodeInfo& ni = info.nodes[n];
    for (std::size_t k = 0; k < ni.inputs.size(); ++k) {
      if (role[n] == Role::kNone || !operand[n][k]) plain_reader[ni.inputs[k]] = true;
    }
  }
  std::vector<bool> blocked(nv, false);
  for (std::uint32_t v = 0; v < nv; ++v) {
    blocked[v] = blockable(v) && !plain_reader[v] && role[static_cast<std::size_t>(info.values[v].producer)] != Role::kNone;
  }
  // A follower's layout values share one layout: any plain one makes them all plain.
  for (bool changed = true; changed;) {
    changed = false;
    for (std::uint32_t n = 0; n < nn; ++n) {
      if (role[n] != Role::kFollow) continue;
      const NodeInfo& ni = info.nodes[n];
      bool all = blocked[ni.outputs[0]];
      for (std::size_t k = 0; k < ni.inputs.size(); ++k) all = all && (!operand[n][k] || blocked[ni.inputs[k]]);
      if (all) continue;
      auto demote = [&](std::uint32_t v) {
        if (blocked[v]) blocked[v] = false, changed = true;
      };
      demote(ni.outputs[0]);
      for (std::size_t k = 0; k < ni.inputs.size(); ++k) {
        if (operand[n][k]) demote(ni.inputs[k]);
      }
    }
  }
  for (std::uint32_t v = 0; v < nv; ++v) info.values[v].blocked = blocked[v];
  for (NodeInfo& ni : info.nodes) {
    ni.in_blocked = ni.out_blocked = 0;
    for (std::size_t k = 0; k < ni.inputs.size() && k < 32; ++k) {
      if (blocked[ni.inputs[k]]) ni.in_blocked |= 1u << k;
    }
    for (std::size_t k = 0; k < ni.outputs.size() && k < 32; ++k) {
      if (blocked[ni.outputs[k]]) ni.out_blocked |= 1u << k;
    }
  }
}

}  // namespace

void plan_layouts(const fb::Program& p, const Bundle& bundle, std::uint32_t g, GraphInfo& info) {
  Pass pass{p, bundle, *p.graphs()->Get(g), info, {}, {}};
  pass.run();
}

void fold_channel_scales(const fb::Program& p, const Bundle& bundle, std::uint32_t g, GraphInfo& info) {
  const Pass shapes{p, bundle, *p.graphs()->Get(g), info, {}, {}};
  const ValueReaders value_readers = readers_of(info);
  const std::vector<std::uint32_t>& readers = value_readers.count;
  const std::vector<std::int32_t>& reader = value_readers.last;
  auto same_shape = [&](std::uint32_t a, std::uint32_t b) { return same_value_shape(info, a, b); };
  for (std::uint32_t m = 0; m < info.nodes.size(); ++m) {
    NodeInfo& mul = info.nodes[m];
    if (mul.op != OpKind::Mul || mul.segment >= 0 || mul.inputs.size() != 2 || mul.outputs.size() != 1 || mul.fused_away ||
        mul.folded || mul.b_slice >= 0 || !info.bindings_of[m].empty() || mul.kernel_allocates[0] || mul.inputs[0] == mul.inputs[1]) {
      continue;
    }
    const std::uint32_t o = mul.outputs[0];
    const ValueInfo& oi = info.values[o];
    if (readers[o] != 1 || oi.graph_output || !shapes.f32_tensor(o) || shapes.rank(o) != 4) continue;
    const auto r = static_cast<std::size_t>(reader[o]);
    NodeInfo& conv = info.nodes[r];
    if (conv.op != OpKind::Conv2d || conv.segment >= 0 || conv.inputs.empty() || conv.inputs[0] != o || conv.fused_away ||
        conv.scale_mul >= 0 || ((conv.in_blocked & 1u) == 0 && (conv.out_blocked & 1u) == 0) ||
        std::find(conv.inputs.begin() + 1, conv.inputs.end(), o) != conv.inputs.end()) {
      continue;
    }
    // x: the operand of the output's shape; s: [N or 1, C, 1, 1].
    std::uint8_t k = 2;
    for (std::uint8_t i = 0; i < 2 && k == 2; ++i) {
      const std::uint32_t x = mul.inputs[1u - i], sc = mul.inputs[i];
      if (!same_shape(x, o) || info.values[x].blocked != oi.blocked || !shapes.f32_tensor(sc) || shapes.rank(sc) != 4) continue;
      const ValueInfo& si = info.values[sc];
      const bool channels = si.shape->Get(1) == oi.shape->Get(1) || (shapes.dim(sc, 1) && shapes.dim(sc, 1) == shapes.dim(o, 1));
      const bool batch = si.shape->Get(0) == oi.shape->Get(0) || shapes.dim(sc, 0) == 1;
      if (channels && batch && shapes.dim(sc, 2) == 1 && shapes.dim(sc, 3) == 1) k = i;
    }
    if (k == 2) continue;
    mul.folded = true;
    mul.folded_into = static_cast<std::int32_t>(r);
    conv.scale_mul = static_cast<std::int32_t>(m);
    conv.scale_operand = k;
    // x and s are read by the conv now: alive (and unchanged) until it runs.
    for (std::uint32_t v : mul.inputs) info.values[v].last_use = std::max(info.values[v].last_use, static_cast<std::int32_t>(r));
  }
}

}  // namespace kiln

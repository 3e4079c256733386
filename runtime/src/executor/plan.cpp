// plan_graph, in named steps: shapes, attributes, accelerator segments, state updates
// (on the host, or kept on the device), buffers (aliasing and in-place reuse), arena placement.
#include "executor/plan.h"

#include <algorithm>
#include <limits>

#include "executor/memory_plan.h"
#include "kiln/format/kiln_generated.h"
#include "kiln/runtime/expr.h"

namespace kiln {

std::optional<std::uint64_t> checked_nbytes(DType dtype, std::span<const std::int64_t> shape) {
  std::uint64_t n = dtype_size(dtype);
  for (std::int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(n, static_cast<std::uint64_t>(d), &n)) return std::nullopt;
  }
  return n;
}

std::int32_t device_state_update(const fb::Program& p, const GraphInfo& info, const fb::Graph& graph, std::uint32_t k,
                                 cpu::FunctionRef<bool(std::int32_t)> on_device) {
  constexpr std::int32_t kNo = -2;
  const std::uint32_t in0 = count(p.signature()->inputs()), out0 = count(p.signature()->outputs());
  const std::uint32_t states = count(p.signature()->states());
  if (k >= states || count(graph.inputs()) != in0 + states || count(graph.outputs()) != out0 + states) return kNo;
  const std::size_t nn = info.nodes.size();
  // Whether only device nodes read v (and `read`: some node does).
  auto read_on_device_only = [&](std::uint32_t v, bool& read) {
    for (std::size_t n = 0; n < nn; ++n) {
      const NodeInfo& ni = info.nodes[n];
      if (std::find(ni.inputs.begin(), ni.inputs.end(), v) == ni.inputs.end()) continue;
      if (!on_device(static_cast<std::int32_t>(n))) return false;
      read = true;
    }
    return true;
  };
  auto returned = [&](std::uint32_t v) { return std::count(graph.outputs()->begin(), graph.outputs()->end(), v); };
  const std::uint32_t u = graph.inputs()->Get(in0 + k), v = graph.outputs()->Get(out0 + k);
  bool read = false;
  if (info.values[u].dtype != DType::kF32 || !read_on_device_only(u, read)) return kNo;
  if (u == v) return read && returned(u) == 1 ? -1 : kNo;  // nothing to gain, or the caller gets it
  const std::int32_t n = info.values[v].producer;
  if (n < 0 || static_cast<std::size_t>(n) >= nn || !on_device(n) || returned(u) != 0 || returned(v) != 1) return kNo;
  const NodeInfo& ni = info.nodes[static_cast<std::size_t>(n)];
  if (ni.op != OpKind::IndexPut || ni.outputs.size() != 1 || ni.inputs.size() < 2 || ni.inputs[0] != u ||
      std::count(ni.inputs.begin(), ni.inputs.end(), u) != 1 || info.values[u].last_use != n) {
    return kNo;
  }
  bool read_v = false;
  return read_on_device_only(v, read_v) ? n : kNo;
}

namespace {

// Above this a tensor is not placed (offsets and sums stay far from overflow); the
// executor's memory limit rejects such a plan before anything is allocated.
constexpr std::uint64_t kUnplannableBytes = std::uint64_t{1} << 60;

struct Planner {
  const Program& program;
  const fb::Program& p;
  const GraphInfo& info;
  const fb::Graph& graph;
  std::uint32_t g;
  std::span<const std::int64_t> symbols;
  std::span<const std::uint8_t> bound;
  GraphPlan& plan;
  bool entry;
  bool device_state;
  std::span<const std::int64_t> headroom;  // plan_graph's `headroom` (empty: none)
  int threads;                              // plan_graph's `threads`
  std::vector<std::uint64_t> bytes;    // per value with a planned shape
  std::vector<std::uint64_t> reserve;  // per value: the bytes its place must hold (>= bytes)

  std::string graph_name() const {
    return graph.name() && graph.name()->size() ? graph.name()->str() : "graph " + std::to_string(g);
  }
  std::string location_of(std::int32_t producer) const {
    if (producer < 0) return "";
    const DebugLocation d = debug_location(p, info.nodes[static_cast<std::size_t>(producer)].debug);
    return d.empty() ? "" : " (" + d.text() + ")";
  }

  // Value v's bytes under `headroom` (0 without one, or when they do not evaluate).
  std::uint64_t headroom_bytes(std::size_t v) const;
  Status plan_shapes();
  Status plan_attrs();
  void find_segment_io();
  std::vector<std::uint8_t> place_segments();
  std::vector<std::int32_t> state_candidates();
  void device_states(std::vector<std::uint8_t>& device_only);
  void plan_buffers(const std::vector<std::uint8_t>& device_only, const std::vector<std::int32_t>& state_candidate);
};

std::uint64_t Planner::headroom_bytes(std::size_t v) const {
  const ValueInfo& vi = info.values[v];
  bool differs = false;
  for (std::uint32_t s : vi.symbols) differs |= !headroom.empty() && headroom[s] != symbols[s];
  if (!differs) return 0;
  TensorView view;
  view.rank = static_cast<int>(count(vi.shape));
  for (std::uint32_t d = 0; d < static_cast<std::uint32_t>(view.rank); ++d) {
    auto size = evaluate_expr(p, vi.shape->Get(d), headroom);
    if (!size.ok() || *size < 0) return 0;
    view.shape[d] = *size;
  }
  to_physical(vi, view);
  return checked_nbytes(vi.dtype, view.dims()).value_or(0);
}

// Shapes: every tensor whose dims mention no symbol bound inside the graph.
Status Planner::plan_shapes() {
  const std::size_t nv = info.values.size();
  bytes.assign(nv, 0);
  reserve.assign(nv, 0);
  for (std::size_t v = 0; v < nv; ++v) {
    const ValueInfo& vi = info.values[v];
    if (vi.kind != fb::ValueKind::Tensor && vi.kind != fb::ValueKind::Constant) continue;
    bool dyn = false;
    for (std::uint32_t s : vi.symbols) dyn |= info.bound_inside[s] && !bound[s];
    if (dyn) {
      plan.dynamic[v] = 1;
      plan.views[v].dtype = vi.dtype;
      continue;
    }
    TensorView& view = plan.views[v];
    view.dtype = vi.dtype;
    view.rank = static_cast<int>(count(vi.shape));
    for (int d = 0; d < view.rank; ++d) {
      auto size = evaluate_expr(p, vi.shape->Get(static_cast<std::uint32_t>(d)), symbols);
      if (!size.ok()) return size.status();
      if (*size < 0) {
        return Status(StatusCode::kInvalidInput, "value " + std::to_string(v) + " of " + graph_name() + " would have a negative size " +
                                                     std::to_string(*size) + " (" + expr_to_string(p, vi.shape->Get(static_cast<std::uint32_t>(d))) +
                                                     ")" + location_of(vi.producer));
      }
      view.shape[static_cast<std::size_t>(d)] = *size;
    }
    to_physical(vi, view);  // a blocked value's view (and bytes) are its physical [N, C/8, H, W, 8]
    bytes[v] = checked_nbytes(vi.dtype, view.dims()).value_or(std::numeric_limits<std::uint64_t>::max());
    reserve[v] = std::max(bytes[v], headroom_bytes(v));
    if (vi.kind == fb::ValueKind::Constant) {
      view.data = const_cast<std::uint8_t*>(program.bundle().constant_data(vi.constant).data());
    }
  }
  return Status::Ok();
}

// Expression attributes over symbols known now (the others are evaluated per call).
Status Planner::plan_attrs() {
  const std::size_t nn = info.nodes.size();
  for (std::size_t n = 0; n < nn; ++n) {
    const auto* node = graph.nodes()->Get(static_cast<std::uint32_t>(n));
    bool ready = true;
    std::vector<std::uint32_t>& mentioned = plan.attr_symbols[n];
    for (std::uint32_t k = 0; k < count(node->attrs()) && ready; ++k) {
      const auto* a = node->attrs()->Get(k);
      if (a->kind() != fb::AttrKind::Expr && a->kind() != fb::AttrKind::Exprs) continue;
      for (std::uint32_t e = 0; e < count(a->exprs()); ++e) {
        const auto* ref = p.exprs()->Get(a->exprs()->Get(e));
        for (std::uint32_t t = ref->start(); t < ref->start() + ref->length(); ++t) {
          const auto* tok = p.expr_tokens()->Get(t);
          if (tok->op() != fb::ExprOp::Sym) continue;
          const auto sym = static_cast<std::uint32_t>(tok->value());
          if (info.bound_inside[sym]) ready = false;
          if (std::find(mentioned.begin(), mentioned.end(), sym) == mentioned.end()) mentioned.push_back(sym);
        }
      }
    }
    if (!ready) {
      mentioned.clear();
      continue;
    }
    KILN_RETURN_IF_ERROR(read_attrs(p, *node, symbols, plan.attrs[n]));
    plan.attrs_ready[n] = 1;
  }
  return Status::Ok();
}

// Per accelerator segment, its host-side inputs (values read by the segment and defined
// outside it) and outputs (values defined in it and read after it, or returned).
void Planner::find_segment_io() {
  const std::size_t ns = info.segments.size();
  plan.segment_inputs.resize(ns);
  plan.segment_outputs.resize(ns);
  for (std::size_t s = 0; s < ns; ++s) {
    const Segment& seg = info.segments[s];
    auto inside = [&](std::int32_t producer) {
      return producer >= static_cast<std::int32_t>(seg.first) && producer <= static_cast<std::int32_t>(seg.last);
    };
    auto& ins = plan.segment_inputs[s];
    for (std::uint32_t n = seg.first; n <= seg.last; ++n) {
      for (std::uint32_t v : info.nodes[n].inputs) {
        const ValueInfo& vi = info.values[v];
        if (!inside(vi.producer) && vi.kind != fb::ValueKind::Constant && vi.kind != fb::ValueKind::None &&
            std::find(ins.begin(), ins.end(), v) == ins.end()) {
          ins.push_back(v);
        }
      }
      for (std::uint32_t v : info.nodes[n].outputs) {
        const ValueInfo& vi = info.values[v];
        if (vi.graph_output || vi.last_use > static_cast<std::int32_t>(seg.last)) plan.segment_outputs[s].push_back(v);
      }
    }
  }
}

// A segment runs on the device only when all its shapes and attributes are static here.
// Returns per value whether it lives on the device only (produced and consumed inside one
// device segment): it needs no host bytes.
std::vector<std::uint8_t> Planner::place_segments() {
  const std::size_t ns = info.segments.size();
  plan.segment_on_cpu.assign(ns, 0);
  plan.prepared.resize(ns);
  std::vector<std::uint8_t> device_only(info.values.size(), 0);
  for (std::size_t s = 0; s < ns; ++s) {
    const Segment& seg = info.segments[s];
    for (std::uint32_t n = seg.first; n <= seg.last; ++n) {
      for (std::uint32_t v : info.nodes[n].inputs) plan.segment_on_cpu[s] |= plan.dynamic[v];
      for (std::uint32_t v : info.nodes[n].outputs) plan.segment_on_cpu[s] |= plan.dynamic[v];
      plan.segment_on_cpu[s] |= !plan.attrs_ready[n];
    }
    if (plan.segment_on_cpu[s]) continue;
    for (std::uint32_t n = seg.first; n <= seg.last; ++n) {
      for (std::uint32_t v : info.nodes[n].outputs) {
        const ValueInfo& vi = info.values[v];
        if (!vi.graph_output && vi.last_use <= static_cast<std::int32_t>(seg.last)) device_only[v] = 1;
      }
    }
  }
  return device_only;
}

// State updates (entry graphs). State k is input |inputs| + k and its new value output
// |outputs| + k. A new value that is the input value itself changes nothing; one produced
// on the CPU by an op that can update its first operand in place (cpu::updates_in_place:
// index_put, a KV cache row write) from the state's own input value, which no later node
// reads, may be written over the state's buffer. Returns per node the state it may update
// that way (-1: none); plan_buffers confirms it once it knows which values alias the state.
// Every other new value is copied into the Session's buffer after the run.
std::vector<std::int32_t> Planner::state_candidates() {
  std::vector<std::int32_t> candidate(info.nodes.size(), -1);
  const std::uint32_t states = entry ? count(p.signature()->states()) : 0;
  const std::uint32_t in0 = count(p.signature()->inputs()), out0 = count(p.signature()->outputs());
  if (states == 0 || count(graph.inputs()) != in0 + states || count(graph.outputs()) != out0 + states) return candidate;
  plan.state_update.assign(states, StateUpdate::kCopy);
  plan.node_state.assign(info.nodes.size(), -1);
  plan.device_state_written.assign(states, 0);
  plan.segment_state_bytes.assign(info.segments.size(), 0);
  for (std::uint32_t k = 0; k < states; ++k) {
    const std::uint32_t u = graph.inputs()->Get(in0 + k), v = graph.outputs()->Get(out0 + k);
    if (u == v) {
      plan.state_update[k] = StateUpdate::kUnchanged;
      continue;
    }
    const std::int32_t n = info.values[v].producer;
    if (n < 0) continue;
    const NodeInfo& ni = info.nodes[static_cast<std::size_t>(n)];
    if (!cpu::updates_in_place(ni.op) || ni.segment >= 0 || ni.outputs.size() != 1 || ni.inputs.empty() || ni.inputs[0] != u ||
        std::count(ni.inputs.begin(), ni.inputs.end(), u) != 1 || info.values[u].last_use != n || plan.dynamic[u] ||
        plan.dynamic[v] || ni.kernel_allocates[0] || bytes[u] != bytes[v] || candidate[static_cast<std::size_t>(n)] >= 0) {
      continue;
    }
    candidate[static_cast<std::size_t>(n)] = static_cast<std::int32_t>(k);
  }
  return candidate;
}

// State kept on the device (device_state): device_state_update's rule, with the segments
// that run on the device for these shapes, and static sizes. Such a state is planned
// kDevice: its values leave the segments' host inputs and outputs (the segments bind the
// Session's device buffer) and get no host bytes. f32 states only (the device holds 32-bit
// words; an i64 would be narrowed).
void Planner::device_states(std::vector<std::uint8_t>& device_only) {
  const std::uint32_t states = entry ? count(p.signature()->states()) : 0;
  if (!device_state || states == 0 || plan.state_update.size() != states) return;
  const std::uint32_t in0 = count(p.signature()->inputs()), out0 = count(p.signature()->outputs());
  auto on_device = [&](std::int32_t n) {
    const std::int32_t s = info.nodes[static_cast<std::size_t>(n)].segment;
    return s >= 0 && !plan.segment_on_cpu[static_cast<std::size_t>(s)];
  };
  for (std::uint32_t k = 0; k < states; ++k) {
    const std::int32_t writer = device_state_update(p, info, graph, k, on_device);
    const std::uint32_t u = graph.inputs()->Get(in0 + k), v = graph.outputs()->Get(out0 + k);
    if (writer < -1 || plan.dynamic[u] || plan.dynamic[v] || bytes[u] != bytes[v]) continue;
    if (plan.device_state_of.empty()) plan.device_state_of.assign(info.values.size(), -1);
    plan.device_state_of[u] = static_cast<std::int32_t>(k);
    plan.device_state_of[v] = static_cast<std::int32_t>(k);
    plan.state_update[k] = StateUpdate::kDevice;
    device_only[v] = 1;
    for (auto* list : {&plan.segment_inputs, &plan.segment_outputs}) {
      for (auto& values : *list) values.erase(std::remove_if(values.begin(), values.end(), [&](std::uint32_t w) { return w == u || w == v; }), values.end());
    }
    if (writer >= 0) {
      const NodeInfo& ni = info.nodes[static_cast<std::size_t>(writer)];
      plan.device_state_written[k] = 1;
      plan.segment_state_bytes[static_cast<std::size_t>(ni.segment)] += bytes[ni.inputs[1]];
    }
  }
}

// Buffers: tensors produced by nodes with planned shapes, merged when a node may write its
// output over a dying input (elementwise) or share its input's bytes (reshape); then placed
// into the arena. A state updated in place (state_candidates) shares the state input's bytes.
void Planner::plan_buffers(const std::vector<std::uint8_t>& device_only, const std::vector<std::int32_t>& state_candidate) {
  struct Buffer {
    std::uint64_t bytes = 0;
    std::int32_t first = 0, last = 0;
  };
  const std::size_t nv = info.values.size(), nn = info.nodes.size();
  std::vector<Buffer> buffers;
  std::vector<std::int32_t> buffer_of(nv, -1);
  auto external = [&](std::uint32_t v) {  // bytes owned by the caller or the bundle
    const ValueInfo& vi = info.values[v];
    return vi.graph_input || vi.kind == fb::ValueKind::Constant || plan.alias[v] >= 0;
  };
  auto same_shape = [&](std::uint32_t a, std::uint32_t b) {
    const TensorView &x = plan.views[a], &y = plan.views[b];
    return x.dtype == y.dtype && x.rank == y.rank && std::equal(x.shape.begin(), x.shape.begin() + x.rank, y.shape.begin());
  };
  // The input buffer a reshape/identity output may share, or the external value it aliases.
  auto try_alias = [&](const NodeInfo& ni, std::uint32_t v, std::int32_t last) {
    if (!ni.alias_ok || ni.inputs.size() <= ni.alias_input || ni.segment >= 0) return false;
    const std::uint32_t u = ni.inputs[ni.alias_input];
    if (plan.dynamic[u] || bytes[u] != bytes[v] || info.values[u].kind == fb::ValueKind::None) return false;
    if (buffer_of[u] >= 0) {
      buffer_of[v] = buffer_of[u];
      Buffer& b = buffers[static_cast<std::size_t>(buffer_of[v])];
      b.last = std::max(b.last, last);
      b.bytes = std::max(b.bytes, reserve[v]);
      plan.same_bytes.emplace_back(u, v);
      return true;
    }
    if (!external(u)) return false;
    plan.alias[v] = plan.alias[u] >= 0 ? plan.alias[u] : static_cast<std::int32_t>(u);
    plan.same_bytes.emplace_back(u, v);
    return true;
  };
  // An elementwise output written over an input whose buffer dies at this node.
  auto try_in_place = [&](const NodeInfo& ni, std::uint32_t v, std::size_t n, std::int32_t last) {
    if (!ni.inplace_ok || ni.segment >= 0) return false;
    for (std::uint32_t u : ni.inputs) {
      const std::int32_t b = buffer_of[u];
      if (b < 0 || buffers[static_cast<std::size_t>(b)].last != static_cast<std::int32_t>(n) || !same_shape(u, v)) continue;
      bool clash = false;  // another operand reading the same bytes through a different shape
      for (std::uint32_t w : ni.inputs) clash |= w != u && buffer_of[w] == b && !same_shape(w, v);
      if (clash) continue;
      buffer_of[v] = b;
      buffers[static_cast<std::size_t>(b)].last = last;
      buffers[static_cast<std::size_t>(b)].bytes = std::max(buffers[static_cast<std::size_t>(b)].bytes, reserve[v]);
      for (std::uint32_t w : ni.inputs) {
        if (buffer_of[w] == b) plan.same_shape.emplace_back(w, v);
      }
      return true;
    }
    return false;
  };
  // The node updating state `k` in place: no view of the state's old value (a reshape
  // sharing its bytes) may be read after it, or by it as another operand.
  auto try_state_in_place = [&](const NodeInfo& ni, std::uint32_t v, std::size_t n) {
    const std::int32_t k = state_candidate[n];
    if (k < 0) return false;
    const std::uint32_t u = ni.inputs[0];
    for (std::size_t w = 0; w < nv; ++w) {
      if (plan.alias[w] != static_cast<std::int32_t>(u)) continue;
      if (info.values[w].last_use > static_cast<std::int32_t>(n)) return false;
      if (std::find(ni.inputs.begin() + 1, ni.inputs.end(), w) != ni.inputs.end()) return false;
    }
    plan.alias[v] = static_cast<std::int32_t>(u);
    plan.same_bytes.emplace_back(u, v);
    plan.node_state[n] = k;
    plan.state_update[static_cast<std::size_t>(k)] = StateUpdate::kInPlace;
    return true;
  };
  bool oversized = false;
  for (std::size_t n = 0; n < nn; ++n) {
    const NodeInfo& ni = info.nodes[n];
    for (std::size_t k = 0; k < ni.outputs.size(); ++k) {
      const std::uint32_t v = ni.outputs[k];
      const ValueInfo& vi = info.values[v];
      if (vi.kind != fb::ValueKind::Tensor || plan.dynamic[v] || ni.kernel_allocates[k] || device_only[v]) continue;
      // A folded slice's output is never written (its matmul reads the window); with an
      // observer, which computes it after all, run_node gives it heap bytes.
      if (ni.folded) continue;
      if (k == 0 && try_state_in_place(ni, v, n)) continue;
      const std::int32_t last = std::max(vi.last_use, static_cast<std::int32_t>(n));
      if (try_alias(ni, v, last) || try_in_place(ni, v, n, last)) continue;
      buffer_of[v] = static_cast<std::int32_t>(buffers.size());
      buffers.push_back({reserve[v], static_cast<std::int32_t>(n), last});
      if (plan.largest < 0 || bytes[v] > plan.largest_bytes) plan.largest = static_cast<std::int32_t>(v), plan.largest_bytes = bytes[v];
      oversized |= reserve[v] >= kUnplannableBytes;
    }
  }
  for (std::size_t n = 0; n < nn; ++n) {
    for (std::uint32_t v : info.nodes[n].outputs) {
      if (info.values[v].kind == fb::ValueKind::Tensor && !plan.dynamic[v]) {
        plan.naive_bytes = std::min(plan.naive_bytes + std::min(bytes[v], kUnplannableBytes), std::numeric_limits<std::uint64_t>::max());
      }
    }
  }
  if (oversized) {  // never allocated: the memory limit rejects the plan
    plan.arena_bytes = std::numeric_limits<std::uint64_t>::max();
    return;
  }
  // Working memory (NodeInfo::workspace): what the node's kernel asks for at these shapes
  // on the session's threads, a buffer alive at that node only. plan_memory puts each
  // buffer at the lowest offset free over its lifetime: these, alive at one node each and
  // among the largest, mostly land on the same offset, so a kernel's per-thread buffers
  // keep their addresses (and their cores' caches) from one node to the next.
  std::vector<std::pair<std::size_t, std::size_t>> workspace_buffer;  // node, buffer
  for (std::size_t n = 0; n < nn; ++n) {
    const NodeInfo& ni = info.nodes[n];
    if (!ni.workspace || ni.folded || ni.segment >= 0 || !plan.attrs_ready[n] || ni.outputs.empty()) continue;
    std::vector<TensorView> ins;
    bool known = !plan.dynamic[ni.outputs[0]];
    for (std::uint32_t v : ni.inputs) {
      known = known && !plan.dynamic[v];
      ins.push_back(plan.views[v]);
    }
    if (!known) continue;
    const bool plain_residual = ni.residual >= 0 && !info.values[static_cast<std::size_t>(ni.residual)].blocked;
    const std::uint64_t want =
        cpu::workspace_bytes(ni.op, ni.prepared, ins, plan.views[ni.outputs[0]], plan.attrs[n].values,
                             (ni.in_blocked & 1u) != 0, (ni.out_blocked & 1u) != 0, plain_residual, threads);
    if (want == 0 || want >= kUnplannableBytes) continue;
    workspace_buffer.emplace_back(n, buffers.size());
    buffers.push_back({want, static_cast<std::int32_t>(n), static_cast<std::int32_t>(n)});
  }
  std::vector<BufferRequest> requests;
  requests.reserve(buffers.size());
  for (const Buffer& b : buffers) requests.push_back({b.bytes, b.first, b.last});
  const MemoryPlan mp = plan_memory(requests);
  if (!workspace_buffer.empty()) plan.workspace.assign(nn, {0, 0});
  for (const auto& [n, b] : workspace_buffer) plan.workspace[n] = {mp.offsets[b], buffers[b].bytes};
  for (std::size_t v = 0; v < nv; ++v) {
    if (buffer_of[v] < 0) continue;
    plan.offset[v] = static_cast<std::int64_t>(mp.offsets[static_cast<std::size_t>(buffer_of[v])]);
    plan.reserved[v] = buffers[static_cast<std::size_t>(buffer_of[v])].bytes;
  }
  plan.arena_bytes = mp.arena_bytes;
}

}  // namespace

Result<std::unique_ptr<GraphPlan>> plan_graph(const Program& program, std::uint32_t g, std::span<const std::int64_t> symbols,
                                              std::span<const std::uint8_t> bound, bool entry, bool device_state,
                                              std::span<const std::int64_t> headroom, int threads) {
  const Program::Impl& prog = ProgramInternals::of(program);
  const fb::Program& p = program.bundle().program();
  auto plan = std::make_unique<GraphPlan>();
  plan->graph = g;
  plan->symbols.assign(symbols.begin(), symbols.end());
  plan->bound.assign(bound.begin(), bound.end());
  const GraphInfo& info = prog.graphs[g];
  const std::size_t nv = info.values.size(), nn = info.nodes.size();
  plan->views.assign(nv, TensorView{});
  plan->offset.assign(nv, -1);
  plan->alias.assign(nv, -1);
  plan->dynamic.assign(nv, 0);
  plan->attrs.resize(nn);
  plan->attrs_ready.assign(nn, 0);
  plan->reserved.assign(nv, 0);
  plan->attr_symbols.resize(nn);
  Planner planner{program, p, info, *p.graphs()->Get(g), g, symbols, bound, *plan, entry, device_state, headroom, threads, {}, {}};
  KILN_RETURN_IF_ERROR(planner.plan_shapes());
  KILN_RETURN_IF_ERROR(planner.plan_attrs());
  planner.find_segment_io();
  std::vector<std::uint8_t> device_only = planner.place_segments();
  const std::vector<std::int32_t> state_candidate = planner.state_candidates();
  planner.device_states(device_only);
  planner.plan_buffers(device_only, state_candidate);
  return plan;
}

bool update_plan(const Program& program, GraphPlan& plan, std::span<const std::int64_t> symbols) {
  const fb::Program& p = program.bundle().program();
  const GraphInfo& info = ProgramInternals::of(program).graphs[plan.graph];
  const fb::Graph& graph = *p.graphs()->Get(plan.graph);
  if (symbols.size() != plan.symbols.size()) return false;
  std::vector<std::uint8_t> changed(symbols.size(), 0);
  bool any = false;
  for (std::size_t s = 0; s < symbols.size(); ++s) {
    changed[s] = plan.bound[s] && symbols[s] != plan.symbols[s];
    any |= changed[s] != 0;
  }
  plan.symbols.assign(symbols.begin(), symbols.end());
  if (!any) return true;
  auto mentions_changed = [&](const std::vector<std::uint32_t>& syms) {
    return std::any_of(syms.begin(), syms.end(), [&](std::uint32_t s) { return changed[s] != 0; });
  };
  auto on_device = [&](std::int32_t segment) {
    return segment >= 0 && !plan.segment_on_cpu[static_cast<std::size_t>(segment)];
  };
  // Shapes (and the places that hold them).
  const std::size_t nv = info.values.size();
  std::vector<std::uint8_t> resized(nv, 0);
  for (std::size_t v = 0; v < nv; ++v) {
    const ValueInfo& vi = info.values[v];
    if (vi.kind != fb::ValueKind::Tensor && vi.kind != fb::ValueKind::Constant) continue;
    if (plan.dynamic[v] || !mentions_changed(vi.symbols)) continue;
    TensorView& view = plan.views[v];
    view.rank = static_cast<int>(count(vi.shape));
    for (int d = 0; d < view.rank; ++d) {
      auto size = evaluate_expr(p, vi.shape->Get(static_cast<std::uint32_t>(d)), symbols);
      if (!size.ok() || *size < 0) return false;
      view.shape[static_cast<std::size_t>(d)] = *size;
    }
    to_physical(vi, view);
    const std::optional<std::uint64_t> bytes = checked_nbytes(view.dtype, view.dims());
    if (!bytes || *bytes >= kUnplannableBytes) return false;
    if (plan.offset[v] >= 0 && *bytes > plan.reserved[v]) return false;
    resized[v] = 1;
  }
  for (const auto& [a, b] : plan.same_bytes) {
    if (plan.views[a].nbytes() != plan.views[b].nbytes()) return false;
  }
  for (const auto& [a, b] : plan.same_shape) {
    const TensorView &x = plan.views[a], &y = plan.views[b];
    if (x.dtype != y.dtype || x.rank != y.rank || !std::equal(x.shape.begin(), x.shape.begin() + x.rank, y.shape.begin())) return false;
  }
  // Attributes; an accelerator segment was prepared for its shapes and attributes as planned.
  for (std::size_t n = 0; n < info.nodes.size(); ++n) {
    const NodeInfo& ni = info.nodes[n];
    const bool attrs_change = plan.attrs_ready[n] && mentions_changed(plan.attr_symbols[n]);
    if (on_device(ni.segment)) {
      bool touched = attrs_change;
      for (std::uint32_t v : ni.inputs) touched |= resized[v] != 0;
      for (std::uint32_t v : ni.outputs) touched |= resized[v] != 0;
      if (touched) return false;
    }
    if (attrs_change && !read_attrs(p, *graph.nodes()->Get(static_cast<std::uint32_t>(n)), symbols, plan.attrs[n]).ok()) return false;
  }
  // What the memory limit and the statistics report.
  plan.naive_bytes = 0;
  plan.largest_bytes = 0;
  plan.largest = -1;
  for (std::size_t n = 0; n < info.nodes.size(); ++n) {
    for (std::uint32_t v : info.nodes[n].outputs) {
      if (info.values[v].kind != fb::ValueKind::Tensor || plan.dynamic[v]) continue;
      const std::uint64_t bytes = plan.views[v].nbytes();
      plan.naive_bytes += bytes;
      if (plan.offset[v] >= 0 && (plan.largest < 0 || bytes > plan.largest_bytes)) plan.largest = static_cast<std::int32_t>(v), plan.largest_bytes = bytes;
    }
  }
  return true;
}

}  // namespace kiln

// The run loop: Session::run converts the inputs, run_graph plans a call (once per
// signature; see session_impl.h) and runs its nodes, run_node calls a kernel, run_segment
// hands a run of nodes to the accelerator.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <iterator>
#include <new>
#include <optional>

#include <unistd.h>

#include "backends/cpu/kernels/kernels.h"
#include "executor/memory_plan.h"
#include "executor/session_impl.h"

namespace kiln {
namespace {

// The plan cache's key of a call: its inputs' dtypes and shapes, and with `ints` its int
// inputs' values (an entry plan keeps those in GraphPlan::int_args and is updated for others).
void make_key(std::span<const CallArg> args, SignatureKey& key, bool ints) {
  key.words.clear();
  for (const CallArg& a : args) {
    if (a.is_int) {
      key.words.push_back(-1);
      if (ints) key.words.push_back(a.i);
      continue;
    }
    key.words.push_back(static_cast<std::int64_t>(a.t.dtype) << 8 | a.t.rank);
    for (int d = 0; d < a.t.rank; ++d) key.words.push_back(a.t.shape[d]);
  }
}

class ConstantsOf final : public backend::ConstantSource {
 public:
  explicit ConstantsOf(const Bundle& b) : bundle_(b) {}
  std::span<const std::uint8_t> constant_data(std::uint32_t index) const override { return bundle_.constant_data(index); }

 private:
  const Bundle& bundle_;
};

class KernelCtx final : public KernelContext {
 public:
  using Alloc = cpu::FunctionRef<Result<void*>(int, std::size_t)>;
  KernelCtx(std::span<TensorView> outs, cpu::ThreadPool& pool, Alloc alloc, const NodeInfo& ni, const OperandWindow* window1 = nullptr)
      : outs_(outs), pool_(pool), alloc_(alloc), packed_b1_(ni.packed_b), prepared1_(ni.prepared), act_(ni.fused_act), window1_(window1),
        in_blocked_(ni.in_blocked), out_blocked_(ni.out_blocked), blocked_kernel_(ni.blocked_kernel) {}
  bool blocked_kernel() const override { return blocked_kernel_; }
  bool input_blocked(int index) const override { return index >= 0 && index < 32 && (in_blocked_ >> index & 1u) != 0; }
  void set_residual(const TensorView* view, bool blocked) {
    residual_ = view;
    residual_blocked_ = blocked;
  }
  const TensorView* residual(bool* blocked) const override {
    if (blocked != nullptr) *blocked = residual_blocked_;
    return residual_;
  }
  void set_input_scale(const TensorView* view, bool blocked) {
    scale_ = view;
    scale_blocked_ = blocked;
  }
  const TensorView* input_scale(bool* blocked) const override {
    if (blocked != nullptr) *blocked = scale_blocked_;
    return scale_;
  }
  void set_folded_conv(const FoldedConv* folded) { folded_ = folded; }
  const FoldedConv* folded_conv() const override { return folded_; }
  void set_workspace(std::span<std::byte> bytes) { workspace_ = bytes; }
  std::span<std::byte> workspace() const override { return workspace_; }
  bool output_blocked(int index) const override { return index >= 0 && index < 32 && (out_blocked_ >> index & 1u) != 0; }
  const OperandWindow* operand_window(int index) const override { return index == 1 ? window1_ : nullptr; }
  const cpu::PackedB* packed_b(int index) const override { return index == 1 ? packed_b1_ : nullptr; }
  const cpu::PreparedWeights* prepared_weights(int index) const override { return index == 1 ? prepared1_ : nullptr; }
  cpu::FusedActivation fused_activation() const override { return act_; }
  Result<TensorView> allocate_output(int index, DType dtype, std::span<const std::int64_t> shape) override {
    if (index < 0 || static_cast<std::size_t>(index) >= outs_.size()) return Status(StatusCode::kInternal, "bad output index");
    if (shape.size() > kMaxRank) return Status(StatusCode::kInternal, "output rank above the maximum");
    const std::optional<std::uint64_t> bytes = checked_nbytes(dtype, shape);
    if (!bytes || *bytes > SIZE_MAX) return Status(StatusCode::kInvalidInput, "a data-dependent output size does not fit in memory");
    KILN_ASSIGN_OR_RETURN(void* data, alloc_(index, static_cast<std::size_t>(*bytes)));
    outs_[static_cast<std::size_t>(index)] = make_view(dtype, shape, data);
    return outs_[static_cast<std::size_t>(index)];
  }
  cpu::ThreadPool& pool() override { return pool_; }

 private:
  std::span<TensorView> outs_;
  cpu::ThreadPool& pool_;
  Alloc alloc_;
  const cpu::PackedB* packed_b1_;
  const cpu::PreparedWeights* prepared1_;
  cpu::FusedActivation act_;
  const OperandWindow* window1_;
  std::uint32_t in_blocked_, out_blocked_;
  bool blocked_kernel_;
  const TensorView* residual_ = nullptr;
  bool residual_blocked_ = false;
  const TensorView* scale_ = nullptr;
  bool scale_blocked_ = false;
  const FoldedConv* folded_ = nullptr;
  std::span<std::byte> workspace_;
};

}  // namespace

// The FoldedConv of a depthwise conv2d's folded expansion `en`: its input views, attributes
// (evaluated now when the plan could not), prepared weights and activation.
struct Session::Impl::FoldedExpansion {
  FoldedConv conv;
  TensorView inputs[3];
  NodeAttrs attrs;

  Status bind(const Session::Impl& s, const Frame& f, std::size_t en) {
    const NodeInfo& ex = f.info->nodes[en];
    const std::size_t count = std::min<std::size_t>(ex.inputs.size(), 3);
    for (std::size_t k = 0; k < count; ++k) inputs[k] = f.views[ex.inputs[k]];
    const NodeAttrs* ex_attrs = &f.plan->attrs[en];
    if (!f.plan->attrs_ready[en]) {
      KILN_RETURN_IF_ERROR(read_attrs(s.p, *f.graph->nodes()->Get(static_cast<flatbuffers::uoffset_t>(en)), s.symbols, attrs));
      ex_attrs = &attrs;
    }
    conv.inputs = {inputs, count};
    conv.attrs = ex_attrs->values;
    conv.prepared = ex.prepared;
    conv.input_blocked = f.info->values[ex.inputs[0]].blocked;
    conv.act = ex.fused_act;
    return Status::Ok();
  }
};

Session::Impl::Impl(const Program& program_, SessionOptions o)
    : program(program_), p(program_.bundle().program()), prog(ProgramInternals::of(program_)), pool(o.threads < 1 ? 1 : o.threads),
      options(o) {
  memory_limit = o.max_memory_bytes > 0 ? o.max_memory_bytes : default_max_memory_bytes();
  plans.resize(count(p.graphs()));
  arenas.resize(count(p.graphs()));
  for (std::uint32_t s = 0; s < count(p.symbols()); ++s) {
    if (p.symbols()->Get(s)->kind() == fb::SymbolKind::Backed) backed_symbols.push_back(s);
  }
}

std::string Session::Impl::graph_name(std::uint32_t g) const {
  const auto* gr = p.graphs()->Get(g);
  return gr->name() && gr->name()->size() ? gr->name()->str() : "graph " + std::to_string(g);
}

Session::Session(const Program& program, SessionOptions options) : impl_(std::make_unique<Impl>(program, options)) {
  impl_->reset_state();
}
Session::~Session() = default;
const RunStats& Session::last_stats() const { return impl_->stats; }
Result<RunResult> Session::run(std::span<const HostValue> inputs) {
  RunResult result;
  KILN_RETURN_IF_ERROR(impl_->run(inputs, result));
  return result;
}
Status Session::run(std::span<const HostValue> inputs, RunResult& result) { return impl_->run(inputs, result); }

std::uint64_t default_max_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return std::uint64_t{8} << 30;
  return static_cast<std::uint64_t>(pages) / 4 * 3 * static_cast<std::uint64_t>(page);
}

// ---------------------------------------------------------------------------------------
// Memory and the node budget

namespace {

// "512 B", "4.0 KiB", "12.0 GiB": binary units (as --max-memory's suffixes), one decimal.
std::string human_bytes(std::uint64_t bytes) {
  if (bytes < 1024) return std::to_string(bytes) + " B";
  static const char* const kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = static_cast<double>(bytes) / 1024.0;
  std::size_t u = 0;
  while (v >= 1024.0 && u + 1 < std::size(kUnits)) v /= 1024.0, ++u;
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f %s", v, kUnits[u]);
  return buf;
}

}  // namespace

std::uint64_t Session::Impl::bytes_in_use() const {
  std::uint64_t total = heap_live + outputs_live;
  for (const Arena& a : arenas) total += a.capacity;
  return total;
}

Status Session::Impl::reserve(std::uint64_t bytes, std::uint64_t freed, const Frame& f, std::int32_t value, bool name_symbols) const {
  const std::uint64_t held = bytes_in_use() - std::min(freed, bytes_in_use());
  if (bytes <= memory_limit && held <= memory_limit - bytes) return Status::Ok();
  // Who asks: the inputs (or symbols) the value's shape mentions, and its producer.
  std::string who, node;
  if (value >= 0) {
    const ValueInfo& vi = f.info->values[static_cast<std::size_t>(value)];
    for (std::uint32_t sym : vi.symbols) {
      if (!name_symbols || !bound[sym]) continue;
      const std::string name = !bound_from[sym].empty() ? "input " + bound_from[sym] : "symbol " + p.symbols()->Get(sym)->name()->str();
      who += (who.empty() ? "" : ", ") + name + " = " + std::to_string(symbols[sym]);
    }
    if (vi.producer >= 0) {
      const NodeInfo& ni = f.info->nodes[static_cast<std::size_t>(vi.producer)];
      node = " for node '" + std::string(op_info(ni.op).name) + "'" + location(p, ni.debug);
    }
  }
  if (who.empty()) who = graph_name(f.graph_id);
  const std::string needs = bytes == UINT64_MAX ? "more than " + human_bytes(UINT64_MAX) : human_bytes(bytes);
  const std::string in_use = held > 0 ? " (" + human_bytes(held) + " already in use)" : "";
  return bad_input(who + " needs " + needs + node + in_use + ", over the memory limit " + human_bytes(memory_limit) + " (--max-memory)");
}

Status Session::Impl::count_nodes(const Frame& f, std::uint32_t n, std::uint32_t nodes) {
  nodes_executed += nodes;
  if (nodes_executed <= options.max_nodes_executed) return Status::Ok();
  std::string where;
  if (!calls.empty()) {
    const NodeInfo& call = *calls.back();
    where = " inside " + std::string(op_info(call.op).name) + location(p, call.debug);
  } else {
    where = " in " + graph_name(f.graph_id) + ", node " + std::to_string(n);
  }
  return bad_input("the run executed more than " + std::to_string(options.max_nodes_executed) +
                   " nodes (its budget, SessionOptions::max_nodes_executed)" + where);
}

Result<std::uint8_t*> Session::Impl::arena_for(const Frame& f, std::uint64_t bytes) {
  Arena& a = arenas[f.graph_id];
  if (a.capacity < bytes || a.base == nullptr) {
    KILN_RETURN_IF_ERROR(reserve(bytes, a.capacity, f, f.plan->largest));
    a.storage.reset();
    a.capacity = 0;
    a.base = nullptr;
    if (bytes > SIZE_MAX - kArenaAlignment) return out_of_memory(bytes, "the arena of " + graph_name(f.graph_id));
    a.storage.reset(new (std::nothrow) std::uint8_t[bytes + kArenaAlignment]);
    if (a.storage == nullptr) return out_of_memory(bytes, "the arena of " + graph_name(f.graph_id));
    a.capacity = bytes;
    const auto addr = reinterpret_cast<std::uintptr_t>(a.storage.get());
    a.base = a.storage.get() + ((kArenaAlignment - addr % kArenaAlignment) % kArenaAlignment);
  }
  return a.base;
}

Result<void*> Session::Impl::heap_alloc(Frame& f, std::uint32_t v, std::size_t bytes) {
  KILN_RETURN_IF_ERROR(reserve(bytes, f.heap_size[v], f, static_cast<std::int32_t>(v)));
  heap_live -= f.heap_size[v];  // a value re-sized (a loop carry) frees its old bytes
  f.heap[v].reset();
  f.heap_size[v] = 0;
  f.heap[v].reset(new (std::nothrow) std::uint8_t[std::max<std::size_t>(bytes, 1)]);
  if (f.heap[v] == nullptr) return out_of_memory(bytes, "value " + std::to_string(v) + " of " + graph_name(f.graph_id));
  f.heap_size[v] = bytes;
  heap_live += bytes;
  heap_peak = std::max(heap_peak, heap_live);
  return static_cast<void*>(f.heap[v].get());
}

// ---------------------------------------------------------------------------------------
// Execution

Status Session::Impl::run_node(Frame& f, std::uint32_t n) {
  const NodeInfo& ni = f.info->nodes[n];
  if (ni.hop) return run_control_flow(f, n);
  // A folded slice computes nothing (and has no bytes): its reader reads the window (slice_window).
  if (ni.folded && !options.observer) return Status::Ok();
  TensorView in[16];
  std::vector<TensorView> in_big;
  std::span<TensorView> ins;
  if (ni.inputs.size() <= 16) {
    for (std::size_t k = 0; k < ni.inputs.size(); ++k) in[k] = f.views[ni.inputs[k]];
    ins = {in, ni.inputs.size()};
  } else {
    for (std::uint32_t v : ni.inputs) in_big.push_back(f.views[v]);
    ins = in_big;
  }
  TensorView out_small[4];
  std::vector<TensorView> out_big;
  if (ni.outputs.size() > 4) out_big.resize(ni.outputs.size());
  const std::span<TensorView> out = ni.outputs.size() > 4 ? std::span<TensorView>(out_big) : std::span<TensorView>(out_small, ni.outputs.size());
  for (std::size_t k = 0; k < ni.outputs.size(); ++k) {
    const std::uint32_t v = ni.outputs[k];
    const ValueInfo& vi = f.info->values[v];
    if (vi.kind == fb::ValueKind::SymInt) {  // item(): a 0-d tensor of the input's dtype
      const DType dt = ins.empty() ? DType::kI64 : ins[0].dtype;
      KILN_ASSIGN_OR_RETURN(void* data, heap_alloc(f, v, 8));
      f.views[v] = make_view(dt, {}, data);
      out[k] = f.views[v];
      continue;
    }
    if (ni.kernel_allocates[k]) {
      out[k] = TensorView{};
      out[k].dtype = vi.dtype;
      continue;
    }
    if (!f.plan->dynamic[v] && f.views[v].data == nullptr) {  // planned for a device segment that fell back, or a folded slice an observer sees
      KILN_ASSIGN_OR_RETURN(f.views[v].data, heap_alloc(f, v, f.views[v].nbytes()));
    }
    if (f.plan->dynamic[v]) {
      std::array<std::int64_t, kMaxRank> shape{};
      const std::uint32_t rank = count(vi.shape);
      for (std::uint32_t d = 0; d < rank; ++d) {
        auto size = eval(vi.shape->Get(d));
        if (!size.ok()) return size.status();
        if (*size < 0) return bad_input("node " + std::to_string(n) + ": negative output size " + std::to_string(*size) + location(p, ni.debug));
        shape[d] = *size;
      }
      f.views[v] = make_view(vi.dtype, {shape.data(), rank}, nullptr);
      const std::optional<std::uint64_t> bytes = checked_nbytes(vi.dtype, f.views[v].dims());
      if (!bytes || *bytes > SIZE_MAX) {  // cannot be had, whatever the limit
        KILN_RETURN_IF_ERROR(reserve(UINT64_MAX, 0, f, static_cast<std::int32_t>(v)));
        return bad_input("node " + std::to_string(n) + ": output " + std::to_string(k) + " does not fit in memory" + location(p, ni.debug));
      }
      KILN_ASSIGN_OR_RETURN(f.views[v].data, heap_alloc(f, v, static_cast<std::size_t>(*bytes)));
    }
    out[k] = f.views[v];
  }
  // A reshape sharing its input's bytes has nothing to do.
  if (ni.alias_ok && out.size() == 1 && ins.size() > ni.alias_input && out[0].data == ins[ni.alias_input].data && out[0].data != nullptr) {
    return Status::Ok();
  }
  if (ni.fused_away) {  // the node before did this one's work; unplanned bytes are copied
    std::memcpy(out[0].data, ins[ni.alias_input].data, ins[ni.alias_input].nbytes());
    return Status::Ok();
  }
  OperandWindow window;
  const bool windowed = ni.b_slice >= 0 && !options.observer;
  if (windowed) KILN_RETURN_IF_ERROR(slice_window(f, n, ins[1], window));
  NodeAttrs dyn_attrs;
  const NodeAttrs* attrs = &f.plan->attrs[n];
  if (!f.plan->attrs_ready[n]) {
    KILN_RETURN_IF_ERROR(read_attrs(p, *f.graph->nodes()->Get(n), symbols, dyn_attrs));
    attrs = &dyn_attrs;
  }
  if (!f.plan->node_state.empty() && f.plan->node_state[n] >= 0) KILN_RETURN_IF_ERROR(save_state_writes(f, n, ins, attrs->values));
  auto alloc = [&](int index, std::size_t bytes) { return heap_alloc(f, ni.outputs[static_cast<std::size_t>(index)], bytes); };
  KernelCtx ctx(out, pool, alloc, ni, windowed ? &window : nullptr);
  if (ni.residual >= 0) ctx.set_residual(&f.views[static_cast<std::size_t>(ni.residual)], f.info->values[static_cast<std::size_t>(ni.residual)].blocked);
  if (ni.scale_mul >= 0 && !options.observer) {
    // The folded mul(x, s) computed nothing: read x in place of its output, and s as the scale.
    const NodeInfo& mul = f.info->nodes[static_cast<std::size_t>(ni.scale_mul)];
    const std::uint32_t xv = mul.inputs[1u - ni.scale_operand], sv = mul.inputs[ni.scale_operand];
    ins[0] = f.views[xv];
    ctx.set_input_scale(&f.views[sv], f.info->values[sv].blocked);
  }
  // The folded 1x1 expansion (NodeInfo::expansion) computed nothing: the kernel makes its
  // output from the expansion's inputs (built only for such a node: every node passes here).
  std::optional<FoldedExpansion> folded;
  if (ni.expansion >= 0 && !options.observer) {
    KILN_RETURN_IF_ERROR(folded.emplace().bind(*this, f, static_cast<std::size_t>(ni.expansion)));
    ctx.set_folded_conv(&folded->conv);
  }
  // KILN_KERNEL_WORKSPACE=0: kernels use their own buffers only (to measure the difference).
  static const bool workspace_enabled = [] {
    const char* v = std::getenv("KILN_KERNEL_WORKSPACE");
    return v == nullptr || std::string_view(v) != "0";
  }();
  if (workspace_enabled && !f.plan->workspace.empty() && f.plan->workspace[n].second > 0 && f.arena != nullptr) {
    ctx.set_workspace({reinterpret_cast<std::byte*>(f.arena + f.plan->workspace[n].first), f.plan->workspace[n].second});
  }
  const auto t0 = options.profile ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
  const Status st = ni.gather_lerp >= 0 && !options.observer ? run_gather_lerp(f, ni, ctx, out[0]) : ni.kernel(ctx, ins, out, attrs->values);
  if (options.profile) {
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    // With an observer the nodes folded into this one ran on their own: the label leaves them out.
    stats.ops.push_back({op_label(ni, /*folds=*/!options.observer),
                         debug_location(p, ni.debug).text(), ms});
  }
  if (!st.ok()) {
    return Status(st.code(), st.message() + " [" + graph_name(f.graph_id) + ", node " + std::to_string(n) + "]" + location(p, ni.debug));
  }
  for (std::size_t k = 0; k < ni.outputs.size(); ++k) {
    if (ni.kernel_allocates[k]) {
      if (out[k].data == nullptr) return Status(StatusCode::kInternal, "node " + std::to_string(n) + ": kernel did not produce an output");
      f.views[ni.outputs[k]] = out[k];
    }
  }
  return Status::Ok();
}

// The fused bilinear interpolation of node `ni` (NodeInfo::gather_lerp): its folded gathers'
// and lerps' operands, read where they lie.
Status Session::Impl::run_gather_lerp(Frame& f, const NodeInfo& ni, KernelContext& ctx, TensorView& out) {
  const GatherLerp& gl = f.info->gather_lerps[static_cast<std::size_t>(ni.gather_lerp)];
  std::array<std::vector<TensorView>, 4> index_views;
  std::array<std::span<const TensorView>, 4> gathers;
  for (std::size_t j = 0; j < 4; ++j) {
    for (std::uint32_t v : gl.indices[j]) index_views[j].push_back(f.views[v]);
    gathers[j] = index_views[j];
  }
  const std::array<TensorView, 3> weights{f.views[gl.weights[0]], f.views[gl.weights[1]], f.views[gl.weights[2]]};
  return cpu::kernels::gather_lerp2(ctx, f.views[gl.x], gl.dims, gathers, weights, out);
}

// Node n's input 1 as the window the folded slice b_slice cuts from its input, without a
// copy: the same start/end clamping as the slice kernel, checked against the shape planned
// for the slice's output.
Status Session::Impl::slice_window(const Frame& f, std::uint32_t n, TensorView& b, OperandWindow& window) {
  const NodeInfo& ni = f.info->nodes[n];
  const auto s = static_cast<std::uint32_t>(ni.b_slice);
  NodeAttrs dyn_attrs;
  const NodeAttrs* attrs = &f.plan->attrs[s];
  if (!f.plan->attrs_ready[s]) {
    KILN_RETURN_IF_ERROR(read_attrs(p, *f.graph->nodes()->Get(s), symbols, dyn_attrs));
    attrs = &dyn_attrs;
  }
  const TensorView& x = f.views[f.info->nodes[s].inputs[0]];
  const std::span<const AttrValue> a = attrs->values;
  if (a.size() < 4 || x.rank < 2 || x.dtype != DType::kF32 || x.data == nullptr) {
    return Status(StatusCode::kInternal, "node " + std::to_string(s) + ": a folded slice without its input or attributes");
  }
  std::int64_t dim = a[0].i, start = a[1].i, end = a[2].i;
  if (dim < 0) dim += x.rank;
  const std::int64_t size = x.shape[static_cast<std::size_t>(dim)];
  if (start < 0) start += size;
  if (end < 0) end += size;
  start = std::clamp<std::int64_t>(start, 0, size);
  end = std::clamp<std::int64_t>(end, 0, size);
  TensorView w = x;
  w.shape[static_cast<std::size_t>(dim)] = std::max<std::int64_t>(end - start, 0);
  if (w.rank != b.rank || !std::equal(w.shape.begin(), w.shape.begin() + w.rank, b.shape.begin())) {
    return Status(StatusCode::kInternal, "node " + std::to_string(s) + ": a folded slice's window does not match its planned shape" + location(p, ni.debug));
  }
  const std::int64_t cols = x.shape[static_cast<std::size_t>(x.rank - 1)];
  const std::int64_t row = dim == x.rank - 1 ? 1 : cols;
  w.data = static_cast<float*>(x.data) + start * row;
  window.ld = cols;
  window.batch_stride = x.shape[static_cast<std::size_t>(x.rank - 2)] * cols;
  b = w;
  return Status::Ok();
}

Status Session::Impl::save_state_writes(const Frame& f, std::uint32_t n, std::span<const TensorView> ins, std::span<const AttrValue> attrs) {
  const NodeInfo& ni = f.info->nodes[n];
  state_writes.clear();
  const Status st = cpu::in_place_writes(ni.op, ins, attrs, state_writes);
  if (!st.ok()) return Status(st.code(), st.message() + " [" + graph_name(f.graph_id) + ", node " + std::to_string(n) + "]" + location(p, ni.debug));
  const TensorView& x = ins[0];
  const std::int64_t numel = x.numel();
  const std::size_t elem = dtype_size(x.dtype);
  std::int64_t written = 0;
  for (const cpu::ElementRange& r : state_writes) {
    if (r.offset < 0 || r.count < 0 || r.offset > numel || r.count > numel - r.offset) {
      return Status(StatusCode::kInternal, "node " + std::to_string(n) + ": an in-place write outside its state tensor");
    }
    written += r.count;
    if (written > numel) break;
  }
  if (written > numel) state_writes.assign(1, cpu::ElementRange{0, numel});  // save it all once
  auto* base = static_cast<std::uint8_t*>(x.data);
  for (const cpu::ElementRange& r : state_writes) {
    const std::size_t bytes = static_cast<std::size_t>(r.count) * elem;
    std::uint8_t* at = base + static_cast<std::size_t>(r.offset) * elem;
    undo.push_back({at, undo_bytes.size(), bytes});
    undo_bytes.insert(undo_bytes.end(), at, at + bytes);
    stats.state_bytes_written += bytes;
  }
  return Status::Ok();
}

Status Session::Impl::undo_state_writes() {
  for (auto it = undo.rbegin(); it != undo.rend(); ++it) std::memcpy(it->at, undo_bytes.data() + it->saved, it->bytes);
  undo.clear();
  undo_bytes.clear();
  Status result = Status::Ok();
  for (auto it = device_writes.rbegin(); it != device_writes.rend(); ++it) {
    if (Status st = (*it)->undo_writes(); !st.ok() && result.ok()) result = st;
  }
  device_writes.clear();
  return result;
}

// Describes segment s with its concrete shapes and has the accelerator prepare it, once per
// plan; a segment the device refuses (kUnsupported: limits) runs on the CPU from then on.
Status Session::Impl::prepare_segment(Frame& f, std::uint32_t s) {
  const Segment& seg = f.info->segments[s];
  std::unique_ptr<backend::PreparedSegment>& prepared = f.plan->prepared[s];
  const std::vector<std::uint32_t>& in_values = f.plan->segment_inputs[s];
  KILN_ASSIGN_OR_RETURN(const std::vector<std::uint32_t>* out_list, segment_outputs(f, s));
  const std::vector<std::uint32_t>& out_values = *out_list;
  {
    backend::SegmentDesc desc;
    std::vector<std::int32_t> tensor_of(f.info->values.size(), -1);
    auto add_tensor = [&](std::uint32_t v) -> std::uint32_t {
      if (tensor_of[v] >= 0) return static_cast<std::uint32_t>(tensor_of[v]);
      const ValueInfo& vi = f.info->values[v];
      backend::SegmentTensor t;
      t.dtype = f.plan->views[v].dtype;
      t.shape.assign(f.plan->views[v].shape.begin(), f.plan->views[v].shape.begin() + f.plan->views[v].rank);
      if (vi.kind == fb::ValueKind::Constant) {
        t.role = backend::SegmentTensor::Role::kConstant;
        t.constant = vi.constant;
      } else if (!f.plan->device_state_of.empty() && f.plan->device_state_of[v] >= 0) {
        t.role = backend::SegmentTensor::Role::kDevice;
        t.io_index = static_cast<std::uint32_t>(f.plan->device_state_of[v]);
      } else if (auto it = std::find(in_values.begin(), in_values.end(), v); it != in_values.end()) {
        t.role = backend::SegmentTensor::Role::kInput;
        t.io_index = static_cast<std::uint32_t>(it - in_values.begin());
      } else if (auto jt = std::find(out_values.begin(), out_values.end(), v); jt != out_values.end()) {
        t.role = backend::SegmentTensor::Role::kOutput;
        t.io_index = static_cast<std::uint32_t>(jt - out_values.begin());
      }
      tensor_of[v] = static_cast<std::int32_t>(desc.tensors.size());
      desc.tensors.push_back(std::move(t));
      return static_cast<std::uint32_t>(tensor_of[v]);
    };
    for (std::uint32_t n = seg.first; n <= seg.last; ++n) {
      const NodeInfo& ni = f.info->nodes[n];
      backend::SegmentNode sn;
      sn.op = ni.op;
      for (std::uint32_t v : ni.inputs) sn.inputs.push_back(f.info->values[v].kind == fb::ValueKind::None ? backend::kAbsentTensor : add_tensor(v));
      for (std::uint32_t v : ni.outputs) sn.outputs.push_back(add_tensor(v));
      sn.attrs = f.plan->attrs[n].values;  // spans into the plan, which outlives the prepared segment
      sn.where = graph_name(f.graph_id) + ", node " + std::to_string(n) + location(p, ni.debug);
      desc.nodes.push_back(std::move(sn));
    }
    desc.num_inputs = static_cast<std::uint32_t>(in_values.size());
    desc.num_outputs = static_cast<std::uint32_t>(out_values.size());
    if (!f.plan->device_state_of.empty()) desc.device_buffers = device_buffers;
    ConstantsOf constants(program.bundle());
    auto made = prog.accelerator->prepare(desc, constants);
    if (!made.ok() && made.status().code() == StatusCode::kUnsupported) {
      // The device cannot take these shapes (limits): these nodes run on the CPU from now on.
      f.plan->segment_on_cpu[s] = 1;
      return Status::Ok();
    }
    if (!made.ok()) return made.status();
    prepared = std::move(made).value();
  }
  return Status::Ok();
}

Status Session::Impl::run_segment(Frame& f, std::uint32_t s) {
  const Segment& seg = f.info->segments[s];
  std::unique_ptr<backend::PreparedSegment>& prepared = f.plan->prepared[s];
  if (!prepared) {
    KILN_RETURN_IF_ERROR(prepare_segment(f, s));
    if (f.plan->segment_on_cpu[s]) return Status::Ok();
  }
  const std::vector<std::uint32_t>& in_values = f.plan->segment_inputs[s];
  KILN_ASSIGN_OR_RETURN(const std::vector<std::uint32_t>* out_list, segment_outputs(f, s));
  const std::vector<std::uint32_t>& out_values = *out_list;
  const std::uint64_t state_bytes = f.plan->segment_state_bytes.empty() ? 0 : f.plan->segment_state_bytes[s];
  if (state_bytes > 0) {  // before it runs: a failed run undoes what it wrote, even partly
    device_writes.push_back(prepared.get());
    stats.state_bytes_written += state_bytes;
  }
  std::vector<TensorView> ins, outs;
  for (std::uint32_t v : in_values) ins.push_back(f.views[v]);
  for (std::uint32_t v : out_values) outs.push_back(f.views[v]);
  const auto t0 = options.profile ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
  const Status st = prepared->run({ins, outs});
  if (options.profile) {
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    stats.ops.push_back({std::string(prog.accelerator->name()) + " segment (" + std::to_string(seg.last - seg.first + 1) + " nodes)",
                         "nodes " + std::to_string(seg.first) + ".." + std::to_string(seg.last), ms});
  }
  if (!st.ok()) return Status(st.code(), st.message() + " [" + graph_name(f.graph_id) + ", nodes " + std::to_string(seg.first) + ".." + std::to_string(seg.last) + "]");
  stats.bytes_uploaded += prepared->bytes_uploaded();
  stats.bytes_downloaded += prepared->bytes_downloaded();
  return Status::Ok();
}

namespace {

void ints_of(std::span<const CallArg> args, std::vector<std::int64_t>& out) {
  out.clear();
  for (const CallArg& a : args) {
    if (a.is_int) out.push_back(a.i);
  }
}

bool same_ints(std::span<const CallArg> args, const std::vector<std::int64_t>& ints) {
  std::size_t k = 0;
  for (const CallArg& a : args) {
    if (a.is_int && (k >= ints.size() || ints[k++] != a.i)) return false;
  }
  return k == ints.size();
}

}  // namespace

// An entry call whose input shapes were planned with other int inputs (a decoder's next
// position): binds and checks the inputs as a new signature would, then updates the plan
// for the new symbol values (update_plan) when the same graph runs with the same symbols
// bound, else plans again. A plan made again because the sizes grew past the arena's room
// gets headroom: room for the int-bound symbols that grew to grow by a quarter more (at
// least 64), up to their ranges, so that the next calls (the next positions) reuse it.
Result<GraphPlan*> Session::Impl::replan_entry(std::span<const CallArg> args, std::unique_ptr<GraphPlan>& slot) {
  KILN_RETURN_IF_ERROR(bind_entry(args));
  std::string label;
  KILN_ASSIGN_OR_RETURN(std::uint32_t g, choose_variant(label));
  Frame probe;
  probe.info = &prog.graphs[g];
  probe.graph = p.graphs()->Get(g);
  KILN_RETURN_IF_ERROR(check_asserts(probe, 0));
  GraphPlan& old = *slot;
  const bool same_graph = g == old.graph && bound == old.bound;
  std::vector<std::int64_t> headroom;
  if (same_graph) {
    const std::vector<std::int64_t> before = old.symbols;
    if (update_plan(program, old, symbols)) {
      ints_of(args, old.int_args);
      stats.plan_reused = true;
      return &old;
    }
    headroom = symbols;
    for (std::size_t s = 0; s < symbols.size(); ++s) {
      if (!bound[s] || symbols[s] <= before[s]) continue;
      const std::int64_t hi = p.symbols()->Get(static_cast<std::uint32_t>(s))->max();
      const std::int64_t room = std::max<std::int64_t>(64, symbols[s] / 4);
      headroom[s] = symbols[s] > hi - room ? hi : symbols[s] + room;
    }
  }
  slot.reset();  // update_plan may have left it half updated
  KILN_ASSIGN_OR_RETURN(slot, plan_for_state(g, true, headroom));
  if (!headroom.empty()) {  // the room must not be what exceeds the memory limit
    const std::uint64_t held = bytes_in_use() - std::min(bytes_in_use(), arenas[g].capacity);
    if (slot->arena_bytes > memory_limit || held > memory_limit - slot->arena_bytes) {
      KILN_ASSIGN_OR_RETURN(slot, plan_for_state(g, true, {}));
    }
  }
  slot->variant = label;
  ints_of(args, slot->int_args);
  return slot.get();
}

Status Session::Impl::run_graph(std::uint32_t called, std::span<const CallArg> args, bool entry, OutputSink sink, std::string* variant) {
  make_key(args, scratch_key, !entry);
  if (!entry) {  // a subgraph may use the entry's symbols directly
    for (std::uint32_t s : backed_symbols) scratch_key.words.push_back(symbols[s]);
  }
  auto& cache = plans[called];
  GraphPlan* plan = nullptr;
  auto it = cache.find(scratch_key);
  if (it != cache.end() && entry && !same_ints(args, it->second->int_args)) {
    Result<GraphPlan*> replanned = replan_entry(args, it->second);
    if (!replanned.ok()) {
      if (it->second == nullptr) cache.erase(it);  // planning again failed after the update did
      return replanned.status();
    }
    plan = *replanned;
  } else if (it != cache.end()) {
    plan = it->second.get();
    symbols = plan->symbols;
    bound = plan->bound;
    if (entry) stats.plan_cached = true;
  } else {
    SignatureKey key = scratch_key;
    std::uint32_t g = called;
    std::string label;
    if (entry) {
      KILN_RETURN_IF_ERROR(bind_entry(args));
      KILN_ASSIGN_OR_RETURN(g, choose_variant(label));
    } else {
      KILN_RETURN_IF_ERROR(bind_subgraph(called, args));
    }
    Frame probe;
    probe.info = &prog.graphs[g];
    probe.graph = p.graphs()->Get(g);
    KILN_RETURN_IF_ERROR(check_asserts(probe, 0));
    KILN_ASSIGN_OR_RETURN(auto made, plan_for_state(g, entry, {}));
    made->variant = label;
    if (entry) ints_of(args, made->int_args);
    if (cache.size() >= 256) cache.clear();  // a bound on memory for callers with many shapes
    plan = cache.emplace(std::move(key), std::move(made)).first->second.get();
  }
  if (variant) *variant = plan->variant;
  if (entry) {
    entry_plan = plan;
    if (!plan->state_update.empty()) KILN_RETURN_IF_ERROR(sync_states(*plan));
  }
  Frame f;
  f.plan = plan;
  f.graph_id = plan->graph;
  f.info = &prog.graphs[plan->graph];
  f.graph = p.graphs()->Get(plan->graph);
  f.views = plan->views;
  f.heap.resize(f.views.size());
  f.heap_size.assign(f.views.size(), 0);
  HeapRelease release{*this, f};
  KILN_ASSIGN_OR_RETURN(std::uint8_t* base, arena_for(f, plan->arena_bytes));
  f.arena = base;
  arena_used[plan->graph] = std::max(arena_used[plan->graph], plan->arena_bytes);
  if (entry) {
    stats.arena_bytes = plan->arena_bytes;
    stats.unplanned_bytes = plan->naive_bytes;
  }
  for (std::uint32_t k = 0; k < count(f.graph->inputs()); ++k) {
    if (!args[k].is_int) f.views[f.graph->inputs()->Get(k)] = args[k].t;
  }
  for (std::size_t v = 0; v < f.views.size(); ++v) {
    if (plan->offset[v] >= 0) f.views[v].data = base + plan->offset[v];
  }
  for (std::size_t v = 0; v < f.views.size(); ++v) {
    if (plan->alias[v] >= 0) f.views[v].data = f.views[static_cast<std::size_t>(plan->alias[v])].data;
  }
  const std::uint32_t nn = static_cast<std::uint32_t>(f.info->nodes.size());
  for (std::uint32_t n = 0; n < nn; ++n) {
    const NodeInfo& ni = f.info->nodes[n];
    if (ni.segment >= 0 && !plan->segment_on_cpu[static_cast<std::size_t>(ni.segment)]) {
      const Segment& seg = f.info->segments[static_cast<std::size_t>(ni.segment)];
      KILN_RETURN_IF_ERROR(count_nodes(f, n, seg.last - seg.first + 1));
      KILN_RETURN_IF_ERROR(run_segment(f, static_cast<std::uint32_t>(ni.segment)));
      if (!plan->segment_on_cpu[static_cast<std::size_t>(ni.segment)]) {
        for (std::uint32_t m = seg.first; m <= seg.last; ++m) KILN_RETURN_IF_ERROR(check_asserts(f, m + 1));
        if (options.observer) observe_nodes(f, seg.first, seg.last);
        n = seg.last;
        continue;
      }
      // prepare() refused the segment: fall through to the CPU kernels.
    }
    KILN_RETURN_IF_ERROR(count_nodes(f, n, 1));
    KILN_RETURN_IF_ERROR(run_node(f, n));
    if (!f.info->bindings_of[n].empty() || ni.hop || std::find(ni.kernel_allocates.begin(), ni.kernel_allocates.end(), true) != ni.kernel_allocates.end()) {
      KILN_RETURN_IF_ERROR(bind_node(f, n));
    }
    if (!f.info->asserts_after[n + 1].empty()) KILN_RETURN_IF_ERROR(check_asserts(f, n + 1));
    if (options.observer) observe_nodes(f, n, n);
  }
  const std::uint32_t state_out0 = count(p.signature()->outputs());
  for (std::uint32_t k = 0; k < count(f.graph->outputs()); ++k) {
    const std::uint32_t v = f.graph->outputs()->Get(k);
    const ValueInfo& vi = f.info->values[v];
    if (entry && k >= state_out0 && k - state_out0 < plan->state_update.size() && plan->state_update[k - state_out0] == StateUpdate::kDevice) {
      continue;  // stays in the device buffer
    }
    CallArg out;
    if (vi.kind == fb::ValueKind::SymInt || vi.kind == fb::ValueKind::SymBool) {
      KILN_ASSIGN_OR_RETURN(out.i, eval(vi.expr));
      out.is_int = true;
    } else {
      out.t = f.views[v];
      if (entry) {  // the copy handed to the caller
        KILN_RETURN_IF_ERROR(reserve(out.t.nbytes(), 0, f, static_cast<std::int32_t>(v)));
        outputs_live += out.t.nbytes();
      }
    }
    KILN_RETURN_IF_ERROR(sink(k, out));
  }
  return Status::Ok();
}

Status Session::Impl::run(std::span<const HostValue> inputs, RunResult& result) {
  stats = RunStats{};
  heap_live = heap_peak = 0;
  nodes_executed = 0;
  outputs_live = 0;
  calls.clear();
  device_writes.clear();
  entry_plan = nullptr;
  arena_used.assign(arenas.size(), 0);
  const auto* sig = p.signature()->inputs();
  if (inputs.size() != count(sig)) {
    return bad_input("expected " + std::to_string(count(sig)) + " inputs, got " + std::to_string(inputs.size()));
  }
  // Checks that do not depend on the shape signature run every time. The state tensors
  // follow the inputs (read only: kernels never write graph inputs).
  std::vector<CallArg> args(inputs.size() + state.size());
  for (std::size_t k = 0; k < state.size(); ++k) {
    args[inputs.size() + k].t = make_view(state[k].dtype, state[k].shape, state[k].data.data());
  }
  for (std::uint32_t i = 0; i < count(sig); ++i) {
    const auto* spec = sig->Get(i);
    const HostValue& in = inputs[i];
    const std::string_view name = spec->name()->string_view();
    if (spec->kind() == fb::InputKind::Int) {
      if (!in.is_int) return bad_input("input " + std::string(name) + ": expected an int, got a tensor");
      args[i].is_int = true;
      args[i].i = in.int_value;
      continue;
    }
    if (in.is_int) return bad_input("input " + std::string(name) + ": expected a tensor, got an int");
    const HostTensor& t = in.tensor;
    if (t.shape.size() > kMaxRank) return bad_input("input " + std::string(name) + ": rank " + std::to_string(t.shape.size()) + " is above the maximum 8");
    std::uint64_t n = dtype_size(t.dtype);
    for (std::int64_t d : t.shape) {
      if (d < 0) return bad_input("input " + std::string(name) + ": negative dim " + std::to_string(d));
      n *= static_cast<std::uint64_t>(d);
    }
    if (n != t.data.size()) return bad_input("input " + std::string(name) + ": " + std::to_string(t.data.size()) + " bytes of data for " + std::to_string(n) + " expected");
    args[i].t = make_view(t.dtype, t.shape, const_cast<std::uint8_t*>(t.data.data()));  // kernels never write inputs
  }
  result.outputs.resize(count(p.signature()->outputs()));
  auto sink = [&](std::size_t k, const CallArg& value) -> Status {
    if (k >= result.outputs.size() && k - result.outputs.size() < state.size()) {
      // A state's new value: into the buffer that becomes current when the run succeeds.
      // (Its dtype and static shape were verified; the byte count is checked again here.)
      const std::size_t j = k - result.outputs.size();
      HostTensor& next = state_next[j];
      if (value.is_int || value.t.nbytes() != state[j].data.size()) {
        return Status(StatusCode::kInvalidBundle, "the new value of state '" + p.signature()->states()->Get(static_cast<std::uint32_t>(j))->name()->str() +
                                                      "' does not have the state's size");
      }
      if (value.t.data == state[j].data.data()) return Status::Ok();  // updated in place, or unchanged
      next.data.resize(state[j].data.size());  // allocated by the first run that copies this state
      std::memcpy(next.data.data(), value.t.data, next.data.size());
      state_copied[j] = 1;
      stats.state_bytes_written += next.data.size();
      return Status::Ok();
    }
    if (k >= result.outputs.size()) return Status(StatusCode::kInvalidBundle, "the entry graph returns more outputs than the signature lists");
    HostValue& out = result.outputs[k];
    out.is_int = value.is_int;
    if (value.is_int) {
      out.int_value = value.i;
      return Status::Ok();
    }
    // assign() reuses the caller's capacity: a result reused across runs allocates nothing.
    out.tensor.dtype = value.t.dtype;
    out.tensor.shape.assign(value.t.shape.begin(), value.t.shape.begin() + value.t.rank);
    const auto* bytes = static_cast<const std::uint8_t*>(value.t.data);
    out.tensor.data.assign(bytes, bytes + value.t.nbytes());
    return Status::Ok();
  };
  state_copied.assign(state.size(), 0);
  if (Status st = run_graph(p.entry_graph(), args, true, sink, &result.variant); !st.ok()) {
    if (Status undone = undo_state_writes(); !undone.ok()) {
      return Status(st.code(), st.message() + "; putting the state back on the device failed too: " + undone.message());
    }
    return st;
  }
  undo.clear();  // commit: the in-place writes stay, the copied values swap in
  undo_bytes.clear();
  device_writes.clear();
  for (std::size_t k = 0; k < state.size(); ++k) {
    if (state_copied[k]) std::swap(state[k].data, state_next[k].data);
    if (entry_plan == nullptr || entry_plan->state_update.size() != state.size()) continue;
    const StateUpdate how = entry_plan->state_update[k];
    if (how == StateUpdate::kDevice && entry_plan->device_state_written[k]) host_stale[k] = 1;
    if (how == StateUpdate::kCopy || how == StateUpdate::kInPlace) device_stale[k] = 1;
  }
  stats.peak_bytes = heap_peak;
  for (std::uint64_t a : arena_used) stats.peak_bytes += a;
  return Status::Ok();
}

// ---- state -------------------------------------------------------------------------------

void Session::Impl::reset_state() {
  const auto* states = p.signature()->states();
  state.resize(count(states));
  state_next.resize(count(states));
  device_state.resize(count(states));  // kept: prepared segments bind them
  device_buffers.resize(count(states));
  host_stale.assign(count(states), 0);
  device_stale.assign(count(states), 1);
  for (std::uint32_t k = 0; k < count(states); ++k) {
    const auto* st = states->Get(k);
    const auto bytes = program.bundle().constant_data(st->initial());  // verified: the state's dtype and shape
    for (HostTensor* t : {&state[k], &state_next[k]}) {
      t->dtype = static_cast<DType>(st->dtype());
      t->shape.clear();  // a 0-d state's shape vector may be absent
      for (std::uint32_t d = 0; d < count(st->shape()); ++d) t->shape.push_back(st->shape()->Get(d));
    }
    state[k].data.assign(bytes.begin(), bytes.end());
  }
}

Status Session::Impl::sync_host(std::size_t k, bool in_run) {
  if (!host_stale[k]) return Status::Ok();
  HostTensor& t = state[k];
  const std::string name = p.signature()->states()->Get(static_cast<std::uint32_t>(k))->name()->str();
  if (Status st = device_state[k]->download(make_view(t.dtype, t.shape, t.data.data())); !st.ok()) {
    return Status(st.code(), "reading state " + name + " from the device: " + st.message());
  }
  host_stale[k] = 0;
  if (in_run) stats.bytes_downloaded += t.data.size();
  return Status::Ok();
}

Status Session::Impl::sync_states(const GraphPlan& plan) {
  for (std::size_t k = 0; k < state.size() && k < plan.state_update.size(); ++k) {
    if (plan.state_update[k] != StateUpdate::kDevice) {
      KILN_RETURN_IF_ERROR(sync_host(k, true));
      continue;
    }
    if (!device_stale[k]) continue;
    HostTensor& t = state[k];
    if (Status st = device_state[k]->upload(make_view(t.dtype, t.shape, t.data.data())); !st.ok()) {
      return Status(st.code(), "writing state " + p.signature()->states()->Get(static_cast<std::uint32_t>(k))->name()->str() +
                                   " to the device: " + st.message());
    }
    device_stale[k] = 0;
    stats.bytes_uploaded += t.data.size();
  }
  return Status::Ok();
}

// plan_graph for the current symbols, keeping a state on the device where the plan can
// (an entry plan with an accelerator and no observer) and planning it on the host when the
// device refuses its buffer or a segment binding it.
Result<std::unique_ptr<GraphPlan>> Session::Impl::plan_for_state(std::uint32_t g, bool entry,
                                                                 std::span<const std::int64_t> headroom) {
  const bool device_state = entry && prog.accelerator && !options.observer && !state.empty();
  KILN_ASSIGN_OR_RETURN(auto made, plan_graph(program, g, symbols, bound, entry, device_state, headroom, pool.num_threads()));
  if (!made->device_state_of.empty()) {
    KILN_ASSIGN_OR_RETURN(const bool kept, prepare_device_states(*made));
    if (!kept) {
      KILN_ASSIGN_OR_RETURN(made, plan_graph(program, g, symbols, bound, entry, false, headroom, pool.num_threads()));
    }
  }
  return made;
}

Result<bool> Session::Impl::prepare_device_states(GraphPlan& plan) {
  for (std::size_t k = 0; k < state.size(); ++k) {
    if (plan.state_update[k] != StateUpdate::kDevice || device_state[k]) continue;
    auto made = prog.accelerator->create_buffer(state[k].dtype, state[k].shape);
    if (!made.ok() && made.status().code() == StatusCode::kUnsupported) return false;
    if (!made.ok()) return made.status();
    device_state[k] = std::move(made).value();
    device_buffers[k] = device_state[k].get();
    device_stale[k] = 1;
  }
  Frame f;
  f.plan = &plan;
  f.graph_id = plan.graph;
  f.info = &prog.graphs[plan.graph];
  f.graph = p.graphs()->Get(plan.graph);
  f.views = plan.views;
  f.heap.resize(f.views.size());
  f.heap_size.assign(f.views.size(), 0);
  HeapRelease release{*this, f};
  for (std::uint32_t s = 0; s < f.info->segments.size(); ++s) {
    const Segment& seg = f.info->segments[s];
    bool binds_state = false;
    for (std::uint32_t n = seg.first; n <= seg.last && !binds_state; ++n) {
      for (std::uint32_t v : f.info->nodes[n].inputs) binds_state = binds_state || plan.device_state_of[v] >= 0;
    }
    if (!binds_state || plan.segment_on_cpu[s]) continue;
    KILN_RETURN_IF_ERROR(prepare_segment(f, s));
    if (plan.segment_on_cpu[s]) return false;
  }
  return true;
}

Result<std::size_t> Session::Impl::state_index(const std::string& name) const {
  const auto* states = p.signature()->states();
  std::string known;
  for (std::uint32_t k = 0; k < count(states); ++k) {
    if (states->Get(k)->name()->str() == name) return static_cast<std::size_t>(k);
    known += (known.empty() ? "" : ", ") + states->Get(k)->name()->str();
  }
  return bad_input("no state tensor named '" + name + "' (state tensors: " + (known.empty() ? "none" : known) + ")");
}

Status Session::Impl::check_state_value(std::size_t k, const HostTensor& value) const {
  const HostTensor& cur = state[k];
  const std::string name = "state " + p.signature()->states()->Get(static_cast<std::uint32_t>(k))->name()->str();
  if (value.dtype != cur.dtype) {
    return bad_input(name + ": dtype " + std::string(dtype_name(value.dtype)) + ", expected " + std::string(dtype_name(cur.dtype)));
  }
  if (value.shape != cur.shape) {
    auto text = [](const std::vector<std::int64_t>& s) {
      std::string out = "[";
      for (std::size_t d = 0; d < s.size(); ++d) out += (d ? ", " : "") + std::to_string(s[d]);
      return out + "]";
    };
    return bad_input(name + ": shape " + text(value.shape) + ", expected " + text(cur.shape));
  }
  if (value.data.size() != cur.data.size()) {
    return bad_input(name + ": " + std::to_string(value.data.size()) + " bytes of data for " + std::to_string(cur.data.size()) + " expected");
  }
  return Status::Ok();
}

std::vector<std::string> Session::state_names() const {
  std::vector<std::string> names;
  const auto* states = impl_->p.signature()->states();
  for (std::uint32_t k = 0; k < count(states); ++k) names.push_back(states->Get(k)->name()->str());
  return names;
}

void Session::reset_state() { impl_->reset_state(); }

Result<HostTensor> Session::read_state(const std::string& name) const {
  KILN_ASSIGN_OR_RETURN(std::size_t k, impl_->state_index(name));
  KILN_RETURN_IF_ERROR(impl_->sync_host(k, false));
  return impl_->state[k];
}

Status Session::set_state(const std::string& name, const HostTensor& value) {
  KILN_ASSIGN_OR_RETURN(std::size_t k, impl_->state_index(name));
  KILN_RETURN_IF_ERROR(impl_->check_state_value(k, value));
  impl_->state[k].data = value.data;
  impl_->host_stale[k] = 0;
  impl_->device_stale[k] = 1;
  return Status::Ok();
}

StateSnapshot Session::snapshot_state() const {
  for (std::size_t k = 0; k < impl_->state.size(); ++k) {
    if (!impl_->sync_host(k, false).ok()) return {};  // the device copy is unreadable: restore_state refuses it
  }
  return {state_names(), impl_->state};
}

Status Session::restore_state(const StateSnapshot& snapshot) {
  const std::vector<std::string> names = state_names();
  if (snapshot.names != names || snapshot.values.size() != names.size()) {
    return bad_input("the snapshot's state tensors (" + std::to_string(snapshot.names.size()) + ") are not this program's (" +
                     std::to_string(names.size()) + ")");
  }
  for (std::size_t k = 0; k < names.size(); ++k) KILN_RETURN_IF_ERROR(impl_->check_state_value(k, snapshot.values[k]));
  for (std::size_t k = 0; k < names.size(); ++k) {
    impl_->state[k].data = snapshot.values[k].data;
    impl_->host_stale[k] = 0;
    impl_->device_stale[k] = 1;
  }
  return Status::Ok();
}

}  // namespace kiln

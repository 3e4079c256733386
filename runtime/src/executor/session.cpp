// Session::run: input checks, symbol binding, specialization dispatch, planning, execution.
//
// Every graph call (the entry graph, and each subgraph a control-flow node calls) goes
// through run_graph. Its inputs form a *signature* (dtypes, ranks, dims, int values): the
// first time a signature is seen, the inputs are bound and checked, the variant chosen,
// every static shape and expression attribute evaluated, and the tensors' memory planned
// into one arena (GraphPlan); later calls with the same signature restore that state and
// go straight to the kernels. Tensors whose sizes depend on unbacked symbols are sized at
// run time, on the heap.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <unordered_map>

#include "backends/cpu/thread_pool.h"
#include "executor/memory_plan.h"
#include "executor/program_impl.h"
#include "kiln/format/kiln_generated.h"
#include "kiln/runtime/expr.h"

namespace kiln {
namespace {

using cpu::TensorView;

template <typename V>
std::uint32_t count(const V* v) { return v == nullptr ? 0 : v->size(); }

Status bad_input(const std::string& m) { return Status(StatusCode::kInvalidInput, m); }

// The expression ids of a shape; a 0-d tensor's shape vector may be absent.
std::span<const std::uint32_t> dims_of(const flatbuffers::Vector<std::uint32_t>* shape) {
  if (shape == nullptr) return {};
  return {shape->data(), shape->size()};
}

std::size_t nbytes_of(DType dtype, std::span<const std::int64_t> shape) {
  std::size_t n = dtype_size(dtype);
  for (std::int64_t d : shape) n *= static_cast<std::size_t>(d);
  return n;
}

TensorView make_view(DType dtype, std::span<const std::int64_t> shape, void* data) {
  TensorView v;
  v.dtype = dtype;
  v.rank = static_cast<int>(shape.size());
  for (std::size_t i = 0; i < shape.size() && i < cpu::kMaxRank; ++i) v.shape[i] = shape[i];
  v.data = data;
  return v;
}

// Returns the symbol id if expression `id` is a bare symbol.
std::optional<std::uint32_t> bare_symbol(const fb::Program& p, std::uint32_t id) {
  const auto* ref = p.exprs()->Get(id);
  if (ref->length() != 1) return std::nullopt;
  const auto* tok = p.expr_tokens()->Get(ref->start());
  if (tok->op() != fb::ExprOp::Sym) return std::nullopt;
  return static_cast<std::uint32_t>(tok->value());
}

std::string location(const fb::Program& p, std::uint32_t debug) {
  const DebugLocation d = debug_location(p, debug);
  return d.empty() ? "" : " (" + d.text() + ")";
}

// "input x.size(0) = 3 (s0) is outside the range [4, inf] (narrowed at model.cpp:17)": the
// symbol's debug entry is the guard or check that narrowed its range, when there was one.
std::string range_rejection(const fb::Program& p, const fb::Symbol& sym, const std::string& source, std::int64_t value) {
  const std::string user = sym.user_name() && sym.user_name()->size() ? sym.user_name()->str() + ", " : "";
  const std::string hi = sym.max() == INT64_MAX ? "inf" : std::to_string(sym.max());
  const std::string lo = sym.min() == INT64_MIN ? "-inf" : std::to_string(sym.min());
  const DebugLocation where = debug_location(p, sym.debug());
  return "input " + source + " = " + std::to_string(value) + " (" + user + sym.name()->str() + ") is outside the range [" + lo +
         ", " + hi + "]" + (where.empty() ? "" : " (narrowed at " + where.text() + ")");
}

// One input or output of a graph call: an int or a tensor view (not owned).
struct CallArg {
  bool is_int = false;
  std::int64_t i = 0;
  TensorView t;
};

// `value` with its tensor bytes copied into `storage` (a callee's result that must outlive
// the callee's memory: cond/invoke_subgraph outputs, while_loop carries).
CallArg owned_copy(const CallArg& value, std::unique_ptr<std::uint8_t[]>& storage) {
  CallArg out = value;
  if (!value.is_int) {
    const std::size_t bytes = value.t.nbytes();
    storage.reset(new std::uint8_t[std::max<std::size_t>(bytes, 1)]);
    if (bytes) std::memcpy(storage.get(), value.t.data, bytes);
    out.t.data = storage.get();
  }
  return out;
}

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

void make_key(std::span<const CallArg> args, SignatureKey& key) {
  key.words.clear();
  for (const CallArg& a : args) {
    if (a.is_int) {
      key.words.push_back(-1);
      key.words.push_back(a.i);
      continue;
    }
    key.words.push_back(static_cast<std::int64_t>(a.t.dtype) << 8 | a.t.rank);
    for (int d = 0; d < a.t.rank; ++d) key.words.push_back(a.t.shape[d]);
  }
}

// Evaluated attributes of one node, with storage for their spans.
struct NodeAttrs {
  std::vector<cpu::AttrValue> values;
  std::vector<std::vector<std::int64_t>> ints;
  std::vector<std::vector<double>> floats;
};

// Everything one graph call needs for one input signature.
struct GraphPlan {
  std::uint32_t graph = 0;           // the graph that runs (a specialization for the entry)
  std::string variant;               // entry only: "generic" or the specialization's label
  std::vector<std::int64_t> symbols;  // symbol values after binding the inputs
  std::vector<std::uint8_t> bound;
  std::vector<TensorView> views;     // per value: the planned shape; data: constants only
  std::vector<std::int64_t> offset;  // per value: arena offset, -1 if not in the arena
  std::vector<std::int32_t> alias;   // per value: a value outside the arena whose bytes it shares
  std::vector<std::uint8_t> dynamic;  // per value: sized at run time
  std::vector<NodeAttrs> attrs;      // per node: evaluated attributes
  std::vector<std::uint8_t> attrs_ready;
  std::vector<std::uint8_t> segment_on_cpu;  // per accelerator segment: shapes not static
  std::vector<std::unique_ptr<backend::PreparedSegment>> prepared;
  std::vector<std::vector<std::uint32_t>> segment_inputs, segment_outputs;  // per segment: host-side values
  std::uint64_t arena_bytes = 0, naive_bytes = 0;
};

class ConstantsOf final : public backend::ConstantSource {
 public:
  explicit ConstantsOf(const Bundle& b) : bundle_(b) {}
  std::span<const std::uint8_t> constant_data(std::uint32_t index) const override { return bundle_.constant_data(index); }

 private:
  const Bundle& bundle_;
};

// Receives a graph call's outputs while the callee's memory is still alive.
using OutputSink = cpu::FunctionRef<Status(std::size_t index, const CallArg& value)>;

}  // namespace

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
  std::vector<std::uint64_t> arena_used;  // per graph id: the largest arena this run used

  struct Frame {
    GraphPlan* plan = nullptr;
    const GraphInfo* info = nullptr;
    const fb::Graph* graph = nullptr;
    std::uint32_t graph_id = 0;
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

  Impl(const Program& prog_, SessionOptions o)
      : program(prog_), p(prog_.bundle().program()), prog(prog_.impl()), pool(o.threads < 1 ? 1 : o.threads), options(o) {
    plans.resize(count(p.graphs()));
    arenas.resize(count(p.graphs()));
    for (std::uint32_t s = 0; s < count(p.symbols()); ++s) {
      if (p.symbols()->Get(s)->kind() == fb::SymbolKind::Backed) backed_symbols.push_back(s);
    }
  }

  Result<std::int64_t> eval(std::uint32_t expr) const { return evaluate_expr(p, expr, symbols); }
  std::string graph_name(std::uint32_t g) const {
    const auto* gr = p.graphs()->Get(g);
    return gr->name() && gr->name()->size() ? gr->name()->str() : "graph " + std::to_string(g);
  }

  Status bind_entry(std::span<const CallArg> args);
  Status solve_derived(std::span<const std::uint32_t> shape_exprs, const CallArg& arg, const std::string& name);
  Status check_entry_ranges_and_dims(std::span<const CallArg> args);
  Status bind_subgraph(std::uint32_t g, std::span<const CallArg> args);
  Result<std::uint32_t> choose_variant(std::string& label);
  Status check_asserts(const Frame& f, std::size_t slot);
  Result<std::unique_ptr<GraphPlan>> make_plan(std::uint32_t g);
  std::uint8_t* arena_for(std::uint32_t g, std::uint64_t bytes);
  Status run_graph(std::uint32_t called, std::span<const CallArg> args, bool entry, OutputSink sink, std::string* variant);
  Status run_node(Frame& f, std::uint32_t n);
  Status run_control_flow(Frame& f, std::uint32_t n);
  Status run_segment(Frame& f, std::uint32_t s);
  Status bind_node(Frame& f, std::uint32_t n);
  Status build_attrs(std::uint32_t g, std::uint32_t n, NodeAttrs& out);
  Status store_output(Frame& f, std::uint32_t n, std::size_t k, const CallArg& value);
  void* heap_alloc(Frame& f, std::uint32_t v, std::size_t bytes) {
    heap_live -= f.heap_size[v];  // a value re-sized (a loop carry) frees its old bytes
    f.heap[v].reset(new std::uint8_t[std::max<std::size_t>(bytes, 1)]);
    f.heap_size[v] = bytes;
    heap_live += bytes;
    heap_peak = std::max(heap_peak, heap_live);
    return f.heap[v].get();
  }
  Status run(std::span<const HostValue> inputs, RunResult& result);
};

Session::Session(const Program& program, SessionOptions options) : impl_(std::make_unique<Impl>(program, options)) {}
Session::~Session() = default;
const RunStats& Session::last_stats() const { return impl_->stats; }
Result<RunResult> Session::run(std::span<const HostValue> inputs) {
  RunResult result;
  KILN_RETURN_IF_ERROR(impl_->run(inputs, result));
  return result;
}
Status Session::run(std::span<const HostValue> inputs, RunResult& result) { return impl_->run(inputs, result); }

// ---------------------------------------------------------------------------------------
// Binding and checking inputs (once per signature)

Status Session::Impl::bind_entry(std::span<const CallArg> args) {
  const auto* sig = p.signature()->inputs();
  symbols.assign(count(p.symbols()), 0);
  bound.assign(symbols.size(), 0);
  bound_from.assign(symbols.size(), "");
  for (std::uint32_t i = 0; i < count(sig); ++i) {
    const auto* spec = sig->Get(i);
    const CallArg& in = args[i];
    const std::string name = spec->name()->str();
    if (spec->kind() == fb::InputKind::Int) {
      if (spec->dynamism() == fb::Dynamism::Static) {
        if (in.i != spec->static_value()) {
          return bad_input("input " + name + ": must be " + std::to_string(spec->static_value()) + " (a static int at export), got " +
                           std::to_string(in.i));
        }
      } else if (auto s = bare_symbol(p, spec->expr()); s && !bound[*s]) {
        symbols[*s] = in.i;
        bound[*s] = 1;
        bound_from[*s] = name;
      }
      continue;
    }
    const TensorView& t = in.t;
    if (t.dtype != static_cast<DType>(spec->dtype())) {
      return bad_input("input " + name + ": dtype " + std::string(dtype_name(t.dtype)) + ", expected " +
                       std::string(dtype_name(static_cast<DType>(spec->dtype()))));
    }
    if (static_cast<std::uint32_t>(t.rank) != count(spec->shape())) {
      return bad_input("input " + name + ": rank " + std::to_string(t.rank) + ", expected " + std::to_string(count(spec->shape())) + " " +
                       shape_to_string(p, dtype_name(t.dtype), dims_of(spec->shape())));
    }
    for (std::uint32_t d = 0; d < count(spec->shape()); ++d) {
      if (auto s = bare_symbol(p, spec->shape()->Get(d)); s && !bound[*s]) {
        symbols[*s] = t.shape[d];
        bound[*s] = 1;
        bound_from[*s] = name + ".size(" + std::to_string(d) + ")";
      }
    }
  }
  for (std::uint32_t i = 0; i < count(sig); ++i) {
    const auto* spec = sig->Get(i);
    if (spec->kind() != fb::InputKind::Tensor) continue;
    KILN_RETURN_IF_ERROR(solve_derived(dims_of(spec->shape()), args[i], spec->name()->str()));
  }
  return check_entry_ranges_and_dims(args);
}

// Dims like 2*s0 or s0 + 1 whose symbol appears nowhere bare: solve the linear form.
Status Session::Impl::solve_derived(std::span<const std::uint32_t> shape, const CallArg& arg, const std::string& name) {
  for (std::size_t d = 0; d < shape.size(); ++d) {
    const std::uint32_t e = shape[d];
    const auto* ref = p.exprs()->Get(e);
    std::optional<std::uint32_t> unbound;
    for (std::uint32_t t = ref->start(); t < ref->start() + ref->length(); ++t) {
      const auto* tok = p.expr_tokens()->Get(t);
      if (tok->op() == fb::ExprOp::Sym && !bound[static_cast<std::size_t>(tok->value())]) unbound = static_cast<std::uint32_t>(tok->value());
    }
    if (!unbound) continue;
    symbols[*unbound] = 0;
    auto f0 = eval(e);
    symbols[*unbound] = 1;
    auto f1 = eval(e);
    if (!f0.ok() || !f1.ok()) return bad_input("input " + name + ": cannot solve dim " + std::to_string(d));
    const std::int64_t a = *f1 - *f0, b = *f0, size = arg.t.shape[d];
    if (a <= 0 || (size - b) % a != 0) {
      return bad_input("input " + name + ": dim " + std::to_string(d) + " is " + std::to_string(size) + ", which is not of the form " +
                       expr_to_string(p, e));
    }
    symbols[*unbound] = (size - b) / a;
    bound[*unbound] = 1;
    bound_from[*unbound] = name + ".size(" + std::to_string(d) + ")";
  }
  return Status::Ok();
}

Status Session::Impl::check_entry_ranges_and_dims(std::span<const CallArg> args) {
  const auto* sig = p.signature()->inputs();
  // Every declared range, lower bounds included.
  for (std::uint32_t s = 0; s < count(p.symbols()); ++s) {
    const auto* sym = p.symbols()->Get(s);
    if (sym->kind() != fb::SymbolKind::Backed || !bound[s]) continue;
    if (symbols[s] < sym->min() || symbols[s] > sym->max()) return bad_input(range_rejection(p, *sym, bound_from[s], symbols[s]));
  }
  // Every dim equals its (now evaluable) expression: static dims, equalities, derived dims.
  for (std::uint32_t i = 0; i < count(sig); ++i) {
    const auto* spec = sig->Get(i);
    if (spec->kind() != fb::InputKind::Tensor) continue;
    for (std::uint32_t d = 0; d < count(spec->shape()); ++d) {
      auto want = eval(spec->shape()->Get(d));
      if (!want.ok()) return bad_input("input " + spec->name()->str() + ": " + want.status().message());
      const std::int64_t got = args[i].t.shape[d];
      if (got != *want) {
        const std::string e = expr_to_string(p, spec->shape()->Get(d));
        return bad_input("input " + spec->name()->str() + ": dim " + std::to_string(d) + " is " + std::to_string(got) + ", expected " +
                         (e == std::to_string(*want) ? e : e + " = " + std::to_string(*want)));
      }
    }
  }
  return Status::Ok();
}

// A subgraph's inputs bind its own symbols and must match its declared shapes.
Status Session::Impl::bind_subgraph(std::uint32_t g, std::span<const CallArg> args) {
  const auto* graph = p.graphs()->Get(g);
  const std::string where = "subgraph " + graph_name(g);
  for (std::uint32_t k = 0; k < count(graph->inputs()); ++k) {
    const auto* v = graph->values()->Get(graph->inputs()->Get(k));
    const CallArg& a = args[k];
    const bool wants_int = v->kind() == fb::ValueKind::SymInt || v->kind() == fb::ValueKind::SymBool;
    if (wants_int != a.is_int) return Status(StatusCode::kInvalidBundle, where + ": input " + std::to_string(k) + (wants_int ? " is symbolic" : " is a tensor") + ", the call passes " + (a.is_int ? "an int" : "a tensor"));
    if (wants_int) {
      if (auto s = bare_symbol(p, v->expr())) symbols[*s] = a.i, bound[*s] = 1;
      continue;
    }
    if (a.t.dtype != static_cast<DType>(v->dtype()) || static_cast<std::uint32_t>(a.t.rank) != count(v->shape())) {
      return Status(StatusCode::kInvalidBundle, where + ": input " + std::to_string(k) + " is " + std::string(dtype_name(a.t.dtype)) + " of rank " +
                                                    std::to_string(a.t.rank) + ", the subgraph declares " +
                                                    shape_to_string(p, dtype_name(static_cast<DType>(v->dtype())), dims_of(v->shape())));
    }
    for (std::uint32_t d = 0; d < count(v->shape()); ++d) {
      if (auto s = bare_symbol(p, v->shape()->Get(d))) symbols[*s] = a.t.shape[d], bound[*s] = 1;
    }
  }
  for (std::uint32_t k = 0; k < count(graph->inputs()); ++k) {
    const auto* v = graph->values()->Get(graph->inputs()->Get(k));
    if (args[k].is_int) {
      auto want = eval(v->expr());
      if (!want.ok()) return want.status();
      if (*want != args[k].i) return bad_input(where + ": input " + std::to_string(k) + " is " + std::to_string(args[k].i) + ", expected " + expr_to_string(p, v->expr()) + " = " + std::to_string(*want));
      continue;
    }
    KILN_RETURN_IF_ERROR(solve_derived(dims_of(v->shape()), args[k], where + " input " + std::to_string(k)));
    for (std::uint32_t d = 0; d < count(v->shape()); ++d) {
      auto want = eval(v->shape()->Get(d));
      if (!want.ok()) return want.status();
      if (*want != args[k].t.shape[d]) {
        return bad_input(where + ": input " + std::to_string(k) + " dim " + std::to_string(d) + " is " + std::to_string(args[k].t.shape[d]) +
                         ", expected " + expr_to_string(p, v->shape()->Get(d)) + " = " + std::to_string(*want));
      }
    }
  }
  return Status::Ok();
}

Result<std::uint32_t> Session::Impl::choose_variant(std::string& label) {
  for (std::uint32_t i = 0; i < count(p.specializations()); ++i) {
    const auto* s = p.specializations()->Get(i);
    auto v = eval(s->predicate());
    if (!v.ok()) return v.status();
    if (*v != 0) {
      label = s->label()->str();
      return s->graph();
    }
  }
  label = "generic";
  return p.entry_graph();
}

Status Session::Impl::check_asserts(const Frame& f, std::size_t slot) {
  for (std::uint32_t a : f.info->asserts_after[slot]) {
    const auto* ra = f.graph->asserts()->Get(a);
    auto v = eval(ra->expr());
    if (!v.ok()) return v.status();
    if (*v == 0) {
      const std::string msg = ra->message() && ra->message()->size() ? ra->message()->str() : expr_to_string(p, ra->expr());
      return bad_input("runtime assertion failed: " + msg + location(p, ra->debug()));
    }
  }
  return Status::Ok();
}

// ---------------------------------------------------------------------------------------
// Planning (once per signature)

Status Session::Impl::build_attrs(std::uint32_t g, std::uint32_t n, NodeAttrs& out) {
  const auto* node = p.graphs()->Get(g)->nodes()->Get(n);
  const std::uint32_t na = count(node->attrs());
  out.values.clear();
  out.ints.clear();
  out.floats.clear();
  out.ints.reserve(na);
  out.floats.reserve(na);
  for (std::uint32_t k = 0; k < na; ++k) {
    const auto* a = node->attrs()->Get(k);
    cpu::AttrValue v;
    v.type = static_cast<AttrType>(a->kind());
    v.i = a->i();
    v.f = a->f();
    if (a->s()) v.s = a->s()->string_view();
    if (a->ints()) out.ints.emplace_back(a->ints()->begin(), a->ints()->end()), v.ints = out.ints.back();
    if (a->floats()) out.floats.emplace_back(a->floats()->begin(), a->floats()->end()), v.floats = out.floats.back();
    if (a->kind() == fb::AttrKind::Expr || a->kind() == fb::AttrKind::Exprs) {
      std::vector<std::int64_t> values;
      for (std::uint32_t e = 0; e < count(a->exprs()); ++e) {
        auto x = eval(a->exprs()->Get(e));
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

Result<std::unique_ptr<GraphPlan>> Session::Impl::make_plan(std::uint32_t g) {
  auto plan = std::make_unique<GraphPlan>();
  plan->graph = g;
  plan->symbols = symbols;
  plan->bound = bound;
  const GraphInfo& info = prog.graphs[g];
  const auto* graph = p.graphs()->Get(g);
  const std::size_t nv = info.values.size(), nn = info.nodes.size();
  plan->views.assign(nv, TensorView{});
  plan->offset.assign(nv, -1);
  plan->alias.assign(nv, -1);
  plan->dynamic.assign(nv, 0);
  plan->attrs.resize(nn);
  plan->attrs_ready.assign(nn, 0);

  // Shapes: every tensor whose dims mention no symbol bound inside the graph.
  for (std::size_t v = 0; v < nv; ++v) {
    const ValueInfo& vi = info.values[v];
    if (vi.kind != fb::ValueKind::Tensor && vi.kind != fb::ValueKind::Constant) continue;
    bool dyn = false;
    for (std::uint32_t s : vi.symbols) dyn |= info.bound_inside[s] && !bound[s];
    if (dyn) {
      plan->dynamic[v] = 1;
      plan->views[v].dtype = vi.dtype;
      continue;
    }
    std::array<std::int64_t, cpu::kMaxRank> shape{};
    const std::uint32_t rank = count(vi.shape);
    for (std::uint32_t d = 0; d < rank; ++d) {
      auto size = eval(vi.shape->Get(d));
      if (!size.ok()) return size.status();
      if (*size < 0) {
        const std::string where = vi.producer >= 0 ? location(p, info.nodes[static_cast<std::size_t>(vi.producer)].debug) : "";
        return bad_input("value " + std::to_string(v) + " of " + graph_name(g) + " would have a negative size " + std::to_string(*size) + " (" +
                         expr_to_string(p, vi.shape->Get(d)) + ")" + where);
      }
      shape[d] = *size;
    }
    plan->views[v] = make_view(vi.dtype, {shape.data(), rank}, nullptr);
    if (vi.kind == fb::ValueKind::Constant) {
      plan->views[v].data = const_cast<std::uint8_t*>(program.bundle().constant_data(vi.constant).data());
    }
  }
  // Expression attributes over symbols known now.
  for (std::size_t n = 0; n < nn; ++n) {
    const auto* node = graph->nodes()->Get(static_cast<std::uint32_t>(n));
    bool ready = true;
    for (std::uint32_t k = 0; k < count(node->attrs()) && ready; ++k) {
      const auto* a = node->attrs()->Get(k);
      if (a->kind() != fb::AttrKind::Expr && a->kind() != fb::AttrKind::Exprs) continue;
      for (std::uint32_t e = 0; e < count(a->exprs()); ++e) {
        const auto* ref = p.exprs()->Get(a->exprs()->Get(e));
        for (std::uint32_t t = ref->start(); t < ref->start() + ref->length(); ++t) {
          const auto* tok = p.expr_tokens()->Get(t);
          if (tok->op() == fb::ExprOp::Sym && info.bound_inside[static_cast<std::size_t>(tok->value())]) ready = false;
        }
      }
    }
    if (ready) {
      KILN_RETURN_IF_ERROR(build_attrs(g, static_cast<std::uint32_t>(n), plan->attrs[n]));
      plan->attrs_ready[n] = 1;
    }
  }
  // Accelerator segments run on the device only when all their shapes are static here.
  plan->segment_on_cpu.assign(info.segments.size(), 0);
  plan->prepared.resize(info.segments.size());
  plan->segment_inputs.resize(info.segments.size());
  plan->segment_outputs.resize(info.segments.size());
  for (std::size_t s = 0; s < info.segments.size(); ++s) {
    // Inputs: values read by the segment and defined outside it; outputs: values defined in
    // it and read after it (or returned).
    const Segment& seg = info.segments[s];
    auto inside = [&](std::int32_t producer) { return producer >= static_cast<std::int32_t>(seg.first) && producer <= static_cast<std::int32_t>(seg.last); };
    for (std::uint32_t n = seg.first; n <= seg.last; ++n) {
      for (std::uint32_t v : info.nodes[n].inputs) {
        const ValueInfo& vi = info.values[v];
        auto& ins = plan->segment_inputs[s];
        if (!inside(vi.producer) && vi.kind != fb::ValueKind::Constant && vi.kind != fb::ValueKind::None &&
            std::find(ins.begin(), ins.end(), v) == ins.end()) {
          ins.push_back(v);
        }
      }
      for (std::uint32_t v : info.nodes[n].outputs) {
        const ValueInfo& vi = info.values[v];
        if (vi.graph_output || vi.last_use > static_cast<std::int32_t>(seg.last)) plan->segment_outputs[s].push_back(v);
      }
    }
  }
  std::vector<std::uint8_t> device_only(nv, 0);  // produced and consumed inside one device segment
  for (std::size_t s = 0; s < info.segments.size(); ++s) {
    const Segment& seg = info.segments[s];
    for (std::uint32_t n = seg.first; n <= seg.last; ++n) {
      for (std::uint32_t v : info.nodes[n].inputs) plan->segment_on_cpu[s] |= plan->dynamic[v];
      for (std::uint32_t v : info.nodes[n].outputs) plan->segment_on_cpu[s] |= plan->dynamic[v];
    }
    for (std::uint32_t n = seg.first; n <= seg.last; ++n) plan->segment_on_cpu[s] |= !plan->attrs_ready[n];
    if (plan->segment_on_cpu[s]) continue;
    for (std::uint32_t n = seg.first; n <= seg.last; ++n) {
      for (std::uint32_t v : info.nodes[n].outputs) {
        const ValueInfo& vi = info.values[v];
        if (!vi.graph_output && vi.last_use <= static_cast<std::int32_t>(seg.last)) device_only[v] = 1;
      }
    }
  }

  // Buffers: tensors produced by nodes with planned shapes, merged when a node may write
  // its output over a dying input (elementwise) or share its input's bytes (reshape).
  struct Buffer {
    std::uint64_t bytes = 0;
    std::int32_t first = 0, last = 0;
  };
  std::vector<Buffer> buffers;
  std::vector<std::int32_t> buffer_of(nv, -1);
  auto external = [&](std::uint32_t v) {  // bytes owned by the caller or the bundle
    const ValueInfo& vi = info.values[v];
    return vi.graph_input || vi.kind == fb::ValueKind::Constant || plan->alias[v] >= 0;
  };
  auto same_shape = [&](std::uint32_t a, std::uint32_t b) {
    const TensorView &x = plan->views[a], &y = plan->views[b];
    return x.dtype == y.dtype && x.rank == y.rank && std::equal(x.shape.begin(), x.shape.begin() + x.rank, y.shape.begin());
  };
  for (std::size_t n = 0; n < nn; ++n) {
    const NodeInfo& ni = info.nodes[n];
    for (std::size_t k = 0; k < ni.outputs.size(); ++k) {
      const std::uint32_t v = ni.outputs[k];
      const ValueInfo& vi = info.values[v];
      if (vi.kind != fb::ValueKind::Tensor || plan->dynamic[v] || ni.kernel_allocates[k] || device_only[v]) continue;
      const std::int32_t last = std::max(vi.last_use, static_cast<std::int32_t>(n));
      const std::uint64_t bytes = plan->views[v].nbytes();
      if (ni.alias_ok && !ni.inputs.empty() && ni.segment < 0) {
        const std::uint32_t u = ni.inputs[0];
        if (!plan->dynamic[u] && plan->views[u].nbytes() == bytes && info.values[u].kind != fb::ValueKind::None) {
          if (buffer_of[u] >= 0) {
            buffer_of[v] = buffer_of[u];
            buffers[static_cast<std::size_t>(buffer_of[v])].last = std::max(buffers[static_cast<std::size_t>(buffer_of[v])].last, last);
            continue;
          }
          if (external(u)) {
            plan->alias[v] = plan->alias[u] >= 0 ? plan->alias[u] : static_cast<std::int32_t>(u);
            continue;
          }
        }
      }
      if (ni.inplace_ok && ni.segment < 0) {
        std::int32_t reuse = -1;
        for (std::uint32_t u : ni.inputs) {
          const std::int32_t b = buffer_of[u];
          if (b < 0 || buffers[static_cast<std::size_t>(b)].last != static_cast<std::int32_t>(n) || !same_shape(u, v)) continue;
          bool clash = false;  // another operand reading the same bytes through a different shape
          for (std::uint32_t w : ni.inputs) clash |= w != u && buffer_of[w] == b && !same_shape(w, v);
          if (!clash) {
            reuse = b;
            break;
          }
        }
        if (reuse >= 0) {
          buffer_of[v] = reuse;
          buffers[static_cast<std::size_t>(reuse)].last = last;
          continue;
        }
      }
      buffer_of[v] = static_cast<std::int32_t>(buffers.size());
      buffers.push_back({bytes, static_cast<std::int32_t>(n), last});
    }
  }
  std::vector<BufferRequest> requests;
  requests.reserve(buffers.size());
  for (const Buffer& b : buffers) requests.push_back({b.bytes, b.first, b.last});
  const MemoryPlan mp = plan_memory(requests);
  for (std::size_t v = 0; v < nv; ++v) {
    if (buffer_of[v] >= 0) plan->offset[v] = static_cast<std::int64_t>(mp.offsets[static_cast<std::size_t>(buffer_of[v])]);
  }
  plan->arena_bytes = mp.arena_bytes;
  for (std::size_t n = 0; n < nn; ++n) {
    for (std::uint32_t v : info.nodes[n].outputs) {
      if (info.values[v].kind == fb::ValueKind::Tensor && !plan->dynamic[v]) plan->naive_bytes += plan->views[v].nbytes();
    }
  }
  return plan;
}

std::uint8_t* Session::Impl::arena_for(std::uint32_t g, std::uint64_t bytes) {
  Arena& a = arenas[g];
  if (a.capacity < bytes || a.base == nullptr) {
    a.storage.reset(new std::uint8_t[bytes + kArenaAlignment]);
    a.capacity = bytes;
    const auto addr = reinterpret_cast<std::uintptr_t>(a.storage.get());
    a.base = a.storage.get() + ((kArenaAlignment - addr % kArenaAlignment) % kArenaAlignment);
  }
  return a.base;
}

// ---------------------------------------------------------------------------------------
// Execution

namespace {

class KernelCtx final : public cpu::KernelContext {
 public:
  using Alloc = cpu::FunctionRef<void*(int, std::size_t)>;
  KernelCtx(std::span<TensorView> outs, cpu::ThreadPool& pool, Alloc alloc, const cpu::PackedB* packed_b1,
            cpu::FusedActivation act)
      : outs_(outs), pool_(pool), alloc_(alloc), packed_b1_(packed_b1), act_(act) {}
  const cpu::PackedB* packed_b(int index) const override { return index == 1 ? packed_b1_ : nullptr; }
  cpu::FusedActivation fused_activation() const override { return act_; }
  Result<TensorView> allocate_output(int index, DType dtype, std::span<const std::int64_t> shape) override {
    if (index < 0 || static_cast<std::size_t>(index) >= outs_.size()) return Status(StatusCode::kInternal, "bad output index");
    if (shape.size() > cpu::kMaxRank) return Status(StatusCode::kInternal, "output rank above the maximum");
    void* data = alloc_(index, nbytes_of(dtype, shape));
    outs_[static_cast<std::size_t>(index)] = make_view(dtype, shape, data);
    return outs_[static_cast<std::size_t>(index)];
  }
  cpu::ThreadPool& pool() override { return pool_; }

 private:
  std::span<TensorView> outs_;
  cpu::ThreadPool& pool_;
  Alloc alloc_;
  const cpu::PackedB* packed_b1_;
  cpu::FusedActivation act_;
};

}  // namespace

Status Session::Impl::bind_node(Frame& f, std::uint32_t n) {
  const NodeInfo& ni = f.info->nodes[n];
  for (std::uint32_t b : f.info->bindings_of[n]) {
    const auto* ub = f.graph->bindings()->Get(b);
    const TensorView& s = f.views[ni.outputs[ub->output()]];
    std::int64_t value = 0;
    if (ub->kind() == fb::BindingKind::Size) {
      if (static_cast<int>(ub->dim()) >= s.rank) return Status(StatusCode::kInvalidBundle, "binding dim out of range");
      value = s.shape[ub->dim()] / ub->divisor();
    } else {
      if (s.data == nullptr) return Status(StatusCode::kInternal, "unbound scalar output");
      switch (s.dtype) {
        case DType::kI64: std::memcpy(&value, s.data, 8); break;
        case DType::kI32: { std::int32_t w; std::memcpy(&w, s.data, 4); value = w; break; }
        case DType::kI16: { std::int16_t w; std::memcpy(&w, s.data, 2); value = w; break; }
        case DType::kI8: { std::int8_t w; std::memcpy(&w, s.data, 1); value = w; break; }
        case DType::kBool: case DType::kU8: value = *static_cast<const std::uint8_t*>(s.data); break;
        default: return Status(StatusCode::kUnsupported, "item() of " + std::string(dtype_name(s.dtype)) + " cannot bind a symbol");
      }
    }
    symbols[ub->symbol()] = value;
    bound[ub->symbol()] = 1;
  }
  // Outputs sized at run time must match their (now bound) symbolic shapes.
  for (std::size_t k = 0; k < ni.outputs.size(); ++k) {
    const std::uint32_t v = ni.outputs[k];
    const ValueInfo& vi = f.info->values[v];
    if (vi.kind != fb::ValueKind::Tensor || !(ni.kernel_allocates[k] || f.plan->dynamic[v] || ni.hop)) continue;
    const TensorView& s = f.views[v];
    if (count(vi.shape) != static_cast<std::uint32_t>(s.rank)) {
      return Status(StatusCode::kInvalidBundle, "node " + std::to_string(n) + ": output " + std::to_string(k) + " has rank " +
                                                    std::to_string(s.rank) + ", the bundle says " + std::to_string(count(vi.shape)));
    }
    for (std::uint32_t d = 0; d < count(vi.shape); ++d) {
      auto want = eval(vi.shape->Get(d));
      if (!want.ok()) return want.status();
      if (*want != s.shape[d]) {
        return Status(StatusCode::kInvalidBundle, "node " + std::to_string(n) + " (" + std::string(op_info(ni.op).name) + "): output " +
                                                      std::to_string(k) + " dim " + std::to_string(d) + " is " + std::to_string(s.shape[d]) +
                                                      ", the bundle says " + std::to_string(*want) + location(p, ni.debug));
      }
    }
  }
  return Status::Ok();
}

Status Session::Impl::run_node(Frame& f, std::uint32_t n) {
  const NodeInfo& ni = f.info->nodes[n];
  if (ni.hop) return run_control_flow(f, n);
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
      f.views[v] = make_view(dt, {}, heap_alloc(f, v, 8));
      out[k] = f.views[v];
      continue;
    }
    if (ni.kernel_allocates[k]) {
      out[k] = TensorView{};
      out[k].dtype = vi.dtype;
      continue;
    }
    if (!f.plan->dynamic[v] && f.views[v].data == nullptr) {  // planned for a device segment that fell back
      f.views[v].data = heap_alloc(f, v, f.views[v].nbytes());
    }
    if (f.plan->dynamic[v]) {
      std::array<std::int64_t, cpu::kMaxRank> shape{};
      const std::uint32_t rank = count(vi.shape);
      for (std::uint32_t d = 0; d < rank; ++d) {
        auto size = eval(vi.shape->Get(d));
        if (!size.ok()) return size.status();
        if (*size < 0) return bad_input("node " + std::to_string(n) + ": negative output size " + std::to_string(*size) + location(p, ni.debug));
        shape[d] = *size;
      }
      f.views[v] = make_view(vi.dtype, {shape.data(), rank}, nullptr);
      f.views[v].data = heap_alloc(f, v, f.views[v].nbytes());
    }
    out[k] = f.views[v];
  }
  // A reshape sharing its input's bytes has nothing to do.
  if (ni.alias_ok && out.size() == 1 && !ins.empty() && out[0].data == ins[0].data && out[0].data != nullptr) return Status::Ok();
  if (ni.fused_away) {  // the node before applied this activation; unplanned bytes are copied
    std::memcpy(out[0].data, ins[0].data, ins[0].nbytes());
    return Status::Ok();
  }
  NodeAttrs dyn_attrs;
  const NodeAttrs* attrs = &f.plan->attrs[n];
  if (!f.plan->attrs_ready[n]) {
    KILN_RETURN_IF_ERROR(build_attrs(f.graph_id, n, dyn_attrs));
    attrs = &dyn_attrs;
  }
  auto alloc = [&](int index, std::size_t bytes) { return heap_alloc(f, ni.outputs[static_cast<std::size_t>(index)], bytes); };
  KernelCtx ctx(out, pool, alloc, ni.packed_b, ni.fused_act);
  const auto t0 = options.profile ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
  const Status st = ni.kernel(ctx, ins, out, attrs->values);
  if (options.profile) {
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    stats.ops.push_back({op_label(ni), debug_location(p, ni.debug).text(), ms});
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

// Writes one output of a control-flow node from the callee's result.
Status Session::Impl::store_output(Frame& f, std::uint32_t n, std::size_t k, const CallArg& value) {
  const NodeInfo& ni = f.info->nodes[n];
  const std::uint32_t v = ni.outputs[k];
  const ValueInfo& vi = f.info->values[v];
  if (vi.kind == fb::ValueKind::SymInt || vi.kind == fb::ValueKind::SymBool) {
    if (!value.is_int) return Status(StatusCode::kInvalidBundle, "node " + std::to_string(n) + ": output " + std::to_string(k) + " is symbolic, the subgraph returned a tensor");
    f.views[v] = make_view(DType::kI64, {}, heap_alloc(f, v, 8));
    std::memcpy(f.views[v].data, &value.i, 8);
    return Status::Ok();
  }
  if (value.is_int) return Status(StatusCode::kInvalidBundle, "node " + std::to_string(n) + ": output " + std::to_string(k) + " is a tensor, the subgraph returned an int");
  if (value.t.dtype != vi.dtype) return Status(StatusCode::kInvalidBundle, "node " + std::to_string(n) + ": output " + std::to_string(k) + " dtype differs from the subgraph's");
  TensorView& dst = f.views[v];
  const std::size_t bytes = value.t.nbytes();
  if (f.plan->offset[v] >= 0 && !f.plan->dynamic[v]) {
    if (dst.rank != value.t.rank || !std::equal(dst.shape.begin(), dst.shape.begin() + dst.rank, value.t.shape.begin())) {
      return Status(StatusCode::kInvalidBundle, "node " + std::to_string(n) + ": output " + std::to_string(k) + " has a different shape than the bundle says" + location(p, ni.debug));
    }
  } else {
    dst = make_view(value.t.dtype, value.t.dims(), heap_alloc(f, v, bytes));
  }
  if (bytes) std::memcpy(dst.data, value.t.data, bytes);
  return Status::Ok();
}

Status Session::Impl::run_control_flow(Frame& f, std::uint32_t n) {
  const NodeInfo& ni = f.info->nodes[n];
  auto arg_of = [&](std::uint32_t v) -> Result<CallArg> {
    const ValueInfo& vi = f.info->values[v];
    CallArg a;
    if (vi.kind == fb::ValueKind::SymInt || vi.kind == fb::ValueKind::SymBool) {
      auto x = eval(vi.expr);
      if (!x.ok()) return x.status();
      a.is_int = true;
      a.i = *x;
    } else {
      a.t = f.views[v];
    }
    return a;
  };
  auto truth = [&](const CallArg& a, const char* what) -> Result<bool> {
    if (a.is_int) return a.i != 0;
    if (a.t.numel() != 1) return bad_input(std::string(what) + " must have one element, it has " + std::to_string(a.t.numel()) + location(p, ni.debug));
    switch (a.t.dtype) {
      case DType::kBool: case DType::kU8: case DType::kI8: return *static_cast<const std::uint8_t*>(a.t.data) != 0;
      case DType::kI32: return *static_cast<const std::int32_t*>(a.t.data) != 0;
      case DType::kI64: return *static_cast<const std::int64_t*>(a.t.data) != 0;
      case DType::kF32: return *static_cast<const float*>(a.t.data) != 0.0f;
      default: return Status(StatusCode::kUnsupported, std::string(what) + " of dtype " + std::string(dtype_name(a.t.dtype)));
    }
  };
  // Calls preserve the caller's symbols: a subgraph binds its own.
  const std::vector<std::int64_t> saved_symbols = symbols;
  const std::vector<std::uint8_t> saved_bound = bound;
  auto restore = [&] {
    symbols = saved_symbols;
    bound = saved_bound;
  };
  std::vector<CallArg> args;
  Status st = Status::Ok();
  // cond and invoke_subgraph: outputs are copied out before the callee's memory is reused.
  std::vector<CallArg> results(ni.outputs.size());
  std::vector<std::unique_ptr<std::uint8_t[]>> keep(ni.outputs.size());
  auto keep_sink = [&](std::size_t k, const CallArg& value) -> Status {
    results[k] = owned_copy(value, keep[k]);
    return Status::Ok();
  };
  if (ni.op == OpKind::Cond || ni.op == OpKind::InvokeSubgraph) {
    std::uint32_t callee = ni.subgraphs[0];
    std::size_t first_operand = 0;
    if (ni.op == OpKind::Cond) {
      KILN_ASSIGN_OR_RETURN(CallArg pred, arg_of(ni.inputs[0]));
      KILN_ASSIGN_OR_RETURN(bool take, truth(pred, "the cond predicate"));
      callee = ni.subgraphs[take ? 0 : 1];
      first_operand = 1;
    }
    for (std::size_t k = first_operand; k < ni.inputs.size(); ++k) {
      KILN_ASSIGN_OR_RETURN(CallArg a, arg_of(ni.inputs[k]));
      args.push_back(a);
    }
    st = run_graph(callee, args, false, keep_sink, nullptr);
    restore();
    if (!st.ok()) return st;
    for (std::size_t k = 0; k < results.size(); ++k) KILN_RETURN_IF_ERROR(store_output(f, n, k, results[k]));
  } else {  // while_loop
    for (std::uint32_t v : ni.inputs) {
      KILN_ASSIGN_OR_RETURN(CallArg a, arg_of(v));
      args.push_back(a);
    }
    const std::size_t carries = ni.outputs.size();
    std::int64_t limit = options.max_loop_iterations;
    const auto* node = f.graph->nodes()->Get(n);
    if (count(node->attrs()) > 0 && node->attrs()->Get(0)->kind() == fb::AttrKind::Int) limit = node->attrs()->Get(0)->i();
    std::vector<std::unique_ptr<std::uint8_t[]>> store(carries), next(carries);
    std::vector<CallArg> next_args(carries);
    bool go = false;
    for (std::int64_t iteration = 0;; ++iteration) {
      auto cond_sink = [&](std::size_t, const CallArg& value) -> Status {
        KILN_ASSIGN_OR_RETURN(bool b, truth(value, "the while_loop condition"));
        go = b;
        return Status::Ok();
      };
      st = run_graph(ni.subgraphs[0], args, false, cond_sink, nullptr);
      if (!st.ok()) break;
      if (!go) break;
      if (iteration >= limit) {
        st = bad_input("while_loop ran more than " + std::to_string(limit) + " iterations (raise SessionOptions::max_loop_iterations or the loop's max_iterations)" + location(p, ni.debug));
        break;
      }
      auto body_sink = [&](std::size_t k, const CallArg& value) -> Status {
        next_args[k] = owned_copy(value, next[k]);
        return Status::Ok();
      };
      st = run_graph(ni.subgraphs[1], args, false, body_sink, nullptr);
      if (!st.ok()) break;
      std::swap(store, next);
      for (std::size_t k = 0; k < carries; ++k) args[k] = next_args[k];
      restore();
    }
    restore();
    if (!st.ok()) return st;
    for (std::size_t k = 0; k < carries; ++k) KILN_RETURN_IF_ERROR(store_output(f, n, k, args[k]));
  }
  return Status::Ok();
}

Status Session::Impl::run_segment(Frame& f, std::uint32_t s) {
  const Segment& seg = f.info->segments[s];
  std::unique_ptr<backend::PreparedSegment>& prepared = f.plan->prepared[s];
  const std::vector<std::uint32_t>& in_values = f.plan->segment_inputs[s];
  const std::vector<std::uint32_t>& out_values = f.plan->segment_outputs[s];
  if (!prepared) {
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

Status Session::Impl::run_graph(std::uint32_t called, std::span<const CallArg> args, bool entry, OutputSink sink, std::string* variant) {
  make_key(args, scratch_key);
  if (!entry) {  // a subgraph may use the entry's symbols directly
    for (std::uint32_t s : backed_symbols) scratch_key.words.push_back(symbols[s]);
  }
  auto& cache = plans[called];
  GraphPlan* plan = nullptr;
  if (auto it = cache.find(scratch_key); it != cache.end()) {
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
    KILN_ASSIGN_OR_RETURN(auto made, make_plan(g));
    made->variant = label;
    if (cache.size() >= 256) cache.clear();  // a bound on memory for callers with many shapes
    plan = cache.emplace(std::move(key), std::move(made)).first->second.get();
  }
  if (variant) *variant = plan->variant;
  Frame f;
  f.plan = plan;
  f.graph_id = plan->graph;
  f.info = &prog.graphs[plan->graph];
  f.graph = p.graphs()->Get(plan->graph);
  f.views = plan->views;
  f.heap.resize(f.views.size());
  f.heap_size.assign(f.views.size(), 0);
  HeapRelease release{*this, f};
  std::uint8_t* base = arena_for(plan->graph, plan->arena_bytes);
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
      KILN_RETURN_IF_ERROR(run_segment(f, static_cast<std::uint32_t>(ni.segment)));
      if (!plan->segment_on_cpu[static_cast<std::size_t>(ni.segment)]) {
        for (std::uint32_t m = seg.first; m <= seg.last; ++m) KILN_RETURN_IF_ERROR(check_asserts(f, m + 1));
        n = seg.last;
        continue;
      }
      // prepare() refused the segment: fall through to the CPU kernels.
    }
    KILN_RETURN_IF_ERROR(run_node(f, n));
    if (!f.info->bindings_of[n].empty() || ni.hop || std::find(ni.kernel_allocates.begin(), ni.kernel_allocates.end(), true) != ni.kernel_allocates.end()) {
      KILN_RETURN_IF_ERROR(bind_node(f, n));
    }
    if (!f.info->asserts_after[n + 1].empty()) KILN_RETURN_IF_ERROR(check_asserts(f, n + 1));
  }
  for (std::uint32_t k = 0; k < count(f.graph->outputs()); ++k) {
    const std::uint32_t v = f.graph->outputs()->Get(k);
    const ValueInfo& vi = f.info->values[v];
    CallArg out;
    if (vi.kind == fb::ValueKind::SymInt || vi.kind == fb::ValueKind::SymBool) {
      KILN_ASSIGN_OR_RETURN(out.i, eval(vi.expr));
      out.is_int = true;
    } else {
      out.t = f.views[v];
    }
    KILN_RETURN_IF_ERROR(sink(k, out));
  }
  return Status::Ok();
}

Status Session::Impl::run(std::span<const HostValue> inputs, RunResult& result) {
  stats = RunStats{};
  heap_live = heap_peak = 0;
  arena_used.assign(arenas.size(), 0);
  const auto* sig = p.signature()->inputs();
  if (inputs.size() != count(sig)) {
    return bad_input("expected " + std::to_string(count(sig)) + " inputs, got " + std::to_string(inputs.size()));
  }
  // Checks that do not depend on the shape signature run every time.
  std::vector<CallArg> args(inputs.size());
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
    if (t.shape.size() > cpu::kMaxRank) return bad_input("input " + std::string(name) + ": rank " + std::to_string(t.shape.size()) + " is above the maximum 8");
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
  KILN_RETURN_IF_ERROR(run_graph(p.entry_graph(), args, true, sink, &result.variant));
  stats.peak_bytes = heap_peak;
  for (std::uint64_t a : arena_used) stats.peak_bytes += a;
  return Status::Ok();
}

}  // namespace kiln

// Session::run: input checks, symbol binding, specialization dispatch, execution.
#include <chrono>
#include <cstring>
#include <memory>

#include "backends/cpu/thread_pool.h"
#include "executor/program_impl.h"
#include "kiln/format/kiln_generated.h"
#include "kiln/runtime/expr.h"

namespace kiln {
namespace {

template <typename V>
std::uint32_t count(const V* v) { return v == nullptr ? 0 : v->size(); }

Status bad_input(const std::string& m) { return Status(StatusCode::kInvalidInput, m); }

// One value of the running graph.
struct Slot {
  DType dtype = DType::kF32;
  std::vector<std::int64_t> shape;
  std::uint8_t* data = nullptr;
  std::shared_ptr<std::vector<std::uint8_t>> owned;
  bool ready = false;

  cpu::TensorView view() const {
    cpu::TensorView v;
    v.dtype = dtype;
    v.rank = static_cast<int>(shape.size());
    for (std::size_t i = 0; i < shape.size(); ++i) v.shape[i] = shape[i];
    v.data = data;
    return v;
  }
  void allocate(DType d, std::vector<std::int64_t> s, std::uint64_t* counter) {
    dtype = d;
    shape = std::move(s);
    std::size_t n = dtype_size(d);
    for (std::int64_t x : shape) n *= static_cast<std::size_t>(x);
    owned = std::make_shared<std::vector<std::uint8_t>>(n);
    data = owned->data();
    if (counter) *counter += n;
    ready = true;
  }
};

// Returns the symbol id if expression `id` is a bare symbol.
std::optional<std::uint32_t> bare_symbol(const fb::Program& p, std::uint32_t id) {
  const auto* ref = p.exprs()->Get(id);
  if (ref->length() != 1) return std::nullopt;
  const auto* tok = p.expr_tokens()->Get(ref->start());
  if (tok->op() != fb::ExprOp::Sym) return std::nullopt;
  return static_cast<std::uint32_t>(tok->value());
}

std::string location(const fb::Program& p, std::uint32_t debug) {
  const auto* d = p.debug();
  if (d == nullptr || debug == 0 || debug > count(d->entries())) return "";
  const auto* e = d->entries()->Get(debug - 1);
  std::string out = d->strings()->Get(e->file())->str() + ":" + std::to_string(e->line());
  const std::string module = d->strings()->Get(e->module_path())->str();
  if (!module.empty()) out += ", " + module;
  return " (" + out + ")";
}

class KernelCtx final : public cpu::KernelContext {
 public:
  KernelCtx(std::vector<Slot*> outs, cpu::ThreadPool& pool, std::uint64_t* counter)
      : outs_(std::move(outs)), pool_(pool), counter_(counter) {}
  Result<cpu::TensorView> allocate_output(int index, DType dtype, std::span<const std::int64_t> shape) override {
    if (index < 0 || static_cast<std::size_t>(index) >= outs_.size()) return Status(StatusCode::kInternal, "bad output index");
    outs_[static_cast<std::size_t>(index)]->allocate(dtype, {shape.begin(), shape.end()}, counter_);
    return outs_[static_cast<std::size_t>(index)]->view();
  }
  cpu::ThreadPool& pool() override { return pool_; }

 private:
  std::vector<Slot*> outs_;
  cpu::ThreadPool& pool_;
  std::uint64_t* counter_;
};

}  // namespace

struct Session::Impl {
  const Program& program;
  cpu::ThreadPool pool;
  std::vector<std::int64_t> symbols;
  std::vector<bool> bound;
  std::vector<std::string> bound_from;  // "x.size(0)" per symbol, for messages
  bool profile = false;
  RunStats stats;

  Impl(const Program& p, int threads, bool prof) : program(p), pool(threads), profile(prof) {}
  const fb::Program& fbp() const { return program.bundle().program(); }

  Status bind_inputs(std::span<const HostValue> inputs);
  Status solve_derived(std::span<const HostValue> inputs);
  Status check_inputs(std::span<const HostValue> inputs);
  Result<std::uint32_t> choose_variant(std::string& label);
  Status check_asserts(const fb::Graph& g, std::int64_t after);
  Result<std::int64_t> eval(std::uint32_t expr) { return evaluate_expr(fbp(), expr, symbols); }
  Status run_node(const fb::Graph& g, std::uint32_t n, std::vector<Slot>& slots);
  Status bind_outputs(const fb::Graph& g, std::uint32_t n, std::vector<Slot>& slots);
  Result<RunResult> run(std::span<const HostValue> inputs);
};

Session::Session(const Program& program, SessionOptions options)
    : impl_(std::make_unique<Impl>(program, options.threads < 1 ? 1 : options.threads, options.profile)) {}
Session::~Session() = default;
const RunStats& Session::last_stats() const { return impl_->stats; }
Result<RunResult> Session::run(std::span<const HostValue> inputs) { return impl_->run(inputs); }

Status Session::Impl::bind_inputs(std::span<const HostValue> inputs) {
  const fb::Program& p = fbp();
  const auto* sig = p.signature()->inputs();
  if (inputs.size() != count(sig)) {
    return bad_input("expected " + std::to_string(count(sig)) + " inputs, got " + std::to_string(inputs.size()));
  }
  symbols.assign(count(p.symbols()), 0);
  bound.assign(symbols.size(), false);
  bound_from.assign(symbols.size(), "");
  for (std::uint32_t i = 0; i < count(sig); ++i) {
    const auto* spec = sig->Get(i);
    const HostValue& in = inputs[i];
    const std::string name = spec->name()->str();
    if (spec->kind() == fb::InputKind::Int) {
      if (!in.is_int) return bad_input("input " + name + ": expected an int, got a tensor");
      if (spec->dynamism() == fb::Dynamism::Static) {
        if (in.int_value != spec->static_value()) {
          return bad_input("input " + name + ": must be " + std::to_string(spec->static_value()) + " (a static int at export), got " +
                           std::to_string(in.int_value));
        }
      } else if (auto s = bare_symbol(p, spec->expr()); s && !bound[*s]) {
        symbols[*s] = in.int_value;
        bound[*s] = true;
        bound_from[*s] = name;
      }
      continue;
    }
    if (in.is_int) return bad_input("input " + name + ": expected a tensor, got an int");
    const HostTensor& t = in.tensor;
    if (t.dtype != static_cast<DType>(spec->dtype())) {
      return bad_input("input " + name + ": dtype " + std::string(dtype_name(t.dtype)) + ", expected " +
                       std::string(dtype_name(static_cast<DType>(spec->dtype()))));
    }
    if (t.shape.size() != count(spec->shape())) {
      return bad_input("input " + name + ": rank " + std::to_string(t.shape.size()) + ", expected " +
                       std::to_string(count(spec->shape())) + " " + shape_to_string(p, dtype_name(t.dtype), {spec->shape()->data(), count(spec->shape())}));
    }
    std::uint64_t n = dtype_size(t.dtype);
    for (std::int64_t d : t.shape) {
      if (d < 0) return bad_input("input " + name + ": negative dim " + std::to_string(d));
      n *= static_cast<std::uint64_t>(d);
    }
    if (n != t.data.size()) return bad_input("input " + name + ": " + std::to_string(t.data.size()) + " bytes of data for " + std::to_string(n) + " expected");
    for (std::uint32_t d = 0; d < count(spec->shape()); ++d) {
      if (auto s = bare_symbol(p, spec->shape()->Get(d)); s && !bound[*s]) {
        symbols[*s] = t.shape[d];
        bound[*s] = true;
        bound_from[*s] = name + ".size(" + std::to_string(d) + ")";
      }
    }
  }
  return solve_derived(inputs);
}

// Dims like 2*s0 or s0 + 1 whose symbol appears nowhere bare: solve the linear form.
Status Session::Impl::solve_derived(std::span<const HostValue> inputs) {
  const fb::Program& p = fbp();
  const auto* sig = p.signature()->inputs();
  for (std::uint32_t i = 0; i < count(sig); ++i) {
    const auto* spec = sig->Get(i);
    if (spec->kind() != fb::InputKind::Tensor) continue;
    for (std::uint32_t d = 0; d < count(spec->shape()); ++d) {
      const std::uint32_t e = spec->shape()->Get(d);
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
      if (!f0.ok() || !f1.ok()) return bad_input("input " + spec->name()->str() + ": cannot solve dim " + std::to_string(d));
      const std::int64_t a = *f1 - *f0, b = *f0, size = inputs[i].tensor.shape[d];
      if (a <= 0 || (size - b) % a != 0) {
        return bad_input("input " + spec->name()->str() + ": dim " + std::to_string(d) + " is " + std::to_string(size) +
                         ", which is not of the form " + expr_to_string(p, e));
      }
      symbols[*unbound] = (size - b) / a;
      bound[*unbound] = true;
      bound_from[*unbound] = spec->name()->str() + ".size(" + std::to_string(d) + ")";
    }
  }
  return Status::Ok();
}

Status Session::Impl::check_inputs(std::span<const HostValue> inputs) {
  const fb::Program& p = fbp();
  const auto* sig = p.signature()->inputs();
  // Every declared range, lower bounds included.
  for (std::uint32_t s = 0; s < count(p.symbols()); ++s) {
    const auto* sym = p.symbols()->Get(s);
    if (sym->kind() != fb::SymbolKind::Backed || !bound[s]) continue;
    if (symbols[s] < sym->min() || symbols[s] > sym->max()) {
      const std::string user = sym->user_name() && sym->user_name()->size() ? sym->user_name()->str() + ", " : "";
      const std::string hi = sym->max() == INT64_MAX ? "inf" : std::to_string(sym->max());
      const std::string lo = sym->min() == INT64_MIN ? "-inf" : std::to_string(sym->min());
      return bad_input("input " + bound_from[s] + " = " + std::to_string(symbols[s]) + " (" + user + sym->name()->str() +
                       ") is outside the range [" + lo + ", " + hi + "]" + location(p, sym->debug()));
    }
  }
  // Every dim equals its (now evaluable) expression: static dims, equalities, derived dims.
  for (std::uint32_t i = 0; i < count(sig); ++i) {
    const auto* spec = sig->Get(i);
    if (spec->kind() != fb::InputKind::Tensor) continue;
    for (std::uint32_t d = 0; d < count(spec->shape()); ++d) {
      auto want = eval(spec->shape()->Get(d));
      if (!want.ok()) return bad_input("input " + spec->name()->str() + ": " + want.status().message());
      const std::int64_t got = inputs[i].tensor.shape[d];
      if (got != *want) {
        const std::string e = expr_to_string(p, spec->shape()->Get(d));
        return bad_input("input " + spec->name()->str() + ": dim " + std::to_string(d) + " is " + std::to_string(got) + ", expected " +
                         (e == std::to_string(*want) ? e : e + " = " + std::to_string(*want)));
      }
    }
  }
  return Status::Ok();
}

Result<std::uint32_t> Session::Impl::choose_variant(std::string& label) {
  const fb::Program& p = fbp();
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

Status Session::Impl::check_asserts(const fb::Graph& g, std::int64_t after) {
  for (std::uint32_t a = 0; a < count(g.asserts()); ++a) {
    const auto* ra = g.asserts()->Get(a);
    if (ra->after_node() != after) continue;
    auto v = eval(ra->expr());
    if (!v.ok()) return v.status();
    if (*v == 0) {
      const std::string msg = ra->message() && ra->message()->size() ? ra->message()->str() : expr_to_string(fbp(), ra->expr());
      return bad_input("runtime assertion failed: " + msg + location(fbp(), ra->debug()));
    }
  }
  return Status::Ok();
}

Status Session::Impl::bind_outputs(const fb::Graph& g, std::uint32_t n, std::vector<Slot>& slots) {
  const fb::Program& p = fbp();
  for (std::uint32_t b = 0; b < count(g.bindings()); ++b) {
    const auto* ub = g.bindings()->Get(b);
    if (ub->node() != n) continue;
    const Slot& s = slots[g.nodes()->Get(n)->outputs()->Get(ub->output())];
    std::int64_t value = 0;
    if (ub->kind() == fb::BindingKind::Size) {
      if (ub->dim() >= s.shape.size()) return Status(StatusCode::kInternal, "binding dim out of range");
      value = s.shape[ub->dim()] / ub->divisor();
    } else {
      switch (s.dtype) {
        case DType::kI64: std::memcpy(&value, s.data, 8); break;
        case DType::kI32: { std::int32_t w; std::memcpy(&w, s.data, 4); value = w; break; }
        case DType::kBool: case DType::kU8: value = s.data[0]; break;
        default: return Status(StatusCode::kUnsupported, "item() of " + std::string(dtype_name(s.dtype)) + " cannot bind a symbol");
      }
    }
    symbols[ub->symbol()] = value;
    bound[ub->symbol()] = true;
  }
  // Outputs whose size the kernel decided must match their (now bound) symbolic shapes.
  const auto* node = g.nodes()->Get(n);
  for (std::uint32_t k = 0; k < count(node->outputs()); ++k) {
    const auto* v = g.values()->Get(node->outputs()->Get(k));
    const Slot& s = slots[node->outputs()->Get(k)];
    if (v->kind() != fb::ValueKind::Tensor) continue;
    if (count(v->shape()) != s.shape.size()) {
      return Status(StatusCode::kInvalidBundle, "node " + std::to_string(n) + ": output " + std::to_string(k) + " has rank " +
                                                    std::to_string(s.shape.size()) + ", the bundle says " + std::to_string(count(v->shape())));
    }
    for (std::uint32_t d = 0; d < count(v->shape()); ++d) {
      auto want = eval(v->shape()->Get(d));
      if (!want.ok()) return want.status();
      if (*want != s.shape[d]) {
        return Status(StatusCode::kInvalidBundle, "node " + std::to_string(n) + " (" + p.op_names()->Get(node->op())->str() +
                                                      "): output " + std::to_string(k) + " dim " + std::to_string(d) + " is " +
                                                      std::to_string(s.shape[d]) + ", the bundle says " + std::to_string(*want));
      }
    }
  }
  return Status::Ok();
}

namespace {

// Attribute values for a kernel call, with storage that outlives the call.
struct Attrs {
  std::vector<cpu::AttrValue> values;
  std::vector<std::vector<std::int64_t>> ints;
  std::vector<std::vector<double>> floats;
};

}  // namespace

Status Session::Impl::run_node(const fb::Graph& g, std::uint32_t n, std::vector<Slot>& slots) {
  const fb::Program& p = fbp();
  const auto* node = g.nodes()->Get(n);
  const Program::Impl& prog = program.impl();
  const cpu::KernelFn kernel = prog.kernels[node->op()];
  std::vector<cpu::TensorView> in;
  for (std::uint32_t k = 0; k < count(node->inputs()); ++k) {
    const std::uint32_t v = node->inputs()->Get(k);
    const auto kind = g.values()->Get(v)->kind();
    if (kind == fb::ValueKind::SymInt || kind == fb::ValueKind::SymBool) {
      return Status(StatusCode::kUnsupported, "node " + std::to_string(n) + ": symbolic operands are not supported by this runtime yet");
    }
    in.push_back(slots[v].view());
  }
  std::vector<Slot*> out_slots;
  std::vector<cpu::TensorView> out;
  for (std::uint32_t k = 0; k < count(node->outputs()); ++k) {
    const std::uint32_t v = node->outputs()->Get(k);
    const auto* val = g.values()->Get(v);
    Slot& slot = slots[v];
    out_slots.push_back(&slot);
    if (val->kind() == fb::ValueKind::SymInt) {  // item(): a 0-d tensor of the input's dtype
      slot.allocate(in.empty() ? DType::kI64 : in[0].dtype, {}, &stats.peak_bytes);
      out.push_back(slot.view());
      continue;
    }
    std::vector<std::int64_t> shape;
    bool data_dependent = false;
    for (std::uint32_t d = 0; d < count(val->shape()); ++d) {
      const auto* ref = p.exprs()->Get(val->shape()->Get(d));
      for (std::uint32_t t = ref->start(); t < ref->start() + ref->length(); ++t) {
        const auto* tok = p.expr_tokens()->Get(t);
        if (tok->op() == fb::ExprOp::Sym && !bound[static_cast<std::size_t>(tok->value())]) data_dependent = true;
      }
      if (data_dependent) break;
      auto size = eval(val->shape()->Get(d));
      if (!size.ok()) return size.status();
      if (*size < 0) return bad_input("node " + std::to_string(n) + ": negative output size " + std::to_string(*size) + location(p, node->debug()));
      shape.push_back(*size);
    }
    cpu::TensorView view;
    view.dtype = static_cast<DType>(val->dtype());
    if (!data_dependent) {
      slot.allocate(view.dtype, shape, &stats.peak_bytes);
      view = slot.view();
    }
    out.push_back(view);
  }
  Attrs attrs;
  attrs.ints.reserve(count(node->attrs()));
  attrs.floats.reserve(count(node->attrs()));
  for (std::uint32_t k = 0; k < count(node->attrs()); ++k) {
    const auto* a = node->attrs()->Get(k);
    cpu::AttrValue v;
    v.type = static_cast<AttrType>(a->kind());
    v.i = a->i();
    v.f = a->f();
    if (a->s()) v.s = a->s()->string_view();
    if (a->ints()) attrs.ints.emplace_back(a->ints()->begin(), a->ints()->end()), v.ints = attrs.ints.back();
    if (a->floats()) attrs.floats.emplace_back(a->floats()->begin(), a->floats()->end()), v.floats = attrs.floats.back();
    if (a->kind() == fb::AttrKind::Expr || a->kind() == fb::AttrKind::Exprs) {
      std::vector<std::int64_t> values;
      for (std::uint32_t e = 0; e < count(a->exprs()); ++e) {
        auto x = eval(a->exprs()->Get(e));
        if (!x.ok()) return x.status();
        values.push_back(*x);
      }
      if (a->kind() == fb::AttrKind::Expr) v.i = values.empty() ? 0 : values[0];
      attrs.ints.push_back(std::move(values));
      v.ints = attrs.ints.back();
    }
    attrs.values.push_back(v);
  }
  KernelCtx ctx(out_slots, pool, &stats.peak_bytes);
  const auto t0 = profile ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
  const Status st = kernel(ctx, in, out, attrs.values);
  if (profile) {
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::string where = location(p, node->debug());
    if (where.size() > 3) where = where.substr(2, where.size() - 3);
    stats.ops.push_back({p.op_names()->Get(node->op())->str(), where, ms});
  }
  if (!st.ok()) {
    return Status(st.code(), st.message() + " [graph " + (g.name() ? g.name()->str() : std::string()) + ", node " +
                                 std::to_string(n) + "]" + location(p, node->debug()));
  }
  for (Slot* s : out_slots) {
    if (!s->ready) return Status(StatusCode::kInternal, "node " + std::to_string(n) + ": kernel did not produce an output");
  }
  return bind_outputs(g, n, slots);
}

Result<RunResult> Session::Impl::run(std::span<const HostValue> inputs) {
  const fb::Program& p = fbp();
  stats = RunStats{};
  KILN_RETURN_IF_ERROR(bind_inputs(inputs));
  KILN_RETURN_IF_ERROR(check_inputs(inputs));
  RunResult result;
  auto graph_id = choose_variant(result.variant);
  if (!graph_id.ok()) return graph_id.status();
  const fb::Graph& g = *p.graphs()->Get(*graph_id);
  KILN_RETURN_IF_ERROR(check_asserts(g, -1));
  std::vector<Slot> slots(count(g.values()));
  for (std::uint32_t k = 0; k < count(g.inputs()); ++k) {
    if (inputs[k].is_int) continue;
    Slot& s = slots[g.inputs()->Get(k)];
    s.dtype = inputs[k].tensor.dtype;
    s.shape = inputs[k].tensor.shape;
    s.data = const_cast<std::uint8_t*>(inputs[k].tensor.data.data());  // kernels never write inputs
    s.ready = true;
  }
  for (std::uint32_t v = 0; v < count(g.values()); ++v) {
    const auto* val = g.values()->Get(v);
    if (val->kind() != fb::ValueKind::Constant) continue;
    const auto* c = p.constants()->Get(val->constant());
    Slot& s = slots[v];
    s.dtype = static_cast<DType>(c->dtype());
    if (c->shape() != nullptr) s.shape.assign(c->shape()->begin(), c->shape()->end());
    s.data = const_cast<std::uint8_t*>(program.bundle().constant_data(val->constant()).data());
    s.ready = true;
  }
  for (std::uint32_t n = 0; n < count(g.nodes()); ++n) {
    KILN_RETURN_IF_ERROR(run_node(g, n, slots));
    KILN_RETURN_IF_ERROR(check_asserts(g, n));
  }
  for (std::uint32_t k = 0; k < count(g.outputs()); ++k) {
    const auto* val = g.values()->Get(g.outputs()->Get(k));
    if (val->kind() == fb::ValueKind::SymInt) {
      auto v = eval(val->expr());
      if (!v.ok()) return v.status();
      result.outputs.push_back(HostValue::integer(*v));
      continue;
    }
    const Slot& s = slots[g.outputs()->Get(k)];
    HostTensor t;
    t.dtype = s.dtype;
    t.shape = s.shape;
    std::size_t n = dtype_size(s.dtype);
    for (std::int64_t d : s.shape) n *= static_cast<std::size_t>(d);
    t.data.assign(s.data, s.data + n);
    result.outputs.push_back(HostValue::of(std::move(t)));
  }
  return result;
}

}  // namespace kiln

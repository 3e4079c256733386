#include "trace/context.h"

#include <filesystem>

#include "kiln/export/symbolic/print.h"

namespace kiln::detail {
namespace {
thread_local TraceContext* g_trace = nullptr;


std::string bound_text(std::int64_t v) {
  if (v == sym::kPosInf) return "inf";
  if (v == sym::kNegInf) return "-inf";
  return std::to_string(v);
}
}  // namespace

TraceContext* current_trace() { return g_trace; }
void set_current_trace(TraceContext* ctx) { g_trace = ctx; }

std::string loc_text(const SourceLoc& loc) {
  return std::filesystem::path(loc.file_name()).filename().string() + ":" + std::to_string(loc.line());
}

ir::SourceLocation to_ir(const SourceLoc& loc) {
  return {std::filesystem::path(loc.file_name()).filename().string(), loc.line(), loc.column()};
}

void op_error(std::string_view op, const std::string& message, const SourceLoc& loc, StatusCode code) {
  throw ExportError(code, "[" + std::string(op) + "] " + message + " (" + loc_text(loc) + ")");
}

std::string TraceContext::symbol_text(sym::Expr e) const { return sym::to_string(e, &program.env); }

std::string TraceContext::describe_symbol(int s) const {
  auto it = policies.find(s);
  const std::string name = program.env.symbol(s).name;
  if (it == policies.end()) return name;
  const SymbolPolicy& p = it->second;
  if (!p.dim_name.empty()) return "Dim " + p.dim_name + " (" + p.source + " = " + name + ")";
  return p.source + " (" + name + ")";
}

void TraceContext::violation(const std::string& message, const SourceLoc& loc) const {
  throw ExportError(StatusCode::kExportError, "constraint violation: " + message + " [guard at " + loc_text(loc) + "]");
}

void TraceContext::add_input_assert(sym::Expr fact, const SourceLoc& loc) {
  // Guards are preconditions on the program's inputs, even when a subgraph made them.
  ir::Graph& entry = program.graphs[static_cast<std::size_t>(program.entry)];
  for (const ir::RuntimeAssert& a : entry.asserts) {
    if (a.expr == fact) return;
  }
  entry.asserts.push_back({fact, symbol_text(fact), -1, ir::NodeMeta{to_ir(loc), "", "guard"}});
}

void TraceContext::refine(int s, sym::ValueRange range, sym::Expr fact, const SourceLoc& loc) {
  const SymbolPolicy* p = policies.count(s) ? &policies.at(s) : nullptr;
  const sym::ValueRange current = env().symbol(s).range;
  if (range == current) return;
  if (p != nullptr && p->kind == Dim::Kind::kNamed) {
    std::string fix;
    if (range.is_point()) {
      fix = "your code specializes it to " + std::to_string(range.lo) + ": declare it Dim::STATIC, or avoid the guard";
    } else {
      fix = p->dim_name + " = Dim(\"" + p->dim_name + "\", min=" + bound_text(range.lo) +
            (range.hi == sym::kPosInf ? "" : ", max=" + bound_text(range.hi)) + ")";
    }
    violation("the code requires " + symbol_text(fact) + ", which narrows " + describe_symbol(s) + " from [" +
                  bound_text(current.lo) + ", " + bound_text(current.hi) + "] to [" + bound_text(range.lo) + ", " +
                  bound_text(range.hi) + "]. Suggested fix: " + fix,
              loc);
  }
  if (p != nullptr && p->kind == Dim::Kind::kDynamic && range.is_point()) {
    violation("you marked " + p->source + " as dynamic but your code specialized it to be a constant (" +
                  std::to_string(range.lo) + "). Use Dim::AUTO to allow that, or avoid the guard",
              loc);
  }
  Status st = env().constrain_range(s, range.lo, range.hi);
  if (st.ok() && range.is_point()) st = env().replace(s, sym::Expr::constant(range.lo));
  if (!st.ok()) throw ExportError(StatusCode::kExportError, st.message() + " (" + loc_text(loc) + ")");
  range_meta[s] = ir::NodeMeta{to_ir(loc), module_stack.empty() ? "" : module_stack.back(), "guard"};
}

namespace {

// `k*d + c` for the linear form `e` of one symbol `s` ("2*d", "d + 1"); "" when `e` is not one.
std::string as_derived_dim(sym::Expr e, int s) {
  const auto at = [&](std::int64_t v) { return sym::substitute(e, {{s, sym::Expr::constant(v)}}).constant_value(); };
  const auto c = at(0), one = at(1), two = at(2);
  if (!c || !one || !two || *two - *one != *one - *c || *one - *c <= 0) return "";
  const std::int64_t k = *one - *c;
  std::string out = (k == 1 ? "" : std::to_string(k) + "*") + "d";
  if (*c > 0) out += " + " + std::to_string(*c);
  if (*c < 0) out += " - " + std::to_string(-*c);
  return out;
}

}  // namespace

void TraceContext::check_relation(int replaced, sym::Expr replacement, const SourceLoc& loc) const {
  std::vector<int> involved = program.env.free_symbols(replacement);
  involved.push_back(replaced);
  bool named = false, dynamic = false;
  for (int s : involved) {
    auto it = policies.find(s);
    named = named || (it != policies.end() && it->second.kind == Dim::Kind::kNamed);
    dynamic = dynamic || (it != policies.end() && it->second.kind == Dim::Kind::kDynamic);
  }
  if (!named && !dynamic) return;  // AUTO dims take the relation: one symbol from now on
  std::string others;
  for (int o : involved) others += (others.empty() ? "" : " and ") + describe_symbol(o);
  const std::vector<int> base = program.env.free_symbols(replacement);
  const bool equal = replacement.is_symbol();
  const std::string relation =
      equal ? symbol_text(sym::Expr::symbol(std::min(replaced, replacement.symbol_id()))) + " == " +
                  symbol_text(sym::Expr::symbol(std::max(replaced, replacement.symbol_id())))
            : symbol_text(sym::Expr::symbol(replaced)) + " == " + symbol_text(replacement);
  const std::string what = "the values of " + others + (equal ? " must always be equal (" : " must always be related by ") +
                           relation + (equal ? ")" : "") + ", which the dynamic-shape spec does not declare. Suggested fix: ";
  if (named) violation(what + (equal ? "use the same Dim for both (b = a)" : "declare one as a derived Dim of the other (b = 2 * a)"), loc);
  // DYNAMIC: name one Dim for both sizes, written as the relation requires.
  const std::string derived = base.size() == 1 ? as_derived_dim(replacement, base[0]) : "";
  if (derived.empty()) violation(what + "declare the relation with a named Dim and derived dims, or use Dim::AUTO", loc);
  const auto source = [&](int s) { return policies.count(s) ? policies.at(s).source : symbol_text(sym::Expr::symbol(s)); };
  violation(what + "d = Dim(\"d\"); use d for " + source(base[0]) + (derived == "d" ? " and " : " and " + derived + " for ") +
                source(replaced) + ", or Dim::AUTO to let the export relate them",
            loc);
}

bool TraceContext::guard(sym::Expr e, const SourceLoc& loc) {
  e = env().simplify(e);
  if (auto known = env().statically_known(e)) return *known;
  for (int s : env().free_symbols(e)) {
    if (env().symbol(s).kind == sym::SymbolKind::Unbacked) {
      throw ExportError(StatusCode::kExportError,
                        "could not guard on data-dependent expression " + symbol_text(e) + " (" + loc_text(loc) +
                            "): its value is only known at run time. Use kiln::check(...) if it must hold, "
                            "guard_or_false/guard_or_true to pick a default, or kiln::cond(...) to branch on it");
    }
  }
  const auto hint = env().evaluate_with_hints(e);
  if (!hint) throw ExportError(StatusCode::kInternal, "guard without a hint: " + symbol_text(e));
  const bool value = *hint != 0;
  const sym::Expr fact = value ? e : sym::sym_not(e);
  const sym::GuardAnalysis a = env().analyze_guard(fact);
  const std::vector<sym::ValueRange> before = ranges();
  switch (a.kind) {
    case sym::GuardKind::AlwaysTrue: break;
    case sym::GuardKind::AlwaysFalse:
      throw ExportError(StatusCode::kInternal, "guard contradicts known facts: " + symbol_text(fact));
    case sym::GuardKind::Range: refine(a.symbol, a.range, fact, loc); break;
    case sym::GuardKind::Replacement: {
      if (auto c = a.replacement.constant_value()) {
        refine(a.symbol, sym::ValueRange::point(*c), fact, loc);
        break;
      }
      check_relation(a.symbol, a.replacement, loc);
      const Status st = env().replace(a.symbol, a.replacement);
      if (!st.ok()) throw ExportError(StatusCode::kExportError, st.message());
      add_input_assert(fact, loc);
      break;
    }
    case sym::GuardKind::Divisibility: {
      // Written as `s0 % 32 == 0` however the code put it (reshape's `s0 == 32*(s0//32)`).
      const sym::Expr multiple = sym::eq(sym::mod(sym::Expr::symbol(a.symbol), sym::Expr::constant(a.divisor)), sym::Expr::constant(0));
      auto it = policies.find(a.symbol);
      if (it != policies.end() && it->second.kind == Dim::Kind::kNamed) {
        const std::string& n = it->second.dim_name;
        violation("the code requires " + symbol_text(multiple) + " for " + describe_symbol(a.symbol) +
                      ", which the declared Dim does not guarantee. Suggested fix: declare it as a multiple: _" + n +
                      " = Dim(\"_" + n + "\"); " + n + " = " + std::to_string(a.divisor) + " * _" + n,
                  loc);
      }
      const Status st = env().add_divisibility(sym::Expr::symbol(a.symbol), a.divisor);
      if (!st.ok()) throw ExportError(StatusCode::kExportError, st.message());
      add_input_assert(multiple, loc);
      break;
    }
    case sym::GuardKind::Other: {
      const Status st = env().add_axiom(fact);
      if (!st.ok()) throw ExportError(StatusCode::kExportError, st.message());
      add_input_assert(fact, loc);
      break;
    }
  }
  note_narrowed(before, loc, "guard");
  return value;
}

std::vector<sym::ValueRange> TraceContext::ranges() const {
  std::vector<sym::ValueRange> out;
  for (std::size_t s = 0; s < program.env.num_symbols(); ++s) out.push_back(program.env.symbol(static_cast<int>(s)).range);
  return out;
}

void TraceContext::note_narrowed(const std::vector<sym::ValueRange>& before, const SourceLoc& loc, const char* what) {
  for (std::size_t s = 0; s < before.size(); ++s) {
    if (env().symbol(static_cast<int>(s)).range == before[s]) continue;
    range_meta[static_cast<int>(s)] = ir::NodeMeta{to_ir(loc), module_stack.empty() ? "" : module_stack.back(), what};
  }
}

void TraceContext::check(sym::Expr e, const SourceLoc& loc) {
  e = env().simplify(e);
  if (auto known = env().statically_known(e)) {
    if (*known) return;
    throw ExportError(StatusCode::kExportError, "check failed: " + symbol_text(e) + " is always false (" + loc_text(loc) + ")");
  }
  if (!frames.empty()) {
    // Inside a subgraph, a condition on symbols from outside it holds only when the subgraph
    // runs: it stays an assert of the subgraph and teaches the shape engine nothing.
    bool outer = false;
    for (int s : env().free_symbols(e)) outer = outer || static_cast<std::size_t>(s) < frames.back().symbol_mark;
    if (outer) {
      int after = -1;
      for (int s : env().free_symbols(e)) {
        auto it = binder.find(s);
        if (it != binder.end() && binding_graph(s) == graph_index) after = std::max(after, it->second);
      }
      graph().asserts.push_back({e, symbol_text(e), after, ir::NodeMeta{to_ir(loc), module_stack.empty() ? "" : module_stack.back(), "check"}});
      return;
    }
  }
  const sym::GuardAnalysis a = env().analyze_guard(e);
  if (a.kind == sym::GuardKind::Range && env().symbol(a.symbol).kind == sym::SymbolKind::Unbacked) {
    const auto before = env().symbol(a.symbol).range;
    const Status st = env().constrain_range(a.symbol, a.range.lo, a.range.hi);
    if (!st.ok()) throw ExportError(StatusCode::kExportError, st.message() + " (" + loc_text(loc) + ")");
    const auto after = env().symbol(a.symbol).range;
    const ir::NodeMeta where{to_ir(loc), module_stack.empty() ? "" : module_stack.back(), "check"};
    range_meta[a.symbol] = where;
    if (after.lo != before.lo) range_lo_meta[a.symbol] = where;  // this check raised the lower bound
    if (after.hi != before.hi) range_hi_meta[a.symbol] = where;
    return;  // range bounds of unbacked symbols become asserts when the export finishes
  }
  bool has_unbacked = false;
  int after = -1;
  for (int s : env().free_symbols(e)) {
    if (env().symbol(s).kind != sym::SymbolKind::Unbacked) continue;
    has_unbacked = true;
    auto it = binder.find(s);
    if (it != binder.end() && binding_graph(s) == graph_index) after = std::max(after, it->second);
  }
  if (!has_unbacked && a.kind == sym::GuardKind::Range) {
    refine(a.symbol, a.range, e, loc);
    return;
  }
  const std::vector<sym::ValueRange> before = ranges();
  const Status st = env().add_axiom(e);
  if (!st.ok()) throw ExportError(StatusCode::kExportError, st.message() + " (" + loc_text(loc) + ")");
  note_narrowed(before, loc, "check");
  graph().asserts.push_back({e, symbol_text(e), after, ir::NodeMeta{to_ir(loc), module_stack.empty() ? "" : module_stack.back(), "check"}});
}

int TraceContext::value_of(const Tensor& t) { return value_in(graph_index, t); }

SubgraphFrame* TraceContext::frame_of(int g) {
  for (SubgraphFrame& f : frames) {
    if (f.graph == g) return &f;
  }
  return nullptr;
}

void TraceContext::note_binding(int sym, int node) { binder[sym] = node; }

int TraceContext::binding_graph(int sym) const {
  for (std::size_t g = 0; g < program.graphs.size(); ++g) {
    for (const ir::UnbackedBinding& b : program.graphs[g].bindings) {
      if (b.symbol == sym) return static_cast<int>(g);
    }
  }
  return -1;
}

namespace {

// Small unnamed eager tensors (the 0-d constants operator expressions make from numbers) are
// embedded as constants even inside subgraphs, and stored once per value, so that two traces
// of one compile region compare equal.
bool is_scalar_constant(const TensorImpl& impl) { return impl.param_name.empty() && impl.shape.empty(); }

[[noreturn]] void leaked(const TensorImpl&) {
  throw ExportError(StatusCode::kExportError,
                    "a tensor traced inside a subgraph (a cond branch, a while_loop function or a compile region) was used "
                    "outside it: return it from the function instead of capturing it");
}

}  // namespace

int TraceContext::value_in(int g, const Tensor& t) {
  TensorImpl* impl = t.impl().get();
  if (impl->ctx != nullptr && impl->ctx != this) {
    throw ExportError(StatusCode::kExportError, "a tensor from another export_program call was used");
  }
  if (impl->ctx == this && impl->graph == g) return impl->value;
  if (impl->is_state() && g == program.entry) return state_of(t.impl()).current;
  SubgraphFrame* f = frame_of(g);
  if (impl->ctx == this) {
    // Only tensors of the graphs that (transitively) call `g` may be used in `g`.
    bool enclosing = false;
    for (SubgraphFrame* cur = f; cur != nullptr && !enclosing; cur = frame_of(cur->parent)) enclosing = cur->parent == impl->graph;
    if (!enclosing) leaked(*impl);
  } else if (!impl->is_state() && (f == nullptr || is_scalar_constant(*impl))) {
    return constant_in(g, t);
  }
  // A free tensor of an enclosing graph (a parameter, a state): lifted to an input of `g`.
  const int parent = f->parent;
  const int outer = value_in(parent, t);
  f = frame_of(g);
  for (const auto& [o, inner] : f->lifted) {
    if (o == outer) return inner;
  }
  const ir::Value pv = program.graphs[static_cast<std::size_t>(parent)].values[static_cast<std::size_t>(outer)];
  ir::Graph& graph = program.graphs[static_cast<std::size_t>(g)];
  const int v = graph.add_value({ir::ValueKind::kTensor, pv.dtype, pv.shape, {}, -1, pv.name});
  graph.inputs.push_back(v);
  f->lifted.emplace_back(outer, v);
  return v;
}

int TraceContext::constant_in(int g, const Tensor& t) {
  TensorImpl* impl = t.impl().get();
  int constant = -1;
  auto it = lifted.find(impl);
  if (it != lifted.end()) {
    constant = it->second;
  } else if (is_scalar_constant(*impl)) {
    for (std::size_t k = 0; k < program.constants.size() && constant < 0; ++k) {
      const ir::ConstantTensor& c = program.constants[k];
      if (c.shape.empty() && c.dtype == impl->dtype && c.name.rfind("_constant", 0) == 0 && *c.data == *impl->data) {
        constant = static_cast<int>(k);
      }
    }
  }
  if (constant < 0) {
    constant = static_cast<int>(program.constants.size());
    std::vector<std::int64_t> shape;
    for (const sym::Expr& d : impl->shape) shape.push_back(*d.constant_value());
    std::string name = impl->param_name.empty() ? "_constant" + std::to_string(constant) : impl->param_name;
    program.constants.push_back({name, impl->dtype, shape, impl->data});
  }
  if (!lifted.count(impl)) {
    lifted.emplace(impl, constant);
    lifted_alive.push_back(t.impl());
  }
  // One Constant value per constant per graph.
  ir::Graph& graph = program.graphs[static_cast<std::size_t>(g)];
  for (std::size_t v = 0; v < graph.values.size(); ++v) {
    const ir::Value& val = graph.values[v];
    if (val.kind == ir::ValueKind::kConstant && val.constant == constant) return static_cast<int>(v);
  }
  return graph.add_value({ir::ValueKind::kConstant, impl->dtype, impl->shape, {}, constant,
                          program.constants[static_cast<std::size_t>(constant)].name});
}

std::string describe_param(const TensorImpl& impl) {
  switch (impl.role) {
    case TensorImpl::Role::kParameter: return "parameter '" + impl.param_name + "'";
    case TensorImpl::Role::kBuffer: return "buffer '" + impl.param_name + "'";
    case TensorImpl::Role::kState: return "state '" + impl.param_name + "'";
    case TensorImpl::Role::kNone: break;
  }
  return impl.param_name.empty() ? std::string("a constant") : "'" + impl.param_name + "'";
}

TracedState& TraceContext::state_of(const std::shared_ptr<TensorImpl>& impl) {
  for (TracedState& s : states) {
    if (s.impl == impl) return s;
  }
  for (const TracedState& s : states) {
    if (s.impl->param_name == impl->param_name) {
      throw ExportError(StatusCode::kExportError, "two state tensors are named '" + impl->param_name +
                                                      "': register their modules (register_module) under distinct names");
    }
  }
  std::vector<std::int64_t> shape;
  for (const sym::Expr& d : impl->shape) shape.push_back(*d.constant_value());
  // A copy: running the model eagerly (its self-tests) updates the buffer's bytes.
  const int constant = static_cast<int>(program.constants.size());
  program.constants.push_back({impl->param_name, impl->dtype, shape, std::make_shared<const std::vector<std::uint8_t>>(*impl->data)});
  program.states.push_back({impl->param_name, impl->dtype, shape, constant});
  ir::Graph& entry = program.graphs[static_cast<std::size_t>(program.entry)];
  const int v = entry.add_value({ir::ValueKind::kTensor, impl->dtype, impl->shape, {}, -1, impl->param_name});
  entry.inputs.push_back(v);
  states.push_back({impl, static_cast<int>(program.states.size()) - 1, v, v});
  return states.back();
}

void TraceContext::update_state(const std::shared_ptr<TensorImpl>& impl, int value) { state_of(impl).current = value; }

void TraceContext::check_mutation(const Tensor& t, std::string_view op, const SourceLoc& loc) {
  if (frames.empty()) return;
  const SubgraphFrame& f = frames.back();
  const TensorImpl* impl = t.impl().get();
  const ir::Graph& g = program.graphs[static_cast<std::size_t>(f.graph)];
  bool local = impl->ctx == this && impl->graph == f.graph;
  if (local) {
    for (int in : g.inputs) local = local && in != impl->value;
  }
  if (local) return;
  std::string what = "a tensor it did not create";
  if (impl->ctx == this && impl->graph == f.graph) what = "its input " + g.values[static_cast<std::size_t>(impl->value)].name;
  else if (!impl->param_name.empty()) what = describe_param(*impl);
  else if (impl->ctx == this) what = "a tensor of the enclosing graph";
  throw ExportError(StatusCode::kExportError,
                    "[" + f.op + "] Higher order ops do not support input mutation. Found in " + f.op + ": " + f.role +
                        " updates " + what + " in place with " + std::string(op) + " (" + loc_text(loc) +
                        "). Compute a new tensor instead (y = x + 1 rather than x.add_(1))");
}

ir::NodeMeta TraceContext::meta(const SourceLoc& loc, std::string user_op, const std::vector<Tensor>& inputs) const {
  ir::NodeMeta m{to_ir(loc), "", std::move(user_op)};
  if (!module_stack.empty()) {
    m.module_path = module_stack.back();
  } else {
    for (const Tensor& t : inputs) {
      if (t.defined() && !t.impl()->module_path.empty()) {
        m.module_path = t.impl()->module_path;
        break;
      }
    }
  }
  return m;
}

Tensor TraceContext::make_tensor(int value) {
  auto impl = std::make_shared<TensorImpl>();
  const ir::Value& v = graph().values[static_cast<std::size_t>(value)];
  impl->dtype = v.dtype;
  impl->shape = v.shape;
  impl->ctx = this;
  impl->graph = graph_index;
  impl->value = value;
  return Tensor(impl);
}

std::vector<Tensor> TraceContext::add_node(OpKind op, const std::vector<Tensor>& inputs, std::vector<ir::Attr> attrs,
                                           const std::vector<OutSpec>& outs, const ir::NodeMeta& meta) {
  ir::Node node;
  node.op = op;
  node.attrs = std::move(attrs);
  node.meta = meta;
  for (const Tensor& t : inputs) {
    node.inputs.push_back(t.defined() ? value_of(t) : graph().add_value({ir::ValueKind::kNone, DType::kF32, {}, {}, -1, ""}));
  }
  std::vector<Tensor> results;
  for (const OutSpec& o : outs) {
    std::vector<sym::Expr> shape;
    for (const sym::Expr& d : o.shape) shape.push_back(env().simplify(d));
    const int v = graph().add_value({ir::ValueKind::kTensor, o.dtype, shape, {}, -1, ""});
    node.outputs.push_back(v);
  }
  graph().nodes.push_back(std::move(node));
  for (int v : graph().nodes.back().outputs) results.push_back(make_tensor(v));
  return results;
}

std::vector<Tensor> run_op(OpKind op, const std::vector<Tensor>& inputs, std::vector<ir::Attr> attrs,
                           const std::vector<OutSpec>& outs, const SourceLoc& loc, std::string user_op) {
  TraceContext* ctx = current_trace();
  bool traced = false, any_input = false;
  for (const Tensor& t : inputs) {
    if (!t.defined()) continue;
    any_input = true;
    traced = traced || t.is_traced();
  }
  if (ctx != nullptr && (traced || !any_input)) {
    return ctx->add_node(op, inputs, std::move(attrs), outs, ctx->meta(loc, std::move(user_op), inputs));
  }
  return run_eager(op, inputs, attrs, outs, loc);
}

}  // namespace kiln::detail

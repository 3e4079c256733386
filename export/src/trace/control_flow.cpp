// cond, while_loop and compile regions: nested tracers that turn functions into subgraphs,
// and the same functions run eagerly (control_flow.h). The calling convention produced
// here is docs/FORMAT.md, "Higher-order ops".
#include "kiln/export/control_flow.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <unordered_map>

#include "kiln/export/ops.h"
#include "kiln/export/symbolic/print.h"
#include "trace/context.h"

namespace kiln::detail {

void arity_error(const char* what, std::size_t want, std::size_t got) {
  throw ExportError(StatusCode::kUsage, std::string("[") + what + "] the function takes " + std::to_string(want) +
                                            " parameters but is called with " + std::to_string(got) + " operands");
}

void result_error(const std::string& message) {
  throw ExportError(StatusCode::kUsage, "[control flow] " + message + " of the function's declared return type");
}

namespace {

// ---------------------------------------------------------------------------------------
// Predicates

// The value of a predicate when it is known without running anything.
std::optional<bool> known_value(const Predicate& pred, const std::string& op, const SourceLoc& loc) {
  if (pred.is_tensor()) {
    const Tensor& t = pred.tensor();
    if (!t.defined()) op_error(op, "the predicate is an undefined tensor", loc);
    if (t.dtype() != DType::kBool) {
      op_error(op, "the predicate must be a bool tensor with one element, got " + std::string(dtype_name(t.dtype())) + " tensor", loc);
    }
    if (t.is_traced()) return std::nullopt;
    const auto& b = t.bytes();
    if (b.size() != 1) op_error(op, "the predicate must be a bool tensor with one element, got " + std::to_string(b.size()), loc);
    return b[0] != 0;
  }
  if (auto v = pred.symbool().maybe_bool()) return *v;
  if (TraceContext* ctx = current_trace()) return ctx->env().statically_known(pred.symbool().expr());
  throw ExportError(StatusCode::kInternal, "symbolic predicate outside a trace");
}

// The predicate as a value of the current graph: a 0-d bool tensor or a SymBool.
int predicate_value(TraceContext& ctx, const Predicate& pred, const std::string& op, const SourceLoc& loc) {
  if (!pred.is_tensor()) {
    return ctx.graph().add_value({ir::ValueKind::kSymBool, DType::kBool, {}, ctx.env().simplify(pred.symbool().expr()), -1, ""});
  }
  Tensor t = pred.tensor();
  if (t.dtype() != DType::kBool) {
    op_error(op, "the predicate must be a bool tensor with one element, got " + std::string(dtype_name(t.dtype())) + " tensor", loc);
  }
  for (std::int64_t d = 0; d < t.dim(); ++d) {
    if (ctx.env().simplify(t.impl()->shape[static_cast<std::size_t>(d)]).constant_value() != 1) {
      std::string shape;
      for (std::int64_t k = 0; k < t.dim(); ++k) shape += (k ? ", " : "") + ctx.symbol_text(t.impl()->shape[static_cast<std::size_t>(k)]);
      op_error(op, "the predicate must be a bool tensor with one element, got bool[" + shape + "]", loc);
    }
  }
  if (t.dim() > 0) t = reshape(t, {}, loc);
  return ctx.value_of(t);
}

bool eager_truth(const Predicate& pred, const std::string& op, const SourceLoc& loc) {
  const auto v = known_value(pred, op, loc);
  if (!v) throw ExportError(StatusCode::kInternal, "[" + op + "] a traced predicate outside a trace");
  return *v;
}

// ---------------------------------------------------------------------------------------
// Subgraph tracing

// One parameter of a subgraph.
struct Param {
  bool is_int = false;
  DType dtype = DType::kF32;
  std::vector<sym::Expr> shape;
  sym::Expr expr;
  std::string name;
};

// A traced subgraph.
struct Traced {
  int graph = -1;
  Values outputs;
  SubgraphFrame frame;
};

// Pushes a frame for a new graph; pops it (restoring the caller) when destroyed.
class FrameScope {
 public:
  FrameScope(TraceContext& ctx, const std::string& name, std::string op, std::string role, std::size_t symbol_mark)
      : ctx_(ctx), caller_(ctx.graph_index) {
    ctx.program.graphs.emplace_back();
    ctx.program.graphs.back().name = name;
    SubgraphFrame f;
    f.graph = static_cast<int>(ctx.program.graphs.size()) - 1;
    f.parent = caller_;
    f.symbol_mark = symbol_mark;
    f.op = std::move(op);
    f.role = std::move(role);
    ctx.frames.push_back(std::move(f));
    ctx.graph_index = ctx.frames.back().graph;
  }
  ~FrameScope() {
    if (open_) close();
  }
  FrameScope(const FrameScope&) = delete;
  FrameScope& operator=(const FrameScope&) = delete;
  SubgraphFrame close() {
    SubgraphFrame f = std::move(ctx_.frames.back());
    ctx_.frames.pop_back();
    ctx_.graph_index = caller_;
    open_ = false;
    return f;
  }

 private:
  TraceContext& ctx_;
  int caller_;
  bool open_ = true;
};

std::string next_name(TraceContext& ctx, const std::string& base) {
  const int k = ctx.subgraph_counts[base]++;
  return base + "_" + std::to_string(k);
}

bool is_input(const ir::Graph& g, int value) { return std::find(g.inputs.begin(), g.inputs.end(), value) != g.inputs.end(); }

Values add_inputs(TraceContext& ctx, const std::vector<Param>& params) {
  Values out;
  for (const Param& p : params) {
    ir::Graph& g = ctx.graph();
    if (p.is_int) {
      const int v = g.add_value({ir::ValueKind::kSymInt, DType::kI64, {}, p.expr, -1, p.name});
      g.inputs.push_back(v);
      out.emplace_back(SymInt(p.expr, SourceLoc::current(), /*user_loc=*/false));
    } else {
      const int v = g.add_value({ir::ValueKind::kTensor, p.dtype, p.shape, {}, -1, p.name});
      g.inputs.push_back(v);
      out.emplace_back(ctx.make_tensor(v));
    }
  }
  return out;
}

// Records `outs` as the current subgraph's outputs. A tensor the function did not compute
// itself (an input, a captured tensor, a parameter) would alias its source.
void set_outputs(TraceContext& ctx, const Values& outs, const SourceLoc& loc) {
  const SubgraphFrame& f = ctx.frames.back();
  for (std::size_t i = 0; i < outs.size(); ++i) {
    if (const SymInt* s = std::get_if<SymInt>(&outs[i])) {
      ir::Graph& g = ctx.graph();
      g.outputs.push_back(g.add_value({ir::ValueKind::kSymInt, DType::kI64, {}, ctx.env().simplify(s->expr()), -1, ""}));
      continue;
    }
    const Tensor& t = std::get<Tensor>(outs[i]);
    if (!t.defined()) op_error(f.op, f.role + " returns an undefined tensor as output " + std::to_string(i), loc);
    const TensorImpl& impl = *t.impl();
    const ir::Graph& g = ctx.graph();
    if (impl.ctx == &ctx && impl.graph == ctx.graph_index && !is_input(g, impl.value)) {
      ctx.graph().outputs.push_back(impl.value);
      continue;
    }
    std::string what = "a tensor it captured";
    if (impl.ctx == &ctx && impl.graph == ctx.graph_index) what = "its input " + g.values[static_cast<std::size_t>(impl.value)].name;
    else if (!impl.param_name.empty()) what = "parameter " + impl.param_name;
    else if (impl.ctx == nullptr) what = "a constant tensor";
    op_error(f.op, "Higher order ops do not support aliasing. Found in " + f.op + ": " + f.role + " returns " + what +
                       " as output " + std::to_string(i) + ". Replace `return input` with `return input.clone()` to avoid aliasing",
             loc);
  }
}

// Traces `body` (which calls the user's function and records outputs) into a new subgraph.
template <typename Body>
Traced trace_subgraph(TraceContext& ctx, const std::string& name, const std::string& op, const std::string& role,
                      const std::vector<Param>& params, std::size_t symbol_mark, Body&& body) {
  FrameScope scope(ctx, name, op, role, symbol_mark);
  Traced t;
  t.graph = ctx.graph_index;
  t.outputs = body(add_inputs(ctx, params));
  t.frame = scope.close();
  return t;
}

void collect(const sym::ShapeEnv& env, sym::Expr e, std::set<int>& out) {
  for (int s : env.free_symbols(e)) out.insert(s);
}

std::set<int> used_symbols(const sym::ShapeEnv& env, const ir::Graph& g) {
  std::set<int> out;
  for (const ir::Value& v : g.values) {
    for (const sym::Expr& d : v.shape) collect(env, d, out);
    if (v.kind == ir::ValueKind::kSymInt || v.kind == ir::ValueKind::kSymBool) collect(env, v.expr, out);
  }
  for (const ir::Node& n : g.nodes) {
    for (const ir::Attr& a : n.attrs) {
      if (const auto* e = std::get_if<sym::Expr>(&a)) collect(env, *e, out);
      if (const auto* es = std::get_if<std::vector<sym::Expr>>(&a)) for (const sym::Expr& e : *es) collect(env, e, out);
    }
  }
  for (const ir::RuntimeAssert& a : g.asserts) collect(env, a.expr, out);
  return out;
}

// Symbols a graph binds itself: bare symbols of its input shapes and SymInt inputs, and
// unbacked symbols its nodes bind.
std::set<int> bound_symbols(const sym::ShapeEnv& env, const ir::Graph& g) {
  std::set<int> out;
  for (int in : g.inputs) {
    const ir::Value& v = g.values[static_cast<std::size_t>(in)];
    for (const sym::Expr& d : v.shape) {
      const sym::Expr e = env.simplify(d);
      if (e.is_symbol()) out.insert(e.symbol_id());
    }
    if (v.kind == ir::ValueKind::kSymInt) {
      const sym::Expr e = env.simplify(v.expr);
      if (e.is_symbol()) out.insert(e.symbol_id());
    }
  }
  for (const ir::UnbackedBinding& b : g.bindings) out.insert(b.symbol);
  return out;
}

// What the calling node passes beyond the operands: lifted tensors (values of the caller)
// and lifted symbols.
struct Lifted {
  std::vector<int> tensors;
  std::vector<int> symbols;
};

// Gives the graphs of `group` (the two branches of a cond; the cond and body of a
// while_loop) one signature: [params..., lifted tensors..., lifted symbols...].
Lifted seal(TraceContext& ctx, const std::vector<Traced*>& group, std::size_t num_params) {
  Lifted lifted;
  for (const Traced* t : group) {
    for (const auto& [outer, inner] : t->frame.lifted) {
      if (std::find(lifted.tensors.begin(), lifted.tensors.end(), outer) == lifted.tensors.end()) lifted.tensors.push_back(outer);
    }
  }
  const ir::Graph& caller = ctx.graph();
  for (Traced* t : group) {
    ir::Graph& g = ctx.program.graphs[static_cast<std::size_t>(t->graph)];
    std::vector<int> inputs(g.inputs.begin(), g.inputs.begin() + static_cast<std::ptrdiff_t>(num_params));
    for (int outer : lifted.tensors) {
      int inner = -1;
      for (const auto& [o, i] : t->frame.lifted) if (o == outer) inner = i;
      if (inner < 0) {  // used by the other function of the group only
        const ir::Value& ov = caller.values[static_cast<std::size_t>(outer)];
        inner = g.add_value({ir::ValueKind::kTensor, ov.dtype, ov.shape, {}, -1, ov.name});
      }
      inputs.push_back(inner);
    }
    g.inputs = std::move(inputs);
  }
  std::set<int> free;
  for (const Traced* t : group) {
    const ir::Graph& g = ctx.program.graphs[static_cast<std::size_t>(t->graph)];
    const std::set<int> bound = bound_symbols(ctx.env(), g);
    for (int s : used_symbols(ctx.env(), g)) {
      if (!bound.count(s) && static_cast<std::size_t>(s) < t->frame.symbol_mark) free.insert(s);
    }
  }
  lifted.symbols.assign(free.begin(), free.end());
  for (Traced* t : group) {
    ir::Graph& g = ctx.program.graphs[static_cast<std::size_t>(t->graph)];
    for (int s : lifted.symbols) {
      g.inputs.push_back(g.add_value({ir::ValueKind::kSymInt, DType::kI64, {}, sym::Expr::symbol(s), -1, ctx.env().symbol(s).name}));
    }
  }
  return lifted;
}

// Operands as parameters of a subgraph, and as values of the caller.
std::vector<Param> params_of(TraceContext& ctx, const Values& operands, const std::string& op, const SourceLoc& loc,
                             std::vector<int>& caller_values) {
  std::vector<Param> params;
  for (std::size_t i = 0; i < operands.size(); ++i) {
    Param p;
    if (const SymInt* s = std::get_if<SymInt>(&operands[i])) {
      p.is_int = true;
      p.expr = ctx.env().simplify(s->expr());
      caller_values.push_back(ctx.graph().add_value({ir::ValueKind::kSymInt, DType::kI64, {}, p.expr, -1, ""}));
    } else {
      const Tensor& t = std::get<Tensor>(operands[i]);
      if (!t.defined()) op_error(op, "operand " + std::to_string(i) + " is an undefined tensor", loc);
      const int v = ctx.value_of(t);
      caller_values.push_back(v);
      const ir::Value& cv = ctx.graph().values[static_cast<std::size_t>(v)];
      p.dtype = cv.dtype;
      for (const sym::Expr& d : cv.shape) p.shape.push_back(ctx.env().simplify(d));
      p.name = cv.name;
    }
    if (p.name.empty()) p.name = "arg" + std::to_string(i);
    params.push_back(std::move(p));
  }
  return params;
}

bool mentions_local(const sym::ShapeEnv& env, sym::Expr e, std::size_t mark) {
  for (int s : env.free_symbols(e)) {
    if (static_cast<std::size_t>(s) >= mark) return true;
  }
  return false;
}

// A fresh unbacked symbol with range [lo, hi] for an output of the node being built.
sym::Expr fresh_symbol(TraceContext& ctx, bool is_size, sym::ValueRange range) {
  const int u = ctx.env().create_unbacked_symbol(is_size);
  const sym::ValueRange current = ctx.env().symbol(u).range;
  const std::int64_t lo = std::max(range.lo, current.lo), hi = std::min(range.hi, current.hi);
  if (lo <= hi && (lo != current.lo || hi != current.hi)) {
    const Status st = ctx.env().constrain_range(u, lo, hi);
    if (!st.ok()) throw ExportError(StatusCode::kInternal, st.message());
  }
  return sym::Expr::symbol(u);
}

// The node being recorded in the caller: its outputs and the unbacked symbols it binds.
struct NodeBuilder {
  std::vector<ir::Value> outputs;
  std::vector<ir::UnbackedBinding> bindings;  // node filled in by add()
  std::vector<int> bound;

  void bind_size(int u, int output, int dim) {
    bindings.push_back({u, -1, output, ir::UnbackedBinding::Kind::kSize, dim, 1});
    bound.push_back(u);
  }
  void bind_scalar(int u, int output) {
    bindings.push_back({u, -1, output, ir::UnbackedBinding::Kind::kScalar, 0, 1});
    bound.push_back(u);
  }

  Values add(TraceContext& ctx, OpKind op, std::vector<int> inputs, std::vector<ir::Attr> attrs, std::vector<int> subgraphs,
             const ir::NodeMeta& meta, const SourceLoc& loc) {
    ir::Graph& g = ctx.graph();
    ir::Node node;
    node.op = op;
    node.inputs = std::move(inputs);
    node.attrs = std::move(attrs);
    node.subgraphs = std::move(subgraphs);
    node.meta = meta;
    for (const ir::Value& v : outputs) node.outputs.push_back(g.add_value(v));
    const int n = static_cast<int>(g.nodes.size());
    g.nodes.push_back(std::move(node));
    for (ir::UnbackedBinding b : bindings) {
      b.node = n;
      g.bindings.push_back(b);
      ctx.note_binding(b.symbol, n);
      ctx.range_meta[b.symbol] = meta;
    }
    Values out;
    for (int v : g.nodes.back().outputs) {
      const ir::Value& val = g.values[static_cast<std::size_t>(v)];
      if (val.kind == ir::ValueKind::kSymInt) out.emplace_back(SymInt(val.expr, loc));
      else out.emplace_back(ctx.make_tensor(v));
    }
    return out;
  }
};

// The caller's view of one subgraph output: sizes (and ints) that mention symbols local to
// the subgraph become fresh unbacked symbols bound by the calling node.
void add_output(TraceContext& ctx, NodeBuilder& node, const ir::Value& v, std::size_t mark) {
  const int index = static_cast<int>(node.outputs.size());
  ir::Value out{v.kind, v.dtype, {}, {}, -1, ""};
  const sym::ShapeEnv& env = ctx.env();
  if (v.kind == ir::ValueKind::kSymInt) {
    out.expr = env.simplify(v.expr);
    if (mentions_local(env, out.expr, mark)) {
      out.expr = fresh_symbol(ctx, false, ctx.env().bound(out.expr));
      node.bind_scalar(out.expr.symbol_id(), index);
    }
  } else {
    for (std::size_t d = 0; d < v.shape.size(); ++d) {
      sym::Expr e = env.simplify(v.shape[d]);
      if (mentions_local(env, e, mark)) {
        e = fresh_symbol(ctx, true, ctx.env().bound(e));
        node.bind_size(e.symbol_id(), index, static_cast<int>(d));
      }
      out.shape.push_back(e);
    }
  }
  node.outputs.push_back(std::move(out));
}

std::string type_text(TraceContext& ctx, const ir::Value& v) {
  if (v.kind == ir::ValueKind::kSymInt) return "SymInt " + ctx.symbol_text(v.expr);
  std::string out = std::string(dtype_name(v.dtype)) + "[";
  for (std::size_t i = 0; i < v.shape.size(); ++i) out += (i ? ", " : "") + ctx.symbol_text(v.shape[i]);
  return out + "]";
}

const ir::Value& output_value(const TraceContext& ctx, int graph, std::size_t i) {
  const ir::Graph& g = ctx.program.graphs[static_cast<std::size_t>(graph)];
  return g.values[static_cast<std::size_t>(g.outputs[i])];
}

std::vector<int> concat(std::vector<int> a, const std::vector<int>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::vector<int> symbol_values(TraceContext& ctx, const std::vector<int>& symbols) {
  std::vector<int> out;
  for (int s : symbols) {
    out.push_back(ctx.graph().add_value({ir::ValueKind::kSymInt, DType::kI64, {}, sym::Expr::symbol(s), -1, ctx.env().symbol(s).name}));
  }
  return out;
}

std::vector<Tensor> tensors_of(const Values& vs) {
  std::vector<Tensor> out;
  for (const kiln::Value& v : vs) if (const Tensor* t = std::get_if<Tensor>(&v)) out.push_back(*t);
  return out;
}

// ---------------------------------------------------------------------------------------
// Structural equality of subgraphs (compile regions traced at several call sites)

// Symbols created while tracing `b` are renamed to the corresponding symbols of `a`'s trace
// (same creation order), so two traces of a region with data-dependent sizes compare equal.
using Rename = std::unordered_map<int, sym::Expr>;

bool same_expr(sym::Expr a, sym::Expr b, const Rename& rename) {
  return rename.empty() ? a == b : a == sym::substitute(b, rename);
}

bool same_exprs(const std::vector<sym::Expr>& a, const std::vector<sym::Expr>& b, const Rename& rename) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!same_expr(a[i], b[i], rename)) return false;
  }
  return true;
}

bool same_attr(const ir::Attr& a, const ir::Attr& b, const Rename& rename) {
  if (a.index() != b.index()) return false;
  if (const auto* e = std::get_if<sym::Expr>(&a)) return same_expr(*e, std::get<sym::Expr>(b), rename);
  if (const auto* es = std::get_if<std::vector<sym::Expr>>(&a)) return same_exprs(*es, std::get<std::vector<sym::Expr>>(b), rename);
  return a == b;
}

int renamed(int symbol, const Rename& rename) {
  auto it = rename.find(symbol);
  return it == rename.end() ? symbol : it->second.symbol_id();
}

bool same_graph(const ir::Program& p, int a, int b, const Rename& rename) {
  if (a == b) return true;
  const ir::Graph& x = p.graphs[static_cast<std::size_t>(a)];
  const ir::Graph& y = p.graphs[static_cast<std::size_t>(b)];
  if (x.values.size() != y.values.size() || x.nodes.size() != y.nodes.size() || x.inputs != y.inputs ||
      x.outputs != y.outputs || x.asserts.size() != y.asserts.size() || x.bindings.size() != y.bindings.size()) {
    return false;
  }
  for (std::size_t i = 0; i < x.values.size(); ++i) {
    const ir::Value& u = x.values[i];
    const ir::Value& v = y.values[i];
    if (u.kind != v.kind || u.dtype != v.dtype || !same_exprs(u.shape, v.shape, rename) || !same_expr(u.expr, v.expr, rename) ||
        u.constant != v.constant) {
      return false;
    }
  }
  for (std::size_t i = 0; i < x.nodes.size(); ++i) {
    const ir::Node& m = x.nodes[i];
    const ir::Node& n = y.nodes[i];
    if (m.op != n.op || m.inputs != n.inputs || m.outputs != n.outputs || m.attrs.size() != n.attrs.size() ||
        m.subgraphs.size() != n.subgraphs.size()) {
      return false;
    }
    for (std::size_t k = 0; k < m.attrs.size(); ++k) {
      if (!same_attr(m.attrs[k], n.attrs[k], rename)) return false;
    }
    for (std::size_t k = 0; k < m.subgraphs.size(); ++k) {
      if (!same_graph(p, m.subgraphs[k], n.subgraphs[k], rename)) return false;
    }
  }
  for (std::size_t i = 0; i < x.asserts.size(); ++i) {
    if (!same_expr(x.asserts[i].expr, y.asserts[i].expr, rename) || x.asserts[i].after_node != y.asserts[i].after_node) return false;
  }
  for (std::size_t i = 0; i < x.bindings.size(); ++i) {
    const ir::UnbackedBinding& c = x.bindings[i];
    const ir::UnbackedBinding& d = y.bindings[i];
    if (c.symbol != renamed(d.symbol, rename) || c.node != d.node || c.output != d.output || c.kind != d.kind || c.dim != d.dim ||
        c.divisor != d.divisor) {
      return false;
    }
  }
  return true;
}

// Whether the trace `r` (symbols [mark, end)) repeats the earlier trace `h`.
bool same_trace(const TraceContext& ctx, const TraceContext::RegionTrace& h, const TraceContext::RegionTrace& r) {
  if (h.symbol_end - h.symbol_mark != r.symbol_end - r.symbol_mark) return false;
  Rename rename;
  for (std::size_t k = 0; k < r.symbol_end - r.symbol_mark; ++k) {
    const int from = static_cast<int>(r.symbol_mark + k), to = static_cast<int>(h.symbol_mark + k);
    const sym::ShapeEnv& env = ctx.program.env;
    if (env.symbol(from).kind != env.symbol(to).kind || !(env.symbol(from).range == env.symbol(to).range)) {
      return false;
    }
    rename.emplace(from, sym::Expr::symbol(to));
  }
  return same_graph(ctx.program, h.graph, r.graph, rename);
}

}  // namespace

// ---------------------------------------------------------------------------------------
// cond

Values cond_impl(const Predicate& pred, const SubgraphFn& true_fn, const SubgraphFn& false_fn, const Values& operands,
                 const SourceLoc& loc) {
  if (auto known = known_value(pred, "cond", loc)) return *known ? true_fn(operands) : false_fn(operands);
  TraceContext* ctxp = current_trace();
  if (ctxp == nullptr) throw ExportError(StatusCode::kInternal, "[cond] a traced predicate outside a trace");
  TraceContext& ctx = *ctxp;
  const int pred_value = predicate_value(ctx, pred, "cond", loc);
  std::vector<int> operand_values;
  const std::vector<Param> params = params_of(ctx, operands, "cond", loc, operand_values);
  const std::size_t mark = ctx.env().num_symbols();
  const std::string base = next_name(ctx, "cond");
  auto branch = [&](const SubgraphFn& fn, const char* suffix, const char* role) {
    return trace_subgraph(ctx, base + suffix, "cond", role, params, mark, [&](const Values& in) {
      Values outs = fn(in);
      set_outputs(ctx, outs, loc);
      return outs;
    });
  };
  Traced t = branch(true_fn, "_true", "true_fn");
  Traced f = branch(false_fn, "_false", "false_fn");
  if (t.outputs.size() != f.outputs.size()) {
    op_error("cond", "true_fn and false_fn must return the same structure: true_fn returns " + std::to_string(t.outputs.size()) +
                         " values, false_fn " + std::to_string(f.outputs.size()), loc);
  }
  const Lifted lifted = seal(ctx, {&t, &f}, params.size());
  NodeBuilder node;
  for (std::size_t i = 0; i < t.outputs.size(); ++i) {
    const ir::Value& vt = output_value(ctx, t.graph, i);
    const ir::Value& vf = output_value(ctx, f.graph, i);
    const std::string both = "output " + std::to_string(i) + ": true_fn returns " + type_text(ctx, vt) + ", false_fn " + type_text(ctx, vf);
    if (vt.kind != vf.kind) op_error("cond", both + ": branches must return the same kinds (tensor or SymInt)", loc);
    if (vt.dtype != vf.dtype) op_error("cond", both + ": branches must return the same dtypes", loc);
    if (vt.shape.size() != vf.shape.size()) op_error("cond", both + ": branches must return the same ranks", loc);
    ir::Value merged = vt;
    const sym::ShapeEnv& env = ctx.env();
    // Equal sizes over the caller's symbols stay; any other becomes a fresh unbacked symbol
    // with the merged range, bound by the cond (PyTorch #148206).
    auto merge = [&](sym::Expr a, sym::Expr b, bool is_size) -> std::pair<sym::Expr, bool> {
      a = env.simplify(a);
      b = env.simplify(b);
      if (a == b && !mentions_local(env, a, mark)) return {a, false};
      const sym::ValueRange ra = env.bound(a), rb = env.bound(b);
      return {fresh_symbol(ctx, is_size, {std::min(ra.lo, rb.lo), std::max(ra.hi, rb.hi)}), true};
    };
    const int index = static_cast<int>(node.outputs.size());
    if (vt.kind == ir::ValueKind::kSymInt) {
      const auto [e, fresh] = merge(vt.expr, vf.expr, false);
      if (fresh) node.bind_scalar(e.symbol_id(), index);
      merged.expr = e;
    } else {
      for (std::size_t d = 0; d < vt.shape.size(); ++d) {
        const auto [e, fresh] = merge(vt.shape[d], vf.shape[d], true);
        if (fresh) node.bind_size(e.symbol_id(), index, static_cast<int>(d));
        merged.shape[d] = e;
      }
    }
    merged.name.clear();
    node.outputs.push_back(std::move(merged));
  }
  std::vector<int> inputs = concat(concat({pred_value}, operand_values), lifted.tensors);
  inputs = concat(inputs, symbol_values(ctx, lifted.symbols));
  return node.add(ctx, OpKind::Cond, std::move(inputs), {}, {t.graph, f.graph}, ctx.meta(loc, "cond", tensors_of(operands)), loc);
}

// ---------------------------------------------------------------------------------------
// while_loop

namespace {

Values eager_while(const PredicateFn& cond_fn, const SubgraphFn& body_fn, Values carries, const WhileLoopOptions& options,
                   const SourceLoc& loc) {
  const std::int64_t limit = options.max_iterations > 0 ? options.max_iterations : 1'000'000;
  for (std::int64_t it = 0;; ++it) {
    if (!eager_truth(cond_fn(carries), "while_loop", loc)) return carries;
    if (it == limit) {
      op_error("while_loop", "exceeded " + std::to_string(limit) + " iterations", loc, StatusCode::kInvalidInput);
    }
    Values next = body_fn(carries);
    if (next.size() != carries.size()) {
      op_error("while_loop", "body_fn returns " + std::to_string(next.size()) + " values for " + std::to_string(carries.size()) + " carries", loc);
    }
    carries = std::move(next);
  }
}

}  // namespace

Values while_loop_impl(const PredicateFn& cond_fn, const SubgraphFn& body_fn, const Values& carries,
                       const WhileLoopOptions& options, const SourceLoc& loc) {
  TraceContext* ctxp = current_trace();
  if (ctxp == nullptr) return eager_while(cond_fn, body_fn, carries, options, loc);
  TraceContext& ctx = *ctxp;
  std::vector<int> carry_values;
  std::vector<Param> params = params_of(ctx, carries, "while_loop", loc, carry_values);
  const std::size_t mark = ctx.env().num_symbols();
  for (Param& p : params) {
    if (p.is_int) p.expr = fresh_symbol(ctx, false, sym::ValueRange::unbounded());  // an int carry: any value
  }
  const std::string base = next_name(ctx, "while_loop");
  Traced c = trace_subgraph(ctx, base + "_cond", "while_loop", "cond_fn", params, mark, [&](const Values& in) {
    const Predicate p = cond_fn(in);
    if (p.is_tensor() && !p.tensor().defined()) op_error("while_loop", "cond_fn returns an undefined tensor", loc);
    const int v = predicate_value(ctx, p, "while_loop", loc);  // a read-only use: returning a carry is fine
    ctx.graph().outputs.push_back(v);
    return Values{};
  });
  Traced b = trace_subgraph(ctx, base + "_body", "while_loop", "body_fn", params, mark, [&](const Values& in) {
    Values outs = body_fn(in);
    if (outs.size() != params.size()) {
      op_error("while_loop", "body_fn must return the " + std::to_string(params.size()) + " carries, it returns " +
                                 std::to_string(outs.size()) + " values", loc);
    }
    set_outputs(ctx, outs, loc);
    const ir::Graph& g = ctx.graph();
    for (std::size_t i = 0; i < params.size(); ++i) {
      const ir::Value& out = g.values[static_cast<std::size_t>(g.outputs[i])];
      const ir::Value& in_v = g.values[static_cast<std::size_t>(g.inputs[i])];
      bool same = out.kind == in_v.kind && out.dtype == in_v.dtype && out.shape.size() == in_v.shape.size();
      for (std::size_t d = 0; same && d < out.shape.size(); ++d) {
        same = ctx.env().simplify(out.shape[d]) == ctx.env().simplify(in_v.shape[d]);
      }
      if (!same) {
        op_error("while_loop", "body_fn must return each carry with the metadata it entered with (carries keep their dtype and "
                               "shape across iterations): carry " + std::to_string(i) + " is " + type_text(ctx, in_v) +
                                   " but body_fn returns " + type_text(ctx, out), loc);
      }
    }
    return outs;
  });
  const Lifted lifted = seal(ctx, {&c, &b}, params.size());
  NodeBuilder node;
  for (std::size_t i = 0; i < params.size(); ++i) {
    const int index = static_cast<int>(node.outputs.size());
    if (params[i].is_int) {
      const sym::Expr u = fresh_symbol(ctx, false, sym::ValueRange::unbounded());
      node.outputs.push_back({ir::ValueKind::kSymInt, DType::kI64, {}, u, -1, ""});
      node.bind_scalar(u.symbol_id(), index);
    } else {
      node.outputs.push_back({ir::ValueKind::kTensor, params[i].dtype, params[i].shape, {}, -1, ""});
    }
  }
  std::vector<int> inputs = concat(carry_values, lifted.tensors);
  inputs = concat(inputs, symbol_values(ctx, lifted.symbols));
  std::vector<ir::Attr> attrs;
  attrs.emplace_back(options.max_iterations > 0 ? ir::Attr(std::int64_t{options.max_iterations}) : ir::Attr(std::monostate{}));
  return node.add(ctx, OpKind::WhileLoop, std::move(inputs), std::move(attrs), {c.graph, b.graph},
                  ctx.meta(loc, "while_loop", tensors_of(carries)), loc);
}

// ---------------------------------------------------------------------------------------
// Compile regions

Values invoke_region(const RegionState& region, const Values& operands, const SourceLoc& loc) {
  TraceContext* ctxp = current_trace();
  if (ctxp == nullptr) return region.fn(operands);
  TraceContext& ctx = *ctxp;
  std::vector<int> operand_values;
  std::vector<Param> params = params_of(ctx, operands, "invoke_subgraph", loc, operand_values);
  for (std::size_t i = 0; i < params.size(); ++i) params[i].name = "arg" + std::to_string(i);
  const std::size_t mark = ctx.env().num_symbols();
  const std::size_t graph_mark = ctx.program.graphs.size();
  Traced r = trace_subgraph(ctx, region.name, "invoke_subgraph", "compile region " + region.name, params, mark,
                            [&](const Values& in) {
                              Values outs = region.fn(in);
                              set_outputs(ctx, outs, loc);
                              return outs;
                            });
  const Lifted lifted = seal(ctx, {&r}, params.size());
  {
    ir::Graph& g = ctx.program.graphs[static_cast<std::size_t>(r.graph)];
    for (int in : g.inputs) g.values[static_cast<std::size_t>(in)].name.clear();  // named argK at finalize
  }
  const TraceContext::RegionTrace trace{r.graph, mark, ctx.env().num_symbols()};
  // The caller's outputs, taken before a duplicate trace is dropped.
  NodeBuilder node;
  for (std::size_t i = 0; i < r.outputs.size(); ++i) add_output(ctx, node, output_value(ctx, r.graph, i), mark);
  std::vector<TraceContext::RegionTrace>& known = ctx.regions[&region];
  int graph = r.graph;
  for (const TraceContext::RegionTrace& h : known) {
    if (same_trace(ctx, h, trace)) {
      graph = h.graph;
      break;
    }
  }
  if (graph != r.graph) {
    // The same subgraph again: drop this trace (and every graph traced inside it).
    ctx.program.graphs.resize(graph_mark);
    for (auto& [key, traces] : ctx.regions) {
      std::erase_if(traces, [&](const TraceContext::RegionTrace& t) { return static_cast<std::size_t>(t.graph) >= graph_mark; });
    }
  } else {
    known.push_back(trace);
    if (known.size() > 1) ctx.program.graphs[static_cast<std::size_t>(graph)].name = region.name + "_" + std::to_string(known.size() - 1);
  }
  const std::string identifier = ctx.program.graphs[static_cast<std::size_t>(graph)].name;
  std::vector<int> inputs = concat(operand_values, lifted.tensors);
  inputs = concat(inputs, symbol_values(ctx, lifted.symbols));
  return node.add(ctx, OpKind::InvokeSubgraph, std::move(inputs), {ir::Attr(identifier)}, {graph},
                  ctx.meta(loc, region.name, tensors_of(operands)), loc);
}

}  // namespace kiln::detail

#include "trace/finalize.h"

#include <algorithm>
#include <map>
#include <set>

#include "kiln/export/symbolic/parse.h"
#include "kiln/export/symbolic/print.h"

namespace kiln::detail {
namespace {

std::vector<sym::Expr> simplified(const std::vector<sym::Expr>& v, const sym::ShapeEnv& env) {
  std::vector<sym::Expr> out;
  out.reserve(v.size());
  for (const sym::Expr& e : v) out.push_back(env.simplify(e));
  return out;
}

void simplify_attrs(std::vector<ir::Attr>& attrs, const sym::ShapeEnv& env) {
  for (ir::Attr& a : attrs) {
    if (auto* e = std::get_if<sym::Expr>(&a)) *e = env.simplify(*e);
    if (auto* es = std::get_if<std::vector<sym::Expr>>(&a)) *es = simplified(*es, env);
  }
}

void add_unbacked_range_asserts(TraceContext& ctx) {
  for (const auto& [s, node] : ctx.binder) {
    const int graph = ctx.binding_graph(s);
    if (graph < 0) continue;
    ir::Graph& g = ctx.program.graphs[static_cast<std::size_t>(graph)];
    const sym::SymbolInfo& info = ctx.env().symbol(s);
    const sym::Expr u = sym::Expr::symbol(s);
    const ir::NodeMeta meta = ctx.range_meta.count(s) ? ctx.range_meta.at(s) : g.nodes[static_cast<std::size_t>(node)].meta;
    // Each bound points at the check that set it (`check(n >= 2)` and `check(n <= 10)` are
    // usually two lines).
    const ir::NodeMeta lo_meta = ctx.range_lo_meta.count(s) ? ctx.range_lo_meta.at(s) : meta;
    const ir::NodeMeta hi_meta = ctx.range_hi_meta.count(s) ? ctx.range_hi_meta.at(s) : meta;
    if (info.range.lo != sym::kNegInf) {
      const sym::Expr e = sym::ge(u, sym::Expr::constant(info.range.lo));
      g.asserts.push_back({e, info.name + " >= " + std::to_string(info.range.lo), node, lo_meta});
    }
    if (info.range.hi != sym::kPosInf) {
      const sym::Expr e = sym::le(u, sym::Expr::constant(info.range.hi));
      g.asserts.push_back({e, info.name + " <= " + std::to_string(info.range.hi), node, hi_meta});
    }
  }
  for (ir::Graph& g : ctx.program.graphs) {
    std::stable_sort(g.asserts.begin(), g.asserts.end(),
                     [](const ir::RuntimeAssert& a, const ir::RuntimeAssert& b) { return a.after_node < b.after_node; });
  }
}

void name_values(ir::Graph& g) {
  std::map<std::string, int> used;
  for (const ir::Value& v : g.values) if (!v.name.empty()) used[v.name]++;
  for (std::size_t k = 0; k < g.inputs.size(); ++k) {
    ir::Value& v = g.values[static_cast<std::size_t>(g.inputs[k])];
    if (v.name.empty()) v.name = "arg" + std::to_string(k) + (used["arg" + std::to_string(k)]++ ? "_" : "");
  }
  for (ir::Node& n : g.nodes) {
    for (int out : n.outputs) {
      ir::Value& v = g.values[static_cast<std::size_t>(out)];
      if (!v.name.empty()) continue;
      std::string base = n.meta.user_op.empty() ? std::string(op_name(n.op)) : n.meta.user_op;
      for (char& ch : base) if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
      const int k = used[base]++;
      v.name = k == 0 ? base : base + "_" + std::to_string(k);
    }
  }
}

void add_specializations(TraceContext& ctx, const std::vector<std::pair<const Dim*, int>>& named_dims) {
  ir::Program& p = ctx.program;
  for (const auto& [dim, s] : named_dims) {
    for (const std::string& text : dim->specializations()) {
      auto resolve = [&](std::string_view name) -> std::optional<int> {
        if (name == dim->name() || name == "d") return s;
        for (const auto& [other, os] : named_dims) if (other->name() == name) return os;
        return p.env.find_symbol(name);
      };
      auto pred = sym::parse_expr(text, resolve);
      if (!pred.ok()) throw ExportError(StatusCode::kUsage, "specialize_on(\"" + text + "\") for Dim " + dim->name() + ": " + pred.status().message());
      const sym::Expr e = p.env.simplify(*pred);
      if (!e.is_bool()) throw ExportError(StatusCode::kUsage, "specialize_on(\"" + text + "\"): not a condition");
      sym::ShapeEnv env = p.env;
      sym::ShapeEnv declared = ctx.declared_env.value_or(p.env);
      env.forget_hints();  // the example inputs need not satisfy the predicate
      declared.forget_hints();
      if (const Status st = env.add_axiom(e); !st.ok() || !declared.add_axiom(e).ok()) {
        throw ExportError(StatusCode::kExportError, "specialization \"" + text + "\" can never hold for Dim " + dim->name() +
                                                        " (range " + sym::to_string(p.env.symbol(s).range) + ")");
      }
      if (auto a = env.analyze_guard(e); a.kind == sym::GuardKind::Range && a.range.is_point()) {
        (void)env.replace(a.symbol, sym::Expr::constant(a.range.lo));
        (void)declared.replace(a.symbol, sym::Expr::constant(a.range.lo));
      }
      ir::Graph spec = p.graphs[static_cast<std::size_t>(p.entry)];
      spec.name = "main[" + sym::to_string(e, &p.env) + "]";
      simplify_graph(spec, env);
      prune_asserts(spec, declared);
      p.graphs.push_back(std::move(spec));
      p.specializations.push_back({text, e, static_cast<int>(p.graphs.size()) - 1});
    }
  }
}

}  // namespace

void simplify_graph(ir::Graph& g, const sym::ShapeEnv& env) {
  for (ir::Value& v : g.values) {
    v.shape = simplified(v.shape, env);
    if (v.kind == ir::ValueKind::kSymInt || v.kind == ir::ValueKind::kSymBool) v.expr = env.simplify(v.expr);
  }
  for (ir::Node& n : g.nodes) simplify_attrs(n.attrs, env);
}

void prune_asserts(ir::Graph& g, const sym::ShapeEnv& env) {
  std::vector<ir::RuntimeAssert> kept;
  for (ir::RuntimeAssert& a : g.asserts) {
    if (env.statically_known(a.expr) != true) kept.push_back(a);
  }
  g.asserts = std::move(kept);
}

// Nodes with the same op, inputs and attributes compute the same value: later ones are
// replaced by the first (and then removed by eliminate_dead_code). Control flow,
// data-dependent ops and nodes that bind symbols are left alone.
void eliminate_common_subexpressions(ir::Graph& g) {
  std::set<int> binding_nodes;
  for (const ir::UnbackedBinding& b : g.bindings) binding_nodes.insert(b.node);
  std::vector<int> replace(g.values.size());
  for (std::size_t v = 0; v < replace.size(); ++v) replace[v] = static_cast<int>(v);
  std::map<std::pair<int, std::vector<int>>, std::vector<std::size_t>> seen;
  for (std::size_t i = 0; i < g.nodes.size(); ++i) {
    ir::Node& n = g.nodes[i];
    for (int& in : n.inputs) in = replace[static_cast<std::size_t>(in)];
    const bool pure = n.subgraphs.empty() && !binding_nodes.count(static_cast<int>(i)) && !n.outputs.empty() &&
                      n.op != OpKind::Nonzero && n.op != OpKind::MaskedSelect && n.op != OpKind::Item &&
                      n.op != OpKind::Cond && n.op != OpKind::WhileLoop && n.op != OpKind::InvokeSubgraph;
    if (!pure) continue;
    auto& bucket = seen[{static_cast<int>(n.op), n.inputs}];
    bool merged = false;
    for (std::size_t j : bucket) {
      const ir::Node& m = g.nodes[j];
      if (m.attrs != n.attrs || m.outputs.size() != n.outputs.size()) continue;
      for (std::size_t k = 0; k < n.outputs.size(); ++k) replace[static_cast<std::size_t>(n.outputs[k])] = m.outputs[k];
      merged = true;
      break;
    }
    if (!merged) bucket.push_back(i);
  }
  for (int& out : g.outputs) out = replace[static_cast<std::size_t>(out)];
}

void eliminate_dead_code(ir::Graph& g) {
  std::vector<bool> live_value(g.values.size(), false);
  for (int v : g.outputs) live_value[static_cast<std::size_t>(v)] = true;
  std::set<int> binding_nodes;
  for (const ir::UnbackedBinding& b : g.bindings) binding_nodes.insert(b.node);
  std::vector<bool> live_node(g.nodes.size(), false);
  for (std::size_t i = g.nodes.size(); i-- > 0;) {
    const ir::Node& n = g.nodes[i];
    bool live = binding_nodes.count(static_cast<int>(i)) > 0;
    for (int o : n.outputs) live = live || live_value[static_cast<std::size_t>(o)];
    if (!live) continue;
    live_node[i] = true;
    for (int in : n.inputs) live_value[static_cast<std::size_t>(in)] = true;
  }
  std::vector<int> node_map(g.nodes.size(), -1);
  std::vector<ir::Node> nodes;
  for (std::size_t i = 0; i < g.nodes.size(); ++i) {
    if (!live_node[i]) continue;
    node_map[i] = static_cast<int>(nodes.size());
    nodes.push_back(std::move(g.nodes[i]));
  }
  for (int v : g.inputs) live_value[static_cast<std::size_t>(v)] = true;
  for (const ir::Node& n : nodes) for (int o : n.outputs) live_value[static_cast<std::size_t>(o)] = true;
  std::vector<int> value_map(g.values.size(), -1);
  std::vector<ir::Value> values;
  for (std::size_t v = 0; v < g.values.size(); ++v) {
    if (!live_value[v]) continue;
    value_map[v] = static_cast<int>(values.size());
    values.push_back(std::move(g.values[v]));
  }
  auto remap = [&](std::vector<int>& ids) { for (int& id : ids) id = value_map[static_cast<std::size_t>(id)]; };
  for (ir::Node& n : nodes) {
    remap(n.inputs);
    remap(n.outputs);
  }
  remap(g.inputs);
  remap(g.outputs);
  for (ir::UnbackedBinding& b : g.bindings) b.node = node_map[static_cast<std::size_t>(b.node)];
  for (ir::RuntimeAssert& a : g.asserts) {
    // An assert after a removed node moves to the last kept node before it.
    int after = a.after_node;
    while (after >= 0 && node_map[static_cast<std::size_t>(after)] < 0) --after;
    a.after_node = after < 0 ? -1 : node_map[static_cast<std::size_t>(after)];
  }
  g.nodes = std::move(nodes);
  g.values = std::move(values);
}

void finalize(TraceContext& ctx, const std::vector<std::pair<const Dim*, int>>& named_dims) {
  ir::Program& p = ctx.program;
  add_unbacked_range_asserts(ctx);
  for (ir::Graph& g : p.graphs) {  // the entry graph and the subgraphs of higher-order ops
    simplify_graph(g, p.env);
    eliminate_common_subexpressions(g);
    eliminate_dead_code(g);
    name_values(g);
  }
  for (ir::InputSpec& in : p.inputs) {
    in.shape = simplified(in.shape, p.env);
    if (in.is_int && in.dynamism != ir::Dynamism::kStatic) {
      in.expr = p.env.simplify(in.expr);
      if (auto c = in.expr.constant_value()) {  // an AUTO int that the code specialized
        in.dynamism = ir::Dynamism::kStatic;
        in.static_value = *c;
      }
    }
  }
  for (ir::OutputSpec& out : p.outputs) {
    out.shape = simplified(out.shape, p.env);
    out.expr = p.env.simplify(out.expr);
  }
  add_specializations(ctx, named_dims);
}

}  // namespace kiln::detail

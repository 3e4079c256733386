#include "trace/finalize.h"

#include <algorithm>
#include <optional>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <unordered_map>

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

// Backed symbols that a guard or check replaced (`s1 := s0` when `x + y` unifies two AUTO
// sizes) appear in no input once the input shapes are simplified: nothing at run time binds
// them. The asserts that still mention one (the guard's own `s0 == s1`) are rewritten with
// its replacement, which the input's dim (now `s0`) already checks; those that become true
// are dropped.
void rewrite_replaced_symbols(ir::Program& p) {
  std::set<int> bound;
  for (const ir::InputSpec& in : p.inputs) {
    for (const sym::Expr& d : in.shape) for (int s : sym::free_symbols(d)) bound.insert(s);
    if (in.is_int && in.dynamism != ir::Dynamism::kStatic) for (int s : sym::free_symbols(in.expr)) bound.insert(s);
  }
  std::unordered_map<int, sym::Expr> unbound;
  for (int s = 0; s < static_cast<int>(p.env.num_symbols()); ++s) {
    if (p.env.symbol(s).kind != sym::SymbolKind::Backed || bound.count(s)) continue;
    if (auto r = p.env.replacement(s)) unbound.emplace(s, *r);
  }
  if (unbound.empty()) return;
  for (ir::Graph& g : p.graphs) {
    std::vector<ir::RuntimeAssert> kept;
    for (ir::RuntimeAssert& a : g.asserts) {
      const sym::Expr e = sym::substitute(a.expr, unbound);
      if (e == a.expr) {
        kept.push_back(std::move(a));
      } else if (e.bool_value() != true) {
        a.expr = e;
        a.message = sym::to_string(e, &p.env);
        kept.push_back(std::move(a));
      }
    }
    g.asserts = std::move(kept);
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
    // Symbols `env` does not know (unbacked ones created while tracing, after `env` was
    // saved) have no declared facts to prove anything with: keep their asserts.
    bool known = true;
    for (int s : sym::free_symbols(a.expr)) known = known && env.is_valid_symbol(s);
    if (!known || env.statically_known(a.expr) != true) kept.push_back(a);
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

namespace {

// The f32 data of value v when it is a constant of that dtype (else null).
const ir::ConstantTensor* f32_constant(const ir::Program& p, const ir::Graph& g, int v) {
  const ir::Value& val = g.values[static_cast<std::size_t>(v)];
  if (val.kind != ir::ValueKind::kConstant || val.constant < 0) return nullptr;
  const ir::ConstantTensor& c = p.constants[static_cast<std::size_t>(val.constant)];
  return c.dtype == DType::kF32 && c.data != nullptr ? &c : nullptr;
}

std::vector<double> f32_values(const ir::ConstantTensor& c) {
  std::vector<float> f(c.data->size() / sizeof(float));
  std::memcpy(f.data(), c.data->data(), f.size() * sizeof(float));
  return {f.begin(), f.end()};
}

int add_f32_constant(ir::Program& p, ir::Graph& g, std::string name, std::vector<std::int64_t> shape,
                     const std::vector<double>& data) {
  std::vector<std::uint8_t> bytes(data.size() * sizeof(float));
  for (std::size_t i = 0; i < data.size(); ++i) {
    const float f = static_cast<float>(data[i]);
    std::memcpy(bytes.data() + i * sizeof(float), &f, sizeof(float));
  }
  ir::ConstantTensor c;
  c.name = std::move(name);
  c.dtype = DType::kF32;
  c.shape = shape;
  c.data = std::make_shared<const std::vector<std::uint8_t>>(std::move(bytes));
  p.constants.push_back(std::move(c));
  std::vector<sym::Expr> dims;
  for (std::int64_t d : shape) dims.push_back(sym::Expr::constant(d));
  return g.add_value({ir::ValueKind::kConstant, DType::kF32, std::move(dims), {},
                      static_cast<int>(p.constants.size()) - 1, p.constants.back().name});
}

// Where a conv output's channel dim (dim 1) lands after `chain` (reshape / permute nodes,
// the last applied first in the list): -1 when a reshape merges or splits it. A reshape
// keeps it when the dims from the channel on are the same before and after (only leading
// dims change: [N*D, O, H, W] -> [N, D, O, H, W]) or when the dims up to and including it
// are (only trailing dims change: [N, O, D, H*W] -> [N, O, D, H, W]).
int channel_dim_through(const ir::Graph& g, const std::vector<int>& chain) {
  std::int64_t c = 1;
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    const ir::Node& n = g.nodes[static_cast<std::size_t>(*it)];
    const auto& in = g.values[static_cast<std::size_t>(n.inputs[0])].shape;
    const auto& out = g.values[static_cast<std::size_t>(n.outputs[0])].shape;
    if (c < 0 || c >= static_cast<std::int64_t>(in.size())) return -1;
    if (n.op == OpKind::Permute) {
      const auto* perm = n.attrs.empty() ? nullptr : std::get_if<std::vector<std::int64_t>>(&n.attrs[0]);
      if (perm == nullptr) return -1;
      const auto at = std::find(perm->begin(), perm->end(), c);
      if (at == perm->end()) return -1;
      c = at - perm->begin();
      continue;
    }
    const auto uc = static_cast<std::size_t>(c);
    const bool same_head = out.size() > uc && std::equal(in.begin(), in.begin() + c + 1, out.begin());
    const std::size_t tail = in.size() - uc;  // dims from the channel on
    const bool same_tail = out.size() >= tail && std::equal(in.begin() + c, in.end(), out.end() - static_cast<std::ptrdiff_t>(tail));
    if (same_head) continue;
    if (!same_tail) return -1;
    c = static_cast<std::int64_t>(out.size() - tail);
  }
  return static_cast<int>(c);
}

}  // namespace

int fold_batch_norms(ir::Program& p, ir::Graph& g) {
  std::vector<int> uses(g.values.size(), 0), producer(g.values.size(), -1);
  for (std::size_t i = 0; i < g.nodes.size(); ++i) {
    for (int in : g.nodes[i].inputs) ++uses[static_cast<std::size_t>(in)];
    for (int out : g.nodes[i].outputs) producer[static_cast<std::size_t>(out)] = static_cast<int>(i);
  }
  for (int out : g.outputs) ++uses[static_cast<std::size_t>(out)];
  // References to each constant from every graph and state: a replaced conv weight nothing
  // else refers to has its bytes released at once (eliminate_dead_code and
  // drop_unused_constants remove it later), so a model's conv weights are not held twice.
  std::vector<int> refs(p.constants.size(), 0);
  for (const ir::Graph& h : p.graphs) {
    for (const ir::Value& v : h.values) if (v.kind == ir::ValueKind::kConstant && v.constant >= 0) ++refs[static_cast<std::size_t>(v.constant)];
  }
  for (const ir::StateSpec& st : p.states) if (st.initial >= 0) ++refs[static_cast<std::size_t>(st.initial)];
  int folded = 0;
  for (ir::Node& bn : g.nodes) {
    if (bn.op != OpKind::BatchNorm || bn.inputs.size() != 5 || bn.outputs.size() != 1 || bn.attrs.empty()) continue;
    const int x = bn.inputs[0];
    // The conv, directly or through reshapes and permutes (each read once) that carry its
    // output channels to the batch norm's dim 1: a 3-D convolution's decomposition,
    // [N, O, D, H*W] -> [N, O, D, H, W], or [N*D, O, H, W] -> [N, D, O, H, W] -> permute.
    std::vector<int> chain;  // the reshape / permute nodes, from the batch norm back
    int pi = producer[static_cast<std::size_t>(x)];
    int v = x;
    while (pi >= 0 && uses[static_cast<std::size_t>(v)] == 1) {
      const ir::Node& n = g.nodes[static_cast<std::size_t>(pi)];
      if ((n.op != OpKind::Reshape && n.op != OpKind::Permute) || n.outputs.size() != 1 || n.inputs.empty()) break;
      chain.push_back(pi);
      v = n.inputs[0];
      pi = producer[static_cast<std::size_t>(v)];
    }
    if (pi < 0 || uses[static_cast<std::size_t>(v)] != 1) continue;
    ir::Node& conv = g.nodes[static_cast<std::size_t>(pi)];
    if (conv.op != OpKind::Conv2d || conv.outputs.size() != 1) continue;
    if (!chain.empty() && channel_dim_through(g, chain) != 1) continue;
    const ir::ConstantTensor* w = f32_constant(p, g, conv.inputs[1]);
    const bool has_bias = conv.inputs.size() > 2 && g.values[static_cast<std::size_t>(conv.inputs[2])].kind != ir::ValueKind::kNone;
    const ir::ConstantTensor* b = has_bias ? f32_constant(p, g, conv.inputs[2]) : nullptr;
    const ir::ConstantTensor* mean = f32_constant(p, g, bn.inputs[3]);
    const ir::ConstantTensor* var = f32_constant(p, g, bn.inputs[4]);
    auto optional = [&](int v, const ir::ConstantTensor*& out) {
      out = nullptr;
      if (g.values[static_cast<std::size_t>(v)].kind == ir::ValueKind::kNone) return true;
      out = f32_constant(p, g, v);
      return out != nullptr;
    };
    const ir::ConstantTensor *gamma = nullptr, *beta = nullptr;
    if (w == nullptr || (has_bias && b == nullptr) || mean == nullptr || var == nullptr ||
        !optional(bn.inputs[1], gamma) || !optional(bn.inputs[2], beta) || w->shape.empty()) {
      continue;
    }
    const std::int64_t out_channels = w->shape[0];
    const auto per_channel = [&](const ir::ConstantTensor* c) {
      return c == nullptr || (c->shape.size() == 1 && c->shape[0] == out_channels);
    };
    if (!per_channel(b) || !per_channel(mean) || !per_channel(var) || !per_channel(gamma) || !per_channel(beta)) continue;
    const double* eps = std::get_if<double>(&bn.attrs[0]);
    if (eps == nullptr) continue;
    // s = gamma / sqrt(var + eps); w' = w * s; b' = (b - mean) * s + beta, in double.
    const std::vector<double> mv = f32_values(*mean), vv = f32_values(*var);
    const std::vector<double> gv = gamma ? f32_values(*gamma) : std::vector<double>(mv.size(), 1.0);
    const std::vector<double> bv = beta ? f32_values(*beta) : std::vector<double>(mv.size(), 0.0);
    const std::vector<double> cb = b ? f32_values(*b) : std::vector<double>(mv.size(), 0.0);
    std::vector<double> wv = f32_values(*w);
    const std::size_t per_out = wv.size() / static_cast<std::size_t>(out_channels);
    std::vector<double> nb(mv.size());
    for (std::size_t o = 0; o < mv.size(); ++o) {
      const double scale = gv[o] / std::sqrt(vv[o] + *eps);
      for (std::size_t k = 0; k < per_out; ++k) wv[o * per_out + k] *= scale;
      nb[o] = (cb[o] - mv[o]) * scale + bv[o];
    }
    // Names: the conv's weight/bias with the batch norm's module appended, e.g.
    // "layer1.conv.weight+layer1.bn" from "layer1.bn.running_mean".
    std::string bn_name = mean->name;
    if (const std::size_t dot = bn_name.rfind(".running_mean"); dot != std::string::npos && dot > 0) bn_name.resize(dot);
    std::string conv_name = w->name;
    if (conv_name.size() > 7 && conv_name.ends_with(".weight")) conv_name.resize(conv_name.size() - 7);
    const std::vector<std::int64_t> wshape = w->shape;
    const int old_w = conv.inputs[1];
    const int new_w = add_f32_constant(p, g, w->name + "+" + bn_name, wshape, wv);
    const int new_b = add_f32_constant(p, g, conv_name + ".bias+" + bn_name, {out_channels}, nb);
    const auto old_constant = static_cast<std::size_t>(g.values[static_cast<std::size_t>(old_w)].constant);
    if (uses[static_cast<std::size_t>(old_w)] == 1 && old_constant < refs.size() && refs[old_constant] == 1) {
      p.constants[old_constant].data.reset();
    }
    conv.inputs.resize(3);
    conv.inputs[1] = new_w;
    conv.inputs[2] = new_b;
    // The conv (or the last reshape / permute after it) now yields the batch_norm's value;
    // the batch_norm yields the old, unused one.
    ir::Node& last = chain.empty() ? conv : g.nodes[static_cast<std::size_t>(chain.front())];
    last.outputs[0] = bn.outputs[0];
    bn.outputs[0] = x;
    bn.inputs.clear();
    ++folded;
  }
  return folded;
}

namespace {

std::optional<std::int64_t> static_dim(const sym::Expr& e) { return e.constant_value(); }

const std::vector<std::int64_t>* ints_attr(const ir::Node& n, std::size_t i) {
  return n.attrs.size() > i ? std::get_if<std::vector<std::int64_t>>(&n.attrs[i]) : nullptr;
}

std::vector<sym::Expr> exprs(std::initializer_list<std::int64_t> dims) {
  std::vector<sym::Expr> out;
  for (std::int64_t d : dims) out.push_back(sym::Expr::constant(d));
  return out;
}

}  // namespace

int phase_split_dilated_convs(ir::Graph& g) {
  std::vector<ir::Node> nodes;
  nodes.reserve(g.nodes.size());
  int split = 0;
  for (ir::Node& conv : g.nodes) {
    // Qualifies: a static [N, C, H, W] f32 input, a constant [O, C, 3, 3] weight, stride 1,
    // dilation 2 <= d <= 256 in both dims, padding d ("same"), one group, >= 64 channels in and out,
    // H and W multiples of d with phases of at least 4 x 4.
    auto keep = [&] { nodes.push_back(std::move(conv)); };
    if (conv.op != OpKind::Conv2d || conv.inputs.size() < 2 || conv.outputs.size() != 1 || conv.attrs.size() < 4) {
      keep();
      continue;
    }
    const ir::Value& x = g.values[static_cast<std::size_t>(conv.inputs[0])];
    const ir::Value& w = g.values[static_cast<std::size_t>(conv.inputs[1])];
    const auto* stride = ints_attr(conv, 0);
    const auto* padding = ints_attr(conv, 1);
    const auto* dilation = ints_attr(conv, 2);
    const auto* groups = std::get_if<std::int64_t>(&conv.attrs[3]);
    if (x.kind != ir::ValueKind::kTensor || x.dtype != DType::kF32 || x.shape.size() != 4 || w.kind != ir::ValueKind::kConstant ||
        w.shape.size() != 4 || stride == nullptr || padding == nullptr || dilation == nullptr || groups == nullptr ||
        *groups != 1 || stride->size() != 2 || padding->size() != 2 || dilation->size() != 2) {
      keep();
      continue;
    }
    const std::int64_t d = (*dilation)[0];
    const auto n = static_dim(x.shape[0]), c = static_dim(x.shape[1]), h = static_dim(x.shape[2]), wd = static_dim(x.shape[3]);
    const auto o = static_dim(w.shape[0]), kh = static_dim(w.shape[2]), kw = static_dim(w.shape[3]);
    // (d <= 256 and N <= 2^20 keep d * d * N far from overflowing on a hostile archive's sizes.)
    if (d < 2 || d > 256 || (*dilation)[1] != d || (*stride)[0] != 1 || (*stride)[1] != 1 || (*padding)[0] != d || (*padding)[1] != d ||
        !n || !c || !h || !wd || !o || !kh || !kw || *kh != 3 || *kw != 3 || *c < 64 || *o < 64 || *h % d != 0 ||
        *wd % d != 0 || *h / d < 4 || *wd / d < 4 || *n < 1 || *n > (std::int64_t{1} << 20)) {
      keep();
      continue;
    }
    const std::int64_t hp = *h / d, wp = *wd / d, batch = d * d * *n;
    const int out = conv.outputs[0];
    auto value = [&](std::vector<sym::Expr> shape) {
      return g.add_value({ir::ValueKind::kTensor, DType::kF32, std::move(shape), {}, -1, ""});
    };
    const ir::NodeMeta meta = conv.meta;
    auto add = [&](OpKind op, int in, int result, ir::Attr attr) {
      ir::Node node;
      node.op = op;
      node.inputs = {in};
      node.outputs = {result};
      node.attrs = {std::move(attr)};
      node.meta = meta;
      nodes.push_back(std::move(node));
    };
    // x [N, C, H, W] -> [N, C, Hp, d, Wp, d] -> [d, d, N, C, Hp, Wp] -> [d*d*N, C, Hp, Wp]:
    // phase (r, s) holds x[.., r + d*i, s + d*j].
    const int a = value(exprs({*n, *c, hp, d, wp, d}));
    add(OpKind::Reshape, conv.inputs[0], a, exprs({*n, *c, hp, d, wp, d}));
    const int b = value(exprs({d, d, *n, *c, hp, wp}));
    add(OpKind::Permute, a, b, std::vector<std::int64_t>{3, 5, 0, 1, 2, 4});
    const int phases = value(exprs({batch, *c, hp, wp}));
    add(OpKind::Reshape, b, phases, exprs({batch, *c, hp, wp}));
    // The same 3x3 kernel, undilated, over every phase: y[r + d*i] = sum_k w[k] x[r + d*(i + k - 1)].
    const int y = value(exprs({batch, *o, hp, wp}));
    conv.inputs[0] = phases;
    conv.outputs[0] = y;
    conv.attrs[1] = std::vector<std::int64_t>{1, 1};
    conv.attrs[2] = std::vector<std::int64_t>{1, 1};
    nodes.push_back(std::move(conv));
    // And back: [d*d*N, O, Hp, Wp] -> [d, d, N, O, Hp, Wp] -> [N, O, Hp, d, Wp, d] -> [N, O, H, W].
    const int e = value(exprs({d, d, *n, *o, hp, wp}));
    add(OpKind::Reshape, y, e, exprs({d, d, *n, *o, hp, wp}));
    const int f = value(exprs({*n, *o, hp, d, wp, d}));
    add(OpKind::Permute, e, f, std::vector<std::int64_t>{2, 3, 4, 0, 5, 1});
    add(OpKind::Reshape, f, out, exprs({*n, *o, *h, *wd}));
    ++split;
  }
  g.nodes = std::move(nodes);
  return split;
}

void drop_unused_constants(ir::Program& p) {
  std::vector<int> remap(p.constants.size(), -1);
  for (const ir::Graph& g : p.graphs) {
    for (const ir::Value& v : g.values) {
      if (v.kind == ir::ValueKind::kConstant && v.constant >= 0) remap[static_cast<std::size_t>(v.constant)] = 0;
    }
  }
  for (const ir::StateSpec& st : p.states) {  // a state's initial value
    if (st.initial >= 0) remap[static_cast<std::size_t>(st.initial)] = 0;
  }
  std::vector<ir::ConstantTensor> kept;
  for (std::size_t i = 0; i < p.constants.size(); ++i) {
    if (remap[i] < 0) continue;
    remap[i] = static_cast<int>(kept.size());
    kept.push_back(std::move(p.constants[i]));
  }
  p.constants = std::move(kept);
  for (ir::Graph& g : p.graphs) {
    for (ir::Value& v : g.values) {
      if (v.kind == ir::ValueKind::kConstant && v.constant >= 0) v.constant = remap[static_cast<std::size_t>(v.constant)];
    }
  }
  for (ir::StateSpec& st : p.states) {
    if (st.initial >= 0) st.initial = remap[static_cast<std::size_t>(st.initial)];
  }
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
  int folded = 0;
  for (ir::Graph& g : p.graphs) {  // the entry graph and the subgraphs of higher-order ops
    simplify_graph(g, p.env);
    eliminate_common_subexpressions(g);
    folded += fold_batch_norms(p, g);
    phase_split_dilated_convs(g);
    eliminate_dead_code(g);
    name_values(g);
  }
  if (folded > 0) drop_unused_constants(p);
  for (ir::InputSpec& in : p.inputs) {
    in.shape = simplified(in.shape, p.env);
    if (in.is_int && in.dynamism != ir::Dynamism::kStatic) {
      // An int related to other sizes (`n := s0`) keeps its own symbol: the runtime binds it
      // from the input and the guard's assert (`s0 == s1`) checks the relation.
      if (auto c = p.env.simplify(in.expr).constant_value()) {  // an AUTO int that the code specialized
        in.dynamism = ir::Dynamism::kStatic;
        in.static_value = *c;
      }
    }
  }
  rewrite_replaced_symbols(p);
  p.range_origins.insert(ctx.range_meta.begin(), ctx.range_meta.end());
  for (ir::OutputSpec& out : p.outputs) {
    out.shape = simplified(out.shape, p.env);
    out.expr = p.env.simplify(out.expr);
  }
  add_specializations(ctx, named_dims);
}

}  // namespace kiln::detail

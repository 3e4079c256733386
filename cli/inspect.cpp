// kiln inspect BUNDLE [--graph] [--json] [--dot [FILE]]
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "commands.h"
#include "kiln/format/dtype.h"
#include "kiln/format/fb_count.h"
#include "kiln/format/kiln_generated.h"
#include "kiln/format/ops.h"
#include "kiln/runtime/bundle.h"
#include "kiln/runtime/expr.h"
#include "kiln/runtime/file_io.h"

namespace kiln::cli {
namespace {

using json = nlohmann::ordered_json;

std::string str(const flatbuffers::String* s) { return s == nullptr ? std::string() : s->str(); }

std::string bound_text(std::int64_t v) {
  if (v == INT64_MIN) return "-inf";
  if (v == INT64_MAX) return "inf";
  return std::to_string(v);
}

std::string hex(std::uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%016" PRIx64, v);
  return buf;
}

std::string dtype_text(fb::DType d) { return std::string(dtype_name(static_cast<DType>(d))); }

std::string shape_text(const fb::Program& p, fb::DType dtype, const flatbuffers::Vector<std::uint32_t>* shape) {
  std::vector<std::uint32_t> dims;
  for (std::uint32_t i = 0; i < count(shape); ++i) dims.push_back(shape->Get(i));
  return shape_to_string(p, dtype_name(static_cast<DType>(dtype)), dims);
}

// "model.cpp:41 (fc)" for a 1-based debug id, "" when absent or stripped.
std::string location(const fb::Program& p, std::uint32_t debug) {
  const DebugLocation d = debug_location(p, debug);
  return d.module.empty() ? d.file_line : d.file_line + " (" + d.module + ")";
}

std::string value_text(const fb::Program& p, const fb::Graph& g, std::uint32_t id) {
  const auto* v = g.values()->Get(id);
  switch (v->kind()) {
    case fb::ValueKind::Tensor:
    case fb::ValueKind::Constant: return shape_text(p, v->dtype(), v->shape());
    case fb::ValueKind::SymInt:
    case fb::ValueKind::SymBool: return "Sym(" + expr_to_string(p, v->expr()) + ")";
    default: return "None";
  }
}

std::string value_name(const fb::Graph& g, std::uint32_t id) {
  const auto* v = g.values()->Get(id);
  if (v->kind() == fb::ValueKind::None) return "None";
  const std::string n = str(v->name());
  return n.empty() ? "%" + std::to_string(id) : n;
}

json input_json(const fb::Program& p, const fb::InputSpec& in) {
  json j{{"name", str(in.name())}};
  if (in.kind() == fb::InputKind::Tensor) {
    j["kind"] = "tensor";
    j["dtype"] = dtype_text(in.dtype());
    json dims = json::array();
    for (std::uint32_t d = 0; d < count(in.shape()); ++d) dims.push_back(expr_to_string(p, in.shape()->Get(d)));
    j["shape"] = dims;
  } else {
    j["kind"] = "int";
    j["dynamism"] = fb::EnumNameDynamism(in.dynamism());
    if (in.dynamism() == fb::Dynamism::Static) j["value"] = in.static_value();
    else j["expr"] = expr_to_string(p, in.expr());
  }
  return j;
}

json output_json(const fb::Program& p, const fb::OutputSpec& out) {
  json j{{"name", str(out.name())}};
  if (out.kind() == fb::InputKind::Tensor) {
    j["kind"] = "tensor";
    j["dtype"] = dtype_text(out.dtype());
    json dims = json::array();
    for (std::uint32_t d = 0; d < count(out.shape()); ++d) dims.push_back(expr_to_string(p, out.shape()->Get(d)));
    j["shape"] = dims;
  } else {
    j["kind"] = "int";
    j["expr"] = expr_to_string(p, out.expr());
  }
  return j;
}

json node_json(const fb::Program& p, const fb::Graph& g, std::uint32_t n) {
  const auto* node = g.nodes()->Get(n);
  json j{{"op", str(p.op_names()->Get(node->op()))}};
  json ins = json::array(), outs = json::array();
  for (std::uint32_t k = 0; k < count(node->inputs()); ++k) ins.push_back(value_name(g, node->inputs()->Get(k)));
  for (std::uint32_t k = 0; k < count(node->outputs()); ++k) {
    const std::uint32_t v = node->outputs()->Get(k);
    outs.push_back({{"name", value_name(g, v)}, {"type", value_text(p, g, v)}});
  }
  j["inputs"] = ins;
  j["outputs"] = outs;
  if (count(node->subgraphs())) j["subgraphs"] = std::vector<std::uint32_t>(node->subgraphs()->begin(), node->subgraphs()->end());
  const std::string loc = location(p, node->debug());
  if (!loc.empty()) j["source"] = loc;
  return j;
}

json graph_json(const fb::Program& p, std::uint32_t gi, bool with_nodes) {
  const auto* g = p.graphs()->Get(gi);
  json j{{"index", gi}, {"name", str(g->name())}, {"nodes", count(g->nodes())}, {"values", count(g->values())}};
  json asserts = json::array();
  for (std::uint32_t a = 0; a < count(g->asserts()); ++a) {
    const auto* ra = g->asserts()->Get(a);
    json aj{{"expr", expr_to_string(p, ra->expr())}, {"message", str(ra->message())}, {"after_node", ra->after_node()}};
    const std::string loc = location(p, ra->debug());
    if (!loc.empty()) aj["source"] = loc;
    asserts.push_back(aj);
  }
  j["runtime_asserts"] = asserts;
  json bindings = json::array();
  for (std::uint32_t b = 0; b < count(g->bindings()); ++b) {
    const auto* ub = g->bindings()->Get(b);
    json bj{{"symbol", str(p.symbols()->Get(ub->symbol())->name())}, {"node", ub->node()}, {"output", ub->output()},
            {"kind", fb::EnumNameBindingKind(ub->kind())}};
    if (ub->kind() == fb::BindingKind::Size) {
      bj["dim"] = ub->dim();
      bj["divisor"] = ub->divisor();
    }
    bindings.push_back(bj);
  }
  j["unbacked_bindings"] = bindings;
  if (with_nodes) {
    json nodes = json::array();
    for (std::uint32_t n = 0; n < count(g->nodes()); ++n) nodes.push_back(node_json(p, *g, n));
    j["graph"] = nodes;
  }
  return j;
}

json bundle_json(const Bundle& b, const std::string& path, bool with_graph) {
  const fb::Program& p = b.program();
  const auto& h = b.header();
  json j{{"path", path}, {"file_size", b.file_size()},
         {"format", std::to_string(h.format_major) + "." + std::to_string(h.format_minor)},
         {"producer", h.producer}, {"program", str(p.name())}, {"program_producer", str(p.producer())}};
  json symbols = json::array();
  for (std::uint32_t s = 0; s < count(p.symbols()); ++s) {
    const auto* sym = p.symbols()->Get(s);
    json sj{{"name", str(sym->name())}, {"kind", sym->kind() == fb::SymbolKind::Backed ? "backed" : "unbacked"},
            {"min", bound_text(sym->min())}, {"max", bound_text(sym->max())}};
    if (sym->has_hint()) sj["hint"] = sym->hint();
    if (!str(sym->user_name()).empty()) sj["user_name"] = str(sym->user_name());
    symbols.push_back(sj);
  }
  j["symbols"] = symbols;
  json inputs = json::array(), outputs = json::array();
  for (std::uint32_t i = 0; i < count(p.signature()->inputs()); ++i) inputs.push_back(input_json(p, *p.signature()->inputs()->Get(i)));
  for (std::uint32_t i = 0; i < count(p.signature()->outputs()); ++i) outputs.push_back(output_json(p, *p.signature()->outputs()->Get(i)));
  j["inputs"] = inputs;
  j["outputs"] = outputs;
  json states = json::array();  // state tensors (format 1.1): kept by the session across runs
  for (std::uint32_t i = 0; i < count(p.signature()->states()); ++i) {
    const auto* st = p.signature()->states()->Get(i);
    json shape = json::array();
    for (std::uint32_t d = 0; d < count(st->shape()); ++d) shape.push_back(st->shape()->Get(d));
    states.push_back({{"name", str(st->name())}, {"dtype", dtype_text(st->dtype())}, {"shape", shape}, {"initial_constant", st->initial()}});
  }
  j["states"] = states;
  j["entry_graph"] = p.entry_graph();
  json specs = json::array();
  for (std::uint32_t s = 0; s < count(p.specializations()); ++s) {
    const auto* sp = p.specializations()->Get(s);
    specs.push_back({{"label", str(sp->label())}, {"predicate", expr_to_string(p, sp->predicate())}, {"graph", sp->graph()}});
  }
  j["specializations"] = specs;
  json graphs = json::array();
  for (std::uint32_t g = 0; g < count(p.graphs()); ++g) graphs.push_back(graph_json(p, g, with_graph));
  j["graphs"] = graphs;
  json ops = json::array();
  for (std::uint32_t o = 0; o < count(p.op_names()); ++o) {
    const std::string name = str(p.op_names()->Get(o));
    ops.push_back({{"name", name}, {"known", op_from_name(name).has_value()}});
  }
  j["ops"] = ops;
  json constants = json::array();
  std::uint64_t constant_bytes = 0;
  for (std::uint32_t c = 0; c < count(p.constants()); ++c) {
    const auto* k = p.constants()->Get(c);
    constant_bytes += k->nbytes();
    constants.push_back({{"name", str(k->name())}, {"dtype", dtype_text(k->dtype())},
                         {"shape", k->shape() ? std::vector<std::int64_t>(k->shape()->begin(), k->shape()->end()) : std::vector<std::int64_t>{}},
                         {"segment", k->segment()}, {"offset", k->offset()}, {"nbytes", k->nbytes()}});
  }
  j["constants"] = constants;
  j["constant_bytes"] = constant_bytes;
  json segments = json::array();
  for (std::size_t s = 0; s < b.segment_count(); ++s) {
    const auto& e = b.segment_entry(s);
    segments.push_back({{"index", s}, {"compression", e.compression == format::Compression::kZstd ? "zstd" : "none"},
                        {"offset", e.offset}, {"stored_size", e.stored_size}, {"size", e.size}, {"checksum", hex(e.checksum)}});
  }
  j["segments"] = segments;
  json tests = json::array();
  // Sequences: the self-tests sharing a SelfTest.sequence are its steps, in list order.
  json sequences = json::array();
  for (std::uint32_t t = 0; t < count(p.self_tests()); ++t) {
    const auto* test = p.self_tests()->Get(t);
    tests.push_back(str(test->name()));
    const std::string seq = str(test->sequence());
    if (seq.empty()) continue;
    auto it = std::find_if(sequences.begin(), sequences.end(), [&](const json& e) { return e["name"] == seq; });
    if (it == sequences.end()) {
      sequences.push_back({{"name", seq}, {"steps", json::array()}});
      it = sequences.end() - 1;
    }
    (*it)["steps"].push_back(str(test->name()));
  }
  j["self_tests"] = tests;
  j["sequences"] = sequences;
  j["debug_info"] = p.debug() != nullptr;
  json meta = json::object();
  for (std::uint32_t m = 0; m < count(p.metadata()); ++m) meta[str(p.metadata()->Get(m)->key())] = str(p.metadata()->Get(m)->value());
  j["metadata"] = meta;
  return j;
}

template <typename V, typename F>
std::string list_text(const V* v, F item) {
  std::string out = "[";
  for (std::uint32_t i = 0; i < count(v); ++i) out += (i ? ", " : "") + item(v->Get(i));
  return out + "]";
}

// ", shape=[(s0//2), 64], value=1.5" — attribute names come from the op table (codegen/ops.def).
std::string attrs_text(const fb::Program& p, const fb::Node& node) {
  const auto kind = op_from_name(str(p.op_names()->Get(node.op())));
  std::string out;
  for (std::uint32_t k = 0; k < count(node.attrs()); ++k) {
    const auto* a = node.attrs()->Get(k);
    if (a->kind() == fb::AttrKind::None) continue;
    std::string name = "attr" + std::to_string(k);
    if (kind && k < op_info(*kind).attrs.size()) name = std::string(op_info(*kind).attrs[k].name);
    std::string value;
    switch (a->kind()) {
      case fb::AttrKind::Int: value = std::to_string(a->i()); break;
      case fb::AttrKind::Float: { std::ostringstream f; f << a->f(); value = f.str(); break; }
      case fb::AttrKind::Bool: value = a->i() ? "True" : "False"; break;
      case fb::AttrKind::String: value = "\"" + str(a->s()) + "\""; break;
      case fb::AttrKind::Ints: value = list_text(a->ints(), [](std::int64_t x) { return std::to_string(x); }); break;
      case fb::AttrKind::Floats: value = list_text(a->floats(), [](double x) { std::ostringstream f; f << x; return f.str(); }); break;
      case fb::AttrKind::Expr: value = count(a->exprs()) ? expr_to_string(p, a->exprs()->Get(0)) : "?"; break;
      case fb::AttrKind::Exprs: value = list_text(a->exprs(), [&](std::uint32_t e) { return expr_to_string(p, e); }); break;
      case fb::AttrKind::DType: value = a->i() >= 0 && a->i() < kDTypeCount ? std::string(dtype_name(static_cast<DType>(a->i()))) : "?"; break;
      case fb::AttrKind::Graph: value = "graph " + std::to_string(a->i()); break;
      default: continue;
    }
    out += ", " + name + "=" + value;
  }
  return out;
}

void print_graph(std::ostream& os, const fb::Program& p, std::uint32_t gi) {
  const auto* g = p.graphs()->Get(gi);
  os << "graph " << gi << " " << str(g->name()) << "(";
  for (std::uint32_t k = 0; k < count(g->inputs()); ++k) {
    const std::uint32_t v = g->inputs()->Get(k);
    os << (k ? ", " : "") << value_name(*g, v) << ": \"" << value_text(p, *g, v) << "\"";
  }
  os << "):\n";
  auto print_asserts = [&](std::int64_t after) {
    for (std::uint32_t a = 0; a < count(g->asserts()); ++a) {
      const auto* ra = g->asserts()->Get(a);
      if (ra->after_node() != after) continue;
      const std::string loc = location(p, ra->debug());
      os << "    assert " << expr_to_string(p, ra->expr()) << (loc.empty() ? "" : "  # " + loc) << "\n";
    }
  };
  print_asserts(-1);
  for (std::uint32_t n = 0; n < count(g->nodes()); ++n) {
    const auto* node = g->nodes()->Get(n);
    std::ostringstream line;
    line << "    ";
    for (std::uint32_t k = 0; k < count(node->outputs()); ++k) {
      const std::uint32_t v = node->outputs()->Get(k);
      line << (k ? ", " : "") << value_name(*g, v) << ": \"" << value_text(p, *g, v) << "\"";
    }
    std::string args;
    for (std::uint32_t k = 0; k < count(node->inputs()); ++k) args += ", " + value_name(*g, node->inputs()->Get(k));
    for (std::uint32_t k = 0; k < count(node->subgraphs()); ++k) args += ", graph " + std::to_string(node->subgraphs()->Get(k));
    args += attrs_text(p, *node);
    line << " = " << str(p.op_names()->Get(node->op())) << "(" << (args.empty() ? args : args.substr(2)) << ")";
    const std::string loc = location(p, node->debug());
    if (!loc.empty()) line << "  # " << loc;
    os << line.str() << "\n";
    print_asserts(n);
  }
  os << "    return (";
  for (std::uint32_t k = 0; k < count(g->outputs()); ++k) os << (k ? ", " : "") << value_name(*g, g->outputs()->Get(k));
  os << ")\n";
}

void print_human(std::ostream& os, const Bundle& b, const json& j, bool with_graph) {
  os << "bundle     " << j["path"].get<std::string>() << " (" << j["file_size"] << " bytes)\n"
     << "format     " << j["format"].get<std::string>() << ", written by " << j["producer"].get<std::string>() << "\n"
     << "program    " << j["program"].get<std::string>() << " (" << j["program_producer"].get<std::string>() << ")\n";
  os << "symbols\n";
  for (const auto& s : j["symbols"]) {
    os << "  " << s["name"].get<std::string>() << "  " << s["kind"].get<std::string>() << "  [" << s["min"].get<std::string>()
       << ", " << s["max"].get<std::string>() << "]";
    if (s.contains("hint")) os << "  hint " << s["hint"];
    if (s.contains("user_name")) os << "  (" << s["user_name"].get<std::string>() << ")";
    os << "\n";
  }
  const fb::Program& p = b.program();
  os << "inputs\n";
  for (std::uint32_t i = 0; i < count(p.signature()->inputs()); ++i) {
    const auto* in = p.signature()->inputs()->Get(i);
    os << "  " << str(in->name()) << ": ";
    if (in->kind() == fb::InputKind::Tensor) os << shape_text(p, in->dtype(), in->shape()) << "\n";
    else if (in->dynamism() == fb::Dynamism::Static) os << "int (static) = " << in->static_value() << "\n";
    else os << "int (" << (in->dynamism() == fb::Dynamism::Auto ? "auto" : "dynamic") << ") Sym(" << expr_to_string(p, in->expr()) << ")\n";
  }
  os << "outputs\n";
  for (std::uint32_t i = 0; i < count(p.signature()->outputs()); ++i) {
    const auto* out = p.signature()->outputs()->Get(i);
    os << "  " << i << " " << str(out->name()) << ": "
       << (out->kind() == fb::InputKind::Tensor ? shape_text(p, out->dtype(), out->shape()) : "Sym(" + expr_to_string(p, out->expr()) + ")") << "\n";
  }
  if (!j["states"].empty()) {
    os << "state (kept across runs; initial values from constants)\n";
    for (const auto& st : j["states"]) {
      std::string dims;
      for (const auto& d : st["shape"]) dims += (dims.empty() ? "" : ", ") + std::to_string(d.get<std::int64_t>());
      os << "  " << st["name"].get<std::string>() << ": " << st["dtype"].get<std::string>() << "[" << dims << "]  initial = constant "
         << st["initial_constant"] << "\n";
    }
  }
  os << "runtime asserts\n";
  for (const auto& g : j["graphs"]) {
    for (const auto& a : g["runtime_asserts"]) {
      os << "  [" << g["name"].get<std::string>() << "] " << a["expr"].get<std::string>();
      os << (a["after_node"].get<int>() < 0 ? "  (on inputs)" : "  (after node " + std::to_string(a["after_node"].get<int>()) + ")");
      if (a.contains("source")) os << "  " << a["source"].get<std::string>();
      os << "\n";
    }
  }
  os << "specializations\n";
  if (j["specializations"].empty()) os << "  (none: the generic graph always runs)\n";
  for (const auto& s : j["specializations"]) {
    os << "  " << s["label"].get<std::string>() << "  [" << s["predicate"].get<std::string>() << "] -> graph " << s["graph"] << "\n";
  }
  os << "graphs     " << j["graphs"].size() << " (entry " << j["entry_graph"] << ")\n";
  for (const auto& g : j["graphs"]) os << "  " << g["index"] << " " << g["name"].get<std::string>() << ": " << g["nodes"] << " nodes\n";
  os << "ops       ";
  for (const auto& o : j["ops"]) os << " " << o["name"].get<std::string>() << (o["known"].get<bool>() ? "" : "(unknown to this build)");
  os << "\nconstants  " << j["constants"].size() << " (" << j["constant_bytes"] << " bytes)\n";
  os << "segments\n";
  for (const auto& s : j["segments"]) {
    os << "  " << s["index"] << "  " << s["compression"].get<std::string>() << "  offset " << s["offset"] << "  stored "
       << s["stored_size"] << "  size " << s["size"] << "  xxh3 " << s["checksum"].get<std::string>() << "\n";
  }
  os << "self-tests " << j["self_tests"].size() << "\n";
  for (const auto& q : j["sequences"]) {
    os << "  sequence " << q["name"].get<std::string>() << ": " << q["steps"].size() << " steps\n";
  }
  os << "debug info " << (j["debug_info"].get<bool>() ? "present" : "stripped") << "\n";
  for (const auto& [k, v] : j["metadata"].items()) os << "metadata   " << k << " = " << v.get<std::string>() << "\n";
  if (with_graph) {
    os << "\n";
    for (std::uint32_t g = 0; g < count(p.graphs()); ++g) print_graph(os, p, g);
  }
}

// ---- Graphviz DOT (--dot) -----------------------------------------------------------

// A DOT double-quoted string; "\n" in `text` becomes a centered line break.
std::string dot_quote(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '\n') out += "\\n";
    else if (c == '"' || c == '\\') out += std::string("\\") + c;
    else if (static_cast<unsigned char>(c) >= 0x20) out += c;
  }
  return out + "\"";
}

struct GraphRole {
  std::string title;           // the cluster label
  std::vector<std::string> callers;  // "g0_n5" for each node calling this graph
};

// Calls f(graph, node index, node, k, callee) for every subgraph call (node.subgraphs()[k])
// whose callee graph exists.
template <typename F>
void for_each_call(const fb::Program& p, F f) {
  for (std::uint32_t gi = 0; gi < count(p.graphs()); ++gi) {
    const auto* g = p.graphs()->Get(gi);
    for (std::uint32_t n = 0; n < count(g->nodes()); ++n) {
      const auto* node = g->nodes()->Get(n);
      for (std::uint32_t k = 0; k < count(node->subgraphs()); ++k) {
        const std::uint32_t callee = node->subgraphs()->Get(k);
        if (callee < count(p.graphs())) f(gi, n, *node, k, callee);
      }
    }
  }
}

// Why each graph exists: entry, specialization, or callee of which nodes.
std::vector<GraphRole> graph_roles(const fb::Program& p) {
  std::vector<GraphRole> roles(count(p.graphs()));
  for (std::uint32_t gi = 0; gi < roles.size(); ++gi) {
    roles[gi].title = "graph " + std::to_string(gi) + " " + str(p.graphs()->Get(gi)->name());
  }
  if (p.entry_graph() < roles.size()) {
    roles[p.entry_graph()].title += count(p.specializations()) ? "  (entry: the generic variant)" : "  (entry)";
  }
  for (std::uint32_t s = 0; s < count(p.specializations()); ++s) {
    const auto* sp = p.specializations()->Get(s);
    if (sp->graph() < roles.size()) {
      roles[sp->graph()].title += "  (specialization " + str(sp->label()) + ": " + expr_to_string(p, sp->predicate()) + ")";
    }
  }
  for_each_call(p, [&](std::uint32_t gi, std::uint32_t n, const fb::Node&, std::uint32_t, std::uint32_t callee) {
    roles[callee].callers.push_back("g" + std::to_string(gi) + "_n" + std::to_string(n));
  });
  for (auto& role : roles) {
    if (!role.callers.empty()) role.title += "  (subgraph)";
  }
  return roles;
}

// One cluster per graph: inputs (ellipses), nodes (boxes: op, output types, source line,
// the asserts checked after it), outputs (ellipses), constants (notes, declared with their
// first edge). Returns the id of the node that edges into this cluster point at.
std::string write_dot_graph(std::ostream& os, const fb::Program& p, std::uint32_t gi, const GraphRole& role) {
  const auto* g = p.graphs()->Get(gi);
  const std::string prefix = "g" + std::to_string(gi) + "_";
  const std::uint32_t nvalues = count(g->values());
  // Where each value comes from: "gI_inK", "gI_cV" or "gI_nN".
  std::vector<std::string> source(nvalues);
  std::string anchor;
  os << "  subgraph cluster_g" << gi << " {\n";
  std::string label = role.title;
  for (std::uint32_t a = 0; a < count(g->asserts()); ++a) {
    const auto* ra = g->asserts()->Get(a);
    if (ra->after_node() >= 0) continue;
    const std::string loc = location(p, ra->debug());
    label += "\nassert " + expr_to_string(p, ra->expr()) + (loc.empty() ? "" : "  (" + loc + ")");
  }
  os << "    label=" << dot_quote(label) << ";\n";
  os << "    style=\"rounded\"; color=\"" << (role.callers.empty() ? "#64748b" : "#d97706") << "\";\n";
  for (std::uint32_t k = 0; k < count(g->inputs()); ++k) {
    const std::uint32_t v = g->inputs()->Get(k);
    if (v >= nvalues) continue;
    source[v] = prefix + "in" + std::to_string(k);
    if (anchor.empty()) anchor = source[v];
    os << "    " << source[v] << " [shape=ellipse, fillcolor=\"#dbeafe\", label="
       << dot_quote("input " + value_name(*g, v) + "\n" + value_text(p, *g, v)) << "];\n";
  }
  for (std::uint32_t n = 0; n < count(g->nodes()); ++n) {
    const auto* node = g->nodes()->Get(n);
    const std::string id = prefix + "n" + std::to_string(n);
    std::string text = str(p.op_names()->Get(node->op()));
    for (std::uint32_t k = 0; k < count(node->outputs()); ++k) {
      const std::uint32_t v = node->outputs()->Get(k);
      if (v >= nvalues) continue;
      text += "\n" + value_text(p, *g, v);
      if (source[v].empty()) source[v] = id;
    }
    const std::string loc = location(p, node->debug());
    if (!loc.empty()) text += "\n" + loc;
    for (std::uint32_t a = 0; a < count(g->asserts()); ++a) {
      if (g->asserts()->Get(a)->after_node() == static_cast<std::int32_t>(n)) text += "\nassert " + expr_to_string(p, g->asserts()->Get(a)->expr());
    }
    const bool calls = count(node->subgraphs()) > 0;
    os << "    " << id << " [label=" << dot_quote(text) << (calls ? ", fillcolor=\"#fef3c7\"" : "") << "];\n";
    if (anchor.empty()) anchor = id;
  }
  for (std::uint32_t k = 0; k < count(g->outputs()); ++k) {
    const std::uint32_t v = g->outputs()->Get(k);
    if (v >= nvalues) continue;
    const std::string id = prefix + "out" + std::to_string(k);
    os << "    " << id << " [shape=ellipse, fillcolor=\"#dcfce7\", label="
       << dot_quote("output " + std::to_string(k) + "\n" + value_text(p, *g, v)) << "];\n";
    if (anchor.empty()) anchor = id;
  }
  if (anchor.empty()) {
    anchor = prefix + "empty";
    os << "    " << anchor << " [shape=plaintext, label=\"(empty)\"];\n";
  }
  // Data edges. Constants get a node at their first use; a value that no input, constant
  // or node defines (impossible in a verified bundle) gets one too, so that every edge
  // endpoint is declared.
  auto from = [&](std::uint32_t v) -> std::string {
    if (v >= nvalues || g->values()->Get(v)->kind() == fb::ValueKind::None) return "";
    if (source[v].empty()) {
      const bool constant = g->values()->Get(v)->kind() == fb::ValueKind::Constant;
      source[v] = prefix + (constant ? "c" : "v") + std::to_string(v);
      os << "    " << source[v] << (constant ? " [shape=note, fillcolor=\"#f1f5f9\", fontsize=9, label=" : " [shape=plaintext, label=")
         << dot_quote(value_name(*g, v) + "\n" + value_text(p, *g, v)) << "];\n";
    }
    return source[v];
  };
  for (std::uint32_t n = 0; n < count(g->nodes()); ++n) {
    const auto* node = g->nodes()->Get(n);
    for (std::uint32_t k = 0; k < count(node->inputs()); ++k) {
      const std::string src = from(node->inputs()->Get(k));
      if (!src.empty()) os << "    " << src << " -> " << prefix << "n" << n << ";\n";
    }
  }
  for (std::uint32_t k = 0; k < count(g->outputs()); ++k) {
    const std::string src = from(g->outputs()->Get(k));
    if (!src.empty()) os << "    " << src << " -> " << prefix << "out" << k << ";\n";
  }
  os << "  }\n";
  return anchor;
}

// What the k-th graph a node calls is to it: "true"/"false" for cond, "cond"/"body" for
// while_loop, "calls" otherwise.
std::string call_label(const fb::Program& p, const fb::Node& node, std::uint32_t k) {
  const std::string op = str(p.op_names()->Get(node.op()));
  if (op == "cond" && k < 2) return k == 0 ? "true" : "false";
  if (op == "while_loop" && k < 2) return k == 0 ? "cond" : "body";
  return "calls";
}

// The whole program as one DOT digraph: a cluster per graph (entry, specializations,
// subgraphs), and a dashed edge from every cond / while_loop / invoke_subgraph node to the
// clusters of the graphs it calls.
void write_dot(std::ostream& os, const fb::Program& p) {
  os << "digraph " << dot_quote(str(p.name()).empty() ? "kiln" : str(p.name())) << " {\n"
     << "  compound=true; rankdir=TB; newrank=true;\n"
     << "  graph [fontname=\"Helvetica\", fontsize=11, labeljust=l];\n"
     << "  node [shape=box, style=\"rounded,filled\", fillcolor=white, fontname=\"Helvetica\", fontsize=10];\n"
     << "  edge [color=\"#475569\", arrowsize=0.6, fontname=\"Helvetica\", fontsize=9];\n";
  const std::vector<GraphRole> roles = graph_roles(p);
  std::vector<std::string> anchors;
  for (std::uint32_t gi = 0; gi < roles.size(); ++gi) anchors.push_back(write_dot_graph(os, p, gi, roles[gi]));
  for_each_call(p, [&](std::uint32_t gi, std::uint32_t n, const fb::Node& node, std::uint32_t k, std::uint32_t callee) {
    os << "  g" << gi << "_n" << n << " -> " << anchors[callee] << " [lhead=cluster_g" << callee
       << ", style=dashed, color=\"#d97706\", label=" << dot_quote(call_label(p, node, k) + " (graph " + std::to_string(callee) + ")")
       << "];\n";
  });
  os << "}\n";
}

struct InspectOptions {
  std::string path;
  bool graph = false;
  bool json = false;
  bool placement = false;
  std::string backend = "cpu";
  CLI::Option* dot = nullptr;
  std::string dot_path;  // "" or "-": stdout
  bool no_mmap = false;
};

}  // namespace

Status write_text_file(const std::string& path, const std::string& text) {
  KILN_RETURN_IF_ERROR(check_output_target(path));
  remove_stale_temporaries(path);
  const std::string tmp = temporary_name(path);
  const int slot = register_temporary(tmp);
  struct Unregister {
    int slot;
    ~Unregister() { unregister_temporary(slot); }
  } unregister{slot};
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!(f << text) || !f.flush()) {
      std::remove(tmp.c_str());
      return Status(StatusCode::kIoError, "cannot write " + path);
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return Status(StatusCode::kIoError, "cannot write " + path + ": " + std::strerror(errno));
  }
  return Status::Ok();
}

namespace {

// Where every node runs once loaded for `backend`: the CPU or an accelerator segment,
// which activations were fused into the node before them, and the layout of its tensors
// (blank: plain NCHW; "nchw8c": blocked; "nchw -> nchw8c": a reorder inside the node).
json placement_json(const Program& program) {
  json graphs = json::array();
  const fb::Program& p = program.bundle().program();
  for (std::uint32_t g = 0; g < count(p.graphs()); ++g) {
    json nodes = json::array();
    for (const NodePlacement& n : program.placement(g)) {
      json j{{"node", n.node}, {"op", n.op}, {"backend", n.backend}, {"where", n.where}};
      if (n.segment >= 0) j["segment"] = n.segment;
      if (n.fused_away) j["fused_away"] = true;
      if (n.fused_into >= 0) j["fused_into"] = n.fused_into;
      if (n.folded_into >= 0) j["folded_into"] = n.folded_into;
      if (!n.layout.empty()) j["layout"] = n.layout;
      nodes.push_back(std::move(j));
    }
    graphs.push_back({{"graph", g}, {"name", str(p.graphs()->Get(g)->name())}, {"nodes", std::move(nodes)}});
  }
  json j{{"backend", program.backend_name()}, {"graphs", std::move(graphs)}};
  if (!program.backend_notice().empty()) j["notice"] = program.backend_notice();
  json states = json::array();
  for (const StatePlacement& st : program.state_placement()) states.push_back({{"name", st.name}, {"backend", st.backend}});
  if (!states.empty()) j["states"] = std::move(states);
  return j;
}

void print_placement(std::ostream& os, const json& j) {
  os << "placement  " << j["backend"].get<std::string>() << " backend";
  if (j.contains("notice")) os << " (" << j["notice"].get<std::string>() << ")";
  os << "\n";
  for (const auto& g : j["graphs"]) {
    os << "  graph " << g["graph"] << " " << g["name"].get<std::string>() << "\n";
    for (const auto& n : g["nodes"]) {
      std::string runs = n["backend"].get<std::string>();
      if (n.contains("segment")) runs += " segment " + std::to_string(n["segment"].get<int>());
      if (n.contains("fused_into")) runs = "fused into node " + std::to_string(n["fused_into"].get<int>());
      if (n.contains("folded_into")) runs = "folded into node " + std::to_string(n["folded_into"].get<int>());
      char line[160];
      const std::string layout = n.contains("layout") ? n["layout"].get<std::string>() : "";
      std::snprintf(line, sizeof line, "    %4d  %-22s %-22s %-16s ", n["node"].get<int>(), n["op"].get<std::string>().c_str(),
                    runs.c_str(), layout.c_str());
      os << line << n["where"].get<std::string>() << "\n";
    }
  }
  if (!j.contains("states")) return;
  os << "  state between runs\n";
  for (const auto& st : j["states"]) {
    const std::string b = st["backend"].get<std::string>();
    os << "    " << st["name"].get<std::string>() << ": " << (b == "cpu" ? "host memory" : b + " device memory (downloaded when read)") << "\n";
  }
}

}  // namespace

Command add_inspect(CLI::App& app) {
  auto opts = std::make_shared<InspectOptions>();
  app.add_option("bundle", opts->path, "The .kiln bundle");
  app.add_flag("--graph", opts->graph, "Also print every graph, node by node, with source locations");
  app.add_flag("--json", opts->json, "Print one JSON object on stdout");
  app.add_flag("--placement", opts->placement,
               "Load the bundle and show where every node runs (CPU, accelerator segments, fused activations)");
  app.add_option("--backend", opts->backend, "With --placement: cpu, vulkan or auto (default cpu)");
  opts->dot = app.add_option("--dot", opts->dot_path,
                             "Write the graphs as Graphviz DOT to FILE (stdout when omitted or '-') instead of the summary")
                  ->expected(0, 1)
                  ->type_name("FILE");
  add_no_mmap_flag(app, &opts->no_mmap);
  app.footer("Examples:\n  kiln inspect model.kiln --graph\n  kiln inspect model.kiln --placement --backend vulkan\n"
             "  kiln inspect model.kiln --dot model.dot && dot -Tsvg model.dot -o model.svg");
  return [opts]() {
    // `kiln inspect --dot model.kiln`: CLI11 gives the one path to --dot; it is the bundle.
    if (opts->path.empty() && opts->dot->count() > 0 && !opts->dot_path.empty()) std::swap(opts->path, opts->dot_path);
    if (opts->path.empty()) return report_error(Status(StatusCode::kUsage, "inspect: a BUNDLE is required"), opts->json);
    // Metadata only: zstd segments are not decompressed (a bomb costs nothing here).
    const LoadOptions load{.use_mmap = !opts->no_mmap, .decompress_segments = false};
    auto bundle = Bundle::open(opts->path, load);
    if (!bundle.ok()) return report_error(with_path(bundle.status(), opts->path), opts->json);
    // The structural checks run/validate make when they load the program (node arities,
    // attribute kinds, control-flow calling conventions); an op this build lacks is shown,
    // not an error.
    if (auto program = Program::load(std::move(bundle).value(), {.prepack_weights = false}); !program.ok()) {
      if (program.status().code() != StatusCode::kUnsupported) return report_error(with_path(program.status(), opts->path), opts->json);
    }
    bundle = Bundle::open(opts->path, load);
    if (!bundle.ok()) return report_error(with_path(bundle.status(), opts->path), opts->json);
    if (opts->dot->count() > 0) {
      std::ostringstream dot;
      write_dot(dot, (*bundle)->program());
      if (opts->dot_path.empty() || opts->dot_path == "-") {
        std::cout << printable(dot.str());
        return 0;
      }
      KILN_RETURN_IF_ERROR_CLI(write_text_file(opts->dot_path, printable(dot.str())), opts->json);
      std::cerr << "wrote " << opts->dot_path << "\n";
      return 0;
    }
    json j = bundle_json(**bundle, opts->path, opts->graph);
    if (opts->placement) {
      KILN_RETURN_IF_ERROR_CLI(check_backend(opts->backend), opts->json);
      auto program = open_program(opts->path, false, opts->backend, !opts->no_mmap);
      if (!program.ok()) return report_error(program.status(), opts->json);
      j["placement"] = placement_json(**program);
    }
    if (opts->json) {
      std::cout << dump_json(j) << "\n";
      return 0;
    }
    std::ostringstream text;
    print_human(text, **bundle, j, opts->graph);
    if (j.contains("placement")) print_placement(text, j["placement"]);
    std::cout << printable(text.str());
    return 0;
  };
}

}  // namespace kiln::cli

// ExportedProgram::print: a readable listing in the spirit of PyTorch's print_readable.
#include <set>
#include <sstream>

#include "kiln/export/export.h"
#include "kiln/export/symbolic/print.h"

namespace kiln {
namespace {

std::string bound(std::int64_t v) {
  if (v == sym::kPosInf) return "inf";
  if (v == sym::kNegInf) return "-inf";
  return std::to_string(v);
}

class Printer {
 public:
  explicit Printer(const ir::Program& p) : p_(p) {}
  std::string e(sym::Expr x) const { return sym::to_string(x, &p_.env); }
  std::string type(const ir::Value& v) const {
    if (v.kind == ir::ValueKind::kSymInt || v.kind == ir::ValueKind::kSymBool) return "Sym(" + e(v.expr) + ")";
    if (v.kind == ir::ValueKind::kNone) return "None";
    std::string out = std::string(dtype_name(v.dtype)) + "[";
    for (std::size_t i = 0; i < v.shape.size(); ++i) out += (i ? ", " : "") + e(v.shape[i]);
    return out + "]";
  }
  std::string name(const ir::Graph& g, int id) const {
    const ir::Value& v = g.values[static_cast<std::size_t>(id)];
    if (v.kind == ir::ValueKind::kNone) return "None";
    // An unnamed symbolic value (a cond predicate, an int operand) reads best as its expression.
    if (v.name.empty() && (v.kind == ir::ValueKind::kSymInt || v.kind == ir::ValueKind::kSymBool)) return e(v.expr);
    return v.name.empty() ? "%" + std::to_string(id) : v.name;
  }
  static std::string where(const ir::NodeMeta& m) {
    if (!m.location.known()) return "";
    std::string out = "  # " + m.location.file + ":" + std::to_string(m.location.line);
    if (!m.module_path.empty()) out += " (" + m.module_path + ")";
    return out;
  }
  std::string attr(const ir::Attr& a) const;
  void graph(std::ostream& os, const ir::Graph& g, int index) const;

 private:
  const ir::Program& p_;
};

std::string Printer::attr(const ir::Attr& a) const {
  std::ostringstream os;
  std::visit([&](const auto& x) {
    using T = std::decay_t<decltype(x)>;
    if constexpr (std::is_same_v<T, std::monostate>) os << "None";
    else if constexpr (std::is_same_v<T, bool>) os << (x ? "True" : "False");
    else if constexpr (std::is_same_v<T, std::string>) os << '"' << x << '"';
    else if constexpr (std::is_same_v<T, sym::Expr>) os << e(x);
    else if constexpr (std::is_same_v<T, DType>) os << dtype_name(x);
    else if constexpr (std::is_same_v<T, ir::GraphRef>) os << "graph " << x.index;
    else if constexpr (std::is_same_v<T, std::vector<sym::Expr>>) {
      os << "[";
      for (std::size_t i = 0; i < x.size(); ++i) os << (i ? ", " : "") << e(x[i]);
      os << "]";
    } else if constexpr (std::is_same_v<T, std::vector<std::int64_t>> || std::is_same_v<T, std::vector<double>>) {
      os << "[";
      for (std::size_t i = 0; i < x.size(); ++i) os << (i ? ", " : "") << x[i];
      os << "]";
    } else os << x;
  }, a);
  return os.str();
}

void Printer::graph(std::ostream& os, const ir::Graph& g, int index) const {
  os << "graph " << index << " " << g.name << "(";
  for (std::size_t i = 0; i < g.inputs.size(); ++i) {
    os << (i ? ", " : "") << name(g, g.inputs[i]) << ": \"" << type(g.values[static_cast<std::size_t>(g.inputs[i])]) << "\"";
  }
  os << "):\n";
  auto asserts = [&](int after) {
    for (const ir::RuntimeAssert& a : g.asserts) {
      if (a.after_node == after) os << "    assert " << a.message << where(a.meta) << "\n";
    }
  };
  asserts(-1);
  for (std::size_t n = 0; n < g.nodes.size(); ++n) {
    const ir::Node& node = g.nodes[n];
    std::string lhs, args;
    for (int o : node.outputs) {
      lhs += (lhs.empty() ? "" : ", ") + name(g, o) + ": \"" + type(g.values[static_cast<std::size_t>(o)]) + "\"";
    }
    for (int in : node.inputs) args += (args.empty() ? "" : ", ") + name(g, in);
    const auto& specs = op_info(node.op).attrs;
    for (std::size_t k = 0; k < node.attrs.size(); ++k) {
      if (std::holds_alternative<std::monostate>(node.attrs[k])) continue;
      const std::string key = k < specs.size() ? std::string(specs[k].name) : "attr" + std::to_string(k);
      args += (args.empty() ? "" : ", ") + key + "=" + attr(node.attrs[k]);
    }
    for (int sg : node.subgraphs) args += (args.empty() ? "" : ", ") + ("graph " + std::to_string(sg));
    os << "    " << lhs << " = " << op_name(node.op) << "(" << args << ")" << where(node.meta) << "\n";
    for (const ir::UnbackedBinding& b : g.bindings) {
      if (b.node != static_cast<int>(n)) continue;
      os << "    # binds " << e(sym::Expr::symbol(b.symbol)) << " = output " << b.output;
      if (b.kind == ir::UnbackedBinding::Kind::kSize) os << " size " << b.dim << (b.divisor != 1 ? " / " + std::to_string(b.divisor) : "");
      os << "\n";
    }
    asserts(static_cast<int>(n));
  }
  os << "    return (";
  for (std::size_t i = 0; i < g.outputs.size(); ++i) os << (i ? ", " : "") << name(g, g.outputs[i]);
  os << (g.outputs.size() == 1 ? ",)" : ")") << "\n";
}

}  // namespace

std::string ExportedProgram::print() const {
  const ir::Program& p = program_;
  Printer pr(p);
  std::ostringstream os;
  os << "ExportedProgram " << p.name << "\n";
  if (p.env.num_symbols() > 0) {
    // Unbacked symbols no graph binds (left by a compile-region trace that was found to
    // repeat an earlier one) are not part of the program.
    std::set<int> bound_symbols;
    for (const ir::Graph& g : p.graphs) {
      for (const ir::UnbackedBinding& b : g.bindings) bound_symbols.insert(b.symbol);
      for (int in : g.inputs) {
        const ir::Value& v = g.values[static_cast<std::size_t>(in)];
        for (int s : sym::free_symbols(v.expr)) bound_symbols.insert(s);
        for (const sym::Expr& d : v.shape) for (int s : sym::free_symbols(d)) bound_symbols.insert(s);
      }
    }
    os << "symbols:\n";
    for (std::size_t s = 0; s < p.env.num_symbols(); ++s) {
      const sym::SymbolInfo& info = p.env.symbol(static_cast<int>(s));
      if (p.env.replacement(static_cast<int>(s))) continue;  // specialized away
      if (info.kind == sym::SymbolKind::Unbacked && !bound_symbols.count(static_cast<int>(s))) continue;
      os << "    " << info.name << ": [" << bound(info.range.lo) << ", " << bound(info.range.hi) << "]"
         << (info.kind == sym::SymbolKind::Unbacked ? " unbacked" : "") << (info.user_name.empty() ? "" : " (" + info.user_name + ")") << "\n";
    }
  }
  if (!p.states.empty()) {
    os << "states:\n";
    for (std::size_t k = 0; k < p.states.size(); ++k) {
      const ir::StateSpec& st = p.states[k];
      os << "    " << st.name << ": " << dtype_name(st.dtype) << "[";
      for (std::size_t d = 0; d < st.shape.size(); ++d) os << (d ? ", " : "") << st.shape[d];
      os << "] (input " << p.inputs.size() + k << ", output " << p.outputs.size() + k << ")\n";
    }
  }
  for (std::size_t g = 0; g < p.graphs.size(); ++g) pr.graph(os, p.graphs[g], static_cast<int>(g));
  for (const ir::Specialization& s : p.specializations) {
    os << "specialization " << s.label << " [" << pr.e(s.predicate) << "] -> graph " << s.graph << "\n";
  }
  return os.str();
}

}  // namespace kiln

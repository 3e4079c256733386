// Binding a graph call's inputs to symbols and checking them (once per signature): the
// entry's declared dtypes, ranks, static values, ranges, equalities and derived dims; a
// subgraph's declared shapes; the variant; runtime asserts; and the symbols a node binds
// when it runs (unbacked sizes, item()).
#include <cstring>

#include "executor/session_impl.h"

namespace kiln {
namespace {

// Returns the symbol id if expression `id` is a bare symbol.
std::optional<std::uint32_t> bare_symbol(const fb::Program& p, std::uint32_t id) {
  const auto* ref = p.exprs()->Get(id);
  if (ref->length() != 1) return std::nullopt;
  const auto* tok = p.expr_tokens()->Get(ref->start());
  if (tok->op() != fb::ExprOp::Sym) return std::nullopt;
  return static_cast<std::uint32_t>(tok->value());
}

// "input x.size(0) = 3 (batch, s0) is outside the range [4, inf] (model.cpp:12)".
Status out_of_range(const fb::Program& p, const fb::Symbol& sym, const std::string& bound_from, std::int64_t value) {
  const std::string user = sym.user_name() && sym.user_name()->size() ? sym.user_name()->str() + ", " : "";
  const std::string hi = sym.max() == INT64_MAX ? "inf" : std::to_string(sym.max());
  const std::string lo = sym.min() == INT64_MIN ? "-inf" : std::to_string(sym.min());
  // The symbol's debug entry is the guard or check that narrowed its range, when there was one.
  const DebugLocation where = debug_location(p, sym.debug());
  return bad_input("input " + bound_from + " = " + std::to_string(value) + " (" + user + sym.name()->str() + ") is outside the range [" + lo +
                   ", " + hi + "]" + (where.empty() ? "" : " (narrowed at " + where.text() + ")"));
}

}  // namespace

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
    if (symbols[s] < sym->min() || symbols[s] > sym->max()) return out_of_range(p, *sym, bound_from[s], symbols[s]);
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

}  // namespace kiln

#include "kiln/export/export.h"

#include <map>
#include <set>

#include "kiln/export/symbolic/parse.h"
#include "kiln/export/symbolic/print.h"
#include "trace/context.h"
#include "trace/finalize.h"

namespace kiln {

using detail::TraceContext;
using detail::TensorImpl;
using detail::TracedState;

ExampleInput input(std::string name, Tensor example, std::vector<Dim> dims) {
  ExampleInput in;
  in.name = std::move(name);
  in.tensor = std::move(example);
  in.dims = std::move(dims);
  return in;
}

ExampleInput int_input(std::string name, std::int64_t example, Dim dynamism) {
  ExampleInput in;
  in.name = std::move(name);
  in.is_int = true;
  in.int_value = example;
  in.int_dim = std::move(dynamism);
  return in;
}

namespace detail {

Value checked_arg(const Values& in, std::size_t i, bool want_tensor) {
  if (i >= in.size()) throw ExportError(StatusCode::kUsage, "the model function takes more parameters than there are inputs");
  if (std::holds_alternative<Tensor>(in[i]) != want_tensor) {
    throw ExportError(StatusCode::kUsage, "parameter " + std::to_string(i) + " of the model function must be " +
                                              (want_tensor ? "a Tensor (the input is an int)" : "a SymInt (the input is a tensor)"));
  }
  return in[i];
}

namespace {

struct TraceScope {
  explicit TraceScope(TraceContext* ctx) : previous(current_trace()) { set_current_trace(ctx); }
  ~TraceScope() { set_current_trace(previous); }
  TraceContext* previous;
};

[[noreturn]] void usage(const std::string& message) { throw ExportError(StatusCode::kUsage, message); }

class InputBinder {
 public:
  explicit InputBinder(TraceContext& ctx) : ctx_(ctx) {}
  Values bind(const std::vector<ExampleInput>& inputs);
  std::vector<std::pair<const Dim*, int>> named_dims;  // first-seen order, for specializations

 private:
  sym::Expr dim_expr(const Dim& spec, std::int64_t size, const std::string& source);
  int named_symbol(const Dim& dim, std::int64_t hint, const std::string& source);
  TraceContext& ctx_;
  std::map<const void*, int> symbols_by_dim_;
};

int InputBinder::named_symbol(const Dim& dim, std::int64_t hint, const std::string& source) {
  auto it = symbols_by_dim_.find(dim.id());
  if (it != symbols_by_dim_.end()) {
    const auto existing = ctx_.env().symbol(it->second).hint;
    if (existing != hint) {
      usage(source + " uses Dim " + dim.name() + " but its example size " + std::to_string(hint) +
            " differs from the " + std::to_string(existing.value_or(-1)) + " seen for the same Dim");
    }
    return it->second;
  }
  if (hint < dim.min() || hint > dim.max()) {
    usage("example size " + std::to_string(hint) + " of " + source + " is outside the range of Dim " + dim.name() + " [" +
          std::to_string(dim.min()) + ", " + (dim.max() == Dim::kInf ? std::string("inf") : std::to_string(dim.max())) + "]");
  }
  auto s = ctx_.env().create_backed_symbol(dim.name(), {dim.min(), dim.max() == Dim::kInf ? sym::kPosInf : dim.max()}, hint);
  if (!s.ok()) usage(s.status().message());
  symbols_by_dim_[dim.id()] = *s;
  ctx_.policies[*s] = {Dim::Kind::kNamed, dim.name(), source, ctx_.env().symbol(*s).range, dim.id()};
  named_dims.emplace_back(&dim, *s);
  return *s;
}

sym::Expr InputBinder::dim_expr(const Dim& spec, std::int64_t size, const std::string& source) {
  switch (spec.kind()) {
    case Dim::Kind::kStatic: return sym::Expr::constant(size);
    case Dim::Kind::kNamed: return sym::Expr::symbol(named_symbol(spec, size, source));
    case Dim::Kind::kDerived: {
      const Dim& root = *spec.root();
      const std::int64_t a = spec.coefficient(), b = spec.offset();
      if ((size - b) % a != 0 || (size - b) / a < 1) {
        usage("example size " + std::to_string(size) + " of " + source + " is not of the form " + spec.name());
      }
      return sym::Expr::constant(a) * sym::Expr::symbol(named_symbol(root, (size - b) / a, source)) + sym::Expr::constant(b);
    }
    case Dim::Kind::kAuto:
    case Dim::Kind::kDynamic: {
      if (size < 2) {
        if (spec.kind() == Dim::Kind::kAuto) return sym::Expr::constant(size);
        usage(source + " is marked Dim::DYNAMIC but its example size is " + std::to_string(size) +
              ": sizes 0 and 1 specialize; use an example of at least 2");
      }
      auto s = ctx_.env().create_backed_symbol("", {2, sym::kPosInf}, size);
      if (!s.ok()) usage(s.status().message());
      ctx_.policies[*s] = {spec.kind(), "", source, ctx_.env().symbol(*s).range, nullptr};
      return sym::Expr::symbol(*s);
    }
  }
  return sym::Expr::constant(size);
}

Values InputBinder::bind(const std::vector<ExampleInput>& inputs) {
  Values out;
  std::set<std::string> names;
  ir::Graph& g = ctx_.graph();
  for (const ExampleInput& in : inputs) {
    if (in.name.empty() || !names.insert(in.name).second) usage("input names must be unique and non-empty: '" + in.name + "'");
    ir::InputSpec spec;
    spec.name = in.name;
    if (in.is_int) {
      spec.is_int = true;
      sym::Expr e = sym::Expr::constant(in.int_value);
      switch (in.int_dim.kind()) {
        case Dim::Kind::kStatic: spec.static_value = in.int_value; break;
        case Dim::Kind::kNamed:
        case Dim::Kind::kDerived:
          usage("int input '" + in.name + "': a named Dim cannot describe an int; use Dim::DYNAMIC or Dim::AUTO");
        default: {
          auto s = ctx_.env().create_backed_symbol(in.name, sym::ValueRange::unbounded(), in.int_value);
          if (!s.ok()) usage(s.status().message());
          ctx_.policies[*s] = {in.int_dim.kind(), "", in.name, sym::ValueRange::unbounded(), nullptr};
          e = sym::Expr::symbol(*s);
          spec.dynamism = in.int_dim.kind() == Dim::Kind::kAuto ? ir::Dynamism::kAuto : ir::Dynamism::kDynamic;
          spec.expr = e;
        }
      }
      g.inputs.push_back(g.add_value({ir::ValueKind::kSymInt, DType::kI64, {}, e, -1, in.name}));
      ctx_.program.inputs.push_back(spec);
      out.emplace_back(SymInt(e, SourceLoc::current(), /*user_loc=*/false));
      continue;
    }
    if (!in.tensor.defined() || in.tensor.is_traced()) usage("input '" + in.name + "' needs an eager example tensor");
    const std::vector<std::int64_t> shape = in.tensor.concrete_shape();
    if (in.dims.size() > shape.size()) {
      usage("input '" + in.name + "': " + std::to_string(in.dims.size()) + " dims given for a tensor of rank " + std::to_string(shape.size()));
    }
    spec.dtype = in.tensor.dtype();
    for (std::size_t d = 0; d < shape.size(); ++d) {
      const Dim& dim = d < in.dims.size() ? in.dims[d] : Dim::STATIC;
      spec.shape.push_back(dim_expr(dim, shape[d], in.name + ".size()[" + std::to_string(d) + "]"));
    }
    const int v = g.add_value({ir::ValueKind::kTensor, spec.dtype, spec.shape, {}, -1, in.name});
    g.inputs.push_back(v);
    ctx_.program.inputs.push_back(spec);
    out.emplace_back(ctx_.make_tensor(v));
  }
  return out;
}

void bind_outputs(TraceContext& ctx, const Values& outputs) {
  ir::Graph& g = ctx.graph();
  int index = 0;
  for (const Value& v : outputs) {
    ir::OutputSpec spec;
    spec.name = "out" + std::to_string(index++);
    if (const Tensor* t = std::get_if<Tensor>(&v)) {
      if (!t->defined()) usage("output " + spec.name + " is an undefined tensor");
      const int id = ctx.value_of(*t);
      g.outputs.push_back(id);
      spec.dtype = t->dtype();
      spec.shape = g.values[static_cast<std::size_t>(id)].shape;
    } else {
      const SymInt& s = std::get<SymInt>(v);
      spec.is_int = true;
      spec.dtype = DType::kI64;
      spec.expr = ctx.env().simplify(s.expr());
      g.outputs.push_back(g.add_value({ir::ValueKind::kSymInt, DType::kI64, {}, spec.expr, -1, spec.name}));
    }
    ctx.program.outputs.push_back(spec);
  }
  // Then each state's final value (its input when the forward only read it).
  for (const detail::TracedState& st : ctx.states) g.outputs.push_back(st.current);
}

// Restores the bytes of the state buffers when the eager self-test runs are over (they
// update them in place), whatever happens.
class StateBytesGuard {
 public:
  explicit StateBytesGuard(const std::vector<TracedState>& states) {
    for (const TracedState& st : states) saved_.emplace_back(st.impl, *st.impl->data);
  }
  ~StateBytesGuard() {
    for (auto& [impl, bytes] : saved_) *impl->data = std::move(bytes);
  }
  StateBytesGuard(const StateBytesGuard&) = delete;
  StateBytesGuard& operator=(const StateBytesGuard&) = delete;

 private:
  std::vector<std::pair<std::shared_ptr<TensorImpl>, std::vector<std::uint8_t>>> saved_;
};

ir::TestValue test_value(const Value& v, const ExportOptions& options) {
  ir::TestValue t;
  t.rtol = options.self_test_rtol;
  t.atol = options.self_test_atol;
  if (const SymInt* s = std::get_if<SymInt>(&v)) {
    t.is_int = true;
    t.dtype = DType::kI64;
    t.int_value = s->guard_int();
    return t;
  }
  const Tensor& tensor = std::get<Tensor>(v);
  t.dtype = tensor.dtype();
  t.shape = tensor.concrete_shape();
  t.data = std::make_shared<std::vector<std::uint8_t>>(tensor.bytes());
  return t;
}

// Runs the model eagerly to record golden cases (outside any trace).
void add_self_tests(ir::Program& program, const ModelFn& fn, const std::vector<ExampleInput>& inputs, const ExportOptions& options) {
  for (int k = 0; k < options.self_tests; ++k) {
    Values in;
    ir::SelfTestCase c;
    c.name = "case" + std::to_string(k);
    for (const ExampleInput& e : inputs) {
      if (e.is_int) {
        in.emplace_back(SymInt(e.int_value));
      } else if (k > 0 && e.tensor.dtype() == DType::kF32) {
        in.emplace_back(Tensor::randn(e.tensor.concrete_shape(), static_cast<std::uint64_t>(1000 + k)));
      } else {
        in.emplace_back(e.tensor);
      }
      c.inputs.push_back(test_value(in.back(), options));
    }
    Values out;
    try {
      out = fn(in);
    } catch (const ExportError& err) {
      throw ExportError(err.code(), "computing self-test " + c.name + " eagerly: " + err.what());
    }
    for (const Value& v : out) c.outputs.push_back(test_value(v, options));
    program.self_tests.push_back(std::move(c));
  }
}

}  // namespace
}  // namespace detail

Result<ExportedProgram> export_program(const ModelFn& fn, const std::vector<ExampleInput>& inputs, const ExportOptions& options) {
  auto ctx = std::make_unique<TraceContext>();
  ctx->program.name = options.name;
  ctx->program.graphs.emplace_back();
  ctx->program.graphs[0].name = "main";
  try {
    detail::TraceScope scope(ctx.get());
    detail::InputBinder binder(*ctx);
    const Values traced = binder.bind(inputs);
    ctx->declared_env = ctx->env();
    const Values outputs = fn(traced);
    detail::bind_outputs(*ctx, outputs);
    detail::finalize(*ctx, binder.named_dims);
  } catch (const ExportError& e) {
    return e.status();
  } catch (const std::exception& e) {
    return Status(StatusCode::kInternal, std::string("export_program: ") + e.what());
  }
  try {
    // A stateful program's cases form a sequence from the initial values (kiln validate
    // runs them in order on one session).
    detail::StateBytesGuard restore(ctx->states);
    detail::add_self_tests(ctx->program, fn, inputs, options);
    if (!ctx->program.states.empty()) {
      for (auto& c : ctx->program.self_tests) c.sequence = "self_tests";  // SelfTest.sequence: one state, in order
    }
  } catch (const ExportError& e) {
    return e.status();
  } catch (const std::exception& e) {
    return Status(StatusCode::kInternal, std::string("export_program: ") + e.what());
  }
  return ExportedProgram(std::move(ctx->program));
}

Status ExportedProgram::save(const std::string& path, const SaveOptions& options) const {
  return save_bundle(program_, path, options);
}

}  // namespace kiln

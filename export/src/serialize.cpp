#include "kiln/export/serialize.h"

#include <map>
#include <tuple>
#include <unordered_map>

#include "kiln/export/bundle_writer.h"
#include "kiln/export/symbolic/postfix.h"
#include "kiln/export/version.h"

namespace kiln {
namespace {

Status bad(const std::string& message) { return Status(StatusCode::kExportError, "[serialize] " + message); }

// Converts one ir::Program into a fb::ProgramT, registering constant data with the writer.
class Serializer {
 public:
  Serializer(const ir::Program& program, const SaveOptions& options, BundleWriter& writer)
      : ir_(program), options_(options), writer_(writer), pool_(out_) {}

  Result<fb::ProgramT*> run();

 private:
  std::uint32_t expr(sym::Expr e);
  std::vector<std::uint32_t> exprs(const std::vector<sym::Expr>& es);
  std::uint32_t op(OpKind kind);
  std::uint32_t debug(const ir::NodeMeta& meta);
  std::uint32_t string_id(const std::string& s);
  Status symbols();
  Status constants();
  Status signature();
  Status graph(const ir::Graph& g, int index);
  Result<std::unique_ptr<fb::ValueT>> value(const ir::Value& v, const std::string& where);
  Result<std::unique_ptr<fb::NodeT>> node(const ir::Graph& g, const ir::Node& n, const std::string& where);
  Result<std::unique_ptr<fb::TestTensorT>> test_value(const ir::TestValue& t);
  Status self_tests();

  const ir::Program& ir_;
  const SaveOptions& options_;
  BundleWriter& writer_;
  fb::ProgramT out_;
  ExprPool pool_;
  std::unordered_map<sym::Expr, std::uint32_t> expr_ids_;
  std::map<OpKind, std::uint32_t> op_ids_;
  std::unordered_map<std::string, std::uint32_t> strings_;
  std::map<std::tuple<std::uint32_t, std::uint32_t, std::uint32_t, std::uint32_t, std::uint32_t>, std::uint32_t> debug_ids_;
};

std::uint32_t Serializer::expr(sym::Expr e) {
  auto it = expr_ids_.find(e);
  if (it != expr_ids_.end()) return it->second;
  std::vector<fb::ExprToken> tokens;
  for (const sym::ExprToken& t : sym::to_postfix(e)) tokens.emplace_back(static_cast<fb::ExprOp>(t.op), t.value);
  const std::uint32_t id = pool_.intern(tokens);
  expr_ids_.emplace(e, id);
  return id;
}

std::vector<std::uint32_t> Serializer::exprs(const std::vector<sym::Expr>& es) {
  std::vector<std::uint32_t> out;
  out.reserve(es.size());
  for (const sym::Expr& e : es) out.push_back(expr(e));
  return out;
}

std::uint32_t Serializer::op(OpKind kind) {
  auto [it, inserted] = op_ids_.emplace(kind, static_cast<std::uint32_t>(out_.op_names.size()));
  if (inserted) out_.op_names.emplace_back(op_name(kind));
  return it->second;
}

std::uint32_t Serializer::string_id(const std::string& s) {
  auto [it, inserted] = strings_.emplace(s, static_cast<std::uint32_t>(out_.debug->strings.size()));
  if (inserted) out_.debug->strings.push_back(s);
  return it->second;
}

std::uint32_t Serializer::debug(const ir::NodeMeta& meta) {
  if (options_.strip_debug || (!meta.location.known() && meta.module_path.empty() && meta.user_op.empty())) return 0;
  const auto key = std::make_tuple(string_id(meta.location.file), meta.location.line, meta.location.column,
                                   string_id(meta.module_path), string_id(meta.user_op));
  auto [it, inserted] = debug_ids_.emplace(key, static_cast<std::uint32_t>(out_.debug->entries.size() + 1));
  if (inserted) {
    out_.debug->entries.emplace_back(std::get<0>(key), std::get<1>(key), std::get<2>(key), std::get<3>(key), std::get<4>(key));
  }
  return it->second;
}

Status Serializer::symbols() {
  for (std::size_t i = 0; i < ir_.env.num_symbols(); ++i) {
    const sym::SymbolInfo& info = ir_.env.symbol(static_cast<int>(i));
    auto s = std::make_unique<fb::SymbolT>();
    s->name = info.name;
    s->kind = info.kind == sym::SymbolKind::Backed ? fb::SymbolKind::Backed : fb::SymbolKind::Unbacked;
    s->min = info.range.lo;
    s->max = info.range.hi;
    s->has_hint = info.hint.has_value();
    s->hint = info.hint.value_or(0);
    s->user_name = info.user_name;
    if (auto it = ir_.range_origins.find(static_cast<int>(i)); it != ir_.range_origins.end()) s->debug = debug(it->second);
    out_.symbols.push_back(std::move(s));
  }
  return Status::Ok();
}

Status Serializer::constants() {
  for (std::size_t i = 0; i < ir_.constants.size(); ++i) {
    const ir::ConstantTensor& c = ir_.constants[i];
    std::uint64_t numel = 1;
    for (std::int64_t d : c.shape) numel *= static_cast<std::uint64_t>(d);
    if (!c.data || c.data->size() != numel * dtype_size(c.dtype)) {
      return bad("constant '" + c.name + "' has " + std::to_string(c.data ? c.data->size() : 0) + " bytes, expected " +
                 std::to_string(numel * dtype_size(c.dtype)));
    }
    const DataRef ref = writer_.add_data(*c.data);
    auto k = std::make_unique<fb::ConstantT>();
    k->name = c.name;
    k->dtype = static_cast<fb::DType>(c.dtype);
    k->shape = c.shape;
    k->segment = ref.segment;
    k->offset = ref.offset;
    k->nbytes = ref.nbytes;
    out_.constants.push_back(std::move(k));
  }
  return Status::Ok();
}

Status Serializer::signature() {
  out_.signature = std::make_unique<fb::SignatureT>();
  for (const ir::InputSpec& in : ir_.inputs) {
    auto s = std::make_unique<fb::InputSpecT>();
    s->name = in.name;
    s->kind = in.is_int ? fb::InputKind::Int : fb::InputKind::Tensor;
    s->dtype = static_cast<fb::DType>(in.dtype);
    if (!in.is_int) s->shape = exprs(in.shape);
    s->dynamism = static_cast<fb::Dynamism>(in.dynamism);
    s->static_value = in.static_value;
    if (in.is_int && in.dynamism != ir::Dynamism::kStatic) s->expr = expr(in.expr);
    out_.signature->inputs.push_back(std::move(s));
  }
  for (const ir::OutputSpec& o : ir_.outputs) {
    auto s = std::make_unique<fb::OutputSpecT>();
    s->name = o.name;
    s->kind = o.is_int ? fb::InputKind::Int : fb::InputKind::Tensor;
    s->dtype = static_cast<fb::DType>(o.dtype);
    if (o.is_int) s->expr = expr(o.expr);
    else s->shape = exprs(o.shape);
    out_.signature->outputs.push_back(std::move(s));
  }
  for (const ir::StateSpec& st : ir_.states) {
    if (st.initial < 0 || static_cast<std::size_t>(st.initial) >= ir_.constants.size()) {
      return bad("state '" + st.name + "': unknown initial constant");
    }
    auto s = std::make_unique<fb::StateSpecT>();
    s->name = st.name;
    s->dtype = static_cast<fb::DType>(st.dtype);
    s->shape = st.shape;
    s->initial = static_cast<std::uint32_t>(st.initial);
    out_.signature->states.push_back(std::move(s));
  }
  return Status::Ok();
}

Result<std::unique_ptr<fb::ValueT>> Serializer::value(const ir::Value& v, const std::string& where) {
  auto out = std::make_unique<fb::ValueT>();
  out->kind = static_cast<fb::ValueKind>(v.kind);
  out->dtype = static_cast<fb::DType>(v.dtype);
  out->name = v.name;
  if (v.kind == ir::ValueKind::kTensor || v.kind == ir::ValueKind::kConstant) out->shape = exprs(v.shape);
  if (v.kind == ir::ValueKind::kSymInt || v.kind == ir::ValueKind::kSymBool) out->expr = expr(v.expr);
  if (v.kind == ir::ValueKind::kConstant) {
    if (v.constant < 0 || static_cast<std::size_t>(v.constant) >= ir_.constants.size()) return bad(where + ": unknown constant");
    out->constant = static_cast<std::uint32_t>(v.constant);
  }
  return out;
}

Result<std::unique_ptr<fb::NodeT>> Serializer::node(const ir::Graph& g, const ir::Node& n, const std::string& where) {
  auto out = std::make_unique<fb::NodeT>();
  out->op = op(n.op);
  for (int id : n.inputs) {
    if (id < 0 || static_cast<std::size_t>(id) >= g.values.size()) return bad(where + ": unknown input value " + std::to_string(id));
    out->inputs.push_back(static_cast<std::uint32_t>(id));
  }
  for (int id : n.outputs) {
    if (id < 0 || static_cast<std::size_t>(id) >= g.values.size()) return bad(where + ": unknown output value " + std::to_string(id));
    out->outputs.push_back(static_cast<std::uint32_t>(id));
  }
  for (int sg : n.subgraphs) {
    if (sg < 0 || static_cast<std::size_t>(sg) >= ir_.graphs.size()) return bad(where + ": unknown subgraph " + std::to_string(sg));
    out->subgraphs.push_back(static_cast<std::uint32_t>(sg));
  }
  for (const ir::Attr& a : n.attrs) {
    auto fa = std::make_unique<fb::AttrT>();
    std::visit([&](const auto& x) {
      using T = std::decay_t<decltype(x)>;
      if constexpr (std::is_same_v<T, std::monostate>) fa->kind = fb::AttrKind::None;
      else if constexpr (std::is_same_v<T, std::int64_t>) { fa->kind = fb::AttrKind::Int; fa->i = x; }
      else if constexpr (std::is_same_v<T, double>) { fa->kind = fb::AttrKind::Float; fa->f = x; }
      else if constexpr (std::is_same_v<T, bool>) { fa->kind = fb::AttrKind::Bool; fa->i = x ? 1 : 0; }
      else if constexpr (std::is_same_v<T, std::string>) { fa->kind = fb::AttrKind::String; fa->s = x; }
      else if constexpr (std::is_same_v<T, std::vector<std::int64_t>>) { fa->kind = fb::AttrKind::Ints; fa->ints = x; }
      else if constexpr (std::is_same_v<T, std::vector<double>>) { fa->kind = fb::AttrKind::Floats; fa->floats = x; }
      else if constexpr (std::is_same_v<T, sym::Expr>) { fa->kind = fb::AttrKind::Expr; fa->exprs = {expr(x)}; }
      else if constexpr (std::is_same_v<T, std::vector<sym::Expr>>) { fa->kind = fb::AttrKind::Exprs; fa->exprs = exprs(x); }
      else if constexpr (std::is_same_v<T, DType>) { fa->kind = fb::AttrKind::DType; fa->i = static_cast<std::int64_t>(x); }
      else if constexpr (std::is_same_v<T, ir::GraphRef>) { fa->kind = fb::AttrKind::Graph; fa->i = x.index; }
    }, a);
    out->attrs.push_back(std::move(fa));
  }
  out->debug = debug(n.meta);
  return out;
}

Status Serializer::graph(const ir::Graph& g, int index) {
  const std::string where = "graph " + std::to_string(index) + " (" + g.name + ")";
  auto out = std::make_unique<fb::GraphT>();
  out->name = g.name;
  for (std::size_t i = 0; i < g.values.size(); ++i) {
    auto v = value(g.values[i], where + ", value " + std::to_string(i));
    if (!v.ok()) return v.status();
    out->values.push_back(std::move(v).value());
  }
  for (int id : g.inputs) out->inputs.push_back(static_cast<std::uint32_t>(id));
  for (int id : g.outputs) out->outputs.push_back(static_cast<std::uint32_t>(id));
  for (std::size_t i = 0; i < g.nodes.size(); ++i) {
    auto n = node(g, g.nodes[i], where + ", node " + std::to_string(i));
    if (!n.ok()) return n.status();
    out->nodes.push_back(std::move(n).value());
  }
  for (const ir::RuntimeAssert& a : g.asserts) {
    auto fa = std::make_unique<fb::RuntimeAssertT>();
    fa->expr = expr(a.expr);
    fa->message = a.message;
    fa->after_node = a.after_node;
    fa->debug = debug(a.meta);
    out->asserts.push_back(std::move(fa));
  }
  for (const ir::UnbackedBinding& b : g.bindings) {
    auto fb_ = std::make_unique<fb::UnbackedBindingT>();
    fb_->symbol = static_cast<std::uint32_t>(b.symbol);
    fb_->node = static_cast<std::uint32_t>(b.node);
    fb_->output = static_cast<std::uint32_t>(b.output);
    fb_->kind = b.kind == ir::UnbackedBinding::Kind::kSize ? fb::BindingKind::Size : fb::BindingKind::Scalar;
    fb_->dim = static_cast<std::uint32_t>(b.dim);
    fb_->divisor = b.divisor;
    out->bindings.push_back(std::move(fb_));
  }
  out_.graphs.push_back(std::move(out));
  return Status::Ok();
}

Result<std::unique_ptr<fb::TestTensorT>> Serializer::test_value(const ir::TestValue& t) {
  auto out = std::make_unique<fb::TestTensorT>();
  out->kind = t.is_int ? fb::InputKind::Int : fb::InputKind::Tensor;
  out->dtype = static_cast<fb::DType>(t.dtype);
  out->shape = t.shape;
  out->int_value = t.int_value;
  out->rtol = t.rtol;
  out->atol = t.atol;
  if (!t.is_int) {
    if (!t.data) return bad("self-test tensor without data");
    const DataRef ref = writer_.add_data(*t.data);
    out->segment = ref.segment;
    out->offset = ref.offset;
    out->nbytes = ref.nbytes;
  }
  return out;
}

Status Serializer::self_tests() {
  for (const ir::SelfTestCase& c : ir_.self_tests) {
    auto st = std::make_unique<fb::SelfTestT>();
    st->name = c.name;
    st->variant = c.variant;
    st->sequence = c.sequence;
    for (const auto& t : c.inputs) {
      auto v = test_value(t);
      if (!v.ok()) return v.status();
      st->inputs.push_back(std::move(v).value());
    }
    for (const auto& t : c.outputs) {
      auto v = test_value(t);
      if (!v.ok()) return v.status();
      st->outputs.push_back(std::move(v).value());
    }
    out_.self_tests.push_back(std::move(st));
  }
  return Status::Ok();
}

Result<fb::ProgramT*> Serializer::run() {
  out_.name = ir_.name;
  out_.producer = options_.producer.empty() ? std::string(kiln_producer()) : options_.producer;
  if (!options_.strip_debug) out_.debug = std::make_unique<fb::DebugTableT>();
  KILN_RETURN_IF_ERROR(symbols());
  KILN_RETURN_IF_ERROR(constants());
  KILN_RETURN_IF_ERROR(signature());
  if (ir_.entry < 0 || static_cast<std::size_t>(ir_.entry) >= ir_.graphs.size()) return bad("entry graph does not exist");
  for (std::size_t g = 0; g < ir_.graphs.size(); ++g) KILN_RETURN_IF_ERROR(graph(ir_.graphs[g], static_cast<int>(g)));
  out_.entry_graph = static_cast<std::uint32_t>(ir_.entry);
  for (const ir::Specialization& s : ir_.specializations) {
    auto sp = std::make_unique<fb::SpecializationT>();
    sp->label = s.label;
    sp->predicate = expr(s.predicate);
    sp->graph = static_cast<std::uint32_t>(s.graph);
    out_.specializations.push_back(std::move(sp));
  }
  KILN_RETURN_IF_ERROR(self_tests());
  for (const auto& [k, v] : ir_.metadata) {
    auto kv = std::make_unique<fb::KeyValueT>();
    kv->key = k;
    kv->value = v;
    out_.metadata.push_back(std::move(kv));
  }
  return &out_;
}

}  // namespace

Result<std::vector<std::uint8_t>> serialize_bundle(const ir::Program& program, const SaveOptions& options) {
  BundleWriter writer({.compression = options.compression});
  Serializer s(program, options, writer);
  auto p = s.run();
  if (!p.ok()) return p.status();
  return writer.to_bytes(**p);
}

Status save_bundle(const ir::Program& program, const std::string& path, const SaveOptions& options) {
  BundleWriter writer({.compression = options.compression});
  Serializer s(program, options, writer);
  auto p = s.run();
  if (!p.ok()) return p.status();
  return writer.write(path, **p);
}

}  // namespace kiln

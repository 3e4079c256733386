// Walking the archive: its model JSON and tensors (tensor_data.h), signature, graphs, nodes,
// higher-order ops, asserts and unbacked bindings.
#include <algorithm>
#include <cstring>
#include <sstream>

#include "import/archive.h"
#include "import/importer.h"
#include "kiln/export/symbolic/print.h"

namespace kiln::pt2 {
namespace {

// The array member `key`, or an empty array (a reference: pointers into it stay valid).
const json& list(const json& j, const char* key) {
  static const json empty = json::array();
  const json* m = member(j, key);
  return m && m->is_array() ? *m : empty;
}

std::string strip_prefix(const std::string& s) {
  return s.rfind("torch.ops.", 0) == 0 ? s.substr(10) : s;
}

std::string packet_of(const std::string& target) {
  const std::size_t dot = target.rfind('.');
  if (target.rfind("aten.", 0) == 0 && std::count(target.begin(), target.end(), '.') >= 2) return target.substr(0, dot);
  return target;
}

// "aten.relu_" -> "aten.relu"; "" when not an in-place name.
std::string inplace_base(const std::string& packet) {
  if (packet.size() > 6 && packet.back() == '_' && packet[packet.size() - 2] != '_') return packet.substr(0, packet.size() - 1);
  return "";
}

// Targets whose outputs are all symbolic values recorded in sym_int_values/sym_bool_values.
bool is_symbolic_target(const std::string& t) {
  return t.rfind("_operator.", 0) == 0 || t.rfind("math.", 0) == 0 || t.rfind("aten.sym_size", 0) == 0 ||
         t.rfind("aten.sym_numel", 0) == 0 || t.rfind("aten.sym_stride", 0) == 0 ||
         t.rfind("aten.sym_storage_offset", 0) == 0 || t.rfind("sym_", 0) == 0 || t.rfind("torch.sym_", 0) == 0 ||
         t == "aten.sym_not.default" || t.rfind("aten.sym_ite", 0) == 0;
}

bool is_noop_target(const std::string& t) {
  return t.rfind("aten._assert_tensor_metadata", 0) == 0 || t.rfind("aten._assert_async", 0) == 0 ||
         t.rfind("aten._check_is_size", 0) == 0 || t.rfind("aten._print", 0) == 0 ||
         t.rfind("aten.record_stream", 0) == 0;
}

bool is_assert_target(const std::string& t) {
  return t.rfind("aten._assert_scalar", 0) == 0 || t.rfind("aten.sym_constrain_range", 0) == 0;
}

std::string out_arg_name(const json& o) {
  for (const char* key : {"as_tensor", "as_sym_int", "as_sym_bool", "as_sym_float"}) {
    if (const json* t = member(o, key)) {
      if (const json* n = member(*t, "name")) return n->get<std::string>();
      if (const json* n = member(*t, "as_name")) return n->get<std::string>();
    }
  }
  return "";
}

// Names every node input and graph output mentions (to know which outputs are used).
void collect_uses(const json& g, std::set<std::string>& used) {
  std::function<void(const json&)> visit = [&](const json& j) {
    if (j.is_object()) {
      for (auto it = j.begin(); it != j.end(); ++it) {
        if ((it.key() == "name" || it.key() == "as_name") && it->is_string()) used.insert(it->get<std::string>());
        else if (it.key() != "graph") visit(*it);
      }
    } else if (j.is_array()) {
      for (const json& e : j) visit(e);
    }
  };
  for (const json& n : list(g, "nodes")) {
    for (const json& in : list(n, "inputs")) {
      const json* a = member(in, "arg");
      if (!a) continue;
      if (const json* sg = member(*a, "as_graph")) {
        if (const json* inner = member(*sg, "graph")) collect_uses(*inner, used);
        continue;
      }
      visit(*a);
    }
  }
  visit(list(g, "outputs"));
}

}  // namespace

// ---- the archive ---------------------------------------------------------------------------

void Importer::read_archive(const std::string& path) {
  auto z = ZipArchive::open(path);
  if (!z.ok()) fail(z.status().code(), z.status().message());
  archive_ = std::move(z).value();
  auto model = find_model(*archive_);
  if (!model.ok()) fail(model.status().code(), model.status().message());
  auto bytes = archive_->read(model->json_member, MemberLimits::kJson);
  if (!bytes.ok()) fail(bytes.status().code(), bytes.status().message());
  if (model->layout == ArchiveLayout::kLegacy) quote_nonfinite_literals(*bytes);
  model_ = json::parse(bytes->begin(), bytes->end(), nullptr, /*allow_exceptions=*/false);
  bytes->clear();
  bytes->shrink_to_fit();
  if (model_.is_discarded() || !model_.is_object()) fail(StatusCode::kInvalidBundle, "'" + model->json_member + "' is not valid JSON");
  check_schema_version();
  auto tensors = read_tensors(*archive_, model->layout);
  if (!tensors.ok()) fail(tensors.status().code(), tensors.status().message());
  for (auto [from, into] : {std::pair{&tensors->weights, &weights_}, std::pair{&tensors->constants, &constants_}}) {
    for (ArchiveTensor& t : *from) {
      ir::ConstantTensor c;
      c.name = t.name;
      c.dtype = t.dtype;
      c.shape = std::move(t.shape);
      c.data = std::move(t.data);
      program.constants.push_back(std::move(c));
      (*into)[t.name] = static_cast<int>(program.constants.size()) - 1;
    }
  }
}

// PyTorch 2.6 writes schema 8.2, 2.11 writes 8.17; minor versions only add fields.
void Importer::check_schema_version() {
  const json* v = member(model_, "schema_version");
  if (!v) return;
  const json* major = member(*v, "major");
  const json* minor = member(*v, "minor");
  if (!major || !major->is_number_integer()) fail(StatusCode::kInvalidBundle, "model json: schema_version has no integer 'major'");
  const std::string text = std::to_string(major->get<std::int64_t>()) +
                           (minor && minor->is_number_integer() ? "." + std::to_string(minor->get<std::int64_t>()) : std::string());
  if (major->get<std::int64_t>() != kSchemaMajor) {
    fail(StatusCode::kInvalidBundle, "archive schema version " + text + " is not supported: this importer reads schema " +
                                         std::to_string(kSchemaMajor) + ".x (torch.export of PyTorch 2.6 to 2.11)");
  }
}

// ---- unsupported ops: one error listing all ---------------------------------------------

void Importer::check_supported() {
  check_mutations();
  std::map<std::string, int> missing;
  const auto& table = aten_handlers();
  std::function<void(const json&)> walk = [&](const json& g) {
    for (const json& n : list(g, "nodes")) {
      const std::string t = strip_prefix(n.value("target", std::string()));
      const bool ok = is_symbolic_target(t) || is_noop_target(t) || is_assert_target(t) ||
                      t == "higher_order.cond" || t == "higher_order.while_loop" || t == "higher_order.invoke_subgraph" ||
                      table.count(packet_of(t)) > 0 || table.count(inplace_base(packet_of(t))) > 0;
      if (!ok) missing[t]++;
      for (const json& in : list(n, "inputs")) {
        if (const json* a = member(in, "arg")) {
          if (const json* sg = member(*a, "as_graph")) {
            if (const json* inner = member(*sg, "graph")) walk(*inner);
          }
        }
      }
    }
  };
  walk(need(need(model_, "graph_module", "model"), "graph", "graph_module"));
  if (missing.empty()) return;
  std::string msg = std::to_string(missing.size()) + " unsupported op" + (missing.size() == 1 ? "" : "s") + " in '" + path_ + "':";
  for (const auto& [op, count] : missing) msg += " " + op + " (x" + std::to_string(count) + "),";
  msg.pop_back();
  fail(StatusCode::kUnsupported, msg);
}

// ---- graphs ------------------------------------------------------------------------------

int Importer::build_graph(const json& jg, const std::string& name, bool entry) {
  const int index = static_cast<int>(program.graphs.size());
  program.graphs.emplace_back();
  program.graphs.back().name = name;
  Scope scope;
  scope.graph = index;
  scope.jgraph = &jg;
  Scope* saved = scope_;
  scope_ = &scope;
  collect_uses(jg, used_names_);
  const json& inputs = need(jg, "inputs", "graph " + name);
  const json* specs = nullptr;
  if (entry) specs = &need(need(need(model_, "graph_module", "model"), "signature", "graph_module"), "input_specs", "signature");
  if (specs && specs->size() != inputs.size()) {
    fail(StatusCode::kInvalidBundle, "model json: " + std::to_string(specs->size()) + " input specs for " + std::to_string(inputs.size()) + " graph inputs");
  }
  std::vector<std::string> arg_names;
  if (entry) {
    const json& mcg = need(model_, "graph_module", "model").value("module_call_graph", json::array());
    if (!mcg.empty() && mcg[0].is_object()) {
      if (const json* sig = member(mcg[0], "signature")) arg_names = sig->value("forward_arg_names", std::vector<std::string>{});
    }
  }
  std::size_t user_index = 0;
  std::size_t user_count = 0;
  if (specs) for (const json& s : *specs) user_count += member(s, "user_input") != nullptr;
  // Buffers the graph mutates (BUFFER_MUTATION outputs) become state: an entry input after
  // the user inputs, initialized from the buffer's value.
  const json* out_specs = nullptr;
  if (entry) out_specs = &need(need(need(model_, "graph_module", "model"), "signature", "graph_module"), "output_specs", "signature");
  std::map<std::string, std::size_t> mutated;  // buffer name -> its BUFFER_MUTATION output
  if (out_specs) {
    for (std::size_t i = 0; i < out_specs->size(); ++i) {
      if (const json* b = member((*out_specs)[i], "buffer_mutation")) mutated[need(*b, "buffer_name", "buffer mutation").get<std::string>()] = i;
    }
  }
  std::vector<int> state_inputs;
  std::map<std::string, std::string> placeholders;  // input name -> what it is, for messages
  std::map<std::string, std::string> inplace_state;  // buffer written in place -> its input name
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const json& in = inputs[i];
    const std::string n = out_arg_name(in);
    placeholders[n] = "input '" + n + "'";
    if (specs) {
      const json& spec = (*specs)[i];
      auto lookup = [&](const std::map<std::string, int>& m1, const std::map<std::string, int>& m2, const std::string& key) {
        auto it = m1.find(key);
        if (it != m1.end()) return it->second;
        it = m2.find(key);
        if (it != m2.end()) return it->second;
        fail(StatusCode::kInvalidBundle, "input '" + n + "' refers to '" + key + "', which is not in the archive's weights or constants");
      };
      if (const json* p = member(spec, "parameter")) {
        const std::string parameter = need(*p, "parameter_name", "parameter spec").get<std::string>();
        placeholders[n] = "parameter '" + parameter + "'";
        scope.tensors[n] = constant_value(lookup(weights_, constants_, parameter));
        continue;
      }
      if (const json* b = member(spec, "buffer")) {
        const std::string buffer = need(*b, "buffer_name", "buffer spec").get<std::string>();
        placeholders[n] = "buffer '" + buffer + "'";
        const int constant = lookup(weights_, constants_, buffer);
        if (mutated.count(buffer) == 0 && inplace_buffers_.count(buffer) == 0) {
          scope.tensors[n] = constant_value(constant);
          continue;
        }
        if (mutated.count(buffer) == 0) inplace_state[buffer] = n;
        const ir::ConstantTensor& c = program.constants[static_cast<std::size_t>(constant)];
        std::vector<sym::Expr> shape;
        for (std::int64_t d : c.shape) shape.push_back(sym::Expr::constant(d));
        ir::Graph& g = program.graphs[static_cast<std::size_t>(index)];
        const int v = g.add_value({ir::ValueKind::kTensor, c.dtype, shape, {}, -1, buffer});
        state_inputs.push_back(v);
        scope.tensors[n] = v;
        program.states.push_back({buffer, c.dtype, c.shape, constant});
        continue;
      }
      if (const json* c = member(spec, "tensor_constant")) {
        placeholders[n] = "constant '" + need(*c, "tensor_constant_name", "constant spec").get<std::string>() + "'";
        scope.tensors[n] = constant_value(lookup(constants_, weights_, need(*c, "tensor_constant_name", "constant spec").get<std::string>()));
        continue;
      }
      if (!member(spec, "user_input")) {
        fail(StatusCode::kUnsupported, "input spec " + spec.dump().substr(0, 80) + " (custom objects, tokens) is not supported");
      }
    }
    ir::Graph& g = program.graphs[static_cast<std::size_t>(index)];
    std::string user_name = n;
    if (entry && arg_names.size() == user_count && user_index < arg_names.size()) user_name = arg_names[user_index];
    ++user_index;
    ir::InputSpec spec;
    spec.name = user_name;
    if (member(in, "as_tensor")) {
      const json& meta = tensor_meta(n);
      auto dt = dtype_from_torch(need(meta, "dtype", "tensor meta").get<std::int64_t>());
      if (!dt) fail(StatusCode::kUnsupported, "input '" + n + "' has an unsupported dtype");
      spec.dtype = *dt;
      spec.shape = tensor_shape(meta);
      const int v = g.add_value({ir::ValueKind::kTensor, *dt, spec.shape, {}, -1, user_name});
      g.inputs.push_back(v);
      scope.tensors[n] = v;
      for (std::size_t d = 0; d < spec.shape.size(); ++d) {
        if (spec.shape[d].is_symbol()) {
          for (const auto& [an, id] : symbols_) {
            if (id == spec.shape[d].symbol_id()) input_dims_.emplace_back(user_name + "." + std::to_string(d), an);
          }
        }
      }
    } else if (member(in, "as_sym_int") || member(in, "as_sym_bool")) {
      const bool is_bool = member(in, "as_sym_bool") != nullptr;
      const json& table = need(jg, is_bool ? "sym_bool_values" : "sym_int_values", "graph " + name);
      const json* e = member(table, n.c_str());
      if (!e) fail(StatusCode::kInvalidBundle, "model json: symbolic input '" + n + "' has no value entry");
      sym::Expr expr;
      if (const json* ae = member(*e, "as_expr")) expr = simplify(parse_sym(need(*ae, "expr_str", "as_expr").get<std::string>()));
      else if (const json* ai = member(*e, "as_int")) expr = sym::Expr::constant(ai->get<std::int64_t>());
      else fail(StatusCode::kInvalidBundle, "model json: symbolic input '" + n + "' has no expression");
      if (is_bool) fail(StatusCode::kUnsupported, "SymBool inputs are not supported");
      const int v = g.add_value({ir::ValueKind::kSymInt, DType::kI64, {}, expr, -1, user_name});
      g.inputs.push_back(v);
      scope.syms[n] = expr;
      spec.is_int = true;
      spec.dtype = DType::kI64;
      if (auto c = expr.constant_value()) {
        spec.static_value = *c;
      } else {
        spec.dynamism = ir::Dynamism::kDynamic;
        spec.expr = expr;
        for (const auto& [an, id] : symbols_) if (expr.is_symbol() && id == expr.symbol_id()) input_dims_.emplace_back(user_name, an);
      }
    } else if (const json* ci = member(in, "as_int")) {
      spec.is_int = true;
      spec.static_value = ci->get<std::int64_t>();
      const int v = g.add_value({ir::ValueKind::kSymInt, DType::kI64, {}, sym::Expr::constant(spec.static_value), -1, user_name});
      g.inputs.push_back(v);
    } else {
      fail(StatusCode::kUnsupported, "graph input " + in.dump().substr(0, 80) + " is not a tensor or int");
    }
    if (entry) program.inputs.push_back(spec);
  }
  for (const auto& [buffer, i] : mutated) {
    bool found = false;
    for (const ir::StateSpec& st : program.states) found = found || st.name == buffer;
    if (!found) {
      fail(StatusCode::kInvalidBundle, "buffer '" + buffer + "' is mutated by the graph (output " + std::to_string(i) +
                                           ", BUFFER_MUTATION) but is not a buffer input of the graph");
    }
  }
  for (int v : state_inputs) program.graphs[static_cast<std::size_t>(index)].inputs.push_back(v);
  scope.entry = entry;
  start_alias_tracking(jg, placeholders);
  for (const json& node : list(jg, "nodes")) {
    map_node(node);
    ++scope.node_index;
  }
  // Outputs: the user outputs, then the new value of each state (in state order).
  const json& outputs = need(jg, "outputs", "graph " + name);
  if (out_specs && out_specs->size() != outputs.size()) {
    fail(StatusCode::kInvalidBundle, "model json: " + std::to_string(out_specs->size()) + " output specs for " + std::to_string(outputs.size()) + " graph outputs");
  }
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    if (out_specs && member((*out_specs)[i], "buffer_mutation")) continue;
    if (out_specs && !member((*out_specs)[i], "user_output")) fail(StatusCode::kUnsupported, non_user_output_message((*out_specs)[i], i));
    const json& o = outputs[i];
    ir::Graph& g = program.graphs[static_cast<std::size_t>(index)];
    ir::OutputSpec spec;
    spec.name = "out" + std::to_string(program.outputs.size());
    int v = -1;
    if (member(o, "as_tensor")) {
      const std::string n = out_arg_name(o);
      auto it = scope.tensors.find(n);
      if (it == scope.tensors.end()) fail(StatusCode::kInvalidBundle, "graph " + name + " returns undefined tensor '" + n + "'");
      v = it->second;
      if (g.values[static_cast<std::size_t>(v)].kind == ir::ValueKind::kConstant) {
        v = [&] {
          ir::Node id;
          id.op = OpKind::Identity;
          id.inputs = {v};
          const ir::Value& c = g.values[static_cast<std::size_t>(v)];
          id.outputs = {g.add_value({ir::ValueKind::kTensor, c.dtype, c.shape, {}, -1, n})};
          g.nodes.push_back(id);
          return id.outputs[0];
        }();
      }
      spec.dtype = g.values[static_cast<std::size_t>(v)].dtype;
      spec.shape = g.values[static_cast<std::size_t>(v)].shape;
    } else if (member(o, "as_sym_int") || member(o, "as_int")) {
      Scope* s = scope_;
      scope_ = &scope;
      const sym::Expr e = simplify(sym_expr_of(o));
      scope_ = s;
      v = g.add_value({ir::ValueKind::kSymInt, DType::kI64, {}, e, -1, spec.name});
      spec.is_int = true;
      spec.dtype = DType::kI64;
      spec.expr = e;
    } else {
      fail(StatusCode::kUnsupported, "graph " + name + " output " + o.dump().substr(0, 80) + " is not a tensor or int");
    }
    g.outputs.push_back(v);
    if (entry) program.outputs.push_back(spec);
  }
  // The new value of each state: its BUFFER_MUTATION output (core IR), or what the buffer's
  // input name is bound to after the in-place ops (training IR).
  for (const ir::StateSpec& st : entry ? program.states : std::vector<ir::StateSpec>{}) {
    auto it = scope.tensors.end();
    std::string what;
    if (auto m = mutated.find(st.name); m != mutated.end()) {
      const std::size_t i = m->second;
      what = "output " + std::to_string(i);
      const std::string n = out_arg_name(outputs[i]);
      if (member(outputs[i], "as_tensor")) it = scope.tensors.find(n);
      if (it == scope.tensors.end()) fail(StatusCode::kInvalidBundle, "graph " + name + " " + what + " (new value of buffer '" + st.name + "') is not a defined tensor");
    } else {
      what = "the in-place updates";
      it = scope.tensors.find(inplace_state.at(st.name));
    }
    ir::Graph& g = program.graphs[static_cast<std::size_t>(index)];
    const ir::Value& val = g.values[static_cast<std::size_t>(it->second)];
    if (val.dtype != st.dtype || val.shape.size() != st.shape.size()) {
      fail(StatusCode::kUnsupported, what + " (new value of buffer '" + st.name + "') has another dtype or rank than the buffer");
    }
    g.outputs.push_back(it->second);
  }
  scope_ = saved;
  return index;
}

void Importer::enter_node(const json& node) {
  node_ = &node;
  target_ = strip_prefix(need(node, "target", "node").get<std::string>());
  const std::size_t dot = target_.rfind('.');
  overload_ = dot == std::string::npos ? "" : target_.substr(dot + 1);
  meta_ = node_meta(node);
  args_.clear();
  kwargs_.clear();
  for (const json& in : list(node, "inputs")) {
    const json* a = member(in, "arg");
    args_.push_back(a);
    const std::string n = in.value("name", std::string());
    if (!n.empty() && a) kwargs_[n] = a;
  }
  outputs_.clear();
  static const json kNone = json::object();
  for (const json& o : list(node, "outputs")) {
    if (const json* ts = member(o, "as_tensors")) {
      for (const json& t : *ts) outputs_.push_back(&t);
    } else if (const json* ots = member(o, "as_optional_tensors")) {
      for (const json& t : *ots) outputs_.push_back(member(t, "as_tensor") ? &t["as_tensor"] : &kNone);
    } else {
      outputs_.push_back(&o);
    }
  }
}

// An in-place variant (`relu_`) is computed by its functional handler; track_aliases
// rebinds self to the result and writes it back through views.
void Importer::apply_handler() {
  const auto& table = aten_handlers();
  auto it = table.find(packet_of(target_));
  if (it == table.end()) it = table.find(inplace_base(packet_of(target_)));
  if (it == table.end()) unsupported("is not supported");
  it->second(*this);
}

void Importer::map_node(const json& node) {
  enter_node(node);
  const int first_node = static_cast<int>(graph().nodes.size());
  if (is_noop_target(target_)) return;
  if (is_symbolic_target(target_)) {
    for (std::size_t k = 0; k < outputs_.size(); ++k) define_declared_sym(k);
    return;
  }
  if (target_.rfind("aten._assert_scalar", 0) == 0) {
    const json* a = arg(0, "self");
    if (!a) bad("has no condition");
    const sym::Expr e = sym_expr_of(*a);
    if (!e.is_bool()) bad("asserts a non-boolean expression");
    add_assert(e, "");
    // A bound on one symbol (torch._check(n >= 2)) is where that symbol's range was narrowed.
    if (sym::is_comparison(e.op()) && e.args()[0].is_symbol() && e.args()[1].is_constant()) {
      program.range_origins[e.args()[0].symbol_id()] = meta_;
    }
    return;
  }
  if (target_.rfind("aten.sym_constrain_range", 0) == 0) {
    const sym::Expr e = sym_int(0, "size");
    const bool for_size = target_.find("for_size") != std::string::npos;
    auto lo = opt_sym_int(1, "min");
    auto hi = opt_sym_int(2, "max");
    if (for_size && !lo) lo = sym::Expr::constant(0);
    if (lo) add_assert(sym::ge(e, *lo), "");
    if (hi) add_assert(sym::le(e, *hi), "");
    if (e.is_symbol()) program.range_origins[e.symbol_id()] = meta_;
    return;
  }
  if (target_.rfind("higher_order.", 0) == 0) {
    map_hop();
  } else {
    try {
      apply_handler();
    } catch (const std::out_of_range& e) {  // Shape's checked dims, json's .at(): the node's archive data is malformed
      bad(std::string("malformed archive: ") + e.what());
    }
    bind_unbacked(first_node);
    track_aliases(node);
    return;
  }
  bind_unbacked(first_node);
}

sym::Expr Importer::declared_sym(std::size_t k) {
  if (k >= outputs_.size()) bad("has no output " + std::to_string(k));
  const std::string n = out_arg_name(*outputs_[k]);
  if (member(*outputs_[k], "as_sym_float")) unsupported("symbolic floats are not supported");
  const bool is_bool = member(*outputs_[k], "as_sym_bool") != nullptr;
  const json& table = need(*scope_->jgraph, is_bool ? "sym_bool_values" : "sym_int_values", "graph");
  const json* e = member(table, n.c_str());
  if (!e) bad("symbolic output '" + n + "' has no entry in the graph's symbolic values");
  // Booleans stay as written: under the ranges they assert they would simplify to True.
  if (const json* ae = member(*e, "as_expr")) {
    const sym::Expr x = parse_sym(need(*ae, "expr_str", "as_expr").get<std::string>());
    return is_bool ? x : simplify(x);
  }
  if (const json* ai = member(*e, "as_int")) return sym::Expr::constant(ai->get<std::int64_t>());
  if (const json* ab = member(*e, "as_bool")) return sym::Expr::boolean(ab->get<bool>());
  bad("symbolic output '" + n + "' has no expression");
}

// ---- higher-order ops ---------------------------------------------------------------------

int Importer::subgraph(const json& a) {
  const json* sg = member(a, "as_graph");
  if (!sg) bad("expected a subgraph argument");
  const std::string n = need(*sg, "name", "as_graph").get<std::string>();
  auto it = subgraphs_.find(n);
  if (it != subgraphs_.end()) return it->second;
  const json& g = need(*sg, "graph", "as_graph");
  NodeContext saved = save_context();
  const int index = build_graph(g, n, false);
  restore_context(std::move(saved));
  subgraphs_[n] = index;
  return index;
}

void Importer::map_hop() {
  std::vector<int> graphs;
  std::vector<int> inputs;
  std::vector<ir::Attr> attrs;
  OpKind op;
  auto add_operand = [&](const json& a) {
    if (const json* t = member(a, "as_tensor")) {
      const std::string n = need(*t, "name", "operand").get<std::string>();
      auto it = scope_->tensors.find(n);
      if (it == scope_->tensors.end()) bad("operand '" + n + "' is undefined");
      inputs.push_back(it->second);
    } else if (member(a, "as_sym_int") || member(a, "as_int") || member(a, "as_sym_bool") || member(a, "as_bool")) {
      const sym::Expr e = simplify(sym_expr_of(a));
      inputs.push_back(graph().add_value({e.is_bool() ? ir::ValueKind::kSymBool : ir::ValueKind::kSymInt,
                                          e.is_bool() ? DType::kBool : DType::kI64, {}, e, -1, ""}));
    } else {
      unsupported("operand " + a.dump().substr(0, 60) + " of a higher-order op is not supported");
    }
  };
  auto add_operands = [&](const json* a) {
    if (!a) return;
    if (const json* ts = member(*a, "as_tensors")) {
      for (const json& t : *ts) add_operand(json{{"as_tensor", t}});
    } else if (const json* ss = member(*a, "as_sym_ints")) {
      for (const json& s : *ss) add_operand(json{{"as_sym_int", s}});
    } else if (a->is_array()) {
      for (const json& e : *a) add_operand(e);
    } else {
      add_operand(*a);
    }
  };
  const std::vector<const json*> args = args_;
  if (target_ == "higher_order.cond") {
    op = OpKind::Cond;
    if (args.size() < 4) bad("cond needs (pred, true_fn, false_fn, operands)");
    add_operand(*args[0]);
    graphs = {subgraph(*args[1]), subgraph(*args[2])};
    add_operands(args[3]);
  } else if (target_ == "higher_order.while_loop") {
    op = OpKind::WhileLoop;
    if (args.size() < 3) bad("while_loop needs (cond_fn, body_fn, carried, additional)");
    graphs = {subgraph(*args[0]), subgraph(*args[1])};
    add_operands(args[2]);
    if (args.size() > 3) add_operands(args[3]);
    attrs.emplace_back(std::monostate{});
  } else if (target_ == "higher_order.invoke_subgraph") {
    op = OpKind::InvokeSubgraph;
    if (args.size() < 2) bad("invoke_subgraph needs (subgraph, identifier, operands...)");
    graphs = {subgraph(*args[0])};
    std::string id;
    if (args[1] && member(*args[1], "as_string")) id = (*args[1])["as_string"].get<std::string>();
    for (std::size_t i = 2; i < args.size(); ++i) add_operands(args[i]);
    attrs.emplace_back(id);
  } else {
    unsupported("this higher-order op is not supported");
  }
  // Outputs: tensors with their declared shapes (fresh unbacked sizes are bound below),
  // SymInts (while_loop int carries) as SymInt values bound by Scalar bindings.
  ir::Node n;
  n.op = op;
  n.inputs = inputs;
  n.attrs = attrs;
  n.subgraphs = graphs;
  n.meta = meta_;
  std::vector<std::pair<std::size_t, int>> defs;
  for (std::size_t k = 0; k < outputs_.size(); ++k) {
    const json& o = *outputs_[k];
    const std::string name = out_arg_name(o).empty() && member(o, "name") ? o["name"].get<std::string>() : out_arg_name(o);
    if (member(o, "as_sym_int")) {
      const json& table = need(*scope_->jgraph, "sym_int_values", "graph");
      const json* e = member(table, name.c_str());
      if (!e || !member(*e, "as_expr")) bad("SymInt output '" + name + "' has no expression");
      const sym::Expr expr = simplify(parse_sym((*e)["as_expr"]["expr_str"].get<std::string>()));
      scope_->syms[name] = expr;
      n.outputs.push_back(graph().add_value({ir::ValueKind::kSymInt, DType::kI64, {}, expr, -1, name}));
      continue;
    }
    if (name.empty()) bad("output " + std::to_string(k) + " has no name");
    const int v = graph().add_value({ir::ValueKind::kTensor, out_dtype(k), out_shape(k), {}, -1, name});
    n.outputs.push_back(v);
    defs.emplace_back(k, v);
  }
  graph().nodes.push_back(std::move(n));
  for (const auto& [k, v] : defs) define(k, v);
}

// ---- asserts and unbacked bindings --------------------------------------------------------

std::string Importer::origin_of(int node_index, const std::string& suffix) {
  const ir::Graph& g = graph();
  const ir::Node& n = g.nodes[static_cast<std::size_t>(node_index)];
  std::string text(op_name(n.op));
  text += "(";
  for (std::size_t i = 0; i < n.inputs.size(); ++i) {
    const std::string& vn = g.values[static_cast<std::size_t>(n.inputs[i])].name;
    text += (i ? ", " : "") + (vn.empty() ? std::string("...") : vn);
  }
  return text + ")" + suffix;
}

void Importer::add_assert(sym::Expr e, const std::string& message) {
  // Not simplified: under the ranges recorded from the archive every assert reads as True.
  if (e.bool_value() == true) return;
  if (e.bool_value() == false) fail(StatusCode::kExportError, "[" + target_ + "] the archive asserts " + message + ", which is always false");
  if (!scope_->asserted.insert(e).second) return;
  int after = -1;
  for (int s : sym::free_symbols(e)) {
    if (program.env.symbol(s).kind != sym::SymbolKind::Unbacked) continue;
    auto it = scope_->binder.find(s);
    after = std::max(after, it == scope_->binder.end() ? static_cast<int>(graph().nodes.size()) - 1 : it->second);
  }
  // The message names the expression and where each data-dependent symbol comes from:
  // "u0 <= 16 (u0 = item(n_t))".
  std::string text = message.empty() ? sym::to_string(e, &program.env) : message;
  std::string origins;
  for (int s : sym::free_symbols(e)) {
    auto it = symbol_origin_.find(s);
    if (it != symbol_origin_.end()) origins += (origins.empty() ? "" : ", ") + program.env.symbol(s).name + " = " + it->second;
  }
  if (!origins.empty()) text += " (" + origins + ")";
  graph().asserts.push_back({e, text, after, meta_});
}

void Importer::add_range_asserts(int s, int node_index) {
  const sym::SymbolInfo& info = program.env.symbol(s);
  const sym::Expr u = sym::Expr::symbol(s);
  if (info.range.lo != sym::kNegInf) add_assert(sym::ge(u, sym::Expr::constant(info.range.lo)), "");
  if (info.range.hi != sym::kPosInf) add_assert(sym::le(u, sym::Expr::constant(info.range.hi)), "");
  (void)node_index;
}

void Importer::bind_scalar(sym::Expr e, int node_index, int output) {
  if (!e.is_symbol()) return;
  const int s = e.symbol_id();
  if (program.env.symbol(s).kind != sym::SymbolKind::Unbacked || scope_->binder.count(s)) return;
  graph().bindings.push_back({s, node_index, output, ir::UnbackedBinding::Kind::kScalar, 0, 1});
  scope_->binder[s] = node_index;
  symbol_origin_[s] = origin_of(node_index, "");
  add_range_asserts(s, node_index);
}

void Importer::bind_unbacked(int first_node) {
  ir::Graph& g = graph();
  for (int ni = first_node; ni < static_cast<int>(g.nodes.size()); ++ni) {
    const ir::Node& n = g.nodes[static_cast<std::size_t>(ni)];
    for (std::size_t o = 0; o < n.outputs.size(); ++o) {
      const ir::Value& v = g.values[static_cast<std::size_t>(n.outputs[o])];
      if (v.kind == ir::ValueKind::kSymInt) {
        bind_scalar(v.expr, ni, static_cast<int>(o));
        continue;
      }
      for (std::size_t d = 0; d < v.shape.size(); ++d) {
        const sym::Expr e = v.shape[d];
        int s = -1;
        std::int64_t divisor = 1;
        if (e.is_symbol()) {
          s = e.symbol_id();
        } else if (e.op() == sym::ExprOp::Mul && e.args().size() == 2 && e.args()[0].is_constant() && e.args()[1].is_symbol()) {
          divisor = *e.args()[0].constant_value();
          s = e.args()[1].symbol_id();
        }
        if (s < 0 || divisor < 1 || program.env.symbol(s).kind != sym::SymbolKind::Unbacked || scope_->binder.count(s)) continue;
        g.bindings.push_back({s, ni, static_cast<int>(o), ir::UnbackedBinding::Kind::kSize, static_cast<int>(d), divisor});
        scope_->binder[s] = ni;
        symbol_origin_[s] = origin_of(ni, (n.outputs.size() > 1 ? "[" + std::to_string(o) + "]" : std::string()) + ".size(" +
                                              std::to_string(d) + ")" + (divisor > 1 ? " / " + std::to_string(divisor) : ""));
        add_range_asserts(s, ni);
      }
    }
  }
  // Unbacked symbols in this node's symbolic outputs that no emitted node binds: the last
  // emitted node must be an item-like op (handled by its handler via bind_scalar).
  for (std::size_t k = 0; k < outputs_.size(); ++k) {
    const std::string n = out_arg_name(*outputs_[k]);
    auto it = scope_->syms.find(n);
    if (it == scope_->syms.end()) continue;
    for (int s : sym::free_symbols(it->second)) {
      if (program.env.symbol(s).kind == sym::SymbolKind::Unbacked && !scope_->binder.count(s)) {
        bad("produces the data-dependent symbol " + program.env.symbol(s).name + " in a way Kiln cannot bind");
      }
    }
  }
}

}  // namespace kiln::pt2

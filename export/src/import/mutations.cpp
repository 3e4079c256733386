// Never drop a mutation. Before any op is mapped (check_mutations), every graph output that
// is neither a user output nor a BUFFER_MUTATION (the core IR's functional state update) is
// rejected naming its kind, and every in-place op of the training IR that reaches a graph
// input through views is classified: a buffer becomes state, a parameter, constant or user
// input is rejected naming it. While the ops are mapped (track_aliases), an in-place op is
// computed functionally: its result rebinds `self`, is written back into the tensor `self`
// views (slice_scatter for slice / narrow / split, select_scatter for select / unbind, the
// inverse reshape or permutation), up to the base, and every other view of that base read
// later is recomputed from the new base. A write back Kiln cannot express exactly is
// rejected naming the op, the tensor and the source line.
#include <algorithm>
#include <map>
#include <set>

#include "import/importer.h"

namespace kiln::pt2 {
namespace {

const json& array_member(const json& j, const char* key) {
  static const json empty = json::array();
  const json* m = member(j, key);
  return m && m->is_array() ? *m : empty;
}

std::string string_member(const json& j, const char* key) {
  const json* m = member(j, key);
  return m && m->is_string() ? m->get<std::string>() : std::string();
}

std::string strip_torch_ops(const std::string& s) { return s.rfind("torch.ops.", 0) == 0 ? s.substr(10) : s; }

// "aten.add_.Tensor" -> "aten.add_"
std::string packet_name(const std::string& target) {
  const std::size_t first = target.find('.');
  const std::size_t second = first == std::string::npos ? std::string::npos : target.find('.', first + 1);
  return second == std::string::npos ? target : target.substr(0, second);
}

bool is_inplace_packet(const std::string& packet) {
  return packet.rfind("aten.", 0) == 0 && packet.size() > 2 && packet.back() == '_' && packet[packet.size() - 2] != '_';
}

bool is_out_variant(const std::string& target) {
  return target.size() > 4 && target.compare(target.size() - 4, 4, ".out") == 0;
}

// How an op's outputs alias its first tensor argument.
enum class ViewKind {
  kNone,       // a new tensor
  kReshape,    // the same elements in order (view, unsqueeze, alias, to without a dtype change, ...)
  kMaybeCopy,  // reshape / flatten / contiguous: a view of a contiguous tensor, else maybe a copy
  kSlice,      // slice, narrow
  kSelect,     // select
  kSplit,      // split, chunk (output k is a slice)
  kUnbind,     // unbind (output k is a select)
  kPermute,    // permute, transpose, t
  kOther,      // a view Kiln does not write back through (expand, diagonal, as_strided, ...)
};

ViewKind view_kind(const std::string& packet) {
  static const std::map<std::string, ViewKind> kinds = {
      {"aten.view", ViewKind::kReshape}, {"aten._unsafe_view", ViewKind::kReshape}, {"aten.view_as", ViewKind::kReshape},
      {"aten.unsqueeze", ViewKind::kReshape}, {"aten.squeeze", ViewKind::kReshape}, {"aten.unflatten", ViewKind::kReshape},
      {"aten.alias", ViewKind::kReshape}, {"aten.detach", ViewKind::kReshape}, {"aten.lift_fresh", ViewKind::kReshape},
      {"aten.to", ViewKind::kReshape}, {"aten.type_as", ViewKind::kReshape},
      {"aten.reshape", ViewKind::kMaybeCopy}, {"aten.reshape_as", ViewKind::kMaybeCopy}, {"aten._reshape_alias", ViewKind::kMaybeCopy},
      {"aten.flatten", ViewKind::kMaybeCopy}, {"aten.ravel", ViewKind::kMaybeCopy}, {"aten.contiguous", ViewKind::kMaybeCopy},
      {"aten.slice", ViewKind::kSlice}, {"aten.narrow", ViewKind::kSlice}, {"aten.select", ViewKind::kSelect},
      {"aten.split", ViewKind::kSplit}, {"aten.split_with_sizes", ViewKind::kSplit}, {"aten.chunk", ViewKind::kSplit},
      {"aten.unsafe_split", ViewKind::kSplit}, {"aten.tensor_split", ViewKind::kSplit}, {"aten.unbind", ViewKind::kUnbind},
      {"aten.permute", ViewKind::kPermute}, {"aten.transpose", ViewKind::kPermute}, {"aten.t", ViewKind::kPermute},
      {"aten.swapaxes", ViewKind::kPermute}, {"aten.swapdims", ViewKind::kPermute},
      {"aten.expand", ViewKind::kOther}, {"aten.expand_as", ViewKind::kOther}, {"aten.as_strided", ViewKind::kOther},
      {"aten.diagonal", ViewKind::kOther}, {"aten.unfold", ViewKind::kOther}, {"aten.movedim", ViewKind::kOther},
      {"aten.moveaxis", ViewKind::kOther}, {"aten.real", ViewKind::kOther}, {"aten.imag", ViewKind::kOther},
      {"aten.view_as_real", ViewKind::kOther}, {"aten.view_as_complex", ViewKind::kOther}, {"aten.mT", ViewKind::kOther},
      {"aten.mH", ViewKind::kOther}, {"aten.adjoint", ViewKind::kOther}, {"aten.numpy_T", ViewKind::kOther},
      {"aten.hsplit", ViewKind::kOther}, {"aten.vsplit", ViewKind::kOther}, {"aten.dsplit", ViewKind::kOther},
      {"aten.indices", ViewKind::kOther}, {"aten.values", ViewKind::kOther}};
  auto it = kinds.find(packet);
  return it == kinds.end() ? ViewKind::kNone : it->second;
}

// Ops whose result is a new contiguous tensor (then reshape / contiguous of it are views).
bool makes_contiguous(const std::string& packet) {
  static const std::set<std::string> fresh = {"aten.zeros", "aten.ones", "aten.full", "aten.empty", "aten.arange",
                                              "aten.scalar_tensor", "aten.new_zeros", "aten.new_ones", "aten.new_full",
                                              "aten.new_empty", "aten.lift_fresh_copy", "aten.tensor", "aten.linspace"};
  return fresh.count(packet) > 0;
}

// The tensor names a node argument mentions.
void tensor_names(const json& a, std::vector<std::string>& out) {
  if (const json* t = member(a, "as_tensor")) {
    if (std::string n = string_member(*t, "name"); !n.empty()) out.push_back(n);
  }
  for (const char* key : {"as_tensors", "as_optional_tensors"}) {
    for (const json& e : array_member(a, key)) {
      const json* t = member(e, "as_tensor");
      if (std::string n = string_member(t ? *t : e, "name"); !n.empty()) out.push_back(n);
    }
  }
  if (const json* t = member(a, "as_optional_tensor")) tensor_names(*t, out);
}

std::vector<std::string> output_names(const json& node) {
  std::vector<std::string> out;
  for (const json& o : array_member(node, "outputs")) tensor_names(o, out);
  return out;
}

// The tensor an in-place op writes (its `self`, or the `out` argument of an .out variant),
// or the tensor a view op views (its first tensor argument).
std::string written_or_viewed(const json& node, bool out_variant) {
  for (const json& in : array_member(node, "inputs")) {
    if (out_variant && string_member(in, "name") != "out") continue;
    std::vector<std::string> names;
    if (const json* a = member(in, "arg")) tensor_names(*a, names);
    if (!names.empty()) return names[0];
  }
  return "";
}

// PyTorch <= 2.6 writes no node names: the first output's name stands for the node.
std::string node_name(const json& node) {
  std::string n = string_member(node, "name");
  if (n.empty()) {
    auto outs = output_names(node);
    if (!outs.empty()) n = outs[0];
  }
  return n;
}

// The dtype code the graph records for tensor `name`, or -1.
std::int64_t recorded_dtype(const json& g, const std::string& name) {
  const json* tv = member(g, "tensor_values");
  const json* m = tv ? member(*tv, name.c_str()) : nullptr;
  const json* d = m ? member(*m, "dtype") : nullptr;
  return d && d->is_number_integer() ? d->get<std::int64_t>() : -1;
}

struct OutputKind {
  const char* key;    // the OutputSpec union field (torch/_export/serde/schema.py)
  const char* name_field;
};
constexpr OutputKind kOutputKinds[] = {
    {"buffer_mutation", "buffer_name"},       {"parameter_mutation", "parameter_name"},
    {"user_input_mutation", "user_input_name"}, {"gradient_to_parameter", "parameter_name"},
    {"gradient_to_user_input", "user_input_name"}, {"loss_output", ""},
    {"token", ""},
};

}  // namespace

std::string non_user_output_message(const json& spec, std::size_t index) {
  const std::string at = "output " + std::to_string(index);
  for (const OutputKind& k : kOutputKinds) {
    const json* body = member(spec, k.key);
    if (!body) continue;
    const std::string name = *k.name_field ? string_member(*body, k.name_field) : std::string();
    const std::string kind = k.key;
    if (kind == "buffer_mutation") return "buffer '" + name + "' is mutated by the graph (" + at + ", BUFFER_MUTATION)";
    if (kind == "parameter_mutation") {
      return "parameter '" + name + "' is mutated by the graph (" + at +
             ", PARAMETER_MUTATION): only buffers can be state; register it as a buffer";
    }
    if (kind == "user_input_mutation") {
      return "input '" + name + "' is mutated by the graph (" + at +
             ", USER_INPUT_MUTATION): Kiln never writes into the caller's inputs; update a clone of the input instead";
    }
    if (kind == "gradient_to_parameter") return at + " is the gradient of parameter '" + name + "' (GRADIENT_TO_PARAMETER): training programs are not supported";
    if (kind == "gradient_to_user_input") return at + " is the gradient of input '" + name + "' (GRADIENT_TO_USER_INPUT): training programs are not supported";
    if (kind == "loss_output") return at + " is a loss (LOSS_OUTPUT): training programs are not supported";
    return at + " is an effect token (TOKEN): programs with side effects are not supported";
  }
  std::string kind = spec.is_object() && !spec.empty() ? spec.begin().key() : spec.dump().substr(0, 60);
  return at + " has the output kind '" + kind + "', which this importer does not know: only user outputs and buffer mutations are imported";
}

void Importer::check_mutations() {
  const json& gm = need(model_, "graph_module", "model");
  const json& signature = need(gm, "signature", "graph_module");
  const json& g = need(gm, "graph", "graph_module");
  const json& out_specs = array_member(signature, "output_specs");
  for (std::size_t i = 0; i < out_specs.size(); ++i) {
    if (!member(out_specs[i], "user_output") && !member(out_specs[i], "buffer_mutation")) {
      fail(StatusCode::kUnsupported, non_user_output_message(out_specs[i], i));
    }
  }
  // Graph inputs: placeholder name -> {kind, name}.
  std::map<std::string, std::pair<std::string, std::string>> input_of;
  for (const json& spec : array_member(signature, "input_specs")) {
    static const std::pair<const char*, const char*> kKinds[] = {
        {"buffer", "buffer_name"}, {"parameter", "parameter_name"}, {"tensor_constant", "tensor_constant_name"}, {"user_input", ""}};
    for (const auto& [kind, name_field] : kKinds) {
      const json* body = member(spec, kind);
      const json* arg = body ? member(*body, "arg") : nullptr;
      if (!arg) continue;
      std::vector<std::string> names;
      tensor_names(*arg, names);
      const std::string placeholder = names.empty() ? string_member(*arg, "name") : names[0];
      if (placeholder.empty()) continue;
      input_of[placeholder] = {kind, *name_field ? string_member(*body, name_field) : placeholder};
    }
  }
  std::map<std::string, std::string> root_of;  // alias -> the graph input or intermediate it aliases
  for (const json& node : array_member(g, "nodes")) {
    const std::string target = strip_torch_ops(string_member(node, "target"));
    const std::string packet = packet_name(target);
    const bool out_variant = is_out_variant(target);
    const bool inplace = is_inplace_packet(packet) || out_variant;
    const ViewKind kind = view_kind(packet);
    if (!inplace && kind == ViewKind::kNone) continue;
    const std::string self = written_or_viewed(node, out_variant);
    if (self.empty()) continue;
    const std::string root = root_of.count(self) ? root_of[self] : self;
    const std::vector<std::string> outs = output_names(node);
    // A dtype conversion (x.to(torch.float32) of an int tensor) is a new tensor.
    if (!inplace && (packet == "aten.to" || packet == "aten.type_as") && !outs.empty() &&
        recorded_dtype(g, outs[0]) != recorded_dtype(g, self)) {
      continue;
    }
    if (inplace) {
      auto it = input_of.find(root);
      if (it != input_of.end()) {
        const auto& [what, name] = it->second;
        const ir::NodeMeta meta = node_meta(node);
        const std::string where = meta.location.known() ? " (" + meta.location.file + ":" + std::to_string(meta.location.line) + ")" : "";
        const std::string by = " is mutated in place by " + target + " (node '" + node_name(node) + "')" + where;
        if (what == "buffer") inplace_buffers_.insert(name);
        else if (what == "parameter") fail(StatusCode::kUnsupported, "parameter '" + name + "'" + by + ": only buffers can be state; register it as a buffer");
        else if (what == "tensor_constant") fail(StatusCode::kUnsupported, "constant '" + name + "'" + by + ": constants cannot be updated");
        else fail(StatusCode::kUnsupported, "input '" + name + "'" + by + ": Kiln never writes into the caller's inputs; update a clone of the input instead");
      }
    }
    for (const std::string& out : outs) {
      if (out != self) root_of[out] = root;
    }
  }
}

// ---- while mapping: views and the functional form of in-place ops --------------------------

void Importer::start_alias_tracking(const json& jgraph, const std::map<std::string, std::string>& placeholders) {
  Scope& sc = *scope_;
  sc.views.clear();
  sc.last_use.clear();
  sc.placeholders = placeholders;
  for (const auto& [name, what] : placeholders) sc.contiguous.insert(name);
  const json& nodes = array_member(jgraph, "nodes");
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    for (const json& in : array_member(nodes[i], "inputs")) {
      std::vector<std::string> names;
      if (const json* a = member(in, "arg")) tensor_names(*a, names);
      for (const std::string& n : names) sc.last_use[n] = i;
    }
  }
  for (const json& o : array_member(jgraph, "outputs")) {
    std::vector<std::string> names;
    tensor_names(o, names);
    for (const std::string& n : names) sc.last_use[n] = nodes.size();
  }
}

void Importer::track_aliases(const json& node) {
  Scope& sc = *scope_;
  const std::string target = target_;
  const std::string packet = packet_name(target);
  const bool out_variant = is_out_variant(target);
  const bool inplace = is_inplace_packet(packet) || out_variant;
  const std::vector<std::string> outs = output_names(node);
  auto is_contiguous = [&](const std::string& n) {
    auto v = sc.views.find(n);
    return v != sc.views.end() ? v->second.contiguous : sc.contiguous.count(n) > 0;
  };
  const std::string self = written_or_viewed(node, out_variant);
  if (!inplace) {
    const ViewKind kind = view_kind(packet);
    if (kind == ViewKind::kNone) {
      const bool copy_of_contiguous = (packet == "aten.clone" || packet == "aten._to_copy") && !self.empty() && is_contiguous(self);
      if (makes_contiguous(packet) || copy_of_contiguous) sc.contiguous.insert(outs.begin(), outs.end());
      return;
    }
    if (self.empty() || !sc.tensors.count(self)) return;
    const int parent = sc.tensors.at(self);
    if ((packet == "aten.to" || packet == "aten.type_as") && (outs.empty() || !sc.tensors.count(outs[0]) ||
                                                             dtype(sc.tensors.at(outs[0])) != dtype(parent))) {
      return;  // a conversion: a new tensor
    }
    const bool parent_contiguous = is_contiguous(self);
    ViewEdge edge;
    edge.parent = self;
    edge.node = &node;
    switch (kind) {
      case ViewKind::kReshape:
        edge.contiguous = parent_contiguous;
        break;
      case ViewKind::kMaybeCopy:
        edge.contiguous = parent_contiguous || packet == "aten.contiguous";
        edge.ambiguous = !parent_contiguous;
        break;
      case ViewKind::kSlice:
      case ViewKind::kSelect:
      case ViewKind::kSplit:
      case ViewKind::kUnbind: {
        // Slicing dim d of a contiguous tensor whose dims before d are all 1 stays contiguous.
        const std::size_t dim_pos = kind == ViewKind::kSplit ? 2 : 1;
        const std::int64_t d = norm_dim(int_arg(dim_pos, "dim", 0), rank(parent));
        bool leading_ones = true;
        for (std::int64_t i = 0; i < d; ++i) leading_ones = leading_ones && shape(parent)[static_cast<std::size_t>(i)].constant_value() == 1;
        const bool unit_step = packet != "aten.slice" || int_arg(4, "step", 1) == 1;
        edge.contiguous = parent_contiguous && leading_ones && unit_step;
        break;
      }
      default:
        edge.contiguous = false;
    }
    for (std::size_t k = 0; k < outs.size(); ++k) {
      if (outs[k] == self) continue;
      edge.output = k;
      edge.order = sc.views.size();
      sc.views[outs[k]] = edge;
    }
    return;
  }
  if (self.empty()) return;
  auto written = sc.tensors.find(self);
  if (outs.empty() || !sc.tensors.count(outs[0]) || written == sc.tensors.end()) bad("in-place op without a result for '" + self + "'");
  const int value = sc.tensors.at(outs[0]);
  const ir::NodeMeta op_meta = meta_;
  const std::string where = op_meta.location.known() ? " (" + op_meta.location.file + ":" + std::to_string(op_meta.location.line) + ")" : "";
  auto refuse = [&](const std::string& why) {
    fail(StatusCode::kUnsupported, "[" + target + "] writes in place to '" + self + "'" + where + ", " + why +
                                       "; export the core IR (ep.run_decompositions())");
  };
  auto describe = [&](const std::string& name, const ViewEdge& e) {
    return "'" + name + "' is a view of '" + e.parent + "' made by " + strip_torch_ops(string_member(*e.node, "target")) +
           " (node '" + node_name(*e.node) + "')";
  };
  // The op's result is `self` itself.
  auto record_result = [&]() {
    for (const std::string& out : outs) {
      if (out == self) continue;
      ViewEdge e;
      e.parent = self;
      e.contiguous = is_contiguous(self);
      e.order = sc.views.size();
      sc.views[out] = e;
    }
  };
  if (value == written->second) {  // detach_ and friends: nothing changes
    record_result();
    return;
  }
  // The base `self` is reached from, and whether it may be written.
  std::string root = self;
  for (auto e = sc.views.find(root); e != sc.views.end(); e = sc.views.find(root)) root = e->second.parent;
  if (auto p = sc.placeholders.find(root); p != sc.placeholders.end()) {
    if (!sc.entry) refuse("which is (a view of) " + p->second + " of a subgraph: a subgraph cannot update its inputs");
    auto base = sc.tensors.find(root);
    if (base != sc.tensors.end() && value_kind(base->second) == ir::ValueKind::kConstant) {
      bad("writes in place to " + p->second + ", which the mutation check did not make state");
    }
  }
  // Write the new value back, view by view, up to the base.
  std::vector<std::string> path = {self};
  sc.tensors[self] = value;
  std::string name = self;
  int current = value;
  for (auto e = sc.views.find(name); e != sc.views.end(); e = sc.views.find(name)) {
    const ViewEdge edge = e->second;
    auto base = sc.tensors.find(edge.parent);
    if (base == sc.tensors.end()) bad("view '" + name + "' of the undefined tensor '" + edge.parent + "'");
    if (edge.node) {
      if (edge.ambiguous) {
        refuse(describe(name, edge) + " of a tensor whose strides Kiln does not track: PyTorch may have copied it, and then the write does not reach '" +
               edge.parent + "'");
      }
      std::optional<int> next;
      in_context(*edge.node, &op_meta, [&] { next = write_back(edge, base->second, current); });
      if (!next) refuse(describe(name, edge) + ", which Kiln cannot write back through");
      current = *next;
    }
    name = edge.parent;
    sc.tensors[name] = current;
    path.push_back(name);
  }
  record_result();
  recompute_views(root, path);
}

void Importer::in_context(const json& node, const ir::NodeMeta* meta, const std::function<void()>& fn) {
  NodeContext saved = save_context();
  enter_node(node);
  if (meta) meta_ = *meta;
  fn();
  restore_context(std::move(saved));
}

void Importer::restore_context(NodeContext&& c) {
  node_ = c.node;
  target_ = std::move(c.target);
  overload_ = std::move(c.overload);
  meta_ = std::move(c.meta);
  args_ = std::move(c.args);
  kwargs_ = std::move(c.kwargs);
  outputs_ = std::move(c.outputs);
}

// The new value of `base` once its view `edge` holds `value` (in the view node's context);
// nullopt for a view Kiln cannot write back through.
std::optional<int> Importer::write_back(const ViewEdge& edge, int base, int value) {
  const std::string packet = packet_name(target_);
  value = cast(value, dtype(base));
  const std::int64_t r = rank(base);
  const sym::Expr one = sym::Expr::constant(1);
  switch (view_kind(packet)) {
    case ViewKind::kReshape:
    case ViewKind::kMaybeCopy:
      return reshape(value, shape(base));
    case ViewKind::kPermute: {
      std::vector<std::int64_t> perm;
      for (std::int64_t i = 0; i < r; ++i) perm.push_back(i);
      if (packet == "aten.permute") {
        const std::vector<std::int64_t> dims = int_list(1, "dims");
        if (static_cast<std::int64_t>(dims.size()) != r) return std::nullopt;
        for (std::size_t i = 0; i < dims.size(); ++i) perm[static_cast<std::size_t>(norm_dim(dims[i], r))] = static_cast<std::int64_t>(i);
      } else if (r >= 2) {  // a transpose is its own inverse
        const bool t = packet == "aten.t";
        std::swap(perm[static_cast<std::size_t>(t ? 0 : norm_dim(int_arg(1, "dim0"), r))],
                  perm[static_cast<std::size_t>(t ? 1 : norm_dim(int_arg(2, "dim1"), r))]);
      }
      return permute(value, perm);
    }
    case ViewKind::kSlice: {
      const std::int64_t d = norm_dim(int_arg(1, "dim", 0), r);
      if (packet == "aten.narrow") {
        sym::Expr start = sym_int(2, "start");
        if (auto k = start.constant_value(); k && *k < 0) start = simplify(shape(base)[static_cast<std::size_t>(d)] + start);
        return slice_scatter_impl(*this, base, value, d, start, simplify(start + sym_int(3, "length")));
      }
      if (int_arg(4, "step", 1) != 1) return std::nullopt;
      const sym::Expr start = opt_sym_int(2, "start").value_or(sym::Expr::constant(0));
      const sym::Expr end = opt_sym_int(3, "end").value_or(sym::Expr::constant(INT64_MAX));
      return slice_scatter_impl(*this, base, value, d, start, end);
    }
    case ViewKind::kSelect: {
      const std::int64_t d = norm_dim(int_arg(1, "dim"), r);
      sym::Expr index = sym_int(2, "index");
      if (auto k = index.constant_value(); k && *k < 0) index = simplify(shape(base)[static_cast<std::size_t>(d)] + index);
      return slice_scatter_impl(*this, base, unsqueeze(value, d), d, index, simplify(index + one));
    }
    case ViewKind::kSplit: {
      const std::int64_t d = norm_dim(int_arg(2, "dim", 0), r);
      sym::Expr offset = sym::Expr::constant(0);
      for (std::size_t k = 0; k < edge.output; ++k) offset = offset + out_shape(k)[static_cast<std::size_t>(d)];
      offset = simplify(offset);
      return slice_scatter_impl(*this, base, value, d, offset, simplify(offset + out_shape(edge.output)[static_cast<std::size_t>(d)]));
    }
    case ViewKind::kUnbind: {
      const std::int64_t d = norm_dim(int_arg(1, "dim", 0), r);
      const sym::Expr at = sym::Expr::constant(static_cast<std::int64_t>(edge.output));
      return slice_scatter_impl(*this, base, unsqueeze(value, d), d, at, simplify(at + one));
    }
    default:
      return std::nullopt;
  }
}

// After `root` (through `path`) was written: every other view of it that is read later (or
// has a view read later) is recomputed from the new value, in the order the views were made.
void Importer::recompute_views(const std::string& root, const std::vector<std::string>& path) {
  Scope& sc = *scope_;
  const std::set<std::string> written(path.begin(), path.end());
  auto root_of = [&](std::string n) {
    for (auto e = sc.views.find(n); e != sc.views.end(); e = sc.views.find(n)) n = e->second.parent;
    return n;
  };
  std::vector<std::pair<std::size_t, std::string>> group;  // (order, name)
  for (const auto& [n, e] : sc.views) {
    if (!written.count(n) && root_of(n) == root) group.emplace_back(e.order, n);
  }
  std::sort(group.begin(), group.end());
  std::set<std::string> live;
  for (auto it = group.rbegin(); it != group.rend(); ++it) {
    auto use = sc.last_use.find(it->second);
    if (live.count(it->second) || (use != sc.last_use.end() && use->second > sc.node_index)) {
      live.insert(it->second);
      live.insert(sc.views.at(it->second).parent);
    }
  }
  std::set<const json*> replayed;
  for (const auto& [order, n] : group) {
    if (!live.count(n)) continue;
    const ViewEdge& e = sc.views.at(n);
    if (!e.node) {
      sc.tensors[n] = sc.tensors.at(e.parent);
      continue;
    }
    if (!replayed.insert(e.node).second) continue;
    const std::string what = "'" + n + "' is a view of '" + e.parent + "' made by " + strip_torch_ops(string_member(*e.node, "target")) +
                             " (node '" + node_name(*e.node) + "'), read later";
    if (e.ambiguous) {
      unsupported("writes in place to '" + path.front() + "' and " + what + ": PyTorch may have made it a copy (Kiln does not track strides); export the core IR (ep.run_decompositions())");
    }
    in_context(*e.node, nullptr, [&] { apply_handler(); });
  }
}

}  // namespace kiln::pt2

// Never drop a mutation: before any op is mapped, every graph output that is neither a user
// output nor a BUFFER_MUTATION (which becomes a state update: the core IR's functional
// form) — USER_INPUT_MUTATION, PARAMETER_MUTATION, GRADIENT_*, LOSS_OUTPUT, TOKEN, ... —
// and every in-place op on a graph input or a view of one (training IR: `add_`, `copy_`,
// `index_copy_` on a buffer) is rejected with kUnsupported naming it. Training-IR in-place
// updates of buffers are not turned into state yet; importing one as a stateless graph
// would give wrong answers from its second call on. An in-place write through a view of an intermediate whose other aliases
// are read later is rejected too (the importer computes in-place ops functionally).
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
  return packet.size() > 2 && packet.back() == '_' && packet[packet.size() - 2] != '_';
}

// Ops whose output may share memory with their first tensor argument.
bool is_view_packet(const std::string& packet) {
  static const std::set<std::string> views = {
      "aten.view", "aten._unsafe_view", "aten.reshape", "aten._reshape_alias", "aten.reshape_as", "aten.slice",
      "aten.select", "aten.narrow", "aten.transpose", "aten.t", "aten.permute", "aten.expand", "aten.expand_as",
      "aten.unsqueeze", "aten.squeeze", "aten.alias", "aten.as_strided", "aten.diagonal", "aten.unflatten",
      "aten.flatten", "aten.view_as", "aten.detach", "aten.split", "aten.split_with_sizes", "aten.chunk",
      "aten.unbind", "aten.unfold", "aten.movedim", "aten.swapaxes", "aten.swapdims", "aten.tensor_split",
      "aten.contiguous", "aten.to", "aten.type_as", "aten.lift_fresh", "aten.real", "aten.imag",
      "aten.view_as_real", "aten.view_as_complex", "aten.mT", "aten.mH", "aten.adjoint", "aten.hsplit",
      "aten.vsplit", "aten.dsplit", "aten.split_copy"};
  return views.count(packet) > 0;
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

// PyTorch <= 2.6 writes no node names: the first output's name stands for the node.
std::string node_name(const json& node) {
  std::string n = string_member(node, "name");
  if (n.empty()) {
    auto outs = output_names(node);
    if (!outs.empty()) n = outs[0];
  }
  return n;
}

struct OutputKind {
  const char* key;    // the OutputSpec union field
  const char* label;  // the OutputKind name
  const char* name_field;
};
constexpr OutputKind kOutputKinds[] = {
    {"buffer_mutation", "BUFFER_MUTATION", "buffer_name"},
    {"parameter_mutation", "PARAMETER_MUTATION", "parameter_name"},
    {"user_input_mutation", "USER_INPUT_MUTATION", "user_input_name"},
    {"gradient_to_parameter", "GRADIENT_TO_PARAMETER", "parameter_name"},
    {"gradient_to_user_input", "GRADIENT_TO_USER_INPUT", "user_input_name"},
    {"loss_output", "LOSS_OUTPUT", ""},
    {"token", "TOKEN", ""},
};

}  // namespace

std::string non_user_output_message(const json& spec, std::size_t index) {
  const std::string at = "output " + std::to_string(index);
  for (const OutputKind& k : kOutputKinds) {
    const json* body = member(spec, k.key);
    if (!body) continue;
    const std::string name = *k.name_field ? string_member(*body, k.name_field) : std::string();
    const std::string kind = std::string(k.key);
    if (kind == "buffer_mutation") return "buffer '" + name + "' is mutated by the graph (" + at + ", BUFFER_MUTATION): stateful programs are not supported yet";
    if (kind == "parameter_mutation") return "parameter '" + name + "' is mutated by the graph (" + at + ", PARAMETER_MUTATION): stateful programs are not supported yet";
    if (kind == "user_input_mutation") return "input '" + name + "' is mutated by the graph (" + at + ", USER_INPUT_MUTATION): programs that mutate their inputs are not supported yet";
    if (kind == "gradient_to_parameter") return at + " is the gradient of parameter '" + name + "' (GRADIENT_TO_PARAMETER): training programs are not supported";
    if (kind == "gradient_to_user_input") return at + " is the gradient of input '" + name + "' (GRADIENT_TO_USER_INPUT): training programs are not supported";
    if (kind == "loss_output") return at + " is a loss (LOSS_OUTPUT): training programs are not supported";
    return at + " is an effect token (TOKEN): programs with side effects are not supported";
  }
  std::string kind = spec.is_object() && !spec.empty() ? spec.begin().key() : spec.dump().substr(0, 60);
  return at + " has the output kind '" + kind + "', which this importer does not know: only user outputs are imported";
}

void Importer::check_mutations() {
  const json& gm = need(model_, "graph_module", "model");
  const json& signature = need(gm, "signature", "graph_module");
  const json& g = need(gm, "graph", "graph_module");
  const json& out_specs = array_member(signature, "output_specs");
  // BUFFER_MUTATION outputs (the core IR's functional updates) become state (graph.cpp);
  // every other kind is rejected.
  for (std::size_t i = 0; i < out_specs.size(); ++i) {
    if (!member(out_specs[i], "user_output") && !member(out_specs[i], "buffer_mutation")) {
      fail(StatusCode::kUnsupported, non_user_output_message(out_specs[i], i));
    }
  }
  // Graph inputs: placeholder name -> what it is ("buffer 'total'").
  std::map<std::string, std::string> input_of;  // alias name -> the input it aliases
  const json& specs = array_member(signature, "input_specs");
  for (const json& spec : specs) {
    std::string placeholder, what;
    if (const json* b = member(spec, "buffer")) what = "buffer '" + string_member(*b, "buffer_name") + "'";
    else if (const json* p = member(spec, "parameter")) what = "parameter '" + string_member(*p, "parameter_name") + "'";
    else if (const json* c = member(spec, "tensor_constant")) what = "constant '" + string_member(*c, "tensor_constant_name") + "'";
    else if (member(spec, "user_input")) what = "input";
    else continue;
    for (const char* kind : {"buffer", "parameter", "tensor_constant", "user_input"}) {
      const json* body = member(spec, kind);
      const json* arg = body ? member(*body, "arg") : nullptr;
      if (!arg) continue;
      std::vector<std::string> names;
      tensor_names(*arg, names);
      if (names.empty()) placeholder = string_member(*arg, "name");
      else placeholder = names[0];
    }
    if (placeholder.empty()) continue;
    input_of[placeholder] = what == "input" ? "input '" + placeholder + "'" : what;
  }
  // Every name's last reader (node index; the outputs count as one past the last node).
  const json& nodes = array_member(g, "nodes");
  std::map<std::string, std::size_t> last_use;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    for (const json& in : array_member(nodes[i], "inputs")) {
      std::vector<std::string> names;
      if (const json* a = member(in, "arg")) tensor_names(*a, names);
      for (const std::string& n : names) last_use[n] = i;
    }
  }
  for (const json& o : array_member(g, "outputs")) {
    std::vector<std::string> names;
    tensor_names(o, names);
    for (const std::string& n : names) last_use[n] = nodes.size();
  }
  std::map<std::string, std::string> base_of;                // view -> the tensor it views (its root)
  std::map<std::string, std::vector<std::string>> aliases;   // root -> every view of it
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const json& node = nodes[i];
    const std::string target = strip_torch_ops(string_member(node, "target"));
    const std::string packet = packet_name(target);
    const bool inplace = is_inplace_packet(packet) && target.rfind("aten.", 0) == 0;
    const bool out_variant = target.size() > 4 && target.compare(target.size() - 4, 4, ".out") == 0;
    if (!inplace && !out_variant && !is_view_packet(packet)) continue;
    std::string self;
    for (const json& in : array_member(node, "inputs")) {
      const std::string arg_name = string_member(in, "name");
      if (out_variant ? arg_name != "out" : !self.empty()) continue;
      std::vector<std::string> names;
      if (const json* a = member(in, "arg")) tensor_names(*a, names);
      if (!names.empty()) self = names[0];
    }
    if (self.empty()) continue;
    const std::string root = base_of.count(self) ? base_of[self] : self;
    if (inplace || out_variant) {
      if (auto it = input_of.find(root); it != input_of.end()) {
        const ir::NodeMeta meta = node_meta(node);
        std::string where = meta.location.known() ? " (" + meta.location.file + ":" + std::to_string(meta.location.line) + ")" : "";
        const bool state = it->second.rfind("input", 0) != 0;
        fail(StatusCode::kUnsupported, it->second + " is mutated in place by " + target + " (node '" + node_name(node) + "')" +
                                           where + (state ? ": stateful programs are not supported yet"
                                                          : ": programs that mutate their inputs are not supported yet"));
      }
      // The update is computed functionally and rebinds `self`: anything else sharing its
      // memory must not be read afterwards.
      std::vector<std::string> group = aliases[root];
      group.push_back(root);
      for (const std::string& other : group) {
        auto use = last_use.find(other);
        if (other == self || use == last_use.end() || use->second <= i) continue;
        const ir::NodeMeta meta = node_meta(node);
        std::string where = meta.location.known() ? " (" + meta.location.file + ":" + std::to_string(meta.location.line) + ")" : "";
        fail(StatusCode::kUnsupported, "[" + target + "] writes in place to '" + self + "', which shares memory with '" + other +
                                           "', read later" + where + ": in-place updates through views are not supported");
      }
    }
    for (const std::string& out : output_names(node)) {
      if (out == self) continue;
      base_of[out] = root;
      aliases[root].push_back(out);
      if (auto it = input_of.find(root); it != input_of.end()) input_of[out] = it->second;
    }
  }
}

}  // namespace kiln::pt2

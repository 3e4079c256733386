// Program::load: resolve a CPU kernel for every op and check node arities and attribute
// kinds against the op table, so that execution never meets a malformed node.
#include <map>

#include "backends/cpu/kernel.h"
#include "executor/program_impl.h"
#include "kiln/format/kiln_generated.h"

namespace kiln {
namespace {

template <typename V>
std::uint32_t count(const V* v) { return v == nullptr ? 0 : v->size(); }

bool attr_matches(fb::AttrKind kind, const AttrSpec& spec) {
  if (kind == fb::AttrKind::None) return spec.optional;
  return static_cast<int>(kind) == static_cast<int>(spec.type);
}

Status check_node(const fb::Program& p, const Program::Impl& impl, std::uint32_t g, std::uint32_t n) {
  const auto* node = p.graphs()->Get(g)->nodes()->Get(n);
  const OpInfo& info = op_info(impl.kinds[node->op()]);
  const std::string where = "graph " + std::to_string(g) + ", node " + std::to_string(n) + " (" + std::string(info.name) + ")";
  const auto ins = static_cast<int>(count(node->inputs())), outs = static_cast<int>(count(node->outputs()));
  if (ins < info.min_inputs || (info.max_inputs >= 0 && ins > info.max_inputs)) {
    return Status(StatusCode::kInvalidBundle, where + ": " + std::to_string(ins) + " inputs, expected " + std::to_string(info.min_inputs) +
                                                  (info.max_inputs < 0 ? " or more" : ".." + std::to_string(info.max_inputs)));
  }
  if (info.num_outputs >= 0 && outs != info.num_outputs) {
    return Status(StatusCode::kInvalidBundle, where + ": " + std::to_string(outs) + " outputs, expected " + std::to_string(info.num_outputs));
  }
  const std::uint32_t n_attrs = count(node->attrs());
  if (n_attrs > info.attrs.size()) {
    // Attributes appended by a newer minor version are ignored; none are defined yet.
  }
  for (std::uint32_t k = 0; k < info.attrs.size(); ++k) {
    const fb::AttrKind kind = k < n_attrs ? node->attrs()->Get(k)->kind() : fb::AttrKind::None;
    if (!attr_matches(kind, info.attrs[k])) {
      return Status(StatusCode::kInvalidBundle, where + ": attribute " + std::string(info.attrs[k].name) + " has kind " +
                                                    fb::EnumNameAttrKind(kind) + ", expected a different kind");
    }
  }
  return Status::Ok();
}

}  // namespace

Program::~Program() = default;

Result<std::shared_ptr<const Program>> Program::load(std::unique_ptr<Bundle> bundle) {
  auto program = std::shared_ptr<Program>(new Program());
  program->impl_ = std::make_unique<Impl>();
  Impl& impl = *program->impl_;
  const fb::Program& p = bundle->program();
  std::map<std::string, int> missing;  // op name -> node count
  const std::uint32_t n_ops = count(p.op_names());
  std::vector<bool> op_missing(n_ops, false);
  impl.kinds.resize(n_ops, OpKind::Identity);
  impl.kernels.resize(n_ops, nullptr);
  for (std::uint32_t i = 0; i < n_ops; ++i) {
    const std::string name = p.op_names()->Get(i)->str();
    const auto kind = op_from_name(name);
    if (kind) {
      impl.kinds[i] = *kind;
      impl.kernels[i] = cpu::cpu_kernel(*kind);
    }
    if (!kind || impl.kernels[i] == nullptr) {
      op_missing[i] = true;
      missing[name] = 0;
    }
  }
  for (std::uint32_t g = 0; g < count(p.graphs()); ++g) {
    for (std::uint32_t n = 0; n < count(p.graphs()->Get(g)->nodes()); ++n) {
      const std::uint32_t op = p.graphs()->Get(g)->nodes()->Get(n)->op();
      if (op_missing[op]) missing[p.op_names()->Get(op)->str()]++;
    }
  }
  if (!missing.empty()) {
    std::string list;
    for (const auto& [name, nodes] : missing) {
      list += (list.empty() ? "" : ", ") + name + " (" + std::to_string(nodes) + (nodes == 1 ? " node)" : " nodes)");
    }
    return Status(StatusCode::kUnsupported, "this build cannot run " + std::to_string(missing.size()) + " op" +
                                                (missing.size() == 1 ? "" : "s") + " used by the bundle: " + list);
  }
  for (std::uint32_t g = 0; g < count(p.graphs()); ++g) {
    for (std::uint32_t n = 0; n < count(p.graphs()->Get(g)->nodes()); ++n) KILN_RETURN_IF_ERROR(check_node(p, impl, g, n));
  }
  program->bundle_ = std::move(bundle);
  return std::shared_ptr<const Program>(std::move(program));
}

}  // namespace kiln

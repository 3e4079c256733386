#include "one_node_testutil.h"

#include <gtest/gtest.h>
#include <zip.h>

#include <cstdlib>
#include <cstring>

#include "kiln/export/serialize.h"
#include "kiln/runtime/bundle.h"

namespace kiln::testing {

using json = nlohmann::json;

json pt2_tensor_meta(const std::vector<std::int64_t>& sizes, int dtype) {
  json s = json::array();
  for (auto v : sizes) s.push_back({{"as_int", v}});
  return {{"dtype", dtype}, {"sizes", s}, {"requires_grad", false}, {"strides", json::array()}, {"layout", 7}};
}

json pt2_tensor_arg(const std::string& name) { return {{"as_tensor", {{"name", name}}}}; }

std::string write_one_node_archive(const OneNodeArchive& a, const std::string& path) {
  json g;
  g["inputs"] = json::array();
  g["tensor_values"] = json::object();
  json in_specs = json::array(), out_specs = json::array(), outs = json::array();
  for (const auto& [name, meta] : a.inputs) {
    g["inputs"].push_back(pt2_tensor_arg(name));
    g["tensor_values"][name] = meta;
    in_specs.push_back({{"user_input", {{"arg", pt2_tensor_arg(name)}}}});
  }
  json node;
  node["target"] = "torch.ops." + a.target;
  node["inputs"] = json::array();
  for (const auto& [name, arg] : a.args) node["inputs"].push_back({{"name", name}, {"arg", arg}, {"kind", 1}});
  node["outputs"] = json::array();
  for (const auto& [name, meta] : a.outputs) {
    node["outputs"].push_back(pt2_tensor_arg(name));
    g["tensor_values"][name] = meta;
    if (a.not_returned.count(name) != 0) continue;
    outs.push_back(pt2_tensor_arg(name));
    out_specs.push_back({{"user_output", {{"arg", pt2_tensor_arg(name)}}}});
  }
  node["metadata"] = {{"stack_trace", a.stack_trace}};
  g["nodes"] = json::array();
  for (const json& n : a.pre_nodes) g["nodes"].push_back(n);
  g["nodes"].push_back(node);
  for (const auto& [name, meta] : a.metas) g["tensor_values"][name] = meta;
  g["outputs"] = outs;
  g["sym_int_values"] = a.sym_ints;
  g["sym_bool_values"] = json::object();
  json m;
  m["graph_module"] = {{"graph", g}, {"signature", {{"input_specs", in_specs}, {"output_specs", out_specs}}}};
  m["range_constraints"] = a.ranges;
  m["schema_version"] = {{"major", 8}, {"minor", 17}};
  const std::string text = m.dump();
  int err = 0;
  zip_t* z = zip_open(path.c_str(), ZIP_CREATE | ZIP_TRUNCATE, &err);
  if (z == nullptr) return path;
  void* copy = std::malloc(text.size());
  std::memcpy(copy, text.data(), text.size());
  zip_file_add(z, "m/models/model.json", zip_source_buffer(z, copy, text.size(), 1), ZIP_FL_OVERWRITE);
  zip_close(z);
  return path;
}

std::shared_ptr<const Program> load_imported(const Result<ExportedProgram>& ep, const ProgramOptions& options) {
  EXPECT_TRUE(ep.ok()) << "import: " << ep.status().message();
  if (!ep.ok()) return nullptr;
  auto bytes = serialize_bundle(ep->program());
  EXPECT_TRUE(bytes.ok()) << "serialize: " << bytes.status().message();
  if (!bytes.ok()) return nullptr;
  auto bundle = Bundle::from_bytes(*bytes);
  EXPECT_TRUE(bundle.ok()) << "bundle: " << bundle.status().message();
  if (!bundle.ok()) return nullptr;
  auto program = Program::load(std::move(bundle).value(), options);
  EXPECT_TRUE(program.ok()) << "load: " << program.status().message();
  if (!program.ok()) return nullptr;
  return std::move(program).value();
}

}  // namespace kiln::testing

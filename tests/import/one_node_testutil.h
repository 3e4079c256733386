// One-node .pt2 archives for the import tests: `inputs -> target(args) -> outputs` in the
// PT2 layout (models/model.json, schema 8.17), every input a user input, the returned
// outputs user outputs. Each test file states its op in its own terms and converts.
#pragma once

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "kiln/export/export.h"
#include "kiln/runtime/program.h"

namespace kiln::testing {

/// torch/_export/serde/schema.py: a TensorMeta of static `sizes` (dtype 7 = f32).
nlohmann::json pt2_tensor_meta(const std::vector<std::int64_t>& sizes, int dtype = 7);
/// An Argument naming a tensor value.
nlohmann::json pt2_tensor_arg(const std::string& name);

struct OneNodeArchive {
  std::string target;                                           // "aten.conv3d.default"
  std::vector<std::pair<std::string, nlohmann::json>> args;     // schema name -> Argument
  std::vector<std::pair<std::string, nlohmann::json>> inputs;   // user input -> TensorMeta
  std::vector<std::pair<std::string, nlohmann::json>> outputs;  // node output -> TensorMeta
  std::set<std::string> not_returned;                           // node outputs the graph drops
  std::map<std::string, nlohmann::json> metas;                  // TensorMeta overrides
  std::vector<nlohmann::json> pre_nodes;                        // nodes before the op
  nlohmann::json sym_ints = nlohmann::json::object();           // sym_int_values
  nlohmann::json ranges = nlohmann::json::object();             // range_constraints
  std::string stack_trace = "File \"test.py\", line 7, in forward";
};

/// Writes `a` to `path`; returns `path`.
std::string write_one_node_archive(const OneNodeArchive& a, const std::string& path);

/// An import result serialized and loaded, as `kiln import` then `kiln run` would; null,
/// with a test failure naming the step, when a step fails.
std::shared_ptr<const Program> load_imported(const Result<ExportedProgram>& ep, const ProgramOptions& options = {});

}  // namespace kiln::testing

// The public entry points: import_pt2 (archive -> ExportedProgram, then the tracer's
// passes) and golden self-test cases from .npy files.
#include "kiln/export/import_pt2.h"

#include <filesystem>
#include <set>
#include <fstream>
#include <cstring>
#include <map>

#include "import/importer.h"
#include "kiln/export/symbolic/parse.h"
#include "kiln/export/symbolic/print.h"
#include "kiln/runtime/file_io.h"
#include "kiln/runtime/npy.h"
#include "trace/finalize.h"

namespace kiln {
namespace pt2 {
namespace {

void name_values(ir::Graph& g) {
  std::map<std::string, int> used;
  for (const ir::Value& v : g.values) if (!v.name.empty()) used[v.name]++;
  for (ir::Node& n : g.nodes) {
    for (int out : n.outputs) {
      ir::Value& v = g.values[static_cast<std::size_t>(out)];
      if (!v.name.empty()) continue;
      std::string base(op_name(n.op));
      const int k = used[base]++;
      v.name = k == 0 ? base : base + "_" + std::to_string(k);
    }
  }
}

std::pair<std::int64_t, std::int64_t> parse_range(const std::string& text, const std::string& option) {
  const std::size_t colon = text.find(':');
  auto num = [&](const std::string& s, std::int64_t inf) -> std::int64_t {
    if (s == "inf" || s == "") return inf;
    try {
      std::size_t used = 0;
      const std::int64_t v = std::stoll(s, &used);
      if (used != s.size()) throw std::invalid_argument(s);
      return v;
    } catch (const std::exception&) {
      fail(StatusCode::kUsage, "--dim " + option + ": '" + s + "' is not an integer");
    }
  };
  if (colon == std::string::npos) fail(StatusCode::kUsage, "--dim " + option + ": expected NAME=MIN:MAX");
  return {num(text.substr(0, colon), sym::kNegInf), num(text.substr(colon + 1), sym::kPosInf)};
}

}  // namespace

void Importer::apply_options(const ImportOptions& options) {
  auto resolve = [&](std::string_view name) -> std::optional<int> {
    if (auto s = resolve_name(name)) return s;
    for (const auto& [dim, sym_name] : input_dims_) if (dim == name) return resolve_name(sym_name);
    return program.env.find_symbol(name);
  };
  for (const std::string& d : options.dims) {
    const std::size_t eq = d.find('=');
    if (eq == std::string::npos) fail(StatusCode::kUsage, "--dim '" + d + "': expected NAME=MIN:MAX");
    const std::string name = d.substr(0, eq);
    auto s = resolve(name);
    if (!s || program.env.symbol(*s).kind != sym::SymbolKind::Backed) {
      std::string known;
      for (const auto& [dim, sym_name] : input_dims_) known += " " + dim + " (" + sym_name + ")";
      fail(StatusCode::kUsage, "--dim '" + d + "': no dynamic dim named '" + name + "'; dynamic dims:" + (known.empty() ? " none" : known));
    }
    const auto [lo, hi] = parse_range(d.substr(eq + 1), d);
    const sym::ValueRange current = program.env.symbol(*s).range;
    if (lo < current.lo || hi > current.hi) {
      fail(StatusCode::kUsage, "--dim '" + d + "' widens " + name + " beyond the range the archive was exported for " +
                                   sym::to_string(current) + ": only narrowing is safe");
    }
    if (Status st = program.env.constrain_range(*s, lo, hi); !st.ok()) fail(StatusCode::kUsage, "--dim '" + d + "': " + st.message());
  }
  for (const std::string& text : options.specializations) {
    auto pred = sym::parse_expr(text, resolve);
    if (!pred.ok()) fail(StatusCode::kUsage, "--specialize '" + text + "': " + pred.status().message());
    const sym::Expr e = program.env.simplify(*pred);
    if (!e.is_bool()) fail(StatusCode::kUsage, "--specialize '" + text + "': not a condition");
    for (int s : sym::free_symbols(e)) {
      if (program.env.symbol(s).kind != sym::SymbolKind::Backed) fail(StatusCode::kUsage, "--specialize '" + text + "': uses a data-dependent symbol");
    }
    sym::ShapeEnv env = program.env;
    env.forget_hints();
    if (Status st = env.add_axiom(e); !st.ok()) fail(StatusCode::kUsage, "--specialize '" + text + "' can never hold: " + st.message());
    if (auto a = env.analyze_guard(e); a.kind == sym::GuardKind::Range && a.range.is_point()) {
      (void)env.replace(a.symbol, sym::Expr::constant(a.range.lo));
    }
    ir::Graph spec = program.graphs[static_cast<std::size_t>(program.entry)];
    spec.name = "main[" + sym::to_string(e, &program.env) + "]";
    detail::simplify_graph(spec, env);
    detail::prune_asserts(spec, env);
    program.graphs.push_back(std::move(spec));
    program.specializations.push_back({text, e, static_cast<int>(program.graphs.size()) - 1});
  }
}

Status Importer::run(const std::string& path, const ImportOptions& options) {
  try {
    path_ = path;
    read_archive(path);
    check_supported();
    create_symbols();
    const json& gm = model_.at("graph_module");
    program.entry = build_graph(gm.at("graph"), "main", true);
    for (ir::Graph& g : program.graphs) {
      detail::simplify_graph(g, program.env);
      detail::fold_batch_norms(program, g);
      detail::phase_split_dilated_convs(g);
      detail::eliminate_dead_code(g);
      name_values(g);
    }
    // Weights no node reads any more: folded batch norms' and those a decomposition
    // replaced (a 3-D convolution's 5-D weight by its per-tap 4-D slices).
    detail::drop_unused_constants(program);
    for (ir::InputSpec& in : program.inputs) {
      for (sym::Expr& e : in.shape) e = program.env.simplify(e);
      if (in.is_int && in.dynamism != ir::Dynamism::kStatic) in.expr = program.env.simplify(in.expr);
    }
    for (ir::OutputSpec& out : program.outputs) {
      for (sym::Expr& e : out.shape) e = program.env.simplify(e);
      if (out.is_int) out.expr = program.env.simplify(out.expr);
    }
    apply_options(options);
    std::string torch = model_.value("torch_version", std::string());
    program.metadata.emplace_back("source", "torch.export archive " + std::filesystem::path(path).filename().string());
    if (!torch.empty()) program.metadata.emplace_back("torch_version", torch);
  } catch (const ImportError& e) {
    return Status(e.code(), e.what());
  } catch (const json::exception& e) {
    return Status(StatusCode::kInvalidBundle, std::string("model json: ") + e.what());
  } catch (const std::invalid_argument& e) {  // e.g. sym::Expr arithmetic on a bool from the file
    return Status(StatusCode::kInvalidBundle, std::string("import: malformed archive: ") + e.what());
  } catch (const std::out_of_range& e) {  // e.g. an integer that does not fit int64
    return Status(StatusCode::kInvalidBundle, std::string("import: malformed archive: ") + e.what());
  } catch (const std::exception& e) {
    return Status(StatusCode::kInternal, std::string("import: ") + e.what());
  }
  return Status::Ok();
}

}  // namespace pt2

Result<ExportedProgram> import_pt2(const std::string& path, const ImportOptions& options) {
  pt2::Importer importer;
  importer.program.name = options.name.empty() ? std::filesystem::path(path).stem().string() : options.name;
  if (Status st = importer.run(path, options); !st.ok()) return st;
  return ExportedProgram(std::move(importer.program));
}

// ---- .npy in either order -----------------------------------------------------------------

Result<HostTensor> read_npy_any_order(const std::string& path) {
  NpyLimits limits;
  limits.allow_fortran_order = true;
  return read_npy(path, limits);
}

// ---- self-tests --------------------------------------------------------------------------

namespace {

Result<ir::TestValue> test_value(const std::string& file, bool is_int, double rtol, double atol) {
  ir::TestValue t;
  t.rtol = rtol;
  t.atol = atol;
  if (is_int) {
    t.is_int = true;
    t.dtype = DType::kI64;
    try {
      std::size_t used = 0;
      t.int_value = std::stoll(file, &used);
      if (used == file.size()) return t;
    } catch (const std::exception&) {
    }
  }
  auto npy = read_npy_any_order(file);
  if (!npy.ok()) return npy.status();
  if (is_int) {
    auto v = npy_scalar_int(*npy, file);
    if (!v.ok()) return Status(StatusCode::kUsage, v.status().message());
    t.int_value = *v;
    return t;
  }
  t.dtype = npy->dtype;
  t.shape = npy->shape;
  t.data = std::make_shared<const std::vector<std::uint8_t>>(std::move(npy->data));
  return t;
}

}  // namespace

Status add_self_test_case(ir::Program& program, const std::string& name, const std::vector<std::string>& inputs,
                          const std::vector<std::string>& outputs, double rtol, double atol) {
  if (inputs.size() != program.inputs.size()) {
    return Status(StatusCode::kUsage, "self-test '" + name + "': " + std::to_string(inputs.size()) + " inputs for a program with " +
                                          std::to_string(program.inputs.size()));
  }
  if (outputs.size() != program.outputs.size()) {
    return Status(StatusCode::kUsage, "self-test '" + name + "': " + std::to_string(outputs.size()) + " outputs for a program with " +
                                          std::to_string(program.outputs.size()));
  }
  ir::SelfTestCase c;
  c.name = name;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    std::string file = inputs[i];
    const std::size_t eq = file.find('=');
    if (eq != std::string::npos && file.substr(0, eq) == program.inputs[i].name) file = file.substr(eq + 1);
    auto v = test_value(file, program.inputs[i].is_int, rtol, atol);
    if (!v.ok()) return v.status();
    c.inputs.push_back(std::move(v).value());
  }
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    auto v = test_value(outputs[i], program.outputs[i].is_int, rtol, atol);
    if (!v.ok()) return v.status();
    c.outputs.push_back(std::move(v).value());
  }
  program.self_tests.push_back(std::move(c));
  return Status::Ok();
}

namespace {

using nlohmann::json;

// One case object of a manifest ({"inputs": {name: file}, "outputs": [file, ...]}) as a
// self-test named `name`; `where` names it in errors ("case 'a'", "sequence 's' step 2").
Status add_manifest_case(ir::Program& program, const json& c, const std::string& name, const std::string& where,
                         const std::filesystem::path& dir, const std::vector<std::string>& order, const std::string& manifest,
                         double rtol, double atol) {
  if (!c.is_object() || !c.contains("inputs") || !c.contains("outputs") || !c["inputs"].is_object() || !c["outputs"].is_array()) {
    return Status(StatusCode::kUsage, "'" + manifest + "' " + where + ": needs an 'inputs' object and an 'outputs' list");
  }
  std::vector<std::string> inputs;
  for (std::size_t i = 0; i < program.inputs.size(); ++i) {
    const std::string& sig_name = program.inputs[i].name;
    std::string key = c["inputs"].contains(sig_name) ? sig_name : (i < order.size() ? order[i] : "");
    if (!c["inputs"].contains(key) || !c["inputs"][key].is_string()) {
      return Status(StatusCode::kUsage, "'" + manifest + "' " + where + ": no file for input '" + sig_name + "'");
    }
    inputs.push_back((dir / c["inputs"][key].get<std::string>()).string());
  }
  std::vector<std::string> outputs;
  for (const auto& o : c["outputs"]) {
    if (!o.is_string()) return Status(StatusCode::kUsage, "'" + manifest + "' " + where + ": output entries must be file names");
    outputs.push_back((dir / o.get<std::string>()).string());
  }
  return add_self_test_case(program, name, inputs, outputs, rtol, atol);
}

Result<std::string> manifest_name(const json& c, const std::string& fallback, const std::string& where, const std::string& manifest) {
  const auto it = c.is_object() ? c.find("name") : c.end();
  if (!c.is_object() || it == c.end()) return fallback;
  if (!it->is_string() || it->get<std::string>().empty() || it->get<std::string>().size() > kMaxSelfTestNameBytes) {
    return Status(StatusCode::kUsage, "'" + manifest + "' " + where + ": 'name' must be a string of 1 to " +
                                          std::to_string(kMaxSelfTestNameBytes) + " bytes");
  }
  return it->get<std::string>();
}

}  // namespace

Status add_self_tests_from_manifest(ir::Program& program, const std::string& manifest_path, double rtol, double atol) {
  // A regular file only (a FIFO or /dev/zero must not hang the import), at most 64 MiB.
  auto text = read_regular_file(manifest_path, std::uint64_t{64} << 20, StatusCode::kUsage);
  if (!text.ok()) return text.status();
  const json m = json::parse(text->begin(), text->end(), nullptr, false);
  if (m.is_discarded() || !m.is_object()) return Status(StatusCode::kUsage, "'" + manifest_path + "' is not valid JSON");
  const std::filesystem::path dir = std::filesystem::path(manifest_path).parent_path();
  const auto valid = m.find("valid");
  const auto sequences = m.find("sequences");
  if ((valid == m.end() || !valid->is_array()) && (sequences == m.end() || !sequences->is_array())) {
    return Status(StatusCode::kUsage, "'" + manifest_path + "' has no 'valid' or 'sequences' list");
  }
  if (valid != m.end() && !valid->is_array()) return Status(StatusCode::kUsage, "'" + manifest_path + "': 'valid' is not a list");
  if (sequences != m.end() && !sequences->is_array()) return Status(StatusCode::kUsage, "'" + manifest_path + "': 'sequences' is not a list");
  // Count before reading any .npy: a manifest of a million steps is refused up front.
  std::size_t total = program.self_tests.size() + (valid != m.end() ? valid->size() : 0);
  if (sequences != m.end()) {
    for (const json& s : *sequences) {
      const auto steps = s.is_object() ? s.find("steps") : s.end();
      if (s.is_object() && steps != s.end() && steps->is_array()) total += steps->size();
    }
  }
  if (total > kMaxSelfTests) {
    return Status(StatusCode::kUsage, "'" + manifest_path + "' holds " + std::to_string(total) + " cases and sequence steps; at most " +
                                          std::to_string(kMaxSelfTests) + " self-tests fit in a bundle");
  }
  std::vector<std::string> order;
  if (auto in = m.find("inputs"); in != m.end() && in->is_array()) {
    for (const auto& n : *in) if (n.is_string()) order.push_back(n.get<std::string>());
  }
  if (valid != m.end()) {
    for (const auto& c : *valid) {
      const std::string fallback = "case" + std::to_string(program.self_tests.size());
      auto name = manifest_name(c, fallback, "valid case " + std::to_string(program.self_tests.size()), manifest_path);
      if (!name.ok()) return name.status();
      KILN_RETURN_IF_ERROR(add_manifest_case(program, c, *name, "case '" + *name + "'", dir, order, manifest_path, rtol, atol));
    }
  }
  if (sequences == m.end()) return Status::Ok();
  std::set<std::string> seen;
  for (const ir::SelfTestCase& c : program.self_tests) if (!c.sequence.empty()) seen.insert(c.sequence);
  for (std::size_t k = 0; k < sequences->size(); ++k) {
    const json& s = (*sequences)[k];
    const std::string where = "sequence " + std::to_string(k);
    if (!s.is_object()) return Status(StatusCode::kUsage, "'" + manifest_path + "' " + where + ": not an object");
    auto name = manifest_name(s, "sequence" + std::to_string(k), where, manifest_path);
    if (!name.ok()) return name.status();
    if (!seen.insert(*name).second) return Status(StatusCode::kUsage, "'" + manifest_path + "': two sequences are named '" + *name + "'");
    const auto steps = s.find("steps");
    if (steps == s.end() || !steps->is_array() || steps->empty()) {
      return Status(StatusCode::kUsage, "'" + manifest_path + "' sequence '" + *name + "': needs a non-empty 'steps' list");
    }
    for (std::size_t j = 0; j < steps->size(); ++j) {
      const std::string step = *name + "[" + std::to_string(j) + "]";
      KILN_RETURN_IF_ERROR(add_manifest_case(program, (*steps)[j], step, "sequence '" + *name + "' step " + std::to_string(j), dir,
                                             order, manifest_path, rtol, atol));
      program.self_tests.back().sequence = *name;
    }
  }
  return Status::Ok();
}

}  // namespace kiln

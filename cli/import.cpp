// kiln import MODEL.pt2 -o OUT.kiln [--dim NAME=MIN:MAX ...] [--specialize EXPR ...]
//   [--self-test-case NAME=FILE.npy ... | --self-test-dir DIR] [--compress none|zstd]
//   [--strip-debug] [--json]
// Converts a torch.export archive into a bundle (docs/IMPORT.md). The output is written
// atomically: on any error no file (and no partial file) is left at OUT.
#include <sys/stat.h>

#include <charconv>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "kiln/export/import_pt2.h"
#include "kiln/runtime/file_io.h"

namespace kiln::cli {
namespace {

struct ImportCliOptions {
  std::string model;
  std::string output;
  std::vector<std::string> dims;
  std::vector<std::string> specializations;
  std::vector<std::string> self_test_inputs;
  std::vector<std::string> self_test_outputs;
  std::string self_test_dir;
  std::string compress = "none";
  bool strip_debug = false;
  bool json = false;
  double rtol = 1e-4;
  double atol = 1e-5;
};

// Option values checked before anything is read: a bad tolerance would make every later
// `validate` fail, an output that is not a regular file (or is the model itself) would be
// replaced by the bundle.
Status check_options(const ImportCliOptions& o) {
  for (const auto& [name, v] : {std::pair{"--rtol", o.rtol}, std::pair{"--atol", o.atol}}) {
    if (!std::isfinite(v) || v < 0) {
      return Status(StatusCode::kUsage, std::string(name) + " " + std::to_string(v) + " is not a tolerance (a finite number >= 0)");
    }
  }
  auto model = open_regular_file(o.model, StatusCode::kInvalidBundle);
  if (!model.ok()) return Status(model.status().code(), "import: " + model.status().message());
  KILN_RETURN_IF_ERROR(check_output_target(o.output));
  struct stat in {}, out {};
  if (::fstat(model->fd(), &in) == 0 && ::stat(o.output.c_str(), &out) == 0 && in.st_dev == out.st_dev && in.st_ino == out.st_ino) {
    return Status(StatusCode::kUsage, "refusing to write the bundle over its own input '" + o.model + "'");
  }
  return Status::Ok();
}

// `NAME=MIN:MAX` with MIN <= MAX (the importer narrows the symbol's range to it).
Status check_dim(const std::string& dim) {
  const std::size_t eq = dim.find('='), colon = dim.rfind(':');
  auto bad = [&](const std::string& why) { return Status(StatusCode::kUsage, "--dim '" + dim + "': " + why); };
  if (eq == std::string::npos || eq == 0 || colon == std::string::npos || colon < eq) return bad("expected NAME=MIN:MAX");
  std::int64_t lo = 0, hi = 0;
  const char* a = dim.data() + eq + 1;
  const char* b = dim.data() + colon + 1;
  const char* end = dim.data() + dim.size();
  const auto r1 = std::from_chars(a, dim.data() + colon, lo);
  const auto r2 = std::from_chars(b, end, hi);
  if (r1.ec != std::errc() || r1.ptr != dim.data() + colon || r2.ec != std::errc() || r2.ptr != end) {
    return bad("MIN and MAX must be integers in the int64 range");
  }
  if (lo > hi) return bad("the range is empty (MIN " + std::to_string(lo) + " > MAX " + std::to_string(hi) + ")");
  return Status::Ok();
}

// A divisor that is the constant 0 anywhere in a specialization predicate: every run would
// fail evaluating it ("division by zero"), so the import refuses it.
bool divides_by_zero(const sym::Expr& e) {
  const auto op = e.op();
  if ((op == sym::ExprOp::FloorDiv || op == sym::ExprOp::CeilDiv || op == sym::ExprOp::Mod) && e.args().size() == 2 &&
      e.args()[1].constant_value() == 0) {
    return true;
  }
  for (const sym::Expr& a : e.args()) if (divides_by_zero(a)) return true;
  return false;
}

int run_import(const ImportCliOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  KILN_RETURN_IF_ERROR_CLI(check_options(o), o.json);
  for (const std::string& dim : o.dims) KILN_RETURN_IF_ERROR_CLI(check_dim(dim), o.json);
  ImportOptions options;
  options.dims = o.dims;
  options.specializations = o.specializations;
  auto ep = import_pt2(o.model, options);
  if (!ep.ok()) return report_error(Status(ep.status().code(), "import '" + o.model + "': " + ep.status().message()), o.json);
  ir::Program& program = ep->program();
  for (const ir::Specialization& sp : program.specializations) {
    if (divides_by_zero(sp.predicate)) {
      return report_error(Status(StatusCode::kUsage, "--specialize '" + sp.label + "': divides by zero (a divisor or modulus is 0)"), o.json);
    }
  }
  if (!o.self_test_dir.empty()) {
    std::string manifest = o.self_test_dir;
    if (std::filesystem::is_directory(manifest)) manifest = (std::filesystem::path(manifest) / "manifest.json").string();
    KILN_RETURN_IF_ERROR_CLI(add_self_tests_from_manifest(program, manifest, o.rtol, o.atol), o.json);
  }
  if (!o.self_test_inputs.empty() || !o.self_test_outputs.empty()) {
    KILN_RETURN_IF_ERROR_CLI(add_self_test_case(program, "case" + std::to_string(program.self_tests.size()), o.self_test_inputs,
                                                o.self_test_outputs, o.rtol, o.atol),
                             o.json);
  }
  SaveOptions save;
  save.compression = o.compress == "zstd" ? format::Compression::kZstd : format::Compression::kNone;
  save.strip_debug = o.strip_debug;
  std::string torch;
  for (const auto& [k, v] : program.metadata) if (k == "torch_version") torch = v;
  save.producer = "kiln import (torch " + (torch.empty() ? std::string("?") : torch.substr(0, torch.find('+'))) + ")";
  KILN_RETURN_IF_ERROR_CLI(ep->save(o.output, save), o.json);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::size_t nodes = 0;
  for (const auto& g : program.graphs) nodes += g.nodes.size();
  if (o.json) {
    nlohmann::ordered_json j;
    j["output"] = o.output;
    j["graphs"] = program.graphs.size();
    j["nodes"] = nodes;
    j["constants"] = program.constants.size();
    j["symbols"] = program.env.num_symbols();
    j["self_tests"] = program.self_tests.size();
    j["import_ms"] = ms;
    std::cout << dump_json(j) << "\n";
  } else {
    std::cerr << "imported " << o.model << " -> " << o.output << ": " << program.graphs.size() << " graph(s), " << nodes
              << " nodes, " << program.constants.size() << " constants, " << program.self_tests.size() << " self-test(s) in "
              << static_cast<int>(ms) << " ms\n";
  }
  return 0;
}

}  // namespace

Command add_import(CLI::App& app) {
  auto o = std::make_shared<ImportCliOptions>();
  app.add_option("model", o->model, "torch.export archive (.pt2)")->required();
  app.add_option("-o,--output", o->output, "bundle to write (.kiln)")->required();
  app.add_option("--dim", o->dims, "narrow a dynamic dim: NAME=MIN:MAX (NAME: archive symbol like s77, or INPUT.DIM like x.0)");
  app.add_option("--specialize", o->specializations, "add a specialization predicate, e.g. 's77 % 16 == 0' or 'x.0 == 1'");
  app.add_option("--self-test-case", o->self_test_inputs, "one golden case: inputs as NAME=FILE.npy (or FILE.npy / INT) in signature order");
  app.add_option("--self-test-output", o->self_test_outputs, "the golden outputs of --self-test-case (FILE.npy, signature order)");
  app.add_option("--self-test-dir", o->self_test_dir, "embed every 'valid' case of DIR/manifest.json (the fixtures' format)");
  app.add_option("--rtol", o->rtol, "relative tolerance of embedded self-tests")->capture_default_str();
  app.add_option("--atol", o->atol, "absolute tolerance of embedded self-tests")->capture_default_str();
  app.add_option("--compress", o->compress, "constant segments: none or zstd")->check(CLI::IsMember({"none", "zstd"}));
  app.add_flag("--strip-debug", o->strip_debug, "drop source locations and module paths");
  app.add_flag("--json", o->json, "machine-readable summary on stdout");
  app.footer("Example:\n  kiln import model.pt2 -o model.kiln --self-test-dir tests/fixtures/torch_export/mlp\n"
             "  kiln import model.pt2 -o model.kiln --dim s77=1:64 --specialize 's77 == 1' --compress zstd");
  return [o] { return run_import(*o); };
}

}  // namespace kiln::cli

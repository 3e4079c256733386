// kiln run BUNDLE --input NAME=FILE.npy|INT ... [--output-dir DIR] [--state DIR] [--threads N] [--json]
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "max_memory.h"
#include "kiln/format/kiln_generated.h"
#include "kiln/runtime/npy.h"
#include "kiln/runtime/program.h"

namespace kiln::cli {
namespace {

struct RunOptions {
  std::string path;
  std::vector<std::string> inputs;
  std::vector<std::string> positional;
  std::string output_dir = ".";
  std::string state_dir;  // --state: the session's state tensors, read before and written after the run
  std::string backend = "cpu";
  int threads = 1;
  std::uint64_t max_memory = 0;  // --max-memory; 0 = the runtime default
  bool json = false;
};

bool is_integer(const std::string& s) {
  if (s.empty()) return false;
  for (std::size_t i = (s[0] == '-' ? 1 : 0); i < s.size(); ++i) if (!std::isdigit(static_cast<unsigned char>(s[i]))) return false;
  return s != "-";
}

// --state DIR, before the run: DIR/<name>.npy for every state tensor, checked like an input
// (kInvalidInput naming the state); the initial values when DIR is absent or holds none of
// them.
Status load_state(Session& session, const std::string& dir) {
  namespace fs = std::filesystem;
  const std::vector<std::string> names = session.state_names();
  std::vector<std::string> present, missing;
  for (const std::string& n : names) (fs::exists(fs::path(dir) / (n + ".npy")) ? present : missing).push_back(n);
  if (present.empty()) return Status::Ok();
  if (!missing.empty()) {
    return Status(StatusCode::kInvalidInput, "state " + missing[0] + ": " + (fs::path(dir) / (missing[0] + ".npy")).string() +
                                                 " is missing (the state directory holds some state tensors but not all)");
  }
  for (const std::string& n : names) {
    const std::string file = (fs::path(dir) / (n + ".npy")).string();
    auto t = read_npy(file);
    if (!t.ok()) return Status(StatusCode::kInvalidInput, "state " + n + ": " + t.status().message());
    KILN_RETURN_IF_ERROR(session.set_state(n, *t).with_context(file));
  }
  return Status::Ok();
}

// --state DIR, after a successful run: every state tensor written to a temporary file
// first (a failure removes them and leaves DIR as it was), then each renamed over
// DIR/<name>.npy.
Status save_state(const Session& session, const std::string& dir) {
  namespace fs = std::filesystem;
  const std::vector<std::string> names = session.state_names();
  if (names.empty()) return Status::Ok();
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status(StatusCode::kIoError, "cannot create the state directory " + dir + ": " + ec.message());
  std::vector<std::string> temps;
  auto drop = [&] {
    for (const std::string& t : temps) fs::remove(t, ec);
  };
  for (const std::string& n : names) {
    auto t = session.read_state(n);
    if (!t.ok()) return drop(), t.status();
    const std::string tmp = (fs::path(dir) / ("." + n + ".npy.kiln-new")).string();
    temps.push_back(tmp);
    if (Status s = write_npy(tmp, *t); !s.ok()) return drop(), s;
  }
  for (std::size_t k = 0; k < names.size(); ++k) {
    fs::rename(temps[k], fs::path(dir) / (names[k] + ".npy"), ec);
    if (ec) return drop(), Status(StatusCode::kIoError, "cannot write state " + names[k] + " into " + dir + ": " + ec.message());
  }
  return Status::Ok();
}

}  // namespace

Result<std::vector<HostValue>> parse_inputs(const fb::Program& p, const std::vector<std::string>& args) {
  const auto* sig = p.signature()->inputs();
  const std::uint32_t n = sig ? sig->size() : 0;
  std::vector<std::optional<HostValue>> values(n);
  std::size_t positional = 0;
  for (const std::string& arg : args) {
    std::size_t index;
    std::string value = arg;
    const std::size_t eq = arg.find('=');
    if (eq != std::string::npos) {
      const std::string name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      index = n;
      for (std::uint32_t i = 0; i < n; ++i) if (sig->Get(i)->name()->str() == name) index = i;
      if (index == n) {
        std::string names;
        for (std::uint32_t i = 0; i < n; ++i) names += (i ? ", " : "") + sig->Get(i)->name()->str();
        return Status(StatusCode::kInvalidInput, "unknown input '" + name + "' (the bundle's inputs: " + names + ")");
      }
    } else {
      index = positional++;
      if (index >= n) return Status(StatusCode::kInvalidInput, "too many inputs: the bundle takes " + std::to_string(n));
    }
    if (values[index]) return Status(StatusCode::kInvalidInput, "input '" + sig->Get(static_cast<std::uint32_t>(index))->name()->str() + "' given twice");
    if (is_integer(value)) {
      values[index] = HostValue::integer(std::stoll(value));
    } else {
      auto t = read_npy(value);
      if (!t.ok()) return t.status();
      values[index] = HostValue::of(std::move(t).value());
    }
  }
  std::vector<HostValue> out;
  for (std::uint32_t i = 0; i < n; ++i) {
    if (!values[i]) return Status(StatusCode::kInvalidInput, "missing input '" + sig->Get(i)->name()->str() + "'");
    out.push_back(std::move(*values[i]));
  }
  return out;
}

Result<std::shared_ptr<const Program>> open_program(const std::string& path, bool verify_segments, const std::string& backend) {
  auto bundle = Bundle::open(path, {.verify_segment_checksums = verify_segments});
  if (!bundle.ok()) return bundle.status().with_context(path);
  ProgramOptions options;
  options.backend = backend;
  const char* validation = std::getenv("KILN_VULKAN_VALIDATION");
  options.validation = validation != nullptr && std::string(validation) == "1";
  if (const char* cache = std::getenv("KILN_PIPELINE_CACHE")) options.pipeline_cache_path = cache;
  auto program = Program::load(std::move(bundle).value(), options);
  if (!program.ok()) return program.status().with_context(path);
  if (!(*program)->backend_notice().empty()) std::cerr << "kiln: note: " << (*program)->backend_notice() << "\n";
  return *program;
}

Status check_backend(const std::string& backend) {
  if (backend == "cpu" || backend == "auto" || backend == "vulkan") return Status::Ok();
  return Status(StatusCode::kUsage, "unknown backend '" + backend + "' (cpu, vulkan, auto)");
}

Command add_run(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  app.add_option("bundle", o->path, "The .kiln bundle")->required();
  app.add_option("values", o->positional, "Input values in signature order (FILE.npy or INT)");
  app.add_option("-i,--input", o->inputs, "NAME=FILE.npy or NAME=INT (or positional values in signature order)");
  app.add_option("-o,--output-dir", o->output_dir, "Where to write out<i>.npy (default: .)");
  app.add_option("--backend", o->backend, "cpu, vulkan or auto");
  app.add_option("--state", o->state_dir, "State tensors: read DIR/<name>.npy (initial values when absent), written back after a successful run");
  app.add_option("--threads", o->threads, "Worker threads (default 1)")->check(CLI::Range(1, 256));
  add_max_memory_option(app, o->max_memory);
  app.add_flag("--json", o->json, "Print one JSON object on stdout");
  app.footer("Example:\n  kiln run model.kiln --input x=x.npy --input n=3 --output-dir out/");
  return [o]() {
    KILN_RETURN_IF_ERROR_CLI(check_backend(o->backend), o->json);
    auto program = open_program(o->path, /*verify_segments=*/true, o->backend);
    if (!program.ok()) return report_error(program.status(), o->json);
    std::vector<std::string> args = o->positional;
    args.insert(args.end(), o->inputs.begin(), o->inputs.end());
    auto inputs = parse_inputs((*program)->bundle().program(), args);
    if (!inputs.ok()) return report_error(inputs.status(), o->json);
    Session session(**program, {.threads = o->threads, .max_memory_bytes = o->max_memory});
    if (!o->state_dir.empty()) KILN_RETURN_IF_ERROR_CLI(load_state(session, o->state_dir), o->json);
    auto result = session.run(*inputs);
    if (!result.ok()) return report_error(result.status(), o->json);
    if (!o->state_dir.empty()) KILN_RETURN_IF_ERROR_CLI(save_state(session, o->state_dir), o->json);
    std::error_code ec;
    std::filesystem::create_directories(o->output_dir, ec);
    nlohmann::ordered_json outs = nlohmann::ordered_json::array();
    for (std::size_t i = 0; i < result->outputs.size(); ++i) {
      const HostValue& v = result->outputs[i];
      if (v.is_int) {
        outs.push_back({{"index", i}, {"int", v.int_value}});
        if (!o->json) std::cerr << "output " << i << ": " << v.int_value << "\n";
        continue;
      }
      const std::string file = (std::filesystem::path(o->output_dir) / ("out" + std::to_string(i) + ".npy")).string();
      const Status s = write_npy(file, v.tensor);
      if (!s.ok()) return report_error(s, o->json);
      outs.push_back({{"index", i}, {"file", file}, {"dtype", std::string(dtype_name(v.tensor.dtype))}, {"shape", v.tensor.shape}});
      if (!o->json) {
        std::cerr << "output " << i << ": " << dtype_name(v.tensor.dtype) << "[";
        for (std::size_t d = 0; d < v.tensor.shape.size(); ++d) std::cerr << (d ? ", " : "") << v.tensor.shape[d];
        std::cerr << "] -> " << file << "\n";
      }
    }
    if (o->json) std::cout << nlohmann::ordered_json{{"variant", result->variant}, {"outputs", outs}}.dump(2) << "\n";
    else std::cerr << "variant: " << result->variant << "\n";
    return 0;
  };
}

}  // namespace kiln::cli

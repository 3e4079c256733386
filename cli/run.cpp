// kiln run BUNDLE --input NAME=FILE.npy|INT ... [--output-dir DIR] [--state DIR] [--threads N] [--json]
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <charconv>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "max_memory.h"
#include "kiln/format/kiln_generated.h"
#include "kiln/runtime/file_io.h"
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
  bool no_mmap = false;
};

// "-12" or "34": the whole text is an optional '-' and digits.
bool looks_like_integer(const std::string& s) {
  const std::size_t start = !s.empty() && s[0] == '-' ? 1 : 0;
  if (s.size() == start) return false;
  for (std::size_t i = start; i < s.size(); ++i) if (!std::isdigit(static_cast<unsigned char>(s[i]))) return false;
  return true;
}

// One value for input `spec`: an integer literal, or a .npy file (a tensor, or one integer
// or bool element for an int input).
Result<HostValue> read_input(const fb::InputSpec& spec, const std::string& value) {
  const std::string name = spec.name() ? spec.name()->str() : "";
  const bool wants_int = spec.kind() == fb::InputKind::Int;
  if (looks_like_integer(value)) {
    std::int64_t v = 0;
    const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
    if (ec != std::errc() || end != value.data() + value.size()) {
      return Status(StatusCode::kInvalidInput, "input '" + name + "': " + value +
                                                   " is outside the int64 range [-9223372036854775808, 9223372036854775807]");
    }
    return HostValue::integer(v);
  }
  auto t = read_npy(value);
  if (!t.ok()) {
    if (wants_int) {
      return Status(StatusCode::kInvalidInput, "input '" + name + "' takes an integer (or a .npy file holding one): '" + value +
                                                   "' is neither (" + t.status().message() + ")");
    }
    return t.status().with_context("input '" + name + "'");
  }
  if (!wants_int) return HostValue::of(std::move(t).value());
  auto v = npy_scalar_int(*t, value);
  if (!v.ok()) return v.status().with_context("input '" + name + "'");
  return HostValue::integer(*v);
}

// Writes the tensor outputs as one set: every file is first written into a staging folder
// DIR/.kiln-outputs.tmp.PID, then all are renamed into place with SIGINT/SIGTERM/SIGHUP
// blocked, so an interrupted run leaves the previous set or the new one, never a mix (only
// SIGKILL or a power loss in the microseconds between the renames can). The staging folder
// is removed by the signal handler, or as stale by the next run once PID is dead.
Status write_output_set(const std::string& dir, const std::vector<std::pair<std::string, const HostTensor*>>& files) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(fs::symlink_status(dir, ec)) && !fs::is_directory(dir, ec)) {
    return Status(StatusCode::kIoError, "cannot write to '" + dir + "': it exists and is not a directory");
  }
  fs::create_directories(dir, ec);
  if (ec) return Status(StatusCode::kIoError, "cannot create the output folder '" + dir + "': " + ec.message());
  for (const auto& [name, tensor] : files) KILN_RETURN_IF_ERROR(check_output_target((fs::path(dir) / name).string()));
  const std::string staging_target = (fs::path(dir) / "kiln-outputs").string();
  remove_stale_temporaries(staging_target);
  const std::string staging = (fs::path(dir) / (".kiln-outputs.tmp." + std::to_string(::getpid()))).string();
  std::vector<int> slots{register_temporary(staging)};
  if (::mkdir(staging.c_str(), 0700) != 0) {
    unregister_temporary(slots[0]);
    return Status(StatusCode::kIoError, "cannot write to '" + dir + "': " + std::strerror(errno));
  }
  Status status;
  for (const auto& [name, tensor] : files) {
    const std::string staged = staging + "/" + name;
    slots.push_back(register_temporary(staged));
    status = write_npy_file(staged, *tensor);
    if (!status.ok()) {
      status = Status(status.code(), "cannot write '" + (fs::path(dir) / name).string() + "'" +
                                         status.message().substr(status.message().rfind(':')));
      break;
    }
  }
  sigset_t block, old;
  sigemptyset(&block);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&block, sig);
  ::sigprocmask(SIG_BLOCK, &block, &old);
  for (std::size_t i = 0; status.ok() && i < files.size(); ++i) {
    const std::string target = (fs::path(dir) / files[i].first).string();
    if (::rename((staging + "/" + files[i].first).c_str(), target.c_str()) != 0) {
      status = Status(StatusCode::kIoError, "cannot write '" + target + "': " + std::strerror(errno));
    }
  }
  for (const auto& [name, tensor] : files) ::unlink((staging + "/" + name).c_str());
  ::rmdir(staging.c_str());
  for (int slot : slots) unregister_temporary(slot);
  ::sigprocmask(SIG_SETMASK, &old, nullptr);
  return status;
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

// --state DIR, after a successful run: the state tensors written as one set, like the
// outputs (write_output_set: a failure or a signal leaves DIR as it was).
Status save_state(const Session& session, const std::string& dir) {
  const std::vector<std::string> names = session.state_names();
  if (names.empty()) return Status::Ok();
  std::vector<HostTensor> values;
  values.reserve(names.size());
  for (const std::string& n : names) {
    auto t = session.read_state(n);
    if (!t.ok()) return t.status();
    values.push_back(std::move(t).value());
  }
  std::vector<std::pair<std::string, const HostTensor*>> files;
  for (std::size_t k = 0; k < names.size(); ++k) files.emplace_back(names[k] + ".npy", &values[k]);
  return write_output_set(dir, files);
}

}  // namespace

Result<std::vector<HostValue>> parse_inputs(const fb::Program& p, const std::vector<std::string>& args, const InputFiller* fill) {
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
    auto v = read_input(*sig->Get(static_cast<std::uint32_t>(index)), value);
    if (!v.ok()) return v.status();
    values[index] = std::move(v).value();
  }
  std::vector<HostValue> out;
  for (std::uint32_t i = 0; i < n; ++i) {
    if (!values[i] && fill != nullptr) {
      auto v = (*fill)(i, *sig->Get(i));
      if (!v.ok()) return v.status();
      values[i] = std::move(v).value();
    }
    if (!values[i]) return Status(StatusCode::kInvalidInput, "missing input '" + sig->Get(i)->name()->str() + "'");
    out.push_back(std::move(*values[i]));
  }
  return out;
}

Result<std::shared_ptr<const Program>> open_program(const std::string& path, bool verify_segments, const std::string& backend,
                                                    bool use_mmap, bool fuse_activations) {
  auto bundle = Bundle::open(path, {.verify_segment_checksums = verify_segments, .use_mmap = use_mmap});
  if (!bundle.ok()) return with_path(bundle.status(), path);
  ProgramOptions options;
  options.backend = backend;
  options.fuse_activations = fuse_activations;
  const char* validation = std::getenv("KILN_VULKAN_VALIDATION");
  options.validation = validation != nullptr && std::string(validation) == "1";
  if (const char* cache = std::getenv("KILN_PIPELINE_CACHE")) options.pipeline_cache_path = cache;
  auto program = Program::load(std::move(bundle).value(), options);
  if (!program.ok()) return with_path(program.status(), path);
  if (!(*program)->backend_notice().empty()) std::cerr << "kiln: note: " << (*program)->backend_notice() << "\n";
  return *program;
}

Status with_path(const Status& status, const std::string& path) {
  return status.message().rfind(path + ": ", 0) == 0 ? status : status.with_context(path);
}

void add_no_mmap_flag(CLI::App& app, bool* no_mmap) {
  app.add_flag("--no-mmap", *no_mmap,
               "Read the bundle into memory instead of mapping it (for files that may be truncated or rewritten in place)");
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
  add_no_mmap_flag(app, &o->no_mmap);
  app.footer("Example:\n  kiln run model.kiln --input x=x.npy --input n=3 --output-dir out/");
  return [o]() {
    KILN_RETURN_IF_ERROR_CLI(check_backend(o->backend), o->json);
    auto program = open_program(o->path, /*verify_segments=*/true, o->backend, !o->no_mmap);
    if (!program.ok()) return report_error(program.status(), o->json);
    std::vector<std::string> args = o->positional;
    args.insert(args.end(), o->inputs.begin(), o->inputs.end());
    auto inputs = parse_inputs((*program)->bundle().program(), args);
    if (!inputs.ok()) return report_error(inputs.status(), o->json);
    auto session = std::make_unique<Session>(**program, SessionOptions{.threads = o->threads, .max_memory_bytes = o->max_memory});
    if (!o->state_dir.empty()) KILN_RETURN_IF_ERROR_CLI(load_state(*session, o->state_dir), o->json);
    auto result = session->run(*inputs);
    if (!result.ok()) return report_error(result.status(), o->json);
    if (!o->state_dir.empty()) KILN_RETURN_IF_ERROR_CLI(save_state(*session, o->state_dir), o->json);
    // The outputs are the result's own copies: the model's memory (its weights, the arena)
    // goes back before they are written, so that the code writing them does not add to
    // the run's peak.
    session.reset();
    program->reset();
    inputs->clear();
    nlohmann::ordered_json outs = nlohmann::ordered_json::array();
    std::vector<std::pair<std::string, const HostTensor*>> files;
    for (std::size_t i = 0; i < result->outputs.size(); ++i) {
      const HostValue& v = result->outputs[i];
      if (v.is_int) {
        outs.push_back({{"index", i}, {"int", v.int_value}});
        continue;
      }
      const std::string name = "out" + std::to_string(i) + ".npy";
      files.push_back({name, &v.tensor});
      const std::string file = (std::filesystem::path(o->output_dir) / name).string();
      outs.push_back({{"index", i}, {"file", file}, {"dtype", std::string(dtype_name(v.tensor.dtype))}, {"shape", v.tensor.shape}});
    }
    if (!files.empty()) KILN_RETURN_IF_ERROR_CLI(write_output_set(o->output_dir, files), o->json);
    for (const auto& out : outs) {
      if (o->json) break;
      std::cerr << "output " << out["index"].get<std::size_t>() << ": ";
      if (out.contains("int")) {
        std::cerr << out["int"].get<std::int64_t>() << "\n";
        continue;
      }
      std::cerr << out["dtype"].get<std::string>() << "[";
      const auto& shape = out["shape"];
      for (std::size_t d = 0; d < shape.size(); ++d) std::cerr << (d ? ", " : "") << shape[d].get<std::int64_t>();
      std::cerr << "] -> " << printable(out["file"].get<std::string>()) << "\n";
    }
    if (o->json) std::cout << dump_json({{"variant", result->variant}, {"outputs", outs}}) << "\n";
    else std::cerr << "variant: " << printable(result->variant) << "\n";
    return 0;
  };
}

}  // namespace kiln::cli

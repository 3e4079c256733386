#include "calibrate.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <thread>
#include <tuple>

#include "commands.h"
#include "kiln/format/kiln_generated.h"
#include "quantize_math.h"

namespace kiln::cli {

namespace fs = std::filesystem;

// The input of one linear/matmul node of graph `graph`: output `output` of node `node`, or
// (node < 0) input `output` of the top-level graph `graph` (an entry or specialization
// graph, whose inputs are the signature's).
struct Calibration::Use {
  std::uint32_t graph = 0;
  std::int64_t node = -1;
  std::uint32_t output = 0;
};

struct Calibration::Target {
  std::uint32_t constant = 0;
  bool transposed = false;
  std::int64_t k = 0;
  std::vector<Use> uses;
  std::string why;  // why nothing can be observed (no use)
  std::unique_ptr<quant::InputMoments> sums;
  std::vector<float> pending;  // this run's inputs, added to `sums` after the run
  std::shared_ptr<const std::vector<double>> mean;  // measured (this pass)
  std::int64_t rows = 0, skipped_rows = 0;
  bool measured = false;
  // An earlier target whose inputs are the same values (q/k/v or gate/up projections of
  // one activation): its moments serve this one when both are in one pass; -1 when none.
  std::ptrdiff_t leader = -1;
};

Calibration::~Calibration() = default;

Result<std::unique_ptr<Calibration>> Calibration::open(const std::string& bundle_path, const std::string& dir,
                                                       std::uint64_t memory_bytes) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return Status(StatusCode::kUsage, "--calibrate " + dir + ": not a directory (a folder of runs, each holding <input>.npy)");
  }
  std::unique_ptr<Calibration> c(new Calibration());
  c->memory_bytes_ = memory_bytes;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code type_error;
    if (it->is_directory(type_error)) c->runs_.push_back(it->path().string());
  }
  if (ec) return Status(StatusCode::kUsage, "--calibrate " + dir + ": " + ec.message());
  std::sort(c->runs_.begin(), c->runs_.end());
  if (c->runs_.empty()) c->runs_.push_back(dir);
  auto program = open_program(bundle_path, /*verify_segments=*/false, "cpu", /*use_mmap=*/true, /*fuse_activations=*/false);
  if (!program.ok()) return program.status();
  c->program_ = *program;
  const auto* sig = c->program_->bundle().program().signature()->inputs();
  for (std::uint32_t i = 0; sig != nullptr && i < sig->size(); ++i) {
    const std::string name = sig->Get(i)->name()->str();
    if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos || name.find('\0') != std::string::npos) {
      return Status(StatusCode::kUsage, "--calibrate: input '" + printable(name) + "' cannot be read from a file <name>.npy");
    }
  }
  c->find_targets();
  c->find_leaders();
  return c;
}

void Calibration::find_targets() {
  const fb::Program& p = program_->bundle().program();
  std::vector<bool> top_level(p.graphs()->size(), false);
  top_level[p.entry_graph()] = true;
  if (p.specializations() != nullptr) {
    for (const auto* s : *p.specializations()) top_level[s->graph()] = true;
  }
  for (std::uint32_t g = 0; g < p.graphs()->size(); ++g) {
    const fb::Graph& graph = *p.graphs()->Get(g);
    const auto& values = *graph.values();
    // Where each value is defined: (node, output) or (-1, graph input position).
    std::vector<std::pair<std::int64_t, std::uint32_t>> def(values.size(), {-2, 0});
    if (graph.inputs() != nullptr) {
      for (std::uint32_t i = 0; i < graph.inputs()->size(); ++i) def[graph.inputs()->Get(i)] = {-1, i};
    }
    const std::uint32_t signature_inputs = p.signature()->inputs() ? p.signature()->inputs()->size() : 0;
    for (std::uint32_t n = 0; n < graph.nodes()->size(); ++n) {
      const fb::Node& node = *graph.nodes()->Get(n);
      if (node.outputs() != nullptr) {
        for (std::uint32_t o = 0; o < node.outputs()->size(); ++o) def[node.outputs()->Get(o)] = {n, o};
      }
      const std::string op = p.op_names()->Get(node.op())->str();
      if ((op != "linear" && op != "matmul") || node.inputs() == nullptr || node.inputs()->size() < 2) continue;
      const fb::Value& w = *values.Get(node.inputs()->Get(1));
      const fb::Value& x = *values.Get(node.inputs()->Get(0));
      if (w.kind() != fb::ValueKind::Constant || x.dtype() != fb::DType::f32) continue;
      const fb::Constant& c = *p.constants()->Get(w.constant());
      if (c.dtype() != fb::DType::f32 || c.shape() == nullptr || c.shape()->size() != 2) continue;
      const bool transposed = op == "matmul";
      const auto key = std::make_pair(w.constant(), transposed);
      auto [it, added] = target_index_.emplace(key, targets_.size());
      if (added) {
        auto t = std::make_unique<Target>();
        t->constant = w.constant();
        t->transposed = transposed;
        t->k = transposed ? c.shape()->Get(0) : c.shape()->Get(1);
        targets_.push_back(std::move(t));
      }
      Target& t = *targets_[it->second];
      const auto [at, index] = def[node.inputs()->Get(0)];
      if (at >= 0) {
        t.uses.push_back({g, at, index});
      } else if (at == -1 && top_level[g] && index < signature_inputs) {
        t.uses.push_back({g, -1, index});
      } else if (t.why.empty()) {
        t.why = "its input is the input of a subgraph, which calibration does not observe";
      }
    }
  }
}

// (graph, node, output) of every use, sorted: two targets with equal keys read the same values.
std::vector<std::tuple<std::uint32_t, std::int64_t, std::uint32_t>> use_key(const std::vector<Calibration::Use>& uses) {
  std::vector<std::tuple<std::uint32_t, std::int64_t, std::uint32_t>> key;
  for (const Calibration::Use& u : uses) key.emplace_back(u.graph, u.node, u.output);
  std::sort(key.begin(), key.end());
  key.erase(std::unique(key.begin(), key.end()), key.end());
  return key;
}

void Calibration::find_leaders() {
  std::map<std::pair<std::int64_t, std::vector<std::tuple<std::uint32_t, std::int64_t, std::uint32_t>>>, std::size_t> first;
  for (std::size_t i = 0; i < targets_.size(); ++i) {
    Target& t = *targets_[i];
    if (t.uses.empty()) continue;
    auto [it, added] = first.emplace(std::make_pair(t.k, use_key(t.uses)), i);
    if (!added) t.leader = static_cast<std::ptrdiff_t>(it->second);
  }
}

bool Calibration::shares(const Target& t, std::size_t first) const {
  return t.leader >= static_cast<std::ptrdiff_t>(first);
}

std::size_t Calibration::pass_end(std::size_t first) const {
  // The moments of as many targets as fit (sums and means: 2 k^2 doubles each); a layer
  // too wide for the budget on its own is passed over (moments() says so).
  std::size_t last = first;
  std::uint64_t bytes = 0;
  for (; last < targets_.size(); ++last) {
    if (too_wide(*targets_[last]) || shares(*targets_[last], first)) continue;
    const auto k = static_cast<std::uint64_t>(targets_[last]->k);
    if (last > first && bytes + 2 * k * k * 8 > memory_bytes_) break;
    bytes += 2 * k * k * 8;
  }
  return last;
}

bool Calibration::too_wide(const Target& t) const {
  return 2.0 * static_cast<double>(t.k) * static_cast<double>(t.k) * 8 > static_cast<double>(memory_bytes_);
}

Status Calibration::measure_from(std::size_t first) {
  for (auto& t : targets_) t->sums.reset(), t->mean.reset(), t->measured = false;
  const std::size_t last = pass_end(first);
  // (graph, node or -1 - input) -> (output/input index, target) to add.
  std::map<std::pair<std::uint32_t, std::int64_t>, std::vector<std::pair<std::uint32_t, Target*>>> watch;
  for (std::size_t i = first; i < last; ++i) {
    Target& t = *targets_[i];
    if (too_wide(t) || shares(t, first)) continue;
    t.sums = std::make_unique<quant::InputMoments>(t.k);
    for (const Use& u : t.uses) watch[{u.graph, u.node >= 0 ? u.node : -1 - static_cast<std::int64_t>(u.output)}].push_back({u.output, &t});
  }
  ++passes_;
  const fb::Program& p = program_->bundle().program();
  const auto* sig = p.signature()->inputs();
  // A layer's inputs are copied as the run goes and added after it, when the moments can
  // use every core (during the run the session's threads spin between nodes); past
  // kPendingBytes of copies they are added at once, so memory stays bounded.
  constexpr std::size_t kPendingBytes = std::size_t{256} << 20;
  std::size_t pending_bytes = 0;
  Status add_status = Status::Ok();
  auto flush = [&] {
    for (std::size_t i = first; i < last; ++i) {
      Target& t = *targets_[i];
      if (!t.sums || t.pending.empty()) continue;
      const Status added = t.sums->add(t.pending.data(), static_cast<std::int64_t>(t.pending.size()) / t.k);
      if (!added.ok() && add_status.ok()) add_status = added;
      std::vector<float>().swap(t.pending);
    }
    pending_bytes = 0;
  };
  auto add = [&](Target& t, DType dtype, std::span<const std::int64_t> shape, std::span<const std::uint8_t> data) {
    if (dtype != DType::kF32 || shape.empty() || shape.back() != t.k || t.k == 0) return;
    const auto* values = reinterpret_cast<const float*>(data.data());
    const std::size_t n = data.size() / 4 / static_cast<std::size_t>(t.k) * static_cast<std::size_t>(t.k);
    t.pending.insert(t.pending.end(), values, values + n);
    pending_bytes += n * 4;
    if (pending_bytes > kPendingBytes) flush();
  };
  // One session for every run, its state reset before each.
  const std::vector<HostValue>* inputs = nullptr;
  bool graph_inputs_seen = false;
  SessionOptions options;
  options.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  options.observer = [&](const NodeObservation& e) {
    if (e.depth == 0 && !graph_inputs_seen) {
      graph_inputs_seen = true;
      for (std::uint32_t i = 0; i < inputs->size(); ++i) {
        auto it = watch.find({e.graph, -1 - static_cast<std::int64_t>(i)});
        if (it == watch.end() || (*inputs)[i].is_int) continue;
        const HostTensor& h = (*inputs)[i].tensor;
        for (const auto& [index, target] : it->second) add(*target, h.dtype, h.shape, h.data);
      }
    }
    auto it = watch.find({e.graph, static_cast<std::int64_t>(e.node)});
    if (it == watch.end()) return;
    for (const auto& [index, target] : it->second) {
      if (index >= e.outputs.size() || e.outputs[index].kind != ObservedValue::Kind::kTensor) continue;
      const ObservedValue& v = e.outputs[index];
      add(*target, v.dtype, v.shape, v.data);
    }
  };
  Session session(*program_, std::move(options));
  // Progress for long calibrations, on a terminal only; the line is cleared however the
  // pass ends (an error message then starts on a clean line).
  const bool tty = ::isatty(STDERR_FILENO) == 1;
  struct ClearLine {
    bool tty;
    ~ClearLine() {
      if (tty) std::cerr << "\r\033[K" << std::flush;
    }
  } clear_line{tty};
  for (const std::string& run : runs_) {
    std::vector<std::string> args;
    for (std::uint32_t i = 0; sig != nullptr && i < sig->size(); ++i) {
      const std::string name = sig->Get(i)->name()->str();
      const fs::path file = fs::path(run) / (name + ".npy");
      std::error_code ec;
      if (!fs::exists(file, ec)) {
        return Status(StatusCode::kInvalidInput, "calibration run " + run + ": " + file.string() + " is missing (input '" + name + "')");
      }
      args.push_back(name + "=" + file.string());
    }
    if (tty) {
      std::cerr << "\rcalibrating: pass " << passes_ << ", run " << (&run - runs_.data()) + 1 << " of " << runs_.size()
                << std::flush;
    }
    auto run_inputs = parse_inputs(p, args);
    if (!run_inputs.ok()) return run_inputs.status().with_context("calibration run " + run);
    inputs = &*run_inputs;
    graph_inputs_seen = false;
    session.reset_state();
    auto result = session.run(*run_inputs);
    if (!result.ok()) return result.status().with_context("calibration run " + run);
    flush();
    KILN_RETURN_IF_ERROR(add_status);
  }
  for (std::size_t i = first; i < last; ++i) {
    Target& t = *targets_[i];
    if (!t.sums) continue;
    t.rows = t.sums->rows();
    t.skipped_rows = t.sums->nonfinite_rows();
    if (t.rows > 0) t.mean = std::make_shared<const std::vector<double>>(t.sums->mean());
    t.sums.reset();
    t.measured = true;
  }
  for (std::size_t i = first; i < last; ++i) {
    Target& t = *targets_[i];
    if (!shares(t, first)) continue;
    const Target& leader = *targets_[static_cast<std::size_t>(t.leader)];
    t.rows = leader.rows;
    t.skipped_rows = leader.skipped_rows;
    t.mean = leader.mean;
    t.measured = true;
  }
  return Status::Ok();
}

Result<std::shared_ptr<const std::vector<double>>> Calibration::moments(std::uint32_t constant, bool transposed,
                                                                        std::string& why) {
  auto it = target_index_.find({constant, transposed});
  if (it == target_index_.end()) {
    why = "no linear or matmul reads it as an f32 weight from an f32 input";
    return std::shared_ptr<const std::vector<double>>();
  }
  Target& t = *targets_[it->second];
  if (t.uses.empty()) {
    why = t.why;
    return std::shared_ptr<const std::vector<double>>();
  }
  if (too_wide(t)) {
    const double need_mib = 2.0 * static_cast<double>(t.k) * static_cast<double>(t.k) * 8 / (1 << 20);
    why = "its input dim " + std::to_string(t.k) + " needs " + std::to_string(static_cast<std::int64_t>(std::ceil(need_mib))) +
          " MiB of input moments, more than --calibration-memory " + std::to_string(memory_bytes_ >> 20) + " MiB";
    return std::shared_ptr<const std::vector<double>>();
  }
  if (!t.measured) KILN_RETURN_IF_ERROR(measure_from(it->second));
  if (t.rows == 0) {
    why = "its layer never ran on the calibration inputs (another specialization or branch ran)";
    return std::shared_ptr<const std::vector<double>>();
  }
  return t.mean;
}

std::int64_t Calibration::rows(std::uint32_t constant, bool transposed) const {
  auto it = target_index_.find({constant, transposed});
  return it == target_index_.end() ? 0 : targets_[it->second]->rows;
}

std::int64_t Calibration::skipped_rows(std::uint32_t constant, bool transposed) const {
  auto it = target_index_.find({constant, transposed});
  return it == target_index_.end() ? 0 : targets_[it->second]->skipped_rows;
}

}  // namespace kiln::cli

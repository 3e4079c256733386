// kiln bench BUNDLE --input ... [--warmup N] [--iters N] [--threads N] [--profile] [--json]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "max_memory.h"

namespace kiln::cli {
namespace {

using json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

struct BenchOptions {
  std::string path;
  std::vector<std::string> inputs, positional;
  std::string backend = "cpu";
  int warmup = 5, iters = 50, threads = 1;
  bool profile = false, json = false;
  std::uint64_t max_memory = 0;  // --max-memory; 0 = the runtime default
  bool no_mmap = false;
};

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

double percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const std::size_t i = static_cast<std::size_t>(q * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

}  // namespace

Command add_bench(CLI::App& app) {
  auto o = std::make_shared<BenchOptions>();
  app.add_option("bundle", o->path, "The .kiln bundle")->required();
  app.add_option("values", o->positional, "Input values in signature order (FILE.npy or INT)");
  app.add_option("-i,--input", o->inputs, "NAME=FILE.npy or NAME=INT");
  app.add_option("--backend", o->backend, "cpu, vulkan or auto");
  app.add_option("--warmup", o->warmup, "Untimed runs first (default 5)")->check(CLI::Range(0, 100000));
  app.add_option("--iters", o->iters, "Timed runs (default 50)")->check(CLI::Range(1, 1000000));
  app.add_option("--threads", o->threads, "Worker threads (default 1)")->check(CLI::Range(1, 256));
  app.add_flag("--profile", o->profile, "Per-op time table");
  add_max_memory_option(app, o->max_memory);
  app.add_flag("--json", o->json, "Print one JSON object on stdout");
  add_no_mmap_flag(app, &o->no_mmap);
  app.footer("Example:\n  kiln bench model.kiln --input x=x.npy --iters 100 --json");
  return [o]() {
    KILN_RETURN_IF_ERROR_CLI(check_backend(o->backend), o->json);
    const auto t_load = Clock::now();
    auto program = open_program(o->path, /*verify_segments=*/false, o->backend, !o->no_mmap);
    if (!program.ok()) return report_error(program.status(), o->json);
    const double load_ms = ms_since(t_load);
    std::vector<std::string> args = o->positional;
    args.insert(args.end(), o->inputs.begin(), o->inputs.end());
    auto inputs = parse_inputs((*program)->bundle().program(), args);
    if (!inputs.ok()) return report_error(inputs.status(), o->json);
    Session session(**program, {.threads = o->threads, .profile = o->profile, .max_memory_bytes = o->max_memory});
    std::string variant;
    RunResult result;
    std::map<std::pair<std::string, std::string>, std::pair<double, int>> per_op;
    std::vector<double> times;
    for (int i = 0; i < o->warmup + o->iters; ++i) {
      const auto t0 = Clock::now();
      const Status st = session.run(*inputs, result);  // output buffers reused across runs
      const double ms = ms_since(t0);
      if (!st.ok()) return report_error(st, o->json);
      variant = result.variant;
      if (i < o->warmup) continue;
      times.push_back(ms);
      for (const auto& op : session.last_stats().ops) {
        auto& acc = per_op[{op.op, op.where}];
        acc.first += op.ms;
        acc.second += 1;
      }
    }
    const double median = percentile(times, 0.5), p10 = percentile(times, 0.1), p90 = percentile(times, 0.9);
    json j{{"bundle", o->path}, {"backend", (*program)->backend_name()}, {"threads", o->threads}, {"variant", variant}, {"iters", o->iters},
           {"median_ms", median}, {"p10_ms", p10}, {"p90_ms", p90}, {"throughput_per_s", 1000.0 / median},
           {"load_ms", load_ms}, {"peak_bytes", session.last_stats().peak_bytes},
           {"arena_bytes", session.last_stats().arena_bytes}, {"unplanned_bytes", session.last_stats().unplanned_bytes},
           {"bytes_uploaded", session.last_stats().bytes_uploaded}, {"bytes_downloaded", session.last_stats().bytes_downloaded},
           {"state_bytes_written_per_run", session.last_stats().state_bytes_written},
           {"weights_released_bytes", (*program)->released_weight_bytes()}, {"cpu_kernels", Program::cpu_kernel_isas()}};
    std::vector<std::pair<double, json>> rows;
    for (const auto& [key, acc] : per_op) {
      const double avg = acc.first / o->iters;
      rows.push_back({avg, json{{"op", key.first}, {"source", key.second}, {"ms", avg}, {"calls_per_run", acc.second / o->iters}}});
    }
    std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    if (o->profile) {
      json prof = json::array();
      for (const auto& r : rows) prof.push_back(r.second);
      j["profile"] = prof;
    }
    if (o->json) {
      std::cout << dump_json(j) << "\n";
      return 0;
    }
    std::printf("%s: variant %s, %s backend, %d threads\n", printable(o->path).c_str(), printable(variant).c_str(), (*program)->backend_name().c_str(), o->threads);
    std::printf("cpu       %s\n", Program::cpu_kernel_isas().c_str());
    std::printf("latency   median %.3f ms   p10 %.3f ms   p90 %.3f ms   (%d runs)\n", median, p10, p90, o->iters);
    const RunStats& st = session.last_stats();
    std::printf("load      %.3f ms\npeak      %llu bytes of tensors (planned arena %llu bytes; %llu without reuse)\n", load_ms,
                static_cast<unsigned long long>(st.peak_bytes), static_cast<unsigned long long>(st.arena_bytes),
                static_cast<unsigned long long>(st.unplanned_bytes));
    if (st.bytes_uploaded + st.bytes_downloaded > 0) {
      std::printf("copies    %llu bytes to the device, %llu bytes back per run\n", static_cast<unsigned long long>(st.bytes_uploaded),
                  static_cast<unsigned long long>(st.bytes_downloaded));
    }
    if (!session.state_names().empty()) {
      std::printf("state     %llu bytes written per run\n", static_cast<unsigned long long>(st.state_bytes_written));
    }
    if (o->profile) {
      std::printf("\n%-22s %-34s %10s %8s\n", "op", "source", "ms/run", "share");
      for (const auto& [avg, row] : rows) {
        std::printf("%-22s %-34s %10.4f %7.1f%%\n", printable(row["op"].get<std::string>()).c_str(), printable(row["source"].get<std::string>()).c_str(), avg,
                    100.0 * avg / median);
      }
    }
    return 0;
  };
}

}  // namespace kiln::cli

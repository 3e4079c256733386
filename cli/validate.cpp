// kiln validate BUNDLE [--backend ...] [--json]: full verification, then replay of the
// bundle's embedded self-tests (golden inputs and outputs with per-output tolerances):
// each from the initial state, a sequence's steps one after another on one state.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "commands.h"
#include "max_memory.h"
#include "kiln/format/kiln_generated.h"
#include "kiln/runtime/file_io.h"

namespace kiln::cli {
namespace {

using json = nlohmann::ordered_json;

struct ValidateOptions {
  std::string path;
  std::string backend = "cpu";
  std::uint64_t max_memory = 0;  // --max-memory; 0 = the runtime default
  bool json = false;
  bool no_mmap = false;
  std::string junit;  // --junit FILE
};

// Compares one output; fills `report` and returns whether it passed.
bool compare(const HostValue& got, const HostValue& want, const fb::TestTensor& spec, json& report) {
  if (want.is_int) {
    report["expected"] = want.int_value;
    report["got"] = got.is_int ? json(got.int_value) : json("a tensor");
    return got.is_int && got.int_value == want.int_value;
  }
  const HostTensor &g = got.tensor, &w = want.tensor;
  report["shape"] = w.shape;
  if (got.is_int || g.dtype != w.dtype || g.shape != w.shape) {
    report["error"] = "got " + std::string(dtype_name(g.dtype)) + " of shape " + json(g.shape).dump() + ", expected " +
                      std::string(dtype_name(w.dtype)) + " of shape " + json(w.shape).dump();
    return false;
  }
  const bool exact = !dtype_is_floating(w.dtype);
  double max_abs = 0.0, max_rel = 0.0;
  std::size_t worst = 0, failures = 0;
  const std::size_t n = static_cast<std::size_t>(w.numel());
  for (std::size_t i = 0; i < n; ++i) {
    const double a = g.element(i), b = w.element(i);
    const double diff = (std::isnan(a) || std::isnan(b)) ? (std::isnan(a) && std::isnan(b) ? 0.0 : INFINITY)
                        : (a == b ? 0.0 : std::fabs(a - b));
    const bool ok = exact ? diff == 0.0 : diff <= spec.atol() + spec.rtol() * std::fabs(b);
    if (!ok) ++failures;
    if (diff > max_abs) max_abs = diff, worst = i;
    if (b != 0.0 && std::isfinite(b)) max_rel = std::max(max_rel, diff / std::fabs(b));
  }
  report["max_abs_diff"] = max_abs;
  report["max_rel_diff"] = max_rel;
  report["worst_index"] = worst;
  report["mismatched"] = failures;
  if (!exact) report["tolerance"] = {{"rtol", spec.rtol()}, {"atol", spec.atol()}};
  return failures == 0;
}

}  // namespace

HostValue self_test_value(const Bundle& b, const fb::TestTensor& t) {
  if (t.kind() == fb::InputKind::Int) return HostValue::integer(t.int_value());
  HostTensor h;
  h.dtype = static_cast<DType>(t.dtype());
  if (t.shape()) h.shape.assign(t.shape()->begin(), t.shape()->end());
  const auto bytes = b.data_ref(t.segment(), t.offset(), t.nbytes());
  h.data.assign(bytes.begin(), bytes.end());
  return HostValue::of(std::move(h));
}

Command add_validate(CLI::App& app) {
  auto o = std::make_shared<ValidateOptions>();
  app.add_option("bundle", o->path, "The .kiln bundle")->required();
  app.add_option("--backend", o->backend, "cpu, vulkan or auto");
  add_max_memory_option(app, o->max_memory);
  app.add_flag("--json", o->json, "Print one JSON object on stdout");
  add_no_mmap_flag(app, &o->no_mmap);
  app.add_option("--junit", o->junit, "Also write a JUnit XML report (one test case per self-test and output) to FILE");
  app.footer("Example:\n  kiln validate model.kiln --json\n  kiln validate model.kiln --junit report.xml");
  return [o]() {
    KILN_RETURN_IF_ERROR_CLI(check_backend(o->backend), o->json);
    auto program = open_program(o->path, /*verify_segments=*/true, o->backend, !o->no_mmap);
    if (!program.ok()) {
      if (!o->junit.empty()) {  // CI still gets a report saying why
        const Status written = write_text_file(o->junit, junit_xml(o->path, o->backend, json::array(), program.status().message()));
        if (!written.ok()) std::cerr << "kiln: error: " << printable(written.message()) << "\n";
      }
      return report_error(program.status(), o->json);
    }
    if (!o->junit.empty()) KILN_RETURN_IF_ERROR_CLI(check_output_target(o->junit), o->json);
    const Bundle& b = (*program)->bundle();
    const fb::Program& p = b.program();
    Session session(**program, {.max_memory_bytes = o->max_memory});
    json tests = json::array();
    bool all_passed = true;
    Status first_error;  // the first self-test that could not run: reported with its own code
    // Independent self-tests run from the initial state; the steps of a sequence
    // (SelfTest.sequence) run in list order on one state, reset before its first step.
    const std::uint32_t n_tests = p.self_tests() ? p.self_tests()->size() : 0;
    std::vector<std::vector<std::uint32_t>> runs;
    std::map<std::string, std::size_t> run_of;
    for (std::uint32_t t = 0; t < n_tests; ++t) {
      const auto* seq = p.self_tests()->Get(t)->sequence();
      if (!seq || seq->size() == 0) {
        runs.push_back({t});
        continue;
      }
      auto [it, fresh] = run_of.emplace(seq->str(), runs.size());
      if (fresh) runs.emplace_back();
      runs[it->second].push_back(t);
    }
    for (const auto& run : runs) {
      session.reset_state();
      std::string failed_step;  // a step that could not run: the rest of its sequence is not run
      for (std::size_t step = 0; step < run.size(); ++step) {
        const auto* st = p.self_tests()->Get(run[step]);
        json tj{{"name", st->name() ? st->name()->str() : ""}};
        if (st->sequence() && st->sequence()->size() > 0) {
          tj["sequence"] = st->sequence()->str();
          tj["step"] = step;
        }
        if (!failed_step.empty()) {
          tj["error"] = "not run: step '" + failed_step + "' of its sequence could not run";
          tj["error_code"] = "not_run";
          tj["expected_outputs"] = st->outputs() ? st->outputs()->size() : 0;
          tj["passed"] = false;
          all_passed = false;
          tests.push_back(tj);
          continue;
        }
        std::vector<HostValue> inputs;
        for (std::uint32_t k = 0; k < st->inputs()->size(); ++k) inputs.push_back(self_test_value(b, *st->inputs()->Get(k)));
        const auto t0 = std::chrono::steady_clock::now();
        auto result = session.run(inputs);
        tj["seconds"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        tj["expected_outputs"] = st->outputs() ? st->outputs()->size() : 0;
        bool passed = result.ok();
        if (!result.ok()) {
          tj["error"] = result.status().message();
          tj["error_code"] = status_code_name(result.status().code());
          if (first_error.ok()) first_error = result.status().with_context("self-test '" + tj["name"].get<std::string>() + "'");
          if (tj.contains("sequence")) failed_step = tj["name"].get<std::string>();
        } else {
          tj["variant"] = result->variant;
          json outs = json::array();
          for (std::uint32_t k = 0; k < st->outputs()->size(); ++k) {
            json oj{{"index", k}};
            const bool ok = compare(result->outputs[k], self_test_value(b, *st->outputs()->Get(k)), *st->outputs()->Get(k), oj);
            oj["passed"] = ok;
            passed = passed && ok;
            outs.push_back(oj);
          }
          tj["outputs"] = outs;
        }
        tj["passed"] = passed;
        all_passed = all_passed && passed;
        tests.push_back(tj);
      }
    }
    if (o->json) {
      std::cout << dump_json({{"bundle", o->path}, {"verified", true}, {"passed", all_passed}, {"self_tests", tests}}) << "\n";
    } else {
      std::cerr << printable(o->path) << ": structure, checksums and kernels verified\n";
      if (tests.empty()) std::cerr << "no self-tests embedded\n";
      for (const auto& tj : tests) {
        std::cerr << "self-test " << printable(tj["name"].get<std::string>()) << ": " << (tj["passed"].get<bool>() ? "passed" : "FAILED");
        if (tj.contains("variant")) std::cerr << " (variant " << printable(tj["variant"].get<std::string>()) << ")";
        if (tj.contains("error")) std::cerr << ": " << printable(tj["error"].get<std::string>());
        std::cerr << "\n";
        if (!tj.contains("outputs")) continue;
        for (const auto& oj : tj["outputs"]) {
          std::cerr << "  output " << oj["index"] << ": " << (oj["passed"].get<bool>() ? "ok" : "MISMATCH");
          if (oj.contains("max_abs_diff")) std::cerr << "  max |diff| " << oj["max_abs_diff"].get<double>() << " (" << oj["mismatched"] << " elements out of tolerance)";
          if (oj.contains("error")) std::cerr << "  " << printable(oj["error"].get<std::string>());
          if (oj.contains("expected")) std::cerr << "  expected " << oj["expected"] << ", got " << oj["got"];
          std::cerr << "\n";
        }
      }
    }
    if (!o->junit.empty()) KILN_RETURN_IF_ERROR_CLI(write_text_file(o->junit, junit_xml(o->path, (*program)->backend_name(), tests, "")), o->json);
    if (!first_error.ok()) {
      std::cerr << "kiln: error: validation failed: " << printable(first_error.message()) << "\n";
      return exit_code(first_error.code());
    }
    if (!all_passed) {
      std::cerr << "kiln: error: validation failed: a self-test output is outside its tolerance\n";
      return exit_code(StatusCode::kValidationFailed);
    }
    return 0;
  };
}

}  // namespace kiln::cli

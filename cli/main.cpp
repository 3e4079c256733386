// kiln: export, inspect, run, validate and benchmark Kiln bundles. See docs/CLI.md.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <map>
#include <string_view>
#include <vector>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "kiln/export/version.h"
#include "kiln/format/file_format.h"
#include "kiln/runtime/file_io.h"

namespace kiln::cli {
namespace {

constexpr const char* kExitCodes =
    "Exit codes:\n"
    "  0   success\n"
    "  1   usage error (unknown flag or command, bad option value, refused output target)\n"
    "  2   the bundle or model file is invalid (unreadable, not a regular file, truncated, corrupt, unsupported\n"
    "      version, failed verification)\n"
    "  3   the inputs are invalid (count, name, dtype, shape, range, unreadable .npy, failed runtime assert)\n"
    "  4   a requested backend is unavailable\n"
    "  5   validation failed: a self-test output outside its tolerance (compare: a node diverged)\n"
    "  6   unsupported: an op or feature this build cannot run\n"
    "  7   export failed\n"
    "  8   an output could not be written (I/O error: missing folder, disk full, permission)\n"
    "  70  internal error (a bug in Kiln)\n";

// A mapped bundle truncated or rewritten in place under a running process: the kernel
// raises SIGBUS on the first access past the new end. Say so and exit 2 instead of dying.
extern "C" void on_sigbus(int) {
  static const char msg[] =
      "kiln: error: the bundle file changed while it was mapped (truncated or rewritten in place); "
      "replace bundles by rename, or use --no-mmap\n";
  const ssize_t ignored = ::write(STDERR_FILENO, msg, sizeof msg - 1);
  (void)ignored;
  ::_exit(exit_code(StatusCode::kInvalidBundle));
}

bool wants_json(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) if (std::strcmp(argv[i], "--json") == 0) return true;
  return false;
}

}  // namespace

std::string printable(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  auto escape = [&](unsigned char c) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "\\x%02x", c);
    out += buf;
  };
  for (std::size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) {
      if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f) escape(c);
      else out += static_cast<char>(c);
      ++i;
      continue;
    }
    // A well-formed UTF-8 sequence passes through, except C1 controls (U+0080..U+009F).
    const std::size_t len = c >= 0xf0 && c < 0xf5 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 && c < 0xe0 ? 2 : 0;
    bool valid = len > 0 && i + len <= text.size() && !(c >= 0xf5);
    for (std::size_t k = 1; valid && k < len; ++k) valid = (static_cast<unsigned char>(text[i + k]) & 0xc0) == 0x80;
    if (valid && len == 2 && c == 0xc2 && static_cast<unsigned char>(text[i + 1]) < 0xa0) valid = false;
    if (!valid) {
      escape(c);
      ++i;
      continue;
    }
    out.append(text.substr(i, len));
    i += len;
  }
  return out;
}

std::string dump_json(const nlohmann::ordered_json& j, int indent) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

int report_error(const Status& status, bool json) {
  if (json) {
    const nlohmann::ordered_json error{{"code", status_code_name(status.code())},
                                       {"message", status.message()},
                                       {"exit_code", exit_code(status.code())}};
    std::cout << dump_json({{"error", error}}) << "\n";
  }
  std::cerr << "kiln: error: " << printable(status.message()) << "\n";
  return exit_code(status.code());
}

void warn_about_unknown_switches() {
  // The runtime's environment switches (docs/CLI.md) read one value each and treat any
  // other as the default, silently; a typo would then measure the wrong thing. The values
  // are those the runtime's readers compare against (a new one belongs here too).
  struct Switch {
    const char* name;
    std::vector<std::string_view> values;
  };
  static const Switch kSwitches[] = {
      {"KILN_CPU_ISA", {"baseline", "avx2", "avx512"}},
      {"KILN_LAYOUT", {"plain", "blocked"}},
      {"KILN_CONV_WINOGRAD", {"0", "1"}},
      {"KILN_CONV_PREPACK", {"0", "1"}},
      {"KILN_CONV_POINTWISE", {"0", "1"}},
      {"KILN_CONV_PLAIN_BLOCKED", {"0", "1"}},
      {"KILN_CONV_DEPTHWISE", {"0", "rows", "blocked"}},
      {"KILN_WINOGRAD_WEIGHTS", {"streamed", "cached"}},
      {"KILN_VULKAN_VALIDATION", {"0", "1"}},
  };
  for (const Switch& sw : kSwitches) {
    const char* v = std::getenv(sw.name);
    if (v == nullptr || *v == '\0') continue;
    if (std::find(sw.values.begin(), sw.values.end(), std::string_view(v)) != sw.values.end()) continue;
    std::string allowed;
    for (std::string_view a : sw.values) allowed += (allowed.empty() ? "" : ", ") + std::string(a);
    std::cerr << "kiln: warning: " << sw.name << "=" << printable(v) << " is not one of " << allowed
              << "; it has the default's effect\n";
  }
}

}  // namespace kiln::cli

int main(int argc, char** argv) {
  struct sigaction sa {};
  sa.sa_handler = kiln::cli::on_sigbus;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGBUS, &sa, nullptr);
  kiln::install_cleanup_handler();

  CLI::App app{"kiln: turn models into deployable bundles and run them"};
  app.footer(kiln::cli::kExitCodes);
  app.require_subcommand(0, 1);
  bool version = false;
  app.add_flag("--version", version, "Print the tool version and the bundle format versions it reads and writes");
  std::map<CLI::App*, kiln::cli::Command> commands;
  auto* import = app.add_subcommand("import", "Convert a torch.export archive (.pt2) into a bundle");
  commands[import] = kiln::cli::add_import(*import);
  auto* inspect = app.add_subcommand("inspect", "Show everything in a bundle");
  commands[inspect] = kiln::cli::add_inspect(*inspect);
  auto* run = app.add_subcommand("run", "Run a bundle once on inputs from .npy files or integers");
  commands[run] = kiln::cli::add_run(*run);
  auto* validate = app.add_subcommand("validate", "Verify a bundle fully and replay its embedded self-tests");
  commands[validate] = kiln::cli::add_validate(*validate);
  auto* bench = app.add_subcommand("bench", "Measure latency, load time and memory of a bundle on given inputs");
  commands[bench] = kiln::cli::add_bench(*bench);
  auto* compare = app.add_subcommand("compare", "Run two bundles, or one on two backends, and compare every node's outputs");
  commands[compare] = kiln::cli::add_compare(*compare);
  auto* quantize = app.add_subcommand("quantize", "Quantize a bundle's constant weights to int8 or int4 (weight-only)");
  commands[quantize] = kiln::cli::add_quantize(*quantize);
  for (auto& [sub, unused] : commands) sub->footer(sub->get_footer() + "\n\n" + kiln::cli::kExitCodes);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    // Usage errors are exit code 1 (docs/CLI.md); with --json, stdout gets the error object too.
    if (kiln::cli::wants_json(argc, argv)) return kiln::cli::report_error(kiln::Status(kiln::StatusCode::kUsage, e.what()), true);
    app.exit(e);
    return kiln::exit_code(kiln::StatusCode::kUsage);
  }
  if (version) {
    std::printf("kiln %s\nbundle format: reads %u.0-%u.%u, writes %u.%u\n", std::string(kiln::kiln_version()).c_str(),
                kiln::format::kFormatMajor, kiln::format::kFormatMajor, kiln::format::kFormatMinor,
                kiln::format::kFormatMajor, kiln::format::kFormatMinor);
    return 0;
  }
  kiln::cli::warn_about_unknown_switches();
  for (auto& [sub, run] : commands) {
    if (sub->parsed()) return run();
  }
  std::cerr << app.help();
  return 1;
}

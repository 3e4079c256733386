// Subcommands of `kiln`. Each registers its options on the CLI11 app and returns a
// callback that runs it and yields the process exit code (docs/CLI.md).
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>

#include "kiln/runtime/status.h"

namespace kiln::cli {

using Command = std::function<int()>;

Command add_inspect(CLI::App& app);
Command add_run(CLI::App& app);
Command add_validate(CLI::App& app);
Command add_bench(CLI::App& app);
Command add_import(CLI::App& app);

}  // namespace kiln::cli

#include <memory>
#include <vector>

#include "kiln/runtime/program.h"

namespace kiln::fb {
struct Program;
}

namespace kiln::cli {

/// Opens and loads a bundle (kInvalidBundle / kUnsupported with the path as context).
Result<std::shared_ptr<const Program>> open_program(const std::string& path, bool verify_segments, const std::string& backend = "cpu");
/// Parses `NAME=FILE.npy`, `NAME=INT` or positional values into signature order.
Result<std::vector<HostValue>> parse_inputs(const fb::Program& program, const std::vector<std::string>& args);
/// kUsage for a backend name other than `cpu`, `vulkan` and `auto`. Whether Vulkan is usable
/// is decided when open_program loads the bundle: `vulkan` without a device is kUnavailable,
/// `auto` falls back to the CPU with a notice.
Status check_backend(const std::string& backend);

/// Prints `status` as "kiln: error: <message>" on stderr, or as {"error": ...} on stdout
/// when `json`, and returns the exit code for its code.
int report_error(const Status& status, bool json);

#define KILN_RETURN_IF_ERROR_CLI(expr, json)                          \
  do {                                                                \
    ::kiln::Status kiln_cli_status_ = (expr);                         \
    if (!kiln_cli_status_.ok()) return report_error(kiln_cli_status_, json); \
  } while (0)

}  // namespace kiln::cli

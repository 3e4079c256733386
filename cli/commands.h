// Subcommands of `kiln`. Each registers its options on the CLI11 app and returns a
// callback that runs it and yields the process exit code (docs/CLI.md).
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <functional>
#include <string>
#include <string_view>

#include "kiln/runtime/status.h"

namespace kiln::cli {

using Command = std::function<int()>;

Command add_inspect(CLI::App& app);
Command add_run(CLI::App& app);
Command add_validate(CLI::App& app);
Command add_bench(CLI::App& app);
Command add_import(CLI::App& app);
Command add_quantize(CLI::App& app);

}  // namespace kiln::cli

#include <memory>
#include <vector>

#include "kiln/runtime/program.h"

namespace kiln::fb {
struct Program;
}

namespace kiln::cli {

/// Opens and loads a bundle (kInvalidBundle / kUnsupported with the path as context).
/// `use_mmap` false (`--no-mmap`) reads the file into memory instead of mapping it.
Result<std::shared_ptr<const Program>> open_program(const std::string& path, bool verify_segments, const std::string& backend = "cpu",
                                                    bool use_mmap = true);
/// `status` prefixed with "PATH: " unless its message already starts with it.
Status with_path(const Status& status, const std::string& path);
/// Adds `--no-mmap` (sets `*no_mmap`) to a subcommand that opens a bundle.
void add_no_mmap_flag(CLI::App& app, bool* no_mmap);
/// Parses `NAME=FILE.npy`, `NAME=INT` or positional values into signature order.
Result<std::vector<HostValue>> parse_inputs(const fb::Program& program, const std::vector<std::string>& args);
/// kUsage for a backend name other than `cpu`, `vulkan` and `auto`. Whether Vulkan is usable
/// is decided when open_program loads the bundle: `vulkan` without a device is kUnavailable,
/// `auto` falls back to the CPU with a notice.
Status check_backend(const std::string& backend);

/// `text` with the bytes a terminal would interpret escaped: C0 controls other than newline
/// and tab, DEL, C1 controls (U+0080..U+009F) and invalid UTF-8 become `\xNN`. Every string
/// from a file (op, symbol and input names, debug strings, error messages quoting them) goes
/// through it before reaching human-readable output.
std::string printable(std::string_view text);

/// `j` as text (indented by `indent`); invalid UTF-8 from a file becomes U+FFFD instead of
/// throwing.
std::string dump_json(const nlohmann::ordered_json& j, int indent = 2);

/// Prints `status` as "kiln: error: <message>" on stderr, or as {"error": ...} on stdout
/// when `json`, and returns the exit code for its code.
int report_error(const Status& status, bool json);

#define KILN_RETURN_IF_ERROR_CLI(expr, json)                          \
  do {                                                                \
    ::kiln::Status kiln_cli_status_ = (expr);                         \
    if (!kiln_cli_status_.ok()) return report_error(kiln_cli_status_, json); \
  } while (0)

}  // namespace kiln::cli

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
Command add_compare(CLI::App& app);
Command add_quantize(CLI::App& app);

}  // namespace kiln::cli

#include <memory>
#include <vector>

#include "kiln/runtime/program.h"

namespace kiln::fb {
struct Program;
struct InputSpec;
struct TestTensor;
}

namespace kiln::cli {

/// Opens and loads a bundle (kInvalidBundle / kUnsupported with the path as context).
/// `use_mmap` false (`--no-mmap`) reads the file into memory instead of mapping it.
/// `fuse_activations` false: every node computes its own output (ProgramOptions).
Result<std::shared_ptr<const Program>> open_program(const std::string& path, bool verify_segments, const std::string& backend = "cpu",
                                                    bool use_mmap = true, bool fuse_activations = true);
/// Writes `text` to `path` atomically (a registered temporary next to it, then rename):
/// nothing partial is left on failure (kIoError naming the file); a target that is not a
/// regular file is refused (kUsage, check_output_target).
Status write_text_file(const std::string& path, const std::string& text);
/// `status` prefixed with "PATH: " unless its message already starts with it.
Status with_path(const Status& status, const std::string& path);
/// Adds `--no-mmap` (sets `*no_mmap`) to a subcommand that opens a bundle.
void add_no_mmap_flag(CLI::App& app, bool* no_mmap);
/// Makes up a value for signature input `index` that the arguments did not give.
using InputFiller = std::function<Result<HostValue>(std::uint32_t index, const fb::InputSpec& spec)>;
/// Parses `NAME=FILE.npy`, `NAME=INT` or positional values into signature order. An input
/// not given is kInvalidInput ("missing input 'x'"), or `fill`'s value when there is one.
Result<std::vector<HostValue>> parse_inputs(const fb::Program& program, const std::vector<std::string>& args,
                                            const InputFiller* fill = nullptr);
/// Input or expected output `t` of a self-test of verified bundle `b`, as a HostValue.
HostValue self_test_value(const Bundle& b, const fb::TestTensor& t);
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

/// `text` for XML character data and attribute values: printable() first (so it is valid
/// UTF-8 without the control characters XML 1.0 forbids), then & < > " ' escaped and
/// newlines and tabs as character references.
std::string xml_escape(std::string_view text);

/// The JUnit XML report of `kiln validate` (cli/junit.cpp): one <testcase> per self-test x
/// output from validate's JSON entries (`tests`; each with "expected_outputs" and
/// "seconds"), a <failure> with the error statistics for an output outside its tolerance,
/// an <error> per output of a self-test that could not run, and one <error> testcase
/// "load and verify" when `load_error` is not empty (the bundle did not load).
std::string junit_xml(const std::string& bundle, const std::string& backend, const nlohmann::ordered_json& tests,
                      const std::string& load_error);

#define KILN_RETURN_IF_ERROR_CLI(expr, json)                          \
  do {                                                                \
    ::kiln::Status kiln_cli_status_ = (expr);                         \
    if (!kiln_cli_status_.ok()) return report_error(kiln_cli_status_, json); \
  } while (0)

}  // namespace kiln::cli

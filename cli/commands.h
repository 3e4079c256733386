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

/// Prints `status` as "kiln: error: <message>" on stderr, or as {"error": ...} on stdout
/// when `json`, and returns the exit code for its code.
int report_error(const Status& status, bool json);

}  // namespace kiln::cli

// kiln: export, inspect, run, validate and benchmark Kiln bundles. See docs/CLI.md.
#include <cstdio>
#include <iostream>
#include <map>

#include "commands.h"
#include "kiln/export/version.h"
#include "kiln/format/file_format.h"

namespace kiln::cli {

int report_error(const Status& status, bool json) {
  if (json) {
    std::string msg;
    for (char c : status.message()) {
      if (c == '"' || c == '\\') msg += '\\';
      if (static_cast<unsigned char>(c) < 0x20) { msg += ' '; continue; }
      msg += c;
    }
    std::cout << "{\"error\": {\"code\": \"" << status_code_name(status.code()) << "\", \"message\": \"" << msg
              << "\", \"exit_code\": " << exit_code(status.code()) << "}}\n";
  }
  std::cerr << "kiln: error: " << status.message() << "\n";
  return exit_code(status.code());
}

}  // namespace kiln::cli

int main(int argc, char** argv) {
  CLI::App app{"kiln: turn models into deployable bundles and run them"};
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
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 1;  // usage errors are exit code 1 (docs/CLI.md)
  }
  if (version) {
    std::printf("kiln %s\nbundle format: reads %u.0-%u.%u, writes %u.%u\n", std::string(kiln::kiln_version()).c_str(),
                kiln::format::kFormatMajor, kiln::format::kFormatMajor, kiln::format::kFormatMinor,
                kiln::format::kFormatMajor, kiln::format::kFormatMinor);
    return 0;
  }
  for (auto& [sub, run] : commands) {
    if (sub->parsed()) return run();
  }
  std::cerr << app.help();
  return 1;
}

// Shared by the CLI tests: run a shell command, capture what it prints and its exit code.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace kiln::cli_test {

struct CommandResult {
  int code;         // the exit code; -1 when the command died of a signal
  std::string out;  // what it printed on the streams `command` sends to stdout
};

/// Runs `command` with `sh -c` (through popen) and waits for it.
inline CommandResult shell(const std::string& command) {
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return {-1, "popen failed: " + command};
  std::string out;
  std::array<char, 4096> buf;
  while (std::size_t n = std::fread(buf.data(), 1, buf.size(), pipe)) out.append(buf.data(), n);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

}  // namespace kiln::cli_test

// --max-memory BYTES for the commands that run a bundle (run, bench, validate): the
// Session's memory limit (SessionOptions::max_memory_bytes; docs/CLI.md).
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <optional>
#include <string>

namespace kiln::cli {

/// "4096", "512K", "512M", "8G", "1T" (binary multiples; a trailing "B" or "iB" is
/// accepted: "8GB", "8GiB"); nullopt when not a size or above 2^64 - 1.
inline std::optional<std::uint64_t> parse_byte_size(const std::string& text) {
  std::size_t i = 0;
  std::uint64_t n = 0;
  for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
    if (__builtin_mul_overflow(n, std::uint64_t{10}, &n) || __builtin_add_overflow(n, static_cast<std::uint64_t>(text[i] - '0'), &n)) {
      return std::nullopt;
    }
  }
  if (i == 0) return std::nullopt;
  std::string suffix = text.substr(i);
  for (char& c : suffix) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (suffix.size() > 1 && (suffix.ends_with("IB") || suffix.ends_with("B"))) suffix = suffix.substr(0, suffix[suffix.size() - 2] == 'I' ? suffix.size() - 2 : suffix.size() - 1);
  int shift = 0;
  if (suffix == "K") shift = 10;
  else if (suffix == "M") shift = 20;
  else if (suffix == "G") shift = 30;
  else if (suffix == "T") shift = 40;
  else if (!suffix.empty() && suffix != "B") return std::nullopt;
  if (shift > 0 && n > (UINT64_MAX >> shift)) return std::nullopt;
  return n << shift;
}

/// Adds --max-memory to `app`, parsed into `bytes` (0 = the runtime's default).
inline void add_max_memory_option(CLI::App& app, std::uint64_t& bytes) {
  app.add_option_function<std::string>(
         "--max-memory", [&bytes](const std::string& text) { bytes = parse_byte_size(text).value_or(0); },
         "Most tensor memory a run may hold: BYTES or with a K/M/G/T suffix (512M, 8G); default 3/4 of physical memory")
      ->type_name("BYTES")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            return parse_byte_size(text) ? "" : "'" + text + "' is not a size (BYTES, or a number with K, M, G or T: 512M, 8G)";
          },
          ""));
}

}  // namespace kiln::cli

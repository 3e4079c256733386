// Writes the format sample bundle (kiln/export/testing/format_sample.h) for CLI tests and
// the setup demo: make_format_sample OUT.kiln [--zstd] [--strip-debug]
#include <cstdio>
#include <cstring>
#include <string>

#include "kiln/export/testing/format_sample.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s OUT.kiln [--zstd] [--strip-debug]\n", argv[0]);
    return 1;
  }
  kiln::testing::FormatSampleOptions options;
  for (int i = 2; i < argc; ++i) {
    if (std::strcmp(argv[i], "--zstd") == 0) options.compression = kiln::format::Compression::kZstd;
    else if (std::strcmp(argv[i], "--strip-debug") == 0) options.with_debug = false;
    else {
      std::fprintf(stderr, "unknown option %s\n", argv[i]);
      return 1;
    }
  }
  const kiln::Status s = kiln::testing::make_format_sample(options)->write(argv[1]);
  if (!s.ok()) {
    std::fprintf(stderr, "error: %s\n", s.to_string().c_str());
    return kiln::exit_code(s.code());
  }
  return 0;
}

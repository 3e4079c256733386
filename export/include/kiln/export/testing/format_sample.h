// A bundle program that uses every feature of the format (symbols of both kinds, derived
// and static dims, int inputs of each dynamism, all attribute kinds, runtime asserts,
// unbacked bindings, a cond with two subgraphs, a specialization, deduplicated raw and zstd
// constants, a self-test case, the debug table, metadata). Built by hand at the FlatBuffers
// level, not traced: it exists to test the bundle format, the loader and `kiln inspect`
// (round trips, corruption, fuzz seeds, open-time benchmarks). Its self-test data is not a
// real model's output.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/export/bundle_writer.h"

namespace kiln::testing {

struct FormatSampleOptions {
  format::Compression compression = format::Compression::kNone;
  /// Bytes of an extra raw weight tensor (f32) to make the bundle large; 0 = none.
  std::uint64_t extra_weight_bytes = 0;
  bool with_debug = true;
};

/// Owns the constant bytes, the writer that refers to them, and the program.
struct FormatSample {
  std::vector<std::unique_ptr<std::vector<std::uint8_t>>> data;
  std::unique_ptr<BundleWriter> writer;
  fb::ProgramT program;

  Result<std::vector<std::uint8_t>> bytes() const { return writer->to_bytes(program); }
  Status write(const std::string& path) const { return writer->write(path, program); }
};

std::unique_ptr<FormatSample> make_format_sample(const FormatSampleOptions& options = {});

}  // namespace kiln::testing

// Serializing an ir::Program into a `.kiln` bundle.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/base/status.h"
#include "kiln/export/ir.h"
#include "kiln/format/file_format.h"

namespace kiln {

struct SaveOptions {
  format::Compression compression = format::Compression::kNone;
  /// Drop source locations, module paths and user op names (the debug table).
  bool strip_debug = false;
  /// Program.producer; defaults to "kiln <version>".
  std::string producer;
};

/// Writes `program` to `path` atomically (see BundleWriter::write). Fails with
/// kExportError if the program refers to something that does not exist (a value, graph,
/// constant or symbol id out of range) and kIoError if the file cannot be written.
Status save_bundle(const ir::Program& program, const std::string& path, const SaveOptions& options = {});

/// The bytes save_bundle would write.
Result<std::vector<std::uint8_t>> serialize_bundle(const ir::Program& program, const SaveOptions& options = {});

}  // namespace kiln

// Writing `.kiln` bundles (docs/FORMAT.md). Low level: the caller provides the program as a
// FlatBuffers object tree (kiln::fb::ProgramT) and registers constant bytes first, getting
// back where they will live (segment, offset), which the program then refers to.
//
//   BundleWriter w({.compression = format::Compression::kZstd});
//   DataRef ref = w.add_data(weight_bytes);          // identical bytes are stored once
//   program.constants.push_back(... ref.segment, ref.offset, ref.nbytes ...);
//   Status s = w.write("model.kiln", program);       // atomic: temp file, fsync, rename
//
// Placement: data of at least `own_segment_threshold` bytes gets a segment of its own
// (4 KiB-aligned, mmap-able when raw); smaller data is packed (64-byte aligned) into one
// shared segment per compression kind. Compression is chosen per segment.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kiln/base/status.h"
#include "kiln/format/file_format.h"
#include "kiln/format/kiln_generated.h"

namespace kiln {

struct DataRef {
  std::uint32_t segment = 0;
  std::uint64_t offset = 0;
  std::uint64_t nbytes = 0;
};

struct BundleWriteOptions {
  /// Compression for data added without an explicit choice.
  format::Compression compression = format::Compression::kNone;
  int zstd_level = 3;
  std::uint64_t own_segment_threshold = 64 * 1024;
  /// Recorded in the file header (truncated to 48 bytes); defaults to "kiln <version>".
  std::string producer;
  /// Tests only: fail with kIoError after writing this many bytes (0 = never).
  std::uint64_t fail_after_bytes_for_testing = 0;
};

class BundleWriter {
 public:
  explicit BundleWriter(BundleWriteOptions options = {});
  ~BundleWriter();
  BundleWriter(const BundleWriter&) = delete;
  BundleWriter& operator=(const BundleWriter&) = delete;

  /// Registers constant bytes. The bytes are NOT copied: they must stay alive and unchanged
  /// until write()/to_bytes() returns. Identical bytes (same size and content) return the
  /// same DataRef, whatever the compression asked for the second time.
  DataRef add_data(std::span<const std::uint8_t> bytes,
                   std::optional<format::Compression> compression = std::nullopt);

  /// Number of segments the data registered so far occupies.
  std::uint32_t segment_count() const;

  /// Serializes `program` and writes the whole bundle to `path` atomically: a temporary
  /// file in the same directory, fsync, rename over `path`, fsync of the directory. On any
  /// failure the temporary file is removed and `path` is left as it was. kIoError names
  /// the path and the system error.
  Status write(const std::string& path, const fb::ProgramT& program) const;

  /// The same bytes write() would produce, in memory.
  Result<std::vector<std::uint8_t>> to_bytes(const fb::ProgramT& program) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Interns postfix expressions into a ProgramT's expression pool (expr_tokens + exprs):
/// equal token sequences get one id.
class ExprPool {
 public:
  explicit ExprPool(fb::ProgramT& program);
  ~ExprPool();
  std::uint32_t intern(std::span<const fb::ExprToken> tokens);
  std::uint32_t constant(std::int64_t value);
  std::uint32_t symbol(std::uint32_t symbol_id);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln

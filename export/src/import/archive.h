// Read-only access to the zip container of a `.pt2` archive (Kiln's own reader on zlib:
// stored and deflated members, ZIP64), treated as hostile:
// the file type is checked before anything is read (a FIFO, a directory or /dev/zero is an
// error, never a hang), and every member read is capped (`MemberLimits`).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kiln/base/status.h"

namespace kiln::pt2 {

/// Caps on the uncompressed size of archive members (docs/IMPORT.md, "Limits"). A member
/// over its cap is kInvalidBundle naming it, before anything is allocated for it.
struct MemberLimits {
  static constexpr std::uint64_t kJson = 256ull << 20;        // the model JSON
  static constexpr std::uint64_t kSmall = 64ull << 20;        // configs, pickles, version files
  static constexpr std::uint64_t kTensorData = 16ull << 30;   // one tensor storage
  static constexpr std::uint64_t kArchive = 64ull << 30;      // a nested torch.save zip (all its storages)
  /// A member may expand at most this much over its compressed size (deflate's own limit is
  /// about 1032:1), so a small archive cannot declare gigabytes.
  static constexpr std::uint64_t kMaxExpansion = 1100;
};

class ZipArchive {
 public:
  /// Opens `path`: kInvalidBundle when it is missing, not a regular file (checked with a
  /// non-blocking open + fstat, so a FIFO cannot hang the import) or not a zip.
  static Result<std::unique_ptr<ZipArchive>> open(const std::string& path);
  /// A zip held in memory; `bytes` must outlive the archive. `label` names it in errors.
  static Result<std::unique_ptr<ZipArchive>> from_bytes(std::span<const std::uint8_t> bytes, const std::string& label);
  /// The zip stored as member `name` of this one (a torch.save zip inside a legacy archive),
  /// read in place when the member is stored uncompressed (no copy of its bytes), else read
  /// into memory (at most `max_bytes`). This archive must outlive the result.
  Result<std::unique_ptr<ZipArchive>> open_nested(const std::string& name, std::uint64_t max_bytes) const;
  ~ZipArchive();
  ZipArchive(const ZipArchive&) = delete;
  ZipArchive& operator=(const ZipArchive&) = delete;

  const std::string& label() const { return label_; }
  const std::vector<std::string>& names() const { return names_; }
  /// The first entry whose name ends with `suffix` and (when given) contains `infix`.
  std::optional<std::string> find(const std::string& suffix, const std::string& infix = "") const;
  /// The entry's bytes. kInvalidBundle when it is missing, declares more than `max_bytes`
  /// (or more than kMaxExpansion times its compressed size or the zip's size), or cannot be
  /// decompressed.
  Result<std::vector<std::uint8_t>> read(const std::string& name, std::uint64_t max_bytes) const;
  /// The entry's declared uncompressed size (nullopt when missing).
  std::optional<std::uint64_t> size_of(const std::string& name) const;

 private:
  ZipArchive() = default;
  struct Handle;
  /// Reads the central directory of the zip `handle` reads; the error says why it is not a zip.
  static Result<std::unique_ptr<ZipArchive>> adopt(std::unique_ptr<Handle> handle, const std::string& label);
  std::unique_ptr<Handle> handle_;
  std::string label_;
  std::vector<std::uint8_t> owned_;  // the bytes of a nested zip that had to be read into memory
  std::vector<std::string> names_;
};

}  // namespace kiln::pt2

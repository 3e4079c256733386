// Read-only access to the zip container of a `.pt2` archive (libzip).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/runtime/status.h"

namespace kiln::pt2 {

class ZipArchive {
 public:
  /// Opens `path`. kIoError when it cannot be read, kInvalidBundle when it is not a zip.
  static Result<std::unique_ptr<ZipArchive>> open(const std::string& path);
  ~ZipArchive();
  ZipArchive(const ZipArchive&) = delete;
  ZipArchive& operator=(const ZipArchive&) = delete;

  const std::vector<std::string>& names() const { return names_; }
  /// The first entry whose name ends with `suffix` and (when given) contains `infix`.
  std::optional<std::string> find(const std::string& suffix, const std::string& infix = "") const;
  /// The entry's bytes. kInvalidBundle when it is missing, larger than `max_bytes`, or
  /// cannot be decompressed (corrupt archive).
  Result<std::vector<std::uint8_t>> read(const std::string& name, std::uint64_t max_bytes = 1ull << 36) const;

 private:
  ZipArchive() = default;
  struct Handle;
  std::unique_ptr<Handle> handle_;
  std::string path_;
  std::vector<std::string> names_;
};

}  // namespace kiln::pt2

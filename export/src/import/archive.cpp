#include "import/archive.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zip.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include "kiln/runtime/file_io.h"

namespace kiln::pt2 {

struct ZipArchive::Handle {
  zip_t* zip = nullptr;
  ~Handle() {
    if (zip) zip_discard(zip);
  }
};

ZipArchive::~ZipArchive() = default;

namespace {

std::string zip_error_text(int code) {
  zip_error_t ze;
  zip_error_init_with_code(&ze, code);
  std::string why = zip_error_strerror(&ze);
  zip_error_fini(&ze);
  return why;
}

}  // namespace

Result<std::unique_ptr<ZipArchive>> ZipArchive::adopt(void* zip, const std::string& label, std::uint64_t source_bytes) {
  auto* z = static_cast<zip_t*>(zip);
  auto archive = std::unique_ptr<ZipArchive>(new ZipArchive());
  archive->handle_ = std::make_unique<Handle>();
  archive->handle_->zip = z;
  archive->label_ = label;
  archive->source_bytes_ = source_bytes;
  const zip_int64_t n = zip_get_num_entries(z, 0);
  archive->names_.reserve(static_cast<std::size_t>(std::max<zip_int64_t>(n, 0)));
  for (zip_int64_t i = 0; i < n; ++i) {
    const char* name = zip_get_name(z, static_cast<zip_uint64_t>(i), 0);
    if (name) archive->names_.emplace_back(name);
  }
  return archive;
}

Result<std::unique_ptr<ZipArchive>> ZipArchive::open(const std::string& path) {
  // Only a regular file, checked before a byte is read (a FIFO, a directory or /dev/zero is
  // refused at once, never waited on).
  auto file = open_regular_file(path, StatusCode::kInvalidBundle);
  if (!file.ok()) return file.status();
  const std::uint64_t size = file->size();
  const int fd = file->release();
  int error = 0;
  zip_t* z = zip_fdopen(fd, ZIP_RDONLY, &error);  // owns fd on success
  if (!z) {
    ::close(fd);
    return Status(StatusCode::kInvalidBundle, "'" + path + "' is not a readable .pt2 archive (zip: " + zip_error_text(error) + ")");
  }
  return adopt(z, path, size);
}

Result<std::unique_ptr<ZipArchive>> ZipArchive::from_bytes(std::span<const std::uint8_t> bytes, const std::string& label) {
  zip_error_t ze;
  zip_error_init(&ze);
  zip_source_t* src = zip_source_buffer_create(bytes.data(), bytes.size(), 0, &ze);
  if (!src) {
    zip_error_fini(&ze);
    return Status(StatusCode::kInternal, "'" + label + "': cannot create a zip source");
  }
  zip_t* z = zip_open_from_source(src, ZIP_RDONLY, &ze);
  if (!z) {
    const std::string why = zip_error_strerror(&ze);
    zip_error_fini(&ze);
    zip_source_free(src);
    return Status(StatusCode::kInvalidBundle, "'" + label + "' is not a readable zip (" + why + ")");
  }
  zip_error_fini(&ze);
  return adopt(z, label, bytes.size());
}

Result<std::unique_ptr<ZipArchive>> ZipArchive::open_nested(const std::string& name, std::uint64_t max_bytes) const {
  const std::string label = label_ + ":" + name;
  zip_stat_t st;
  zip_stat_init(&st);
  if (zip_stat(handle_->zip, name.c_str(), 0, &st) != 0 || !(st.valid & ZIP_STAT_SIZE) || !(st.valid & ZIP_STAT_INDEX)) {
    return Status(StatusCode::kInvalidBundle, "'" + label_ + "': archive member '" + name + "' is missing");
  }
  if ((st.valid & ZIP_STAT_COMP_METHOD) && st.comp_method == ZIP_CM_STORE && st.size <= source_bytes_) {
    // A window onto the outer file: libzip seeks within it, nothing is copied.
    if (zip_source_t* src = zip_source_zip(handle_->zip, handle_->zip, st.index, 0, 0, -1)) {
      zip_error_t ze;
      zip_error_init(&ze);
      zip_t* z = zip_open_from_source(src, ZIP_RDONLY, &ze);
      if (z) {
        zip_error_fini(&ze);
        return adopt(z, label, st.size);
      }
      const std::string why = zip_error_strerror(&ze);
      zip_error_fini(&ze);
      zip_source_free(src);
      return Status(StatusCode::kInvalidBundle, "'" + label + "' is not a readable zip (" + why + ")");
    }
  }
  KILN_ASSIGN_OR_RETURN(auto bytes, read(name, max_bytes));
  KILN_ASSIGN_OR_RETURN(auto nested, from_bytes(bytes, label));
  nested->owned_ = std::move(bytes);  // moving a vector keeps its buffer, which the zip source reads
  return nested;
}

std::optional<std::string> ZipArchive::find(const std::string& suffix, const std::string& infix) const {
  for (const std::string& n : names_) {
    if (n.size() >= suffix.size() && n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0 &&
        (infix.empty() || n.find(infix) != std::string::npos)) {
      return n;
    }
  }
  return std::nullopt;
}

std::optional<std::uint64_t> ZipArchive::size_of(const std::string& name) const {
  zip_stat_t st;
  zip_stat_init(&st);
  if (zip_stat(handle_->zip, name.c_str(), 0, &st) != 0 || !(st.valid & ZIP_STAT_SIZE)) return std::nullopt;
  return st.size;
}

Result<std::vector<std::uint8_t>> ZipArchive::read(const std::string& name, std::uint64_t max_bytes) const {
  zip_stat_t st;
  zip_stat_init(&st);
  if (zip_stat(handle_->zip, name.c_str(), 0, &st) != 0 || !(st.valid & ZIP_STAT_SIZE)) {
    return Status(StatusCode::kInvalidBundle, "'" + label_ + "': archive member '" + name + "' is missing");
  }
  if (st.size > max_bytes) {
    return Status(StatusCode::kInvalidBundle, "'" + label_ + "': archive member '" + name + "' is " + std::to_string(st.size) +
                                                  " bytes, more than the " + std::to_string(max_bytes) +
                                                  " bytes allowed for it (docs/IMPORT.md, Limits)");
  }
  const std::uint64_t compressed = (st.valid & ZIP_STAT_COMP_SIZE) ? std::min<std::uint64_t>(st.comp_size, source_bytes_) : source_bytes_;
  if (st.size > 4096 && st.size / MemberLimits::kMaxExpansion > compressed) {
    return Status(StatusCode::kInvalidBundle, "'" + label_ + "': archive member '" + name + "' declares " + std::to_string(st.size) +
                                                  " bytes, more than its " + std::to_string(compressed) + " compressed bytes (in a zip of " +
                                                  std::to_string(source_bytes_) + " bytes) can expand to");
  }
  zip_file_t* f = zip_fopen(handle_->zip, name.c_str(), 0);
  if (!f) return Status(StatusCode::kInvalidBundle, "'" + label_ + "': cannot open archive member '" + name + "'");
  std::vector<std::uint8_t> out;
  out.resize(static_cast<std::size_t>(st.size));
  std::uint64_t got = 0;
  while (got < st.size) {
    const zip_int64_t r = zip_fread(f, out.data() + got, st.size - got);
    if (r <= 0) break;
    got += static_cast<std::uint64_t>(r);
  }
  const bool closed = zip_fclose(f) == 0;
  if (got != st.size || !closed) {
    return Status(StatusCode::kInvalidBundle, "'" + label_ + "': archive member '" + name + "' is corrupt (read " +
                                                  std::to_string(got) + " of " + std::to_string(st.size) + " bytes)");
  }
  return out;
}

}  // namespace kiln::pt2

#include "import/archive.h"

#include <zip.h>

#include <fstream>

namespace kiln::pt2 {

struct ZipArchive::Handle {
  zip_t* zip = nullptr;
  ~Handle() {
    if (zip) zip_discard(zip);
  }
};

ZipArchive::~ZipArchive() = default;

Result<std::unique_ptr<ZipArchive>> ZipArchive::open(const std::string& path) {
  {
    std::ifstream probe(path, std::ios::binary);
    if (!probe) return Status(StatusCode::kIoError, "cannot open '" + path + "'");
  }
  int error = 0;
  zip_t* z = zip_open(path.c_str(), ZIP_RDONLY, &error);
  if (!z) {
    zip_error_t ze;
    zip_error_init_with_code(&ze, error);
    std::string why = zip_error_strerror(&ze);
    zip_error_fini(&ze);
    return Status(StatusCode::kInvalidBundle, "'" + path + "' is not a readable .pt2 archive (zip: " + why + ")");
  }
  auto archive = std::unique_ptr<ZipArchive>(new ZipArchive());
  archive->handle_ = std::make_unique<Handle>();
  archive->handle_->zip = z;
  archive->path_ = path;
  const zip_int64_t n = zip_get_num_entries(z, 0);
  for (zip_int64_t i = 0; i < n; ++i) {
    const char* name = zip_get_name(z, static_cast<zip_uint64_t>(i), 0);
    if (name) archive->names_.emplace_back(name);
  }
  return archive;
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

Result<std::vector<std::uint8_t>> ZipArchive::read(const std::string& name, std::uint64_t max_bytes) const {
  zip_stat_t st;
  zip_stat_init(&st);
  if (zip_stat(handle_->zip, name.c_str(), 0, &st) != 0 || !(st.valid & ZIP_STAT_SIZE)) {
    return Status(StatusCode::kInvalidBundle, "'" + path_ + "': archive entry '" + name + "' is missing");
  }
  if (st.size > max_bytes) {
    return Status(StatusCode::kInvalidBundle, "'" + path_ + "': archive entry '" + name + "' is " + std::to_string(st.size) +
                                                  " bytes, more than the " + std::to_string(max_bytes) + " allowed");
  }
  zip_file_t* f = zip_fopen(handle_->zip, name.c_str(), 0);
  if (!f) return Status(StatusCode::kInvalidBundle, "'" + path_ + "': cannot open archive entry '" + name + "'");
  std::vector<std::uint8_t> out(static_cast<std::size_t>(st.size));
  std::uint64_t got = 0;
  while (got < st.size) {
    const zip_int64_t r = zip_fread(f, out.data() + got, st.size - got);
    if (r <= 0) break;
    got += static_cast<std::uint64_t>(r);
  }
  const bool closed = zip_fclose(f) == 0;
  const bool ok = got == st.size && closed;
  if (!ok) return Status(StatusCode::kInvalidBundle, "'" + path_ + "': archive entry '" + name + "' is corrupt (read " +
                                                         std::to_string(got) + " of " + std::to_string(st.size) + " bytes)");
  return out;
}

}  // namespace kiln::pt2

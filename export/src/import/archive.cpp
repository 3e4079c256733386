// The zip reader of the `.pt2` importer (archive.h). Kiln's own, on zlib: libzip linked
// OpenSSL, bzip2 and itself into every `kiln` process (1.8 MiB of resident memory in a
// `kiln run` that never opens an archive), for encryption and methods no archive uses.
//
// The format (APPNOTE.TXT): the end-of-central-directory record (EOCD) at the end of the
// file, after an optional comment of at most 65,535 bytes; a ZIP64 locator just before it
// when a count, size or offset does not fit its 16- or 32-bit field; the central directory
// (one header per member: method, CRC-32, sizes, name, the offset of the member's local
// header); each member's data after its local header. Everything read is checked against
// the zip's size before it is used; every size is checked before anything is allocated.
#include "import/archive.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <unordered_map>

#include "kiln/runtime/file_io.h"

namespace kiln::pt2 {

namespace {

constexpr std::uint32_t kLocalSig = 0x04034b50, kCentralSig = 0x02014b50, kEndSig = 0x06054b50,
                        kZip64EndSig = 0x06064b50, kZip64LocatorSig = 0x07064b50;
constexpr std::uint64_t kEndBytes = 22, kZip64LocatorBytes = 20, kZip64EndBytes = 56, kCentralBytes = 46,
                        kLocalBytes = 30, kMaxComment = 65535;
/// The central directory is read whole (at most this), and each member costs an entry and
/// its name (at most this many): a hostile directory costs ~250 MB at worst. A PT2 archive
/// holds a member per weight (a few thousand for a large language model).
constexpr std::uint64_t kMaxCentralDirectory = 64ull << 20, kMaxMembers = 1ull << 20;
constexpr std::uint16_t kMethodStore = 0, kMethodDeflate = 8;

std::uint16_t u16(const std::uint8_t* p) { return static_cast<std::uint16_t>(p[0] | (p[1] << 8)); }
std::uint32_t u32(const std::uint8_t* p) {
  return static_cast<std::uint32_t>(p[0]) | (static_cast<std::uint32_t>(p[1]) << 8) |
         (static_cast<std::uint32_t>(p[2]) << 16) | (static_cast<std::uint32_t>(p[3]) << 24);
}
std::uint64_t u64(const std::uint8_t* p) { return u32(p) | (static_cast<std::uint64_t>(u32(p + 4)) << 32); }

std::string method_name(std::uint16_t m) {
  switch (m) {
    case 12: return "12 (bzip2)";
    case 14: return "14 (LZMA)";
    case 93: return "93 (zstd)";
    case 95: return "95 (xz)";
    case 99: return "99 (AES encryption)";
    default: return std::to_string(m);
  }
}

}  // namespace

struct ZipArchive::Handle {
  struct Entry {
    std::uint64_t size = 0, compressed = 0, local_header = 0;
    std::uint32_t crc = 0;
    std::uint16_t method = 0, flags = 0;
  };
  // The bytes: a file (pread at base + offset) or memory (bytes + offset).
  int fd = -1;
  bool owns_fd = false;
  const std::uint8_t* bytes = nullptr;
  std::uint64_t base = 0;  // where this zip starts in the file (a nested zip: its member's data)
  std::uint64_t size = 0;
  std::uint64_t data_end = 0;  // where the central directory starts: members' data ends there
  std::vector<Entry> entries;  // in central-directory order, as names_
  std::unordered_map<std::string, std::size_t> index;

  ~Handle() {
    if (owns_fd) ::close(fd);
  }

  /// Reads [offset, offset + n) of the zip; false when that is past its end or the file
  /// gives fewer bytes (it shrank under us) or an error.
  bool read_at(std::uint64_t offset, void* dst, std::uint64_t n) const {
    if (offset > size || n > size - offset) return false;
    if (bytes != nullptr) {
      if (n > 0) std::memcpy(dst, bytes + offset, static_cast<std::size_t>(n));
      return true;
    }
    auto* out = static_cast<std::uint8_t*>(dst);
    while (n > 0) {
      const std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(n, 1u << 30));
      const ssize_t got = ::pread(fd, out, want, static_cast<off_t>(base + offset));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) return false;
      out += got, offset += static_cast<std::uint64_t>(got), n -= static_cast<std::uint64_t>(got);
    }
    return true;
  }

  /// The offset of member `e`'s data, after its local header; an error text when the
  /// header is not there or the data would run past the member area's end.
  Result<std::uint64_t> data_offset(const Entry& e) const {
    std::uint8_t h[kLocalBytes];
    if (!read_at(e.local_header, h, kLocalBytes) || u32(h) != kLocalSig) {
      return Status(StatusCode::kInvalidBundle, "its local header at offset " + std::to_string(e.local_header) + " is missing");
    }
    const std::uint64_t at = e.local_header + kLocalBytes + u16(h + 26) + u16(h + 28);
    if (at > data_end || e.compressed > data_end - at) {
      return Status(StatusCode::kInvalidBundle, "its " + std::to_string(e.compressed) + " bytes at offset " +
                                                    std::to_string(at) + " run past the member data's end at " +
                                                    std::to_string(data_end));
    }
    return at;
  }
};

ZipArchive::~ZipArchive() = default;

Result<std::unique_ptr<ZipArchive>> ZipArchive::adopt(std::unique_ptr<Handle> h, const std::string& label) {
  const auto bad = [](const std::string& why) { return Status(StatusCode::kInvalidBundle, why); };
  const std::uint64_t size = h->size;
  if (size < kEndBytes) {
    return bad("it is " + std::to_string(size) + " bytes, shorter than a zip's 22-byte end record");
  }
  // The end record: the last one whose comment fits in the file.
  const std::uint64_t tail_bytes = std::min(size, kEndBytes + kMaxComment);
  std::vector<std::uint8_t> tail(static_cast<std::size_t>(tail_bytes));
  if (!h->read_at(size - tail_bytes, tail.data(), tail_bytes)) return bad("its last bytes cannot be read");
  std::int64_t found = -1;
  for (std::int64_t i = static_cast<std::int64_t>(tail_bytes - kEndBytes); i >= 0; --i) {
    const std::uint8_t* p = tail.data() + i;
    if (u32(p) == kEndSig && static_cast<std::uint64_t>(i) + kEndBytes + u16(p + 20) <= tail_bytes) {
      found = i;
      break;
    }
  }
  if (found < 0) return bad("no end-of-central-directory record: not a zip, or a truncated one");
  const std::uint64_t end_at = size - tail_bytes + static_cast<std::uint64_t>(found);
  const std::uint8_t* end = tail.data() + found;
  std::uint64_t disk = u16(end + 4), cd_disk = u16(end + 6), on_disk = u16(end + 8), count = u16(end + 10),
                cd_bytes = u32(end + 12), cd_at = u32(end + 16);
  std::uint64_t records_at = end_at;  // the first end record (ZIP64's, or the plain one)
  // ZIP64: the locator right before the end record points to the ZIP64 end record.
  std::uint8_t loc[kZip64LocatorBytes];
  if (end_at >= kZip64LocatorBytes && h->read_at(end_at - kZip64LocatorBytes, loc, kZip64LocatorBytes) &&
      u32(loc) == kZip64LocatorSig) {
    const std::uint64_t z64_at = u64(loc + 8), room = end_at - kZip64LocatorBytes;
    std::uint8_t z[kZip64EndBytes];
    if (z64_at > room || kZip64EndBytes > room - z64_at || !h->read_at(z64_at, z, kZip64EndBytes) ||
        u32(z) != kZip64EndSig) {
      return bad("its ZIP64 locator points to offset " + std::to_string(z64_at) + ", where no ZIP64 end record is");
    }
    disk = u32(z + 16), cd_disk = u32(z + 20), on_disk = u64(z + 24), count = u64(z + 32), cd_bytes = u64(z + 40),
    cd_at = u64(z + 48);
    records_at = z64_at;
  } else if (count == 0xFFFF || cd_bytes == 0xFFFFFFFF || cd_at == 0xFFFFFFFF) {
    return bad("its end record asks for ZIP64 values, but no ZIP64 end record precedes it");
  }
  if (disk != 0 || cd_disk != 0 || on_disk != count) {
    return bad("it is one part of a split (multi-disk) zip, which Kiln does not read");
  }
  if (cd_at > records_at || cd_bytes > records_at - cd_at) {
    return bad("its central directory (" + std::to_string(cd_bytes) + " bytes at offset " + std::to_string(cd_at) +
               ") runs past its end record at " + std::to_string(records_at));
  }
  if (cd_bytes > kMaxCentralDirectory) {
    return bad("its central directory is " + std::to_string(cd_bytes) + " bytes, more than the " +
               std::to_string(kMaxCentralDirectory) + " bytes allowed");
  }
  if (count > kMaxMembers) {
    return bad("it declares " + std::to_string(count) + " members, more than the " + std::to_string(kMaxMembers) +
               " allowed");
  }
  if (count > cd_bytes / kCentralBytes) {
    return bad("it declares " + std::to_string(count) + " members, more than its " + std::to_string(cd_bytes) +
               "-byte central directory can hold");
  }
  h->data_end = cd_at;
  std::vector<std::uint8_t> cd(static_cast<std::size_t>(cd_bytes));
  if (!h->read_at(cd_at, cd.data(), cd_bytes)) return bad("its central directory cannot be read");

  auto archive = std::unique_ptr<ZipArchive>(new ZipArchive());
  archive->label_ = label;
  archive->names_.reserve(static_cast<std::size_t>(count));
  h->entries.reserve(static_cast<std::size_t>(count));
  std::uint64_t at = 0;
  for (std::uint64_t i = 0; i < count; ++i) {
    const std::string which = "central directory entry " + std::to_string(i);
    if (cd_bytes - at < kCentralBytes || u32(cd.data() + at) != kCentralSig) {
      return bad(which + " (offset " + std::to_string(cd_at + at) + ") is not a central directory header");
    }
    const std::uint8_t* p = cd.data() + at;
    const std::uint64_t name_len = u16(p + 28), extra_len = u16(p + 30), comment_len = u16(p + 32);
    if (kCentralBytes + name_len + extra_len + comment_len > cd_bytes - at) {
      return bad(which + " runs past the central directory's end");
    }
    Handle::Entry e;
    e.flags = u16(p + 8);
    e.method = u16(p + 10);
    e.crc = u32(p + 16);
    e.compressed = u32(p + 20);
    e.size = u32(p + 24);
    std::uint64_t member_disk = u16(p + 34);
    e.local_header = u32(p + 42);
    std::string name(reinterpret_cast<const char*>(p + kCentralBytes), static_cast<std::size_t>(name_len));
    // ZIP64 extra field (id 1): the 64-bit values of the fields that hold all ones, in order.
    const bool wide_size = e.size == 0xFFFFFFFF, wide_comp = e.compressed == 0xFFFFFFFF,
               wide_offset = e.local_header == 0xFFFFFFFF, wide_disk = member_disk == 0xFFFF;
    if (wide_size || wide_comp || wide_offset || wide_disk) {
      const std::uint8_t* x = p + kCentralBytes + name_len;
      const std::uint8_t* const x_end = x + extra_len;
      bool done = false;
      while (!done && x_end - x >= 4) {
        const std::uint16_t id = u16(x), len = u16(x + 2);
        if (static_cast<std::uint64_t>(x_end - x - 4) < len) break;
        if (id == 1) {
          const std::uint8_t* f = x + 4;
          const std::uint8_t* const f_end = f + len;
          const auto take = [&](std::uint64_t& v, std::uint64_t bytes) {
            if (static_cast<std::uint64_t>(f_end - f) < bytes) return false;
            v = bytes == 8 ? u64(f) : u32(f);
            f += bytes;
            return true;
          };
          if ((wide_size && !take(e.size, 8)) || (wide_comp && !take(e.compressed, 8)) ||
              (wide_offset && !take(e.local_header, 8)) || (wide_disk && !take(member_disk, 4))) {
            return bad(which + " ('" + name + "'): its ZIP64 extra field is too short");
          }
          done = true;
        }
        x += 4 + len;
      }
      if (!done) return bad(which + " ('" + name + "') asks for ZIP64 values but has no ZIP64 extra field");
    }
    if (member_disk != 0) return bad(which + " ('" + name + "') is on another disk of a split zip");
    if (e.local_header > h->data_end || kLocalBytes > h->data_end - e.local_header) {
      return bad(which + " ('" + name + "'): its local header offset " + std::to_string(e.local_header) +
                 " is past the member data's end at " + std::to_string(h->data_end));
    }
    if (!h->index.emplace(name, h->entries.size()).second) {
      return bad("it holds two members named '" + name + "'");
    }
    h->entries.push_back(e);
    archive->names_.push_back(std::move(name));
    at += kCentralBytes + name_len + extra_len + comment_len;
  }
  archive->handle_ = std::move(h);
  return archive;
}

Result<std::unique_ptr<ZipArchive>> ZipArchive::open(const std::string& path) {
  // Only a regular file, checked before a byte is read (a FIFO, a directory or /dev/zero is
  // refused at once, never waited on).
  auto file = open_regular_file(path, StatusCode::kInvalidBundle);
  if (!file.ok()) return file.status();
  auto h = std::make_unique<Handle>();
  h->size = file->size();
  h->fd = file->release();
  h->owns_fd = true;
  auto archive = adopt(std::move(h), path);
  if (!archive.ok()) {
    return Status(StatusCode::kInvalidBundle,
                  "'" + path + "' is not a readable .pt2 archive (zip: " + archive.status().message() + ")");
  }
  return archive;
}

Result<std::unique_ptr<ZipArchive>> ZipArchive::from_bytes(std::span<const std::uint8_t> bytes, const std::string& label) {
  auto h = std::make_unique<Handle>();
  h->bytes = bytes.data();
  h->size = bytes.size();
  auto archive = adopt(std::move(h), label);
  if (!archive.ok()) {
    return Status(StatusCode::kInvalidBundle, "'" + label + "' is not a readable zip (" + archive.status().message() + ")");
  }
  return archive;
}

Result<std::unique_ptr<ZipArchive>> ZipArchive::open_nested(const std::string& name, std::uint64_t max_bytes) const {
  const std::string label = label_ + ":" + name;
  const auto it = handle_->index.find(name);
  if (it == handle_->index.end()) {
    return Status(StatusCode::kInvalidBundle, "'" + label_ + "': archive member '" + name + "' is missing");
  }
  const Handle::Entry& e = handle_->entries[it->second];
  if (e.method == kMethodStore && (e.flags & 1) == 0 && e.compressed == e.size) {
    // A window onto the outer zip's bytes: nothing is copied.
    auto at = handle_->data_offset(e);
    if (!at.ok()) {
      return Status(StatusCode::kInvalidBundle, "'" + label_ + "': archive member '" + name + "': " + at.status().message());
    }
    auto h = std::make_unique<Handle>();
    h->fd = handle_->fd;
    h->bytes = handle_->bytes != nullptr ? handle_->bytes + *at : nullptr;
    h->base = handle_->base + *at;
    h->size = e.size;
    auto nested = adopt(std::move(h), label);
    if (!nested.ok()) {
      return Status(StatusCode::kInvalidBundle, "'" + label + "' is not a readable zip (" + nested.status().message() + ")");
    }
    return nested;
  }
  KILN_ASSIGN_OR_RETURN(auto bytes, read(name, max_bytes));
  KILN_ASSIGN_OR_RETURN(auto nested, from_bytes(bytes, label));
  nested->owned_ = std::move(bytes);  // moving a vector keeps its buffer, which the nested zip reads
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
  const auto it = handle_->index.find(name);
  if (it == handle_->index.end()) return std::nullopt;
  return handle_->entries[it->second].size;
}

Result<std::vector<std::uint8_t>> ZipArchive::read(const std::string& name, std::uint64_t max_bytes) const {
  const std::string member = "'" + label_ + "': archive member '" + name + "'";
  const auto bad = [&](const std::string& why) { return Status(StatusCode::kInvalidBundle, member + " " + why); };
  const auto it = handle_->index.find(name);
  if (it == handle_->index.end()) return bad("is missing");
  const Handle::Entry& e = handle_->entries[it->second];
  if (e.size > max_bytes) {
    return bad("is " + std::to_string(e.size) + " bytes, more than the " + std::to_string(max_bytes) +
               " bytes allowed for it (docs/IMPORT.md, Limits)");
  }
  // No member expands past kMaxExpansion times its compressed size, nor the zip's own size.
  const std::uint64_t zip_bytes = handle_->size, compressed = std::min(e.compressed, zip_bytes);
  if (e.size > 4096 && e.size / MemberLimits::kMaxExpansion > compressed) {
    return bad("declares " + std::to_string(e.size) + " bytes, more than its " + std::to_string(compressed) +
               " compressed bytes (in a zip of " + std::to_string(zip_bytes) + " bytes) can expand to");
  }
  if ((e.flags & 1) != 0) return bad("is encrypted, which Kiln does not read");
  if (e.method != kMethodStore && e.method != kMethodDeflate) {
    return bad("uses compression method " + method_name(e.method) +
               ", which Kiln does not read (store it, or deflate it)");
  }
  if (e.method == kMethodStore && e.compressed != e.size) {
    return bad("is corrupt: stored (uncompressed), but " + std::to_string(e.compressed) + " bytes hold " +
               std::to_string(e.size));
  }
  auto at = handle_->data_offset(e);
  if (!at.ok()) return bad("is corrupt: " + at.status().message());
  std::vector<std::uint8_t> out;
  if (e.method == kMethodStore) {
    out.resize(static_cast<std::size_t>(e.size));
    if (!handle_->read_at(*at, out.data(), e.size)) return bad("is corrupt: its bytes cannot be read");
  } else {
    z_stream z{};
    if (inflateInit2(&z, -MAX_WBITS) != Z_OK) return Status(StatusCode::kUnavailable, member + ": zlib cannot start");
    struct End {
      z_stream* z;
      ~End() { inflateEnd(z); }
    } end{&z};
    const bool in_memory = handle_->bytes != nullptr;
    std::vector<std::uint8_t> chunk;
    if (!in_memory) chunk.resize(static_cast<std::size_t>(std::min<std::uint64_t>(e.compressed, 1u << 20)));
    // Past the declared size zlib writes into `sink`: a byte there is a member that inflates
    // to more than it declares (the end of a stream needs no output space).
    std::uint8_t sink = 0;
    std::uint64_t in_given = 0, out_given = 0;
    int rc = Z_OK;
    while (rc != Z_STREAM_END) {
      if (z.avail_in == 0) {
        if (in_given == e.compressed) return bad("is corrupt: its deflate stream ends early");
        const std::uint64_t n = std::min<std::uint64_t>(e.compressed - in_given, in_memory ? UINT_MAX : chunk.size());
        if (in_memory) {
          z.next_in = const_cast<Bytef*>(handle_->bytes + *at + in_given);
        } else {
          if (!handle_->read_at(*at + in_given, chunk.data(), n)) return bad("is corrupt: its bytes cannot be read");
          z.next_in = chunk.data();
        }
        z.avail_in = static_cast<uInt>(n);
        in_given += n;
      }
      if (z.avail_out == 0) {
        if (z.next_out == &sink + 1) {
          return bad("is corrupt: it inflates to more than its declared " + std::to_string(e.size) + " bytes");
        }
        if (out_given == e.size) {
          z.next_out = &sink;
          z.avail_out = 1;
        } else {
          // The output grows as it inflates (doubling, from 1 MiB), so a member that declares
          // gigabytes and inflates to little costs what it inflates to. zlib keeps its own
          // window: the buffer may move.
          if (out_given == out.size()) {
            const std::uint64_t grown = std::max<std::uint64_t>(2 * out.size(), 1u << 20);
            out.resize(static_cast<std::size_t>(std::min<std::uint64_t>(e.size, grown)));
          }
          const std::uint64_t n = std::min<std::uint64_t>(out.size() - out_given, UINT_MAX);
          z.next_out = out.data() + out_given;
          z.avail_out = static_cast<uInt>(n);
          out_given += n;
        }
      }
      rc = inflate(&z, Z_NO_FLUSH);
      if (rc != Z_OK && rc != Z_STREAM_END && !(rc == Z_BUF_ERROR && (z.avail_in == 0 || z.avail_out == 0))) {
        return bad("is corrupt: " + std::string(z.msg != nullptr ? z.msg : "its deflate stream is invalid"));
      }
    }
    if (z.total_out != e.size) {
      return bad("is corrupt: it inflates to " + std::to_string(z.total_out) + " bytes, not its declared " +
                 std::to_string(e.size));
    }
  }
  std::uint32_t crc = 0;
  for (std::uint64_t i = 0; i < e.size;) {
    const std::uint64_t n = std::min<std::uint64_t>(e.size - i, UINT_MAX);
    crc = static_cast<std::uint32_t>(crc32(crc, out.data() + i, static_cast<uInt>(n)));
    i += n;
  }
  if (crc != e.crc) return bad("is corrupt: its CRC-32 does not match its bytes");
  return out;
}

}  // namespace kiln::pt2

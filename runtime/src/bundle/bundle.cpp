#include "kiln/runtime/bundle.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>

#include "bundle/verify.h"
#include "kiln/format/kiln_generated.h"
#include "kiln/runtime/file_io.h"

namespace kiln {
namespace {

Status invalid(std::string message) { return Status(StatusCode::kInvalidBundle, std::move(message)); }

// a + b <= limit without overflow.
bool fits(std::uint64_t a, std::uint64_t b, std::uint64_t limit) {
  return a <= limit && b <= limit - a;
}

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

}  // namespace

// Owns the bytes of the file: a read-only mapping, or an aligned heap copy.
class Bundle::Storage {
 public:
  ~Storage() {
    if (map_ != nullptr) munmap(map_, map_size_);
  }
  static Result<std::unique_ptr<Storage>> map_file(const std::string& path, bool use_mmap);
  static Result<std::unique_ptr<Storage>> copy_of(std::span<const std::uint8_t> bytes);
  std::span<const std::uint8_t> bytes() const { return bytes_; }
  std::size_t release_pages(std::span<const std::uint8_t> bytes) const;

 private:
  void* map_ = nullptr;
  std::size_t map_size_ = 0;
  std::unique_ptr<std::uint8_t, FreeDeleter> heap_;
  std::span<const std::uint8_t> bytes_;
};

Result<std::unique_ptr<Bundle::Storage>> Bundle::Storage::copy_of(std::span<const std::uint8_t> bytes) {
  auto s = std::unique_ptr<Storage>(new (std::nothrow) Storage());
  if (!s) return invalid("out of memory");
  const std::size_t n = bytes.empty() ? 64 : format::align_up(bytes.size(), 64);
  s->heap_.reset(static_cast<std::uint8_t*>(std::aligned_alloc(64, n)));
  if (!s->heap_) return invalid("cannot allocate " + std::to_string(bytes.size()) + " bytes");
  if (!bytes.empty()) std::memcpy(s->heap_.get(), bytes.data(), bytes.size());
  s->bytes_ = {s->heap_.get(), bytes.size()};
  return s;
}

Result<std::unique_ptr<Bundle::Storage>> Bundle::Storage::map_file(const std::string& path, bool use_mmap) {
  auto file = open_regular_file(path, StatusCode::kInvalidBundle);
  if (!file.ok()) return file.status();
  const std::uint64_t size = file->size();
  if (size > std::numeric_limits<std::size_t>::max() / 2) return invalid("'" + path + "' is too large to open");
  if (size == 0 || !use_mmap) {
    auto bytes = read_regular_file(path, size, StatusCode::kInvalidBundle);
    if (!bytes.ok()) return bytes.status();
    return copy_of(*bytes);
  }
  void* map = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, file->fd(), 0);
  if (map == MAP_FAILED) return invalid("cannot map '" + path + "': " + std::strerror(errno));
  auto s = std::unique_ptr<Storage>(new (std::nothrow) Storage());
  if (!s) {
    munmap(map, size);
    return invalid("out of memory");
  }
  s->map_ = map;
  s->map_size_ = size;
  s->bytes_ = {static_cast<const std::uint8_t*>(map), size};
  return s;
}

std::size_t Bundle::Storage::release_pages(std::span<const std::uint8_t> bytes) const {
  if (map_ == nullptr || bytes.empty()) return 0;
  const auto base = reinterpret_cast<std::uintptr_t>(map_);
  const auto first = reinterpret_cast<std::uintptr_t>(bytes.data());
  if (first < base || bytes.size() > map_size_ - (first - base)) return 0;  // not in the mapping
  const auto page = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));
  const std::uintptr_t begin = (first + page - 1) / page * page;  // whole pages only: the
  const std::uintptr_t end = (first + bytes.size()) / page * page;  // neighbours stay resident
  if (end <= begin) return 0;
  // A read-only private mapping has no dirty pages: dropped pages are re-read from the file.
  if (madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED) != 0) return 0;
  return end - begin;
}

std::size_t Bundle::release_pages(std::span<const std::uint8_t> bytes) const { return storage_ ? storage_->release_pages(bytes) : 0; }

Bundle::~Bundle() = default;
void Bundle::FreeDeleter::operator()(void* p) const { std::free(p); }

Result<std::unique_ptr<Bundle>> Bundle::open(const std::string& path, const LoadOptions& options) {
  auto storage = Storage::map_file(path, options.use_mmap);
  if (!storage.ok()) return storage.status();
  auto bundle = std::unique_ptr<Bundle>(new (std::nothrow) Bundle());
  if (!bundle) return invalid("out of memory");
  bundle->storage_ = std::move(storage).value();
  bundle->bytes_ = bundle->storage_->bytes();
  return finish_open(std::move(bundle), options);
}

Result<std::unique_ptr<Bundle>> Bundle::from_bytes(std::span<const std::uint8_t> bytes,
                                                   const LoadOptions& options) {
  auto storage = Storage::copy_of(bytes);
  if (!storage.ok()) return storage.status();
  auto bundle = std::unique_ptr<Bundle>(new (std::nothrow) Bundle());
  if (!bundle) return invalid("out of memory");
  bundle->storage_ = std::move(storage).value();
  bundle->bytes_ = bundle->storage_->bytes();
  return finish_open(std::move(bundle), options);
}

Result<std::unique_ptr<Bundle>> Bundle::finish_open(std::unique_ptr<Bundle> bundle,
                                                    const LoadOptions& options) {
  KILN_RETURN_IF_ERROR(bundle->check_frame());
  KILN_RETURN_IF_ERROR(bundle->load_segments(options));
  std::vector<format::SegmentEntry> entries;
  entries.reserve(bundle->segments_.size());
  for (const Segment& s : bundle->segments_) entries.push_back(s.entry);
  KILN_RETURN_IF_ERROR(verify_program(*bundle->program_, entries, bundle->expr_info_));
  return bundle;
}

Status Bundle::check_frame() {
  const std::uint64_t size = bytes_.size();
  if (size < format::kHeaderSize) {
    return invalid("file is " + std::to_string(size) + " bytes, smaller than the " +
                   std::to_string(format::kHeaderSize) + "-byte header (truncated?)");
  }
  switch (format::decode_header(bytes_, header_)) {
    case format::HeaderStatus::kOk: break;
    case format::HeaderStatus::kTooShort: return invalid("truncated header");
    case format::HeaderStatus::kBadMagic: return invalid("not a Kiln bundle (bad magic)");
    case format::HeaderStatus::kUnsupportedMajor:
      if (header_.format_major > format::kFormatMajor) {
        return invalid("bundle format " + std::to_string(header_.format_major) + "." +
                       std::to_string(header_.format_minor) + " is newer than this build reads (" +
                       std::to_string(format::kFormatMajor) + ".x): use a Kiln release that reads format " +
                       std::to_string(header_.format_major));
      }
      return invalid("bundle format " + std::to_string(header_.format_major) + "." +
                     std::to_string(header_.format_minor) + " is no longer supported (this build reads " +
                     std::to_string(format::kFormatMajor) + ".x)");
    case format::HeaderStatus::kBadHeaderSize:
      return invalid("header size " + std::to_string(header_.header_size) + " != " +
                     std::to_string(format::kHeaderSize));
    case format::HeaderStatus::kBadChecksum: return invalid("header checksum mismatch");
  }
  const auto& h = header_;
  if (h.file_size != size) {
    return invalid("header says the file is " + std::to_string(h.file_size) + " bytes but it is " +
                   std::to_string(size) + " (truncated or padded?)");
  }
  if (h.flatbuffer_offset < format::kHeaderSize || h.flatbuffer_offset % 8 != 0 ||
      h.flatbuffer_size < 8 || !fits(h.flatbuffer_offset, h.flatbuffer_size, size) ||
      h.flatbuffer_size >= FLATBUFFERS_MAX_BUFFER_SIZE) {  // the Verifier asserts on larger buffers
    return invalid("flatbuffer [" + std::to_string(h.flatbuffer_offset) + ", +" +
                   std::to_string(h.flatbuffer_size) + ") is out of bounds or misaligned");
  }
  if (h.segment_count > format::kMaxSegments) {
    return invalid("segment count " + std::to_string(h.segment_count) + " exceeds the limit " +
                   std::to_string(format::kMaxSegments));
  }
  const std::uint64_t table_size = std::uint64_t{h.segment_count} * format::kSegmentEntrySize;
  if (h.segment_table_offset % 8 != 0 ||
      h.segment_table_offset < h.flatbuffer_offset + h.flatbuffer_size ||
      !fits(h.segment_table_offset, table_size, size)) {
    return invalid("segment table [" + std::to_string(h.segment_table_offset) + ", +" +
                   std::to_string(table_size) + ") is out of bounds, misaligned or overlaps the flatbuffer");
  }
  const std::span<const std::uint8_t> fb_bytes = bytes_.subspan(h.flatbuffer_offset, h.flatbuffer_size);
  const std::span<const std::uint8_t> table_bytes = bytes_.subspan(h.segment_table_offset, table_size);
  const std::span<const std::uint8_t> parts[] = {fb_bytes, table_bytes};
  if (format::checksum(parts) != h.metadata_checksum) {
    return invalid("metadata checksum mismatch (flatbuffer or segment table corrupt)");
  }
  if (!flatbuffers::BufferHasIdentifier(fb_bytes.data(), fb::ProgramIdentifier())) {
    return invalid("flatbuffer: missing file identifier 'KILN'");
  }
  flatbuffers::Verifier verifier(fb_bytes.data(), fb_bytes.size(), /*max_depth=*/64,
                                 /*max_tables=*/8'000'000);
  if (!fb::VerifyProgramBuffer(verifier)) return invalid("flatbuffer: verification failed (corrupt program)");
  program_ = fb::GetProgram(fb_bytes.data());
  return Status::Ok();
}

Status Bundle::load_segments(const LoadOptions& options) {
  const auto& h = header_;
  std::uint64_t declared = 0;  // bytes all zstd segments decompress to
  const std::uint64_t size = bytes_.size();
  std::uint64_t min_offset = h.segment_table_offset + std::uint64_t{h.segment_count} * format::kSegmentEntrySize;
  segments_.resize(h.segment_count);
  for (std::uint32_t i = 0; i < h.segment_count; ++i) {
    Segment& seg = segments_[i];
    seg.entry = format::decode_segment_entry(bytes_.data() + h.segment_table_offset + i * format::kSegmentEntrySize);
    const auto& e = seg.entry;
    const std::string where = "segment " + std::to_string(i);
    if (e.offset % format::kSegmentAlignment != 0) return invalid(where + ": offset " + std::to_string(e.offset) + " is not 4096-aligned");
    if (e.offset < min_offset || !fits(e.offset, e.stored_size, size)) {
      return invalid(where + ": [" + std::to_string(e.offset) + ", +" + std::to_string(e.stored_size) +
                     ") is out of bounds or overlaps earlier data");
    }
    min_offset = e.offset + e.stored_size;
    const auto stored = bytes_.subspan(e.offset, e.stored_size);
    if (e.compression == format::Compression::kNone) {
      if (e.size != e.stored_size) return invalid(where + ": raw segment size " + std::to_string(e.size) + " != stored size " + std::to_string(e.stored_size));
      if (options.verify_segment_checksums) {
        if (format::checksum(stored) != e.checksum) return invalid(where + ": checksum mismatch");
        // Checking read every page: drop them from the resident set again (a mapping; they
        // stay in the page cache), so that a load does not hold every weight twice while
        // its kernels prepare their copies. A later read faults them back in.
        release_pages(stored);
      }
      seg.data = stored;
    } else if (e.compression == format::Compression::kZstd) {
      if (!fits(declared, e.size, options.max_decompressed_bytes)) {
        return invalid(where + ": decompresses to " + std::to_string(e.size) + " bytes, over the limit of " +
                       std::to_string(options.max_decompressed_bytes) + " bytes for all zstd segments together" +
                       (declared ? " (" + std::to_string(declared) + " already)" : std::string()));
      }
      declared += e.size;
      if (!options.decompress_segments) continue;
      if (format::checksum(stored) != e.checksum) return invalid(where + ": checksum mismatch");
      KILN_RETURN_IF_ERROR(decompress(seg, where));
      release_pages(stored);  // never read again
    } else {
      return invalid(where + ": unknown compression " + std::to_string(static_cast<std::uint32_t>(e.compression)));
    }
  }
  return Status::Ok();
}

Status Bundle::decompress(Segment& seg, const std::string& where) {
  const auto& e = seg.entry;
  const auto stored = bytes_.subspan(e.offset, e.stored_size);
  const unsigned long long content = ZSTD_getFrameContentSize(stored.data(), stored.size());
  if (content == ZSTD_CONTENTSIZE_ERROR || content == ZSTD_CONTENTSIZE_UNKNOWN || content != e.size) {
    return invalid(where + ": zstd frame does not declare the segment size " + std::to_string(e.size));
  }
  if (e.size == 0) return Status::Ok();
  seg.owned.reset(static_cast<std::uint8_t*>(std::aligned_alloc(64, format::align_up(e.size, 64))));
  if (!seg.owned) return invalid(where + ": cannot allocate " + std::to_string(e.size) + " bytes to decompress");
  const std::size_t got = ZSTD_decompress(seg.owned.get(), e.size, stored.data(), stored.size());
  if (ZSTD_isError(got) || got != e.size) {
    return invalid(where + ": zstd decompression failed" +
                   (ZSTD_isError(got) ? std::string(" (") + ZSTD_getErrorName(got) + ")" : std::string()));
  }
  seg.data = {seg.owned.get(), e.size};
  return Status::Ok();
}

Status Bundle::verify_segments() const {
  for (std::size_t i = 0; i < segments_.size(); ++i) {
    const auto& e = segments_[i].entry;
    if (e.compression != format::Compression::kNone) continue;
    if (format::checksum(bytes_.subspan(e.offset, e.stored_size)) != e.checksum) {
      return invalid("segment " + std::to_string(i) + ": checksum mismatch");
    }
    release_pages(bytes_.subspan(e.offset, e.stored_size));
  }
  return Status::Ok();
}

std::span<const std::uint8_t> Bundle::data_ref(std::uint32_t segment, std::uint64_t offset,
                                               std::uint64_t nbytes) const {
  return segments_[segment].data.subspan(offset, nbytes);
}

std::span<const std::uint8_t> Bundle::constant_data(std::uint32_t index) const {
  const fb::Constant* c = program_->constants()->Get(index);
  return data_ref(c->segment(), c->offset(), c->nbytes());
}

DebugLocation debug_location(const fb::Program& program, std::uint32_t debug) {
  const auto* d = program.debug();
  if (d == nullptr || d->entries() == nullptr || d->strings() == nullptr || debug == 0 || debug > d->entries()->size()) {
    return {};
  }
  const auto* e = d->entries()->Get(debug - 1);
  const auto text = [&](std::uint32_t i) { return i < d->strings()->size() ? d->strings()->Get(i)->str() : std::string(); };
  return {text(e->file()) + ":" + std::to_string(e->line()), text(e->module_path())};
}

}  // namespace kiln

#include "kiln/export/bundle_writer.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <unordered_map>

#include "kiln/export/version.h"
#include "kiln/runtime/file_io.h"

namespace kiln {
namespace {

using format::Compression;

struct Piece {
  const std::uint8_t* data;
  std::uint64_t size;
  std::uint64_t offset;  // within the segment
};

struct PendingSegment {
  Compression compression = Compression::kNone;
  std::vector<Piece> pieces;
  std::uint64_t size = 0;  // uncompressed, including alignment padding
};

// A segment as it will be stored: raw pieces, or a compressed buffer.
struct StoredSegment {
  format::SegmentEntry entry;
  const PendingSegment* source = nullptr;
  std::vector<std::uint8_t> compressed;
};

Status io_error(const std::string& what, const std::string& path) {
  return Status(StatusCode::kIoError, what + " '" + path + "': " + std::strerror(errno));
}

// Sequential writer to a file descriptor that tracks the offset and can inject failures.
class FileSink {
 public:
  FileSink(int fd, std::uint64_t fail_after) : fd_(fd), fail_after_(fail_after) {}
  bool write(const void* data, std::uint64_t size) {
    const auto* p = static_cast<const std::uint8_t*>(data);
    while (size > 0) {
      std::uint64_t chunk = std::min<std::uint64_t>(size, 1u << 24);
      if (fail_after_ != 0 && written_ + chunk > fail_after_) {
        errno = ENOSPC;
        return false;
      }
      const ssize_t r = ::write(fd_, p, chunk);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return false;
      p += r;
      size -= static_cast<std::uint64_t>(r);
      written_ += static_cast<std::uint64_t>(r);
    }
    return true;
  }
  bool pad_to(std::uint64_t offset) {
    static const std::uint8_t zeros[4096] = {};
    while (written_ < offset) {
      if (!write(zeros, std::min<std::uint64_t>(sizeof zeros, offset - written_))) return false;
    }
    return true;
  }
  std::uint64_t written() const { return written_; }

 private:
  int fd_;
  std::uint64_t fail_after_;
  std::uint64_t written_ = 0;
};

std::uint64_t raw_checksum(const PendingSegment& seg) {
  static const std::uint8_t zeros[64] = {};
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  std::uint64_t at = 0;
  for (const Piece& p : seg.pieces) {
    while (at < p.offset) {
      const std::uint64_t n = std::min<std::uint64_t>(sizeof zeros, p.offset - at);
      XXH3_64bits_update(state, zeros, n);
      at += n;
    }
    XXH3_64bits_update(state, p.data, p.size);
    at += p.size;
  }
  const std::uint64_t digest = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  return digest;
}

}  // namespace

struct BundleWriter::Impl {
  BundleWriteOptions options;
  std::vector<PendingSegment> segments;
  std::map<Compression, std::uint32_t> shared;  // compression -> shared segment index
  std::unordered_multimap<std::uint64_t, DataRef> by_hash;

  Status emit(const fb::ProgramT& program, FileSink* sink, std::vector<std::uint8_t>* memory) const;
};

BundleWriter::BundleWriter(BundleWriteOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  if (impl_->options.producer.empty()) impl_->options.producer = std::string(kiln_producer());
}
BundleWriter::~BundleWriter() = default;

std::uint32_t BundleWriter::segment_count() const { return static_cast<std::uint32_t>(impl_->segments.size()); }

DataRef BundleWriter::add_data(std::span<const std::uint8_t> bytes, std::optional<Compression> compression) {
  const std::uint64_t hash = XXH3_64bits(bytes.data(), bytes.size());
  auto [lo, hi] = impl_->by_hash.equal_range(hash);
  for (auto it = lo; it != hi; ++it) {
    const DataRef& ref = it->second;
    if (ref.nbytes != bytes.size()) continue;
    for (const Piece& p : impl_->segments[ref.segment].pieces) {
      // (An empty piece shares its offset with the piece after it: compare sizes too.)
      if (p.offset == ref.offset && p.size == ref.nbytes &&
          (bytes.empty() || std::memcmp(p.data, bytes.data(), bytes.size()) == 0)) {
        return ref;
      }
    }
  }
  const Compression c = compression.value_or(impl_->options.compression);
  std::uint32_t index;
  if (bytes.size() >= impl_->options.own_segment_threshold) {
    index = static_cast<std::uint32_t>(impl_->segments.size());
    impl_->segments.push_back(PendingSegment{c, {}, 0});
  } else {
    auto it = impl_->shared.find(c);
    if (it == impl_->shared.end()) {
      it = impl_->shared.emplace(c, static_cast<std::uint32_t>(impl_->segments.size())).first;
      impl_->segments.push_back(PendingSegment{c, {}, 0});
    }
    index = it->second;
  }
  PendingSegment& seg = impl_->segments[index];
  const std::uint64_t offset = format::align_up(seg.size, format::kConstantAlignment);
  seg.pieces.push_back(Piece{bytes.data(), bytes.size(), offset});
  seg.size = offset + bytes.size();
  const DataRef ref{index, offset, bytes.size()};
  impl_->by_hash.emplace(hash, ref);
  return ref;
}

Status BundleWriter::Impl::emit(const fb::ProgramT& program, FileSink* sink,
                                std::vector<std::uint8_t>* memory) const {
  flatbuffers::FlatBufferBuilder fbb(1 << 16);
  fbb.Finish(fb::Program::Pack(fbb, &program), fb::ProgramIdentifier());
  const std::span<const std::uint8_t> fb_bytes(fbb.GetBufferPointer(), fbb.GetSize());

  std::vector<StoredSegment> stored(segments.size());
  for (std::size_t i = 0; i < segments.size(); ++i) {
    const PendingSegment& seg = segments[i];
    StoredSegment& s = stored[i];
    s.source = &seg;
    s.entry.size = seg.size;
    s.entry.compression = seg.compression;
    if (seg.compression == Compression::kZstd) {
      std::vector<std::uint8_t> plain(seg.size, 0);
      for (const Piece& p : seg.pieces) if (p.size) std::memcpy(plain.data() + p.offset, p.data, p.size);
      s.compressed.resize(ZSTD_compressBound(plain.size()));
      const std::size_t n = ZSTD_compress(s.compressed.data(), s.compressed.size(), plain.data(), plain.size(), options.zstd_level);
      if (ZSTD_isError(n)) return Status(StatusCode::kInternal, std::string("zstd: ") + ZSTD_getErrorName(n));
      s.compressed.resize(n);
      s.entry.stored_size = n;
      s.entry.checksum = format::checksum(s.compressed);
    } else {
      s.entry.stored_size = seg.size;
      s.entry.checksum = raw_checksum(seg);
    }
  }

  format::FileHeader header;
  header.producer = options.producer;
  header.flatbuffer_offset = format::kHeaderSize;
  header.flatbuffer_size = fb_bytes.size();
  header.segment_table_offset = format::align_up(header.flatbuffer_offset + header.flatbuffer_size, 8);
  header.segment_count = static_cast<std::uint32_t>(stored.size());
  std::uint64_t at = header.segment_table_offset + stored.size() * format::kSegmentEntrySize;
  for (StoredSegment& s : stored) {
    s.entry.offset = format::align_up(at, format::kSegmentAlignment);
    at = s.entry.offset + s.entry.stored_size;
  }
  header.file_size = at;
  std::vector<std::uint8_t> table(stored.size() * format::kSegmentEntrySize);
  for (std::size_t i = 0; i < stored.size(); ++i) {
    format::encode_segment_entry(stored[i].entry, table.data() + i * format::kSegmentEntrySize);
  }
  const std::span<const std::uint8_t> parts[] = {fb_bytes, table};
  header.metadata_checksum = format::checksum(parts);
  const auto header_bytes = format::encode_header(header);

  if (memory != nullptr) {
    memory->assign(header.file_size, 0);
    auto put = [&](std::uint64_t off, const void* p, std::uint64_t n) { if (n) std::memcpy(memory->data() + off, p, n); };
    put(0, header_bytes.data(), header_bytes.size());
    put(header.flatbuffer_offset, fb_bytes.data(), fb_bytes.size());
    put(header.segment_table_offset, table.data(), table.size());
    for (const StoredSegment& s : stored) {
      if (s.entry.compression == Compression::kZstd) put(s.entry.offset, s.compressed.data(), s.compressed.size());
      else for (const Piece& p : s.source->pieces) put(s.entry.offset + p.offset, p.data, p.size);
    }
    return Status::Ok();
  }
  bool ok = sink->write(header_bytes.data(), header_bytes.size()) &&
            sink->write(fb_bytes.data(), fb_bytes.size()) && sink->pad_to(header.segment_table_offset) &&
            sink->write(table.data(), table.size());
  for (const StoredSegment& s : stored) {
    if (!ok) break;
    ok = sink->pad_to(s.entry.offset);
    if (s.entry.compression == Compression::kZstd) {
      ok = ok && sink->write(s.compressed.data(), s.compressed.size());
      continue;
    }
    for (const Piece& p : s.source->pieces) {
      ok = ok && sink->pad_to(s.entry.offset + p.offset) && sink->write(p.data, p.size);
    }
    ok = ok && sink->pad_to(s.entry.offset + s.entry.stored_size);
  }
  return ok ? Status::Ok() : Status(StatusCode::kIoError, std::strerror(errno));
}

Result<std::vector<std::uint8_t>> BundleWriter::to_bytes(const fb::ProgramT& program) const {
  std::vector<std::uint8_t> out;
  KILN_RETURN_IF_ERROR(impl_->emit(program, nullptr, &out));
  return out;
}

Status BundleWriter::write(const std::string& path, const fb::ProgramT& program) const {
  namespace fs = std::filesystem;
  const fs::path target(path);
  fs::path dir = target.parent_path();
  if (dir.empty()) dir = ".";
  // ".NAME.tmp.PID.XXXXXX": removed by the SIGINT/SIGTERM handler, or as stale by the next
  // writer once PID is dead (file_io.h).
  remove_stale_temporaries(path);
  std::string tmp = (dir / ("." + target.filename().string() + ".tmp." + std::to_string(::getpid()) + ".XXXXXX")).string();
  // The cleanup signals wait while the file is created and registered: a SIGTERM in between
  // would leave a temporary the handler does not know about.
  sigset_t cleanup_signals, previous;
  sigemptyset(&cleanup_signals);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&cleanup_signals, sig);
  ::pthread_sigmask(SIG_BLOCK, &cleanup_signals, &previous);
  const int fd = mkstemp(tmp.data());
  const int slot = fd < 0 ? -1 : register_temporary(tmp);
  ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  if (fd < 0) return io_error("cannot create a temporary file for", path);
  struct Unregister {
    int slot;
    ~Unregister() { unregister_temporary(slot); }
  } unregister{slot};
  FileSink sink(fd, impl_->options.fail_after_bytes_for_testing);
  Status status = impl_->emit(program, &sink, nullptr);
  if (status.ok() && ::fchmod(fd, 0644) != 0) status = io_error("cannot set permissions of", tmp);
  if (status.ok() && ::fsync(fd) != 0) status = io_error("cannot sync", tmp);
  if (::close(fd) != 0 && status.ok()) status = io_error("cannot close", tmp);
  if (status.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) status = io_error("cannot rename the temporary file to", path);
  if (!status.ok()) {
    ::unlink(tmp.c_str());
    return status.code() == StatusCode::kIoError && status.message().find('\'') == std::string::npos
               ? Status(StatusCode::kIoError, "cannot write '" + path + "': " + status.message())
               : status;
  }
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return Status::Ok();
}

// ---------------------------------------------------------------------------------------

struct ExprPool::Impl {
  fb::ProgramT* program;
  std::unordered_multimap<std::uint64_t, std::uint32_t> by_hash;
};

ExprPool::ExprPool(fb::ProgramT& program) : impl_(std::make_unique<Impl>()) {
  impl_->program = &program;
  for (std::uint32_t id = 0; id < program.exprs.size(); ++id) {
    const fb::ExprRef& r = program.exprs[id];
    impl_->by_hash.emplace(XXH3_64bits(&program.expr_tokens[r.start()], r.length() * sizeof(fb::ExprToken)), id);
  }
}
ExprPool::~ExprPool() = default;

std::uint32_t ExprPool::intern(std::span<const fb::ExprToken> tokens) {
  auto& p = *impl_->program;
  const std::uint64_t hash = XXH3_64bits(tokens.data(), tokens.size_bytes());
  auto [lo, hi] = impl_->by_hash.equal_range(hash);
  for (auto it = lo; it != hi; ++it) {
    const fb::ExprRef& r = p.exprs[it->second];
    if (r.length() == tokens.size() &&
        std::memcmp(&p.expr_tokens[r.start()], tokens.data(), tokens.size_bytes()) == 0) {
      return it->second;
    }
  }
  const auto id = static_cast<std::uint32_t>(p.exprs.size());
  p.exprs.emplace_back(static_cast<std::uint32_t>(p.expr_tokens.size()), static_cast<std::uint32_t>(tokens.size()));
  p.expr_tokens.insert(p.expr_tokens.end(), tokens.begin(), tokens.end());
  impl_->by_hash.emplace(hash, id);
  return id;
}

std::uint32_t ExprPool::constant(std::int64_t value) {
  const fb::ExprToken t(fb::ExprOp::Const, value);
  return intern({&t, 1});
}

std::uint32_t ExprPool::symbol(std::uint32_t symbol_id) {
  const fb::ExprToken t(fb::ExprOp::Sym, symbol_id);
  return intern({&t, 1});
}

}  // namespace kiln

// Opening a `.kiln` bundle: the loader that trusts nothing.
//
//   Result<std::unique_ptr<Bundle>> b = Bundle::open("model.kiln");
//
// `open` maps the file (read-only mmap) and checks, in order: size and magic, format
// version (a newer major is refused, naming the version needed), every offset and size
// for overflow and bounds, alignment, the header and metadata checksums, the FlatBuffers
// Verifier (bounded depth and table count), and then the program's semantics (indices in
// range, graphs topologically ordered, values defined before use, expressions well-formed
// over known symbols, no subgraph recursion, dtypes and ranks consistent, segment
// references valid). zstd segments are decompressed (and checksummed) once at open, up to
// LoadOptions::max_decompressed_bytes in total. `open` reads only regular files: a FIFO, a
// directory or a device is refused without blocking.
//
// Cost: opening is proportional to the metadata, not the weights: raw segments are used
// zero-copy from the mapping and their checksums are checked only when asked
// (LoadOptions::verify_segment_checksums, or verify_segments(); `kiln validate` does).
//
// Every failure is a Status with code kInvalidBundle (kIoError is never returned: an
// unreadable file is an invalid bundle too) whose message says what is wrong and where,
// e.g. "segment 3: checksum mismatch". Nothing here aborts, throws or crashes on any input.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kiln/format/file_format.h"
#include "kiln/runtime/status.h"

namespace kiln::fb {
struct Program;
}

namespace kiln {

struct LoadOptions {
  /// Hash every raw segment at open (cost proportional to the weights). The pages read
  /// leave the resident set again after each segment's check (release_pages).
  bool verify_segment_checksums = false;
  /// Map the file; when false, read it into memory. A mapped file must not be truncated or
  /// rewritten in place while the Bundle lives (the kernel raises SIGBUS on access to pages
  /// past the new end); replacing it by rename is safe (the mapping keeps the old inode).
  bool use_mmap = true;
  /// Decompress zstd segments at open. When false (`kiln inspect`: metadata only), zstd
  /// segments are neither decompressed nor checksummed and their segment_data() is empty:
  /// do not call constant_data()/data_ref() on them.
  bool decompress_segments = true;
  /// The most bytes all zstd segments may declare together (16 GiB). Declared sizes are
  /// checked against it and against the frame's own content size before anything is
  /// allocated, and decompression never writes past the declared size.
  std::uint64_t max_decompressed_bytes = std::uint64_t{16} << 30;
};

/// Facts about each expression computed by verification.
struct ExprInfo {
  bool is_bool = false;
  std::uint16_t stack_depth = 0;  // operand stack needed to evaluate it
};

class Bundle {
 public:
  /// Opens and verifies the bundle at `path`.
  static Result<std::unique_ptr<Bundle>> open(const std::string& path, const LoadOptions& options = {});
  /// Verifies a bundle held in memory. The bytes are copied (into 64-byte aligned storage).
  static Result<std::unique_ptr<Bundle>> from_bytes(std::span<const std::uint8_t> bytes,
                                                    const LoadOptions& options = {});
  ~Bundle();
  Bundle(const Bundle&) = delete;
  Bundle& operator=(const Bundle&) = delete;

  const format::FileHeader& header() const { return header_; }
  /// The verified program. Lives as long as the Bundle.
  const fb::Program& program() const { return *program_; }
  std::uint64_t file_size() const { return bytes_.size(); }

  std::size_t segment_count() const { return segments_.size(); }
  const format::SegmentEntry& segment_entry(std::size_t i) const { return segments_[i].entry; }
  /// The (decompressed) bytes of segment `i`. Precondition: i < segment_count().
  std::span<const std::uint8_t> segment_data(std::size_t i) const { return segments_[i].data; }
  /// The bytes of Program.constants[index] (verified to lie inside its segment).
  std::span<const std::uint8_t> constant_data(std::uint32_t index) const;
  /// Bytes of a (segment, offset, nbytes) reference already checked by verification.
  std::span<const std::uint8_t> data_ref(std::uint32_t segment, std::uint64_t offset,
                                         std::uint64_t nbytes) const;

  /// Tells the OS that the whole pages inside `bytes` (a span of this bundle's mapped file,
  /// e.g. a constant whose data a Program has prepacked) are not needed for now
  /// (madvise MADV_DONTNEED): they leave the resident set, and a later read faults them back
  /// in from the file. Returns the bytes released; 0 for a bundle held in memory (no mmap,
  /// zstd segments) or a span outside the mapping.
  std::size_t release_pages(std::span<const std::uint8_t> bytes) const;

  /// Hashes every raw segment against its stored checksum (zstd ones were checked at open).
  /// Like the check at open, it leaves the pages it read out of the resident set
  /// (release_pages): checking does not make the file resident.
  Status verify_segments() const;

  /// Per-expression facts (type, evaluation stack depth), indexed by expression id.
  std::span<const ExprInfo> expr_info() const { return expr_info_; }

 private:
  struct FreeDeleter {
    void operator()(void* p) const;
  };
  struct Segment {
    format::SegmentEntry entry;
    std::span<const std::uint8_t> data;                   // view into the mapping or `owned`
    std::unique_ptr<std::uint8_t, FreeDeleter> owned;     // decompressed bytes (zstd)
  };
  class Storage;

  Bundle() = default;
  static Result<std::unique_ptr<Bundle>> finish_open(std::unique_ptr<Bundle> bundle,
                                                     const LoadOptions& options);
  Status check_frame();
  Status load_segments(const LoadOptions& options);
  Status decompress(Segment& segment, const std::string& where);

  std::unique_ptr<Storage> storage_;
  std::span<const std::uint8_t> bytes_;
  format::FileHeader header_;
  const fb::Program* program_ = nullptr;
  std::vector<Segment> segments_;
  std::vector<ExprInfo> expr_info_;
};

/// Where a node or assert came from: the source "file:line" and the module path ("" at top
/// level) recorded at export for a 1-based debug id. Both empty when the id is 0, out of
/// range, or the bundle's debug table was stripped.
struct DebugLocation {
  std::string file_line;
  std::string module;
  bool empty() const { return file_line.empty(); }
  /// "model.cpp:41, fc" (or "model.cpp:41" at top level; "" when empty).
  std::string text() const { return module.empty() ? file_line : file_line + ", " + module; }
};
DebugLocation debug_location(const fb::Program& program, std::uint32_t debug);

}  // namespace kiln

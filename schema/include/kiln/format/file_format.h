// The fixed binary frame of a `.kiln` file: the file header and the segment table.
//
// Layout (all integers little-endian; see docs/FORMAT.md for the byte-level spec):
//
//   [0, 128)                 FileHeader
//   [fb_offset, +fb_size)    the FlatBuffer (schema/kiln.fbs), 8-byte aligned
//   [seg_table, +48*count)   SegmentEntry[count], 8-byte aligned
//   ...                      segments, each starting on a 4096-byte boundary
//
// These functions only encode and decode bytes. They never trust their input: decoding
// checks lengths and returns false on anything that does not fit.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace kiln::format {

inline constexpr std::array<std::uint8_t, 8> kMagic = {0x89, 'K', 'I', 'L', 'N', 0x0D, 0x0A, 0x1A};
inline constexpr std::uint16_t kFormatMajor = 1;
inline constexpr std::uint16_t kFormatMinor = 2;
inline constexpr std::size_t kHeaderSize = 128;
inline constexpr std::size_t kSegmentEntrySize = 48;
inline constexpr std::size_t kSegmentAlignment = 4096;
inline constexpr std::size_t kConstantAlignment = 64;
inline constexpr std::size_t kProducerCapacity = 48;
inline constexpr int kMaxRank = 8;                  // tensors of higher rank are rejected
inline constexpr std::uint32_t kMaxExprTokens = 4096; // per expression
inline constexpr std::uint32_t kMaxSegments = 1u << 20;

enum class Compression : std::uint32_t {
  kNone = 0,
  kZstd = 1,
};

struct FileHeader {
  std::uint16_t format_major = kFormatMajor;
  std::uint16_t format_minor = kFormatMinor;
  std::uint32_t header_size = kHeaderSize;
  std::uint64_t file_size = 0;
  std::uint64_t flatbuffer_offset = 0;
  std::uint64_t flatbuffer_size = 0;
  std::uint64_t segment_table_offset = 0;
  std::uint32_t segment_count = 0;
  std::uint32_t flags = 0;
  std::uint64_t metadata_checksum = 0;  // XXH3-64 of the FlatBuffer bytes, then the table
  std::string producer;                 // at most kProducerCapacity bytes
  std::uint64_t header_checksum = 0;    // XXH3-64 of header bytes [0, 120)
};

struct SegmentEntry {
  std::uint64_t offset = 0;        // absolute file offset, multiple of kSegmentAlignment
  std::uint64_t stored_size = 0;   // bytes in the file
  std::uint64_t size = 0;          // bytes after decompression (== stored_size if kNone)
  std::uint64_t checksum = 0;      // XXH3-64 of the stored bytes
  Compression compression = Compression::kNone;
  std::uint32_t flags = 0;
};

/// XXH3-64 of `bytes` (seed 0). The one checksum used throughout the format.
std::uint64_t checksum(std::span<const std::uint8_t> bytes);
/// Streaming variant: XXH3-64 of the concatenation of `parts`.
std::uint64_t checksum(std::span<const std::span<const std::uint8_t>> parts);

/// Serializes `header` into exactly kHeaderSize bytes, computing header_checksum.
std::array<std::uint8_t, kHeaderSize> encode_header(const FileHeader& header);

/// What decode_header found. `kOk` means every field was read and the checksum matched.
enum class HeaderStatus {
  kOk,
  kTooShort,
  kBadMagic,
  kUnsupportedMajor,  // the fields are still filled in so the caller can name the version
  kBadHeaderSize,
  kBadChecksum,
};
HeaderStatus decode_header(std::span<const std::uint8_t> bytes, FileHeader& out);

void encode_segment_entry(const SegmentEntry& entry, std::uint8_t* out /* kSegmentEntrySize */);
SegmentEntry decode_segment_entry(const std::uint8_t* in /* kSegmentEntrySize */);

constexpr std::uint64_t align_up(std::uint64_t value, std::uint64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

}  // namespace kiln::format

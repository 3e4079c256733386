#include "kiln/format/file_format.h"

#include <xxhash.h>

#include <algorithm>
#include <cstring>

namespace kiln::format {
namespace {

void put_u16(std::uint8_t* p, std::uint16_t v) {
  for (int i = 0; i < 2; ++i) p[i] = static_cast<std::uint8_t>(v >> (8 * i));
}
void put_u32(std::uint8_t* p, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<std::uint8_t>(v >> (8 * i));
}
void put_u64(std::uint8_t* p, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<std::uint8_t>(v >> (8 * i));
}
std::uint16_t get_u16(const std::uint8_t* p) {
  return static_cast<std::uint16_t>(p[0] | (p[1] << 8));
}
std::uint32_t get_u32(const std::uint8_t* p) {
  std::uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
std::uint64_t get_u64(const std::uint8_t* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// Header field offsets (docs/FORMAT.md, "File header").
constexpr std::size_t kOffMajor = 8, kOffMinor = 10, kOffHeaderSize = 12, kOffFileSize = 16,
                      kOffFbOffset = 24, kOffFbSize = 32, kOffSegTable = 40, kOffSegCount = 48,
                      kOffFlags = 52, kOffMetaSum = 56, kOffProducer = 64, kOffHeaderSum = 120;

}  // namespace

std::uint64_t checksum(std::span<const std::uint8_t> bytes) {
  return XXH3_64bits(bytes.data(), bytes.size());
}

std::uint64_t checksum(std::span<const std::span<const std::uint8_t>> parts) {
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  for (const auto& part : parts) XXH3_64bits_update(state, part.data(), part.size());
  const std::uint64_t digest = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  return digest;
}

std::array<std::uint8_t, kHeaderSize> encode_header(const FileHeader& h) {
  std::array<std::uint8_t, kHeaderSize> out{};
  std::memcpy(out.data(), kMagic.data(), kMagic.size());
  put_u16(&out[kOffMajor], h.format_major);
  put_u16(&out[kOffMinor], h.format_minor);
  put_u32(&out[kOffHeaderSize], h.header_size);
  put_u64(&out[kOffFileSize], h.file_size);
  put_u64(&out[kOffFbOffset], h.flatbuffer_offset);
  put_u64(&out[kOffFbSize], h.flatbuffer_size);
  put_u64(&out[kOffSegTable], h.segment_table_offset);
  put_u32(&out[kOffSegCount], h.segment_count);
  put_u32(&out[kOffFlags], h.flags);
  put_u64(&out[kOffMetaSum], h.metadata_checksum);
  const std::size_t n = std::min(h.producer.size(), kProducerCapacity);
  std::memcpy(&out[kOffProducer], h.producer.data(), n);
  put_u64(&out[kOffHeaderSum], checksum(std::span<const std::uint8_t>(out.data(), kOffHeaderSum)));
  return out;
}

HeaderStatus decode_header(std::span<const std::uint8_t> bytes, FileHeader& h) {
  if (bytes.size() < kHeaderSize) return HeaderStatus::kTooShort;
  const std::uint8_t* p = bytes.data();
  if (std::memcmp(p, kMagic.data(), kMagic.size()) != 0) return HeaderStatus::kBadMagic;
  h.format_major = get_u16(p + kOffMajor);
  h.format_minor = get_u16(p + kOffMinor);
  h.header_size = get_u32(p + kOffHeaderSize);
  h.file_size = get_u64(p + kOffFileSize);
  h.flatbuffer_offset = get_u64(p + kOffFbOffset);
  h.flatbuffer_size = get_u64(p + kOffFbSize);
  h.segment_table_offset = get_u64(p + kOffSegTable);
  h.segment_count = get_u32(p + kOffSegCount);
  h.flags = get_u32(p + kOffFlags);
  h.metadata_checksum = get_u64(p + kOffMetaSum);
  const auto* producer = reinterpret_cast<const char*>(p + kOffProducer);
  h.producer.assign(producer, strnlen(producer, kProducerCapacity));
  h.header_checksum = get_u64(p + kOffHeaderSum);
  // A newer major may lay the header out differently: report it before anything else.
  if (h.format_major != kFormatMajor) return HeaderStatus::kUnsupportedMajor;
  if (h.header_size != kHeaderSize) return HeaderStatus::kBadHeaderSize;
  if (checksum(bytes.first(kOffHeaderSum)) != h.header_checksum) return HeaderStatus::kBadChecksum;
  return HeaderStatus::kOk;
}

void encode_segment_entry(const SegmentEntry& e, std::uint8_t* out) {
  std::memset(out, 0, kSegmentEntrySize);
  put_u64(out + 0, e.offset);
  put_u64(out + 8, e.stored_size);
  put_u64(out + 16, e.size);
  put_u64(out + 24, e.checksum);
  put_u32(out + 32, static_cast<std::uint32_t>(e.compression));
  put_u32(out + 36, e.flags);
}

SegmentEntry decode_segment_entry(const std::uint8_t* in) {
  SegmentEntry e;
  e.offset = get_u64(in + 0);
  e.stored_size = get_u64(in + 8);
  e.size = get_u64(in + 16);
  e.checksum = get_u64(in + 24);
  e.compression = static_cast<Compression>(get_u32(in + 32));
  e.flags = get_u32(in + 36);
  return e;
}

}  // namespace kiln::format

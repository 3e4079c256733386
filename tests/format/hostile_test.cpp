// The loader trusts nothing: truncation, byte flips (raw and with the checksums forged),
// corrupt segments, version and frame errors with their exact messages, misaligned
// vectors, and offsets past 4 GiB (sparse files). Every failure must be a kInvalidBundle
// Status with a message; nothing may crash. The semantic verifier's rules, one by one,
// are in verifier_rules_test.cpp.
#include <fcntl.h>
#include <zstd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "kiln/export/testing/format_sample.h"
#include "kiln/format/kiln_generated.h"
#include "kiln/runtime/bundle.h"
#include "kiln/runtime/expr.h"
#include "kiln/runtime/file_io.h"
#include "kiln/runtime/program.h"

namespace kiln {
namespace {

using Bytes = std::vector<std::uint8_t>;
using testing::FormatSampleOptions;
using testing::make_format_sample;

constexpr std::size_t kOffFormatMinor = 10, kOffFileSize = 16, kOffHeaderFlags = 52,
                      kOffMetaSum = 56, kOffProducer = 64, kOffHeaderSum = 120;
constexpr std::uint64_t k4GiB = std::uint64_t{1} << 32;

Bytes sample_bytes(const FormatSampleOptions& options = {}) {
  auto bytes = make_format_sample(options)->bytes();
  EXPECT_TRUE(bytes.ok()) << bytes.status().to_string();
  return bytes.ok() ? *bytes : Bytes{};
}

Bytes zstd_sample_bytes() {
  FormatSampleOptions o;
  o.compression = format::Compression::kZstd;
  return sample_bytes(o);
}

Result<std::unique_ptr<Bundle>> load(const Bytes& bytes, LoadOptions options = {}) {
  return Bundle::from_bytes(bytes, options);
}

// The error of loading `bytes`, or "" when it loads.
std::string error_of(const Bytes& bytes, LoadOptions options = {}) {
  auto b = load(bytes, options);
  if (b.ok()) return "";
  EXPECT_EQ(b.status().code(), StatusCode::kInvalidBundle) << b.status().to_string();
  EXPECT_FALSE(b.status().message().empty());
  return b.status().message();
}

void put_u32(Bytes& b, std::size_t at, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) b[at + i] = static_cast<std::uint8_t>(v >> (8 * i));
}
void put_u64(Bytes& b, std::size_t at, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) b[at + i] = static_cast<std::uint8_t>(v >> (8 * i));
}

// The frame as written, read back without validation.
struct Frame {
  format::FileHeader header;
  std::vector<format::SegmentEntry> segments;

  std::uint64_t fb_end() const { return header.flatbuffer_offset + header.flatbuffer_size; }
  std::uint64_t table_end() const { return header.segment_table_offset + segments.size() * format::kSegmentEntrySize; }
  std::uint64_t entry_at(std::size_t i) const { return header.segment_table_offset + i * format::kSegmentEntrySize; }
};

Frame parse(const Bytes& b) {
  Frame f;
  EXPECT_EQ(format::decode_header(b, f.header), format::HeaderStatus::kOk);
  for (std::uint32_t i = 0; i < f.header.segment_count; ++i) {
    f.segments.push_back(format::decode_segment_entry(b.data() + f.header.segment_table_offset + i * format::kSegmentEntrySize));
  }
  return f;
}

// Recomputes the header checksum over bytes [0, 120) as they are.
void reseal_header(Bytes& b) {
  put_u64(b, kOffHeaderSum, format::checksum(std::span<const std::uint8_t>(b.data(), kOffHeaderSum)));
}

// Recomputes the metadata checksum (FlatBuffer + segment table as they are), then the header checksum.
void reseal_metadata(Bytes& b, const Frame& f) {
  const std::span<const std::uint8_t> parts[] = {
      std::span<const std::uint8_t>(b.data() + f.header.flatbuffer_offset, f.header.flatbuffer_size),
      std::span<const std::uint8_t>(b.data() + f.header.segment_table_offset, f.segments.size() * format::kSegmentEntrySize)};
  put_u64(b, kOffMetaSum, format::checksum(parts));
  reseal_header(b);
}

// Rewrites `f` (header fields and segment entries) into `b` with fresh checksums.
void rewrite_frame(Bytes& b, Frame f) {
  for (std::size_t i = 0; i < f.segments.size(); ++i) format::encode_segment_entry(f.segments[i], b.data() + f.entry_at(i));
  const std::span<const std::uint8_t> parts[] = {
      std::span<const std::uint8_t>(b.data() + f.header.flatbuffer_offset, f.header.flatbuffer_size),
      std::span<const std::uint8_t>(b.data() + f.header.segment_table_offset, f.segments.size() * format::kSegmentEntrySize)};
  f.header.metadata_checksum = format::checksum(parts);
  const auto h = format::encode_header(f.header);
  std::copy(h.begin(), h.end(), b.begin());
}

// Uses everything a loaded bundle offers, as a consumer would (ASan/UBSan watch).
std::uint64_t exercise(const Bundle& bundle) {
  std::uint64_t sum = 0;
  const fb::Program& p = bundle.program();
  for (std::uint32_t i = 0; i < (p.constants() ? p.constants()->size() : 0); ++i) {
    for (const std::uint8_t byte : bundle.constant_data(i)) sum += byte;
  }
  const std::uint32_t n_symbols = p.symbols() ? p.symbols()->size() : 0;
  std::vector<std::int64_t> values(n_symbols);
  for (std::uint32_t s = 0; s < n_symbols; ++s) {
    const auto* sym = p.symbols()->Get(s);
    values[s] = std::clamp<std::int64_t>(3, sym->min(), sym->max());
  }
  for (std::uint32_t e = 0; e < (p.exprs() ? p.exprs()->size() : 0); ++e) {
    auto v = evaluate_expr(p, e, values);
    if (v.ok()) sum += static_cast<std::uint64_t>(*v);
    sum += expr_to_string(p, e).size();
  }
  sum += bundle.verify_segments().ok();
  return sum;
}

bool same_program(const Bundle& a, const Bundle& b) {
  std::unique_ptr<fb::ProgramT> pa(a.program().UnPack()), pb(b.program().UnPack());
  if (!(*pa == *pb) || a.segment_count() != b.segment_count()) return false;
  for (std::size_t s = 0; s < a.segment_count(); ++s) {
    const auto x = a.segment_data(s), y = b.segment_data(s);
    if (!std::equal(x.begin(), x.end(), y.begin(), y.end())) return false;
  }
  return true;
}

// ---------------------------------------------------------------------------------------
// Truncation

TEST(Hostile, LoaderRejectsEveryTruncation) {
  for (const Bytes& full : {sample_bytes(), zstd_sample_bytes()}) {
    ASSERT_FALSE(full.empty());
    ASSERT_TRUE(load(full).ok());
    for (std::size_t n = 0; n < full.size(); ++n) {
      const Bytes cut(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(n));
      const std::string message = error_of(cut);
      ASSERT_FALSE(message.empty()) << "truncated to " << n << " bytes loaded";
      if (n < format::kHeaderSize) {
        ASSERT_EQ(message, "file is " + std::to_string(n) + " bytes, smaller than the 128-byte header (truncated?)");
      } else {
        ASSERT_EQ(message, "header says the file is " + std::to_string(full.size()) + " bytes but it is " +
                               std::to_string(n) + " (truncated or padded?)");
      }
    }
  }
}

// A truncated file whose header was rewritten to claim the shorter size must still fail,
// now on the bounds of the FlatBuffer, the segment table or a segment.
TEST(Hostile, LoaderRejectsTruncationWithMatchingHeader) {
  for (const Bytes& full : {sample_bytes(), zstd_sample_bytes()}) {
    const Frame f = parse(full);
    for (std::size_t n = format::kHeaderSize; n < full.size(); ++n) {
      Bytes cut(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(n));
      put_u64(cut, kOffFileSize, n);
      reseal_header(cut);
      const std::string message = error_of(cut);
      ASSERT_FALSE(message.empty()) << "truncated to " << n << " bytes loaded";
      const char* expected = n < f.fb_end() ? "flatbuffer [" : n < f.table_end() ? "segment table [" : "segment ";
      ASSERT_EQ(message.rfind(expected, 0), 0u) << n << ": " << message;
    }
  }
}

TEST(Hostile, OpenRejectsFilesThatAreNotBundles) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("kiln_hostile_open_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const auto write = [&](const char* name, const Bytes& bytes) {
    const fs::path p = dir / name;
    FILE* f = std::fopen(p.c_str(), "wb");
    if (!bytes.empty()) std::fwrite(bytes.data(), 1, bytes.size(), f);
    std::fclose(f);
    return p.string();
  };
  const Bytes good = sample_bytes();
  for (bool mmap : {true, false}) {
    const LoadOptions o{.use_mmap = mmap};
    auto empty = Bundle::open(write("empty.kiln", {}), o);
    EXPECT_EQ(empty.status().message(), "file is 0 bytes, smaller than the 128-byte header (truncated?)");
    auto half = Bundle::open(write("half.kiln", Bytes(good.begin(), good.begin() + 1000)), o);
    EXPECT_EQ(half.status().code(), StatusCode::kInvalidBundle);
    auto missing = Bundle::open((dir / "missing.kiln").string(), o);
    EXPECT_EQ(missing.status().code(), StatusCode::kInvalidBundle);
    EXPECT_NE(missing.status().message().find("cannot open"), std::string::npos) << missing.status().message();
    auto directory = Bundle::open(dir.string(), o);
    EXPECT_EQ(directory.status().code(), StatusCode::kInvalidBundle);
    EXPECT_EQ(directory.status().message(), dir.string() + ": is a directory, not a regular file");
    auto ok = Bundle::open(write("good.kiln", good), o);
    EXPECT_TRUE(ok.ok()) << ok.status().to_string();
  }
  fs::remove_all(dir);
}

// ---------------------------------------------------------------------------------------
// Byte flips

// Every byte before the first segment is covered by the header or the metadata checksum,
// except the zero padding before the segment table and before the first segment.
TEST(Hostile, EveryByteFlipBeforeTheSegmentsIsDetectedOrUnused) {
  const Bytes good = sample_bytes();
  const Frame f = parse(good);
  auto reference = load(good);
  ASSERT_TRUE(reference.ok());
  const std::uint64_t end = f.segments.at(0).offset;
  std::set<std::uint64_t> padding;
  for (std::uint64_t i = f.fb_end(); i < f.header.segment_table_offset; ++i) padding.insert(i);
  for (std::uint64_t i = f.table_end(); i < end; ++i) padding.insert(i);
  for (const std::uint8_t mask : {0xFF, 0x01, 0x80, 0x5A}) {
    std::size_t detected = 0, unused = 0;
    Bytes b = good;
    for (std::uint64_t i = 0; i < end; ++i) {
      // Padding loads in full (slow under sanitizers): once with one mask is proof enough.
      if (mask != 0xFF && padding.count(i)) continue;
      b[i] ^= mask;
      auto r = load(b);
      if (r.ok()) {
        ++unused;
        EXPECT_TRUE(padding.count(i)) << "flip of byte " << i << " (mask " << int(mask) << ") went unnoticed";
        // The loader's view (FlatBuffer, table, segments) is untouched: compare it in full
        // at the edges of each padding run only.
        if (!padding.count(i - 1) || !padding.count(i + 1)) {
          EXPECT_TRUE(same_program(**r, **reference)) << "byte " << i;
        }
      } else {
        ++detected;
        EXPECT_EQ(r.status().code(), StatusCode::kInvalidBundle);
        EXPECT_FALSE(r.status().message().empty());
        EXPECT_FALSE(padding.count(i)) << "padding byte " << i << " is not unused: " << r.status().message();
      }
      b[i] ^= mask;
    }
    EXPECT_EQ(unused, mask == 0xFF ? padding.size() : 0) << "mask " << int(mask);
    EXPECT_EQ(detected + padding.size(), end);
    // The unused bytes are padding only: a handful before the table, the rest of the page.
    EXPECT_LT(f.header.segment_table_offset - f.fb_end(), 8u);
    RecordProperty("mask_" + std::to_string(mask) + "_detected", static_cast<int>(detected));
    RecordProperty("mask_" + std::to_string(mask) + "_unused", static_cast<int>(unused));
  }
}

// Flips in the header and segment table with the checksums recomputed (a forger, not bit
// rot): each fails, or changes a field the loader provably does not use (header flags,
// producer text, reserved header bytes, format minor, segment flags, reserved entry
// bytes), or is a raw segment's
// checksum, which is only checked on request.
TEST(Hostile, ResealedHeaderAndTableFlipsFailOrTouchOnlyUnusedFields) {
  const Bytes good = sample_bytes();
  const Frame f = parse(good);
  auto reference = load(good);
  ASSERT_TRUE(reference.ok());
  std::set<std::uint64_t> unused_fields, lazy_checksum;
  for (std::uint64_t i = kOffHeaderFlags; i < kOffHeaderFlags + 4; ++i) unused_fields.insert(i);
  for (std::uint64_t i = kOffProducer; i < kOffProducer + format::kProducerCapacity; ++i) unused_fields.insert(i);
  for (std::uint64_t i = kOffProducer + format::kProducerCapacity; i < kOffHeaderSum; ++i) unused_fields.insert(i);  // reserved
  for (std::uint64_t i = kOffFormatMinor; i < kOffFormatMinor + 2; ++i) unused_fields.insert(i);
  for (std::size_t s = 0; s < f.segments.size(); ++s) {
    for (std::uint64_t i = 36; i < 48; ++i) unused_fields.insert(f.entry_at(s) + i);  // flags, reserved
    for (std::uint64_t i = 24; i < 32; ++i) lazy_checksum.insert(f.entry_at(s) + i);
  }
  std::vector<std::uint64_t> positions;
  for (std::uint64_t i = 0; i < kOffHeaderSum; ++i) positions.push_back(i);
  for (std::uint64_t i = f.header.segment_table_offset; i < f.table_end(); ++i) positions.push_back(i);
  std::size_t detected = 0, unused = 0, lazy = 0;
  for (const std::uint8_t mask : {0xFF, 0x01, 0x80}) {
    for (const std::uint64_t i : positions) {
      Bytes b = good;
      b[i] ^= mask;
      if (i >= f.header.segment_table_offset) reseal_metadata(b, f);
      else reseal_header(b);
      auto r = load(b);
      if (!r.ok()) {
        ++detected;
        EXPECT_EQ(r.status().code(), StatusCode::kInvalidBundle);
        EXPECT_FALSE(r.status().message().empty());
        continue;
      }
      if (lazy_checksum.count(i)) {
        ++lazy;
        EXPECT_EQ((*r)->verify_segments().message(), "segment 0: checksum mismatch");
        EXPECT_FALSE(load(b, {.verify_segment_checksums = true}).ok());
        continue;
      }
      ++unused;
      EXPECT_TRUE(unused_fields.count(i)) << "byte " << i << " (mask " << int(mask) << ") changed nothing the loader checks";
      EXPECT_TRUE(same_program(**r, **reference)) << "byte " << i;
    }
  }
  // Exactly the fields listed above go unchecked; every other flip is an error.
  EXPECT_EQ(unused, 3 * unused_fields.size());
  EXPECT_EQ(lazy, 3 * lazy_checksum.size());
  EXPECT_EQ(detected, 3 * (positions.size() - unused_fields.size() - lazy_checksum.size()));
  RecordProperty("detected", static_cast<int>(detected));
  RecordProperty("unused", static_cast<int>(unused));
}

// Flips inside the FlatBuffer with the metadata checksum recomputed reach the FlatBuffers
// Verifier and the semantic verifier: each must fail cleanly or give a program that is
// safe to use (names, floats and hints may change).
TEST(Hostile, ResealedFlatBufferFlipsFailCleanlyOrStaySafe) {
  const Bytes good = sample_bytes();
  const Frame f = parse(good);
  std::size_t failed = 0, loaded = 0;
  for (const std::uint8_t mask : {0xFF, 0x01}) {
    Bytes b = good;
    for (std::uint64_t i = f.header.flatbuffer_offset; i < f.fb_end(); ++i) {
      b[i] ^= mask;
      reseal_metadata(b, f);
      auto r = load(b);
      if (r.ok()) {
        ++loaded;
        exercise(**r);
      } else {
        ++failed;
        ASSERT_EQ(r.status().code(), StatusCode::kInvalidBundle);
        ASSERT_FALSE(r.status().message().empty());
      }
      b[i] ^= mask;
    }
  }
  RecordProperty("failed", static_cast<int>(failed));
  RecordProperty("loaded", static_cast<int>(loaded));
  EXPECT_GT(failed, 0u);
}

TEST(Hostile, ResealedRandomFlatBufferCorruptionFailsCleanlyOrStaysSafe) {
  const Bytes good = sample_bytes();
  const Frame f = parse(good);
  std::mt19937_64 rng(20240601);
  for (int iteration = 0; iteration < 3000; ++iteration) {
    Bytes b = good;
    const int n = 1 + static_cast<int>(rng() % 8);
    for (int k = 0; k < n; ++k) {
      const std::uint64_t at = f.header.flatbuffer_offset + rng() % f.header.flatbuffer_size;
      b[at] = static_cast<std::uint8_t>(rng());
    }
    reseal_metadata(b, f);
    auto r = load(b);
    if (r.ok()) exercise(**r);
    else ASSERT_EQ(r.status().code(), StatusCode::kInvalidBundle);
  }
}

// ---------------------------------------------------------------------------------------
// Segments

TEST(Hostile, CorruptRawSegmentIsCaughtWhenVerifying) {
  FormatSampleOptions o;
  o.extra_weight_bytes = 64 * 1024;  // segment 1 of its own
  const Bytes good = sample_bytes(o);
  const Frame f = parse(good);
  ASSERT_EQ(f.segments.size(), 2u);
  for (std::size_t s = 0; s < f.segments.size(); ++s) {
    for (std::uint64_t seed : {1, 2, 3, 4, 5}) {
      std::mt19937_64 rng(seed * 7919 + s);
      Bytes b = good;
      const auto& e = f.segments[s];
      const int n = 1 + static_cast<int>(rng() % 16);
      for (int k = 0; k < n; ++k) b[e.offset + rng() % e.stored_size] ^= static_cast<std::uint8_t>(1 + rng() % 255);
      const std::string where = "segment " + std::to_string(s) + ": checksum mismatch";
      EXPECT_EQ(error_of(b, {.verify_segment_checksums = true}), where);
      // The documented trade-off: raw segments are not hashed at open unless asked...
      auto lazy = load(b);
      ASSERT_TRUE(lazy.ok()) << lazy.status().to_string();
      // ...but verify_segments() (what `kiln validate` runs) still catches it.
      const Status v = (*lazy)->verify_segments();
      EXPECT_EQ(v.code(), StatusCode::kInvalidBundle);
      EXPECT_EQ(v.message(), where);
    }
  }
}

TEST(Hostile, CorruptZstdSegmentIsAlwaysCaughtAtOpen) {
  const Bytes good = zstd_sample_bytes();
  const Frame f = parse(good);
  ASSERT_EQ(f.segments.at(0).compression, format::Compression::kZstd);
  for (std::uint64_t seed : {11, 12, 13, 14, 15, 16}) {
    std::mt19937_64 rng(seed);
    Bytes b = good;
    const auto& e = f.segments[0];
    for (int k = 0; k < 4; ++k) b[e.offset + rng() % e.stored_size] ^= static_cast<std::uint8_t>(1 + rng() % 255);
    EXPECT_EQ(error_of(b), "segment 0: checksum mismatch");
    EXPECT_EQ(error_of(b, {.verify_segment_checksums = true}), "segment 0: checksum mismatch");
  }
}

// A forger who also fixes the checksum reaches the zstd decoder: it must fail cleanly.
TEST(Hostile, CorruptZstdFrameWithValidChecksumFailsCleanly) {
  const Bytes good = zstd_sample_bytes();
  const Frame f = parse(good);
  std::size_t failed = 0;
  for (std::uint64_t seed = 0; seed < 300; ++seed) {
    std::mt19937_64 rng(seed);
    Bytes b = good;
    Frame g = f;
    auto& e = g.segments[0];
    for (int k = 0; k < 1 + static_cast<int>(seed % 4); ++k) b[e.offset + rng() % e.stored_size] ^= static_cast<std::uint8_t>(1 + rng() % 255);
    e.checksum = format::checksum(std::span<const std::uint8_t>(b.data() + e.offset, e.stored_size));
    rewrite_frame(b, g);
    auto r = load(b);
    if (r.ok()) {
      exercise(**r);
    } else {
      ++failed;
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidBundle);
    }
  }
  EXPECT_GT(failed, 0u);
}

// ---------------------------------------------------------------------------------------
// Exact messages of the frame checks

TEST(Hostile, FrameErrorsHaveExactMessages) {
  const Bytes good = sample_bytes();
  const Frame f = parse(good);
  {
    Bytes b = good;
    b[1] = 'X';
    EXPECT_EQ(error_of(b), "not a Kiln bundle (bad magic)");
  }
  {
    Bytes b = good;
    b[kOffProducer + 2] ^= 1;
    EXPECT_EQ(error_of(b), "header checksum mismatch");
  }
  {
    Bytes b = good;
    b[kOffHeaderSum] ^= 1;
    EXPECT_EQ(error_of(b), "header checksum mismatch");
  }
  {
    Bytes b = good;
    b.push_back(0);
    EXPECT_EQ(error_of(b), "header says the file is " + std::to_string(good.size()) + " bytes but it is " +
                               std::to_string(good.size() + 1) + " (truncated or padded?)");
  }
  {
    Bytes b = good;
    Frame g = f;
    g.header.header_size = 256;
    rewrite_frame(b, g);
    EXPECT_EQ(error_of(b), "header size 256 != 128");
  }
  {
    Bytes b = good;
    b[f.header.flatbuffer_offset + 20] ^= 0x40;
    EXPECT_EQ(error_of(b), "metadata checksum mismatch (flatbuffer or segment table corrupt)");
  }
  {
    Bytes b = good;
    b[f.entry_at(0) + 8] ^= 0x40;  // segment table bytes are covered too
    EXPECT_EQ(error_of(b), "metadata checksum mismatch (flatbuffer or segment table corrupt)");
  }
  {
    Bytes b = good;
    Frame g = f;
    g.header.flatbuffer_offset = 132;
    rewrite_frame(b, g);
    EXPECT_EQ(error_of(b), "flatbuffer [132, +" + std::to_string(f.header.flatbuffer_size) + ") is out of bounds or misaligned");
  }
  {
    Bytes b = good;
    Frame g = f;
    g.header.flatbuffer_size = good.size();
    std::copy_n(format::encode_header(g.header).begin(), format::kHeaderSize, b.begin());
    EXPECT_EQ(error_of(b), "flatbuffer [128, +" + std::to_string(good.size()) + ") is out of bounds or misaligned");
  }
  {
    Bytes b = good;
    Frame g = f;
    g.header.segment_count = format::kMaxSegments + 1;
    std::copy_n(format::encode_header(g.header).begin(), format::kHeaderSize, b.begin());
    EXPECT_EQ(error_of(b), "segment count 1048577 exceeds the limit 1048576");
  }
  {
    Bytes b = good;
    Frame g = f;
    g.header.segment_table_offset = 64;
    std::copy_n(format::encode_header(g.header).begin(), format::kHeaderSize, b.begin());
    EXPECT_EQ(error_of(b), "segment table [64, +48) is out of bounds, misaligned or overlaps the flatbuffer");
  }
  {
    Bytes b = good;
    Frame g = f;
    g.header.segment_count = 1000;
    std::copy_n(format::encode_header(g.header).begin(), format::kHeaderSize, b.begin());
    EXPECT_EQ(error_of(b), "segment table [" + std::to_string(f.header.segment_table_offset) +
                               ", +48000) is out of bounds, misaligned or overlaps the flatbuffer");
  }
  {
    Bytes b = good;
    b[f.header.flatbuffer_offset + 4] = 'X';  // the file identifier "KILN"
    reseal_metadata(b, f);
    EXPECT_EQ(error_of(b), "flatbuffer: missing file identifier 'KILN'");
  }
  {
    Bytes b = good;
    put_u32(b, f.header.flatbuffer_offset, 0x7FFFFFF0);  // root offset far outside
    reseal_metadata(b, f);
    EXPECT_EQ(error_of(b), "flatbuffer: verification failed (corrupt program)");
  }
}

TEST(Hostile, SegmentEntryErrorsHaveExactMessages) {
  const Bytes good = sample_bytes();
  const Frame f = parse(good);
  const auto& e0 = f.segments.at(0);
  const auto with = [&](auto edit) {
    Bytes b = good;
    Frame g = f;
    edit(g.segments[0]);
    rewrite_frame(b, g);
    return error_of(b);
  };
  EXPECT_EQ(with([](auto& e) { e.offset += 8; }), "segment 0: offset " + std::to_string(e0.offset + 8) + " is not 4096-aligned");
  EXPECT_EQ(with([](auto& e) { e.offset += 4096; }),
            "segment 0: [" + std::to_string(e0.offset + 4096) + ", +" + std::to_string(e0.stored_size) +
                ") is out of bounds or overlaps earlier data");
  EXPECT_EQ(with([](auto& e) { e.offset = 0; }),
            "segment 0: [0, +" + std::to_string(e0.stored_size) + ") is out of bounds or overlaps earlier data");
  EXPECT_EQ(with([](auto& e) { e.stored_size = ~std::uint64_t{0} - 100; }),
            "segment 0: [" + std::to_string(e0.offset) + ", +" + std::to_string(~std::uint64_t{0} - 100) +
                ") is out of bounds or overlaps earlier data");
  EXPECT_EQ(with([](auto& e) { e.size += 64; }),
            "segment 0: raw segment size " + std::to_string(e0.size + 64) + " != stored size " + std::to_string(e0.stored_size));
  EXPECT_EQ(with([](auto& e) { e.compression = static_cast<format::Compression>(7); }), "segment 0: unknown compression 7");
  // A shorter segment than the constants need: the semantic verifier names the constant.
  EXPECT_NE(with([](auto& e) { e.size = e.stored_size = 64; }).find("lies outside segment 0 (64 bytes)"), std::string::npos);

  // Two segments overlapping each other.
  FormatSampleOptions o;
  o.extra_weight_bytes = 64 * 1024;
  const Bytes two = sample_bytes(o);
  Frame g = parse(two);
  ASSERT_EQ(g.segments.size(), 2u);
  g.segments[1].offset = g.segments[0].offset;
  Bytes b = two;
  rewrite_frame(b, g);
  EXPECT_EQ(error_of(b), "segment 1: [" + std::to_string(g.segments[0].offset) + ", +" +
                             std::to_string(g.segments[1].stored_size) + ") is out of bounds or overlaps earlier data");
}

TEST(Hostile, ZstdSegmentErrorsHaveExactMessages) {
  const Bytes good = zstd_sample_bytes();
  const Frame f = parse(good);
  const auto& e0 = f.segments.at(0);
  {
    Bytes b = good;
    Frame g = f;
    g.segments[0].size += 64;
    rewrite_frame(b, g);
    EXPECT_EQ(error_of(b), "segment 0: zstd frame does not declare the segment size " + std::to_string(e0.size + 64));
  }
  {
    // Not a zstd frame at all (checksum fixed so the decoder is reached).
    Bytes b = good;
    Frame g = f;
    std::fill_n(b.begin() + static_cast<std::ptrdiff_t>(e0.offset), 8, 0xAB);
    g.segments[0].checksum = format::checksum(std::span<const std::uint8_t>(b.data() + e0.offset, e0.stored_size));
    rewrite_frame(b, g);
    EXPECT_EQ(error_of(b), "segment 0: zstd frame does not declare the segment size " + std::to_string(e0.size));
  }
  {
    // A frame cut short: the header still declares the size, the data is missing.
    Bytes b = good;
    Frame g = f;
    g.segments[0].stored_size = e0.stored_size / 2;
    g.segments[0].checksum = format::checksum(std::span<const std::uint8_t>(b.data() + e0.offset, e0.stored_size / 2));
    rewrite_frame(b, g);
    const std::string m = error_of(b);
    EXPECT_EQ(m.rfind("segment 0: zstd decompression failed", 0), 0u) << m;
  }
}

// ---------------------------------------------------------------------------------------
// Versions

TEST(Hostile, NewerMajorIsRefusedNamingTheVersionNeeded) {
  Bytes b = sample_bytes();
  Frame f = parse(b);
  f.header.format_major = 2;
  f.header.format_minor = 0;
  rewrite_frame(b, f);
  EXPECT_EQ(error_of(b), "bundle format 2.0 is newer than this build reads (1.x): use a Kiln release that reads format 2");
  // The version is reported before anything else: even with a wrong checksum.
  b[kOffHeaderSum] ^= 1;
  EXPECT_EQ(error_of(b), "bundle format 2.0 is newer than this build reads (1.x): use a Kiln release that reads format 2");
  f.header.format_major = 65535;
  f.header.format_minor = 3;
  rewrite_frame(b, f);
  EXPECT_EQ(error_of(b), "bundle format 65535.3 is newer than this build reads (1.x): use a Kiln release that reads format 65535");
}

TEST(Hostile, OlderOrZeroMajorIsRefused) {
  Bytes b = sample_bytes();
  Frame f = parse(b);
  f.header.format_major = 0;
  f.header.format_minor = 9;
  rewrite_frame(b, f);
  EXPECT_EQ(error_of(b), "bundle format 0.9 is no longer supported (this build reads 1.x)");
}

TEST(Hostile, NewerMinorOfTheSameMajorLoads) {
  const Bytes good = sample_bytes();
  auto reference = load(good);
  ASSERT_TRUE(reference.ok());
  for (std::uint16_t minor : {std::uint16_t{0}, std::uint16_t{1}, std::uint16_t{7}, std::uint16_t{65535}}) {
    Bytes b = good;
    Frame f = parse(b);
    f.header.format_minor = minor;
    rewrite_frame(b, f);
    auto r = load(b, {.verify_segment_checksums = true});
    ASSERT_TRUE(r.ok()) << minor << ": " << r.status().to_string();
    EXPECT_EQ((*r)->header().format_minor, minor);
    EXPECT_TRUE(same_program(**r, **reference));
  }
}

// ---------------------------------------------------------------------------------------
// Alignment of 8-byte vectors, which the FlatBuffers Verifier does not check

// Moves one vector of the sample's FlatBuffer to its end so that its elements start 4
// bytes off an 8-byte boundary (its length field stays 4-aligned, so the FlatBuffers
// Verifier accepts it), repoints the table field that refers to it and rebuilds the file.
// `select` names the field: {the table, its VT_ field id}.
struct VectorField {
  const void* table;
  flatbuffers::voffset_t field;
  std::size_t element_size;
};

template <typename Select>
Bytes with_moved_vector(const Bytes& good, Select select, bool misalign = true) {
  Frame f = parse(good);
  Bytes fbb(good.begin() + static_cast<std::ptrdiff_t>(f.header.flatbuffer_offset),
            good.begin() + static_cast<std::ptrdiff_t>(f.fb_end()));
  const VectorField vf = select(*fb::GetProgram(fbb.data()));
  const auto* table = static_cast<const flatbuffers::Table*>(vf.table);
  const std::size_t field = static_cast<std::size_t>(reinterpret_cast<const std::uint8_t*>(table) - fbb.data()) +
                            table->GetOptionalFieldOffset(vf.field);
  std::uint32_t rel, length;
  std::memcpy(&rel, &fbb[field], 4);
  const std::size_t from = field + rel;  // the vector's length field
  std::memcpy(&length, &fbb[from], 4);
  EXPECT_EQ((from + 4) % 8, 0u) << "the writer aligned it";
  fbb.resize(format::align_up(fbb.size(), 8) + (misalign ? 0 : 4), 0);
  const std::size_t to = fbb.size();
  fbb.insert(fbb.end(), fbb.begin() + static_cast<std::ptrdiff_t>(from),
             fbb.begin() + static_cast<std::ptrdiff_t>(from + 4 + length * vf.element_size));
  const auto moved = static_cast<std::uint32_t>(to - field);
  std::memcpy(&fbb[field], &moved, 4);

  Bytes out = good;  // same segments at the same offsets
  std::fill(out.begin() + static_cast<std::ptrdiff_t>(f.header.flatbuffer_offset),
            out.begin() + static_cast<std::ptrdiff_t>(f.segments.at(0).offset), 0);
  std::copy(fbb.begin(), fbb.end(), out.begin() + static_cast<std::ptrdiff_t>(f.header.flatbuffer_offset));
  f.header.flatbuffer_size = fbb.size();
  f.header.segment_table_offset = format::align_up(f.fb_end(), 8);
  EXPECT_LE(f.table_end(), f.segments[0].offset);
  rewrite_frame(out, f);
  return out;
}

TEST(Hostile, MisalignedEightByteVectorsAreRefused) {
  const Bytes good = sample_bytes();
  const auto constant_shape = [](const fb::Program& p) {
    return VectorField{p.constants()->Get(1), fb::Constant::VT_SHAPE, 8};
  };
  const auto test_shape = [](const fb::Program& p) {
    return VectorField{p.self_tests()->Get(0)->outputs()->Get(1), fb::TestTensor::VT_SHAPE, 8};
  };
  const auto tokens = [](const fb::Program& p) {
    return VectorField{&p, fb::Program::VT_EXPR_TOKENS, sizeof(fb::ExprToken)};
  };
  const auto ints = [](const fb::Program& p) {
    return VectorField{p.graphs()->Get(0)->nodes()->Get(5)->attrs()->Get(3), fb::Attr::VT_INTS, 8};
  };
  const auto floats = [](const fb::Program& p) {
    return VectorField{p.graphs()->Get(0)->nodes()->Get(5)->attrs()->Get(7), fb::Attr::VT_FLOATS, 8};
  };
  EXPECT_EQ(error_of(with_moved_vector(good, constant_shape)), "constant 1: shape vector is not 8-byte aligned");
  EXPECT_EQ(error_of(with_moved_vector(good, test_shape)), "self-test 0, output 1: shape vector is not 8-byte aligned");
  EXPECT_EQ(error_of(with_moved_vector(good, tokens)), "expr_tokens: vector is not 8-byte aligned");
  EXPECT_EQ(error_of(with_moved_vector(good, ints)), "graph 0 (main), node 5 (full), attribute 3: vector is not 8-byte aligned");
  EXPECT_EQ(error_of(with_moved_vector(good, floats)), "graph 0 (main), node 5 (full), attribute 7: vector is not 8-byte aligned");
  // The same moves keeping 8-byte alignment load: only the alignment is refused.
  for (const auto& select : {+constant_shape, +test_shape, +tokens, +ints, +floats}) {
    EXPECT_EQ(error_of(with_moved_vector(good, select, /*misalign=*/false)), "");
  }
}

// ---------------------------------------------------------------------------------------
// Large offsets (sparse files)

// A temporary sparse file, removed at the end of the scope.
class SparseFile {
 public:
  explicit SparseFile(const std::string& tag)
      : path_((std::filesystem::temp_directory_path() / ("kiln_hostile_" + tag + "_" + std::to_string(::getpid()) + ".kiln")).string()) {
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  }
  ~SparseFile() {
    if (fd_ >= 0) ::close(fd_);
    ::unlink(path_.c_str());
  }
  bool ok() const { return fd_ >= 0; }
  bool resize(std::uint64_t size) { return ::ftruncate(fd_, static_cast<off_t>(size)) == 0; }
  bool write_at(std::uint64_t offset, const std::uint8_t* data, std::uint64_t n) {
    return ::pwrite(fd_, data, n, static_cast<off_t>(offset)) == static_cast<ssize_t>(n);
  }
  // True if the file really is sparse (it occupies far less than its size).
  bool is_sparse(std::uint64_t size) const {
    struct stat st {};
    return ::fstat(fd_, &st) == 0 && static_cast<std::uint64_t>(st.st_blocks) * 512 < size / 2;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
};

TEST(Hostile, SegmentsBeyondFourGiBOpenAndReadBack) {
  FormatSampleOptions o;
  o.extra_weight_bytes = 64 * 1024;  // two raw segments
  const Bytes small = sample_bytes(o);
  auto reference = load(small);
  ASSERT_TRUE(reference.ok());
  Frame f = parse(small);
  ASSERT_EQ(f.segments.size(), 2u);
  const std::uint64_t first = f.segments[0].offset;
  Bytes head(small.begin(), small.begin() + static_cast<std::ptrdiff_t>(first));
  for (auto& e : f.segments) e.offset += k4GiB;
  f.header.file_size = small.size() + k4GiB;
  rewrite_frame(head, f);

  SparseFile file("4gib");
  ASSERT_TRUE(file.ok());
  if (!file.resize(f.header.file_size)) GTEST_SKIP() << "the filesystem refuses a " << f.header.file_size << "-byte file";
  ASSERT_TRUE(file.write_at(0, head.data(), head.size()));
  ASSERT_TRUE(file.write_at(first + k4GiB, small.data() + first, small.size() - first));
  if (!file.is_sparse(f.header.file_size)) GTEST_SKIP() << "the filesystem does not keep sparse files sparse";

  for (bool verify : {false, true}) {
    auto b = Bundle::open(file.path(), {.verify_segment_checksums = verify});
    ASSERT_TRUE(b.ok()) << b.status().to_string();
    EXPECT_EQ((*b)->file_size(), small.size() + k4GiB);
    EXPECT_EQ((*b)->segment_entry(1).offset, parse(small).segments[1].offset + k4GiB);
    EXPECT_TRUE((*b)->verify_segments().ok());
    const auto& constants = *(*b)->program().constants();
    ASSERT_EQ(constants.size(), 4u);
    for (std::uint32_t i = 0; i < constants.size(); ++i) {
      const auto got = (*b)->constant_data(i), want = (*reference)->constant_data(i);
      ASSERT_EQ(got.size(), want.size());
      EXPECT_TRUE(std::equal(got.begin(), got.end(), want.begin())) << "constant " << i;
    }
  }
}

// A FlatBuffer claimed to be 2 GiB or more is refused before the FlatBuffers Verifier
// sees it (the Verifier asserts on such sizes instead of failing).
TEST(Hostile, FlatBufferOfTwoGiBOrMoreIsRefused) {
  const Bytes small = sample_bytes();
  Frame f = parse(small);
  const std::uint64_t fb_size = std::uint64_t{1} << 31;  // FlatBuffers' limit is 2^31 - 1
  f.header.flatbuffer_size = fb_size;
  f.header.segment_table_offset = format::kHeaderSize + fb_size;
  f.header.segment_count = 0;
  f.header.file_size = f.header.segment_table_offset;
  // The real FlatBuffer followed by zeros up to 2 GiB, with a matching metadata checksum,
  // so that only the size limit can stop it.
  const Frame real = parse(small);
  Bytes head(small.begin(), small.begin() + static_cast<std::ptrdiff_t>(real.fb_end()));
  const Bytes zeros(1 << 20, 0);
  std::vector<std::span<const std::uint8_t>> parts{{head.data() + format::kHeaderSize, real.header.flatbuffer_size}};
  for (std::uint64_t left = fb_size - real.header.flatbuffer_size; left > 0;) {
    const std::uint64_t n = std::min<std::uint64_t>(left, zeros.size());
    parts.emplace_back(zeros.data(), n);
    left -= n;
  }
  f.header.metadata_checksum = format::checksum(parts);
  const auto h = format::encode_header(f.header);
  std::copy(h.begin(), h.end(), head.begin());

  SparseFile file("2gib");
  ASSERT_TRUE(file.ok());
  if (!file.resize(f.header.file_size)) GTEST_SKIP() << "the filesystem refuses a large file";
  ASSERT_TRUE(file.write_at(0, head.data(), head.size()));
  if (!file.is_sparse(f.header.file_size)) GTEST_SKIP() << "the filesystem does not keep sparse files sparse";
  auto b = Bundle::open(file.path());
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kInvalidBundle);
  EXPECT_EQ(b.status().message(), "flatbuffer [128, +2147483648) is out of bounds or misaligned");
}

}  // namespace
}  // namespace kiln

// ---------------------------------------------------------------------------------------
// Special files, decompression limits, mapped files replaced under a running program

namespace kiln {
namespace {

// A FIFO with no writer, a directory and a character device: refused at once, never a
// blocked open or an endless read.
TEST(Hostile, OpenRefusesFifosDirectoriesAndDevicesWithoutBlocking) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("kiln_hostile_special_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string fifo = (dir / "pipe.kiln").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (bool mmap : {true, false}) {
    const LoadOptions o{.use_mmap = mmap};
    auto f = Bundle::open(fifo, o);
    EXPECT_EQ(f.status().code(), StatusCode::kInvalidBundle);
    EXPECT_EQ(f.status().message(), fifo + ": is a FIFO, not a regular file");
    auto zero = Bundle::open("/dev/zero", o);
    EXPECT_EQ(zero.status().message(), "/dev/zero: is a character device, not a regular file");
  }
  fs::remove_all(dir);
}

// A bundle whose last segment is a zstd frame of `zeros` zero bytes.
Bytes zstd_bomb(std::uint64_t zeros) {
  Bytes b = zstd_sample_bytes();
  Frame f = parse(b);
  format::SegmentEntry& last = f.segments.back();
  EXPECT_EQ(last.compression, format::Compression::kZstd);
  const Bytes src(zeros, 0);
  Bytes frame(ZSTD_compressBound(src.size()));
  const std::size_t n = ZSTD_compress(frame.data(), frame.size(), src.data(), src.size(), 1);
  EXPECT_FALSE(ZSTD_isError(n));
  frame.resize(n);
  b.resize(last.offset);
  b.insert(b.end(), frame.begin(), frame.end());
  last.stored_size = frame.size();
  last.size = zeros;
  last.checksum = format::checksum(frame);
  f.header.file_size = b.size();
  rewrite_frame(b, f);
  return b;
}

TEST(Hostile, DeclaredDecompressedSizesAreCappedBeforeAllocating) {
  const Bytes bomb = zstd_bomb(std::uint64_t{32} << 20);
  const std::size_t last = parse(bomb).segments.size() - 1;
  auto full = load(bomb);
  ASSERT_TRUE(full.ok()) << full.status().to_string();
  EXPECT_EQ((*full)->segment_data(last).size(), std::uint64_t{32} << 20);
  LoadOptions capped;
  capped.max_decompressed_bytes = std::uint64_t{16} << 20;
  const std::string m = error_of(bomb, capped);
  EXPECT_EQ(m.rfind("segment " + std::to_string(last) + ": decompresses to 33554432 bytes, over the limit of 16777216 bytes "
                    "for all zstd segments together", 0), 0u) << m;
}

// Metadata only (`kiln inspect`): nothing is decompressed, whatever the frames declare.
TEST(Hostile, MetadataOnlyOpenDecompressesNothing) {
  const Bytes bomb = zstd_bomb(std::uint64_t{32} << 20);
  LoadOptions o;
  o.decompress_segments = false;
  auto b = load(bomb, o);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  for (std::size_t i = 0; i < (*b)->segment_count(); ++i) {
    if ((*b)->segment_entry(i).compression != format::Compression::kZstd) continue;
    EXPECT_TRUE((*b)->segment_data(i).empty()) << i;
  }
}

// The contract of docs/FORMAT.md: a mapped bundle replaced by rename keeps working (the
// mapping holds the old inode); the new file is what the next open sees.
TEST(Hostile, MappedBundleReplacedByRenameKeepsItsBytes) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("kiln_hostile_rename_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "m.kiln").string(), other = (dir / "other.kiln").string();
  FormatSampleOptions big;
  big.extra_weight_bytes = 64 * 1024;
  const Bytes a = sample_bytes(), b = sample_bytes(big);
  const auto write = [](const std::string& p, const Bytes& bytes) {
    FILE* f = std::fopen(p.c_str(), "wb");
    std::fwrite(bytes.data(), 1, bytes.size(), f);
    std::fclose(f);
  };
  write(path, a);
  auto mapped = Bundle::open(path, {.verify_segment_checksums = true});
  ASSERT_TRUE(mapped.ok()) << mapped.status().to_string();
  auto reference = load(a);
  ASSERT_TRUE(reference.ok());
  write(other, b);
  ASSERT_EQ(std::rename(other.c_str(), path.c_str()), 0);
  // Every byte of the old mapping is still readable and unchanged.
  EXPECT_TRUE((*mapped)->verify_segments().ok());
  EXPECT_TRUE(same_program(**mapped, **reference));
  EXPECT_EQ(exercise(**mapped), exercise(**reference));
  auto reopened = Bundle::open(path);
  ASSERT_TRUE(reopened.ok());
  EXPECT_EQ((*reopened)->file_size(), b.size());
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kiln

// Kiln's own zip reader (export/src/import/archive.cpp) as a hostile-file parser: what
// libzip writes (stored and deflated) reads back byte for byte; ZIP64 archives built here
// by hand read; every damaged or lying structure (end record, ZIP64 records, central
// directory, local headers, sizes, CRCs, methods, flags) is an error that says what is
// wrong, never a crash, a hang or an allocation of what a header claims.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "import/archive.h"
#include "import/zip_testutil.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using pt2::ZipArchive;

std::span<const std::uint8_t> span_of(const std::string& s) {
  return {reinterpret_cast<const std::uint8_t*>(s.data()), s.size()};
}

std::string read_member(const ZipArchive& zip, const std::string& name, std::uint64_t cap = 1ull << 30) {
  auto bytes = zip.read(name, cap);
  EXPECT_TRUE(bytes.ok()) << bytes.status().message();
  if (!bytes.ok()) return {};
  return std::string(bytes->begin(), bytes->end());
}

// A zip written by hand, for the structures libzip never writes (ZIP64 at small sizes) and
// for lies in them.
struct Member {
  std::string name, data;
  bool deflate = false;
  bool zip64 = false;  // sizes and offset in a ZIP64 extra field, all-ones in the header
  std::uint16_t flags = 0;
  std::int64_t method = -1;  // the method written, when not 0 or 8
  std::int64_t size = -1, compressed = -1;  // declared, when lying
  std::int64_t crc = -1;
};

void put16(std::string& s, std::uint64_t v) {
  s.push_back(static_cast<char>(v & 0xFF));
  s.push_back(static_cast<char>((v >> 8) & 0xFF));
}
void put32(std::string& s, std::uint64_t v) {
  put16(s, v & 0xFFFF);
  put16(s, (v >> 16) & 0xFFFF);
}
void put64(std::string& s, std::uint64_t v) {
  put32(s, v & 0xFFFFFFFF);
  put32(s, v >> 32);
}

std::string deflate_raw(const std::string& in) {
  z_stream z{};
  deflateInit2(&z, 6, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY);
  std::string out(deflateBound(&z, in.size()), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

struct Layout {
  bool zip64_end = false;  // a ZIP64 end record and locator, all-ones in the end record
};

std::string build_zip(const std::vector<Member>& members, Layout layout = {}) {
  std::string out, cd;
  for (const Member& m : members) {
    const std::string body = m.deflate ? deflate_raw(m.data) : m.data;
    const std::uint64_t crc = m.crc >= 0 ? static_cast<std::uint64_t>(m.crc)
                                         : crc32(0, reinterpret_cast<const Bytef*>(m.data.data()),
                                                 static_cast<uInt>(m.data.size()));
    const std::uint64_t size = m.size >= 0 ? static_cast<std::uint64_t>(m.size) : m.data.size();
    const std::uint64_t comp = m.compressed >= 0 ? static_cast<std::uint64_t>(m.compressed) : body.size();
    const std::uint64_t method = m.method >= 0 ? static_cast<std::uint64_t>(m.method) : (m.deflate ? 8 : 0);
    const std::uint64_t offset = out.size();
    std::string extra;
    if (m.zip64) {
      put16(extra, 1);
      put16(extra, 24);
      put64(extra, size);
      put64(extra, comp);
      put64(extra, offset);
    }
    // The fields the local and central headers share, from "version needed" on.
    const auto shared = [&](std::string& h, std::uint64_t extra_len) {
      put16(h, 45);
      put16(h, m.flags);
      put16(h, method);
      put32(h, 0);  // time, date
      put32(h, crc);
      put32(h, m.zip64 ? 0xFFFFFFFF : comp);
      put32(h, m.zip64 ? 0xFFFFFFFF : size);
      put16(h, m.name.size());
      put16(h, extra_len);
    };
    put32(out, 0x04034b50);  // local header
    shared(out, 0);
    out += m.name;
    out += body;
    put32(cd, 0x02014b50);  // central directory header
    put16(cd, 45);          // version made by
    shared(cd, extra.size());
    put16(cd, 0);  // comment length
    put16(cd, 0);  // disk
    put16(cd, 0);  // internal attributes
    put32(cd, 0);  // external attributes
    put32(cd, m.zip64 ? 0xFFFFFFFF : offset);
    cd += m.name;
    cd += extra;
  }
  const std::uint64_t cd_at = out.size();
  out += cd;
  if (layout.zip64_end) {
    const std::uint64_t z64_at = out.size();
    put32(out, 0x06064b50);
    put64(out, 44);
    put16(out, 45);
    put16(out, 45);
    put32(out, 0);
    put32(out, 0);
    put64(out, members.size());
    put64(out, members.size());
    put64(out, cd.size());
    put64(out, cd_at);
    put32(out, 0x07064b50);
    put32(out, 0);
    put64(out, z64_at);
    put32(out, 1);
  }
  put32(out, 0x06054b50);
  put16(out, 0);
  put16(out, 0);
  put16(out, layout.zip64_end ? 0xFFFF : members.size());
  put16(out, layout.zip64_end ? 0xFFFF : members.size());
  put32(out, layout.zip64_end ? 0xFFFFFFFF : cd.size());
  put32(out, layout.zip64_end ? 0xFFFFFFFF : cd_at);
  put16(out, 0);
  return out;
}

std::string error_of(const std::string& zip_bytes, const std::string& member = "", std::uint64_t cap = 1ull << 30) {
  auto zip = ZipArchive::from_bytes(span_of(zip_bytes), "z");
  if (!zip.ok()) return zip.status().message();
  if (member.empty()) return "(opened)";
  auto bytes = (*zip)->read(member, cap);
  if (!bytes.ok()) return bytes.status().message();
  return "(read)";
}

std::string random_bytes(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng() & 0xFF);
  return s;
}

class ZipReader : public ::testing::Test {
 protected:
  fs::path dir_ = fs::temp_directory_path() / ("kiln_zip_reader_" + std::to_string(::getpid()));
  void SetUp() override { fs::create_directories(dir_); }
  void TearDown() override { fs::remove_all(dir_); }
};

TEST_F(ZipReader, WhatLibzipWritesStoredOrDeflatedReadsBackByteForByte) {
  std::map<std::string, std::string> entries = {
      {"empty", ""},
      {"archive/data.pkl", "\x80\x02}q\x00."},
      {"archive/data/0", random_bytes(300000, 1)},                   // incompressible
      {"archive/data/1", std::string(3 << 20, 'k') + "tail"},         // 3 MiB, deflates ~1000:1
      {"dir/nested/name with spaces.json", "{\"a\": [1, 2, 3]}"},
  };
  for (const bool stored : {true, false}) {
    const std::string path = (dir_ / (stored ? "s.zip" : "d.zip")).string();
    ASSERT_TRUE(testing::write_zip(path, entries, stored));
    auto zip = ZipArchive::open(path);
    ASSERT_TRUE(zip.ok()) << zip.status().message();
    EXPECT_EQ((*zip)->names().size(), entries.size());
    for (const auto& [name, data] : entries) {
      EXPECT_EQ((*zip)->size_of(name), data.size()) << name;
      EXPECT_EQ(read_member(**zip, name), data) << name << (stored ? " stored" : " deflated");
    }
    EXPECT_FALSE((*zip)->size_of("missing").has_value());
    auto missing = (*zip)->read("missing", 100);
    ASSERT_FALSE(missing.ok());
    EXPECT_EQ(missing.status().message(), "'" + path + "': archive member 'missing' is missing");
    // The same bytes from memory.
    std::ifstream f(path, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    auto mem = ZipArchive::from_bytes(span_of(bytes), "mem");
    ASSERT_TRUE(mem.ok()) << mem.status().message();
    for (const auto& [name, data] : entries) EXPECT_EQ(read_member(**mem, name), data) << name;
  }
}

TEST_F(ZipReader, Zip64RecordsAndExtraFieldsRead) {
  const std::vector<Member> members = {{.name = "a", .data = "first", .zip64 = true},
                                       {.name = "b", .data = std::string(5000, 'b'), .deflate = true, .zip64 = true},
                                       {.name = "c", .data = "plain"}};
  const std::string bytes = build_zip(members, {.zip64_end = true});
  auto zip = ZipArchive::from_bytes(span_of(bytes), "z64");
  ASSERT_TRUE(zip.ok()) << zip.status().message();
  EXPECT_EQ(read_member(**zip, "a"), "first");
  EXPECT_EQ(read_member(**zip, "b"), std::string(5000, 'b'));
  EXPECT_EQ(read_member(**zip, "c"), "plain");
  // The plain end record alone, when it asks for ZIP64 values: an error.
  std::string no_locator = bytes;
  const std::size_t end_at = bytes.size() - 22, locator_at = end_at - 20;
  no_locator[locator_at] = 'X';
  EXPECT_EQ(error_of(no_locator),
            "'z' is not a readable zip (its end record asks for ZIP64 values, but no ZIP64 end record precedes it)");
  // A locator pointing elsewhere.
  std::string moved = bytes;
  moved[locator_at + 8] = static_cast<char>(moved[locator_at + 8] + 1);
  EXPECT_NE(error_of(moved).find("where no ZIP64 end record is"), std::string::npos) << error_of(moved);
  // A ZIP64 extra field that is too short for what the header leaves to it.
  std::vector<Member> short_extra = {{.name = "a", .data = "first", .zip64 = true}};
  std::string bad = build_zip(short_extra);
  const std::size_t field_len_at = bad.find("PK\x01\x02") + 46 + 1 + 2;  // the ZIP64 field's own length
  bad[field_len_at] = 16;  // 16 of its 24 bytes: the offset is missing
  EXPECT_NE(error_of(bad).find("central directory entry 0 ('a'): its ZIP64 extra field is too short"), std::string::npos)
      << error_of(bad);
  // All-ones sizes with no ZIP64 extra field at all.
  std::string no_extra = build_zip(short_extra);
  no_extra[no_extra.find("PK\x01\x02") + 30] = 0;  // the extra field's length
  EXPECT_EQ(error_of(no_extra),
            "'z' is not a readable zip (central directory entry 0 ('a') asks for ZIP64 values but has no ZIP64 extra "
            "field)");
}

TEST_F(ZipReader, LyingSizesCrcsMethodsAndFlagsAreErrorsNamingTheMember) {
  const std::string data(10000, 'x');
  // A deflated member declaring more, or fewer, bytes than it inflates to.
  EXPECT_EQ(error_of(build_zip({{.name = "m", .data = data, .deflate = true, .size = 10001}}), "m"),
            "'z': archive member 'm' is corrupt: it inflates to 10000 bytes, not its declared 10001");
  EXPECT_EQ(error_of(build_zip({{.name = "m", .data = data, .deflate = true, .size = 9999}}), "m"),
            "'z': archive member 'm' is corrupt: it inflates to 10000 bytes, not its declared 9999");
  EXPECT_EQ(error_of(build_zip({{.name = "m", .data = data, .deflate = true, .size = 5000}}), "m"),
            "'z': archive member 'm' is corrupt: it inflates to more than its declared 5000 bytes");
  // A deflate stream cut short: the compressed size says fewer bytes than the stream needs.
  const std::string body = deflate_raw(data);
  EXPECT_EQ(error_of(build_zip({{.name = "m", .data = data, .deflate = true,
                                 .compressed = static_cast<std::int64_t>(body.size()) - 5}}),
                     "m"),
            "'z': archive member 'm' is corrupt: its deflate stream ends early");
  // Garbage as a deflate stream.
  EXPECT_NE(error_of(build_zip({{.name = "m", .data = std::string(100, '\xff'), .method = 8}}), "m")
                .find("archive member 'm' is corrupt: "),
            std::string::npos);
  // A wrong CRC, stored and deflated.
  EXPECT_EQ(error_of(build_zip({{.name = "m", .data = "abc", .crc = 1}}), "m"),
            "'z': archive member 'm' is corrupt: its CRC-32 does not match its bytes");
  EXPECT_EQ(error_of(build_zip({{.name = "m", .data = data, .deflate = true, .crc = 1}}), "m"),
            "'z': archive member 'm' is corrupt: its CRC-32 does not match its bytes");
  // Stored, with two different sizes.
  EXPECT_EQ(error_of(build_zip({{.name = "m", .data = "abcd", .size = 3}}), "m"),
            "'z': archive member 'm' is corrupt: stored (uncompressed), but 4 bytes hold 3");
  // Methods and flags Kiln does not read.
  EXPECT_EQ(error_of(build_zip({{.name = "m", .data = "abc", .method = 12}}), "m"),
            "'z': archive member 'm' uses compression method 12 (bzip2), which Kiln does not read (store it, or "
            "deflate it)");
  EXPECT_EQ(error_of(build_zip({{.name = "m", .data = "abc", .flags = 1}}), "m"),
            "'z': archive member 'm' is encrypted, which Kiln does not read");
  // A member claiming terabytes: refused before anything is allocated.
  EXPECT_EQ(error_of(build_zip({{.name = "m", .data = "abc", .zip64 = true, .size = 1ll << 40}}), "m", 16ull << 30),
            "'z': archive member 'm' is 1099511627776 bytes, more than the 17179869184 bytes allowed for it "
            "(docs/IMPORT.md, Limits)");
  EXPECT_NE(error_of(build_zip({{.name = "m", .data = "abc", .deflate = true, .size = 1 << 30}}), "m")
                .find("more than its"),
            std::string::npos);
  // A compressed size running past the member data.
  EXPECT_NE(error_of(build_zip({{.name = "m", .data = "abc", .deflate = true, .compressed = 1 << 20}}), "m")
                .find("run past the member data's end"),
            std::string::npos);
  // A deflated member declaring far more than it holds: an error, after allocating only
  // what inflated (the output grows as it inflates).
  EXPECT_EQ(error_of(build_zip({{.name = "m", .data = random_bytes(50000, 7), .deflate = true, .size = 40000000}}), "m"),
            "'z': archive member 'm' is corrupt: it inflates to 50000 bytes, not its declared 40000000");
  // Two members with one name.
  EXPECT_EQ(error_of(build_zip({{.name = "m", .data = "a"}, {.name = "m", .data = "b"}})),
            "'z' is not a readable zip (it holds two members named 'm')");
}

TEST_F(ZipReader, DamagedEndRecordsAndDirectoriesAreErrors) {
  const std::string good = build_zip({{.name = "a", .data = "first"}, {.name = "b", .data = "second"}});
  ASSERT_EQ(error_of(good, "b"), "(read)");
  const std::size_t end_at = good.size() - 22, cd_at = good.find("PK\x01\x02");
  const auto patch = [](std::string s, std::size_t at, std::uint32_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) s[at + i] = static_cast<char>((v >> (8 * i)) & 0xFF);
    return s;
  };
  const auto with = [&](std::size_t at, std::uint32_t v, int bytes) { return patch(good, at, v, bytes); };
  EXPECT_EQ(error_of(""), "'z' is not a readable zip (it is 0 bytes, shorter than a zip's 22-byte end record)");
  EXPECT_EQ(error_of(std::string(1000, 'x')),
            "'z' is not a readable zip (no end-of-central-directory record: not a zip, or a truncated one)");
  EXPECT_EQ(error_of(with(end_at + 4, 1, 2)),
            "'z' is not a readable zip (it is one part of a split (multi-disk) zip, which Kiln does not read)");
  // More members than the directory can hold.
  EXPECT_EQ(error_of(patch(with(end_at + 8, 60000, 2), end_at + 10, 60000, 2)),
            "'z' is not a readable zip (it declares 60000 members, more than its 94-byte central directory can hold)");
  // Directory offset and size past the end, and wrapping.
  EXPECT_NE(error_of(with(end_at + 16, 0xFFFFFFFF, 4)).find("asks for ZIP64 values"), std::string::npos);
  EXPECT_NE(error_of(with(end_at + 16, 0xFFFFFF00, 4)).find("runs past its end record"), std::string::npos);
  EXPECT_NE(error_of(with(end_at + 16, static_cast<std::uint32_t>(good.size()), 4)).find("runs past its end record"),
            std::string::npos);
  EXPECT_NE(error_of(with(end_at + 12, 0xFFFFFFF0, 4)).find("runs past its end record"), std::string::npos);
  // A directory entry whose signature, name length or local header offset is wrong.
  EXPECT_NE(error_of(with(cd_at, 0x12345678, 4)).find("central directory entry 0 (offset"), std::string::npos);
  EXPECT_NE(error_of(with(cd_at + 28, 5000, 2)).find("runs past the central directory's end"), std::string::npos);
  EXPECT_NE(error_of(with(cd_at + 42, static_cast<std::uint32_t>(good.size()), 4)).find("local header offset"),
            std::string::npos);
  EXPECT_NE(error_of(with(cd_at + 42, 3, 4), "a").find("its local header at offset 3 is missing"), std::string::npos);
  EXPECT_EQ(error_of(with(cd_at + 34, 1, 2)),
            "'z' is not a readable zip (central directory entry 0 ('a') is on another disk of a split zip)");
  // Every truncation and every single-byte change: an error or the right bytes, never a crash.
  for (std::size_t n = 0; n < good.size(); ++n) {
    EXPECT_NE(error_of(good.substr(0, n)).find("not a readable zip"), std::string::npos) << n;
  }
  for (std::size_t at = 0; at < good.size(); ++at) {
    for (const int delta : {1, 0x80, 0xFF}) {
      std::string s = good;
      s[at] = static_cast<char>(s[at] + delta);
      auto zip = ZipArchive::from_bytes(span_of(s), "z");
      if (!zip.ok()) continue;
      for (const std::string& name : (*zip)->names()) {
        auto bytes = (*zip)->read(name, 1 << 20);
        if (bytes.ok() && (name == "a" || name == "b")) {
          EXPECT_EQ(std::string(bytes->begin(), bytes->end()), name == "a" ? "first" : "second") << at;
        }
      }
    }
  }
}

// A sparse file ending in an end record that declares `count` members in a directory of
// `cd_bytes` from offset 0: the caps apply before anything of that size is read.
std::string sparse_zip(const fs::path& path, std::uint64_t cd_bytes, std::uint64_t count) {
  std::string end;
  put32(end, 0x06054b50);
  put16(end, 0);
  put16(end, 0);
  put16(end, count > 0xFFFE ? 0xFFFF : count);
  put16(end, count > 0xFFFE ? 0xFFFF : count);
  put32(end, 0xFFFFFFFF);
  put32(end, 0xFFFFFFFF);
  put16(end, 0);
  std::string z64;  // the ZIP64 end record and locator, right before
  const std::uint64_t z64_at = cd_bytes;
  put32(z64, 0x06064b50);
  put64(z64, 44);
  put16(z64, 45);
  put16(z64, 45);
  put32(z64, 0);
  put32(z64, 0);
  put64(z64, count);
  put64(z64, count);
  put64(z64, cd_bytes);
  put64(z64, 0);
  put32(z64, 0x07064b50);
  put32(z64, 0);
  put64(z64, z64_at);
  put32(z64, 1);
  {
    std::ofstream f(path, std::ios::binary);
    f.seekp(static_cast<std::streamoff>(cd_bytes));
    f << z64 << end;
  }
  return path.string();
}

TEST_F(ZipReader, HugeDirectoriesAreRefusedBeforeTheyAreRead) {
  auto big = ZipArchive::open(sparse_zip(dir_ / "big.zip", 300ull << 20, 1000));
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("its central directory is 314572800 bytes, more than the 67108864 bytes allowed"),
            std::string::npos)
      << big.status().message();
  auto many = ZipArchive::open(sparse_zip(dir_ / "many.zip", 60ull << 20, 1200000));
  ASSERT_FALSE(many.ok());
  EXPECT_NE(many.status().message().find("it declares 1200000 members, more than the 1048576 allowed"),
            std::string::npos)
      << many.status().message();
  // A directory of zeros within the caps: the first entry is not a header.
  auto zeros = ZipArchive::open(sparse_zip(dir_ / "zeros.zip", 1 << 20, 100));
  ASSERT_FALSE(zeros.ok());
  EXPECT_NE(zeros.status().message().find("central directory entry 0 (offset 0) is not a central directory header"),
            std::string::npos)
      << zeros.status().message();
}

// A file that shrinks after it was opened (rewritten in place, truncated by another
// process): a member read then finds its bytes or its local header gone, and says so.
TEST_F(ZipReader, AFileThatShrinksAfterOpeningGivesErrorsNotGarbage) {
  std::string big(200000, ' ');  // random: deflate cannot shrink it below the cut
  std::mt19937 rng(5);
  for (char& c : big) c = static_cast<char>(rng() & 0xFF);
  for (bool stored : {true, false}) {
    SCOPED_TRACE(stored ? "stored" : "deflated");
    const std::string path = (dir_ / (stored ? "shrinks_stored.zip" : "shrinks_deflated.zip")).string();
    ASSERT_TRUE(testing::write_zip(path, {{"a", big}, {"b", "small"}}, stored));
    auto zip = ZipArchive::open(path);
    ASSERT_TRUE(zip.ok()) << zip.status().message();
    EXPECT_EQ(read_member(**zip, "b"), "small");
    // Cut inside member a's data: its local header is still there, its bytes are not.
    ASSERT_EQ(::truncate(path.c_str(), 1000), 0);
    auto a = (*zip)->read("a", 1 << 20);
    ASSERT_FALSE(a.ok());
    EXPECT_EQ(a.status().code(), StatusCode::kInvalidBundle);
    EXPECT_EQ(a.status().message(), "'" + path + "': archive member 'a' is corrupt: its bytes cannot be read");
    // Cut before every local header.
    ASSERT_EQ(::truncate(path.c_str(), 10), 0);
    for (const char* name : {"a", "b"}) {
      auto r = (*zip)->read(name, 1 << 20);
      ASSERT_FALSE(r.ok()) << name;
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidBundle);
      EXPECT_NE(r.status().message().find("is corrupt: its local header at offset"), std::string::npos)
          << r.status().message();
    }
  }
}

TEST_F(ZipReader, AStoredNestedZipIsReadInPlaceFromAFileAndFromMemory) {
  const std::string inner = testing::zip_bytes({{"archive/data.pkl", "pickle"}, {"archive/data/0", "weights"}});
  const std::string path = (dir_ / "outer.zip").string();
  ASSERT_TRUE(testing::write_zip(path, {{"inner.pt", inner}, {"other", "x"}}, /*stored=*/true));
  auto outer = ZipArchive::open(path);
  ASSERT_TRUE(outer.ok()) << outer.status().message();
  auto nested = (*outer)->open_nested("inner.pt", 1 << 20);
  ASSERT_TRUE(nested.ok()) << nested.status().message();
  EXPECT_EQ((*nested)->label(), path + ":inner.pt");
  EXPECT_EQ(read_member(**nested, "archive/data/0"), "weights");
  EXPECT_EQ(read_member(**nested, "archive/data.pkl"), "pickle");
  // Deflated: read into memory first.
  const std::string dpath = (dir_ / "outer_deflated.zip").string();
  ASSERT_TRUE(testing::write_zip(dpath, {{"inner.pt", inner}}, /*stored=*/false));
  auto d = ZipArchive::open(dpath);
  ASSERT_TRUE(d.ok());
  auto dn = (*d)->open_nested("inner.pt", 1 << 20);
  ASSERT_TRUE(dn.ok()) << dn.status().message();
  EXPECT_EQ(read_member(**dn, "archive/data/0"), "weights");
  // A stored nested member whose local header is not where the directory says.
  {
    const std::string outer_bytes = build_zip({{.name = "x", .data = "pad"}, {.name = "inner.pt", .data = inner}});
    std::string moved = outer_bytes;
    const std::size_t second = moved.rfind("PK\x01\x02");  // the outer directory's last entry
    moved[second + 42] = 1;  // local header offset 1 (of the second entry)
    auto z = ZipArchive::from_bytes(span_of(moved), "o");
    ASSERT_TRUE(z.ok()) << z.status().message();
    auto n = (*z)->open_nested("inner.pt", 1 << 20);
    ASSERT_FALSE(n.ok());
    EXPECT_EQ(n.status().message(), "'o': archive member 'inner.pt': its local header at offset 1 is missing");
  }
  // A nested member that is not a zip.
  auto not_zip = (*outer)->open_nested("other", 1 << 20);
  ASSERT_FALSE(not_zip.ok());
  EXPECT_EQ(not_zip.status().message(),
            "'" + path + ":other' is not a readable zip (it is 1 bytes, shorter than a zip's 22-byte end record)");
  // From a file: what the zip says goes with the path.
  const std::string junk = (dir_ / "junk.pt2").string();
  std::ofstream(junk) << "not a zip at all, but longer than twenty-two bytes";
  auto j = ZipArchive::open(junk);
  ASSERT_FALSE(j.ok());
  EXPECT_EQ(j.status().message(), "'" + junk +
                                      "' is not a readable .pt2 archive (zip: no end-of-central-directory record: "
                                      "not a zip, or a truncated one)");
}

}  // namespace
}  // namespace kiln

// Writes the seed corpus of bundle_fuzzer: small bundles using every format feature.
//
//   kiln_make_fuzz_seeds OUT_DIR
//
// raw.kiln, zstd.kiln, raw_nodebug.kiln, zstd_nodebug.kiln: the format sample
// (kiln/export/testing/format_sample.h) written with one shared segment;
// mixed.kiln: the same program with every constant and self-test tensor in its own
// segment, alternating raw and zstd; minor7.kiln: raw.kiln claiming format 1.7.
// Each is at most a few KB, well under the fuzzer's -max_len.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "kiln/export/bundle_writer.h"
#include "kiln/export/testing/format_sample.h"
#include "kiln/format/file_format.h"
#include "kiln/runtime/bundle.h"

namespace {

using Bytes = std::vector<std::uint8_t>;

bool save(const std::filesystem::path& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!out) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    return false;
  }
  std::printf("%s (%zu bytes)\n", path.c_str(), bytes.size());
  return true;
}

kiln::Result<Bytes> sample(kiln::format::Compression compression, bool with_debug) {
  kiln::testing::FormatSampleOptions options;
  options.compression = compression;
  options.with_debug = with_debug;
  return kiln::testing::make_format_sample(options)->bytes();
}

// Re-places all data of a loaded bundle one piece per segment, alternating raw and zstd.
kiln::Result<Bytes> mixed(const kiln::Bundle& bundle) {
  std::unique_ptr<kiln::fb::ProgramT> program(bundle.program().UnPack());
  kiln::BundleWriter writer({.own_segment_threshold = 1});
  int turn = 0;
  auto place = [&](std::uint32_t& segment, std::uint64_t& offset, std::uint64_t nbytes) {
    const auto compression = turn++ % 2 ? kiln::format::Compression::kZstd : kiln::format::Compression::kNone;
    const kiln::DataRef ref = writer.add_data(bundle.data_ref(segment, offset, nbytes), compression);
    segment = ref.segment;
    offset = ref.offset;
  };
  for (auto& c : program->constants) place(c->segment, c->offset, c->nbytes);
  for (auto& test : program->self_tests) {
    for (auto* list : {&test->inputs, &test->outputs}) {
      for (auto& t : *list) {
        if (t->kind == kiln::fb::InputKind::Tensor) place(t->segment, t->offset, t->nbytes);
      }
    }
  }
  return writer.to_bytes(*program);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 1;
  }
  namespace fs = std::filesystem;
  const fs::path dir = argv[1];
  std::error_code ec;
  fs::create_directories(dir, ec);
  using kiln::format::Compression;
  struct Variant {
    const char* name;
    Compression compression;
    bool with_debug;
  };
  const Variant variants[] = {{"raw.kiln", Compression::kNone, true},
                              {"zstd.kiln", Compression::kZstd, true},
                              {"raw_nodebug.kiln", Compression::kNone, false},
                              {"zstd_nodebug.kiln", Compression::kZstd, false}};
  Bytes raw;
  for (const Variant& v : variants) {
    auto bytes = sample(v.compression, v.with_debug);
    if (!bytes.ok()) {
      std::fprintf(stderr, "%s: %s\n", v.name, bytes.status().to_string().c_str());
      return 1;
    }
    if (!save(dir / v.name, *bytes)) return 1;
    if (raw.empty()) raw = *bytes;
  }
  auto bundle = kiln::Bundle::from_bytes(raw);
  if (!bundle.ok()) {
    std::fprintf(stderr, "raw.kiln does not load: %s\n", bundle.status().to_string().c_str());
    return 1;
  }
  auto mix = mixed(**bundle);
  if (!mix.ok() || !kiln::Bundle::from_bytes(*mix).ok() || !save(dir / "mixed.kiln", *mix)) {
    std::fprintf(stderr, "mixed.kiln: cannot build\n");
    return 1;
  }
  kiln::format::FileHeader header = (*bundle)->header();
  header.format_minor = 7;
  const auto encoded = kiln::format::encode_header(header);
  Bytes minor7 = raw;
  std::copy(encoded.begin(), encoded.end(), minor7.begin());
  return save(dir / "minor7.kiln", minor7) ? 0 : 1;
}

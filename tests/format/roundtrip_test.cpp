// Round trips of every schema feature through the writer and the loader.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "kiln/export/bundle_writer.h"
#include "kiln/export/testing/format_sample.h"
#include "kiln/format/kiln_generated.h"
#include "kiln/runtime/bundle.h"
#include "kiln/runtime/expr.h"

namespace kiln {
namespace {

using testing::FormatSampleOptions;
using testing::make_format_sample;

std::unique_ptr<Bundle> load(const std::vector<std::uint8_t>& bytes, LoadOptions options = {}) {
  auto b = Bundle::from_bytes(bytes, options);
  EXPECT_TRUE(b.ok()) << b.status().to_string();
  return b.ok() ? std::move(b).value() : nullptr;
}

TEST(Roundtrip, EveryFeatureSurvivesWriteAndLoad) {
  for (auto compression : {format::Compression::kNone, format::Compression::kZstd}) {
    FormatSampleOptions opts;
    opts.compression = compression;
    opts.extra_weight_bytes = 256 * 1024;
    auto sample = make_format_sample(opts);
    auto bytes = sample->bytes();
    ASSERT_TRUE(bytes.ok()) << bytes.status().to_string();
    auto bundle = load(*bytes, {.verify_segment_checksums = true});
    ASSERT_NE(bundle, nullptr);
    // Unpacking the loaded program gives back exactly the object tree that was written.
    std::unique_ptr<fb::ProgramT> back(bundle->program().UnPack());
    EXPECT_TRUE(*back == sample->program);
    for (std::uint32_t i = 0; i < sample->program.constants.size(); ++i) {
      const auto data = bundle->constant_data(i);
      EXPECT_EQ(data.size(), sample->program.constants[i]->nbytes);
      EXPECT_EQ(reinterpret_cast<std::uintptr_t>(data.data()) % 64, 0u) << "constant " << i;
    }
    EXPECT_EQ(bundle->header().producer, "kiln 0.1.0");
    for (std::size_t s = 0; s < bundle->segment_count(); ++s) {
      EXPECT_EQ(bundle->segment_entry(s).compression, compression);
      EXPECT_EQ(bundle->segment_entry(s).offset % format::kSegmentAlignment, 0u);
    }
  }
}

TEST(Roundtrip, IdenticalConstantsAreStoredOnce) {
  auto sample = make_format_sample();
  const auto& c = sample->program.constants;
  ASSERT_GE(c.size(), 3u);
  EXPECT_EQ(c[0]->segment, c[2]->segment);
  EXPECT_EQ(c[0]->offset, c[2]->offset);
  EXPECT_NE(c[0]->offset, c[1]->offset);
}

// An empty constant takes no room, so it shares its offset with the constant after it; the
// deduplication of a later copy of that constant must not compare against the empty piece
// (it read past it: found by the import mutation test, an upsampling to 0 elements).
TEST(Roundtrip, DeduplicationSkipsEmptyPiecesAtTheSameOffset) {
  BundleWriter writer;
  const std::vector<std::uint8_t> empty, a(64, 7), b(64, 9);
  const DataRef e = writer.add_data(empty);
  const DataRef ra = writer.add_data(a);
  EXPECT_EQ(e.offset, ra.offset);
  const DataRef again = writer.add_data(std::vector<std::uint8_t>(a));
  EXPECT_EQ(again.segment, ra.segment);
  EXPECT_EQ(again.offset, ra.offset);
  EXPECT_EQ(again.nbytes, 64u);
  const DataRef rb = writer.add_data(b);
  EXPECT_NE(rb.offset, ra.offset);
  EXPECT_EQ(writer.add_data(empty).nbytes, 0u);
}

TEST(Roundtrip, ExpressionsPrintAndEvaluate) {
  auto sample = make_format_sample();
  auto bundle = load(*sample->bytes());
  ASSERT_NE(bundle, nullptr);
  const auto& p = bundle->program();
  const auto* main = p.graphs()->Get(0);
  ASSERT_EQ(main->asserts()->size(), 2u);
  EXPECT_EQ(expr_to_string(p, main->asserts()->Get(0)->expr()), "u0 <= 64*s0");
  EXPECT_EQ(expr_to_string(p, main->asserts()->Get(1)->expr()), "s0 % 2 == 0");
  const std::int64_t symbols[] = {10, 3, 700};
  EXPECT_EQ(*evaluate_expr(p, main->asserts()->Get(0)->expr(), symbols), 0);  // 700 <= 640 false
  EXPECT_EQ(*evaluate_expr(p, main->asserts()->Get(1)->expr(), symbols), 1);
  const auto* h = p.signature()->inputs()->Get(3);
  EXPECT_EQ(shape_to_string(p, "f32", {h->shape()->data(), h->shape()->size()}), "f32[2*s0, 32]");
  EXPECT_EQ(expr_to_string(p, p.signature()->outputs()->Get(2)->expr()), "s0 + s1");
}

TEST(Roundtrip, WriteIsAtomicAndLeavesNoTemporaryFiles) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / "kiln_atomic_test";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path target = dir / "model.kiln";
  {
    std::ofstream(target) << "previous content";
  }
  BundleWriteOptions failing;
  failing.fail_after_bytes_for_testing = 200;
  auto sample = make_format_sample();
  BundleWriter writer(failing);
  const Status s = writer.write(target.string(), sample->program);
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_NE(s.message().find("model.kiln"), std::string::npos) << s.message();
  std::ifstream in(target);
  std::string content((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(content, "previous content");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);

  ASSERT_TRUE(sample->write(target.string()).ok());
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);
  auto opened = Bundle::open(target.string(), {.verify_segment_checksums = true});
  EXPECT_TRUE(opened.ok()) << opened.status().to_string();
  const Status missing_dir = sample->write((dir / "no/such/dir/x.kiln").string());
  EXPECT_EQ(missing_dir.code(), StatusCode::kIoError);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

TEST(Roundtrip, OverlappingExpressionRangesAreRejected) {
  // Shared token ranges would let a small file demand unbounded verification work.
  auto sample = testing::make_format_sample();
  auto& exprs = sample->program.exprs;
  const std::size_t last = exprs.size() - 1;
  exprs.push_back(exprs[last]);  // a second expression reusing the last one's tokens
  auto bytes = sample->bytes();
  ASSERT_TRUE(bytes.ok());
  auto b = Bundle::from_bytes(*bytes);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kInvalidBundle);
  EXPECT_NE(b.status().message().find("expression " + std::to_string(last + 1) + ": token ranges overlap"), std::string::npos)
      << b.status().message();
}

}  // namespace
}  // namespace kiln

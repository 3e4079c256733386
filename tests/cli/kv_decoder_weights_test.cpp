// The KV-cache decoder's weights directory (samples/models/kv_decoder_weights.h), what
// `kiln_sample_kv_decode --weights-in DIR` reads: the trained fixture loads, and a missing,
// garbage, truncated or misshapen file, or a bad config.txt, is an error naming the file,
// never a crash, and leaves the model's weights as they were.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "../../samples/models/kv_decoder_weights.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

const std::string kFixture = std::string(KILN_SOURCE_DIR) + "/tests/fixtures/kv_decoder_trained";

class KvDecoderWeights : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kiln_kv_weights_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::copy(kFixture, dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  void write(const std::string& name, const std::string& bytes) {
    std::ofstream(dir_ / name, std::ios::binary | std::ios::trunc) << bytes;
  }
  std::string read(const std::string& name) {
    std::ifstream f(dir_ / name, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), {}};
  }
  // Loads dir_ into a fresh model; expects kInvalidInput naming `file` and containing
  // `detail`, and the model's (random) weights unchanged.
  void expect_load_error(const std::string& file, const std::string& detail) {
    models::KvDecoder model(*models::read_kv_decoder_config(kFixture));
    const std::vector<std::uint8_t> before = model.emb.weight.bytes();
    const Status s = models::load_kv_decoder_weights(model, dir_.string());
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.code(), StatusCode::kInvalidInput) << s.message();
    EXPECT_NE(s.message().find((dir_ / file).string()), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(detail), std::string::npos) << s.message();
    EXPECT_EQ(model.emb.weight.bytes(), before);
  }

  fs::path dir_;
};

TEST_F(KvDecoderWeights, LoadsTheTrainedFixture) {
  const auto config = models::read_kv_decoder_config(dir_.string());
  ASSERT_TRUE(config.ok()) << config.status().message();
  EXPECT_EQ(models::describe(*config), "d 128, 2 layers, 4 heads, vocab 256, max_ctx 128");
  models::KvDecoder model(*config);
  ASSERT_TRUE(models::load_kv_decoder_weights(model, dir_.string()).ok());
  const auto out = read_npy((dir_ / "out.weight.npy").string());
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(model.out.weight.bytes(), out->data);
}

TEST_F(KvDecoderWeights, WriteThenLoadRoundTrips) {
  models::KvDecoder written(*models::read_kv_decoder_config(kFixture));
  const std::string out = (dir_ / "written").string();
  ASSERT_TRUE(models::write_kv_decoder_weights(written, out, "prompt 8\n").ok());
  models::KvDecoder read(*models::read_kv_decoder_config(out));
  ASSERT_TRUE(models::load_kv_decoder_weights(read, out).ok());
  const auto a = written.named_parameters(), b = read.named_parameters();
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i].second.bytes(), b[i].second.bytes()) << a[i].first;
}

TEST_F(KvDecoderWeights, MissingFileIsAnError) {
  fs::remove(dir_ / "att.1.o.weight.npy");
  expect_load_error("att.1.o.weight.npy", "cannot open");
}

TEST_F(KvDecoderWeights, GarbageFileIsAnError) {
  write("mlp.0.2.bias.npy", "this is not a numpy file, just some bytes\n");
  expect_load_error("mlp.0.2.bias.npy", "");
}

TEST_F(KvDecoderWeights, TruncatedFileIsAnError) {
  const std::string bytes = read("att.0.qkv.weight.npy");
  write("att.0.qkv.weight.npy", bytes.substr(0, bytes.size() - 100));
  expect_load_error("att.0.qkv.weight.npy", "truncated");
}

TEST_F(KvDecoderWeights, WrongShapeOrDtypeNamesTheExpectedOne) {
  ASSERT_TRUE(write_npy((dir_ / "att.0.o.weight.npy").string(),
                        HostTensor{DType::kF32, {128, 64}, std::vector<std::uint8_t>(128 * 64 * 4)})
                  .ok());
  expect_load_error("att.0.o.weight.npy", "holds f32[128, 64], expected f32[128, 128] for the model (d 128, 2 layers");
  ASSERT_TRUE(write_npy((dir_ / "att.0.o.weight.npy").string(),
                        HostTensor{DType::kF64, {128, 128}, std::vector<std::uint8_t>(128 * 128 * 8)})
                  .ok());
  expect_load_error("att.0.o.weight.npy", "holds f64[128, 128], expected f32[128, 128]");
}

TEST_F(KvDecoderWeights, BadConfigIsAnError) {
  const auto expect_config_error = [&](const std::string& detail) {
    const auto c = models::read_kv_decoder_config(dir_.string());
    ASSERT_FALSE(c.ok());
    EXPECT_NE(c.status().message().find((dir_ / "config.txt").string()), std::string::npos) << c.status().message();
    EXPECT_NE(c.status().message().find(detail), std::string::npos) << c.status().message();
  };
  write("config.txt", "vocab 256\nd 128\nlayers 2\nmax_ctx 128\n");
  expect_config_error("no 'heads' line");
  write("config.txt", "vocab 256\nd 128\nlayers two\nheads 4\nmax_ctx 128\n");
  expect_config_error("line 3 is not `key integer`");
  write("config.txt", "vocab 256\nd 128\nlayers 2\nheads 3\nmax_ctx 128\n");
  expect_config_error("d 128 is not a multiple of heads 3");
  write("config.txt", "vocab 256\nd 99999999\nlayers 2\nheads 4\nmax_ctx 128\n");
  expect_config_error("outside [1, 65536]");
  fs::remove(dir_ / "config.txt");
  expect_config_error("cannot open");
}

}  // namespace
}  // namespace kiln

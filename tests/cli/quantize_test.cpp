// `kiln quantize`: bundles made with the tracing API (one linear, an MLP, an embedding with
// a tied-shape head) quantized to int8 and int4, verified, run against the f32 bundle, and
// the report, --json and refusals.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli_testutil.h"
#include "quantize_testutil.h"
#include "kiln/export/export.h"
#include "kiln/export/ops.h"
#include "kiln/runtime/bundle.h"
#include "kiln/runtime/program.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

cli_test::CommandResult kiln_cmd(const std::string& args, bool stderr_too = true) {
  return cli_test::shell(std::string(KILN_BIN) + " " + args + (stderr_too ? " 2>&1" : " 2>/dev/null"));
}

HostTensor host(const Tensor& t) { return {t.dtype(), t.concrete_shape(), t.bytes()}; }

double cosine(const std::vector<float>& a, const std::vector<float>& b) {
  double dot = 0, aa = 0, bb = 0;
  for (std::size_t i = 0; i < a.size(); ++i) dot += double(a[i]) * b[i], aa += double(a[i]) * a[i], bb += double(b[i]) * b[i];
  return dot / std::sqrt(aa * bb);
}

class Quantize : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("kiln_quantize_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    // One linear layer (random normal weights), K = 256.
    const Tensor w = Tensor::randn({512, 256}, 11), b = Tensor::randn({512}, 12);
    auto lin = export_program([&](Tensor x) { return linear(x, w, b); },
                              {input("x", Tensor::randn({4, 256}, 13), {Dim("batch", 1, 64)})}, {.name = "linear"});
    ASSERT_TRUE(lin.ok()) << lin.status().message();
    ASSERT_TRUE(lin->save(path("linear.kiln")).ok());
    // An MLP whose second layer has K = 48 (not a multiple of 32) and a matmul with a
    // constant right operand.
    const Tensor w1 = Tensor::randn({48, 128}, 21), w2 = Tensor::randn({64, 48}, 22), m = Tensor::randn({64, 32}, 23);
    auto mlp = export_program([&](Tensor x) { return matmul(linear(relu(linear(x, w1)), w2), m); },
                              {input("x", Tensor::randn({2, 128}, 24))}, {.name = "mlp"});
    ASSERT_TRUE(mlp.ok()) << mlp.status().message();
    ASSERT_TRUE(mlp->save(path("mlp.kiln")).ok());
    // An embedding table gathered by token ids.
    const Tensor table = Tensor::randn({100, 64}, 31);
    std::vector<std::int64_t> ids{3, 99, 0, 42, 42, 7};
    auto emb = export_program([&](Tensor idx) { return embedding(table, idx); },
                              {input("ids", Tensor::from_ints({6}, ids))}, {.name = "embedding"});
    ASSERT_TRUE(emb.ok()) << emb.status().message();
    ASSERT_TRUE(emb->save(path("embedding.kiln")).ok());
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  static std::string path(const std::string& name) { return (dir_ / name).string(); }

  // Runs `file` on `inputs` and returns output 0.
  static std::vector<float> run_bundle(const std::string& file, const std::vector<HostValue>& inputs) {
    return quant_test::run_output0(file, inputs);
  }

  static json quantize_json(const std::string& in, const std::string& out, const std::string& args) {
    const auto r = kiln_cmd("quantize " + path(in) + " -o " + path(out) + " " + args + " --json", false);
    EXPECT_EQ(r.code, 0) << r.out;
    return json::parse(r.out, nullptr, false);
  }

  static fs::path dir_;
};
fs::path Quantize::dir_;

TEST_F(Quantize, Int8LinearKeepsCosineAbove09999AndValidates) {
  const json j = quantize_json("linear.kiln", "linear.q8.kiln", "--weights int8");
  ASSERT_EQ(j["layers"].size(), 1u);
  EXPECT_EQ(j["layers"][0]["op"], "linear");
  EXPECT_EQ(j["layers"][0]["quantized"], true);
  EXPECT_EQ(j["layers"][0]["bytes_before"], 512 * 256 * 4);
  EXPECT_EQ(j["layers"][0]["bytes_after"], 512 * 256 + 512 * 4);  // int8 + one f32 scale per row
  EXPECT_GT(j["layers"][0]["sqnr_db"].get<double>(), 35.0);
  EXPECT_EQ(j["scale_dtype"], "f32");
  EXPECT_LT(j["bundle_bytes_after"].get<double>(), j["bundle_bytes_before"].get<double>() / 3.0);
  // Batch 1 takes the decode path, 16 and 64 the integer GEMM (K = 256: int16 activations
  // per 256-block either way).
  for (std::int64_t batch : {1, 16, 64}) {
    const Tensor x = Tensor::randn({batch, 256}, 98 + static_cast<std::uint64_t>(batch));
    const std::vector<HostValue> in{HostValue::of(host(x))};
    EXPECT_GE(cosine(run_bundle(path("linear.q8.kiln"), in), run_bundle(path("linear.kiln"), in)), 0.9999) << batch;
  }
  const auto v = kiln_cmd("validate " + path("linear.q8.kiln"));
  EXPECT_EQ(v.code, 0) << v.out;
  // The widened self-test tolerance is reported, and recorded.
  ASSERT_EQ(j["self_tests"].size(), 1u);
  const json& out0 = j["self_tests"][0]["outputs"][0];
  EXPECT_GT(out0["atol_after"].get<double>(), out0["atol_before"].get<double>());
  EXPECT_DOUBLE_EQ(out0["atol_after"].get<double>(), 2 * out0["max_abs_diff"].get<double>());
}

TEST_F(Quantize, Int4Group32LinearKeepsCosineAbove099AtBatch1To64) {
  const json j = quantize_json("linear.kiln", "linear.q4.kiln", "--weights int4 --group 32");
  ASSERT_EQ(j["layers"].size(), 1u);
  EXPECT_EQ(j["layers"][0]["bytes_after"], 512 * 128 + 512 * 8 * 2);  // nibbles + f16 scales
  for (std::int64_t batch : {1, 16, 64}) {
    const Tensor x = Tensor::randn({batch, 256}, 100 + static_cast<std::uint64_t>(batch));
    const std::vector<HostValue> in{HostValue::of(host(x))};
    EXPECT_GE(cosine(run_bundle(path("linear.q4.kiln"), in), run_bundle(path("linear.kiln"), in)), 0.99) << batch;
  }
  EXPECT_EQ(kiln_cmd("validate " + path("linear.q4.kiln")).code, 0);
  // Asymmetric groups (zero points) and f32 scales.
  const json z = quantize_json("linear.kiln", "linear.q4z.kiln", "--weights int4 --zero-points --scale-dtype f32");
  EXPECT_EQ(z["layers"][0]["bytes_after"], 512 * 128 + 512 * 8 * 4 + 512 * 8);
  const Tensor x = Tensor::randn({1, 256}, 7);
  const std::vector<HostValue> in{HostValue::of(host(x))};
  EXPECT_GE(cosine(run_bundle(path("linear.q4z.kiln"), in), run_bundle(path("linear.kiln"), in)), 0.99);
  EXPECT_EQ(kiln_cmd("validate " + path("linear.q4z.kiln")).code, 0);
}

TEST_F(Quantize, MlpListsTheLayerItCannotQuantizeAndRunsTheRest) {
  const json j = quantize_json("mlp.kiln", "mlp.q4.kiln", "--weights int4 --group 32");
  ASSERT_EQ(j["layers"].size(), 3u) << j.dump();
  int quantized = 0;
  bool listed = false;
  for (const auto& l : j["layers"]) {
    if (l["quantized"].get<bool>()) {
      ++quantized;
      continue;
    }
    EXPECT_EQ(l["op"], "linear");
    EXPECT_EQ(l["shape"], json::array({64, 48}));
    EXPECT_EQ(l["reason"], "input dim 48 is not a multiple of the group size 32");
    listed = true;
  }
  EXPECT_EQ(quantized, 2);  // the first linear and the matmul
  EXPECT_TRUE(listed);
  const Tensor x = Tensor::randn({2, 128}, 5);
  const std::vector<HostValue> in{HostValue::of(host(x))};
  EXPECT_GE(cosine(run_bundle(path("mlp.q4.kiln"), in), run_bundle(path("mlp.kiln"), in)), 0.98);
  EXPECT_EQ(kiln_cmd("validate " + path("mlp.q4.kiln")).code, 0);
  // With groups of 16 every layer is quantized; int8 per channel quantizes all three too.
  EXPECT_EQ(quantize_json("mlp.kiln", "mlp.q4g16.kiln", "--weights int4 --group 16")["layers"].size(), 3u);
  const json j8 = quantize_json("mlp.kiln", "mlp.q8.kiln", "--weights int8");
  for (const auto& l : j8["layers"]) EXPECT_TRUE(l["quantized"].get<bool>()) << l.dump();
  EXPECT_GE(cosine(run_bundle(path("mlp.q8.kiln"), in), run_bundle(path("mlp.kiln"), in)), 0.9999);
  // --ops limits the ops considered.
  const json only = quantize_json("mlp.kiln", "mlp.lin.kiln", "--weights int8 --ops matmul");
  ASSERT_EQ(only["layers"].size(), 1u);
  EXPECT_EQ(only["layers"][0]["op"], "matmul");
}

TEST_F(Quantize, EmbeddingRowsGatherFromInt8AndInt4Tables) {
  std::vector<std::int64_t> ids{5, 0, 99, 17, 17, 64};
  const std::vector<HostValue> in{HostValue::of(host(Tensor::from_ints({6}, ids)))};
  const auto want = run_bundle(path("embedding.kiln"), in);
  const json j8 = quantize_json("embedding.kiln", "embedding.q8.kiln", "--weights int8");
  EXPECT_EQ(j8["layers"][0]["op"], "embedding");
  EXPECT_GE(cosine(run_bundle(path("embedding.q8.kiln"), in), want), 0.9999);
  // With --weights int4 the table stays int8 unless --embed-head says int4.
  const json j4 = quantize_json("embedding.kiln", "embedding.q4.kiln", "--weights int4 --embed-head int4");
  EXPECT_EQ(j4["layers"][0]["format"], "int4 g32");
  EXPECT_GE(cosine(run_bundle(path("embedding.q4.kiln"), in), want), 0.99);
  EXPECT_EQ(kiln_cmd("validate " + path("embedding.q4.kiln")).code, 0);
}

TEST_F(Quantize, Int4KeepsTheEmbeddingTablesAndTheOutputHeadInt8UnlessEmbedHeadSaysOtherwise) {
  // The MLP's matmul produces the graph output: its head. Default with int4: int8 per channel.
  const json j = quantize_json("mlp.kiln", "mlp.mixed.kiln", "--weights int4 --group 16");
  EXPECT_EQ(j["embed_head"], "int8");
  ASSERT_EQ(j["layers"].size(), 3u) << j.dump();
  for (const auto& l : j["layers"]) {
    EXPECT_TRUE(l["quantized"].get<bool>()) << l.dump();
    EXPECT_EQ(l["format"], l["op"] == "matmul" ? "int8" : "int4 g16") << l.dump();
    if (l["op"] == "matmul") {
      EXPECT_EQ(l["bytes_after"], 64 * 32 + 32 * 4) << l.dump();  // [N=32, K=64] int8, f32 scales
    }
  }
  const Tensor x = Tensor::randn({2, 128}, 5);
  const std::vector<HostValue> in{HostValue::of(host(x))};
  EXPECT_GE(cosine(run_bundle(path("mlp.mixed.kiln"), in), run_bundle(path("mlp.kiln"), in)), 0.98);
  EXPECT_EQ(kiln_cmd("validate " + path("mlp.mixed.kiln")).code, 0);
  // --embed-head int4: every layer int4; f32: the head is listed as kept f32, with the reason.
  const json all4 = quantize_json("mlp.kiln", "mlp.all4.kiln", "--weights int4 --group 16 --embed-head int4");
  for (const auto& l : all4["layers"]) {  // (a range-for over a temporary's member would dangle)
    EXPECT_EQ(l["format"], "int4 g16") << l.dump();
  }
  const json f = quantize_json("mlp.kiln", "mlp.headf32.kiln", "--weights int4 --group 16 --embed-head f32");
  int kept = 0;
  for (const auto& l : f["layers"]) {
    if (l["quantized"].get<bool>()) continue;
    ++kept;
    EXPECT_EQ(l["op"], "matmul");
    EXPECT_EQ(l["reason"], "the output head (its result is a graph output), kept f32 by --embed-head f32");
  }
  EXPECT_EQ(kept, 1);
  // A lone linear is the whole model, not a head: int4 as asked.
  EXPECT_EQ(quantize_json("linear.kiln", "linear.lone.kiln", "--weights int4")["layers"][0]["format"], "int4 g32");
  // Embedding tables: int8 by default with int4, f32 on request.
  EXPECT_EQ(quantize_json("embedding.kiln", "embedding.mixed.kiln", "--weights int4")["layers"][0]["format"], "int8");
  const json e = quantize_json("embedding.kiln", "embedding.f32.kiln", "--weights int4 --embed-head f32");
  EXPECT_EQ(e["layers"][0]["reason"], "an embedding table, kept f32 by --embed-head f32");
}

TEST_F(Quantize, ScaleSearchLowersTheWeightErrorAgainstMaxRangeScales) {
  for (const std::string args : {"--weights int4 --group 32", "--weights int4 --group 32 --zero-points", "--weights int8"}) {
    const json mse = quantize_json("linear.kiln", "linear.mse.kiln", args);
    const json max = quantize_json("linear.kiln", "linear.max.kiln", args + " --scales max");
    EXPECT_EQ(mse["scales"], "mse");
    EXPECT_EQ(max["scales"], "max");
    // Never worse (the max-range scale is the search's first candidate); on normal weights
    // int4 gains ~0.5 dB.
    const double gain = mse["layers"][0]["sqnr_db"].get<double>() - max["layers"][0]["sqnr_db"].get<double>();
    EXPECT_GE(gain, 0.0) << args;
    if (args.find("int4") != std::string::npos) {
      EXPECT_GT(gain, 0.2) << args;
    }
    const Tensor x = Tensor::randn({1, 256}, 77);
    const std::vector<HostValue> in{HostValue::of(host(x))};
    EXPECT_GE(cosine(run_bundle(path("linear.mse.kiln"), in), run_bundle(path("linear.kiln"), in)),
              args == "--weights int8" ? 0.9999 : 0.99)
        << args;
  }
}

TEST_F(Quantize, TextReportShowsLayersSqnrBytesAndWidenedTolerances) {
  const auto r = kiln_cmd("quantize " + path("mlp.kiln") + " -o " + path("mlp.report.kiln") + " --weights int4");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("SQNR dB"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("bytes before"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("not quantized (kept f32):"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(linear [64, 48]): input dim 48 is not a multiple of the group size 32"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("2 layer(s) quantized, 1 kept f32"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tolerances widened from the measured quantization error"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("; embedding tables and output head int8; scales searched for the least squared error"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("format"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("int4 g32"), std::string::npos) << r.out;
}

TEST_F(Quantize, RefusesAnAlreadyQuantizedBundleAndBadOptions) {
  ASSERT_EQ(kiln_cmd("quantize " + path("linear.kiln") + " -o " + path("once.kiln") + " --weights int8").code, 0);
  auto r = kiln_cmd("quantize " + path("once.kiln") + " -o " + path("twice.kiln") + " --weights int4");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("is already quantized (constant"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("is stored as Int8): quantize the f32 bundle instead"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(path("twice.kiln")));
  r = kiln_cmd("quantize " + path("linear.kiln") + " -o " + path("linear.kiln") + " --weights int8");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("refusing to write the quantized bundle over its own input"), std::string::npos) << r.out;
  r = kiln_cmd("quantize " + path("linear.kiln") + " -o " + path("x.kiln") + " --weights int4 --group 31");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("--group 31: int4 groups must be even"), std::string::npos) << r.out;
  r = kiln_cmd("quantize " + path("linear.kiln") + " -o " + path("x.kiln") + " --weights int8 --zero-points");
  EXPECT_EQ(r.code, 1);
  r = kiln_cmd("quantize " + path("linear.kiln") + " -o " + path("x.kiln") + " --weights int2");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("--weights must be int8 or int4"), std::string::npos) << r.out;
  r = kiln_cmd("quantize " + path("linear.kiln") + " -o " + path("x.kiln") + " --weights int8 --ops linear,softmax");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("--ops: unknown op 'softmax'"), std::string::npos) << r.out;
  r = kiln_cmd("quantize " + path("linear.kiln") + " -o " + path("x.kiln") + " --weights int4 --embed-head int2");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("--embed-head must be int8, int4 or f32"), std::string::npos) << r.out;
  r = kiln_cmd("quantize " + path("linear.kiln") + " -o " + path("x.kiln") + " --weights int4 --scales rms");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("--scales must be mse or max"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(path("x.kiln")));
  r = kiln_cmd("quantize " + path("missing.kiln") + " -o " + path("x.kiln") + " --weights int8 --json", false);
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("\"error\""), std::string::npos) << r.out;
}

TEST_F(Quantize, InspectPlacementReportsTheCpuFallbackForVulkan) {
  ASSERT_EQ(kiln_cmd("quantize " + path("linear.kiln") + " -o " + path("placement.kiln") + " --weights int8").code, 0);
  const auto r = kiln_cmd("inspect " + path("placement.kiln") + " --placement --backend auto");
  EXPECT_EQ(r.code, 0) << r.out;
  // The linear_q node's placement line names the CPU whatever the backend (no Vulkan kernel).
  const std::size_t at = r.out.find("linear_q ", r.out.find("placement"));
  ASSERT_NE(at, std::string::npos) << r.out;
  const std::string line = r.out.substr(at, r.out.find('\n', at) - at);
  EXPECT_NE(line.find("cpu"), std::string::npos) << line;
}

}  // namespace
}  // namespace kiln

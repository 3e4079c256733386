// `kiln quantize --calibrate DIR` (GPTQ): a traced MLP whose inputs are correlated, as a
// network's are; its layers quantized with and without calibration and compared with the
// f32 bundle on inputs the calibration never saw; the report; refusals of bad folders.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "cli_testutil.h"
#include "quantize_testutil.h"
#include "kiln/export/export.h"
#include "kiln/export/ops.h"
#include "kiln/runtime/bundle.h"
#include "kiln/runtime/npy.h"
#include "kiln/runtime/program.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr std::int64_t kIn = 128, kRank = 12;

cli_test::CommandResult kiln_cmd(const std::string& args, bool stderr_too = true) {
  return cli_test::shell(std::string(KILN_BIN) + " " + args + (stderr_too ? " 2>&1" : " 2>/dev/null"));
}

// `rows` inputs x = z A + 0.05 noise (A fixed: 12 factors drive the 128 channels).
HostTensor correlated(std::int64_t rows, unsigned sample_seed) {
  const std::vector<float> x = quant_test::correlated_inputs(rows, kIn, kRank, 7, sample_seed);
  HostTensor t{DType::kF32, {rows, kIn}, std::vector<std::uint8_t>(x.size() * 4)};
  std::memcpy(t.data.data(), x.data(), t.data.size());
  return t;
}

std::vector<float> run_bundle(const std::string& file, const HostTensor& x) {
  return quant_test::run_output0(file, {HostValue::of(x)});
}

std::string file_bytes(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

double sqnr_db(const std::vector<float>& want, const std::vector<float>& got) {
  double signal = 0, noise = 0;
  for (std::size_t i = 0; i < want.size(); ++i) signal += double(want[i]) * want[i], noise += (double(want[i]) - got[i]) * (double(want[i]) - got[i]);
  return 10 * std::log10(signal / noise);
}

class QuantizeCalibrate : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("kiln_quantize_calibrate_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    // x -> linear (reads the graph input) -> gelu -> linear -> matmul with a constant B.
    const Tensor w1 = Tensor::randn({256, kIn}, 41), b1 = Tensor::randn({256}, 42), w2 = Tensor::randn({96, 256}, 43),
                 m = Tensor::randn({96, 64}, 44);
    auto mlp = export_program([&](Tensor x) { return matmul(linear(gelu(linear(x, w1, b1)), w2), m); },
                              {input("x", Tensor::randn({4, kIn}, 45), {Dim("batch", 1, 512)})}, {.name = "mlp"});
    ASSERT_TRUE(mlp.ok()) << mlp.status().message();
    ASSERT_TRUE(mlp->save(path("mlp.kiln")).ok());
    // Eight calibration runs of 64 rows each.
    for (int run = 0; run < 8; ++run) {
      const fs::path run_dir = dir_ / "calib" / ("run" + std::to_string(run));
      fs::create_directories(run_dir);
      ASSERT_TRUE(write_npy((run_dir / "x.npy").string(), correlated(64, 100 + run)).ok());
    }
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  static std::string path(const std::string& name) { return (dir_ / name).string(); }
  static fs::path dir_;
};
fs::path QuantizeCalibrate::dir_;

TEST_F(QuantizeCalibrate, GptqLowersTheOutputErrorOnInputsTheCalibrationDidNotSee) {
  const auto plain = kiln_cmd("quantize " + path("mlp.kiln") + " -o " + path("mlp.q4.kiln") + " --weights int4 --json", false);
  ASSERT_EQ(plain.code, 0) << plain.out;
  const auto r = kiln_cmd("quantize " + path("mlp.kiln") + " -o " + path("mlp.gptq.kiln") + " --weights int4 --embed-head int4 --calibrate " +
                              path("calib") + " --json",
                          false);
  ASSERT_EQ(r.code, 0) << r.out;
  const json j = json::parse(r.out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << r.out;
  EXPECT_EQ(j["calibration"]["runs"], 8);
  EXPECT_EQ(j["calibration"]["passes"], 1);
  ASSERT_EQ(j["layers"].size(), 3u);
  for (const json& l : j["layers"]) {
    SCOPED_TRACE(l.dump());
    EXPECT_EQ(l["quantized"], true);
    const json& c = l["calibration"];
    ASSERT_EQ(c["calibrated"], true);
    EXPECT_EQ(c["rows"], 8 * 64);  // every run's 64 rows reached each layer
    EXPECT_GT(c["output_sqnr_db"].get<double>(), c["nearest_output_sqnr_db"].get<double>());
    EXPECT_GT(c["gptq_rows"].get<std::int64_t>(), 0);
    EXPECT_EQ(c["damp_fraction"], 0.01);
  }
  // The first layer reads the graph input, whose channels are correlated: the largest gain.
  const json& first = j["layers"][0]["calibration"];
  EXPECT_GT(first["output_sqnr_db"].get<double>(), first["nearest_output_sqnr_db"].get<double>() + 3.0);
  // On inputs the calibration never saw: closer to f32 than rounding to nearest.
  const HostTensor x = correlated(32, 999);
  const std::vector<float> want = run_bundle(path("mlp.kiln"), x);
  const double gptq = sqnr_db(want, run_bundle(path("mlp.gptq.kiln"), x));
  const double nearest = sqnr_db(want, run_bundle(path("mlp.q4.kiln"), x));
  RecordProperty("gptq_sqnr_db", std::to_string(gptq));
  RecordProperty("nearest_sqnr_db", std::to_string(nearest));
  EXPECT_GT(gptq, nearest + 2.0) << "GPTQ " << gptq << " dB, rounding to nearest " << nearest << " dB";
  EXPECT_EQ(kiln_cmd("validate " + path("mlp.gptq.kiln")).code, 0);
  // With 1 MiB for moments, the second layer's (K 256: 2 x 256^2 doubles, 1 MiB) fit no
  // other layer's beside them: three passes over the runs, the same bytes.
  const auto small = kiln_cmd("quantize " + path("mlp.kiln") + " -o " + path("mlp.gptq3.kiln") +
                                  " --weights int4 --embed-head int4 --calibration-memory 1 --calibrate " + path("calib") + " --json",
                              false);
  ASSERT_EQ(small.code, 0) << small.out;
  EXPECT_EQ(json::parse(small.out, nullptr, false)["calibration"]["passes"], 3) << small.out;
  EXPECT_EQ(file_bytes(path("mlp.gptq3.kiln")), file_bytes(path("mlp.gptq.kiln")));
  const auto inspect = kiln_cmd("inspect " + path("mlp.gptq.kiln"));
  EXPECT_NE(inspect.out.find("GPTQ on 8 calibration run(s)"), std::string::npos) << inspect.out;
}

TEST_F(QuantizeCalibrate, TextReportShowsTheOutputSqnrOfBothWaysAndWhyALayerWasNotCalibrated) {
  // An embedding feeding a linear: the table cannot be calibrated (its input is ids).
  const Tensor table = Tensor::randn({50, 64}, 51), w = Tensor::randn({32, 64}, 52);
  std::vector<std::int64_t> ids{1, 2, 3};
  auto model = export_program([&](Tensor i) { return linear(embedding(table, i), w); },
                              {input("ids", Tensor::from_ints({3}, ids))}, {.name = "emb"});
  ASSERT_TRUE(model.ok()) << model.status().message();
  ASSERT_TRUE(model->save(path("emb.kiln")).ok());
  const fs::path run = dir_ / "emb_calib";
  fs::create_directories(run);  // the folder itself is the one run
  std::vector<std::int64_t> tokens;
  for (int i = 0; i < 3; ++i) tokens.push_back((i * 7) % 50);
  HostTensor t{DType::kI64, {3}, std::vector<std::uint8_t>(tokens.size() * 8)};
  std::memcpy(t.data.data(), tokens.data(), t.data.size());
  ASSERT_TRUE(write_npy((run / "ids.npy").string(), t).ok());
  const auto r = kiln_cmd("quantize " + path("emb.kiln") + " -o " + path("emb.q4.kiln") + " --weights int4 --embed-head int4 --calibrate " +
                          run.string());
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("GPTQ on 1 calibration run(s) of " + run.string()), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("out dB"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("RTN dB"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("not calibrated: an embedding table (its input is token ids)"), std::string::npos) << r.out;
}

TEST_F(QuantizeCalibrate, ALayerTooWideForTheMomentsBudgetIsRoundedToNearestAndSaysWhy) {
  // K 512: 2 x 512^2 doubles = 4 MiB of moments, over --calibration-memory 1.
  const Tensor w = Tensor::randn({32, 512}, 61);
  auto model = export_program([&](Tensor x) { return linear(x, w); }, {input("x", Tensor::randn({2, 512}, 62))}, {.name = "wide"});
  ASSERT_TRUE(model.ok()) << model.status().message();
  ASSERT_TRUE(model->save(path("wide.kiln")).ok());
  const fs::path run = dir_ / "wide_calib";
  fs::create_directories(run);
  ASSERT_TRUE(write_npy((run / "x.npy").string(), HostTensor{DType::kF32, {2, 512}, std::vector<std::uint8_t>(2 * 512 * 4, 0)}).ok());
  const auto r = kiln_cmd("quantize " + path("wide.kiln") + " -o " + path("wide.q4.kiln") +
                              " --weights int4 --calibration-memory 1 --calibrate " + run.string() + " --json",
                          false);
  ASSERT_EQ(r.code, 0) << r.out;
  const json j = json::parse(r.out, nullptr, false);
  const json& c = j["layers"][0]["calibration"];
  EXPECT_EQ(c["calibrated"], false) << r.out;
  EXPECT_EQ(c["reason"], "its input dim 512 needs 4 MiB of input moments, more than --calibration-memory 1 MiB") << r.out;
  EXPECT_EQ(j["calibration"]["passes"], 0) << r.out;
}

TEST_F(QuantizeCalibrate, LayersReadingTheSameInputShareOneMeasurement) {
  // q, k and v read x; o reads their sum. All have K 256 (1 MiB of moments each).
  const Tensor wq = Tensor::randn({256, 256}, 71), wk = Tensor::randn({256, 256}, 72), wv = Tensor::randn({256, 256}, 73),
               wo = Tensor::randn({64, 256}, 74);
  auto model = export_program([&](Tensor x) { return linear(add(add(linear(x, wq), linear(x, wk)), linear(x, wv)), wo); },
                              {input("x", Tensor::randn({2, 256}, 75), {Dim("batch", 1, 512)})}, {.name = "qkv"});
  ASSERT_TRUE(model.ok()) << model.status().message();
  ASSERT_TRUE(model->save(path("qkv.kiln")).ok());
  const fs::path run = dir_ / "qkv_calib";
  fs::create_directories(run);
  const std::vector<float> x = quant_test::correlated_inputs(64, 256, 12, 7, 5);
  HostTensor t{DType::kF32, {64, 256}, std::vector<std::uint8_t>(x.size() * 4)};
  std::memcpy(t.data.data(), x.data(), t.data.size());
  ASSERT_TRUE(write_npy((run / "x.npy").string(), t).ok());
  auto quantize = [&](const std::string& out, const std::string& memory) {
    const auto r = kiln_cmd("quantize " + path("qkv.kiln") + " -o " + path(out) + " --weights int4 --embed-head int4 " + memory +
                                " --calibrate " + run.string() + " --json",
                            false);
    EXPECT_EQ(r.code, 0) << r.out;
    return json::parse(r.out, nullptr, false);
  };
  // 1 MiB holds one layer's moments: q, k and v share them (one pass), o takes a second.
  const json small = quantize("qkv.small.kiln", "--calibration-memory 1");
  EXPECT_EQ(small["calibration"]["passes"], 2) << small.dump();
  ASSERT_EQ(small["layers"].size(), 4u);
  for (const json& l : small["layers"]) EXPECT_EQ(l["calibration"]["rows"], 64) << l.dump();
  const json large = quantize("qkv.large.kiln", "");
  EXPECT_EQ(large["calibration"]["passes"], 1) << large.dump();
  EXPECT_EQ(file_bytes(path("qkv.small.kiln")), file_bytes(path("qkv.large.kiln")));
}

TEST_F(QuantizeCalibrate, RowsWithNonFiniteValuesAreSkippedAndCounted) {
  const fs::path run = dir_ / "nan_calib";
  fs::create_directories(run);
  HostTensor x = correlated(64, 300);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(x.data.data() + 5 * kIn * 4 + 7 * 4, &nan, 4);  // row 5
  ASSERT_TRUE(write_npy((run / "x.npy").string(), x).ok());
  const auto r = kiln_cmd("quantize " + path("mlp.kiln") + " -o " + path("mlp.nan.kiln") + " --weights int4 --calibrate " +
                              run.string() + " --json",
                          false);
  ASSERT_EQ(r.code, 0) << r.out;
  const json j = json::parse(r.out, nullptr, false);
  // The NaN reaches every layer's input through the row it is in.
  for (const json& l : j["layers"]) {
    EXPECT_EQ(l["calibration"]["rows"], 63) << l.dump();
    EXPECT_EQ(l["calibration"]["skipped_rows"], 1) << l.dump();
  }
  const auto text = kiln_cmd("quantize " + path("mlp.kiln") + " -o " + path("mlp.nan2.kiln") + " --weights int4 --calibrate " +
                             run.string());
  EXPECT_NE(text.out.find("(1 calibration rows with non-finite values skipped)"), std::string::npos) << text.out;
}

TEST_F(QuantizeCalibrate, RefusesFoldersThatAreNotRunsAndLeavesNoOutput) {
  const std::string base = "quantize " + path("mlp.kiln") + " -o " + path("bad.kiln") + " --weights int4 --calibrate ";
  auto r = kiln_cmd(base + path("no_such_folder"));
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("no_such_folder: not a directory (a folder of runs, each holding <input>.npy)"), std::string::npos) << r.out;
  r = kiln_cmd(base + path("mlp.kiln"));  // a file
  EXPECT_EQ(r.code, 1) << r.out;
  r = kiln_cmd(base + path("calib") + " --calibration-memory 0");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("--calibration-memory 0 must be between 1 and 2^30 MiB"), std::string::npos) << r.out;
  // A run without the input's file.
  fs::create_directories(dir_ / "missing" / "run0");
  r = kiln_cmd(base + path("missing"));
  EXPECT_EQ(r.code, 3) << r.out;
  EXPECT_NE(r.out.find("calibration run " + path("missing/run0") + ": " + path("missing/run0/x.npy") + " is missing (input 'x')"),
            std::string::npos)
      << r.out;
  // The wrong inner dim: checked like kiln run's inputs.
  fs::create_directories(dir_ / "shape" / "run0");
  HostTensor narrow{DType::kF32, {2, 3}, std::vector<std::uint8_t>(24, 0)};
  ASSERT_TRUE(write_npy(path("shape/run0/x.npy"), narrow).ok());
  r = kiln_cmd(base + path("shape"));
  EXPECT_EQ(r.code, 3) << r.out;
  EXPECT_NE(r.out.find("calibration run " + path("shape/run0")), std::string::npos) << r.out;
  // x.npy a directory, a FIFO, and truncated.
  fs::create_directories(dir_ / "hostile" / "a" / "x.npy");
  r = kiln_cmd(base + path("hostile"));
  EXPECT_EQ(r.code, 3) << r.out;
  fs::create_directories(dir_ / "fifo" / "run0");
  ASSERT_EQ(::mkfifo(path("fifo/run0/x.npy").c_str(), 0600), 0);
  r = kiln_cmd(base + path("fifo"));
  EXPECT_EQ(r.code, 3) << r.out;
  fs::create_directories(dir_ / "short" / "run0");
  fs::copy_file(dir_ / "calib" / "run0" / "x.npy", dir_ / "short" / "run0" / "x.npy");
  fs::resize_file(dir_ / "short" / "run0" / "x.npy", 200);
  r = kiln_cmd(base + path("short"));
  EXPECT_EQ(r.code, 3) << r.out;
  EXPECT_FALSE(fs::exists(path("bad.kiln")));
}

}  // namespace
}  // namespace kiln

// `kiln run` and `kiln validate` on bundles exported with the C++ API.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstring>
#include <filesystem>

#include "../../samples/models/models.h"
#include "kiln/export/testing/format_sample.h"
#include "kiln/runtime/npy.h"
#include "cli_testutil.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

using Cmd = kiln::cli_test::CommandResult;

Cmd kiln_cmd(const std::string& args, const std::string& env = "") {
  return kiln::cli_test::shell((env.empty() ? "" : "env " + env + " ") + std::string(KILN_BIN) + " " + args + " 2>&1");
}

HostTensor host(const Tensor& t) { return {t.dtype(), t.concrete_shape(), t.bytes()}; }

class RunValidate : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("kiln_run_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    model_ = new models::Mlp(64, 32, 10);
    auto ep = export_program([](Tensor x) { return (*model_)(x); }, {input("x", Tensor::randn({4, 64}), {Dim("batch", 2, 1024)})},
                             {.name = "mlp", .self_tests = 2});
    ASSERT_TRUE(ep.ok()) << ep.status().message();
    ASSERT_TRUE(ep->save(path("mlp.kiln")).ok());
    // The same program with a wrong golden output.
    ir::Program bad = ep->program();
    auto golden = std::make_shared<std::vector<std::uint8_t>>(*bad.self_tests[0].outputs[0].data);
    float v;
    std::memcpy(&v, golden->data(), 4);
    v += 1.0f;
    std::memcpy(golden->data(), &v, 4);
    bad.self_tests[0].outputs[0].data = golden;
    ASSERT_TRUE(save_bundle(bad, path("bad_golden.kiln")).ok());
    auto sample = testing::make_format_sample();
    sample->program.op_names[4] = "frobnicate";  // the sample's "sin"
    ASSERT_TRUE(sample->write(path("unknown_op.kiln")).ok());
  }
  static void TearDownTestSuite() {
    fs::remove_all(dir_);
    delete model_;
  }
  static std::string path(const std::string& name) { return (dir_ / name).string(); }
  static fs::path dir_;
  static models::Mlp* model_;
};
fs::path RunValidate::dir_;
models::Mlp* RunValidate::model_ = nullptr;

TEST_F(RunValidate, RunWritesOutputsThatMatchEager) {
  const Tensor x = Tensor::randn({3, 64}, 5);
  ASSERT_TRUE(write_npy(path("x.npy"), host(x)).ok());
  const Cmd r = kiln_cmd("run " + path("mlp.kiln") + " --input x=" + path("x.npy") + " --output-dir " + path("out"));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("variant: generic"), std::string::npos) << r.out;
  auto out = read_npy(path("out/out0.npy"));
  ASSERT_TRUE(out.ok()) << out.status().message();
  EXPECT_EQ(out->shape, (std::vector<std::int64_t>{3, 10}));
  EXPECT_EQ(out->data, (*model_)(x).bytes());
  // Positional input, JSON output.
  const Cmd j = kiln_cmd("run " + path("mlp.kiln") + " " + path("x.npy") + " -o " + path("out2") + " --json");
  EXPECT_EQ(j.code, 0) << j.out;
  EXPECT_NE(j.out.find("\"variant\": \"generic\""), std::string::npos) << j.out;
}

TEST_F(RunValidate, BadInputsExitThree) {
  ASSERT_TRUE(write_npy(path("big.npy"), host(Tensor::randn({2000, 64}))).ok());
  Cmd r = kiln_cmd("run " + path("mlp.kiln") + " --input x=" + path("big.npy") + " -o " + path("o"));
  EXPECT_EQ(r.code, 3) << r.out;
  EXPECT_NE(r.out.find("kiln: error: input x.size(0) = 2000 (batch, s0) is outside the range [2, 1024]"), std::string::npos) << r.out;
  r = kiln_cmd("run " + path("mlp.kiln") + " --input y=3");
  EXPECT_EQ(r.code, 3) << r.out;
  EXPECT_NE(r.out.find("unknown input 'y' (the bundle's inputs: x)"), std::string::npos) << r.out;
  r = kiln_cmd("run " + path("mlp.kiln"));
  EXPECT_EQ(r.code, 3) << r.out;
  EXPECT_NE(r.out.find("missing input 'x'"), std::string::npos) << r.out;
  std::FILE* f = std::fopen(path("junk.npy").c_str(), "wb");
  std::fputs("not numpy", f);
  std::fclose(f);
  r = kiln_cmd("run " + path("mlp.kiln") + " --input x=" + path("junk.npy"));
  EXPECT_EQ(r.code, 3) << r.out;
  EXPECT_NE(r.out.find("not a .npy file (bad magic)"), std::string::npos) << r.out;
}

TEST_F(RunValidate, BenchReportsLatencyAndProfile) {
  ASSERT_TRUE(write_npy(path("xb.npy"), host(Tensor::randn({8, 64}))).ok());
  const Cmd r = kiln_cmd("bench " + path("mlp.kiln") + " --input x=" + path("xb.npy") + " --iters 5 --warmup 1 --profile --json");
  ASSERT_EQ(r.code, 0) << r.out;
  for (const char* key : {"\"median_ms\"", "\"p10_ms\"", "\"p90_ms\"", "\"load_ms\"", "\"peak_bytes\"", "\"variant\": \"generic\"",
                          "\"op\": \"linear\"", "\"source\": \"models.h:"}) {
    EXPECT_NE(r.out.find(key), std::string::npos) << key << "\n" << r.out;
  }
}

// bench names the CPU kernels' instruction sets; KILN_CPU_ISA=baseline forces the portable ones.
TEST_F(RunValidate, BenchNamesTheCpuKernelsInstructionSets) {
  ASSERT_TRUE(write_npy(path("xi.npy"), host(Tensor::randn({2, 64}))).ok());
  Cmd r = kiln_cmd("bench " + path("mlp.kiln") + " --input x=" + path("xi.npy") + " --iters 2 --warmup 0", "KILN_CPU_ISA=baseline");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("cpu       gemm baseline, conv baseline, vector baseline\n"), std::string::npos) << r.out;
  r = kiln_cmd("bench " + path("mlp.kiln") + " --input x=" + path("xi.npy") + " --iters 2 --warmup 0 --json");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("\"cpu_kernels\": \"gemm "), std::string::npos) << r.out;
}

TEST_F(RunValidate, VulkanIsUnavailableExitFour) {
  // No device matches: `vulkan` is an error (exit 4), `auto` falls back to the CPU with a note.
  const Cmd r = kiln_cmd("run " + path("mlp.kiln") + " --backend vulkan", "KILN_VULKAN_DEVICE=no-such-gpu-xyz");
  EXPECT_EQ(r.code, 4) << r.out;
  ASSERT_TRUE(write_npy(path("xv.npy"), host(Tensor::randn({3, 64}))).ok());
  const Cmd a = kiln_cmd("run " + path("mlp.kiln") + " --backend auto --input x=" + path("xv.npy") + " -o " + path("outv"),
                         "KILN_VULKAN_DEVICE=no-such-gpu-xyz");
  EXPECT_EQ(a.code, 0) << a.out;
  EXPECT_NE(a.out.find("kiln: note: using the CPU backend: "), std::string::npos) << a.out;
}

TEST_F(RunValidate, InspectPlacementShowsBackendsAndFusedActivations) {
  Cmd r = kiln_cmd("inspect " + path("mlp.kiln") + " --placement");
  ASSERT_EQ(r.code, 0) << r.out;
  for (const char* want : {"placement  cpu backend", "linear+relu", "fused into node 0", "models.h:"}) {
    EXPECT_NE(r.out.find(want), std::string::npos) << want << "\n" << r.out;
  }
  r = kiln_cmd("inspect --json " + path("mlp.kiln") + " --placement");
  ASSERT_EQ(r.code, 0) << r.out;
  for (const char* want : {"\"placement\"", "\"op\": \"linear+relu\"", "\"fused_away\": true", "\"backend\": \"cpu\""}) {
    EXPECT_NE(r.out.find(want), std::string::npos) << want << "\n" << r.out;
  }
  // Without --placement nothing is loaded, so no placement section.
  EXPECT_EQ(kiln_cmd("inspect " + path("mlp.kiln")).out.find("placement"), std::string::npos);
  EXPECT_EQ(kiln_cmd("inspect " + path("mlp.kiln") + " --placement --backend vulkan", "KILN_VULKAN_DEVICE=no-such-gpu-xyz").code, 4);
  r = kiln_cmd("inspect " + path("mlp.kiln") + " --placement --backend auto", "KILN_VULKAN_DEVICE=no-such-gpu-xyz");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("placement  cpu backend (using the CPU backend: "), std::string::npos) << r.out;
  r = kiln_cmd("inspect " + path("mlp.kiln") + " --placement --backend tpu");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("unknown backend 'tpu' (cpu, vulkan, auto)"), std::string::npos) << r.out;
}

TEST_F(RunValidate, UnsupportedOpsExitSix) {
  const Cmd r = kiln_cmd("run " + path("unknown_op.kiln"));
  EXPECT_EQ(r.code, 6) << r.out;
  EXPECT_NE(r.out.find("this build cannot run 1 op used by the bundle: frobnicate (1 node)"), std::string::npos) << r.out;
}

TEST_F(RunValidate, ValidateReplaysSelfTests) {
  Cmd r = kiln_cmd("validate " + path("mlp.kiln"));
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("self-test case0: passed (variant generic)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("self-test case1: passed"), std::string::npos) << r.out;
  r = kiln_cmd("validate " + path("bad_golden.kiln"));
  EXPECT_EQ(r.code, 5) << r.out;
  EXPECT_NE(r.out.find("self-test case0: FAILED"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("output 0: MISMATCH  max |diff| 1 (1 elements out of tolerance)"), std::string::npos) << r.out;
  r = kiln_cmd("validate --json " + path("bad_golden.kiln"));
  EXPECT_EQ(r.code, 5);
  EXPECT_NE(r.out.find("\"passed\": false"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace kiln

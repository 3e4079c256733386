// The `kiln` binary as users call it: exit codes (docs/CLI.md) and output.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include "cli_testutil.h"

namespace {

namespace fs = std::filesystem;

using CmdResult = kiln::cli_test::CommandResult;

CmdResult run(const std::string& args, bool merge_stderr = true) {
  const std::string cmd = std::string(KILN_BIN) + " " + args + (merge_stderr ? " 2>&1" : " 2>/dev/null");
  return kiln::cli_test::shell(cmd);
}

// `args` run with the environment assignments `env` (shell syntax) before the command.
CmdResult run_env(const std::string& env, const std::string& args) {
  return kiln::cli_test::shell(env + " " + std::string(KILN_BIN) + " " + args + " 2>&1");
}

class CliTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("kiln_cli_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    ASSERT_EQ(std::system((std::string(KILN_MAKE_SAMPLE) + " " + (dir_ / "s.kiln").string()).c_str()), 0);
    ASSERT_EQ(std::system((std::string(KILN_MAKE_SAMPLE) + " " + (dir_ / "z.kiln").string() + " --zstd --strip-debug").c_str()), 0);
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  static std::string path(const char* name) { return (dir_ / name).string(); }
  static fs::path dir_;
};
fs::path CliTest::dir_;

TEST_F(CliTest, VersionNamesFormatVersions) {
  const CmdResult r = run("--version");
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("kiln 0.1.0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("bundle format: reads 1.0-1.2, writes 1.2"), std::string::npos) << r.out;
}

TEST_F(CliTest, AnUnknownValueOfAnEnvironmentSwitchIsWarnedAbout) {
  CmdResult r = run_env("KILN_WINOGRAD_WEIGHTS=chached KILN_LAYOUT=plain", "inspect " + path("s.kiln"));
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("kiln: warning: KILN_WINOGRAD_WEIGHTS=chached is not one of streamed, cached; it has the default's effect"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("KILN_LAYOUT"), std::string::npos) << r.out;  // a known value
  // The value is printed with its control characters escaped.
  r = run_env("KILN_CPU_ISA=\"$(printf 'avx\\033')\"", "inspect " + path("s.kiln"));
  EXPECT_NE(r.out.find("KILN_CPU_ISA=avx\\x1b is not one of baseline, avx2"), std::string::npos) << r.out;
}

TEST_F(CliTest, UnknownFlagIsUsageError) {
  EXPECT_EQ(run("inspect --no-such-flag x").code, 1);
  EXPECT_EQ(run("no-such-command").code, 1);
  EXPECT_EQ(run("inspect").code, 1);
}

TEST_F(CliTest, InspectShowsEverything) {
  const CmdResult r = run("inspect " + path("s.kiln") + " --graph");
  ASSERT_EQ(r.code, 0) << r.out;
  for (const char* needle : {"format     1.2", "s0  backed  [2, 1024]  hint 8  (batch)", "u0  unbacked  [0, inf]",
                             "x: f32[s0, 32]", "n: int (dynamic) Sym(s1)", "flag: int (static) = 7", "h: f32[2*s0, 32]",
                             "total: Sym(s0 + s1)", "[main] u0 <= 64*s0  (after node 2)  model.cpp:43",
                             "batch % 16 == 0  [s0 % 16 == 0] -> graph 3", "zstd", "none",
                             "lin: \"f32[s0, 64]\" = linear(x, fc.weight, fc.bias)  # model.cpp:41 (fc)",
                             "idx: \"i64[u0, 2]\" = nonzero(y)", "r: \"f32[(s0//2), 64]\" = reshape(y, shape=[(s0//2), 64])",
                             "f: \"f32[s1, 2]\" = full(shape=[s1, 2], value=1.5, dtype=f32, attr3=3", "assert s0 % 2 == 0  # model.cpp:45",
                             "z: \"f32[s0, 64]\" = cond(pred, y, graph 1, graph 2)", "debug info present"}) {
    if (std::string(needle) == "zstd" || std::string(needle) == "none") continue;
    EXPECT_NE(r.out.find(needle), std::string::npos) << "missing: " << needle << "\n" << r.out;
  }
}

TEST_F(CliTest, InspectJsonIsOneObject) {
  const CmdResult r = run("inspect --json " + path("z.kiln"), /*merge_stderr=*/false);
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["format"], "1.2");
  EXPECT_EQ(j["inputs"][0]["shape"], nlohmann::json::array({"s0", "32"}));
  EXPECT_EQ(j["inputs"][1]["dynamism"], "Dynamic");
  EXPECT_EQ(j["outputs"][2]["expr"], "s0 + s1");
  EXPECT_EQ(j["specializations"][0]["predicate"], "s0 % 16 == 0");
  EXPECT_EQ(j["segments"][0]["compression"], "zstd");
  EXPECT_EQ(j["debug_info"], false);
  EXPECT_EQ(j["self_tests"][0], "case0");
}

TEST_F(CliTest, InvalidBundleExitsTwoWithMessage) {
  std::ofstream(path("bad.kiln")) << "definitely not a bundle, but long enough to have a header ......"
                                     "..................................................................";
  CmdResult r = run("inspect " + path("bad.kiln"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("kiln: error: " + path("bad.kiln") + ": not a Kiln bundle (bad magic)"), std::string::npos) << r.out;
  r = run("inspect " + path("missing.kiln"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("cannot open"), std::string::npos) << r.out;
  r = run("inspect --json " + path("bad.kiln"), /*merge_stderr=*/false);
  EXPECT_EQ(r.code, 2);
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["error"]["code"], "invalid_bundle");
  EXPECT_EQ(j["error"]["exit_code"], 2);
}

TEST_F(CliTest, TruncatedBundleExitsTwo) {
  std::ifstream in(path("s.kiln"), std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  std::ofstream(path("t.kiln"), std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  const CmdResult r = run("inspect " + path("t.kiln"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.out.find("truncated"), std::string::npos) << r.out;
}

}  // namespace

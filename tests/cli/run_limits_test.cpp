// `--max-memory` and the run limits of `kiln run`, `kiln bench`, `kiln validate`
// (docs/CLI.md, "Run limits"): an int input implying a huge tensor is exit 3 naming the
// input, the node, the bytes and the limit, never a bad_alloc abort.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>
#include "cli_testutil.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

using Cmd = kiln::cli_test::CommandResult;

Cmd kiln_cmd(const std::string& args) {
  return kiln::cli_test::shell(std::string(KILN_BIN) + " " + args + " 2>&1");
}

class RunLimits : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("kiln_limits_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    const Cmd import = kiln_cmd("import " + fixture("model.pt2") + " -o " + (dir_ / "dyn_int.kiln").string());
    ASSERT_EQ(import.code, 0) << import.out;
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  // dyn_int: (x * n, arange(n) + x.size(0)) with x f32[s77], n a SymInt input.
  static std::string fixture(const std::string& name) { return std::string(KILN_SOURCE_DIR) + "/tests/fixtures/torch_export/dyn_int/" + name; }
  static std::string run_args(const std::string& n) {
    return (dir_ / "dyn_int.kiln").string() + " --input x=" + fixture("cases/valid0.in.x.npy") + " --input n=" + n + " -o " +
           (dir_ / "out").string();
  }
  static fs::path dir_;
};
fs::path RunLimits::dir_;

TEST_F(RunLimits, HugeIntInputIsExit3NamingTheInputNodeAndBytes) {
  Cmd r = kiln_cmd("run " + run_args("1000000000000"));
  EXPECT_EQ(r.code, 3) << r.out;
  EXPECT_NE(r.out.find("input n = 1000000000000 needs 7.3 TiB for node 'arange'"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(", over the memory limit "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" (--max-memory)"), std::string::npos) << r.out;
  // Sizes that do not fit in 64 bits: the input is wrong, not the bundle (was exit 2).
  r = kiln_cmd("run " + run_args("4611686018427387904"));
  EXPECT_EQ(r.code, 3) << r.out;
  EXPECT_NE(r.out.find("input n = 4611686018427387904 needs more than 16.0 EiB for node 'arange'"), std::string::npos) << r.out;
}

TEST_F(RunLimits, MaxMemoryTakesSuffixesAndBoundsRunBenchValidate) {
  Cmd r = kiln_cmd("run " + run_args("1000") + " --max-memory 1G");
  EXPECT_EQ(r.code, 0) << r.out;
  r = kiln_cmd("run " + run_args("100000000") + " --max-memory 512M");
  EXPECT_EQ(r.code, 3) << r.out;
  EXPECT_NE(r.out.find("input n = 100000000 needs 762.9 MiB for node 'arange'"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("over the memory limit 512.0 MiB (--max-memory)"), std::string::npos) << r.out;
  r = kiln_cmd("bench " + (dir_ / "dyn_int.kiln").string() + " --input x=" + fixture("cases/valid0.in.x.npy") +
               " --input n=100000 --iters 1 --warmup 0 --max-memory 64K");
  EXPECT_EQ(r.code, 3) << r.out;
  EXPECT_NE(r.out.find("over the memory limit 64.0 KiB (--max-memory)"), std::string::npos) << r.out;
  r = kiln_cmd("validate " + (dir_ / "dyn_int.kiln").string() + " --max-memory 8GiB");
  EXPECT_EQ(r.code, 0) << r.out;
  r = kiln_cmd("run " + run_args("3") + " --max-memory 12X");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("'12X' is not a size"), std::string::npos) << r.out;
  r = kiln_cmd("run " + run_args("3") + " --max-memory 99999999999999999999");
  EXPECT_EQ(r.code, 1) << r.out;
}

}  // namespace
}  // namespace kiln

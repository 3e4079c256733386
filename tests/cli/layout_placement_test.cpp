// The CPU layout pass from the command line: `kiln inspect --placement` shows which nodes
// run on the blocked NCHW8c layout (text and JSON), KILN_LAYOUT=plain turns it off, and the
// convnet fixture (dynamic batch, H = W = 32*s) validates against its goldens either way.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli_testutil.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

kiln::cli_test::CommandResult kiln_cmd(const std::string& args, const std::string& env = "") {
  return kiln::cli_test::shell((env.empty() ? "" : "env " + env + " ") + std::string(KILN_BIN) + " " + args + " 2>&1");
}

class LayoutPlacement : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = fs::temp_directory_path() / ("kiln_layout_placement_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    bundle = (dir / "convnet.kiln").string();
    const auto imported = kiln_cmd("import " + (fx / "model.pt2").string() + " -o " + bundle + " --self-test-dir " + fx.string());
    ASSERT_EQ(imported.code, 0) << imported.out;
  }
  void TearDown() override { fs::remove_all(dir); }
  const fs::path fx = fs::path(KILN_SOURCE_DIR) / "tests/fixtures/torch_export/convnet";
  fs::path dir;
  std::string bundle;
};

TEST_F(LayoutPlacement, InspectShowsTheBlockedRegionAndValidatePassesWithAndWithoutIt) {
  const auto text = kiln_cmd("inspect " + bundle + " --placement");
  ASSERT_EQ(text.code, 0) << text.out;
  EXPECT_NE(text.out.find("nchw -> nchw8c"), std::string::npos) << text.out;  // the stem reads the plain image
  EXPECT_NE(text.out.find(" nchw8c "), std::string::npos) << text.out;
  const auto js = kiln::cli_test::shell(std::string(KILN_BIN) + " inspect --json " + bundle + " --placement");
  ASSERT_EQ(js.code, 0) << js.out;
  const auto j = nlohmann::json::parse(js.out);
  int blocked = 0, reorders = 0;
  for (const auto& n : j["placement"]["graphs"][0]["nodes"]) {
    if (!n.contains("layout")) continue;
    ++blocked;
    if (n["layout"].get<std::string>().find("->") != std::string::npos) ++reorders;
  }
  EXPECT_GE(blocked, 6);
  EXPECT_EQ(reorders, 2);  // in at the stem, out at the global pool: none in between
  const auto plain = kiln_cmd("inspect " + bundle + " --placement", "KILN_LAYOUT=plain");
  ASSERT_EQ(plain.code, 0) << plain.out;
  EXPECT_EQ(plain.out.find("nchw8c"), std::string::npos) << plain.out;
  for (const char* env : {"", "KILN_LAYOUT=plain"}) {
    const auto v = kiln_cmd("validate " + bundle, env);
    EXPECT_EQ(v.code, 0) << env << "\n" << v.out;
  }
}

// An inverted bottleneck's expansion folded into its depthwise conv (mobilenet_v3_small at
// width 0.25, a torch.export archive): the depthwise node reads `conv1x1>conv2d+...`, the
// expansion and its activation's nodes `folded into node N` (JSON folded_into: that node),
// and the bundle validates against its goldens with and without the fold.
TEST(LayoutPlacementFold, InspectShowsFoldedExpansionsAndValidatePassesEitherWay) {
  const fs::path fx = fs::path(KILN_SOURCE_DIR) / "tests/fixtures/torch_extra/mobilenet_v3";
  const fs::path dir = fs::temp_directory_path() / ("kiln_layout_fold_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string bundle = (dir / "mbv3.kiln").string();
  const auto imported = kiln_cmd("import " + (fx / "model.core.pt2").string() + " -o " + bundle + " --self-test-dir " + fx.string());
  ASSERT_EQ(imported.code, 0) << imported.out;
  const auto text = kiln_cmd("inspect " + bundle + " --placement");
  ASSERT_EQ(text.code, 0) << text.out;
  EXPECT_NE(text.out.find("conv1x1>conv2d+hardswish"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("folded into node "), std::string::npos) << text.out;
  const auto js = kiln::cli_test::shell(std::string(KILN_BIN) + " inspect --json " + bundle + " --placement");
  ASSERT_EQ(js.code, 0) << js.out;
  const auto nodes = nlohmann::json::parse(js.out)["placement"]["graphs"][0]["nodes"];
  int folded = 0;
  for (const auto& n : nodes) {
    if (!n.contains("folded_into")) continue;
    const int into = n["folded_into"].get<int>();
    ASSERT_GT(into, n["node"].get<int>());
    const std::string op = nodes[static_cast<std::size_t>(into)]["op"].get<std::string>();
    if (op.rfind("conv1x1>conv2d", 0) == 0) ++folded;
  }
  EXPECT_GE(folded, 9);  // nine bottlenecks expand (the first one has no expansion)
  const auto unfolded = kiln_cmd("inspect " + bundle + " --placement", "KILN_FUSE_EXPANSIONS=0");
  ASSERT_EQ(unfolded.code, 0) << unfolded.out;
  EXPECT_EQ(unfolded.out.find("conv1x1>"), std::string::npos) << unfolded.out;
  for (const char* env : {"", "KILN_FUSE_EXPANSIONS=0"}) {
    const auto v = kiln_cmd("validate " + bundle, env);
    EXPECT_EQ(v.code, 0) << env << "\n" << v.out;
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kiln

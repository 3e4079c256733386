// Where a stateful bundle's state lives between runs: `kiln inspect --placement` names it
// (host memory on the CPU; the Vulkan device's memory when every node reading or updating
// it runs there), and `kiln bench --backend vulkan` shows a decode step uploading its inputs,
// not the KV caches. The Vulkan parts skip (exit 4) without a device.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli_testutil.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

kiln::cli_test::CommandResult kiln_cmd(const std::string& args) { return kiln::cli_test::shell(std::string(KILN_BIN) + " " + args + " 2>&1"); }

class StatePlacement : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = fs::temp_directory_path() / ("kiln_state_placement_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    bundle = (dir / "kv.kiln").string();
    const auto imported = kiln_cmd("import " + (fx / "model.core.pt2").string() + " -o " + bundle);
    ASSERT_EQ(imported.code, 0) << imported.out;
  }
  void TearDown() override { fs::remove_all(dir); }
  const fs::path fx = fs::path(KILN_SOURCE_DIR) / "tests/fixtures/torch_export_stateful/kv_decoder";
  fs::path dir;
  std::string bundle;
};

TEST_F(StatePlacement, InspectPlacementSaysWhereEachStateLivesBetweenRuns) {
  const auto cpu = kiln_cmd("inspect " + bundle + " --placement");
  ASSERT_EQ(cpu.code, 0) << cpu.out;
  EXPECT_NE(cpu.out.find("  state between runs\n    k_cache_0: host memory\n    v_cache_0: host memory\n"), std::string::npos) << cpu.out;
  const auto vk = kiln_cmd("inspect " + bundle + " --placement --backend vulkan");
  if (vk.code == 4) GTEST_SKIP() << "no Vulkan device: " << vk.out;
  ASSERT_EQ(vk.code, 0) << vk.out;
  EXPECT_NE(vk.out.find("    k_cache_0: vulkan device memory (downloaded when read)\n"), std::string::npos) << vk.out;
  EXPECT_NE(vk.out.find("    v_cache_1: vulkan device memory (downloaded when read)\n"), std::string::npos) << vk.out;
  const auto js = kiln::cli_test::shell(std::string(KILN_BIN) + " inspect --json " + bundle + " --placement --backend vulkan");
  ASSERT_EQ(js.code, 0) << js.out;
  const auto states = nlohmann::json::parse(js.out)["placement"]["states"];
  ASSERT_EQ(states.size(), 4u);
  EXPECT_EQ(states[0]["name"], "k_cache_0");
  EXPECT_EQ(states[0]["backend"], "vulkan");
}

TEST_F(StatePlacement, AVulkanDecodeStepUploadsItsInputsNotTheCaches) {
  const std::string step = " --input ids=" + (fx / "cases/prefill5_decode3.1.in.ids.npy").string() +
                           " --input input_pos=" + (fx / "cases/prefill5_decode3.1.in.input_pos.npy").string();
  const auto r = kiln::cli_test::shell(std::string(KILN_BIN) + " bench " + bundle + step + " --backend vulkan --iters 3 --warmup 1 --json");
  if (r.code == 4) GTEST_SKIP() << "no Vulkan device: " << r.out;
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  // The caches (4 x 16 KiB) stay on the device: 16 bytes of inputs, the CPU-computed mask
  // and the residual after it go up (344 bytes); 66,960 did when the caches were on the host.
  EXPECT_LT(j["bytes_uploaded"].get<std::uint64_t>(), 1024u);
  EXPECT_LT(j["bytes_downloaded"].get<std::uint64_t>(), 2048u);
  EXPECT_EQ(j["state_bytes_written_per_run"].get<std::uint64_t>(), 4u * 4 * 16 * 4);
}

}  // namespace
}  // namespace kiln

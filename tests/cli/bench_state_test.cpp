// `kiln bench` on a stateful bundle: the bytes of state each run writes
// (`state_bytes_written_per_run`): a KV cache decode step writes its new rows, not the cache.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli_testutil.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

kiln::cli_test::CommandResult kiln_cmd(const std::string& args) { return kiln::cli_test::shell(std::string(KILN_BIN) + " " + args + " 2>&1"); }

TEST(BenchState, ReportsTheStateBytesADecodeStepWrites) {
  const fs::path dir = fs::temp_directory_path() / ("kiln_bench_state_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path fx = fs::path(KILN_SOURCE_DIR) / "tests/fixtures/torch_export_stateful/kv_decoder";
  const std::string bundle = (dir / "kv.kiln").string();
  const auto imported = kiln_cmd("import " + (fx / "model.core.pt2").string() + " -o " + bundle);
  ASSERT_EQ(imported.code, 0) << imported.out;
  const std::string step = " --input ids=" + (fx / "cases/prefill5_decode3.1.in.ids.npy").string() +
                           " --input input_pos=" + (fx / "cases/prefill5_decode3.1.in.input_pos.npy").string();
  const auto r = kiln::cli_test::shell(std::string(KILN_BIN) + " bench " + bundle + step + " --iters 3 --warmup 1 --json");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  // 4 caches f32[1, 4, 64, 16] (64 KiB each); one position: 4 heads x 16 floats per cache.
  EXPECT_EQ(j["state_bytes_written_per_run"].get<std::uint64_t>(), 4u * 4 * 16 * 4);
  const auto text = kiln_cmd("bench " + bundle + step + " --iters 2 --warmup 0");
  ASSERT_EQ(text.code, 0) << text.out;
  EXPECT_NE(text.out.find("state     1024 bytes written per run\n"), std::string::npos) << text.out;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kiln

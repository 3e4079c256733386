// Self-test sequences end to end: `kiln import --self-test-dir` embeds a manifest's
// `sequences` (steps run one after another on one state), `kiln validate` replays them step
// by step, resetting the state between sequences, and a malformed manifest is exit 1.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_testutil.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Cmd = kiln::cli_test::CommandResult;

Cmd kiln_cmd(const std::string& args) { return kiln::cli_test::shell(std::string(KILN_BIN) + " " + args + " 2>&1"); }
Cmd kiln_stdout(const std::string& args) { return kiln::cli_test::shell(std::string(KILN_BIN) + " " + args + " 2>/dev/null"); }

fs::path stateful(const std::string& model) { return fs::path(KILN_SOURCE_DIR) / "tests/fixtures/torch_export_stateful" / model; }

class SequenceCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kiln_sequence_cli_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& n) const { return (dir_ / n).string(); }
  // The counter's manifest with absolute paths, edited by `edit`, in its own folder.
  std::string counter_manifest(const std::function<void(json&)>& edit) {
    json m = json::parse(std::ifstream(stateful("counter") / "manifest.json"));
    for (json& seq : m["sequences"]) {
      for (json& step : seq["steps"]) {
        for (auto& [name, file] : step["inputs"].items()) file = (stateful("counter") / file.get<std::string>()).string();
        for (json& file : step["outputs"]) file = (stateful("counter") / file.get<std::string>()).string();
      }
    }
    edit(m);
    fs::create_directories(path("cases"));
    std::ofstream(path("cases/manifest.json")) << m.dump();
    return path("cases");
  }
  fs::path dir_;
};

TEST_F(SequenceCli, ImportEmbedsTheSequencesAndValidateReplaysThemStepByStepForBothIrs) {
  for (const char* model : {"counter", "kv_decoder"}) {
    for (const char* file : {"model.core.pt2", "model.pt2"}) {
      SCOPED_TRACE(std::string(model) + "/" + file);
      const std::string bundle = path(std::string(model) + ".kiln");
      const json m = json::parse(std::ifstream(stateful(model) / "manifest.json"));
      std::size_t steps = 0;
      for (const json& seq : m["sequences"]) steps += seq["steps"].size();
      const Cmd imported = kiln_cmd("import " + (stateful(model) / file).string() + " -o " + bundle + " --self-test-dir " + stateful(model).string());
      ASSERT_EQ(imported.code, 0) << imported.out;
      EXPECT_NE(imported.out.find(std::to_string(steps) + " self-test(s)"), std::string::npos) << imported.out;
      // inspect lists every sequence with its steps in order (JSON and text).
      const Cmd shown = kiln_stdout("inspect --json " + bundle);
      ASSERT_EQ(shown.code, 0) << shown.out;
      const json info = json::parse(shown.out);
      ASSERT_EQ(info["sequences"].size(), m["sequences"].size());
      for (std::size_t q = 0; q < m["sequences"].size(); ++q) {
        const json& seq = m["sequences"][q];
        EXPECT_EQ(info["sequences"][q]["name"], seq["name"]);
        ASSERT_EQ(info["sequences"][q]["steps"].size(), seq["steps"].size());
        EXPECT_EQ(info["sequences"][q]["steps"][1], seq["name"].get<std::string>() + "[1]");
        const Cmd text = kiln_stdout("inspect " + bundle);
        EXPECT_NE(text.out.find("  sequence " + seq["name"].get<std::string>() + ": " + std::to_string(seq["steps"].size()) +
                                " steps\n"),
                  std::string::npos)
            << text.out;
      }
      const Cmd v = kiln_stdout("validate " + bundle + " --json");
      ASSERT_EQ(v.code, 0) << v.out;
      const json report = json::parse(v.out);
      EXPECT_TRUE(report["passed"].get<bool>());
      ASSERT_EQ(report["self_tests"].size(), steps);
      std::size_t k = 0;
      for (const json& seq : m["sequences"]) {
        for (std::size_t j = 0; j < seq["steps"].size(); ++j, ++k) {
          const json& t = report["self_tests"][k];
          EXPECT_EQ(t["sequence"], seq["name"]);
          EXPECT_EQ(t["step"], j);
          EXPECT_EQ(t["name"], seq["name"].get<std::string>() + "[" + std::to_string(j) + "]");
          EXPECT_TRUE(t["passed"].get<bool>()) << t.dump();
        }
      }
    }
  }
}

// The counter's steps only match when each sees the state the step before left: two copies
// of the sequence pass only if the state is reset between them, steps out of order fail.
TEST_F(SequenceCli, EverySequenceStartsFromTheInitialStateAndStepsDependOnOrder) {
  const std::string twice = counter_manifest([](json& m) {
    json copy = m["sequences"][0];
    copy["name"] = "again";
    m["sequences"].push_back(copy);
    m["valid"] = json::array({m["sequences"][0]["steps"][0]});  // an independent case: step 0's goldens
  });
  const std::string bundle = path("counter.kiln");
  ASSERT_EQ(kiln_cmd("import " + stateful("counter").string() + "/model.pt2 -o " + bundle + " --self-test-dir " + twice).code, 0);
  Cmd v = kiln_cmd("validate " + bundle);
  EXPECT_EQ(v.code, 0) << v.out;
  EXPECT_NE(v.out.find("self-test again[2]: passed"), std::string::npos) << v.out;
  EXPECT_NE(v.out.find("self-test case0: passed"), std::string::npos) << v.out;
  const std::string swapped = counter_manifest([](json& m) { std::swap(m["sequences"][0]["steps"][0], m["sequences"][0]["steps"][1]); });
  ASSERT_EQ(kiln_cmd("import " + stateful("counter").string() + "/model.pt2 -o " + bundle + " --self-test-dir " + swapped).code, 0);
  v = kiln_cmd("validate " + bundle);
  EXPECT_EQ(v.code, 5) << v.out;
  EXPECT_NE(v.out.find("self-test three_calls[0]: FAILED"), std::string::npos) << v.out;
  EXPECT_NE(v.out.find("self-test three_calls[2]: passed"), std::string::npos) << v.out;  // the sum of all three is order-free
}

TEST_F(SequenceCli, AMalformedSequenceManifestIsAUsageErrorAndWritesNothing) {
  const std::string dir = counter_manifest([](json& m) { m["sequences"][0]["steps"] = "all of them"; });
  const Cmd r = kiln_cmd("import " + stateful("counter").string() + "/model.core.pt2 -o " + path("x.kiln") + " --self-test-dir " + dir);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("sequence 'three_calls': needs a non-empty 'steps' list"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(path("x.kiln")));
}

}  // namespace
}  // namespace kiln

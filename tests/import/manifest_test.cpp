// The self-test manifest reader (add_self_tests_from_manifest): `valid` cases and
// `sequences` of steps become SelfTestCases (steps carry their sequence's name), and every
// malformed manifest is a kUsage error naming the problem, never a crash or a partial list.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kiln/export/import_pt2.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const fs::path kCounter = fs::path(KILN_FIXTURES_DIR) / ".." / "torch_export_stateful" / "counter";

class Manifest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kiln_manifest_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    auto ep = import_pt2((kCounter / "model.core.pt2").string());
    ASSERT_TRUE(ep.ok()) << ep.status().message();
    program_ = ep->program();
  }
  void TearDown() override { fs::remove_all(dir_); }
  // Writes `m` as the manifest and reads it into a copy of the counter program.
  Status read(const json& m, ir::Program* out = nullptr) {
    const fs::path p = dir_ / "manifest.json";
    std::ofstream(p) << m.dump();
    ir::Program copy = program_;
    Status st = add_self_tests_from_manifest(copy, p.string());
    if (out) *out = std::move(copy);
    return st;
  }
  // One step of the fixture's sequence, with absolute paths.
  static json step(int j) {
    const std::string c = (kCounter / "cases" / ("three_calls." + std::to_string(j))).string();
    return {{"inputs", {{"x", c + ".in.x.npy"}}}, {"outputs", json::array({c + ".out.0.npy", c + ".out.1.npy"})}};
  }
  void expect_refused(const json& m, const std::string& part) {
    SCOPED_TRACE(m.dump().substr(0, 200));
    ir::Program p;
    Status st = read(m, &p);
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.code(), StatusCode::kUsage) << st.message();
    EXPECT_NE(st.message().find(part), std::string::npos) << "'" << part << "' not in: " << st.message();
  }
  fs::path dir_;
  ir::Program program_;
};

TEST_F(Manifest, TheFixturesSequencesBecomeStepsNamedAfterTheirSequence) {
  ir::Program p = program_;
  ASSERT_TRUE(add_self_tests_from_manifest(p, (kCounter / "manifest.json").string()).ok());
  ASSERT_EQ(p.self_tests.size(), 3u);
  for (std::size_t j = 0; j < 3; ++j) {
    EXPECT_EQ(p.self_tests[j].name, "three_calls[" + std::to_string(j) + "]");
    EXPECT_EQ(p.self_tests[j].sequence, "three_calls");
    EXPECT_EQ(p.self_tests[j].inputs.size(), 1u);
    EXPECT_EQ(p.self_tests[j].outputs.size(), 2u);
  }
  // Valid cases stay independent and come first; an unnamed sequence is "sequenceK".
  ASSERT_TRUE(read({{"valid", json::array({step(0)})}, {"sequences", {{{"steps", json::array({step(0), step(1)})}}}}}, &p).ok());
  ASSERT_EQ(p.self_tests.size(), 3u);
  EXPECT_EQ(p.self_tests[0].name, "case0");
  EXPECT_EQ(p.self_tests[0].sequence, "");
  EXPECT_EQ(p.self_tests[2].name, "sequence0[1]");
  EXPECT_EQ(p.self_tests[2].sequence, "sequence0");
}

TEST_F(Manifest, MalformedSequencesAreRefusedNamingTheProblem) {
  expect_refused(json::object(), "has no 'valid' or 'sequences' list");
  expect_refused({{"sequences", "three_calls"}}, "has no 'valid' or 'sequences' list");
  expect_refused({{"valid", json::array()}, {"sequences", 3}}, "'sequences' is not a list");
  expect_refused({{"sequences", {7}}}, "sequence 0: not an object");
  expect_refused({{"sequences", {{{"name", "s"}}}}}, "sequence 's': needs a non-empty 'steps' list");
  expect_refused({{"sequences", {{{"name", "s"}, {"steps", json::array()}}}}}, "sequence 's': needs a non-empty 'steps' list");
  expect_refused({{"sequences", {{{"name", "s"}, {"steps", {{"inputs", "x"}}}}}}}, "sequence 's': needs a non-empty 'steps' list");
  expect_refused({{"sequences", {{{"name", "s"}, {"steps", json::array({step(0), 5})}}}}}, "sequence 's' step 1: needs an 'inputs' object and an 'outputs' list");
  expect_refused({{"sequences", {{{"name", 12}, {"steps", json::array({step(0)})}}}}}, "sequence 0: 'name' must be a string of 1 to 256 bytes");
  expect_refused({{"sequences", {{{"name", ""}, {"steps", json::array({step(0)})}}}}}, "sequence 0: 'name' must be a string of 1 to 256 bytes");
  expect_refused({{"sequences", {{{"name", std::string(300, 'n')}, {"steps", json::array({step(0)})}}}}}, "'name' must be a string of 1 to 256 bytes");
  expect_refused({{"valid", {{{"name", json::array()}, {"inputs", json::object()}, {"outputs", json::array()}}}}},
                 "valid case 0: 'name' must be a string");
  expect_refused({{"sequences", {{{"name", "s"}, {"steps", json::array({step(0)})}}, {{"name", "s"}, {"steps", json::array({step(1)})}}}}},
                 "two sequences are named 's'");
  json bad_output = step(0);
  bad_output["outputs"][1] = 4;
  expect_refused({{"sequences", {{{"name", "s"}, {"steps", json::array({bad_output})}}}}}, "sequence 's' step 0: output entries must be file names");
  json no_input = step(0);
  no_input["inputs"] = {{"y", "a.npy"}};
  expect_refused({{"sequences", {{{"name", "s"}, {"steps", json::array({no_input})}}}}}, "sequence 's' step 0: no file for input 'x'");
  json one_output = step(0);
  one_output["outputs"].erase(1);
  expect_refused({{"sequences", {{{"name", "s"}, {"steps", json::array({one_output})}}}}}, "self-test 's[0]': 1 outputs for a program with 2");
}

// A million steps naming missing files is refused before any file is read.
TEST_F(Manifest, HugeListsAreRefusedUpFront) {
  json steps = json::array();
  const json missing = {{"inputs", {{"x", "missing.npy"}}}, {"outputs", json::array({"a.npy", "b.npy"})}};
  for (int k = 0; k < 1000000; ++k) steps.push_back(missing);
  expect_refused({{"sequences", {{{"name", "s"}, {"steps", steps}}}}},
                 "holds 1000000 cases and sequence steps; at most 4096 self-tests fit in a bundle");
  json valid = json::array();
  for (std::size_t k = 0; k < kMaxSelfTests; ++k) valid.push_back(missing);
  expect_refused({{"valid", valid}, {"sequences", {{{"name", "s"}, {"steps", json::array({missing})}}}}}, "holds 4097 cases");
}

}  // namespace
}  // namespace kiln

// `kiln compare` (two backends, two bundles) and `kiln validate --junit`, on bundles
// exported with the C++ API.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "../../samples/models/models.h"
#include "kiln/export/control_flow.h"
#include "kiln/export/serialize.h"
#include "kiln/runtime/npy.h"
#include "cli_testutil.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Cmd = kiln::cli_test::CommandResult;

Cmd kiln_cmd(const std::string& args) { return kiln::cli_test::shell(std::string(KILN_BIN) + " " + args + " 2>&1"); }
// stdout only (the JSON), stderr dropped.
Cmd kiln_json(const std::string& args) { return kiln::cli_test::shell(std::string(KILN_BIN) + " " + args + " 2>/dev/null"); }

HostTensor host(const Tensor& t) { return {t.dtype(), t.concrete_shape(), t.bytes()}; }

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// "models.h:39" for the line of Linear::operator() that records every linear node.
std::string linear_source_line() {
  std::ifstream f(std::string(KILN_SOURCE_DIR) + "/samples/models/models.h");
  std::string line;
  for (int n = 1; std::getline(f, line); ++n) {
    if (line.find("return linear(x, weight, bias);") != std::string::npos) return "models.h:" + std::to_string(n);
  }
  return "models.h:?";
}

// A minimal XML well-formedness check: one root element, every tag closed in order,
// attribute values quoted, and no raw '<' or unknown entity in text or attributes.
bool well_formed(const std::string& xml, std::string& why) {
  std::vector<std::string> open;
  std::size_t i = 0, roots = 0;
  auto entity_ok = [&](std::size_t at) {
    for (const char* e : {"&amp;", "&lt;", "&gt;", "&quot;", "&apos;", "&#10;", "&#9;"}) {
      if (xml.compare(at, std::strlen(e), e) == 0) return true;
    }
    return false;
  };
  if (xml.rfind("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n", 0) != 0) return why = "no XML declaration", false;
  i = xml.find('\n') + 1;
  while (i < xml.size()) {
    if (xml[i] == '&' && !entity_ok(i)) return why = "bad entity at " + std::to_string(i), false;
    if (xml[i] != '<') {
      if (open.empty() && !std::isspace(static_cast<unsigned char>(xml[i]))) return why = "text outside the root", false;
      ++i;
      continue;
    }
    const bool closing = xml[i + 1] == '/';
    std::size_t j = i + (closing ? 2 : 1);
    std::string name;
    while (j < xml.size() && (std::isalnum(static_cast<unsigned char>(xml[j])) || xml[j] == '_')) name += xml[j++];
    if (name.empty()) return why = "bad tag at " + std::to_string(i), false;
    bool self_closing = false;
    while (j < xml.size() && xml[j] != '>') {
      if (xml[j] == '"') {
        const std::size_t end = xml.find('"', j + 1);
        if (end == std::string::npos) return why = "unterminated attribute", false;
        for (std::size_t k = j + 1; k < end; ++k) {
          if (xml[k] == '<') return why = "raw < in an attribute", false;
          if (xml[k] == '&' && !entity_ok(k)) return why = "bad entity in an attribute", false;
        }
        j = end + 1;
        continue;
      }
      if (xml[j] == '/' && xml[j + 1] == '>') self_closing = true;
      ++j;
    }
    if (j >= xml.size()) return why = "unterminated tag", false;
    if (closing) {
      if (open.empty() || open.back() != name) return why = "</" + name + "> closes " + (open.empty() ? "nothing" : open.back()), false;
      open.pop_back();
    } else if (!self_closing) {
      if (open.empty()) ++roots;
      open.push_back(name);
    }
    i = j + 1;
  }
  if (!open.empty()) return why = "<" + open.back() + "> not closed", false;
  if (roots != 1) return why = std::to_string(roots) + " root elements", false;
  return true;
}

std::size_t occurrences(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

class Compare : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("kiln_compare_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    model_ = new models::Mlp(16, 32, 5);
    auto ep = export_program([](Tensor x) { return (*model_)(x); }, {input("x", Tensor::randn({4, 16}), {Dim("batch", 2, 64)})},
                             {.name = "mlp", .self_tests = 2});
    ASSERT_TRUE(ep.ok()) << ep.status().message();
    ASSERT_TRUE(ep->save(path("mlp.kiln")).ok());
    // The same model with one weight of fc2 changed by +1.
    ir::Program changed = ep->program();
    bool found = false;
    for (ir::ConstantTensor& c : changed.constants) {
      if (c.name != "fc2.weight") continue;
      auto bytes = std::make_shared<std::vector<std::uint8_t>>(*c.data);
      float v;
      std::memcpy(&v, bytes->data(), 4);
      v += 1.0f;
      std::memcpy(bytes->data(), &v, 4);
      c.data = bytes;
      found = true;
    }
    ASSERT_TRUE(found) << "no constant fc2.weight";
    ASSERT_TRUE(save_bundle(changed, path("mlp_changed.kiln")).ok());
    // One node more at the end (an unmatched node; the outputs differ by 2x).
    auto doubled = export_program([](Tensor x) { return (*model_)(x) * 2.0; }, {input("x", Tensor::randn({4, 16}), {Dim("batch", 2, 64)})},
                                  {.name = "mlp2"});
    ASSERT_TRUE(doubled.ok()) << doubled.status().message();
    ASSERT_TRUE(doubled->save(path("mlp_doubled.kiln")).ok());
    // Other signatures: another input name; another width.
    auto renamed = export_program([](Tensor y) { return (*model_)(y); }, {input("y", Tensor::randn({4, 16}))}, {.name = "renamed"});
    ASSERT_TRUE(renamed.ok());
    ASSERT_TRUE(renamed->save(path("renamed.kiln")).ok());
    auto ints = export_program([](Tensor x) { return x * 2; }, {input("x", Tensor::from_ints({4, 16}, std::vector<std::int64_t>(64, 1)))},
                               {.name = "ints"});
    ASSERT_TRUE(ints.ok()) << ints.status().message();
    ASSERT_TRUE(ints->save(path("ints.kiln")).ok());
    // Self-tests for --junit: a wrong golden output, and a name that needs escaping.
    ir::Program bad = ep->program();
    auto golden = std::make_shared<std::vector<std::uint8_t>>(*bad.self_tests[0].outputs[0].data);
    float v;
    std::memcpy(&v, golden->data(), 4);
    v += 1.0f;
    std::memcpy(golden->data(), &v, 4);
    bad.self_tests[0].outputs[0].data = golden;
    bad.self_tests[1].name = "case <1> & \"q\" 'a'\x01";
    ASSERT_TRUE(save_bundle(bad, path("bad_golden.kiln")).ok());
    // A self-test whose input is outside the declared range: it cannot run.
    ir::Program unrunnable = ep->program();
    unrunnable.self_tests[0].inputs[0].shape = {100, 16};
    unrunnable.self_tests[0].inputs[0].data = std::make_shared<std::vector<std::uint8_t>>(100 * 16 * 4, 0);
    ASSERT_TRUE(save_bundle(unrunnable, path("unrunnable.kiln")).ok());
    ASSERT_TRUE(write_npy(path("x.npy"), host(Tensor::randn({3, 16}, 11))).ok());
    // Control flow, and a specialization for batch 1.
    auto branchy = export_program(
        [](Tensor x) { return kiln::cond(x.size(0) > 4, [](Tensor a) { return exp(a) * 2; }, [](Tensor a) { return a.clone(); }, {x}) + 1; },
        {input("x", Tensor::randn({6, 3}), {Dim("n", 1, 64)})}, {.name = "cond"});
    ASSERT_TRUE(branchy.ok()) << branchy.status().message();
    ASSERT_TRUE(branchy->save(path("cond.kiln")).ok());
    auto special = export_program([](Tensor x) { return (*model_)(x); },
                                  {input("x", Tensor::randn({4, 16}), {Dim("batch", 1, 64).specialize_on({"batch == 1"})})}, {.name = "spec"});
    ASSERT_TRUE(special.ok()) << special.status().message();
    ASSERT_TRUE(special->save(path("special.kiln")).ok());
    ASSERT_TRUE(write_npy(path("x1.npy"), host(Tensor::randn({1, 16}, 12))).ok());
  }
  static void TearDownTestSuite() {
    fs::remove_all(dir_);
    delete model_;
  }
  static std::string path(const std::string& name) { return (dir_ / name).string(); }
  static fs::path dir_;
  static models::Mlp* model_;
};
fs::path Compare::dir_;
models::Mlp* Compare::model_ = nullptr;

TEST_F(Compare, IdenticalBackendsDoNotDiverge) {
  const Cmd r = kiln_cmd("compare " + path("mlp.kiln") + " --backend cpu --against cpu --input x=" + path("x.npy"));
  ASSERT_EQ(r.code, 0) << r.out;
  for (const char* want : {"against ", "linear", "relu", "SQNR dB", "no node diverged", linear_source_line().c_str()}) {
    EXPECT_NE(r.out.find(want), std::string::npos) << want << "\n" << r.out;
  }
  EXPECT_EQ(r.out.find("DIVERGED"), std::string::npos) << r.out;
  // The same bundle given twice: matched by name, no divergence either.
  const Cmd two = kiln_cmd("compare " + path("mlp.kiln") + " " + path("mlp.kiln") + " " + path("x.npy"));
  EXPECT_EQ(two.code, 0) << two.out;
}

TEST_F(Compare, ChangedWeightNamesTheFirstDivergentNode) {
  const Cmd r = kiln_cmd("compare " + path("mlp_changed.kiln") + " " + path("mlp.kiln") + " --input x=" + path("x.npy"));
  EXPECT_EQ(r.code, 5) << r.out;
  const std::string want = "first divergence: node 2 linear(f32[3, 32], f32[5, 32], f32[5]) -> f32[3, 5] at " + linear_source_line() + ", fc2: ";
  EXPECT_NE(r.out.find(want), std::string::npos) << want << "\n" << r.out;
  EXPECT_NE(r.out.find("kiln: error: a node diverged beyond the tolerance"), std::string::npos) << r.out;
  // Loose enough a tolerance: no divergence (the change moves outputs by |relu(h)[0]| < 10).
  const Cmd loose = kiln_cmd("compare " + path("mlp_changed.kiln") + " " + path("mlp.kiln") + " --input x=" + path("x.npy") + " --atol 10");
  EXPECT_EQ(loose.code, 0) << loose.out;
}

TEST_F(Compare, JsonReportsEveryNodeAndTheFirstDivergence) {
  const Cmd r = kiln_json("compare " + path("mlp_changed.kiln") + " " + path("mlp.kiln") + " --json --seed 3 --rtol 0 --atol 1e-6");
  ASSERT_EQ(r.code, 5) << r.out;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["mode"], "bundles");
  EXPECT_EQ(j["a"]["bundle"], path("mlp_changed.kiln"));
  EXPECT_EQ(j["b"]["backend"], "cpu");
  EXPECT_EQ(j["a"]["variant"], "generic");
  EXPECT_EQ(j["tolerance"]["rtol"], 0.0);
  EXPECT_EQ(j["tolerance"]["atol"], 1e-6);
  EXPECT_EQ(j["inputs"][0]["name"], "x");
  EXPECT_EQ(j["inputs"][0]["source"], "random");
  EXPECT_EQ(j["inputs"][0]["detail"], "seed 3");
  ASSERT_EQ(j["nodes"].size(), 3u);
  for (int n = 0; n < 3; ++n) {
    const json& node = j["nodes"][n];
    EXPECT_EQ(node["node"], n);
    EXPECT_EQ(node["reference_node"], n);
    EXPECT_EQ(node["diverged"], n == 2) << node.dump();
    for (const char* key : {"max_abs_error", "max_rel_error", "cosine", "sqnr_db", "mismatched", "worst_index", "diverged", "value"}) {
      EXPECT_TRUE(node["outputs"][0].contains(key)) << key << " " << node.dump();
    }
  }
  EXPECT_EQ(j["nodes"][0]["op"], "linear");
  EXPECT_EQ(j["nodes"][0]["key"], "linear");
  EXPECT_EQ(j["nodes"][0]["outputs"][0]["sqnr_db"], "inf");  // identical
  EXPECT_EQ(j["nodes"][0]["outputs"][0]["cosine"], 1.0);
  const json& d = j["nodes"][2]["outputs"][0];
  EXPECT_GT(d["max_abs_error"].get<double>(), 1e-6);
  EXPECT_LT(d["cosine"].get<double>(), 1.0);
  EXPECT_LT(d["sqnr_db"].get<double>(), 100.0);
  EXPECT_TRUE(j["unmatched_a"].empty());
  EXPECT_TRUE(j["unmatched_b"].empty());
  EXPECT_EQ(j["outputs"][0]["diverged"], true);
  const json& first = j["first_divergence"];
  EXPECT_EQ(first["node"], 2);
  EXPECT_EQ(first["op"], "linear");
  EXPECT_EQ(first["reference_op"], "linear");
  EXPECT_EQ(first["source"], linear_source_line() + ", fc2");
  EXPECT_EQ(first["input_shapes"], json({"f32[4, 32]", "f32[5, 32]", "f32[5]"}));  // the batch hint 4
  EXPECT_EQ(first["output_shapes"], json({"f32[4, 5]"}));
  EXPECT_EQ(first["output"], 0);
  EXPECT_EQ(first["max_abs_error"], d["max_abs_error"]);
  EXPECT_EQ(j["diverged"], true);
  // No divergence: first_divergence is null, exit 0.
  const Cmd same = kiln_json("compare " + path("mlp.kiln") + " --against cpu --json --self-test 1");
  ASSERT_EQ(same.code, 0) << same.out;
  const json s = json::parse(same.out);
  EXPECT_EQ(s["mode"], "backends");
  EXPECT_TRUE(s["first_divergence"].is_null());
  EXPECT_EQ(s["diverged"], false);
  EXPECT_EQ(s["inputs"][0]["source"], "self-test");
  EXPECT_FALSE(s["nodes"][0].contains("key"));
}

TEST_F(Compare, UnmatchedNodesAreListedAndOutputsStillCompared) {
  const Cmd r = kiln_json("compare " + path("mlp_doubled.kiln") + " " + path("mlp.kiln") + " --json");
  ASSERT_EQ(r.code, 5) << r.out;
  const json j = json::parse(r.out);
  ASSERT_EQ(j["unmatched_a"].size(), 1u) << j.dump();
  EXPECT_EQ(j["unmatched_a"][0]["op"], "mul");
  EXPECT_EQ(j["unmatched_a"][0]["node"], 3);
  EXPECT_TRUE(j["unmatched_b"].empty());
  EXPECT_EQ(j["nodes"].size(), 3u);
  EXPECT_TRUE(j["first_divergence"].is_null());
  EXPECT_EQ(j["outputs"][0]["diverged"], true);
  const Cmd text = kiln_cmd("compare " + path("mlp_doubled.kiln") + " " + path("mlp.kiln"));
  EXPECT_EQ(text.code, 5) << text.out;
  EXPECT_NE(text.out.find("unmatched in " + path("mlp_doubled.kiln") + ": node 3 mul"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("kiln: error: an output diverged beyond the tolerance"), std::string::npos) << text.out;
}

TEST_F(Compare, ControlFlowNodesAreComparedByOutputsAndTheVariantIsReported) {
  // The true branch runs (n = 6, the hint): cond is one top-level node, its two subgraph
  // nodes (exp, mul) are counted, not listed.
  Cmd r = kiln_json("compare " + path("cond.kiln") + " --against cpu --json");
  ASSERT_EQ(r.code, 0) << r.out;
  json j = json::parse(r.out);
  bool found = false;
  for (const json& node : j["nodes"]) {
    if (node["op"] != "cond") continue;
    found = true;
    EXPECT_EQ(node["subgraph_nodes"], json({2, 2})) << node.dump();
    EXPECT_EQ(node["outputs"][0]["value"], "f32[6, 3]");
  }
  EXPECT_TRUE(found) << r.out;
  for (const json& node : j["nodes"]) EXPECT_NE(node["op"], "exp") << "a subgraph node listed at the top level";
  // Batch 1 runs the specialization: its graph's nodes are compared, and it is named.
  r = kiln_json("compare " + path("special.kiln") + " " + path("special.kiln") + " --json --input x=" + path("x1.npy"));
  ASSERT_EQ(r.code, 0) << r.out;
  j = json::parse(r.out);
  EXPECT_EQ(j["a"]["variant"], "batch == 1") << r.out;
  EXPECT_NE(j["a"]["graph"], 0);
  EXPECT_EQ(j["nodes"].size(), 3u);
  const Cmd text = kiln_cmd("compare " + path("special.kiln") + " --against cpu " + path("x1.npy"));
  EXPECT_EQ(text.code, 0) << text.out;
  EXPECT_NE(text.out.find("(variant batch == 1) against"), std::string::npos) << text.out;
}

TEST_F(Compare, VulkanAgainstCpu) {
  const Cmd r = kiln_json("compare " + path("mlp.kiln") + " --backend vulkan --against cpu --json --input x=" + path("x.npy"));
  if (r.code == 4) GTEST_SKIP() << "no Vulkan device: " << r.out;
  ASSERT_EQ(r.code, 0) << r.out;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["a"]["backend"], "vulkan");
  EXPECT_EQ(j["b"]["backend"], "cpu");
  ASSERT_EQ(j["nodes"].size(), 3u);  // nodes 0 and 1 only exist on the device: downloaded for the comparison
  for (const json& node : j["nodes"]) {
    EXPECT_GT(node["outputs"][0]["cosine"].get<double>(), 0.99999) << node.dump();
    EXPECT_EQ(node["outputs"][0]["value"], node["node"] == 2 ? "f32[3, 5]" : "f32[3, 32]");
  }
}

TEST_F(Compare, BadArgumentsAreClearErrors) {
  Cmd r = kiln_cmd("compare " + path("missing.kiln") + " --against cpu");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find(path("missing.kiln")), std::string::npos) << r.out;
  r = kiln_cmd("compare " + path("renamed.kiln") + " " + path("mlp.kiln"));
  EXPECT_EQ(r.code, 3) << r.out;
  EXPECT_NE(r.out.find("kiln: error: the bundles' signatures differ, so they cannot run on the same inputs: input 0 is 'y' in " +
                       path("renamed.kiln") + ", 'x' in " + path("mlp.kiln")),
            std::string::npos)
      << r.out;
  r = kiln_cmd("compare " + path("ints.kiln") + " " + path("mlp.kiln"));
  EXPECT_EQ(r.code, 3) << r.out;
  EXPECT_NE(r.out.find("input 'x' is i64 of rank 2 in " + path("ints.kiln") + ", f32 of rank 2 in " + path("mlp.kiln")), std::string::npos) << r.out;
  r = kiln_cmd("compare " + path("mlp.kiln"));
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("compare needs two bundles (A.kiln B.kiln) or one with --against BACKEND"), std::string::npos) << r.out;
  r = kiln_cmd("compare " + path("mlp.kiln") + " --against cpu --self-test 9");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("--self-test 9: no such self-test (the bundle has 2, numbered from 0)"), std::string::npos) << r.out;
  r = kiln_cmd("compare " + path("mlp.kiln") + " --against tpu");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("unknown backend 'tpu'"), std::string::npos) << r.out;
  r = kiln_cmd("compare " + path("mlp.kiln") + " --against cpu --input y=3");
  EXPECT_EQ(r.code, 3) << r.out;
  EXPECT_NE(r.out.find("unknown input 'y' (the bundle's inputs: x)"), std::string::npos) << r.out;
  r = kiln_cmd("compare " + path("mlp.kiln") + " --against cpu --rtol -1");
  EXPECT_EQ(r.code, 1) << r.out;
}

TEST_F(Compare, JunitForPassingSelfTests) {
  const std::string report = path("pass.xml");
  const Cmd r = kiln_cmd("validate " + path("mlp.kiln") + " --junit " + report);
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string xml = read_text(report);
  std::string why;
  EXPECT_TRUE(well_formed(xml, why)) << why << "\n" << xml;
  EXPECT_NE(xml.find("<testsuites name=\"kiln validate\" tests=\"2\" failures=\"0\" errors=\"0\""), std::string::npos) << xml;
  EXPECT_NE(xml.find("<testsuite name=\"mlp.kiln\" tests=\"2\""), std::string::npos) << xml;
  EXPECT_NE(xml.find("<property name=\"backend\" value=\"cpu\"/>"), std::string::npos) << xml;
  EXPECT_EQ(occurrences(xml, "<testcase "), 2u) << xml;
  EXPECT_EQ(occurrences(xml, "<failure"), 0u) << xml;
  EXPECT_NE(xml.find("name=\"output 0\""), std::string::npos) << xml;
  EXPECT_FALSE(fs::exists(report + ".tmp." + std::to_string(::getpid())));
}

TEST_F(Compare, JunitForFailingSelfTestsCarriesTheStatistics) {
  const std::string report = path("fail.xml");
  const Cmd r = kiln_cmd("validate " + path("bad_golden.kiln") + " --junit " + report);
  ASSERT_EQ(r.code, 5) << r.out;
  const std::string xml = read_text(report);
  std::string why;
  EXPECT_TRUE(well_formed(xml, why)) << why << "\n" << xml;
  EXPECT_NE(xml.find("tests=\"2\" failures=\"1\" errors=\"0\""), std::string::npos) << xml;
  EXPECT_NE(xml.find("<failure type=\"tolerance\" message=\"1 elements outside the tolerance, max |diff| 1 at index 0\">"), std::string::npos) << xml;
  for (const char* stat : {"max_abs_diff=1", "max_rel_diff=", "worst_index=0", "mismatched=1", "rtol=", "atol=", "shape=[4,5]"}) {
    EXPECT_NE(xml.find(stat), std::string::npos) << stat << "\n" << xml;
  }
  // The renamed self-test: quotes, angle brackets, ampersand and a control character escaped.
  EXPECT_NE(xml.find("classname=\"bad_golden.kiln.case &lt;1&gt; &amp; &quot;q&quot; &apos;a&apos;\\x01\""), std::string::npos) << xml;
  // The JSON report has the relative error too.
  const Cmd j = kiln_json("validate " + path("bad_golden.kiln") + " --json");
  EXPECT_NE(j.out.find("\"max_rel_diff\""), std::string::npos) << j.out;
}

TEST_F(Compare, JunitReportsASelfTestThatCannotRunAsErrors) {
  const std::string report = path("unrunnable.xml");
  const Cmd r = kiln_cmd("validate " + path("unrunnable.kiln") + " --junit " + report);
  EXPECT_EQ(r.code, 3) << r.out;
  const std::string xml = read_text(report);
  std::string why;
  EXPECT_TRUE(well_formed(xml, why)) << why << "\n" << xml;
  EXPECT_NE(xml.find("tests=\"2\" failures=\"0\" errors=\"1\""), std::string::npos) << xml;
  EXPECT_NE(xml.find("<error type=\"invalid_input\" message=\"input x.size(0) = 100 (batch, s0) is outside the range [2, 64]"), std::string::npos) << xml;
}

TEST_F(Compare, JunitWhenTheBundleDoesNotLoadAndBadTargets) {
  std::ofstream(path("junk.kiln")) << "not a bundle";
  const std::string report = path("junk.xml");
  Cmd r = kiln_cmd("validate " + path("junk.kiln") + " --junit " + report);
  EXPECT_EQ(r.code, 2) << r.out;
  const std::string xml = read_text(report);
  std::string why;
  EXPECT_TRUE(well_formed(xml, why)) << why << "\n" << xml;
  EXPECT_NE(xml.find("tests=\"1\" failures=\"0\" errors=\"1\""), std::string::npos) << xml;
  EXPECT_NE(xml.find("name=\"load and verify\""), std::string::npos) << xml;
  EXPECT_NE(xml.find("<error type=\"invalid_bundle\""), std::string::npos) << xml;
  // A directory is refused (exit 1); a missing parent folder is an I/O error (exit 8).
  r = kiln_cmd("validate " + path("mlp.kiln") + " --junit " + dir_.string());
  EXPECT_EQ(r.code, 1) << r.out;
  r = kiln_cmd("validate " + path("mlp.kiln") + " --junit " + path("no/such/dir/r.xml"));
  EXPECT_EQ(r.code, 8) << r.out;
  EXPECT_NE(r.out.find("cannot write " + path("no/such/dir/r.xml")), std::string::npos) << r.out;
}

}  // namespace
}  // namespace kiln

// Every torch.export fixture, from model.pt2 (training IR) and model.core.pt2 (core ATen IR):
// import -> bundle bytes -> kiln::Program -> kiln::Session; every `valid` case matches
// PyTorch's golden outputs (rtol 1e-4, atol 1e-5) and every `invalid` case is rejected with
// kInvalidInput naming the input or the failed assert.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kiln/export/import_pt2.h"
#include "kiln/export/serialize.h"
#include "kiln/runtime/bundle.h"
#include "kiln/runtime/npy.h"
#include "kiln/runtime/program.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

struct Fixture {
  std::string dir;    // KILN_FIXTURES_DIR or KILN_EXTRA_FIXTURES_DIR
  std::string model;  // "mlp"
  std::string file;   // "model.pt2" / "model.core.pt2"
  std::string backend = "cpu";
};

std::string fixture_name(const ::testing::TestParamInfo<Fixture>& info) {
  return info.param.model + (info.param.file == "model.pt2" ? "_training" : "_core") + "_" + info.param.backend;
}

::testing::AssertionResult matches(const HostValue& got, const HostTensor& want, double rtol = 1e-4, double atol = 1e-5) {
  if (got.is_int) {
    if (want.numel() != 1) return ::testing::AssertionFailure() << "got an int, expected a tensor";
    if (static_cast<double>(got.int_value) != want.element(0)) {
      return ::testing::AssertionFailure() << "int " << got.int_value << " != " << want.element(0);
    }
    return ::testing::AssertionSuccess();
  }
  const HostTensor& g = got.tensor;
  if (g.shape != want.shape) {
    return ::testing::AssertionFailure() << "shape " << json(g.shape).dump() << " != " << json(want.shape).dump();
  }
  if (g.dtype != want.dtype) return ::testing::AssertionFailure() << "dtype " << dtype_name(g.dtype) << " != " << dtype_name(want.dtype);
  for (std::size_t i = 0; i < static_cast<std::size_t>(want.numel()); ++i) {
    const double a = g.element(i), b = want.element(i);
    if (std::isnan(a) && std::isnan(b)) continue;
    if (!(std::abs(a - b) <= atol + rtol * std::abs(b))) {
      return ::testing::AssertionFailure() << "element " << i << ": " << a << " != " << b;
    }
  }
  return ::testing::AssertionSuccess();
}

class FixtureTest : public ::testing::TestWithParam<Fixture> {
 protected:
  fs::path folder() const { return fs::path(GetParam().dir) / GetParam().model; }
  json manifest() const {
    std::ifstream f(folder() / "manifest.json");
    return json::parse(f);
  }
  // Inputs of one manifest case in signature order (the manifest lists them in order).
  std::vector<HostValue> inputs(const ir::Program& p, const json& c, const json& m) {
    std::vector<HostValue> out;
    const auto names = m["inputs"].get<std::vector<std::string>>();
    for (std::size_t i = 0; i < p.inputs.size(); ++i) {
      const std::string key = c["inputs"].contains(p.inputs[i].name) ? p.inputs[i].name : names.at(i);
      auto t = read_npy_any_order((folder() / c["inputs"][key].get<std::string>()).string());
      EXPECT_TRUE(t.ok()) << t.status().message();
      if (!t.ok()) return {};
      if (p.inputs[i].is_int) out.push_back(HostValue::integer(static_cast<std::int64_t>(t->element(0))));
      else out.push_back(HostValue::of(std::move(*t)));
    }
    return out;
  }
};

TEST_P(FixtureTest, ImportsAndMatchesPyTorchOnEveryValidCaseAndRejectsEveryInvalidOne) {
  auto ep = import_pt2((folder() / GetParam().file).string());
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  const ir::Program& p = ep->program();
  auto bytes = serialize_bundle(p);
  ASSERT_TRUE(bytes.ok()) << bytes.status().message();
  auto bundle = Bundle::from_bytes(*bytes);
  ASSERT_TRUE(bundle.ok()) << bundle.status().message();
  ProgramOptions options;
  options.backend = GetParam().backend;
  auto program = Program::load(std::move(bundle).value(), options);
  if (!program.ok() && program.status().code() == StatusCode::kUnavailable) GTEST_SKIP() << program.status().message();
  ASSERT_TRUE(program.ok()) << program.status().message();
  Session session(**program);
  const json m = manifest();
  int valid = 0;
  for (const json& c : m["valid"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const auto in = inputs(p, c, m);
    ASSERT_EQ(in.size(), p.inputs.size());
    auto r = session.run(in);
    ASSERT_TRUE(r.ok()) << r.status().message();
    ASSERT_EQ(r->outputs.size(), c["outputs"].size());
    for (std::size_t o = 0; o < r->outputs.size(); ++o) {
      auto want = read_npy_any_order((folder() / c["outputs"][o].get<std::string>()).string());
      ASSERT_TRUE(want.ok()) << want.status().message();
      EXPECT_TRUE(matches(r->outputs[o], *want)) << "output " << o;
    }
    ++valid;
  }
  EXPECT_GT(valid, 0);
  for (const json& c : m["invalid"]) {
    SCOPED_TRACE(c["name"].get<std::string>() + ": " + c.value("why", ""));
    const auto in = inputs(p, c, m);
    auto r = session.run(in);
    ASSERT_FALSE(r.ok()) << "an invalid case ran: " << c.value("why", "");
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidInput) << r.status().message();
    const std::string msg = r.status().message();
    bool names_input = msg.find("runtime assertion failed") != std::string::npos;
    for (const auto& spec : p.inputs) names_input = names_input || msg.find("input " + spec.name) != std::string::npos;
    EXPECT_TRUE(names_input) << msg;
  }
}

std::vector<Fixture> fixtures(const std::string& dir, std::vector<std::string> models) {
  std::vector<Fixture> out;
  for (const auto& m : models) {
    for (const char* f : {"model.pt2", "model.core.pt2"}) {
      for (const char* backend : {"cpu", "vulkan"}) out.push_back({dir, m, f, backend});
    }
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(TorchExport, FixtureTest,
                         ::testing::ValuesIn(fixtures(KILN_FIXTURES_DIR, {"mlp", "convnet", "decoder", "item_size", "nonzero",
                                                                          "cond_sizes", "cond_dyn", "while_loop", "dyn_int",
                                                                          "repeated"})),
                         fixture_name);
// PyTorch 2.6's legacy archive layout (torch.save pickles), both IRs.
INSTANTIATE_TEST_SUITE_P(Torch26Legacy, FixtureTest,
                         ::testing::ValuesIn(fixtures(KILN_FIXTURES_DIR "/../torch26",
                                                      {"mlp", "convnet", "decoder", "item_size", "nonzero", "cond_dyn"})),
                         fixture_name);
INSTANTIATE_TEST_SUITE_P(TorchExtra, FixtureTest,
                         ::testing::ValuesIn(fixtures(KILN_EXTRA_FIXTURES_DIR, {"mobilenet_v3", "vit", "unet", "encoder", "misc"})),
                         fixture_name);

}  // namespace
}  // namespace kiln

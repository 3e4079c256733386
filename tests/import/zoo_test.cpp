// The model-zoo fixtures of tests/fixtures/torch_zoo (written by make_archives.py with
// PyTorch 2.6 in the models/*.json layout; legacy/ holds a second random init of gpt2 and
// misc as 2.6's own torch.export.save writes them): a Hugging Face style GPT-2 decoder (diff,
// cumsum, masked attention, baddbmm/addmm, gelu tanh, triu, new_ones) and a model of the
// formerly missing ops (reflect / replicate padding, bicubic upsampling, integer index_put
// with and without accumulate, integer bitwise ops and shifts), from both IRs, imported and
// run on the CPU and Vulkan backends against PyTorch's eager outputs (rtol = atol = 1e-4).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
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

const fs::path kZoo = fs::path(KILN_SOURCE_DIR) / "tests" / "fixtures" / "torch_zoo";

struct ZooCase {
  std::string model, file, backend;
};

std::string zoo_name(const ::testing::TestParamInfo<ZooCase>& info) {
  std::string model = info.param.model;
  std::replace(model.begin(), model.end(), '/', '_');
  return model + (info.param.file.find(".core") != std::string::npos ? "_core" : "_training") + "_" + info.param.backend;
}

class ZooTest : public ::testing::TestWithParam<ZooCase> {};

TEST_P(ZooTest, ImportsAndMatchesPyTorchEager) {
  const fs::path dir = kZoo / GetParam().model;
  auto ep = import_pt2((dir / GetParam().file).string());
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  auto bytes = serialize_bundle(ep->program());
  ASSERT_TRUE(bytes.ok()) << bytes.status().message();
  ProgramOptions options;
  options.backend = GetParam().backend;
  auto program = Program::load(std::move(Bundle::from_bytes(*bytes)).value(), options);
  if (!program.ok() && program.status().code() == StatusCode::kUnavailable) GTEST_SKIP() << program.status().message();
  ASSERT_TRUE(program.ok()) << program.status().message();
  std::ifstream f(dir / "manifest.json");
  const json m = json::parse(f);
  const json& c = m["valid"][0];
  std::vector<HostValue> in;
  for (const auto& name : m["inputs"]) {
    auto t = read_npy_any_order((dir / c["inputs"][name.get<std::string>()].get<std::string>()).string());
    ASSERT_TRUE(t.ok()) << t.status().message();
    in.push_back(HostValue::of(std::move(*t)));
  }
  Session session(**program);
  auto r = session.run(in);
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->outputs.size(), c["outputs"].size());
  for (std::size_t o = 0; o < r->outputs.size(); ++o) {
    auto want = read_npy_any_order((dir / c["outputs"][o].get<std::string>()).string());
    ASSERT_TRUE(want.ok()) << want.status().message();
    const HostTensor& got = r->outputs[o].tensor;
    ASSERT_EQ(got.shape, want->shape) << "output " << o;
    ASSERT_EQ(got.dtype, want->dtype) << "output " << o;
    for (std::int64_t i = 0; i < want->numel(); ++i) {
      const double a = got.element(i), b = want->element(i);
      ASSERT_LE(std::abs(a - b), 1e-4 + 1e-4 * std::abs(b)) << "output " << o << " element " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(TorchZoo, ZooTest,
                         ::testing::Values(ZooCase{"gpt2", "model.pt2", "cpu"}, ZooCase{"gpt2", "model.core.pt2", "cpu"},
                                           ZooCase{"misc", "model.pt2", "cpu"}, ZooCase{"misc", "model.core.pt2", "cpu"},
                                           ZooCase{"legacy/gpt2", "model.legacy.pt2", "cpu"},
                                           ZooCase{"legacy/gpt2", "model.core.legacy.pt2", "cpu"},
                                           ZooCase{"legacy/misc", "model.core.legacy.pt2", "cpu"},
                                           ZooCase{"gpt2", "model.pt2", "vulkan"}, ZooCase{"gpt2", "model.core.pt2", "vulkan"},
                                           ZooCase{"misc", "model.pt2", "vulkan"}, ZooCase{"misc", "model.core.pt2", "vulkan"}),
                         zoo_name);

// The training IR of `misc` writes through views: `w[:, :, ids, 0] = 1.5` is select +
// index_put_ on a clone, written back into the clone with a select_scatter.
TEST(ZooTest, TrainingIrAssignmentIntoAViewIsWrittenBackIntoItsBase) {
  auto ep = import_pt2((kZoo / "misc" / "model.pt2").string());
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  const ir::Graph& g = ep->program().graphs[static_cast<std::size_t>(ep->program().entry)];
  // The write back: the select is scattered into w by a cat of w's slices around it.
  EXPECT_GE(std::count_if(g.nodes.begin(), g.nodes.end(), [](const ir::Node& n) { return n.op == OpKind::Cat; }), 1);
  EXPECT_TRUE(ep->program().states.empty());
}

}  // namespace
}  // namespace kiln

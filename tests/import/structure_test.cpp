// What the importer builds (symbols, asserts, bindings, subgraphs, metadata, options) and
// how it fails on hostile archives (never a crash, never a partial program).
#include <gtest/gtest.h>
#include <zip.h>

#include <algorithm>
#include <functional>
#include <random>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kiln/export/import_pt2.h"
#include "import/zip_testutil.h"
#include "kiln/export/symbolic/print.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string fixture(const std::string& model, const std::string& file = "model.pt2") {
  return (fs::path(KILN_FIXTURES_DIR) / model / file).string();
}

int count_ops(const ir::Graph& g, OpKind op) {
  return static_cast<int>(std::count_if(g.nodes.begin(), g.nodes.end(), [&](const ir::Node& n) { return n.op == op; }));
}

std::vector<std::string> assert_texts(const ir::Program& p, const ir::Graph& g) {
  std::vector<std::string> out;
  for (const auto& a : g.asserts) out.push_back(sym::to_string(a.expr, &p.env));
  return out;
}

using kiln::testing::read_zip;

void write_zip(const std::string& path, const std::map<std::string, std::string>& entries) {
  ASSERT_TRUE(kiln::testing::write_zip(path, entries)) << path;
}

class ImportStructure : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kiln_import_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  // The mlp archive with its model.json rewritten by `edit`.
  std::string mlp_with(const std::string& name, const std::function<void(std::string&)>& edit) {
    auto entries = read_zip(fixture("mlp"));
    for (auto& [n, data] : entries) if (n.find("models/model.json") != std::string::npos) edit(data);
    write_zip(path(name), entries);
    return path(name);
  }
  fs::path dir_;
};

TEST_F(ImportStructure, MlpHasBackedSymbolRangeHintSourceLinesAndModulePaths) {
  auto ep = import_pt2(fixture("mlp"));
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  const ir::Program& p = ep->program();
  ASSERT_EQ(p.inputs.size(), 1u);
  EXPECT_EQ(p.inputs[0].name, "x");
  ASSERT_EQ(p.inputs[0].shape.size(), 2u);
  ASSERT_TRUE(p.inputs[0].shape[0].is_symbol());
  const auto& s = p.env.symbol(p.inputs[0].shape[0].symbol_id());
  EXPECT_EQ(s.kind, sym::SymbolKind::Backed);
  EXPECT_EQ(s.range.lo, 1);
  EXPECT_EQ(s.range.hi, 1024);
  EXPECT_EQ(s.hint, 4);
  EXPECT_EQ(p.inputs[0].shape[1].constant_value(), 64);
  const ir::Graph& g = p.graphs[static_cast<std::size_t>(p.entry)];
  ASSERT_EQ(count_ops(g, OpKind::Linear), 2);
  EXPECT_EQ(p.constants.size(), 4u);
  const ir::Node& fc1 = g.nodes[0];
  EXPECT_EQ(fc1.meta.location.file, "models.py");  // the user's frame, not torch/nn/modules/linear.py
  EXPECT_EQ(fc1.meta.location.line, 127u);
  EXPECT_EQ(fc1.meta.module_path, "fc1");
  EXPECT_EQ(fc1.meta.user_op, "linear");
}

TEST_F(ImportStructure, CoreIrAddmmOfATransposedWeightIsALinearAgain) {
  auto ep = import_pt2(fixture("mlp", "model.core.pt2"));
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  const ir::Graph& g = ep->program().graphs[0];
  // permute(w, [1, 0]) + addmm -> linear(x, w, b); the dead permutes are removed.
  EXPECT_EQ(count_ops(g, OpKind::Linear), 2);
  EXPECT_EQ(count_ops(g, OpKind::Permute), 0);
  EXPECT_EQ(count_ops(g, OpKind::Matmul), 0);
  EXPECT_EQ(ep->program().inputs[0].name, "x");
}

TEST_F(ImportStructure, ItemBindsAnUnbackedScalarWithItsAsserts) {
  auto ep = import_pt2(fixture("item_size"));
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  const ir::Program& p = ep->program();
  const ir::Graph& g = p.graphs[0];
  ASSERT_EQ(g.bindings.size(), 1u);
  const ir::UnbackedBinding& b = g.bindings[0];
  EXPECT_EQ(b.kind, ir::UnbackedBinding::Kind::kScalar);
  EXPECT_EQ(g.nodes[static_cast<std::size_t>(b.node)].op, OpKind::Item);
  EXPECT_EQ(p.env.symbol(b.symbol).kind, sym::SymbolKind::Unbacked);
  const auto asserts = assert_texts(p, g);
  EXPECT_NE(std::find(asserts.begin(), asserts.end(), "u0 >= 1"), asserts.end());
  EXPECT_NE(std::find(asserts.begin(), asserts.end(), "u0 <= 16"), asserts.end());
  EXPECT_EQ(asserts.size(), 2u);  // _assert_scalar nodes and the range are the same two facts
  for (const auto& a : g.asserts) EXPECT_EQ(a.after_node, b.node);
  EXPECT_EQ(p.inputs[1].name, "n_t");  // the forward() parameter name
}

TEST_F(ImportStructure, NonzeroAndMaskedSelectBindSizes) {
  auto ep = import_pt2(fixture("nonzero"));
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  const ir::Graph& g = ep->program().graphs[0];
  ASSERT_EQ(g.bindings.size(), 3u);
  for (const auto& b : g.bindings) {
    EXPECT_EQ(b.kind, ir::UnbackedBinding::Kind::kSize);
    EXPECT_EQ(b.dim, 0);
    const OpKind op = g.nodes[static_cast<std::size_t>(b.node)].op;
    EXPECT_TRUE(op == OpKind::Nonzero || op == OpKind::MaskedSelect) << op_name(op);
  }
  EXPECT_EQ(g.asserts.size(), 6u);  // u >= 0, u <= 400 for each
}

TEST_F(ImportStructure, CondWithDifferentBranchSizesBindsTheOutputSize) {
  auto ep = import_pt2(fixture("cond_sizes"));
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  const ir::Program& p = ep->program();
  const ir::Graph& g = p.graphs[static_cast<std::size_t>(p.entry)];
  ASSERT_EQ(count_ops(g, OpKind::Cond), 1);
  ASSERT_EQ(g.bindings.size(), 1u);
  const ir::Node& cond = g.nodes[static_cast<std::size_t>(g.bindings[0].node)];
  EXPECT_EQ(cond.op, OpKind::Cond);
  ASSERT_EQ(cond.subgraphs.size(), 2u);
  EXPECT_EQ(p.graphs[static_cast<std::size_t>(cond.subgraphs[0])].name, "true_graph_0");
  const auto asserts = assert_texts(p, g);
  EXPECT_NE(std::find(asserts.begin(), asserts.end(), "u0 >= 2"), asserts.end());
  EXPECT_NE(std::find(asserts.begin(), asserts.end(), "u0 <= 6"), asserts.end());
}

TEST_F(ImportStructure, CondOnASymbolicPredicateTakesASymBool) {
  auto ep = import_pt2(fixture("cond_dyn"));
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  const ir::Graph& g = ep->program().graphs[0];
  const auto it = std::find_if(g.nodes.begin(), g.nodes.end(), [](const ir::Node& n) { return n.op == OpKind::Cond; });
  ASSERT_NE(it, g.nodes.end());
  const ir::Value& pred = g.values[static_cast<std::size_t>(it->inputs[0])];
  EXPECT_EQ(pred.kind, ir::ValueKind::kSymBool);
  const std::string text = sym::to_string(pred.expr, &ep->program().env);
  EXPECT_TRUE(text == "s0 > 4" || text == "s0 >= 5") << text;
}

TEST_F(ImportStructure, RepeatedRegionIsOneSubgraphCalledFourTimes) {
  for (const char* file : {"model.pt2", "model.core.pt2"}) {
    auto ep = import_pt2(fixture("repeated", file));
    ASSERT_TRUE(ep.ok()) << ep.status().message();
    const ir::Program& p = ep->program();
    EXPECT_EQ(p.graphs.size(), 2u) << file;
    const ir::Graph& g = p.graphs[static_cast<std::size_t>(p.entry)];
    EXPECT_EQ(count_ops(g, OpKind::InvokeSubgraph), 4) << file;
    for (const auto& n : g.nodes) {
      if (n.op == OpKind::InvokeSubgraph) {
        EXPECT_EQ(n.subgraphs, std::vector<int>{1 - p.entry});
      }
    }
  }
}

TEST_F(ImportStructure, DynamicIntInputBecomesASymbol) {
  auto ep = import_pt2(fixture("dyn_int"));
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  const ir::Program& p = ep->program();
  ASSERT_EQ(p.inputs.size(), 2u);
  EXPECT_TRUE(p.inputs[1].is_int);
  EXPECT_EQ(p.inputs[1].dynamism, ir::Dynamism::kDynamic);
  ASSERT_TRUE(p.inputs[1].expr.is_symbol());
  EXPECT_EQ(p.env.symbol(p.inputs[1].expr.symbol_id()).range.lo, 2);
  EXPECT_EQ(p.env.symbol(p.inputs[1].expr.symbol_id()).range.hi, sym::kPosInf);
}

TEST_F(ImportStructure, DerivedDimChecksTheInputSizeRangeNotTheRootsInternalMin) {
  auto ep = import_pt2(fixture("convnet"));
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  const ir::Program& p = ep->program();
  const sym::Expr h = p.inputs[0].shape[2];
  EXPECT_EQ(sym::to_string(h, &p.env), "32*s1");
  EXPECT_EQ(p.inputs[0].shape[3], h);
  const int root = sym::free_symbols(h)[0];
  EXPECT_EQ(p.env.symbol(root).range.lo, 1);  // 32*s39 in [32, 512]
  EXPECT_EQ(p.env.symbol(root).range.hi, 16);
}

TEST_F(ImportStructure, DimAndSpecializeOptions) {
  ImportOptions o;
  o.dims = {"x.0=2:64"};
  o.specializations = {"s77 == 2", "x.0 % 16 == 0"};
  auto ep = import_pt2(fixture("mlp"), o);
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  const ir::Program& p = ep->program();
  const auto& s = p.env.symbol(p.inputs[0].shape[0].symbol_id());
  EXPECT_EQ(s.range.lo, 2);
  EXPECT_EQ(s.range.hi, 64);
  ASSERT_EQ(p.specializations.size(), 2u);
  EXPECT_EQ(p.specializations[1].label, "x.0 % 16 == 0");
  o.dims = {"x.0=1:5000"};
  o.specializations = {};
  auto wide = import_pt2(fixture("mlp"), o);
  ASSERT_FALSE(wide.ok());
  EXPECT_EQ(wide.status().code(), StatusCode::kUsage);
  EXPECT_NE(wide.status().message().find("widens"), std::string::npos) << wide.status().message();
  o.dims = {"nope=1:2"};
  auto unknown = import_pt2(fixture("mlp"), o);
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("x.0 (s77)"), std::string::npos) << unknown.status().message();
}

TEST_F(ImportStructure, UnsupportedOpsAreListedOnceWithCounts) {
  const std::string p = mlp_with("unsupported.pt2", [](std::string& j) {
    for (const char* from : {"torch.ops.aten.relu.default", "torch.ops.aten.linear.default"}) {
      const std::string to = std::string(from) == "torch.ops.aten.relu.default" ? "torch.ops.aten.frobnicate.default"
                                                                                 : "torch.ops.aten.wibble.default";
      for (std::size_t at = j.find(from); at != std::string::npos; at = j.find(from, at)) j.replace(at, std::strlen(from), to);
    }
  });
  auto ep = import_pt2(p);
  ASSERT_FALSE(ep.ok());
  EXPECT_EQ(ep.status().code(), StatusCode::kUnsupported);
  const std::string msg = ep.status().message();
  EXPECT_NE(msg.find("2 unsupported ops"), std::string::npos) << msg;
  EXPECT_NE(msg.find("aten.frobnicate.default (x1)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("aten.wibble.default (x2)"), std::string::npos) << msg;
}

TEST_F(ImportStructure, HostileArchivesAreClearErrors) {
  {
    std::ofstream(path("garbage.pt2")) << "this is not a zip file at all";
    auto ep = import_pt2(path("garbage.pt2"));
    ASSERT_FALSE(ep.ok());
    EXPECT_EQ(ep.status().code(), StatusCode::kInvalidBundle);
    EXPECT_NE(ep.status().message().find("not a readable .pt2 archive"), std::string::npos) << ep.status().message();
  }
  {
    std::ifstream in(fixture("mlp"), std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream(path("truncated.pt2"), std::ios::binary) << bytes.substr(0, bytes.size() / 2);
    auto ep = import_pt2(path("truncated.pt2"));
    ASSERT_FALSE(ep.ok());
    EXPECT_EQ(ep.status().code(), StatusCode::kInvalidBundle) << ep.status().message();
  }
  {
    auto ep = import_pt2(path("missing.pt2"));  // a missing model file is exit 2 (docs/CLI.md)
    ASSERT_FALSE(ep.ok());
    EXPECT_EQ(ep.status().code(), StatusCode::kInvalidBundle);
  }
  {
    write_zip(path("empty.pt2"), {{"model/readme.txt", "hello"}});
    auto ep = import_pt2(path("empty.pt2"));
    ASSERT_FALSE(ep.ok());
    EXPECT_EQ(ep.status().code(), StatusCode::kInvalidBundle);
    EXPECT_NE(ep.status().message().find("no models/*.json"), std::string::npos) << ep.status().message();
  }
  {
    auto ep = import_pt2(mlp_with("badjson.pt2", [](std::string& j) { j = j.substr(0, j.size() / 3); }));
    ASSERT_FALSE(ep.ok());
    EXPECT_EQ(ep.status().code(), StatusCode::kInvalidBundle);
    EXPECT_NE(ep.status().message().find("not valid JSON"), std::string::npos) << ep.status().message();
  }
  {
    auto ep = import_pt2(mlp_with("nograph.pt2", [](std::string& j) {
      json m = json::parse(j);
      m["graph_module"].erase("graph");
      j = m.dump();
    }));
    ASSERT_FALSE(ep.ok());
    EXPECT_EQ(ep.status().code(), StatusCode::kInvalidBundle);
    EXPECT_NE(ep.status().message().find("'graph'"), std::string::npos) << ep.status().message();
  }
  {
    auto ep = import_pt2(mlp_with("badsym.pt2", [](std::string& j) {
      const std::string from = "Symbol('s77', positive=True, integer=True)";
      for (std::size_t at = j.find(from); at != std::string::npos; at = j.find(from, at + 1)) j.replace(at, from.size(), "Symbol('s77'");
    }));
    ASSERT_FALSE(ep.ok());
    EXPECT_EQ(ep.status().code(), StatusCode::kInvalidBundle);
    EXPECT_NE(ep.status().message().find("[parse_srepr]"), std::string::npos) << ep.status().message();
  }
  {
    auto ep = import_pt2(mlp_with("badtype.pt2", [](std::string& j) {
      json m = json::parse(j);
      m["graph_module"]["graph"]["nodes"][0]["inputs"][0]["arg"] = json{{"as_tensor", {{"name", "nonexistent"}}}};
      j = m.dump();
    }));
    ASSERT_FALSE(ep.ok());
    EXPECT_EQ(ep.status().code(), StatusCode::kInvalidBundle);
    EXPECT_NE(ep.status().message().find("nonexistent"), std::string::npos) << ep.status().message();
  }
  {
    // A weight file shorter than its sizes say.
    auto entries = read_zip(fixture("mlp"));
    for (auto& [n, data] : entries) if (n.find("weights/weight_0") != std::string::npos) data.resize(100);
    write_zip(path("shortweight.pt2"), entries);
    auto ep = import_pt2(path("shortweight.pt2"));
    ASSERT_FALSE(ep.ok());
    EXPECT_EQ(ep.status().code(), StatusCode::kInvalidBundle);
    EXPECT_NE(ep.status().message().find("too few"), std::string::npos) << ep.status().message();
  }
}

// Random damage to every kind of JSON field of real archives: each import must end in a
// Status (ok or an error), never a crash or an exception.
TEST_F(ImportStructure, RandomlyDamagedArchivesNeverCrash) {
  std::mt19937 rng(1234);
  const std::string legacy = (fs::path(KILN_FIXTURES_DIR) / ".." / "torch26").string();
  for (const std::string& archive : {fixture("decoder", "model.core.pt2"), fixture("cond_sizes", "model.core.pt2"),
                                    fixture("item_size", "model.core.pt2"), fixture("repeated", "model.core.pt2"),
                                    legacy + "/cond_dyn/model.core.pt2", legacy + "/item_size/model.pt2"}) {
    const std::string model = fs::path(archive).parent_path().filename().string();
    auto entries = read_zip(archive);
    std::string key;
    for (const auto& [n, data] : entries) {
      if (n.find("models/model.json") != std::string::npos || n == "serialized_exported_program.json") key = n;
    }
    ASSERT_FALSE(key.empty()) << archive;
    const json original = json::parse(entries[key]);
    std::vector<json::json_pointer> pointers;
    std::function<void(const json&, const json::json_pointer&)> collect = [&](const json& j, const json::json_pointer& p) {
      pointers.push_back(p);
      if (j.is_object()) for (auto it = j.begin(); it != j.end(); ++it) collect(*it, p / it.key());
      if (j.is_array()) for (std::size_t i = 0; i < j.size(); ++i) collect(j[i], p / i);
    };
    collect(original, json::json_pointer());
    const std::vector<json> replacements{nullptr, 0, -1, 7, 1ll << 62, "x", "Symbol('u99')", json::array(), json::object(), true, 1.5};
    for (int trial = 0; trial < 60; ++trial) {
      json damaged = original;
      for (int k = 0; k < 3; ++k) {
        const auto& p = pointers[std::uniform_int_distribution<std::size_t>(1, pointers.size() - 1)(rng)];
        if (!damaged.contains(p)) continue;
        damaged[p] = replacements[std::uniform_int_distribution<std::size_t>(0, replacements.size() - 1)(rng)];
      }
      entries[key] = damaged.dump();
      write_zip(path("damaged.pt2"), entries);
      auto ep = import_pt2(path("damaged.pt2"));
      if (!ep.ok()) {
        EXPECT_NE(ep.status().code(), StatusCode::kInternal) << model << " trial " << trial << ": " << ep.status().message();
      }
    }
  }
}

TEST_F(ImportStructure, SelfTestsFromTheManifest) {
  auto ep = import_pt2(fixture("decoder"));
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  ASSERT_TRUE(add_self_tests_from_manifest(ep->program(), (fs::path(KILN_FIXTURES_DIR) / "decoder" / "manifest.json").string()).ok());
  ASSERT_EQ(ep->program().self_tests.size(), 3u);
  EXPECT_EQ(ep->program().self_tests[0].name, "valid0");
  EXPECT_EQ(ep->program().self_tests[0].inputs[0].dtype, DType::kI64);
  const Status bad = add_self_test_case(ep->program(), "c", {}, {});
  EXPECT_EQ(bad.code(), StatusCode::kUsage);
}

}  // namespace
}  // namespace kiln

// ir::Program -> bundle bytes -> verified Bundle: everything the IR says survives.
#include <gtest/gtest.h>

#include <cstring>

#include "kiln/export/serialize.h"
#include "kiln/format/kiln_generated.h"
#include "kiln/runtime/bundle.h"
#include "kiln/runtime/expr.h"

namespace kiln {
namespace {

using sym::Expr;

ir::Bytes floats(std::vector<float> v) {
  auto out = std::make_shared<std::vector<std::uint8_t>>(v.size() * 4);
  std::memcpy(out->data(), v.data(), out->size());
  return out;
}

ir::NodeMeta meta(std::uint32_t line, const char* module, const char* op) {
  return ir::NodeMeta{{"model.cpp", line, 3}, module, op};
}

// y = matmul(x, w); idx = nonzero(y) with u0 <= 3*s0; a specialization for s0 % 16 == 0.
ir::Program make_program() {
  ir::Program p;
  p.name = "tiny";
  const int s0 = *p.env.create_backed_symbol("batch", {2, 1024}, 8);
  const int u0 = p.env.create_unbacked_symbol(/*is_size=*/true);
  const Expr S0 = Expr::symbol(s0), U0 = Expr::symbol(u0);
  p.constants.push_back({"fc.weight", DType::kF32, {4, 3}, floats(std::vector<float>(12, 0.5f))});
  ir::Graph g;
  g.name = "main";
  const int x = g.add_value({ir::ValueKind::kTensor, DType::kF32, {S0, Expr::constant(4)}, {}, -1, "x"});
  const int w = g.add_value({ir::ValueKind::kConstant, DType::kF32, {Expr::constant(4), Expr::constant(3)}, {}, 0, "fc.weight"});
  const int y = g.add_value({ir::ValueKind::kTensor, DType::kF32, {S0, Expr::constant(3)}, {}, -1, "y"});
  const int idx = g.add_value({ir::ValueKind::kTensor, DType::kI64, {U0, Expr::constant(2)}, {}, -1, "idx"});
  const int total = g.add_value({ir::ValueKind::kSymInt, DType::kI64, {}, S0 * Expr::constant(3), -1, "total"});
  g.inputs = {x};
  g.outputs = {y, idx, total};
  g.nodes.push_back({OpKind::Matmul, {x, w}, {y}, {}, {}, meta(10, "fc", "matmul")});
  g.nodes.push_back({OpKind::Nonzero, {y}, {idx}, {}, {}, meta(11, "", "nonzero")});
  g.bindings.push_back({u0, 1, 0, ir::UnbackedBinding::Kind::kSize, 0, 1});
  g.asserts.push_back({sym::le(U0, S0 * Expr::constant(3)), "u0 <= 3*s0", 1, meta(11, "", "nonzero")});
  p.graphs.push_back(g);
  g.name = "main[s0 % 16 == 0]";
  p.graphs.push_back(g);
  p.specializations.push_back({"batch % 16 == 0", sym::eq(sym::mod(S0, Expr::constant(16)), Expr::constant(0)), 1});
  p.inputs.push_back({"x", false, DType::kF32, {S0, Expr::constant(4)}, ir::Dynamism::kStatic, 0, {}});
  p.outputs.push_back({"y", false, DType::kF32, {S0, Expr::constant(3)}, {}});
  p.outputs.push_back({"idx", false, DType::kI64, {U0, Expr::constant(2)}, {}});
  p.outputs.push_back({"total", true, DType::kI64, {}, S0 * Expr::constant(3)});
  p.metadata.push_back({"source", "serialize_test"});
  return p;
}

std::unique_ptr<Bundle> load(const ir::Program& p, const SaveOptions& options = {}) {
  auto bytes = serialize_bundle(p, options);
  EXPECT_TRUE(bytes.ok()) << bytes.status().to_string();
  if (!bytes.ok()) return nullptr;
  auto b = Bundle::from_bytes(*bytes, {.verify_segment_checksums = true});
  EXPECT_TRUE(b.ok()) << b.status().to_string();
  return b.ok() ? std::move(b).value() : nullptr;
}

TEST(Serialize, ProgramSurvivesTheBundle) {
  auto b = load(make_program());
  ASSERT_NE(b, nullptr);
  const fb::Program& p = b->program();
  EXPECT_EQ(p.name()->str(), "tiny");
  ASSERT_EQ(p.symbols()->size(), 2u);
  EXPECT_EQ(p.symbols()->Get(0)->name()->str(), "s0");
  EXPECT_EQ(p.symbols()->Get(0)->min(), 2);
  EXPECT_EQ(p.symbols()->Get(0)->max(), 1024);
  EXPECT_EQ(p.symbols()->Get(0)->user_name()->str(), "batch");
  EXPECT_EQ(p.symbols()->Get(1)->name()->str(), "u0");
  EXPECT_EQ(p.symbols()->Get(1)->kind(), fb::SymbolKind::Unbacked);
  EXPECT_EQ(p.op_names()->size(), 2u);
  EXPECT_EQ(p.op_names()->Get(0)->str(), "matmul");
  const auto* main = p.graphs()->Get(0);
  // The stored expression is the canonical form; check what it means, and the message.
  EXPECT_EQ(main->asserts()->Get(0)->message()->str(), "u0 <= 3*s0");
  const std::int64_t holds[] = {4, 12}, fails[] = {4, 13};
  EXPECT_EQ(*evaluate_expr(p, main->asserts()->Get(0)->expr(), holds), 1);
  EXPECT_EQ(*evaluate_expr(p, main->asserts()->Get(0)->expr(), fails), 0);
  EXPECT_EQ(expr_to_string(p, p.signature()->outputs()->Get(2)->expr()), "3*s0");
  EXPECT_EQ(expr_to_string(p, p.specializations()->Get(0)->predicate()), "s0 % 16 == 0");
  const auto w = b->constant_data(0);
  ASSERT_EQ(w.size(), 48u);
  float first;
  std::memcpy(&first, w.data(), 4);
  EXPECT_EQ(first, 0.5f);
  // Debug info: node 0 at model.cpp:10 in module fc, called as matmul.
  const auto* e = p.debug()->entries()->Get(main->nodes()->Get(0)->debug() - 1);
  EXPECT_EQ(p.debug()->strings()->Get(e->file())->str(), "model.cpp");
  EXPECT_EQ(e->line(), 10u);
  EXPECT_EQ(p.debug()->strings()->Get(e->module_path())->str(), "fc");
  EXPECT_EQ(p.debug()->strings()->Get(e->user_op())->str(), "matmul");
  // Equal expressions share one id (canonical form).
  EXPECT_EQ(main->values()->Get(2)->shape()->Get(0), main->values()->Get(0)->shape()->Get(0));
}

TEST(Serialize, StripDebugDropsTheTable) {
  auto b = load(make_program(), {.strip_debug = true});
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->program().debug(), nullptr);
  EXPECT_EQ(b->program().graphs()->Get(0)->nodes()->Get(0)->debug(), 0u);
}

TEST(Serialize, ZstdConstantsRoundTrip) {
  auto b = load(make_program(), {.compression = format::Compression::kZstd});
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->segment_entry(0).compression, format::Compression::kZstd);
  EXPECT_EQ(b->constant_data(0).size(), 48u);
}

TEST(Serialize, DanglingReferencesAreExportErrors) {
  ir::Program p = make_program();
  p.graphs[0].nodes[1].inputs = {99};
  auto r = serialize_bundle(p);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kExportError);
  EXPECT_EQ(r.status().message(), "[serialize] graph 0 (main), node 1: unknown input value 99");
  p = make_program();
  p.constants[0].data = floats({1.0f});
  r = serialize_bundle(p);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "[serialize] constant 'fc.weight' has 4 bytes, expected 48");
}

}  // namespace
}  // namespace kiln

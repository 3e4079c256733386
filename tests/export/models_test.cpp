// Real models traced end to end: shapes, node counts, module paths, bundle round trip.
#include <gtest/gtest.h>

#include "../../samples/models/models.h"
#include "kiln/runtime/bundle.h"

namespace kiln {
namespace {

TEST(Models, DecoderExportsWithDynamicBatchAndSeq) {
  models::Decoder model;
  Dim batch("batch", 1, 8), seq("seq", 1, 128);
  std::vector<std::int64_t> ids(2 * 5, 7);
  auto ep = export_program([&](Tensor x) { return model(x); },
                           {input("ids", Tensor::from_ints({2, 5}, ids), {batch, seq})});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  const ir::Program& p = ep->program();
  const ir::Graph& g = p.graphs[0];
  const std::string printed = ep->print();
  EXPECT_NE(printed.find("graph 0 main(ids: \"i64[s0, s1]\")"), std::string::npos) << printed;
  // The output keeps both dynamic dims.
  const ir::Value& out = g.values[static_cast<std::size_t>(g.outputs[0])];
  ASSERT_EQ(out.shape.size(), 3u);
  EXPECT_EQ(out.shape[0], sym::Expr::symbol(0));
  EXPECT_EQ(out.shape[1], sym::Expr::symbol(1));
  EXPECT_EQ(*out.shape[2].constant_value(), 256);
  // seq <= 128 is implied by the position table (embedding indices): no violation, and
  // module paths come from ModuleScope.
  bool saw_attention_path = false;
  for (const ir::Node& n : g.nodes) saw_attention_path |= n.meta.module_path == "att.1.qkv";
  EXPECT_TRUE(saw_attention_path);
  // Parameters became named constants.
  bool saw_weight = false;
  for (const auto& c : p.constants) saw_weight |= c.name == "att.0.qkv.weight";
  EXPECT_TRUE(saw_weight);
  auto bytes = serialize_bundle(p);
  ASSERT_TRUE(bytes.ok()) << bytes.status().message();
  auto b = Bundle::from_bytes(*bytes);
  EXPECT_TRUE(b.ok()) << b.status().message();
}

TEST(Models, MlpExports) {
  models::Mlp model;
  auto ep = export_program([&](Tensor x) { return model(x); },
                           {input("x", Tensor::randn({4, 64}), {Dim("batch", 1, 1024)})});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  EXPECT_EQ(ep->program().graphs[0].nodes.size(), 3u) << ep->print();
}

}  // namespace
}  // namespace kiln

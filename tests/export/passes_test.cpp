// Graph passes run by finalize: common subexpressions are merged before dead code goes.
#include <gtest/gtest.h>

#include "kiln/export/export.h"
#include "kiln/export/ops.h"

namespace kiln {
namespace {

int count_ops(const ir::Graph& g, OpKind op) {
  int n = 0;
  for (const ir::Node& node : g.nodes) n += node.op == op;
  return n;
}

TEST(Passes, CommonSubexpressionsAreMerged) {
  auto ep = export_program(
      [](Tensor x) {
        Tensor a = relu(x);
        Tensor b = relu(x);                   // same op, same input: merged into a
        Tensor c = softmax(add(a, b), 1);
        Tensor d = softmax(add(a, b), 0);     // the add merges, the softmax differs by dim
        return add(c, d);
      },
      {input("x", Tensor::randn({3, 4}), {Dim("n", 1, 64)})});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  const ir::Graph& g = ep->program().graphs[0];
  EXPECT_EQ(count_ops(g, OpKind::Relu), 1);
  EXPECT_EQ(count_ops(g, OpKind::Softmax), 2);
  EXPECT_EQ(count_ops(g, OpKind::Add), 2);
}

TEST(Passes, DataDependentOpsAreNotMerged) {
  auto ep = export_program([](Tensor x) { return cat({nonzero(x), nonzero(x)}, 0); }, {input("x", Tensor::randn({3, 4}))});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  EXPECT_EQ(count_ops(ep->program().graphs[0], OpKind::Nonzero), 2);
}

}  // namespace
}  // namespace kiln

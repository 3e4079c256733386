// A SymInt as an elementwise operand (tensor × SymInt): a known value folds to a scalar, a
// symbolic one becomes a 0-d tensor computed from the symbol, so the bundle follows the
// value at run time. Dtypes follow PyTorch's Python-int rule (the tensor's dtype wins).
#include <gtest/gtest.h>

#include <cstring>

#include "common/exported.h"
#include "kiln/export/ops.h"

namespace kiln {
namespace {

HostValue host(const Tensor& t) { return HostValue::of(testing::host_tensor(t)); }
std::shared_ptr<const Program> load(const ExportedProgram& ep) { return testing::load_exported(ep); }

int count_ops(const ir::Graph& g, OpKind op) {
  int n = 0;
  for (const ir::Node& node : g.nodes) n += node.op == op;
  return n;
}

TEST(SymIntOperand, DynamicSizeScalesAFloatTensor) {
  auto model = [](Tensor x) { return x * x.size(0) + (x.size(1) - 1); };  // size(1) is static: folds
  auto ep = export_program(model, {input("x", Tensor::randn({3, 4}, 1), {Dim("n", 1, 64)})});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  EXPECT_EQ(count_ops(ep->program().graphs[0], OpKind::Arange), 1);  // only the dynamic size
  auto program = load(*ep);
  ASSERT_NE(program, nullptr);
  Session session(*program);
  for (std::int64_t n : {1, 3, 7}) {
    const Tensor x = Tensor::randn({n, 4}, static_cast<std::uint64_t>(n));
    auto r = session.run(std::vector<HostValue>{host(x)});
    ASSERT_TRUE(r.ok()) << r.status().message();
    const auto want = model(x).to_vector<float>();
    ASSERT_EQ(r->outputs[0].tensor.dtype, DType::kF32);
    std::vector<float> got(want.size());
    std::memcpy(got.data(), r->outputs[0].tensor.data.data(), got.size() * sizeof(float));
    for (std::size_t i = 0; i < want.size(); ++i) EXPECT_FLOAT_EQ(got[i], want[i]) << "n=" << n << " element " << i;
  }
}

TEST(SymIntOperand, DynamicIntInputKeepsTheTensorDtype) {
  auto model = [](Tensor ids, SymInt k) { return std::make_tuple(ids + k, gt(ids, k), ids / k); };
  auto ep = export_program(model, {input("ids", Tensor::from_ints({4}, std::vector<std::int64_t>{1, 5, 9, 2})),
                                   int_input("k", 3, Dim::DYNAMIC)});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  auto program = load(*ep);
  ASSERT_NE(program, nullptr);
  Session session(*program);
  const Tensor ids = Tensor::from_ints({4}, std::vector<std::int64_t>{1, 5, 9, 2});
  for (std::int64_t k : {2, 4}) {
    auto r = session.run(std::vector<HostValue>{host(ids), HostValue::integer(k)});
    ASSERT_TRUE(r.ok()) << r.status().message();
    ASSERT_EQ(r->outputs.size(), 3u);
    EXPECT_EQ(r->outputs[0].tensor.dtype, DType::kI64);   // i64 + int -> i64
    EXPECT_EQ(r->outputs[1].tensor.dtype, DType::kBool);
    EXPECT_EQ(r->outputs[2].tensor.dtype, DType::kF32);   // true division -> float
    const std::int64_t in[4] = {1, 5, 9, 2};
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(r->outputs[0].tensor.element(i), static_cast<double>(in[i] + k));
      EXPECT_EQ(r->outputs[1].tensor.element(i), in[i] > k ? 1.0 : 0.0);
      EXPECT_FLOAT_EQ(static_cast<float>(r->outputs[2].tensor.element(i)), static_cast<float>(in[i]) / static_cast<float>(k));
    }
  }
}

}  // namespace
}  // namespace kiln

// SessionOptions::observer: every executed node's outputs, in order, with the depth of the
// subgraph call it ran in; on Vulkan the segment intermediates downloaded for it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "../../samples/models/models.h"
#include "kiln/export/control_flow.h"
#include "common/exported.h"

namespace kiln {
namespace {

struct Seen {
  std::uint32_t graph, node, depth;
  std::vector<ObservedValue::Kind> kinds;
  std::vector<HostTensor> tensors;  // copies (the views die with the call)
  std::vector<std::int64_t> ints;
};

NodeObserver recorder(std::vector<Seen>& seen) {
  return [&seen](const NodeObservation& e) {
    Seen s{e.graph, e.node, e.depth, {}, {}, {}};
    for (const ObservedValue& v : e.outputs) {
      s.kinds.push_back(v.kind);
      s.ints.push_back(v.int_value);
      HostTensor t;
      t.dtype = v.dtype;
      t.shape.assign(v.shape.begin(), v.shape.end());
      t.data.assign(v.data.begin(), v.data.end());
      s.tensors.push_back(std::move(t));
    }
    seen.push_back(std::move(s));
  };
}

std::vector<float> values(const HostTensor& t) {
  std::vector<float> out(t.data.size() / 4);
  std::memcpy(out.data(), t.data.data(), t.data.size());
  return out;
}

class Observer : public ::testing::Test {
 protected:
  void SetUp() override {
    auto ep = export_program([this](Tensor x) { return mlp_(x); }, {input("x", Tensor::randn({4, 16}), {Dim("batch", 1, 64)})},
                             {.name = "mlp"});
    ASSERT_TRUE(ep.ok()) << ep.status().message();
    program_ = ep->program();
  }
  models::Mlp mlp_{16, 32, 5};
  ir::Program program_;
  HostTensor x_ = testing::host_tensor(Tensor::randn({3, 16}, 7));
};

TEST_F(Observer, SeesEveryNodeInOrderWithItsOwnOutputWhenUnfused) {
  auto program = testing::load_program(program_, {.fuse_activations = false});
  ASSERT_NE(program, nullptr);
  std::vector<Seen> seen;
  Session session(*program, {.observer = recorder(seen)});
  auto r = session.run(std::vector<HostValue>{HostValue::of(x_)});
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(seen.size(), 3u);  // linear, relu, linear
  for (std::uint32_t n = 0; n < 3; ++n) {
    EXPECT_EQ(seen[n].node, n);
    EXPECT_EQ(seen[n].depth, 0u);
    EXPECT_EQ(seen[n].graph, 0u);
    ASSERT_EQ(seen[n].kinds.size(), 1u);
    EXPECT_EQ(seen[n].kinds[0], ObservedValue::Kind::kTensor);
  }
  // Node 0 is fc1 before the relu: negative values survive; node 1 is the relu of it.
  const Tensor x = Tensor::from_floats({3, 16}, values(x_));
  const Tensor pre = mlp_.fc1(x);
  EXPECT_EQ(seen[0].tensors[0].shape, (std::vector<std::int64_t>{3, 32}));
  EXPECT_EQ(seen[0].tensors[0].data, pre.bytes());
  EXPECT_EQ(seen[1].tensors[0].data, relu(pre).bytes());
  EXPECT_EQ(seen[2].tensors[0].data, r->outputs[0].tensor.data);
}

TEST_F(Observer, FusedLinearReportsItsOutputAfterTheActivation) {
  auto program = testing::load_program(program_);  // fusion on (the default)
  ASSERT_NE(program, nullptr);
  ASSERT_EQ(program->placement(0)[0].op, "linear+relu");
  std::vector<Seen> seen;
  Session session(*program, {.observer = recorder(seen)});
  ASSERT_TRUE(session.run(std::vector<HostValue>{HostValue::of(x_)}).ok());
  ASSERT_EQ(seen.size(), 3u);
  const Tensor x = Tensor::from_floats({3, 16}, values(x_));
  EXPECT_EQ(seen[0].tensors[0].data, relu(mlp_.fc1(x)).bytes());
  EXPECT_EQ(seen[1].tensors[0].data, seen[0].tensors[0].data);
}

TEST_F(Observer, ResultsAreTheSameWithAndWithoutAnObserver) {
  auto program = testing::load_program(program_);
  ASSERT_NE(program, nullptr);
  std::vector<Seen> seen;
  Session plain(*program), observed(*program, {.observer = recorder(seen)});
  auto a = plain.run(std::vector<HostValue>{HostValue::of(x_)});
  auto b = observed.run(std::vector<HostValue>{HostValue::of(x_)});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->outputs[0].tensor.data, b->outputs[0].tensor.data);
  // A second run (plan cached) is observed again.
  ASSERT_TRUE(observed.run(std::vector<HostValue>{HostValue::of(x_)}).ok());
  EXPECT_EQ(seen.size(), 6u);
}

TEST(ObserverControlFlow, SubgraphNodesComeFirstWithDepthOneThenTheCondNode) {
  auto ep = export_program(
      [](Tensor x) {
        return kiln::cond(x.size(0) > 4, [](Tensor a) { return exp(a) * 2; }, [](Tensor a) { return a.clone(); }, {x});
      },
      {input("x", Tensor::randn({6, 3}), {Dim("n", 1, 64)})}, {.name = "cond"});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  auto program = testing::load_exported(*ep);
  ASSERT_NE(program, nullptr);
  std::vector<Seen> seen;
  Session session(*program, {.observer = recorder(seen)});
  auto r = session.run(std::vector<HostValue>{HostValue::of(testing::host_tensor(Tensor::randn({6, 3}, 2)))});
  ASSERT_TRUE(r.ok()) << r.status().message();
  // Top level: whatever computes the predicate, then cond; the true branch (exp, mul)
  // runs inside it at depth 1, observed before the cond node itself.
  ASSERT_GE(seen.size(), 3u);
  const Seen& last = seen.back();
  EXPECT_EQ(last.depth, 0u);
  EXPECT_EQ(last.tensors[0].data, r->outputs[0].tensor.data);
  std::size_t inner = 0;
  for (const Seen& s : seen) inner += s.depth == 1;
  EXPECT_EQ(inner, 2u);
  EXPECT_EQ(seen[seen.size() - 2].depth, 1u);
  EXPECT_NE(seen[seen.size() - 2].graph, last.graph);
}

TEST_F(Observer, VulkanSegmentIntermediatesAreDownloaded) {
  auto bytes = serialize_bundle(program_);
  ASSERT_TRUE(bytes.ok());
  auto bundle = Bundle::from_bytes(*bytes);
  ASSERT_TRUE(bundle.ok());
  auto program = Program::load(std::move(bundle).value(), {.backend = "vulkan", .fuse_activations = false});
  if (!program.ok() && program.status().code() == StatusCode::kUnavailable) GTEST_SKIP() << program.status().message();
  ASSERT_TRUE(program.ok()) << program.status().message();
  const auto placement = (*program)->placement(0);
  ASSERT_EQ(placement.size(), 3u);
  for (const NodePlacement& p : placement) ASSERT_EQ(p.backend, "vulkan") << p.op;  // one segment: 0 and 1 never leave the device
  auto cpu = testing::load_program(program_, {.fuse_activations = false});
  std::vector<Seen> on_gpu, on_cpu;
  Session gpu(**program, {.observer = recorder(on_gpu)}), host(*cpu, {.observer = recorder(on_cpu)});
  auto a = gpu.run(std::vector<HostValue>{HostValue::of(x_)});
  auto b = host.run(std::vector<HostValue>{HostValue::of(x_)});
  ASSERT_TRUE(a.ok()) << a.status().message();
  ASSERT_TRUE(b.ok());
  ASSERT_EQ(on_gpu.size(), 3u);
  for (std::size_t n = 0; n < 3; ++n) {
    const std::vector<float> g = values(on_gpu[n].tensors[0]), c = values(on_cpu[n].tensors[0]);
    ASSERT_EQ(g.size(), c.size());
    for (std::size_t i = 0; i < g.size(); ++i) ASSERT_NEAR(g[i], c[i], 1e-4f) << "node " << n << " element " << i;
  }
  EXPECT_GT(gpu.last_stats().bytes_downloaded, a->outputs[0].tensor.data.size());  // the intermediates came down too
  // Without an observer the same segment downloads only the output.
  Session plain(**program);
  ASSERT_TRUE(plain.run(std::vector<HostValue>{HostValue::of(x_)}).ok());
  EXPECT_EQ(plain.last_stats().bytes_downloaded, a->outputs[0].tensor.data.size());
}

}  // namespace
}  // namespace kiln

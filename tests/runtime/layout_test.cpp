// The layout pass (executor/layout.cpp): which values the CPU keeps NCHW8c, where the
// reorders land (only inside the layout kernels at a region's edges, never between two
// blocked ops), and that a run with blocked tensors gives what the plain run and eager
// execution give: outputs, observed intermediates, several batch sizes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "common/exported.h"
#include "kiln/export/ops.h"
#include "kiln/format/kiln_generated.h"
#include "kiln/runtime/program.h"
#include "backends/cpu/kernels/nchwc.h"
#include "executor/plan.h"

namespace kiln {
namespace {

std::vector<float> floats_of(const HostTensor& t) {
  std::vector<float> v(t.data.size() / sizeof(float));
  std::memcpy(v.data(), t.data.data(), v.size() * sizeof(float));
  return v;
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want, float tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < want.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tol * (1.0f + std::fabs(want[i]))) << what << ", element " << i;
  }
}

// A small CNN with every kind of node the pass handles: a stem conv on the plain input, a
// fused relu, a max pool, a depthwise conv + ReLU6, 1x1 convs, a residual add, hardswish,
// cat along channels (24 + 24), an average pool, mean over H and W, then a flatten and a
// linear layer (plain).
struct Cnn {
  Tensor w1 = Tensor::randn({16, 3, 3, 3}, 1) * 0.3, b1 = Tensor::randn({16}, 2);
  Tensor w2 = Tensor::randn({16, 1, 3, 3}, 3) * 0.3;
  Tensor w3 = Tensor::randn({24, 16, 1, 1}, 4) * 0.2, b3 = Tensor::randn({24}, 5);
  Tensor w4 = Tensor::randn({24, 16, 1, 1}, 6) * 0.2;
  Tensor w5 = Tensor::randn({10, 48}, 7) * 0.1;
  Tensor operator()(Tensor x) const {
    Tensor a = relu(conv2d(x, w1, b1, {2, 2}, {1, 1}));
    Tensor p = max_pool2d(a, {3, 3}, {2, 2}, {1, 1});
    Tensor d = clamp(conv2d(p, w2, Tensor(), {1, 1}, {1, 1}, {1, 1}, 16), 0.0, 6.0);
    Tensor r = conv2d(d, w3, b3) + conv2d(p, w4);
    Tensor h = hardswish(r);
    Tensor c = cat({h, r}, 1);
    Tensor q = avg_pool2d(c, {2, 2}, {2, 2});
    Tensor m = mean(q, {2, 3}, true);
    return linear(flatten(m, 1), w5);
  }
};

std::map<std::string, std::string> layouts_by_op(const Program& program) {
  std::map<std::string, std::string> out;
  for (const NodePlacement& n : program.placement(program.bundle().program().entry_graph())) {
    out[n.op] += (out[n.op].empty() ? "" : "|") + (n.layout.empty() ? std::string("nchw") : n.layout);
  }
  return out;
}

TEST(LayoutPass, BlockedRegionRunsFromTheStemToTheGlobalPoolAndMatchesPlainAndEager) {
  if (!cpu::nchwc::kernels_available()) GTEST_SKIP() << "this build has no blocked kernels yet";
  const Cnn model;
  const Tensor x = Tensor::randn({2, 3, 33, 31}, 9);
  auto ep = export_program([&](Tensor t) { return model(t); }, {input("x", x, {Dim("batch", 1, 16)})});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  const auto blocked = testing::load_exported(*ep);
  const auto plain = testing::load_exported(*ep, {.blocked_layout = false});
  ASSERT_NE(blocked, nullptr);
  ASSERT_NE(plain, nullptr);

  const auto l = layouts_by_op(*blocked);
  EXPECT_EQ(l.at("conv2d+relu"), "nchw -> nchw8c");  // the stem reads the plain input
  EXPECT_EQ(l.at("relu"), "nchw8c");                   // fused into the stem: passes its bytes on
  EXPECT_EQ(l.at("max_pool2d"), "nchw8c");
  EXPECT_EQ(l.at("conv2d+clamp"), "nchw8c");
  EXPECT_EQ(l.at("conv2d"), "nchw8c");
  EXPECT_EQ(l.at("conv2d+add"), "nchw8c");  // the residual add, in the conv produced last
  EXPECT_EQ(l.at("add"), "nchw8c");         // fused: passes the conv's bytes on
  EXPECT_EQ(l.at("hardswish"), "nchw8c");
  EXPECT_EQ(l.at("cat"), "nchw8c");
  EXPECT_EQ(l.at("avg_pool2d"), "nchw8c");
  EXPECT_EQ(l.at("mean"), "nchw8c -> nchw");  // the flatten needs plain NCHW
  EXPECT_EQ(l.at("reshape"), "nchw");
  EXPECT_EQ(l.at("linear"), "nchw");
  for (const NodePlacement& n : plain->placement(plain->bundle().program().entry_graph())) EXPECT_EQ(n.layout, "") << n.op;

  for (std::int64_t batch : {2, 1, 5}) {
    const Tensor xb = Tensor::randn({batch, 3, 33, 31}, 10 + static_cast<std::uint64_t>(batch));
    const std::vector<float> want = model(xb).to_vector<float>();
    for (int threads : {1, 2}) {
      Session sb(*blocked, {.threads = threads}), sp(*plain, {.threads = threads});
      auto rb = sb.run(std::vector<HostValue>{HostValue::of(testing::host_tensor(xb))});
      auto rp = sp.run(std::vector<HostValue>{HostValue::of(testing::host_tensor(xb))});
      ASSERT_TRUE(rb.ok()) << rb.status().message();
      ASSERT_TRUE(rp.ok()) << rp.status().message();
      EXPECT_EQ(rb->outputs[0].tensor.shape, (std::vector<std::int64_t>{batch, 10}));
      expect_close(floats_of(rb->outputs[0].tensor), want, 1e-4f, "blocked vs eager, batch " + std::to_string(batch));
      expect_close(floats_of(rb->outputs[0].tensor), floats_of(rp->outputs[0].tensor), 1e-4f, "blocked vs plain");
    }
  }
}

TEST(LayoutPass, ValuesLeavingTheRegionArePlain) {
  if (!cpu::nchwc::kernels_available()) GTEST_SKIP() << "this build has no blocked kernels yet";
  // A conv result that is a graph output, one read by softmax over channels, and one read by
  // a reshape: all plain, so no layout kernel writes them blocked.
  const Tensor w = Tensor::randn({8, 8, 3, 3}, 11) * 0.2;
  auto model = [&](Tensor x) {
    Tensor a = conv2d(x, w, Tensor(), {1, 1}, {1, 1});
    Tensor s = softmax(conv2d(a, w, Tensor(), {1, 1}, {1, 1}), 1);
    Tensor f = flatten(conv2d(s, w, Tensor(), {1, 1}, {1, 1}), 1);
    return std::vector<Tensor>{a, f};
  };
  const Tensor x = Tensor::randn({1, 8, 6, 6}, 12);
  auto ep = export_program(model, {input("x", x)});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  const auto program = testing::load_exported(*ep);
  ASSERT_NE(program, nullptr);
  for (const NodePlacement& n : program->placement(program->bundle().program().entry_graph())) {
    EXPECT_EQ(n.layout, "") << n.op << " at node " << n.node;
  }
}

TEST(LayoutPass, AFollowerWithAPlainOperandKeepsItsWholeGroupPlain) {
  if (!cpu::nchwc::kernels_available()) GTEST_SKIP() << "this build has no blocked kernels yet";
  // add(conv(x), x): x is the graph input (plain), so the add is plain and so is the conv's
  // output; the relu after the add follows it. A mul by a [1, C, 1, 1] constant is not a
  // follower either (constants stay plain).
  const Tensor w = Tensor::randn({8, 8, 1, 1}, 13) * 0.2, scale = Tensor::randn({1, 8, 1, 1}, 14);
  auto model = [&](Tensor x) {
    Tensor r = relu(conv2d(x, w) + x);
    return conv2d(conv2d(r, w) * scale, w);
  };
  const Tensor x = Tensor::randn({1, 8, 5, 5}, 15);
  auto ep = export_program(model, {input("x", x)});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  const auto program = testing::load_exported(*ep);
  ASSERT_NE(program, nullptr);
  for (const NodePlacement& n : program->placement(program->bundle().program().entry_graph())) {
    EXPECT_EQ(n.layout, "") << n.op << " at node " << n.node;
  }
  Session s(*program, {.threads = 2});
  auto r = s.run(std::vector<HostValue>{HostValue::of(testing::host_tensor(x))});
  ASSERT_TRUE(r.ok()) << r.status().message();
  expect_close(floats_of(r->outputs[0].tensor), model(x).to_vector<float>(), 1e-5f, "plain group");
}

TEST(LayoutPass, AnObserverSeesBlockedValuesAsPlainTensors) {
  if (!cpu::nchwc::kernels_available()) GTEST_SKIP() << "this build has no blocked kernels yet";
  const Cnn model;
  const Tensor x = Tensor::randn({2, 3, 17, 19}, 16);
  auto ep = export_program([&](Tensor t) { return model(t); }, {input("x", x)});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  std::map<bool, std::map<std::uint32_t, std::pair<std::vector<std::int64_t>, std::vector<float>>>> seen;
  for (bool blocked : {true, false}) {
    const auto program = testing::load_exported(*ep, {.fuse_activations = false, .blocked_layout = blocked});
    ASSERT_NE(program, nullptr);
    SessionOptions o;
    o.observer = [&](const NodeObservation& obs) {
      if (obs.outputs.empty() || obs.outputs[0].kind != ObservedValue::Kind::kTensor || obs.outputs[0].dtype != DType::kF32) return;
      const ObservedValue& v = obs.outputs[0];
      std::vector<float> f(v.data.size() / sizeof(float));
      std::memcpy(f.data(), v.data.data(), v.data.size());
      seen[blocked][obs.node] = {std::vector<std::int64_t>(v.shape.begin(), v.shape.end()), f};
    };
    Session s(*program, o);
    auto r = s.run(std::vector<HostValue>{HostValue::of(testing::host_tensor(x))});
    ASSERT_TRUE(r.ok()) << r.status().message();
  }
  ASSERT_EQ(seen[true].size(), seen[false].size());
  for (const auto& [node, value] : seen[false]) {
    ASSERT_TRUE(seen[true].count(node)) << node;
    EXPECT_EQ(seen[true][node].first, value.first) << "node " << node;
    expect_close(seen[true][node].second, value.second, 1e-4f, "observed node " + std::to_string(node));
  }
}

TEST(LayoutPass, ResidualAddsAndTheirActivationRunInTheConvEpilogue) {
  if (!cpu::nchwc::kernels_available()) GTEST_SKIP() << "this build has no blocked kernels yet";
  // Two resnet basic blocks: one whose skip is a strided 1x1 downsample (exported after the
  // block's second conv, so the add goes into the downsample conv), one with an identity
  // skip (into the second conv). Each add and the relu after it leave the profile.
  const Tensor stem = Tensor::randn({16, 3, 3, 3}, 21) * 0.3;
  const Tensor a1 = Tensor::randn({24, 16, 3, 3}, 22) * 0.1, a2 = Tensor::randn({24, 24, 3, 3}, 23) * 0.1;
  const Tensor ds = Tensor::randn({24, 16, 1, 1}, 24) * 0.2, db = Tensor::randn({24}, 25);
  const Tensor c1 = Tensor::randn({24, 24, 3, 3}, 26) * 0.1, c2 = Tensor::randn({24, 24, 3, 3}, 27) * 0.1;
  auto model = [&](Tensor x) {
    Tensor s = relu(conv2d(x, stem, Tensor(), {1, 1}, {1, 1}));
    Tensor b = conv2d(relu(conv2d(s, a1, Tensor(), {2, 2}, {1, 1})), a2, Tensor(), {1, 1}, {1, 1});
    Tensor o = relu(b + conv2d(s, ds, db, {2, 2}));
    Tensor b2 = conv2d(relu(conv2d(o, c1, Tensor(), {1, 1}, {1, 1})), c2, Tensor(), {1, 1}, {1, 1});
    return mean(relu(o + b2), {2, 3}, false);
  };
  const Tensor x = Tensor::randn({2, 3, 15, 17}, 28);
  auto ep = export_program(model, {input("x", x)});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  const auto program = testing::load_exported(*ep);
  ASSERT_NE(program, nullptr);
  Session s(*program, {.threads = 2, .profile = true});
  auto r = s.run(std::vector<HostValue>{HostValue::of(testing::host_tensor(x))});
  ASSERT_TRUE(r.ok()) << r.status().message();
  expect_close(floats_of(r->outputs[0].tensor), model(x).to_vector<float>(), 1e-4f, "residual blocks");
  std::map<std::string, int> ops;
  for (const RunStats::Op& op : s.last_stats().ops) ++ops[op.op];
  EXPECT_EQ(ops["conv2d+add+relu"], 2);
  EXPECT_EQ(ops["add"], 0);
  EXPECT_EQ(ops["conv2d+relu"], 3);
  EXPECT_EQ(ops["conv2d"], 1);  // the first block's second conv: its add went into the downsample
  // Placement names the conv doing each fused node's work (a relu after a fused add: two
  // nodes back, not the add before it).
  const auto placement = program->placement(program->bundle().program().entry_graph());
  int fused = 0;
  for (const NodePlacement& n : placement) {
    if (!n.fused_away) {
      EXPECT_EQ(n.fused_into, -1) << "node " << n.node;
      continue;
    }
    ++fused;
    ASSERT_GE(n.fused_into, 0) << "node " << n.node;
    ASSERT_LT(n.fused_into, static_cast<std::int32_t>(n.node));
    EXPECT_EQ(placement[static_cast<std::size_t>(n.fused_into)].op.rfind("conv2d", 0), 0u)
        << "node " << n.node << " (" << n.op << ") fused into node " << n.fused_into << " ("
        << placement[static_cast<std::size_t>(n.fused_into)].op << ")";
  }
  EXPECT_EQ(fused, 7);  // 5 relus and 2 adds
  const auto unfused = testing::load_exported(*ep, {.fuse_activations = false});
  Session su(*unfused, {.threads = 1, .profile = true});
  auto ru = su.run(std::vector<HostValue>{HostValue::of(testing::host_tensor(x))});
  ASSERT_TRUE(ru.ok()) << ru.status().message();
  expect_close(floats_of(ru->outputs[0].tensor), floats_of(r->outputs[0].tensor), 1e-4f, "unfused");
}

TEST(LayoutPass, DenseBlocksWithBatchNormBeforeTheirConvsStayBlocked) {
  if (!cpu::nchwc::kernels_available()) GTEST_SKIP() << "this build has no blocked kernels yet";
  // DenseNet's layer: cat of the features so far -> batch_norm -> relu -> 1x1 conv ->
  // batch_norm -> relu -> 3x3 conv (8 new channels). The batch norms come before their
  // convs, so they are not folded: they run blocked with the relu fused into them.
  const Tensor stem = Tensor::randn({16, 3, 3, 3}, 31) * 0.3;
  auto bn_params = [](std::int64_t c, std::uint64_t seed) {
    return std::vector<Tensor>{Tensor::randn({c}, seed) * 0.2 + 1.0, Tensor::randn({c}, seed + 1) * 0.1,
                               Tensor::randn({c}, seed + 2) * 0.1,
                               Tensor::randn({c}, seed + 3) * Tensor::randn({c}, seed + 3) * 0.2 + 0.5};
  };
  const auto bn1 = bn_params(16, 40), bn2 = bn_params(16, 50), bn3 = bn_params(24, 60);
  const Tensor w1 = Tensor::randn({16, 16, 1, 1}, 32) * 0.2, w2 = Tensor::randn({8, 16, 3, 3}, 33) * 0.1;
  const Tensor w3 = Tensor::randn({16, 24, 1, 1}, 34) * 0.2, w4 = Tensor::randn({8, 16, 3, 3}, 35) * 0.1;
  auto bnr = [](const Tensor& t, const std::vector<Tensor>& p) { return relu(batch_norm(t, p[0], p[1], p[2], p[3])); };
  auto model = [&](Tensor x) {
    Tensor f0 = conv2d(x, stem, Tensor(), {1, 1}, {1, 1});
    Tensor n1 = conv2d(bnr(conv2d(bnr(f0, bn1), w1), bn2), w2, Tensor(), {1, 1}, {1, 1});
    Tensor c1 = cat({f0, n1}, 1);  // 24 channels
    Tensor n2 = conv2d(bnr(conv2d(bnr(c1, bn3), w3), bn2), w4, Tensor(), {1, 1}, {1, 1});
    return mean(cat({c1, n2}, 1), {2, 3}, false);  // 32 channels
  };
  const Tensor x = Tensor::randn({2, 3, 11, 13}, 36);
  auto ep = export_program(model, {input("x", x)});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  const auto program = testing::load_exported(*ep);
  ASSERT_NE(program, nullptr);
  const auto l = layouts_by_op(*program);
  EXPECT_EQ(l.at("batch_norm+relu"), "nchw8c|nchw8c");  // the two after a conv were folded into it
  EXPECT_EQ(l.at("mean"), "nchw8c -> nchw");
  EXPECT_EQ(l.at("cat"), "nchw8c|nchw8c");
  for (int threads : {1, 2}) {
    Session s(*program, {.threads = threads});
    auto r = s.run(std::vector<HostValue>{HostValue::of(testing::host_tensor(x))});
    ASSERT_TRUE(r.ok()) << r.status().message();
    expect_close(floats_of(r->outputs[0].tensor), model(x).to_vector<float>(), 1e-4f, "dense blocks");
  }
}

// Squeeze-excitation: mean over H and W -> 1x1 -> relu -> 1x1 -> sigmoid -> mul(x, s) -> 1x1
// projection. The mul is folded into the projection (profile "mul+conv2d...", no "mul"):
// with weights smaller than an image of x (scaled weights per image, here with the block's
// residual add too) and with weights larger than it (x * s into a scratch copy); a scale of
// [1, C, 1, 1] that is a graph input (plain) keeps its mul and conv plain, unfolded. Channel
// counts are not multiples of 8 (padded lanes). Eager, unfused and observed runs agree.
TEST(LayoutPass, SqueezeExcitationScalesFoldIntoTheConvAfterThem) {
  if (!cpu::nchwc::kernels_available()) GTEST_SKIP() << "this build has no blocked kernels yet";
  const Tensor w1 = Tensor::randn({20, 3, 3, 3}, 31) * 0.3, b1 = Tensor::randn({20}, 32);
  const Tensor f1 = Tensor::randn({6, 20, 1, 1}, 33) * 0.3, fb1 = Tensor::randn({6}, 34);
  const Tensor f2 = Tensor::randn({20, 6, 1, 1}, 35) * 0.3, fb2 = Tensor::randn({20}, 36);
  const Tensor wp = Tensor::randn({12, 20, 1, 1}, 37) * 0.2, bp = Tensor::randn({12}, 38);
  const Tensor wz = Tensor::randn({12, 3, 1, 1}, 39) * 0.3;
  const Tensor wa = Tensor::randn({44, 12, 3, 3}, 40) * 0.1, wb = Tensor::randn({70, 44, 1, 1}, 41) * 0.1;
  const Tensor wc = Tensor::randn({9, 70, 1, 1}, 42) * 0.1;
  auto model = [&](Tensor x, Tensor g) {
    Tensor a = relu(conv2d(x, w1, b1, {1, 1}, {1, 1}));
    Tensor s = sigmoid(conv2d(relu(conv2d(mean(a, {2, 3}, true), f1, fb1)), f2, fb2));
    Tensor y = conv2d(a * s, wp, bp) + conv2d(x, wz);  // path: scaled weights (12x20 < 20x9x9)
    Tensor t = relu(conv2d(y, wa, Tensor(), {3, 3}));  // 44 channels at 3x3
    Tensor u = conv2d(t * sigmoid(mean(t, {2, 3}, true)), wb);  // path: scaled copy (70x44 > 44x3x3)
    return conv2d(relu(u) * g, wc);                             // a [1, 70, 1, 1] scale for every image
  };
  const Tensor x = Tensor::randn({2, 3, 9, 9}, 43), g = Tensor::randn({1, 70, 1, 1}, 44);
  auto ep = export_program([&](Tensor a, Tensor b) { return model(a, b); },
                           {input("x", x, {Dim("batch", 1, 8)}), input("g", g)});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  const auto program = testing::load_exported(*ep);
  const auto unfused = testing::load_exported(*ep, {.fuse_activations = false});
  ASSERT_NE(program, nullptr);
  ASSERT_NE(unfused, nullptr);
  for (std::int64_t batch : {2, 1, 3}) {
    const Tensor xb = Tensor::randn({batch, 3, 9, 9}, 50 + static_cast<std::uint64_t>(batch));
    const std::vector<float> want = model(xb, g).to_vector<float>();
    const std::vector<HostValue> in{HostValue::of(testing::host_tensor(xb)), HostValue::of(testing::host_tensor(g))};
    for (int threads : {1, 2}) {
      Session s(*program, {.threads = threads, .profile = true});
      auto r = s.run(in);
      ASSERT_TRUE(r.ok()) << r.status().message();
      expect_close(floats_of(r->outputs[0].tensor), want, 1e-4f, "folded vs eager, batch " + std::to_string(batch));
      std::map<std::string, int> ops;
      for (const RunStats::Op& op : s.last_stats().ops) ++ops[op.op];
      EXPECT_EQ(ops["mul"], 1);  // by g: a plain operand keeps its group plain, the conv too
      EXPECT_EQ(ops["mul+conv2d+add"], 1);
      EXPECT_EQ(ops["mul+conv2d+relu"], 1);
      Session su(*unfused, {.threads = threads});
      auto ru = su.run(in);
      ASSERT_TRUE(ru.ok()) << ru.status().message();
      expect_close(floats_of(r->outputs[0].tensor), floats_of(ru->outputs[0].tensor), 1e-4f, "folded vs unfused");
    }
  }
  // An observer sees the mul's product (computed for it) and the same output.
  std::vector<std::vector<float>> products;
  SessionOptions o;
  o.observer = [&](const NodeObservation& obs) {
    if (program->placement(obs.graph).at(obs.node).op != "mul" || obs.outputs.empty()) return;
    std::vector<float> f(obs.outputs[0].data.size() / sizeof(float));
    std::memcpy(f.data(), obs.outputs[0].data.data(), obs.outputs[0].data.size());
    products.push_back(std::move(f));
  };
  Session so(*program, o);
  auto ro = so.run(std::vector<HostValue>{HostValue::of(testing::host_tensor(x)), HostValue::of(testing::host_tensor(g))});
  ASSERT_TRUE(ro.ok()) << ro.status().message();
  expect_close(floats_of(ro->outputs[0].tensor), model(x, g).to_vector<float>(), 1e-4f, "observed run");
  ASSERT_EQ(products.size(), 3u);
  const Tensor a = relu(conv2d(x, w1, b1, {1, 1}, {1, 1}));
  const Tensor se = sigmoid(conv2d(relu(conv2d(mean(a, {2, 3}, true), f1, fb1)), f2, fb2));
  expect_close(products[0], (a * se).to_vector<float>(), 1e-4f, "observed first product");
}

// Inverted bottlenecks: a 1x1 expansion (+ its activation: one node, or silu spelled
// mul(x, sigmoid(x))) read only by a depthwise conv folds into it (profile
// "conv1x1>conv2d...", the expansion's nodes absent, a smaller arena); an expansion also read
// elsewhere, or strided, stays a node of its own. Eager, unfused and observed runs agree.
TEST(LayoutPass, ExpansionsFoldIntoTheDepthwiseConvAfterThem) {
  if (!cpu::nchwc::kernels_available()) GTEST_SKIP() << "this build has no blocked kernels yet";
  const Tensor w0 = Tensor::randn({16, 3, 3, 3}, 61) * 0.3, b0 = Tensor::randn({16}, 62);
  const Tensor e1 = Tensor::randn({44, 16, 1, 1}, 63) * 0.3, eb1 = Tensor::randn({44}, 64);
  const Tensor d1 = Tensor::randn({44, 1, 3, 3}, 65) * 0.3, db1 = Tensor::randn({44}, 66);
  const Tensor p1 = Tensor::randn({20, 44, 1, 1}, 67) * 0.2;
  const Tensor e2 = Tensor::randn({60, 20, 1, 1}, 68) * 0.2;
  const Tensor d2 = Tensor::randn({60, 1, 5, 5}, 69) * 0.2, db2 = Tensor::randn({60}, 70);
  const Tensor p2 = Tensor::randn({20, 60, 1, 1}, 71) * 0.2;
  const Tensor e3 = Tensor::randn({24, 20, 1, 1}, 72) * 0.2, d3 = Tensor::randn({24, 1, 3, 3}, 73) * 0.3;
  const Tensor e4 = Tensor::randn({24, 20, 1, 1}, 74) * 0.2, d4 = Tensor::randn({24, 1, 3, 3}, 75) * 0.3;
  auto model = [&](Tensor x) {
    Tensor a = relu(conv2d(x, w0, b0, {2, 2}, {1, 1}));  // strided: no Winograd workspace
    // Folded: relu6 expansion -> 3x3 stride-2 depthwise -> projection.
    Tensor h = clamp(conv2d(a, e1, eb1), 0.0, 6.0);
    Tensor b = conv2d(clamp(conv2d(h, d1, db1, {2, 2}, {1, 1}, {1, 1}, 44), 0.0, 6.0), p1);
    // Folded: a silu pattern expansion -> 5x5 depthwise + hardswish -> projection + residual.
    Tensor g = conv2d(b, e2);
    Tensor c = conv2d(hardswish(conv2d(g * sigmoid(g), d2, db2, {1, 1}, {2, 2}, {1, 1}, 60)), p2) + b;
    // Not folded: an expansion also read by a mean; a strided 1x1.
    Tensor u = relu(conv2d(c, e3));
    Tensor v = conv2d(u, d3, Tensor(), {1, 1}, {1, 1}, {1, 1}, 24) + mean(u, {2, 3}, true);
    Tensor z = conv2d(conv2d(c, e4, Tensor(), {2, 2}), d4, Tensor(), {1, 1}, {1, 1}, {1, 1}, 24);
    return mean(v, {2, 3}, false) + mean(z, {2, 3}, false);
  };
  const Tensor x = Tensor::randn({2, 3, 45, 41}, 76);
  auto ep = export_program(model, {input("x", x, {Dim("batch", 1, 8)})});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  const auto program = testing::load_exported(*ep);
  const auto unfused = testing::load_exported(*ep, {.fuse_activations = false});
  ASSERT_NE(program, nullptr);
  ASSERT_NE(unfused, nullptr);
  for (std::int64_t batch : {2, 1, 3}) {
    const Tensor xb = Tensor::randn({batch, 3, 45, 41}, 80 + static_cast<std::uint64_t>(batch));
    const std::vector<float> want = model(xb).to_vector<float>();
    const std::vector<HostValue> in{HostValue::of(testing::host_tensor(xb))};
    for (int threads : {1, 2, 3}) {
      Session s(*program, {.threads = threads, .profile = true});
      auto r = s.run(in);
      ASSERT_TRUE(r.ok()) << r.status().message();
      expect_close(floats_of(r->outputs[0].tensor), want, 1e-4f, "folded vs eager, batch " + std::to_string(batch));
      std::map<std::string, int> ops;
      for (const RunStats::Op& op : s.last_stats().ops) ++ops[op.op];
      EXPECT_EQ(ops["conv1x1>conv2d+clamp"], 1);
      EXPECT_EQ(ops["conv1x1>conv2d+hardswish"], 1);
      EXPECT_EQ(ops["conv2d+clamp"], 0);  // the folded expansion does not run
      EXPECT_EQ(ops["conv2d+silu"], 0);
      EXPECT_EQ(ops["conv2d+relu"], 2);   // the stem, and the expansion the mean reads too
      Session su(*unfused, {.threads = threads});
      auto ru = su.run(in);
      ASSERT_TRUE(ru.ok()) << ru.status().message();
      expect_close(floats_of(r->outputs[0].tensor), floats_of(ru->outputs[0].tensor), 1e-4f, "folded vs unfused");
      // The expanded tensors never take arena bytes.
      EXPECT_LT(s.last_stats().arena_bytes, su.last_stats().arena_bytes);
    }
  }
  // An observer sees the expansion's output (computed for it) and the same result.
  std::vector<std::vector<float>> expanded;
  SessionOptions o;
  o.observer = [&](const NodeObservation& obs) {
    if (program->placement(obs.graph).at(obs.node).op != "conv2d+clamp" || obs.outputs.empty()) return;
    std::vector<float> f(obs.outputs[0].data.size() / sizeof(float));
    std::memcpy(f.data(), obs.outputs[0].data.data(), obs.outputs[0].data.size());
    expanded.push_back(std::move(f));
  };
  o.profile = true;
  Session so(*program, o);
  auto ro = so.run(std::vector<HostValue>{HostValue::of(testing::host_tensor(x))});
  ASSERT_TRUE(ro.ok()) << ro.status().message();
  expect_close(floats_of(ro->outputs[0].tensor), model(x).to_vector<float>(), 1e-4f, "observed run");
  ASSERT_EQ(expanded.size(), 1u);
  // Observed, the expansions ran on their own, and the profile says so.
  std::map<std::string, int> observed_ops;
  for (const RunStats::Op& op : so.last_stats().ops) ++observed_ops[op.op];
  EXPECT_EQ(observed_ops["conv1x1>conv2d+clamp"], 0);
  EXPECT_EQ(observed_ops["conv1x1>conv2d+hardswish"], 0);
  EXPECT_EQ(observed_ops["conv2d+clamp"], 2);  // the expansion and its depthwise conv
  EXPECT_EQ(observed_ops["conv2d+hardswish"], 1);
  const Tensor a = relu(conv2d(x, w0, b0, {2, 2}, {1, 1}));
  expect_close(expanded[0], clamp(conv2d(a, e1, eb1), 0.0, 6.0).to_vector<float>(), 1e-4f, "observed expansion");
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// A Winograd conv2d runs its per-thread buffers in arena bytes planned for it
// (GraphPlan::workspace, alive at that node only): they overlap no tensor alive there, the
// convs of one stage get the same offset, and the run gives what eager execution gives.
TEST(LayoutPass, WinogradConvsWorkInArenaBytesPlannedForThem) {
  if (!cpu::nchwc::kernels_available()) GTEST_SKIP() << "this build has no blocked kernels yet";
  const Tensor stem = Tensor::randn({64, 3, 3, 3}, 41) * 0.3;
  const Tensor c1 = Tensor::randn({64, 64, 3, 3}, 42) * 0.05, c2 = Tensor::randn({64, 64, 3, 3}, 43) * 0.05;
  const Tensor d1 = Tensor::randn({64, 64, 3, 3}, 44) * 0.05;
  auto model = [&](Tensor x) {
    Tensor s = relu(conv2d(x, stem, Tensor(), {1, 1}, {1, 1}));
    Tensor p = max_pool2d(s, {2, 2}, {2, 2});
    Tensor b = relu(p + conv2d(relu(conv2d(p, c1, Tensor(), {1, 1}, {1, 1})), c2, Tensor(), {1, 1}, {1, 1}));
    return mean(relu(conv2d(b, d1, Tensor(), {1, 1}, {1, 1})), {2, 3}, false);
  };
  const Tensor x = Tensor::randn({1, 3, 56, 56}, 45);
  auto ep = export_program(model, {input("x", x)});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  const auto program = testing::load_exported(*ep);
  ASSERT_NE(program, nullptr);
  const std::uint32_t g = program->bundle().program().entry_graph();
  auto plan = plan_graph(*program, g, {}, {}, /*entry=*/true);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  const GraphPlan& gp = **plan;
  const GraphInfo& info = ProgramInternals::of(*program).graphs[g];
  std::vector<std::int32_t> producer(info.values.size(), -1);
  for (std::size_t n = 0; n < info.nodes.size(); ++n) {
    for (std::uint32_t v : info.nodes[n].outputs) producer[v] = static_cast<std::int32_t>(n);
  }
  int with_workspace = 0;
  std::vector<std::uint64_t> offsets;
  for (std::size_t n = 0; n < info.nodes.size(); ++n) {
    if (!info.nodes[n].workspace) continue;
    ASSERT_EQ(gp.workspace.size(), info.nodes.size());
    const auto [at, bytes] = gp.workspace[n];
    if (bytes == 0) continue;
    ++with_workspace;
    offsets.push_back(at);
    EXPECT_EQ(at % 64, 0u);
    EXPECT_LE(at + bytes, gp.arena_bytes);
    for (std::size_t v = 0; v < info.values.size(); ++v) {
      if (gp.offset[v] < 0 || producer[v] < 0) continue;
      const auto first = static_cast<std::size_t>(producer[v]);
      const auto last = static_cast<std::size_t>(std::max(info.values[v].last_use, producer[v]));
      if (n < first || n > last) continue;
      const auto begin = static_cast<std::uint64_t>(gp.offset[v]), end = begin + gp.reserved[v];
      EXPECT_TRUE(end <= at || begin >= at + bytes)
          << "node " << n << "'s workspace [" << at << ", +" << bytes << ") overlaps value " << v << " [" << begin
          << ", " << end << ") alive over nodes " << first << ".." << last;
    }
  }
  // All four convs (3x3, stride 1) take Winograd; the three after the pool share an offset.
  ASSERT_EQ(with_workspace, 4);
  EXPECT_EQ(offsets[1], offsets[2]);
  EXPECT_EQ(offsets[2], offsets[3]);
  for (int threads : {1, 2}) {
    Session s(*program, {.threads = threads});
    auto r = s.run(std::vector<HostValue>{HostValue::of(testing::host_tensor(x))});
    ASSERT_TRUE(r.ok()) << r.status().message();
    expect_close(floats_of(r->outputs[0].tensor), model(x).to_vector<float>(), 1e-4f, "threads " + std::to_string(threads));
  }
}

// A dense conv with a spatial kernel between layout-sensitive ops (a conv3d's taps between
// their permutes, as the importer writes them): its input and output stay plain, but it
// runs the blocked kernels, converting at its edges ("nchw (blocked kernel)"), and gives
// what the plain program and eager execution give, with a residual add fused into it, on
// the Winograd shape (3x3, 64 channels) and the direct one (3x1, stride 2).
TEST(LayoutPass, APlainConvBetweenPermutesRunsTheBlockedKernels) {
  if (!cpu::nchwc::kernels_available()) GTEST_SKIP() << "this build has no blocked kernels yet";
  const Tensor w3 = Tensor::randn({72, 64, 3, 3}, 21) * 0.05, b3 = Tensor::randn({72}, 22);
  const Tensor w31 = Tensor::randn({40, 72, 3, 1}, 23) * 0.05;
  auto model = [&](Tensor x, Tensor r) {
    // x [N, C, D, H, W] = [1, 64, 3, 13, 11] -> [N*D, C, H, W]: the reshape reads and writes plain.
    Tensor t = reshape(permute(x, {0, 2, 1, 3, 4}), {3, 64, 13, 11});
    Tensor a = relu(conv2d(t, w3, b3, {1, 1}, {1, 1}) + r);
    Tensor b = conv2d(a, w31, Tensor(), {2, 1}, {1, 0});
    return permute(reshape(b, {1, 3, 40, 7, 11}), {0, 2, 1, 3, 4});
  };
  const Tensor x = Tensor::randn({1, 64, 3, 13, 11}, 24), r = Tensor::randn({3, 72, 13, 11}, 25);
  auto ep = export_program(model, {input("x", x), input("r", r)});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  const auto blocked = testing::load_exported(*ep);
  const auto plain = testing::load_exported(*ep, {.blocked_layout = false});
  ASSERT_NE(blocked, nullptr);
  ASSERT_NE(plain, nullptr);
  int blocked_kernels = 0;
  for (const NodePlacement& n : blocked->placement(blocked->bundle().program().entry_graph())) {
    if (n.op.rfind("conv2d", 0) == 0) {
      EXPECT_EQ(n.layout, "nchw (blocked kernel)") << n.op;
      ++blocked_kernels;
    }
  }
  EXPECT_EQ(blocked_kernels, 2);
  for (const NodePlacement& n : plain->placement(plain->bundle().program().entry_graph())) EXPECT_EQ(n.layout, "") << n.op;
  const std::vector<float> want = model(x, r).template to_vector<float>();
  for (int threads : {1, 2}) {
    Session sb(*blocked, {.threads = threads}), sp(*plain, {.threads = threads});
    const std::vector<HostValue> in{HostValue::of(testing::host_tensor(x)), HostValue::of(testing::host_tensor(r))};
    auto rb = sb.run(in);
    auto rp = sp.run(in);
    ASSERT_TRUE(rb.ok()) << rb.status().message();
    ASSERT_TRUE(rp.ok()) << rp.status().message();
    expect_close(floats_of(rb->outputs[0].tensor), want, 1e-4f, "blocked kernels vs eager");
    expect_close(floats_of(rb->outputs[0].tensor), floats_of(rp->outputs[0].tensor), 1e-4f, "blocked kernels vs plain");
  }
}

}  // namespace
}  // namespace kiln

// plan_graph on its own (shape time, no kernels run): shapes from symbol values, buffers
// shared by reshapes and elementwise ops writing over dying inputs, values sized at run
// time left out of the arena, and negative sizes rejected naming the value.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "executor/memory_plan.h"
#include "executor/plan.h"
#include "kiln/export/serialize.h"
#include "kiln/runtime/program.h"
#include "common/exported.h"

namespace kiln {
namespace {

using sym::Expr;

ir::NodeMeta meta(std::uint32_t line) { return ir::NodeMeta{{"plan.cpp", line, 1}, "", ""}; }

std::shared_ptr<const Program> load(const ir::Program& p) { return testing::load_program(p); }

// plan_graph of graph 0 with its one symbol bound to n.
Result<std::unique_ptr<GraphPlan>> plan_with(const Program& program, std::int64_t n) {
  const std::vector<std::int64_t> symbols = {n};
  const std::vector<std::uint8_t> bound = {1};
  return plan_graph(program, 0, symbols, bound);
}

// x: f32[n] -> b = x + x -> c = reshape(b) -> d = relu(c) -> e = exp(d); r = reshape(x);
// outputs e and r.
struct Chain {
  ir::Program program;
  int x = 0, b = 0, c = 0, d = 0, e = 0, r = 0;
};

Chain chain_program(Expr size_of_b) {
  Chain out;
  ir::Program& p = out.program;
  p.name = "chain";
  const int s0 = *p.env.create_backed_symbol("n", {1, 1 << 20}, 8);
  const Expr S0 = Expr::symbol(s0);
  ir::Graph g;
  g.name = "main";
  out.x = g.add_value({ir::ValueKind::kTensor, DType::kF32, {S0}, {}, -1, "x"});
  out.b = g.add_value({ir::ValueKind::kTensor, DType::kF32, {size_of_b}, {}, -1, "b"});
  out.c = g.add_value({ir::ValueKind::kTensor, DType::kF32, {S0}, {}, -1, "c"});
  out.d = g.add_value({ir::ValueKind::kTensor, DType::kF32, {S0}, {}, -1, "d"});
  out.e = g.add_value({ir::ValueKind::kTensor, DType::kF32, {S0}, {}, -1, "e"});
  out.r = g.add_value({ir::ValueKind::kTensor, DType::kF32, {S0}, {}, -1, "r"});
  g.inputs = {out.x};
  g.outputs = {out.e, out.r};
  g.nodes.push_back({OpKind::Add, {out.x, out.x}, {out.b}, {}, {}, meta(1)});
  g.nodes.push_back({OpKind::Reshape, {out.b}, {out.c}, {std::vector<Expr>{S0}}, {}, meta(2)});
  g.nodes.push_back({OpKind::Relu, {out.c}, {out.d}, {}, {}, meta(3)});
  g.nodes.push_back({OpKind::Exp, {out.d}, {out.e}, {}, {}, meta(4)});
  g.nodes.push_back({OpKind::Reshape, {out.x}, {out.r}, {std::vector<Expr>{S0}}, {}, meta(5)});
  p.graphs = {g};
  p.inputs.push_back({"x", false, DType::kF32, {S0}, ir::Dynamism::kStatic, 0, {}});
  p.outputs.push_back({"e", false, DType::kF32, {S0}, {}});
  p.outputs.push_back({"r", false, DType::kF32, {S0}, {}});
  return out;
}

// plan_memory keeps the smaller of two greedy placements. Largest first puts A (short-lived)
// at 0, M1 at 0, and then the long-lived L above A: M2 no longer fits beside them (360
// units). Longest-lived first puts L at 0 and everything else above it: 310 units, the
// most bytes alive at one step (L + M1 + M2).
TEST(PlanMemory, ShortLivedBuffersPackAboveALongLivedOne) {
  constexpr std::uint64_t u = kArenaAlignment;
  const std::vector<BufferRequest> requests = {
      {200 * u, 0, 0},  // A
      {100 * u, 0, 2},  // L
      {150 * u, 1, 1},  // M1
      {60 * u, 1, 1},   // M2
  };
  const MemoryPlan mp = plan_memory(requests);
  EXPECT_EQ(mp.arena_bytes, 310 * u);
  EXPECT_EQ(mp.naive_bytes, 510 * u);
  for (std::size_t a = 0; a < requests.size(); ++a) {
    EXPECT_LE(mp.offsets[a] + requests[a].bytes, mp.arena_bytes);
    for (std::size_t b = a + 1; b < requests.size(); ++b) {
      const bool together = requests[a].first <= requests[b].last && requests[b].first <= requests[a].last;
      const bool apart = mp.offsets[a] + requests[a].bytes <= mp.offsets[b] || mp.offsets[b] + requests[b].bytes <= mp.offsets[a];
      EXPECT_TRUE(!together || apart) << "requests " << a << " and " << b << " overlap";
    }
  }
}

TEST(PlanGraph, ReshapesAndElementwiseOpsShareOneBuffer) {
  Chain chain = chain_program(Expr::symbol(0));
  auto program = load(chain.program);
  ASSERT_NE(program, nullptr);
  auto plan = plan_with(*program, 100);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  const GraphPlan& gp = **plan;
  EXPECT_EQ(gp.views[static_cast<std::size_t>(chain.e)].rank, 1);
  EXPECT_EQ(gp.views[static_cast<std::size_t>(chain.e)].shape[0], 100);
  // b, its reshape c, relu(c) and exp(d) all live in b's 400 bytes.
  const std::int64_t at = gp.offset[static_cast<std::size_t>(chain.b)];
  ASSERT_GE(at, 0);
  for (int v : {chain.c, chain.d, chain.e}) EXPECT_EQ(gp.offset[static_cast<std::size_t>(v)], at) << "value " << v;
  EXPECT_EQ(gp.arena_bytes, 448u);  // 400 rounded up to kArenaAlignment
  EXPECT_EQ(gp.naive_bytes, 5u * 400u);
  // A reshape of the caller's input shares the caller's bytes, outside the arena.
  EXPECT_EQ(gp.offset[static_cast<std::size_t>(chain.r)], -1);
  EXPECT_EQ(gp.alias[static_cast<std::size_t>(chain.r)], chain.x);
  EXPECT_EQ(gp.largest, chain.b);
  EXPECT_EQ(gp.largest_bytes, 400u);
}

// x: f32[n] -> b = x + x -> c = pad(b, pads) -> d = relu(c); output d. A pad of zeros
// shares b's bytes like a reshape; any other pad gets its own.
TEST(PlanGraph, AZeroPadSharesItsInputsBytes) {
  for (std::int64_t right : {0, 2}) {
    ir::Program p;
    p.name = "pad";
    const int s0 = *p.env.create_backed_symbol("n", {1, 1 << 20}, 8);
    const Expr S0 = Expr::symbol(s0);
    ir::Graph g;
    g.name = "main";
    const int x = g.add_value({ir::ValueKind::kTensor, DType::kF32, {S0}, {}, -1, "x"});
    const int b = g.add_value({ir::ValueKind::kTensor, DType::kF32, {S0}, {}, -1, "b"});
    const int c = g.add_value({ir::ValueKind::kTensor, DType::kF32, {S0 + Expr::constant(right)}, {}, -1, "c"});
    const int d = g.add_value({ir::ValueKind::kTensor, DType::kF32, {S0 + Expr::constant(right)}, {}, -1, "d"});
    g.inputs = {x};
    g.outputs = {d};
    g.nodes.push_back({OpKind::Add, {x, x}, {b}, {}, {}, meta(1)});
    g.nodes.push_back({OpKind::Pad, {b}, {c}, {std::vector<std::int64_t>{0, right}, 0.0}, {}, meta(2)});
    g.nodes.push_back({OpKind::Relu, {c}, {d}, {}, {}, meta(3)});
    p.graphs = {g};
    p.inputs.push_back({"x", false, DType::kF32, {S0}, ir::Dynamism::kStatic, 0, {}});
    p.outputs.push_back({"d", false, DType::kF32, {S0 + Expr::constant(right)}, {}});
    auto program = load(p);
    ASSERT_NE(program, nullptr);
    auto plan = plan_with(*program, 100);
    ASSERT_TRUE(plan.ok()) << plan.status().message();
    const GraphPlan& gp = **plan;
    if (right == 0) {
      EXPECT_EQ(gp.offset[static_cast<std::size_t>(c)], gp.offset[static_cast<std::size_t>(b)]);
    } else {
      EXPECT_NE(gp.offset[static_cast<std::size_t>(c)], gp.offset[static_cast<std::size_t>(b)]);
    }
    // And it runs: relu(x + x), then `right` zeros.
    Session session(*program);
    std::vector<float> xs(100);
    for (std::size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<float>(i) - 50.0f;
    auto r = session.run(std::vector<HostValue>{testing::floats(xs)});
    ASSERT_TRUE(r.ok()) << r.status().message();
    const HostTensor& out = r->outputs[0].tensor;
    ASSERT_EQ(out.shape, (std::vector<std::int64_t>{100 + right}));
    std::vector<float> got(static_cast<std::size_t>(100 + right));
    std::memcpy(got.data(), out.data.data(), got.size() * sizeof(float));
    for (std::size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], i < 100 ? std::max(0.0f, 2 * xs[i]) : 0.0f) << i;
  }
}

TEST(PlanGraph, NegativeSizeNamesTheValueAndItsExpression) {
  Chain chain = chain_program(Expr::symbol(0) - Expr::constant(10));
  auto program = load(chain.program);
  ASSERT_NE(program, nullptr);
  auto plan = plan_with(*program, 3);
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kInvalidInput);
  EXPECT_EQ(plan.status().message(), "value 1 of main would have a negative size -7 (s0 - 10) (plan.cpp:1)");
}

TEST(PlanGraph, SizesThatDoNotFitIn64BitsSaturateTheArena) {
  Chain chain = chain_program(Expr::symbol(0) * Expr::constant(std::int64_t{1} << 40));
  auto program = load(chain.program);
  ASSERT_NE(program, nullptr);
  auto plan = plan_with(*program, std::int64_t{1} << 21);  // 2^61 floats
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_EQ((*plan)->arena_bytes, UINT64_MAX);  // never allocated: the session's memory limit rejects it
  EXPECT_EQ((*plan)->largest, chain.b);
}

}  // namespace
}  // namespace kiln

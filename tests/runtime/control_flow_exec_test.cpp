// The executor runs cond, while_loop and invoke_subgraph per docs/FORMAT.md ("Higher-order
// ops"), on programs built directly as IR (independent of the tracing API), and plans
// memory: arenas smaller than the sum of the intermediates, in-place and aliasing safe.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "executor/memory_plan.h"
#include "kiln/export/serialize.h"
#include "kiln/runtime/program.h"
#include "common/exported.h"

namespace kiln {
namespace {

using sym::Expr;

ir::NodeMeta meta(std::uint32_t line) { return ir::NodeMeta{{"flow.cpp", line, 1}, "", ""}; }

std::shared_ptr<const Program> load(const ir::Program& p) { return testing::load_program(p); }

using testing::floats;

HostValue boolean(bool b) {
  HostTensor t;
  t.dtype = DType::kBool;
  t.data = {static_cast<std::uint8_t>(b)};
  return HostValue::of(std::move(t));
}

std::vector<float> values(const HostValue& v) {
  std::vector<float> out(v.tensor.data.size() / 4);
  std::memcpy(out.data(), v.tensor.data.data(), v.tensor.data.size());
  return out;
}

// out = cond(p, x): true -> exp(x) (size s), false -> cat(x, x) (size 2s); out: f32[u0].
ir::Program cond_program() {
  ir::Program p;
  p.name = "cond_sizes";
  const int s0 = *p.env.create_backed_symbol("n", {1, 64}, 3);
  const int u0 = p.env.create_unbacked_symbol(true);
  const Expr S0 = Expr::symbol(s0), U0 = Expr::symbol(u0);
  ir::Graph main;
  main.name = "main";
  const int pred = main.add_value({ir::ValueKind::kTensor, DType::kBool, {}, {}, -1, "p"});
  const int x = main.add_value({ir::ValueKind::kTensor, DType::kF32, {S0}, {}, -1, "x"});
  const int y = main.add_value({ir::ValueKind::kTensor, DType::kF32, {U0}, {}, -1, "y"});
  main.inputs = {pred, x};
  main.outputs = {y};
  main.nodes.push_back({OpKind::Cond, {pred, x}, {y}, {}, {1, 2}, meta(10)});
  main.bindings.push_back({u0, 0, 0, ir::UnbackedBinding::Kind::kSize, 0, 1});
  ir::Graph t;
  t.name = "true_branch";
  const int ta = t.add_value({ir::ValueKind::kTensor, DType::kF32, {S0}, {}, -1, "a"});
  const int tb = t.add_value({ir::ValueKind::kTensor, DType::kF32, {S0}, {}, -1, "b"});
  t.inputs = {ta};
  t.outputs = {tb};
  t.nodes.push_back({OpKind::Exp, {ta}, {tb}, {}, {}, meta(11)});
  ir::Graph f;
  f.name = "false_branch";
  const int fa = f.add_value({ir::ValueKind::kTensor, DType::kF32, {S0}, {}, -1, "a"});
  const int fb_ = f.add_value({ir::ValueKind::kTensor, DType::kF32, {S0 * Expr::constant(2)}, {}, -1, "b"});
  f.inputs = {fa};
  f.outputs = {fb_};
  f.nodes.push_back({OpKind::Cat, {fa, fa}, {fb_}, {std::int64_t{0}}, {}, meta(12)});
  p.graphs = {main, t, f};
  p.inputs.push_back({"p", false, DType::kBool, {}, ir::Dynamism::kStatic, 0, {}});
  p.inputs.push_back({"x", false, DType::kF32, {S0}, ir::Dynamism::kStatic, 0, {}});
  p.outputs.push_back({"y", false, DType::kF32, {U0}, {}});
  return p;
}

TEST(ControlFlowExec, CondRunsTheChosenBranchAndBindsItsSize) {
  auto program = load(cond_program());
  ASSERT_NE(program, nullptr);
  Session s(*program);
  for (int round = 0; round < 2; ++round) {  // the second round hits the plan cache
    auto r = s.run(std::vector<HostValue>{boolean(true), floats({0.0f, 1.0f})});
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_EQ(r->outputs[0].tensor.shape, std::vector<std::int64_t>{2});
    EXPECT_FLOAT_EQ(values(r->outputs[0])[1], std::exp(1.0f));
    r = s.run(std::vector<HostValue>{boolean(false), floats({3.0f, 4.0f, 5.0f})});
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_EQ(values(r->outputs[0]), (std::vector<float>{3, 4, 5, 3, 4, 5}));
    EXPECT_EQ(s.last_stats().plan_cached, round == 1);
  }
}

TEST(ControlFlowExec, CondPredicateMustHaveOneElement) {
  ir::Program p = cond_program();
  p.graphs[0].values[0].shape = {Expr::constant(2)};
  p.inputs[0].shape = {Expr::constant(2)};
  auto program = load(p);
  ASSERT_NE(program, nullptr);
  Session s(*program);
  HostTensor two;
  two.dtype = DType::kBool;
  two.shape = {2};
  two.data = {1, 0};
  auto r = s.run(std::vector<HostValue>{HostValue::of(two), floats({1.0f})});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidInput);
  EXPECT_EQ(r.status().message(), "the cond predicate must have one element, it has 2 (flow.cpp:10)");
}

// (i, acc) = while_loop(i < n, (i + 1, acc * 2)), with i an int carry, acc a tensor carry and
// n an additional SymInt input; then invoke_subgraph(double) twice on the result.
ir::Program loop_program(std::int64_t max_iterations = -1) {
  ir::Program p;
  p.name = "loop";
  const int s0 = *p.env.create_backed_symbol("m", {1, 16}, 4);
  const int n = *p.env.create_backed_symbol("n", {0, 1'000'000}, 3);
  const int u0 = p.env.create_unbacked_symbol(false);
  const int c0 = p.env.create_unbacked_symbol(false);  // the loop graphs' counter
  const int c1 = p.env.create_unbacked_symbol(false);  // the loop graphs' bound
  const Expr S0 = Expr::symbol(s0), N = Expr::symbol(n), U0 = Expr::symbol(u0), C0 = Expr::symbol(c0), C1 = Expr::symbol(c1);
  ir::Graph main;
  main.name = "main";
  const int x = main.add_value({ir::ValueKind::kTensor, DType::kF32, {S0}, {}, -1, "x"});
  const int nv = main.add_value({ir::ValueKind::kSymInt, DType::kI64, {}, N, -1, "n"});
  const int zero = main.add_value({ir::ValueKind::kSymInt, DType::kI64, {}, Expr::constant(0), -1, "zero"});
  const int i_out = main.add_value({ir::ValueKind::kSymInt, DType::kI64, {}, U0, -1, "i"});
  const int acc = main.add_value({ir::ValueKind::kTensor, DType::kF32, {S0}, {}, -1, "acc"});
  const int d1 = main.add_value({ir::ValueKind::kTensor, DType::kF32, {S0}, {}, -1, "d1"});
  const int d2 = main.add_value({ir::ValueKind::kTensor, DType::kF32, {S0}, {}, -1, "d2"});
  main.inputs = {x, nv};
  main.outputs = {i_out, d2};
  std::vector<ir::Attr> loop_attrs;
  if (max_iterations >= 0) loop_attrs.push_back(max_iterations);
  main.nodes.push_back({OpKind::WhileLoop, {zero, x, nv}, {i_out, acc}, loop_attrs, {1, 2}, meta(20)});
  main.nodes.push_back({OpKind::InvokeSubgraph, {acc}, {d1}, {std::string("double")}, {3}, meta(21)});
  main.nodes.push_back({OpKind::InvokeSubgraph, {d1}, {d2}, {std::string("double")}, {3}, meta(22)});
  main.bindings.push_back({u0, 0, 0, ir::UnbackedBinding::Kind::kScalar, 0, 1});
  // cond_fn(i, acc, n) -> i < n
  ir::Graph c;
  c.name = "loop_cond";
  const int ci = c.add_value({ir::ValueKind::kSymInt, DType::kI64, {}, C0, -1, "i"});
  const int ca = c.add_value({ir::ValueKind::kTensor, DType::kF32, {S0}, {}, -1, "acc"});
  const int cn = c.add_value({ir::ValueKind::kSymInt, DType::kI64, {}, C1, -1, "n"});
  const int cr = c.add_value({ir::ValueKind::kSymBool, DType::kBool, {}, sym::lt(C0, C1), -1, "go"});
  c.inputs = {ci, ca, cn};
  c.outputs = {cr};
  // body_fn(i, acc, n) -> (i + 1, acc + acc)
  ir::Graph b;
  b.name = "loop_body";
  const int bi = b.add_value({ir::ValueKind::kSymInt, DType::kI64, {}, C0, -1, "i"});
  const int ba = b.add_value({ir::ValueKind::kTensor, DType::kF32, {S0}, {}, -1, "acc"});
  const int bn = b.add_value({ir::ValueKind::kSymInt, DType::kI64, {}, C1, -1, "n"});
  const int bi1 = b.add_value({ir::ValueKind::kSymInt, DType::kI64, {}, C0 + Expr::constant(1), -1, "i1"});
  const int ba2 = b.add_value({ir::ValueKind::kTensor, DType::kF32, {S0}, {}, -1, "acc2"});
  b.inputs = {bi, ba, bn};
  b.outputs = {bi1, ba2};
  b.nodes.push_back({OpKind::Add, {ba, ba}, {ba2}, {}, {}, meta(23)});
  // double(a) -> a * 2 via a + a, through a reshape (aliasing) and relu (in place)
  ir::Graph d;
  d.name = "double";
  const int da = d.add_value({ir::ValueKind::kTensor, DType::kF32, {S0}, {}, -1, "a"});
  const int db = d.add_value({ir::ValueKind::kTensor, DType::kF32, {S0}, {}, -1, "b"});
  const int dc = d.add_value({ir::ValueKind::kTensor, DType::kF32, {S0}, {}, -1, "c"});
  const int dd = d.add_value({ir::ValueKind::kTensor, DType::kF32, {S0}, {}, -1, "d"});
  d.inputs = {da};
  d.outputs = {dd};
  d.nodes.push_back({OpKind::Add, {da, da}, {db}, {}, {}, meta(24)});
  d.nodes.push_back({OpKind::Reshape, {db}, {dc}, {std::vector<Expr>{S0}}, {}, meta(25)});
  d.nodes.push_back({OpKind::Relu, {dc}, {dd}, {}, {}, meta(26)});
  p.graphs = {main, c, b, d};
  p.inputs.push_back({"x", false, DType::kF32, {S0}, ir::Dynamism::kStatic, 0, {}});
  p.inputs.push_back({"n", true, DType::kI64, {}, ir::Dynamism::kDynamic, 0, N});
  p.outputs.push_back({"i", true, DType::kI64, {}, U0});
  p.outputs.push_back({"y", false, DType::kF32, {S0}, {}});
  return p;
}

TEST(ControlFlowExec, WhileLoopCarriesAnIntAndATensorThenSubgraphsRun) {
  auto program = load(loop_program());
  ASSERT_NE(program, nullptr);
  Session s(*program);
  for (std::int64_t n : {0, 1, 5, 3}) {
    auto r = s.run(std::vector<HostValue>{floats({1.0f, -2.0f}), HostValue::integer(n)});
    ASSERT_TRUE(r.ok()) << r.status().message();
    ASSERT_TRUE(r->outputs[0].is_int);
    EXPECT_EQ(r->outputs[0].int_value, n);
    const float scale = static_cast<float>(1 << n) * 4.0f;
    EXPECT_EQ(values(r->outputs[1]), (std::vector<float>{scale, 0.0f})) << "n=" << n;  // relu clips the negative
  }
}

TEST(ControlFlowExec, WhileLoopIterationLimitIsAnError) {
  auto program = load(loop_program(/*max_iterations=*/10));
  ASSERT_NE(program, nullptr);
  Session s(*program);
  auto r = s.run(std::vector<HostValue>{floats({1.0f}), HostValue::integer(10)});
  ASSERT_TRUE(r.ok()) << r.status().message();
  r = s.run(std::vector<HostValue>{floats({1.0f}), HostValue::integer(11)});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidInput);
  EXPECT_EQ(r.status().message(),
            "while_loop ran more than 10 iterations (raise SessionOptions::max_loop_iterations or the loop's max_iterations) (flow.cpp:20)");
  auto unlimited = load(loop_program());
  Session limited(*unlimited, {.max_loop_iterations = 100});
  r = limited.run(std::vector<HostValue>{floats({1.0f}), HostValue::integer(101)});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidInput);
}

TEST(ControlFlowExec, RecursiveSubgraphsAreRejectedAtLoad) {
  ir::Program p = loop_program();
  p.graphs[3].nodes.push_back({OpKind::InvokeSubgraph, {0}, {3}, {std::string("double")}, {3}, meta(30)});
  p.graphs[3].values.push_back({ir::ValueKind::kTensor, DType::kF32, {Expr::symbol(0)}, {}, -1, "e"});
  p.graphs[3].nodes.back().outputs = {4};
  auto bytes = serialize_bundle(p);
  ASSERT_TRUE(bytes.ok()) << bytes.status().message();
  auto bundle = Bundle::from_bytes(*bytes);
  ASSERT_FALSE(bundle.ok());
  EXPECT_NE(bundle.status().message().find("calls itself recursively"), std::string::npos) << bundle.status().message();
}

TEST(MemoryPlan, ReusesMemoryOfDeadTensors) {
  // A chain a -> b -> c -> d of 1 KiB tensors needs two buffers, not four.
  std::vector<BufferRequest> chain = {{1024, 0, 1}, {1024, 1, 2}, {1024, 2, 3}, {1024, 3, 4}};
  MemoryPlan mp = plan_memory(chain);
  EXPECT_EQ(mp.arena_bytes, 2048u);
  EXPECT_EQ(mp.naive_bytes, 4096u);
  for (std::size_t i = 0; i + 1 < chain.size(); ++i) EXPECT_NE(mp.offsets[i], mp.offsets[i + 1]);
}

TEST(MemoryPlan, TensorsAliveTogetherNeverOverlap) {
  std::uint64_t state = 12345;
  auto next = [&] { return state = state * 6364136223846793005ull + 1442695040888963407ull, state >> 33; };
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<BufferRequest> reqs;
    for (int i = 0; i < 60; ++i) {
      const auto first = static_cast<std::int32_t>(next() % 100);
      reqs.push_back({1 + next() % 5000, first, first + static_cast<std::int32_t>(next() % 30)});
    }
    const MemoryPlan mp = plan_memory(reqs);
    for (std::size_t i = 0; i < reqs.size(); ++i) {
      EXPECT_EQ(mp.offsets[i] % kArenaAlignment, 0u);
      EXPECT_LE(mp.offsets[i] + reqs[i].bytes, mp.arena_bytes);
      for (std::size_t j = i + 1; j < reqs.size(); ++j) {
        const bool live_together = !(reqs[i].last < reqs[j].first || reqs[j].last < reqs[i].first);
        const bool overlap = mp.offsets[i] < mp.offsets[j] + reqs[j].bytes && mp.offsets[j] < mp.offsets[i] + reqs[i].bytes;
        ASSERT_FALSE(live_together && overlap) << "trial " << trial << ": " << i << " and " << j;
      }
    }
  }
}

}  // namespace
}  // namespace kiln

// The run's limits (issue 16): a memory limit checked before every allocation sized by
// input values or data, a bound on subgraph nesting and on while_loop's max_iterations at
// verification, and a budget of executed nodes. Each case is a hostile bundle that used
// to abort (bad_alloc), overflow the stack or hang.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>

#include "kiln/export/serialize.h"
#include "kiln/runtime/program.h"
#include "common/exported.h"

namespace kiln {
namespace {

using sym::Expr;

ir::NodeMeta meta(std::uint32_t line) { return ir::NodeMeta{{"limits.cpp", line, 1}, "", ""}; }

Result<std::unique_ptr<Bundle>> open(const ir::Program& p) {
  auto bytes = serialize_bundle(p);
  EXPECT_TRUE(bytes.ok()) << bytes.status().message();
  if (!bytes.ok()) return bytes.status();
  return Bundle::from_bytes(*bytes);
}

std::shared_ptr<const Program> load(const ir::Program& p) { return testing::load_program(p); }

using testing::floats;

// y = full([n], 0.0): an int input sizes the output.
ir::Program full_program() {
  ir::Program p;
  p.name = "full";
  const int s0 = *p.env.create_backed_symbol("n", sym::ValueRange::at_least(1), 4);
  const Expr N = Expr::symbol(s0);
  ir::Graph g;
  g.name = "main";
  const int n = g.add_value({ir::ValueKind::kSymInt, DType::kI64, {}, N, -1, "n"});
  const int y = g.add_value({ir::ValueKind::kTensor, DType::kF32, {N}, {}, -1, "y"});
  g.inputs = {n};
  g.outputs = {y};
  g.nodes.push_back({OpKind::Full, {}, {y}, {std::vector<Expr>{N}, 0.0, DType::kF32}, {}, meta(12)});
  p.graphs = {g};
  p.inputs.push_back({"n", true, DType::kI64, {}, ir::Dynamism::kDynamic, 0, N});
  p.outputs.push_back({"y", false, DType::kF32, {N}, {}});
  return p;
}

TEST(Limits, MemoryLimitNamesTheInputTheNodeAndTheBytes) {
  auto program = load(full_program());
  ASSERT_NE(program, nullptr);
  Session s(*program, {.max_memory_bytes = 1'000'000});
  auto r = s.run(std::vector<HostValue>{HostValue::integer(1000)});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->outputs[0].tensor.shape, std::vector<std::int64_t>{1000});
  r = s.run(std::vector<HostValue>{HostValue::integer(1'000'000'000'000)});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidInput);
  EXPECT_EQ(exit_code(r.status().code()), 3);
  EXPECT_EQ(r.status().message(),
            "input n = 1000000000000 needs 3.6 TiB for node 'full' (limits.cpp:12), over the memory limit 976.6 KiB (--max-memory)");
  // A fresh session holds nothing yet; the default limit (a fraction of physical memory)
  // rejects it the same way instead of aborting on bad_alloc.
  Session fresh(*program);
  r = fresh.run(std::vector<HostValue>{HostValue::integer(1'000'000'000'000)});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidInput);
  EXPECT_EQ(r.status().message().rfind("input n = 1000000000000 needs 3.6 TiB for node 'full' (limits.cpp:12), over the memory limit ", 0), 0u)
      << r.status().message();
  // A size that does not fit in 64 bits at all.
  r = fresh.run(std::vector<HostValue>{HostValue::integer(std::int64_t{1} << 62)});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidInput);
  EXPECT_EQ(r.status().message().rfind("input n = 4611686018427387904 needs more than 16.0 EiB for node 'full'", 0), 0u) << r.status().message();
  EXPECT_GT(default_max_memory_bytes(), 0u);
}

// n_t: an i64 0-d tensor; u0 = n_t.item(); y = full([u0], 0.0) (sized at run time).
ir::Program item_program() {
  ir::Program p;
  p.name = "item";
  const int u0 = p.env.create_unbacked_symbol(true);
  const Expr U0 = Expr::symbol(u0);
  ir::Graph g;
  g.name = "main";
  const int t = g.add_value({ir::ValueKind::kTensor, DType::kI64, {}, {}, -1, "n_t"});
  const int u = g.add_value({ir::ValueKind::kSymInt, DType::kI64, {}, U0, -1, "u"});
  const int y = g.add_value({ir::ValueKind::kTensor, DType::kF32, {U0}, {}, -1, "y"});
  g.inputs = {t};
  g.outputs = {y};
  g.nodes.push_back({OpKind::Item, {t}, {u}, {}, {}, meta(30)});
  g.nodes.push_back({OpKind::Full, {}, {y}, {std::vector<Expr>{U0}, 0.0, DType::kF32}, {}, meta(31)});
  g.bindings.push_back({u0, 0, 0, ir::UnbackedBinding::Kind::kScalar, 0, 1});
  p.graphs = {g};
  p.inputs.push_back({"n_t", false, DType::kI64, {}, ir::Dynamism::kStatic, 0, {}});
  p.outputs.push_back({"y", false, DType::kF32, {U0}, {}});
  return p;
}

HostValue int_scalar(std::int64_t v) {
  HostTensor t;
  t.dtype = DType::kI64;
  t.data.resize(8);
  std::memcpy(t.data.data(), &v, 8);
  return HostValue::of(std::move(t));
}

TEST(Limits, DataDependentSizeOverTheLimitIsAnInputError) {
  auto program = load(item_program());
  ASSERT_NE(program, nullptr);
  Session s(*program, {.max_memory_bytes = std::uint64_t{1} << 30});
  auto r = s.run(std::vector<HostValue>{int_scalar(3)});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->outputs[0].tensor.shape, std::vector<std::int64_t>{3});
  r = s.run(std::vector<HostValue>{int_scalar(std::int64_t{1} << 40)});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidInput);
  EXPECT_EQ(r.status().message().rfind("symbol u0 = 1099511627776 needs 4.0 TiB for node 'full' (limits.cpp:31)", 0), 0u) << r.status().message();
  EXPECT_NE(r.status().message().find("over the memory limit 1.0 GiB (--max-memory)"), std::string::npos) << r.status().message();
}

// main -> g1 -> ... -> g<depth>: each graph invokes the next on its input; the last relus.
ir::Program nested_program(int depth, int calls_per_level = 1) {
  ir::Program p;
  p.name = "nested";
  const int s0 = *p.env.create_backed_symbol("m", {1, 16}, 2);
  const Expr S0 = Expr::symbol(s0);
  for (int level = 0; level <= depth; ++level) {
    ir::Graph g;
    g.name = level == 0 ? "main" : "g" + std::to_string(level);
    int v = g.add_value({ir::ValueKind::kTensor, DType::kF32, {S0}, {}, -1, "a"});
    g.inputs = {v};
    const int calls = level == depth ? 1 : calls_per_level;
    for (int c = 0; c < calls; ++c) {
      const int out = g.add_value({ir::ValueKind::kTensor, DType::kF32, {S0}, {}, -1, "b" + std::to_string(c)});
      if (level == depth) {
        g.nodes.push_back({OpKind::Relu, {v}, {out}, {}, {}, meta(40)});
      } else {
        g.nodes.push_back({OpKind::InvokeSubgraph, {v}, {out}, {std::string("next")}, {level + 1}, meta(static_cast<std::uint32_t>(100 + level))});
      }
      v = out;
    }
    g.outputs = {v};
    p.graphs.push_back(std::move(g));
  }
  p.inputs.push_back({"x", false, DType::kF32, {S0}, ir::Dynamism::kStatic, 0, {}});
  p.outputs.push_back({"y", false, DType::kF32, {S0}, {}});
  return p;
}

TEST(Limits, SubgraphNestingIsBoundedAtVerification) {
  auto program = load(nested_program(64));  // 64 levels of calls: the limit
  ASSERT_NE(program, nullptr);
  Session s(*program);
  auto r = s.run(std::vector<HostValue>{floats({-1.0f, 2.0f})});
  ASSERT_TRUE(r.ok()) << r.status().message();
  auto bundle = open(nested_program(65));
  ASSERT_FALSE(bundle.ok());
  EXPECT_EQ(bundle.status().code(), StatusCode::kInvalidBundle);
  EXPECT_NE(bundle.status().message().find("subgraph calls nest 65 deep, above the limit of 64"), std::string::npos)
      << bundle.status().message();
  bundle = open(nested_program(2000));  // used to overflow the stack when run
  ASSERT_FALSE(bundle.ok());
  EXPECT_EQ(bundle.status().code(), StatusCode::kInvalidBundle);
}

TEST(Limits, CallsThatMultiplyRunOutOfTheNodeBudget) {
  auto program = load(nested_program(30, /*calls_per_level=*/2));  // 2^30 leaf calls
  ASSERT_NE(program, nullptr);
  Session s(*program, {.max_nodes_executed = 100'000});
  const auto t0 = std::chrono::steady_clock::now();
  auto r = s.run(std::vector<HostValue>{floats({1.0f})});
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidInput);
  EXPECT_EQ(r.status().message().rfind(
                "the run executed more than 100000 nodes (its budget, SessionOptions::max_nodes_executed) inside invoke_subgraph (limits.cpp:1", 0),
            0u)
      << r.status().message();
  EXPECT_LT(seconds, 10.0);
  std::printf("100000 nodes in %.3f s\n", seconds);
}

// while_loop(cond: full([], true), body: relu) over x, with max_iterations `max`.
ir::Program endless_loop(std::int64_t max) {
  ir::Program p;
  p.name = "endless";
  const int s0 = *p.env.create_backed_symbol("m", {1, 16}, 2);
  const Expr S0 = Expr::symbol(s0);
  ir::Graph main;
  main.name = "main";
  const int x = main.add_value({ir::ValueKind::kTensor, DType::kF32, {S0}, {}, -1, "x"});
  const int y = main.add_value({ir::ValueKind::kTensor, DType::kF32, {S0}, {}, -1, "y"});
  main.inputs = {x};
  main.outputs = {y};
  main.nodes.push_back({OpKind::WhileLoop, {x}, {y}, {max}, {1, 2}, meta(50)});
  ir::Graph c;
  c.name = "always";
  const int ca = c.add_value({ir::ValueKind::kTensor, DType::kF32, {S0}, {}, -1, "a"});
  const int cr = c.add_value({ir::ValueKind::kTensor, DType::kBool, {}, {}, -1, "go"});
  c.inputs = {ca};
  c.outputs = {cr};
  c.nodes.push_back({OpKind::Full, {}, {cr}, {std::vector<Expr>{}, 1.0, DType::kBool}, {}, meta(51)});
  ir::Graph b;
  b.name = "body";
  const int ba = b.add_value({ir::ValueKind::kTensor, DType::kF32, {S0}, {}, -1, "a"});
  const int bb = b.add_value({ir::ValueKind::kTensor, DType::kF32, {S0}, {}, -1, "b"});
  b.inputs = {ba};
  b.outputs = {bb};
  b.nodes.push_back({OpKind::Relu, {ba}, {bb}, {}, {}, meta(52)});
  p.graphs = {main, c, b};
  p.inputs.push_back({"x", false, DType::kF32, {S0}, ir::Dynamism::kStatic, 0, {}});
  p.outputs.push_back({"y", false, DType::kF32, {S0}, {}});
  return p;
}

TEST(Limits, NegativeMaxIterationsIsRejectedAtVerification) {
  auto bundle = open(endless_loop(-1));
  ASSERT_FALSE(bundle.ok());
  EXPECT_EQ(bundle.status().code(), StatusCode::kInvalidBundle);
  EXPECT_NE(bundle.status().message().find("(while_loop): max_iterations -1 is negative"), std::string::npos) << bundle.status().message();
}

TEST(Limits, EndlessLoopRunsOutOfTheNodeBudget) {
  auto program = load(endless_loop(INT64_MAX));
  ASSERT_NE(program, nullptr);
  Session s(*program, {.max_nodes_executed = 10'000});
  auto r = s.run(std::vector<HostValue>{floats({1.0f, 2.0f})});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidInput);
  EXPECT_EQ(r.status().message(),
            "the run executed more than 10000 nodes (its budget, SessionOptions::max_nodes_executed) inside while_loop (limits.cpp:50)");
  // A loop within the budget still runs, and the budget is per run.
  auto finite = load(endless_loop(3));
  ASSERT_NE(finite, nullptr);
  Session t(*finite, {.max_nodes_executed = 10});
  for (int round = 0; round < 2; ++round) {
    r = t.run(std::vector<HostValue>{floats({1.0f, 2.0f})});
    ASSERT_FALSE(r.ok());  // max_iterations 3 exceeded: the loop's own limit
    EXPECT_NE(r.status().message().find("while_loop ran more than 3 iterations"), std::string::npos) << r.status().message();
  }
}

// y = cond(p, x): both branches exp(x); the branch's result is copied out of its arena.
ir::Program cond_program() {
  ir::Program p;
  p.name = "cond";
  const int s0 = *p.env.create_backed_symbol("n", {1, 1 << 20}, 4);
  const Expr S0 = Expr::symbol(s0);
  ir::Graph main;
  main.name = "main";
  const int pred = main.add_value({ir::ValueKind::kTensor, DType::kBool, {}, {}, -1, "p"});
  const int x = main.add_value({ir::ValueKind::kTensor, DType::kF32, {S0}, {}, -1, "x"});
  const int y = main.add_value({ir::ValueKind::kTensor, DType::kF32, {S0}, {}, -1, "y"});
  main.inputs = {pred, x};
  main.outputs = {y};
  main.nodes.push_back({OpKind::Cond, {pred, x}, {y}, {}, {1, 2}, meta(70)});
  p.graphs = {main};
  for (const char* name : {"then", "else"}) {
    ir::Graph b;
    b.name = name;
    const int a = b.add_value({ir::ValueKind::kTensor, DType::kF32, {S0}, {}, -1, "a"});
    const int e = b.add_value({ir::ValueKind::kTensor, DType::kF32, {S0}, {}, -1, "e"});
    b.inputs = {a};
    b.outputs = {e};
    b.nodes.push_back({OpKind::Exp, {a}, {e}, {}, {}, meta(71)});
    p.graphs.push_back(std::move(b));
  }
  p.inputs.push_back({"p", false, DType::kBool, {}, ir::Dynamism::kStatic, 0, {}});
  p.inputs.push_back({"x", false, DType::kF32, {S0}, ir::Dynamism::kStatic, 0, {}});
  p.outputs.push_back({"y", false, DType::kF32, {S0}, {}});
  return p;
}

TEST(Limits, ControlFlowResultCopiesCountAgainstTheLimit) {
  auto program = load(cond_program());
  ASSERT_NE(program, nullptr);
  HostTensor pred;
  pred.dtype = DType::kBool;
  pred.data = {1};
  const std::vector<HostValue> inputs = {HostValue::of(pred), floats(std::vector<float>(1000, 1.0f))};
  Session roomy(*program, {.max_memory_bytes = 1 << 20});
  auto r = roomy.run(inputs);
  ASSERT_TRUE(r.ok()) << r.status().message();
  // main's arena (y, 4032 bytes) fits, the branch's (4032 more) does not.
  Session tight(*program, {.max_memory_bytes = 6000});
  r = tight.run(inputs);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidInput);
  EXPECT_EQ(r.status().message(),
            "input x.size(0) = 1000 needs 3.9 KiB for node 'exp' (limits.cpp:71) (3.9 KiB already in use), over the memory limit 5.9 KiB "
            "(--max-memory)");
  // Both arenas fit; the copy of the branch's result (4000 more) does not.
  Session copy(*program, {.max_memory_bytes = 10000});
  r = copy.run(inputs);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidInput);
  EXPECT_EQ(r.status().message(), "main needs 3.9 KiB for node 'cond' (limits.cpp:70) (7.9 KiB already in use), over the memory limit 9.8 KiB (--max-memory)");
}

}  // namespace
}  // namespace kiln

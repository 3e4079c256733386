// Reusing a plan for new int inputs (docs/PERFORMANCE.md, "KV-cache decoding"): an entry
// plan is cached per input shapes; a call with the same shapes and other int inputs (a
// decode step at the next position) binds and checks its inputs as usual, then update_plan
// re-evaluates the shapes and attributes that mention a changed symbol, keeping the memory
// plan when every tensor still fits its place and every reuse decision still holds. A plan
// made again because sizes grew gets headroom, so that the next positions reuse it.
#include <gtest/gtest.h>

#include <cstring>

#include "../../samples/models/kv_decoder.h"
#include "common/exported.h"
#include "executor/plan.h"
#include "kiln/export/serialize.h"
#include "kiln/runtime/program.h"

namespace kiln {
namespace {

using sym::Expr;

// ---------------------------------------------------------------------------------------
// update_plan on its own

ir::NodeMeta meta(std::uint32_t line) { return ir::NodeMeta{{"plan_reuse.cpp", line, 1}, "", ""}; }

// x: f32[n] -> b = x + x (shape `size_of_b`) -> c = reshape(b, [n]) -> d = relu(c) -> e = exp(d).
struct Chain {
  ir::Program program;
  int x = 0, b = 0, c = 0, d = 0, e = 0;
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
  g.inputs = {out.x};
  g.outputs = {out.e};
  g.nodes.push_back({OpKind::Add, {out.x, out.x}, {out.b}, {}, {}, meta(1)});
  g.nodes.push_back({OpKind::Reshape, {out.b}, {out.c}, {std::vector<Expr>{S0}}, {}, meta(2)});
  g.nodes.push_back({OpKind::Relu, {out.c}, {out.d}, {}, {}, meta(3)});
  g.nodes.push_back({OpKind::Exp, {out.d}, {out.e}, {}, {}, meta(4)});
  p.graphs = {g};
  p.inputs.push_back({"x", false, DType::kF32, {S0}, ir::Dynamism::kStatic, 0, {}});
  p.outputs.push_back({"e", false, DType::kF32, {S0}, {}});
  return out;
}

const std::vector<std::uint8_t> kBound = {1};

std::vector<std::int64_t> shape_of(const TensorView& v) { return {v.shape.begin(), v.shape.begin() + v.rank}; }

TEST(UpdatePlan, SmallerSizesKeepTheirPlacesWithTheShapesAndAttributesOfAFreshPlan) {
  Chain chain = chain_program(Expr::symbol(0));
  auto program = testing::load_program(chain.program);
  ASSERT_NE(program, nullptr);
  auto plan = plan_graph(*program, 0, std::vector<std::int64_t>{100}, kBound);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  GraphPlan& gp = **plan;
  const std::vector<std::int64_t> offsets = gp.offset;
  const std::uint64_t arena = gp.arena_bytes;
  ASSERT_TRUE(update_plan(*program, gp, std::vector<std::int64_t>{60}));
  auto fresh = plan_graph(*program, 0, std::vector<std::int64_t>{60}, kBound);
  ASSERT_TRUE(fresh.ok());
  for (std::size_t v = 0; v < gp.views.size(); ++v) {
    EXPECT_EQ(shape_of(gp.views[v]), shape_of((*fresh)->views[v])) << "value " << v;
    EXPECT_EQ(gp.views[v].dtype, (*fresh)->views[v].dtype) << "value " << v;
  }
  // The reshape's attribute [n] is re-evaluated.
  ASSERT_EQ(gp.attrs[1].ints.size(), 1u);
  EXPECT_EQ(gp.attrs[1].ints[0], (std::vector<std::int64_t>{60}));
  EXPECT_EQ(gp.attrs[1].ints, (*fresh)->attrs[1].ints);
  EXPECT_EQ(gp.symbols, (std::vector<std::int64_t>{60}));
  EXPECT_EQ(gp.offset, offsets);
  EXPECT_EQ(gp.arena_bytes, arena);  // the arena keeps 100 floats' room
  EXPECT_EQ(gp.naive_bytes, (*fresh)->naive_bytes);
  EXPECT_EQ(gp.largest_bytes, 240u);
  // Back up to 100 fits; 101 floats do not fit the 400 bytes b's place holds.
  EXPECT_TRUE(update_plan(*program, gp, std::vector<std::int64_t>{100}));
  EXPECT_FALSE(update_plan(*program, gp, std::vector<std::int64_t>{101}));
}

TEST(UpdatePlan, HeadroomMakesRoomForLargerSizesUpToIt) {
  Chain chain = chain_program(Expr::symbol(0));
  auto program = testing::load_program(chain.program);
  ASSERT_NE(program, nullptr);
  auto plan = plan_graph(*program, 0, std::vector<std::int64_t>{100}, kBound, false, std::vector<std::int64_t>{164});
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  GraphPlan& gp = **plan;
  // The shapes are those of n = 100; the arena holds 164 floats.
  EXPECT_EQ(shape_of(gp.views[static_cast<std::size_t>(chain.e)]), (std::vector<std::int64_t>{100}));
  EXPECT_EQ(gp.naive_bytes, 4u * 400u);
  EXPECT_EQ(gp.arena_bytes, 704u);  // 656 rounded up to kArenaAlignment
  EXPECT_TRUE(update_plan(*program, gp, std::vector<std::int64_t>{164}));
  EXPECT_EQ(shape_of(gp.views[static_cast<std::size_t>(chain.e)]), (std::vector<std::int64_t>{164}));
  EXPECT_FALSE(update_plan(*program, gp, std::vector<std::int64_t>{165}));
}

TEST(UpdatePlan, AReuseDecisionThatNoLongerHoldsRefusesTheUpdate) {
  // b is f32[8] whatever n is: at n = 8 the reshape b -> c[n] shares b's bytes (equal
  // sizes); at n = 4 it could not, although every size shrinks.
  Chain chain = chain_program(Expr::constant(8));
  auto program = testing::load_program(chain.program);
  ASSERT_NE(program, nullptr);
  auto plan = plan_graph(*program, 0, std::vector<std::int64_t>{8}, kBound);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_EQ((*plan)->offset[static_cast<std::size_t>(chain.c)], (*plan)->offset[static_cast<std::size_t>(chain.b)]);
  EXPECT_FALSE(update_plan(*program, **plan, std::vector<std::int64_t>{4}));
}

// y = full([10 - n], 1.0) for an int input n >= 1.
ir::Program shrinking_program() {
  ir::Program p;
  p.name = "shrinking";
  const int s0 = *p.env.create_backed_symbol("n", sym::ValueRange::at_least(1), 4);
  const Expr N = Expr::symbol(s0), size = Expr::constant(10) - N;
  ir::Graph g;
  g.name = "main";
  const int n = g.add_value({ir::ValueKind::kSymInt, DType::kI64, {}, N, -1, "n"});
  const int y = g.add_value({ir::ValueKind::kTensor, DType::kF32, {size}, {}, -1, "y"});
  g.inputs = {n};
  g.outputs = {y};
  g.nodes.push_back({OpKind::Full, {}, {y}, {std::vector<Expr>{size}, 1.0, DType::kF32}, {}, meta(12)});
  p.graphs = {g};
  p.inputs.push_back({"n", true, DType::kI64, {}, ir::Dynamism::kDynamic, 0, N});
  p.outputs.push_back({"y", false, DType::kF32, {size}, {}});
  return p;
}

TEST(PlanReuse, AnIntInputThatCannotBePlannedFailsAndLeavesTheSessionUsable) {
  auto program = testing::load_program(shrinking_program());
  ASSERT_NE(program, nullptr);
  Session s(*program);
  ASSERT_TRUE(s.run(std::vector<HostValue>{HostValue::integer(3)}).ok());
  auto r = s.run(std::vector<HostValue>{HostValue::integer(7)});  // smaller: the plan is updated
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_TRUE(s.last_stats().plan_reused);
  EXPECT_EQ(r->outputs[0].tensor.shape, (std::vector<std::int64_t>{3}));
  // 10 - 12 < 0: the update refuses it, and planning afresh names the value.
  r = s.run(std::vector<HostValue>{HostValue::integer(12)});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidInput);
  EXPECT_EQ(r.status().message(), "value 1 of main would have a negative size -2 (-s0 + 10) (plan_reuse.cpp:12)");
  // The session still runs both earlier values.
  for (std::int64_t n : {7, 3}) {
    r = s.run(std::vector<HostValue>{HostValue::integer(n)});
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_EQ(r->outputs[0].tensor.shape, (std::vector<std::int64_t>{10 - n}));
    for (std::int64_t i = 0; i < 10 - n; ++i) EXPECT_EQ(r->outputs[0].tensor.element(i), 1.0) << i;
  }
}

// ---------------------------------------------------------------------------------------
// Sessions decoding with the traced decoder of samples/models/kv_decoder.h (small)

constexpr std::int64_t kMaxCtx = 200;

std::shared_ptr<const Program> decoder() {
  static models::KvDecoder model({.vocab = 16, .d = 16, .layers = 2, .heads = 2, .max_ctx = kMaxCtx});
  Dim seq("seq", 1, kMaxCtx);
  ExportOptions eo;
  eo.self_tests = 0;
  auto ep = export_program([&](Tensor ids, SymInt pos) { return model.step(ids, pos); },
                           {input("ids", Tensor::from_ints({1, 3}, std::vector<std::int64_t>{1, 2, 3}), {Dim::STATIC, seq}),
                            int_input("input_pos", 2, Dim::DYNAMIC)},
                           eo);
  EXPECT_TRUE(ep.ok()) << ep.status().message();
  return ep.ok() ? testing::load_exported(*ep) : nullptr;
}

HostValue ids(std::vector<std::int64_t> v) {
  HostTensor t{DType::kI64, {1, static_cast<std::int64_t>(v.size())}, std::vector<std::uint8_t>(v.size() * 8)};
  std::memcpy(t.data.data(), v.data(), t.data.size());
  return HostValue::of(std::move(t));
}

std::vector<HostValue> step_at(std::int64_t pos) { return {ids({(pos * 7 + 3) % 16}), HostValue::integer(pos)}; }

TEST(PlanReuse, DecodingAtNewPositionsReusesThePlanWithTheResultsOfAFreshPlan) {
  auto program = decoder();
  ASSERT_NE(program, nullptr);
  Session s(*program);
  ASSERT_TRUE(s.run(std::vector<HostValue>{ids({3, 1, 4, 1, 5}), HostValue::integer(0)}).ok());
  int reused = 0, planned = 0;
  for (std::int64_t pos = 5; pos < kMaxCtx; ++pos) {
    SCOPED_TRACE(pos);
    // The same step in a fresh Session (a fresh plan) from the same state.
    Session fresh(*program);
    ASSERT_TRUE(fresh.restore_state(s.snapshot_state()).ok());
    auto want = fresh.run(step_at(pos));
    ASSERT_TRUE(want.ok()) << want.status().message();
    EXPECT_FALSE(fresh.last_stats().plan_reused);
    auto got = s.run(step_at(pos));
    ASSERT_TRUE(got.ok()) << got.status().message();
    EXPECT_EQ(got->outputs[0].tensor.shape, want->outputs[0].tensor.shape);
    EXPECT_EQ(got->outputs[0].tensor.data, want->outputs[0].tensor.data);  // bit for bit
    const StateSnapshot a = s.snapshot_state(), b = fresh.snapshot_state();
    for (std::size_t k = 0; k < a.values.size(); ++k) EXPECT_EQ(a.values[k].data, b.values[k].data) << a.names[k];
    EXPECT_FALSE(s.last_stats().plan_cached);
    EXPECT_EQ(s.last_stats().state_bytes_written, fresh.last_stats().state_bytes_written);
    (s.last_stats().plan_reused ? reused : planned) += 1;
  }
  // Planned: the first decode step, the next (its sizes outgrew the exact plan: planned
  // again with room for 64 more positions), then after every 64 positions.
  EXPECT_EQ(planned, 4);
  EXPECT_EQ(reused, static_cast<int>(kMaxCtx - 5) - planned);
  // The folded cache slices (the matmuls read windows of the caches) take no arena bytes:
  // one would be 2 heads x 8 x 200 floats now, with room for 64 more positions.
  EXPECT_LT(s.last_stats().arena_bytes, 2u * 8 * kMaxCtx * 4);
  // The same position again is a plain cache hit.
  ASSERT_TRUE(s.run(step_at(kMaxCtx - 1)).ok());
  EXPECT_TRUE(s.last_stats().plan_cached);
  EXPECT_FALSE(s.last_stats().plan_reused);
  // Going back to an earlier position (rewinding) reuses the plan too.
  ASSERT_TRUE(s.run(step_at(40)).ok());
  EXPECT_TRUE(s.last_stats().plan_reused);
}

TEST(PlanReuse, RuntimeAssertsAndRangeChecksStillFireAtTheRightPositions) {
  auto program = decoder();
  ASSERT_NE(program, nullptr);
  Session s(*program);
  ASSERT_TRUE(s.run(std::vector<HostValue>{ids({3, 1, 4, 1, 5}), HostValue::integer(0)}).ok());
  for (std::int64_t pos = 5; pos < kMaxCtx; ++pos) ASSERT_TRUE(s.run(step_at(pos)).ok()) << pos;
  const StateSnapshot before = s.snapshot_state();
  // One past the cache: the plan of the last position is reused for nothing.
  auto r = s.run(step_at(kMaxCtx));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidInput);
  const std::string first_message = r.status().message();
  EXPECT_EQ(first_message, "runtime assertion failed: s0 + s1 <= 200 (kv_decoder.h:68, att.0)");
  // Two tokens at the last position: a different shape, planned afresh, the same check.
  auto two = s.run(std::vector<HostValue>{ids({1, 2}), HostValue::integer(kMaxCtx - 1)});
  ASSERT_FALSE(two.ok());
  EXPECT_EQ(two.status().message(), first_message);
  auto negative = s.run(step_at(-1));
  ASSERT_FALSE(negative.ok());
  EXPECT_EQ(negative.status().code(), StatusCode::kInvalidInput);
  EXPECT_EQ(negative.status().message(), "input input_pos = -1 (input_pos, s1) is outside the range [0, inf] (narrowed at kv_decoder.h:68, att.0)");
  const StateSnapshot after = s.snapshot_state();
  for (std::size_t k = 0; k < before.values.size(); ++k) EXPECT_EQ(after.values[k].data, before.values[k].data) << before.names[k];
  // The last position still runs, reusing the plan.
  ASSERT_TRUE(s.run(step_at(kMaxCtx - 2)).ok());
  EXPECT_TRUE(s.last_stats().plan_reused);
}

TEST(PlanReuse, OtherInputShapesArePlannedSeparately) {
  auto program = decoder();
  ASSERT_NE(program, nullptr);
  Session s(*program);
  ASSERT_TRUE(s.run(std::vector<HostValue>{ids({3, 1, 4}), HostValue::integer(0)}).ok());
  EXPECT_FALSE(s.last_stats().plan_cached);
  EXPECT_FALSE(s.last_stats().plan_reused);
  // Two tokens: another shape, a new plan.
  ASSERT_TRUE(s.run(std::vector<HostValue>{ids({1, 5}), HostValue::integer(3)}).ok());
  EXPECT_FALSE(s.last_stats().plan_cached);
  EXPECT_FALSE(s.last_stats().plan_reused);
  // Two tokens at a smaller position: the two-token plan, reused.
  ASSERT_TRUE(s.run(std::vector<HostValue>{ids({9, 2}), HostValue::integer(1)}).ok());
  EXPECT_TRUE(s.last_stats().plan_reused);
  EXPECT_EQ(s.last_stats().state_bytes_written, 2u * 2 /*layers*/ * 2 /*k, v*/ * 16 * 4);
  // Three tokens at 0 again: the first plan, its int inputs unchanged.
  ASSERT_TRUE(s.run(std::vector<HostValue>{ids({3, 1, 4}), HostValue::integer(0)}).ok());
  EXPECT_TRUE(s.last_stats().plan_cached);
}

}  // namespace
}  // namespace kiln

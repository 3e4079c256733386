// Exported cond / while_loop / compile-region programs run by kiln::Session against eager
// execution of the same model code (export -> bundle -> run).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "control_flow_models.h"
#include "kiln/runtime/program.h"

namespace kiln {
namespace {

using namespace cf_models;

HostValue host(const Tensor& t) {
  HostTensor h;
  h.dtype = t.dtype();
  h.shape = t.concrete_shape();
  h.data = t.bytes();
  return HostValue::of(std::move(h));
}

// Every test runs on each backend: "cpu", and "vulkan" where a device is usable (Mesa's
// lavapipe in CI); kUnavailable skips, naming why.
class ControlFlowRun : public ::testing::TestWithParam<const char*> {};

// Loads the exported program; a runtime without control-flow support skips the test
// (kUnsupported names what is missing).
#define LOAD_OR_SKIP(var, ep)                                                                        \
  std::shared_ptr<const Program> var;                                                                \
  {                                                                                                  \
    auto bytes_ = serialize_bundle((ep).program());                                                  \
    ASSERT_TRUE(bytes_.ok()) << bytes_.status().message();                                           \
    auto bundle_ = Bundle::from_bytes(*bytes_);                                                      \
    ASSERT_TRUE(bundle_.ok()) << bundle_.status().message();                                         \
    auto program_ = Program::load(std::move(bundle_).value(), {.backend = GetParam()});              \
    if (!program_.ok() && program_.status().code() == StatusCode::kUnsupported) {                    \
      GTEST_SKIP() << "the runtime cannot run this program yet: " << program_.status().message();    \
    }                                                                                                \
    if (!program_.ok() && program_.status().code() == StatusCode::kUnavailable) {                    \
      GTEST_SKIP() << GetParam() << " backend unavailable: " << program_.status().message();         \
    }                                                                                                \
    ASSERT_TRUE(program_.ok()) << program_.status().message();                                       \
    var = *program_;                                                                                 \
    ASSERT_EQ(var->backend_name(), GetParam());                                                      \
  }

#define RUN_OR_SKIP(var, session, inputs)                                                            \
  auto var = (session).run(inputs);                                                                  \
  if (!var.ok() && var.status().code() == StatusCode::kUnsupported) {                                \
    GTEST_SKIP() << "the runtime cannot run this program yet: " << var.status().message();           \
  }                                                                                                  \
  ASSERT_TRUE(var.ok()) << var.status().message()

void expect_close(const HostValue& got, const Tensor& want) {
  ASSERT_FALSE(got.is_int);
  ASSERT_EQ(got.tensor.shape, want.concrete_shape());
  ASSERT_EQ(got.tensor.dtype, want.dtype());
  const auto w = want.to_vector<float>();
  std::vector<float> g(w.size());
  std::memcpy(g.data(), got.tensor.data.data(), g.size() * 4);
  for (std::size_t i = 0; i < w.size(); ++i) ASSERT_NEAR(g[i], w[i], 1e-5f + 1e-4f * std::fabs(w[i])) << "element " << i;
}

Tensor floats(std::vector<std::int64_t> shape, std::vector<float> v) { return Tensor::from_floats(std::move(shape), v); }

TEST_P(ControlFlowRun, Case4CondTakesEitherBranchAndBindsTheSize) {
  auto ep = export_program([](Tensor x) { return case4_model(x); }, {input("x", Tensor::randn({6}))});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  LOAD_OR_SKIP(program, *ep);
  Session session(*program);
  for (const Tensor& x : {floats({6}, {1, 2, 3, 4, 5, 6}), floats({6}, {-1, -2, -3, -4, -5, -6})}) {
    RUN_OR_SKIP(r, session, std::vector<HostValue>{host(x)});
    expect_close(r->outputs[0], case4_model(x));  // 6 elements, then 2
  }
}

TEST_P(ControlFlowRun, SymbolicPredicateWithLiftedParameters) {
  CondDyn model;
  auto ep = export_program([&](Tensor x, Tensor y) { return model(x, y); },
                           {input("x", Tensor::randn({6, 8}), {Dim::DYNAMIC}), input("y", Tensor::randn({3}))});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  LOAD_OR_SKIP(program, *ep);
  Session session(*program);
  const Tensor y = Tensor::randn({3}, 9);
  for (std::int64_t rows : {2, 4, 5, 11}) {
    const Tensor x = Tensor::randn({rows, 8}, static_cast<std::uint64_t>(rows));
    RUN_OR_SKIP(r, session, (std::vector<HostValue>{host(x), host(y)}));
    expect_close(r->outputs[0], model(x, y));
  }
}

TEST_P(ControlFlowRun, NestedCondWithCapturedTensorAndSymbol) {
  auto ep = export_program([](Tensor x, Tensor y, SymInt n) { return nested_model(x, y, n); },
                           {input("x", Tensor::randn({4})), input("y", Tensor::randn({4})), int_input("n", 3, Dim::DYNAMIC)});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  LOAD_OR_SKIP(program, *ep);
  Session session(*program);
  const Tensor y = floats({4}, {1, 2, 3, 4});
  for (const Tensor& x : {floats({4}, {1, 1, 1, 1}), floats({4}, {0.1f, 0.1f, 0.1f, 0.1f}), floats({4}, {-1, -1, -1, -1})}) {
    for (std::int64_t n : {2, 7}) {
      RUN_OR_SKIP(r, session, (std::vector<HostValue>{host(x), host(y), HostValue::integer(n)}));
      expect_close(r->outputs[0], nested_model(x, y, SymInt(n)));
    }
  }
}

TEST_P(ControlFlowRun, WhileLoopWithIntAndTensorCarries) {
  auto ep = export_program(
      [](Tensor x) {
        auto [i, v] = loop_model(x);
        return std::make_tuple(i, v);
      },
      {input("x", Tensor::randn({4}))});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  LOAD_OR_SKIP(program, *ep);
  Session session(*program);
  const Tensor x = floats({4}, {0, 1, 2, -3});
  RUN_OR_SKIP(r, session, std::vector<HostValue>{host(x)});
  auto [i, v] = loop_model(x);
  ASSERT_TRUE(r->outputs[0].is_int);
  EXPECT_EQ(r->outputs[0].int_value, *i.maybe_int());
  expect_close(r->outputs[1], v);
}

// Each iteration's data-dependent intermediate (masked_select of 1,000 floats) is freed
// with the iteration: the run's peak counts one of them, not all 50.
TEST_P(ControlFlowRun, PeakBytesCountLiveLoopTensorsOnce) {
  auto model = [](Tensor x) {
    return while_loop([](SymInt i, Tensor) { return i < 50; },
                      [](SymInt i, Tensor v) {
                        return std::make_tuple(i + 1, v * 0.5 + sum(masked_select(v, gt(v, -1.0))) * 1e-6);
                      },
                      {SymInt(0), x});
  };
  const Tensor x = floats({1000}, std::vector<float>(1000, 1.0f));
  auto ep = export_program([&](Tensor t) { return std::get<1>(model(t)); }, {input("x", x)});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  LOAD_OR_SKIP(program, *ep);
  Session session(*program);
  RUN_OR_SKIP(r, session, std::vector<HostValue>{host(x)});
  expect_close(r->outputs[0], std::get<1>(model(x)));
  const std::uint64_t one_select = 1000 * sizeof(float);
  EXPECT_GE(session.last_stats().peak_bytes, one_select);
  EXPECT_LT(session.last_stats().peak_bytes, 10 * one_select) << "every iteration's tensors counted";
}

TEST_P(ControlFlowRun, WhileLoopWithTensorPredicateAndLiftedTensor) {
  auto model = [](Tensor x, Tensor step) {
    return while_loop([](Tensor v) { return lt(sum(v), 100.0); }, [&](Tensor v) { return v + step; }, {x});
  };
  auto ep = export_program(model, {input("x", floats({2}, {1, 2})), input("step", floats({2}, {3, 4}))});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  LOAD_OR_SKIP(program, *ep);
  Session session(*program);
  for (const Tensor& step : {floats({2}, {3, 4}), floats({2}, {10, 20}), floats({2}, {0.5f, 0.25f})}) {
    const Tensor x = floats({2}, {1, 2});
    RUN_OR_SKIP(r, session, (std::vector<HostValue>{host(x), host(step)}));
    expect_close(r->outputs[0], model(x, step));
  }
}

TEST_P(ControlFlowRun, CompileRegionOverTwentyFourLayers) {
  Stack stack(24);
  auto ep = export_program([&](Tensor x) { return run_stack(stack, x, 24, true); },
                           {input("x", Tensor::randn({4, 16}), {Dim("batch", 1, 256)})});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  ASSERT_EQ(ep->program().graphs.size(), 2u);
  LOAD_OR_SKIP(program, *ep);
  Session session(*program);
  for (std::int64_t batch : {1, 3, 9}) {
    const Tensor x = Tensor::randn({batch, 16}, static_cast<std::uint64_t>(batch + 40));
    RUN_OR_SKIP(r, session, std::vector<HostValue>{host(x)});
    expect_close(r->outputs[0], run_stack(stack, x, 24, false));  // eager, inlined
  }
}

TEST_P(ControlFlowRun, CondOnAnUnbackedValue) {
  auto model = [](Tensor x, Tensor n_t) {
    SymInt n = n_t.item();
    return cond(n > 0, [](Tensor v) { return v * 2.0; }, [](Tensor v) { return -v; }, {x});
  };
  auto ep = export_program(model, {input("x", Tensor::randn({4})), input("n_t", Tensor::from_ints({}, std::vector<std::int64_t>{3}))});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  LOAD_OR_SKIP(program, *ep);
  Session session(*program);
  const Tensor x = floats({4}, {1, -2, 3, -4});
  for (std::int64_t n : {3, 0, -5}) {
    const Tensor n_t = Tensor::from_ints({}, std::vector<std::int64_t>{n});
    RUN_OR_SKIP(r, session, (std::vector<HostValue>{host(x), host(n_t)}));
    expect_close(r->outputs[0], model(x, n_t));
  }
}

TEST_P(ControlFlowRun, DataDependentSizesInsideBranches) {
  auto model = [](Tensor x) {
    return cond(gt(sum(x), 0.0), [](Tensor v) { return nonzero(v); }, [](Tensor v) { return nonzero(relu(v)); }, {x});
  };
  auto ep = export_program(model, {input("x", Tensor::randn({3, 4}))});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  LOAD_OR_SKIP(program, *ep);
  Session session(*program);
  for (std::uint64_t seed : {1u, 2u, 3u, 4u}) {
    const Tensor x = Tensor::randn({3, 4}, seed);
    RUN_OR_SKIP(r, session, std::vector<HostValue>{host(x)});
    const Tensor want = model(x);
    ASSERT_EQ(r->outputs[0].tensor.shape, want.concrete_shape());
    EXPECT_EQ(r->outputs[0].tensor.data, want.bytes());
  }
}

TEST_P(ControlFlowRun, SymIntOutputsAndOperands) {
  auto model = [](Tensor x, SymInt n) {
    auto [a, b] = cond(gt(sum(x), 0.0), [](Tensor v, SymInt k) { return std::make_tuple(v.size(0) * 2, k + 1); },
                       [](Tensor v, SymInt k) { return std::make_tuple(v.size(0) * 2, k * 3); }, {x, n});
    return std::make_tuple(a, b);
  };
  auto ep = export_program(model, {input("x", Tensor::randn({5}), {Dim::DYNAMIC}), int_input("n", 4, Dim::DYNAMIC)});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  LOAD_OR_SKIP(program, *ep);
  Session session(*program);
  for (const Tensor& x : {floats({3}, {1, 2, 3}), floats({6}, {-1, -2, -3, -4, -5, -6})}) {
    RUN_OR_SKIP(r, session, (std::vector<HostValue>{host(x), HostValue::integer(7)}));
    auto [a, b] = model(x, SymInt(7));
    EXPECT_EQ(r->outputs[0].int_value, *a.maybe_int());
    EXPECT_EQ(r->outputs[1].int_value, *b.maybe_int());
  }
}

TEST_P(ControlFlowRun, GuardInsideABranchIsCheckedOnTheInputs) {
  auto model = [](Tensor x) {
    return cond(gt(sum(x), 0.0),
                [](Tensor v) {
                  if (v.size(0) % 2 == 0) return v.reshape({-1, 2}).sum({1});
                  return v * 2.0;
                },
                [](Tensor v) { return v * 3.0; }, {x});
  };
  auto ep = export_program(model, {input("x", Tensor::randn({8}), {Dim::DYNAMIC})});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  LOAD_OR_SKIP(program, *ep);
  Session session(*program);
  const Tensor pos = floats({4}, {1, 2, 3, 4}), neg = floats({6}, {-1, -2, -3, -4, -5, -6});
  for (const Tensor& x : {pos, neg}) {
    RUN_OR_SKIP(r, session, std::vector<HostValue>{host(x)});
    expect_close(r->outputs[0], model(x));
  }
  auto odd = session.run(std::vector<HostValue>{host(floats({5}, {1, 2, 3, 4, 5}))});
  ASSERT_FALSE(odd.ok());
  EXPECT_EQ(odd.status().code(), StatusCode::kInvalidInput);
}

TEST_P(ControlFlowRun, SpecializedEntryGraphCallsTheSubgraphs) {
  Dim b("b", 1, 64);
  b.specialize_on({"b == 1"});
  CompileRegion block("block", [](Tensor v) { return relu(v) + 1.0; });
  auto model = [&](Tensor x) {
    return cond(x.size(0) > 4, [&](Tensor v) { return block(v); }, [](Tensor v) { return v * 2.0; }, {x});
  };
  auto ep = export_program(model, {input("x", Tensor::randn({6, 3}), {b})});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  LOAD_OR_SKIP(program, *ep);
  Session session(*program);
  for (std::int64_t rows : {1, 3, 6}) {
    const Tensor x = Tensor::randn({rows, 3}, static_cast<std::uint64_t>(rows));
    RUN_OR_SKIP(r, session, std::vector<HostValue>{host(x)});
    EXPECT_EQ(r->variant, rows == 1 ? "b == 1" : "generic");
    expect_close(r->outputs[0], model(x));
  }
}

TEST_P(ControlFlowRun, RegionWithAnIntOperand) {
  CompileRegion block("block", [](Tensor v, SymInt k) { return v * 2.0 + full({k}, 1.0).sum(); });
  auto model = [&](Tensor x, SymInt n) { return block(block(x, n), n + 1); };
  auto ep = export_program(model, {input("x", Tensor::randn({4})), int_input("n", 3, Dim::DYNAMIC)});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  LOAD_OR_SKIP(program, *ep);
  Session session(*program);
  const Tensor x = floats({4}, {1, 2, 3, 4});
  for (std::int64_t n : {0, 5}) {
    RUN_OR_SKIP(r, session, (std::vector<HostValue>{host(x), HostValue::integer(n)}));
    expect_close(r->outputs[0], model(x, SymInt(n)));
  }
}

TEST_P(ControlFlowRun, RegionWithDataDependentSizes) {
  CompileRegion route("route", [](Tensor v) {
    Tensor picked = masked_select(v, gt(v, 0.0));
    return sum(picked).reshape({1}) + v;
  });
  auto model = [&](Tensor x) { return route(route(route(x))); };
  auto ep = export_program(model, {input("x", Tensor::randn({6}))});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  LOAD_OR_SKIP(program, *ep);
  Session session(*program);
  for (std::uint64_t seed : {5u, 6u, 7u}) {
    const Tensor x = Tensor::randn({6}, seed);
    RUN_OR_SKIP(r, session, std::vector<HostValue>{host(x)});
    expect_close(r->outputs[0], model(x));
  }
}

TEST_P(ControlFlowRun, ReshapedInputsLeaveBranchesAndLoops) {
  // Reshapes may be zero-copy at run time; a branch or loop body returning a reshape of its
  // input must still see and produce the right values.
  auto model = [](Tensor x) {
    Tensor y = cond(gt(sum(x), 0.0), [](Tensor v) { return v.reshape({2, 2}); }, [](Tensor v) { return (v * 2.0).reshape({2, 2}); }, {x});
    auto [i, z] = while_loop([](SymInt k, Tensor) { return k < 3; },
                             [](SymInt k, Tensor v) { return std::make_tuple(k + 1, (v + 1.0).reshape({4}).reshape({2, 2})); },
                             {SymInt(0), y});
    return z + y;
  };
  auto ep = export_program(model, {input("x", Tensor::randn({4}))});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  LOAD_OR_SKIP(program, *ep);
  Session session(*program);
  for (const Tensor& x : {floats({4}, {1, 2, 3, 4}), floats({4}, {-1, -2, -3, -4})}) {
    RUN_OR_SKIP(r, session, std::vector<HostValue>{host(x)});
    expect_close(r->outputs[0], model(x));
  }
}

TEST_P(ControlFlowRun, CompoundInputSizesLiftTheirSymbols) {
  CompileRegion block("block", [](Tensor v) { return v * 2.0 + full({v.size(0), 4}, 1.0); });
  auto model = [&](Tensor x) { return block(cat({x, x})) + block(cat({x, x})); };
  auto ep = export_program(model, {input("x", Tensor::randn({3, 4}), {Dim::DYNAMIC})});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  // The region's input is f32[2*s0, 4]; s0 itself is lifted so the subgraph can use it.
  const ir::Graph& g = ep->program().graphs[1];
  ASSERT_EQ(g.inputs.size(), 2u) << ep->print();
  EXPECT_EQ(g.values[static_cast<std::size_t>(g.inputs[1])].kind, ir::ValueKind::kSymInt);
  LOAD_OR_SKIP(program, *ep);
  Session session(*program);
  for (std::int64_t rows : {2, 5}) {
    const Tensor x = Tensor::randn({rows, 4}, static_cast<std::uint64_t>(rows));
    RUN_OR_SKIP(r, session, std::vector<HostValue>{host(x)});
    expect_close(r->outputs[0], model(x));
  }
}

TEST_P(ControlFlowRun, CondInsideALoopBodyOnTheIntCarry) {
  auto model = [](Tensor x, SymInt n) {
    auto [i, v] = while_loop([&](SymInt k, Tensor) { return k < n; },
                             [](SymInt k, Tensor h) {
                               Tensor next = cond(k % 2 == 0, [](Tensor a) { return a * 2.0; }, [](Tensor a) { return a - 1.0; }, {h});
                               return std::make_tuple(k + 1, next);
                             },
                             {SymInt(0), x});
    return std::make_tuple(v, i);
  };
  auto ep = export_program(model, {input("x", Tensor::randn({3})), int_input("n", 4, Dim::DYNAMIC)});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  LOAD_OR_SKIP(program, *ep);
  Session session(*program);
  const Tensor x = floats({3}, {1, 2, 3});
  for (std::int64_t n : {0, 1, 4, 7}) {
    RUN_OR_SKIP(r, session, (std::vector<HostValue>{host(x), HostValue::integer(n)}));
    auto [want, steps] = model(x, SymInt(n));
    expect_close(r->outputs[0], want);
    EXPECT_EQ(r->outputs[1].int_value, n);
  }
}

TEST_P(ControlFlowRun, RepeatedOperandsAndCaptureOnlyFunctions) {
  CompileRegion bias("bias", [] { return full({3}, 0.5); });
  auto model = [&](Tensor x) {
    Tensor y = cond(gt(sum(x), 0.0), [](Tensor a, Tensor b) { return a * b; }, [](Tensor a, Tensor b) { return a - b * 2.0; }, {x, x});
    return y + bias() + cond(x.size(0) > 1, [&] { return x * 3.0; }, [&] { return x.clone(); });
  };
  auto ep = export_program(model, {input("x", Tensor::randn({3}))});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  LOAD_OR_SKIP(program, *ep);
  Session session(*program);
  for (const Tensor& x : {floats({3}, {1, 2, 3}), floats({3}, {-1, -2, -3})}) {
    RUN_OR_SKIP(r, session, std::vector<HostValue>{host(x)});
    expect_close(r->outputs[0], model(x));
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, ControlFlowRun, ::testing::Values("cpu", "vulkan"),
                         [](const ::testing::TestParamInfo<const char*>& info) { return std::string(info.param); });

}  // namespace
}  // namespace kiln

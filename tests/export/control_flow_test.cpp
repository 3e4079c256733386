// Higher-order ops in the C++ tracing API: cond, while_loop, compile regions
// (SEMANTICS.md cases 4, 13, 14; docs/FORMAT.md "Higher-order ops").
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "kiln/export/export.h"
#include "kiln/export/guards.h"
#include "kiln/export/module.h"
#include "kiln/export/ops.h"
#include "kiln/export/symbolic/print.h"
#include "kiln/format/kiln_generated.h"
#include "kiln/runtime/bundle.h"
#include "kiln/runtime/expr.h"
#include "control_flow_models.h"

namespace kiln {
namespace {

using namespace cf_models;

std::string text(const ExportedProgram& ep, sym::Expr e) { return sym::to_string(e, &ep.program().env); }

const ir::Graph& graph(const ExportedProgram& ep, int g) { return ep.program().graphs[static_cast<std::size_t>(g)]; }

const ir::Value& val(const ExportedProgram& ep, int g, int id) { return graph(ep, g).values[static_cast<std::size_t>(id)]; }

std::string shape(const ExportedProgram& ep, const ir::Value& v) {
  std::string out = std::string(dtype_name(v.dtype)) + "[";
  for (std::size_t i = 0; i < v.shape.size(); ++i) out += (i ? ", " : "") + text(ep, v.shape[i]);
  return out + "]";
}

std::string input_types(const ExportedProgram& ep, int g) {
  std::string out;
  for (int in : graph(ep, g).inputs) {
    const ir::Value& v = val(ep, g, in);
    out += (out.empty() ? "" : ", ") + (v.kind == ir::ValueKind::kSymInt ? "Sym(" + text(ep, v.expr) + ")" : shape(ep, v));
  }
  return out;
}

// Nodes of graph g with op `op`.
std::vector<const ir::Node*> nodes(const ExportedProgram& ep, int g, OpKind op) {
  std::vector<const ir::Node*> out;
  for (const ir::Node& n : graph(ep, g).nodes) if (n.op == op) out.push_back(&n);
  return out;
}

std::vector<std::string> assert_messages(const ir::Graph& g) {
  std::vector<std::string> out;
  for (const auto& a : g.asserts) out.push_back(a.message);
  return out;
}

std::vector<float> floats(const Tensor& t) { return t.to_vector<float>(); }

void expect_near(const std::vector<float>& a, const std::vector<float>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-5f) << "element " << i;
}

// ---------------------------------------------------------------------------------------
// cond

TEST(ControlFlow, Case4CondWithDifferingSizesGetsAnUnbackedSymbol) {
  auto ep = export_program([](Tensor x) { return case4_model(x); }, {input("x", Tensor::randn({6}))});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  const ir::Graph& g = graph(*ep, 0);
  auto conds = nodes(*ep, 0, OpKind::Cond);
  ASSERT_EQ(conds.size(), 1u) << ep->print();
  const ir::Node& c = *conds[0];
  EXPECT_EQ(c.subgraphs, (std::vector<int>{1, 2}));
  ASSERT_EQ(c.inputs.size(), 2u);  // [pred, x]
  EXPECT_EQ(val(*ep, 0, c.inputs[0]).kind, ir::ValueKind::kTensor);
  EXPECT_EQ(val(*ep, 0, c.inputs[0]).dtype, DType::kBool);
  EXPECT_TRUE(val(*ep, 0, c.inputs[0]).shape.empty());
  EXPECT_EQ(val(*ep, 0, c.inputs[1]).name, "x");
  // The output: f32[u0], u0 in [2, 6], bound by the cond, with two asserts right after it.
  EXPECT_EQ(shape(*ep, val(*ep, 0, g.outputs[0])), "f32[u0]");
  const auto u0 = ep->program().env.find_symbol("u0");
  ASSERT_TRUE(u0.has_value());
  EXPECT_EQ(ep->program().env.symbol(*u0).range.lo, 2);
  EXPECT_EQ(ep->program().env.symbol(*u0).range.hi, 6);
  const int cond_index = static_cast<int>(conds[0] - g.nodes.data());
  ASSERT_EQ(g.bindings.size(), 1u);
  EXPECT_EQ(g.bindings[0].symbol, *u0);
  EXPECT_EQ(g.bindings[0].node, cond_index);
  EXPECT_EQ(g.bindings[0].kind, ir::UnbackedBinding::Kind::kSize);
  EXPECT_EQ(g.bindings[0].output, 0);
  EXPECT_EQ(g.bindings[0].dim, 0);
  EXPECT_EQ(assert_messages(g), (std::vector<std::string>{"u0 >= 2", "u0 <= 6"}));
  for (const auto& a : g.asserts) EXPECT_EQ(a.after_node, cond_index);
  // Both branches take the operand and return their own sizes.
  EXPECT_EQ(input_types(*ep, 1), "f32[6]");
  EXPECT_EQ(input_types(*ep, 2), "f32[6]");
  EXPECT_EQ(shape(*ep, val(*ep, 1, graph(*ep, 1).outputs[0])), "f32[6]");
  EXPECT_EQ(shape(*ep, val(*ep, 2, graph(*ep, 2).outputs[0])), "f32[2]");
  EXPECT_EQ(nodes(*ep, 1, OpKind::Sin).size(), 1u);
  EXPECT_EQ(nodes(*ep, 2, OpKind::Cos).size(), 1u);
  // Source locations and user ops are kept on the cond and inside the branches.
  EXPECT_EQ(c.meta.location.file, "control_flow_models.h");
  EXPECT_EQ(c.meta.location.line, 17u);
  EXPECT_EQ(c.meta.user_op, "cond");
  EXPECT_EQ(nodes(*ep, 1, OpKind::Sin)[0]->meta.location.file, "control_flow_models.h");
}

TEST(ControlFlow, CondRunsEagerlyOutsideAnExport) {
  const Tensor pos = Tensor::from_floats({6}, std::vector<float>{1, 2, 3, 4, 5, 6});
  const Tensor neg = Tensor::from_floats({6}, std::vector<float>{-1, -2, -3, -4, -5, -6});
  const Tensor a = case4_model(pos);
  EXPECT_EQ(a.concrete_shape(), (std::vector<std::int64_t>{6}));
  expect_near(floats(a), floats(sin(pos)));
  const Tensor b = case4_model(neg);
  EXPECT_EQ(b.concrete_shape(), (std::vector<std::int64_t>{2}));
  expect_near(floats(b), floats(cos(slice(neg, 0, 0, 2))));
}

TEST(ControlFlow, Case4SelfTestComesFromTheEagerBranch) {
  auto ep = export_program([](Tensor x) { return case4_model(x); },
                           {input("x", Tensor::from_floats({6}, std::vector<float>{-1, -2, -3, -4, -5, -6}))});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  ASSERT_EQ(ep->program().self_tests.size(), 1u);
  EXPECT_EQ(ep->program().self_tests[0].outputs[0].shape, (std::vector<std::int64_t>{2}));
}

TEST(ControlFlow, Case13BranchThatMutatesItsInputIsAnError) {
  auto ep = export_program(
      [](Tensor x) {
        return cond(gt(sum(x), 0.0),
                    [](Tensor v) {
                      v.add_(1.0);
                      return v * 2.0;
                    },
                    [](Tensor v) { return v * 3.0; }, {x});
      },
      {input("x", Tensor::randn({4}))});
  ASSERT_FALSE(ep.ok());
  EXPECT_EQ(ep.status().code(), StatusCode::kExportError);
  const std::string m = ep.status().message();
  EXPECT_NE(m.find("[cond] Higher order ops do not support input mutation. Found in cond: true_fn updates its input x in place "
                   "with add_ (control_flow_test.cpp:"),
            std::string::npos)
      << m;
}

TEST(ControlFlow, Case13BranchThatReturnsItsInputIsAnError) {
  auto model = [](bool clone_it) {
    return [clone_it](Tensor x) {
      return cond(gt(sum(x), 0.0), [](Tensor v) { return v * 2.0; },
                  [clone_it](Tensor v) { return clone_it ? v.clone() : v; }, {x});
    };
  };
  auto ep = export_program(model(false), {input("x", Tensor::randn({4}))});
  ASSERT_FALSE(ep.ok());
  EXPECT_EQ(ep.status().code(), StatusCode::kExportError);
  const std::string m = ep.status().message();
  EXPECT_NE(m.find("[cond] Higher order ops do not support aliasing. Found in cond: false_fn returns its input x as output 0. "
                   "Replace `return input` with `return input.clone()` to avoid aliasing (control_flow_test.cpp:"),
            std::string::npos)
      << m;
  // The fix the message suggests works.
  auto fixed = export_program(model(true), {input("x", Tensor::randn({4}))});
  ASSERT_TRUE(fixed.ok()) << fixed.status().message();
  EXPECT_EQ(nodes(*fixed, 2, OpKind::Identity).size(), 1u);
}

TEST(ControlFlow, BranchThatMutatesACapturedTensorIsAnError) {
  auto ep = export_program(
      [](Tensor x, Tensor y) {
        return cond(gt(sum(x), 0.0),
                    [&](Tensor v) {
                      y.mul_(2.0);
                      return v + y;
                    },
                    [](Tensor v) { return v * 3.0; }, {x});
      },
      {input("x", Tensor::randn({4})), input("y", Tensor::randn({4}))});
  ASSERT_FALSE(ep.ok());
  EXPECT_NE(ep.status().message().find("Higher order ops do not support input mutation. Found in cond: true_fn updates a tensor "
                                       "of the enclosing graph in place with mul_"),
            std::string::npos)
      << ep.status().message();
}

TEST(ControlFlow, InPlaceUpdatesOutsideBranchesAreFunctional) {
  auto model = [](Tensor x) {
    Tensor y = x * 1.0;
    Tensor alias = y;  // the same handle: sees the update
    y.add_(1.0);
    return alias * 2.0;
  };
  auto ep = export_program(model, {input("x", Tensor::randn({3}))});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  const Tensor x = Tensor::from_floats({3}, std::vector<float>{1, 2, 3});
  expect_near(floats(model(x)), {4, 6, 8});
}

TEST(ControlFlow, BranchesMustAgreeOnStructureDtypesAndRanks) {
  auto count = export_program(
      [](Tensor x) {
        return cond(gt(sum(x), 0.0), [](Tensor v) { return std::vector<Tensor>{v * 2.0, v * 3.0}; },
                    [](Tensor v) { return std::vector<Tensor>{v * 2.0}; }, {x});
      },
      {input("x", Tensor::randn({4}))});
  ASSERT_FALSE(count.ok());
  EXPECT_NE(count.status().message().find("[cond] true_fn and false_fn must return the same structure: true_fn returns 2 values, "
                                          "false_fn 1 (control_flow_test.cpp:"),
            std::string::npos)
      << count.status().message();
  auto dtype = export_program(
      [](Tensor x) {
        return cond(gt(sum(x), 0.0), [](Tensor v) { return v * 2.0; }, [](Tensor v) { return v.to(DType::kI64); }, {x});
      },
      {input("x", Tensor::randn({4}))});
  ASSERT_FALSE(dtype.ok());
  EXPECT_NE(dtype.status().message().find("[cond] output 0: true_fn returns f32[4], false_fn i64[4]: branches must return the same dtypes"),
            std::string::npos)
      << dtype.status().message();
  auto rank = export_program(
      [](Tensor x) {
        return cond(gt(sum(x), 0.0), [](Tensor v) { return v * 2.0; }, [](Tensor v) { return v.reshape({2, 2}); }, {x});
      },
      {input("x", Tensor::randn({4}))});
  ASSERT_FALSE(rank.ok());
  EXPECT_NE(rank.status().message().find("[cond] output 0: true_fn returns f32[4], false_fn f32[2, 2]: branches must return the same ranks"),
            std::string::npos)
      << rank.status().message();
  auto pred = export_program(
      [](Tensor x) { return cond(sum(x), [](Tensor v) { return v * 2.0; }, [](Tensor v) { return v * 3.0; }, {x}); },
      {input("x", Tensor::randn({4}))});
  ASSERT_FALSE(pred.ok());
  EXPECT_NE(pred.status().message().find("[cond] the predicate must be a bool tensor with one element, got f32 tensor"),
            std::string::npos)
      << pred.status().message();
}

TEST(ControlFlow, SymbolicPredicateAndLiftedParameters) {
  CondDyn model;
  auto ep = export_program([&](Tensor x, Tensor y) { return model(x, y); },
                           {input("x", Tensor::randn({6, 8}), {Dim::DYNAMIC}), input("y", Tensor::randn({3}))});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  // No guard on s0 > 4: the predicate is a SymBool input of the cond.
  EXPECT_TRUE(graph(*ep, 0).asserts.empty()) << ep->print();
  EXPECT_EQ(ep->program().env.symbol(0).range.lo, 2);
  auto conds = nodes(*ep, 0, OpKind::Cond);
  ASSERT_EQ(conds.size(), 1u);
  const ir::Node& c = *conds[0];
  const ir::Value& pred = val(*ep, 0, c.inputs[0]);
  EXPECT_EQ(pred.kind, ir::ValueKind::kSymBool);
  EXPECT_EQ(text(*ep, pred.expr), text(*ep, sym::gt(sym::Expr::symbol(0), 4)));
  // [pred, x, y, l.weight, l.bias]: the parameters are lifted to inputs of both branches.
  ASSERT_EQ(c.inputs.size(), 5u) << ep->print();
  EXPECT_EQ(val(*ep, 0, c.inputs[3]).kind, ir::ValueKind::kConstant);
  EXPECT_EQ(val(*ep, 0, c.inputs[3]).name, "l.weight");
  EXPECT_EQ(val(*ep, 0, c.inputs[4]).name, "l.bias");
  EXPECT_EQ(input_types(*ep, 1), "f32[s0, 8], f32[3], f32[8, 8], f32[8]");
  EXPECT_EQ(input_types(*ep, 2), "f32[s0, 8], f32[3], f32[8, 8], f32[8]");
  EXPECT_EQ(shape(*ep, val(*ep, 0, graph(*ep, 0).outputs[0])), "f32[s0, 8]");
  EXPECT_TRUE(graph(*ep, 0).bindings.empty());  // equal sizes over s0: no fresh symbol
  // The linear inside the true branch keeps its module path.
  ASSERT_EQ(nodes(*ep, 1, OpKind::Linear).size(), 1u);
  EXPECT_EQ(nodes(*ep, 1, OpKind::Linear)[0]->meta.module_path, "l");
  // Eagerly, both paths run.
  const Tensor big = Tensor::randn({6, 8}, 3), small = Tensor::randn({3, 8}, 4), y = Tensor::randn({3}, 5);
  expect_near(floats(model(big, y)), floats(model.l(big) + sum(y)));
  expect_near(floats(model(small, y)), floats(small * 2.0 - mean(y)));
}

TEST(ControlFlow, StaticallyKnownPredicateRunsTheBranchInline) {
  auto ep = export_program(
      [](Tensor x) {
        return cond(x.size(0) >= 2, [](Tensor v) { return relu(v); }, [](Tensor v) { return v.clone(); }, {x});
      },
      {input("x", Tensor::randn({6}), {Dim::DYNAMIC})});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  EXPECT_EQ(ep->program().graphs.size(), 1u);
  EXPECT_TRUE(nodes(*ep, 0, OpKind::Cond).empty());
  EXPECT_EQ(nodes(*ep, 0, OpKind::Relu).size(), 1u);
}

TEST(ControlFlow, PredicateOnAnUnbackedValue) {
  // SEMANTICS.md case 11 suggests cond for data-dependent branching: it works.
  auto ep = export_program(
      [](Tensor x, Tensor n_t) {
        SymInt n = n_t.item();
        return cond(n > 0, [](Tensor v) { return v * 2.0; }, [](Tensor v) { return -v; }, {x});
      },
      {input("x", Tensor::randn({4})), input("n_t", Tensor::from_ints({}, std::vector<std::int64_t>{3}))});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  auto conds = nodes(*ep, 0, OpKind::Cond);
  ASSERT_EQ(conds.size(), 1u);
  EXPECT_EQ(val(*ep, 0, conds[0]->inputs[0]).kind, ir::ValueKind::kSymBool);
}

TEST(ControlFlow, NestedCondLiftsFreeTensorsAndSymbolsThroughEveryLevel) {
  auto model = [](Tensor x, Tensor y, SymInt n) { return nested_model(x, y, n); };
  auto ep = export_program(model, {input("x", Tensor::randn({4})), input("y", Tensor::randn({4})),
                                   int_input("n", 3, Dim::DYNAMIC)});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  ASSERT_EQ(ep->program().graphs.size(), 5u) << ep->print();
  // Outer cond in main: [pred, x, y, n].
  auto outer = nodes(*ep, 0, OpKind::Cond);
  ASSERT_EQ(outer.size(), 1u);
  ASSERT_EQ(outer[0]->inputs.size(), 4u) << ep->print();
  EXPECT_EQ(val(*ep, 0, outer[0]->inputs[2]).name, "y");
  EXPECT_EQ(val(*ep, 0, outer[0]->inputs[3]).kind, ir::ValueKind::kSymInt);
  const int t = outer[0]->subgraphs[0], f = outer[0]->subgraphs[1];
  // Both outer branches take [x, y, n], though only the true one uses y and n.
  EXPECT_EQ(input_types(*ep, t), "f32[4], f32[4], Sym(s0)");
  EXPECT_EQ(input_types(*ep, f), "f32[4], f32[4], Sym(s0)");
  // The inner cond (inside the outer true branch) passes them on.
  auto inner = nodes(*ep, t, OpKind::Cond);
  ASSERT_EQ(inner.size(), 1u);
  ASSERT_EQ(inner[0]->inputs.size(), 4u);
  EXPECT_EQ(inner[0]->inputs[2], graph(*ep, t).inputs[1]);  // y, as the outer branch's input
  EXPECT_EQ(input_types(*ep, inner[0]->subgraphs[0]), "f32[4], f32[4], Sym(s0)");
  EXPECT_EQ(nodes(*ep, inner[0]->subgraphs[0], OpKind::Full).size(), 1u);
  // Eager: the same code.
  const Tensor x = Tensor::from_floats({4}, std::vector<float>{1, 1, 1, 1});
  const Tensor y = Tensor::from_floats({4}, std::vector<float>{1, 2, 3, 4});
  expect_near(floats(model(x, y, SymInt(3))), {6, 8, 10, 12});
}

// ---------------------------------------------------------------------------------------
// while_loop

TEST(ControlFlow, WhileLoopWithAnIntAndATensorCarry) {
  auto ep = export_program(
      [](Tensor x) {
        auto [i, v] = loop_model(x);
        return std::make_tuple(i, v);
      },
      {input("x", Tensor::randn({4}))});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  const ir::Graph& g = graph(*ep, 0);
  auto loops = nodes(*ep, 0, OpKind::WhileLoop);
  ASSERT_EQ(loops.size(), 1u);
  const ir::Node& w = *loops[0];
  ASSERT_EQ(w.inputs.size(), 2u);  // [carries...]
  EXPECT_EQ(val(*ep, 0, w.inputs[0]).kind, ir::ValueKind::kSymInt);
  EXPECT_EQ(text(*ep, val(*ep, 0, w.inputs[0]).expr), "0");
  ASSERT_EQ(w.outputs.size(), 2u);
  ASSERT_EQ(w.subgraphs.size(), 2u);
  const int cg = w.subgraphs[0], bg = w.subgraphs[1];
  // Inside, the int carry is an unbacked symbol; both graphs take the same inputs.
  EXPECT_EQ(input_types(*ep, cg), input_types(*ep, bg));
  const ir::Value& i_in = val(*ep, bg, graph(*ep, bg).inputs[0]);
  ASSERT_EQ(i_in.kind, ir::ValueKind::kSymInt);
  ASSERT_TRUE(i_in.expr.is_symbol());
  EXPECT_EQ(ep->program().env.symbol(i_in.expr.symbol_id()).kind, sym::SymbolKind::Unbacked);
  // cond_fn returns a SymBool (i < 5); body_fn returns (i + 1, v * 1.5 + 1).
  ASSERT_EQ(graph(*ep, cg).outputs.size(), 1u);
  const ir::Value& c_out = val(*ep, cg, graph(*ep, cg).outputs[0]);
  EXPECT_EQ(c_out.kind, ir::ValueKind::kSymBool);
  EXPECT_EQ(text(*ep, c_out.expr), text(*ep, sym::lt(i_in.expr, 5)));
  EXPECT_EQ(text(*ep, val(*ep, bg, graph(*ep, bg).outputs[0]).expr), text(*ep, i_in.expr + 1));
  EXPECT_EQ(shape(*ep, val(*ep, bg, graph(*ep, bg).outputs[1])), "f32[4]");
  // After the loop the int is a fresh unbacked symbol bound by a Scalar binding.
  const ir::Value& i_out = val(*ep, 0, w.outputs[0]);
  ASSERT_TRUE(i_out.expr.is_symbol());
  EXPECT_NE(i_out.expr.symbol_id(), i_in.expr.symbol_id());
  ASSERT_EQ(g.bindings.size(), 1u);
  EXPECT_EQ(g.bindings[0].kind, ir::UnbackedBinding::Kind::kScalar);
  EXPECT_EQ(g.bindings[0].symbol, i_out.expr.symbol_id());
  EXPECT_EQ(g.bindings[0].output, 0);
  EXPECT_EQ(shape(*ep, val(*ep, 0, w.outputs[1])), "f32[4]");
  EXPECT_TRUE(ep->program().outputs[0].is_int);
  // The self-test (eager) iterated five times.
  ASSERT_EQ(ep->program().self_tests.size(), 1u);
  EXPECT_EQ(ep->program().self_tests[0].outputs[0].int_value, 5);
}

TEST(ControlFlow, WhileLoopRunsEagerly) {
  auto [i, v] = loop_model(Tensor::from_floats({2}, std::vector<float>{0, 2}));
  EXPECT_EQ(i.maybe_int(), 5);
  // x -> 1.5x + 1, five times: 0 -> 13.1875, 2 -> 28.375.
  expect_near(floats(v), {13.1875f, 28.375f});
  EXPECT_THROW(while_loop([](SymInt) { return true; }, [](SymInt i) { return i + 1; }, {SymInt(0)}, {.max_iterations = 10}),
               ExportError);
}

TEST(ControlFlow, WhileLoopTensorPredicateLiftedTensorAndMaxIterations) {
  auto ep = export_program(
      [](Tensor x, Tensor step) {
        return while_loop([](Tensor v) { return lt(sum(v), 100.0); }, [&](Tensor v) { return v + step; }, {x},
                          {.max_iterations = 1000});
      },
      {input("x", Tensor::from_floats({2}, std::vector<float>{1, 2})), input("step", Tensor::from_floats({2}, std::vector<float>{3, 4}))});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  auto loops = nodes(*ep, 0, OpKind::WhileLoop);
  ASSERT_EQ(loops.size(), 1u);
  // [carry x, additional step]: outputs.size() == 1 carries first.
  ASSERT_EQ(loops[0]->inputs.size(), 2u);
  EXPECT_EQ(loops[0]->outputs.size(), 1u);
  EXPECT_EQ(val(*ep, 0, loops[0]->inputs[1]).name, "step");
  ASSERT_EQ(loops[0]->attrs.size(), 1u);
  EXPECT_EQ(std::get<std::int64_t>(loops[0]->attrs[0]), 1000);
  const int cg = loops[0]->subgraphs[0];
  const ir::Value& pred = val(*ep, cg, graph(*ep, cg).outputs[0]);
  EXPECT_EQ(pred.kind, ir::ValueKind::kTensor);
  EXPECT_EQ(pred.dtype, DType::kBool);
  EXPECT_TRUE(pred.shape.empty());
  EXPECT_EQ(input_types(*ep, cg), "f32[2], f32[2]");
  // Eager result: [1,2] + k*[3,4] until the sum reaches 100: k = 14 -> [43, 58].
  const auto& out = *ep->program().self_tests[0].outputs[0].data;
  std::vector<float> got(out.size() / 4);
  std::memcpy(got.data(), out.data(), out.size());
  expect_near(got, {43, 58});
}

TEST(ControlFlow, WhileLoopBodyMustKeepCarryMetadataAndNotAlias) {
  auto grows = export_program(
      [](Tensor x) {
        return while_loop([](Tensor v) { return lt(sum(v), 10.0); }, [](Tensor v) { return cat({v, v}); }, {x});
      },
      {input("x", Tensor::randn({2}))});
  ASSERT_FALSE(grows.ok());
  EXPECT_NE(grows.status().message().find("[while_loop] body_fn must return each carry with the metadata it entered with "
                                          "(carries keep their dtype and shape across iterations): carry 0 is f32[2] but "
                                          "body_fn returns f32[4]"),
            std::string::npos)
      << grows.status().message();
  auto alias = export_program(
      [](Tensor x, Tensor y) {
        return while_loop([](SymInt i, Tensor, Tensor) { return i < 3; },
                          [](SymInt i, Tensor a, Tensor b) { return std::make_tuple(i + 1, a + b, b); }, {SymInt(0), x, y});
      },
      {input("x", Tensor::randn({2})), input("y", Tensor::randn({2}))});
  ASSERT_FALSE(alias.ok());
  EXPECT_NE(alias.status().message().find("[while_loop] Higher order ops do not support aliasing. Found in while_loop: body_fn "
                                          "returns its input y as output 2"),
            std::string::npos)
      << alias.status().message();
  auto mutate = export_program(
      [](Tensor x) {
        return while_loop([](Tensor v) { return lt(sum(v), 10.0); }, [](Tensor v) { return v.add_(1.0).clone(); }, {x});
      },
      {input("x", Tensor::randn({2}))});
  ASSERT_FALSE(mutate.ok());
  EXPECT_NE(mutate.status().message().find("Higher order ops do not support input mutation. Found in while_loop: body_fn updates its input x"),
            std::string::npos)
      << mutate.status().message();
}

// ---------------------------------------------------------------------------------------
// Compile regions

TEST(ControlFlow, Case14CompileRegionCalledTwiceIsOneSubgraph) {
  CompileRegion block("block", [](Tensor x) { return tanh(x) + x; });
  auto ep = export_program([&](Tensor x) { return block(block(x)); },
                           {input("x", Tensor::randn({3, 16}), {Dim("batch", 1, 64)})});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  ASSERT_EQ(ep->program().graphs.size(), 2u) << ep->print();
  auto calls = nodes(*ep, 0, OpKind::InvokeSubgraph);
  ASSERT_EQ(calls.size(), 2u);
  for (const ir::Node* n : calls) {
    EXPECT_EQ(n->subgraphs, (std::vector<int>{1}));
    ASSERT_EQ(n->attrs.size(), 1u);
    EXPECT_EQ(std::get<std::string>(n->attrs[0]), "block");
    EXPECT_EQ(n->meta.location.file, "control_flow_test.cpp");
    EXPECT_EQ(n->meta.user_op, "block");
  }
  EXPECT_EQ(calls[1]->inputs[0], calls[0]->outputs[0]);
  EXPECT_EQ(graph(*ep, 1).name, "block");
  EXPECT_EQ(input_types(*ep, 1), "f32[s0, 16]");
  EXPECT_EQ(shape(*ep, val(*ep, 0, graph(*ep, 0).outputs[0])), "f32[s0, 16]");
}

std::size_t bundle_size(const ExportedProgram& ep) {
  auto bytes = serialize_bundle(ep.program());
  EXPECT_TRUE(bytes.ok()) << bytes.status().message();
  if (!bytes.ok()) return 0;
  auto bundle = Bundle::from_bytes(*bytes);
  EXPECT_TRUE(bundle.ok()) << bundle.status().message();
  return bundle.ok() ? static_cast<std::size_t>((*bundle)->header().flatbuffer_size) : 0;
}

TEST(ControlFlow, RegionCalledFromTwentyFourLayersIsStoredOnce) {
  Stack stack(24);
  const std::vector<ExampleInput> in = {input("x", Tensor::randn({4, 16}), {Dim("batch", 1, 256)})};
  auto many = export_program([&](Tensor x) { return run_stack(stack, x, 24, true); }, in, {.self_tests = 0});
  ASSERT_TRUE(many.ok()) << many.status().message();
  ASSERT_EQ(many->program().graphs.size(), 2u);
  auto calls = nodes(*many, 0, OpKind::InvokeSubgraph);
  ASSERT_EQ(calls.size(), 24u);
  // Each call passes its own layer's parameters to the one subgraph.
  EXPECT_EQ(val(*many, 0, calls[0]->inputs[1]).name, "layers.0.fc.weight");
  EXPECT_EQ(val(*many, 0, calls[23]->inputs[1]).name, "layers.23.fc.weight");
  EXPECT_EQ(val(*many, 0, calls[23]->inputs[2]).name, "layers.23.fc.bias");
  for (const ir::Node* n : calls) EXPECT_EQ(n->subgraphs, (std::vector<int>{1}));
  EXPECT_EQ(input_types(*many, 1), "f32[s0, 16], f32[16, 16], f32[16]");
}

TEST(ControlFlow, RegionBundleGrowsByTheCallsNotByTheGraph) {
  Stack one_layer(1);  // the same weights at every call: only the graph's cost grows
  const std::vector<ExampleInput> in = {input("x", Tensor::randn({4, 16}), {Dim("batch", 1, 256)})};
  auto size_of = [&](int calls, bool use_region) {
    auto ep = export_program([&](Tensor x) { return run_stack(one_layer, x, calls, use_region); }, in, {.self_tests = 0});
    EXPECT_TRUE(ep.ok()) << ep.status().message();
    return ep.ok() ? bundle_size(*ep) : std::size_t{0};
  };
  const std::size_t once = size_of(1, true), many = size_of(24, true);
  const std::size_t inlined_once = size_of(1, false), inlined = size_of(24, false);
  const std::size_t per_call = (many - once) / 23, per_inlined_layer = (inlined - inlined_once) / 23;
  std::printf("bundle: region x1 %zu B, x24 %zu B (%zu B per extra call); inlined x1 %zu B, x24 %zu B (%zu B per layer)\n", once,
              many, per_call, inlined_once, inlined, per_inlined_layer);
  EXPECT_LT(per_call, 300u);
  EXPECT_GT(per_inlined_layer, 3 * per_call);
}

TEST(ControlFlow, RegionRetracedForAnotherInputSignature) {
  CompileRegion block("block", [](Tensor x) { return relu(x) * 2.0; });
  auto ep = export_program([&](Tensor x, Tensor y) { return std::make_tuple(block(x), block(y), block(x * 1.0)); },
                           {input("x", Tensor::randn({3, 4})), input("y", Tensor::randn({5}))});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  ASSERT_EQ(ep->program().graphs.size(), 3u) << ep->print();
  auto calls = nodes(*ep, 0, OpKind::InvokeSubgraph);
  ASSERT_EQ(calls.size(), 3u);
  EXPECT_EQ(calls[0]->subgraphs, calls[2]->subgraphs);
  EXPECT_NE(calls[0]->subgraphs, calls[1]->subgraphs);
  EXPECT_EQ(graph(*ep, calls[1]->subgraphs[0]).name, "block_1");
  EXPECT_EQ(std::get<std::string>(calls[1]->attrs[0]), "block_1");
}

TEST(ControlFlow, RegionRunsEagerlyAndRejectsAliasing) {
  CompileRegion block("block", [](Tensor x) { return x * 3.0; });
  expect_near(floats(block(Tensor::from_floats({2}, std::vector<float>{1, 2}))), {3, 6});
  CompileRegion passthrough("passthrough", [](Tensor x) { return x; });
  auto ep = export_program([&](Tensor x) { return passthrough(x); }, {input("x", Tensor::randn({2}))});
  ASSERT_FALSE(ep.ok());
  EXPECT_NE(ep.status().message().find("[invoke_subgraph] Higher order ops do not support aliasing. Found in invoke_subgraph: "
                                       "compile region passthrough returns its input arg0 as output 0"),
            std::string::npos)
      << ep.status().message();
}

TEST(ControlFlow, CondInsideARegionIsDedupedWithTheRegion) {
  CompileRegion block("block", [](Tensor x) {
    return cond(gt(sum(x), 0.0), [](Tensor v) { return v * 2.0; }, [](Tensor v) { return v - 1.0; }, {x});
  });
  auto ep = export_program([&](Tensor x) { return block(block(block(x))); }, {input("x", Tensor::randn({4}))});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  EXPECT_EQ(ep->program().graphs.size(), 4u) << ep->print();  // main, block, its two branches
  EXPECT_EQ(nodes(*ep, 0, OpKind::InvokeSubgraph).size(), 3u);
}

// ---------------------------------------------------------------------------------------
// Printing and the bundle

TEST(ControlFlow, PrintShowsSubgraphs) {
  auto ep = export_program([](Tensor x) { return case4_model(x); }, {input("x", Tensor::randn({6}))});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  const std::string out = ep->print();
  EXPECT_NE(out.find("cond: \"f32[u0]\" = cond(gt, x, graph 1, graph 2)  # control_flow_models.h:17"), std::string::npos) << out;
  EXPECT_NE(out.find("graph 1 cond_0_true(x: \"f32[6]\"):"), std::string::npos) << out;
  EXPECT_NE(out.find("graph 2 cond_0_false(x: \"f32[6]\"):"), std::string::npos) << out;
  EXPECT_NE(out.find("binds u0 = output 0 size 0"), std::string::npos) << out;
  EXPECT_NE(out.find("assert u0 <= 6"), std::string::npos) << out;
}

template <typename V>
std::vector<int> ints(const V* v) {
  return v ? std::vector<int>(v->begin(), v->end()) : std::vector<int>{};
}

// Every graph of `ep` against what the bundle holds.
void expect_same_in_bundle(const ExportedProgram& ep) {
  auto bytes = serialize_bundle(ep.program());
  ASSERT_TRUE(bytes.ok()) << bytes.status().message();
  auto bundle = Bundle::from_bytes(*bytes);
  ASSERT_TRUE(bundle.ok()) << bundle.status().message();
  const fb::Program& p = (*bundle)->program();
  const ir::Program& ir = ep.program();
  ASSERT_EQ(p.graphs()->size(), ir.graphs.size());
  for (std::size_t gi = 0; gi < ir.graphs.size(); ++gi) {
    const ir::Graph& g = ir.graphs[gi];
    const fb::Graph& fg = *p.graphs()->Get(static_cast<flatbuffers::uoffset_t>(gi));
    EXPECT_EQ(fg.name()->str(), g.name);
    ASSERT_EQ(fg.values() ? fg.values()->size() : 0u, g.values.size());
    for (std::size_t v = 0; v < g.values.size(); ++v) {
      const fb::Value& fv = *fg.values()->Get(static_cast<flatbuffers::uoffset_t>(v));
      EXPECT_EQ(static_cast<int>(fv.kind()), static_cast<int>(g.values[v].kind));
      const std::size_t rank = fv.shape() ? fv.shape()->size() : 0;
      ASSERT_EQ(rank, g.values[v].shape.size());
      for (std::size_t d = 0; d < rank; ++d) {
        EXPECT_EQ(expr_to_string(p, fv.shape()->Get(static_cast<flatbuffers::uoffset_t>(d))), text(ep, g.values[v].shape[d]));
      }
      if (g.values[v].kind == ir::ValueKind::kSymInt || g.values[v].kind == ir::ValueKind::kSymBool) {
        EXPECT_EQ(expr_to_string(p, fv.expr()), text(ep, g.values[v].expr));
      }
    }
    EXPECT_EQ(ints(fg.inputs()), g.inputs);
    EXPECT_EQ(ints(fg.outputs()), g.outputs);
    ASSERT_EQ(fg.nodes() ? fg.nodes()->size() : 0u, g.nodes.size());
    for (std::size_t n = 0; n < g.nodes.size(); ++n) {
      const fb::Node& fnode = *fg.nodes()->Get(static_cast<flatbuffers::uoffset_t>(n));
      EXPECT_EQ(p.op_names()->Get(fnode.op())->str(), op_name(g.nodes[n].op));
      EXPECT_EQ(ints(fnode.inputs()), g.nodes[n].inputs);
      EXPECT_EQ(ints(fnode.outputs()), g.nodes[n].outputs);
      EXPECT_EQ(ints(fnode.subgraphs()), g.nodes[n].subgraphs);
    }
    const std::size_t nb = fg.bindings() ? fg.bindings()->size() : 0;
    ASSERT_EQ(nb, g.bindings.size());
    for (std::size_t b = 0; b < nb; ++b) {
      EXPECT_EQ(static_cast<int>(fg.bindings()->Get(static_cast<flatbuffers::uoffset_t>(b))->symbol()), g.bindings[b].symbol);
      EXPECT_EQ(static_cast<int>(fg.bindings()->Get(static_cast<flatbuffers::uoffset_t>(b))->node()), g.bindings[b].node);
    }
    const std::size_t na = fg.asserts() ? fg.asserts()->size() : 0;
    ASSERT_EQ(na, g.asserts.size());
    for (std::size_t a = 0; a < na; ++a) {
      EXPECT_EQ(expr_to_string(p, fg.asserts()->Get(static_cast<flatbuffers::uoffset_t>(a))->expr()), text(ep, g.asserts[a].expr));
    }
  }
}

TEST(ControlFlow, EveryCaseRoundTripsThroughTheBundle) {
  {
    auto ep = export_program([](Tensor x) { return case4_model(x); }, {input("x", Tensor::randn({6}))});
    ASSERT_TRUE(ep.ok()) << ep.status().message();
    expect_same_in_bundle(*ep);
  }
  {
    CondDyn model;
    auto ep = export_program([&](Tensor x, Tensor y) { return model(x, y); },
                             {input("x", Tensor::randn({6, 8}), {Dim::DYNAMIC}), input("y", Tensor::randn({3}))});
    ASSERT_TRUE(ep.ok()) << ep.status().message();
    expect_same_in_bundle(*ep);
  }
  {
    auto ep = export_program(
        [](Tensor x) {
          auto [i, v] = loop_model(x);
          return std::make_tuple(i, v);
        },
        {input("x", Tensor::randn({4}))});
    ASSERT_TRUE(ep.ok()) << ep.status().message();
    expect_same_in_bundle(*ep);
  }
  {
    Stack stack(3);
    auto ep = export_program([&](Tensor x) { return run_stack(stack, x, 3, true); },
                             {input("x", Tensor::randn({4, 16}), {Dim("batch", 1, 256)})});
    ASSERT_TRUE(ep.ok()) << ep.status().message();
    expect_same_in_bundle(*ep);
  }
  {
    auto ep = export_program(
        [](Tensor x, Tensor y, SymInt n) { return nested_model(x, y, n); },
        {input("x", Tensor::randn({4})), input("y", Tensor::randn({4})), int_input("n", 3, Dim::DYNAMIC)});
    ASSERT_TRUE(ep.ok()) << ep.status().message();
    expect_same_in_bundle(*ep);
  }
}

TEST(ControlFlow, BundleWithARegionCallingItselfIsRejected) {
  CompileRegion block("block", [](Tensor x) { return tanh(x) * 2.0; });
  auto ep = export_program([&](Tensor x) { return block(x); }, {input("x", Tensor::randn({4}))});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  ir::Program p = ep->program();
  // Make the region call itself: its tanh becomes an invoke_subgraph of graph 1.
  ir::Graph& g = p.graphs[1];
  auto it = std::find_if(g.nodes.begin(), g.nodes.end(), [](const ir::Node& n) { return n.op == OpKind::Tanh; });
  ASSERT_NE(it, g.nodes.end());
  it->op = OpKind::InvokeSubgraph;
  it->subgraphs = {1};
  it->attrs = {ir::Attr(std::string("block"))};
  auto bytes = serialize_bundle(p);
  ASSERT_TRUE(bytes.ok()) << bytes.status().message();
  auto bundle = Bundle::from_bytes(*bytes);
  ASSERT_FALSE(bundle.ok());
  EXPECT_EQ(bundle.status().code(), StatusCode::kInvalidBundle);
  EXPECT_NE(bundle.status().message().find("graph 1 (block): calls itself recursively"), std::string::npos) << bundle.status().message();
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

using namespace cf_models;

// ---------------------------------------------------------------------------------------
// More shapes of the same machinery

TEST(ControlFlowMore, SymIntOutputsMergeLikeSizes) {
  auto ep = export_program(
      [](Tensor x, SymInt n) {
        auto [a, b] = cond(
            gt(sum(x), 0.0), [](Tensor v, SymInt k) { return std::make_tuple(v.size(0) * 2, k + 1); },
            [](Tensor v, SymInt k) { return std::make_tuple(v.size(0) * 2, k * 3); }, {x, n});
        return std::make_tuple(a, b);
      },
      {input("x", Tensor::randn({5}), {Dim::DYNAMIC}), int_input("n", 4, Dim::DYNAMIC)});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  const ir::Graph& g = ep->program().graphs[0];
  // The same expression in both branches stays; differing ones become a Scalar-bound symbol.
  EXPECT_EQ(text(*ep, ep->program().outputs[0].expr), "2*s0");
  const sym::Expr b = ep->program().outputs[1].expr;
  ASSERT_TRUE(b.is_symbol()) << text(*ep, b);
  EXPECT_EQ(ep->program().env.symbol(b.symbol_id()).kind, sym::SymbolKind::Unbacked);
  ASSERT_EQ(g.bindings.size(), 1u);
  EXPECT_EQ(g.bindings[0].kind, ir::UnbackedBinding::Kind::kScalar);
  EXPECT_EQ(g.bindings[0].output, 1);
  // The branches take [x, n] with the int operand as a SymInt input binding s1.
  EXPECT_EQ(input_types(*ep, 1), "f32[s0], Sym(s1)");
  ASSERT_EQ(ep->program().self_tests.size(), 1u);
  EXPECT_EQ(ep->program().self_tests[0].outputs[0].int_value, 10);
}

TEST(ControlFlowMore, DataDependentSizesInsideBranchesGetFreshSymbols) {
  auto ep = export_program(
      [](Tensor x) {
        return cond(gt(sum(x), 0.0), [](Tensor v) { return nonzero(v); }, [](Tensor v) { return nonzero(relu(v)); }, {x});
      },
      {input("x", Tensor::randn({3, 4}))});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  const ir::Graph& g = ep->program().graphs[0];
  // Each branch binds its own row count (with its asserts, in the branch); the cond binds a
  // third symbol covering both: [0, 12].
  const ir::Value& out = g.values[static_cast<std::size_t>(g.outputs[0])];
  ASSERT_TRUE(out.shape[0].is_symbol());
  const int u = out.shape[0].symbol_id();
  EXPECT_EQ(ep->program().env.symbol(u).range.lo, 0);
  EXPECT_EQ(ep->program().env.symbol(u).range.hi, 12);
  ASSERT_EQ(g.bindings.size(), 1u);
  EXPECT_EQ(g.bindings[0].symbol, u);
  for (int branch : {1, 2}) {
    const ir::Graph& b = ep->program().graphs[static_cast<std::size_t>(branch)];
    ASSERT_EQ(b.bindings.size(), 1u);
    EXPECT_NE(b.bindings[0].symbol, u);
    EXPECT_EQ(assert_messages(b).size(), 2u) << ep->print();  // u >= 0, u <= 12 after the nonzero
  }
  EXPECT_EQ(assert_messages(g), (std::vector<std::string>{text(*ep, sym::Expr::symbol(u)) + " >= 0",
                                                           text(*ep, sym::Expr::symbol(u)) + " <= 12"}));
}

TEST(ControlFlowMore, GuardsInsideABranchAreInputPreconditions) {
  auto ep = export_program(
      [](Tensor x) {
        return cond(gt(sum(x), 0.0),
                    [](Tensor v) {
                      if (v.size(0) % 2 == 0) return v.reshape({-1, 2}).sum({1});
                      return v * 2.0;
                    },
                    [](Tensor v) { return v * 3.0; }, {x});
      },
      {input("x", Tensor::randn({8}), {Dim::DYNAMIC})});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  const ir::Graph& g = ep->program().graphs[0];
  // The guard: a precondition on the inputs of the entry graph (as in PyTorch).
  ASSERT_FALSE(g.asserts.empty()) << ep->print();
  EXPECT_EQ(g.asserts[0].after_node, -1);
  EXPECT_NE(g.asserts[0].message.find("% 2"), std::string::npos) << g.asserts[0].message;
  EXPECT_EQ(g.asserts[0].meta.location.file, "control_flow_test.cpp");
  EXPECT_TRUE(ep->program().graphs[1].asserts.empty());
  // The branches return s0//2 and s0 elements: a fresh symbol in [1, inf).
  EXPECT_EQ(shape(*ep, val(*ep, 0, g.outputs[0])), "f32[u0]");
  EXPECT_EQ(assert_messages(g), (std::vector<std::string>{g.asserts[0].message, "u0 >= 1"}));
}

TEST(ControlFlowMore, ChecksInsideABranchStayInTheBranch) {
  auto ep = export_program(
      [](Tensor x, Tensor n_t) {
        SymInt n = n_t.item();
        return cond(gt(sum(x), 0.0),
                    [&](Tensor v) {
                      check(n + v.size(0) <= 100);
                      return v * 2.0;
                    },
                    [](Tensor v) { return v * 3.0; }, {x});
      },
      {input("x", Tensor::randn({4})), input("n_t", Tensor::from_ints({}, std::vector<std::int64_t>{3}))});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  const ir::Graph& t = ep->program().graphs[1];
  ASSERT_EQ(t.asserts.size(), 1u) << ep->print();
  EXPECT_EQ(t.asserts[0].after_node, -1);  // u0 is a (lifted) input of the branch
  EXPECT_EQ(t.asserts[0].meta.location.file, "control_flow_test.cpp");
  EXPECT_EQ(input_types(*ep, 1), "f32[4], Sym(u0)");
  // Not a fact outside the branch: u0 keeps its range and main has no assert on it.
  EXPECT_EQ(ep->program().env.symbol(0).range.hi, sym::kPosInf);
  EXPECT_TRUE(ep->program().graphs[0].asserts.empty()) << ep->print();
}

TEST(ControlFlowMore, BranchesWithoutOperandsCaptureEverything) {
  auto ep = export_program(
      [](Tensor x) { return cond(x.size(0) > 3, [&] { return x * 2.0; }, [&] { return x - 1.0; }); },
      {input("x", Tensor::randn({5}), {Dim::DYNAMIC})});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  auto conds = nodes(*ep, 0, OpKind::Cond);
  ASSERT_EQ(conds.size(), 1u);
  EXPECT_EQ(conds[0]->inputs.size(), 2u);  // [pred, x (lifted)]
  EXPECT_EQ(input_types(*ep, 1), "f32[s0]");
  EXPECT_EQ(shape(*ep, val(*ep, 0, graph(*ep, 0).outputs[0])), "f32[s0]");
}

TEST(ControlFlowMore, SpecializedEntryGraphsCallTheSameSubgraphs) {
  Dim b("b", 1, 64);
  b.specialize_on({"b == 1"});
  CompileRegion block("block", [](Tensor v) { return relu(v) + 1.0; });
  auto ep = export_program([&](Tensor x) { return cond(x.size(0) > 4, [&](Tensor v) { return block(v); },
                                                       [](Tensor v) { return v * 2.0; }, {x}); },
                           {input("x", Tensor::randn({6, 3}), {b})});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  ASSERT_EQ(ep->program().specializations.size(), 1u);
  const ir::Graph& spec = graph(*ep, ep->program().specializations[0].graph);
  auto conds = std::count_if(spec.nodes.begin(), spec.nodes.end(), [](const ir::Node& n) { return n.op == OpKind::Cond; });
  EXPECT_EQ(conds, 1);
  auto bytes = serialize_bundle(ep->program());
  ASSERT_TRUE(bytes.ok()) << bytes.status().message();
  EXPECT_TRUE(Bundle::from_bytes(*bytes).ok());
}

TEST(ControlFlowMore, RegionWithAnIntOperand) {
  CompileRegion block("block", [](Tensor v, SymInt k) { return v * 2.0 + full({k}, 1.0).sum(); });
  auto ep = export_program([&](Tensor x, SymInt n) { return block(block(x, n), n + 1); },
                           {input("x", Tensor::randn({4})), int_input("n", 3, Dim::DYNAMIC)});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  // Both calls bind k from their int operand: n and n + 1 are one signature (a bare symbol).
  EXPECT_EQ(nodes(*ep, 0, OpKind::InvokeSubgraph).size(), 2u);
  EXPECT_EQ(input_types(*ep, 1), "f32[4], Sym(s0)");
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

using namespace cf_models;

TEST(ControlFlowMore, RegionWithDataDependentSizesIsStillStoredOnce) {
  // Each trace makes its own unbacked symbols; traces equal up to renaming them are one subgraph.
  CompileRegion route("route", [](Tensor v) {
    Tensor picked = masked_select(v, gt(v, 0.0));
    return sum(picked).reshape({1}) + v;
  });
  auto ep = export_program([&](Tensor x) { return route(route(route(x))); }, {input("x", Tensor::randn({6}))});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  EXPECT_EQ(ep->program().graphs.size(), 2u) << ep->print();
  EXPECT_EQ(nodes(*ep, 0, OpKind::InvokeSubgraph).size(), 3u);
  ASSERT_EQ(graph(*ep, 1).bindings.size(), 1u);  // the masked_select's row count, bound inside
  // The repeated traces' own symbols are not shown: only u0, bound in the region.
  const std::string out = ep->print();
  EXPECT_NE(out.find("u0: [0, 6] unbacked"), std::string::npos) << out;
  EXPECT_EQ(out.find("u1:"), std::string::npos) << out;
  auto bytes = serialize_bundle(ep->program());
  ASSERT_TRUE(bytes.ok()) << bytes.status().message();
  EXPECT_TRUE(Bundle::from_bytes(*bytes).ok());
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

TEST(ControlFlowMore, WhileLoopPredicateMustBeABoolWithOneElement) {
  auto floaty = export_program(
      [](Tensor x) { return while_loop([](Tensor v) { return sum(v); }, [](Tensor v) { return v + 1.0; }, {x}); },
      {input("x", Tensor::randn({2}))});
  ASSERT_FALSE(floaty.ok());
  EXPECT_NE(floaty.status().message().find("[while_loop] the predicate must be a bool tensor with one element, got f32 tensor"),
            std::string::npos)
      << floaty.status().message();
  auto wide = export_program(
      [](Tensor x) { return while_loop([](Tensor v) { return gt(v, 0.0); }, [](Tensor v) { return v + 1.0; }, {x}); },
      {input("x", Tensor::randn({2}))});
  ASSERT_FALSE(wide.ok());
  EXPECT_NE(wide.status().message().find("[while_loop] the predicate must be a bool tensor with one element, got bool[2]"),
            std::string::npos)
      << wide.status().message();
}

TEST(ControlFlowMore, UpdatingAParameterDuringExportIsAnError) {
  struct M : Module {
    Tensor w;
    M() { w = register_parameter("w", Tensor::randn({2})); }
  } m;
  auto ep = export_program([&](Tensor x) { return m.w.add_(x); }, {input("x", Tensor::randn({2}))});
  ASSERT_FALSE(ep.ok());
  EXPECT_NE(ep.status().message().find("[add_] cannot update parameter 'w' in place: parameters and buffers are constants of the "
                                       "exported program"),
            std::string::npos)
      << ep.status().message();
  EXPECT_FALSE(m.w.is_traced());  // the module is untouched
}

TEST(ControlFlowMore, TensorsMayNotEscapeASubgraphThroughACapture) {
  Tensor leaked;
  auto ep = export_program(
      [&](Tensor x) {
        Tensor y = cond(gt(sum(x), 0.0),
                        [&](Tensor v) {
                          leaked = v * 2.0;
                          return v * 3.0;
                        },
                        [](Tensor v) { return v * 4.0; }, {x});
        return y + leaked;
      },
      {input("x", Tensor::randn({2}))});
  ASSERT_FALSE(ep.ok());
  EXPECT_NE(ep.status().message().find("a tensor traced inside a subgraph (a cond branch, a while_loop function or a compile region) "
                                       "was used outside it: return it from the function instead of capturing it"),
            std::string::npos)
      << ep.status().message();
}

}  // namespace
}  // namespace kiln

// SEMANTICS.md "Test cases to pin down", written against the C++ tracing API.
#include <gtest/gtest.h>

#include <optional>

#include "kiln/export/export.h"
#include "kiln/export/guards.h"
#include "kiln/export/ops.h"
#include "kiln/export/symbolic/postfix.h"
#include "kiln/export/symbolic/print.h"
#include "kiln/format/kiln_generated.h"
#include "kiln/runtime/bundle.h"
#include "kiln/runtime/expr.h"

namespace kiln {
namespace {

std::string text(const ExportedProgram& ep, sym::Expr e) { return sym::to_string(e, &ep.program().env); }

std::vector<std::string> assert_messages(const ir::Graph& g) {
  std::vector<std::string> out;
  for (const auto& a : g.asserts) out.push_back(a.message);
  return out;
}

const ir::Value& value(const ExportedProgram& ep, int id) { return ep.program().graphs[0].values[static_cast<std::size_t>(id)]; }

std::string shape(const ExportedProgram& ep, const ir::Value& v) {
  std::string out = "[";
  for (std::size_t i = 0; i < v.shape.size(); ++i) out += (i ? ", " : "") + text(ep, v.shape[i]);
  return out + "]";
}

TEST(Semantics, Case1DynamicBatchRangeIsStored) {
  Dim batch("batch", 2, 1024);
  auto ep = export_program([](Tensor x) { return relu(x); }, {input("x", Tensor::randn({8, 64}), {batch})});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  const auto& info = ep->program().env.symbol(0);
  EXPECT_EQ(info.name, "s0");
  EXPECT_EQ(info.range.lo, 2);
  EXPECT_EQ(info.range.hi, 1024);
  EXPECT_EQ(info.user_name, "batch");
  EXPECT_EQ(shape(*ep, value(*ep, ep->program().graphs[0].outputs[0])), "[s0, 64]");
}

TEST(Semantics, Case2ItemWithChecksMakesUnbackedSymbolAndTwoAsserts) {
  auto ep = export_program(
      [](Tensor x, Tensor n_t) {
        SymInt n = n_t.item();
        check(n >= 2);
        check(n <= 10);
        return std::vector<Tensor>{ones({n, 3}), slice(x, 0, 0, n) * 2.0};
      },
      {input("x", Tensor::randn({16, 3})), input("n_t", Tensor::from_ints({}, std::vector<std::int64_t>{4}))});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  const ir::Graph& g = ep->program().graphs[0];
  EXPECT_EQ(assert_messages(g), (std::vector<std::string>{"u0 >= 2", "u0 <= 10"}));
  ASSERT_EQ(g.bindings.size(), 1u);
  EXPECT_EQ(g.bindings[0].kind, ir::UnbackedBinding::Kind::kScalar);
  EXPECT_EQ(g.nodes[static_cast<std::size_t>(g.bindings[0].node)].op, OpKind::Item);
  EXPECT_EQ(g.asserts[0].after_node, g.bindings[0].node);
  EXPECT_EQ(shape(*ep, value(*ep, g.outputs[0])), "[u0, 3]");
  EXPECT_EQ(shape(*ep, value(*ep, g.outputs[1])), "[u0, 3]");
  EXPECT_EQ(g.asserts[0].meta.location.file, "semantics_test.cpp");
}

TEST(Semantics, Case3NonzeroOnThreeByFour) {
  auto ep = export_program([](Tensor x) { return nonzero(x); }, {input("x", Tensor::randn({3, 4}))});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  const ir::Graph& g = ep->program().graphs[0];
  const ir::Value& out = value(*ep, g.outputs[0]);
  EXPECT_EQ(out.dtype, DType::kI64);
  EXPECT_EQ(shape(*ep, out), "[u0, 2]");
  EXPECT_EQ(assert_messages(g), (std::vector<std::string>{"u0 >= 0", "u0 <= 12"}));
  ASSERT_EQ(g.bindings.size(), 1u);
  EXPECT_EQ(g.bindings[0].kind, ir::UnbackedBinding::Kind::kSize);
  EXPECT_EQ(g.bindings[0].dim, 0);
}

TEST(Semantics, Case5DynamicIntBecomesSymInput) {
  auto ep = export_program([](Tensor x, SymInt n) { return x.size(0) + n; },
                           {input("x", Tensor::randn({5, 2}), {Dim::DYNAMIC}), int_input("n", 3, Dim::DYNAMIC)});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  const auto& outs = ep->program().outputs;
  ASSERT_EQ(outs.size(), 1u);
  EXPECT_TRUE(outs[0].is_int);
  EXPECT_EQ(text(*ep, outs[0].expr), "s0 + s1");
  EXPECT_EQ(ep->program().inputs[1].dynamism, ir::Dynamism::kDynamic);
}

TEST(Semantics, Case6DynamicIntSpecializedIsAnError) {
  auto model = [](Tensor x, SymInt n) {
    if (n == 4) return x * 2.0;
    return x;
  };
  auto ep = export_program(model, {input("x", Tensor::randn({2})), int_input("n", 4, Dim::DYNAMIC)});
  ASSERT_FALSE(ep.ok());
  EXPECT_EQ(ep.status().code(), StatusCode::kExportError);
  EXPECT_NE(ep.status().message().find("you marked n as dynamic but your code specialized it to be a constant (4)"), std::string::npos)
      << ep.status().message();
  EXPECT_NE(ep.status().message().find("semantics_test.cpp:"), std::string::npos) << ep.status().message();
  auto autod = export_program(model, {input("x", Tensor::randn({2})), int_input("n", 4, Dim::AUTO)});
  ASSERT_TRUE(autod.ok()) << autod.status().message();
  EXPECT_EQ(autod->program().inputs[1].dynamism, ir::Dynamism::kStatic);
  EXPECT_EQ(autod->program().inputs[1].static_value, 4);
}

TEST(Semantics, Case7NarrowingANamedDimSuggestsTheFix) {
  auto ep = export_program(
      [](Tensor x) {
        if (x.size(0) > 3) return relu(x);
        return x;
      },
      {input("x", Tensor::randn({8, 2}), {Dim("b", 2, 64)})});
  ASSERT_FALSE(ep.ok());
  EXPECT_EQ(ep.status().code(), StatusCode::kExportError);
  const std::string m = ep.status().message();
  EXPECT_NE(m.find("constraint violation"), std::string::npos) << m;
  EXPECT_NE(m.find("Dim b (x.size()[0] = s0)"), std::string::npos) << m;
  EXPECT_NE(m.find("from [2, 64] to [4, 64]"), std::string::npos) << m;
  EXPECT_NE(m.find("Suggested fix: b = Dim(\"b\", min=4, max=64)"), std::string::npos) << m;
}

TEST(Semantics, Case8UndeclaredEqualityIsAnError) {
  auto ep = export_program([](Tensor x, Tensor y) { return x + y; },
                           {input("x", Tensor::randn({4}), {Dim("a", 2, 16)}), input("y", Tensor::randn({4}), {Dim("b", 2, 16)})});
  ASSERT_FALSE(ep.ok());
  const std::string m = ep.status().message();
  EXPECT_NE(m.find("must always be equal"), std::string::npos) << m;
  EXPECT_NE(m.find("b = a"), std::string::npos) << m;
  Dim a("a", 2, 16);
  auto same = export_program([](Tensor x, Tensor y) { return x + y; },
                             {input("x", Tensor::randn({4}), {a}), input("y", Tensor::randn({4}), {a})});
  EXPECT_TRUE(same.ok()) << same.status().message();
}

TEST(Semantics, Case9DerivedDimSharesTheSymbol) {
  Dim x_dim("n", 2, 100);
  auto ep = export_program([](Tensor x, Tensor y) { return std::vector<Tensor>{x, y}; },
                           {input("x", Tensor::randn({5}), {x_dim}), input("y", Tensor::randn({6}), {x_dim + 1})});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  EXPECT_EQ(text(*ep, ep->program().inputs[1].shape[0]), "s0 + 1");
}

TEST(Semantics, Case10DivisibilityBecomesARuntimeAssert) {
  auto ep = export_program(
      [](Tensor x) {
        if (x.size(0) % 4 == 0) return x.reshape({-1, 4});
        return x.reshape({1, -1});
      },
      {input("x", Tensor::randn({8}), {Dim::DYNAMIC})});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  const ir::Graph& g = ep->program().graphs[0];
  ASSERT_FALSE(g.asserts.empty());
  EXPECT_EQ(g.asserts[0].after_node, -1);
  EXPECT_EQ(text(*ep, g.asserts[0].expr), g.asserts[0].message);
  EXPECT_NE(g.asserts[0].message.find("% 4"), std::string::npos) << g.asserts[0].message;
  EXPECT_EQ(shape(*ep, value(*ep, g.outputs[0])), "[(s0//4), 4]");
}

TEST(Semantics, Case11BranchOnDataIsAnError) {
  auto ep = export_program(
      [](Tensor x) {
        if (sum(x).to(DType::kI64).item() > 0) return x;
        return -x;
      },
      {input("x", Tensor::randn({4}))});
  ASSERT_FALSE(ep.ok());
  const std::string m = ep.status().message();
  EXPECT_NE(m.find("could not guard on data-dependent expression"), std::string::npos) << m;
  EXPECT_NE(m.find("semantics_test.cpp:"), std::string::npos) << m;
  EXPECT_NE(m.find("check("), std::string::npos) << m;
  EXPECT_NE(m.find("cond("), std::string::npos) << m;
}

TEST(Semantics, Case12GuardOrFalseAndVariadicOr) {
  // No self-tests: running the model eagerly would overwrite what tracing decided.
  std::optional<bool> decided;
  auto ep = export_program(
      [&](Tensor t) {
        SymInt u = t.item();
        decided = guard_or_false(u == 1);
        check(sym_or(u == 1, u == 3, u == 5));
        return t * 2;
      },
      {input("t", Tensor::from_ints({}, std::vector<std::int64_t>{1}))}, {.self_tests = 0});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  ASSERT_TRUE(decided.has_value());
  EXPECT_FALSE(*decided);  // undecidable while tracing (although the example is 1): the default
  const ir::Graph& g = ep->program().graphs[0];
  ASSERT_EQ(g.asserts.size(), 1u) << ep->print();
  EXPECT_NE(g.asserts[0].message.find(" or "), std::string::npos) << g.asserts[0].message;
}

TEST(Semantics, GuardOrTrueDefaultsToTrueAndRecordsNothing) {
  std::vector<bool> decided;
  auto ep = export_program(
      [&](Tensor t) {
        SymInt u = t.item();
        decided.push_back(guard_or_true(u == 1));    // undecidable (the example says false): the default
        check(u >= 2);
        decided.push_back(guard_or_true(u == 1));    // decided by the check: false
        decided.push_back(guard_or_true(u >= 0));    // decided: true
        return t * 2;
      },
      {input("t", Tensor::from_ints({}, std::vector<std::int64_t>{3}))}, {.self_tests = 0});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  EXPECT_EQ(decided, (std::vector<bool>{true, false, true}));
  // Only the check's bound became an assert; the guards recorded nothing.
  EXPECT_EQ(assert_messages(ep->program().graphs[0]), std::vector<std::string>{"u0 >= 2"}) << ep->print();
}

TEST(Semantics, Case15SpecializationsInDeclarationOrder) {
  Dim s("s", 1, 4096);
  s.specialize_on({"s % 16 == 0", "s == 32"});
  auto ep = export_program([](Tensor x) { return relu(x); }, {input("x", Tensor::randn({5, 8}), {s})});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  const auto& specs = ep->program().specializations;
  ASSERT_EQ(specs.size(), 2u);
  EXPECT_EQ(specs[0].label, "s % 16 == 0");
  EXPECT_EQ(specs[1].label, "s == 32");
  // Under `s == 32` shapes fold to constants.
  const ir::Graph& g32 = ep->program().graphs[static_cast<std::size_t>(specs[1].graph)];
  EXPECT_EQ(text(*ep, g32.values[static_cast<std::size_t>(g32.outputs[0])].shape[0]), "32");
}

TEST(Semantics, Case16RoundTripThroughTheBundle) {
  Dim batch("batch", 2, 1024);
  auto ep = export_program(
      [](Tensor x, SymInt n) {
        check(x.size(0) + n <= 2000);
        return std::make_tuple(nonzero(x), x.size(0) * 2 + n);
      },
      {input("x", Tensor::randn({8, 3}), {batch}), int_input("n", 5, Dim::DYNAMIC)});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  auto bytes = serialize_bundle(ep->program());
  ASSERT_TRUE(bytes.ok()) << bytes.status().message();
  auto bundle = Bundle::from_bytes(*bytes);
  ASSERT_TRUE(bundle.ok()) << bundle.status().message();
  const fb::Program& p = (*bundle)->program();
  // Every expression reads back to the same canonical expression.
  for (std::uint32_t id = 0; id < p.exprs()->size(); ++id) {
    const auto* ref = p.exprs()->Get(id);
    std::vector<sym::ExprToken> tokens;
    for (std::uint32_t t = ref->start(); t < ref->start() + ref->length(); ++t) {
      tokens.push_back({static_cast<std::uint8_t>(p.expr_tokens()->Get(t)->op()), p.expr_tokens()->Get(t)->value()});
    }
    auto back = sym::from_postfix(tokens);
    ASSERT_TRUE(back.ok()) << back.status().message();
    EXPECT_EQ(sym::to_postfix(*back), tokens);
  }
  EXPECT_EQ(expr_to_string(p, p.signature()->outputs()->Get(1)->expr()), text(*ep, ep->program().outputs[1].expr));
}

TEST(Semantics, PrintShowsShapesAssertsAndSourceLines) {
  auto ep = export_program([](Tensor x) { return nonzero(relu(x)); }, {input("x", Tensor::randn({3, 4}), {Dim("rows", 1, 8)})});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  const std::string out = ep->print();
  EXPECT_NE(out.find("graph 0 main(x: \"f32[s0, 4]\")"), std::string::npos) << out;
  EXPECT_NE(out.find("relu: \"f32[s0, 4]\" = relu(x)  # semantics_test.cpp:"), std::string::npos) << out;
  EXPECT_NE(out.find("nonzero: \"i64[u0, 2]\" = nonzero(relu)"), std::string::npos) << out;
  EXPECT_NE(out.find("assert u0 <= 32"), std::string::npos) << out;
  EXPECT_NE(out.find("s0: [1, 8] (rows)"), std::string::npos) << out;
}

}  // namespace
}  // namespace kiln

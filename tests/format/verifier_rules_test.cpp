// Every rule of the semantic verifier (runtime/src/bundle/verify.cpp; docs/FORMAT.md,
// "Semantic rules"): each test breaks one rule in the format sample's object tree, writes
// it with the real writer, loads it, and checks the kInvalidBundle message names the place.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "kiln/export/testing/format_sample.h"
#include "kiln/format/kiln_generated.h"
#include "kiln/runtime/bundle.h"
#include "kiln/runtime/expr.h"

namespace kiln {
namespace {

using Bytes = std::vector<std::uint8_t>;
using testing::FormatSample;
using testing::make_format_sample;

Result<std::unique_ptr<Bundle>> load(const Bytes& bytes) { return Bundle::from_bytes(bytes); }

// The error of loading `bytes`, or "" when it loads.
std::string error_of(const Bytes& bytes) {
  auto b = load(bytes);
  if (b.ok()) return "";
  EXPECT_EQ(b.status().code(), StatusCode::kInvalidBundle) << b.status().to_string();
  EXPECT_FALSE(b.status().message().empty());
  return b.status().message();
}

class SemanticRule : public ::testing::Test {
 protected:
  void SetUp() override { sample_ = make_format_sample(); }
  fb::ProgramT& p() { return sample_->program; }
  fb::GraphT& main_graph() { return *p().graphs[0]; }

  // Loads the mutated program and returns the error message ("" if it loaded).
  std::string error() {
    auto bytes = sample_->bytes();
    EXPECT_TRUE(bytes.ok()) << bytes.status().to_string();
    if (!bytes.ok()) return "<write failed>";
    return error_of(*bytes);
  }
  void expect_error(const std::string& substring) {
    const std::string m = error();
    EXPECT_NE(m.find(substring), std::string::npos) << "got: '" << m << "'\nwanted: '" << substring << "'";
  }
  // Appends a raw expression (no interning, so ill-formed ones are kept) and returns its id.
  std::uint32_t add_expr(std::vector<fb::ExprToken> tokens) {
    const auto id = static_cast<std::uint32_t>(p().exprs.size());
    p().exprs.emplace_back(static_cast<std::uint32_t>(p().expr_tokens.size()), static_cast<std::uint32_t>(tokens.size()));
    p().expr_tokens.insert(p().expr_tokens.end(), tokens.begin(), tokens.end());
    return id;
  }

  std::unique_ptr<FormatSample> sample_;
};

TEST_F(SemanticRule, TheUnmodifiedSampleLoads) { EXPECT_EQ(error(), ""); }

TEST_F(SemanticRule, NodeInputDefinedLater) {
  main_graph().nodes[0]->inputs.push_back(7);  // value 7 is produced by node 1
  expect_error("graph 0 (main), node 0 (linear), input 3: value 7 is defined later (graph not topologically ordered)");
}

TEST_F(SemanticRule, NodeInputDoesNotExist) {
  main_graph().nodes[1]->inputs[0] = 999;
  expect_error("graph 0 (main), node 1 (relu), input 0: value 999 does not exist");
}

TEST_F(SemanticRule, ValueDefinedTwice) {
  main_graph().nodes[1]->outputs = {6};  // node 0 defines value 6 already
  expect_error("graph 0 (main), node 1, output 0: value 6 is defined twice");
}

TEST_F(SemanticRule, GraphInputDefinedByNode) {
  main_graph().nodes[0]->outputs = {0};
  expect_error("graph 0 (main), node 0, output 0: value 0 is defined twice");
}

TEST_F(SemanticRule, TensorNeverDefined) {
  main_graph().nodes[5]->outputs.clear();  // value 13 has no producer
  expect_error("graph 0 (main), value 13: tensor is never defined");
}

TEST_F(SemanticRule, OpIndexOutOfRange) {
  main_graph().nodes[1]->op = 99;
  expect_error("graph 0 (main), node 1: op 99 not in op_names");
}

TEST_F(SemanticRule, EmptyOpName) {
  p().op_names[2] = "";
  expect_error("op_names[2] is empty");
}

TEST_F(SemanticRule, ExpressionStackUnderflow) {
  const auto id = add_expr({fb::ExprToken(fb::ExprOp::Const, 1), fb::ExprToken(fb::ExprOp::Add, 2)});
  expect_error("expression " + std::to_string(id) + ": stack underflow at Add");
}

TEST_F(SemanticRule, ExpressionLeavesTwoValues) {
  const auto id = add_expr({fb::ExprToken(fb::ExprOp::Const, 1), fb::ExprToken(fb::ExprOp::Const, 2)});
  expect_error("expression " + std::to_string(id) + ": leaves 2 values, not 1");
}

TEST_F(SemanticRule, ExpressionUnknownSymbol) {
  const auto id = add_expr({fb::ExprToken(fb::ExprOp::Sym, 99)});
  expect_error("expression " + std::to_string(id) + ": refers to unknown symbol 99");
  p().expr_tokens.back() = fb::ExprToken(fb::ExprOp::Sym, -1);
  expect_error("expression " + std::to_string(id) + ": refers to unknown symbol -1");
}

TEST_F(SemanticRule, ExpressionTypeErrorAndOverInts) {
  const auto id = add_expr({fb::ExprToken(fb::ExprOp::Const, 1), fb::ExprToken(fb::ExprOp::Const, 2),
                            fb::ExprToken(fb::ExprOp::And, 2)});
  expect_error("expression " + std::to_string(id) + ": operands of And have the wrong type");
}

TEST_F(SemanticRule, ExpressionTypeErrorAddOverBools) {
  const auto id = add_expr({fb::ExprToken(fb::ExprOp::Const, 1), fb::ExprToken(fb::ExprOp::Const, 2), fb::ExprToken(fb::ExprOp::Lt, 0),
                            fb::ExprToken(fb::ExprOp::Const, 3), fb::ExprToken(fb::ExprOp::Add, 2)});
  expect_error("expression " + std::to_string(id) + ": operands of Add have the wrong type");
}

TEST_F(SemanticRule, ExpressionBadArityAndUnknownOperator) {
  const auto id = add_expr({fb::ExprToken(fb::ExprOp::Const, 1), fb::ExprToken(fb::ExprOp::Add, 1)});
  expect_error("expression " + std::to_string(id) + ": operator Add has bad arity 1");
  p().expr_tokens.back() = fb::ExprToken(static_cast<fb::ExprOp>(200), 0);
  expect_error("expression " + std::to_string(id) + ": unknown operator 200");
}

TEST_F(SemanticRule, ExpressionTokenRangeOutOfBounds) {
  p().exprs.emplace_back(static_cast<std::uint32_t>(p().expr_tokens.size()) - 1, 5u);
  expect_error("expression " + std::to_string(p().exprs.size() - 1) + ": token range");
  p().exprs.back() = fb::ExprRef(0, 0);
  expect_error("is empty, too long or out of bounds");
}

TEST_F(SemanticRule, AssertPredicateNotBoolean) {
  main_graph().asserts[1]->expr = main_graph().values[9]->expr;  // s0 + s1 is an integer
  expect_error("graph 0 (main), runtime assert 1: expression " + std::to_string(main_graph().values[9]->expr) + " must be boolean");
}

TEST_F(SemanticRule, SpecializationPredicateNotBoolean) {
  p().specializations[0]->predicate = main_graph().values[9]->expr;
  expect_error("specialization 0: expression " + std::to_string(main_graph().values[9]->expr) + " must be boolean");
}

TEST_F(SemanticRule, SpecializationPredicateUsesUnbackedSymbol) {
  p().specializations[0]->predicate = main_graph().asserts[0]->expr;  // u0 <= 64*s0
  expect_error("specialization 0: predicate uses an unbacked symbol");
}

TEST_F(SemanticRule, SpecializationOfTheEntryGraph) {
  p().specializations[0]->graph = 0;
  expect_error("specialization 0: graph 0 is not a specialized graph");
}

TEST_F(SemanticRule, UnbackedSymbolUsedBeforeItsBinding) {
  // relu's output mentions u0, which nonzero (node 2) binds.
  main_graph().values[7]->shape[0] = main_graph().values[8]->shape[0];
  expect_error("graph 0 (main), node 1 (relu), output 0: uses symbol u0 before it is bound");
}

TEST_F(SemanticRule, UnbackedSymbolInAttributeBeforeItsBinding) {
  main_graph().nodes[1]->attrs.push_back(std::make_unique<fb::AttrT>());
  main_graph().nodes[1]->attrs[0]->kind = fb::AttrKind::Expr;
  main_graph().nodes[1]->attrs[0]->exprs = {main_graph().values[8]->shape[0]};
  expect_error("graph 0 (main), node 1 (relu), attribute 0: uses symbol u0 before it is bound");
}

TEST_F(SemanticRule, AssertPlacedBeforeItsBindingNode) {
  main_graph().asserts[0]->after_node = 1;  // u0 is bound by node 2
  expect_error("graph 0 (main), runtime assert 0: uses symbol u0 before it is bound");
  main_graph().asserts[0]->after_node = -1;
  expect_error("graph 0 (main), runtime assert 0: uses symbol u0 before it is bound");
}

TEST_F(SemanticRule, AssertAfterNodeOutOfRange) {
  main_graph().asserts[0]->after_node = 6;
  expect_error("graph 0 (main), runtime assert 0: after_node 6 out of range");
  main_graph().asserts[0]->after_node = -2;
  expect_error("graph 0 (main), runtime assert 0: after_node -2 out of range");
}

TEST_F(SemanticRule, UnbackedBindingRules) {
  auto& b = *main_graph().bindings[0];
  b.symbol = 0;
  expect_error("graph 0 (main), unbacked binding 0: binds a backed symbol");
  b.symbol = 2;
  b.node = 17;
  expect_error("graph 0 (main), unbacked binding 0: node 17 does not exist");
  b.node = 2;
  b.dim = 5;
  expect_error("graph 0 (main), unbacked binding 0: size path does not name a tensor dim");
  b.dim = 0;
  b.divisor = 0;
  expect_error("graph 0 (main), unbacked binding 0: divisor 0 < 1");
  b.divisor = 1;
  main_graph().bindings.push_back(std::make_unique<fb::UnbackedBindingT>(b));
  expect_error("graph 0 (main), unbacked binding 1: symbol u0 is bound twice");
}

TEST_F(SemanticRule, SubgraphCallsItself) {
  p().graphs[1]->nodes[0]->subgraphs = {1};
  expect_error("graph 1 (cond_true): calls itself recursively");
}

TEST_F(SemanticRule, SubgraphTwoCycle) {
  p().graphs[1]->nodes[0]->subgraphs = {2};
  p().graphs[2]->nodes[0]->subgraphs = {1};
  expect_error("calls itself recursively");
  const std::string m = error();
  EXPECT_TRUE(m.rfind("graph 1 (cond_true)", 0) == 0 || m.rfind("graph 2 (cond_false)", 0) == 0) << m;
}

TEST_F(SemanticRule, SubgraphPointsAtTheEntryGraph) {
  main_graph().nodes[3]->subgraphs = {1, 0};
  expect_error("graph 0 (main), node 3 (cond): subgraph 0 is not a callable graph");
  main_graph().nodes[3]->subgraphs = {1, 4};
  expect_error("graph 0 (main), node 3 (cond): subgraph 4 is not a callable graph");
}

TEST_F(SemanticRule, GraphAttributeOutOfRange) {
  auto a = std::make_unique<fb::AttrT>();
  a->kind = fb::AttrKind::Graph;
  a->i = 12;
  main_graph().nodes[3]->attrs.push_back(std::move(a));
  expect_error("graph 0 (main), node 3 (cond), attribute 0: graph 12 does not exist");
}

TEST_F(SemanticRule, DTypeAttributeUnknown) {
  main_graph().nodes[5]->attrs[2]->i = 10;
  expect_error("graph 0 (main), node 5 (full), attribute 2: unknown dtype 10");
  main_graph().nodes[5]->attrs[2]->i = -1;
  expect_error("graph 0 (main), node 5 (full), attribute 2: unknown dtype -1");
}

TEST_F(SemanticRule, ConstantOutsideItsSegment) {
  p().constants[1]->offset = 1 << 20;
  expect_error("constant 1: [1048576, +256) lies outside segment 0");
}

TEST_F(SemanticRule, ConstantInMissingSegment) {
  p().constants[1]->segment = 3;
  expect_error("constant 1: segment 3 does not exist");
}

TEST_F(SemanticRule, MisalignedConstant) {
  p().constants[1]->offset += 4;
  expect_error("constant 1: offset " + std::to_string(p().constants[1]->offset) + " is not 64-aligned");
}

TEST_F(SemanticRule, ConstantNbytesNotMatchingDTypeAndShape) {
  p().constants[1]->nbytes = 100;
  expect_error("constant 1: nbytes 100 != 256 implied by dtype and shape");
  p().constants[1]->nbytes = 256;
  p().constants[1]->dtype = fb::DType::f64;
  expect_error("constant 1: nbytes 256 != 512 implied by dtype and shape");
}

TEST_F(SemanticRule, ConstantShapeOverflowsOrIsNegative) {
  p().constants[1]->shape = {1 << 30, 1 << 30, 1 << 30};
  expect_error("constant 1: size overflows");
  p().constants[1]->shape = {-64};
  expect_error("constant 1: negative dim -64");
}

TEST_F(SemanticRule, ConstantUnknownDType) {
  p().constants[1]->dtype = static_cast<fb::DType>(42);
  expect_error("constant 1: unknown dtype 42");
}

TEST_F(SemanticRule, ConstantValueDisagreesWithConstant) {
  main_graph().values[5]->dtype = fb::DType::f16;
  expect_error("graph 0 (main), value 5: dtype differs from its constant's");
  main_graph().values[5]->dtype = fb::DType::f32;
  main_graph().values[5]->shape = {main_graph().values[4]->shape[1]};  // 32, not 64
  expect_error("graph 0 (main), value 5, dim 0: not the constant's size 64");
}

TEST_F(SemanticRule, SelfTestCountMismatch) {
  p().self_tests[0]->inputs.pop_back();
  expect_error("self-test 0: input/output count differs from the signature");
}

TEST_F(SemanticRule, SelfTestDataAndTolerance) {
  p().self_tests[0]->outputs[0]->nbytes += 4;
  expect_error("self-test 0, output 0: nbytes");
  p().self_tests[0]->outputs[0]->nbytes -= 4;
  p().self_tests[0]->outputs[1]->atol = -1;
  expect_error("self-test 0, output 1: tolerance must be >= 0");
  p().self_tests[0]->outputs[1]->atol = std::nan("");
  expect_error("self-test 0, output 1: tolerance must be >= 0");
}

TEST_F(SemanticRule, RankAboveEight) {
  main_graph().values[6]->shape.assign(9, main_graph().values[6]->shape[1]);
  expect_error("graph 0 (main), value 6: rank 9 exceeds 8");
  sample_ = make_format_sample();
  p().constants[1]->shape.assign(9, 1);
  expect_error("constant 1: rank exceeds 8");
  sample_ = make_format_sample();
  p().signature->inputs[0]->shape.assign(9, p().signature->inputs[0]->shape[1]);
  expect_error("signature input 0: rank 9 exceeds 8");
}

TEST_F(SemanticRule, ShapeDimIsBoolean) {
  main_graph().values[6]->shape[0] = main_graph().asserts[1]->expr;
  expect_error("graph 0 (main), value 6, dim 0: expression " + std::to_string(main_graph().asserts[1]->expr) + " must be an integer");
}

TEST_F(SemanticRule, DebugIndexOutOfRange) {
  main_graph().nodes[0]->debug = 99;
  expect_error("graph 0 (main), node 0 (linear): debug entry 99 does not exist");
  main_graph().nodes[0]->debug = 1;
  main_graph().asserts[0]->debug = 6;
  expect_error("graph 0 (main), runtime assert 0: debug entry does not exist");
  main_graph().asserts[0]->debug = 3;
  p().debug->entries[0] = fb::DebugEntry(100, 1, 1, 0, 0);
  expect_error("debug entry 0: string index out of range");
}

TEST_F(SemanticRule, SignatureGraphDTypeMismatch) {
  p().signature->inputs[0]->dtype = fb::DType::f16;
  expect_error("graph 0 (main), input 0: kind, dtype or rank differs from signature input 'x'");
  sample_ = make_format_sample();
  p().signature->outputs[0]->dtype = fb::DType::i32;
  expect_error("graph 0 (main), output 0: kind, dtype or rank differs from the signature");
}

TEST_F(SemanticRule, SignatureCountMismatch) {
  main_graph().outputs.pop_back();
  expect_error("graph 0 (main): inputs/outputs do not match the signature (4/5 vs 4/6)");
}

TEST_F(SemanticRule, SignatureDuplicateOrMissingName) {
  p().signature->inputs[1]->name = "x";
  expect_error("signature input 1: duplicate name 'x'");
  p().signature->inputs[1]->name = "";
  expect_error("signature input 1: missing name");
}

TEST_F(SemanticRule, SymbolRules) {
  p().symbols[0]->min = 10;
  p().symbols[0]->max = 5;
  expect_error("symbol 0 (s0): empty range [10, 5]");
  sample_ = make_format_sample();
  p().symbols[1]->name = "";
  expect_error("symbol 1: missing name");
}

TEST_F(SemanticRule, EntryGraphOutOfRange) {
  p().entry_graph = 4;
  expect_error("entry_graph 4 >= graph count 4");
  p().graphs.clear();
  expect_error("program has no graphs");
}

TEST_F(SemanticRule, MissingSignature) {
  p().signature.reset();
  expect_error("program has no signature");
}

TEST_F(SemanticRule, UnknownValueKind) {
  main_graph().values[13]->kind = static_cast<fb::ValueKind>(9);
  expect_error("graph 0 (main), value 13: unknown value kind");
}

// A SymInt value carries no shape, but a hostile one may: its entries must be checked
// like any other expression ids before the binding rules look at their symbols.
TEST_F(SemanticRule, ShapeOnASymbolicValueIsChecked) {
  main_graph().values[1]->shape = {123456};
  expect_error("graph 0 (main), value 1, dim 0: expression id 123456 out of range");
  main_graph().values[1]->kind = fb::ValueKind::None;
  expect_error("graph 0 (main), value 1, dim 0: expression id 123456 out of range");
}

// Known issue in runtime/src/expr.cpp (found by fuzz/bundle_fuzzer.cpp, not a loader
// bug): Mod computes a - floor(a/b)*b and CeilDiv computes -floor(-a/b), both of which
// overflow int64 (undefined behaviour; UBSan aborts) although every result below is
// representable. Enable this test together with the fix.
TEST_F(SemanticRule, ExtremeModAndCeilDivEvaluateWithoutOverflow) {
  using fb::ExprOp;
  const auto bin = [&](std::int64_t a, std::int64_t b, ExprOp op) {
    return add_expr({fb::ExprToken(ExprOp::Const, a), fb::ExprToken(ExprOp::Const, b), fb::ExprToken(op, 0)});
  };
  const struct {
    std::uint32_t id;
    std::int64_t want;
  } cases[] = {
      {bin(5, INT64_MIN, ExprOp::Mod), INT64_MIN + 5},        // Python: 5 % -2**63
      {bin(INT64_MAX, -2, ExprOp::Mod), -1},
      {bin(INT64_MIN, 3, ExprOp::Mod), 1},
      {bin(INT64_MIN, 2, ExprOp::CeilDiv), INT64_MIN / 2},
      {bin(INT64_MIN, 3, ExprOp::CeilDiv), INT64_MIN / 3},   // truncation is the ceiling here
  };
  auto bytes = sample_->bytes();
  ASSERT_TRUE(bytes.ok());
  auto bundle = load(*bytes);
  ASSERT_TRUE(bundle.ok()) << bundle.status().to_string();
  const std::int64_t symbols[] = {8, 3, 5};
  for (const auto& c : cases) {
    auto v = evaluate_expr((*bundle)->program(), c.id, symbols);
    ASSERT_TRUE(v.ok()) << expr_to_string((*bundle)->program(), c.id) << ": " << v.status().to_string();
    EXPECT_EQ(*v, c.want) << expr_to_string((*bundle)->program(), c.id);
  }
}

}  // namespace
}  // namespace kiln

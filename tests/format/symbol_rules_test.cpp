// Verifier rules about symbols (runtime/src/bundle/verify.cpp; docs/FORMAT.md, "Semantic
// rules"): every backed symbol an assert or a shape uses is bound by an input, and a
// symbol's debug index (where its range was narrowed) names an existing debug entry. Each
// test breaks one rule in the format sample's object tree, writes it with the real writer
// and checks the kInvalidBundle message names the place and the symbol.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/export/testing/format_sample.h"
#include "kiln/format/kiln_generated.h"
#include "kiln/runtime/bundle.h"

namespace kiln {
namespace {

class SymbolRule : public ::testing::Test {
 protected:
  void SetUp() override { sample_ = testing::make_format_sample(); }
  fb::ProgramT& p() { return sample_->program; }
  fb::GraphT& main_graph() { return *p().graphs[0]; }

  // The kInvalidBundle message of loading the mutated program, or "" when it loads.
  std::string error() {
    auto bytes = sample_->bytes();
    EXPECT_TRUE(bytes.ok()) << bytes.status().to_string();
    if (!bytes.ok()) return "<write failed>";
    auto b = Bundle::from_bytes(*bytes);
    if (b.ok()) return "";
    EXPECT_EQ(b.status().code(), StatusCode::kInvalidBundle) << b.status().to_string();
    return b.status().message();
  }
  void expect_error(const std::string& substring) {
    const std::string m = error();
    EXPECT_NE(m.find(substring), std::string::npos) << "got: '" << m << "'\nwanted: '" << substring << "'";
  }
  // A backed symbol that no input mentions (as an export that lost a symbol would write).
  std::uint32_t add_unbound_symbol() {
    auto s = std::make_unique<fb::SymbolT>();
    s->name = "s2";
    s->kind = fb::SymbolKind::Backed;
    s->min = 2;
    s->has_hint = true;
    s->hint = 4;
    p().symbols.push_back(std::move(s));
    return static_cast<std::uint32_t>(p().symbols.size() - 1);
  }
  std::uint32_t add_expr(std::vector<fb::ExprToken> tokens) {
    const auto id = static_cast<std::uint32_t>(p().exprs.size());
    p().exprs.emplace_back(static_cast<std::uint32_t>(p().expr_tokens.size()), static_cast<std::uint32_t>(tokens.size()));
    p().expr_tokens.insert(p().expr_tokens.end(), tokens.begin(), tokens.end());
    return id;
  }

  std::unique_ptr<testing::FormatSample> sample_;
};

TEST_F(SymbolRule, TheUnmodifiedSampleLoads) { EXPECT_EQ(error(), ""); }

TEST_F(SymbolRule, AssertUsesASymbolNoInputBinds) {
  // The bundle of issue 19: y's size was unified with x's (s0), the assert s0 == s1 kept s1.
  const std::uint32_t s2 = add_unbound_symbol();
  main_graph().asserts[1]->expr = add_expr({fb::ExprToken(fb::ExprOp::Sym, 0), fb::ExprToken(fb::ExprOp::Sym, s2),
                                            fb::ExprToken(fb::ExprOp::Eq, 0)});
  expect_error("graph 0 (main), runtime assert 1: uses symbol s2, which no input binds");
}

TEST_F(SymbolRule, ShapeUsesASymbolNoInputBinds) {
  const std::uint32_t s2 = add_unbound_symbol();
  main_graph().values[6]->shape[0] = add_expr({fb::ExprToken(fb::ExprOp::Sym, s2)});
  expect_error("graph 0 (main), node 0 (linear), output 0: uses symbol s2, which no input binds");
}

TEST_F(SymbolRule, SymbolOnlyInASignatureOutputIsNotBound) {
  const std::uint32_t s2 = add_unbound_symbol();
  p().signature->outputs[2]->expr = add_expr({fb::ExprToken(fb::ExprOp::Sym, s2)});
  main_graph().values[9]->expr = p().signature->outputs[2]->expr;
  expect_error("graph 0 (main), output 2: uses symbol s2, which no input binds");
}

TEST_F(SymbolRule, UnusedUnboundSymbolIsAllowed) {
  add_unbound_symbol();  // a symbol replaced at export stays in the table, unused
  EXPECT_EQ(error(), "");
}

TEST_F(SymbolRule, SymbolDebugIndexOutOfRange) {
  p().symbols[0]->debug = 99;
  expect_error("symbol 0 (s0): debug entry 99 does not exist");
  p().symbols[0]->debug = 5;  // the last entry
  EXPECT_EQ(error(), "");
}

}  // namespace
}  // namespace kiln

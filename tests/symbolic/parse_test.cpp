// Parsing sympy srepr strings (torch.export .pt2 archives) and the printed form.
#include "kiln/export/symbolic/parse.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "kiln/export/symbolic/print.h"

namespace kiln::sym {
namespace {

// s77 -> 0, s27 -> 1, s39 -> 2, u0 -> 3, u1 -> 4.
std::optional<int> resolve(std::string_view name) {
  static const std::map<std::string, int, std::less<>> kIds = {{"s77", 0}, {"s27", 1}, {"s39", 2}, {"u0", 3}, {"u1", 4}};
  auto it = kIds.find(name);
  return it == kIds.end() ? std::nullopt : std::optional<int>(it->second);
}

const Expr s77 = Expr::symbol(0), s27 = Expr::symbol(1), s39 = Expr::symbol(2), u0 = Expr::symbol(3);

Expr srepr(std::string_view text) {
  auto r = parse_srepr(text, resolve);
  EXPECT_TRUE(r.ok()) << text << ": " << r.status().message();
  return r.ok() ? *r : Expr();
}

void expect_srepr_error(std::string_view text, StatusCode code, const std::string& needle) {
  auto r = parse_srepr(text, resolve);
  ASSERT_FALSE(r.ok()) << text << " accepted as " << *r;
  EXPECT_EQ(r.status().code(), code) << r.status().message();
  EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
  EXPECT_EQ(r.status().message().rfind("[parse_srepr] offset ", 0), 0u) << r.status().message();
}

TEST(ParseSrepr, StringsFromTorchExportFixtures) {
  EXPECT_EQ(srepr("Symbol('s77', positive=True, integer=True)"), s77);
  EXPECT_EQ(srepr("Symbol('u0', integer=True)"), u0);
  EXPECT_EQ(srepr("Mul(Integer(16), Symbol('s27', positive=True, integer=True))"), 16 * s27);
  EXPECT_EQ(srepr("Mul(Integer(1024), Pow(Symbol('s39', positive=True, integer=True), Integer(2)))"),
            1024 * s39 * s39);
  EXPECT_EQ(srepr("Pow(Symbol('s27', positive=True, integer=True), Integer(2))"), s27 * s27);
  EXPECT_EQ(srepr("GreaterThan(Symbol('u0', integer=True), Integer(2))"), ge(u0, 2));
  EXPECT_EQ(srepr("LessThan(Symbol('u0', integer=True), Integer(16))"), le(u0, 16));
  EXPECT_EQ(srepr("StrictGreaterThan(Symbol('s77', positive=True, integer=True), Integer(4))"), gt(s77, 4));
}

TEST(ParseSrepr, AllSupportedConstructs) {
  EXPECT_EQ(srepr("Integer(-3)"), Expr(-3));
  EXPECT_EQ(srepr("Integer(-9223372036854775808)"), Expr(INT64_MIN));
  EXPECT_EQ(srepr("Add(Symbol('s77'), Integer(3))"), s77 + 3);
  EXPECT_EQ(srepr("Add(Symbol('s77'), Mul(Integer(-1), Symbol('s27')), Integer(1))"), s77 - s27 + 1);
  EXPECT_EQ(srepr("FloorDiv(Symbol('s77'), Integer(2))"), floordiv(s77, 2));
  EXPECT_EQ(srepr("CleanDiv(Symbol('s77'), Integer(2))"), floordiv(s77, 2));
  EXPECT_EQ(srepr("Mod(Symbol('s77'), Integer(4))"), mod(s77, 4));
  EXPECT_EQ(srepr("PythonMod(Symbol('s77'), Integer(4))"), mod(s77, 4));
  EXPECT_EQ(srepr("ModularIndexing(Symbol('s77'), Integer(2), Integer(8))"), mod(floordiv(s77, 2), 8));
  EXPECT_EQ(srepr("CeilToInt(IntTrueDiv(Symbol('s77'), Integer(4)))"), ceildiv(s77, 4));
  EXPECT_EQ(srepr("FloorToInt(IntTrueDiv(Symbol('s77'), Integer(4)))"), floordiv(s77, 4));
  EXPECT_EQ(srepr("Max(Integer(1), Symbol('s77'))"), max(1, s77));
  EXPECT_EQ(srepr("Min(Symbol('s77'), Symbol('s27'), Integer(5))"), min({s77, s27, Expr(5)}));
  EXPECT_EQ(srepr("Pow(Symbol('s77'), Integer(0))"), Expr(1));
  EXPECT_EQ(srepr("Eq(Symbol('s77'), Integer(4))"), eq(s77, 4));
  EXPECT_EQ(srepr("Equality(Symbol('s77'), Integer(4))"), eq(s77, 4));
  EXPECT_EQ(srepr("Ne(Symbol('s77'), Integer(4))"), ne(s77, 4));
  EXPECT_EQ(srepr("Unequality(Symbol('s77'), Integer(4))"), ne(s77, 4));
  EXPECT_EQ(srepr("StrictLessThan(Symbol('s77'), Symbol('s27'))"), lt(s77, s27));
  EXPECT_EQ(srepr("And(GreaterThan(Symbol('u0'), Integer(0)), LessThan(Symbol('u0'), Integer(9)))"),
            sym_and(ge(u0, 0), le(u0, 9)));
  EXPECT_EQ(srepr("Or(Eq(Symbol('u0'), Integer(1)), Eq(Symbol('u0'), Integer(3)))"), sym_or(eq(u0, 1), eq(u0, 3)));
  EXPECT_EQ(srepr("Not(Eq(Symbol('u0'), Integer(1)))"), ne(u0, 1));
  EXPECT_EQ(srepr("true"), Expr::boolean(true));
  EXPECT_EQ(srepr("false"), Expr::boolean(false));
  EXPECT_EQ(srepr("BooleanTrue()"), Expr::boolean(true));
  EXPECT_EQ(srepr("  Symbol( \"s77\" ,integer=True )  "), s77);
}

TEST(ParseSrepr, RejectsUnsupportedConstructsClearly) {
  expect_srepr_error("Rational(1, 2)", StatusCode::kUnsupported, "'Rational'");
  expect_srepr_error("Float('1.5', precision=53)", StatusCode::kUnsupported, "'Float'");
  expect_srepr_error("IntTrueDiv(Symbol('s77'), Integer(2))", StatusCode::kUnsupported, "'IntTrueDiv'");
  expect_srepr_error("CeilToInt(Symbol('s77'))", StatusCode::kUnsupported, "only supported around IntTrueDiv");
  expect_srepr_error("Pow(Symbol('s77'), Integer(-1))", StatusCode::kUnsupported, "exponent -1");
  expect_srepr_error("Pow(Symbol('s77'), Symbol('s27'))", StatusCode::kUnsupported, "non-constant exponent");
  expect_srepr_error("Max(Symbol('s77'), int_oo)", StatusCode::kUnsupported, "infinity 'int_oo'");
  expect_srepr_error("Sqrt(Symbol('s77'))", StatusCode::kUnsupported, "unknown sympy function 'Sqrt'");
}

TEST(ParseSrepr, RejectsMalformedText) {
  expect_srepr_error("Symbol('s99', integer=True)", StatusCode::kInvalidInput, "unknown symbol 's99'");
  expect_srepr_error("Integer(99999999999999999999)", StatusCode::kInvalidInput, "out of int64 range");
  expect_srepr_error("Integer(9223372036854775808)", StatusCode::kInvalidInput, "out of int64 range");
  expect_srepr_error("Add(Symbol('s77'), Integer(3)", StatusCode::kInvalidInput, "expected ')'");
  expect_srepr_error("Add(Symbol('s77') Integer(3))", StatusCode::kInvalidInput, "expected ')'");
  expect_srepr_error("Symbol('s77", StatusCode::kInvalidInput, "unterminated string");
  expect_srepr_error("Integer(3) Integer(4)", StatusCode::kInvalidInput, "trailing input");
  expect_srepr_error("", StatusCode::kInvalidInput, "end of input");
  expect_srepr_error("Mod(Symbol('s77'))", StatusCode::kInvalidInput, "[Mod] takes 2 operands");
  expect_srepr_error("And(Symbol('s77'), Symbol('s27'))", StatusCode::kInvalidInput, "[And] operand 0 is an integer");
  expect_srepr_error("Add(Eq(Symbol('s77'), Integer(1)), Integer(1))", StatusCode::kInvalidInput, "[Add]");
  expect_srepr_error("Integer(3) $", StatusCode::kInvalidInput, "unexpected character '$'");
  std::string deep;
  for (int i = 0; i < 400; ++i) deep += "Max(Integer(1), ";
  expect_srepr_error(deep, StatusCode::kInvalidInput, "deeper than 256");
}

Expr plain(std::string_view text) {
  auto r = parse_expr(text, resolve);
  EXPECT_TRUE(r.ok()) << text << ": " << r.status().message();
  return r.ok() ? *r : Expr();
}

TEST(ParseExpr, PrintedFormsAndPyTorchMessages) {
  EXPECT_EQ(plain("s77 + 3"), s77 + 3);
  EXPECT_EQ(plain("32*s39"), 32 * s39);
  EXPECT_EQ(plain("(s77//2)"), floordiv(s77, 2));
  EXPECT_EQ(plain("((s77 + 1)//2)"), floordiv(s77 + 1, 2));
  EXPECT_EQ(plain("s77 % 16 == 0"), eq(mod(s77, 16), 0));
  EXPECT_EQ(plain("Mod(s77, 4)"), mod(s77, 4));
  EXPECT_EQ(plain("Max(1, s77)"), max(1, s77));
  EXPECT_EQ(plain("u0 >= 2"), ge(u0, 2));
  EXPECT_EQ(plain("s77 > 4"), gt(s77, 4));
  EXPECT_EQ(plain("Eq(s77, 4)"), eq(s77, 4));
  EXPECT_EQ(plain("Ne(s77, 4)"), ne(s77, 4));
  EXPECT_EQ(plain("s39**2"), s39 * s39);
  EXPECT_EQ(plain("-s77 + 4"), 4 - s77);
  EXPECT_EQ(plain("2 - -s77"), s77 + 2);
  EXPECT_EQ(plain("u0 == 1 or u0 == 3"), sym_or(eq(u0, 1), eq(u0, 3)));
  EXPECT_EQ(plain("Eq(u0, 1) | Eq(u0, 3)"), sym_or(eq(u0, 1), eq(u0, 3)));
  EXPECT_EQ(plain("(u0 >= 0) & (u0 <= 10)"), sym_and(ge(u0, 0), le(u0, 10)));
  EXPECT_EQ(plain("not (s77 > 2)"), le(s77, 2));
  EXPECT_EQ(plain("~(s77 > 2)"), le(s77, 2));
  EXPECT_EQ(plain("2 <= s77 <= 10"), sym_and(ge(s77, 2), le(s77, 10)));  // chained
  EXPECT_EQ(plain("CeilDiv(s77, 4)"), ceildiv(s77, 4));
  EXPECT_EQ(plain("True"), Expr::boolean(true));
  EXPECT_EQ(plain("s77 - s27 <= -1"), lt(s77, s27));
  EXPECT_EQ(plain("7 // 2 + 7 % -3 + -7 // 2"), Expr(3 - 2 - 4));  // Python semantics
}

TEST(ParseExpr, RejectsBadText) {
  auto bad = [](std::string_view text, const std::string& needle) {
    auto r = parse_expr(text, resolve);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
  };
  bad("s77 +", "unexpected end of input");
  bad("s99 + 1", "unknown symbol 's99'");
  bad("Foo(s77)", "unknown function 'Foo'");
  bad("s77 ** s27", "non-constant exponent");
  bad("(s77 + 1", "expected ')'");
  bad("s77 and u0", "[And] operand 0 is an integer");
  bad("s77 1", "unexpected '1'");
  bad("99999999999999999999", "out of int64 range");
  bad(std::string(400, '(') + "1" + std::string(400, ')'), "deeper than 256");
}

}  // namespace
}  // namespace kiln::sym

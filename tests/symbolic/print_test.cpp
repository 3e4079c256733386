// Golden printed forms (runtime-assert messages and golden graph dumps depend on them).
#include "kiln/export/symbolic/print.h"

#include <gtest/gtest.h>

#include <sstream>

#include "kiln/export/symbolic/shape_env.h"

namespace kiln::sym {
namespace {

class PrintTest : public ::testing::Test {
 protected:
  void SetUp() override {
    s0 = Expr::symbol(env.create_backed_symbol("", {2, 1024}, 8).value());
    u0 = Expr::symbol(env.create_unbacked_symbol(true));
    s1 = Expr::symbol(env.create_backed_symbol("", {1, 64}, 4).value());
  }
  std::string p(Expr e) const { return to_string(e, &env); }
  ShapeEnv env;
  Expr s0, u0, s1;
};

TEST_F(PrintTest, Arithmetic) {
  EXPECT_EQ(p(s0 + 3), "s0 + 3");
  EXPECT_EQ(p(s0 - 3), "s0 - 3");
  EXPECT_EQ(p(2 * s0), "2*s0");
  EXPECT_EQ(p(2 * s0 - 1), "2*s0 - 1");
  EXPECT_EQ(p(4 - s0), "-s0 + 4");
  EXPECT_EQ(p(-2 * s0), "-2*s0");
  EXPECT_EQ(p(s0 + s1), "s0 + s1");
  EXPECT_EQ(p(s0 - 2 * s1), "s0 - 2*s1");
  EXPECT_EQ(p(s0 * s1), "s0*s1");
  EXPECT_EQ(p(3 * s0 * s1), "3*s0*s1");
  EXPECT_EQ(p(s0 * s0), "s0**2");
  EXPECT_EQ(p(4 * s0 * s0 * s1), "4*s0**2*s1");
  EXPECT_EQ(p(s0 * (s1 + 1)), "s0*(s1 + 1)");
  EXPECT_EQ(p(s0 + u0 + s1), "s0 + u0 + s1");  // symbols by id
  EXPECT_EQ(p(Expr(-5)), "-5");
}

TEST_F(PrintTest, DivisionModuloMinMax) {
  EXPECT_EQ(p(floordiv(s0, 2)), "(s0//2)");
  EXPECT_EQ(p(floordiv(s0 + 1, 2)), "((s0 + 1)//2)");
  EXPECT_EQ(p(floordiv(s0, 2) + 1), "(s0//2) + 1");
  EXPECT_EQ(p(2 * floordiv(s0, 3)), "2*(s0//3)");
  EXPECT_EQ(p(mod(s0, 4)), "s0 % 4");
  EXPECT_EQ(p(mod(s0 + 1, 4)), "(s0 + 1) % 4");
  EXPECT_EQ(p(2 * mod(s0, 2)), "2*(s0 % 2)");
  EXPECT_EQ(p(mod(s0, 4) + 1), "s0 % 4 + 1");
  EXPECT_EQ(p(-mod(s0, 4)), "-(s0 % 4)");
  EXPECT_EQ(p(floordiv(mod(s0, 8), s1)), "((s0 % 8)//s1)");
  EXPECT_EQ(p(ceildiv(s0, 4)), "CeilDiv(s0, 4)");
  EXPECT_EQ(p(max(1, s0)), "Max(1, s0)");
  EXPECT_EQ(p(min({s0, s1, u0 + 1})), "Min(s0, s1, u0 + 1)");
}

TEST_F(PrintTest, Comparisons) {
  EXPECT_EQ(p(ge(u0, 2)), "u0 >= 2");
  EXPECT_EQ(p(le(u0, 16)), "u0 <= 16");
  EXPECT_EQ(p(gt(s0, 4)), "s0 >= 5");  // integers: strict comparisons become non-strict
  EXPECT_EQ(p(eq(s0, 4)), "s0 == 4");
  EXPECT_EQ(p(ne(s0, 1)), "s0 != 1");
  EXPECT_EQ(p(eq(mod(s0, 16), 0)), "s0 % 16 == 0");
  EXPECT_EQ(p(eq(s0, s1)), "s0 == s1");
  EXPECT_EQ(p(ge(s0, s1)), "s0 >= s1");
  EXPECT_EQ(p(lt(s0, s1)), "s0 - s1 <= -1");
  EXPECT_EQ(p(eq(s0, 32 * s1)), "s0 == 32*s1");
  EXPECT_EQ(p(le(s0 + s1, 10)), "s0 + s1 <= 10");
}

TEST_F(PrintTest, Logic) {
  EXPECT_EQ(p(Expr::boolean(true)), "True");
  EXPECT_EQ(p(Expr::boolean(false)), "False");
  EXPECT_EQ(p(sym_or(eq(u0, 1), eq(u0, 3), eq(u0, 5))), "u0 == 1 or u0 == 3 or u0 == 5");
  EXPECT_EQ(p(sym_and(ge(s0, 2), sym_or(eq(u0, 1), eq(u0, 3)))), "s0 >= 2 and (u0 == 1 or u0 == 3)");
  EXPECT_EQ(p(sym_or(sym_and(ge(s0, 3), eq(u0, 1)), eq(s1, 3))), "s1 == 3 or (u0 == 1 and s0 >= 3)");
}

TEST_F(PrintTest, UnknownSymbolsAndCustomNames) {
  EXPECT_EQ(to_string(Expr::symbol(7) + 1, &env), "sym7 + 1");
  EXPECT_EQ(to_string(s0 + 1), "sym0 + 1");
  EXPECT_EQ(to_string(s0 * 2, [](int id) { return "batch" + std::to_string(id); }), "2*batch0");
  std::ostringstream os;
  os << ge(s0, 2);
  EXPECT_EQ(os.str(), "sym0 >= 2");
}

}  // namespace
}  // namespace kiln::sym

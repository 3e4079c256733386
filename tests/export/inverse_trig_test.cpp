// The inverse trigonometric and hyperbolic ops of the tracing API (atan, asin, acos, tan,
// sinh, cosh, asinh, acosh, atanh): eager values and the exported program against libm.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "common/exported.h"
#include "kiln/export/ops.h"

namespace kiln {
namespace {

struct MathOp {
  const char* name;
  Tensor (*traced)(const Tensor&, SourceLoc);
  double (*ref)(double);
  float lo, hi;
};

TEST(InverseTrig, EagerAndExportedMatchLibm) {
  const MathOp ops[] = {
      {"atan", &kiln::atan, [](double v) { return std::atan(v); }, -30, 30},
      {"asin", &kiln::asin, [](double v) { return std::asin(v); }, -1, 1},
      {"acos", &kiln::acos, [](double v) { return std::acos(v); }, -1, 1},
      {"tan", &kiln::tan, [](double v) { return std::tan(v); }, -1.5f, 1.5f},
      {"sinh", &kiln::sinh, [](double v) { return std::sinh(v); }, -9, 9},
      {"cosh", &kiln::cosh, [](double v) { return std::cosh(v); }, -9, 9},
      {"asinh", &kiln::asinh, [](double v) { return std::asinh(v); }, -100, 100},
      {"acosh", &kiln::acosh, [](double v) { return std::acosh(v); }, 1, 100},
      {"atanh", &kiln::atanh, [](double v) { return std::atanh(v); }, -0.999f, 0.999f},
  };
  for (const MathOp& op : ops) {
    std::vector<float> xs;
    for (int i = 0; i <= 40; ++i) xs.push_back(op.lo + (op.hi - op.lo) * static_cast<float>(i) / 40.0f);
    const Tensor x = Tensor::from_floats({static_cast<std::int64_t>(xs.size())}, xs);
    auto model = [&](Tensor t) { return op.traced(t, SourceLoc::current()); };
    const auto eager = model(x).to_vector<float>();
    auto ep = export_program(model, {input("x", x)});
    ASSERT_TRUE(ep.ok()) << op.name << ": " << ep.status().message();
    auto program = testing::load_exported(*ep);
    ASSERT_NE(program, nullptr) << op.name;
    Session session(*program);
    auto r = session.run(std::vector<HostValue>{HostValue::of(testing::host_tensor(x))});
    ASSERT_TRUE(r.ok()) << op.name << ": " << r.status().message();
    std::vector<float> got(xs.size());
    std::memcpy(got.data(), r->outputs[0].tensor.data.data(), got.size() * sizeof(float));
    for (std::size_t i = 0; i < xs.size(); ++i) {
      const double want = op.ref(static_cast<double>(xs[i]));
      EXPECT_NEAR(got[i], want, 1e-6 + 2e-6 * std::abs(want)) << op.name << "(" << xs[i] << ")";
      EXPECT_EQ(eager[i], got[i]) << op.name << "(" << xs[i] << ")";
    }
  }
}

}  // namespace
}  // namespace kiln

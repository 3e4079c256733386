// Activations the core ATen IR spells out in elementwise ops (silu as x * sigmoid(x),
// hardswish and hardsigmoid through add/clamp/div), taken at load into the conv2d or
// linear that produces x (executor/program.cpp: ActivationPatterns), in every spelling the
// importer meets; and left alone when x has another reader.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/exported.h"
#include "kiln/export/ops.h"
#include "kiln/runtime/program.h"

namespace kiln {
namespace {

struct Case {
  std::string name;
  std::function<Tensor(const Tensor&)> act;
  std::string fused;  // the profile label of the conv, "" when nothing may be fused
};

std::map<std::string, int> run_and_count(const std::function<Tensor(Tensor)>& model, const Tensor& x, const std::string& what) {
  std::map<std::string, int> ops;
  auto ep = export_program(model, {input("x", x)});
  EXPECT_TRUE(ep.ok()) << ep.status().message();
  if (!ep.ok()) return ops;
  const std::vector<float> want = model(x).to_vector<float>();
  for (bool blocked : {true, false}) {
    const auto program = testing::load_exported(*ep, {.blocked_layout = blocked});
    EXPECT_NE(program, nullptr);
    if (program == nullptr) return ops;
    Session s(*program, {.threads = 2, .profile = true});
    auto r = s.run(std::vector<HostValue>{HostValue::of(testing::host_tensor(x))});
    EXPECT_TRUE(r.ok()) << r.status().message();
    if (!r.ok()) return ops;
    std::vector<float> got(want.size());
    EXPECT_EQ(r->outputs[0].tensor.data.size(), want.size() * sizeof(float)) << what;
    std::memcpy(got.data(), r->outputs[0].tensor.data.data(), std::min(got.size() * sizeof(float), r->outputs[0].tensor.data.size()));
    for (std::size_t i = 0; i < want.size(); ++i) {
      EXPECT_NEAR(got[i], want[i], 2e-5f * (1.0f + std::fabs(want[i]))) << what << " blocked=" << blocked << " element " << i;
      if (std::fabs(got[i] - want[i]) > 2e-5f * (1.0f + std::fabs(want[i]))) break;
    }
    ops.clear();
    for (const RunStats::Op& op : s.last_stats().ops) ++ops[op.op];
  }
  return ops;
}

TEST(ActivationPatterns, DecomposedActivationsRunInTheConvOrLinearBeforeThem) {
  auto relu6 = [](const Tensor& t) { return clamp(t, 0.0, 6.0); };
  auto relu6_two = [](const Tensor& t) { return clamp(clamp(t, 0.0, std::nullopt), std::nullopt, 6.0); };
  const std::vector<Case> cases = {
      {"silu", [](const Tensor& t) { return t * sigmoid(t); }, "+silu"},
      {"silu, operands swapped", [](const Tensor& t) { return sigmoid(t) * t; }, "+silu"},
      {"hardswish (x * relu6(x + 3)) / 6", [&](const Tensor& t) { return t * relu6_two(t + 3.0) / 6.0; }, "+hardswish"},
      {"hardswish x * (relu6(x + 3) / 6)", [&](const Tensor& t) { return t * (relu6(t + 3.0) / 6.0); }, "+hardswish"},
      {"hardswish with mul by 1/6", [&](const Tensor& t) { return t * relu6(3.0 + t) * (1.0 / 6.0); }, "+hardswish"},
      {"hardsigmoid", [&](const Tensor& t) { return relu6_two(t + 3.0) / 6.0; }, "+hardsigmoid"},
      {"not hardsigmoid: / 5", [&](const Tensor& t) { return relu6(t + 3.0) / 5.0; }, ""},
      {"not hardswish: clamp to 8", [&](const Tensor& t) { return t * clamp(t + 3.0, 0.0, 8.0) / 6.0; }, ""},
  };
  const Tensor w = Tensor::randn({16, 8, 3, 3}, 1) * 0.3, b = Tensor::randn({16}, 2);
  const Tensor w2 = Tensor::randn({8, 16, 1, 1}, 5) * 0.2;
  const Tensor lw = Tensor::randn({12, 16}, 3) * 0.3;
  const Tensor x = Tensor::randn({2, 8, 9, 10}, 4) * 2.0;
  for (const Case& c : cases) {
    // conv2d, then the activation, then a conv reading it (so the result is not a graph
    // output and the region can stay blocked).
    auto conv_model = [&](Tensor t) { return conv2d(c.act(conv2d(t, w, b, {1, 1}, {1, 1})), w2); };
    const auto ops = run_and_count(conv_model, x, c.name);
    if (c.fused.empty()) {
      EXPECT_EQ(ops.count("conv2d+hardswish") + ops.count("conv2d+hardsigmoid") + ops.count("conv2d+silu"), 0u) << c.name;
    } else {
      EXPECT_EQ(ops.count("conv2d" + c.fused), 1u) << c.name;
      EXPECT_EQ(ops.count("mul") + ops.count("div") + ops.count("sigmoid") + ops.count("clamp") + ops.count("add"), 0u) << c.name;
    }
    // linear, then the activation (a graph output: the fusion does not need a blocked region).
    auto linear_model = [&](Tensor t) { return c.act(linear(slice(flatten(t, 1), 1, 0, 16), lw)); };
    const auto lops = run_and_count(linear_model, x, c.name + " after linear");
    if (!c.fused.empty()) {
      EXPECT_EQ(lops.count("linear" + c.fused), 1u) << c.name;
    }
  }
}

TEST(ActivationPatterns, AnotherReaderOfThePreActivationValueKeepsThePatternApart) {
  const Tensor w = Tensor::randn({8, 8, 1, 1}, 6) * 0.3;
  const Tensor x = Tensor::randn({1, 8, 5, 5}, 7);
  auto model = [&](Tensor t) {
    Tensor y = conv2d(t, w);
    return std::vector<Tensor>{y * sigmoid(y) + y};  // y is read by the silu pattern and the add
  };
  auto ep = export_program(model, {input("x", x)});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  const auto program = testing::load_exported(*ep);
  ASSERT_NE(program, nullptr);
  Session s(*program, {.profile = true});
  auto r = s.run(std::vector<HostValue>{HostValue::of(testing::host_tensor(x))});
  ASSERT_TRUE(r.ok()) << r.status().message();
  std::map<std::string, int> ops;
  for (const RunStats::Op& op : s.last_stats().ops) ++ops[op.op];
  EXPECT_EQ(ops["conv2d"], 1);
  EXPECT_EQ(ops["sigmoid"], 1);
  EXPECT_EQ(ops["mul"], 1);
  const std::vector<float> want = model(x)[0].to_vector<float>();
  std::vector<float> got(want.size());
  std::memcpy(got.data(), r->outputs[0].tensor.data.data(), got.size() * sizeof(float));
  for (std::size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-5f * (1.0f + std::fabs(want[i])));
}

}  // namespace
}  // namespace kiln

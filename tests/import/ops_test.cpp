// aten ops the fixtures do not use, in one-node archives written by the test (the schema of
// torch/_export/serde/schema.py), imported and run against hand-computed results.
#include <gtest/gtest.h>
#include <zip.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>

#include "kiln/export/import_pt2.h"
#include "one_node_testutil.h"
#include "kiln/export/serialize.h"
#include "kiln/runtime/bundle.h"
#include "kiln/runtime/program.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

json meta(std::vector<std::int64_t> sizes, int dtype = 7) {
  json s = json::array();
  for (auto v : sizes) s.push_back({{"as_int", v}});
  return {{"dtype", dtype}, {"sizes", s}, {"requires_grad", false}, {"strides", json::array()}, {"layout", 7}};
}

json tensor_arg(const std::string& name) { return {{"as_tensor", {{"name", name}}}}; }

struct OneOp {
  std::string target;
  std::vector<std::pair<std::string, json>> args;  // schema name -> Argument
  std::vector<std::pair<std::string, std::vector<std::int64_t>>> inputs;
  std::vector<std::int64_t> out_shape;
  int out_dtype = 7;
  // Symbolic archives: metadata overrides (tensor name -> tensor meta), extra nodes before
  // the op, sym_int_values and range_constraints.
  std::map<std::string, json> metas;
  std::vector<json> pre_nodes;
  json sym_ints = json::object();
  json ranges = json::object();
};

// Writes a .pt2 whose graph is `inputs -> target -> y`, returns its path.
std::string write_archive(const OneOp& op, const std::string& path) {
  testing::OneNodeArchive a{op.target, op.args, {}, {{"y", meta(op.out_shape, op.out_dtype)}}};
  for (const auto& [name, shape] : op.inputs) a.inputs.emplace_back(name, meta(shape));
  a.metas = op.metas, a.pre_nodes = op.pre_nodes, a.sym_ints = op.sym_ints, a.ranges = op.ranges;
  return testing::write_one_node_archive(a, path);
}

HostValue f32(std::vector<std::int64_t> shape, std::vector<float> v) {
  HostTensor t{DType::kF32, std::move(shape), {}};
  t.data.resize(v.size() * 4);
  std::memcpy(t.data.data(), v.data(), t.data.size());
  return HostValue::of(std::move(t));
}

// Imports, runs on `inputs` and returns output 0 as floats (empty on failure).
std::vector<float> run(const OneOp& op, const std::vector<HostValue>& inputs, Status* run_status = nullptr,
                       std::vector<std::int64_t> want_shape = {}) {
  const fs::path p = fs::temp_directory_path() / ("kiln_op_" + std::to_string(::getpid()) + ".pt2");
  auto ep = import_pt2(write_archive(op, p.string()));
  fs::remove(p);
  const auto program = testing::load_imported(ep);
  if (program == nullptr) return {};
  Session s(*program);
  auto r = s.run(inputs);
  if (run_status) {
    *run_status = r.ok() ? Status::Ok() : r.status();
    if (!r.ok()) return {};
  }
  EXPECT_TRUE(r.ok()) << r.status().message();
  if (!r.ok()) return {};
  const HostTensor& t = r->outputs[0].tensor;
  EXPECT_EQ(t.shape, want_shape.empty() ? op.out_shape : want_shape);
  std::vector<float> out(t.data.size() / 4);
  std::memcpy(out.data(), t.data.data(), t.data.size());
  return out;
}

void expect_near(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (std::isinf(want[i])) EXPECT_EQ(got[i], want[i]) << i;
    else EXPECT_NEAR(got[i], want[i], 1e-5 + 1e-5 * std::abs(want[i])) << i;
  }
}

float sig(float v) { return 1.0f / (1.0f + std::exp(-v)); }

TEST(ImportOps, Roll) {
  OneOp op{"aten.roll.default", {{"self", tensor_arg("x")}, {"shifts", {{"as_ints", {1}}}}, {"dims", {{"as_ints", {1}}}}},
           {{"x", {2, 3}}}, {2, 3}};
  expect_near(run(op, {f32({2, 3}, {0, 1, 2, 3, 4, 5})}), {2, 0, 1, 5, 3, 4});
  op.args[1].second = {{"as_ints", {-1}}};
  op.args[2].second = {{"as_ints", json::array()}};  // flattened
  expect_near(run(op, {f32({2, 3}, {0, 1, 2, 3, 4, 5})}), {1, 2, 3, 4, 5, 0});
}

TEST(ImportOps, GluRmsNormPreluNorms) {
  expect_near(run({"aten.glu.default", {{"self", tensor_arg("x")}, {"dim", {{"as_int", -1}}}}, {{"x", {1, 4}}}, {1, 2}},
                  {f32({1, 4}, {1, 2, 3, 4})}),
              {1 * sig(3), 2 * sig(4)});
  const float rms = std::sqrt(12.5f);
  expect_near(run({"aten.rms_norm.default", {{"input", tensor_arg("x")}, {"normalized_shape", {{"as_ints", {2}}}}, {"eps", {{"as_float", 0.0}}}},
                   {{"x", {1, 2}}}, {1, 2}},
                  {f32({1, 2}, {3, 4})}),
              {3 / rms, 4 / rms});
  expect_near(run({"aten.prelu.default", {{"self", tensor_arg("x")}, {"weight", tensor_arg("w")}}, {{"x", {1, 2, 2}}, {"w", {2}}}, {1, 2, 2}},
                  {f32({1, 2, 2}, {-2, 3, -4, 5}), f32({2}, {0.25f, 0.5f})}),
              {-0.5f, 3, -2, 5});
  for (auto [ord, want] : {std::pair{2.0, 5.0f}, {1.0, 7.0f}, {3.0, std::cbrt(91.0f)}}) {
    expect_near(run({"aten.linalg_vector_norm.default", {{"self", tensor_arg("x")}, {"ord", {{"as_float", ord}}}}, {{"x", {2}}}, {}},
                    {f32({2}, {3, -4})}),
                {want});
  }
  expect_near(run({"aten.linalg_vector_norm.default", {{"self", tensor_arg("x")}, {"ord", {{"as_float", "Infinity"}}}, {"dim", {{"as_ints", {1}}}}},
                   {{"x", {2, 2}}}, {2}},
                  {f32({2, 2}, {3, -4, 1, 0.5f})}),
              {4, 1});
}

TEST(ImportOps, EinsumPixelShuffleFloatArangeLogsumexp) {
  expect_near(run({"aten.einsum.default", {{"equation", {{"as_string", "bij,bjk->bki"}}}, {"tensors", {{"as_tensors", {{{"name", "a"}}, {{"name", "b"}}}}}}},
                   {{"a", {1, 2, 2}}, {"b", {1, 2, 2}}}, {1, 2, 2}},
                  {f32({1, 2, 2}, {1, 2, 3, 4}), f32({1, 2, 2}, {5, 6, 7, 8})}),
              {19, 43, 22, 50});  // (a@b)^T per batch
  expect_near(run({"aten.einsum.default", {{"equation", {{"as_string", "ij->j"}}}, {"tensors", {{"as_tensors", {{{"name", "a"}}}}}}},
                   {{"a", {2, 2}}}, {2}},
                  {f32({2, 2}, {1, 2, 3, 4})}),
              {4, 6});
  expect_near(run({"aten.pixel_shuffle.default", {{"self", tensor_arg("x")}, {"upscale_factor", {{"as_int", 2}}}}, {{"x", {1, 4, 1, 1}}}, {1, 1, 2, 2}},
                  {f32({1, 4, 1, 1}, {0, 1, 2, 3})}),
              {0, 1, 2, 3});
  OneOp ar{"aten.arange.start_step", {{"start", {{"as_float", 0.5}}}, {"end", {{"as_float", 2.0}}}, {"step", {{"as_float", 0.5}}}}, {{"x", {1}}}, {3}};
  expect_near(run(ar, {f32({1}, {0})}), {0.5f, 1.0f, 1.5f});
  expect_near(run({"aten.logsumexp.default", {{"self", tensor_arg("x")}, {"dim", {{"as_ints", {1}}}}, {"keepdim", {{"as_bool", false}}}},
                   {{"x", {2, 2}}}, {2}},
                  {f32({2, 2}, {1, 2, -INFINITY, -INFINITY})}),
              {std::log(std::exp(1.0f) + std::exp(2.0f)), -INFINITY});
}

TEST(ImportOps, ConvTranspose2dMatchesTheDefinition) {
  // x [1,1,2,2], w [1,1,2,2], stride 2: every input pixel stamps w * x into a 2x2 block.
  OneOp op{"aten.conv_transpose2d.input",
           {{"input", tensor_arg("x")}, {"weight", tensor_arg("w")}, {"stride", {{"as_ints", {2, 2}}}}},
           {{"x", {1, 1, 2, 2}}, {"w", {1, 1, 2, 2}}},
           {1, 1, 4, 4}};
  const auto got = run(op, {f32({1, 1, 2, 2}, {1, 2, 3, 4}), f32({1, 1, 2, 2}, {1, 10, 100, 1000})});
  std::vector<float> want(16);
  const float x[2][2] = {{1, 2}, {3, 4}}, w[2][2] = {{1, 10}, {100, 1000}};
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j)
      for (int a = 0; a < 2; ++a)
        for (int b = 0; b < 2; ++b) want[static_cast<std::size_t>((2 * i + a) * 4 + 2 * j + b)] += x[i][j] * w[a][b];
  expect_near(got, want);
  // stride 1, padding 1 on a 3x3 kernel keeps the size: the transposed conv is a full correlation.
  OneOp same{"aten.conv_transpose2d.input",
             {{"input", tensor_arg("x")}, {"weight", tensor_arg("w")}, {"padding", {{"as_ints", {1, 1}}}}},
             {{"x", {1, 1, 2, 2}}, {"w", {1, 1, 3, 3}}},
             {1, 1, 2, 2}};
  std::vector<float> w3(9);
  for (int i = 0; i < 9; ++i) w3[static_cast<std::size_t>(i)] = static_cast<float>(i + 1);
  const auto g2 = run(same, {f32({1, 1, 2, 2}, {1, 2, 3, 4}), f32({1, 1, 3, 3}, w3)});
  // out[p][q] = sum_{i,j} x[i][j] * w[p - i + 1][q - j + 1]
  std::vector<float> want2(4);
  for (int p = 0; p < 2; ++p)
    for (int q = 0; q < 2; ++q)
      for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 2; ++j) want2[static_cast<std::size_t>(p * 2 + q)] += x[i][j] * w3[static_cast<std::size_t>((p - i + 1) * 3 + (q - j + 1))];
  expect_near(g2, want2);
}

TEST(ImportOps, BilinearUpsamplingMatchesPyTorch) {
  // F.interpolate([[1, 2], [3, 4]], scale_factor=2, mode="bilinear", align_corners=False)
  OneOp op{"aten.upsample_bilinear2d.vec",
           {{"input", tensor_arg("x")}, {"output_size", {{"as_ints", {4, 4}}}}, {"align_corners", {{"as_bool", false}}}},
           {{"x", {1, 1, 2, 2}}},
           {1, 1, 4, 4}};
  expect_near(run(op, {f32({1, 1, 2, 2}, {1, 2, 3, 4})}),
              {1.0f, 1.25f, 1.75f, 2.0f, 1.5f, 1.75f, 2.25f, 2.5f, 2.5f, 2.75f, 3.25f, 3.5f, 3.0f, 3.25f, 3.75f, 4.0f});
  op.args[1].second = {{"as_ints", {3, 3}}};
  op.args[2].second = {{"as_bool", true}};
  op.out_shape = {1, 1, 3, 3};
  expect_near(run(op, {f32({1, 1, 2, 2}, {1, 2, 3, 4})}), {1, 1.5f, 2, 2, 2.5f, 3, 3, 3.5f, 4});
}

TEST(ImportOps, OneDimensionalPooling) {
  expect_near(run({"aten.avg_pool1d.default", {{"self", tensor_arg("x")}, {"kernel_size", {{"as_ints", {2}}}}}, {{"x", {1, 1, 4}}}, {1, 1, 2}},
                  {f32({1, 1, 4}, {1, 2, 3, 4})}),
              {1.5f, 3.5f});
  expect_near(run({"aten.max_pool1d.default", {{"self", tensor_arg("x")}, {"kernel_size", {{"as_ints", {2}}}}, {"stride", {{"as_ints", {1}}}}},
                   {{"x", {1, 4}}}, {1, 3}},
                  {f32({1, 4}, {1, 5, 3, 4})}),
              {5, 5, 4});
  expect_near(run({"aten.adaptive_avg_pool1d.default", {{"self", tensor_arg("x")}, {"output_size", {{"as_ints", {1}}}}}, {{"x", {1, 2, 3}}}, {1, 2, 1}},
                  {f32({1, 2, 3}, {1, 2, 3, 4, 5, 6})}),
              {2, 5});
}

// sympy srepr sizes, range_constraints with int_oo (null), a SymInt from sym_int_values.
TEST(ImportOps, SymbolicSizesFromSreprAndRanges) {
  const json s5 = {{"as_expr", {{"expr_str", "Symbol('s5', positive=True, integer=True)"}, {"hint", {{"as_int", 3}}}}}};
  OneOp cat{"aten.cat.default", {{"tensors", {{"as_tensors", {{{"name", "x"}}, {{"name", "x"}}}}}}, {"dim", {{"as_int", 0}}}},
            {{"x", {3, 2}}}, {6, 2}};
  cat.metas["x"] = meta({0, 2});
  cat.metas["x"]["sizes"][0] = s5;
  cat.metas["y"] = meta({0, 2});
  cat.metas["y"]["sizes"][0] = {{"as_expr", {{"expr_str", "Mul(Integer(2), Symbol('s5', positive=True, integer=True))"}}}};
  cat.ranges["s5"] = {{"min_val", 2}, {"max_val", nullptr}};
  std::vector<float> x5(10);
  for (int i = 0; i < 10; ++i) x5[static_cast<std::size_t>(i)] = static_cast<float>(i);
  const auto y = run(cat, {f32({5, 2}, x5)}, nullptr, {10, 2});
  ASSERT_EQ(y.size(), 20u);
  EXPECT_EQ(y[10], 0);
  EXPECT_EQ(y[19], 9);
  Status st;
  run(cat, {f32({1, 2}, {0, 1})}, &st);  // below min 2
  EXPECT_EQ(st.code(), StatusCode::kInvalidInput);
  EXPECT_NE(st.message().find("input x.size(0) = 1"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("[2, inf]"), std::string::npos) << st.message();

  // x[: s5 // 2] through a SymInt node whose value is FloorDiv(s5, 2).
  OneOp sl{"aten.slice.Tensor",
           {{"self", tensor_arg("x")}, {"dim", {{"as_int", 0}}}, {"start", {{"as_int", 0}}}, {"end", {{"as_sym_int", {{"as_name", "half"}}}}}},
           {{"x", {4, 2}}}, {2, 2}};
  sl.metas["x"] = cat.metas["x"];
  sl.metas["y"] = meta({0, 2});
  sl.metas["y"]["sizes"][0] = {{"as_expr", {{"expr_str", "FloorDiv(Symbol('s5', positive=True, integer=True), Integer(2))"}}}};
  sl.ranges = cat.ranges;
  sl.pre_nodes.push_back({{"target", "torch.ops.aten.sym_size.int"},
                          {"inputs", {{{"name", "self"}, {"arg", tensor_arg("x")}, {"kind", 1}}, {{"name", "dim"}, {"arg", {{"as_int", 0}}}, {"kind", 1}}}},
                          {"outputs", {{{"as_sym_int", {{"as_name", "n"}}}}}}});
  sl.pre_nodes.push_back({{"target", "_operator.floordiv"},
                          {"inputs", {{{"name", ""}, {"arg", {{"as_sym_int", {{"as_name", "n"}}}}}, {"kind", 1}}, {{"name", ""}, {"arg", {{"as_int", 2}}}, {"kind", 1}}}},
                          {"outputs", {{{"as_sym_int", {{"as_name", "half"}}}}}}});
  sl.sym_ints["n"] = s5;
  sl.sym_ints["half"] = {{"as_expr", {{"expr_str", "FloorDiv(Symbol('s5', positive=True, integer=True), Integer(2))"}}}};
  std::vector<float> x7(14);
  for (int i = 0; i < 14; ++i) x7[static_cast<std::size_t>(i)] = static_cast<float>(i);
  const auto h = run(sl, {f32({7, 2}, x7)}, nullptr, {3, 2});
  expect_near(h, {0, 1, 2, 3, 4, 5});
}

TEST(ImportOps, ScatterIntoSlicesRepeatInterleaveOuter) {
  // y = x.clone(); y[:, 1:3] = src
  expect_near(run({"aten.slice_scatter.default",
                   {{"self", tensor_arg("x")}, {"src", tensor_arg("s")}, {"dim", {{"as_int", 1}}}, {"start", {{"as_int", 1}}}, {"end", {{"as_int", 3}}}},
                   {{"x", {2, 4}}, {"s", {2, 2}}}, {2, 4}},
                  {f32({2, 4}, {0, 1, 2, 3, 4, 5, 6, 7}), f32({2, 2}, {-1, -2, -3, -4})}),
              {0, -1, -2, 3, 4, -3, -4, 7});
  // y[-1] = src (select_scatter on dim 0 with a negative index)
  expect_near(run({"aten.select_scatter.default",
                   {{"self", tensor_arg("x")}, {"src", tensor_arg("s")}, {"dim", {{"as_int", 0}}}, {"index", {{"as_int", -1}}}},
                   {{"x", {2, 2}}, {"s", {2}}}, {2, 2}},
                  {f32({2, 2}, {1, 2, 3, 4}), f32({2}, {9, 8})}),
              {1, 2, 9, 8});
  expect_near(run({"aten.repeat_interleave.self_int", {{"self", tensor_arg("x")}, {"repeats", {{"as_int", 2}}}, {"dim", {{"as_int", 1}}}},
                   {{"x", {2, 2}}}, {2, 4}},
                  {f32({2, 2}, {1, 2, 3, 4})}),
              {1, 1, 2, 2, 3, 3, 4, 4});
  expect_near(run({"aten.outer.default", {{"self", tensor_arg("a")}, {"vec2", tensor_arg("b")}}, {{"a", {2}}, {"b", {3}}}, {2, 3}},
                  {f32({2}, {1, 2}), f32({3}, {1, 10, 100})}),
              {1, 10, 100, 2, 20, 200});
}

TEST(ImportOps, BooleanMasksOverLeadingDimsAndMaskedAssignment) {
  // x[mask] with mask over dim 0 of a [3, 2] tensor -> [u, 2]
  OneOp op{"aten.index.Tensor", {{"self", tensor_arg("x")}, {"indices", {{"as_optional_tensors", {{{"as_tensor", {{"name", "m"}}}}}}}}},
           {{"x", {3, 2}}, {"m", {3}}}, {2, 2}};
  op.metas["m"] = meta({3}, 12);
  op.metas["y"] = meta({0, 2});
  op.metas["y"]["sizes"][0] = {{"as_expr", {{"expr_str", "Symbol('u0', integer=True)"}}}};
  op.ranges["u0"] = {{"min_val", 0}, {"max_val", 3}};
  HostTensor mask{DType::kBool, {3}, {1, 0, 1}};
  expect_near(run(op, {f32({3, 2}, {1, 2, 3, 4, 5, 6}), HostValue::of(mask)}, nullptr, {2, 2}), {1, 2, 5, 6});
  // x[x > 2] = 0 in the core IR: index_put with a full mask and a 0-d value
  OneOp put{"aten.index_put.default",
            {{"self", tensor_arg("x")}, {"indices", {{"as_optional_tensors", {{{"as_tensor", {{"name", "m"}}}}}}}}, {"values", tensor_arg("v")}},
            {{"x", {4}}, {"m", {4}}, {"v", {}}}, {4}};
  put.metas["m"] = meta({4}, 12);
  HostTensor m4{DType::kBool, {4}, {0, 1, 0, 1}};
  expect_near(run(put, {f32({4}, {1, 2, 3, 4}), HostValue::of(m4), f32({}, {-7})}), {1, -7, 3, -7});
}

// The math composites at the values random inputs never hit: signed zeros, infinities,
// NaN, the two forms of lerp, negative decimals.
TEST(ImportOps, MathCompositesAtSignedZerosAndInfinities) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  OneOp atan2{"aten.atan2.default", {{"self", tensor_arg("y")}, {"other", tensor_arg("x")}}, {{"y", {8}}, {"x", {8}}}, {8}};
  const std::vector<float> ys{0.0f, 0.0f, -0.0f, -0.0f, 1.0f, -1.0f, 1.0f, -1.0f}, xs{0.0f, -0.0f, 0.0f, -0.0f, -0.0f, -0.0f, -2.0f, -2.0f};
  std::vector<float> want;
  for (std::size_t i = 0; i < ys.size(); ++i) want.push_back(std::atan2(ys[i], xs[i]));
  expect_near(run(atan2, {f32({8}, ys), f32({8}, xs)}), want);
  OneOp copysign{"aten.copysign.Tensor", {{"self", tensor_arg("a")}, {"other", tensor_arg("b")}}, {{"a", {4}}, {"b", {4}}}, {4}};
  expect_near(run(copysign, {f32({4}, {1, 2, -3, 4}), f32({4}, {-0.0f, 0.0f, 5, -inf})}), {-1, 2, 3, -4});
  OneOp nan_to_num{"aten.nan_to_num.default", {{"self", tensor_arg("x")}, {"nan", {{"as_float", 7.0}}}, {"neginf", {{"as_float", -9.0}}}},
                   {{"x", {4}}}, {4}};
  expect_near(run(nan_to_num, {f32({4}, {nan, inf, -inf, 1.5f})}), {7, std::numeric_limits<float>::max(), -9, 1.5f});
  OneOp logaddexp{"aten.logaddexp.default", {{"self", tensor_arg("a")}, {"other", tensor_arg("b")}}, {{"a", {4}}, {"b", {4}}}, {4}};
  expect_near(run(logaddexp, {f32({4}, {inf, -inf, 0, 100}), f32({4}, {inf, -inf, 0, -100})}),
              {inf, -inf, static_cast<float>(std::log(2.0)), 100});
  OneOp lerp{"aten.lerp.Tensor", {{"self", tensor_arg("a")}, {"end", tensor_arg("b")}, {"weight", tensor_arg("w")}},
             {{"a", {4}}, {"b", {4}}, {"w", {4}}}, {4}};
  expect_near(run(lerp, {f32({4}, {1, 1, 1, 1}), f32({4}, {3, 3, 3, 3}), f32({4}, {0, 0.25f, 0.5f, 1})}), {1, 1.5f, 2, 3});
  OneOp round{"aten.round.decimals", {{"self", tensor_arg("x")}, {"decimals", {{"as_int", -1}}}}, {{"x", {3}}}, {3}};
  expect_near(run(round, {f32({3}, {14, 15, 26})}), {10, 20, 30});  // half to even: 1.5 -> 2
  OneOp atanh{"aten.atanh.default", {{"self", tensor_arg("x")}}, {{"x", {3}}}, {3}};
  expect_near(run(atanh, {f32({3}, {-0.5f, 0, 0.9f})}), {std::atanh(-0.5f), 0, std::atanh(0.9f)});
}

// Window arguments of the decomposed convolutions and pools from a hostile archive: a zero
// stride, a negative padding, a huge kernel are rejected at import (exit 2) naming the op
// and the argument, before any arithmetic divides by them or loops over them.
TEST(ImportOps, HostileWindowArgumentsAreRejected) {
  struct Hostile {
    OneOp op;
    std::string message;
  };
  auto ints_arg = [](std::vector<std::int64_t> v) { return json{{"as_ints", v}}; };
  const std::vector<Hostile> cases = {
      {{"aten.im2col.default",
        {{"self", tensor_arg("x")}, {"kernel_size", ints_arg({2, 2})}, {"dilation", ints_arg({1, 1})}, {"padding", ints_arg({0, 0})},
         {"stride", ints_arg({0, 1})}},
        {{"x", {1, 1, 4, 4}}}, {1, 4, 9}},
       "im2col stride 0 is outside [1, 1048576)"},
      {{"aten.col2im.default",
        {{"self", tensor_arg("x")}, {"output_size", ints_arg({4, 4})}, {"kernel_size", ints_arg({2, 2})}, {"dilation", ints_arg({1, 1})},
         {"padding", ints_arg({-3, 0})}, {"stride", ints_arg({1, 1})}},
        {{"x", {1, 4, 9}}}, {1, 1, 4, 4}},
       "col2im padding -3 is outside [0, 1048576)"},
      {{"aten.col2im.default",
        {{"self", tensor_arg("x")}, {"output_size", ints_arg({4, 4})}, {"kernel_size", ints_arg({1000, 1000})}, {"dilation", ints_arg({1, 1})},
         {"padding", ints_arg({0, 0})}, {"stride", ints_arg({1, 1})}},
        {{"x", {1, 4, 9}}}, {1, 1, 4, 4}},
       "col2im with more than 65536 kernel taps"},
      {{"aten.max_pool3d.default", {{"self", tensor_arg("x")}, {"kernel_size", ints_arg({0, 2, 2})}}, {{"x", {1, 1, 4, 4, 4}}}, {1, 1, 2, 2, 2}},
       "max_pool3d kernel size 0 is outside [1, 1048576)"},
      {{"aten.avg_pool3d.default",
        {{"self", tensor_arg("x")}, {"kernel_size", ints_arg({2, 2, 2})}, {"stride", ints_arg({2, 0, 2})}}, {{"x", {1, 1, 4, 4, 4}}}, {1, 1, 2, 2, 2}},
       "avg_pool3d stride 0 is outside [1, 1048576)"},
      {{"aten.avg_pool2d.default",
        {{"self", tensor_arg("x")}, {"kernel_size", ints_arg({2, 2})}, {"stride", ints_arg({0, 0})}, {"padding", ints_arg({0, 0})},
         {"ceil_mode", {{"as_bool", false}}}, {"count_include_pad", {{"as_bool", true}}}, {"divisor_override", {{"as_int", 3}}}},
        {{"x", {1, 1, 4, 4}}}, {1, 1, 2, 2}},
       "avg_pool2d stride 0 is outside [1, 1048576)"},
      {{"aten.conv3d.default",
        {{"input", tensor_arg("x")}, {"weight", tensor_arg("w")}, {"bias", {{"as_none", true}}}, {"stride", ints_arg({1, 0, 1})}},
        {{"x", {1, 2, 3, 4, 4}}, {"w", {2, 2, 1, 1, 1}}}, {1, 2, 3, 4, 4}},
       "conv3d stride 0 is outside [1, 1048576)"},
      {{"aten.affine_grid_generator.default",
        {{"theta", tensor_arg("t")}, {"size", ints_arg({1, 1, 0, 3})}, {"align_corners", {{"as_bool", false}}}}, {{"t", {1, 2, 3}}}, {1, 0, 3, 2}},
       "affine_grid size 0 is outside [1, 65536]"},
      {{"aten.upsample_nearest1d.vec",
        {{"input", tensor_arg("x")}, {"output_size", ints_arg({1 << 26})}, {"scale_factors", {{"as_none", true}}}},
        {{"x", {1, 1, 4}}}, {1, 1, 1 << 26}},
       "nearest upsampling from 4 to 67108864 elements"},
      // Found by ImportMutation: each once crashed the importer.
      {{"aten.conv1d.default",
        {{"input", tensor_arg("x")}, {"weight", tensor_arg("w")}, {"bias", {{"as_none", true}}}, {"stride", ints_arg({})}},
        {{"x", {1, 2, 8}}, {"w", {3, 2, 3}}}, {1, 3, 6}},
       "convolution stride has 0 values for a 1-D convolution"},
      {{"aten.upsample_bicubic2d.vec",
        {{"input", tensor_arg("x")}, {"output_size", ints_arg({4, -2})}, {"align_corners", {{"as_bool", false}}},
         {"scale_factors", {{"as_none", true}}}},
        {{"x", {1, 1, 4, 4}}}, {1, 1, 4, -2}},
       "bicubic upsampling from 4 to -2 along an axis: sizes must be >= 1 with at most 2^24 interpolation weights"},
      {{"aten.relu.default", {{"self", tensor_arg("x")}}, {{"x", {2, 3}}}, {2, 3, 5}},  // output rank != input rank
       ""},
  };
  for (const Hostile& h : cases) {
    const fs::path p = fs::temp_directory_path() / ("kiln_op_hostile_" + std::to_string(::getpid()) + ".pt2");
    auto ep = import_pt2(write_archive(h.op, p.string()));
    fs::remove(p);
    if (h.message.empty()) {  // any clean error will do: the point is no crash
      if (!ep.ok()) {
        EXPECT_NE(ep.status().code(), StatusCode::kInternal) << ep.status().message();
      }
      continue;
    }
    ASSERT_FALSE(ep.ok()) << h.op.target;
    EXPECT_EQ(ep.status().code(), h.message.find("more than") != std::string::npos ? StatusCode::kUnsupported : StatusCode::kInvalidBundle)
        << h.op.target << ": " << ep.status().message();
    EXPECT_NE(ep.status().message().find(h.message), std::string::npos) << ep.status().message();
  }
}

// The variants of this session's composites that Kiln refuses: exit 6 (kUnsupported) or
// exit 2 (kInvalidBundle), naming the op, the reason and the user's line.
TEST(ImportOps, RefusedCompositeVariantsNameTheReason) {
  struct Refused {
    OneOp op;
    StatusCode code;
    std::string message;
  };
  auto ints_arg = [](std::vector<std::int64_t> v) { return json{{"as_ints", v}}; };
  OneOp one_hot{"aten.one_hot.default", {{"self", tensor_arg("i")}}, {{"i", {3}}}, {3, 4}, 5};
  one_hot.metas["i"] = meta({3}, 5);
  OneOp pool_int{"aten.max_pool2d_with_indices.default", {{"self", tensor_arg("x")}, {"kernel_size", ints_arg({2, 2})}}, {{"x", {1, 1, 4, 4}}},
                 {1, 1, 2, 2}};
  pool_int.metas["x"] = meta({1, 1, 4, 4}, 5);
  const std::vector<Refused> cases = {
      {one_hot, StatusCode::kUnsupported, "[aten.one_hot.default] one_hot without num_classes (its size would depend on the data) (test.py:7)"},
      {{"aten.rrelu.default", {{"self", tensor_arg("x")}, {"training", {{"as_bool", true}}}}, {{"x", {4}}}, {4}},
       StatusCode::kUnsupported, "rrelu in training mode (random slopes; export the model in eval mode)"},
      {{"aten.linalg_matrix_norm.str_ord", {{"self", tensor_arg("x")}, {"ord", {{"as_string", "nuc"}}}}, {{"x", {3, 3}}}, {}},
       StatusCode::kUnsupported, "linalg_matrix_norm with ord 'nuc' (needs singular values)"},
      {{"aten.linalg_matrix_norm.default", {{"self", tensor_arg("x")}, {"ord", {{"as_float", 2.0}}}}, {{"x", {3, 3}}}, {}},
       StatusCode::kUnsupported, "linalg_matrix_norm with ord 2.000000 (needs singular values)"},
      {{"aten.diag_embed.default", {{"self", tensor_arg("x")}}, {{"x", {5000}}}, {5000, 5000}},
       StatusCode::kUnsupported, "diag_embed of more than 4096 elements or offsets"},
      {{"aten.celu.default", {{"self", tensor_arg("x")}, {"alpha", {{"as_float", 0.0}}}}, {{"x", {4}}}, {4}},
       StatusCode::kInvalidBundle, "celu with alpha 0"},
      {{"aten.linalg_cross.default", {{"self", tensor_arg("a")}, {"other", tensor_arg("b")}}, {{"a", {2, 4}}, {"b", {2, 4}}}, {2, 4}},
       StatusCode::kInvalidBundle, "linalg_cross needs size 3 in its dim"},
      {pool_int, StatusCode::kUnsupported, "the indices output of max pooling of integers"},
  };
  for (const Refused& r : cases) {
    const OneOp& op = r.op;
    const fs::path p = fs::temp_directory_path() / ("kiln_op_refused_" + std::to_string(::getpid()) + ".pt2");
    testing::OneNodeArchive a{op.target, op.args, {}, {{"y", meta(op.out_shape, op.out_dtype)}}};
    for (const auto& [name, shape] : op.inputs) a.inputs.emplace_back(name, op.metas.count(name) ? op.metas.at(name) : meta(shape));
    if (op.target == "aten.max_pool2d_with_indices.default") {  // (values, indices): the indices returned
      a.outputs = {{"v", meta({1, 1, 2, 2}, 5)}, {"y", meta({1, 1, 2, 2}, 5)}};
      a.not_returned = {"v"};
    }
    auto ep = import_pt2(testing::write_one_node_archive(a, p.string()));
    fs::remove(p);
    ASSERT_FALSE(ep.ok()) << op.target;
    EXPECT_EQ(ep.status().code(), r.code) << op.target << ": " << ep.status().message();
    EXPECT_NE(ep.status().message().find(r.message), std::string::npos) << ep.status().message();
  }
}

TEST(ImportOps, ArgumentsKiln_CannotExpressNameTheOpAndLine) {
  OneOp op{"aten.pad.default", {{"self", tensor_arg("x")}, {"pad", {{"as_ints", {-1, 1}}}}, {"mode", {{"as_string", "reflect"}}}},
           {{"x", {1, 3}}}, {1, 3}};
  const fs::path p = fs::temp_directory_path() / ("kiln_op_bad_" + std::to_string(::getpid()) + ".pt2");
  auto ep = import_pt2(write_archive(op, p.string()));
  fs::remove(p);
  ASSERT_FALSE(ep.ok());
  EXPECT_EQ(ep.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(ep.status().message().find("[aten.pad.default] negative pads with mode 'reflect'"), std::string::npos) << ep.status().message();
  EXPECT_NE(ep.status().message().find("test.py:7"), std::string::npos) << ep.status().message();
}

}  // namespace
}  // namespace kiln

// The aten ops added for torchvision's classification models, a Hugging Face style GPT-2
// decoder and docs/IMPORT.md's former "missing" list (bitwise ops on integers, reflect /
// replicate / circular padding, bicubic upsampling, integer index_put, diff, fill,
// as_strided), each in a one-node archive written by the test, imported and run against
// the values PyTorch 2.6 printed (or hand-computed ones).
#include <gtest/gtest.h>
#include <zip.h>

#include <cmath>
#include <cstring>
#include <filesystem>
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

// torch/_export/serde/schema.py ScalarType codes.
constexpr int kTorchU8 = 1, kTorchI8 = 2, kTorchI32 = 4, kTorchI64 = 5, kTorchF32 = 7, kTorchBool = 12;

json meta(const std::vector<std::int64_t>& sizes, int dtype) {
  json s = json::array();
  for (auto v : sizes) s.push_back({{"as_int", v}});
  return {{"dtype", dtype}, {"sizes", s}, {"requires_grad", false}, {"strides", json::array()}, {"layout", 7}};
}

json tensor_arg(const std::string& name) { return {{"as_tensor", {{"name", name}}}}; }
json ints(std::vector<std::int64_t> v) { return {{"as_ints", v}}; }
json int_arg(std::int64_t v) { return {{"as_int", v}}; }

struct Input {
  std::string name;
  std::vector<std::int64_t> shape;
  int dtype = kTorchF32;
};

struct OneOp {
  std::string target;
  std::vector<std::pair<std::string, json>> args;
  std::vector<Input> inputs;
  std::vector<std::int64_t> out_shape;
  int out_dtype = kTorchF32;
};

std::string write_archive(const OneOp& op, const std::string& path) {
  testing::OneNodeArchive a{op.target, op.args, {}, {{"y", meta(op.out_shape, op.out_dtype)}}};
  for (const Input& in : op.inputs) a.inputs.emplace_back(in.name, meta(in.shape, in.dtype));
  a.stack_trace = "File \"zoo.py\", line 12, in forward";
  return testing::write_one_node_archive(a, path);
}

fs::path temp_archive() { return fs::temp_directory_path() / ("kiln_cov_" + std::to_string(::getpid()) + ".pt2"); }

template <typename T>
HostValue host(DType dt, std::vector<std::int64_t> shape, const std::vector<T>& v) {
  HostTensor t{dt, std::move(shape), {}};
  t.data.resize(v.size() * sizeof(T));
  std::memcpy(t.data.data(), v.data(), t.data.size());
  return HostValue::of(std::move(t));
}
HostValue f32(std::vector<std::int64_t> shape, const std::vector<float>& v) { return host(DType::kF32, std::move(shape), v); }
HostValue i64(std::vector<std::int64_t> shape, const std::vector<std::int64_t>& v) { return host(DType::kI64, std::move(shape), v); }

// Imports, checks the program's op names contain `kiln_op` (when given), runs and returns
// output 0 (its dtype and shape checked against the archive's).
HostTensor run(const OneOp& op, const std::vector<HostValue>& inputs, const std::string& kiln_op = "") {
  const fs::path p = temp_archive();
  auto ep = import_pt2(write_archive(op, p.string()));
  fs::remove(p);
  EXPECT_TRUE(ep.ok()) << ep.status().message();
  if (!ep.ok()) return {};
  if (!kiln_op.empty()) {
    bool found = false;
    for (const auto& n : ep->program().graphs[0].nodes) found = found || op_name(n.op) == kiln_op;
    EXPECT_TRUE(found) << op.target << " did not import as " << kiln_op;
  }
  auto bytes = serialize_bundle(ep->program());
  EXPECT_TRUE(bytes.ok()) << bytes.status().message();
  auto program = Program::load(std::move(Bundle::from_bytes(*bytes)).value());
  EXPECT_TRUE(program.ok()) << program.status().message();
  if (!program.ok()) return {};
  Session s(**program);
  auto r = s.run(inputs);
  EXPECT_TRUE(r.ok()) << r.status().message();
  if (!r.ok()) return {};
  EXPECT_EQ(r->outputs[0].tensor.shape, op.out_shape);
  return r->outputs[0].tensor;
}

template <typename T>
std::vector<T> values(const HostTensor& t) {
  std::vector<T> v(t.data.size() / sizeof(T));
  std::memcpy(v.data(), t.data.data(), v.size() * sizeof(T));
  return v;
}

void expect_near(const HostTensor& t, const std::vector<float>& want, float tol = 1e-4f) {
  ASSERT_EQ(t.dtype, DType::kF32);
  const auto got = values<float>(t);
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], tol * (1 + std::abs(want[i]))) << i;
}

Status import_status(const OneOp& op) {
  const fs::path p = temp_archive();
  auto ep = import_pt2(write_archive(op, p.string()));
  fs::remove(p);
  return ep.ok() ? Status::Ok() : ep.status();
}

TEST(ImportOpCoverage, IntegerBitwiseOpsAndShifts) {
  const std::vector<std::int64_t> a{-50, 7, 12, -1}, b{3, -9, 10, 5};
  auto binary = [&](const std::string& target, const std::string& kiln_op) {
    return values<std::int64_t>(run({target, {{"self", tensor_arg("a")}, {"other", tensor_arg("b")}},
                                     {{"a", {4}, kTorchI64}, {"b", {4}, kTorchI64}}, {4}, kTorchI64},
                                    {i64({4}, a), i64({4}, b)}, kiln_op));
  };
  EXPECT_EQ(binary("aten.bitwise_and.Tensor", "bitwise_and"), (std::vector<std::int64_t>{-50 & 3, 7 & -9, 12 & 10, -1 & 5}));
  EXPECT_EQ(binary("aten.__or__.Tensor", "bitwise_or"), (std::vector<std::int64_t>{-50 | 3, 7 | -9, 12 | 10, -1 | 5}));
  EXPECT_EQ(binary("aten.__xor__.Tensor", "bitwise_xor"), (std::vector<std::int64_t>{-50 ^ 3, 7 ^ -9, 12 ^ 10, -1 ^ 5}));
  // a << 2 and a >> 1 with a Scalar operand (training IR __lshift__.Scalar, core IR the same).
  auto shift = [&](const std::string& target, std::int64_t by, const std::string& kiln_op) {
    return values<std::int64_t>(run({target, {{"self", tensor_arg("a")}, {"other", int_arg(by)}}, {{"a", {4}, kTorchI64}}, {4}, kTorchI64},
                                    {i64({4}, a)}, kiln_op));
  };
  EXPECT_EQ(shift("aten.__lshift__.Scalar", 2, "bitwise_left_shift"), (std::vector<std::int64_t>{-200, 28, 48, -4}));
  EXPECT_EQ(shift("aten.__rshift__.Scalar", 1, "bitwise_right_shift"), (std::vector<std::int64_t>{-25, 3, 6, -1}));
  EXPECT_EQ(values<std::int64_t>(run({"aten.bitwise_not.default", {{"self", tensor_arg("a")}}, {{"a", {4}, kTorchI64}}, {4}, kTorchI64},
                                     {i64({4}, a)}, "bitwise_not")),
            (std::vector<std::int64_t>{49, -8, -13, 0}));
  // u8: PyTorch's uint8 shifts (200 << 1 wraps to 144).
  const auto u = run({"aten.bitwise_left_shift.Tensor", {{"self", tensor_arg("a")}, {"other", tensor_arg("b")}},
                      {{"a", {2}, kTorchU8}, {"b", {2}, kTorchU8}}, {2}, kTorchU8},
                     {host<std::uint8_t>(DType::kU8, {2}, {200, 3}), host<std::uint8_t>(DType::kU8, {2}, {1, 8})});
  EXPECT_EQ(values<std::uint8_t>(u), (std::vector<std::uint8_t>{144, 0}));
  // Bitwise ops on floats are refused naming the op and the line.
  Status s = import_status({"aten.bitwise_and.Tensor", {{"self", tensor_arg("a")}, {"other", tensor_arg("b")}},
                            {{"a", {2}}, {"b", {2}}}, {2}});
  EXPECT_EQ(s.code(), StatusCode::kUnsupported);
  EXPECT_NE(s.message().find("[aten.bitwise_and.Tensor] bitwise ops on floating-point tensors"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("zoo.py:12"), std::string::npos) << s.message();
}

TEST(ImportOpCoverage, ReflectReplicateCircularPadding) {
  const std::vector<float> x{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  // F.pad(arange(12).reshape(1, 3, 4), (2, 1, 1, 2), mode=...) printed by PyTorch 2.6.
  OneOp op{"aten.pad.default",
           {{"self", tensor_arg("x")}, {"pad", ints({2, 1, 1, 2})}, {"mode", {{"as_string", "reflect"}}}},
           {{"x", {1, 3, 4}}}, {1, 6, 7}};
  expect_near(run(op, {f32({1, 3, 4}, x)}, "pad_border"),
              {6, 5, 4, 5, 6, 7, 6, 2, 1, 0, 1, 2, 3, 2, 6, 5, 4, 5, 6, 7, 6, 10, 9, 8, 9, 10, 11, 10, 6, 5, 4, 5, 6, 7, 6, 2, 1, 0, 1, 2, 3, 2});
  OneOp core{"aten.replication_pad2d.default", {{"self", tensor_arg("x")}, {"padding", ints({2, 1, 1, 2})}}, {{"x", {1, 3, 4}}}, {1, 6, 7}};
  expect_near(run(core, {f32({1, 3, 4}, x)}, "pad_border"),
              {0, 0, 0, 1, 2, 3, 3, 0, 0, 0, 1, 2, 3, 3, 4, 4, 4, 5, 6, 7, 7, 8, 8, 8, 9, 10, 11, 11, 8, 8, 8, 9, 10, 11, 11, 8, 8, 8, 9, 10, 11, 11});
  OneOp refl1{"aten.reflection_pad1d.default", {{"self", tensor_arg("x")}, {"padding", ints({3, 1})}}, {{"x", {1, 4}}}, {1, 8}};
  expect_near(run(refl1, {f32({1, 4}, {0, 1, 2, 3})}), {3, 2, 1, 0, 1, 2, 3, 2});
  OneOp circ{"aten.pad.default", {{"self", tensor_arg("x")}, {"pad", ints({2, 3})}, {"mode", {{"as_string", "circular"}}}},
             {{"x", {1, 4}}}, {1, 9}};
  expect_near(run(circ, {f32({1, 4}, {0, 1, 2, 3})}), {2, 3, 0, 1, 2, 3, 0, 1, 2});
}

TEST(ImportOpCoverage, BicubicUpsamplingMatchesPyTorch) {
  // x = arange(12.).reshape(1, 1, 3, 4) ** 1.5; F.interpolate(x, ..., mode="bicubic") in PyTorch 2.6.
  const std::vector<float> x{0.0f, 1.0f, 2.8284270763397217f, 5.196152210235596f, 8.0f, 11.180339813232422f,
                             14.696938514709473f, 18.520259857177734f, 22.627416610717773f, 27.0f, 31.62277603149414f, 36.482872009277344f};
  OneOp op{"aten.upsample_bicubic2d.vec",
           {{"input", tensor_arg("x")}, {"output_size", ints({5, 7})}, {"align_corners", {{"as_bool", false}}}},
           {{"x", {1, 1, 3, 4}}}, {1, 1, 5, 7}};
  expect_near(run(op, {f32({1, 1, 3, 4}, x)}),
              {-0.8464487f, -0.6010560f, -0.0995243f, 0.7211230f, 1.8935024f, 3.2603452f, 4.1380935f, 1.8761925f, 2.5027504f,
               3.5992122f, 4.9099407f, 6.4893026f, 8.2466297f, 9.3561420f, 7.6844587f, 8.8674173f, 10.8359346f, 12.8783598f,
               15.0781403f, 17.4337482f, 18.8995972f, 17.1244698f, 18.6484070f, 21.1629353f, 23.7060528f, 26.3704758f,
               29.1833973f, 30.9254036f, 23.5864697f, 25.2697716f, 28.0435257f, 30.8388767f, 33.7498932f, 36.8081512f, 38.6993713f});
  op.args[2].second = {{"as_bool", true}};
  expect_near(run(op, {f32({1, 1, 3, 4}, x)}),
              {0.0f, 0.3285850f, 1.0f, 1.7859893f, 2.8284271f, 4.1837049f, 5.1961522f, 2.6286798f, 3.3770521f, 4.6070766f,
               5.7958627f, 7.1758857f, 8.9158745f, 10.1742115f, 8.0f, 9.2604885f, 11.1803398f, 12.8783588f, 14.6969385f,
               16.9382801f, 18.5202599f, 16.0637074f, 17.6577721f, 20.0445766f, 22.1119289f, 24.2725296f, 26.9079876f,
               28.7507019f, 22.6274166f, 24.3803234f, 27.0f, 29.2656822f, 31.6227760f, 34.4862099f, 36.4828720f});
  // scale_factor=2 through the scale_factors argument (output_size None).
  OneOp sf{"aten.upsample_bicubic2d.vec",
           {{"input", tensor_arg("x")}, {"align_corners", {{"as_bool", false}}}, {"scale_factors", {{"as_floats", {2.0, 2.0}}}}},
           {{"x", {1, 1, 3, 4}}}, {1, 1, 6, 8}};
  const HostTensor r = run(sf, {f32({1, 1, 3, 4}, x)});
  const auto v = values<float>(r);
  ASSERT_EQ(v.size(), 48u);
  EXPECT_NEAR(v[0], -0.9249654f, 1e-4);
  EXPECT_NEAR(v[9], 1.5508792f, 1e-4);
  EXPECT_NEAR(v[47], 38.9014893f, 1e-4);
}

TEST(ImportOpCoverage, IntegerIndexPutWithAndWithoutAccumulate) {
  // y = x.index_put((None, idx), v, accumulate): x[:, idx] = v / += v
  OneOp op{"aten.index_put.default",
           {{"self", tensor_arg("x")},
            {"indices", {{"as_optional_tensors", {{{"as_none", true}}, {{"as_tensor", {{"name", "i"}}}}}}}},
            {"values", tensor_arg("v")},
            {"accumulate", {{"as_bool", true}}}},
           {{"x", {2, 4}}, {"i", {3}, kTorchI64}, {"v", {3}}}, {2, 4}};
  const auto x = f32({2, 4}, {0, 1, 2, 3, 4, 5, 6, 7});
  expect_near(run(op, {x, i64({3}, {1, -1, 1}), f32({3}, {10, 20, 30})}, "index_put"), {0, 41, 2, 23, 4, 45, 6, 27});
  op.args[3].second = {{"as_bool", false}};
  expect_near(run(op, {x, i64({3}, {1, -1, 2}), f32({3}, {10, 20, 30})}), {0, 10, 30, 20, 4, 10, 30, 20});
}

TEST(ImportOpCoverage, DiffFillAndAsStrided) {
  // torch.diff(tensor([1., 4, 9, 16, 25]), n=2, prepend=tensor([0., 2]))
  OneOp diff{"aten.diff.default",
             {{"self", tensor_arg("x")}, {"n", int_arg(2)}, {"dim", int_arg(-1)}, {"prepend", tensor_arg("p")}},
             {{"x", {5}}, {"p", {2}}}, {5}};
  expect_near(run(diff, {f32({5}, {1, 4, 9, 16, 25}), f32({2}, {0, 2})}), {-3, 4, 2, 2, 2});
  // diff of bools is logical_xor.
  const auto b = run({"aten.diff.default", {{"self", tensor_arg("x")}}, {{"x", {4}, kTorchBool}}, {3}, kTorchBool},
                     {host<std::uint8_t>(DType::kBool, {4}, {1, 1, 0, 1})}, "logical_xor");
  EXPECT_EQ(values<std::uint8_t>(b), (std::vector<std::uint8_t>{0, 1, 1}));
  // fill(x, 2.5) and fill(x, 0-d tensor)
  expect_near(run({"aten.fill.Scalar", {{"self", tensor_arg("x")}, {"value", {{"as_float", 2.5}}}}, {{"x", {2, 2}}}, {2, 2}},
                  {f32({2, 2}, {0, 0, 0, 0})}),
              {2.5f, 2.5f, 2.5f, 2.5f});
  expect_near(run({"aten.fill.Tensor", {{"self", tensor_arg("x")}, {"value", tensor_arg("v")}}, {{"x", {3}}, {"v", {}}}, {3}},
                  {f32({3}, {0, 0, 0}), f32({}, {-4})}),
              {-4, -4, -4});
  // zero(x): zeros of x's shape (zero_ of a user input is an input mutation, refused).
  expect_near(run({"aten.zero.default", {{"self", tensor_arg("x")}}, {{"x", {3}}}, {3}}, {f32({3}, {1, 2, 3})}, "full"),
              {0, 0, 0});
  // as_strided as the transpose of a [2, 3] tensor, and convnext's no-op form.
  expect_near(run({"aten.as_strided.default", {{"self", tensor_arg("x")}, {"size", ints({3, 2})}, {"stride", ints({1, 3})}},
                   {{"x", {2, 3}}}, {3, 2}},
                  {f32({2, 3}, {0, 1, 2, 3, 4, 5})}, "index_select"),
              {0, 3, 1, 4, 2, 5});
  expect_near(run({"aten.as_strided.default", {{"self", tensor_arg("x")}, {"size", ints({1, 3, 1, 1})}, {"stride", ints({3, 1, 3, 3})}},
                   {{"x", {1, 3, 1, 1}}}, {1, 3, 1, 1}},
                  {f32({1, 3, 1, 1}, {7, 8, 9})}),
              {7, 8, 9});
  Status s = import_status({"aten.as_strided.default", {{"self", tensor_arg("x")}, {"size", ints({4})}, {"stride", ints({2})}},
                            {{"x", {2, 3}}}, {4}});
  EXPECT_EQ(s.code(), StatusCode::kUnsupported);
  EXPECT_NE(s.message().find("as_strided reading outside the tensor's 6 elements"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace kiln

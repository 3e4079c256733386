// The scatter family (scatter, scatter_add, scatter_reduce, index_add, index_fill,
// masked_scatter, max_unpool2d, embedding_bag), the searches (bucketize, searchsorted,
// median, kthvalue) and the scans (cummax / cummin, cumprod, logcumsumexp) that
// export/src/import/aten_scatter.cpp decomposes, in one-node archives written by the test,
// imported and run against hand-computed results; out-of-range indices as run-time errors
// and the variants Kiln refuses with their exact messages.
#include <gtest/gtest.h>
#include <zip.h>

#include <cmath>
#include <cstring>
#include <filesystem>
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

// torch/_export/serde ScalarType codes.
constexpr int kI32 = 4, kI64 = 5, kF32 = 7, kBool = 12;

json dims(std::vector<json> sizes, int dtype = kF32) {
  return {{"dtype", dtype}, {"sizes", sizes}, {"requires_grad", false}, {"strides", json::array()}, {"layout", 7}};
}
json meta(std::vector<std::int64_t> sizes, int dtype = kF32) {
  std::vector<json> s;
  for (auto v : sizes) s.push_back({{"as_int", v}});
  return dims(s, dtype);
}
// The symbolic size s0 (hint 3, range [2, 64]).
const json kS0 = {{"as_expr", {{"expr_str", "Symbol('s0', positive=True, integer=True)"}, {"hint", {{"as_int", 3}}}}}};
json n(std::int64_t v) { return {{"as_int", v}}; }

json tensor(const std::string& name) { return {{"as_tensor", {{"name", name}}}}; }
json integer(std::int64_t v) { return {{"as_int", v}}; }
json number(double v) { return {{"as_float", v}}; }
json boolean(bool v) { return {{"as_bool", v}}; }
json text(const std::string& v) { return {{"as_string", v}}; }

struct OneNode {
  std::string target;
  std::vector<std::pair<std::string, json>> args;     // schema name -> Argument
  std::vector<std::pair<std::string, json>> inputs;   // graph input name -> tensor meta
  std::vector<std::pair<std::string, json>> outputs;  // node output name -> tensor meta
  std::size_t returned = 1;                           // the first outputs the graph returns
  bool symbolic = false;                              // range_constraints for s0
};

std::string write_archive(const OneNode& op, const std::string& path) {
  testing::OneNodeArchive a{op.target, op.args, op.inputs, op.outputs};
  for (std::size_t k = op.returned; k < op.outputs.size(); ++k) a.not_returned.insert(op.outputs[k].first);
  if (op.symbolic) a.ranges["s0"] = {{"min_val", 2}, {"max_val", 64}};
  return testing::write_one_node_archive(a, path);
}

template <typename T>
HostValue host(DType dt, std::vector<std::int64_t> shape, std::vector<T> v) {
  HostTensor t{dt, std::move(shape), {}};
  t.data.resize(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(t.data.data(), v.data(), t.data.size());
  return HostValue::of(std::move(t));
}
HostValue f32(std::vector<std::int64_t> shape, std::vector<float> v) { return host(DType::kF32, std::move(shape), std::move(v)); }
HostValue i64(std::vector<std::int64_t> shape, std::vector<std::int64_t> v) { return host(DType::kI64, std::move(shape), std::move(v)); }
HostValue b8(std::vector<std::int64_t> shape, std::vector<std::uint8_t> v) { return host(DType::kBool, std::move(shape), std::move(v)); }

Status import_status(const OneNode& op) {
  const fs::path p = fs::temp_directory_path() / ("kiln_scatter_" + std::to_string(::getpid()) + ".pt2");
  auto ep = import_pt2(write_archive(op, p.string()));
  fs::remove(p);
  return ep.ok() ? Status::Ok() : ep.status();
}

// Imports and runs; the outputs, or the run's error in *run_status (when given).
std::vector<HostTensor> run(const OneNode& op, const std::vector<HostValue>& inputs, Status* run_status = nullptr) {
  const fs::path p = fs::temp_directory_path() / ("kiln_scatter_" + std::to_string(::getpid()) + ".pt2");
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
  std::vector<HostTensor> out;
  for (auto& v : r->outputs) out.push_back(std::move(v.tensor));
  return out;
}

// Output k's elements (NaN compares equal to NaN), shape and dtype.
void expect_output(const std::vector<HostTensor>& outs, std::size_t k, std::vector<std::int64_t> shape, DType dtype,
                   const std::vector<double>& want) {
  ASSERT_GT(outs.size(), k);
  const HostTensor& t = outs[k];
  EXPECT_EQ(t.shape, shape) << "output " << k;
  EXPECT_EQ(t.dtype, dtype) << "output " << k;
  ASSERT_EQ(t.numel(), static_cast<std::int64_t>(want.size())) << "output " << k;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double got = t.element(static_cast<std::int64_t>(i));
    if (std::isnan(want[i])) EXPECT_TRUE(std::isnan(got)) << "output " << k << " element " << i;
    else if (std::isinf(want[i])) EXPECT_EQ(got, want[i]) << "output " << k << " element " << i;
    else EXPECT_NEAR(got, want[i], 1e-5 + 1e-5 * std::abs(want[i])) << "output " << k << " element " << i;
  }
}

void expect_unsupported(const OneNode& op, const std::string& message) {
  const Status st = import_status(op);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kUnsupported) << st.message();
  EXPECT_EQ(st.message(), message + " (test.py:7)");
}

const double kNan = std::nan("");

// ---- scatter ----------------------------------------------------------------------------

OneNode scatter_src(std::int64_t dim, std::vector<std::int64_t> x, std::vector<std::int64_t> index, std::vector<std::int64_t> src) {
  return {"aten.scatter.src",
          {{"self", tensor("x")}, {"dim", integer(dim)}, {"index", tensor("i")}, {"src", tensor("s")}},
          {{"x", meta(x)}, {"i", meta(index, kI64)}, {"s", meta(src)}},
          {{"y", meta(x)}}};
}

TEST(ImportScatter, ScatterSrcAndValueOnSeveralDims) {
  // dim -1; src is larger than index: only src[:, :2] is read.
  auto out = run(scatter_src(-1, {2, 3}, {2, 2}, {2, 3}),
                 {f32({2, 3}, {0, 1, 2, 3, 4, 5}), i64({2, 2}, {2, 0, 1, 2}), f32({2, 3}, {10, 11, 12, 13, 14, 15})});
  expect_output(out, 0, {2, 3}, DType::kF32, {11, 1, 10, 3, 13, 14});
  // dim 1 of a 3-D tensor, the index covering only the first element of the last dim.
  out = run(scatter_src(1, {2, 2, 2}, {2, 2, 1}, {2, 2, 1}),
            {f32({2, 2, 2}, {0, 0, 0, 0, 0, 0, 0, 0}), i64({2, 2, 1}, {1, 0, 0, 1}), f32({2, 2, 1}, {1, 2, 3, 4})});
  expect_output(out, 0, {2, 2, 2}, DType::kF32, {2, 0, 1, 0, 3, 0, 4, 0});
  // scatter.value on dim 0 (negative: -2 of rank 2).
  OneNode value{"aten.scatter.value",
                {{"self", tensor("x")}, {"dim", integer(-2)}, {"index", tensor("i")}, {"value", number(7)}},
                {{"x", meta({3, 2})}, {"i", meta({1, 2}, kI64)}},
                {{"y", meta({3, 2})}}};
  out = run(value, {f32({3, 2}, {0, 0, 0, 0, 0, 0}), i64({1, 2}, {2, 0})});
  expect_output(out, 0, {3, 2}, DType::kF32, {0, 7, 0, 0, 7, 0});
  // scatter.value_reduce 'add' accumulates the value at duplicate indices.
  value.target = "aten.scatter.value_reduce";
  value.args.push_back({"reduce", text("add")});
  value.inputs[1].second = meta({2, 2}, kI64);
  out = run(value, {f32({3, 2}, {1, 1, 1, 1, 1, 1}), i64({2, 2}, {2, 0, 2, 2})});
  expect_output(out, 0, {3, 2}, DType::kF32, {1, 8, 1, 1, 15, 8});
}

TEST(ImportScatter, ScatterAddAndIndexAddAccumulateDuplicates) {
  OneNode add{"aten.scatter_add.default",
              {{"self", tensor("x")}, {"dim", integer(1)}, {"index", tensor("i")}, {"src", tensor("s")}},
              {{"x", meta({2, 3})}, {"i", meta({2, 4}, kI64)}, {"s", meta({2, 4})}},
              {{"y", meta({2, 3})}}};
  auto out = run(add, {f32({2, 3}, {0, 0, 0, 0, 0, 0}), i64({2, 4}, {0, 0, 2, 0, 1, 1, 1, 1}), f32({2, 4}, {1, 2, 3, 4, 5, 6, 7, 8})});
  expect_output(out, 0, {2, 3}, DType::kF32, {7, 0, 3, 0, 26, 0});
  // int64 self and src.
  add.inputs = {{"x", meta({2, 3}, kI64)}, {"i", meta({2, 4}, kI64)}, {"s", meta({2, 4}, kI64)}};
  add.outputs = {{"y", meta({2, 3}, kI64)}};
  out = run(add, {i64({2, 3}, {1, 1, 1, 1, 1, 1}), i64({2, 4}, {0, 0, 2, 0, 1, 1, 1, 1}), i64({2, 4}, {1, 2, 3, 4, 5, 6, 7, -8})});
  expect_output(out, 0, {2, 3}, DType::kI64, {8, 1, 4, 1, 11, 1});
  // scatter.reduce 'add' with a src tensor, and 'multiply'.
  OneNode red{"aten.scatter.reduce",
              {{"self", tensor("x")}, {"dim", integer(0)}, {"index", tensor("i")}, {"src", tensor("s")}, {"reduce", text("add")}},
              {{"x", meta({3})}, {"i", meta({4}, kI64)}, {"s", meta({4})}},
              {{"y", meta({3})}}};
  out = run(red, {f32({3}, {1, 1, 1}), i64({4}, {2, 0, 2, 2}), f32({4}, {1, 2, 3, 4})});
  expect_output(out, 0, {3}, DType::kF32, {3, 1, 9});
  red.args[4].second = text("multiply");
  out = run(red, {f32({3}, {2, 1, 1}), i64({4}, {2, 0, 2, 2}), f32({4}, {1, 2, 3, 4})});
  expect_output(out, 0, {3}, DType::kF32, {4, 1, 12});

  // index_add with duplicates and alpha.
  OneNode ia{"aten.index_add.default",
             {{"self", tensor("x")}, {"dim", integer(0)}, {"index", tensor("i")}, {"source", tensor("s")}, {"alpha", number(2)}},
             {{"x", meta({3, 2})}, {"i", meta({3}, kI64)}, {"s", meta({3, 2})}},
             {{"y", meta({3, 2})}}};
  out = run(ia, {f32({3, 2}, {1, 1, 1, 1, 1, 1}), i64({3}, {2, 0, 2}), f32({3, 2}, {1, 2, 3, 4, 5, 6})});
  expect_output(out, 0, {3, 2}, DType::kF32, {7, 9, 1, 1, 13, 17});
  // dim -1, alpha 1.
  ia.args = {{"self", tensor("x")}, {"dim", integer(-1)}, {"index", tensor("i")}, {"source", tensor("s")}};
  ia.inputs = {{"x", meta({2, 3})}, {"i", meta({2}, kI64)}, {"s", meta({2, 2})}};
  ia.outputs = {{"y", meta({2, 3})}};
  out = run(ia, {f32({2, 3}, {0, 0, 0, 0, 0, 0}), i64({2}, {1, 1}), f32({2, 2}, {1, 2, 3, 4})});
  expect_output(out, 0, {2, 3}, DType::kF32, {0, 3, 0, 0, 7, 0});
}

TEST(ImportScatter, ScatterReduceEveryReduction) {
  // self [10, 2, 3, 4], index [0, 0, 2, 2, 1] (into dim 1 of [1, 4]), src [5, -1, 2, 6, 3].
  struct Case {
    const char* reduce;
    bool include_self;
    std::vector<double> want;
  };
  const std::vector<Case> cases = {
      {"sum", true, {14, 5, 11, 4}},       {"sum", false, {4, 3, 8, 4}},    {"prod", true, {-50, 6, 36, 4}},
      {"prod", false, {-5, 3, 12, 4}},     {"mean", true, {14.0 / 3, 2.5, 11.0 / 3, 4}},
      {"mean", false, {2, 3, 4, 4}},       {"amax", true, {10, 3, 6, 4}},   {"amax", false, {5, 3, 6, 4}},
      {"amin", true, {-1, 2, 2, 4}},       {"amin", false, {-1, 3, 2, 4}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.reduce) + (c.include_self ? " include_self" : ""));
    OneNode op{"aten.scatter_reduce.two",
               {{"self", tensor("x")}, {"dim", integer(1)}, {"index", tensor("i")}, {"src", tensor("s")}, {"reduce", text(c.reduce)},
                {"include_self", boolean(c.include_self)}},
               {{"x", meta({1, 4})}, {"i", meta({1, 5}, kI64)}, {"s", meta({1, 5})}},
               {{"y", meta({1, 4})}}};
    const auto out = run(op, {f32({1, 4}, {10, 2, 3, 4}), i64({1, 5}, {0, 0, 2, 2, 1}), f32({1, 5}, {5, -1, 2, 6, 3})});
    expect_output(out, 0, {1, 4}, DType::kF32, c.want);
  }
  // amax / amin on dim 0 with an index covering a corner of self: the rest keeps self.
  for (auto [reduce, include_self, v] : {std::tuple{"amax", true, 7.0}, {"amin", false, 5.0}, {"prod", true, 0.0}}) {
    SCOPED_TRACE(reduce);
    OneNode op{"aten.scatter_reduce.two",
               {{"self", tensor("x")}, {"dim", integer(0)}, {"index", tensor("i")}, {"src", tensor("s")}, {"reduce", text(reduce)},
                {"include_self", boolean(include_self)}},
               {{"x", meta({3, 3})}, {"i", meta({2, 1}, kI64)}, {"s", meta({2, 2})}},
               {{"y", meta({3, 3})}}};
    const auto out = run(op, {f32({3, 3}, {0, 1, 1, 1, 1, 1, 0, 1, 1}), i64({2, 1}, {2, 2}), f32({2, 2}, {5, 9, 7, 9})});
    expect_output(out, 0, {3, 3}, DType::kF32, {0, 1, 1, 1, 1, 1, v, 1, 1});
  }
  // Integer mean rounds down (floor, as PyTorch): (-10 - 1 - 1 - 1) / 4 = -3.25 -> -4.
  OneNode mean{"aten.scatter_reduce.two",
               {{"self", tensor("x")}, {"dim", integer(1)}, {"index", tensor("i")}, {"src", tensor("s")}, {"reduce", text("mean")}},
               {{"x", meta({1, 2}, kI64)}, {"i", meta({1, 3}, kI64)}, {"s", meta({1, 3}, kI64)}},
               {{"y", meta({1, 2}, kI64)}}};
  const auto out = run(mean, {i64({1, 2}, {1, -10}), i64({1, 3}, {1, 1, 1}), i64({1, 3}, {-1, -1, -1})});
  expect_output(out, 0, {1, 2}, DType::kI64, {1, -4});
}

TEST(ImportScatter, IndexFillAndMaskedScatter) {
  OneNode fill{"aten.index_fill.int_Scalar",
               {{"self", tensor("x")}, {"dim", integer(1)}, {"index", tensor("i")}, {"value", number(-1)}},
               {{"x", meta({2, 3})}, {"i", meta({2}, kI64)}},
               {{"y", meta({2, 3})}}};
  auto out = run(fill, {f32({2, 3}, {0, 1, 2, 3, 4, 5}), i64({2}, {-1, 0})});  // -1: the last (as PyTorch)
  expect_output(out, 0, {2, 3}, DType::kF32, {-1, 1, -1, -1, 4, -1});
  // int_Tensor: a 0-d value tensor, dim -2.
  fill.target = "aten.index_fill.int_Tensor";
  fill.args = {{"self", tensor("x")}, {"dim", integer(-2)}, {"index", tensor("i")}, {"value", tensor("v")}};
  fill.inputs = {{"x", meta({2, 3})}, {"i", meta({1}, kI64)}, {"v", meta({})}};
  out = run(fill, {f32({2, 3}, {0, 1, 2, 3, 4, 5}), i64({1}, {1}), f32({}, {9})});
  expect_output(out, 0, {2, 3}, DType::kF32, {0, 1, 2, 9, 9, 9});

  // masked_scatter with a mask broadcast over the rows; the source read in order.
  OneNode ms{"aten.masked_scatter.default",
             {{"self", tensor("x")}, {"mask", tensor("m")}, {"source", tensor("s")}},
             {{"x", meta({2, 3})}, {"m", meta({3}, kBool)}, {"s", meta({2, 3})}},
             {{"y", meta({2, 3})}}};
  out = run(ms, {f32({2, 3}, {0, 0, 0, 0, 0, 0}), b8({3}, {1, 0, 1}), f32({2, 3}, {1, 2, 3, 4, 5, 6})});
  expect_output(out, 0, {2, 3}, DType::kF32, {1, 0, 2, 3, 0, 4});
  // Too few source elements: index_select's out-of-range error, not a crash.
  ms.inputs[2].second = meta({3});
  Status st;
  run(ms, {f32({2, 3}, {0, 0, 0, 0, 0, 0}), b8({3}, {1, 0, 1}), f32({3}, {1, 2, 3})}, &st);
  EXPECT_EQ(st.code(), StatusCode::kInvalidInput) << st.message();
  EXPECT_NE(st.message().find("[index_select] indices[5]=3 out of range [0, 3)"), std::string::npos) << st.message();
}

TEST(ImportScatter, ScatterIndexBoundsAreRunTimeErrors) {
  const OneNode op = scatter_src(1, {2, 3}, {2, 2}, {2, 2});
  const HostValue x = f32({2, 3}, {0, 1, 2, 3, 4, 5}), s = f32({2, 2}, {1, 2, 3, 4});
  for (auto [index, message] : {std::pair{std::vector<std::int64_t>{0, 1, 3, 0}, "[index_select] indices[2]=3 out of range [0, 3)"},
                                {std::vector<std::int64_t>{0, -1, 2, 0}, "[index_select] indices[1]=-1 out of range [0, 3)"}}) {
    Status st;
    const auto out = run(op, {x, i64({2, 2}, index), s}, &st);
    EXPECT_TRUE(out.empty());
    EXPECT_EQ(st.code(), StatusCode::kInvalidInput) << st.message();
    EXPECT_NE(st.message().find(message), std::string::npos) << st.message();
  }
  // index_add rejects a negative index too (PyTorch's "index out of range in self").
  OneNode ia{"aten.index_add.default",
             {{"self", tensor("x")}, {"dim", integer(0)}, {"index", tensor("i")}, {"source", tensor("s")}},
             {{"x", meta({2})}, {"i", meta({1}, kI64)}, {"s", meta({1})}},
             {{"y", meta({2})}}};
  Status st;
  run(ia, {f32({2}, {0, 0}), i64({1}, {-1}), f32({1}, {1})}, &st);
  EXPECT_EQ(st.code(), StatusCode::kInvalidInput) << st.message();
  EXPECT_NE(st.message().find("[index_select] indices[0]=-1 out of range [0, 2)"), std::string::npos) << st.message();
  // index_fill: index_put's own bounds check (negative indices wrap there).
  OneNode fill{"aten.index_fill.int_Scalar",
               {{"self", tensor("x")}, {"dim", integer(0)}, {"index", tensor("i")}, {"value", number(1)}},
               {{"x", meta({2})}, {"i", meta({1}, kI64)}},
               {{"y", meta({2})}}};
  run(fill, {f32({2}, {0, 0}), i64({1}, {2})}, &st);
  EXPECT_EQ(st.code(), StatusCode::kInvalidInput) << st.message();
  EXPECT_NE(st.message().find("[index_put] indices[0] element 0 = 2 out of range for dim 0 of size 2"), std::string::npos) << st.message();
  // One-hot reductions check their index the same way.
  OneNode amax{"aten.scatter_reduce.two",
               {{"self", tensor("x")}, {"dim", integer(0)}, {"index", tensor("i")}, {"src", tensor("s")}, {"reduce", text("amax")}},
               {{"x", meta({2})}, {"i", meta({1}, kI64)}, {"s", meta({1})}},
               {{"y", meta({2})}}};
  run(amax, {f32({2}, {0, 0}), i64({1}, {5}), f32({1}, {1})}, &st);
  EXPECT_EQ(st.code(), StatusCode::kInvalidInput) << st.message();
  EXPECT_NE(st.message().find("[index_select] indices[0]=5 out of range [0, 2)"), std::string::npos) << st.message();
}

TEST(ImportScatter, MaxUnpoolAndEmbeddingBag) {
  OneNode up{"aten.max_unpool2d.default",
             {{"self", tensor("x")}, {"indices", tensor("i")}, {"output_size", {{"as_ints", {3, 3}}}}},
             {{"x", meta({1, 2, 1, 2})}, {"i", meta({1, 2, 1, 2}, kI64)}},
             {{"y", meta({1, 2, 3, 3})}}};
  auto out = run(up, {f32({1, 2, 1, 2}, {1, 2, 3, 4}), i64({1, 2, 1, 2}, {0, 8, 4, 5})});
  expect_output(out, 0, {1, 2, 3, 3}, DType::kF32, {1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 3, 4, 0, 0, 0});

  // Bags {0, 2}, {}, {3, 1, 1} of weight rows [0, 1], [2, 3], [4, 5], [6, 7].
  const std::vector<double> sum{4, 6, 0, 0, 10, 13}, mean{2, 3, 0, 0, 10.0 / 3, 13.0 / 3}, max{4, 5, 0, 0, 6, 7};
  for (auto [mode, want] : {std::pair{0, sum}, {1, mean}, {2, max}}) {
    SCOPED_TRACE(mode);
    OneNode eb{"aten._embedding_bag.default",
               {{"weight", tensor("w")}, {"indices", tensor("i")}, {"offsets", tensor("o")}, {"scale_grad_by_freq", boolean(false)},
                {"mode", integer(mode)}},
               {{"w", meta({4, 2})}, {"i", meta({5}, kI64)}, {"o", meta({3}, kI64)}},
               {{"y", meta({3, 2})}, {"bag_of", meta({5}, kI64)}, {"sizes", meta({3}, kI64)}, {"arg", meta({3, 2}, kI64)}}};
    out = run(eb, {f32({4, 2}, {0, 1, 2, 3, 4, 5, 6, 7}), i64({5}, {0, 2, 3, 1, 1}), i64({3}, {0, 2, 2})});
    expect_output(out, 0, {3, 2}, DType::kF32, want);
  }
  // padding_idx 1 is left out of the sum and of the mean's bag size.
  OneNode eb{"aten.embedding_bag.padding_idx",
             {{"weight", tensor("w")}, {"indices", tensor("i")}, {"offsets", tensor("o")}, {"scale_grad_by_freq", boolean(false)},
              {"mode", integer(1)}, {"sparse", boolean(false)}, {"per_sample_weights", {{"as_none", true}}},
              {"include_last_offset", boolean(true)}, {"padding_idx", integer(1)}},
             {{"w", meta({4, 2})}, {"i", meta({5}, kI64)}, {"o", meta({3}, kI64)}},
             {{"y", meta({2, 2})}, {"bag_of", meta({5}, kI64)}, {"sizes", meta({2}, kI64)}, {"arg", meta({2, 2}, kI64)}}};
  out = run(eb, {f32({4, 2}, {0, 1, 2, 3, 4, 5, 6, 7}), i64({5}, {0, 2, 3, 1, 1}), i64({3}, {0, 2, 5})});
  expect_output(out, 0, {2, 2}, DType::kF32, {2, 3, 6, 7});
}

// ---- searches and scans ---------------------------------------------------------------------

TEST(ImportScatter, BucketizeAndSearchsorted) {
  // boundaries [-1, 0, 1]; x [-2, -1, 0, 0.5, NaN] (a NaN lands after every boundary).
  OneNode bk{"aten.bucketize.Tensor",
             {{"self", tensor("x")}, {"boundaries", tensor("b")}},
             {{"x", meta({5})}, {"b", meta({3})}},
             {{"y", meta({5}, kI64)}}};
  const HostValue x = f32({5}, {-2, -1, 0, 0.5f, NAN}), b = f32({3}, {-1, 0, 1});
  auto out = run(bk, {x, b});
  expect_output(out, 0, {5}, DType::kI64, {0, 0, 1, 2, 3});
  bk.args.push_back({"out_int32", boolean(true)});
  bk.args.push_back({"right", boolean(true)});
  bk.outputs[0].second = meta({5}, kI32);
  out = run(bk, {x, b});
  expect_output(out, 0, {5}, DType::kI32, {0, 1, 2, 2, 3});

  // A 2-D sorted sequence searched row by row; side='right' and the default left.
  OneNode ss{"aten.searchsorted.Tensor",
             {{"sorted_sequence", tensor("s")}, {"self", tensor("x")}, {"side", text("right")}},
             {{"s", meta({2, 3})}, {"x", meta({2, 2})}},
             {{"y", meta({2, 2}, kI64)}}};
  const HostValue seq = f32({2, 3}, {1, 2, 3, 10, 20, 30}), xs = f32({2, 2}, {2, 4, 5, 20});
  out = run(ss, {seq, xs});
  expect_output(out, 0, {2, 2}, DType::kI64, {2, 3, 0, 2});
  ss.args.pop_back();
  out = run(ss, {seq, xs});
  expect_output(out, 0, {2, 2}, DType::kI64, {1, 3, 0, 1});
  // sorter: the sequence [3, 1, 2] read in the order [1, 2, 0].
  ss.args.push_back({"sorter", tensor("o")});
  ss.inputs = {{"s", meta({3})}, {"x", meta({2})}, {"o", meta({3}, kI64)}};
  ss.outputs[0].second = meta({2}, kI64);
  out = run(ss, {f32({3}, {3, 1, 2}), f32({2}, {2.5f, 0}), i64({3}, {1, 2, 0})});
  expect_output(out, 0, {2}, DType::kI64, {2, 0});
  // searchsorted.Scalar: a 0-d result.
  OneNode sc{"aten.searchsorted.Scalar",
             {{"sorted_sequence", tensor("s")}, {"self", number(2.5)}},
             {{"s", meta({3})}},
             {{"y", meta({}, kI64)}}};
  out = run(sc, {f32({3}, {1, 2, 3})});
  expect_output(out, 0, {}, DType::kI64, {2});
}

TEST(ImportScatter, MedianAndKthvalue) {
  // Rows: [3, 1, 2] -> 2 at 2; [NaN, 5, NaN] -> NaN at the first NaN; [7, 8, 9, 6]-like lower median.
  OneNode med{"aten.median.dim",
              {{"self", tensor("x")}, {"dim", integer(-1)}},
              {{"x", meta({3, 4})}},
              {{"v", meta({3})}, {"i", meta({3}, kI64)}},
              2};
  auto out = run(med, {f32({3, 4}, {3, 1, 2, 0, NAN, 5, NAN, 1, 7, 8, 9, 6})});
  expect_output(out, 0, {3}, DType::kF32, {1, kNan, 7});
  expect_output(out, 1, {3}, DType::kI64, {1, 0, 0});
  // keepdim on dim 0; only the values returned.
  med.args = {{"self", tensor("x")}, {"dim", integer(0)}, {"keepdim", boolean(true)}};
  med.inputs = {{"x", meta({3, 2})}};
  med.outputs = {{"v", meta({1, 2})}, {"i", meta({1, 2}, kI64)}};
  med.returned = 1;
  out = run(med, {f32({3, 2}, {5, 1, 4, 3, 6, 2})});
  expect_output(out, 0, {1, 2}, DType::kF32, {5, 2});
  // median.default: all elements.
  OneNode all{"aten.median.default", {{"self", tensor("x")}}, {{"x", meta({2, 2})}}, {{"v", meta({})}}};
  out = run(all, {f32({2, 2}, {4, 1, 3, 2})});
  expect_output(out, 0, {}, DType::kF32, {2});

  OneNode kth{"aten.kthvalue.default",
              {{"self", tensor("x")}, {"k", integer(2)}, {"dim", integer(0)}, {"keepdim", boolean(true)}},
              {{"x", meta({5, 1})}},
              {{"v", meta({1, 1})}, {"i", meta({1, 1}, kI64)}},
              2};
  out = run(kth, {f32({5, 1}, {4, 1, 3, 5, 2})});
  expect_output(out, 0, {1, 1}, DType::kF32, {2});
  expect_output(out, 1, {1, 1}, DType::kI64, {4});
}

TEST(ImportScatter, CumulativeScans) {
  // cummax: ties and NaNs take the later index, NaN sticks (PyTorch's CPU kernel).
  OneNode cm{"aten.cummax.default",
             {{"self", tensor("x")}, {"dim", integer(0)}},
             {{"x", meta({7})}},
             {{"v", meta({7})}, {"i", meta({7}, kI64)}},
             2};
  auto out = run(cm, {f32({7}, {1, 3, 3, NAN, 2, NAN, 9})});
  expect_output(out, 0, {7}, DType::kF32, {1, 3, 3, kNan, kNan, kNan, kNan});
  expect_output(out, 1, {7}, DType::kI64, {0, 1, 2, 3, 3, 5, 5});
  // cummin of int64 along dim -1 of [2, 5].
  cm.target = "aten.cummin.default";
  cm.args[1].second = integer(-1);
  cm.inputs = {{"x", meta({2, 5}, kI64)}};
  cm.outputs = {{"v", meta({2, 5}, kI64)}, {"i", meta({2, 5}, kI64)}};
  out = run(cm, {i64({2, 5}, {3, 1, 1, 2, 0, 5, 6, 5, 4, 4})});
  expect_output(out, 0, {2, 5}, DType::kI64, {3, 1, 1, 1, 0, 5, 5, 5, 4, 4});
  expect_output(out, 1, {2, 5}, DType::kI64, {0, 1, 2, 2, 4, 0, 0, 2, 3, 4});

  OneNode cp{"aten.cumprod.default",
             {{"self", tensor("x")}, {"dim", integer(1)}},
             {{"x", meta({2, 5})}},
             {{"y", meta({2, 5})}}};
  out = run(cp, {f32({2, 5}, {2, 3, -1, 4, 0.5f, 1, 0, 5, 5, 5})});
  expect_output(out, 0, {2, 5}, DType::kF32, {2, 6, -6, -24, -12, 1, 0, 0, 0, 0});
  // int64 input, an f32 dtype argument.
  cp.args.push_back({"dtype", {{"as_scalar_type", kF32}}});
  cp.inputs[0].second = meta({2, 5}, kI64);
  out = run(cp, {i64({2, 5}, {2, 3, -1, 4, 1, 1, 2, 2, 2, 2})});
  expect_output(out, 0, {2, 5}, DType::kF32, {2, 6, -6, -24, -24, 1, 2, 4, 8, 16});

  OneNode lc{"aten.logcumsumexp.default",
             {{"self", tensor("x")}, {"dim", integer(0)}},
             {{"x", meta({5})}},
             {{"y", meta({5})}}};
  out = run(lc, {f32({5}, {-INFINITY, 0, -INFINITY, std::log(3.0f), -1000})});
  expect_output(out, 0, {5}, DType::kF32, {-INFINITY, 0, 0, std::log(4.0), std::log(4.0)});
  out = run(lc, {f32({5}, {-1000, -1001, INFINITY, 0, INFINITY})});
  expect_output(out, 0, {5}, DType::kF32, {-1000, -1000 + std::log1p(std::exp(-1.0)), INFINITY, INFINITY, INFINITY});
}

// ---- symbolic sizes and refusals ---------------------------------------------------------------

TEST(ImportScatter, SymbolicRowsScatterAndSearch) {
  OneNode add{"aten.scatter_add.default",
              {{"self", tensor("x")}, {"dim", integer(1)}, {"index", tensor("i")}, {"src", tensor("s")}},
              {{"x", dims({kS0, n(3)})}, {"i", dims({kS0, n(2)}, kI64)}, {"s", dims({kS0, n(2)})}},
              {{"y", dims({kS0, n(3)})}},
              1,
              true};
  auto out = run(add, {f32({2, 3}, {0, 0, 0, 0, 0, 0}), i64({2, 2}, {2, 2, 0, 1}), f32({2, 2}, {1, 2, 3, 4})});
  expect_output(out, 0, {2, 3}, DType::kF32, {0, 0, 3, 3, 4, 0});
  out = run(add, {f32({4, 3}, std::vector<float>(12, 1)), i64({4, 2}, {0, 0, 1, 1, 2, 2, 0, 2}), f32({4, 2}, {1, 2, 3, 4, 5, 6, 7, 8})});
  expect_output(out, 0, {4, 3}, DType::kF32, {4, 1, 1, 1, 8, 1, 1, 1, 12, 8, 1, 9});
  // The one-hot reductions need static sizes.
  OneNode amax = add;
  amax.target = "aten.scatter_reduce.two";
  amax.args.push_back({"reduce", text("amax")});
  expect_unsupported(amax, "[aten.scatter_reduce.two] scatter_reduce 'amax' with dynamic sizes: the sizes of self's dim and of index must be static");
  // Scans and medians along a static dim of a symbolic tensor work; along the symbolic dim they do not.
  OneNode cp{"aten.cumprod.default", {{"self", tensor("x")}, {"dim", integer(1)}}, {{"x", dims({kS0, n(3)})}}, {{"y", dims({kS0, n(3)})}}, 1, true};
  out = run(cp, {f32({2, 3}, {1, 2, 3, 4, 5, 6})});
  expect_output(out, 0, {2, 3}, DType::kF32, {1, 2, 6, 4, 20, 120});
  cp.args[1].second = integer(0);
  expect_unsupported(cp, "[aten.cumprod.default] cumprod along a dynamic dim: its size must be static");
  OneNode med{"aten.median.dim", {{"self", tensor("x")}, {"dim", integer(0)}}, {{"x", dims({kS0, n(3)})}},
              {{"v", meta({3})}, {"i", meta({3}, kI64)}}, 1, true};
  expect_unsupported(med, "[aten.median.dim] median along a dynamic dim: its size must be static");
  OneNode bk{"aten.bucketize.Tensor", {{"self", tensor("x")}, {"boundaries", tensor("b")}}, {{"x", dims({kS0})}, {"b", meta({2})}},
             {{"y", dims({kS0}, kI64)}}, 1, true};
  out = run(bk, {f32({4}, {-1, 0.5f, 1, 2}), f32({2}, {0, 1})});
  expect_output(out, 0, {4}, DType::kI64, {0, 1, 1, 2});
}

TEST(ImportScatter, RefusedVariantsNameTheReason) {
  OneNode red{"aten.scatter_reduce.two",
              {{"self", tensor("x")}, {"dim", integer(0)}, {"index", tensor("i")}, {"src", tensor("s")}, {"reduce", text("max")}},
              {{"x", meta({3})}, {"i", meta({2}, kI64)}, {"s", meta({2})}},
              {{"y", meta({3})}}};
  expect_unsupported(red, "[aten.scatter_reduce.two] scatter_reduce with reduce='max'");
  OneNode sc{"aten.scatter.reduce",
             {{"self", tensor("x")}, {"dim", integer(0)}, {"index", tensor("i")}, {"src", tensor("s")}, {"reduce", text("mean")}},
             {{"x", meta({3})}, {"i", meta({2}, kI64)}, {"s", meta({2})}},
             {{"y", meta({3})}}};
  expect_unsupported(sc, "[aten.scatter.reduce] scatter with reduce='mean'");
  // A one-hot over 5000 x 4 indices into a dim of 5000 exceeds 2^24 elements.
  OneNode big{"aten.scatter_reduce.two",
              {{"self", tensor("x")}, {"dim", integer(0)}, {"index", tensor("i")}, {"src", tensor("s")}, {"reduce", text("prod")}},
              {{"x", meta({5000, 4})}, {"i", meta({5000, 4}, kI64)}, {"s", meta({5000, 4})}},
              {{"y", meta({5000, 4})}}};
  expect_unsupported(big, "[aten.scatter_reduce.two] scatter_reduce 'prod' with 20000 indices into a dim of size 5000 "
                          "(the one-hot it decomposes into is limited to 2^24 elements)");
  // embedding_bag's other outputs.
  OneNode eb{"aten._embedding_bag.default",
             {{"weight", tensor("w")}, {"indices", tensor("i")}, {"offsets", tensor("o")}, {"mode", integer(0)}},
             {{"w", meta({4, 2})}, {"i", meta({5}, kI64)}, {"o", meta({3}, kI64)}},
             {{"y", meta({3, 2})}, {"bag_of", meta({5}, kI64)}},
             2};
  expect_unsupported(eb, "[aten._embedding_bag.default] embedding_bag's offset2bag, bag_size and max_indices outputs");
}

}  // namespace
}  // namespace kiln

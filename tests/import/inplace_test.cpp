// The training IR's in-place ops (mutations.cpp), in small archives written by the test:
// writes through slice / select / split / unbind / view / transpose chains land in their
// base, views taken before a write and read after it see the write, and every write Kiln
// cannot express exactly is refused naming the op, the tensor and the source line.
#include <gtest/gtest.h>
#include <zip.h>

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

json ints(std::vector<std::int64_t> v) { return {{"as_ints", v}}; }
json i(std::int64_t v) { return {{"as_int", v}}; }
json f(double v) { return {{"as_float", v}}; }
json t(const std::string& name) { return {{"as_tensor", {{"name", name}}}}; }

// A training-IR graph of f32 tensors built node by node.
struct Archive {
  json nodes = json::array();
  json values = json::object();
  std::vector<std::pair<std::string, std::vector<std::int64_t>>> inputs;
  std::vector<std::string> outputs;

  void value(const std::string& name, std::vector<std::int64_t> shape) {
    json s = json::array();
    for (auto v : shape) s.push_back({{"as_int", v}});
    values[name] = {{"dtype", 7}, {"sizes", s}, {"requires_grad", false}, {"strides", json::array()}, {"layout", 7}};
  }
  void input(const std::string& name, std::vector<std::int64_t> shape) {
    inputs.emplace_back(name, shape);
    value(name, shape);
  }
  // One node: target (without torch.ops.), named arguments, outputs with their shapes
  // (several: an as_tensors list), on source line `line` of test.py.
  void node(const std::string& target, std::vector<std::pair<std::string, json>> args,
            std::vector<std::pair<std::string, std::vector<std::int64_t>>> outs, int line = 7) {
    json n;
    n["target"] = "torch.ops." + target;
    n["name"] = outs[0].first;
    n["inputs"] = json::array();
    for (auto& [name, a] : args) n["inputs"].push_back({{"name", name}, {"arg", a}, {"kind", 1}});
    if (outs.size() == 1) {
      n["outputs"] = json::array({t(outs[0].first)});
    } else {
      json list = json::array();
      for (auto& [name, shape] : outs) list.push_back({{"name", name}});
      n["outputs"] = json::array({{{"as_tensors", list}}});
    }
    for (auto& [name, shape] : outs) value(name, shape);
    n["metadata"] = {{"stack_trace", "File \"test.py\", line " + std::to_string(line) + ", in forward"}};
    nodes.push_back(n);
  }
  std::string write(const std::string& path) const {
    json g;
    g["inputs"] = json::array();
    json in_specs = json::array();
    for (const auto& [name, shape] : inputs) {
      g["inputs"].push_back(t(name));
      in_specs.push_back({{"user_input", {{"arg", t(name)}}}});
    }
    g["nodes"] = nodes;
    g["tensor_values"] = values;
    g["outputs"] = json::array();
    json out_specs = json::array();
    for (const std::string& o : outputs) {
      g["outputs"].push_back(t(o));
      out_specs.push_back({{"user_output", {{"arg", t(o)}}}});
    }
    g["sym_int_values"] = json::object();
    g["sym_bool_values"] = json::object();
    json m;
    m["graph_module"] = {{"graph", g}, {"signature", {{"input_specs", in_specs}, {"output_specs", out_specs}}}};
    m["range_constraints"] = json::object();
    m["schema_version"] = {{"major", 8}, {"minor", 17}};
    const std::string text = m.dump();
    int err = 0;
    zip_t* z = zip_open(path.c_str(), ZIP_CREATE | ZIP_TRUNCATE, &err);
    void* copy = std::malloc(text.size());
    std::memcpy(copy, text.data(), text.size());
    zip_file_add(z, "m/models/model.json", zip_source_buffer(z, copy, text.size(), 1), ZIP_FL_OVERWRITE);
    zip_close(z);
    return path;
  }
};

std::string temp_path() { return (fs::temp_directory_path() / ("kiln_inplace_" + std::to_string(::getpid()) + ".pt2")).string(); }

Result<ExportedProgram> import(const Archive& a) {
  const std::string p = a.write(temp_path());
  auto ep = import_pt2(p);
  fs::remove(p);
  return ep;
}

HostValue f32(std::vector<std::int64_t> shape, std::vector<float> v) {
  HostTensor h{DType::kF32, std::move(shape), {}};
  h.data.resize(v.size() * 4);
  std::memcpy(h.data.data(), v.data(), h.data.size());
  return HostValue::of(std::move(h));
}

std::vector<float> iota(std::size_t n) {
  std::vector<float> v(n);
  for (std::size_t k = 0; k < n; ++k) v[k] = static_cast<float>(k);
  return v;
}

// Imports, runs and returns every output as floats.
std::vector<std::vector<float>> run(const Archive& a, const std::vector<HostValue>& inputs) {
  auto ep = import(a);
  const auto program = testing::load_imported(ep);
  if (program == nullptr) return {};
  Session s(*program);
  auto r = s.run(inputs);
  EXPECT_TRUE(r.ok()) << r.status().message();
  if (!r.ok()) return {};
  std::vector<std::vector<float>> out;
  for (const auto& o : r->outputs) {
    std::vector<float> v(static_cast<std::size_t>(o.tensor.numel()));
    std::memcpy(v.data(), o.tensor.data.data(), v.size() * 4);
    out.push_back(v);
  }
  return out;
}

void expect_refused(const Archive& a, const std::vector<std::string>& parts) {
  auto ep = import(a);
  ASSERT_FALSE(ep.ok()) << "imported, expected: " << parts[0];
  EXPECT_EQ(ep.status().code(), StatusCode::kUnsupported) << ep.status().message();
  for (const std::string& p : parts) EXPECT_NE(ep.status().message().find(p), std::string::npos) << "'" << p << "' not in: " << ep.status().message();
}

// w = x.clone(); row = w[1]; w[1:3, 2:5] = 7; w.t().mul_(2); return w, row, w[1:3]
TEST(ImportInPlace, WritesThroughSliceAndTransposeChainsLandInTheBaseAndEarlierViewsSeeThem) {
  Archive a;
  a.input("x", {4, 6});
  a.node("aten.clone.default", {{"self", t("x")}}, {{"w", {4, 6}}});
  a.node("aten.select.int", {{"self", t("w")}, {"dim", i(0)}, {"index", i(1)}}, {{"row", {6}}});
  a.node("aten.slice.Tensor", {{"self", t("w")}, {"dim", i(0)}, {"start", i(1)}, {"end", i(3)}}, {{"rows", {2, 6}}});
  a.node("aten.slice.Tensor", {{"self", t("rows")}, {"dim", i(1)}, {"start", i(2)}, {"end", i(5)}}, {{"block", {2, 3}}});
  a.node("aten.fill_.Scalar", {{"self", t("block")}, {"value", f(7.0)}}, {{"fill_", {2, 3}}});
  a.node("aten.t.default", {{"self", t("w")}}, {{"wt", {6, 4}}});
  a.node("aten.mul_.Tensor", {{"self", t("wt")}, {"other", i(2)}}, {{"mul_", {6, 4}}});
  a.outputs = {"w", "row", "rows"};
  std::vector<float> want = iota(24);
  for (int r = 1; r < 3; ++r) for (int c = 2; c < 5; ++c) want[static_cast<std::size_t>(r * 6 + c)] = 7;
  for (float& v : want) v *= 2;
  const auto out = run(a, {f32({4, 6}, iota(24))});
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0], want);
  EXPECT_EQ(out[1], std::vector<float>(want.begin() + 6, want.begin() + 12));
  EXPECT_EQ(out[2], std::vector<float>(want.begin() + 6, want.begin() + 18));
}

// w = x.clone(); a, b = w.split(2); r0, r1 = a.unbind(0); r1.add_(10); b.copy_(y);
// w.view(24)[:5].zero_(); return w, r0
TEST(ImportInPlace, WritesThroughSplitUnbindAndViewAndACopyIntoASplitPart) {
  Archive a;
  a.input("x", {4, 6});
  a.input("y", {6});
  a.node("aten.clone.default", {{"self", t("x")}}, {{"w", {4, 6}}});
  a.node("aten.split.Tensor", {{"self", t("w")}, {"split_size", i(2)}, {"dim", i(0)}}, {{"top", {2, 6}}, {"bottom", {2, 6}}});
  a.node("aten.unbind.int", {{"self", t("top")}, {"dim", i(0)}}, {{"r0", {6}}, {"r1", {6}}});
  a.node("aten.add_.Tensor", {{"self", t("r1")}, {"other", i(10)}}, {{"add_", {6}}});
  a.node("aten.copy_.default", {{"self", t("bottom")}, {"src", t("y")}}, {{"copy_", {2, 6}}});
  a.node("aten.view.default", {{"self", t("w")}, {"size", ints({24})}}, {{"flat", {24}}});
  a.node("aten.slice.Tensor", {{"self", t("flat")}, {"dim", i(0)}, {"start", i(0)}, {"end", i(5)}}, {{"head", {5}}});
  a.node("aten.zero_.default", {{"self", t("head")}}, {{"zero_", {5}}});
  a.outputs = {"w", "r0"};
  const std::vector<float> y = {-1, -2, -3, -4, -5, -6};
  std::vector<float> want = iota(24);
  for (int c = 0; c < 6; ++c) want[static_cast<std::size_t>(6 + c)] += 10;
  for (int r = 2; r < 4; ++r) for (int c = 0; c < 6; ++c) want[static_cast<std::size_t>(r * 6 + c)] = y[static_cast<std::size_t>(c)];
  for (int k = 0; k < 5; ++k) want[static_cast<std::size_t>(k)] = 0;
  const auto out = run(a, {f32({4, 6}, iota(24)), f32({6}, y)});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0], want);
  EXPECT_EQ(out[1], std::vector<float>(want.begin(), want.begin() + 6));
}

TEST(ImportInPlace, WritesKilnCannotExpressAreRefusedNamingTheOpTensorAndLine) {
  {
    Archive a;  // w.as_strided([4], [5]).fill_(0): the diagonal
    a.input("x", {4, 4});
    a.node("aten.clone.default", {{"self", t("x")}}, {{"w", {4, 4}}});
    a.node("aten.as_strided.default", {{"self", t("w")}, {"size", ints({4})}, {"stride", ints({5})}}, {{"diag", {4}}});
    a.node("aten.fill_.Scalar", {{"self", t("diag")}, {"value", f(0.0)}}, {{"fill_", {4}}}, 12);
    a.outputs = {"w"};
    expect_refused(a, {"[aten.fill_.Scalar] writes in place to 'diag' (test.py:12), 'diag' is a view of 'w' made by aten.as_strided.default "
                       "(node 'diag'), which Kiln cannot write back through; export the core IR"});
  }
  {
    Archive a;  // w.permute(1, 0).reshape(16).add_(1): reshape of a non-contiguous view may copy
    a.input("x", {4, 4});
    a.node("aten.clone.default", {{"self", t("x")}}, {{"w", {4, 4}}});
    a.node("aten.permute.default", {{"self", t("w")}, {"dims", ints({1, 0})}}, {{"p", {4, 4}}});
    a.node("aten.reshape.default", {{"self", t("p")}, {"shape", ints({16})}}, {{"flat", {16}}});
    a.node("aten.add_.Tensor", {{"self", t("flat")}, {"other", i(1)}}, {{"add_", {16}}}, 9);
    a.outputs = {"w"};
    expect_refused(a, {"[aten.add_.Tensor] writes in place to 'flat' (test.py:9), 'flat' is a view of 'p' made by aten.reshape.default",
                       "PyTorch may have copied it"});
  }
  {
    Archive a;  // w[::2].fill_(1): a strided slice
    a.input("x", {4, 4});
    a.node("aten.clone.default", {{"self", t("x")}}, {{"w", {4, 4}}});
    a.node("aten.slice.Tensor", {{"self", t("w")}, {"dim", i(0)}, {"start", i(0)}, {"end", i(4)}, {"step", i(2)}}, {{"even", {2, 4}}});
    a.node("aten.fill_.Scalar", {{"self", t("even")}, {"value", f(1.0)}}, {{"fill_", {2, 4}}}, 5);
    a.outputs = {"w"};
    expect_refused(a, {"[aten.fill_.Scalar] writes in place to 'even' (test.py:5)", "made by aten.slice.Tensor", "cannot write back through"});
  }
  {
    Archive a;  // x[0].fill_(1) on the user's input
    a.input("x", {4, 4});
    a.node("aten.select.int", {{"self", t("x")}, {"dim", i(0)}, {"index", i(0)}}, {{"first", {4}}});
    a.node("aten.fill_.Scalar", {{"self", t("first")}, {"value", f(1.0)}}, {{"fill_", {4}}}, 3);
    a.outputs = {"fill_"};
    expect_refused(a, {"input 'x' is mutated in place by aten.fill_.Scalar (node 'fill_') (test.py:3): Kiln never writes into the caller's inputs"});
  }
}

// A reshape of a contiguous tensor is a view: writing through it reaches the base.
TEST(ImportInPlace, ReshapeOfAContiguousTensorIsAView) {
  Archive a;
  a.input("x", {2, 3});
  a.node("aten.zeros.default", {{"size", ints({2, 3})}}, {{"z", {2, 3}}});
  a.node("aten.reshape.default", {{"self", t("z")}, {"shape", ints({6})}}, {{"flat", {6}}});
  a.node("aten.copy_.default", {{"self", t("flat")}, {"src", t("y")}}, {{"copy_", {6}}});
  a.node("aten.add.Tensor", {{"self", t("z")}, {"other", t("x")}}, {{"sum", {2, 3}}});
  a.input("y", {6});
  a.outputs = {"sum"};
  const auto out = run(a, {f32({2, 3}, iota(6)), f32({6}, {1, 1, 1, 1, 1, 1})});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0], (std::vector<float>{1, 2, 3, 4, 5, 6}));
}

}  // namespace
}  // namespace kiln

// 3-D convolution and pooling and 1-D / 3-D transposed convolution (aten_volume.cpp: by
// decomposition into 2-D ops), in one-node archives written by the test, against naive
// references computed here for random inputs and odd shapes.
#include <gtest/gtest.h>
#include <zip.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "kiln/export/import_pt2.h"
#include "one_node_testutil.h"
#include "kiln/export/serialize.h"
#include "kiln/runtime/bundle.h"
#include "kiln/runtime/program.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Dims = std::vector<std::int64_t>;

json meta(const Dims& sizes) {
  json s = json::array();
  for (auto v : sizes) s.push_back({{"as_int", v}});
  return {{"dtype", 7}, {"sizes", s}, {"requires_grad", false}, {"strides", json::array()}, {"layout", 7}};
}

json tensor_arg(const std::string& name) { return {{"as_tensor", {{"name", name}}}}; }
json ints(const Dims& v) { return {{"as_ints", v}}; }
json integer(std::int64_t v) { return {{"as_int", v}}; }
json boolean(bool v) { return {{"as_bool", v}}; }

// One aten node over f32 user inputs; its outputs `outputs` (name, shape), of which the
// graph returns `returned`.
struct VolumeOp {
  std::string target;
  std::vector<std::pair<std::string, json>> args;
  std::vector<std::pair<std::string, Dims>> inputs;
  std::vector<std::pair<std::string, Dims>> outputs;
  std::vector<std::string> returned;
  std::map<std::string, json> metas;  // tensor meta overrides (symbolic sizes)
  json ranges = json::object();
};

std::string write_archive(const VolumeOp& op, const std::string& path) {
  testing::OneNodeArchive a{op.target, op.args};
  for (const auto& [name, shape] : op.inputs) a.inputs.emplace_back(name, meta(shape));
  for (const auto& [name, shape] : op.outputs) {
    a.outputs.emplace_back(name, meta(shape));
    if (std::find(op.returned.begin(), op.returned.end(), name) == op.returned.end()) a.not_returned.insert(name);
  }
  a.metas = op.metas, a.ranges = op.ranges;
  a.stack_trace = "File \"video.py\", line 3, in forward";
  return testing::write_one_node_archive(a, path);
}

struct Tensor {
  Dims shape;
  std::vector<float> v;
  std::int64_t numel() const {
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
  }
};

Tensor random_tensor(Dims shape, std::mt19937& rng) {
  Tensor t{std::move(shape), {}};
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  t.v.resize(static_cast<std::size_t>(t.numel()));
  for (float& f : t.v) f = u(rng);
  return t;
}

Result<ExportedProgram> import_op(const VolumeOp& op) {
  const fs::path p = fs::temp_directory_path() / ("kiln_volume_" + std::to_string(::getpid()) + ".pt2");
  auto ep = import_pt2(write_archive(op, p.string()));
  fs::remove(p);
  return ep;
}

// Imports and runs `op` on `inputs`; output 0.
Tensor run(const VolumeOp& op, const std::vector<Tensor>& inputs) {
  auto ep = import_op(op);
  const auto program = testing::load_imported(ep);
  if (program == nullptr) return {};
  std::vector<HostValue> in;
  for (const Tensor& t : inputs) {
    HostTensor h{DType::kF32, t.shape, {}};
    h.data.resize(t.v.size() * 4);
    std::memcpy(h.data.data(), t.v.data(), h.data.size());
    in.push_back(HostValue::of(std::move(h)));
  }
  Session s(*program);
  auto r = s.run(in);
  EXPECT_TRUE(r.ok()) << r.status().message();
  if (!r.ok()) return {};
  const HostTensor& h = r->outputs[0].tensor;
  Tensor out{h.shape, std::vector<float>(h.data.size() / 4)};
  std::memcpy(out.v.data(), h.data.data(), h.data.size());
  return out;
}

void expect_near(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.shape, want.shape) << what;
  ASSERT_EQ(got.v.size(), want.v.size()) << what;
  for (std::size_t i = 0; i < want.v.size(); ++i) {
    if (std::isinf(want.v[i])) EXPECT_EQ(got.v[i], want.v[i]) << what << " element " << i;
    else EXPECT_NEAR(got.v[i], want.v[i], 1e-4 + 1e-4 * std::abs(want.v[i])) << what << " element " << i;
  }
}

// Row-major offset of an index into `shape`.
std::size_t at(const Dims& shape, std::initializer_list<std::int64_t> idx) {
  std::int64_t off = 0;
  std::size_t d = 0;
  for (std::int64_t i : idx) off = off * shape[d++] + i;
  return static_cast<std::size_t>(off);
}

struct ConvCase {
  std::int64_t n, c, o, groups;
  Dims in, kernel, stride, padding, dilation, output_padding;
  bool bias;
};

Dims conv_out(const ConvCase& k) {
  Dims out{k.n, k.o};
  for (std::size_t i = 0; i < 3; ++i) out.push_back((k.in[i] + 2 * k.padding[i] - k.dilation[i] * (k.kernel[i] - 1) - 1) / k.stride[i] + 1);
  return out;
}

Dims conv_transpose_out(const ConvCase& k) {
  Dims out{k.n, k.o};
  for (std::size_t i = 0; i < 3; ++i) {
    out.push_back((k.in[i] - 1) * k.stride[i] - 2 * k.padding[i] + k.dilation[i] * (k.kernel[i] - 1) + k.output_padding[i] + 1);
  }
  return out;
}

// out[n, o, p] = b[o] + sum x[n, g*cg + ci, p*s - pad + k*dil] * w[o, ci, k].
Tensor conv3d_reference(const ConvCase& k, const Tensor& x, const Tensor& w, const Tensor* b) {
  Tensor y{conv_out(k), {}};
  y.v.assign(static_cast<std::size_t>(y.numel()), 0.0f);
  const std::int64_t cg = k.c / k.groups, og = k.o / k.groups;
  for (std::int64_t n = 0; n < k.n; ++n)
    for (std::int64_t o = 0; o < k.o; ++o)
      for (std::int64_t a = 0; a < y.shape[2]; ++a)
        for (std::int64_t bb = 0; bb < y.shape[3]; ++bb)
          for (std::int64_t cc = 0; cc < y.shape[4]; ++cc) {
            double s = b ? b->v[static_cast<std::size_t>(o)] : 0.0;
            const std::int64_t g = o / og;
            for (std::int64_t ci = 0; ci < cg; ++ci)
              for (std::int64_t i = 0; i < k.kernel[0]; ++i)
                for (std::int64_t j = 0; j < k.kernel[1]; ++j)
                  for (std::int64_t l = 0; l < k.kernel[2]; ++l) {
                    const std::int64_t d = a * k.stride[0] - k.padding[0] + i * k.dilation[0];
                    const std::int64_t h = bb * k.stride[1] - k.padding[1] + j * k.dilation[1];
                    const std::int64_t ww = cc * k.stride[2] - k.padding[2] + l * k.dilation[2];
                    if (d < 0 || d >= k.in[0] || h < 0 || h >= k.in[1] || ww < 0 || ww >= k.in[2]) continue;
                    s += static_cast<double>(x.v[at(x.shape, {n, g * cg + ci, d, h, ww})]) * w.v[at(w.shape, {o, ci, i, j, l})];
                  }
            y.v[at(y.shape, {n, o, a, bb, cc})] = static_cast<float>(s);
          }
  return y;
}

// out[n, g*og + oo, p*s - pad + k*dil] += x[n, c, p] * w[c, oo, k] (c in group g).
Tensor conv_transpose3d_reference(const ConvCase& k, const Tensor& x, const Tensor& w, const Tensor* b) {
  Tensor y{conv_transpose_out(k), {}};
  std::vector<double> acc(static_cast<std::size_t>(y.numel()), 0.0);
  const std::int64_t cg = k.c / k.groups, og = k.o / k.groups;
  for (std::int64_t n = 0; n < k.n; ++n)
    for (std::int64_t c = 0; c < k.c; ++c)
      for (std::int64_t a = 0; a < k.in[0]; ++a)
        for (std::int64_t bb = 0; bb < k.in[1]; ++bb)
          for (std::int64_t cc = 0; cc < k.in[2]; ++cc) {
            const double xv = x.v[at(x.shape, {n, c, a, bb, cc})];
            const std::int64_t g = c / cg;
            for (std::int64_t oo = 0; oo < og; ++oo)
              for (std::int64_t i = 0; i < k.kernel[0]; ++i)
                for (std::int64_t j = 0; j < k.kernel[1]; ++j)
                  for (std::int64_t l = 0; l < k.kernel[2]; ++l) {
                    const std::int64_t d = a * k.stride[0] - k.padding[0] + i * k.dilation[0];
                    const std::int64_t h = bb * k.stride[1] - k.padding[1] + j * k.dilation[1];
                    const std::int64_t ww = cc * k.stride[2] - k.padding[2] + l * k.dilation[2];
                    if (d < 0 || d >= y.shape[2] || h < 0 || h >= y.shape[3] || ww < 0 || ww >= y.shape[4]) continue;
                    acc[at(y.shape, {n, g * og + oo, d, h, ww})] += xv * w.v[at(w.shape, {c, oo, i, j, l})];
                  }
          }
  y.v.resize(acc.size());
  const std::int64_t plane = y.shape[2] * y.shape[3] * y.shape[4];
  for (std::size_t i = 0; i < acc.size(); ++i) {
    const std::int64_t o = (static_cast<std::int64_t>(i) / plane) % k.o;
    y.v[i] = static_cast<float>(acc[i] + (b ? b->v[static_cast<std::size_t>(o)] : 0.0));
  }
  return y;
}

TEST(ImportVolume, Conv3dMatchesANaiveReference) {
  std::mt19937 rng(3);
  const std::vector<ConvCase> cases{
      {1, 3, 4, 1, {4, 9, 9}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, {0, 0, 0}, true},    // nn.Conv3d(3, 4, 3, padding=1)
      {2, 4, 6, 2, {5, 6, 7}, {3, 2, 3}, {2, 1, 2}, {1, 0, 1}, {1, 2, 1}, {0, 0, 0}, true},    // groups, stride, dilation, odd sizes
      {1, 4, 6, 1, {5, 9, 8}, {1, 3, 3}, {1, 2, 2}, {0, 1, 1}, {1, 1, 1}, {0, 0, 0}, false},   // kD = 1 (r2plus1d's spatial conv)
      {1, 3, 5, 1, {7, 4, 5}, {3, 1, 1}, {2, 1, 1}, {1, 0, 0}, {2, 1, 1}, {0, 0, 0}, true},    // temporal only, dilated, strided
      {1, 6, 6, 6, {4, 5, 5}, {2, 3, 3}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, {0, 0, 0}, true},    // depthwise, even kD with padding
      {2, 3, 4, 1, {1, 4, 4}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, {0, 0, 0}, true},    // one frame: only the middle tap runs
      {1, 2, 3, 1, {2, 3, 3}, {3, 1, 3}, {1, 1, 1}, {2, 0, 1}, {1, 1, 1}, {0, 0, 0}, true},    // no tap covers every frame
      {1, 2, 3, 1, {1, 3, 3}, {1, 3, 3}, {2, 1, 1}, {1, 1, 1}, {1, 1, 1}, {0, 0, 0}, true},    // every output frame is padding
      {1, 4, 4, 2, {6, 3, 4}, {3, 1, 1}, {1, 1, 1}, {2, 0, 0}, {2, 1, 1}, {0, 0, 0}, false},   // temporal, grouped, no bias
  };
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const ConvCase& k = cases[i];
    const Dims xs{k.n, k.c, k.in[0], k.in[1], k.in[2]}, ws{k.o, k.c / k.groups, k.kernel[0], k.kernel[1], k.kernel[2]};
    const Tensor x = random_tensor(xs, rng), w = random_tensor(ws, rng), b = random_tensor({k.o}, rng);
    const Tensor want = conv3d_reference(k, x, w, k.bias ? &b : nullptr);
    // The core IR's convolution and the training IR's conv3d.
    VolumeOp conv{"aten.convolution.default",
                  {{"input", tensor_arg("x")}, {"weight", tensor_arg("w")}, {"stride", ints(k.stride)}, {"padding", ints(k.padding)},
                   {"dilation", ints(k.dilation)}, {"transposed", boolean(false)}, {"output_padding", ints({0, 0, 0})},
                   {"groups", integer(k.groups)}},
                  {{"x", xs}, {"w", ws}},
                  {{"y", want.shape}},
                  {"y"}};
    VolumeOp conv3d{"aten.conv3d.default",
                    {{"input", tensor_arg("x")}, {"weight", tensor_arg("w")}, {"stride", ints(k.stride)}, {"padding", ints(k.padding)},
                     {"dilation", ints(k.dilation)}, {"groups", integer(k.groups)}},
                    {{"x", xs}, {"w", ws}},
                    {{"y", want.shape}},
                    {"y"}};
    std::vector<Tensor> in{x, w};
    if (k.bias) {
      for (VolumeOp* op : {&conv, &conv3d}) {
        op->args.insert(op->args.begin() + 2, {"bias", tensor_arg("b")});
        op->inputs.push_back({"b", {k.o}});
      }
      in.push_back(b);
    }
    expect_near(run(conv, in), want, "convolution case " + std::to_string(i));
    expect_near(run(conv3d, in), want, "conv3d case " + std::to_string(i));
  }
}

TEST(ImportVolume, UnbatchedConv3dAndSamePadding) {
  std::mt19937 rng(5);
  // conv3d(x [C, D, H, W], padding="same") with an even kernel: the odd pad goes at the end.
  const Tensor x = random_tensor({1, 2, 4, 5, 6}, rng), w = random_tensor({3, 2, 2, 3, 4}, rng);
  // "same": total pads (1, 2, 3) -> lo (0, 1, 1), hi (1, 1, 2); the reference pads the input by hand.
  Tensor xp{{1, 2, 5, 7, 9}, {}};
  xp.v.assign(static_cast<std::size_t>(xp.numel()), 0.0f);
  for (std::int64_t c = 0; c < 2; ++c)
    for (std::int64_t d = 0; d < 4; ++d)
      for (std::int64_t h = 0; h < 5; ++h)
        for (std::int64_t ww = 0; ww < 6; ++ww) xp.v[at(xp.shape, {0, c, d, h + 1, ww + 1})] = x.v[at(x.shape, {0, c, d, h, ww})];
  const ConvCase kp{1, 2, 3, 1, {5, 7, 9}, {2, 3, 4}, {1, 1, 1}, {0, 0, 0}, {1, 1, 1}, {0, 0, 0}, false};
  Tensor want = conv3d_reference(kp, xp, w, nullptr);
  ASSERT_EQ(want.shape, (Dims{1, 3, 4, 5, 6}));
  want.shape.erase(want.shape.begin());
  Tensor x4 = x;
  x4.shape.erase(x4.shape.begin());
  VolumeOp op{"aten.conv3d.padding",
              {{"input", tensor_arg("x")}, {"weight", tensor_arg("w")}, {"padding", {{"as_string", "same"}}}},
              {{"x", x4.shape}, {"w", w.shape}},
              {{"y", want.shape}},
              {"y"}};
  expect_near(run(op, {x4, w}), want, "conv3d padding='same'");
  // Unbatched through the core IR's convolution.
  const ConvCase k2{1, 2, 3, 1, {4, 5, 6}, {3, 3, 3}, {1, 2, 1}, {1, 1, 0}, {1, 1, 1}, {0, 0, 0}, false};
  const Tensor w2 = random_tensor({3, 2, 3, 3, 3}, rng);
  Tensor want2 = conv3d_reference(k2, x, w2, nullptr);
  want2.shape.erase(want2.shape.begin());
  VolumeOp conv{"aten.convolution.default",
                {{"input", tensor_arg("x")}, {"weight", tensor_arg("w")}, {"stride", ints(k2.stride)}, {"padding", ints(k2.padding)},
                 {"dilation", ints({1, 1, 1})}, {"transposed", boolean(false)}, {"output_padding", ints({0, 0, 0})}, {"groups", integer(1)}},
                {{"x", x4.shape}, {"w", w2.shape}},
                {{"y", want2.shape}},
                {"y"}};
  expect_near(run(conv, {x4, w2}), want2, "unbatched convolution");
}

// A symbolic batch and depth: the frames fold into the conv2d batch as N * D_out, every
// tap over all of them (a temporal conv: one conv2d with a [kD, 1] kernel).
TEST(ImportVolume, Conv3dWithSymbolicBatchAndDepth) {
  std::mt19937 rng(23);
  for (const ConvCase& k : {ConvCase{2, 3, 4, 1, {6, 5, 5}, {3, 3, 3}, {2, 1, 1}, {1, 1, 1}, {1, 1, 1}, {0, 0, 0}, true},
                            ConvCase{2, 3, 4, 1, {6, 5, 5}, {3, 1, 1}, {2, 1, 1}, {1, 0, 0}, {1, 1, 1}, {0, 0, 0}, true}}) {
    const Dims xs{2, 3, 6, 5, 5}, ws{4, 3, k.kernel[0], k.kernel[1], k.kernel[2]};
    const Tensor x = random_tensor(xs, rng), w = random_tensor(ws, rng), b = random_tensor({4}, rng);
    const Tensor want = conv3d_reference(k, x, w, &b);
    VolumeOp op{"aten.conv3d.default",
                {{"input", tensor_arg("x")}, {"weight", tensor_arg("w")}, {"bias", tensor_arg("b")}, {"stride", ints(k.stride)},
                 {"padding", ints(k.padding)}},
                {{"x", xs}, {"w", ws}, {"b", {4}}},
                {{"y", want.shape}},
                {"y"}};
    const json s0 = {{"as_expr", {{"expr_str", "Symbol('s0', positive=True, integer=True)"}, {"hint", {{"as_int", 2}}}}}};
    const json s1 = {{"as_expr", {{"expr_str", "Symbol('s1', positive=True, integer=True)"}, {"hint", {{"as_int", 6}}}}}};
    op.metas["x"] = meta(xs);
    op.metas["x"]["sizes"][0] = s0;
    op.metas["x"]["sizes"][2] = s1;
    op.metas["y"] = meta(want.shape);
    op.metas["y"]["sizes"][0] = s0;
    // (s1 + 2 - 3) // 2 + 1 = (s1 + 1) // 2
    op.metas["y"]["sizes"][2] = {{"as_expr", {{"expr_str", "FloorDiv(Add(Symbol('s1', positive=True, integer=True), Integer(1)), Integer(2))"}}}};
    op.ranges["s0"] = {{"min_val", 1}, {"max_val", 16}};
    op.ranges["s1"] = {{"min_val", 2}, {"max_val", 64}};
    expect_near(run(op, {x, w, b}), want, "symbolic conv3d");
    // Another batch and depth through the same bundle.
    ConvCase k2 = k;
    k2.n = 1;
    k2.in = {3, 5, 5};
    const Tensor x2 = random_tensor({1, 3, 3, 5, 5}, rng);
    auto ep = import_op(op);
    ASSERT_TRUE(ep.ok()) << ep.status().message();
    auto bytes = serialize_bundle(ep->program());
    ASSERT_TRUE(bytes.ok());
    auto program = Program::load(std::move(Bundle::from_bytes(*bytes)).value());
    ASSERT_TRUE(program.ok()) << program.status().message();
    std::vector<HostValue> in;
    for (const Tensor* t : {&x2, &w, &b}) {
      HostTensor h{DType::kF32, t->shape, {}};
      h.data.resize(t->v.size() * 4);
      std::memcpy(h.data.data(), t->v.data(), h.data.size());
      in.push_back(HostValue::of(std::move(h)));
    }
    Session s(**program);
    auto r = s.run(in);
    ASSERT_TRUE(r.ok()) << r.status().message();
    const HostTensor& h = r->outputs[0].tensor;
    Tensor got{h.shape, std::vector<float>(h.data.size() / 4)};
    std::memcpy(got.v.data(), h.data.data(), h.data.size());
    expect_near(got, conv3d_reference(k2, x2, w, &b), "symbolic conv3d, another size");
  }
}

TEST(ImportVolume, ConvTranspose3dMatchesANaiveReference) {
  std::mt19937 rng(7);
  const std::vector<ConvCase> cases{
      {1, 4, 2, 1, {3, 5, 5}, {3, 3, 3}, {2, 2, 2}, {0, 0, 0}, {1, 1, 1}, {0, 0, 0}, true},   // nn.ConvTranspose3d(4, 2, 3, stride=2)
      {2, 4, 6, 2, {3, 4, 3}, {3, 2, 3}, {2, 1, 3}, {1, 0, 1}, {1, 1, 1}, {1, 0, 2}, true},   // groups, output_padding
      {1, 3, 2, 1, {4, 3, 3}, {2, 3, 1}, {1, 2, 1}, {0, 1, 0}, {2, 1, 1}, {0, 1, 0}, false},  // temporal dilation, stride 1
  };
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const ConvCase& k = cases[i];
    const Dims xs{k.n, k.c, k.in[0], k.in[1], k.in[2]}, ws{k.c, k.o / k.groups, k.kernel[0], k.kernel[1], k.kernel[2]};
    const Tensor x = random_tensor(xs, rng), w = random_tensor(ws, rng), b = random_tensor({k.o}, rng);
    const Tensor want = conv_transpose3d_reference(k, x, w, k.bias ? &b : nullptr);
    VolumeOp conv{"aten.convolution.default",
                  {{"input", tensor_arg("x")}, {"weight", tensor_arg("w")}, {"stride", ints(k.stride)}, {"padding", ints(k.padding)},
                   {"dilation", ints(k.dilation)}, {"transposed", boolean(true)}, {"output_padding", ints(k.output_padding)},
                   {"groups", integer(k.groups)}},
                  {{"x", xs}, {"w", ws}},
                  {{"y", want.shape}},
                  {"y"}};
    VolumeOp t3{"aten.conv_transpose3d.input",
                {{"input", tensor_arg("x")}, {"weight", tensor_arg("w")}, {"stride", ints(k.stride)}, {"padding", ints(k.padding)},
                 {"output_padding", ints(k.output_padding)}, {"groups", integer(k.groups)}, {"dilation", ints(k.dilation)}},
                {{"x", xs}, {"w", ws}},
                {{"y", want.shape}},
                {"y"}};
    std::vector<Tensor> in{x, w};
    if (k.bias) {
      for (VolumeOp* op : {&conv, &t3}) {
        op->args.insert(op->args.begin() + 2, {"bias", tensor_arg("b")});
        op->inputs.push_back({"b", {k.o}});
      }
      in.push_back(b);
    }
    expect_near(run(conv, in), want, "convolution case " + std::to_string(i));
    expect_near(run(t3, in), want, "conv_transpose3d case " + std::to_string(i));
  }
}

TEST(ImportVolume, ConvTranspose1dIsTheHeightOneCase) {
  std::mt19937 rng(11);
  // conv_transpose1d(x [2, 4, 9], w [4, 3, 3], stride 2, padding 1, output_padding 1, groups 2, dilation 2)
  // against the 3-D reference with unit D and H.
  const ConvCase k{2, 4, 6, 2, {1, 1, 9}, {1, 1, 3}, {1, 1, 2}, {0, 0, 1}, {1, 1, 2}, {0, 0, 1}, true};
  const Tensor x = random_tensor({2, 4, 1, 1, 9}, rng), w = random_tensor({4, 3, 1, 1, 3}, rng), b = random_tensor({6}, rng);
  Tensor want = conv_transpose3d_reference(k, x, w, &b);
  want.shape = {2, 6, want.shape[4]};
  const Tensor x3{{2, 4, 9}, x.v}, w3{{4, 3, 3}, w.v};
  VolumeOp op{"aten.conv_transpose1d.default",
              {{"input", tensor_arg("x")}, {"weight", tensor_arg("w")}, {"bias", tensor_arg("b")}, {"stride", ints({2})}, {"padding", ints({1})},
               {"output_padding", ints({1})}, {"groups", integer(2)}, {"dilation", ints({2})}},
              {{"x", x3.shape}, {"w", w3.shape}, {"b", {6}}},
              {{"y", want.shape}},
              {"y"}};
  expect_near(run(op, {x3, w3, b}), want, "conv_transpose1d");
  // Unbatched [C, L] through the core IR's convolution.
  const Tensor x2{{4, 9}, std::vector<float>(x.v.begin(), x.v.begin() + 36)};
  Tensor want2{{6, want.shape[2]}, std::vector<float>(want.v.begin(), want.v.begin() + 6 * want.shape[2])};
  VolumeOp conv{"aten.convolution.default",
                {{"input", tensor_arg("x")}, {"weight", tensor_arg("w")}, {"bias", tensor_arg("b")}, {"stride", ints({2})}, {"padding", ints({1})},
                 {"dilation", ints({2})}, {"transposed", boolean(true)}, {"output_padding", ints({1})}, {"groups", integer(2)}},
                {{"x", x2.shape}, {"w", w3.shape}, {"b", {6}}},
                {{"y", want2.shape}},
                {"y"}};
  expect_near(run(conv, {x2, w3, b}), want2, "unbatched conv_transpose1d");
}

// ---- pooling --------------------------------------------------------------------------

struct PoolCase {
  Dims in, kernel, stride, padding, dilation;
  bool ceil = false, include_pad = true;
  std::int64_t divisor = 0;  // divisor_override; 0: none
};

std::int64_t pooled(std::int64_t in, std::int64_t k, std::int64_t pad, std::int64_t stride, std::int64_t dil, bool ceil) {
  const std::int64_t span = in + 2 * pad - dil * (k - 1) - 1;
  std::int64_t o = (span + (ceil ? stride - 1 : 0)) / stride + 1;
  if (ceil && (o - 1) * stride >= in + pad) --o;
  return o;
}

Dims pool_out(const PoolCase& p) {
  Dims out{p.in[0], p.in[1]};
  for (std::size_t i = 0; i < 3; ++i) out.push_back(pooled(p.in[2 + i], p.kernel[i], p.padding[i], p.stride[i], p.dilation[i], p.ceil));
  return out;
}

Tensor max_pool_reference(const PoolCase& p, const Tensor& x) {
  Tensor y{pool_out(p), {}};
  y.v.resize(static_cast<std::size_t>(y.numel()));
  for (std::int64_t n = 0; n < y.shape[0]; ++n)
    for (std::int64_t c = 0; c < y.shape[1]; ++c)
      for (std::int64_t a = 0; a < y.shape[2]; ++a)
        for (std::int64_t b = 0; b < y.shape[3]; ++b)
          for (std::int64_t e = 0; e < y.shape[4]; ++e) {
            float m = -std::numeric_limits<float>::infinity();
            for (std::int64_t i = 0; i < p.kernel[0]; ++i)
              for (std::int64_t j = 0; j < p.kernel[1]; ++j)
                for (std::int64_t l = 0; l < p.kernel[2]; ++l) {
                  const std::int64_t d = a * p.stride[0] - p.padding[0] + i * p.dilation[0];
                  const std::int64_t h = b * p.stride[1] - p.padding[1] + j * p.dilation[1];
                  const std::int64_t w = e * p.stride[2] - p.padding[2] + l * p.dilation[2];
                  if (d < 0 || d >= p.in[2] || h < 0 || h >= p.in[3] || w < 0 || w >= p.in[4]) continue;
                  m = std::max(m, x.v[at(x.shape, {n, c, d, h, w})]);
                }
            y.v[at(y.shape, {n, c, a, b, e})] = m;
          }
  return y;
}

// PyTorch's avg_pool3d: the window clipped to the padded input gives count_include_pad's
// divisor, clipped to the input the summed range (and the other divisor).
Tensor avg_pool_reference(const PoolCase& p, const Tensor& x) {
  Tensor y{pool_out(p), {}};
  y.v.resize(static_cast<std::size_t>(y.numel()));
  for (std::int64_t n = 0; n < y.shape[0]; ++n)
    for (std::int64_t c = 0; c < y.shape[1]; ++c)
      for (std::int64_t a = 0; a < y.shape[2]; ++a)
        for (std::int64_t b = 0; b < y.shape[3]; ++b)
          for (std::int64_t e = 0; e < y.shape[4]; ++e) {
            std::int64_t lo[3], hi[3], pool = 1, count = 1;
            const std::int64_t o[3] = {a, b, e};
            for (int i = 0; i < 3; ++i) {
              const std::int64_t start = o[i] * p.stride[i] - p.padding[i];
              const std::int64_t end = std::min(start + p.kernel[i], p.in[2 + i] + p.padding[i]);
              pool *= end - start;
              lo[i] = std::max<std::int64_t>(start, 0);
              hi[i] = std::min(end, p.in[2 + i]);
              count *= hi[i] - lo[i];
            }
            double s = 0;
            for (std::int64_t d = lo[0]; d < hi[0]; ++d)
              for (std::int64_t h = lo[1]; h < hi[1]; ++h)
                for (std::int64_t w = lo[2]; w < hi[2]; ++w) s += x.v[at(x.shape, {n, c, d, h, w})];
            const double div = p.divisor ? static_cast<double>(p.divisor) : static_cast<double>(p.include_pad ? pool : count);
            y.v[at(y.shape, {n, c, a, b, e})] = static_cast<float>(s / div);
          }
  return y;
}

TEST(ImportVolume, MaxPool3dWithPaddingDilationAndCeilMode) {
  std::mt19937 rng(13);
  const std::vector<PoolCase> cases{
      {{1, 3, 5, 9, 9}, {3, 3, 3}, {2, 2, 2}, {1, 1, 1}, {1, 1, 1}},              // F.max_pool3d(x, 3, 2, 1)
      {{2, 2, 7, 6, 5}, {2, 3, 2}, {2, 1, 2}, {1, 1, 0}, {1, 1, 1}, true},        // ceil_mode
      {{1, 2, 8, 7, 7}, {3, 2, 2}, {1, 2, 2}, {0, 0, 1}, {2, 2, 1}, true},        // dilation
      {{1, 2, 6, 4, 4}, {3, 1, 1}, {3, 1, 1}, {1, 0, 0}, {1, 1, 1}, true},        // depth only (no 2-D pool), ceil
      {{1, 2, 4, 6, 6}, {1, 3, 3}, {1, 2, 2}, {0, 1, 1}, {1, 1, 1}},              // 2-D only (r3d's stem-like)
  };
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const PoolCase& p = cases[i];
    const Tensor x = random_tensor(p.in, rng);
    const Tensor want = max_pool_reference(p, x);
    for (const char* target : {"aten.max_pool3d.default", "aten.max_pool3d_with_indices.default"}) {
      VolumeOp op{target,
                  {{"self", tensor_arg("x")}, {"kernel_size", ints(p.kernel)}, {"stride", ints(p.stride)}, {"padding", ints(p.padding)},
                   {"dilation", ints(p.dilation)}, {"ceil_mode", boolean(p.ceil)}},
                  {{"x", p.in}},
                  {{"y", want.shape}},
                  {"y"}};
      if (std::string(target).find("indices") != std::string::npos) op.outputs.push_back({"idx", want.shape});
      expect_near(run(op, {x}), want, std::string(target) + " case " + std::to_string(i));
    }
  }
  // Default stride (= kernel) and a single kernel size for all three dims.
  const PoolCase p{{1, 2, 4, 4, 4}, {2, 2, 2}, {2, 2, 2}, {0, 0, 0}, {1, 1, 1}};
  const Tensor x = random_tensor(p.in, rng);
  VolumeOp op{"aten.max_pool3d.default", {{"self", tensor_arg("x")}, {"kernel_size", ints({2})}}, {{"x", p.in}}, {{"y", pool_out(p)}}, {"y"}};
  expect_near(run(op, {x}), max_pool_reference(p, x), "default stride");
}

TEST(ImportVolume, AvgPool3dDivisorsMatchPyTorch) {
  std::mt19937 rng(17);
  const std::vector<PoolCase> cases{
      {{1, 3, 4, 8, 8}, {2, 2, 2}, {2, 2, 2}, {0, 0, 0}, {1, 1, 1}},                   // F.avg_pool3d(x, 2)
      {{2, 2, 5, 7, 6}, {3, 3, 2}, {2, 2, 1}, {1, 1, 1}, {1, 1, 1}, false, true},      // padding counted
      {{2, 2, 5, 7, 6}, {3, 3, 2}, {2, 2, 1}, {1, 1, 1}, {1, 1, 1}, false, false},     // padding not counted
      {{1, 2, 6, 7, 7}, {3, 3, 3}, {2, 2, 2}, {1, 1, 1}, {1, 1, 1}, true, true},       // ceil_mode clips the last windows
      {{1, 2, 6, 7, 7}, {3, 3, 3}, {2, 2, 2}, {1, 1, 1}, {1, 1, 1}, true, false},
      {{1, 2, 5, 6, 6}, {2, 3, 3}, {2, 2, 2}, {1, 1, 1}, {1, 1, 1}, false, true, 5},   // divisor_override
      {{1, 2, 6, 7, 7}, {3, 3, 3}, {2, 2, 2}, {1, 1, 1}, {1, 1, 1}, true, false, 7},   // override with ceil_mode
      {{1, 1, 8, 5, 5}, {3, 1, 1}, {1, 1, 1}, {1, 0, 0}, {1, 1, 1}},                   // local_response_norm's form
      {{1, 1, 8, 5, 5}, {3, 1, 1}, {1, 1, 1}, {1, 0, 0}, {1, 1, 1}, false, false, 2},
  };
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const PoolCase& p = cases[i];
    const Tensor x = random_tensor(p.in, rng);
    const Tensor want = avg_pool_reference(p, x);
    VolumeOp op{"aten.avg_pool3d.default",
                {{"self", tensor_arg("x")}, {"kernel_size", ints(p.kernel)}, {"stride", ints(p.stride)}, {"padding", ints(p.padding)},
                 {"ceil_mode", boolean(p.ceil)}, {"count_include_pad", boolean(p.include_pad)}},
                {{"x", p.in}},
                {{"y", want.shape}},
                {"y"}};
    if (p.divisor) op.args.push_back({"divisor_override", integer(p.divisor)});
    expect_near(run(op, {x}), want, "avg_pool3d case " + std::to_string(i));
  }
}

TEST(ImportVolume, AdaptivePool3dWindows) {
  std::mt19937 rng(19);
  struct Case {
    Dims in, out;
  };
  for (const Case& k : std::vector<Case>{{{1, 3, 4, 8, 8}, {1, 1, 1}},
                                         {{1, 3, 4, 8, 8}, {2, 2, 2}},
                                         {{2, 2, 5, 7, 6}, {3, 4, 4}},     // uneven windows along every dim
                                         {{1, 2, 6, 5, 5}, {4, 5, 5}},     // depth only
                                         {{1, 2, 3, 6, 6}, {3, 2, 3}}}) {  // 2-D only
    const Tensor x = random_tensor(k.in, rng);
    Tensor avg{{k.in[0], k.in[1], k.out[0], k.out[1], k.out[2]}, {}}, mx = avg;
    avg.v.resize(static_cast<std::size_t>(avg.numel()));
    mx.v.resize(avg.v.size());
    auto lo = [](std::int64_t i, std::int64_t in, std::int64_t out) { return i * in / out; };
    auto hi = [](std::int64_t i, std::int64_t in, std::int64_t out) { return ((i + 1) * in + out - 1) / out; };
    for (std::int64_t n = 0; n < k.in[0]; ++n)
      for (std::int64_t c = 0; c < k.in[1]; ++c)
        for (std::int64_t a = 0; a < k.out[0]; ++a)
          for (std::int64_t b = 0; b < k.out[1]; ++b)
            for (std::int64_t e = 0; e < k.out[2]; ++e) {
              double s = 0;
              float m = -std::numeric_limits<float>::infinity();
              std::int64_t cnt = 0;
              for (std::int64_t d = lo(a, k.in[2], k.out[0]); d < hi(a, k.in[2], k.out[0]); ++d)
                for (std::int64_t h = lo(b, k.in[3], k.out[1]); h < hi(b, k.in[3], k.out[1]); ++h)
                  for (std::int64_t w = lo(e, k.in[4], k.out[2]); w < hi(e, k.in[4], k.out[2]); ++w) {
                    const float v = x.v[at(x.shape, {n, c, d, h, w})];
                    s += v;
                    m = std::max(m, v);
                    ++cnt;
                  }
              avg.v[at(avg.shape, {n, c, a, b, e})] = static_cast<float>(s / static_cast<double>(cnt));
              mx.v[at(mx.shape, {n, c, a, b, e})] = m;
            }
    for (const char* target : {"aten.adaptive_avg_pool3d.default", "aten._adaptive_avg_pool3d.default"}) {
      VolumeOp op{target, {{"self", tensor_arg("x")}, {"output_size", ints(k.out)}}, {{"x", k.in}}, {{"y", avg.shape}}, {"y"}};
      expect_near(run(op, {x}), avg, target);
    }
    VolumeOp op{"aten.adaptive_max_pool3d.default",
                {{"self", tensor_arg("x")}, {"output_size", ints(k.out)}},
                {{"x", k.in}},
                {{"y", mx.shape}, {"idx", mx.shape}},
                {"y"}};
    expect_near(run(op, {x}), mx, "adaptive_max_pool3d");
  }
}

TEST(ImportVolume, PoolingIndicesAreUnsupported) {
  VolumeOp op{"aten.max_pool3d_with_indices.default",
              {{"self", tensor_arg("x")}, {"kernel_size", ints({2, 2, 2})}, {"stride", ints({2, 2, 2})}},
              {{"x", {1, 1, 4, 4, 4}}},
              {{"y", {1, 1, 2, 2, 2}}, {"idx", {1, 1, 2, 2, 2}}},
              {"y", "idx"}};
  auto ep = import_op(op);
  ASSERT_FALSE(ep.ok());
  EXPECT_EQ(ep.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(ep.status().message().find("[aten.max_pool3d_with_indices.default] the indices output of 3-D max pooling (video.py:3)"),
            std::string::npos)
      << ep.status().message();
  VolumeOp amax{"aten.adaptive_max_pool3d.default",
                {{"self", tensor_arg("x")}, {"output_size", ints({2, 2, 2})}},
                {{"x", {1, 1, 4, 4, 4}}},
                {{"y", {1, 1, 2, 2, 2}}, {"idx", {1, 1, 2, 2, 2}}},
                {"idx"}};
  auto ea = import_op(amax);
  ASSERT_FALSE(ea.ok());
  EXPECT_EQ(ea.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(ea.status().message().find("[aten.adaptive_max_pool3d.default] the indices output of 3-D max pooling"), std::string::npos)
      << ea.status().message();
  // A symbolic depth cannot be pooled (the windows along D are laid out at import).
  VolumeOp sym{"aten.max_pool3d.default",
               {{"self", tensor_arg("x")}, {"kernel_size", ints({2, 2, 2})}},
               {{"x", {1, 1, 4, 4, 4}}},
               {{"y", {1, 1, 2, 2, 2}}},
               {"y"}};
  sym.metas["x"] = meta({1, 1, 4, 4, 4});
  sym.metas["x"]["sizes"][2] = {{"as_expr", {{"expr_str", "Symbol('s0', positive=True, integer=True)"}, {"hint", {{"as_int", 4}}}}}};
  sym.metas["y"] = meta({1, 1, 2, 2, 2});
  sym.metas["y"]["sizes"][2] = {{"as_expr", {{"expr_str", "FloorDiv(Symbol('s0', positive=True, integer=True), Integer(2))"}}}};
  sym.ranges["s0"] = {{"min_val", 2}, {"max_val", 64}};
  auto es = import_op(sym);
  ASSERT_FALSE(es.ok());
  EXPECT_EQ(es.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(es.status().message().find("[aten.max_pool3d.default] the pooled depth must be static (video.py:3)"), std::string::npos)
      << es.status().message();
}

}  // namespace
}  // namespace kiln

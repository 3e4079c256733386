// Graph passes run by finalize: common subexpressions are merged and inference batch norms
// fold into the convolutions before them, before dead code goes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>
#include <cstring>

#include "common/exported.h"
#include "kiln/export/ops.h"

namespace kiln {
namespace {

int count_ops(const ir::Graph& g, OpKind op) {
  int n = 0;
  for (const ir::Node& node : g.nodes) n += node.op == op;
  return n;
}

TEST(Passes, CommonSubexpressionsAreMerged) {
  auto ep = export_program(
      [](Tensor x) {
        Tensor a = relu(x);
        Tensor b = relu(x);                   // same op, same input: merged into a
        Tensor c = softmax(add(a, b), 1);
        Tensor d = softmax(add(a, b), 0);     // the add merges, the softmax differs by dim
        return add(c, d);
      },
      {input("x", Tensor::randn({3, 4}), {Dim("n", 1, 64)})});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  const ir::Graph& g = ep->program().graphs[0];
  EXPECT_EQ(count_ops(g, OpKind::Relu), 1);
  EXPECT_EQ(count_ops(g, OpKind::Softmax), 2);
  EXPECT_EQ(count_ops(g, OpKind::Add), 2);
}

TEST(Passes, DataDependentOpsAreNotMerged) {
  auto ep = export_program([](Tensor x) { return cat({nonzero(x), nonzero(x)}, 0); }, {input("x", Tensor::randn({3, 4}))});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  EXPECT_EQ(count_ops(ep->program().graphs[0], OpKind::Nonzero), 2);
}

// Runs the exported program on x and compares with eager execution of the same code; the
// op names of the profiled run go to `ops` when given.
// (atol: 1e-5 unless the graph runs Winograd, whose rounding differs by ~1e-5 of the output's scale.)
void expect_runs_like_eager(const ExportedProgram& ep, const Tensor& x, const Tensor& want,
                            std::vector<std::string>* ops = nullptr, float atol = 1e-5f) {
  const auto program = testing::load_exported(ep);
  ASSERT_NE(program, nullptr);
  Session session(*program, {.profile = ops != nullptr});
  auto r = session.run(std::vector<HostValue>{HostValue::of(testing::host_tensor(x))});
  ASSERT_TRUE(r.ok()) << r.status().message();
  if (ops != nullptr) {
    for (const RunStats::Op& op : session.last_stats().ops) ops->push_back(op.op);
  }
  ASSERT_EQ(r->outputs[0].tensor.shape, want.concrete_shape());
  const auto w = want.to_vector<float>();
  std::vector<float> got(w.size());
  std::memcpy(got.data(), r->outputs[0].tensor.data.data(), got.size() * sizeof(float));
  for (std::size_t i = 0; i < w.size(); ++i) ASSERT_NEAR(got[i], w[i], atol + 1e-5f * std::fabs(w[i])) << "element " << i;
}

struct ConvBnParams {
  Tensor w = Tensor::randn({5, 3, 3, 3}, 1), b = Tensor::randn({5}, 2);
  Tensor gamma = Tensor::randn({5}, 3), beta = Tensor::randn({5}, 4), mean = Tensor::randn({5}, 5);
  Tensor var = abs(Tensor::randn({5}, 6)) + 0.5;
};

TEST(Passes, InferenceBatchNormFoldsIntoTheConvBeforeIt) {
  const ConvBnParams p;
  auto model = [&](Tensor x) {
    Tensor with_bias = batch_norm(conv2d(x, p.w, p.b, {1, 1}, {1, 1}), p.gamma, p.beta, p.mean, p.var, 1e-3);
    Tensor no_bias = batch_norm(conv2d(x, p.w, Tensor(), {2, 2}), p.gamma, p.beta, p.mean, p.var);
    return add(relu(with_bias), sum(no_bias));
  };
  const Tensor x = Tensor::randn({2, 3, 8, 8}, 7);
  auto ep = export_program(model, {input("x", x, {Dim("n", 1, 8)})});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  const ir::Graph& g = ep->program().graphs[0];
  EXPECT_EQ(count_ops(g, OpKind::BatchNorm), 0);
  EXPECT_EQ(count_ops(g, OpKind::Conv2d), 2);
  // Only the folded weights and biases remain: the statistics and the originals are gone.
  ASSERT_EQ(ep->program().constants.size(), 4u);
  for (const ir::ConstantTensor& c : ep->program().constants) EXPECT_NE(c.name.find('+'), std::string::npos) << c.name;
  expect_runs_like_eager(*ep, x, model(x));
}

TEST(Passes, BatchNormStaysWhenTheConvResultIsUsedElsewhere) {
  const ConvBnParams p;
  auto model = [&](Tensor x) {
    Tensor c = conv2d(x, p.w, p.b, {1, 1}, {1, 1});
    return add(batch_norm(c, p.gamma, p.beta, p.mean, p.var), c);
  };
  const Tensor x = Tensor::randn({1, 3, 6, 6}, 8);
  auto ep = export_program(model, {input("x", x)});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  EXPECT_EQ(count_ops(ep->program().graphs[0], OpKind::BatchNorm), 1);
  EXPECT_EQ(ep->program().constants.size(), 6u);
  expect_runs_like_eager(*ep, x, model(x));
}

// A 3-D convolution's decomposition puts reshapes and permutes between the conv2d and the
// batch norm: [N*D, O, H, W] -> [N, D, O, H, W] -> [N, O, D, H, W], or [N, O, D, H*W] ->
// [N, O, D, H, W]. Both carry the conv's channels to the norm's dim 1: it folds. A reshape
// that merges the channels with another dim ([N, O, H, W] -> [N, O*H, W]) does not.
TEST(Passes, BatchNormFoldsThroughReshapesAndPermutesThatKeepTheChannels) {
  const ConvBnParams p;
  auto model = [&](Tensor x) {
    Tensor frames = reshape(conv2d(x, p.w, p.b, {1, 1}, {1, 1}), {2, 3, 5, 8, 8});  // [N*D, O, H, W] -> [N, D, O, H, W]
    Tensor a = batch_norm(permute(frames, {0, 2, 1, 3, 4}), p.gamma, p.beta, p.mean, p.var, 1e-3);
    Tensor planes = conv2d(reshape(x, {2, 3, 3, 64}), p.w, Tensor(), {1, 1}, {1, 1});  // [N, O, D, H*W]
    Tensor b = batch_norm(reshape(planes, {2, 5, 3, 8, 8}), p.gamma, p.beta, p.mean, p.var);
    return add(relu(a), b);
  };
  const Tensor x = Tensor::randn({6, 3, 8, 8}, 9);
  auto ep = export_program(model, {input("x", x)});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  EXPECT_EQ(count_ops(ep->program().graphs[0], OpKind::BatchNorm), 0) << ep->print();
  expect_runs_like_eager(*ep, x, model(x));

  auto merged = [&](Tensor x) {  // channels merged with H: the norm's 40 "channels" are not the conv's 5
    const ConvBnParams q;
    Tensor c = reshape(conv2d(x, q.w, q.b, {1, 1}, {1, 1}), {6, 40, 8});
    const Tensor g = Tensor::randn({40}, 11), bt = Tensor::randn({40}, 12), m = Tensor::randn({40}, 13);
    const Tensor v = abs(Tensor::randn({40}, 14)) + 0.5;
    return batch_norm(c, g, bt, m, v);
  };
  auto ep2 = export_program(merged, {input("x", x)});
  ASSERT_TRUE(ep2.ok()) << ep2.status().message();
  EXPECT_EQ(count_ops(ep2->program().graphs[0], OpKind::BatchNorm), 1);
  expect_runs_like_eager(*ep2, x, merged(x));
}

// A 3x3 "same" convolution with dilation d (>= 64 channels, H and W multiples of d) becomes the
// undilated convolution over the d*d phase images of its input, between reshapes and
// permutes, with the same results; the CPU then runs it with Winograd. Convolutions that do
// not qualify (too few channels, a size that d does not divide, padding other than d, a
// stride) stay dilated.
TEST(Passes, DilatedConvsRunOverPhaseImages) {
  const Tensor w = Tensor::randn({64, 64, 3, 3}, 21) * 0.05, b = Tensor::randn({64}, 22);
  auto model = [&](Tensor x) {
    Tensor a = relu(conv2d(x, w, b, {1, 1}, {2, 2}, {2, 2}));   // d = 2 on 16x16: split
    Tensor c = conv2d(a, w, Tensor(), {1, 1}, {4, 4}, {4, 4});  // d = 4 on 16x16: split
    return add(c, a);
  };
  const Tensor x = Tensor::randn({2, 64, 16, 16}, 23);
  auto ep = export_program(model, {input("x", x)});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  const ir::Graph& g = ep->program().graphs[0];
  EXPECT_EQ(count_ops(g, OpKind::Conv2d), 2);
  EXPECT_EQ(count_ops(g, OpKind::Permute), 4) << ep->print();
  for (const ir::Node& n : g.nodes) {
    if (n.op != OpKind::Conv2d) continue;
    EXPECT_EQ(std::get<std::vector<std::int64_t>>(n.attrs[2]), (std::vector<std::int64_t>{1, 1}));  // dilation
    EXPECT_EQ(std::get<std::vector<std::int64_t>>(n.attrs[1]), (std::vector<std::int64_t>{1, 1}));  // padding
  }
  expect_runs_like_eager(*ep, x, model(x), nullptr, 1e-4f);  // outputs of scale ~1.5, Winograd phases

  const Tensor w32 = Tensor::randn({32, 32, 3, 3}, 24);
  auto kept = [&](Tensor x) {
    Tensor a = conv2d(x, w, b, {1, 1}, {3, 3}, {3, 3});                        // 16 % 3 != 0
    Tensor c = conv2d(a, w, b, {1, 1}, {1, 1}, {2, 2});                        // padding 1, not 2: smaller output
    Tensor e = conv2d(slice(c, 1, 0, 32), w32, Tensor(), {1, 1}, {2, 2}, {2, 2});  // 32 channels
    Tensor f = conv2d(a, w, b, {2, 2}, {2, 2}, {2, 2});                        // stride 2
    return add(sum(e), sum(f));
  };
  auto ep2 = export_program(kept, {input("x", x)});
  ASSERT_TRUE(ep2.ok()) << ep2.status().message();
  EXPECT_EQ(count_ops(ep2->program().graphs[0], OpKind::Permute), 0) << ep2->print();
  expect_runs_like_eager(*ep2, x, kept(x));
}

// The runtime fuses an activation into the linear or conv2d before it when nothing else
// reads the intermediate: the profile names the fused kernel, the activation node is gone.
TEST(Passes, RuntimeFusesActivationsIntoTheKernelBefore) {
  const Tensor w = Tensor::randn({6, 4}, 11), b = Tensor::randn({6}, 12);
  const Tensor cw = Tensor::randn({3, 6, 3, 3}, 13);
  auto model = [&](Tensor x) {
    Tensor a = relu(linear(x, w, b));
    Tensor g = gelu(linear(add(x, x), w, b), "none");  // not linear(x): CSE would merge the two
    Tensor t = gelu(linear(mul(x, x), w), "tanh");
    Tensor s = silu(linear(relu(x), w, b));
    Tensor c = relu(conv2d(reshape(cat({a, g, t, s}, 0), {1, 6, 4, 4}), cw, Tensor(), {1, 1}, {1, 1}));
    Tensor l = linear(neg(x), w, b);
    return add(sum(c), sum(add(relu(l), l)));  // l is read twice: not fused
  };
  const Tensor x = Tensor::randn({4, 4}, 14);
  auto ep = export_program(model, {input("x", x)});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  std::vector<std::string> ops;
  expect_runs_like_eager(*ep, x, model(x), &ops);
  auto has = [&](const std::string& name) { return std::count(ops.begin(), ops.end(), name); };
  EXPECT_EQ(has("linear+relu"), 1);
  EXPECT_EQ(has("linear+gelu"), 1);
  EXPECT_EQ(has("linear+gelu_tanh"), 1);
  EXPECT_EQ(has("linear+silu"), 1);
  EXPECT_EQ(has("conv2d+relu"), 1);
  EXPECT_EQ(has("linear"), 1);  // the one read twice
  EXPECT_EQ(has("relu"), 2);    // its relu, and the one before the silu's linear
  EXPECT_EQ(has("gelu") + has("silu"), 0);
}

// Through reshapes too: the core ATen IR spells a linear on [B, S, K] as view -> addmm ->
// view, and the activation reads the last view. Not when a reshape's result is read twice.
TEST(Passes, RuntimeFusesAnActivationThroughReshapes) {
  const Tensor w = Tensor::randn({6, 4}, 21), b = Tensor::randn({6}, 22);
  auto model = [&](Tensor x) {  // x: [2, 3, 4]
    Tensor g = gelu(reshape(linear(reshape(x, {6, 4}), w, b), {2, 3, 6}), "none");
    Tensor s = silu(reshape(reshape(linear(reshape(mul(x, x), {6, 4}), w), {3, 2, 6}), {2, 3, 6}));
    Tensor r = reshape(linear(reshape(neg(x), {6, 4}), w, b), {2, 3, 6});
    return add(add(sum(g), sum(s)), sum(add(relu(r), r)));  // r is read twice: not fused
  };
  const Tensor x = Tensor::randn({2, 3, 4}, 23);
  auto ep = export_program(model, {input("x", x)});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  std::vector<std::string> ops;
  expect_runs_like_eager(*ep, x, model(x), &ops);
  auto has = [&](const std::string& name) { return std::count(ops.begin(), ops.end(), name); };
  EXPECT_EQ(has("linear+gelu"), 1);
  EXPECT_EQ(has("linear+silu"), 1);
  EXPECT_EQ(has("linear"), 1);  // r's
  EXPECT_EQ(has("relu"), 1);
  EXPECT_EQ(has("gelu") + has("silu"), 0);
}

// Bilinear upsampling of x [N, C, H, W] to [oh, ow] as the core ATen IR spells
// F.interpolate(mode="bilinear", align_corners=False): source coordinates from arange, four
// gathers, three lerps a + (b - a) * t.
Tensor upsample_bilinear_spelled_out(const Tensor& x, std::int64_t oh, std::int64_t ow) {
  const std::int64_t h = x.concrete_shape()[2], w = x.concrete_shape()[3];
  auto coords = [](std::int64_t out, std::int64_t in) {
    const double scale = static_cast<double>(in) / static_cast<double>(out);
    return clamp(sub(mul(add(cast(arange(out), DType::kF32), 0.5), scale), 0.5), 0.0, std::nullopt);
  };
  const Tensor ys = reshape(coords(oh, h), {oh, 1}), xs = coords(ow, w);
  const Tensor y0 = cast(ys, DType::kI64), y1 = clamp(add(y0, 1), std::nullopt, static_cast<double>(h - 1));
  const Tensor x0 = cast(xs, DType::kI64), x1 = clamp(add(x0, 1), std::nullopt, static_cast<double>(w - 1));
  const Tensor wx = clamp(sub(xs, cast(x0, DType::kF32)), 0.0, 1.0);
  const Tensor wy = clamp(sub(ys, cast(y0, DType::kF32)), 0.0, 1.0);
  auto lerp = [](const Tensor& a, const Tensor& b, const Tensor& t) { return add(a, mul(sub(b, a), t)); };
  const Tensor top = lerp(index(x, 2, {y0, x0}), index(x, 2, {y0, x1}), wx);
  const Tensor bottom = lerp(index(x, 2, {y1, x0}), index(x, 2, {y1, x1}), wx);
  return lerp(top, bottom, wy);
}

std::vector<float> floats_of(const HostTensor& t) {
  std::vector<float> v(t.data.size() / sizeof(float));
  std::memcpy(v.data(), t.data.data(), t.data.size());
  return v;
}

// The runtime computes that pattern as one node (`index+lerp`), with the separate ops'
// roundings: the same floats as the unfused program and as eager execution, on 1 and 2
// threads, and with an observer (which sees every node computed separately).
TEST(Passes, BilinearUpsamplingSpelledOutRunsAsOneNode) {
  const Tensor x = Tensor::randn({2, 3, 5, 7}, 41);
  auto model = [](Tensor in) { return upsample_bilinear_spelled_out(in, 12, 9); };
  auto ep = export_program(model, {input("x", x)});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  const std::vector<float> want = model(x).to_vector<float>();
  for (bool fuse : {true, false}) {
    const auto program = testing::load_exported(*ep, {.fuse_activations = fuse});
    ASSERT_NE(program, nullptr);
    for (int threads : {1, 2}) {
      for (bool observe : {false, true}) {
        std::size_t observed = 0;
        SessionOptions options{.threads = threads, .profile = true};
        if (observe) options.observer = [&](const NodeObservation&) { ++observed; };
        Session session(*program, options);
        auto r = session.run(std::vector<HostValue>{HostValue::of(testing::host_tensor(x))});
        ASSERT_TRUE(r.ok()) << r.status().message();
        EXPECT_EQ(floats_of(r->outputs[0].tensor), want) << "fused " << fuse << ", " << threads << " threads, observer " << observe;
        std::vector<std::string> ops;
        for (const RunStats::Op& op : session.last_stats().ops) ops.push_back(op.op);
        const auto fused = std::count(ops.begin(), ops.end(), "index+lerp");
        EXPECT_EQ(fused, fuse && !observe ? 1 : 0);
        EXPECT_EQ(std::count(ops.begin(), ops.end(), "index"), fuse && !observe ? 0 : 4);
        if (observe) {
          EXPECT_EQ(observed, program->placement(0).size());
        }
      }
    }
  }
}

// Not fused when an intermediate is read outside the pattern (here the top row's lerp is
// also an output): the unfused nodes run, with the same results as eager.
TEST(Passes, BilinearPatternWithAnIntermediateReadElsewhereIsNotFused) {
  const Tensor x = Tensor::randn({1, 2, 4, 4}, 42);
  const Tensor w = Tensor::from_floats({3}, std::vector<float>{0.25f, 0.5f, 0.75f});
  const Tensor i0 = Tensor::from_ints({3}, std::vector<std::int64_t>{0, 1, 2});
  const Tensor i1 = Tensor::from_ints({3}, std::vector<std::int64_t>{1, 2, 3});
  auto lerp = [](const Tensor& a, const Tensor& b, const Tensor& t) { return add(a, mul(sub(b, a), t)); };
  auto model = [&](Tensor in) {
    const Tensor r0 = reshape(i0, {3, 1}), r1 = reshape(i1, {3, 1});
    const Tensor top = lerp(index(in, 2, {r0, i0}), index(in, 2, {r0, i1}), w);
    const Tensor out = lerp(top, lerp(index(in, 2, {r1, i0}), index(in, 2, {r1, i1}), w), reshape(w, {3, 1}));
    return add(out, sum(top));
  };
  auto ep = export_program(model, {input("x", x)});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  std::vector<std::string> ops;
  expect_runs_like_eager(*ep, x, model(x), &ops);
  EXPECT_EQ(std::count(ops.begin(), ops.end(), "index+lerp"), 0);
  EXPECT_EQ(std::count(ops.begin(), ops.end(), "index"), 4);
}

// Index tensors that are inputs: the fused node checks them like the index kernel, and one
// out of range fails the run with its message. Both of its paths: the separable one
// (upsampling's: row indices shared by gather pairs, weights along one dim each) and the
// general one (here a weight that varies along both index dims).
TEST(Passes, FusedBilinearGathersCheckTheirIndices) {
  const Tensor x = Tensor::randn({1, 2, 5, 5}, 43);
  const Tensor wy = Tensor::from_floats({4, 1}, std::vector<float>{0.5f, 0.6f, 0.7f, 0.8f});
  const Tensor rows = Tensor::from_ints({4}, std::vector<std::int64_t>{0, 1, 2, 3});
  const Tensor cols = Tensor::from_ints({4}, std::vector<std::int64_t>{1, 2, 3, 4});
  const Tensor bad = Tensor::from_ints({4}, std::vector<std::int64_t>{0, 1, 9, 3});
  auto lerp = [](const Tensor& a, const Tensor& b, const Tensor& t) { return add(a, mul(sub(b, a), t)); };
  for (bool separable : {true, false}) {
    std::vector<float> wv(separable ? 4 : 16);
    for (std::size_t i = 0; i < wv.size(); ++i) wv[i] = 0.05f * static_cast<float>(i + 1);
    const Tensor wx = separable ? Tensor::from_floats({4}, wv) : Tensor::from_floats({4, 4}, wv);
    auto model = [&](Tensor in, Tensor r1, Tensor c) {
      const Tensor r = reshape(r1, {4, 1});
      const Tensor top = lerp(index(in, 2, {r, c}), index(in, 2, {r, neg(c)}), wx);
      const Tensor bottom = lerp(index(in, 2, {neg(r), c}), index(in, 2, {neg(r), neg(c)}), wx);
      return lerp(top, bottom, wy);
    };
    auto ep = export_program(model, {input("x", x), input("rows", rows), input("cols", cols)});
    ASSERT_TRUE(ep.ok()) << ep.status().message();
    const auto program = testing::load_exported(*ep);
    ASSERT_NE(program, nullptr);
    for (int threads : {1, 2}) {
      Session session(*program, {.threads = threads, .profile = true});
      auto args = [&](const Tensor& r) {
        return std::vector<HostValue>{HostValue::of(testing::host_tensor(x)), HostValue::of(testing::host_tensor(r)),
                                      HostValue::of(testing::host_tensor(cols))};
      };
      auto ok = session.run(args(rows));
      ASSERT_TRUE(ok.ok()) << ok.status().message();
      EXPECT_EQ(floats_of(ok->outputs[0].tensor), model(x, rows, cols).to_vector<float>()) << separable << " " << threads;
      EXPECT_EQ(session.last_stats().ops.back().op, "index+lerp");
      auto r = session.run(args(bad));
      ASSERT_FALSE(r.ok());
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidInput);
      EXPECT_NE(r.status().message().find("[index] indices[0] element 2 = 9 out of range for dim 2 of size 5"), std::string::npos)
          << r.status().message();
    }
  }
}

// A linear whose rows depend on the data has no planned buffer: the fused activation's
// node copies the result on instead of sharing its bytes.
TEST(Passes, FusedActivationOnADataDependentSize) {
  const Tensor w = Tensor::randn({3, 2}, 15);
  auto model = [&](Tensor x) { return relu(linear(cast(nonzero(x), DType::kF32), w)); };
  const std::vector<float> xv{0, 1, 0, 2, 3, 0, 0, 0, 4, 5, 6, 0};
  const Tensor x = Tensor::from_floats({3, 4}, xv);
  auto ep = export_program(model, {input("x", x)});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  std::vector<std::string> ops;
  expect_runs_like_eager(*ep, x, model(x), &ops);
  EXPECT_EQ(std::count(ops.begin(), ops.end(), "linear+relu"), 1);
}

}  // namespace
}  // namespace kiln

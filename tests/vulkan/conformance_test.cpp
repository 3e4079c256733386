// Conformance: every op the Vulkan backend supports, on random shapes (odd sizes,
// broadcasting, empty dims), compared with the CPU kernels within tolerance. Each case is
// prepared and run with the validation layer on; any validation message fails it.
#include <algorithm>
#include <functional>
#include <numeric>
#include <random>

#include "vulkan/vulkan_testutil.h"

namespace kiln::vulkan::testing {
namespace {

using cpu::testing::random_shape;

struct Case {
  std::string name;
  std::function<Graph(std::mt19937&)> build;
  double rtol = 1e-4;
  double atol = 1e-5;
  int seeds = 3;
};

std::ostream& operator<<(std::ostream& os, const Case& c) { return os << c.name; }

Tensor rnd(DType d, Shape s, std::mt19937& rng, double lo = -2.0, double hi = 2.0) {
  return Tensor::random(d, std::move(s), rng, lo, hi);
}
std::int64_t pick(std::mt19937& rng, std::int64_t lo, std::int64_t hi) {
  return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
}

// A shape that broadcasts to `out`: some dims set to 1, maybe fewer leading dims.
Shape broadcastable(const Shape& out, std::mt19937& rng) {
  Shape s = out;
  for (auto& d : s) {
    if (pick(rng, 0, 3) == 0) d = 1;
  }
  const std::int64_t drop = pick(rng, 0, static_cast<std::int64_t>(s.size()));
  if (pick(rng, 0, 2) == 0) s.erase(s.begin(), s.begin() + drop);
  return s;
}

Graph unary(OpKind op, AttrList attrs, double lo = -3, double hi = 3, std::mt19937* rngp = nullptr) {
  std::mt19937& rng = *rngp;
  Graph g;
  const Shape s = random_shape(rng, static_cast<int>(pick(rng, 0, 4)), 1, 9);
  const auto x = g.input(rnd(DType::kF32, s, rng, lo, hi));
  g.node(op, {x}, {g.output(DType::kF32, s)}, std::move(attrs));
  return g;
}

Case unary_case(OpKind op, double lo = -3, double hi = 3, AttrList attrs = {}, std::string suffix = "") {
  return {std::string(op_name(op)) + suffix,
          [=](std::mt19937& rng) { return unary(op, attrs, lo, hi, &rng); }, 1e-4, 2e-5};
}

Case binary_case(OpKind op, DType in, DType out, AttrList attrs = {}, std::string suffix = "", double lo = -3,
                 double hi = 3) {
  return {std::string(op_name(op)) + suffix, [=](std::mt19937& rng) {
            Graph g;
            const Shape os = random_shape(rng, static_cast<int>(pick(rng, 1, 5)), 1, 7);
            Shape as = broadcastable(os, rng), bs = broadcastable(os, rng);
            if (pick(rng, 0, 1) == 0) as = os;  // one full-size operand keeps out's shape
            else bs = os;
            Tensor a = rnd(in, as, rng, lo, hi), b = rnd(in, bs, rng, lo, hi);
            if (in == DType::kF32 && out == DType::kBool) {  // make ties likely
              for (std::int64_t i = 0; i < a.numel(); ++i) a.set(i, std::round(a.at(i) * 2) / 2);
              for (std::int64_t i = 0; i < b.numel(); ++i) b.set(i, std::round(b.at(i) * 2) / 2);
            }
            const auto ia = g.input(a), ib = g.input(b);
            g.node(op, {ia, ib}, {g.output(out, cpu::testing::broadcast_shapes(as, bs))}, attrs);
            return g;
          }, 1e-4, 1e-5, 4};
}

std::vector<Case> all_cases() {
  std::vector<Case> c;
  for (OpKind op : {OpKind::Neg, OpKind::Abs, OpKind::Exp, OpKind::Sin, OpKind::Cos, OpKind::Tanh, OpKind::Sigmoid,
                    OpKind::Relu, OpKind::Silu, OpKind::Hardswish, OpKind::Hardsigmoid, OpKind::Erf, OpKind::Floor,
                    OpKind::Ceil, OpKind::Round, OpKind::Sign, OpKind::Identity}) {
    c.push_back(unary_case(op));
  }
  for (OpKind op : {OpKind::Log, OpKind::Sqrt, OpKind::Rsqrt, OpKind::Reciprocal}) c.push_back(unary_case(op, 0.1, 4));
  for (OpKind op : {OpKind::Atan, OpKind::Sinh, OpKind::Cosh, OpKind::Asinh}) c.push_back(unary_case(op));
  c.push_back(unary_case(OpKind::Tan, -1.4, 1.4));
  c.push_back(unary_case(OpKind::Acosh, 1.0, 5.0));
  c.push_back(unary_case(OpKind::Atanh, -0.95, 0.95));
  for (OpKind op : {OpKind::Asin, OpKind::Acos}) c.push_back(unary_case(op, -0.99, 0.99));
  c.push_back(unary_case(OpKind::Gelu, -3, 3, AttrList().s("none"), "_none"));
  c.push_back(unary_case(OpKind::Gelu, -3, 3, AttrList().s("tanh"), "_tanh"));
  c.push_back(unary_case(OpKind::Clamp, -3, 3, AttrList().f(-0.5).f(1.25), "_both"));
  c.push_back(unary_case(OpKind::Clamp, -3, 3, AttrList().none().f(1.0), "_max_only"));
  c.push_back(unary_case(OpKind::Clamp, -3, 3, AttrList().f(2.0).f(1.0), "_min_above_max"));
  c.push_back(unary_case(OpKind::LeakyRelu, -3, 3, AttrList().f(0.1)));

  for (OpKind op : {OpKind::Add, OpKind::Sub, OpKind::Mul, OpKind::Maximum, OpKind::Minimum}) {
    c.push_back(binary_case(op, DType::kF32, DType::kF32));
  }
  c.push_back(binary_case(OpKind::Div, DType::kF32, DType::kF32, AttrList().none()));
  c.push_back(binary_case(OpKind::Div, DType::kF32, DType::kF32, AttrList().s("trunc"), "_trunc"));
  c.push_back(binary_case(OpKind::Div, DType::kF32, DType::kF32, AttrList().s("floor"), "_floor"));
  c.push_back(binary_case(OpKind::Remainder, DType::kF32, DType::kF32));
  c.push_back(binary_case(OpKind::Pow, DType::kF32, DType::kF32, {}, "_positive_base", 0.2, 2.5));
  for (OpKind op : {OpKind::Eq, OpKind::Ne, OpKind::Lt, OpKind::Le, OpKind::Gt, OpKind::Ge}) {
    c.push_back(binary_case(op, DType::kF32, DType::kBool));
    c.push_back(binary_case(op, DType::kI64, DType::kBool, {}, "_i64", -4, 4));  // masks from arange vs positions
    c.push_back(binary_case(op, DType::kI32, DType::kBool, {}, "_i32", -4, 4));
  }
  for (OpKind op : {OpKind::LogicalAnd, OpKind::LogicalOr, OpKind::LogicalXor}) {
    c.push_back(binary_case(op, DType::kBool, DType::kBool));
  }
  for (DType d : {DType::kBool, DType::kF32}) {
    c.push_back({std::string("logical_not_") + std::string(dtype_name(d)), [d](std::mt19937& rng) {
                   Graph g;
                   const Shape s = random_shape(rng, 3, 1, 6);
                   Tensor x = rnd(d, s, rng);
                   if (d == DType::kF32) for (std::int64_t i = 0; i < x.numel(); i += 3) x.set(i, 0.0);
                   g.node(OpKind::LogicalNot, {g.input(x)}, {g.output(DType::kBool, s)});
                   return g;
                 }});
  }
  c.push_back({"where", [](std::mt19937& rng) {
                 Graph g;
                 const Shape os = random_shape(rng, 3, 1, 6);
                 const auto cond = g.input(rnd(DType::kBool, broadcastable(os, rng), rng));
                 const auto a = g.input(rnd(DType::kF32, os, rng));
                 const auto b = g.input(rnd(DType::kF32, broadcastable(os, rng), rng));
                 g.node(OpKind::Where, {cond, a, b}, {g.output(DType::kF32, os)});
                 return g;
               }});
  c.push_back({"masked_fill", [](std::mt19937& rng) {
                 Graph g;
                 const Shape os = random_shape(rng, 3, 1, 6);
                 const auto x = g.input(rnd(DType::kF32, os, rng));
                 const auto m = g.input(rnd(DType::kBool, broadcastable(os, rng), rng));
                 const auto v = g.constant(Tensor::of(DType::kF32, {}, {-1e9}), 7);
                 g.node(OpKind::MaskedFill, {x, m, v}, {g.output(DType::kF32, os)});
                 return g;
               }});

  // Linear algebra.
  c.push_back({"matmul_2d_odd", [](std::mt19937& rng) {
                 Graph g;
                 const std::int64_t m = pick(rng, 1, 70), k = pick(rng, 1, 70), n = pick(rng, 1, 70);
                 const auto a = g.input(rnd(DType::kF32, {m, k}, rng));
                 const auto b = g.input(rnd(DType::kF32, {k, n}, rng));
                 g.node(OpKind::Matmul, {a, b}, {g.output(DType::kF32, {m, n})});
                 return g;
               }, 1e-4, 1e-4, 4});
  c.push_back({"matmul_large_tile", [](std::mt19937& rng) {
                 Graph g;
                 const std::int64_t m = 130 + pick(rng, 0, 9), k = 67, n = 129 + pick(rng, 0, 9);
                 const auto a = g.input(rnd(DType::kF32, {m, k}, rng));
                 const auto b = g.input(rnd(DType::kF32, {k, n}, rng));
                 g.node(OpKind::Matmul, {a, b}, {g.output(DType::kF32, {m, n})});
                 return g;
               }, 1e-4, 1e-4, 1});
  c.push_back({"matmul_batched_broadcast", [](std::mt19937& rng) {
                 Graph g;
                 const std::int64_t m = pick(rng, 1, 9), k = pick(rng, 1, 9), n = pick(rng, 1, 9);
                 const auto a = g.input(rnd(DType::kF32, {2, 1, m, k}, rng));
                 const auto b = g.input(rnd(DType::kF32, {3, k, n}, rng));
                 g.node(OpKind::Matmul, {a, b}, {g.output(DType::kF32, {2, 3, m, n})});
                 return g;
               }, 1e-4, 1e-4});
  c.push_back({"matmul_vectors", [](std::mt19937& rng) {
                 Graph g;
                 const std::int64_t k = pick(rng, 1, 40), n = pick(rng, 1, 9);
                 const auto v = g.input(rnd(DType::kF32, {k}, rng));
                 const auto w = g.input(rnd(DType::kF32, {2, k, n}, rng));
                 const auto u = g.input(rnd(DType::kF32, {k}, rng));
                 g.node(OpKind::Matmul, {v, w}, {g.output(DType::kF32, {2, n})});
                 g.node(OpKind::Matmul, {v, u}, {g.output(DType::kF32, {})});
                 return g;
               }, 1e-4, 1e-4});
  c.push_back({"linear_bias", [](std::mt19937& rng) {
                 Graph g;
                 const std::int64_t k = pick(rng, 1, 40), n = pick(rng, 1, 40);
                 const auto x = g.input(rnd(DType::kF32, {2, 3, k}, rng));
                 const auto w = g.constant(rnd(DType::kF32, {n, k}, rng), 1);
                 const auto b = g.constant(rnd(DType::kF32, {n}, rng), 2);
                 g.node(OpKind::Linear, {x, w, b}, {g.output(DType::kF32, {2, 3, n})});
                 return g;
               }, 1e-4, 1e-4});
  c.push_back({"linear_no_bias", [](std::mt19937& rng) {
                 Graph g;
                 const std::int64_t k = pick(rng, 1, 40), n = pick(rng, 1, 40);
                 const auto x = g.input(rnd(DType::kF32, {5, k}, rng));
                 const auto w = g.input(rnd(DType::kF32, {n, k}, rng));
                 g.node(OpKind::Linear, {x, w}, {g.output(DType::kF32, {5, n})});
                 return g;
               }, 1e-4, 1e-4});
  c.push_back({"bmm", [](std::mt19937& rng) {
                 Graph g;
                 const std::int64_t bt = pick(rng, 1, 4), m = pick(rng, 1, 20), k = pick(rng, 1, 20), n = pick(rng, 1, 20);
                 const auto a = g.input(rnd(DType::kF32, {bt, m, k}, rng));
                 const auto b = g.input(rnd(DType::kF32, {bt, k, n}, rng));
                 g.node(OpKind::Bmm, {a, b}, {g.output(DType::kF32, {bt, m, n})});
                 return g;
               }, 1e-4, 1e-4});

  // conv2d: stride, padding, dilation, groups, depthwise, bias, unbatched.
  struct Conv { std::int64_t n, c, h, w, o, k, s, p, d, groups; bool bias; };
  for (const Conv& cv : {Conv{2, 3, 9, 11, 4, 3, 1, 1, 1, 1, true}, Conv{1, 4, 10, 7, 6, 3, 2, 0, 1, 2, false},
                        Conv{1, 6, 8, 9, 6, 3, 1, 2, 2, 6, true}, Conv{0, 2, 5, 5, 3, 1, 1, 0, 1, 1, true},
                        Conv{3, 5, 7, 7, 2, 5, 2, 2, 1, 1, true}, Conv{2, 5, 9, 10, 12, 3, 1, 1, 1, 1, true},
                        Conv{1, 16, 11, 9, 70, 3, 2, 1, 2, 1, false}, Conv{2, 8, 7, 6, 16, 3, 1, 1, 1, 2, true}}) {
    c.push_back({"conv2d_c" + std::to_string(cv.c) + "_o" + std::to_string(cv.o) + "_g" + std::to_string(cv.groups) + "_s" + std::to_string(cv.s) +
                     "_d" + std::to_string(cv.d) + (cv.n == 0 ? "_unbatched" : ""),
                 [cv](std::mt19937& rng) {
                   Graph g;
                   Shape xs = {cv.n, cv.c, cv.h, cv.w};
                   if (cv.n == 0) xs.erase(xs.begin());
                   const auto x = g.input(rnd(DType::kF32, xs, rng));
                   const auto w = g.constant(rnd(DType::kF32, {cv.o, cv.c / cv.groups, cv.k, cv.k}, rng), 3);
                   std::vector<std::uint32_t> ins = {x, w};
                   if (cv.bias) ins.push_back(g.constant(rnd(DType::kF32, {cv.o}, rng), 4));
                   const std::int64_t oh = (cv.h + 2 * cv.p - cv.d * (cv.k - 1) - 1) / cv.s + 1;
                   const std::int64_t ow = (cv.w + 2 * cv.p - cv.d * (cv.k - 1) - 1) / cv.s + 1;
                   Shape os = {cv.n, cv.o, oh, ow};
                   if (cv.n == 0) os.erase(os.begin());
                   g.node(OpKind::Conv2d, ins, {g.output(DType::kF32, os)},
                          AttrList().ints({cv.s, cv.s}).ints({cv.p}).ints({cv.d, cv.d}).i(cv.groups));
                   return g;
                 }, 1e-4, 1e-4, 1});
  }

  // Pooling.
  c.push_back({"max_pool2d_k3s2p1", [](std::mt19937& rng) {
                 Graph g;
                 const auto x = g.input(rnd(DType::kF32, {2, 3, 9, 8}, rng));
                 g.node(OpKind::MaxPool2d, {x}, {g.output(DType::kF32, {2, 3, 5, 4})},
                        AttrList().ints({3}).ints({2}).ints({1}).ints({1}).b(false));
                 return g;
               }, 0, 0, 1});
  c.push_back({"max_pool2d_dilation_ceil", [](std::mt19937& rng) {
                 Graph g;
                 const auto x = g.input(rnd(DType::kF32, {3, 10, 12}, rng));
                 // span 5: h = ceil(5 / 2) + 1 = 4; w = ceil(7 / 2) + 1 = 5 (floor would give 4)
                 g.node(OpKind::MaxPool2d, {x}, {g.output(DType::kF32, {3, 4, 5})},
                        AttrList().ints({3}).ints({2}).ints({0}).ints({2}).b(true));
                 return g;
               }, 0, 0, 1});
  for (bool include : {false, true}) {
    c.push_back({std::string("avg_pool2d_pad_") + (include ? "counted" : "excluded"), [include](std::mt19937& rng) {
                   Graph g;
                   const auto x = g.input(rnd(DType::kF32, {2, 2, 7, 9}, rng));
                   g.node(OpKind::AvgPool2d, {x}, {g.output(DType::kF32, {2, 2, 4, 5})},
                          AttrList().ints({3}).ints({2}).ints({1}).b(false).b(include));
                   return g;
                 }, 1e-5, 1e-6, 1});
  }
  for (OpKind op : {OpKind::AdaptiveAvgPool2d, OpKind::AdaptiveMaxPool2d}) {
    c.push_back({std::string(op_name(op)), [op](std::mt19937& rng) {
                   Graph g;
                   const std::int64_t h = pick(rng, 3, 13), w = pick(rng, 3, 13);
                   const auto x = g.input(rnd(DType::kF32, {2, 3, h, w}, rng));
                   g.node(op, {x}, {g.output(DType::kF32, {2, 3, 3, 2})}, AttrList().ints({3, 2}));
                   return g;
                 }, 1e-5, 1e-6});
  }

  // Normalizations.
  for (bool log : {false, true}) {
    c.push_back({log ? "log_softmax" : "softmax", [log](std::mt19937& rng) {
                   Graph g;
                   const Shape s = random_shape(rng, static_cast<int>(pick(rng, 1, 4)), 1, 9);
                   const std::int64_t dim = pick(rng, 0, static_cast<std::int64_t>(s.size()) - 1);
                   const auto x = g.input(rnd(DType::kF32, s, rng, -5, 5));
                   g.node(log ? OpKind::LogSoftmax : OpKind::Softmax, {x}, {g.output(DType::kF32, s)}, AttrList().i(dim));
                   return g;
                 }, 1e-4, 1e-5, 4});
  }
  c.push_back({"softmax_long_row", [](std::mt19937& rng) {
                 Graph g;
                 const auto x = g.input(rnd(DType::kF32, {3, 1000}, rng, -5, 5));
                 g.node(OpKind::Softmax, {x}, {g.output(DType::kF32, {3, 1000})}, AttrList().i(1));
                 return g;
               }, 1e-4, 1e-6, 1});
  for (int params = 0; params < 3; ++params) {
    c.push_back({"layer_norm_params" + std::to_string(params), [params](std::mt19937& rng) {
                   Graph g;
                   const std::int64_t a = pick(rng, 1, 5), b = pick(rng, 1, 100);
                   const auto x = g.input(rnd(DType::kF32, {a, 2, b}, rng));
                   std::vector<std::uint32_t> ins = {x};
                   if (params >= 1) ins.push_back(g.constant(rnd(DType::kF32, {2, b}, rng), 10));
                   if (params == 2) ins.push_back(g.constant(rnd(DType::kF32, {2, b}, rng), 11));
                   if (params == 0) {  // weight absent, bias present
                     ins.push_back(backend::kAbsentTensor);
                     ins.push_back(g.input(rnd(DType::kF32, {2, b}, rng)));
                   }
                   g.node(OpKind::LayerNorm, ins, {g.output(DType::kF32, {a, 2, b})}, AttrList().i(2).f(1e-5));
                   return g;
                 }, 1e-4, 1e-4});
  }
  for (bool affine : {false, true}) {
    c.push_back({std::string("batch_norm_") + (affine ? "affine" : "plain"), [affine](std::mt19937& rng) {
                   Graph g;
                   const std::int64_t ch = pick(rng, 1, 6);
                   const auto x = g.input(rnd(DType::kF32, {2, ch, 5, 3}, rng));
                   const auto absent = backend::kAbsentTensor;
                   const auto w = affine ? g.constant(rnd(DType::kF32, {ch}, rng), 20) : absent;
                   const auto b = affine ? g.constant(rnd(DType::kF32, {ch}, rng), 21) : absent;
                   const auto mean = g.constant(rnd(DType::kF32, {ch}, rng), 22);
                   const auto var = g.constant(rnd(DType::kF32, {ch}, rng, 0.1, 2), 23);
                   g.node(OpKind::BatchNorm, {x, w, b, mean, var}, {g.output(DType::kF32, {2, ch, 5, 3})}, AttrList().f(1e-5));
                   return g;
                 }, 1e-4, 1e-5});
  }

  // Reductions.
  for (OpKind op : {OpKind::Sum, OpKind::Mean, OpKind::Amax, OpKind::Amin, OpKind::Prod, OpKind::Var, OpKind::Any,
                    OpKind::All}) {
    c.push_back({std::string(op_name(op)), [op](std::mt19937& rng) {
                   Graph g;
                   const int rank = static_cast<int>(pick(rng, 1, 4));
                   const Shape s = random_shape(rng, rank, 1, 9);
                   std::vector<std::int64_t> dims;
                   for (int d = 0; d < rank; ++d) {
                     if (pick(rng, 0, 1) == 0) dims.push_back(d);
                   }
                   const bool keep = pick(rng, 0, 1) == 1;
                   Shape os;
                   for (int d = 0; d < rank; ++d) {
                     const bool red = dims.empty() || std::find(dims.begin(), dims.end(), d) != dims.end();
                     if (!red) os.push_back(s[d]);
                     else if (keep) os.push_back(1);
                   }
                   const bool boolean = op == OpKind::Any || op == OpKind::All;
                   Tensor xt = op == OpKind::Prod ? rnd(DType::kF32, s, rng, 0.5, 1.5) : rnd(boolean ? DType::kBool : DType::kF32, s, rng);
                   if (boolean) {  // mostly one value, so both answers occur
                     const double common = pick(rng, 0, 1);
                     for (std::int64_t i = 0; i < xt.numel(); ++i) xt.set(i, pick(rng, 0, 6) == 0 ? 1 - common : common);
                   }
                   const auto x = g.input(xt);
                   AttrList attrs = AttrList().ints(dims);
                   if (op == OpKind::Var) attrs.f(1.0);
                   attrs.b(keep);
                   if (op == OpKind::Sum) attrs.none();
                   g.node(op, {x}, {g.output(boolean ? DType::kBool : DType::kF32, os)}, attrs);
                   return g;
                 }, 1e-4, 1e-5, 5});
  }
  c.push_back({"sum_large", [](std::mt19937& rng) {
                 Graph g;
                 const auto x = g.input(rnd(DType::kF32, {3, 4001}, rng));
                 g.node(OpKind::Sum, {x}, {g.output(DType::kF32, {3})}, AttrList().ints({1}).b(false).none());
                 return g;
               }, 1e-4, 1e-3, 1});

  for (OpKind op : {OpKind::Argmax, OpKind::Argmin}) {
    c.push_back({std::string(op_name(op)), [op](std::mt19937& rng) {
                   Graph g;
                   const int rank = static_cast<int>(pick(rng, 1, 3));
                   const Shape s = random_shape(rng, rank, 1, 9);
                   const std::int64_t dim = pick(rng, 0, rank - 1);
                   const bool keep = pick(rng, 0, 1) == 1;
                   Shape os = s;
                   if (keep) os[dim] = 1;
                   else os.erase(os.begin() + dim);
                   Tensor x = rnd(DType::kF32, s, rng);
                   for (std::int64_t i = 0; i < x.numel(); ++i) x.set(i, std::round(x.at(i)));  // ties: first wins
                   if (x.numel() > 3) x.set(3, std::nan(""));
                   g.node(op, {g.input(x)}, {g.output(DType::kI64, os)}, AttrList().i(dim).b(keep));
                   return g;
                 }, 0, 0, 5});
  }
  c.push_back({"cumsum", [](std::mt19937& rng) {
                 Graph g;
                 const Shape s = random_shape(rng, 3, 1, 9);
                 const std::int64_t dim = pick(rng, 0, 2);
                 g.node(OpKind::Cumsum, {g.input(rnd(DType::kF32, s, rng))}, {g.output(DType::kF32, s)}, AttrList().i(dim));
                 return g;
               }, 1e-4, 1e-5, 4});

  // Indexing.
  c.push_back({"embedding", [](std::mt19937& rng) {
                 Graph g;
                 const std::int64_t v = pick(rng, 2, 30), d = pick(rng, 1, 17);
                 const auto w = g.constant(rnd(DType::kF32, {v, d}, rng), 30);
                 const auto idx = g.input(rnd(DType::kI64, {2, 5}, rng, 0, static_cast<double>(v)));
                 g.node(OpKind::Embedding, {w, idx}, {g.output(DType::kF32, {2, 5, d})});
                 return g;
               }, 0, 0});
  c.push_back({"index_select", [](std::mt19937& rng) {
                 Graph g;
                 const Shape s = {3, pick(rng, 1, 8), 4};
                 const auto x = g.input(rnd(DType::kF32, s, rng));
                 const auto idx = g.input(rnd(DType::kI32, {6}, rng, 0, static_cast<double>(s[1])));
                 g.node(OpKind::IndexSelect, {x, idx}, {g.output(DType::kF32, {3, 6, 4})}, AttrList().i(1));
                 return g;
               }, 0, 0});
  c.push_back({"gather", [](std::mt19937& rng) {
                 Graph g;
                 const Shape s = {4, 5, 3};
                 const std::int64_t dim = pick(rng, 0, 2);
                 Shape is = {3, 4, 2};
                 const auto x = g.input(rnd(DType::kF32, s, rng));
                 const auto idx = g.input(rnd(DType::kI64, is, rng, 0, static_cast<double>(s[dim])));
                 g.node(OpKind::Gather, {x, idx}, {g.output(DType::kF32, is)}, AttrList().i(dim));
                 return g;
               }, 0, 0});

  c.push_back({"index_select_and_gather_0d_x", [](std::mt19937& rng) {
                 Graph g;
                 const auto x = g.input(rnd(DType::kF32, {}, rng));
                 const auto i1 = g.input(Tensor::of(DType::kI64, {1}, {0}));
                 const auto i0 = g.input(Tensor::of(DType::kI64, {}, {0}));
                 g.node(OpKind::IndexSelect, {x, i1}, {g.output(DType::kF32, {})}, AttrList().i(0));
                 g.node(OpKind::Gather, {x, i0}, {g.output(DType::kF32, {})}, AttrList().i(0));
                 return g;
               }, 0, 0, 1});

  c.push_back({"index_advanced", [](std::mt19937& rng) {
                 Graph g;
                 const Shape xs = {3, 5, 4, 2};
                 const std::int64_t first = pick(rng, 0, 2);
                 const int k = static_cast<int>(pick(rng, 1, 2));
                 const auto x = g.input(rnd(DType::kF32, xs, rng));
                 std::vector<std::uint32_t> ins = {x};
                 std::vector<std::int64_t> dims;
                 Shape b1 = {2, 3}, b2 = {3};  // broadcast to [2, 3]
                 for (int j = 0; j < k; ++j) {
                   const double size = static_cast<double>(xs[first + j]);
                   ins.push_back(g.input(rnd(DType::kI64, j == 0 ? b1 : b2, rng, -size, size)));  // negatives too
                   dims.push_back(first + j);
                 }
                 Shape os(xs.begin(), xs.begin() + first);
                 if (k == 1) os.insert(os.end(), b1.begin(), b1.end());
                 else os.insert(os.end(), {2, 3});
                 os.insert(os.end(), xs.begin() + first + k, xs.end());
                 g.node(OpKind::Index, ins, {g.output(DType::kF32, os)}, AttrList().ints(dims));
                 return g;
               }, 0, 0, 6});

  c.push_back({"index_put_rows", [](std::mt19937& rng) {  // a KV cache row write, not in place
                 Graph g;
                 const std::int64_t dim = pick(rng, 0, 2), k = pick(rng, 1, 4);
                 const Shape xs = {3, 8, 5};
                 std::vector<std::int64_t> rows(static_cast<std::size_t>(xs[dim]));
                 std::iota(rows.begin(), rows.end(), -xs[dim]);  // distinct, negatives too
                 std::shuffle(rows.begin(), rows.end(), rng);
                 rows.resize(static_cast<std::size_t>(std::min(k, xs[dim])));
                 Shape vs = xs;
                 vs[dim] = static_cast<std::int64_t>(rows.size());
                 std::vector<double> idx(rows.begin(), rows.end());
                 const auto x = g.input(rnd(DType::kF32, xs, rng));
                 const auto v = g.input(rnd(DType::kF32, vs, rng));
                 const auto i = g.input(Tensor::of(DType::kI64, {static_cast<std::int64_t>(rows.size())}, idx));
                 g.node(OpKind::IndexPut, {x, v, i}, {g.output(DType::kF32, xs)}, AttrList().ints({dim}).b(false));
                 return g;
               }, 0, 0, 6});

  // Data movement (any 32-bit dtype).
  for (DType d : {DType::kF32, DType::kI64, DType::kBool}) {
    const std::string dn(dtype_name(d));
    c.push_back({"permute_" + dn, [d](std::mt19937& rng) {
                   Graph g;
                   const Shape s = random_shape(rng, 4, 1, 6);
                   std::vector<std::int64_t> p = {0, 1, 2, 3};
                   std::shuffle(p.begin(), p.end(), rng);
                   const auto x = g.input(rnd(d, s, rng, -50, 50));
                   g.node(OpKind::Permute, {x}, {g.output(d, {s[p[0]], s[p[1]], s[p[2]], s[p[3]]})}, AttrList().ints(p));
                   return g;
                 }, 0, 0});
    c.push_back({"cat_" + dn, [d](std::mt19937& rng) {
                   Graph g;
                   const std::int64_t dim = pick(rng, 0, 2);
                   Shape s = random_shape(rng, 3, 1, 5);
                   std::vector<std::uint32_t> ins;
                   std::int64_t total = 0;
                   for (int i = 0; i < 3; ++i) {
                     Shape si = s;
                     si[dim] = pick(rng, 0, 4);
                     total += si[dim];
                     ins.push_back(g.input(rnd(d, si, rng, -50, 50)));
                   }
                   s[dim] = total;
                   g.node(OpKind::Cat, ins, {g.output(d, s)}, AttrList().i(dim));
                   return g;
                 }, 0, 0});
  }
  c.push_back({"reshape", [](std::mt19937& rng) {
                 Graph g;
                 const auto x = g.input(rnd(DType::kF32, {6, 5, 2}, rng));
                 g.node(OpKind::Reshape, {x}, {g.output(DType::kF32, {3, 20})}, AttrList().exprs({3, 20}));
                 return g;
               }, 0, 0, 1});
  c.push_back({"slice", [](std::mt19937& rng) {
                 Graph g;
                 const Shape s = {4, 11, 3};
                 const std::int64_t start = pick(rng, -12, 11), end = pick(rng, -12, 14), step = pick(rng, 1, 3);
                 std::int64_t a = start < 0 ? start + 11 : start, b = end < 0 ? end + 11 : end;
                 a = std::clamp<std::int64_t>(a, 0, 11);
                 b = std::clamp<std::int64_t>(b, 0, 11);
                 const std::int64_t len = b > a ? (b - a - 1) / step + 1 : 0;
                 const auto x = g.input(rnd(DType::kF32, s, rng));
                 g.node(OpKind::Slice, {x}, {g.output(DType::kF32, {4, len, 3})}, AttrList().i(1).i(start).i(end).i(step));
                 return g;
               }, 0, 0, 5});
  c.push_back({"split", [](std::mt19937& rng) {
                 Graph g;
                 const auto x = g.input(rnd(DType::kF32, {3, 10, 2}, rng));
                 const std::int64_t a = pick(rng, 0, 10);
                 g.node(OpKind::Split, {x}, {g.output(DType::kF32, {3, a, 2}), g.output(DType::kF32, {3, 10 - a, 2})},
                        AttrList().i(1).exprs({a, 10 - a}));
                 return g;
               }, 0, 0});
  c.push_back({"expand", [](std::mt19937& rng) {
                 Graph g;
                 const Shape os = random_shape(rng, 4, 1, 5);
                 const Shape is = broadcastable(os, rng);
                 const auto x = g.input(rnd(DType::kF32, is, rng));
                 g.node(OpKind::Expand, {x}, {g.output(DType::kF32, os)}, AttrList().exprs(os));
                 return g;
               }, 0, 0, 4});
  c.push_back({"pad", [](std::mt19937& rng) {
                 Graph g;
                 const Shape s = {2, 5, 6};
                 const std::int64_t l0 = pick(rng, -2, 3), r0 = pick(rng, -2, 3), l1 = pick(rng, -2, 2), r1 = pick(rng, 0, 2);
                 const auto x = g.input(rnd(DType::kF32, s, rng));
                 g.node(OpKind::Pad, {x}, {g.output(DType::kF32, {2, 5 + l1 + r1, 6 + l0 + r0})},
                        AttrList().ints({l0, r0, l1, r1}).f(0.5));
                 return g;
               }, 0, 0, 4});
  c.push_back({"flip", [](std::mt19937& rng) {
                 Graph g;
                 const Shape s = random_shape(rng, 3, 1, 6);
                 const auto x = g.input(rnd(DType::kF32, s, rng));
                 g.node(OpKind::Flip, {x}, {g.output(DType::kF32, s)}, AttrList().ints({0, 2}));
                 return g;
               }, 0, 0});
  for (OpKind op : {OpKind::Tril, OpKind::Triu}) {
    c.push_back({std::string(op_name(op)), [op](std::mt19937& rng) {
                   Graph g;
                   const Shape s = {2, pick(rng, 1, 7), pick(rng, 1, 7)};
                   const auto x = g.input(rnd(DType::kF32, s, rng));
                   g.node(op, {x}, {g.output(DType::kF32, s)}, AttrList().i(pick(rng, -2, 2)));
                   return g;
                 }, 0, 0});
  }
  for (DType d : {DType::kF32, DType::kI64, DType::kBool}) {
    c.push_back({"full_" + std::string(dtype_name(d)), [d](std::mt19937&) {
                   Graph g;
                   g.node(OpKind::Full, {}, {g.output(d, {3, 7})}, AttrList().exprs({3, 7}).f(3.0).dtype(d));
                   return g;
                 }, 0, 0, 1});
  }
  for (DType d : {DType::kF32, DType::kI64, DType::kI32}) {
    c.push_back({"arange_" + std::string(dtype_name(d)), [d](std::mt19937& rng) {
                   Graph g;
                   const std::int64_t start = pick(rng, -10, 10), step = pick(rng, 1, 3) * (pick(rng, 0, 1) ? 1 : -1);
                   const std::int64_t end = start + step * pick(rng, 0, 20) + (step > 0 ? 1 : -1) * pick(rng, 0, 1);
                   const std::int64_t span = end - start;
                   const std::int64_t len = (span == 0 || (span > 0) != (step > 0)) ? 0 : (span + step + (step > 0 ? -1 : 1)) / step;
                   g.node(OpKind::Arange, {}, {g.output(d, {len})}, AttrList().i(start).i(end).i(step).dtype(d));
                   return g;
                 }, 0, 0});
  }
  struct CastCase { DType from, to; };
  for (const CastCase cc : {CastCase{DType::kBool, DType::kF32}, CastCase{DType::kF32, DType::kBool},
                            CastCase{DType::kI32, DType::kF32}, CastCase{DType::kI64, DType::kF32},
                            CastCase{DType::kBool, DType::kI64}}) {
    c.push_back({"cast_" + std::string(dtype_name(cc.from)) + "_" + std::string(dtype_name(cc.to)),
                 [cc](std::mt19937& rng) {
                   Graph g;
                   const Shape s = random_shape(rng, 2, 1, 9);
                   Tensor x = rnd(cc.from, s, rng, -100, 100);
                   if (cc.from == DType::kF32) for (std::int64_t i = 0; i < x.numel(); i += 4) x.set(i, 0.0);
                   g.node(OpKind::Cast, {g.input(x)}, {g.output(cc.to, s)}, AttrList().dtype(cc.to));
                   return g;
                 }, 0, 0});
  }
  return c;
}

class Conformance : public ::testing::TestWithParam<Case> {};

TEST_P(Conformance, MatchesCpu) {
  KILN_VULKAN_BACKEND_OR_SKIP(b);
  const Case& c = GetParam();
  for (int seed = 0; seed < c.seeds; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(1234u + static_cast<unsigned>(seed) * 7919u);
    Graph g = c.build(rng);
    // Every node of a single-op case must be one the backend claims to support.
    for (const auto& n : g.desc.nodes) {
      std::vector<DType> in, out;
      for (auto id : n.inputs) {
        if (id != backend::kAbsentTensor) in.push_back(g.desc.tensors[id].dtype);
      }
      for (auto id : n.outputs) out.push_back(g.desc.tensors[id].dtype);
      ASSERT_TRUE(b->supports(n.op, in, out, n.attrs)) << op_name(n.op);
    }
    auto want = run_cpu(g);
    ASSERT_TRUE(want.ok()) << want.status().to_string();
    auto got = run_vulkan(*b, g);
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    EXPECT_TRUE(outputs_match(*got, *want, c.rtol, c.atol));
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, Conformance, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

}  // namespace
}  // namespace kiln::vulkan::testing

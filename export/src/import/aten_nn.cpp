// aten linear algebra and neural-network ops: linear/matmul family, einsum, convolution
// (incl. transposed, by decomposition), normalizations, softmax, pooling, embedding,
// scaled_dot_product_attention, nearest upsampling.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <map>

#include "import/importer.h"

namespace kiln::pt2 {
namespace {

using sym::Expr;

Expr c(std::int64_t v) { return Expr::constant(v); }

std::vector<std::int64_t> pair(std::vector<std::int64_t> v, std::int64_t fallback) {
  if (v.empty()) return {fallback, fallback};
  if (v.size() == 1) return {v[0], v[0]};
  return v;
}

std::int64_t static_dim(Importer& im, int v, std::int64_t d, const char* what) {
  auto k = im.simplify(im.shape(v)[static_cast<std::size_t>(d)]).constant_value();
  if (!k) im.unsupported(std::string(what) + " must be static");
  return *k;
}

// The [N, K] weight when `v` is permute(w, [1, 0]) (how the core IR spells nn.Linear), so
// that x @ w^T can run as linear(x, w) without transposing the weight on every run.
std::optional<int> transposed_source(Importer& im, int v) {
  const ir::Graph& g = im.graph();
  for (auto it = g.nodes.rbegin(); it != g.nodes.rend(); ++it) {
    if (std::find(it->outputs.begin(), it->outputs.end(), v) == it->outputs.end()) continue;
    if (it->op != OpKind::Permute || it->attrs.empty()) return std::nullopt;
    const auto* dims = std::get_if<std::vector<std::int64_t>>(&it->attrs[0]);
    if (!dims || *dims != std::vector<std::int64_t>{1, 0}) return std::nullopt;
    return it->inputs[0];
  }
  return std::nullopt;
}

void addmm(Importer& im) {
  const DType out = im.out_dtype();
  const int a = im.cast(im.tensor(1, "mat1"), out);
  const int b = im.cast(im.tensor(2, "mat2"), out);
  const double beta = im.float_arg(3, "beta", 1.0), alpha = im.float_arg(4, "alpha", 1.0);
  const Shape s = im.out_shape();
  if (alpha == 1.0 && beta == 1.0 && im.rank(a) == 2) {
    const int bias = im.cast(im.tensor(0, "self"), out);
    if (auto w = transposed_source(im, b); w && im.rank(bias) == 1 && im.dtype(*w) == out) {
      im.emit_out(OpKind::Linear, {a, *w, bias});
      return;
    }
  }
  int m = im.emit(OpKind::Matmul, {a, b}, {}, out, s);
  if (alpha != 1.0) m = im.emit(OpKind::Mul, {m, im.scalar(alpha, out)}, {}, out, s);
  int bias = im.cast(im.tensor(0, "self"), out);
  if (beta == 0.0) {
    im.define(0, m);
    return;
  }
  if (beta != 1.0) bias = im.emit(OpKind::Mul, {bias, im.scalar(beta, out)}, {}, out, im.shape(bias));
  im.emit_out(OpKind::Add, {m, bias});
}

void baddbmm(Importer& im) {
  const DType out = im.out_dtype();
  const int a = im.cast(im.tensor(1, "batch1"), out);
  const int b = im.cast(im.tensor(2, "batch2"), out);
  const double beta = im.float_arg(3, "beta", 1.0), alpha = im.float_arg(4, "alpha", 1.0);
  const Shape s = im.out_shape();
  int m = im.emit(OpKind::Bmm, {a, b}, {}, out, s);
  if (alpha != 1.0) m = im.emit(OpKind::Mul, {m, im.scalar(alpha, out)}, {}, out, s);
  if (beta == 0.0) {
    im.define(0, m);
    return;
  }
  int bias = im.cast(im.tensor(0, "self"), out);
  if (beta != 1.0) bias = im.emit(OpKind::Mul, {bias, im.scalar(beta, out)}, {}, out, im.shape(bias));
  im.emit_out(OpKind::Add, {m, bias});
}

// einsum over one or two operands: permute/reshape to a batched matmul.
void einsum(Importer& im) {
  std::string eq = im.string_arg(0, "equation");
  eq.erase(std::remove(eq.begin(), eq.end(), ' '), eq.end());
  const std::vector<int> ops = im.tensor_list(1, "tensors");
  if (eq.find("...") != std::string::npos) im.unsupported("einsum with '...'");
  const std::size_t arrow = eq.find("->");
  if (arrow == std::string::npos) im.unsupported("einsum without an explicit '->' output");
  const std::string out = eq.substr(arrow + 2);
  std::vector<std::string> ins;
  std::size_t start = 0;
  const std::string lhs = eq.substr(0, arrow);
  for (std::size_t i = 0; i <= lhs.size(); ++i) {
    if (i == lhs.size() || lhs[i] == ',') {
      ins.push_back(lhs.substr(start, i - start));
      start = i + 1;
    }
  }
  if (ins.size() != ops.size() || ops.empty() || ops.size() > 2) im.unsupported("einsum with " + std::to_string(ops.size()) + " operands");
  const DType dt = im.out_dtype();
  std::map<char, Expr> size;
  for (std::size_t k = 0; k < ops.size(); ++k) {
    if (static_cast<std::int64_t>(ins[k].size()) != im.rank(ops[k])) im.bad("einsum operand rank does not match '" + ins[k] + "'");
    for (std::size_t i = 0; i < ins[k].size(); ++i) {
      if (std::count(ins[k].begin(), ins[k].end(), ins[k][i]) > 1) im.unsupported("einsum with a repeated index (diagonal)");
      size[ins[k][i]] = im.shape(ops[k])[i];
    }
  }
  auto sum_out = [&](int v, const std::string& have, const std::string& keep) {
    std::vector<std::int64_t> dims;
    std::string rest;
    for (std::size_t i = 0; i < have.size(); ++i) {
      if (keep.find(have[i]) == std::string::npos) dims.push_back(static_cast<std::int64_t>(i));
      else rest += have[i];
    }
    if (dims.empty()) return std::pair{v, have};
    Shape s;
    for (char ch : rest) s.push_back(size[ch]);
    return std::pair{im.emit(OpKind::Sum, {v}, {dims, false, std::monostate{}}, dt, s), rest};
  };
  auto order_as = [&](int v, const std::string& have, const std::string& want) {
    std::vector<std::int64_t> perm;
    for (char ch : want) perm.push_back(static_cast<std::int64_t>(have.find(ch)));
    return im.permute(v, perm);
  };
  if (ops.size() == 1) {
    auto [v, have] = sum_out(im.cast(ops[0], dt), ins[0], out);
    im.define(0, order_as(v, have, out));
    return;
  }
  // Drop indices that appear in one operand only and not in the output.
  auto [a, sa] = sum_out(im.cast(ops[0], dt), ins[0], out + ins[1]);
  auto [b, sb] = sum_out(im.cast(ops[1], dt), ins[1], out + ins[0]);
  std::string batch, left, right, contract;
  for (char ch : sa) {
    const bool in_b = sb.find(ch) != std::string::npos, in_out = out.find(ch) != std::string::npos;
    if (in_b && in_out) batch += ch;
    else if (in_b) contract += ch;
    else left += ch;
  }
  for (char ch : sb) if (sa.find(ch) == std::string::npos) right += ch;
  auto prod = [&](const std::string& ids) {
    Expr p = c(1);
    for (char ch : ids) p = p * size[ch];
    return im.simplify(p);
  };
  Shape bshape;
  for (char ch : batch) bshape.push_back(size[ch]);
  const int a3 = im.reshape(order_as(a, sa, batch + left + contract), {prod(batch), prod(left), prod(contract)});
  const int b3 = im.reshape(order_as(b, sb, batch + contract + right), {prod(batch), prod(contract), prod(right)});
  const int m = im.emit(OpKind::Bmm, {a3, b3}, {}, dt, {prod(batch), prod(left), prod(right)});
  Shape full = bshape;
  for (char ch : left) full.push_back(size[ch]);
  for (char ch : right) full.push_back(size[ch]);
  const int r = im.reshape(m, full);
  im.define(0, order_as(r, batch + left + right, out));
}

// conv over 1-D or 2-D inputs (1-D through a height-1 2-D conv).
int conv_forward(Importer& im, int x, int w, std::optional<int> bias, std::vector<std::int64_t> stride,
                 std::vector<std::int64_t> padding, std::vector<std::int64_t> dilation, std::int64_t groups, DType dt, const Shape& out) {
  std::vector<int> in{x, w};
  if (bias) in.push_back(*bias);
  return im.emit(OpKind::Conv2d, in, {pair(stride, 1), pair(padding, 0), pair(dilation, 1), groups}, dt, out);
}

std::vector<std::int64_t> conv_padding(Importer& im, int w, std::vector<std::int64_t> dilation, std::size_t spatial) {
  const std::string mode = im.string_arg(4, "padding");
  if (mode == "valid") return std::vector<std::int64_t>(spatial, 0);
  std::vector<std::int64_t> pads;
  for (std::size_t i = 0; i < spatial; ++i) {
    const std::int64_t k = static_dim(im, w, 2 + static_cast<std::int64_t>(i), "the kernel size");
    const std::int64_t total = (dilation.size() > i ? dilation[i] : dilation[0]) * (k - 1);
    if (total % 2) im.unsupported("padding='same' with an even kernel (asymmetric padding)");
    pads.push_back(total / 2);
  }
  return pads;
}

// conv_transpose2d as a strided zero-insertion, padding and an ordinary conv with the
// kernel flipped and its in/out channels swapped.
int conv_transpose(Importer& im, int x, int w, std::optional<int> bias, std::vector<std::int64_t> stride,
                   std::vector<std::int64_t> padding, std::vector<std::int64_t> output_padding, std::vector<std::int64_t> dilation,
                   std::int64_t groups, DType dt, const Shape& out) {
  stride = pair(stride, 1);
  padding = pair(padding, 0);
  output_padding = pair(output_padding, 0);
  dilation = pair(dilation, 1);
  if (im.rank(x) != 4 || im.rank(w) != 4) im.unsupported("conv_transpose of rank other than 2-D with a batch dim");
  const Shape xs = im.shape(x);
  const Expr n = xs[0], ch = xs[1], h = xs[2], wd = xs[3];
  int v = x;
  if (stride[0] > 1 || stride[1] > 1) {
    const std::int64_t sh = stride[0], sw = stride[1];
    v = im.reshape(v, {n, ch, h, c(1), wd, c(1)});
    v = im.emit(OpKind::Pad, {v}, {std::vector<std::int64_t>{0, sw - 1, 0, 0, 0, sh - 1, 0, 0, 0, 0, 0, 0}, 0.0}, dt,
                {n, ch, h, c(sh), wd, c(sw)});
    v = im.reshape(v, {n, ch, h * c(sh), wd * c(sw)});
    v = im.emit(OpKind::Slice, {v}, {std::int64_t{2}, c(0), h * c(sh) - c(sh - 1), std::int64_t{1}}, dt,
                {n, ch, h * c(sh) - c(sh - 1), wd * c(sw)});
    v = im.emit(OpKind::Slice, {v}, {std::int64_t{3}, c(0), wd * c(sw) - c(sw - 1), std::int64_t{1}}, dt,
                {n, ch, h * c(sh) - c(sh - 1), wd * c(sw) - c(sw - 1)});
  }
  const std::int64_t kh = static_dim(im, w, 2, "the kernel size"), kw = static_dim(im, w, 3, "the kernel size");
  const std::int64_t ph = dilation[0] * (kh - 1) - padding[0], pw = dilation[1] * (kw - 1) - padding[1];
  const Shape vs = im.shape(v);
  const Shape padded{vs[0], vs[1], vs[2] + c(2 * ph + output_padding[0]), vs[3] + c(2 * pw + output_padding[1])};
  if (ph != 0 || pw != 0 || output_padding[0] != 0 || output_padding[1] != 0) {
    v = im.emit(OpKind::Pad, {v}, {std::vector<std::int64_t>{pw, pw + output_padding[1], ph, ph + output_padding[0]}, 0.0}, dt, padded);
  }
  // weight [Cin, Cout/g, kH, kW] -> [Cout, Cin/g, kH, kW], flipped spatially.
  const Shape ws = im.shape(w);
  const Expr cin = ws[0], coutg = ws[1];
  int wt = im.emit(OpKind::Flip, {w}, {std::vector<std::int64_t>{2, 3}}, dt, ws);
  const Expr cing = im.simplify(sym::floordiv(cin, c(groups)));
  wt = im.reshape(wt, {c(groups), cing, coutg, c(kh), c(kw)});
  wt = im.permute(wt, {0, 2, 1, 3, 4});
  wt = im.reshape(wt, {im.simplify(c(groups) * coutg), cing, c(kh), c(kw)});
  return conv_forward(im, v, wt, bias, {1, 1}, {0, 0}, dilation, groups, dt, out);
}

void convolution(Importer& im, bool transposed_op) {
  const DType dt = im.out_dtype();
  int x = im.cast(im.tensor(0, "input"), dt);
  int w = im.cast(im.tensor(1, "weight"), dt);
  std::optional<int> bias = im.opt_tensor(2, "bias");
  if (bias) bias = im.cast(*bias, dt);
  const std::int64_t spatial = im.rank(w) - 2;
  if (spatial < 1 || spatial > 3) im.unsupported(std::to_string(spatial) + "-D convolution (Kiln has 1-D, 2-D and 3-D)");
  const std::vector<std::int64_t> stride = im.int_list(3, "stride", {1});
  std::vector<std::int64_t> dilation;
  std::vector<std::int64_t> padding;
  bool transposed = transposed_op;
  std::vector<std::int64_t> output_padding{0};
  std::int64_t groups = 1;
  if (im.target().rfind("aten.convolution", 0) == 0 || im.target().rfind("aten._convolution", 0) == 0) {
    padding = im.int_list(4, "padding", {0});
    dilation = im.int_list(5, "dilation", {1});
    transposed = im.bool_arg(6, "transposed", false);
    output_padding = im.int_list(7, "output_padding", {0});
    groups = im.int_arg(8, "groups", 1);
  } else if (transposed_op) {
    padding = im.int_list(4, "padding", {0});
    output_padding = im.int_list(5, "output_padding", {0});
    groups = im.int_arg(6, "groups", 1);
    dilation = im.int_list(7, "dilation", {1});
  } else {
    dilation = im.int_list(5, "dilation", {1});
    if (im.overload() == "padding") padding = conv_padding(im, w, dilation.empty() ? std::vector<std::int64_t>{1} : dilation, static_cast<std::size_t>(spatial));
    else padding = im.int_list(4, "padding", {0});
    groups = im.int_arg(6, "groups", 1);
  }
  const Shape out = im.out_shape();
  if (spatial == 3 || (spatial == 1 && transposed)) {
    im.define(0, convolution_volume(im, x, w, bias, stride, padding, dilation, transposed, output_padding, groups, dt, out));
    return;
  }
  if (spatial == 1) {
    const Shape xs = im.shape(x), ws = im.shape(w);
    if (xs.size() != 2 && xs.size() != 3) im.bad("conv1d input must be [N, C, L] or [C, L]");
    const bool batched = xs.size() == 3;
    x = batched ? im.reshape(x, {xs[0], xs[1], c(1), xs[2]}) : im.reshape(x, {xs[0], c(1), xs[1]});
    w = im.reshape(w, {ws[0], ws[1], c(1), ws[2]});
    Shape out4 = out;
    out4.insert(out4.end() - 1, c(1));
    const int r = conv_forward(im, x, w, bias, {1, stride[0]}, {0, padding.empty() ? 0 : padding[0]},
                               {1, dilation.empty() ? 1 : dilation[0]}, groups, dt, out4);
    im.define(0, im.reshape(r, out));
    return;
  }
  const int r = transposed ? conv_transpose(im, x, w, bias, stride, padding, output_padding, dilation, groups, dt, out)
                           : conv_forward(im, x, w, bias, stride, padding, dilation, groups, dt, out);
  im.define(0, r);
}

// batch_norm family: (input, weight, bias, running_mean, running_var, [training], momentum, eps).
void batch_norm(Importer& im) {
  const std::string& t = im.target();
  const bool no_training = t.find("no_training") != std::string::npos;
  if (!no_training && im.bool_arg(5, "training", false)) im.unsupported("batch norm in training mode (export the model in eval mode)");
  const double eps = im.float_arg(no_training ? 6 : 7, "eps", 1e-5);
  const DType dt = im.out_dtype();
  const int x = im.cast(im.tensor(0, "input"), dt);
  auto opt = [&](std::size_t pos, const char* name) {
    auto v = im.opt_tensor(pos, name);
    return v ? im.cast(*v, dt) : im.none_value();
  };
  const int w = opt(1, "weight"), b = opt(2, "bias");
  auto mean = im.opt_tensor(3, "running_mean"), var = im.opt_tensor(4, "running_var");
  if (!mean || !var) im.unsupported("batch norm without running statistics");
  im.emit_out(OpKind::BatchNorm, {x, w, b, im.cast(*mean, dt), im.cast(*var, dt)}, {eps});
  for (std::size_t k = 1; k < im.num_outputs(); ++k) {
    if (im.output_used(k)) im.unsupported("the saved mean / inverse std outputs of batch norm");
  }
}

void layer_norm(Importer& im) {
  const DType dt = im.out_dtype();
  const int x = im.cast(im.tensor(0, "input"), dt);
  const auto normalized = im.sym_int_list(1, "normalized_shape");
  auto w = im.opt_tensor(2, "weight"), b = im.opt_tensor(3, "bias");
  const double eps = im.float_arg(4, "eps", 1e-5);
  std::vector<int> in{x};
  if (w || b) in.push_back(w ? im.cast(*w, dt) : im.none_value());
  if (b) in.push_back(im.cast(*b, dt));
  im.emit_out(OpKind::LayerNorm, in, {static_cast<std::int64_t>(normalized.size()), eps});
  for (std::size_t k = 1; k < im.num_outputs(); ++k) {
    if (im.output_used(k)) im.unsupported("the mean / rstd outputs of layer norm");
  }
}

void group_norm(Importer& im) {
  const bool native = im.target().rfind("aten.native_group_norm", 0) == 0;
  const DType dt = im.out_dtype();
  const int x = im.cast(im.tensor(0, "input"), dt);
  const std::int64_t groups = native ? im.int_arg(6, "group") : im.int_arg(1, "num_groups");
  auto w = im.opt_tensor(native ? 1 : 2, "weight"), b = im.opt_tensor(native ? 2 : 3, "bias");
  const double eps = im.float_arg(7, "eps", 1e-5);
  const Shape xs = im.shape(x);
  if (xs.size() < 2) im.bad("group_norm needs [N, C, ...]");
  Expr rest = im.simplify(sym::floordiv(xs[1], c(groups)));
  for (std::size_t d = 2; d < xs.size(); ++d) rest = rest * xs[d];
  rest = im.simplify(rest);
  const Shape s3{xs[0], c(groups), rest}, s3k{xs[0], c(groups), c(1)};
  const int x3 = im.reshape(x, s3);
  const int mean = im.emit(OpKind::Mean, {x3}, {std::vector<std::int64_t>{2}, true}, dt, s3k);
  const int var = im.emit(OpKind::Var, {x3}, {std::vector<std::int64_t>{2}, 0.0, true}, dt, s3k);
  const int centered = im.emit(OpKind::Sub, {x3, mean}, {}, dt, s3);
  const int ve = im.emit(OpKind::Add, {var, im.scalar(eps, dt)}, {}, dt, s3k);
  const int inv = im.emit(OpKind::Rsqrt, {ve}, {}, dt, s3k);
  int y = im.reshape(im.emit(OpKind::Mul, {centered, inv}, {}, dt, s3), xs);
  Shape cshape{xs[1]};
  for (std::size_t d = 2; d < xs.size(); ++d) cshape.push_back(c(1));
  if (w) y = im.emit(OpKind::Mul, {y, im.reshape(im.cast(*w, dt), cshape)}, {}, dt, xs);
  if (b) y = im.emit(OpKind::Add, {y, im.reshape(im.cast(*b, dt), cshape)}, {}, dt, xs);
  im.define(0, y);
  for (std::size_t k = 1; k < im.num_outputs(); ++k) {
    if (im.output_used(k)) im.unsupported("the mean / rstd outputs of group norm");
  }
}

void softmax(Importer& im, OpKind op) {
  const DType dt = im.out_dtype();
  const int x = im.cast(im.tensor(0, "self"), dt);
  const std::int64_t d = im.norm_dim(im.int_arg(1, "dim"), im.rank(x));
  if (im.rank(x) == 0) {
    im.define(0, im.emit(OpKind::Full, {}, {Shape{}, op == OpKind::Softmax ? 1.0 : 0.0, dt}, dt, {}));
    return;
  }
  im.emit_out(op, {x}, {d});
}

void max_pool(Importer& im) {
  const int x = im.tensor(0, "self");
  const auto kernel = pair(im.int_list(1, "kernel_size"), 1);
  auto stride = im.int_list(2, "stride", {});
  stride = stride.empty() ? kernel : pair(stride, 1);
  const auto padding = pair(im.int_list(3, "padding", {0}), 0);
  const auto dilation = pair(im.int_list(4, "dilation", {1}), 1);
  const bool ceil_mode = im.bool_arg(5, "ceil_mode", false);
  im.emit_out(OpKind::MaxPool2d, {x}, {kernel, stride, padding, dilation, ceil_mode});
  if (im.num_outputs() > 1 && im.output_used(1)) im.unsupported("the indices output of max pooling");
}

void avg_pool(Importer& im) {
  const int x = im.cast(im.tensor(0, "self"), im.out_dtype());
  const auto kernel = pair(im.int_list(1, "kernel_size"), 1);
  auto stride = im.int_list(2, "stride", {});
  stride = stride.empty() ? kernel : pair(stride, 1);
  const auto padding = pair(im.int_list(3, "padding", {0}), 0);
  if (im.has(6, "divisor_override")) im.unsupported("avg_pool2d with divisor_override");
  im.emit_out(OpKind::AvgPool2d, {x}, {kernel, stride, padding, im.bool_arg(4, "ceil_mode", false),
                                       im.bool_arg(5, "count_include_pad", true)});
}

void adaptive_pool(Importer& im, OpKind op) {
  const int x = im.tensor(0, "self");
  const Shape out = im.out_shape();
  if (out.size() < 2) im.bad("adaptive pooling output has rank < 2");
  std::vector<std::int64_t> size;
  for (std::size_t d = out.size() - 2; d < out.size(); ++d) {
    auto k = out[d].constant_value();
    if (!k) im.unsupported("a symbolic adaptive pooling output size");
    size.push_back(*k);
  }
  im.emit_out(op, {op == OpKind::AdaptiveAvgPool2d ? im.cast(x, im.out_dtype()) : x}, {size});
  if (im.num_outputs() > 1 && im.output_used(1)) im.unsupported("the indices output of adaptive max pooling");
}

// scaled_dot_product_attention(q, k, v, attn_mask, dropout_p, is_causal, scale, enable_gqa)
void sdpa(Importer& im) {
  const DType dt = im.out_dtype();
  const int q = im.cast(im.tensor(0, "query"), dt);
  const int k = im.cast(im.tensor(1, "key"), dt);
  const int v = im.cast(im.tensor(2, "value"), dt);
  auto mask = im.opt_tensor(3, "attn_mask");
  if (im.float_arg(4, "dropout_p", 0.0) != 0.0) im.unsupported("attention dropout");
  const bool causal = im.bool_arg(5, "is_causal", false);
  if (im.bool_arg(7, "enable_gqa", false)) im.unsupported("grouped-query attention (enable_gqa)");
  const Shape qs = im.shape(q), ks = im.shape(k);
  if (qs.size() < 2 || ks.size() != qs.size()) im.unsupported("attention with query/key of different ranks");
  const std::size_t r = qs.size();
  double scale;
  if (im.has(6, "scale")) {
    scale = im.float_arg(6, "scale");
  } else {
    auto e = im.simplify(qs[r - 1]).constant_value();
    if (!e) im.unsupported("attention with a symbolic head size and no explicit scale");
    scale = 1.0 / std::sqrt(static_cast<double>(*e));
  }
  std::vector<std::int64_t> perm;
  for (std::size_t i = 0; i < r; ++i) perm.push_back(static_cast<std::int64_t>(i));
  std::swap(perm[r - 1], perm[r - 2]);
  const int kt = im.permute(k, perm);
  Shape ss(qs.begin(), qs.end() - 1);
  ss.push_back(ks[r - 2]);
  int s = im.emit(OpKind::Matmul, {q, kt}, {}, dt, ss);
  s = im.emit(OpKind::Mul, {s, im.scalar(scale, dt)}, {}, dt, ss);
  const Shape ls{qs[r - 2], ks[r - 2]};
  if (causal) {
    const int ones = im.emit(OpKind::Full, {}, {ls, 1.0, DType::kBool}, DType::kBool, ls);
    const int tri = im.emit(OpKind::Tril, {ones}, {std::int64_t{0}}, DType::kBool, ls);
    const int masked = im.emit(OpKind::LogicalNot, {tri}, {}, DType::kBool, ls);
    s = im.emit(OpKind::MaskedFill, {s, masked, im.scalar(-HUGE_VAL, dt)}, {}, dt, ss);
  }
  if (mask) {
    if (im.dtype(*mask) == DType::kBool) {
      const int inv = im.emit(OpKind::LogicalNot, {*mask}, {}, DType::kBool, im.shape(*mask));
      s = im.emit(OpKind::MaskedFill, {s, inv, im.scalar(-HUGE_VAL, dt)}, {}, dt, ss);
    } else {
      s = im.emit(OpKind::Add, {s, im.cast(*mask, dt)}, {}, dt, ss);
    }
  }
  const int p = im.emit(OpKind::Softmax, {s}, {static_cast<std::int64_t>(r - 1)}, dt, ss);
  im.emit_out(OpKind::Matmul, {p, v});
}

// upsample_nearest2d: integer factors by reshape/expand; other static sizes by index_select
// with PyTorch's source index floor(i * in / out).
void upsample_nearest(Importer& im) {
  const int x = im.has(0, "input") ? im.tensor(0, "input") : im.tensor(0, "self");
  const Shape xs = im.shape(x), out = im.out_shape();
  if (xs.size() != 4) im.unsupported("nearest upsampling of rank other than 4");
  if (out.size() != 4) im.bad("upsampling output has the wrong rank");
  std::vector<double> scales;
  if (im.has(2, "scale_factors")) {
    const json* a = im.arg(2, "scale_factors");
    if (const auto it = a->find("as_floats"); it != a->end()) for (const auto& f : *it) scales.push_back(f.get<double>());
  }
  int v = x;
  for (int axis = 2; axis < 4; ++axis) {
    const std::size_t ax = static_cast<std::size_t>(axis);
    auto in_size = im.simplify(xs[ax]).constant_value();
    auto out_size = im.simplify(out[ax]).constant_value();
    std::optional<std::int64_t> factor;
    if (scales.size() == 2 && std::floor(scales[ax - 2]) == scales[ax - 2]) factor = static_cast<std::int64_t>(scales[ax - 2]);
    else if (in_size && out_size && *in_size > 0 && *out_size % *in_size == 0) factor = *out_size / *in_size;
    if (factor && (!out_size || !in_size || *out_size == *in_size * *factor)) {
      if (*factor == 1) continue;
      Shape s = im.shape(v);
      Shape split = s, expanded = s, merged = s;
      split.insert(split.begin() + axis + 1, c(1));
      expanded.insert(expanded.begin() + axis + 1, c(*factor));
      merged[ax] = im.simplify(s[ax] * c(*factor));
      const int r = im.reshape(v, split);
      const int e = im.emit(OpKind::Expand, {r}, {expanded}, im.dtype(v), expanded);
      v = im.reshape(e, merged);
      continue;
    }
    if (!in_size || !out_size) im.unsupported("nearest upsampling by a non-integer factor of a symbolic size");
    std::vector<std::int64_t> idx;
    const double scale = scales.size() == 2 ? 1.0 / scales[ax - 2] : static_cast<double>(*in_size) / static_cast<double>(*out_size);
    for (std::int64_t i = 0; i < *out_size; ++i) {
      idx.push_back(std::min<std::int64_t>(static_cast<std::int64_t>(std::floor(static_cast<double>(i) * scale)), *in_size - 1));
    }
    Shape s = im.shape(v);
    s[ax] = c(*out_size);
    v = im.emit(OpKind::IndexSelect, {v, im.index_constant(idx)}, {std::int64_t{axis}}, im.dtype(v), s);
  }
  im.define(0, v);
}

// PyTorch's cubic convolution weights (A = -0.75) of the four taps around a source
// coordinate with fractional part t (upsample_bicubic2d).
std::array<double, 4> cubic_weights(double t) {
  constexpr double A = -0.75;
  auto near = [](double x) { return ((A + 2) * x - (A + 3)) * x * x + 1; };
  auto far = [](double x) { return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A; };
  return {far(t + 1), near(t), near(1 - t), far(2 - t)};
}

// upsample_bilinear2d / upsample_bicubic2d over static sizes: out = A_h @ x @ A_w^T with
// PyTorch's source coordinates (align_corners, scale factors) and taps (2 linear, or 4
// cubic with clamped borders) baked into two interpolation matrices.
void upsample_interpolate(Importer& im, bool cubic) {
  const std::string mode = cubic ? "bicubic" : "bilinear";
  const DType dt = im.out_dtype();
  if (!dtype_is_floating(dt)) im.unsupported(mode + " upsampling of integers");
  const int x = im.cast(im.has(0, "input") ? im.tensor(0, "input") : im.tensor(0, "self"), dt);
  const Shape xs = im.shape(x), out = im.out_shape();
  if (xs.size() != 4 || out.size() != 4) im.unsupported(mode + " upsampling of rank other than 4");
  const bool align = im.bool_arg(2, "align_corners", false);
  std::vector<double> scales;
  if (const json* a = im.arg(3, "scale_factors")) {
    if (const auto it = a->find("as_floats"); it != a->end()) for (const auto& f : *it) scales.push_back(f.get<double>());
  }
  for (const char* name : {"scales_h", "scales_w"}) if (im.has(3, name)) scales.push_back(im.float_arg(3, name));
  int v = x;
  for (int axis = 2; axis < 4; ++axis) {
    const std::size_t ax = static_cast<std::size_t>(axis);
    auto in_size = im.simplify(xs[ax]).constant_value();
    auto out_size = im.simplify(out[ax]).constant_value();
    if (!in_size || !out_size) im.unsupported(mode + " upsampling of a dynamic spatial size");
    const std::int64_t n_in = *in_size, n_out = *out_size;
    std::vector<double> m(static_cast<std::size_t>(n_out * n_in), 0.0);
    for (std::int64_t o = 0; o < n_out; ++o) {
      double src;
      if (align) {
        src = n_out > 1 ? static_cast<double>(o) * static_cast<double>(n_in - 1) / static_cast<double>(n_out - 1) : 0.0;
      } else {
        const double scale = scales.size() == 2 && scales[ax - 2] > 0 ? 1.0 / scales[ax - 2]
                                                                    : static_cast<double>(n_in) / static_cast<double>(n_out);
        src = (static_cast<double>(o) + 0.5) * scale - 0.5;
        if (!cubic) src = std::max(0.0, src);
      }
      if (cubic) {
        const double f = std::floor(src);
        const auto w = cubic_weights(src - f);
        for (std::int64_t k = 0; k < 4; ++k) {
          const std::int64_t i = std::clamp<std::int64_t>(static_cast<std::int64_t>(f) - 1 + k, 0, n_in - 1);
          m[static_cast<std::size_t>(o * n_in + i)] += w[static_cast<std::size_t>(k)];
        }
        continue;
      }
      const std::int64_t i0 = std::min<std::int64_t>(static_cast<std::int64_t>(std::floor(src)), n_in - 1);
      const std::int64_t i1 = std::min<std::int64_t>(i0 + 1, n_in - 1);
      const double l1 = src - static_cast<double>(i0);
      m[static_cast<std::size_t>(o * n_in + i0)] += 1.0 - l1;
      m[static_cast<std::size_t>(o * n_in + i1)] += l1;
    }
    std::vector<std::uint8_t> bytes(m.size() * dtype_size(dt));
    for (std::size_t i = 0; i < m.size(); ++i) {
      if (dt == DType::kF64) std::memcpy(bytes.data() + 8 * i, &m[i], 8);
      else { const float f = static_cast<float>(m[i]); std::memcpy(bytes.data() + 4 * i, &f, 4); }
    }
    if (dt != DType::kF32 && dt != DType::kF64) im.unsupported(mode + " upsampling of half types");
    Shape s = im.shape(v);
    s[ax] = c(n_out);
    if (axis == 2) {
      const int a = im.constant(dt, {n_out, n_in}, std::move(bytes), mode + "_h");
      v = im.emit(OpKind::Matmul, {a, v}, {}, dt, s);
    } else {
      const int a = im.constant(dt, {n_in, n_out}, [&] {
        std::vector<std::uint8_t> t(bytes.size());
        const std::size_t es = dtype_size(dt);
        for (std::int64_t o = 0; o < n_out; ++o)
          for (std::int64_t i = 0; i < n_in; ++i)
            std::memcpy(t.data() + static_cast<std::size_t>(i * n_out + o) * es, bytes.data() + static_cast<std::size_t>(o * n_in + i) * es, es);
        return t;
      }(), mode + "_w");
      v = im.emit(OpKind::Matmul, {v, a}, {}, dt, s);
    }
  }
  im.define(0, v);
}

// 1-D pooling through the 2-D kernels on [N, C, 1, L].
void pool1d(Importer& im, OpKind op) {
  const DType dt = im.out_dtype();
  const int x = op == OpKind::MaxPool2d ? im.tensor(0, "self") : im.cast(im.tensor(0, "self"), dt);
  const Shape xs = im.shape(x);
  if (xs.size() != 2 && xs.size() != 3) im.bad("1-D pooling needs [N, C, L] or [C, L]");
  Shape x4 = xs;
  x4.insert(x4.end() - 1, c(1));
  Shape o4 = im.out_shape();
  if (o4.size() != xs.size()) im.bad("1-D pooling output has the wrong rank");
  o4.insert(o4.end() - 1, c(1));
  const int v = im.reshape(x, x4);
  int r;
  if (op == OpKind::AdaptiveAvgPool2d || op == OpKind::AdaptiveMaxPool2d) {
    auto n = o4.back().constant_value();
    if (!n) im.unsupported("a symbolic adaptive pooling output size");
    r = im.emit(op, {v}, {std::vector<std::int64_t>{1, *n}}, dt, o4);
  } else {
    const auto k = im.int_list(1, "kernel_size");
    auto stride = im.int_list(2, "stride", {});
    if (stride.empty()) stride = k;
    const auto pad = im.int_list(3, "padding", {0});
    if (k.empty()) im.bad("missing kernel_size");
    if (op == OpKind::MaxPool2d) {
      const auto dil = im.int_list(4, "dilation", {1});
      r = im.emit(op, {v}, {std::vector<std::int64_t>{1, k[0]}, std::vector<std::int64_t>{1, stride[0]},
                            std::vector<std::int64_t>{0, pad[0]}, std::vector<std::int64_t>{1, dil[0]}, im.bool_arg(5, "ceil_mode", false)},
                  dt, o4);
    } else {
      r = im.emit(op, {v}, {std::vector<std::int64_t>{1, k[0]}, std::vector<std::int64_t>{1, stride[0]}, std::vector<std::int64_t>{0, pad[0]},
                            im.bool_arg(4, "ceil_mode", false), im.bool_arg(5, "count_include_pad", true)},
                  dt, o4);
    }
  }
  im.define(0, im.reshape(r, im.out_shape()));
  if (im.num_outputs() > 1 && im.output_used(1)) im.unsupported("the indices output of max pooling");
}

// rms_norm(input, normalized_shape, weight?, eps?): x * rsqrt(mean(x^2) + eps) * weight.
void rms_norm(Importer& im) {
  const DType dt = im.out_dtype();
  const int x = im.cast(im.tensor(0, "input"), dt);
  const auto normalized = im.sym_int_list(1, "normalized_shape");
  auto w = im.opt_tensor(2, "weight");
  const double eps = im.float_arg(3, "eps", dt == DType::kF64 ? 2.220446049250313e-16 : 1.1920928955078125e-07);
  const Shape xs = im.shape(x);
  std::vector<std::int64_t> dims;
  Shape kept = xs;
  for (std::size_t i = 0; i < normalized.size(); ++i) {
    const std::size_t d = xs.size() - normalized.size() + i;
    dims.push_back(static_cast<std::int64_t>(d));
    kept[d] = c(1);
  }
  const int sq = im.emit(OpKind::Mul, {x, x}, {}, dt, xs);
  const int ms = im.emit(OpKind::Mean, {sq}, {dims, true}, dt, kept);
  const int r = im.emit(OpKind::Rsqrt, {im.emit(OpKind::Add, {ms, im.scalar(eps, dt)}, {}, dt, kept)}, {}, dt, kept);
  int y = im.emit(OpKind::Mul, {x, r}, {}, dt, xs);
  if (w) y = im.emit(OpKind::Mul, {y, im.cast(*w, dt)}, {}, dt, xs);
  im.define(0, y);
}

// linalg_vector_norm / norm: ord 2 (default), 1, inf, -inf, 0 or any p > 0.
void vector_norm(Importer& im) {
  const DType dt = im.out_dtype();
  const int x = im.cast(im.tensor(0, "self"), dt);
  const double ord = im.has(1, "ord") ? im.float_arg(1, "ord") : im.float_arg(1, "p", 2.0);
  std::vector<std::int64_t> dims;
  if (im.has(2, "dim")) dims = im.int_list(2, "dim");
  const std::int64_t r = im.rank(x);
  if (dims.empty()) for (std::int64_t d = 0; d < r; ++d) dims.push_back(d);
  for (auto& d : dims) d = im.norm_dim(d, r);
  std::sort(dims.begin(), dims.end());
  const bool keepdim = im.bool_arg(3, "keepdim", false);
  const Shape xs = im.shape(x);
  const Shape out = im.out_shape();
  const int a = im.emit(OpKind::Abs, {x}, {}, dt, xs);
  if (std::isinf(ord)) {
    im.emit_out(ord > 0 ? OpKind::Amax : OpKind::Amin, {a}, {dims, keepdim});
    return;
  }
  if (ord == 0.0) {
    const int nz = im.cast(im.emit(OpKind::Ne, {x, im.scalar(0, dt)}, {}, DType::kBool, xs), dt);
    im.emit_out(OpKind::Sum, {nz}, {dims, keepdim, std::monostate{}});
    return;
  }
  if (ord == 1.0) {
    im.emit_out(OpKind::Sum, {a}, {dims, keepdim, std::monostate{}});
    return;
  }
  if (ord <= 0.0) im.unsupported("a vector norm of negative order");
  const int p = ord == 2.0 ? im.emit(OpKind::Mul, {a, a}, {}, dt, xs) : im.emit(OpKind::Pow, {a, im.scalar(ord, dt)}, {}, dt, xs);
  const int s = im.emit(OpKind::Sum, {p}, {dims, keepdim, std::monostate{}}, dt, out);
  if (ord == 2.0) im.emit_out(OpKind::Sqrt, {s});
  else im.emit_out(OpKind::Pow, {s, im.scalar(1.0 / ord, dt)});
}

// prelu(x, weight[C] or [1]): where(x > 0, x, weight * x) with weight along dim 1.
void prelu(Importer& im) {
  const DType dt = im.out_dtype();
  const int x = im.cast(im.tensor(0, "self"), dt);
  int w = im.cast(im.tensor(1, "weight"), dt);
  const Shape xs = im.shape(x);
  if (xs.size() >= 2 && im.rank(w) == 1) {
    Shape ws{im.shape(w)[0]};
    for (std::size_t d = 2; d < xs.size(); ++d) ws.push_back(c(1));
    w = im.reshape(w, ws);
  }
  const int wx = im.emit(OpKind::Mul, {x, w}, {}, dt, xs);
  const int pos = im.emit(OpKind::Gt, {x, im.scalar(0, dt)}, {}, DType::kBool, xs);
  im.emit_out(OpKind::Where, {pos, x, wx});
}

// glu(x, dim): a * sigmoid(b) with [a, b] = x split in halves along dim.
void glu(Importer& im) {
  const DType dt = im.out_dtype();
  const int x = im.cast(im.tensor(0, "self"), dt);
  const std::int64_t d = im.norm_dim(im.int_arg(1, "dim", -1), im.rank(x));
  const Shape half = im.out_shape();
  if (static_cast<std::int64_t>(half.size()) != im.rank(x)) im.bad("glu output has the wrong rank");
  const auto parts = im.emit_multi(OpKind::Split, {x}, {d, std::vector<Expr>{half[static_cast<std::size_t>(d)], half[static_cast<std::size_t>(d)]}}, dt, {half, half});
  const int g = im.emit(OpKind::Sigmoid, {parts[1]}, {}, dt, half);
  im.emit_out(OpKind::Mul, {parts[0], g});
}

}  // namespace

int conv2d_node(Importer& im, int x, int w, std::optional<int> bias, std::vector<std::int64_t> stride,
                std::vector<std::int64_t> padding, std::vector<std::int64_t> dilation, std::int64_t groups, DType dt,
                const Shape& out) {
  return conv_forward(im, x, w, bias, std::move(stride), std::move(padding), std::move(dilation), groups, dt, out);
}

int conv_transpose2d_nodes(Importer& im, int x, int w, std::optional<int> bias, std::vector<std::int64_t> stride,
                           std::vector<std::int64_t> padding, std::vector<std::int64_t> output_padding,
                           std::vector<std::int64_t> dilation, std::int64_t groups, DType dt, const Shape& out) {
  return conv_transpose(im, x, w, bias, std::move(stride), std::move(padding), std::move(output_padding), std::move(dilation),
                        groups, dt, out);
}

void register_nn(HandlerTable& t) {
  t["aten.rms_norm"] = rms_norm;
  t["aten.upsample_bilinear2d"] = [](Importer& im) { upsample_interpolate(im, false); };
  t["aten.upsample_bicubic2d"] = [](Importer& im) { upsample_interpolate(im, true); };
  t["aten.max_pool1d"] = [](Importer& im) { pool1d(im, OpKind::MaxPool2d); };
  t["aten.max_pool1d_with_indices"] = [](Importer& im) { pool1d(im, OpKind::MaxPool2d); };
  t["aten.avg_pool1d"] = [](Importer& im) { pool1d(im, OpKind::AvgPool2d); };
  t["aten.adaptive_avg_pool1d"] = [](Importer& im) { pool1d(im, OpKind::AdaptiveAvgPool2d); };
  t["aten.adaptive_max_pool1d"] = [](Importer& im) { pool1d(im, OpKind::AdaptiveMaxPool2d); };
  t["aten.linalg_vector_norm"] = vector_norm;
  t["aten.norm"] = vector_norm;
  t["aten.prelu"] = prelu;
  t["aten._prelu_kernel"] = prelu;
  t["aten.glu"] = glu;
  t["aten.linear"] = [](Importer& im) {
    const DType dt = im.out_dtype();
    std::vector<int> in{im.cast(im.tensor(0, "input"), dt), im.cast(im.tensor(1, "weight"), dt)};
    if (auto b = im.opt_tensor(2, "bias")) in.push_back(im.cast(*b, dt));
    im.emit_out(OpKind::Linear, in);
  };
  auto mm = [](Importer& im) {
    const DType dt = im.out_dtype();
    im.emit_out(OpKind::Matmul, {im.cast(im.tensor(0, "self"), dt), im.cast(im.tensor(1, "other"), dt)});
  };
  t["aten.matmul"] = mm;
  t["aten.mm"] = [](Importer& im) {
    const DType dt = im.out_dtype();
    const int a = im.cast(im.tensor(0, "self"), dt), b = im.cast(im.tensor(1, "mat2"), dt);
    if (auto w = transposed_source(im, b); w && im.dtype(*w) == dt) {
      im.emit_out(OpKind::Linear, {a, *w});
      return;
    }
    im.emit_out(OpKind::Matmul, {a, b});
  };
  t["aten.bmm"] = [](Importer& im) {
    const DType dt = im.out_dtype();
    im.emit_out(OpKind::Bmm, {im.cast(im.tensor(0, "self"), dt), im.cast(im.tensor(1, "mat2"), dt)});
  };
  t["aten.mv"] = [](Importer& im) {
    const DType dt = im.out_dtype();
    im.emit_out(OpKind::Matmul, {im.cast(im.tensor(0, "self"), dt), im.cast(im.tensor(1, "vec"), dt)});
  };
  t["aten.dot"] = [](Importer& im) {
    const DType dt = im.out_dtype();
    im.emit_out(OpKind::Matmul, {im.cast(im.tensor(0, "self"), dt), im.cast(im.tensor(1, "tensor"), dt)});
  };
  t["aten.addmm"] = addmm;
  t["aten.outer"] = [](Importer& im) {  // a[:, None] * b[None, :]
    const DType dt = im.out_dtype();
    const int a = im.cast(im.tensor(0, "self"), dt), b = im.cast(im.tensor(1, "vec2"), dt);
    im.emit_out(OpKind::Mul, {im.unsqueeze(a, 1), im.unsqueeze(b, 0)});
  };
  t["aten.ger"] = t["aten.outer"];
  t["aten.baddbmm"] = baddbmm;
  t["aten.einsum"] = einsum;
  t["aten.conv1d"] = [](Importer& im) { convolution(im, false); };
  t["aten.conv2d"] = [](Importer& im) { convolution(im, false); };
  t["aten.convolution"] = [](Importer& im) { convolution(im, false); };
  t["aten._convolution"] = [](Importer& im) { convolution(im, false); };
  t["aten.conv_transpose2d"] = [](Importer& im) { convolution(im, true); };
  for (const char* name : {"aten.batch_norm", "aten._native_batch_norm_legit_no_training", "aten._native_batch_norm_legit",
                           "aten.native_batch_norm", "aten._batch_norm_impl_index", "aten.instance_norm_unsupported"}) {
    t[name] = batch_norm;
  }
  t.erase("aten.instance_norm_unsupported");
  t["aten.layer_norm"] = layer_norm;
  t["aten.native_layer_norm"] = layer_norm;
  t["aten.group_norm"] = group_norm;
  t["aten.native_group_norm"] = group_norm;
  t["aten.softmax"] = [](Importer& im) { softmax(im, OpKind::Softmax); };
  t["aten._softmax"] = [](Importer& im) { softmax(im, OpKind::Softmax); };
  t["aten.log_softmax"] = [](Importer& im) { softmax(im, OpKind::LogSoftmax); };
  t["aten._log_softmax"] = [](Importer& im) { softmax(im, OpKind::LogSoftmax); };
  t["aten.max_pool2d"] = max_pool;
  t["aten.max_pool2d_with_indices"] = max_pool;
  t["aten.avg_pool2d"] = avg_pool;
  t["aten.adaptive_avg_pool2d"] = [](Importer& im) { adaptive_pool(im, OpKind::AdaptiveAvgPool2d); };
  t["aten._adaptive_avg_pool2d"] = [](Importer& im) { adaptive_pool(im, OpKind::AdaptiveAvgPool2d); };
  t["aten.adaptive_max_pool2d"] = [](Importer& im) { adaptive_pool(im, OpKind::AdaptiveMaxPool2d); };
  t["aten.embedding"] = [](Importer& im) { im.emit_out(OpKind::Embedding, {im.tensor(0, "weight"), im.tensor(1, "indices")}); };
  t["aten.scaled_dot_product_attention"] = sdpa;
  t["aten.upsample_nearest2d"] = upsample_nearest;
}

}  // namespace kiln::pt2

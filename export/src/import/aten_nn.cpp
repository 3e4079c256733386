// aten linear algebra and neural-network ops: linear/matmul family, einsum, convolution
// (incl. transposed, by decomposition), normalizations, softmax, pooling, embedding,
// scaled_dot_product_attention, nearest upsampling.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <map>

#include "import/importer.h"
#include "kiln/export/symbolic/print.h"

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
  // One value per spatial dim, or one for all of them (PyTorch's int form).
  auto per_dim = [&](std::vector<std::int64_t>& v, const char* name) {
    if (v.size() == 1 && spatial > 1) v.assign(static_cast<std::size_t>(spatial), v[0]);
    if (static_cast<std::int64_t>(v.size()) != spatial) {
      im.bad(std::string("convolution ") + name + " has " + std::to_string(v.size()) + " values for a " +
             std::to_string(spatial) + "-D convolution");
    }
  };
  std::vector<std::int64_t> stride_n = stride;
  per_dim(stride_n, "stride");
  per_dim(padding, "padding");
  per_dim(dilation, "dilation");
  if (transposed) per_dim(output_padding, "output_padding");
  const Shape out = im.out_shape();
  if (spatial == 3 || (spatial == 1 && transposed)) {
    im.define(0, convolution_volume(im, x, w, bias, stride_n, padding, dilation, transposed, output_padding, groups, dt, out));
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
    const int r = conv_forward(im, x, w, bias, {1, stride_n[0]}, {0, padding.empty() ? 0 : padding[0]},
                               {1, dilation.empty() ? 1 : dilation[0]}, groups, dt, out4);
    im.define(0, im.reshape(r, out));
    return;
  }
  const int r = transposed ? conv_transpose(im, x, w, bias, stride_n, padding, output_padding, dilation, groups, dt, out)
                           : conv_forward(im, x, w, bias, stride_n, padding, dilation, groups, dt, out);
  im.define(0, r);
}

// batch_norm family: (input, weight, bias, running_mean, running_var, [training], momentum, eps).
// Normalization by the input's own statistics over every dim but 1 (batch norm's
// training-mode arithmetic; instance norm is this on [1, N*C, ...]): mean and biased
// variance, then batch_norm. Outputs 1 and 2, when read, are the mean and 1/sqrt(var + eps).
void input_stats_norm(Importer& im, int x, int w, int b, double eps, DType dt) {
  const Shape xs = im.shape(x);
  if (xs.size() < 2) im.bad("batch norm input has rank < 2");
  std::vector<std::int64_t> dims{0};
  for (std::int64_t d = 2; d < static_cast<std::int64_t>(xs.size()); ++d) dims.push_back(d);
  const Shape cs{xs[1]};
  const int mean = im.emit(OpKind::Mean, {x}, {dims, false}, dt, cs);
  const int var = im.emit(OpKind::Var, {x}, {dims, 0.0, false}, dt, cs);
  im.emit_out(OpKind::BatchNorm, {x, w, b, mean, var}, {eps});
  if (im.num_outputs() > 1 && im.output_used(1)) im.define(1, im.reshape(mean, im.out_shape(1)));
  if (im.num_outputs() > 2 && im.output_used(2)) {
    const int ve = im.emit(OpKind::Add, {var, im.scalar(eps, dt)}, {}, dt, cs);
    im.define(2, im.reshape(im.emit(OpKind::Rsqrt, {ve}, {}, dt, cs), im.out_shape(2)));
  }
}

// instance_norm(input, weight, bias, running_mean, running_var, use_input_stats, momentum,
// eps, cudnn_enabled): per (sample, channel) statistics, as batch norm of [1, N*C, ...].
void instance_norm(Importer& im) {
  const DType dt = im.out_dtype();
  const int x = im.cast(im.tensor(0, "input"), dt);
  const double eps = im.float_arg(7, "eps", 1e-5);
  auto opt = [&](std::size_t pos, const char* name) -> std::optional<int> {
    auto v = im.opt_tensor(pos, name);
    return v ? std::optional<int>(im.cast(*v, dt)) : std::nullopt;
  };
  const auto w = opt(1, "weight"), b = opt(2, "bias"), rm = opt(3, "running_mean"), rv = opt(4, "running_var");
  if (!im.bool_arg(5, "use_input_stats", true)) {
    if (!rm || !rv) im.bad("instance_norm without input statistics needs running statistics");
    im.emit_out(OpKind::BatchNorm, {x, w ? *w : im.none_value(), b ? *b : im.none_value(), *rm, *rv}, {eps});
    return;
  }
  const Shape xs = im.shape(x);
  if (xs.size() < 2) im.bad("instance_norm input has rank < 2");
  const Expr nc = im.simplify(xs[0] * xs[1]);
  Shape flat{c(1), nc};
  flat.insert(flat.end(), xs.begin() + 2, xs.end());
  auto per_instance = [&](std::optional<int> v) {  // [C] -> [N*C]
    if (!v) return im.none_value();
    const int e = im.emit(OpKind::Expand, {im.unsqueeze(*v, 0)}, {Shape{xs[0], xs[1]}}, dt, {xs[0], xs[1]});
    return im.reshape(e, {nc});
  };
  const int xf = im.reshape(x, flat);
  const int wf = per_instance(w), bf = per_instance(b);
  std::vector<std::int64_t> dims{0};
  for (std::int64_t d = 2; d < static_cast<std::int64_t>(flat.size()); ++d) dims.push_back(d);
  const int mean = im.emit(OpKind::Mean, {xf}, {dims, false}, dt, {nc});
  const int var = im.emit(OpKind::Var, {xf}, {dims, 0.0, false}, dt, {nc});
  const int y = im.emit(OpKind::BatchNorm, {xf, wf, bf, mean, var}, {eps}, dt, flat);
  im.define(0, im.reshape(y, xs));
}

void batch_norm(Importer& im) {
  const std::string& t = im.target();
  if (im.overload() == "no_stats") {  // _native_batch_norm_legit.no_stats(input, weight, bias, training, momentum, eps)
    const DType dt = im.out_dtype();
    auto opt = [&](std::size_t pos, const char* name) {
      auto v = im.opt_tensor(pos, name);
      return v ? im.cast(*v, dt) : im.none_value();
    };
    input_stats_norm(im, im.cast(im.tensor(0, "input"), dt), opt(1, "weight"), opt(2, "bias"), im.float_arg(5, "eps", 1e-5), dt);
    return;
  }
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

// The indices output of max_pool2d (for max_unpool2d): each window's taps as strided
// slices of the input padded with -inf, argmax over the taps (the first maximum, in the
// window's raster order as PyTorch scans it), turned into the flat index h * W + w of the
// unpadded plane. Static spatial sizes.
void max_pool_indices(Importer& im, int x, const std::vector<std::int64_t>& k, const std::vector<std::int64_t>& st,
                      const std::vector<std::int64_t>& pad, const std::vector<std::int64_t>& dil, bool ceil_mode) {
  const DType d = im.dtype(x);
  if (!dtype_is_floating(d)) im.unsupported("the indices output of max pooling of integers");
  const Shape xs = im.shape(x), out = im.out_shape(1);
  const std::size_t r = xs.size();
  if (r != 3 && r != 4) im.bad("max_pool2d input must be [N, C, H, W] or [C, H, W]");
  auto fixed = [&](const Expr& e) {
    auto v = im.simplify(e).constant_value();
    if (!v) im.unsupported("the indices output of max pooling with dynamic spatial sizes");
    return *v;
  };
  check_window(im, "max_pool2d", k, st, pad, dil);
  const std::int64_t h = fixed(xs[r - 2]), w = fixed(xs[r - 1]), oh = fixed(out[r - 2]), ow = fixed(out[r - 1]);
  if (oh != pooling_output_size(h, k[0], pad[0], st[0], dil[0], ceil_mode) || ow != pooling_output_size(w, k[1], pad[1], st[1], dil[1], ceil_mode) ||
      oh < 1 || ow < 1) {
    im.bad("max_pool2d indices output shape does not match its input and window");
  }
  // Rows and columns the windows reach (ceil_mode may reach past the padding).
  const std::int64_t need_h = (oh - 1) * st[0] + dil[0] * (k[0] - 1) + 1, need_w = (ow - 1) * st[1] + dil[1] * (k[1] - 1) + 1;
  const std::int64_t extra_h = std::max<std::int64_t>(0, need_h - h - 2 * pad[0]), extra_w = std::max<std::int64_t>(0, need_w - w - 2 * pad[1]);
  Shape ps = xs;
  ps[r - 2] = c(h + 2 * pad[0] + extra_h), ps[r - 1] = c(w + 2 * pad[1] + extra_w);
  int xp = x;
  if (ps != xs) xp = im.emit(OpKind::Pad, {x}, {std::vector<std::int64_t>{pad[1], pad[1] + extra_w, pad[0], pad[0] + extra_h}, -HUGE_VAL}, d, ps);
  Shape tap_shape = xs;
  tap_shape[r - 2] = c(oh), tap_shape[r - 1] = c(ow);
  Shape one = tap_shape;
  one.insert(one.end() - 2, c(1));
  std::vector<int> taps;
  for (std::int64_t i = 0; i < k[0]; ++i) {
    for (std::int64_t j = 0; j < k[1]; ++j) {
      Shape rows = ps;
      rows[r - 2] = c(oh);
      int t = im.emit(OpKind::Slice, {xp}, {static_cast<std::int64_t>(r - 2), c(i * dil[0]), c(i * dil[0] + (oh - 1) * st[0] + 1), st[0]}, d, rows);
      t = im.emit(OpKind::Slice, {t}, {static_cast<std::int64_t>(r - 1), c(j * dil[1]), c(j * dil[1] + (ow - 1) * st[1] + 1), st[1]}, d, tap_shape);
      taps.push_back(im.reshape(t, one));
    }
  }
  Shape all = one;
  all[r - 2] = c(k[0] * k[1]);
  const int stacked = taps.size() == 1 ? taps[0] : im.emit(OpKind::Cat, taps, {static_cast<std::int64_t>(r - 2)}, d, all);
  const int tap = im.emit(OpKind::Argmax, {stacked}, {static_cast<std::int64_t>(r - 2), false}, DType::kI64, tap_shape);
  // tap -> (ki, kj) -> the input row and column.
  const int ki = im.emit(OpKind::Div, {tap, im.scalar(static_cast<double>(k[1]), DType::kI64)}, {std::string("floor")}, DType::kI64, tap_shape);
  const int kj = im.emit(OpKind::Sub, {tap, im.emit(OpKind::Mul, {ki, im.scalar(static_cast<double>(k[1]), DType::kI64)}, {}, DType::kI64, tap_shape)},
                         {}, DType::kI64, tap_shape);
  std::vector<std::int64_t> row0, col0;
  for (std::int64_t i = 0; i < oh; ++i) row0.push_back(i * st[0] - pad[0]);
  for (std::int64_t j = 0; j < ow; ++j) col0.push_back(j * st[1] - pad[1]);
  const int rows = im.reshape(im.index_constant(row0), {c(oh), c(1)});
  const int cols = im.index_constant(col0);
  const int hi = im.emit(OpKind::Add, {im.emit(OpKind::Mul, {ki, im.scalar(static_cast<double>(dil[0]), DType::kI64)}, {}, DType::kI64, tap_shape), rows},
                         {}, DType::kI64, tap_shape);
  const int wi = im.emit(OpKind::Add, {im.emit(OpKind::Mul, {kj, im.scalar(static_cast<double>(dil[1]), DType::kI64)}, {}, DType::kI64, tap_shape), cols},
                         {}, DType::kI64, tap_shape);
  const int flat = im.emit(OpKind::Add, {im.emit(OpKind::Mul, {hi, im.scalar(static_cast<double>(w), DType::kI64)}, {}, DType::kI64, tap_shape), wi},
                           {}, DType::kI64, tap_shape);
  im.define(1, im.cast(flat, im.out_dtype(1)));
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
  if (im.num_outputs() > 1 && im.output_used(1)) max_pool_indices(im, x, kernel, stride, padding, dilation, ceil_mode);
}

void avg_pool(Importer& im) {
  const int x = im.cast(im.tensor(0, "self"), im.out_dtype());
  const auto kernel = pair(im.int_list(1, "kernel_size"), 1);
  auto stride = im.int_list(2, "stride", {});
  stride = stride.empty() ? kernel : pair(stride, 1);
  const auto padding = pair(im.int_list(3, "padding", {0}), 0);
  const bool ceil_mode = im.bool_arg(4, "ceil_mode", false);
  if (!im.has(6, "divisor_override")) {
    im.emit_out(OpKind::AvgPool2d, {x}, {kernel, stride, padding, ceil_mode, im.bool_arg(5, "count_include_pad", true)});
    return;
  }
  // The window sums divided by the override: the mean over the real (unpadded) elements
  // times their count, a constant of the static output plane.
  const std::int64_t divisor = im.int_arg(6, "divisor_override");
  if (divisor == 0) im.bad("avg_pool2d divisor_override is 0");
  const Shape xs = im.shape(x), out = im.out_shape();
  if (xs.size() < 3) im.bad("avg_pool2d input has rank < 3");
  auto fixed = [&](const Expr& e) {
    auto v = im.simplify(e).constant_value();
    if (!v) im.unsupported("avg_pool2d with divisor_override on a dynamic spatial size");
    return *v;
  };
  check_window(im, "avg_pool2d", kernel, stride, padding, {1, 1});
  const std::int64_t h = fixed(xs[xs.size() - 2]), w = fixed(xs[xs.size() - 1]);
  const std::int64_t oh = fixed(out[out.size() - 2]), ow = fixed(out[out.size() - 1]);
  if (oh != pooling_output_size(h, kernel[0], padding[0], stride[0], 1, ceil_mode) ||
      ow != pooling_output_size(w, kernel[1], padding[1], stride[1], 1, ceil_mode) || oh < 1 || ow < 1) {
    im.bad("avg_pool2d output shape does not match its input and window");
  }
  auto real = [](std::int64_t o, std::int64_t k, std::int64_t st, std::int64_t pad, std::int64_t n) {
    const std::int64_t start = o * st - pad, end = std::min(start + k, n + pad);
    return std::min(end, n) - std::max<std::int64_t>(start, 0);
  };
  std::vector<float> scale(static_cast<std::size_t>(oh * ow));
  for (std::int64_t i = 0; i < oh; ++i) {
    for (std::int64_t j = 0; j < ow; ++j) {
      const std::int64_t count = real(i, kernel[0], stride[0], padding[0], h) * real(j, kernel[1], stride[1], padding[1], w);
      scale[static_cast<std::size_t>(i * ow + j)] = static_cast<float>(count) / static_cast<float>(divisor);
    }
  }
  std::vector<std::uint8_t> bytes(scale.size() * 4);
  std::memcpy(bytes.data(), scale.data(), bytes.size());
  int sc = im.constant(DType::kF32, {oh, ow}, std::move(bytes), "avg_pool_divisor");
  sc = im.cast(sc, im.dtype(x));
  const int mean = im.emit(OpKind::AvgPool2d, {x}, {kernel, stride, padding, ceil_mode, false}, im.dtype(x), out);
  im.emit_out(OpKind::Mul, {mean, sc});
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
    if (scales.size() == 2 && std::floor(scales[ax - 2]) == scales[ax - 2] && scales[ax - 2] >= 1 && scales[ax - 2] <= (1 << 24)) {
      factor = static_cast<std::int64_t>(scales[ax - 2]);
    }
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
    if (*in_size < 1 || *out_size < 0 || *out_size > (std::int64_t{1} << 24)) {
      im.bad("nearest upsampling from " + std::to_string(*in_size) + " to " + std::to_string(*out_size) + " elements");
    }
    std::vector<std::int64_t> idx;
    const double scale = scales.size() == 2 ? 1.0 / scales[ax - 2] : static_cast<double>(*in_size) / static_cast<double>(*out_size);
    for (std::int64_t i = 0; i < *out_size; ++i) {
      const double src = std::floor(static_cast<double>(i) * scale);  // any scale: clamped before the cast
      idx.push_back(!(src > 0) ? 0 : src >= static_cast<double>(*in_size - 1) ? *in_size - 1 : static_cast<std::int64_t>(src));
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
  if (dt != DType::kF32 && dt != DType::kF64) im.unsupported(mode + " upsampling of half types");
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
    // The interpolation matrix has n_out x n_in entries: both sizes from the archive, so bounded.
    if (n_in < 1 || n_out < 1 || n_in > (std::int64_t{1} << 24) || n_out > (std::int64_t{1} << 24) ||
        n_in * n_out > (std::int64_t{1} << 24)) {
      im.bad(mode + " upsampling from " + std::to_string(n_in) + " to " + std::to_string(n_out) +
             " along an axis: sizes must be >= 1 with at most 2^24 interpolation weights");
    }
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
      // Taps past the ends clamp to them anyway; bounding src keeps the integer casts defined
      // for any scale an archive gives (1e-30, 1e30).
      src = std::isfinite(src) ? std::clamp(src, -4.0, static_cast<double>(n_in) + 4.0) : 0.0;
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

// ---- distances, products and norms that only the training IR keeps whole -------------

Shape reduced(const Shape& s, const std::vector<std::int64_t>& dims, bool keepdim) {
  Shape r;
  for (std::int64_t d = 0; d < static_cast<std::int64_t>(s.size()); ++d) {
    const bool gone = std::find(dims.begin(), dims.end(), d) != dims.end();
    if (!gone) r.push_back(s[static_cast<std::size_t>(d)]);
    else if (keepdim) r.push_back(c(1));
  }
  return r;
}

Shape broadcast(Importer& im, const Shape& a, const Shape& b) {
  Shape r(std::max(a.size(), b.size()));
  for (std::size_t i = 0; i < r.size(); ++i) {
    const std::size_t ia = i + a.size(), ib = i + b.size();
    const bool has_a = ia >= r.size(), has_b = ib >= r.size();
    const Expr da = has_a ? a[ia - r.size()] : c(1), db = has_b ? b[ib - r.size()] : c(1);
    r[i] = im.simplify(da).constant_value() == 1 ? db : da;
  }
  return r;
}

// The p-norm of v over `dims`: 2 (sqrt of the sum of squares), 1, inf, -inf, 0 or p > 0.
int p_norm(Importer& im, int v, double p, const std::vector<std::int64_t>& dims, bool keepdim) {
  const DType d = im.dtype(v);
  const Shape s = im.shape(v), r = reduced(s, dims, keepdim);
  const int a = im.emit(OpKind::Abs, {v}, {}, d, s);
  if (p == 2.0) {
    const int sq = im.emit(OpKind::Mul, {v, v}, {}, d, s);
    return im.emit(OpKind::Sqrt, {im.emit(OpKind::Sum, {sq}, {dims, keepdim, std::monostate{}}, d, r)}, {}, d, r);
  }
  if (p == 1.0) return im.emit(OpKind::Sum, {a}, {dims, keepdim, std::monostate{}}, d, r);
  if (std::isinf(p)) return im.emit(p > 0 ? OpKind::Amax : OpKind::Amin, {a}, {dims, keepdim}, d, r);
  if (p == 0.0) {
    const int nz = im.cast(im.emit(OpKind::Ne, {v, im.scalar(0, d)}, {}, DType::kBool, s), d);
    return im.emit(OpKind::Sum, {nz}, {dims, keepdim, std::monostate{}}, d, r);
  }
  if (p < 0) im.unsupported("a p-norm with negative p");
  const int pw = im.emit(OpKind::Pow, {a, im.scalar(p, d)}, {}, d, s);
  const int sum = im.emit(OpKind::Sum, {pw}, {dims, keepdim, std::monostate{}}, d, r);
  return im.emit(OpKind::Pow, {sum, im.scalar(1.0 / p, d)}, {}, d, r);
}

// cosine_similarity(x1, x2, dim, eps): sum(x1 / max(|x1|, eps) * x2 / max(|x2|, eps)), as
// PyTorch's decomposition computes it.
void cosine_similarity(Importer& im) {
  const DType d = im.out_dtype();
  const int a = im.cast(im.tensor(0, "x1"), d), b = im.cast(im.tensor(1, "x2"), d);
  const Shape s = broadcast(im, im.shape(a), im.shape(b));
  const std::int64_t dim = im.norm_dim(im.int_arg(2, "dim", 1), static_cast<std::int64_t>(s.size()));
  const double eps = im.float_arg(3, "eps", 1e-8);
  auto unit = [&](int v) {
    const std::int64_t vd = dim - (static_cast<std::int64_t>(s.size()) - im.rank(v));
    if (vd < 0) im.unsupported("cosine_similarity broadcasting over its reduced dim");
    const int n = p_norm(im, v, 2.0, {vd}, true);
    const int cl = im.emit(OpKind::Clamp, {n}, {eps, std::monostate{}}, d, im.shape(n));
    return im.emit(OpKind::Div, {v, cl}, {std::monostate{}}, d, im.shape(v));
  };
  const int ua = unit(a), ub = unit(b);
  const int m = im.emit(OpKind::Mul, {ub, ua}, {}, d, s);
  im.emit_out(OpKind::Sum, {m}, {std::vector<std::int64_t>{dim}, false, std::monostate{}});
}

// pairwise_distance(x1, x2, p, eps, keepdim) = norm(x1 - x2 + eps, p, dim = -1).
void pairwise_distance(Importer& im) {
  const DType d = im.out_dtype();
  const int a = im.cast(im.tensor(0, "x1"), d), b = im.cast(im.tensor(1, "x2"), d);
  const Shape s = broadcast(im, im.shape(a), im.shape(b));
  const double p = im.float_arg(2, "p", 2.0), eps = im.float_arg(3, "eps", 1e-6);
  const int diff = im.emit(OpKind::Add, {im.emit(OpKind::Sub, {a, b}, {}, d, s), im.scalar(eps, d)}, {}, d, s);
  const std::int64_t last = static_cast<std::int64_t>(s.size()) - 1;
  if (last < 0) im.bad("pairwise_distance of 0-d tensors");
  im.define(0, im.reshape(p_norm(im, diff, p, {last}, im.bool_arg(4, "keepdim", false)), im.out_shape()));
}

// cdist(x1 [.., P, M], x2 [.., R, M], p, compute_mode): p = 2 on more than 25 rows (or
// compute_mode 1) uses PyTorch's matrix-product form, clamp(|a|^2 - 2 a.b + |b|^2, 0) ^ 0.5;
// otherwise the differences directly.
void cdist(Importer& im) {
  const DType d = im.out_dtype();
  const int a = im.cast(im.tensor(0, "x1"), d), b = im.cast(im.tensor(1, "x2"), d);
  const double p = im.float_arg(2, "p", 2.0);
  const std::int64_t mode = im.has(3, "compute_mode") ? im.int_arg(3, "compute_mode") : 0;
  const Shape as = im.shape(a), bs = im.shape(b), out = im.out_shape();
  if (as.size() < 2 || bs.size() < 2) im.bad("cdist inputs must have rank >= 2");
  const Expr rows_a = as[as.size() - 2], rows_b = bs[bs.size() - 2], m = as.back();
  auto many = [&](const Expr& e) {
    auto v = im.simplify(e).constant_value();
    return !v || *v > 25;
  };
  if (p == 2.0 && (mode == 1 || (mode == 0 && (many(rows_a) || many(rows_b))))) {
    auto norm_sq = [&](int v, const Shape& vs) {
      Shape r = vs;
      r.back() = c(1);
      const int sq = im.emit(OpKind::Mul, {v, v}, {}, d, vs);
      return im.emit(OpKind::Sum, {sq}, {std::vector<std::int64_t>{static_cast<std::int64_t>(vs.size()) - 1}, true, std::monostate{}}, d, r);
    };
    Shape one_a = as, one_b = bs;
    one_a.back() = c(1), one_b.back() = c(1);
    const int ones_a = im.emit(OpKind::Full, {}, {one_a, 1.0, d}, d, one_a);
    const int ones_b = im.emit(OpKind::Full, {}, {one_b, 1.0, d}, d, one_b);
    Shape wa = as, wb = bs;
    wa.back() = im.simplify(m + c(2)), wb.back() = im.simplify(m + c(2));
    const std::int64_t last_a = static_cast<std::int64_t>(as.size()) - 1, last_b = static_cast<std::int64_t>(bs.size()) - 1;
    const int a2 = im.emit(OpKind::Mul, {a, im.scalar(-2, d)}, {}, d, as);
    const int ca = im.emit(OpKind::Cat, {a2, norm_sq(a, as), ones_a}, {last_a}, d, wa);
    const int cb = im.emit(OpKind::Cat, {b, ones_b, norm_sq(b, bs)}, {last_b}, d, wb);
    std::vector<std::int64_t> perm(bs.size());
    for (std::size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<std::int64_t>(i);
    std::swap(perm[perm.size() - 1], perm[perm.size() - 2]);
    const int prod = im.emit(OpKind::Matmul, {ca, im.permute(cb, perm)}, {}, d, out);
    const int cl = im.emit(OpKind::Clamp, {prod}, {0.0, std::monostate{}}, d, out);
    im.emit_out(OpKind::Sqrt, {cl});
    return;
  }
  // [.., P, 1, M] - [.., 1, R, M], reduced over M.
  const int ua = im.unsqueeze(a, static_cast<std::int64_t>(as.size()) - 1);
  const int ub = im.unsqueeze(b, static_cast<std::int64_t>(bs.size()) - 2);
  Shape ds = out;
  ds.push_back(m);
  const int diff = im.emit(OpKind::Sub, {ua, ub}, {}, d, ds);
  im.define(0, p_norm(im, diff, p, {static_cast<std::int64_t>(ds.size()) - 1}, false));
}

// linalg_cross(a, b, dim): a[(i+1)%3] b[(i+2)%3] - a[(i+2)%3] b[(i+1)%3].
void linalg_cross(Importer& im) {
  const DType d = im.out_dtype();
  const int a = im.cast(im.tensor(0, "self"), d), b = im.cast(im.tensor(1, "other"), d);
  const Shape s = im.out_shape();
  const std::int64_t dim = im.norm_dim(im.int_arg(2, "dim", -1), static_cast<std::int64_t>(s.size()));
  if (im.simplify(s[static_cast<std::size_t>(dim)]).constant_value() != 3) im.bad("linalg_cross needs size 3 in its dim");
  const int i1 = im.index_constant({1, 2, 0}), i2 = im.index_constant({2, 0, 1});
  auto pick = [&](int v, int idx) {
    const std::int64_t vd = dim - (static_cast<std::int64_t>(s.size()) - im.rank(v));
    Shape vs = im.shape(v);
    if (vd < 0) im.unsupported("linalg_cross broadcasting over its dim");
    return im.emit(OpKind::IndexSelect, {v, idx}, {vd}, d, vs);
  };
  const int l = im.emit(OpKind::Mul, {pick(a, i1), pick(b, i2)}, {}, d, s);
  const int r = im.emit(OpKind::Mul, {pick(a, i2), pick(b, i1)}, {}, d, s);
  im.emit_out(OpKind::Sub, {l, r});
}

// diag_embed(x, offset, dim1, dim2): x's last dim on a diagonal of two new dims.
void diag_embed(Importer& im) {
  const DType d = im.out_dtype();
  const int x = im.cast(im.tensor(0, "self"), d);
  const Shape xs = im.shape(x), out = im.out_shape();
  const std::int64_t r = static_cast<std::int64_t>(out.size());
  std::int64_t offset = im.int_arg(1, "offset", 0);
  std::int64_t d1 = im.norm_dim(im.int_arg(2, "dim1", -2), r), d2 = im.norm_dim(im.int_arg(3, "dim2", -1), r);
  if (d1 == d2) im.bad("diag_embed dim1 and dim2 are the same");
  if (d1 > d2) std::swap(d1, d2), offset = -offset;
  if (xs.empty()) im.bad("diag_embed of a 0-d tensor");
  auto n_opt = im.simplify(xs.back()).constant_value();
  if (!n_opt) im.unsupported("diag_embed of a dynamic size");
  if (*n_opt < 0 || *n_opt > 4096 || std::abs(offset) > 4096) im.unsupported("diag_embed of more than 4096 elements or offsets");
  const std::int64_t n = *n_opt, k = std::abs(offset), m = n + k;
  // x padded to m, times the 0/1 matrix E of the diagonal: E[row, col] = (col == row + offset).
  int v = x;
  if (k > 0) {
    Shape ps = xs;
    ps.back() = c(m);
    std::vector<std::int64_t> pads{0, k};
    v = im.emit(OpKind::Pad, {x}, {pads, 0.0}, d, ps);
  }
  std::vector<float> e(static_cast<std::size_t>(m * m), 0.0f);
  for (std::int64_t row = 0; row < m; ++row) {
    const std::int64_t col = row + offset;
    if (col >= 0 && col < m) e[static_cast<std::size_t>(row * m + col)] = 1.0f;
  }
  std::vector<std::uint8_t> bytes(e.size() * 4);
  std::memcpy(bytes.data(), e.data(), bytes.size());
  const int eye = im.cast(im.constant(DType::kF32, {m, m}, std::move(bytes), "diag_embed"), d);
  // offset >= 0: the value of row i is x[i] (x as a column); offset < 0: x[col] (x as a row).
  const int xv = im.unsqueeze(v, offset >= 0 ? im.rank(v) : im.rank(v) - 1);
  Shape prod(xs.begin(), xs.end() - 1);
  prod.push_back(c(m));
  prod.push_back(c(m));
  int y = im.emit(OpKind::Mul, {xv, eye}, {}, d, prod);
  // The two new dims are last; move them to dim1 and dim2.
  std::vector<std::int64_t> perm;
  std::int64_t next = 0;
  for (std::int64_t i = 0; i < r; ++i) perm.push_back(i == d1 ? r - 2 : i == d2 ? r - 1 : next++);
  bool identity = true;
  for (std::int64_t i = 0; i < r; ++i) identity = identity && perm[static_cast<std::size_t>(i)] == i;
  if (!identity) y = im.permute(y, perm);
  im.define(0, y);
}

// bilinear(x1 [.., I], x2 [.., J], w [O, I, J], bias): x1 W x2 + b, as one matmul of x1 with
// W laid out [I, O*J], a product with x2 and a sum over J.
void bilinear(Importer& im) {
  const DType d = im.out_dtype();
  const int x1 = im.cast(im.tensor(0, "input1"), d), x2 = im.cast(im.tensor(1, "input2"), d);
  const int w = im.cast(im.tensor(2, "weight"), d);
  const Shape ws = im.shape(w), out = im.out_shape();
  if (ws.size() != 3) im.bad("bilinear weight must be [O, I, J]");
  const Expr o = ws[0], i = ws[1], j = ws[2];
  Expr rows = c(1);
  const Shape s1 = im.shape(x1);
  for (std::size_t k = 0; k + 1 < s1.size(); ++k) rows = rows * s1[k];
  rows = im.simplify(rows);
  const int a = im.reshape(x1, {rows, i});
  const int b = im.reshape(x2, {rows, c(1), j});
  const int wt = im.reshape(im.permute(w, {1, 0, 2}), {i, im.simplify(o * j)});
  const int t = im.reshape(im.emit(OpKind::Matmul, {a, wt}, {}, d, {rows, im.simplify(o * j)}), {rows, o, j});
  const int m = im.emit(OpKind::Mul, {t, b}, {}, d, {rows, o, j});
  int y = im.emit(OpKind::Sum, {m}, {std::vector<std::int64_t>{2}, false, std::monostate{}}, d, {rows, o});
  if (auto bias = im.opt_tensor(3, "bias")) y = im.emit(OpKind::Add, {y, im.cast(*bias, d)}, {}, d, {rows, o});
  im.define(0, im.reshape(y, out));
}

// _trilinear(i1, i2, i3, expand1, expand2, expand3, sumdim, unroll_dim): each input with
// size-1 dims inserted at its expand dims, multiplied together, summed over sumdim.
void trilinear(Importer& im) {
  const DType d = im.out_dtype();
  std::array<int, 3> in{im.cast(im.tensor(0, "i1"), d), im.cast(im.tensor(1, "i2"), d), im.cast(im.tensor(2, "i3"), d)};
  const std::array<const char*, 3> names{"expand1", "expand2", "expand3"};
  Shape full;
  for (int k = 0; k < 3; ++k) {
    auto dims = im.int_list(static_cast<std::size_t>(3 + k), names[static_cast<std::size_t>(k)]);
    std::sort(dims.begin(), dims.end());
    for (std::int64_t dd : dims) in[static_cast<std::size_t>(k)] = im.unsqueeze(in[static_cast<std::size_t>(k)], dd);
    full = k == 0 ? im.shape(in[0]) : broadcast(im, full, im.shape(in[static_cast<std::size_t>(k)]));
  }
  const Shape s01 = broadcast(im, im.shape(in[0]), im.shape(in[1]));
  const int p = im.emit(OpKind::Mul, {in[0], in[1]}, {}, d, s01);
  const int q = im.emit(OpKind::Mul, {p, in[2]}, {}, d, full);
  auto sum = im.int_list(6, "sumdim");
  if (sum.empty()) {
    im.define(0, q);
    return;
  }
  std::sort(sum.begin(), sum.end());
  im.emit_out(OpKind::Sum, {q}, {sum, false, std::monostate{}});
}

// linalg_matrix_norm(A, ord, dim, keepdim): 'fro', inf, -inf, 1, -1 (2, -2 and 'nuc' need
// singular values).
void matrix_norm(Importer& im) {
  const DType d = im.out_dtype();
  const int x = im.cast(im.tensor(0, "self"), d);
  const std::int64_t r = im.rank(x);
  auto dims = im.int_list(2, "dim", {-2, -1});
  if (dims.size() != 2) im.bad("linalg_matrix_norm needs two dims");
  const std::int64_t rdim = im.norm_dim(dims[0], r), cdim = im.norm_dim(dims[1], r);
  const bool keepdim = im.bool_arg(3, "keepdim", false);
  double ord = 0;
  if (im.overload() == "str_ord") {
    const std::string o = im.string_arg(1, "ord", "fro");
    if (o != "fro") im.unsupported("linalg_matrix_norm with ord '" + o + "' (needs singular values)");
    std::vector<std::int64_t> both{std::min(rdim, cdim), std::max(rdim, cdim)};
    im.define(0, im.reshape(p_norm(im, x, 2.0, both, keepdim), im.out_shape()));
    return;
  }
  ord = im.float_arg(1, "ord");
  if (!std::isinf(ord) && std::abs(ord) != 1.0) im.unsupported("linalg_matrix_norm with ord " + std::to_string(ord) + " (needs singular values)");
  // inf: the largest row sum of |A| (sum over the columns); 1: the largest column sum.
  const std::int64_t summed = std::isinf(ord) ? cdim : rdim, kept = std::isinf(ord) ? rdim : cdim;
  const int a = im.emit(OpKind::Abs, {x}, {}, d, im.shape(x));
  const int sums = im.emit(OpKind::Sum, {a}, {std::vector<std::int64_t>{summed}, true, std::monostate{}}, d,
                           reduced(im.shape(x), {summed}, true));
  const int m = im.emit(ord > 0 ? OpKind::Amax : OpKind::Amin, {sums}, {std::vector<std::int64_t>{kept}, true}, d,
                        reduced(im.shape(x), {summed, kept}, true));
  im.define(0, im.reshape(m, im.out_shape()));
}

// channel_shuffle(x [N, C, ...], groups): [N, g, C/g, ...] -> [N, C/g, g, ...] -> [N, C, ...].
void channel_shuffle(Importer& im) {
  const int x = im.tensor(0, "self");
  const std::int64_t g = im.int_arg(1, "groups");
  const Shape xs = im.shape(x);
  if (xs.size() < 3 || g <= 0) im.bad("channel_shuffle needs [N, C, ...] and groups > 0");
  Shape split{xs[0], c(g), im.simplify(sym::floordiv(xs[1], c(g)))};
  split.insert(split.end(), xs.begin() + 2, xs.end());
  std::vector<std::int64_t> perm{0, 2, 1};
  for (std::size_t k = 3; k < split.size(); ++k) perm.push_back(static_cast<std::int64_t>(k));
  im.define(0, im.reshape(im.permute(im.reshape(x, split), perm), xs));
}

// im2col (F.unfold)(x [N, C, H, W], kernel_size, dilation, padding, stride) -> [N, C*kh*kw, L]:
// one strided slice of the padded input per kernel tap, stacked after C.
void im2col(Importer& im) {
  int x = im.tensor(0, "self");
  const DType d = im.dtype(x);
  const auto k = pair(im.int_list(1, "kernel_size"), 1), dil = pair(im.int_list(2, "dilation"), 1);
  const auto pad = pair(im.int_list(3, "padding"), 0), st = pair(im.int_list(4, "stride"), 1);
  const bool batched = im.rank(x) == 4;
  if (!batched && im.rank(x) != 3) im.bad("im2col input must be [N, C, H, W] or [C, H, W]");
  check_window(im, "im2col", k, st, pad, dil);
  if (!batched) x = im.unsqueeze(x, 0);
  const Shape xs = im.shape(x);
  const Expr hp = im.simplify(xs[2] + c(2 * pad[0])), wp = im.simplify(xs[3] + c(2 * pad[1]));
  for (const Expr& e : {hp, wp}) {
    if (auto v = e.constant_value(); v && *v < 1) im.bad("im2col input is empty after padding");
  }
  if (pad[0] != 0 || pad[1] != 0) x = im.emit(OpKind::Pad, {x}, {std::vector<std::int64_t>{pad[1], pad[1], pad[0], pad[0]}, 0.0}, d, {xs[0], xs[1], hp, wp});
  const Expr oh = im.simplify(sym::floordiv(hp - c(dil[0] * (k[0] - 1) + 1), c(st[0])) + c(1));
  const Expr ow = im.simplify(sym::floordiv(wp - c(dil[1] * (k[1] - 1) + 1), c(st[1])) + c(1));
  std::vector<int> taps;
  for (std::int64_t i = 0; i < k[0]; ++i) {
    for (std::int64_t j = 0; j < k[1]; ++j) {
      const Expr h0 = c(i * dil[0]), w0 = c(j * dil[1]);
      int t = im.emit(OpKind::Slice, {x}, {std::int64_t{2}, h0, im.simplify(h0 + (oh - c(1)) * c(st[0]) + c(1)), st[0]}, d,
                      {xs[0], xs[1], oh, wp});
      t = im.emit(OpKind::Slice, {t}, {std::int64_t{3}, w0, im.simplify(w0 + (ow - c(1)) * c(st[1]) + c(1)), st[1]}, d,
                  {xs[0], xs[1], oh, ow});
      taps.push_back(im.unsqueeze(t, 2));
    }
  }
  const Expr kk = c(k[0] * k[1]);
  const int all = taps.size() == 1 ? taps[0] : im.emit(OpKind::Cat, taps, {std::int64_t{2}}, d, {xs[0], xs[1], kk, oh, ow});
  Shape out{xs[0], im.simplify(xs[1] * kk), im.simplify(oh * ow)};
  int y = im.reshape(all, out);
  if (!batched) y = im.reshape(y, {out[1], out[2]});
  im.define(0, y);
}

// col2im (F.fold)(x [N, C*kh*kw, L], output_size, kernel_size, dilation, padding, stride)
// -> [N, C, H, W]: each kernel tap's [oh, ow] plane spread by the stride (zeros between),
// placed at its offset in the padded output and summed; the padding cut off at the end.
void col2im(Importer& im) {
  int x = im.tensor(0, "self");
  const DType d = im.dtype(x);
  const auto size = pair(im.int_list(1, "output_size"), 1), k = pair(im.int_list(2, "kernel_size"), 1);
  const auto dil = pair(im.int_list(3, "dilation"), 1), pad = pair(im.int_list(4, "padding"), 0);
  const auto st = pair(im.int_list(5, "stride"), 1);
  const bool batched = im.rank(x) == 3;
  if (!batched && im.rank(x) != 2) im.bad("col2im input must be [N, C*kh*kw, L] or [C*kh*kw, L]");
  check_window(im, "col2im", k, st, pad, dil);
  for (std::int64_t e : size) {
    if (e < 1 || e >= (std::int64_t{1} << 20)) im.bad("col2im output_size " + std::to_string(e) + " is outside [1, 2^20)");
  }
  if (!batched) x = im.unsqueeze(x, 0);
  const Shape xs = im.shape(x);
  const std::int64_t hp = size[0] + 2 * pad[0], wp = size[1] + 2 * pad[1];
  const std::int64_t oh = (hp - (dil[0] * (k[0] - 1) + 1)) / st[0] + 1, ow = (wp - (dil[1] * (k[1] - 1) + 1)) / st[1] + 1;
  if (oh <= 0 || ow <= 0) im.bad("col2im output_size is smaller than one kernel window");
  if (im.simplify(xs[2]).constant_value() != oh * ow) im.bad("col2im input has " + sym::to_string(xs[2], &im.program.env) + " blocks, not " + std::to_string(oh * ow));
  const Expr ch = im.simplify(sym::floordiv(xs[1], c(k[0] * k[1])));
  const int cols = im.reshape(x, {xs[0], ch, c(k[0] * k[1]), c(oh), c(ow)});
  const Shape plane{xs[0], ch, c(hp), c(wp)};
  const std::int64_t sh = (oh - 1) * st[0] + 1, sw = (ow - 1) * st[1] + 1;
  int acc = -1;
  for (std::int64_t i = 0; i < k[0]; ++i) {
    for (std::int64_t j = 0; j < k[1]; ++j) {
      const std::int64_t tap = i * k[1] + j;
      int t = im.emit(OpKind::Slice, {cols}, {std::int64_t{2}, c(tap), c(tap + 1), std::int64_t{1}}, d, {xs[0], ch, c(1), c(oh), c(ow)});
      t = im.reshape(t, {xs[0], ch, c(oh), c(1), c(ow), c(1)});
      if (st[0] > 1 || st[1] > 1) {
        t = im.emit(OpKind::Pad, {t}, {std::vector<std::int64_t>{0, st[1] - 1, 0, 0, 0, st[0] - 1}, 0.0}, d,
                    {xs[0], ch, c(oh), c(st[0]), c(ow), c(st[1])});
      }
      t = im.reshape(t, {xs[0], ch, c(oh * st[0]), c(ow * st[1])});
      if (st[0] > 1) t = im.emit(OpKind::Slice, {t}, {std::int64_t{2}, c(0), c(sh), std::int64_t{1}}, d, {xs[0], ch, c(sh), c(ow * st[1])});
      if (st[1] > 1) t = im.emit(OpKind::Slice, {t}, {std::int64_t{3}, c(0), c(sw), std::int64_t{1}}, d, {xs[0], ch, c(sh), c(sw)});
      const std::int64_t top = i * dil[0], left = j * dil[1];
      t = im.emit(OpKind::Pad, {t}, {std::vector<std::int64_t>{left, wp - left - sw, top, hp - top - sh}, 0.0}, d, plane);
      acc = acc < 0 ? t : im.emit(OpKind::Add, {acc, t}, {}, d, plane);
    }
  }
  int y = acc;
  if (pad[0] > 0) y = im.emit(OpKind::Slice, {y}, {std::int64_t{2}, c(pad[0]), c(pad[0] + size[0]), std::int64_t{1}}, d, {xs[0], ch, c(size[0]), c(wp)});
  if (pad[1] > 0) y = im.emit(OpKind::Slice, {y}, {std::int64_t{3}, c(pad[1]), c(pad[1] + size[1]), std::int64_t{1}}, d, {xs[0], ch, c(size[0]), c(size[1])});
  if (!batched) y = im.reshape(y, {ch, c(size[0]), c(size[1])});
  im.define(0, y);
}

// addmv(self, mat, vec, beta, alpha) = beta self + alpha mat @ vec; addr: + alpha outer(v1, v2).
void addmv_addr(Importer& im, bool outer) {
  const DType d = im.out_dtype();
  const int x = im.cast(im.tensor(0, "self"), d);
  const int a = im.cast(im.tensor(1, outer ? "vec1" : "mat"), d), b = im.cast(im.tensor(2, outer ? "vec2" : "vec"), d);
  const double beta = im.float_arg(3, "beta", 1.0), alpha = im.float_arg(4, "alpha", 1.0);
  const Shape s = im.out_shape();
  int p = outer ? im.emit(OpKind::Mul, {im.unsqueeze(a, 1), im.unsqueeze(b, 0)}, {}, d, s) : im.emit(OpKind::Matmul, {a, b}, {}, d, s);
  if (alpha != 1.0) p = im.emit(OpKind::Mul, {p, im.scalar(alpha, d)}, {}, d, s);
  if (beta == 0.0) {
    im.define(0, p);
    return;
  }
  const int bx = beta == 1.0 ? x : im.emit(OpKind::Mul, {x, im.scalar(beta, d)}, {}, d, im.shape(x));
  im.emit_out(OpKind::Add, {p, bx});
}

// kron(a, b): a's dims interleaved with b's (size 1 inserted), multiplied, merged pairwise.
void kron(Importer& im) {
  const DType d = im.out_dtype();
  int a = im.cast(im.tensor(0, "self"), d), b = im.cast(im.tensor(1, "other"), d);
  const std::int64_t r = std::max(im.rank(a), im.rank(b));
  while (im.rank(a) < r) a = im.unsqueeze(a, 0);
  while (im.rank(b) < r) b = im.unsqueeze(b, 0);
  const Shape as = im.shape(a), bs = im.shape(b);
  Shape ai, bi, prod, out;
  for (std::int64_t k = 0; k < r; ++k) {
    const auto u = static_cast<std::size_t>(k);
    ai.push_back(as[u]), ai.push_back(c(1));
    bi.push_back(c(1)), bi.push_back(bs[u]);
    prod.push_back(as[u]), prod.push_back(bs[u]);
    out.push_back(im.simplify(as[u] * bs[u]));
  }
  const int m = im.emit(OpKind::Mul, {im.reshape(a, ai), im.reshape(b, bi)}, {}, d, prod);
  im.define(0, im.reshape(m, out));
}

// tensordot(a, b, dims_a, dims_b): a's free dims x b's free dims, one matmul.
void tensordot(Importer& im) {
  const DType d = im.out_dtype();
  const int a = im.cast(im.tensor(0, "self"), d), b = im.cast(im.tensor(1, "other"), d);
  auto da = im.int_list(2, "dims_self"), db = im.int_list(3, "dims_other");
  if (da.size() != db.size()) im.bad("tensordot contracts different numbers of dims");
  for (auto& k : da) k = im.norm_dim(k, im.rank(a));
  for (auto& k : db) k = im.norm_dim(k, im.rank(b));
  auto split = [&](int v, const std::vector<std::int64_t>& con, bool contracted_last) {
    std::vector<std::int64_t> free, perm;
    for (std::int64_t k = 0; k < im.rank(v); ++k) {
      if (std::find(con.begin(), con.end(), k) == con.end()) free.push_back(k);
    }
    const Shape vs = im.shape(v);
    Expr fsize = c(1), csize = c(1);
    for (auto k : free) fsize = fsize * vs[static_cast<std::size_t>(k)];
    for (auto k : con) csize = csize * vs[static_cast<std::size_t>(k)];
    if (contracted_last) perm = free, perm.insert(perm.end(), con.begin(), con.end());
    else perm = con, perm.insert(perm.end(), free.begin(), free.end());
    const int p = im.permute(v, perm);
    const Shape m = contracted_last ? Shape{im.simplify(fsize), im.simplify(csize)} : Shape{im.simplify(csize), im.simplify(fsize)};
    return std::pair{im.reshape(p, m), m};
  };
  const auto [ma, sa] = split(a, da, true);
  const auto [mb, sb] = split(b, db, false);
  const int p = im.emit(OpKind::Matmul, {ma, mb}, {}, d, {sa[0], sb[1]});
  im.define(0, im.reshape(p, im.out_shape()));
}

}  // namespace

void check_window(Importer& im, const std::string& what, const std::vector<std::int64_t>& kernel,
                  const std::vector<std::int64_t>& stride, const std::vector<std::int64_t>& padding,
                  const std::vector<std::int64_t>& dilation) {
  constexpr std::int64_t kMax = std::int64_t{1} << 20;
  auto check = [&](const std::vector<std::int64_t>& v, const char* name, std::int64_t lo) {
    for (std::int64_t e : v) {
      if (e < lo || e >= kMax) {
        im.bad(what + " " + name + " " + std::to_string(e) + " is outside [" + std::to_string(lo) + ", " + std::to_string(kMax) + ")");
      }
    }
  };
  check(kernel, "kernel size", 1);
  check(stride, "stride", 1);
  check(padding, "padding", 0);
  check(dilation, "dilation", 1);
  std::int64_t taps = 1;
  for (std::int64_t k : kernel) {
    taps *= k;
    if (taps > 65536) im.unsupported(what + " with more than 65536 kernel taps");
  }
}

std::int64_t pooling_output_size(std::int64_t in, std::int64_t k, std::int64_t pad, std::int64_t stride, std::int64_t dilation,
                                 bool ceil_mode) {
  const std::int64_t span = in + 2 * pad - dilation * (k - 1) - 1;
  std::int64_t o = (span + (ceil_mode ? stride - 1 : 0)) / stride + 1;
  if (ceil_mode && (o - 1) * stride >= in + pad) --o;
  return o;
}

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
  t["aten.instance_norm"] = instance_norm;
  t["aten.cosine_similarity"] = cosine_similarity;
  t["aten.pairwise_distance"] = pairwise_distance;
  t["aten.cdist"] = cdist;
  t["aten._cdist_forward"] = cdist;
  t["aten.linalg_cross"] = linalg_cross;
  t["aten.diag_embed"] = diag_embed;
  t["aten.bilinear"] = bilinear;
  t["aten._trilinear"] = trilinear;
  t["aten.linalg_matrix_norm"] = matrix_norm;
  t["aten.addmv"] = [](Importer& im) { addmv_addr(im, false); };
  t["aten.addr"] = [](Importer& im) { addmv_addr(im, true); };
  t["aten.kron"] = kron;
  t["aten.tensordot"] = tensordot;
  // _weight_norm(v, g, dim) = v * g / |v| (the 2-norm over every dim but `dim`; all dims for -1).
  t["aten._weight_norm"] = [](Importer& im) {
    const DType d = im.out_dtype();
    const int v = im.cast(im.tensor(0, "v"), d), g = im.cast(im.tensor(1, "g"), d);
    const std::int64_t r = im.rank(v);
    const std::int64_t keep = im.int_arg(2, "dim", 0);
    std::vector<std::int64_t> dims;
    for (std::int64_t k = 0; k < r; ++k) {
      if (keep == -1 || k != im.norm_dim(keep, r)) dims.push_back(k);
    }
    const int n = p_norm(im, v, 2.0, dims, true);
    const int scale = im.emit(OpKind::Div, {g, n}, {std::monostate{}}, d, broadcast(im, im.shape(g), im.shape(n)));
    im.emit_out(OpKind::Mul, {v, scale});
  };
  t["aten.im2col"] = im2col;
  t["aten.col2im"] = col2im;
  t["aten.channel_shuffle"] = channel_shuffle;
  t["aten.native_channel_shuffle"] = channel_shuffle;
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

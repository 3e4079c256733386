// Linear algebra and neural-network layer ops.
#include "ops/common.h"

namespace kiln {

using namespace ops;

namespace {

void require_float(const Tensor& t, std::string_view op, std::string_view what, const SourceLoc& loc) {
  require_defined(t, op, what, loc);
  if (!dtype_is_floating(t.dtype())) {
    detail::op_error(op, std::string(what) + " must be floating point, got " + std::string(dtype_name(t.dtype())), loc);
  }
}

void require_rank(const Tensor& t, std::int64_t lo, std::int64_t hi, std::string_view op, std::string_view what, const SourceLoc& loc) {
  if (t.dim() < lo || t.dim() > hi) {
    detail::op_error(op, std::string(what) + " must have rank " + (lo == hi ? std::to_string(lo) : std::to_string(lo) + ".." + std::to_string(hi)) +
                             ", got " + std::to_string(t.dim()) + " " + shape_text(shape_of(t)), loc);
  }
}

void require_same(sym::Expr a, sym::Expr b, std::string_view op, const std::string& what_a, const std::string& what_b, const SourceLoc& loc) {
  require(sym::eq(a, b), op, what_a + "=" + text(a) + " != " + what_b + "=" + text(b), loc);
}

// Output size of a sliding window (conv, pooling).
sym::Expr window_out(sym::Expr in, std::int64_t k, std::int64_t s, std::int64_t p, std::int64_t d, bool ceil_mode) {
  const sym::Expr span = in + c(2 * p - d * (k - 1) - 1);
  sym::Expr out = (ceil_mode ? sym::ceildiv(span, c(s)) : sym::floordiv(span, c(s))) + c(1);
  if (ceil_mode) out = sym::min(out, sym::floordiv(in + c(p - 1), c(s)) + c(1));  // last window starts inside
  return out;
}

std::vector<std::int64_t> pair(std::vector<std::int64_t> v, std::int64_t fill, std::string_view op, std::string_view what, const SourceLoc& loc) {
  if (v.empty()) v = {fill, fill};
  if (v.size() == 1) v.push_back(v[0]);
  if (v.size() != 2) detail::op_error(op, std::string(what) + " must have 1 or 2 values", loc, StatusCode::kUsage);
  return v;
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b, SourceLoc loc) {
  require_float(a, "matmul", "a", loc);
  require_float(b, "matmul", "b", loc);
  if (a.dim() == 0 || b.dim() == 0) detail::op_error("matmul", "both operands need rank >= 1", loc);
  const Shape sa = shape_of(a), sb = shape_of(b);
  const sym::Expr ka = sa.back(), kb = b.dim() == 1 ? sb[0] : sb[sb.size() - 2];
  require_same(ka, kb, "matmul", "a.size(-1)", b.dim() == 1 ? "b.size(0)" : "b.size(-2)", loc);
  Shape batch_a(sa.begin(), sa.end() - std::min<std::size_t>(2, sa.size()));
  Shape batch_b(sb.begin(), sb.end() - std::min<std::size_t>(2, sb.size()));
  Shape out = broadcast(batch_a, batch_b, "matmul", loc);
  if (a.dim() >= 2) out.push_back(sa[sa.size() - 2]);
  if (b.dim() >= 2) out.push_back(sb.back());
  const DType d = promote(a.dtype(), b.dtype());
  return one(OpKind::Matmul, {cast_to(a, d, loc), cast_to(b, d, loc)}, {}, {d, out}, loc);
}

Tensor bmm(const Tensor& a, const Tensor& b, SourceLoc loc) {
  require_float(a, "bmm", "a", loc);
  require_float(b, "bmm", "b", loc);
  require_rank(a, 3, 3, "bmm", "a", loc);
  require_rank(b, 3, 3, "bmm", "b", loc);
  const Shape sa = shape_of(a), sb = shape_of(b);
  require_same(sa[0], sb[0], "bmm", "a.size(0)", "b.size(0)", loc);
  require_same(sa[2], sb[1], "bmm", "a.size(2)", "b.size(1)", loc);
  return one(OpKind::Bmm, {a, b}, {}, {a.dtype(), {sa[0], sa[1], sb[2]}}, loc);
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias, SourceLoc loc) {
  require_float(x, "linear", "input", loc);
  require_float(weight, "linear", "weight", loc);
  require_rank(weight, 2, 2, "linear", "weight", loc);
  if (x.dim() < 1) detail::op_error("linear", "input needs rank >= 1", loc);
  const Shape sx = shape_of(x), sw = shape_of(weight);
  require_same(sx.back(), sw[1], "linear", "input.size(-1)", "weight.size(1)", loc);
  std::vector<Tensor> inputs{x, weight};
  if (bias.defined()) {
    require_rank(bias, 1, 1, "linear", "bias", loc);
    require_same(shape_of(bias)[0], sw[0], "linear", "bias.size(0)", "weight.size(0)", loc);
    inputs.push_back(bias);
  }
  Shape out(sx.begin(), sx.end() - 1);
  out.push_back(sw[0]);
  return one(OpKind::Linear, inputs, {}, {x.dtype(), out}, loc);
}

Tensor softmax(const Tensor& x, std::int64_t dim, SourceLoc loc) {
  require_float(x, "softmax", "input", loc);
  return one(OpKind::Softmax, {x}, {norm_dim(dim, x.dim(), "softmax", loc)}, {x.dtype(), shape_of(x)}, loc);
}

Tensor log_softmax(const Tensor& x, std::int64_t dim, SourceLoc loc) {
  require_float(x, "log_softmax", "input", loc);
  return one(OpKind::LogSoftmax, {x}, {norm_dim(dim, x.dim(), "log_softmax", loc)}, {x.dtype(), shape_of(x)}, loc);
}

Tensor layer_norm(const Tensor& x, std::int64_t normalized_rank, const Tensor& weight, const Tensor& bias, double eps, SourceLoc loc) {
  require_float(x, "layer_norm", "input", loc);
  if (normalized_rank < 1 || normalized_rank > x.dim()) {
    detail::op_error("layer_norm", "normalized_rank " + std::to_string(normalized_rank) + " not in [1, " + std::to_string(x.dim()) + "]", loc);
  }
  const Shape sx = shape_of(x);
  const Shape norm(sx.end() - normalized_rank, sx.end());
  for (const Tensor* p : {&weight, &bias}) {
    if (!p->defined()) continue;
    const Shape sp = shape_of(*p);
    if (sp.size() != norm.size()) detail::op_error("layer_norm", "weight/bias shape " + shape_text(sp) + " != normalized shape " + shape_text(norm), loc);
    for (std::size_t i = 0; i < sp.size(); ++i) require_same(sp[i], norm[i], "layer_norm", "weight.size(" + std::to_string(i) + ")", "normalized dim", loc);
  }
  return one(OpKind::LayerNorm, {x, weight, bias}, {normalized_rank, eps}, {x.dtype(), sx}, loc);
}

Tensor embedding(const Tensor& weight, const Tensor& indices, SourceLoc loc) {
  require_float(weight, "embedding", "weight", loc);
  require_rank(weight, 2, 2, "embedding", "weight", loc);
  require_defined(indices, "embedding", "indices", loc);
  if (indices.dtype() != DType::kI64 && indices.dtype() != DType::kI32) {
    detail::op_error("embedding", "indices must be i64 or i32, got " + std::string(dtype_name(indices.dtype())), loc);
  }
  Shape out = shape_of(indices);
  out.push_back(shape_of(weight)[1]);
  return one(OpKind::Embedding, {weight, indices}, {}, {weight.dtype(), out}, loc);
}

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, std::vector<std::int64_t> stride,
              std::vector<std::int64_t> padding, std::vector<std::int64_t> dilation, std::int64_t groups, SourceLoc loc) {
  require_float(x, "conv2d", "input", loc);
  require_float(weight, "conv2d", "weight", loc);
  require_rank(x, 4, 4, "conv2d", "input", loc);
  require_rank(weight, 4, 4, "conv2d", "weight", loc);
  stride = pair(stride, 1, "conv2d", "stride", loc);
  padding = pair(padding, 0, "conv2d", "padding", loc);
  dilation = pair(dilation, 1, "conv2d", "dilation", loc);
  if (groups < 1) detail::op_error("conv2d", "groups must be >= 1", loc, StatusCode::kUsage);
  const Shape sx = shape_of(x), sw = shape_of(weight);
  require_same(sx[1], sw[1] * c(groups), "conv2d", "input channels", "weight.size(1)*groups", loc);
  const auto kh = sw[2].constant_value(), kw = sw[3].constant_value();
  if (!kh || !kw) detail::op_error("conv2d", "kernel size must be static", loc);
  std::vector<Tensor> inputs{x, weight};
  if (bias.defined()) {
    require_same(shape_of(bias)[0], sw[0], "conv2d", "bias.size(0)", "weight.size(0)", loc);
    inputs.push_back(bias);
  }
  const Shape out{sx[0], sw[0], window_out(sx[2], *kh, stride[0], padding[0], dilation[0], false),
                  window_out(sx[3], *kw, stride[1], padding[1], dilation[1], false)};
  require(sym::ge(out[2], c(1)), "conv2d", "input " + shape_text(sx) + " is smaller than the kernel", loc);
  require(sym::ge(out[3], c(1)), "conv2d", "input " + shape_text(sx) + " is smaller than the kernel", loc);
  return one(OpKind::Conv2d, inputs, {stride, padding, dilation, groups}, {x.dtype(), out}, loc);
}

Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                  const Tensor& running_var, double eps, SourceLoc loc) {
  require_float(x, "batch_norm", "input", loc);
  require_rank(x, 2, 5, "batch_norm", "input", loc);
  const sym::Expr channels = shape_of(x)[1];
  for (const Tensor* p : {&weight, &bias, &running_mean, &running_var}) {
    if (!p->defined()) continue;
    require_rank(*p, 1, 1, "batch_norm", "parameter", loc);
    require_same(shape_of(*p)[0], channels, "batch_norm", "parameter size", "channels", loc);
  }
  require_defined(running_mean, "batch_norm", "running_mean", loc);
  require_defined(running_var, "batch_norm", "running_var", loc);
  return one(OpKind::BatchNorm, {x, weight, bias, running_mean, running_var}, {eps}, {x.dtype(), shape_of(x)}, loc);
}

namespace {
Tensor pool(OpKind op, const Tensor& x, std::vector<std::int64_t> kernel, std::vector<std::int64_t> stride,
            std::vector<std::int64_t> padding, const SourceLoc& loc) {
  const std::string_view name = op_name(op);
  require_float(x, name, "input", loc);
  require_rank(x, 4, 4, name, "input", loc);
  kernel = pair(kernel, 1, name, "kernel", loc);
  stride = stride.empty() ? kernel : pair(stride, 1, name, "stride", loc);
  padding = pair(padding, 0, name, "padding", loc);
  const Shape sx = shape_of(x);
  const Shape out{sx[0], sx[1], window_out(sx[2], kernel[0], stride[0], padding[0], 1, false),
                  window_out(sx[3], kernel[1], stride[1], padding[1], 1, false)};
  std::vector<ir::Attr> attrs{kernel, stride, padding};
  if (op == OpKind::MaxPool2d) {
    attrs.emplace_back(std::vector<std::int64_t>{1, 1});
    attrs.emplace_back(false);
  } else {
    attrs.emplace_back(false);
    attrs.emplace_back(true);
  }
  return one(op, {x}, std::move(attrs), {x.dtype(), out}, loc);
}
}  // namespace

Tensor max_pool2d(const Tensor& x, std::vector<std::int64_t> kernel, std::vector<std::int64_t> stride,
                  std::vector<std::int64_t> padding, SourceLoc loc) {
  return pool(OpKind::MaxPool2d, x, std::move(kernel), std::move(stride), std::move(padding), loc);
}
Tensor avg_pool2d(const Tensor& x, std::vector<std::int64_t> kernel, std::vector<std::int64_t> stride,
                  std::vector<std::int64_t> padding, SourceLoc loc) {
  return pool(OpKind::AvgPool2d, x, std::move(kernel), std::move(stride), std::move(padding), loc);
}

Tensor adaptive_avg_pool2d(const Tensor& x, std::vector<std::int64_t> output_size, SourceLoc loc) {
  require_float(x, "adaptive_avg_pool2d", "input", loc);
  require_rank(x, 4, 4, "adaptive_avg_pool2d", "input", loc);
  output_size = pair(output_size, 1, "adaptive_avg_pool2d", "output_size", loc);
  const Shape sx = shape_of(x);
  return one(OpKind::AdaptiveAvgPool2d, {x}, {output_size}, {x.dtype(), {sx[0], sx[1], c(output_size[0]), c(output_size[1])}}, loc);
}

}  // namespace kiln

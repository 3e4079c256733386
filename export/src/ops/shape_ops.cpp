// Creation, data movement and data-dependent ops.
#include <algorithm>
#include <numeric>

#include "ops/common.h"

namespace kiln {

using namespace ops;

Tensor full(std::vector<SymInt> shape, double value, DType dtype, SourceLoc loc) {
  for (const SymInt& d : shape) require_size(d.expr(), "full", loc);
  return one(OpKind::Full, {}, {to_exprs(shape), value, dtype}, {dtype, to_exprs(shape)}, loc);
}
Tensor zeros(std::vector<SymInt> shape, DType dtype, SourceLoc loc) { return full(std::move(shape), 0.0, dtype, loc); }
Tensor ones(std::vector<SymInt> shape, DType dtype, SourceLoc loc) { return full(std::move(shape), 1.0, dtype, loc); }

Tensor arange(SymInt end, DType dtype, SourceLoc loc) { return arange(SymInt(0, loc), end, SymInt(1, loc), dtype, loc); }
Tensor arange(SymInt start, SymInt end, SymInt step, DType dtype, SourceLoc loc) {
  const auto st = step.maybe_int();
  if (!st || *st == 0) detail::op_error("arange", "step must be a non-zero constant", loc, StatusCode::kUsage);
  const sym::Expr n = *st > 0 ? sym::ceildiv(end.expr() - start.expr(), c(*st)) : sym::ceildiv(start.expr() - end.expr(), c(-*st));
  const sym::Expr size = holds(sym::ge(n, c(0)), loc) ? n : c(0);
  return one(OpKind::Arange, {}, {start.expr(), end.expr(), step.expr(), dtype}, {dtype, {size}}, loc);
}

Tensor tril(const Tensor& x, std::int64_t diagonal, SourceLoc loc) {
  require_defined(x, "tril", "input", loc);
  if (x.dim() < 2) detail::op_error("tril", "input needs rank >= 2", loc);
  return one(OpKind::Tril, {x}, {diagonal}, {x.dtype(), shape_of(x)}, loc);
}
Tensor triu(const Tensor& x, std::int64_t diagonal, SourceLoc loc) {
  require_defined(x, "triu", "input", loc);
  if (x.dim() < 2) detail::op_error("triu", "input needs rank >= 2", loc);
  return one(OpKind::Triu, {x}, {diagonal}, {x.dtype(), shape_of(x)}, loc);
}

Tensor reshape(const Tensor& x, std::vector<SymInt> shape, SourceLoc loc) {
  require_defined(x, "reshape", "input", loc);
  const sym::Expr total = numel(shape_of(x));
  Shape out = to_exprs(shape);
  int infer = -1;
  sym::Expr known = c(1);
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (out[i].constant_value() == -1) {
      if (infer >= 0) detail::op_error("reshape", "only one dimension can be -1", loc, StatusCode::kUsage);
      infer = static_cast<int>(i);
    } else {
      known = known * out[i];
    }
  }
  if (infer >= 0) {
    require(sym::ne(known, c(0)), "reshape", "cannot infer -1 with a zero-sized dimension", loc);
    out[static_cast<std::size_t>(infer)] = sym::floordiv(total, known);
  }
  require(sym::eq(numel(out), total), "reshape", "shape " + shape_text(out) + " is invalid for an input of " +
                                                      text(total) + " elements " + shape_text(shape_of(x)), loc);
  return one(OpKind::Reshape, {x}, {out}, {x.dtype(), out}, loc);
}
Tensor Tensor::reshape(std::vector<SymInt> shape, SourceLoc loc) const { return kiln::reshape(*this, std::move(shape), loc); }
Tensor Tensor::view(std::vector<SymInt> shape, SourceLoc loc) const { return kiln::reshape(*this, std::move(shape), loc); }

Tensor permute(const Tensor& x, std::vector<std::int64_t> dims, SourceLoc loc) {
  require_defined(x, "permute", "input", loc);
  if (static_cast<std::int64_t>(dims.size()) != x.dim()) {
    detail::op_error("permute", "needs " + std::to_string(x.dim()) + " dims, got " + std::to_string(dims.size()), loc, StatusCode::kUsage);
  }
  std::vector<bool> seen(dims.size(), false);
  Shape out;
  const Shape in = shape_of(x);
  for (auto& d : dims) {
    d = norm_dim(d, x.dim(), "permute", loc);
    if (seen[static_cast<std::size_t>(d)]) detail::op_error("permute", "dim " + std::to_string(d) + " repeats", loc, StatusCode::kUsage);
    seen[static_cast<std::size_t>(d)] = true;
    out.push_back(in[static_cast<std::size_t>(d)]);
  }
  return one(OpKind::Permute, {x}, {dims}, {x.dtype(), out}, loc);
}
Tensor Tensor::permute(std::vector<std::int64_t> dims, SourceLoc loc) const { return kiln::permute(*this, std::move(dims), loc); }

Tensor transpose(const Tensor& x, std::int64_t a, std::int64_t b, SourceLoc loc) {
  require_defined(x, "transpose", "input", loc);
  std::vector<std::int64_t> dims(static_cast<std::size_t>(x.dim()));
  std::iota(dims.begin(), dims.end(), 0);
  std::swap(dims[static_cast<std::size_t>(norm_dim(a, x.dim(), "transpose", loc))],
            dims[static_cast<std::size_t>(norm_dim(b, x.dim(), "transpose", loc))]);
  return permute(x, dims, loc);
}
Tensor Tensor::transpose(std::int64_t a, std::int64_t b, SourceLoc loc) const { return kiln::transpose(*this, a, b, loc); }

Tensor unsqueeze(const Tensor& x, std::int64_t dim, SourceLoc loc) {
  require_defined(x, "unsqueeze", "input", loc);
  const std::int64_t d = norm_dim(dim, x.dim() + 1, "unsqueeze", loc);
  Shape out = shape_of(x);
  out.insert(out.begin() + d, c(1));
  return one(OpKind::Reshape, {x}, {out}, {x.dtype(), out}, loc, "unsqueeze");
}
Tensor Tensor::unsqueeze(std::int64_t d, SourceLoc loc) const { return kiln::unsqueeze(*this, d, loc); }

Tensor squeeze(const Tensor& x, std::int64_t dim, SourceLoc loc) {
  require_defined(x, "squeeze", "input", loc);
  const std::int64_t d = norm_dim(dim, x.dim(), "squeeze", loc);
  Shape out = shape_of(x);
  if (!holds(sym::eq(out[static_cast<std::size_t>(d)], c(1)), loc)) return x;  // PyTorch: no-op unless size 1
  out.erase(out.begin() + d);
  return one(OpKind::Reshape, {x}, {out}, {x.dtype(), out}, loc, "squeeze");
}
Tensor Tensor::squeeze(std::int64_t d, SourceLoc loc) const { return kiln::squeeze(*this, d, loc); }

Tensor flatten(const Tensor& x, std::int64_t start_dim, std::int64_t end_dim, SourceLoc loc) {
  require_defined(x, "flatten", "input", loc);
  if (x.dim() == 0) return reshape(x, {SymInt(1, loc)}, loc);
  const std::int64_t s = norm_dim(start_dim, x.dim(), "flatten", loc), e = norm_dim(end_dim, x.dim(), "flatten", loc);
  const Shape in = shape_of(x);
  std::vector<SymInt> out;
  for (std::int64_t i = 0; i < s; ++i) out.emplace_back(in[static_cast<std::size_t>(i)], loc);
  sym::Expr p = c(1);
  for (std::int64_t i = s; i <= e; ++i) p = p * in[static_cast<std::size_t>(i)];
  out.emplace_back(p, loc);
  for (std::int64_t i = e + 1; i < x.dim(); ++i) out.emplace_back(in[static_cast<std::size_t>(i)], loc);
  return reshape(x, out, loc);
}

namespace {
// Python clamping of a slice bound against `size`.
sym::Expr clamp_bound(sym::Expr b, sym::Expr size, const SourceLoc& loc) {
  if (b.constant_value() && *b.constant_value() == INT64_MAX) return size;
  if (b.constant_value() && *b.constant_value() < 0) b = sym::max(size + b, c(0));
  if (holds(sym::le(b, size), loc)) return b;
  return size;
}
}  // namespace

Tensor slice(const Tensor& x, std::int64_t dim, SymInt start, SymInt end, std::int64_t step, SourceLoc loc) {
  require_defined(x, "slice", "input", loc);
  if (step < 1) detail::op_error("slice", "step must be >= 1, got " + std::to_string(step), loc, StatusCode::kUsage);
  const std::int64_t d = norm_dim(dim, x.dim(), "slice", loc);
  Shape out = shape_of(x);
  const sym::Expr size = out[static_cast<std::size_t>(d)];
  const sym::Expr s = clamp_bound(start.expr(), size, loc);
  const sym::Expr e = clamp_bound(end.expr(), size, loc);
  const sym::Expr len = sym::ceildiv(e - s, c(step));
  out[static_cast<std::size_t>(d)] = holds(sym::ge(len, c(0)), loc) ? len : c(0);
  return one(OpKind::Slice, {x}, {d, s, e, step}, {x.dtype(), out}, loc);
}
Tensor Tensor::slice(std::int64_t d, SymInt start, SymInt end, std::int64_t step, SourceLoc loc) const {
  return kiln::slice(*this, d, start, end, step, loc);
}

Tensor cat(const std::vector<Tensor>& xs, std::int64_t dim, SourceLoc loc) {
  if (xs.empty()) detail::op_error("cat", "needs at least one tensor", loc, StatusCode::kUsage);
  for (const Tensor& t : xs) require_defined(t, "cat", "input", loc);
  const std::int64_t d = norm_dim(dim, xs[0].dim(), "cat", loc);
  Shape out = shape_of(xs[0]);
  DType dtype = xs[0].dtype();
  for (std::size_t i = 1; i < xs.size(); ++i) {
    if (xs[i].dim() != xs[0].dim()) detail::op_error("cat", "tensor " + std::to_string(i) + " has rank " + std::to_string(xs[i].dim()) + ", expected " + std::to_string(xs[0].dim()), loc);
    dtype = promote(dtype, xs[i].dtype());
    const Shape si = shape_of(xs[i]);
    for (std::size_t k = 0; k < si.size(); ++k) {
      if (static_cast<std::int64_t>(k) == d) continue;
      require(sym::eq(si[k], out[k]), "cat", "tensor " + std::to_string(i) + " has size " + text(si[k]) + " at dim " +
                                                 std::to_string(k) + ", expected " + text(out[k]), loc);
    }
    out[static_cast<std::size_t>(d)] = out[static_cast<std::size_t>(d)] + si[static_cast<std::size_t>(d)];
  }
  std::vector<Tensor> inputs;
  for (const Tensor& t : xs) inputs.push_back(cast_to(t, dtype, loc));
  return one(OpKind::Cat, inputs, {d}, {dtype, out}, loc);
}

std::vector<Tensor> split(const Tensor& x, std::vector<SymInt> sizes, std::int64_t dim, SourceLoc loc) {
  require_defined(x, "split", "input", loc);
  const std::int64_t d = norm_dim(dim, x.dim(), "split", loc);
  const Shape in = shape_of(x);
  sym::Expr total = c(0);
  std::vector<OutSpec> outs;
  for (const SymInt& s : sizes) {
    total = total + s.expr();
    Shape o = in;
    o[static_cast<std::size_t>(d)] = s.expr();
    outs.push_back({x.dtype(), o});
  }
  require(sym::eq(total, in[static_cast<std::size_t>(d)]), "split", "sizes add up to " + text(total) + ", but dim " +
                                                                    std::to_string(d) + " has size " + text(in[static_cast<std::size_t>(d)]), loc);
  return detail::run_op(OpKind::Split, {x}, {d, to_exprs(sizes)}, outs, loc, "split");
}

Tensor expand(const Tensor& x, std::vector<SymInt> shape, SourceLoc loc) {
  require_defined(x, "expand", "input", loc);
  Shape out = to_exprs(shape);
  const Shape in = shape_of(x);
  if (out.size() < in.size()) detail::op_error("expand", "target rank " + std::to_string(out.size()) + " < input rank " + std::to_string(in.size()), loc);
  const std::size_t off = out.size() - in.size();
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (out[i].constant_value() == -1) {
      if (i < off) detail::op_error("expand", "-1 is not allowed for a new leading dim", loc, StatusCode::kUsage);
      out[i] = in[i - off];
    } else if (i >= off && !(in[i - off] == out[i]) && !holds(sym::eq(in[i - off], c(1)), loc)) {
      require(sym::eq(in[i - off], out[i]), "expand", "cannot expand size " + text(in[i - off]) + " to " + text(out[i]), loc);
    }
  }
  return one(OpKind::Expand, {x}, {out}, {x.dtype(), out}, loc);
}
Tensor Tensor::expand(std::vector<SymInt> shape, SourceLoc loc) const { return kiln::expand(*this, std::move(shape), loc); }

Tensor gather(const Tensor& x, std::int64_t dim, const Tensor& index, SourceLoc loc) {
  require_defined(x, "gather", "input", loc);
  require_defined(index, "gather", "index", loc);
  if (index.dim() != x.dim()) detail::op_error("gather", "index rank " + std::to_string(index.dim()) + " != input rank " + std::to_string(x.dim()), loc);
  return one(OpKind::Gather, {x, index}, {norm_dim(dim, x.dim(), "gather", loc)}, {x.dtype(), shape_of(index)}, loc);
}

Tensor index_select(const Tensor& x, std::int64_t dim, const Tensor& index, SourceLoc loc) {
  require_defined(x, "index_select", "input", loc);
  require_defined(index, "index_select", "index", loc);
  if (index.dim() != 1) detail::op_error("index_select", "index must be 1-D", loc);
  const std::int64_t d = norm_dim(dim, x.dim(), "index_select", loc);
  Shape out = shape_of(x);
  out[static_cast<std::size_t>(d)] = shape_of(index)[0];
  return one(OpKind::IndexSelect, {x, index}, {d}, {x.dtype(), out}, loc);
}

Tensor index(const Tensor& x, std::int64_t first_dim, const std::vector<Tensor>& indices, SourceLoc loc) {
  require_defined(x, "index", "input", loc);
  if (indices.empty()) detail::op_error("index", "needs at least one index tensor", loc);
  const std::int64_t first = norm_dim(first_dim, x.dim(), "index", loc);
  const auto k = static_cast<std::int64_t>(indices.size());
  if (first + k > x.dim()) {
    detail::op_error("index", std::to_string(k) + " index tensors from dim " + std::to_string(first) + " exceed rank " +
                                  std::to_string(x.dim()), loc);
  }
  std::vector<Tensor> inputs{x};
  std::vector<std::int64_t> dims;
  Shape b;
  for (std::int64_t i = 0; i < k; ++i) {
    const Tensor& t = indices[static_cast<std::size_t>(i)];
    require_defined(t, "index", "indices", loc);
    if (t.dtype() != DType::kI64 && t.dtype() != DType::kI32) {
      detail::op_error("index", "indices[" + std::to_string(i) + "] must be i64 or i32", loc);
    }
    b = i == 0 ? shape_of(t) : broadcast(b, shape_of(t), "index", loc);
    inputs.push_back(t);
    dims.push_back(first + i);
  }
  const Shape xs = shape_of(x);
  Shape out(xs.begin(), xs.begin() + first);
  out.insert(out.end(), b.begin(), b.end());
  out.insert(out.end(), xs.begin() + first + k, xs.end());
  return one(OpKind::Index, inputs, {dims}, {x.dtype(), out}, loc);
}

}  // namespace kiln

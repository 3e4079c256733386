// Reductions and normalizations: sum / mean / amax / amin / prod / any / all / var
// (reduce.comp), argmax / argmin (argreduce.comp), cumsum (cumsum.comp), softmax /
// log_softmax (softmax.comp), layer_norm (layernorm.comp), batch_norm (batchnorm.comp).
#include <limits>

#include "backends/cpu/kernels/common.h"
#include "backends/vulkan/lowerer.h"
#include "kernel/attrs.h"

namespace kiln::vulkan {


Status Lowerer::reduce(int code) {
  KILN_RETURN_IF_ERROR(expect_inputs(1, 1));
  KILN_ASSIGN_OR_RETURN(std::span<const std::int64_t> dims, attr_ints(op(), attrs_, 0, "dims"));
  double correction = 0;
  if (code == REDUCE_VAR) {  // var(dims, correction, keepdim)
    KILN_ASSIGN_OR_RETURN(correction, attr_float("var", attrs_, 1, "correction"));
  }
  KILN_ASSIGN_OR_RETURN(bool keepdim, attr_bool(op(), attrs_, code == REDUCE_VAR ? 2 : 1, "keepdim"));
  const Shape& xs = in(0)->shape;
  const int rank = static_cast<int>(xs.size());
  std::vector<bool> reduced(rank, dims.empty());
  for (std::int64_t d : dims) {
    if (d < 0 || d >= rank || reduced[d]) return invalid("dims has ", d, " (repeated or outside [0, ", rank, "))");
    reduced[d] = true;
  }
  const Shape cs = contiguous(xs);
  Shape kept, kept_st, red, red_st, expect;
  for (int d = 0; d < rank; ++d) {
    (reduced[d] ? red : kept).push_back(xs[d]);
    (reduced[d] ? red_st : kept_st).push_back(cs[d]);
    if (!reduced[d] || keepdim) expect.push_back(reduced[d] ? 1 : xs[d]);
  }
  if (out().shape != expect) return invalid("out.shape=", shape_text(out().shape), " != expected ", shape_text(expect));
  const std::int64_t n_out = numel(kept), count = numel(red);
  if (n_out == 0) return Status::Ok();
  if (count == 0) return reduce_empty(code, n_out);
  std::vector<Shape> ks{kept_st}, rs{red_st};
  if (!coalesce(kept, ks) || !coalesce(red, rs)) return unsupported("more than ", kMaxDims, " kept or reduced dims");
  const bool boolean = node_->op == OpKind::Any || node_->op == OpKind::All;
  Dispatch& d = add(boolean ? "reduce_b32" : "reduce_f32", {in_id(0)}, {out_id()});
  put(d, PC_REDUCE_N, n_out);
  put(d, PC_REDUCE_KEPT_RANK, static_cast<std::int64_t>(kept.size()));
  for (std::size_t i = 0; i < kept.size(); ++i) {
    put(d, PC_REDUCE_KEPT_DIMS + i, kept[i]);
    put(d, PC_REDUCE_KEPT_STRIDES + i, ks[0][i]);
  }
  put(d, PC_REDUCE_RED_RANK, static_cast<std::int64_t>(red.size()));
  for (std::size_t i = 0; i < red.size(); ++i) {
    put(d, PC_REDUCE_RED_DIMS + i, red[i]);
    put(d, PC_REDUCE_RED_STRIDES + i, rs[0][i]);
  }
  put(d, PC_REDUCE_COUNT, count);
  put(d, PC_REDUCE_OP, code);
  put(d, PC_REDUCE_CORRECTION, fbits(static_cast<float>(correction)));
  d.bindings[0] = T(in_id(0));
  d.bindings[1] = T(out_id());
  grid_1d(d, n_out, 1);
  return Status::Ok();
}

// A reduction over zero elements: the identity (sum 0, prod 1; mean and var NaN; any
// false, all true); amax / amin: an error.
Status Lowerer::reduce_empty(int code, std::int64_t n_out) {
  if (node_->op == OpKind::Any || node_->op == OpKind::All) {
    fill(out_id(), n_out, node_->op == OpKind::All ? 1 : 0);
    return Status::Ok();
  }
  if (code == REDUCE_AMAX || code == REDUCE_AMIN) {
    return Status(StatusCode::kInvalidInput, "[" + std::string(op()) + "] reduction over zero elements");
  }
  const float identity = code == REDUCE_SUM ? 0.0f : code == REDUCE_PROD ? 1.0f : std::numeric_limits<float>::quiet_NaN();
  fill(out_id(), n_out, fbits(identity));
  return Status::Ok();
}

Status Lowerer::arg_reduce(bool is_max) {
  KILN_RETURN_IF_ERROR(expect_inputs(1, 1));
  KILN_ASSIGN_OR_RETURN(std::int64_t dim, attr_int(op(), attrs_, 0, "dim"));
  KILN_ASSIGN_OR_RETURN(bool keepdim, attr_bool(op(), attrs_, 1, "keepdim"));
  const Shape& xs = in(0)->shape;
  std::int64_t outer = 0, len = 0, inner = 0;
  if (!split_at(xs, dim, outer, len, inner)) return invalid("dim=", dim, " for x.shape=", shape_text(xs));
  Shape expect = xs;
  if (!xs.empty()) {
    if (keepdim) expect[dim] = 1;
    else expect.erase(expect.begin() + dim);
  }
  if (out().shape != expect) return invalid("out.shape=", shape_text(out().shape), " != expected ", shape_text(expect));
  const std::int64_t rows = outer * inner;
  if (rows == 0) return Status::Ok();
  if (len == 0) return Status(StatusCode::kInvalidInput, "[" + std::string(op()) + "] cannot reduce over zero elements");
  Dispatch& d = add("argreduce_f32", {in_id(0)}, {out_id()});
  put(d, PC_ARGREDUCE_ROWS, rows);
  put(d, PC_ARGREDUCE_D, len);
  put(d, PC_ARGREDUCE_INNER, inner);
  put(d, PC_ARGREDUCE_OP, is_max ? ARGREDUCE_MAX : ARGREDUCE_MIN);
  d.bindings[0] = T(in_id(0));
  d.bindings[1] = T(out_id());
  grid_1d(d, rows, 1);
  return Status::Ok();
}

Status Lowerer::cumsum() {
  KILN_RETURN_IF_ERROR(expect_inputs(1, 1));
  KILN_ASSIGN_OR_RETURN(std::int64_t dim, attr_int("cumsum", attrs_, 0, "dim"));
  const Shape& xs = in(0)->shape;
  std::int64_t outer = 0, len = 0, inner = 0;
  if (!split_at(xs, dim, outer, len, inner)) return invalid("dim=", dim, " for x.shape=", shape_text(xs));
  if (out().shape != xs) return invalid("out.shape != x.shape");
  const std::int64_t lines = outer * inner;
  if (lines == 0 || len == 0) return Status::Ok();
  Dispatch& d = add("cumsum_f32", {in_id(0)}, {out_id()});
  put(d, PC_CUMSUM_LINES, lines);
  put(d, PC_CUMSUM_D, len);
  put(d, PC_CUMSUM_INNER, inner);
  d.bindings[0] = T(in_id(0));
  d.bindings[1] = T(out_id());
  grid_1d(d, lines, 64);
  return Status::Ok();
}

Status Lowerer::softmax(bool log) {
  KILN_RETURN_IF_ERROR(expect_inputs(1, 1));
  KILN_ASSIGN_OR_RETURN(std::int64_t dim, attr_int(op(), attrs_, 0, "dim"));
  const Shape& xs = in(0)->shape;
  const std::int64_t rank = static_cast<std::int64_t>(xs.size());
  if (dim < 0) dim += std::max<std::int64_t>(rank, 1);
  if (rank == 0 ? dim != 0 : (dim < 0 || dim >= rank)) return invalid("dim=", dim, " outside the rank ", rank);
  if (out().shape != xs) return invalid("out.shape=", shape_text(out().shape), " != x.shape=", shape_text(xs));
  const std::int64_t D = rank == 0 ? 1 : xs[dim];
  std::int64_t inner = 1;
  for (std::int64_t d = dim + 1; d < rank; ++d) inner *= xs[d];
  const std::int64_t n = numel(xs);
  if (n == 0) return Status::Ok();
  const std::int64_t rows = n / D;
  Dispatch& d = add("softmax_f32", {in_id(0)}, {out_id()});
  put(d, PC_SOFTMAX_ROWS, rows);
  put(d, PC_SOFTMAX_D, D);
  put(d, PC_SOFTMAX_INNER, inner);
  put(d, PC_SOFTMAX_LOG, log ? 1 : 0);
  d.bindings[0] = T(in_id(0));
  d.bindings[1] = T(out_id());
  grid_1d(d, rows, 1);
  return Status::Ok();
}

Status Lowerer::layer_norm() {
  KILN_RETURN_IF_ERROR(expect_inputs(1, 3));
  KILN_ASSIGN_OR_RETURN(std::int64_t nr, attr_int("layer_norm", attrs_, 0, "normalized_rank"));
  KILN_ASSIGN_OR_RETURN(double eps, attr_float("layer_norm", attrs_, 1, "eps"));
  const Shape& xs = in(0)->shape;
  if (nr < 0 || nr > static_cast<std::int64_t>(xs.size())) return invalid("normalized_rank=", nr, " for x.shape=", shape_text(xs));
  const Shape norm(xs.end() - nr, xs.end());
  for (std::size_t i = 1; i <= 2; ++i) {
    if (in(i) != nullptr && in(i)->shape != norm) return invalid(i == 1 ? "weight" : "bias", ".shape=", shape_text(in(i)->shape), " != ", shape_text(norm));
  }
  if (out().shape != xs) return invalid("out.shape != x.shape");
  const std::int64_t n = numel(norm), rows = numel(Shape(xs.begin(), xs.end() - nr));
  if (n == 0 || rows == 0) return Status::Ok();
  Dispatch& d = add("layernorm_f32", {in_id(0)}, {out_id()});
  put(d, PC_LAYERNORM_ROWS, rows);
  put(d, PC_LAYERNORM_N, n);
  put(d, PC_LAYERNORM_EPS, fbits(static_cast<float>(eps)));
  d.bindings[0] = T(in_id(0));
  for (std::size_t i = 1; i <= 2; ++i) {  // weight, bias
    if (in(i) == nullptr) continue;
    put(d, i == 1 ? PC_LAYERNORM_HAS_WEIGHT : PC_LAYERNORM_HAS_BIAS, 1);
    d.bindings[i] = T(in_id(i));
    d.reads.push_back(in_id(i));
  }
  d.bindings[3] = T(out_id());
  grid_1d(d, rows, 1);
  return Status::Ok();
}

Status Lowerer::batch_norm() {
  KILN_RETURN_IF_ERROR(expect_inputs(1, 5));
  KILN_ASSIGN_OR_RETURN(double eps, attr_float("batch_norm", attrs_, 0, "eps"));
  if (in(3) == nullptr || in(4) == nullptr) return unsupported("training mode (no running statistics)");
  const Shape& xs = in(0)->shape;
  if (xs.size() < 2) return invalid("x must be at least 2-D, got ", shape_text(xs));
  for (std::size_t i = 1; i <= 4; ++i) {
    if (in(i) != nullptr && in(i)->shape != Shape{xs[1]}) return invalid("parameter ", i, " has shape ", shape_text(in(i)->shape));
  }
  if (out().shape != xs) return invalid("out.shape != x.shape");
  const std::int64_t n = numel(xs);
  if (n == 0) return Status::Ok();
  Dispatch& d = add("batchnorm_f32", {in_id(0), in_id(3), in_id(4)}, {out_id()});
  put(d, PC_BATCHNORM_N, n);
  put(d, PC_BATCHNORM_C, xs[1]);
  put(d, PC_BATCHNORM_PLANE, numel(Shape(xs.begin() + 2, xs.end())));
  put(d, PC_BATCHNORM_EPS, fbits(static_cast<float>(eps)));
  d.bindings[0] = T(in_id(0));
  for (std::size_t i = 1; i <= 2; ++i) {  // weight, bias
    if (in(i) == nullptr) continue;
    put(d, i == 1 ? PC_BATCHNORM_HAS_WEIGHT : PC_BATCHNORM_HAS_BIAS, 1);
    d.bindings[i] = T(in_id(i));
    d.reads.push_back(in_id(i));
  }
  d.bindings[3] = T(in_id(3));
  d.bindings[4] = T(in_id(4));
  d.bindings[5] = T(out_id());
  grid_1d(d, n, 256);
  return Status::Ok();
}

}  // namespace kiln::vulkan

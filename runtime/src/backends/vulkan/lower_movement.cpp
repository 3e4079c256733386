// Data movement, creation and indexing: reshape / identity / permute / slice / cat / split /
// expand / flip / pad as strided copies (copy.comp, pad also fill.comp), tril / triu
// (tri.comp), full / arange (fill.comp), embedding / index_select / gather (index.comp) and
// index (advindex.comp). The copies work on 32-bit words, so every dtype on the device moves.
#include <cmath>

#include "backends/cpu/kernels/common.h"
#include "backends/vulkan/lowerer.h"
#include "kernel/attrs.h"

namespace kiln::vulkan {

using backend::SegmentTensor;

Status Lowerer::reshape() {  // and identity
  KILN_RETURN_IF_ERROR(expect_inputs(1, 1));
  KILN_RETURN_IF_ERROR(expect_same_dtype());
  const Shape& xs = in(0)->shape;
  const Shape& os = out().shape;
  if (numel(xs) != numel(os)) return invalid("x.shape=", shape_text(xs), " and out.shape=", shape_text(os), " differ in size");
  const std::int64_t n = numel(xs);
  return copy(in_id(0), out_id(), {n}, {1}, {1}, 0, 0);
}

Status Lowerer::permute() {
  KILN_RETURN_IF_ERROR(expect_inputs(1, 1));
  KILN_RETURN_IF_ERROR(expect_same_dtype());
  KILN_ASSIGN_OR_RETURN(std::span<const std::int64_t> dims, attr_ints("permute", attrs_, 0, "dims"));
  const Shape& xs = in(0)->shape;
  const Shape& os = out().shape;
  const int rank = static_cast<int>(xs.size());
  if (static_cast<int>(dims.size()) != rank) return invalid("dims has ", dims.size(), " entries for rank ", rank);
  const Shape cs = contiguous(xs);
  Shape expect(rank), ist(rank);
  std::vector<bool> seen(rank, false);
  for (int i = 0; i < rank; ++i) {
    std::int64_t d = dims[i] < 0 ? dims[i] + rank : dims[i];
    if (d < 0 || d >= rank || seen[d]) return invalid("dims is not a permutation");
    seen[d] = true;
    expect[i] = xs[d];
    ist[i] = cs[d];
  }
  if (os != expect) return invalid("out.shape=", shape_text(os), " != ", shape_text(expect));
  return copy(in_id(0), out_id(), os, ist, contiguous(os), 0, 0);
}

Status Lowerer::slice() {
  KILN_RETURN_IF_ERROR(expect_inputs(1, 1));
  KILN_RETURN_IF_ERROR(expect_same_dtype());
  KILN_ASSIGN_OR_RETURN(std::int64_t dim, attr_int("slice", attrs_, 0, "dim"));
  KILN_ASSIGN_OR_RETURN(std::int64_t start, attr_int("slice", attrs_, 1, "start"));
  KILN_ASSIGN_OR_RETURN(std::int64_t end, attr_int("slice", attrs_, 2, "end"));
  KILN_ASSIGN_OR_RETURN(std::int64_t step, attr_int("slice", attrs_, 3, "step"));
  const Shape& xs = in(0)->shape;
  const Shape& os = out().shape;
  const int rank = static_cast<int>(xs.size());
  if (dim < 0 || dim >= rank) return invalid("dim=", dim, " for rank ", rank);
  if (step < 1) return invalid("step=", step, " must be positive");
  const std::int64_t size = xs[dim];
  if (start < 0) start += size;
  if (end < 0) end += size;
  start = std::clamp<std::int64_t>(start, 0, size);
  end = std::clamp<std::int64_t>(end, 0, size);
  const std::int64_t len = end > start ? (end - start - 1) / step + 1 : 0;
  Shape expect = xs;
  expect[dim] = len;
  if (os != expect) return invalid("out.shape=", shape_text(os), " != ", shape_text(expect));
  Shape ist = contiguous(xs);
  const std::int64_t off = start * ist[dim];
  if (len > 1) ist[dim] *= step;  // then step < size: the stride stays in range
  return copy(in_id(0), out_id(), os, ist, contiguous(os), off, 0);
}

Status Lowerer::cat() {
  KILN_RETURN_IF_ERROR(expect_inputs(1, SIZE_MAX));
  KILN_RETURN_IF_ERROR(expect_same_dtype());
  KILN_ASSIGN_OR_RETURN(std::int64_t dim, attr_int("cat", attrs_, 0, "dim"));
  const Shape& os = out().shape;
  if (dim < 0) dim += static_cast<std::int64_t>(os.size());
  if (dim < 0 || dim >= static_cast<std::int64_t>(os.size())) return invalid("dim=", dim);
  const Shape ost = contiguous(os);
  std::int64_t at = 0;
  for (std::size_t i = 0; i < node_->inputs.size(); ++i) {
    const SegmentTensor* t = in(i);
    if (t == nullptr) return invalid("input ", i, " is absent");
    if (t->dtype != out().dtype) return invalid("input ", i, " has another dtype");
    if (t->shape.size() == 1 && t->shape[0] == 0 && os.size() != 1) continue;  // PyTorch skips 1-D empties
    if (t->shape.size() != os.size()) return invalid("input ", i, ".shape=", shape_text(t->shape), " vs out.shape=", shape_text(os));
    for (std::size_t d = 0; d < os.size(); ++d) {
      if (static_cast<std::int64_t>(d) != dim && t->shape[d] != os[d]) return invalid("input ", i, " shape mismatch");
    }
    if (at + t->shape[dim] > os[dim]) return invalid("inputs exceed out.shape[", dim, "]");
    KILN_RETURN_IF_ERROR(copy(in_id(i), out_id(), t->shape, contiguous(t->shape), ost, 0, at * ost[dim]));
    at += t->shape[dim];
  }
  if (at != os[dim]) return invalid("inputs sum to ", at, " along dim ", dim, ", out has ", os[dim]);
  return Status::Ok();
}

Status Lowerer::split() {
  KILN_RETURN_IF_ERROR(expect_inputs(1, 1));
  KILN_RETURN_IF_ERROR(expect_same_dtype());
  KILN_ASSIGN_OR_RETURN(std::int64_t dim, attr_int("split", attrs_, 0, "dim"));
  KILN_ASSIGN_OR_RETURN(std::span<const std::int64_t> sizes, attr_ints("split", attrs_, 1, "sizes"));
  const Shape& xs = in(0)->shape;
  const int rank = static_cast<int>(xs.size());
  if (dim < 0) dim += rank;
  if (dim < 0 || dim >= rank) return invalid("dim=", dim);
  if (sizes.size() != node_->outputs.size()) return invalid(sizes.size(), " sizes for ", node_->outputs.size(), " outputs");
  const Shape xst = contiguous(xs);
  std::int64_t at = 0;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    Shape expect = xs;
    expect[dim] = sizes[i];
    if (sizes[i] < 0 || out(i).shape != expect) return invalid("output ", i, ".shape=", shape_text(out(i).shape), " != ", shape_text(expect));
    if (at + sizes[i] > xs[dim]) return invalid("sizes exceed x.shape[", dim, "]");
    KILN_RETURN_IF_ERROR(copy(in_id(0), out_id(i), expect, xst, contiguous(expect), at * xst[dim], 0));
    at += sizes[i];
  }
  if (at != xs[dim]) return invalid("sizes sum to ", at, ", x.shape[", dim, "]=", xs[dim]);
  return Status::Ok();
}

Status Lowerer::expand() {
  KILN_RETURN_IF_ERROR(expect_inputs(1, 1));
  KILN_RETURN_IF_ERROR(expect_same_dtype());
  const Shape& xs = in(0)->shape;
  const Shape& os = out().shape;
  Shape ist;
  if (!broadcast_strides(xs, os, ist)) return invalid("x.shape=", shape_text(xs), " does not expand to ", shape_text(os));
  return copy(in_id(0), out_id(), os, ist, contiguous(os), 0, 0);
}

Status Lowerer::flip() {  // a copy with negative strides from the far corner
  KILN_RETURN_IF_ERROR(expect_inputs(1, 1));
  KILN_RETURN_IF_ERROR(expect_same_dtype());
  KILN_ASSIGN_OR_RETURN(std::span<const std::int64_t> dims, attr_ints("flip", attrs_, 0, "dims"));
  const Shape& xs = in(0)->shape;
  const Shape& os = out().shape;
  const int rank = static_cast<int>(xs.size());
  if (os != xs) return invalid("out.shape != x.shape");
  Shape ist = contiguous(xs);
  std::int64_t off = 0;
  std::vector<bool> seen(rank, false);
  for (std::int64_t d : dims) {
    if (d < 0) d += rank;
    if (d < 0 || d >= rank || seen[d]) return invalid("dims has a repeated or out-of-range dim");
    seen[d] = true;
    if (xs[d] > 0) off += (xs[d] - 1) * ist[d];
    ist[d] = -ist[d];
  }
  return copy(in_id(0), out_id(), os, ist, contiguous(os), off, 0);
}

Status Lowerer::pad() {  // a fill with the value, then a copy of the kept box
  KILN_RETURN_IF_ERROR(expect_inputs(1, 1));
  KILN_RETURN_IF_ERROR(expect_same_dtype());
  KILN_ASSIGN_OR_RETURN(std::span<const std::int64_t> pads, attr_ints("pad", attrs_, 0, "pads"));
  KILN_ASSIGN_OR_RETURN(double value, attr_float("pad", attrs_, 1, "value"));
  const Shape& xs = in(0)->shape;
  const Shape& os = out().shape;
  const int rank = static_cast<int>(xs.size());
  if (pads.size() % 2 != 0 || pads.size() > 2 * static_cast<std::size_t>(rank)) return invalid("pads has ", pads.size(), " entries");
  constexpr std::int64_t kLim = std::int64_t{1} << 40;
  Shape left(rank, 0), expect = xs;
  for (std::size_t i = 0; i < pads.size() / 2; ++i) {
    const int d = rank - 1 - static_cast<int>(i);
    const std::int64_t l = pads[2 * i], r = pads[2 * i + 1];
    if (l < -kLim || l > kLim || r < -kLim || r > kLim || xs[d] + l + r < 0) {
      return invalid("pads give a negative size on dim ", d);
    }
    left[d] = l;
    expect[d] = xs[d] + l + r;
  }
  if (os != expect) return invalid("out.shape=", shape_text(os), " != ", shape_text(expect));
  fill(out_id(), numel(os), scalar_bits(value, in(0)->dtype));
  const Shape xst = contiguous(xs), ost = contiguous(os);
  Shape box(rank);
  std::int64_t soff = 0, doff = 0;
  for (int d = 0; d < rank; ++d) {
    const std::int64_t s0 = std::max<std::int64_t>(0, -left[d]), d0 = std::max<std::int64_t>(0, left[d]);
    box[d] = std::min(xs[d] - s0, expect[d] - d0);
    if (box[d] <= 0) return Status::Ok();
    soff += s0 * xst[d];
    doff += d0 * ost[d];
  }
  return copy(in_id(0), out_id(), box, xst, ost, soff, doff);
}

Status Lowerer::tri() {  // tril and triu
  KILN_RETURN_IF_ERROR(expect_inputs(1, 1));
  KILN_RETURN_IF_ERROR(expect_same_dtype());
  KILN_ASSIGN_OR_RETURN(std::int64_t diag, attr_int(op(), attrs_, 0, "diagonal"));
  const Shape& xs = in(0)->shape;
  const int rank = static_cast<int>(xs.size());
  if (rank < 2) return invalid("x must be at least 2-D");
  if (out().shape != xs) return invalid("out.shape != x.shape");
  const std::int64_t n = numel(xs);
  if (n == 0) return Status::Ok();
  Dispatch& d = add("tri_x32", {in_id(0)}, {out_id()});
  put(d, PC_TRI_N, n);
  put(d, PC_TRI_ROWS, xs[rank - 2]);
  put(d, PC_TRI_COLS, xs[rank - 1]);
  put(d, PC_TRI_DIAGONAL, std::clamp<std::int64_t>(diag, -(std::int64_t{1} << 30), std::int64_t{1} << 30));
  put(d, PC_TRI_UPPER, node_->op == OpKind::Triu ? 1 : 0);
  d.bindings[0] = T(in_id(0));
  d.bindings[1] = T(out_id());
  grid_1d(d, n, 256);
  return Status::Ok();
}

Status Lowerer::full() {
  if (!node_->inputs.empty() || node_->outputs.size() != 1) return invalid("takes no inputs and one output");
  const DType dt = out().dtype;
  KILN_ASSIGN_OR_RETURN(double value, attr_float("full", attrs_, 1, "value"));
  if (dt != DType::kF32 && dt != DType::kBool && (value < -2147483648.0 || value >= 2147483648.0)) {
    return unsupported("full value ", value, " does not fit the device's 32-bit integers");
  }
  fill(out_id(), numel(out().shape), scalar_bits(value, dt));
  return Status::Ok();
}

Status Lowerer::arange() {
  if (!node_->inputs.empty() || node_->outputs.size() != 1) return invalid("takes no inputs and one output");
  KILN_ASSIGN_OR_RETURN(std::int64_t start, attr_int("arange", attrs_, 0, "start"));
  KILN_ASSIGN_OR_RETURN(std::int64_t end, attr_int("arange", attrs_, 1, "end"));
  KILN_ASSIGN_OR_RETURN(std::int64_t step, attr_int("arange", attrs_, 2, "step"));
  if (step == 0) return invalid("step must not be 0");
  constexpr std::int64_t kLim = std::int64_t{1} << 24;  // exact in f32 and i32
  if (std::abs(start) > kLim || std::abs(end) > kLim || std::abs(step) > kLim) {
    return unsupported("arange bounds beyond 2^24");
  }
  const std::int64_t span = end - start;
  const std::int64_t len = (span == 0 || (span > 0) != (step > 0)) ? 0 : (span + step + (step > 0 ? -1 : 1)) / step;
  if (out().shape != Shape{len}) return invalid("out.shape=", shape_text(out().shape), " != [", len, "]");
  if (len == 0) return Status::Ok();
  Dispatch& d = add("fill_x32", {}, {out_id()});
  put(d, PC_FILL_N, len);
  put(d, PC_FILL_VALUE, start);
  put(d, PC_FILL_MODE, out().dtype == DType::kF32 ? FILL_RAMP_F32 : FILL_RAMP_I32);
  put(d, PC_FILL_STEP, step);
  d.bindings[0] = T(out_id());
  grid_1d(d, len, 256);
  return Status::Ok();
}

}  // namespace kiln::vulkan

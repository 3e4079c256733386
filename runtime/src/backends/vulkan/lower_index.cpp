// Indexed reads with device-side range checks: embedding / index_select / gather
// (index.comp) and advanced indexing by up to 3 index tensors (advindex.comp); and the
// indexed write index_put (indexput.comp: a KV cache row update). An out-of-range index
// sets the segment's error buffer, which the backend checks after the run.
#include "backends/cpu/kernels/common.h"
#include "backends/vulkan/lowerer.h"
#include "kernel/attrs.h"

namespace kiln::vulkan {


// embedding / index_select: out = x with dim `dim` replaced by the index's elements.
Status Lowerer::select_push(Dispatch& d, std::int64_t& n) const {
  // A 0-d x is indexed as [1] (as on the CPU); its output stays 0-d.
  const Shape xs = in(0)->shape.empty() ? Shape{1} : in(0)->shape;
  const bool scalar_x = in(0)->shape.empty();
  const Shape& is = in(1)->shape;
  std::int64_t dim = 0;
  if (node_->op == OpKind::IndexSelect) {
    KILN_ASSIGN_OR_RETURN(dim, attr_int("index_select", attrs_, 0, "dim"));
    if (dim < 0) dim += static_cast<std::int64_t>(xs.size());
    if (is.size() > 1) return invalid("index must be 0-D or 1-D, got ", shape_text(is));
  }
  if (xs.empty() || dim < 0 || dim >= static_cast<std::int64_t>(xs.size())) return invalid("dim=", dim, " for x.shape=", shape_text(xs));
  Shape expect;
  if (node_->op == OpKind::Embedding) {
    expect = is;
    expect.insert(expect.end(), xs.begin() + 1, xs.end());
  } else {
    expect = xs;
    expect[dim] = numel(is);
    if (scalar_x) {
      if (numel(is) != 1) return invalid("a 0-d x takes exactly one index, got ", shape_text(is));
      expect.clear();
    }
  }
  if (out().shape != expect) return invalid("out.shape=", shape_text(out().shape), " != expected ", shape_text(expect));
  n = numel(expect);
  put(d, PC_INDEX_MODE, INDEX_SELECT);
  put(d, PC_INDEX_DIM_SIZE, xs[dim]);
  put(d, PC_INDEX_COUNT, numel(is));
  put(d, PC_INDEX_INNER, numel(Shape(xs.begin() + dim + 1, xs.end())));
  return Status::Ok();
}

// gather: out has the index's shape; x is read at the index along `dim`.
Status Lowerer::gather_push(Dispatch& d, std::int64_t& n) const {
  const Shape xs = in(0)->shape.empty() ? Shape{1} : in(0)->shape;
  const bool scalar_x = in(0)->shape.empty();
  const Shape& is = in(1)->shape;
  KILN_ASSIGN_OR_RETURN(std::int64_t dim, attr_int("gather", attrs_, 0, "dim"));
  if (dim < 0) dim += static_cast<std::int64_t>(xs.size());
  const Shape xi = scalar_x ? Shape{} : xs;  // ranks compare with the real x
  if (is.size() != xi.size() || dim < 0 || dim >= static_cast<std::int64_t>(xs.size())) {
    return invalid("index.shape=", shape_text(is), " x.shape=", shape_text(xs), " dim=", dim);
  }
  for (std::size_t i = 0; i < xi.size(); ++i) {
    if (static_cast<std::int64_t>(i) != dim && is[i] > xs[i]) return invalid("index.shape[", i, "] > x.shape[", i, "]");
  }
  if (out().shape != is) return invalid("out.shape != index.shape");
  if (xs.size() > kMaxDims) return unsupported("gather over more than ", kMaxDims, " dims");
  n = numel(is);
  const Shape xst = contiguous(xs);
  const Shape ishape = scalar_x ? Shape{1} : is;
  put(d, PC_INDEX_MODE, INDEX_GATHER);
  put(d, PC_INDEX_DIM_SIZE, xs[dim]);
  put(d, PC_GATHER_RANK, static_cast<std::int64_t>(xs.size()));
  put(d, PC_GATHER_DIM, dim);
  for (std::size_t i = 0; i < xs.size(); ++i) {
    put(d, PC_GATHER_SHAPE + i, ishape[i]);
    put(d, PC_GATHER_X_STRIDES + i, xst[i]);
  }
  return Status::Ok();
}

Status Lowerer::indexing() {
  KILN_RETURN_IF_ERROR(expect_inputs(2, 2));
  Dispatch d;
  d.variant = "index_x32";
  std::int64_t n = 0;
  if (node_->op == OpKind::Gather) KILN_RETURN_IF_ERROR(gather_push(d, n));
  else KILN_RETURN_IF_ERROR(select_push(d, n));
  if (n == 0) return Status::Ok();
  put(d, PC_INDEX_N, n);
  d.reads = {in_id(0), in_id(1)};
  d.writes = {out_id()};
  d.bindings[0] = T(in_id(0));
  d.bindings[1] = T(in_id(1));
  d.bindings[2] = T(out_id());
  d.bindings[3] = {BindingRef::kError, 0};
  grid_1d(d, n, 256);
  out_.dispatches.push_back(std::move(d));
  out_.uses_error_buffer = true;
  return Status::Ok();
}

// The broadcast shape of index tensors 1..k (at most 4 dims).
Status Lowerer::index_broadcast(int k, Shape& bshape) const {
  std::size_t brank = 0;
  for (int j = 1; j <= k; ++j) brank = std::max(brank, in(j)->shape.size());
  if (brank > ADVINDEX_MAX_RANK) return unsupported("index tensors of rank > ", ADVINDEX_MAX_RANK);
  bshape.assign(brank, 1);
  for (std::size_t d = 0; d < brank; ++d) {
    for (int j = 1; j <= k; ++j) {
      const Shape& t = in(j)->shape;
      const int td = static_cast<int>(d) - static_cast<int>(brank - t.size());
      const std::int64_t dim = td >= 0 ? t[td] : 1;
      if (dim == 1) continue;
      if (bshape[d] != 1 && bshape[d] != dim) return invalid("index tensor shapes do not broadcast");
      bshape[d] = dim;
    }
  }
  return Status::Ok();
}

Status Lowerer::advanced_index() {
  if (node_->inputs.size() < 2 || node_->inputs.size() > 1 + ADVINDEX_MAX_INDICES || node_->outputs.size() != 1) {
    return unsupported("index with ", node_->inputs.size() - 1, " index tensors (at most ", ADVINDEX_MAX_INDICES, ")");
  }
  for (std::size_t i = 0; i < node_->inputs.size(); ++i) {
    if (in(i) == nullptr) return invalid("input ", i, " is absent");
  }
  KILN_ASSIGN_OR_RETURN(std::span<const std::int64_t> dims, attr_ints("index", attrs_, 0, "dims"));
  const Shape& xs = in(0)->shape;
  const int k = static_cast<int>(node_->inputs.size()) - 1;
  const int rank = static_cast<int>(xs.size());
  if (static_cast<int>(dims.size()) != k) return invalid("dims has ", dims.size(), " entries for ", k, " index tensors");
  if (dims[0] < 0 || dims[0] >= rank) return invalid("dims[0]=", dims[0], " for rank ", rank);
  for (int i = 1; i < k; ++i) {
    if (dims[i] != dims[0] + i) return unsupported("index tensors on non-adjacent dims");
  }
  const int first = static_cast<int>(dims[0]);
  if (first + k > rank) return invalid(k, " index tensors from dim ", first, " exceed x.rank=", rank);
  Shape bshape;
  KILN_RETURN_IF_ERROR(index_broadcast(k, bshape));
  Shape expect(xs.begin(), xs.begin() + first);
  expect.insert(expect.end(), bshape.begin(), bshape.end());
  expect.insert(expect.end(), xs.begin() + first + k, xs.end());
  if (out().shape != expect) return invalid("out.shape=", shape_text(out().shape), " != expected ", shape_text(expect));
  const std::int64_t n = numel(expect);
  if (n == 0) return Status::Ok();
  const Shape xst = contiguous(xs);
  const std::size_t brank = bshape.size();
  Dispatch& d = add("advindex_x32", {in_id(0)}, {out_id()});
  put(d, PC_ADVINDEX_N, n);
  put(d, PC_ADVINDEX_K, k);
  put(d, PC_ADVINDEX_POST, numel(Shape(xs.begin() + first + k, xs.end())));
  put(d, PC_ADVINDEX_BLOCK, numel(Shape(xs.begin() + first, xs.end())));
  put(d, PC_ADVINDEX_NB, numel(bshape));
  put(d, PC_ADVINDEX_BRANK, static_cast<std::int64_t>(brank));
  for (std::size_t i = 0; i < brank; ++i) put(d, PC_ADVINDEX_BSHAPE + i, bshape[i]);
  for (int j = 0; j < k; ++j) {
    Shape bs;
    broadcast_strides(in(j + 1)->shape, bshape, bs);
    for (std::size_t i = 0; i < brank; ++i) put(d, PC_ADVINDEX_STRIDES + ADVINDEX_MAX_RANK * j + i, bs[i]);
    put(d, PC_ADVINDEX_SIZES + j, xs[first + j]);
    put(d, PC_ADVINDEX_X_STRIDES + j, xst[first + j]);
    d.bindings[3 + j] = T(in_id(j + 1));
    d.reads.push_back(in_id(j + 1));
  }
  d.bindings[0] = T(in_id(0));
  d.bindings[1] = T(out_id());
  d.bindings[2] = {BindingRef::kError, 0};
  grid_1d(d, n, 256);
  out_.uses_error_buffer = true;
  return Status::Ok();
}

// index_put(x, values, index; dims=[dim], accumulate=false), one index tensor, values dense
// in the indexed shape (the checks and message texts of the CPU kernel). Written in place
// when x and out are one device-resident tensor (kDevice): an INDEXPUT_SAVE dispatch first
// records every element it will overwrite (and range-checks every index) in an undo log,
// then INDEXPUT_WRITE writes only when no index of the segment was out of range; the
// segment's undo command puts the log back after a failed run. Otherwise out = a copy of x,
// then the write.
Status Lowerer::index_put() {
  KILN_RETURN_IF_ERROR(expect_inputs(3, 3));
  KILN_ASSIGN_OR_RETURN(std::span<const std::int64_t> dims, attr_ints("index_put", attrs_, 0, "dims"));
  KILN_ASSIGN_OR_RETURN(bool accumulate, attr_bool("index_put", attrs_, 1, "accumulate"));
  if (accumulate) return unsupported("accumulate=True");
  if (dims.size() != 1) return invalid("dims has ", dims.size(), " entries for 1 index tensors");
  const Shape& xs = in(0)->shape;
  const Shape& vs = in(1)->shape;
  const Shape& is = in(2)->shape;
  const auto rank = static_cast<std::int64_t>(xs.size());
  if (dims[0] < 0 || dims[0] >= rank) return invalid("dims[0]=", dims[0], " out of range for rank ", rank);
  const auto dim = static_cast<std::size_t>(dims[0]);
  if (out().shape != xs) return invalid("x.shape=", shape_text(xs), " != out.shape=", shape_text(out().shape));
  if (out().dtype != in(0)->dtype || in(1)->dtype != in(0)->dtype) return invalid("x, values and out differ in dtype");
  Shape ishape(xs.begin(), xs.begin() + static_cast<std::ptrdiff_t>(dim));
  ishape.insert(ishape.end(), is.begin(), is.end());
  ishape.insert(ishape.end(), xs.begin() + static_cast<std::ptrdiff_t>(dim) + 1, xs.end());
  // values broadcasts into the indexed shape (right-aligned, dims equal or 1); the device
  // takes it only when that needs no broadcasting.
  if (vs.size() > ishape.size()) return invalid("values.shape=", shape_text(vs), " does not broadcast to the indexed shape ", shape_text(ishape));
  bool dense = true;
  for (std::size_t d = 0; d < ishape.size(); ++d) {
    const std::ptrdiff_t vd = static_cast<std::ptrdiff_t>(d) - static_cast<std::ptrdiff_t>(ishape.size() - vs.size());
    const std::int64_t v = vd < 0 ? 1 : vs[static_cast<std::size_t>(vd)];
    if (v != 1 && v != ishape[d]) return invalid("values.shape=", shape_text(vs), " does not broadcast to the indexed shape ", shape_text(ishape));
    dense = dense && (v == ishape[d]);
  }
  if (!dense) return unsupported("values of shape ", shape_text(vs), " broadcast into the indexed shape ", shape_text(ishape));
  const std::int64_t count = numel(is), post = numel(Shape(xs.begin() + static_cast<std::ptrdiff_t>(dim) + 1, xs.end()));
  const std::int64_t n = numel(ishape);
  const bool in_place = in(0)->role == backend::SegmentTensor::Role::kDevice && out().role == backend::SegmentTensor::Role::kDevice &&
                        in(0)->io_index == out().io_index;
  if (!in_place) KILN_RETURN_IF_ERROR(copy(in_id(0), out_id(), xs, contiguous(xs), contiguous(xs), 0, 0));
  if (n == 0) return Status::Ok();
  out_.index_checks.push_back({"index_put", static_cast<std::int64_t>(dim), xs[dim], node_->where});
  out_.uses_error_buffer = true;
  Dispatch d;
  d.variant = "indexput_x32";
  put(d, PC_INDEXPUT_N, n);
  put(d, PC_INDEXPUT_COUNT, count);
  put(d, PC_INDEXPUT_POST, post);
  put(d, PC_INDEXPUT_SIZE, xs[dim]);
  put(d, PC_INDEXPUT_X_N, numel(xs));
  put(d, PC_INDEXPUT_TAG, static_cast<std::int64_t>(out_.index_checks.size()));
  d.bindings[0] = T(out_id());
  d.bindings[1] = T(in_id(1));
  d.bindings[2] = T(in_id(2));
  d.bindings[3] = {BindingRef::kError, 0};
  grid_1d(d, n, 256);
  if (in_place) {
    const auto slot = static_cast<std::uint32_t>(out_.undo_words.size());
    out_.undo_words.push_back(2 * n);
    d.bindings[4] = {BindingRef::kUndo, slot};
    Dispatch save = d;
    put(save, PC_INDEXPUT_MODE, INDEXPUT_SAVE);
    save.reads = {in_id(0), in_id(2)};
    out_.dispatches.push_back(save);
    Dispatch restore = d;
    put(restore, PC_INDEXPUT_MODE, INDEXPUT_RESTORE);
    restore.writes = {out_id()};
    out_.undo_dispatches.insert(out_.undo_dispatches.begin(), restore);  // newest first
  }
  put(d, PC_INDEXPUT_MODE, INDEXPUT_WRITE);
  d.reads = {in_id(1), in_id(2)};
  d.writes = {out_id()};
  d.barrier_before = true;  // after every range check (and SAVE) of the segment
  out_.dispatches.push_back(std::move(d));
  return Status::Ok();
}

}  // namespace kiln::vulkan

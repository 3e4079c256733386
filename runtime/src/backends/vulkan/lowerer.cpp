// Shape helpers and the dispatch emitters shared by every op family (see lowerer.h).
#include "backends/vulkan/lowerer.h"

#include <cmath>

namespace kiln::vulkan {

// The shaders' push-constant block is the pipeline layout's, and the last slot of each
// shader's layout stays inside it.
static_assert(KILN_PUSH_WORDS == kPushWords);
static_assert(PC_BINARY_CONTIGUOUS < KILN_PUSH_WORDS);
static_assert(PC_WHERE_B_STRIDES + KILN_MAX_DIMS <= KILN_PUSH_WORDS);
static_assert(PC_COPY_OUT_OFFSET < KILN_PUSH_WORDS);
static_assert(PC_MATMUL_Z_OFFSET < KILN_PUSH_WORDS);
static_assert(PC_CONV2D_HAS_BIAS < KILN_PUSH_WORDS && PC_CONVGEMM_O < KILN_PUSH_WORDS);
static_assert(PC_POOL_COUNT_INCLUDE_PAD < KILN_PUSH_WORDS);
static_assert(PC_REDUCE_CORRECTION < KILN_PUSH_WORDS);
static_assert(PC_GATHER_X_STRIDES + KILN_MAX_DIMS <= KILN_PUSH_WORDS);
static_assert(PC_ADVINDEX_X_STRIDES + ADVINDEX_MAX_INDICES <= KILN_PUSH_WORDS);

using backend::SegmentDesc;
using backend::SegmentNode;

std::int64_t numel(const Shape& s) {
  std::int64_t n = 1;
  for (std::int64_t d : s) n *= d;
  return n;
}

Shape contiguous(const Shape& s) {
  Shape st(s.size(), 1);
  for (int d = static_cast<int>(s.size()) - 2; d >= 0; --d) st[d] = st[d + 1] * s[d + 1];
  return st;
}

std::string shape_text(const Shape& s) {
  std::string r = "[";
  for (std::size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

bool coalesce(Shape& shape, std::vector<Shape>& strides) {
  Shape s;
  std::vector<Shape> st(strides.size());
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    bool merge = !s.empty();
    for (std::size_t k = 0; merge && k < strides.size(); ++k) merge = st[k].back() == strides[k][d] * shape[d];
    if (merge) {
      s.back() *= shape[d];
      for (std::size_t k = 0; k < strides.size(); ++k) st[k].back() = strides[k][d];
    } else {
      s.push_back(shape[d]);
      for (std::size_t k = 0; k < strides.size(); ++k) st[k].push_back(strides[k][d]);
    }
  }
  shape = std::move(s);
  strides = std::move(st);
  return shape.size() <= kMaxDims;
}

bool broadcast_strides(const Shape& in, const Shape& out, Shape& strides) {
  if (in.size() > out.size()) return false;
  const Shape cs = contiguous(in);
  strides.assign(out.size(), 0);
  const std::size_t lead = out.size() - in.size();
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (in[i] == out[lead + i]) strides[lead + i] = in[i] == 1 ? 0 : cs[i];
    else if (in[i] == 1) strides[lead + i] = 0;
    else return false;
  }
  return true;
}

bool split_at(const Shape& xs, std::int64_t dim, std::int64_t& outer, std::int64_t& d, std::int64_t& inner) {
  const auto rank = static_cast<std::int64_t>(xs.size());
  if (rank == 0) {
    outer = d = inner = 1;
    return dim == 0;
  }
  if (dim < 0 || dim >= rank) return false;
  outer = numel(Shape(xs.begin(), xs.begin() + dim));
  d = xs[dim];
  inner = numel(Shape(xs.begin() + dim + 1, xs.end()));
  return true;
}

std::int32_t scalar_bits(double v, DType dtype) {
  if (dtype == DType::kF32) return fbits(static_cast<float>(v));
  if (dtype == DType::kBool) return v != 0.0 ? 1 : 0;
  if (std::isnan(v)) return 0;
  return static_cast<std::int32_t>(std::clamp(std::trunc(v), -2147483648.0, 2147483647.0));
}

void grid_1d(Dispatch& d, std::int64_t items, std::int64_t per_group) {
  const std::int64_t groups = std::max<std::int64_t>(1, (items + per_group - 1) / per_group);
  const std::int64_t gx = std::min<std::int64_t>(groups, 65535);
  d.groups[0] = static_cast<std::uint32_t>(gx);
  d.groups[1] = static_cast<std::uint32_t>((groups + gx - 1) / gx);
  d.groups[2] = 1;
}

Status Lowerer::expect_inputs(std::size_t lo, std::size_t hi) const {
  if (node_->inputs.size() < lo || node_->inputs.size() > hi || node_->outputs.empty()) {
    return invalid("has ", node_->inputs.size(), " inputs and ", node_->outputs.size(), " outputs");
  }
  for (std::size_t i = 0; i < lo; ++i) {
    if (in(i) == nullptr) return invalid("input ", i, " is absent");
  }
  return Status::Ok();
}

Status Lowerer::expect_same_dtype() const {
  for (std::size_t i = 0; i < node_->outputs.size(); ++i) {
    if (out(i).dtype != in(0)->dtype) return invalid("out dtype differs from x dtype");
  }
  return Status::Ok();
}

Status Lowerer::copy(std::uint32_t src, std::uint32_t dst, Shape shape, Shape in_strides, Shape out_strides,
                     std::int64_t in_off, std::int64_t out_off) {
  const std::int64_t n = numel(shape);
  if (n == 0) return Status::Ok();
  std::vector<Shape> strides{std::move(in_strides), std::move(out_strides)};
  if (!coalesce(shape, strides)) {
    return unsupported("a copy over ", shape.size(), " non-mergeable dims (at most ", kMaxDims, ")");
  }
  Dispatch& d = add("copy_x32", {src}, {dst});
  put(d, PC_COPY_N, n);
  put(d, PC_COPY_RANK, static_cast<std::int64_t>(shape.size()));
  for (std::size_t i = 0; i < shape.size(); ++i) {
    put(d, PC_COPY_SHAPE + i, shape[i]);
    put(d, PC_COPY_IN_STRIDES + i, strides[0][i]);
    put(d, PC_COPY_OUT_STRIDES + i, strides[1][i]);
  }
  put(d, PC_COPY_IN_OFFSET, in_off);
  put(d, PC_COPY_OUT_OFFSET, out_off);
  d.bindings[0] = T(src);
  d.bindings[1] = T(dst);
  grid_1d(d, n, 256);
  return Status::Ok();
}

void Lowerer::fill(std::uint32_t dst, std::int64_t n, std::int32_t bits) {
  if (n == 0) return;
  Dispatch& d = add("fill_x32", {}, {dst});
  put(d, PC_FILL_N, n);
  put(d, PC_FILL_VALUE, bits);
  put(d, PC_FILL_MODE, FILL_CONSTANT);
  d.bindings[0] = T(dst);
  grid_1d(d, n, 256);
}

Status lower_segment(const SegmentDesc& desc, const VkPhysicalDeviceLimits& limits, LoweredSegment& out) {
  Lowerer l(desc, limits, out);
  for (const SegmentNode& n : desc.nodes) {
    Status st = l.node(n);
    if (!st.ok()) return n.where.empty() ? st : st.with_context(n.where);
  }
  return Status::Ok();
}

}  // namespace kiln::vulkan

// Elementwise lowerings: unary (unary.comp), binary / comparison / logical (binary.comp),
// where and masked_fill (where.comp), cast (cast.comp).
#include <limits>
#include <optional>

#include "backends/cpu/kernels/common.h"
#include "backends/vulkan/lowerer.h"

namespace kiln::vulkan {

using cpu::kernels::attr_float;
using cpu::kernels::attr_optional_float;
using cpu::kernels::attr_string;

Status Lowerer::unary(int code) {
  float alpha = 0, beta = 0;
  if (node_->op == OpKind::Gelu) {
    KILN_ASSIGN_OR_RETURN(std::string_view approx, attr_string("gelu", attrs_, 0, "approximate", true));
    if (approx == "tanh") code = 13;
    else if (!approx.empty() && approx != "none") return invalid("approximate='", approx, "'");
  } else if (node_->op == OpKind::Clamp) {
    KILN_ASSIGN_OR_RETURN(std::optional<double> lo, attr_optional_float("clamp", attrs_, 0, "min"));
    KILN_ASSIGN_OR_RETURN(std::optional<double> hi, attr_optional_float("clamp", attrs_, 1, "max"));
    alpha = lo ? static_cast<float>(*lo) : -std::numeric_limits<float>::infinity();
    beta = hi ? static_cast<float>(*hi) : std::numeric_limits<float>::infinity();
  } else if (node_->op == OpKind::LeakyRelu) {
    KILN_ASSIGN_OR_RETURN(double slope, attr_float("leaky_relu", attrs_, 0, "negative_slope"));
    alpha = static_cast<float>(slope);
  }
  KILN_RETURN_IF_ERROR(expect_inputs(1, 1));
  if (in(0)->shape != out().shape) return invalid("x.shape=", shape_text(in(0)->shape), " != out.shape=", shape_text(out().shape));
  const std::int64_t n = numel(out().shape);
  if (n == 0) return Status::Ok();
  Dispatch& d = add("unary_f32", {in_id(0)}, {out_id()});
  d.push[0] = static_cast<std::int32_t>(n);
  d.push[1] = code;
  d.push[2] = fbits(alpha);
  d.push[3] = fbits(beta);
  d.bindings[0] = T(in_id(0));
  d.bindings[1] = T(out_id());
  grid_1d(d, n, 256);
  return Status::Ok();
}

Status Lowerer::binary(std::string_view variant, int code) {
  if (node_->op == OpKind::Div) {
    KILN_ASSIGN_OR_RETURN(std::string_view mode, attr_string("div", attrs_, 0, "rounding_mode", true));
    if (mode == "trunc") code = 4;
    else if (mode == "floor") code = 5;
    else if (!mode.empty()) return invalid("rounding_mode='", mode, "'");
  }
  KILN_RETURN_IF_ERROR(expect_inputs(2, 2));
  const Shape& a = in(0)->shape;
  const Shape& b = in(1)->shape;
  const Shape& os = out().shape;
  // out.shape must be the broadcast of a and b.
  const std::size_t r = std::max(a.size(), b.size());
  Shape expect(r, 1);
  for (std::size_t i = 0; i < r; ++i) {
    const std::int64_t da = i + a.size() >= r ? a[i + a.size() - r] : 1;
    const std::int64_t db = i + b.size() >= r ? b[i + b.size() - r] : 1;
    if (da != db && da != 1 && db != 1) {
      return invalid("a.shape=", shape_text(a), " and b.shape=", shape_text(b), " do not broadcast");
    }
    expect[i] = da == 1 ? db : da;
  }
  if (expect != os) return invalid("out.shape=", shape_text(os), " is not the broadcast shape ", shape_text(expect));
  const std::int64_t n = numel(os);
  if (n == 0) return Status::Ok();
  Shape sa, sb;
  broadcast_strides(a, os, sa);
  broadcast_strides(b, os, sb);
  Shape shape = os;
  std::vector<Shape> strides{sa, sb, contiguous(os)};
  if (!coalesce(shape, strides)) return unsupported("broadcast over more than ", kMaxDims, " dims");
  Dispatch& d = add(variant, {in_id(0), in_id(1)}, {out_id()});
  d.push[0] = static_cast<std::int32_t>(n);
  d.push[1] = code;
  d.push[2] = static_cast<std::int32_t>(shape.size());
  for (std::size_t i = 0; i < shape.size(); ++i) {
    d.push[3 + i] = static_cast<std::int32_t>(shape[i]);
    d.push[9 + i] = static_cast<std::int32_t>(strides[0][i]);
    d.push[15 + i] = static_cast<std::int32_t>(strides[1][i]);
  }
  d.push[21] = (a == os && b == os) ? 1 : 0;
  d.bindings[0] = T(in_id(0));
  d.bindings[1] = T(in_id(1));
  d.bindings[2] = T(out_id());
  grid_1d(d, n, 256);
  return Status::Ok();
}

Status Lowerer::logical_not() {
  KILN_RETURN_IF_ERROR(expect_inputs(1, 1));
  if (in(0)->shape != out().shape) return invalid("out.shape != x.shape");
  const std::int64_t cnt = numel(out().shape);
  if (cnt == 0) return Status::Ok();
  // bool: the logical variant's `not a`; f32: x == 0 against the zero-filled dummy buffer.
  Dispatch& d = add(in(0)->dtype == DType::kBool ? "logical_b32" : "compare_f32", {in_id(0)}, {out_id()});
  d.push[0] = static_cast<std::int32_t>(cnt);
  d.push[1] = in(0)->dtype == DType::kBool ? 3 : 0;  // logical: 3 = not a; compare: 0 = eq (b = 0.0)
  d.push[2] = 1;                                      // one dim: a walks, b (the zero dummy) stays
  d.push[3] = static_cast<std::int32_t>(cnt);
  d.push[9] = 1;
  d.push[15] = 0;
  d.push[21] = 0;
  d.bindings[0] = T(in_id(0));
  d.bindings[1] = {BindingRef::kDummy, 0};  // zeros: rank 0 -> all offsets 0
  d.bindings[2] = T(out_id());
  grid_1d(d, cnt, 256);
  return Status::Ok();
}

Status Lowerer::where() {
  KILN_RETURN_IF_ERROR(expect_inputs(3, 3));
  return where_dispatch(in_id(0), in_id(1), in_id(2), nullptr);
}

Status Lowerer::masked_fill() {
  KILN_RETURN_IF_ERROR(expect_inputs(3, 3));
  if (numel(in(2)->shape) != 1) return invalid("value must hold one element, got ", shape_text(in(2)->shape));
  if (out().shape != in(0)->shape) return invalid("out.shape != x.shape");
  const Shape scalar;
  return where_dispatch(in_id(1), in_id(2), in_id(0), &scalar);
}

// out = cond ? a : b. `a_override`: a has one element, broadcast everywhere (masked_fill).
Status Lowerer::where_dispatch(std::uint32_t cond, std::uint32_t a, std::uint32_t b, const Shape* a_override) {
  const Shape& os = out().shape;
  Shape sc, sa, sb;
  const Shape& ashape = a_override != nullptr ? *a_override : desc_.tensors[a].shape;
  if (!broadcast_strides(desc_.tensors[cond].shape, os, sc) || !broadcast_strides(ashape, os, sa) ||
      !broadcast_strides(desc_.tensors[b].shape, os, sb)) {
    return invalid("operands do not broadcast to out.shape=", shape_text(os));
  }
  if (a_override != nullptr) std::fill(sa.begin(), sa.end(), 0);
  const std::int64_t n = numel(os);
  if (n == 0) return Status::Ok();
  Shape shape = os;
  std::vector<Shape> strides{sc, sa, sb, contiguous(os)};
  if (!coalesce(shape, strides)) return unsupported("broadcast over more than ", kMaxDims, " dims");
  Dispatch& d = add("where_x32", {cond, a, b}, {out_id()});
  d.push[0] = static_cast<std::int32_t>(n);
  d.push[1] = static_cast<std::int32_t>(shape.size());
  for (std::size_t i = 0; i < shape.size(); ++i) {
    d.push[2 + i] = static_cast<std::int32_t>(shape[i]);
    d.push[8 + i] = static_cast<std::int32_t>(strides[0][i]);
    d.push[14 + i] = static_cast<std::int32_t>(strides[1][i]);
    d.push[20 + i] = static_cast<std::int32_t>(strides[2][i]);
  }
  d.bindings[0] = T(cond);
  d.bindings[1] = T(a);
  d.bindings[2] = T(b);
  d.bindings[3] = T(out_id());
  grid_1d(d, n, 256);
  return Status::Ok();
}

namespace {
int device_kind(DType d) { return d == DType::kF32 ? 0 : d == DType::kBool ? 2 : 1; }
}  // namespace

Status Lowerer::cast() {
  KILN_RETURN_IF_ERROR(expect_inputs(1, 1));
  if (in(0)->shape != out().shape) return invalid("out.shape != x.shape");
  const std::int64_t n = numel(out().shape);
  if (n == 0) return Status::Ok();
  Dispatch& d = add("cast_x32", {in_id(0)}, {out_id()});
  d.push[0] = static_cast<std::int32_t>(n);
  d.push[1] = device_kind(in(0)->dtype);
  d.push[2] = device_kind(out().dtype);
  d.bindings[0] = T(in_id(0));
  d.bindings[1] = T(out_id());
  grid_1d(d, n, 256);
  return Status::Ok();
}

}  // namespace kiln::vulkan

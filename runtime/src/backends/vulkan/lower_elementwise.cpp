// Elementwise lowerings: unary (unary.comp), binary / comparison / logical (binary.comp),
// where and masked_fill (where.comp), cast (cast.comp).
#include <limits>
#include <optional>

#include "backends/cpu/kernels/common.h"
#include "backends/vulkan/lowerer.h"
#include "kernel/attrs.h"

namespace kiln::vulkan {


Status Lowerer::unary(int code) {
  float alpha = 0, beta = 0;
  if (node_->op == OpKind::Gelu) {
    KILN_ASSIGN_OR_RETURN(std::string_view approx, attr_string("gelu", attrs_, 0, "approximate", true));
    if (approx == "tanh") code = UNARY_GELU_TANH;
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
  put(d, PC_UNARY_N, n);
  put(d, PC_UNARY_OP, code);
  put(d, PC_UNARY_ALPHA, fbits(alpha));
  put(d, PC_UNARY_BETA, fbits(beta));
  d.bindings[0] = T(in_id(0));
  d.bindings[1] = T(out_id());
  grid_1d(d, n, 256);
  return Status::Ok();
}

Status Lowerer::binary(std::string_view variant, int code) {
  if (node_->op == OpKind::Div) {
    KILN_ASSIGN_OR_RETURN(std::string_view mode, attr_string("div", attrs_, 0, "rounding_mode", true));
    if (mode == "trunc") code = BINARY_DIV_TRUNC;
    else if (mode == "floor") code = BINARY_DIV_FLOOR;
    else if (!mode.empty()) return invalid("rounding_mode='", mode, "'");
  }
  KILN_RETURN_IF_ERROR(expect_inputs(2, 2));
  // Integer comparisons (i32/i64, held as 32-bit words on the device) compare as ints.
  if (variant == "compare_f32" && in(0)->dtype != DType::kF32) variant = "compare_i32";
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
  put(d, PC_BINARY_N, n);
  put(d, PC_BINARY_OP, code);
  put(d, PC_BINARY_RANK, static_cast<std::int64_t>(shape.size()));
  for (std::size_t i = 0; i < shape.size(); ++i) {
    put(d, PC_BINARY_SHAPE + i, shape[i]);
    put(d, PC_BINARY_A_STRIDES + i, strides[0][i]);
    put(d, PC_BINARY_B_STRIDES + i, strides[1][i]);
  }
  put(d, PC_BINARY_CONTIGUOUS, (a == os && b == os) ? 1 : 0);
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
  const bool boolean = in(0)->dtype == DType::kBool;
  Dispatch& d = add(boolean ? "logical_b32" : "compare_f32", {in_id(0)}, {out_id()});
  put(d, PC_BINARY_N, cnt);
  put(d, PC_BINARY_OP, boolean ? LOGICAL_NOT : COMPARE_EQ);
  put(d, PC_BINARY_RANK, 1);  // one dim: a walks, b (the zero dummy) stays
  put(d, PC_BINARY_SHAPE, cnt);
  put(d, PC_BINARY_A_STRIDES, 1);
  put(d, PC_BINARY_B_STRIDES, 0);
  put(d, PC_BINARY_CONTIGUOUS, 0);
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
  put(d, PC_WHERE_N, n);
  put(d, PC_WHERE_RANK, static_cast<std::int64_t>(shape.size()));
  for (std::size_t i = 0; i < shape.size(); ++i) {
    put(d, PC_WHERE_SHAPE + i, shape[i]);
    put(d, PC_WHERE_COND_STRIDES + i, strides[0][i]);
    put(d, PC_WHERE_A_STRIDES + i, strides[1][i]);
    put(d, PC_WHERE_B_STRIDES + i, strides[2][i]);
  }
  d.bindings[0] = T(cond);
  d.bindings[1] = T(a);
  d.bindings[2] = T(b);
  d.bindings[3] = T(out_id());
  grid_1d(d, n, 256);
  return Status::Ok();
}

namespace {
int device_kind(DType d) { return d == DType::kF32 ? DEVICE_F32 : d == DType::kBool ? DEVICE_BOOL : DEVICE_I32; }
}  // namespace

Status Lowerer::cast() {
  KILN_RETURN_IF_ERROR(expect_inputs(1, 1));
  if (in(0)->shape != out().shape) return invalid("out.shape != x.shape");
  const std::int64_t n = numel(out().shape);
  if (n == 0) return Status::Ok();
  Dispatch& d = add("cast_x32", {in_id(0)}, {out_id()});
  put(d, PC_CAST_N, n);
  put(d, PC_CAST_FROM, device_kind(in(0)->dtype));
  put(d, PC_CAST_TO, device_kind(out().dtype));
  d.bindings[0] = T(in_id(0));
  d.bindings[1] = T(out_id());
  grid_1d(d, n, 256);
  return Status::Ok();
}

}  // namespace kiln::vulkan

// Elementwise, selection and reduction ops.
#include <algorithm>

#include "ops/common.h"

namespace kiln {

using namespace ops;

namespace {

enum class ResultType { kPromoted, kBool, kFloat };

Tensor binary(OpKind op, const Operand& a, const Operand& b, const SourceLoc& loc, ResultType rt = ResultType::kPromoted) {
  const std::string_view name = op_name(op);
  if (!a.tensor.defined() && !b.tensor.defined()) detail::op_error(name, "needs at least one tensor operand", loc, StatusCode::kUsage);
  DType common;
  if (a.tensor.defined() && b.tensor.defined()) {
    common = promote(a.tensor.dtype(), b.tensor.dtype());
  } else {
    const Operand& t = a.tensor.defined() ? a : b;
    const Operand& s = a.tensor.defined() ? b : a;
    common = (!s.is_int && !dtype_is_floating(t.tensor.dtype())) ? DType::kF32 : t.tensor.dtype();
  }
  if (rt == ResultType::kFloat && !dtype_is_floating(common)) common = DType::kF32;
  Tensor ta = cast_to(operand_tensor(a, common), common, loc);
  Tensor tb = cast_to(operand_tensor(b, common), common, loc);
  const Shape out = broadcast(shape_of(ta), shape_of(tb), name, loc);
  return one(op, {ta, tb}, {}, {rt == ResultType::kBool ? DType::kBool : common, out}, loc);
}

Tensor unary(OpKind op, const Tensor& x, const SourceLoc& loc, std::vector<ir::Attr> attrs = {}, bool float_only = true) {
  require_defined(x, op_name(op), "input", loc);
  Tensor in = x;
  if (float_only && !dtype_is_floating(x.dtype())) in = cast_to(x, DType::kF32, loc);
  return one(op, {in}, std::move(attrs), {in.dtype(), shape_of(in)}, loc);
}

// Output shape of a reduction over `dims` (normalized, deduplicated; empty = all).
Shape reduced(const Tensor& x, std::vector<std::int64_t>& dims, bool keepdim, std::string_view op, const SourceLoc& loc) {
  const std::int64_t rank = x.dim();
  if (dims.empty()) for (std::int64_t d = 0; d < rank; ++d) dims.push_back(d);
  for (auto& d : dims) d = norm_dim(d, rank, op, loc);
  std::sort(dims.begin(), dims.end());
  dims.erase(std::unique(dims.begin(), dims.end()), dims.end());
  Shape out;
  const Shape in = shape_of(x);
  for (std::int64_t d = 0; d < rank; ++d) {
    const bool r = std::binary_search(dims.begin(), dims.end(), d);
    if (!r) out.push_back(in[static_cast<std::size_t>(d)]);
    else if (keepdim) out.push_back(c(1));
  }
  return out;
}

Tensor reduction(OpKind op, const Tensor& x, std::vector<std::int64_t> dims, bool keepdim, const SourceLoc& loc, DType out_dtype) {
  require_defined(x, op_name(op), "input", loc);
  const Shape out = reduced(x, dims, keepdim, op_name(op), loc);
  std::vector<ir::Attr> attrs{dims, keepdim};
  if (op == OpKind::Sum) attrs.emplace_back(std::monostate{});
  return one(op, {x}, std::move(attrs), {out_dtype, out}, loc);
}

}  // namespace

Tensor add(const Operand& a, const Operand& b, SourceLoc loc) { return binary(OpKind::Add, a, b, loc); }
Tensor sub(const Operand& a, const Operand& b, SourceLoc loc) { return binary(OpKind::Sub, a, b, loc); }
Tensor mul(const Operand& a, const Operand& b, SourceLoc loc) { return binary(OpKind::Mul, a, b, loc); }
Tensor div(const Operand& a, const Operand& b, SourceLoc loc) { return binary(OpKind::Div, a, b, loc, ResultType::kFloat); }
Tensor pow(const Operand& a, const Operand& b, SourceLoc loc) { return binary(OpKind::Pow, a, b, loc); }
Tensor maximum(const Operand& a, const Operand& b, SourceLoc loc) { return binary(OpKind::Maximum, a, b, loc); }
Tensor minimum(const Operand& a, const Operand& b, SourceLoc loc) { return binary(OpKind::Minimum, a, b, loc); }
Tensor eq(const Operand& a, const Operand& b, SourceLoc loc) { return binary(OpKind::Eq, a, b, loc, ResultType::kBool); }
Tensor ne(const Operand& a, const Operand& b, SourceLoc loc) { return binary(OpKind::Ne, a, b, loc, ResultType::kBool); }
Tensor lt(const Operand& a, const Operand& b, SourceLoc loc) { return binary(OpKind::Lt, a, b, loc, ResultType::kBool); }
Tensor le(const Operand& a, const Operand& b, SourceLoc loc) { return binary(OpKind::Le, a, b, loc, ResultType::kBool); }
Tensor gt(const Operand& a, const Operand& b, SourceLoc loc) { return binary(OpKind::Gt, a, b, loc, ResultType::kBool); }
Tensor ge(const Operand& a, const Operand& b, SourceLoc loc) { return binary(OpKind::Ge, a, b, loc, ResultType::kBool); }

Tensor logical_and(const Tensor& a, const Tensor& b, SourceLoc loc) {
  return binary(OpKind::LogicalAnd, cast_to(a, DType::kBool, loc), cast_to(b, DType::kBool, loc), loc, ResultType::kBool);
}
Tensor logical_or(const Tensor& a, const Tensor& b, SourceLoc loc) {
  return binary(OpKind::LogicalOr, cast_to(a, DType::kBool, loc), cast_to(b, DType::kBool, loc), loc, ResultType::kBool);
}

Tensor operator+(const Operand& a, const Operand& b) { return add(a, b, a.loc); }
Tensor operator-(const Operand& a, const Operand& b) { return sub(a, b, a.loc); }
Tensor operator*(const Operand& a, const Operand& b) { return mul(a, b, a.loc); }
Tensor operator/(const Operand& a, const Operand& b) { return div(a, b, a.loc); }
Tensor operator-(const Tensor& a) { return neg(a); }

Tensor neg(const Tensor& x, SourceLoc loc) { return unary(OpKind::Neg, x, loc, {}, false); }
Tensor abs(const Tensor& x, SourceLoc loc) { return unary(OpKind::Abs, x, loc, {}, false); }
Tensor exp(const Tensor& x, SourceLoc loc) { return unary(OpKind::Exp, x, loc); }
Tensor log(const Tensor& x, SourceLoc loc) { return unary(OpKind::Log, x, loc); }
Tensor sqrt(const Tensor& x, SourceLoc loc) { return unary(OpKind::Sqrt, x, loc); }
Tensor rsqrt(const Tensor& x, SourceLoc loc) { return unary(OpKind::Rsqrt, x, loc); }
Tensor sin(const Tensor& x, SourceLoc loc) { return unary(OpKind::Sin, x, loc); }
Tensor atan(const Tensor& x, SourceLoc loc) { return unary(OpKind::Atan, x, loc); }
Tensor asin(const Tensor& x, SourceLoc loc) { return unary(OpKind::Asin, x, loc); }
Tensor acos(const Tensor& x, SourceLoc loc) { return unary(OpKind::Acos, x, loc); }
Tensor tan(const Tensor& x, SourceLoc loc) { return unary(OpKind::Tan, x, loc); }
Tensor sinh(const Tensor& x, SourceLoc loc) { return unary(OpKind::Sinh, x, loc); }
Tensor cosh(const Tensor& x, SourceLoc loc) { return unary(OpKind::Cosh, x, loc); }
Tensor asinh(const Tensor& x, SourceLoc loc) { return unary(OpKind::Asinh, x, loc); }
Tensor acosh(const Tensor& x, SourceLoc loc) { return unary(OpKind::Acosh, x, loc); }
Tensor atanh(const Tensor& x, SourceLoc loc) { return unary(OpKind::Atanh, x, loc); }
Tensor cos(const Tensor& x, SourceLoc loc) { return unary(OpKind::Cos, x, loc); }
Tensor tanh(const Tensor& x, SourceLoc loc) { return unary(OpKind::Tanh, x, loc); }
Tensor sigmoid(const Tensor& x, SourceLoc loc) { return unary(OpKind::Sigmoid, x, loc); }
Tensor relu(const Tensor& x, SourceLoc loc) { return unary(OpKind::Relu, x, loc, {}, false); }
Tensor gelu(const Tensor& x, const std::string& approximate, SourceLoc loc) {
  if (approximate != "none" && approximate != "tanh") {
    detail::op_error("gelu", "approximate must be \"none\" or \"tanh\", not \"" + approximate + "\"", loc, StatusCode::kUsage);
  }
  return unary(OpKind::Gelu, x, loc, {approximate});
}
Tensor silu(const Tensor& x, SourceLoc loc) { return unary(OpKind::Silu, x, loc); }
Tensor hardswish(const Tensor& x, SourceLoc loc) { return unary(OpKind::Hardswish, x, loc); }
Tensor logical_not(const Tensor& x, SourceLoc loc) {
  Tensor b = cast_to(x, DType::kBool, loc);
  return one(OpKind::LogicalNot, {b}, {}, {DType::kBool, shape_of(b)}, loc);
}
Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max, SourceLoc loc) {
  std::vector<ir::Attr> attrs{min ? ir::Attr(*min) : ir::Attr(std::monostate{}), max ? ir::Attr(*max) : ir::Attr(std::monostate{})};
  return unary(OpKind::Clamp, x, loc, std::move(attrs), false);
}
Tensor cast(const Tensor& x, DType dtype, SourceLoc loc) {
  require_defined(x, "cast", "input", loc);
  return cast_to(x, dtype, loc);
}
Tensor Tensor::to(DType dtype, SourceLoc loc) const { return cast(*this, dtype, loc); }

Tensor where(const Tensor& condition, const Operand& a, const Operand& b, SourceLoc loc) {
  require_defined(condition, "where", "condition", loc);
  DType common;
  if (a.tensor.defined() && b.tensor.defined()) common = promote(a.tensor.dtype(), b.tensor.dtype());
  else if (a.tensor.defined() || b.tensor.defined()) common = (a.tensor.defined() ? a : b).tensor.dtype();
  else common = (a.is_int && b.is_int) ? DType::kI64 : DType::kF32;
  Tensor ta = cast_to(operand_tensor(a, common), common, loc);
  Tensor tb = cast_to(operand_tensor(b, common), common, loc);
  Tensor cond = cast_to(condition, DType::kBool, loc);
  const Shape s = broadcast(broadcast(shape_of(cond), shape_of(ta), "where", loc), shape_of(tb), "where", loc);
  return one(OpKind::Where, {cond, ta, tb}, {}, {common, s}, loc);
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value, SourceLoc loc) {
  require_defined(x, "masked_fill", "input", loc);
  require_defined(mask, "masked_fill", "mask", loc);
  Tensor m = cast_to(mask, DType::kBool, loc);
  const Shape s = broadcast(shape_of(x), shape_of(m), "masked_fill", loc);
  if (s.size() != static_cast<std::size_t>(x.dim())) {
    detail::op_error("masked_fill", "mask " + shape_text(shape_of(m)) + " must broadcast to the input " + shape_text(shape_of(x)), loc);
  }
  Tensor v = operand_tensor(Operand(value, loc), x.dtype());
  return one(OpKind::MaskedFill, {x, m, cast_to(v, x.dtype(), loc)}, {}, {x.dtype(), s}, loc);
}

Tensor sum(const Tensor& x, std::vector<std::int64_t> dims, bool keepdim, SourceLoc loc) {
  const DType d = x.defined() && (x.dtype() == DType::kBool || (!dtype_is_floating(x.dtype()))) ? DType::kI64 : (x.defined() ? x.dtype() : DType::kF32);
  return reduction(OpKind::Sum, d == x.dtype() ? x : cast_to(x, d, loc), std::move(dims), keepdim, loc, d);
}
Tensor mean(const Tensor& x, std::vector<std::int64_t> dims, bool keepdim, SourceLoc loc) {
  require_defined(x, "mean", "input", loc);
  if (!dtype_is_floating(x.dtype())) detail::op_error("mean", "needs a floating input, got " + std::string(dtype_name(x.dtype())), loc);
  return reduction(OpKind::Mean, x, std::move(dims), keepdim, loc, x.dtype());
}
Tensor amax(const Tensor& x, std::vector<std::int64_t> dims, bool keepdim, SourceLoc loc) {
  return reduction(OpKind::Amax, x, std::move(dims), keepdim, loc, x.defined() ? x.dtype() : DType::kF32);
}
Tensor amin(const Tensor& x, std::vector<std::int64_t> dims, bool keepdim, SourceLoc loc) {
  return reduction(OpKind::Amin, x, std::move(dims), keepdim, loc, x.defined() ? x.dtype() : DType::kF32);
}
Tensor argmax(const Tensor& x, std::int64_t dim, bool keepdim, SourceLoc loc) {
  require_defined(x, "argmax", "input", loc);
  std::vector<std::int64_t> dims{dim};
  const Shape out = reduced(x, dims, keepdim, "argmax", loc);
  return one(OpKind::Argmax, {x}, {dims[0], keepdim}, {DType::kI64, out}, loc);
}
Tensor Tensor::sum(std::vector<std::int64_t> dims, bool keepdim, SourceLoc loc) const { return kiln::sum(*this, std::move(dims), keepdim, loc); }
Tensor Tensor::mean(std::vector<std::int64_t> dims, bool keepdim, SourceLoc loc) const { return kiln::mean(*this, std::move(dims), keepdim, loc); }

}  // namespace kiln

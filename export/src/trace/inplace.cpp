// clone, the scatter ops (index_copy, slice_scatter, select_scatter) and in-place updates
// (ops.h). In-place ops are functionalized: the result is a new value and the tensor's
// handle is pointed at it (a state tensor's latest value is recorded in the trace instead),
// so graphs stay free of mutation.
#include "ops/common.h"

namespace kiln {

using namespace ops;

namespace {

using Role = detail::TensorImpl::Role;

Tensor& assign(Tensor& dst, Tensor result, std::string_view op, const SourceLoc& loc) {
  detail::TraceContext* ctx = detail::current_trace();
  detail::TensorImpl& impl = *dst.impl();
  if (ctx != nullptr) {
    ctx->check_mutation(dst, op, loc);
    if (impl.ctx == nullptr && (impl.role == Role::kParameter || impl.role == Role::kBuffer)) {
      detail::op_error(op, "cannot update " + detail::describe_param(impl) +
                               " in place: parameters and buffers are constants of the exported program. A buffer the "
                               "model updates must be registered as state: register_buffer(name, value, {.state = true})",
                       loc);
    }
  }
  const Shape want = shape_of(dst);
  const Shape got = shape_of(result);
  bool same = want.size() == got.size();
  for (std::size_t d = 0; same && d < want.size(); ++d) same = holds(sym::eq(want[d], got[d]), loc);
  if (!same) detail::op_error(op, "the result " + shape_text(got) + " does not fit the updated tensor " + shape_text(want), loc);
  result = cast_to(result, dst.dtype(), loc);
  if (ctx != nullptr && impl.is_state()) {
    if (!result.is_traced()) {  // a constant: the state's new value needs a node of its own
      result = ctx->add_node(OpKind::Identity, {result}, {}, {{result.dtype(), shape_of(result)}},
                             ctx->meta(loc, std::string(op), {dst}))[0];
    }
    ctx->update_state(dst.impl(), ctx->value_of(result));
    return dst;
  }
  if (result.is_traced()) {
    if (!dst.is_traced()) {
      detail::op_error(op, "cannot update the eager tensor " + (impl.param_name.empty() ? std::string("(a constant)") : impl.param_name) +
                               " with a traced value: parameters and constants are immutable in an exported program",
                       loc);
    }
    impl.graph = result.impl()->graph;
    impl.value = result.impl()->value;
    return dst;
  }
  *impl.data = result.bytes();  // eager: every handle sharing the data sees the update
  return dst;
}

// `condition` must hold for the op to stay in bounds: decided now when the shape engine
// can (an export error when it never holds), else a runtime assert at `loc` (kInvalidInput
// when a run breaks it). Eager: kInvalidInput now.
void require_in_bounds(sym::Expr condition, std::string_view op, const std::string& message, const SourceLoc& loc) {
  detail::TraceContext* ctx = detail::current_trace();
  if (ctx == nullptr) {
    if (condition.bool_value() != true) detail::op_error(op, message, loc, StatusCode::kInvalidInput);
    return;
  }
  condition = ctx->env().simplify(condition);
  const auto known = ctx->env().statically_known(condition);
  if (known == false) detail::op_error(op, message, loc);
  if (!known) ctx->check(condition, loc);
}

}  // namespace

Tensor clone(const Tensor& x, SourceLoc loc) {
  require_defined(x, "clone", "input", loc);
  return one(OpKind::Identity, {x}, {}, {x.dtype(), shape_of(x)}, loc, "clone");
}
Tensor Tensor::clone(SourceLoc loc) const { return kiln::clone(*this, loc); }

Tensor index_copy(const Tensor& x, std::int64_t dim, const Tensor& index, const Tensor& source, SourceLoc loc) {
  constexpr std::string_view op = "index_copy";
  require_defined(x, op, "input", loc);
  require_defined(index, op, "index", loc);
  require_defined(source, op, "source", loc);
  const std::int64_t d = norm_dim(dim, x.dim(), op, loc);
  if (index.dim() != 1) detail::op_error(op, "index must be 1-D, got rank " + std::to_string(index.dim()), loc);
  if (index.dtype() != DType::kI64 && index.dtype() != DType::kI32) {
    detail::op_error(op, "index must be an i64 or i32 tensor, got " + std::string(dtype_name(index.dtype())), loc);
  }
  if (source.dim() != x.dim()) {
    detail::op_error(op, "source rank " + std::to_string(source.dim()) + " != input rank " + std::to_string(x.dim()), loc);
  }
  const Shape xs = shape_of(x), ss = shape_of(source), is = shape_of(index);
  for (std::size_t k = 0; k < xs.size(); ++k) {
    const bool indexed = static_cast<std::int64_t>(k) == d;
    require(sym::eq(ss[k], indexed ? is[0] : xs[k]), op,
            "source.size(" + std::to_string(k) + ")=" + text(ss[k]) + " != " + (indexed ? "index.size(0)=" + text(is[0]) : "input.size(" + std::to_string(k) + ")=" + text(xs[k])),
            loc);
  }
  // index_put checks every position against the size at run time (kInvalidInput naming
  // this line); negative positions count from the end.
  return one(OpKind::IndexPut, {x, cast_to(source, x.dtype(), loc), index}, {std::vector<std::int64_t>{d}, false}, {x.dtype(), xs},
             loc, std::string(op));
}

Tensor slice_scatter(const Tensor& x, const Tensor& source, std::int64_t dim, SymInt start, SymInt end, std::int64_t step,
                     SourceLoc loc) {
  constexpr std::string_view op = "slice_scatter";
  require_defined(x, op, "input", loc);
  require_defined(source, op, "source", loc);
  if (step < 1) detail::op_error(op, "step must be >= 1, got " + std::to_string(step), loc, StatusCode::kUsage);
  const std::int64_t d = norm_dim(dim, x.dim(), op, loc);
  if (source.dim() != x.dim()) {
    detail::op_error(op, "source rank " + std::to_string(source.dim()) + " != input rank " + std::to_string(x.dim()), loc);
  }
  const Shape xs = shape_of(x), ss = shape_of(source);
  const sym::Expr size = xs[static_cast<std::size_t>(d)];
  const std::string range = "[" + text(start.expr()) + ":" + text(end.expr()) + "] of dim " + std::to_string(d) + " (size " + text(size) + ")";
  require_in_bounds(sym::ge(start.expr(), c(0)), op, "start " + text(start.expr()) + " < 0 in " + range, loc);
  require_in_bounds(sym::le(start.expr(), end.expr()), op, "start > end in " + range, loc);
  require_in_bounds(sym::le(end.expr(), size), op, "end " + text(end.expr()) + " > size " + text(size) + " in " + range, loc);
  const sym::Expr len = sym::ceildiv(end.expr() - start.expr(), c(step));
  for (std::size_t k = 0; k < xs.size(); ++k) {
    const bool sliced = static_cast<std::int64_t>(k) == d;
    require(sym::eq(ss[k], sliced ? len : xs[k]), op,
            "source.size(" + std::to_string(k) + ")=" + text(ss[k]) + " != " + (sliced ? "the slice length " + text(len) : "input.size(" + std::to_string(k) + ")=" + text(xs[k])),
            loc);
  }
  const Tensor index = arange(start, end, SymInt(step, loc), DType::kI64, loc);
  return one(OpKind::IndexPut, {x, cast_to(source, x.dtype(), loc), index}, {std::vector<std::int64_t>{d}, false}, {x.dtype(), xs},
             loc, std::string(op));
}

Tensor select_scatter(const Tensor& x, const Tensor& source, std::int64_t dim, SymInt index, SourceLoc loc) {
  constexpr std::string_view op = "select_scatter";
  require_defined(x, op, "input", loc);
  require_defined(source, op, "source", loc);
  const std::int64_t d = norm_dim(dim, x.dim(), op, loc);
  if (source.dim() != x.dim() - 1) {
    detail::op_error(op, "source rank " + std::to_string(source.dim()) + " != input rank - 1 = " + std::to_string(x.dim() - 1), loc);
  }
  if (auto i = index.maybe_int(); i && *i < 0) index = SymInt(shape_of(x)[static_cast<std::size_t>(d)] + c(*i), loc);
  return slice_scatter(x, unsqueeze(source, d, loc), d, index, index + SymInt(1, loc), 1, loc);
}

Tensor& add_(Tensor& x, const Operand& other, SourceLoc loc) {
  require_defined(x, "add_", "input", loc);
  return assign(x, add(x, other, loc), "add_", loc);
}
Tensor& sub_(Tensor& x, const Operand& other, SourceLoc loc) {
  require_defined(x, "sub_", "input", loc);
  return assign(x, sub(x, other, loc), "sub_", loc);
}
Tensor& mul_(Tensor& x, const Operand& other, SourceLoc loc) {
  require_defined(x, "mul_", "input", loc);
  return assign(x, mul(x, other, loc), "mul_", loc);
}
Tensor& div_(Tensor& x, const Operand& other, SourceLoc loc) {
  require_defined(x, "div_", "input", loc);
  return assign(x, div(x, other, loc), "div_", loc);
}
Tensor& fill_(Tensor& x, double value, SourceLoc loc) {
  require_defined(x, "fill_", "input", loc);
  return assign(x, full(x.sizes(loc), value, x.dtype(), loc), "fill_", loc);
}
Tensor& zero_(Tensor& x, SourceLoc loc) {
  require_defined(x, "zero_", "input", loc);
  return assign(x, full(x.sizes(loc), 0.0, x.dtype(), loc), "zero_", loc);
}
Tensor& copy_(Tensor& x, const Tensor& src, SourceLoc loc) {
  require_defined(x, "copy_", "input", loc);
  require_defined(src, "copy_", "src", loc);
  return assign(x, expand(src, [&] {
                  std::vector<SymInt> s;
                  for (const sym::Expr& d : shape_of(x)) s.emplace_back(d, loc);
                  return s;
                }(), loc).clone(loc),
                "copy_", loc);
}
Tensor& index_copy_(Tensor& x, std::int64_t dim, const Tensor& index, const Tensor& source, SourceLoc loc) {
  require_defined(x, "index_copy_", "input", loc);
  return assign(x, index_copy(x, dim, index, source, loc), "index_copy_", loc);
}
Tensor& slice_scatter_(Tensor& x, const Tensor& source, std::int64_t dim, SymInt start, SymInt end, std::int64_t step, SourceLoc loc) {
  require_defined(x, "slice_scatter_", "input", loc);
  return assign(x, slice_scatter(x, source, dim, start, end, step, loc), "slice_scatter_", loc);
}
Tensor& select_scatter_(Tensor& x, const Tensor& source, std::int64_t dim, SymInt index, SourceLoc loc) {
  require_defined(x, "select_scatter_", "input", loc);
  return assign(x, select_scatter(x, source, dim, index, loc), "select_scatter_", loc);
}

Tensor& Tensor::add_(const Operand& other, SourceLoc loc) { return kiln::add_(*this, other, loc); }
Tensor& Tensor::sub_(const Operand& other, SourceLoc loc) { return kiln::sub_(*this, other, loc); }
Tensor& Tensor::mul_(const Operand& other, SourceLoc loc) { return kiln::mul_(*this, other, loc); }
Tensor& Tensor::div_(const Operand& other, SourceLoc loc) { return kiln::div_(*this, other, loc); }
Tensor& Tensor::fill_(double value, SourceLoc loc) { return kiln::fill_(*this, value, loc); }
Tensor& Tensor::zero_(SourceLoc loc) { return kiln::zero_(*this, loc); }
Tensor& Tensor::copy_(const Tensor& src, SourceLoc loc) { return kiln::copy_(*this, src, loc); }
Tensor& Tensor::index_copy_(std::int64_t dim, const Tensor& index, const Tensor& source, SourceLoc loc) {
  return kiln::index_copy_(*this, dim, index, source, loc);
}
Tensor& Tensor::slice_scatter_(const Tensor& source, std::int64_t dim, SymInt start, SymInt end, std::int64_t step, SourceLoc loc) {
  return kiln::slice_scatter_(*this, source, dim, start, end, step, loc);
}
Tensor& Tensor::select_scatter_(const Tensor& source, std::int64_t dim, SymInt index, SourceLoc loc) {
  return kiln::select_scatter_(*this, source, dim, index, loc);
}

}  // namespace kiln

// clone and in-place updates (ops.h). In-place ops are functionalized: the result is a new
// value and the tensor's handle is pointed at it, so graphs stay free of mutation.
#include "ops/common.h"

namespace kiln {

using namespace ops;

namespace {

Tensor& assign(Tensor& dst, Tensor result, std::string_view op, const SourceLoc& loc) {
  detail::TraceContext* ctx = detail::current_trace();
  if (ctx != nullptr) ctx->check_mutation(dst, op, loc);
  const Shape want = shape_of(dst);
  const Shape got = shape_of(result);
  bool same = want.size() == got.size();
  for (std::size_t d = 0; same && d < want.size(); ++d) same = holds(sym::eq(want[d], got[d]), loc);
  if (!same) detail::op_error(op, "the result " + shape_text(got) + " does not fit the updated tensor " + shape_text(want), loc);
  result = cast_to(result, dst.dtype(), loc);
  detail::TensorImpl& impl = *dst.impl();
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

}  // namespace

Tensor clone(const Tensor& x, SourceLoc loc) {
  require_defined(x, "clone", "input", loc);
  return one(OpKind::Identity, {x}, {}, {x.dtype(), shape_of(x)}, loc, "clone");
}
Tensor Tensor::clone(SourceLoc loc) const { return kiln::clone(*this, loc); }

Tensor& add_(Tensor& x, const Operand& other, SourceLoc loc) {
  require_defined(x, "add_", "input", loc);
  return assign(x, add(x, other, loc), "add_", loc);
}
Tensor& mul_(Tensor& x, const Operand& other, SourceLoc loc) {
  require_defined(x, "mul_", "input", loc);
  return assign(x, mul(x, other, loc), "mul_", loc);
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

Tensor& Tensor::add_(const Operand& other, SourceLoc loc) { return kiln::add_(*this, other, loc); }
Tensor& Tensor::mul_(const Operand& other, SourceLoc loc) { return kiln::mul_(*this, other, loc); }
Tensor& Tensor::copy_(const Tensor& src, SourceLoc loc) { return kiln::copy_(*this, src, loc); }

}  // namespace kiln

// Ops whose output sizes or values are known only at run time: they bind unbacked symbols.
#include <cstring>

#include "ops/common.h"

namespace kiln {

using namespace ops;

namespace {

// Records `op` producing a tensor whose dim 0 is a fresh unbacked size in [0, max_size].
Tensor unbacked_rows(OpKind op, const std::vector<Tensor>& inputs, Shape out_shape, DType dtype, sym::Expr max_size,
                     const SourceLoc& loc) {
  detail::TraceContext* ctx = detail::current_trace();
  const int u = ctx->env().create_unbacked_symbol(/*is_size=*/true);
  const sym::ValueRange bound = ctx->env().bound(max_size);
  const Status st = ctx->env().constrain_range(u, 0, bound.hi);
  if (!st.ok()) throw ExportError(StatusCode::kInternal, st.message());
  out_shape[0] = sym::Expr::symbol(u);
  auto outs = ctx->add_node(op, inputs, {}, {{dtype, out_shape}}, ctx->meta(loc, std::string(op_name(op)), inputs));
  const int node = static_cast<int>(ctx->graph().nodes.size()) - 1;
  ctx->graph().bindings.push_back({u, node, 0, ir::UnbackedBinding::Kind::kSize, 0, 1});
  ctx->binder[u] = node;
  ctx->range_meta[u] = ctx->graph().nodes.back().meta;
  return outs[0];
}

bool tracing(const std::vector<Tensor>& inputs) {
  if (detail::current_trace() == nullptr) return false;
  for (const Tensor& t : inputs) if (t.is_traced()) return true;
  return false;
}

}  // namespace

SymInt item(const Tensor& x, SourceLoc loc) {
  require_defined(x, "item", "input", loc);
  require(sym::eq(numel(shape_of(x)), c(1)), "item", "needs a one-element tensor, got " + shape_text(shape_of(x)), loc);
  if (dtype_is_floating(x.dtype())) {
    detail::op_error("item", "a " + std::string(dtype_name(x.dtype())) + " value cannot become a symbolic int: cast to i64 first",
                     loc, StatusCode::kUnsupported);
  }
  if (!tracing({x})) {
    Tensor out = detail::run_eager(OpKind::Item, {x}, {}, {{x.dtype(), {}}}, loc)[0];
    const auto& b = out.bytes();
    std::int64_t v = 0;
    if (x.dtype() == DType::kI64) std::memcpy(&v, b.data(), 8);
    else if (x.dtype() == DType::kI32) { std::int32_t w; std::memcpy(&w, b.data(), 4); v = w; }
    else v = b[0];
    return SymInt(v, loc);
  }
  detail::TraceContext* ctx = detail::current_trace();
  const int u = ctx->env().create_unbacked_symbol(/*is_size=*/false);
  ir::Node node;
  node.op = OpKind::Item;
  node.inputs = {ctx->value_of(x)};
  node.meta = ctx->meta(loc, "item", {x});
  const int v = ctx->graph().add_value({ir::ValueKind::kSymInt, DType::kI64, {}, sym::Expr::symbol(u), -1, ""});
  node.outputs = {v};
  ctx->graph().nodes.push_back(std::move(node));
  const int n = static_cast<int>(ctx->graph().nodes.size()) - 1;
  ctx->graph().bindings.push_back({u, n, 0, ir::UnbackedBinding::Kind::kScalar, 0, 1});
  ctx->binder[u] = n;
  ctx->range_meta[u] = ctx->graph().nodes.back().meta;
  return SymInt(sym::Expr::symbol(u), loc);
}
SymInt Tensor::item(SourceLoc loc) const { return kiln::item(*this, loc); }

Tensor nonzero(const Tensor& x, SourceLoc loc) {
  require_defined(x, "nonzero", "input", loc);
  const Shape s = shape_of(x);
  if (!tracing({x})) {
    return detail::run_eager(OpKind::Nonzero, {x}, {}, {{DType::kI64, {}, true}}, loc)[0];
  }
  return unbacked_rows(OpKind::Nonzero, {x}, {c(0), c(static_cast<std::int64_t>(s.size()))}, DType::kI64, numel(s), loc);
}

Tensor masked_select(const Tensor& x, const Tensor& mask, SourceLoc loc) {
  require_defined(x, "masked_select", "input", loc);
  require_defined(mask, "masked_select", "mask", loc);
  Tensor m = cast_to(mask, DType::kBool, loc);
  const Shape s = broadcast(shape_of(x), shape_of(m), "masked_select", loc);
  if (!tracing({x, m})) {
    return detail::run_eager(OpKind::MaskedSelect, {x, m}, {}, {{x.dtype(), {}, true}}, loc)[0];
  }
  return unbacked_rows(OpKind::MaskedSelect, {x, m}, {c(0)}, x.dtype(), numel(s), loc);
}

}  // namespace kiln

#include "ops/common.h"

#include <cstring>

#include "kiln/export/symbolic/print.h"

namespace kiln::ops {

std::int64_t norm_dim(std::int64_t d, std::int64_t rank, std::string_view op, const SourceLoc& loc) {
  const std::int64_t r = std::max<std::int64_t>(rank, 1);
  if (d < -r || d >= r) {
    detail::op_error(op, "dim " + std::to_string(d) + " out of range for a tensor of rank " + std::to_string(rank), loc);
  }
  return d < 0 ? d + r : d;
}

bool holds(sym::Expr condition, const SourceLoc& loc) { return static_cast<bool>(SymBool(condition, loc)); }

void require(sym::Expr condition, std::string_view op, const std::string& message, const SourceLoc& loc) {
  if (!holds(condition, loc)) detail::op_error(op, message, loc);
}

std::string text(sym::Expr e) {
  detail::TraceContext* ctx = detail::current_trace();
  return sym::to_string(e, ctx ? &ctx->program.env : nullptr);
}

std::string shape_text(const Shape& s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + text(s[i]);
  return out + "]";
}

Shape broadcast(const Shape& a, const Shape& b, std::string_view op, const SourceLoc& loc) {
  const std::size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (std::size_t i = 0; i < rank; ++i) {
    const sym::Expr da = i < rank - a.size() ? c(1) : a[i - (rank - a.size())];
    const sym::Expr db = i < rank - b.size() ? c(1) : b[i - (rank - b.size())];
    if (da == db) out[i] = da;
    else if (db.constant_value() == 1) out[i] = da;  // a literal 1 (or a missing dim) never guards
    else if (da.constant_value() == 1) out[i] = db;
    else if (holds(sym::eq(da, c(1)), loc)) out[i] = db;
    else if (holds(sym::eq(db, c(1)), loc)) out[i] = da;
    else {
      require(sym::eq(da, db), op, "shapes " + shape_text(a) + " and " + shape_text(b) + " do not broadcast at dim " +
                                       std::to_string(i) + " (" + text(da) + " vs " + text(db) + ")", loc);
      out[i] = da;
    }
  }
  return out;
}

DType promote(DType a, DType b) {
  if (a == b) return a;
  auto category = [](DType d) { return d == DType::kBool ? 0 : dtype_is_floating(d) ? 2 : 1; };
  if (category(a) != category(b)) return category(a) > category(b) ? a : b;
  return dtype_size(a) >= dtype_size(b) ? a : b;
}

Tensor operand_tensor(const Operand& o, DType like) {
  if (o.tensor.defined()) return o.tensor;
  if (o.symbol) {  // arange(s, s + 1) holds s: a 0-d tensor of it, in the operation's dtype
    const SymInt& s = *o.symbol;
    const Tensor t = reshape(arange(s, s + 1, 1, DType::kI64, o.loc), {}, o.loc);
    return cast_to(t, like == DType::kBool ? DType::kI64 : like, o.loc);
  }
  if (o.is_int && !dtype_is_floating(like)) {
    const DType d = like == DType::kBool ? DType::kI64 : like;
    if (d == DType::kI32) {
      const std::int32_t v = static_cast<std::int32_t>(o.value);
      std::vector<std::uint8_t> b(4);
      std::memcpy(b.data(), &v, 4);
      return Tensor::from_bytes(d, {}, b);
    }
    const std::int64_t v = static_cast<std::int64_t>(o.value);
    return Tensor::from_ints({}, std::span<const std::int64_t>(&v, 1));
  }
  const float f = static_cast<float>(o.value);
  Tensor t = Tensor::from_floats({}, std::span<const float>(&f, 1));
  return dtype_is_floating(like) && like != DType::kF32 ? cast_to(t, like, o.loc) : t;
}

Tensor cast_to(const Tensor& t, DType dtype, const SourceLoc& loc) {
  if (t.dtype() == dtype) return t;
  return one(OpKind::Cast, {t}, {dtype}, {dtype, shape_of(t)}, loc, "to");
}

Tensor one(OpKind op, const std::vector<Tensor>& inputs, std::vector<ir::Attr> attrs, OutSpec out, const SourceLoc& loc,
           std::string user_op) {
  if (user_op.empty()) user_op = std::string(op_name(op));
  return detail::run_op(op, inputs, std::move(attrs), {std::move(out)}, loc, std::move(user_op))[0];
}

void require_size(sym::Expr size, std::string_view op, const SourceLoc& loc) {
  const sym::Expr nonneg = sym::ge(size, c(0));
  detail::TraceContext* ctx = detail::current_trace();
  if (ctx != nullptr && !ctx->env().statically_known(nonneg).has_value()) {
    for (int s : ctx->env().free_symbols(size)) {
      if (ctx->env().symbol(s).kind == sym::SymbolKind::Unbacked) {
        ctx->check(nonneg, loc);
        return;
      }
    }
  }
  require(nonneg, op, "negative size " + text(size), loc);
}

Shape shape_of(const Tensor& t) { return t.impl()->shape; }

sym::Expr numel(const Shape& s) {
  sym::Expr p = c(1);
  for (const sym::Expr& d : s) p = p * d;
  return p;
}

Shape to_exprs(const std::vector<SymInt>& v) {
  Shape out;
  for (const SymInt& s : v) out.push_back(s.expr());
  return out;
}

void require_defined(const Tensor& t, std::string_view op, std::string_view what, const SourceLoc& loc) {
  if (!t.defined()) detail::op_error(op, std::string(what) + " is an undefined tensor", loc, StatusCode::kUsage);
}

}  // namespace kiln::ops

// Helpers shared by the op implementations (shape rules and dispatch).
#pragma once

#include <string>
#include <vector>

#include "kiln/export/ops.h"
#include "trace/context.h"

namespace kiln::ops {

using detail::OutSpec;
using Shape = std::vector<sym::Expr>;

inline sym::Expr c(std::int64_t v) { return sym::Expr::constant(v); }

/// Normalizes a possibly negative dim against `rank` (rank 0 accepts -1 and 0).
std::int64_t norm_dim(std::int64_t d, std::int64_t rank, std::string_view op, const SourceLoc& loc);
/// A guard from an op's shape rule: true/false as decided by the shape engine.
bool holds(sym::Expr condition, const SourceLoc& loc);
/// Throws "[op] message" unless `condition` holds (guarding).
void require(sym::Expr condition, std::string_view op, const std::string& message, const SourceLoc& loc);
/// Text of a symbolic size for messages.
std::string text(sym::Expr e);
std::string shape_text(const Shape& s);
/// Numpy broadcasting of two shapes, guarding on sizes that might be 1.
Shape broadcast(const Shape& a, const Shape& b, std::string_view op, const SourceLoc& loc);
/// PyTorch type promotion of two tensor dtypes (bool < ints < floats; wider wins).
DType promote(DType a, DType b);
/// The tensor of an operand; scalars become 0-d eager tensors of `like`'s category.
Tensor operand_tensor(const Operand& o, DType like);
/// `t` cast to `dtype` (no node when it already has it).
Tensor cast_to(const Tensor& t, DType dtype, const SourceLoc& loc);
/// Runs a single-output op.
Tensor one(OpKind op, const std::vector<Tensor>& inputs, std::vector<ir::Attr> attrs, OutSpec out, const SourceLoc& loc,
           std::string user_op = "");
/// A requested size must be >= 0: decided statically, guarded (backed symbols), or
/// recorded as a runtime check (unbacked symbols, like torch._check_is_size).
void require_size(sym::Expr size, std::string_view op, const SourceLoc& loc);
Shape shape_of(const Tensor& t);
/// The product of a shape's sizes (1 for rank 0).
sym::Expr numel(const Shape& s);
Shape to_exprs(const std::vector<SymInt>& v);
void require_defined(const Tensor& t, std::string_view op, std::string_view what, const SourceLoc& loc);

}  // namespace kiln::ops

// Reading a kernel's attributes (positions as in codegen/ops.def), for every backend.
//
// Each reader is an inline fast path; a missing attribute or one of another type is
// kInvalidBundle from attr_error, naming the op and the attribute:
//   "[conv2d] missing attribute 'stride' (#1; got 0 attributes)".
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "kernel/kernel.h"

namespace kiln {

/// "[op] missing attribute 'name' ...", "[op] attribute 'name' has type ..., expected ...".
[[gnu::cold]] Status attr_error(std::string_view op, std::span<const AttrValue> attrs, std::size_t index,
                                std::string_view name, AttrType expected);

/// The attribute at `index` if it exists and has type t1 or t2, else nullptr.
inline const AttrValue* attr_of(std::span<const AttrValue> attrs, std::size_t index, AttrType t1, AttrType t2) {
  if (index < attrs.size() && (attrs[index].type == t1 || attrs[index].type == t2)) [[likely]] {
    return &attrs[index];
  }
  return nullptr;
}

/// An int or an evaluated expression.
inline Result<std::int64_t> attr_int(std::string_view op, std::span<const AttrValue> attrs, std::size_t index,
                                     std::string_view name) {
  if (const AttrValue* a = attr_of(attrs, index, AttrType::kInt, AttrType::kExpr)) return a->i;
  return attr_error(op, attrs, index, name, AttrType::kInt);
}

inline Result<bool> attr_bool(std::string_view op, std::span<const AttrValue> attrs, std::size_t index,
                              std::string_view name) {
  if (const AttrValue* a = attr_of(attrs, index, AttrType::kBool, AttrType::kInt)) return a->i != 0;
  return attr_error(op, attrs, index, name, AttrType::kBool);
}

inline Result<double> attr_float(std::string_view op, std::span<const AttrValue> attrs, std::size_t index,
                                 std::string_view name) {
  if (const AttrValue* a = attr_of(attrs, index, AttrType::kFloat, AttrType::kFloat)) return a->f;
  return attr_error(op, attrs, index, name, AttrType::kFloat);
}

/// nullopt when the attribute is absent (AttrType::kNone or past the end).
inline Result<std::optional<double>> attr_optional_float(std::string_view op, std::span<const AttrValue> attrs,
                                                         std::size_t index, std::string_view name) {
  if (index >= attrs.size() || attrs[index].type == AttrType::kNone) return std::optional<double>();
  if (const AttrValue* a = attr_of(attrs, index, AttrType::kFloat, AttrType::kFloat)) {
    return std::optional<double>(a->f);
  }
  return attr_error(op, attrs, index, name, AttrType::kFloat);
}

/// Ints or evaluated expressions.
inline Result<std::span<const std::int64_t>> attr_ints(std::string_view op, std::span<const AttrValue> attrs,
                                                       std::size_t index, std::string_view name) {
  if (const AttrValue* a = attr_of(attrs, index, AttrType::kInts, AttrType::kExprs)) return a->ints;
  return attr_error(op, attrs, index, name, AttrType::kInts);
}

/// An absent optional string reads as "".
inline Result<std::string_view> attr_string(std::string_view op, std::span<const AttrValue> attrs, std::size_t index,
                                            std::string_view name, bool optional = false) {
  if (optional && (index >= attrs.size() || attrs[index].type == AttrType::kNone)) return std::string_view();
  if (const AttrValue* a = attr_of(attrs, index, AttrType::kString, AttrType::kString)) return a->s;
  return attr_error(op, attrs, index, name, AttrType::kString);
}

/// A dtype attribute (its value in `i`), checked to name a dtype.
inline Result<DType> attr_dtype(std::string_view op, std::span<const AttrValue> attrs, std::size_t index,
                                std::string_view name) {
  const AttrValue* a = attr_of(attrs, index, AttrType::kDType, AttrType::kInt);
  if (a != nullptr && a->i >= 0 && a->i < kDTypeCount) return static_cast<DType>(a->i);
  return attr_error(op, attrs, index, name, AttrType::kDType);
}

}  // namespace kiln

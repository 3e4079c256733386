#include "kernel/attrs.h"

#include <string>

namespace kiln {
namespace {

const char* type_name(AttrType t) {
  switch (t) {
    case AttrType::kNone: return "none";
    case AttrType::kInt: return "int";
    case AttrType::kFloat: return "float";
    case AttrType::kBool: return "bool";
    case AttrType::kString: return "string";
    case AttrType::kInts: return "ints";
    case AttrType::kFloats: return "floats";
    case AttrType::kExpr: return "expr";
    case AttrType::kExprs: return "exprs";
    case AttrType::kDType: return "dtype";
    case AttrType::kGraph: return "graph";
  }
  return "unknown";
}

}  // namespace

Status attr_error(std::string_view op, std::span<const AttrValue> attrs, std::size_t index, std::string_view name,
                  AttrType expected) {
  const std::string head = "[" + std::string(op) + "] ";
  if (index >= attrs.size()) {
    return Status(StatusCode::kInvalidBundle, head + "missing attribute '" + std::string(name) + "' (#" + std::to_string(index) +
                                                  "; got " + std::to_string(attrs.size()) + " attributes)");
  }
  const AttrValue& a = attrs[index];
  if (expected == AttrType::kDType && (a.type == AttrType::kDType || a.type == AttrType::kInt)) {
    return Status(StatusCode::kInvalidBundle, head + "attribute '" + std::string(name) + "'=" + std::to_string(a.i) + " is not a dtype");
  }
  return Status(StatusCode::kInvalidBundle,
                head + "attribute '" + std::string(name) + "' has type " + type_name(a.type) + ", expected " + type_name(expected));
}

}  // namespace kiln

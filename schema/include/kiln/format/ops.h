// The op table, generated from codegen/ops.def (the single list of ops).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace kiln {

enum class OpKind : std::uint16_t {
#define KILN_OP(Enum, name, min_in, max_in, num_out, attrs) Enum,
#include "ops.def"
#undef KILN_OP
};

inline constexpr std::size_t kOpCount = 0
#define KILN_OP(Enum, name, min_in, max_in, num_out, attrs) +1
#include "ops.def"
#undef KILN_OP
    ;

/// The kind of one positional attribute (mirrors kiln.fb.AttrKind).
enum class AttrType : std::uint8_t {
  kNone = 0,
  kInt = 1,
  kFloat = 2,
  kBool = 3,
  kString = 4,
  kInts = 5,
  kFloats = 6,
  kExpr = 7,
  kExprs = 8,
  kDType = 9,
  kGraph = 10,
};

struct AttrSpec {
  AttrType type = AttrType::kNone;
  std::string_view name;
  bool optional = false;
};

struct OpInfo {
  OpKind kind;
  std::string_view name;
  int min_inputs;
  int max_inputs;   // -1: variadic
  int num_outputs;  // -1: variadic
  std::span<const AttrSpec> attrs;
};

/// Static information about `kind`.
const OpInfo& op_info(OpKind kind);
/// Looks an op up by its bundle name ("add", "conv2d"); nullopt if this build lacks it.
std::optional<OpKind> op_from_name(std::string_view name);
/// The name of an op, e.g. for error messages.
inline std::string_view op_name(OpKind kind) { return op_info(kind).name; }

}  // namespace kiln

#include "kiln/format/ops.h"

#include <array>
#include <vector>

#include "kiln/format/kiln_generated.h"

namespace kiln {
namespace {

static_assert(static_cast<int>(fb::AttrKind::MAX) == static_cast<int>(AttrType::kGraph),
              "AttrType must mirror kiln.fb.AttrKind");

AttrType parse_type(std::string_view t) {
  if (t == "i") return AttrType::kInt;
  if (t == "f") return AttrType::kFloat;
  if (t == "b") return AttrType::kBool;
  if (t == "s") return AttrType::kString;
  if (t == "is") return AttrType::kInts;
  if (t == "fs") return AttrType::kFloats;
  if (t == "e") return AttrType::kExpr;
  if (t == "es") return AttrType::kExprs;
  if (t == "dt") return AttrType::kDType;
  if (t == "g") return AttrType::kGraph;
  return AttrType::kNone;  // caught by the OpTableAttributesParse test
}

// "is:dims,b:keepdim?" -> specs. String views point into the string literals of ops.def.
std::vector<AttrSpec> parse_attrs(std::string_view spec) {
  std::vector<AttrSpec> out;
  while (!spec.empty()) {
    const std::size_t comma = spec.find(',');
    std::string_view item = spec.substr(0, comma);
    spec = comma == std::string_view::npos ? std::string_view{} : spec.substr(comma + 1);
    AttrSpec a;
    if (!item.empty() && item.back() == '?') {
      a.optional = true;
      item.remove_suffix(1);
    }
    const std::size_t colon = item.find(':');
    a.type = parse_type(item.substr(0, colon));
    a.name = colon == std::string_view::npos ? item : item.substr(colon + 1);
    out.push_back(a);
  }
  return out;
}

struct Table {
  std::array<std::vector<AttrSpec>, kOpCount> attrs;
  std::array<OpInfo, kOpCount> infos;
  Table() : infos{} {
    std::size_t i = 0;
#define KILN_OP(Enum, name, min_in, max_in, num_out, spec)                           \
  attrs[i] = parse_attrs(spec);                                                      \
  infos[i] = OpInfo{OpKind::Enum, name, min_in, max_in, num_out, attrs[i]};          \
  ++i;
#include "ops.def"
#undef KILN_OP
  }
};

const Table& table() {
  static const Table t;
  return t;
}

}  // namespace

const OpInfo& op_info(OpKind kind) { return table().infos[static_cast<std::size_t>(kind)]; }

std::optional<OpKind> op_from_name(std::string_view name) {
  for (const OpInfo& info : table().infos) {
    if (info.name == name) return info.kind;
  }
  return std::nullopt;
}

}  // namespace kiln

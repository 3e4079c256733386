// The export-side program IR: what tracing (or .pt2 import) produces and passes transform,
// before it is serialized into a bundle (kiln/export/serialize.h). It mirrors
// schema/kiln.fbs, with symbolic expressions as live sym::Expr values over the program's
// ShapeEnv instead of interned postfix ids.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "kiln/export/symbolic/expr.h"
#include "kiln/export/symbolic/shape_env.h"
#include "kiln/format/dtype.h"
#include "kiln/format/ops.h"

namespace kiln::ir {

/// Where the user's code created something (`std::source_location` of the call).
struct SourceLocation {
  std::string file;
  std::uint32_t line = 0;
  std::uint32_t column = 0;
  bool known() const { return !file.empty(); }
};

/// Metadata every node (and runtime assert) keeps through passes.
struct NodeMeta {
  SourceLocation location;
  std::string module_path;  // "layers.3.attn.q"; empty at top level
  std::string user_op;      // the op as the user called it ("view", "F.linear")
};

enum class ValueKind : std::uint8_t { kTensor, kSymInt, kSymBool, kConstant, kNone };

struct Value {
  ValueKind kind = ValueKind::kTensor;
  DType dtype = DType::kF32;
  std::vector<sym::Expr> shape;  // kTensor, kConstant
  sym::Expr expr;                // kSymInt, kSymBool
  int constant = -1;             // kConstant: index into Program::constants
  std::string name;
};

struct GraphRef {
  int index = -1;
  friend bool operator==(const GraphRef&, const GraphRef&) = default;
};

/// One positional attribute; positions and kinds are defined by codegen/ops.def.
using Attr = std::variant<std::monostate, std::int64_t, double, bool, std::string, std::vector<std::int64_t>,
                          std::vector<double>, sym::Expr, std::vector<sym::Expr>, DType, GraphRef>;

struct Node {
  OpKind op = OpKind::Identity;
  std::vector<int> inputs;   // value ids
  std::vector<int> outputs;  // value ids
  std::vector<Attr> attrs;
  std::vector<int> subgraphs;
  NodeMeta meta;
};

struct RuntimeAssert {
  sym::Expr expr;       // boolean; must hold
  std::string message;  // "u0 >= 2"
  int after_node = -1;  // -1: checked on the inputs
  NodeMeta meta;
};

struct UnbackedBinding {
  enum class Kind : std::uint8_t { kScalar, kSize };
  int symbol = -1;
  int node = -1;
  int output = 0;
  Kind kind = Kind::kScalar;
  int dim = 0;
  std::int64_t divisor = 1;
};

struct Graph {
  std::string name;
  std::vector<Value> values;
  std::vector<Node> nodes;
  std::vector<int> inputs;
  std::vector<int> outputs;
  std::vector<RuntimeAssert> asserts;
  std::vector<UnbackedBinding> bindings;

  int add_value(Value v) {
    values.push_back(std::move(v));
    return static_cast<int>(values.size()) - 1;
  }
};

/// Constant bytes shared between copies of a program (specializations, passes).
using Bytes = std::shared_ptr<const std::vector<std::uint8_t>>;

struct ConstantTensor {
  std::string name;  // "layers.0.attn.q.weight"
  DType dtype = DType::kF32;
  std::vector<std::int64_t> shape;
  Bytes data;        // C-contiguous, little-endian; size == numel * dtype_size
};

enum class Dynamism : std::uint8_t { kStatic, kDynamic, kAuto };

struct InputSpec {
  std::string name;
  bool is_int = false;
  DType dtype = DType::kF32;        // tensors
  std::vector<sym::Expr> shape;     // tensors
  Dynamism dynamism = Dynamism::kStatic;  // ints
  std::int64_t static_value = 0;    // static ints
  sym::Expr expr;                   // dynamic ints: the symbol
};

struct OutputSpec {
  std::string name;
  bool is_int = false;
  DType dtype = DType::kF32;
  std::vector<sym::Expr> shape;
  sym::Expr expr;
};

/// A state tensor: a buffer that persists across runs of one Session. The entry graph (and
/// every specialization) takes state k as input |inputs| + k (its value at the start of a
/// run) and returns its new value as output |outputs| + k.
struct StateSpec {
  std::string name;  // "k_cache_0"
  DType dtype = DType::kF32;
  std::vector<std::int64_t> shape;  // static
  int initial = -1;                 // index into Program::constants
};

struct Specialization {
  std::string label;    // as the user wrote it: "seq % 16 == 0"
  sym::Expr predicate;  // over backed symbols
  int graph = -1;
};

struct TestValue {
  bool is_int = false;
  DType dtype = DType::kF32;
  std::vector<std::int64_t> shape;
  Bytes data;
  std::int64_t int_value = 0;
  double rtol = 1e-4;
  double atol = 1e-5;
};

struct SelfTestCase {
  std::string name;
  std::vector<TestValue> inputs;   // signature order
  std::vector<TestValue> outputs;  // signature order
  std::string variant;             // expected variant label; may be empty
  std::string sequence;            // "" or the sequence this case is the next step of (SelfTest.sequence)
};

struct Program {
  std::string name;
  sym::ShapeEnv env;
  std::vector<Graph> graphs;
  int entry = 0;
  std::vector<Specialization> specializations;
  std::vector<ConstantTensor> constants;
  std::vector<InputSpec> inputs;
  std::vector<OutputSpec> outputs;
  std::vector<StateSpec> states;
  std::vector<SelfTestCase> self_tests;
  std::vector<std::pair<std::string, std::string>> metadata;
  /// Where the range of a symbol (by id) was last narrowed: the guard or `check` of the
  /// user's code (or, imported, the archive's assert). Saved as Symbol.debug; the runtime
  /// names it when an input falls outside the range.
  std::unordered_map<int, NodeMeta> range_origins;
};

}  // namespace kiln::ir

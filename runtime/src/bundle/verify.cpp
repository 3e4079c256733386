#include "bundle/verify.h"

#include <algorithm>
#include <limits>
#include <string>
#include <string_view>
#include <unordered_set>

#include "kiln/format/dtype.h"
#include "kiln/format/fb_count.h"
#include "kiln/format/kiln_generated.h"

namespace kiln {
namespace {

constexpr std::uint32_t kNotBound = std::numeric_limits<std::uint32_t>::max();
constexpr std::uint32_t kBoundAtStart = 0;  // bound_at is node index + 1; 0 = at start

Status invalid(const std::string& message) { return Status(StatusCode::kInvalidBundle, message); }

// The FlatBuffers Verifier checks the alignment of a vector's length field only, so a
// vector of 8-byte elements (long, double, ExprToken) may start 4 bytes off; reading it
// would be undefined behaviour. The buffer itself is 8-byte aligned in memory.
template <typename V>
bool aligned8(const V* vec) {
  return vec == nullptr || reinterpret_cast<std::uintptr_t>(vec->Data()) % 8 == 0;
}

bool is_nary(fb::ExprOp op) {
  return op == fb::ExprOp::Add || op == fb::ExprOp::Mul || op == fb::ExprOp::Min ||
         op == fb::ExprOp::Max || op == fb::ExprOp::And || op == fb::ExprOp::Or;
}

// Verification state shared by the per-part checks.
class Verifier {
 public:
  Verifier(const fb::Program& p, const std::vector<format::SegmentEntry>& segments,
           std::vector<ExprInfo>& info)
      : p_(p), segments_(segments), info_(info) {}

  Status run();

 private:
  Status check_symbols();
  Status check_exprs();
  Status check_expr_tokens(std::uint32_t id, const fb::ExprRef& ref);
  Status check_expr(std::uint32_t id, bool want_bool, const std::string& where) const;
  Status check_shape(const flatbuffers::Vector<std::uint32_t>* shape, const std::string& where) const;
  Status check_data_ref(std::uint8_t dtype, const flatbuffers::Vector<std::int64_t>* shape,
                        std::uint32_t segment, std::uint64_t offset, std::uint64_t nbytes,
                        const std::string& where) const;
  Status check_signature();
  Status check_states();
  Status check_constants();
  Status check_quantization(std::uint32_t i) const;
  Status check_quantized_operands(const fb::Graph& graph, const fb::Node& node, const std::string& ow) const;
  Status check_graph(std::uint32_t g);
  Status check_graph_values(const fb::Graph& graph, const std::string& where);
  Status check_node(const fb::Graph& graph, std::uint32_t n, const std::string& where);
  Status check_bindings(const fb::Graph& graph, const std::string& where);
  Status check_asserts(const fb::Graph& graph, const std::string& where);
  Status check_symbols_bound(std::uint32_t expr, std::uint32_t at, const std::string& where) const;
  Status check_value_bound(const fb::Value& v, std::uint32_t at, const std::string& where) const;
  Status check_call_graph();
  Status check_entry_signature(std::uint32_t g, const std::string& where) const;
  Status check_specializations();
  Status check_self_tests();
  Status check_debug();
  std::string graph_where(std::uint32_t g) const;

  const fb::Program& p_;
  const std::vector<format::SegmentEntry>& segments_;
  std::vector<ExprInfo>& info_;
  std::vector<std::vector<std::uint32_t>> expr_symbols_;  // free symbols per expression
  std::uint32_t n_symbols_ = 0, n_exprs_ = 0, n_graphs_ = 0, n_debug_ = 0;
  // Per graph being checked:
  std::vector<std::uint32_t> bound_at_;  // per symbol: kNotBound, or node index + 1 (0 = start)
  std::vector<std::uint32_t> producer_;  // per value: node index + 1, 0 = not produced by a node
  // Per symbol: a backed symbol some signature input binds (a tensor dim or a dynamic int).
  std::vector<bool> bound_by_input_;
};

Status Verifier::run() {
  n_symbols_ = count(p_.symbols());
  n_exprs_ = count(p_.exprs());
  n_graphs_ = count(p_.graphs());
  n_debug_ = p_.debug() ? count(p_.debug()->entries()) : 0;
  if (!aligned8(p_.expr_tokens())) return invalid("expr_tokens: vector is not 8-byte aligned");
  for (std::uint32_t i = 0; i < count(p_.op_names()); ++i) {
    const auto* name = p_.op_names()->Get(i);
    if (name == nullptr || name->size() == 0) return invalid("op_names[" + std::to_string(i) + "] is empty");
  }
  KILN_RETURN_IF_ERROR(check_symbols());
  KILN_RETURN_IF_ERROR(check_exprs());
  KILN_RETURN_IF_ERROR(check_constants());
  KILN_RETURN_IF_ERROR(check_signature());
  KILN_RETURN_IF_ERROR(check_states());
  // The runtime binds backed symbols from the inputs only: one that no input mentions
  // (an export that dropped it from every input) can never be evaluated.
  bound_by_input_.assign(n_symbols_, false);
  for (std::uint32_t i = 0; i < count(p_.signature()->inputs()); ++i) {
    const auto* in = p_.signature()->inputs()->Get(i);
    std::vector<std::uint32_t> exprs;
    if (in->kind() == fb::InputKind::Tensor) {
      for (std::uint32_t d = 0; d < count(in->shape()); ++d) exprs.push_back(in->shape()->Get(d));
    } else if (in->dynamism() != fb::Dynamism::Static) {
      exprs.push_back(in->expr());
    }
    for (const std::uint32_t e : exprs) {
      for (const std::uint32_t s : expr_symbols_[e]) bound_by_input_[s] = p_.symbols()->Get(s)->kind() == fb::SymbolKind::Backed;
    }
  }
  if (n_graphs_ == 0) return invalid("program has no graphs");
  if (p_.entry_graph() >= n_graphs_) {
    return invalid("entry_graph " + std::to_string(p_.entry_graph()) + " >= graph count " + std::to_string(n_graphs_));
  }
  for (std::uint32_t g = 0; g < n_graphs_; ++g) KILN_RETURN_IF_ERROR(check_graph(g));
  KILN_RETURN_IF_ERROR(check_call_graph());
  KILN_RETURN_IF_ERROR(check_entry_signature(p_.entry_graph(), graph_where(p_.entry_graph())));
  KILN_RETURN_IF_ERROR(check_specializations());
  KILN_RETURN_IF_ERROR(check_self_tests());
  return check_debug();
}

std::string Verifier::graph_where(std::uint32_t g) const {
  const auto* graph = p_.graphs()->Get(g);
  std::string w = "graph " + std::to_string(g);
  if (graph->name() != nullptr && graph->name()->size() > 0) w += " (" + graph->name()->str() + ")";
  return w;
}

Status Verifier::check_symbols() {
  for (std::uint32_t i = 0; i < n_symbols_; ++i) {
    const auto* s = p_.symbols()->Get(i);
    const std::string where = "symbol " + std::to_string(i);
    if (s->name() == nullptr || s->name()->size() == 0) return invalid(where + ": missing name");
    if (static_cast<int>(s->kind()) > static_cast<int>(fb::SymbolKind::MAX)) return invalid(where + ": unknown kind");
    if (s->min() > s->max()) {
      return invalid(where + " (" + s->name()->str() + "): empty range [" + std::to_string(s->min()) + ", " +
                     std::to_string(s->max()) + "]");
    }
    if (n_debug_ > 0 && s->debug() > n_debug_) {
      return invalid(where + " (" + s->name()->str() + "): debug entry " + std::to_string(s->debug()) + " does not exist");
    }
  }
  return Status::Ok();
}

Status Verifier::check_exprs() {
  info_.assign(n_exprs_, ExprInfo{});
  expr_symbols_.assign(n_exprs_, {});
  // Expressions never share tokens (the writer appends each new one), so their lengths add
  // up to at most the pool size: this bounds verification work by the file size.
  std::uint64_t total = 0;
  const std::uint64_t pool = count(p_.expr_tokens());
  for (std::uint32_t i = 0; i < n_exprs_; ++i) {
    const fb::ExprRef& ref = *p_.exprs()->Get(i);
    total += ref.length();
    if (total > pool && std::uint64_t{ref.start()} + ref.length() <= pool) {
      return invalid("expression " + std::to_string(i) + ": token ranges overlap (" + std::to_string(total) +
                     " tokens referenced so far, " + std::to_string(pool) + " in the pool)");
    }
    KILN_RETURN_IF_ERROR(check_expr_tokens(i, ref));
  }
  return Status::Ok();
}

// Type-checks one postfix expression: true = bool, false = int on the stack.
Status Verifier::check_expr_tokens(std::uint32_t id, const fb::ExprRef& ref) {
  const std::string where = "expression " + std::to_string(id);
  const std::uint64_t end = std::uint64_t{ref.start()} + ref.length();
  if (ref.length() == 0 || ref.length() > format::kMaxExprTokens || end > count(p_.expr_tokens())) {
    return invalid(where + ": token range [" + std::to_string(ref.start()) + ", +" +
                   std::to_string(ref.length()) + ") is empty, too long or out of bounds");
  }
  std::vector<bool> stack;
  std::size_t depth = 0;
  std::unordered_set<std::uint32_t> symbols;
  for (std::uint32_t t = ref.start(); t < end; ++t) {
    const auto* tok = p_.expr_tokens()->Get(t);
    const auto op = tok->op();
    std::size_t arity = 0;
    if (op == fb::ExprOp::Const) {
      stack.push_back(false);
    } else if (op == fb::ExprOp::Sym) {
      if (tok->value() < 0 || static_cast<std::uint64_t>(tok->value()) >= n_symbols_) {
        return invalid(where + ": refers to unknown symbol " + std::to_string(tok->value()));
      }
      symbols.insert(static_cast<std::uint32_t>(tok->value()));
      stack.push_back(false);
    } else if (static_cast<int>(op) > static_cast<int>(fb::ExprOp::MAX)) {
      return invalid(where + ": unknown operator " + std::to_string(static_cast<int>(op)));
    } else {
      arity = is_nary(op) ? static_cast<std::size_t>(tok->value() < 2 ? 0 : tok->value())
                          : (op == fb::ExprOp::Neg || op == fb::ExprOp::Not ? 1 : 2);
      if (arity == 0 || (is_nary(op) && static_cast<std::uint64_t>(tok->value()) > format::kMaxExprTokens)) {
        return invalid(where + ": operator " + std::string(fb::EnumNameExprOp(op)) + " has bad arity " + std::to_string(tok->value()));
      }
      if (arity > stack.size()) return invalid(where + ": stack underflow at " + fb::EnumNameExprOp(op));
      const bool wants_bool = op == fb::ExprOp::And || op == fb::ExprOp::Or || op == fb::ExprOp::Not;
      const bool any_type = op == fb::ExprOp::Eq || op == fb::ExprOp::Ne;
      const bool first = stack[stack.size() - arity];
      for (std::size_t k = stack.size() - arity; k < stack.size(); ++k) {
        if ((any_type && stack[k] != first) || (!any_type && stack[k] != wants_bool)) {
          return invalid(where + ": operands of " + std::string(fb::EnumNameExprOp(op)) + " have the wrong type");
        }
      }
      stack.resize(stack.size() - arity);
      const bool yields_bool = wants_bool || any_type || op == fb::ExprOp::Lt || op == fb::ExprOp::Le ||
                               op == fb::ExprOp::Gt || op == fb::ExprOp::Ge;
      stack.push_back(yields_bool);
    }
    depth = std::max(depth, stack.size());
  }
  if (stack.size() != 1) return invalid(where + ": leaves " + std::to_string(stack.size()) + " values, not 1");
  info_[id].is_bool = stack[0];
  info_[id].stack_depth = static_cast<std::uint16_t>(depth);
  expr_symbols_[id].assign(symbols.begin(), symbols.end());
  return Status::Ok();
}

Status Verifier::check_expr(std::uint32_t id, bool want_bool, const std::string& where) const {
  if (id >= n_exprs_) return invalid(where + ": expression id " + std::to_string(id) + " out of range");
  if (info_[id].is_bool != want_bool) {
    return invalid(where + ": expression " + std::to_string(id) + " must be " + (want_bool ? "boolean" : "an integer"));
  }
  return Status::Ok();
}

Status Verifier::check_shape(const flatbuffers::Vector<std::uint32_t>* shape, const std::string& where) const {
  if (count(shape) > static_cast<std::uint32_t>(format::kMaxRank)) {
    return invalid(where + ": rank " + std::to_string(count(shape)) + " exceeds " + std::to_string(format::kMaxRank));
  }
  for (std::uint32_t d = 0; d < count(shape); ++d) {
    KILN_RETURN_IF_ERROR(check_expr(shape->Get(d), false, where + ", dim " + std::to_string(d)));
  }
  return Status::Ok();
}

Status Verifier::check_data_ref(std::uint8_t dtype, const flatbuffers::Vector<std::int64_t>* shape,
                                std::uint32_t segment, std::uint64_t offset, std::uint64_t nbytes,
                                const std::string& where) const {
  if (!dtype_is_valid(dtype)) return invalid(where + ": unknown dtype " + std::to_string(dtype));
  if (count(shape) > static_cast<std::uint32_t>(format::kMaxRank)) return invalid(where + ": rank exceeds 8");
  if (!aligned8(shape)) return invalid(where + ": shape vector is not 8-byte aligned");
  std::uint64_t expected = dtype_size(static_cast<DType>(dtype));
  for (std::uint32_t d = 0; d < count(shape); ++d) {
    const std::int64_t dim = shape->Get(d);
    if (dim < 0) return invalid(where + ": negative dim " + std::to_string(dim));
    if (__builtin_mul_overflow(expected, static_cast<std::uint64_t>(dim), &expected)) {
      return invalid(where + ": size overflows");
    }
  }
  if (expected != nbytes) {
    return invalid(where + ": nbytes " + std::to_string(nbytes) + " != " + std::to_string(expected) +
                   " implied by dtype and shape");
  }
  if (segment >= segments_.size()) return invalid(where + ": segment " + std::to_string(segment) + " does not exist");
  if (offset % format::kConstantAlignment != 0) return invalid(where + ": offset " + std::to_string(offset) + " is not 64-aligned");
  const std::uint64_t seg_size = segments_[segment].size;
  if (offset > seg_size || nbytes > seg_size - offset) {
    return invalid(where + ": [" + std::to_string(offset) + ", +" + std::to_string(nbytes) +
                   ") lies outside segment " + std::to_string(segment) + " (" + std::to_string(seg_size) + " bytes)");
  }
  return Status::Ok();
}

Status Verifier::check_constants() {
  for (std::uint32_t i = 0; i < count(p_.constants()); ++i) {
    const auto* c = p_.constants()->Get(i);
    KILN_RETURN_IF_ERROR(check_data_ref(static_cast<std::uint8_t>(c->dtype()), c->shape(), c->segment(),
                                        c->offset(), c->nbytes(), "constant " + std::to_string(i)));
  }
  // After every data reference is known to be sound: a quantized weight names its scales.
  for (std::uint32_t i = 0; i < count(p_.constants()); ++i) {
    if (p_.constants()->Get(i)->quant() != nullptr) KILN_RETURN_IF_ERROR(check_quantization(i));
  }
  return Status::Ok();
}

// Constant.quant (format 1.2, docs/QUANTIZATION.md): the storage, scales and zero points
// of a quantized weight must agree with its logical shape, so that linear_q/embedding_q
// (which check the same sizes again per call) never see a short buffer.
Status Verifier::check_quantization(std::uint32_t i) const {
  const auto* c = p_.constants()->Get(i);
  const auto* q = c->quant();
  std::string where = "constant " + std::to_string(i);
  if (c->name() != nullptr) where += " '" + c->name()->str() + "'";
  where += ", quantization";
  auto shape_str = [](const flatbuffers::Vector<std::int64_t>* v) {
    std::string s = "[";
    for (std::uint32_t d = 0; d < count(v); ++d) s += (d ? ", " : "") + std::to_string(v->Get(d));
    return s + "]";
  };
  const auto format = q->format();
  if (format != fb::QuantFormat::Int8 && format != fb::QuantFormat::Int4) {
    return invalid(where + ": unknown format " + std::to_string(static_cast<int>(format)) + " (int8 = 1, int4 = 2)");
  }
  const bool int4 = format == fb::QuantFormat::Int4;
  const std::string fname = int4 ? "int4" : "int8";
  if (q->source_dtype() != fb::DType::f32) return invalid(where + ": source dtype must be f32");
  if (count(q->shape()) != 2 || !aligned8(q->shape())) {
    return invalid(where + ": the logical shape must be 2-D [N, K], got " + shape_str(q->shape()));
  }
  const std::int64_t n = q->shape()->Get(0), k = q->shape()->Get(1);
  if (n < 1 || k < 1 || k > (std::int64_t{1} << 40)) {
    return invalid(where + ": logical shape " + shape_str(q->shape()) + " must have dims in [1, 2^40]");
  }
  if (q->axis() != 0) return invalid(where + ": axis " + std::to_string(q->axis()) + " is not supported (rows are output channels: axis 0)");
  const auto storage_dtype = int4 ? fb::DType::u8 : fb::DType::i8;
  if (c->dtype() != storage_dtype) return invalid(where + ": " + fname + " data must be stored as " + (int4 ? "u8" : "i8"));
  if (int4 && k % 2 != 0) return invalid(where + ": int4 needs an even K, got K=" + std::to_string(k));
  const std::int64_t stored_k = int4 ? k / 2 : k;
  if (count(c->shape()) != 2 || c->shape()->Get(0) != n || c->shape()->Get(1) != stored_k) {
    return invalid(where + ": storage shape " + shape_str(c->shape()) + " does not hold logical " + shape_str(q->shape()) +
                   " as " + fname + " (expected [" + std::to_string(n) + ", " + std::to_string(stored_k) + "])");
  }
  const std::int64_t group = q->group_size();
  if (group < 1 || k % group != 0) {
    return invalid(where + ": group size " + std::to_string(group) + " does not divide K=" + std::to_string(k));
  }
  if (int4 && group % 2 != 0) return invalid(where + ": int4 group size " + std::to_string(group) + " must be even");
  const std::int64_t groups = k / group;
  auto check_side = [&](std::uint32_t index, const char* what, bool scales) -> Status {
    const std::string sw = where + ", " + what + " (constant " + std::to_string(index) + ")";
    if (index >= count(p_.constants())) {
      return invalid(sw + ": does not exist (" + std::to_string(count(p_.constants())) + " constants)");
    }
    if (index == i) return invalid(sw + ": is the weight itself");
    const auto* s = p_.constants()->Get(index);
    if (s->quant() != nullptr) return invalid(sw + ": is itself quantized");
    if (scales ? (s->dtype() != fb::DType::f32 && s->dtype() != fb::DType::f16) : s->dtype() != fb::DType::u8) {
      return invalid(sw + std::string(scales ? ": must be f32 or f16" : ": must be u8"));
    }
    if (count(s->shape()) != 2 || s->shape()->Get(0) != n || s->shape()->Get(1) != groups) {
      return invalid(sw + ": shape " + shape_str(s->shape()) + " != [N, K / group_size] = [" + std::to_string(n) + ", " +
                     std::to_string(groups) + "]");
    }
    return Status::Ok();
  };
  KILN_RETURN_IF_ERROR(check_side(q->scales(), "scales", true));
  if (q->zero_points() < -1) return invalid(where + ": zero_points " + std::to_string(q->zero_points()) + " is not a constant or -1");
  if (q->zero_points() >= 0) {
    if (!int4) return invalid(where + ": int8 weights are symmetric: zero_points must be -1");
    KILN_RETURN_IF_ERROR(check_side(static_cast<std::uint32_t>(q->zero_points()), "zero points", false));
  }
  return Status::Ok();
}

// linear_q (input, weight, scales, bias?, zero_points?) and embedding_q (weight, scales,
// indices, zero_points?): the weight is a quantized constant and the scales and zero points
// are the constants it names.
Status Verifier::check_quantized_operands(const fb::Graph& graph, const fb::Node& node, const std::string& ow) const {
  const auto* name = p_.op_names()->Get(node.op());
  const std::string_view op(name->c_str(), name->size());  // no allocation per node
  const bool linear = op == "linear_q";
  if (!linear && op != "embedding_q") return Status::Ok();
  const std::uint32_t w_pos = linear ? 1 : 0, zero_pos = linear ? 4 : 3;
  if (count(node.inputs()) <= w_pos + 1) return Status::Ok();  // arity: checked with the op table at load
  const auto* w = graph.values()->Get(node.inputs()->Get(w_pos));
  if (w->kind() != fb::ValueKind::Constant || p_.constants()->Get(w->constant())->quant() == nullptr) {
    return invalid(ow + ", input " + std::to_string(w_pos) + " (weight): must be a quantized constant");
  }
  const auto* q = p_.constants()->Get(w->constant())->quant();
  const auto* s = graph.values()->Get(node.inputs()->Get(w_pos + 1));
  if (s->kind() != fb::ValueKind::Constant || s->constant() != q->scales()) {
    return invalid(ow + ", input " + std::to_string(w_pos + 1) + " (scales): must be constant " + std::to_string(q->scales()) +
                   ", the weight's scales");
  }
  const bool has_zero = count(node.inputs()) > zero_pos &&
                        graph.values()->Get(node.inputs()->Get(zero_pos))->kind() != fb::ValueKind::None;
  if (has_zero != (q->zero_points() >= 0)) {
    return invalid(ow + ", input " + std::to_string(zero_pos) + " (zero_points): " +
                   (has_zero ? "the weight has no zero points" : "the weight's zero points are missing"));
  }
  if (has_zero) {
    const auto* z = graph.values()->Get(node.inputs()->Get(zero_pos));
    if (z->kind() != fb::ValueKind::Constant || static_cast<std::int64_t>(z->constant()) != q->zero_points()) {
      return invalid(ow + ", input " + std::to_string(zero_pos) + " (zero_points): must be constant " +
                     std::to_string(q->zero_points()) + ", the weight's zero points");
    }
  }
  return Status::Ok();
}

Status Verifier::check_states() {
  const auto* sig = p_.signature();
  std::unordered_set<std::string> names;
  for (std::uint32_t k = 0; k < count(sig->states()); ++k) {
    const auto* st = sig->states()->Get(k);
    std::string where = "state " + std::to_string(k);
    if (st->name() == nullptr || st->name()->size() == 0) return invalid(where + ": missing name");
    where += " '" + st->name()->str() + "'";
    if (!names.insert(st->name()->str()).second) return invalid(where + ": duplicate state name");
    if (!dtype_is_valid(static_cast<std::uint8_t>(st->dtype()))) return invalid(where + ": unknown dtype");
    if (count(st->shape()) > static_cast<std::uint32_t>(format::kMaxRank)) return invalid(where + ": rank exceeds 8");
    if (!aligned8(st->shape())) return invalid(where + ": shape vector is not 8-byte aligned");
    for (std::uint32_t d = 0; d < count(st->shape()); ++d) {
      if (st->shape()->Get(d) < 0) return invalid(where + ": negative dim " + std::to_string(st->shape()->Get(d)));
    }
    if (st->initial() >= count(p_.constants())) {
      return invalid(where + ": initial value " + std::to_string(st->initial()) + " is not a constant (" +
                     std::to_string(count(p_.constants())) + " constants)");
    }
    // The initial value's size was checked against its segment with the constants.
    const auto* c = p_.constants()->Get(st->initial());
    bool same = c->dtype() == st->dtype() && count(c->shape()) == count(st->shape());
    for (std::uint32_t d = 0; same && d < count(st->shape()); ++d) same = c->shape()->Get(d) == st->shape()->Get(d);
    if (!same) return invalid(where + ": initial value (constant " + std::to_string(st->initial()) + ") has a different dtype or shape");
  }
  return Status::Ok();
}

Status Verifier::check_signature() {
  const auto* sig = p_.signature();
  if (sig == nullptr) return invalid("program has no signature");
  std::unordered_set<std::string> names;
  for (std::uint32_t i = 0; i < count(sig->inputs()); ++i) {
    const auto* in = sig->inputs()->Get(i);
    const std::string where = "signature input " + std::to_string(i);
    if (in->name() == nullptr || in->name()->size() == 0) return invalid(where + ": missing name");
    if (!names.insert(in->name()->str()).second) return invalid(where + ": duplicate name '" + in->name()->str() + "'");
    if (in->kind() == fb::InputKind::Tensor) {
      if (!dtype_is_valid(static_cast<std::uint8_t>(in->dtype()))) return invalid(where + ": unknown dtype");
      KILN_RETURN_IF_ERROR(check_shape(in->shape(), where));
    } else if (in->kind() == fb::InputKind::Int) {
      if (static_cast<int>(in->dynamism()) > static_cast<int>(fb::Dynamism::MAX)) return invalid(where + ": unknown dynamism");
      if (in->dynamism() != fb::Dynamism::Static) KILN_RETURN_IF_ERROR(check_expr(in->expr(), false, where));
    } else {
      return invalid(where + ": unknown input kind");
    }
  }
  for (std::uint32_t i = 0; i < count(sig->outputs()); ++i) {
    const auto* out = sig->outputs()->Get(i);
    const std::string where = "signature output " + std::to_string(i);
    if (out->kind() == fb::InputKind::Tensor) {
      if (!dtype_is_valid(static_cast<std::uint8_t>(out->dtype()))) return invalid(where + ": unknown dtype");
      KILN_RETURN_IF_ERROR(check_shape(out->shape(), where));
    } else if (out->kind() == fb::InputKind::Int) {
      KILN_RETURN_IF_ERROR(check_expr(out->expr(), false, where));
    } else {
      return invalid(where + ": unknown output kind");
    }
  }
  return Status::Ok();
}

Status Verifier::check_symbols_bound(std::uint32_t expr, std::uint32_t at, const std::string& where) const {
  for (const std::uint32_t s : expr_symbols_[expr]) {
    if (bound_at_[s] == kNotBound && p_.symbols()->Get(s)->kind() == fb::SymbolKind::Backed) {
      return invalid(where + ": uses symbol " + p_.symbols()->Get(s)->name()->str() + ", which no input binds");
    }
    if (bound_at_[s] == kNotBound || bound_at_[s] > at) {
      return invalid(where + ": uses symbol " + p_.symbols()->Get(s)->name()->str() + " before it is bound");
    }
  }
  return Status::Ok();
}

Status Verifier::check_value_bound(const fb::Value& v, std::uint32_t at, const std::string& where) const {
  for (std::uint32_t d = 0; d < count(v.shape()); ++d) KILN_RETURN_IF_ERROR(check_symbols_bound(v.shape()->Get(d), at, where));
  if (v.kind() == fb::ValueKind::SymInt || v.kind() == fb::ValueKind::SymBool) {
    KILN_RETURN_IF_ERROR(check_symbols_bound(v.expr(), at, where));
  }
  return Status::Ok();
}

Status Verifier::check_graph_values(const fb::Graph& graph, const std::string& where) {
  for (std::uint32_t i = 0; i < count(graph.values()); ++i) {
    const auto* v = graph.values()->Get(i);
    const std::string vw = where + ", value " + std::to_string(i);
    switch (v->kind()) {
      case fb::ValueKind::Tensor:
        if (!dtype_is_valid(static_cast<std::uint8_t>(v->dtype()))) return invalid(vw + ": unknown dtype");
        KILN_RETURN_IF_ERROR(check_shape(v->shape(), vw));
        break;
      case fb::ValueKind::SymInt:
      case fb::ValueKind::SymBool:
        // A symbolic value has no shape, but a hostile one may: the binding rules read it.
        KILN_RETURN_IF_ERROR(check_shape(v->shape(), vw));
        KILN_RETURN_IF_ERROR(check_expr(v->expr(), v->kind() == fb::ValueKind::SymBool, vw));
        break;
      case fb::ValueKind::Constant: {
        if (v->constant() >= count(p_.constants())) return invalid(vw + ": constant " + std::to_string(v->constant()) + " does not exist");
        const auto* c = p_.constants()->Get(v->constant());
        if (c->dtype() != v->dtype()) return invalid(vw + ": dtype differs from its constant's");
        KILN_RETURN_IF_ERROR(check_shape(v->shape(), vw));
        if (count(v->shape()) != count(c->shape())) return invalid(vw + ": rank differs from its constant's");
        for (std::uint32_t d = 0; d < count(v->shape()); ++d) {
          const auto* ref = p_.exprs()->Get(v->shape()->Get(d));
          const auto* tok = p_.expr_tokens()->Get(ref->start());
          if (ref->length() != 1 || tok->op() != fb::ExprOp::Const || tok->value() != c->shape()->Get(d)) {
            return invalid(vw + ", dim " + std::to_string(d) + ": not the constant's size " + std::to_string(c->shape()->Get(d)));
          }
        }
        break;
      }
      case fb::ValueKind::None:
        KILN_RETURN_IF_ERROR(check_shape(v->shape(), vw));
        break;
      default: return invalid(vw + ": unknown value kind");
    }
  }
  return Status::Ok();
}

Status Verifier::check_bindings(const fb::Graph& graph, const std::string& where) {
  for (std::uint32_t i = 0; i < count(graph.bindings()); ++i) {
    const auto* b = graph.bindings()->Get(i);
    const std::string bw = where + ", unbacked binding " + std::to_string(i);
    if (b->symbol() >= n_symbols_) return invalid(bw + ": unknown symbol " + std::to_string(b->symbol()));
    if (p_.symbols()->Get(b->symbol())->kind() != fb::SymbolKind::Unbacked) return invalid(bw + ": binds a backed symbol");
    if (bound_at_[b->symbol()] != kNotBound) return invalid(bw + ": symbol " + p_.symbols()->Get(b->symbol())->name()->str() + " is bound twice");
    if (b->node() >= count(graph.nodes())) return invalid(bw + ": node " + std::to_string(b->node()) + " does not exist");
    const auto* node = graph.nodes()->Get(b->node());
    if (b->output() >= count(node->outputs())) return invalid(bw + ": node has no output " + std::to_string(b->output()));
    const std::uint32_t vid = node->outputs()->Get(b->output());
    if (vid >= count(graph.values())) return invalid(bw + ": bad output value");
    const auto* v = graph.values()->Get(vid);
    if (b->kind() == fb::BindingKind::Size) {
      if (v->kind() != fb::ValueKind::Tensor || b->dim() >= count(v->shape())) return invalid(bw + ": size path does not name a tensor dim");
      if (b->divisor() < 1) return invalid(bw + ": divisor " + std::to_string(b->divisor()) + " < 1");
    } else if (b->kind() == fb::BindingKind::Scalar) {
      if (!(v->kind() == fb::ValueKind::SymInt || (v->kind() == fb::ValueKind::Tensor && count(v->shape()) == 0))) {
        return invalid(bw + ": scalar path needs a SymInt or 0-d tensor output");
      }
    } else {
      return invalid(bw + ": unknown binding kind");
    }
    bound_at_[b->symbol()] = b->node() + 1;
  }
  return Status::Ok();
}

Status Verifier::check_node(const fb::Graph& graph, std::uint32_t n, const std::string& where) {
  const auto* node = graph.nodes()->Get(n);
  const std::string nw = where + ", node " + std::to_string(n);
  const std::uint32_t n_values = count(graph.values());
  if (node->op() >= count(p_.op_names())) return invalid(nw + ": op " + std::to_string(node->op()) + " not in op_names");
  const std::string ow = nw + " (" + p_.op_names()->Get(node->op())->str() + ")";
  for (std::uint32_t k = 0; k < count(node->inputs()); ++k) {
    const std::uint32_t v = node->inputs()->Get(k);
    const std::string iw = ow + ", input " + std::to_string(k);
    if (v >= n_values) return invalid(iw + ": value " + std::to_string(v) + " does not exist");
    if (producer_[v] > n) return invalid(iw + ": value " + std::to_string(v) + " is defined later (graph not topologically ordered)");
    KILN_RETURN_IF_ERROR(check_value_bound(*graph.values()->Get(v), n, iw));
  }
  KILN_RETURN_IF_ERROR(check_quantized_operands(graph, *node, ow));
  for (std::uint32_t k = 0; k < count(node->outputs()); ++k) {
    KILN_RETURN_IF_ERROR(check_value_bound(*graph.values()->Get(node->outputs()->Get(k)), n + 1,
                                           ow + ", output " + std::to_string(k)));
  }
  for (std::uint32_t k = 0; k < count(node->attrs()); ++k) {
    const auto* a = node->attrs()->Get(k);
    const std::string aw = ow + ", attribute " + std::to_string(k);
    if (static_cast<int>(a->kind()) > static_cast<int>(fb::AttrKind::MAX)) return invalid(aw + ": unknown kind");
    if (!aligned8(a->ints()) || !aligned8(a->floats())) return invalid(aw + ": vector is not 8-byte aligned");
    if (a->kind() == fb::AttrKind::Expr || a->kind() == fb::AttrKind::Exprs) {
      if (a->kind() == fb::AttrKind::Expr && count(a->exprs()) != 1) return invalid(aw + ": needs exactly one expression");
      for (std::uint32_t e = 0; e < count(a->exprs()); ++e) {
        const std::uint32_t id = a->exprs()->Get(e);
        if (id >= n_exprs_) return invalid(aw + ": expression id out of range");
        KILN_RETURN_IF_ERROR(check_symbols_bound(id, n, aw));
      }
    } else if (a->kind() == fb::AttrKind::DType && !dtype_is_valid(static_cast<std::uint64_t>(a->i()) < 256 ? static_cast<std::uint8_t>(a->i()) : 255)) {
      return invalid(aw + ": unknown dtype " + std::to_string(a->i()));
    } else if (a->kind() == fb::AttrKind::Graph && (a->i() < 0 || static_cast<std::uint64_t>(a->i()) >= n_graphs_)) {
      return invalid(aw + ": graph " + std::to_string(a->i()) + " does not exist");
    }
  }
  if (count(node->attrs()) > 0 && p_.op_names()->Get(node->op())->string_view() == "while_loop") {
    const auto* a = node->attrs()->Get(0);
    if (a->kind() == fb::AttrKind::Int && a->i() < 0) return invalid(ow + ": max_iterations " + std::to_string(a->i()) + " is negative");
  }
  for (std::uint32_t k = 0; k < count(node->subgraphs()); ++k) {
    const std::uint32_t g = node->subgraphs()->Get(k);
    if (g >= n_graphs_ || g == p_.entry_graph()) return invalid(ow + ": subgraph " + std::to_string(g) + " is not a callable graph");
  }
  if (n_debug_ > 0 && node->debug() > n_debug_) return invalid(ow + ": debug entry " + std::to_string(node->debug()) + " does not exist");
  return Status::Ok();
}

Status Verifier::check_asserts(const fb::Graph& graph, const std::string& where) {
  for (std::uint32_t i = 0; i < count(graph.asserts()); ++i) {
    const auto* a = graph.asserts()->Get(i);
    const std::string aw = where + ", runtime assert " + std::to_string(i);
    KILN_RETURN_IF_ERROR(check_expr(a->expr(), true, aw));
    if (a->after_node() < -1 || a->after_node() >= static_cast<std::int64_t>(count(graph.nodes()))) {
      return invalid(aw + ": after_node " + std::to_string(a->after_node()) + " out of range");
    }
    KILN_RETURN_IF_ERROR(check_symbols_bound(a->expr(), static_cast<std::uint32_t>(a->after_node() + 1), aw));
    if (n_debug_ > 0 && a->debug() > n_debug_) return invalid(aw + ": debug entry does not exist");
  }
  return Status::Ok();
}

Status Verifier::check_graph(std::uint32_t g) {
  const auto* graph = p_.graphs()->Get(g);
  const std::string where = graph_where(g);
  const std::uint32_t n_values = count(graph->values());
  const std::uint32_t n_nodes = count(graph->nodes());
  KILN_RETURN_IF_ERROR(check_graph_values(*graph, where));
  producer_.assign(n_values, 0);
  bound_at_.assign(n_symbols_, kNotBound);
  for (std::uint32_t s = 0; s < n_symbols_; ++s) {
    if (bound_by_input_[s]) bound_at_[s] = kBoundAtStart;
  }
  std::vector<bool> is_input(n_values, false);
  for (std::uint32_t k = 0; k < count(graph->inputs()); ++k) {
    const std::uint32_t v = graph->inputs()->Get(k);
    if (v >= n_values) return invalid(where + ", input " + std::to_string(k) + ": value " + std::to_string(v) + " does not exist");
    if (is_input[v]) return invalid(where + ", input " + std::to_string(k) + ": value listed twice");
    const auto kind = graph->values()->Get(v)->kind();
    if (kind == fb::ValueKind::Constant || kind == fb::ValueKind::None) return invalid(where + ", input " + std::to_string(k) + ": must be a tensor or symbolic value");
    is_input[v] = true;
    // A subgraph's inputs bind the (lifted) symbols their shapes mention.
    const auto* val = graph->values()->Get(v);
    for (std::uint32_t d = 0; d < count(val->shape()); ++d) {
      for (const std::uint32_t s : expr_symbols_[val->shape()->Get(d)]) bound_at_[s] = kBoundAtStart;
    }
    if (kind == fb::ValueKind::SymInt) for (const std::uint32_t s : expr_symbols_[val->expr()]) bound_at_[s] = kBoundAtStart;
  }
  for (std::uint32_t n = 0; n < n_nodes; ++n) {
    const auto* node = graph->nodes()->Get(n);
    for (std::uint32_t k = 0; k < count(node->outputs()); ++k) {
      const std::uint32_t v = node->outputs()->Get(k);
      const std::string ow = where + ", node " + std::to_string(n) + ", output " + std::to_string(k);
      if (v >= n_values) return invalid(ow + ": value " + std::to_string(v) + " does not exist");
      if (producer_[v] != 0 || is_input[v]) return invalid(ow + ": value " + std::to_string(v) + " is defined twice");
      const auto kind = graph->values()->Get(v)->kind();
      if (kind == fb::ValueKind::Constant || kind == fb::ValueKind::None) return invalid(ow + ": a node cannot define a constant or None value");
      producer_[v] = n + 1;
    }
  }
  KILN_RETURN_IF_ERROR(check_bindings(*graph, where));
  for (std::uint32_t n = 0; n < n_nodes; ++n) {
    KILN_RETURN_IF_ERROR(check_node(*graph, n, where));
  }
  // A tensor value that is neither an input nor produced by a node has no definition.
  for (std::uint32_t v = 0; v < n_values; ++v) {
    if (graph->values()->Get(v)->kind() == fb::ValueKind::Tensor && producer_[v] == 0 && !is_input[v]) {
      return invalid(where + ", value " + std::to_string(v) + ": tensor is never defined");
    }
  }
  KILN_RETURN_IF_ERROR(check_asserts(*graph, where));
  for (std::uint32_t k = 0; k < count(graph->outputs()); ++k) {
    const std::uint32_t v = graph->outputs()->Get(k);
    const std::string ow = where + ", output " + std::to_string(k);
    if (v >= n_values) return invalid(ow + ": value " + std::to_string(v) + " does not exist");
    if (graph->values()->Get(v)->kind() == fb::ValueKind::None) return invalid(ow + ": cannot return None");
    KILN_RETURN_IF_ERROR(check_value_bound(*graph->values()->Get(v), n_nodes + 1, ow));
  }
  return Status::Ok();
}

// Subgraph calls must form a DAG (no recursion) no deeper than kMaxSubgraphDepth.
// Iterative DFS: depth is attacker-chosen.
Status Verifier::check_call_graph() {
  enum : std::uint8_t { kWhite, kGrey, kBlack };
  std::vector<std::uint8_t> color(n_graphs_, kWhite);
  std::vector<std::uint32_t> height(n_graphs_, 0);  // levels of calls below a finished graph
  auto finish = [&](std::uint32_t g) -> Status {
    const auto* nodes = p_.graphs()->Get(g)->nodes();
    for (std::uint32_t n = 0; n < count(nodes); ++n) {
      const auto* subs = nodes->Get(n)->subgraphs();
      for (std::uint32_t k = 0; k < count(subs); ++k) height[g] = std::max(height[g], height[subs->Get(k)] + 1);
    }
    if (height[g] > kMaxSubgraphDepth) {
      return invalid(graph_where(g) + ": subgraph calls nest " + std::to_string(height[g]) + " deep, above the limit of " +
                     std::to_string(kMaxSubgraphDepth));
    }
    color[g] = kBlack;
    return Status::Ok();
  };
  struct Frame {
    std::uint32_t graph, node, sub;
  };
  for (std::uint32_t root = 0; root < n_graphs_; ++root) {
    if (color[root] != kWhite) continue;
    std::vector<Frame> stack{{root, 0, 0}};
    color[root] = kGrey;
    while (!stack.empty()) {
      Frame& f = stack.back();
      const auto* nodes = p_.graphs()->Get(f.graph)->nodes();
      if (f.node >= count(nodes)) {
        KILN_RETURN_IF_ERROR(finish(f.graph));
        stack.pop_back();
        continue;
      }
      const auto* subs = nodes->Get(f.node)->subgraphs();
      if (f.sub >= count(subs)) {
        ++f.node;
        f.sub = 0;
        continue;
      }
      const std::uint32_t callee = subs->Get(f.sub++);
      if (color[callee] == kGrey) return invalid(graph_where(callee) + ": calls itself recursively");
      if (color[callee] == kWhite) {
        color[callee] = kGrey;
        stack.push_back({callee, 0, 0});
      }
    }
  }
  return Status::Ok();
}

Status Verifier::check_entry_signature(std::uint32_t g, const std::string& where) const {
  const auto* graph = p_.graphs()->Get(g);
  const auto* sig = p_.signature();
  const std::uint32_t n_states = count(sig->states());
  if (count(graph->inputs()) != count(sig->inputs()) + n_states || count(graph->outputs()) != count(sig->outputs()) + n_states) {
    return invalid(where + ": inputs/outputs do not match the signature (" + std::to_string(count(graph->inputs())) +
                   "/" + std::to_string(count(graph->outputs())) + " vs " + std::to_string(count(sig->inputs()) + n_states) + "/" +
                   std::to_string(count(sig->outputs()) + n_states) + (n_states > 0 ? ", states included" : "") + ")");
  }
  // State k: entry input |inputs| + k (its value at the start) and output |outputs| + k
  // (its value at the end), both of the state's dtype and static shape.
  for (std::uint32_t k = 0; k < n_states; ++k) {
    const auto* st = sig->states()->Get(k);
    const std::string name = st->name()->str();
    for (int side = 0; side < 2; ++side) {
      const std::uint32_t pos = side == 0 ? count(sig->inputs()) + k : count(sig->outputs()) + k;
      const auto* v = graph->values()->Get(side == 0 ? graph->inputs()->Get(pos) : graph->outputs()->Get(pos));
      const std::string at = where + (side == 0 ? ", input " : ", output ") + std::to_string(pos) + " (state '" + name + "')";
      const bool tensor = v->kind() == fb::ValueKind::Tensor || (side == 1 && v->kind() == fb::ValueKind::Constant);
      if (!tensor) return invalid(at + ": not a tensor");
      if (v->dtype() != st->dtype()) {
        return invalid(at + ": dtype " + std::string(dtype_name(static_cast<DType>(v->dtype()))) + " differs from the state's " +
                       std::string(dtype_name(static_cast<DType>(st->dtype()))));
      }
      if (count(v->shape()) != count(st->shape())) {
        return invalid(at + ": rank " + std::to_string(count(v->shape())) + " differs from the state's " + std::to_string(count(st->shape())));
      }
      for (std::uint32_t d = 0; d < count(st->shape()); ++d) {
        const auto* ref = p_.exprs()->Get(v->shape()->Get(d));  // a constant is one Const token
        const auto* tok = ref->length() == 1 ? p_.expr_tokens()->Get(ref->start()) : nullptr;
        if (tok == nullptr || tok->op() != fb::ExprOp::Const || tok->value() != st->shape()->Get(d)) {
          return invalid(at + ", dim " + std::to_string(d) + ": not the state's static size " + std::to_string(st->shape()->Get(d)));
        }
      }
    }
  }
  for (std::uint32_t k = 0; k < count(sig->inputs()); ++k) {
    const auto* spec = sig->inputs()->Get(k);
    const auto* v = graph->values()->Get(graph->inputs()->Get(k));
    const bool ok = spec->kind() == fb::InputKind::Tensor
                        ? v->kind() == fb::ValueKind::Tensor && v->dtype() == spec->dtype() && count(v->shape()) == count(spec->shape())
                        : v->kind() == fb::ValueKind::SymInt;
    if (!ok) return invalid(where + ", input " + std::to_string(k) + ": kind, dtype or rank differs from signature input '" + spec->name()->str() + "'");
  }
  for (std::uint32_t k = 0; k < count(sig->outputs()); ++k) {
    const auto* spec = sig->outputs()->Get(k);
    const auto* v = graph->values()->Get(graph->outputs()->Get(k));
    const bool tensor = v->kind() == fb::ValueKind::Tensor || v->kind() == fb::ValueKind::Constant;
    const bool ok = spec->kind() == fb::InputKind::Tensor
                        ? tensor && v->dtype() == spec->dtype() && count(v->shape()) == count(spec->shape())
                        : v->kind() == fb::ValueKind::SymInt;
    if (!ok) return invalid(where + ", output " + std::to_string(k) + ": kind, dtype or rank differs from the signature");
  }
  return Status::Ok();
}

Status Verifier::check_specializations() {
  for (std::uint32_t i = 0; i < count(p_.specializations()); ++i) {
    const auto* s = p_.specializations()->Get(i);
    const std::string where = "specialization " + std::to_string(i);
    KILN_RETURN_IF_ERROR(check_expr(s->predicate(), true, where));
    for (const std::uint32_t sym : expr_symbols_[s->predicate()]) {
      if (p_.symbols()->Get(sym)->kind() != fb::SymbolKind::Backed) return invalid(where + ": predicate uses an unbacked symbol");
    }
    if (s->graph() >= n_graphs_ || s->graph() == p_.entry_graph()) return invalid(where + ": graph " + std::to_string(s->graph()) + " is not a specialized graph");
    KILN_RETURN_IF_ERROR(check_entry_signature(s->graph(), where + " " + graph_where(s->graph())));
  }
  return Status::Ok();
}

Status Verifier::check_self_tests() {
  const auto* sig = p_.signature();
  for (std::uint32_t i = 0; i < count(p_.self_tests()); ++i) {
    const auto* t = p_.self_tests()->Get(i);
    const std::string where = "self-test " + std::to_string(i);
    if (count(t->inputs()) != count(sig->inputs()) || count(t->outputs()) != count(sig->outputs())) {
      return invalid(where + ": input/output count differs from the signature");
    }
    for (int side = 0; side < 2; ++side) {
      const auto* list = side == 0 ? t->inputs() : t->outputs();
      for (std::uint32_t k = 0; k < count(list); ++k) {
        const auto* tt = list->Get(k);
        const std::string tw = where + (side == 0 ? ", input " : ", output ") + std::to_string(k);
        if (tt->kind() == fb::InputKind::Tensor) {
          KILN_RETURN_IF_ERROR(check_data_ref(static_cast<std::uint8_t>(tt->dtype()), tt->shape(), tt->segment(),
                                              tt->offset(), tt->nbytes(), tw));
        } else if (tt->kind() != fb::InputKind::Int) {
          return invalid(tw + ": unknown kind");
        }
        if (!(tt->rtol() >= 0.0) || !(tt->atol() >= 0.0)) return invalid(tw + ": tolerance must be >= 0");
      }
    }
  }
  return Status::Ok();
}

Status Verifier::check_debug() {
  const auto* d = p_.debug();
  if (d == nullptr) return Status::Ok();
  const std::uint32_t n_strings = count(d->strings());
  for (std::uint32_t i = 0; i < n_debug_; ++i) {
    const auto* e = d->entries()->Get(i);
    if (e->file() >= n_strings || e->module_path() >= n_strings || e->user_op() >= n_strings) {
      return invalid("debug entry " + std::to_string(i) + ": string index out of range");
    }
  }
  for (std::uint32_t i = 0; i < n_strings; ++i) {
    if (d->strings()->Get(i) == nullptr) return invalid("debug string " + std::to_string(i) + " is missing");
  }
  return Status::Ok();
}

}  // namespace

Status verify_program(const fb::Program& program, const std::vector<format::SegmentEntry>& segments,
                      std::vector<ExprInfo>& expr_info) {
  Verifier v(program, segments, expr_info);
  return v.run();
}

}  // namespace kiln

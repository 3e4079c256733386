// Postfix token serialization (schema/kiln.fbs ExprToken).
#include "kiln/export/symbolic/postfix.h"

#include "kiln/format/kiln_generated.h"

namespace kiln::sym {
namespace {

#define KILN_SAME_CODE(name) \
  static_assert(static_cast<int>(ExprOp::name) == static_cast<int>(kiln::fb::ExprOp::name), #name)
KILN_SAME_CODE(Const);
KILN_SAME_CODE(Sym);
KILN_SAME_CODE(Add);
KILN_SAME_CODE(Mul);
KILN_SAME_CODE(FloorDiv);
KILN_SAME_CODE(Mod);
KILN_SAME_CODE(Min);
KILN_SAME_CODE(Max);
KILN_SAME_CODE(Neg);
KILN_SAME_CODE(Eq);
KILN_SAME_CODE(Ne);
KILN_SAME_CODE(Lt);
KILN_SAME_CODE(Le);
KILN_SAME_CODE(Gt);
KILN_SAME_CODE(Ge);
KILN_SAME_CODE(And);
KILN_SAME_CODE(Or);
KILN_SAME_CODE(Not);
KILN_SAME_CODE(CeilDiv);
#undef KILN_SAME_CODE
static_assert(kExprOpCount == static_cast<int>(kiln::fb::ExprOp::MAX) + 1, "ExprOp lags the schema");

ExprToken token(ExprOp op, std::int64_t value) { return {static_cast<std::uint8_t>(op), value}; }

Status bad(std::size_t index, const std::string& what) {
  return Status(StatusCode::kInvalidBundle, "[from_postfix] token " + std::to_string(index) + ": " + what);
}

struct Entry {
  Expr expr;
  std::uint32_t depth;
};

}  // namespace

void append_postfix(Expr e, std::vector<ExprToken>& out) {
  if (auto b = e.bool_value()) {
    out.insert(out.end(), {token(ExprOp::Const, 0), token(ExprOp::Const, *b ? 0 : 1), token(ExprOp::Eq, 0)});
    return;
  }
  for (Expr a : e.args()) append_postfix(a, out);
  std::int64_t value = 0;
  if (auto c = e.constant_value()) value = *c;
  else if (e.is_symbol()) value = e.symbol_id();
  else if (is_nary(e.op())) value = static_cast<std::int64_t>(e.args().size());
  out.push_back(token(e.op(), value));
}

std::vector<ExprToken> to_postfix(Expr e) {
  std::vector<ExprToken> out;
  append_postfix(e, out);
  return out;
}

Result<Expr> from_postfix(std::span<const ExprToken> tokens, const PostfixLimits& limits) {
  if (tokens.empty()) return bad(0, "empty expression");
  std::vector<Entry> stack;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const ExprToken& t = tokens[i];
    if (t.op >= kExprOpCount) return bad(i, "unknown op code " + std::to_string(t.op));
    const auto op = static_cast<ExprOp>(t.op);
    std::size_t arity = 2;
    if (op == ExprOp::Const || op == ExprOp::Sym) arity = 0;
    else if (op == ExprOp::Neg || op == ExprOp::Not) arity = 1;
    else if (is_nary(op)) {
      if (t.value < 2 || static_cast<std::uint64_t>(t.value) > stack.size()) {
        return bad(i, std::string(expr_op_name(op)) + " arity " + std::to_string(t.value) + " with " +
                          std::to_string(stack.size()) + " values on the stack");
      }
      arity = static_cast<std::size_t>(t.value);
    }
    if (arity > stack.size()) return bad(i, std::string(expr_op_name(op)) + ": stack underflow");
    if (op == ExprOp::Sym && (t.value < 0 || t.value >= limits.symbol_count)) {
      return bad(i, "symbol id " + std::to_string(t.value) + " out of range");
    }
    std::vector<Expr> args;
    std::uint32_t depth = 0;
    for (std::size_t k = stack.size() - arity; k < stack.size(); ++k) {
      args.push_back(stack[k].expr);
      depth = std::max(depth, stack[k].depth);
    }
    if (depth + 1 > limits.max_depth) return bad(i, "expression deeper than " + std::to_string(limits.max_depth));
    stack.resize(stack.size() - arity);
    auto built = try_build(op, t.value, args);
    if (!built.ok()) return bad(i, built.status().message());
    stack.push_back({*built, depth + 1});
  }
  if (stack.size() != 1) return bad(tokens.size(), std::to_string(stack.size()) + " values left, expected 1");
  return stack[0].expr;
}

}  // namespace kiln::sym

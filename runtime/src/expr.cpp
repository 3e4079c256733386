#include "kiln/runtime/expr.h"

#include <vector>

#include "kiln/format/kiln_generated.h"

namespace kiln {
namespace {

using Op = fb::ExprOp;

Status overflow() { return Status(StatusCode::kInvalidInput, "integer overflow evaluating a shape expression"); }

std::int64_t floor_div(std::int64_t a, std::int64_t b) {
  std::int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

// Applies a binary or n-ary operator to two operands. Returns false on overflow.
bool apply(Op op, std::int64_t a, std::int64_t b, std::int64_t& out) {
  switch (op) {
    case Op::Add: return !__builtin_add_overflow(a, b, &out);
    case Op::Mul: return !__builtin_mul_overflow(a, b, &out);
    case Op::Min: out = std::min(a, b); return true;
    case Op::Max: out = std::max(a, b); return true;
    case Op::And: out = (a != 0) && (b != 0); return true;
    case Op::Or: out = (a != 0) || (b != 0); return true;
    case Op::Eq: out = a == b; return true;
    case Op::Ne: out = a != b; return true;
    case Op::Lt: out = a < b; return true;
    case Op::Le: out = a <= b; return true;
    case Op::Gt: out = a > b; return true;
    case Op::Ge: out = a >= b; return true;
    default: return false;
  }
}

}  // namespace

Result<std::int64_t> evaluate_expr(const fb::Program& program, std::uint32_t id,
                                   std::span<const std::int64_t> symbols) {
  const auto* ref = program.exprs()->Get(id);
  const auto* tokens = program.expr_tokens();
  std::int64_t small[32];
  std::vector<std::int64_t> big;
  std::int64_t* stack = small;
  if (ref->length() > 32) {
    big.resize(ref->length());
    stack = big.data();
  }
  std::size_t sp = 0;
  for (std::uint32_t t = ref->start(); t < ref->start() + ref->length(); ++t) {
    const auto* tok = tokens->Get(t);
    const Op op = tok->op();
    if (op == Op::Const) { stack[sp++] = tok->value(); continue; }
    if (op == Op::Sym) { stack[sp++] = symbols[static_cast<std::size_t>(tok->value())]; continue; }
    if (op == Op::Neg) {
      if (stack[sp - 1] == INT64_MIN) return overflow();
      stack[sp - 1] = -stack[sp - 1];
      continue;
    }
    if (op == Op::Not) { stack[sp - 1] = stack[sp - 1] == 0; continue; }
    if (op == Op::FloorDiv || op == Op::Mod || op == Op::CeilDiv) {
      const std::int64_t b = stack[--sp], a = stack[sp - 1];
      if (b == 0) return Status(StatusCode::kInvalidInput, "division by zero evaluating a shape expression");
      if (a == INT64_MIN && b == -1) return overflow();
      // Computed from C++'s truncating / and % so that no intermediate can overflow.
      if (op == Op::FloorDiv) {
        stack[sp - 1] = floor_div(a, b);
      } else if (op == Op::CeilDiv) {
        std::int64_t q = a / b;
        if (a % b != 0 && ((a < 0) == (b < 0))) ++q;
        stack[sp - 1] = q;
      } else {
        std::int64_t r = a % b;
        if (r != 0 && ((r < 0) != (b < 0))) r += b;
        stack[sp - 1] = r;
      }
      continue;
    }
    const std::size_t arity = (op == Op::Add || op == Op::Mul || op == Op::Min || op == Op::Max ||
                               op == Op::And || op == Op::Or)
                                  ? static_cast<std::size_t>(tok->value())
                                  : 2;
    std::int64_t acc = stack[sp - arity];
    for (std::size_t k = sp - arity + 1; k < sp; ++k) {
      if (!apply(op, acc, stack[k], acc)) return overflow();
    }
    sp -= arity;
    stack[sp++] = acc;
  }
  return stack[0];
}

namespace {

enum Prec { kOr = 1, kAnd, kNot, kCmp, kSum, kProd, kUnary, kAtom };

struct Text {
  std::string s;
  int prec;
};

bool is_number(const std::string& s) {
  if (s.empty()) return false;
  for (std::size_t i = s[0] == '-' ? 1 : 0; i < s.size(); ++i) if (s[i] < '0' || s[i] > '9') return false;
  return s != "-";
}

std::string wrap(const Text& t, int min_prec) { return t.prec < min_prec ? "(" + t.s + ")" : t.s; }

// Terms in order, constants last ("s0 + 1", like the export-side printer).
std::string join_sum(std::span<const Text> terms) {
  std::vector<Text> parts;
  for (const Text& t : terms) if (!is_number(t.s)) parts.push_back(t);
  for (const Text& t : terms) if (is_number(t.s)) parts.push_back(t);
  std::string out = wrap(parts[0], kSum);
  for (std::size_t i = 1; i < parts.size(); ++i) {
    const std::string p = wrap(parts[i], kSum + 1);
    if (!p.empty() && p[0] == '-') out += " - " + p.substr(1);
    else out += " + " + p;
  }
  return out;
}

const char* cmp_text(Op op) {
  switch (op) {
    case Op::Eq: return " == ";
    case Op::Ne: return " != ";
    case Op::Lt: return " < ";
    case Op::Le: return " <= ";
    case Op::Gt: return " > ";
    default: return " >= ";
  }
}

Text combine(Op op, std::span<const Text> args) {
  switch (op) {
    case Op::Add: return {join_sum(args), kSum};
    case Op::Mul: {
      if (args.size() == 2 && args[0].s == "-1") return {"-" + wrap(args[1], kUnary), kUnary};
      std::string out = wrap(args[0], kProd);
      for (std::size_t i = 1; i < args.size(); ++i) out += "*" + wrap(args[i], kProd + 1);
      return {out, kProd};
    }
    case Op::FloorDiv: return {"(" + wrap(args[0], kProd) + "//" + wrap(args[1], kProd + 1) + ")", kAtom};
    case Op::CeilDiv: return {"CeilDiv(" + args[0].s + ", " + args[1].s + ")", kAtom};
    case Op::Mod: return {wrap(args[0], kProd) + " % " + wrap(args[1], kProd + 1), kProd};
    case Op::Min:
    case Op::Max: {
      std::string out = op == Op::Min ? "Min(" : "Max(";
      for (std::size_t i = 0; i < args.size(); ++i) out += (i ? ", " : "") + args[i].s;
      return {out + ")", kAtom};
    }
    case Op::Neg: return {"-" + wrap(args[0], kUnary), kUnary};
    case Op::Not: return {"not " + wrap(args[0], kNot), kNot};
    case Op::And:
    case Op::Or: {
      const int p = op == Op::And ? kAnd : kOr;
      std::string out = wrap(args[0], p + 1);
      for (std::size_t i = 1; i < args.size(); ++i) out += (op == Op::And ? " and " : " or ") + wrap(args[i], p + 1);
      return {out, p};
    }
    default: return {wrap(args[0], kCmp + 1) + cmp_text(op) + wrap(args[1], kCmp + 1), kCmp};
  }
}

}  // namespace

std::string expr_to_string(const fb::Program& program, std::uint32_t id) {
  const auto* ref = program.exprs()->Get(id);
  std::vector<Text> stack;
  for (std::uint32_t t = ref->start(); t < ref->start() + ref->length(); ++t) {
    const auto* tok = program.expr_tokens()->Get(t);
    const Op op = tok->op();
    if (op == Op::Const) {
      stack.push_back({std::to_string(tok->value()), tok->value() < 0 ? kUnary : kAtom});
    } else if (op == Op::Sym) {
      stack.push_back({program.symbols()->Get(static_cast<std::uint32_t>(tok->value()))->name()->str(), kAtom});
    } else {
      const bool nary = op == Op::Add || op == Op::Mul || op == Op::Min || op == Op::Max || op == Op::And || op == Op::Or;
      const std::size_t arity = nary ? static_cast<std::size_t>(tok->value()) : (op == Op::Neg || op == Op::Not ? 1 : 2);
      Text t2 = combine(op, std::span<const Text>(stack).last(arity));
      stack.resize(stack.size() - arity);
      stack.push_back(std::move(t2));
    }
  }
  return stack.empty() ? std::string() : stack.back().s;
}

std::string shape_to_string(const fb::Program& program, std::string_view dtype,
                            std::span<const std::uint32_t> dims) {
  std::string out(dtype);
  out += "[";
  for (std::size_t i = 0; i < dims.size(); ++i) {
    if (i) out += ", ";
    out += expr_to_string(program, dims[i]);
  }
  return out + "]";
}

}  // namespace kiln

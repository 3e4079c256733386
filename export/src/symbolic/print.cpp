// Python-like printing with precedence-driven parentheses.
#include "kiln/export/symbolic/print.h"

#include <algorithm>
#include <ostream>

#include "kiln/export/symbolic/shape_env.h"
#include "symbolic/detail.h"

namespace kiln::sym {
namespace {

// Python precedence, loosest first.
enum Prec : int { kOr = 1, kAnd = 2, kNot = 3, kCompare = 4, kSum = 5, kProduct = 6, kUnary = 7, kPower = 8, kAtom = 9 };

struct Printed {
  std::string text;
  int prec;
};

class Printer {
 public:
  explicit Printer(const SymbolNamer& name) : name_(name) {}

  Printed print(Expr e) const;

 private:
  std::string wrap(Expr e, int min_prec) const {
    Printed p = print(e);
    return p.prec >= min_prec ? p.text : "(" + p.text + ")";
  }
  std::string magnitude(std::int64_t c) const {  // |c| without overflow
    const std::uint64_t m = c < 0 ? 0 - static_cast<std::uint64_t>(c) : static_cast<std::uint64_t>(c);
    return std::to_string(m);
  }
  std::string term(std::int64_t coef, Expr base) const;  // |coef| * base
  Printed sum(Expr e) const;
  Printed product(Expr e) const;
  Printed comparison(Expr e) const;
  Printed call(const char* fn, Expr e) const;
  Printed join(Expr e, const char* sep, int prec, int operand_prec = 0) const;
  std::string numerator(Expr e) const { return e.op() == ExprOp::Mod ? "(" + print(e).text + ")" : wrap(e, kProduct); }

  const SymbolNamer& name_;
};

std::string Printer::term(std::int64_t coef, Expr base) const {
  if (coef == 1 || coef == -1) return wrap(base, kSum + 1);
  return magnitude(coef) + "*" + (base.op() == ExprOp::Mul ? product(base).text : wrap(base, kProduct + 1));
}

Printed Printer::sum(Expr e) const {
  std::string out;
  std::vector<std::int64_t> constants;  // one, except in a sum whose fold overflowed
  for (Expr a : e.args()) {
    if (auto c = a.constant_value()) {
      constants.push_back(*c);
      continue;
    }
    const detail::Term t = detail::split_term(a);
    const bool leading_minus = out.empty() && t.coef < 0;
    out += out.empty() ? (t.coef < 0 ? "-" : "") : (t.coef < 0 ? " - " : " + ");
    // `-s0 % 4` would read as `(-s0) % 4` in Python.
    out += leading_minus && t.base.op() == ExprOp::Mod && (t.coef == -1) ? "(" + term(t.coef, t.base) + ")"
                                                                          : term(t.coef, t.base);
  }
  for (std::int64_t c : constants) {
    out += out.empty() ? std::to_string(c) : (c < 0 ? " - " : " + ") + magnitude(c);
  }
  return {out, kSum};
}

Printed Printer::product(Expr e) const {
  auto args = e.args();
  std::string out;
  std::size_t i = 0;
  if (auto c = args[0].constant_value()) {
    out = *c == -1 ? "-" : std::to_string(*c) + "*";
    i = 1;
  }
  bool first = true;
  while (i < args.size()) {
    std::size_t j = i;
    while (j < args.size() && args[j] == args[i]) ++j;
    if (!first) out += "*";
    out += wrap(args[i], j - i > 1 ? kAtom : kProduct + 1);
    if (j - i > 1) out += "**" + std::to_string(j - i);
    first = false;
    i = j;
  }
  return {out, kProduct};
}

Printed Printer::comparison(Expr e) const {
  static const char* const kOps[] = {" == ", " != ", " < ", " <= ", " > ", " >= "};
  const char* op = kOps[static_cast<int>(e.op()) - static_cast<int>(ExprOp::Eq)];
  Expr lhs = e.args()[0], rhs = e.args()[1];
  if (rhs.constant_value() == 0 && lhs.op() == ExprOp::Add && !lhs.args()[0].is_constant()) {
    detail::LinearForm pos, neg;  // e - f OP 0  prints as  e OP f
    bool safe = true;
    for (Expr a : lhs.args()) {
      const detail::Term t = detail::split_term(a);
      auto m = t.coef > 0 ? std::optional<std::int64_t>(t.coef) : detail::checked_neg(t.coef);
      safe = safe && m.has_value();
      if (m) (t.coef > 0 ? pos : neg).terms.push_back({*m, t.base});
    }
    if (safe && !neg.terms.empty() && !pos.terms.empty()) {
      lhs = detail::from_linear(pos);
      rhs = detail::from_linear(neg);
    }
  }
  return {wrap(lhs, kCompare + 1) + op + wrap(rhs, kCompare + 1), kCompare};
}

Printed Printer::call(const char* fn, Expr e) const {
  std::string out = std::string(fn) + "(";
  for (std::size_t i = 0; i < e.args().size(); ++i) out += (i ? ", " : "") + print(e.args()[i]).text;
  return {out + ")", kAtom};
}

Printed Printer::join(Expr e, const char* sep, int prec, int operand_prec) const {
  std::string out;
  const int min_prec = std::max(prec + 1, operand_prec);
  for (std::size_t i = 0; i < e.args().size(); ++i) out += (i ? sep : "") + wrap(e.args()[i], min_prec);
  return {out, prec};
}

Printed Printer::print(Expr e) const {
  auto args = e.args();
  switch (e.op()) {
    case ExprOp::Const:
      if (auto b = e.bool_value()) return {*b ? "True" : "False", kAtom};
      return {std::to_string(*e.constant_value()), *e.constant_value() < 0 ? kUnary : kAtom};
    case ExprOp::Sym: return {name_(e.symbol_id()), kAtom};
    case ExprOp::Add: return sum(e);
    case ExprOp::Mul: return product(e);
    case ExprOp::FloorDiv: return {"(" + numerator(args[0]) + "//" + wrap(args[1], kProduct + 1) + ")", kAtom};
    case ExprOp::Mod: return {numerator(args[0]) + " % " + wrap(args[1], kProduct + 1), kProduct};
    case ExprOp::CeilDiv: return call("CeilDiv", e);
    case ExprOp::Min: return call("Min", e);
    case ExprOp::Max: return call("Max", e);
    case ExprOp::Neg: return {"-" + wrap(args[0], kUnary), kUnary};
    case ExprOp::Not: return {"not " + wrap(args[0], kAtom), kNot};
    case ExprOp::And: return join(e, " and ", kAnd);
    case ExprOp::Or: return join(e, " or ", kOr, kNot);  // parenthesize a nested `and`
    default: return comparison(e);
  }
}

}  // namespace

std::string to_string(Expr e, const SymbolNamer& name) { return Printer(name).print(e).text; }

std::ostream& operator<<(std::ostream& os, Expr e) { return os << to_string(e); }

std::string to_string(Expr e, const ShapeEnv* env) {
  return to_string(e, [env](int id) {
    return env && env->is_valid_symbol(id) ? env->symbol(id).name : "sym" + std::to_string(id);
  });
}

}  // namespace kiln::sym

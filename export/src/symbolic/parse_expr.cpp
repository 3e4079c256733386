// parse_expr: the Python-like printed form (print.h, PyTorch messages) to canonical Exprs.
// Precedence climbing, loosest first: or, and, not, comparisons, + -, * // %, unary -, **.
#include "kiln/export/symbolic/parse.h"
#include "symbolic/lexer.h"

namespace kiln::sym {
namespace {

using detail::LexToken;
using detail::TokenKind;
using detail::TokenStream;

constexpr int kMaxDepth = 256;

class ExprParser {
 public:
  ExprParser(TokenStream ts, const SymbolResolver& resolve) : ts_(std::move(ts)), resolve_(resolve) {}

  Result<Expr> parse_all() {
    KILN_ASSIGN_OR_RETURN(Expr e, disjunction(0));
    if (ts_.peek().kind != TokenKind::End) return ts_.error("unexpected " + TokenStream::describe(ts_.peek()));
    return e;
  }

 private:
  Result<Expr> binary(ExprOp op, std::size_t offset, Expr a, Expr b) {
    return detail::build_at(ts_, offset, op, {a, b});
  }

  Result<Expr> disjunction(int depth) {
    if (depth > kMaxDepth) return ts_.error("nesting deeper than " + std::to_string(kMaxDepth));
    KILN_ASSIGN_OR_RETURN(Expr e, conjunction(depth));
    while (ts_.is("or") || ts_.is("|")) {
      const std::size_t at = ts_.next().offset;
      KILN_ASSIGN_OR_RETURN(Expr r, conjunction(depth));
      KILN_ASSIGN_OR_RETURN(e, binary(ExprOp::Or, at, e, r));
    }
    return e;
  }

  Result<Expr> conjunction(int depth) {
    KILN_ASSIGN_OR_RETURN(Expr e, negation(depth));
    while (ts_.is("and") || ts_.is("&")) {
      const std::size_t at = ts_.next().offset;
      KILN_ASSIGN_OR_RETURN(Expr r, negation(depth));
      KILN_ASSIGN_OR_RETURN(e, binary(ExprOp::And, at, e, r));
    }
    return e;
  }

  Result<Expr> negation(int depth) {
    if (ts_.is("not") || ts_.is("~")) {
      const std::size_t at = ts_.next().offset;
      if (depth > kMaxDepth) return ts_.error("nesting deeper than " + std::to_string(kMaxDepth));
      KILN_ASSIGN_OR_RETURN(Expr e, negation(depth + 1));
      return detail::build_at(ts_, at, ExprOp::Not, {e});
    }
    return comparison(depth);
  }

  std::optional<ExprOp> comparison_op() const {
    static constexpr std::pair<std::string_view, ExprOp> kOps[] = {
        {"==", ExprOp::Eq}, {"!=", ExprOp::Ne}, {"<", ExprOp::Lt},
        {"<=", ExprOp::Le}, {">", ExprOp::Gt},  {">=", ExprOp::Ge}};
    for (const auto& [text, op] : kOps) {
      if (ts_.peek().kind == TokenKind::Punct && ts_.peek().text == text) return op;
    }
    return std::nullopt;
  }

  // Python chains comparisons: a < b <= c means a < b and b <= c.
  Result<Expr> comparison(int depth) {
    KILN_ASSIGN_OR_RETURN(Expr left, sum(depth));
    std::vector<Expr> parts;
    while (auto op = comparison_op()) {
      const std::size_t at = ts_.next().offset;
      KILN_ASSIGN_OR_RETURN(Expr right, sum(depth));
      KILN_ASSIGN_OR_RETURN(Expr c, binary(*op, at, left, right));
      parts.push_back(c);
      left = right;
    }
    if (parts.empty()) return left;
    return detail::build_at(ts_, ts_.peek().offset, ExprOp::And, parts);
  }

  Result<Expr> sum(int depth) {
    KILN_ASSIGN_OR_RETURN(Expr e, product(depth));
    while (ts_.is("+") || ts_.is("-")) {
      const LexToken t = ts_.next();
      KILN_ASSIGN_OR_RETURN(Expr r, product(depth));
      if (t.text == "-") {
        KILN_ASSIGN_OR_RETURN(r, detail::build_at(ts_, t.offset, ExprOp::Neg, {r}));
      }
      KILN_ASSIGN_OR_RETURN(e, binary(ExprOp::Add, t.offset, e, r));
    }
    return e;
  }

  Result<Expr> product(int depth) {
    KILN_ASSIGN_OR_RETURN(Expr e, unary(depth));
    while (ts_.is("*") || ts_.is("//") || ts_.is("%")) {
      const LexToken t = ts_.next();
      KILN_ASSIGN_OR_RETURN(Expr r, unary(depth));
      const ExprOp op = t.text == "*" ? ExprOp::Mul : t.text == "//" ? ExprOp::FloorDiv : ExprOp::Mod;
      KILN_ASSIGN_OR_RETURN(e, binary(op, t.offset, e, r));
    }
    return e;
  }

  Result<Expr> unary(int depth) {
    if (ts_.is("-") || ts_.is("+")) {
      const LexToken t = ts_.next();
      if (depth > kMaxDepth) return ts_.error("nesting deeper than " + std::to_string(kMaxDepth));
      KILN_ASSIGN_OR_RETURN(Expr e, unary(depth + 1));
      if (t.text == "+") return e;
      return detail::build_at(ts_, t.offset, ExprOp::Neg, {e});
    }
    KILN_ASSIGN_OR_RETURN(Expr base, atom(depth));
    if (!ts_.is("**")) return base;
    const std::size_t at = ts_.next().offset;
    KILN_ASSIGN_OR_RETURN(Expr exponent, unary(depth + 1));
    auto k = exponent.constant_value();
    if (!k) return ts_.error_at(at, "unsupported non-constant exponent", StatusCode::kUnsupported);
    return detail::power(ts_, at, base, *k);
  }

  Result<Expr> atom(int depth) {
    const LexToken t = ts_.next();
    if (t.kind == TokenKind::Int) {
      auto v = detail::parse_magnitude(t.text, false);
      if (!v) return ts_.error_at(t.offset, "integer " + std::string(t.text) + " out of int64 range");
      return Expr::constant(*v);
    }
    if (t.kind == TokenKind::Punct && t.text == "(") {
      KILN_ASSIGN_OR_RETURN(Expr e, disjunction(depth + 1));
      KILN_RETURN_IF_ERROR(ts_.expect(")"));
      return e;
    }
    if (t.kind != TokenKind::Ident) return ts_.error_at(t.offset, "unexpected " + TokenStream::describe(t));
    if (t.text == "True" || t.text == "true") return Expr::boolean(true);
    if (t.text == "False" || t.text == "false") return Expr::boolean(false);
    if (!ts_.accept("(")) {
      auto id = resolve_(t.text);
      if (!id) return ts_.error_at(t.offset, "unknown symbol '" + std::string(t.text) + "'");
      return Expr::symbol(*id);
    }
    std::vector<Expr> args;
    if (!ts_.accept(")")) {
      do {
        KILN_ASSIGN_OR_RETURN(Expr a, disjunction(depth + 1));
        args.push_back(a);
      } while (ts_.accept(","));
      KILN_RETURN_IF_ERROR(ts_.expect(")"));
    }
    auto op = detail::function_op(t.text);
    if (!op) return ts_.error_at(t.offset, "unknown function '" + std::string(t.text) + "'", StatusCode::kUnsupported);
    return detail::build_at(ts_, t.offset, *op, std::move(args));
  }

  TokenStream ts_;
  const SymbolResolver& resolve_;
};

}  // namespace

Result<Expr> parse_expr(std::string_view text, const SymbolResolver& resolve_symbol) {
  KILN_ASSIGN_OR_RETURN(auto tokens, detail::lex(text, "[parse_expr]"));
  return ExprParser(TokenStream(std::move(tokens), "[parse_expr]"), resolve_symbol).parse_all();
}

}  // namespace kiln::sym

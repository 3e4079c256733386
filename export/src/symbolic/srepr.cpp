// parse_srepr: sympy srepr strings (torch.export .pt2 "expr_str") to canonical Exprs.
#include "kiln/export/symbolic/parse.h"
#include "symbolic/lexer.h"

namespace kiln::sym {
namespace {

using detail::LexToken;
using detail::TokenKind;
using detail::TokenStream;

constexpr int kMaxDepth = 256;

class SreprParser {
 public:
  SreprParser(TokenStream ts, const SymbolResolver& resolve) : ts_(std::move(ts)), resolve_(resolve) {}

  Result<Expr> parse_all() {
    KILN_ASSIGN_OR_RETURN(Expr e, value(0));
    if (ts_.peek().kind != TokenKind::End) return ts_.error("trailing input " + TokenStream::describe(ts_.peek()));
    return e;
  }

 private:
  Status unsupported(std::size_t offset, const std::string& what) {
    return ts_.error_at(offset, what, StatusCode::kUnsupported);
  }

  Result<Expr> value(int depth) {
    if (depth > kMaxDepth) return ts_.error("nesting deeper than " + std::to_string(kMaxDepth));
    const LexToken head = ts_.next();
    if (head.kind != TokenKind::Ident) return ts_.error_at(head.offset, "expected a sympy expression, found " + TokenStream::describe(head));
    const std::string_view n = head.text;
    if (!ts_.accept("(")) return bare_name(head);
    if (n == "Symbol") return symbol(head);
    if (n == "Integer") return integer();
    if (n == "BooleanTrue" || n == "BooleanFalse") {
      KILN_RETURN_IF_ERROR(ts_.expect(")"));
      return Expr::boolean(n == "BooleanTrue");
    }
    if (n == "CeilToInt" || n == "FloorToInt") return rounded_division(head, depth);
    if (n == "Rational" || n == "Float" || n == "Half" || n == "IntTrueDiv" || n == "TruncToInt" || n == "ToFloat" ||
        n == "FloatTrueDiv" || n == "RoundToInt" || n == "RoundDecimal") {
      return unsupported(head.offset, "unsupported sympy function '" + std::string(n) + "' (no exact integer meaning)");
    }
    KILN_ASSIGN_OR_RETURN(std::vector<Expr> args, arguments(depth));
    if (n == "Pow") return pow(head, args);
    if (n == "Identity" && args.size() == 1) return args[0];
    if (n == "ModularIndexing" && args.size() == 3) {
      KILN_ASSIGN_OR_RETURN(Expr q, detail::build_at(ts_, head.offset, ExprOp::FloorDiv, {args[0], args[1]}));
      return detail::build_at(ts_, head.offset, ExprOp::Mod, {q, args[2]});
    }
    if (auto op = detail::function_op(n)) return detail::build_at(ts_, head.offset, *op, std::move(args));
    return unsupported(head.offset, "unknown sympy function '" + std::string(n) + "'");
  }

  Result<Expr> bare_name(const LexToken& head) {
    const std::string_view n = head.text;
    if (n == "true" || n == "True" || n == "S.true") return Expr::boolean(true);
    if (n == "false" || n == "False" || n == "S.false") return Expr::boolean(false);
    if (n == "oo" || n == "int_oo" || n == "zoo" || n == "nan" || n == "S.Infinity" || n == "S.IntInfinity") {
      return unsupported(head.offset, "unsupported infinity '" + std::string(n) + "'");
    }
    return ts_.error_at(head.offset, "unexpected name '" + std::string(n) + "'");
  }

  Result<Expr> symbol(const LexToken& head) {
    const LexToken name = ts_.next();
    if (name.kind != TokenKind::String) return ts_.error_at(name.offset, "Symbol needs a quoted name");
    KILN_RETURN_IF_ERROR(skip_keywords());
    auto id = resolve_(name.text);
    if (!id) return ts_.error_at(head.offset, "unknown symbol '" + std::string(name.text) + "'");
    return Expr::symbol(*id);
  }

  Status skip_keywords() {  // `, integer=True, positive=True)`
    while (ts_.accept(",")) {
      const LexToken key = ts_.next();
      if (key.kind != TokenKind::Ident) return ts_.error_at(key.offset, "expected keyword argument");
      KILN_RETURN_IF_ERROR(ts_.expect("="));
      const LexToken v = ts_.next();
      if (v.kind == TokenKind::End) return ts_.error_at(v.offset, "missing keyword value");
    }
    return ts_.expect(")");
  }

  Result<Expr> integer() {
    KILN_ASSIGN_OR_RETURN(std::int64_t v, detail::parse_int(ts_));
    KILN_RETURN_IF_ERROR(ts_.expect(")"));
    return Expr::constant(v);
  }

  Result<std::vector<Expr>> arguments(int depth) {
    std::vector<Expr> args;
    if (ts_.accept(")")) return args;
    do {
      if (ts_.peek().kind == TokenKind::Ident && ts_.peek(1).kind == TokenKind::Punct && ts_.peek(1).text == "=") {
        ts_.next();  // keyword argument such as evaluate=False: ignored
        ts_.next();
        ts_.next();
        continue;
      }
      KILN_ASSIGN_OR_RETURN(Expr a, value(depth + 1));
      args.push_back(a);
    } while (ts_.accept(","));
    KILN_RETURN_IF_ERROR(ts_.expect(")"));
    return args;
  }

  // CeilToInt(IntTrueDiv(a, b)) -> CeilDiv(a, b); FloorToInt(IntTrueDiv(a, b)) -> FloorDiv(a, b).
  Result<Expr> rounded_division(const LexToken& head, int depth) {
    if (!(ts_.peek().text == "IntTrueDiv" && ts_.peek(1).text == "(")) {
      return unsupported(head.offset, std::string(head.text) + " is only supported around IntTrueDiv(a, b)");
    }
    const std::size_t inner = ts_.next().offset;
    ts_.next();
    KILN_ASSIGN_OR_RETURN(std::vector<Expr> args, arguments(depth + 1));
    KILN_RETURN_IF_ERROR(ts_.expect(")"));
    if (args.size() != 2) return ts_.error_at(inner, "IntTrueDiv takes 2 operands");
    const ExprOp op = head.text == "CeilToInt" ? ExprOp::CeilDiv : ExprOp::FloorDiv;
    return detail::build_at(ts_, head.offset, op, std::move(args));
  }

  Result<Expr> pow(const LexToken& head, const std::vector<Expr>& args) {
    if (args.size() != 2) return ts_.error_at(head.offset, "Pow takes 2 operands");
    auto k = args[1].constant_value();
    if (!k) return unsupported(head.offset, "Pow with a non-constant exponent");
    return detail::power(ts_, head.offset, args[0], *k);
  }

  TokenStream ts_;
  const SymbolResolver& resolve_;
};

}  // namespace

Result<Expr> parse_srepr(std::string_view text, const SymbolResolver& resolve_symbol) {
  KILN_ASSIGN_OR_RETURN(auto tokens, detail::lex(text, "[parse_srepr]"));
  return SreprParser(TokenStream(std::move(tokens), "[parse_srepr]"), resolve_symbol).parse_all();
}

}  // namespace kiln::sym

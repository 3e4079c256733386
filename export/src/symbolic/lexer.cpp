// Tokenizer shared by the two expression parsers.
#include "symbolic/lexer.h"

#include <cctype>
#include <charconv>
#include <limits>
#include <utility>

namespace kiln::sym::detail {
namespace {

bool is_ident_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool is_ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.'; }

}  // namespace

Result<std::vector<LexToken>> lex(std::string_view text, const char* who) {
  static constexpr std::string_view kPairs[] = {"//", "**", "==", "!=", "<=", ">="};
  static constexpr std::string_view kSingles = "(),=+-*/%<>!&|~";
  std::vector<LexToken> out;
  std::size_t i = 0;
  while (i < text.size()) {
    const char c = text[i];
    const std::size_t start = i;
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
    } else if (is_ident_start(c)) {
      while (i < text.size() && is_ident_char(text[i])) ++i;
      out.push_back({TokenKind::Ident, text.substr(start, i - start), start});
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
      out.push_back({TokenKind::Int, text.substr(start, i - start), start});
    } else if (c == '\'' || c == '"') {
      const std::size_t close = text.find(c, i + 1);
      if (close == std::string_view::npos) {
        return Status(StatusCode::kInvalidInput, std::string(who) + " offset " + std::to_string(start) + ": unterminated string");
      }
      out.push_back({TokenKind::String, text.substr(i + 1, close - i - 1), start});
      i = close + 1;
    } else {
      std::string_view p = text.substr(i, 1);
      for (std::string_view pair : kPairs) {
        if (text.substr(i, 2) == pair) p = pair;
      }
      if (p.size() == 1 && kSingles.find(c) == std::string_view::npos) {
        return Status(StatusCode::kInvalidInput, std::string(who) + " offset " + std::to_string(start) +
                                                     ": unexpected character '" + std::string(1, c) + "'");
      }
      out.push_back({TokenKind::Punct, p, start});
      i += p.size();
    }
  }
  out.push_back({TokenKind::End, {}, text.size()});
  return out;
}

std::optional<std::int64_t> parse_magnitude(std::string_view digits, bool negative) {
  std::uint64_t magnitude = 0;
  auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), magnitude);
  const std::uint64_t limit = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) + (negative ? 1 : 0);
  if (digits.empty() || ec != std::errc() || ptr != digits.data() + digits.size() || magnitude > limit) return std::nullopt;
  return static_cast<std::int64_t>(negative ? 0 - magnitude : magnitude);  // C++20: modular conversion
}

Result<std::int64_t> parse_int(TokenStream& ts) {
  const std::size_t offset = ts.peek().offset;
  const bool negative = ts.accept("-");
  const LexToken t = ts.next();
  if (t.kind != TokenKind::Int) return ts.error_at(t.offset, "expected an integer, found " + TokenStream::describe(t));
  auto v = parse_magnitude(t.text, negative);
  if (!v) return ts.error_at(offset, "integer " + std::string(negative ? "-" : "") + std::string(t.text) + " out of int64 range");
  return *v;
}

std::optional<ExprOp> function_op(std::string_view name) {
  static constexpr std::pair<std::string_view, ExprOp> kTable[] = {
      {"Add", ExprOp::Add},           {"Mul", ExprOp::Mul},
      {"Max", ExprOp::Max},           {"Min", ExprOp::Min},
      {"FloorDiv", ExprOp::FloorDiv}, {"CleanDiv", ExprOp::FloorDiv},
      {"CeilDiv", ExprOp::CeilDiv},   {"Mod", ExprOp::Mod},
      {"PythonMod", ExprOp::Mod},     {"Eq", ExprOp::Eq},
      {"Equality", ExprOp::Eq},       {"Ne", ExprOp::Ne},
      {"Unequality", ExprOp::Ne},     {"Lt", ExprOp::Lt},
      {"StrictLessThan", ExprOp::Lt}, {"Le", ExprOp::Le},
      {"LessThan", ExprOp::Le},       {"Gt", ExprOp::Gt},
      {"StrictGreaterThan", ExprOp::Gt}, {"Ge", ExprOp::Ge},
      {"GreaterThan", ExprOp::Ge},    {"And", ExprOp::And},
      {"Or", ExprOp::Or},             {"Not", ExprOp::Not},
  };
  for (const auto& [n, op] : kTable) {
    if (n == name) return op;
  }
  return std::nullopt;
}

Result<Expr> build_at(TokenStream& ts, std::size_t offset, ExprOp op, std::vector<Expr> args) {
  auto r = try_build(op, 0, args);
  if (!r.ok()) return ts.error_at(offset, r.status().message());
  if (r->depth() > kMaxExprDepth) return ts.error_at(offset, "expression deeper than " + std::to_string(kMaxExprDepth));
  return r;
}

Result<Expr> power(TokenStream& ts, std::size_t offset, Expr base, std::int64_t exponent) {
  if (exponent < 0 || exponent > 64) {
    return ts.error_at(offset, "unsupported exponent " + std::to_string(exponent) + " (only 0..64)", StatusCode::kUnsupported);
  }
  if (exponent == 0) return Expr::constant(1);
  return build_at(ts, offset, ExprOp::Mul, std::vector<Expr>(static_cast<std::size_t>(exponent), base));
}

}  // namespace kiln::sym::detail

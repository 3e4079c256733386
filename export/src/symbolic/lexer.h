// The tokenizer and helpers shared by parse_srepr and parse_expr.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/base/status.h"
#include "kiln/export/symbolic/expr.h"

namespace kiln::sym::detail {

enum class TokenKind : std::uint8_t { Ident, Int, String, Punct, End };

struct LexToken {
  TokenKind kind;
  std::string_view text;  // identifier / digits / string contents / punctuation
  std::size_t offset;
};

/// Splits `text` into tokens (ending with an End token). Punctuation: ( ) , = + - * / % < > !
/// & | ~ and the pairs // ** == != <= >=. Strings use ' or " without escapes.
/// Errors name `who` ("[parse_srepr]") and the offset.
Result<std::vector<LexToken>> lex(std::string_view text, const char* who);

/// A cursor over tokens with error helpers.
class TokenStream {
 public:
  TokenStream(std::vector<LexToken> tokens, const char* who) : tokens_(std::move(tokens)), who_(who) {}

  const LexToken& peek(std::size_t ahead = 0) const {
    return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)];
  }
  const LexToken& next() {
    const LexToken& t = peek();
    if (pos_ + 1 < tokens_.size()) ++pos_;
    return t;
  }
  bool is(std::string_view punct_or_ident) const {
    return (peek().kind == TokenKind::Punct || peek().kind == TokenKind::Ident) && peek().text == punct_or_ident;
  }
  bool accept(std::string_view p) {
    if (!is(p)) return false;
    next();
    return true;
  }
  Status expect(std::string_view p) {
    if (accept(p)) return Status::Ok();
    return error("expected '" + std::string(p) + "', found " + describe(peek()));
  }
  Status error(const std::string& what, StatusCode code = StatusCode::kInvalidInput) const {
    return error_at(peek().offset, what, code);
  }
  Status error_at(std::size_t offset, const std::string& what, StatusCode code = StatusCode::kInvalidInput) const {
    return Status(code, std::string(who_) + " offset " + std::to_string(offset) + ": " + what);
  }
  static std::string describe(const LexToken& t) {
    return t.kind == TokenKind::End ? std::string("end of input") : "'" + std::string(t.text) + "'";
  }

 private:
  std::vector<LexToken> tokens_;
  std::size_t pos_ = 0;
  const char* who_;
};

/// Digits to int64 (negated when `negative`); nullopt when out of range.
std::optional<std::int64_t> parse_magnitude(std::string_view digits, bool negative);

/// Results deeper than this are rejected by build_at (bounds recursion on hostile text).
inline constexpr std::uint32_t kMaxExprDepth = 1024;

/// Parses an optionally negative integer literal (`-` then Int token) into int64.
Result<std::int64_t> parse_int(TokenStream& ts);

/// The op a named function maps to (`Max`, `FloorDiv`, `StrictLessThan`, `Eq`, ...).
std::optional<ExprOp> function_op(std::string_view name);

/// try_build with the error re-labelled for the parser at `offset`.
Result<Expr> build_at(TokenStream& ts, std::size_t offset, ExprOp op, std::vector<Expr> args);

/// `base` multiplied by itself `exponent` times (0 <= exponent <= 64).
Result<Expr> power(TokenStream& ts, std::size_t offset, Expr base, std::int64_t exponent);

}  // namespace kiln::sym::detail

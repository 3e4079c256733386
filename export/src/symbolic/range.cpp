// Interval arithmetic over int64 with infinite sentinels. Bounds are "extended" integers:
// kNegInf / kPosInf are infinities, everything else is finite.
#include "kiln/export/symbolic/range.h"

#include <algorithm>
#include <initializer_list>
#include <vector>

#include "symbolic/detail.h"

namespace kiln::sym {
namespace {

bool is_inf(std::int64_t x) { return x == kNegInf || x == kPosInf; }
std::int64_t inf_with_sign(bool negative) { return negative ? kNegInf : kPosInf; }

std::int64_t ext_neg(std::int64_t x) {
  if (x == kNegInf) return kPosInf;
  if (x == kPosInf) return kNegInf;
  return -x;
}

// `lower`: the sum is a lower bound, so -inf wins over +inf (and vice versa).
std::int64_t ext_add(std::int64_t a, std::int64_t b, bool lower) {
  if (is_inf(a) || is_inf(b)) {
    const std::int64_t wins = lower ? kNegInf : kPosInf;
    if (a == wins || b == wins) return wins;
    return is_inf(a) ? a : b;
  }
  auto s = detail::checked_add(a, b);
  return s ? *s : inf_with_sign(a < 0);
}

std::int64_t ext_mul(std::int64_t a, std::int64_t b) {
  if (a == 0 || b == 0) return 0;
  const bool negative = (a < 0) != (b < 0);
  if (is_inf(a) || is_inf(b)) return inf_with_sign(negative);
  auto p = detail::checked_mul(a, b);
  return p ? *p : inf_with_sign(negative);
}

ValueRange hull(std::initializer_list<std::int64_t> values) {
  return {std::min(values), std::max(values)};
}

// floor(x / y) candidates for y >= 1 (y may be +inf): one value, or two for inf / inf.
void floordiv_corner(std::int64_t x, std::int64_t y, std::vector<std::int64_t>& out) {
  if (y == kPosInf) {
    if (is_inf(x)) out.push_back(x);
    out.push_back(x >= 0 ? 0 : -1);
  } else if (is_inf(x)) {
    out.push_back(x);
  } else {
    out.push_back(*detail::py_floordiv(x, y));
  }
}

// a // b for b >= 1.
ValueRange floordiv_positive(const ValueRange& a, const ValueRange& b) {
  std::vector<std::int64_t> c;
  for (std::int64_t x : {a.lo, a.hi}) {
    for (std::int64_t y : {b.lo, b.hi}) floordiv_corner(x, y, c);
  }
  return {*std::min_element(c.begin(), c.end()), *std::max_element(c.begin(), c.end())};
}

// a % b for b >= 1.
ValueRange mod_positive(const ValueRange& a, const ValueRange& b) {
  const std::int64_t top = b.hi == kPosInf ? kPosInf : b.hi - 1;
  if (a.lo >= 0 && a.hi != kPosInf && a.hi < b.lo) return a;
  if (b.is_point() && !is_inf(a.lo) && !is_inf(a.hi) &&
      *detail::py_floordiv(a.lo, b.lo) == *detail::py_floordiv(a.hi, b.lo)) {
    return {*detail::py_mod(a.lo, b.lo), *detail::py_mod(a.hi, b.lo)};
  }
  if (a.lo >= 0) return {0, std::min(a.hi, top)};
  return {0, top};
}

// Applies `positive` to the parts of b above and below zero (negated) and unites them.
template <typename F>
ValueRange split_divisor(const ValueRange& a, const ValueRange& b, F positive, bool negate_result) {
  std::optional<ValueRange> out;
  if (b.hi >= 1) out = positive(a, ValueRange{std::max<std::int64_t>(b.lo, 1), b.hi});
  if (b.lo <= -1) {
    const ValueRange nb{ext_neg(std::min<std::int64_t>(b.hi, -1)), ext_neg(b.lo)};
    ValueRange r = positive(range_neg(a), nb);
    if (negate_result) r = range_neg(r);
    out = out ? unite(*out, r) : r;
  }
  return out ? *out : ValueRange::unbounded();
}

}  // namespace

std::string to_string(const ValueRange& r) {
  if (r.is_empty()) return "[]";
  auto bound = [](std::int64_t v) {
    return v == kNegInf ? std::string("-inf") : v == kPosInf ? std::string("inf") : std::to_string(v);
  };
  return "[" + bound(r.lo) + ", " + bound(r.hi) + "]";
}

ValueRange intersect(const ValueRange& a, const ValueRange& b) {
  return {std::max(a.lo, b.lo), std::min(a.hi, b.hi)};
}
ValueRange unite(const ValueRange& a, const ValueRange& b) {
  if (a.is_empty()) return b;
  if (b.is_empty()) return a;
  return {std::min(a.lo, b.lo), std::max(a.hi, b.hi)};
}

ValueRange range_add(const ValueRange& a, const ValueRange& b) {
  return {ext_add(a.lo, b.lo, true), ext_add(a.hi, b.hi, false)};
}
ValueRange range_neg(const ValueRange& a) { return {ext_neg(a.hi), ext_neg(a.lo)}; }
ValueRange range_sub(const ValueRange& a, const ValueRange& b) { return range_add(a, range_neg(b)); }
ValueRange range_mul(const ValueRange& a, const ValueRange& b) {
  return hull({ext_mul(a.lo, b.lo), ext_mul(a.lo, b.hi), ext_mul(a.hi, b.lo), ext_mul(a.hi, b.hi)});
}

ValueRange range_floordiv(const ValueRange& a, const ValueRange& b) {
  // a // b == (-a) // (-b) for b < 0.
  return split_divisor(a, b, floordiv_positive, false);
}
ValueRange range_ceildiv(const ValueRange& a, const ValueRange& b) {
  return range_neg(range_floordiv(range_neg(a), b));
}
ValueRange range_mod(const ValueRange& a, const ValueRange& b) {
  // a % b == -((-a) % (-b)) for b < 0.
  return split_divisor(a, b, mod_positive, true);
}
ValueRange range_min(const ValueRange& a, const ValueRange& b) {
  return {std::min(a.lo, b.lo), std::min(a.hi, b.hi)};
}
ValueRange range_max(const ValueRange& a, const ValueRange& b) {
  return {std::max(a.lo, b.lo), std::max(a.hi, b.hi)};
}

ValueRange range_lt(const ValueRange& a, const ValueRange& b) {
  if (a.hi < b.lo) return ValueRange::boolean(true);
  if (a.lo >= b.hi) return ValueRange::boolean(false);
  return ValueRange::boolean(std::nullopt);
}
ValueRange range_le(const ValueRange& a, const ValueRange& b) {
  if (a.hi <= b.lo) return ValueRange::boolean(true);
  if (a.lo > b.hi) return ValueRange::boolean(false);
  return ValueRange::boolean(std::nullopt);
}
ValueRange range_gt(const ValueRange& a, const ValueRange& b) { return range_lt(b, a); }
ValueRange range_ge(const ValueRange& a, const ValueRange& b) { return range_le(b, a); }
ValueRange range_eq(const ValueRange& a, const ValueRange& b) {
  if (a.is_point() && b.is_point() && a.lo == b.lo) return ValueRange::boolean(true);
  if (a.hi < b.lo || b.hi < a.lo) return ValueRange::boolean(false);
  return ValueRange::boolean(std::nullopt);
}
ValueRange range_ne(const ValueRange& a, const ValueRange& b) { return range_not(range_eq(a, b)); }

ValueRange range_and(const ValueRange& a, const ValueRange& b) {
  if (a.as_bool() == false || b.as_bool() == false) return ValueRange::boolean(false);
  if (a.as_bool() == true && b.as_bool() == true) return ValueRange::boolean(true);
  return ValueRange::boolean(std::nullopt);
}
ValueRange range_or(const ValueRange& a, const ValueRange& b) {
  if (a.as_bool() == true || b.as_bool() == true) return ValueRange::boolean(true);
  if (a.as_bool() == false && b.as_bool() == false) return ValueRange::boolean(false);
  return ValueRange::boolean(std::nullopt);
}
ValueRange range_not(const ValueRange& a) {
  auto v = a.as_bool();
  return ValueRange::boolean(v ? std::optional<bool>(!*v) : std::nullopt);
}

}  // namespace kiln::sym

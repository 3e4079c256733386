// Value ranges: closed integer intervals [lo, hi] with INT64_MIN / INT64_MAX standing for
// -infinity / +infinity (the bundle's convention, schema/kiln.fbs), and interval arithmetic
// for every expression op.
//
// Boolean ranges use the same type: [0, 0] = false, [1, 1] = true, [0, 1] = unknown.
//
// Every operation is sound (the result contains every value the op can produce from values
// in its inputs) and overflow-safe: a finite bound that would overflow saturates to the
// matching infinity, which only loosens the range. Division or modulo by a range that
// contains 0 ignores the zero divisor (a runtime error, not a value). Operations on an
// empty range (lo > hi) return some range; callers should check `is_empty()` first.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>

namespace kiln::sym {

inline constexpr std::int64_t kNegInf = std::numeric_limits<std::int64_t>::min();
inline constexpr std::int64_t kPosInf = std::numeric_limits<std::int64_t>::max();

struct ValueRange {
  std::int64_t lo = kNegInf;
  std::int64_t hi = kPosInf;

  static constexpr ValueRange unbounded() { return {kNegInf, kPosInf}; }
  static constexpr ValueRange point(std::int64_t v) { return {v, v}; }
  static constexpr ValueRange at_least(std::int64_t v) { return {v, kPosInf}; }
  static constexpr ValueRange at_most(std::int64_t v) { return {kNegInf, v}; }
  /// [0, inf): the range of a size.
  static constexpr ValueRange size() { return {0, kPosInf}; }
  /// true -> [1, 1], false -> [0, 0], nullopt (unknown) -> [0, 1].
  static constexpr ValueRange boolean(std::optional<bool> v) {
    return v ? ValueRange{*v ? 1 : 0, *v ? 1 : 0} : ValueRange{0, 1};
  }

  bool is_empty() const { return lo > hi; }
  bool is_bounded_below() const { return lo != kNegInf; }
  bool is_bounded_above() const { return hi != kPosInf; }
  /// A single finite value.
  bool is_point() const { return lo == hi && lo != kNegInf && hi != kPosInf; }
  bool contains(std::int64_t v) const { return lo <= v && v <= hi; }
  /// `other` lies within this range (an empty `other` always does).
  bool contains(const ValueRange& other) const { return other.is_empty() || (lo <= other.lo && other.hi <= hi); }
  /// For a boolean range: true / false when decided, nullopt when [0, 1].
  std::optional<bool> as_bool() const {
    if (lo >= 1) return true;
    if (hi <= 0) return false;
    return std::nullopt;
  }

  friend bool operator==(const ValueRange&, const ValueRange&) = default;
};

/// "[2, 1024]", "[0, inf]", "[-inf, -1]", "[]" when empty.
std::string to_string(const ValueRange& r);

ValueRange intersect(const ValueRange& a, const ValueRange& b);
/// The smallest range holding both (the convex hull).
ValueRange unite(const ValueRange& a, const ValueRange& b);

ValueRange range_add(const ValueRange& a, const ValueRange& b);
ValueRange range_sub(const ValueRange& a, const ValueRange& b);
ValueRange range_neg(const ValueRange& a);
ValueRange range_mul(const ValueRange& a, const ValueRange& b);
/// floor(a / b), Python semantics.
ValueRange range_floordiv(const ValueRange& a, const ValueRange& b);
/// ceil(a / b).
ValueRange range_ceildiv(const ValueRange& a, const ValueRange& b);
/// a % b, Python semantics (sign of b).
ValueRange range_mod(const ValueRange& a, const ValueRange& b);
ValueRange range_min(const ValueRange& a, const ValueRange& b);
ValueRange range_max(const ValueRange& a, const ValueRange& b);

// Comparisons: boolean ranges ([1,1] true, [0,0] false, [0,1] unknown).
ValueRange range_eq(const ValueRange& a, const ValueRange& b);
ValueRange range_ne(const ValueRange& a, const ValueRange& b);
ValueRange range_lt(const ValueRange& a, const ValueRange& b);
ValueRange range_le(const ValueRange& a, const ValueRange& b);
ValueRange range_gt(const ValueRange& a, const ValueRange& b);
ValueRange range_ge(const ValueRange& a, const ValueRange& b);
ValueRange range_and(const ValueRange& a, const ValueRange& b);
ValueRange range_or(const ValueRange& a, const ValueRange& b);
ValueRange range_not(const ValueRange& a);

}  // namespace kiln::sym

// ShapeEnv: the symbol table and the facts known about symbols while tracing.
//
// It owns the symbols (`s0, s1, ...` backed by example inputs, `u0, u1, ...` unbacked /
// data-dependent, see SEMANTICS.md), their value ranges, hints and user names, and the facts
// recorded about them:
//  * ranges, narrowed by `constrain_range` (a range shrunk to one value becomes a replacement);
//  * replacements: a symbol proven equal to an expression (`s1 := s0`, `s0 := 4`,
//    `s2 := 32*s0`); `simplify` substitutes them, and a replaced symbol never appears in a
//    simplified expression;
//  * divisibility: `e % k == 0` (`add_divisibility`); `s0 % 4 -> 0`, `(s0//4)*4 -> s0`, and
//    a symbol's range is rounded to multiples of its divisor;
//  * axioms: boolean facts that hold at run time because a runtime assert checks them
//    (`add_axiom(u0 >= 2)`). Single-symbol bounds, equalities and divisibility facts are
//    turned into the three kinds above; the rest are kept and used for exact matches,
//    bounds of compound expressions (`s0 + s1 <= 10`) and disjunctions.
//
// Queries (`simplify`, `bound`, `statically_known`, `evaluate_with_hints`, `analyze_guard`)
// never record anything: they are const and never add guards. Const calls may run
// concurrently; a mutating call needs exclusive access.
//
// Error convention: mutating calls return a non-ok Status (kExportError) when the new fact
// contradicts what is known ("symbol s0: range [5, 3] is empty"); the environment is then
// left exactly as it was before the call (mutations are transactional).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kiln/base/status.h"
#include "kiln/export/symbolic/expr.h"
#include "kiln/export/symbolic/range.h"

namespace kiln::sym {

/// Codes of `kiln.fb.SymbolKind`.
enum class SymbolKind : std::uint8_t {
  Backed = 0,    // a dynamic input size or int input; has a hint
  Unbacked = 1,  // a data-dependent value; no hint
};

struct SymbolInfo {
  std::string name;            // "s0", "u3": backed and unbacked are numbered separately
  SymbolKind kind = SymbolKind::Backed;
  ValueRange range;            // current range (narrowed by facts; rounded to `divisor`)
  std::optional<std::int64_t> hint;  // the example value (backed only)
  std::string user_name;       // the Dim name the user gave, if any
  bool is_size = false;        // created as a size (unbacked sizes start at [0, inf))
  std::int64_t divisor = 1;    // known: value % divisor == 0
};

/// What holding a boolean guard would teach about one symbol (see `analyze_guard`).
enum class GuardKind : std::uint8_t {
  AlwaysTrue,    // already decided by the known facts: nothing to record
  AlwaysFalse,   // contradicts the known facts
  Range,         // `symbol` must lie in `range` (already intersected with its current range)
  Divisibility,  // `symbol % divisor == 0`
  Replacement,   // `symbol == replacement` (a constant or an expression over other symbols)
  Other,         // anything else: record as an axiom / runtime assert
};

struct GuardAnalysis {
  GuardKind kind = GuardKind::Other;
  int symbol = -1;                 // Range, Divisibility, Replacement
  ValueRange range;                // Range (and Replacement by a constant: that point)
  std::int64_t divisor = 1;        // Divisibility
  Expr replacement;                // Replacement
};

class ShapeEnv {
 public:
  ShapeEnv() = default;

  // ---- symbols ---------------------------------------------------------------------------
  /// A new backed symbol named `s<k>` (k counts backed symbols) with range `range` and
  /// example value `hint`; `user_name` (may be empty) is the Dim name for messages.
  /// Errors (kExportError): empty range, or hint outside the range.
  Result<int> create_backed_symbol(std::string_view user_name, ValueRange range, std::int64_t hint);
  /// A new unbacked symbol named `u<k>`: range [0, inf) when `is_size`, else (-inf, inf).
  int create_unbacked_symbol(bool is_size);

  std::size_t num_symbols() const { return symbols_.size(); }
  /// Precondition: 0 <= id < num_symbols().
  const SymbolInfo& symbol(int id) const { return symbols_.at(static_cast<std::size_t>(id)); }
  bool is_valid_symbol(int id) const { return id >= 0 && static_cast<std::size_t>(id) < symbols_.size(); }
  /// Symbol id by name ("s0", "u2"); nullopt when unknown.
  std::optional<int> find_symbol(std::string_view name) const;

  /// Drops every symbol's example value (hint). Used to reason about a specialization
  /// (`s == 32`) that the example inputs do not satisfy: `replace` and `add_axiom` then no
  /// longer check facts against hints, and `evaluate_with_hints` returns nullopt.
  void forget_hints();

  // ---- facts -----------------------------------------------------------------------------
  /// Narrows the range of `sym` to its intersection with [lo, hi] (rounded to its divisor).
  /// A range narrowed to a single value also records the replacement `sym := value`.
  /// Errors: invalid symbol, or the intersection is empty.
  Status constrain_range(int sym, std::int64_t lo, std::int64_t hi);
  /// Records `sym == e` (int-typed). `e` is simplified first; the symbol's range, divisor and
  /// hint must agree with `e`. If `sym` already has a replacement the two are equated.
  /// Errors: invalid symbol, `e` mentions `sym` (cycle), contradiction with ranges / hint.
  Status replace(int sym, Expr e);
  /// Records `e % k == 0` (k >= 1). Errors: k < 1, or `e` is a constant not divisible by k,
  /// or a symbol's range holds no multiple of k.
  Status add_divisibility(Expr e, std::int64_t k);
  /// Records a boolean fact that holds at run time (a runtime assert, a `check`). Conjunctions
  /// are split. Errors: `fact` is not boolean, or it is statically false.
  Status add_axiom(Expr fact);

  /// The expression `sym` is replaced by (fully simplified); nullopt when none.
  std::optional<Expr> replacement(int sym) const;
  /// Recorded axioms that were not absorbed into ranges / replacements / divisibility.
  const std::vector<Expr>& axioms() const { return axioms_; }

  // ---- queries (const, record nothing) ---------------------------------------------------
  /// Applies replacements, divisibility facts, ranges (`Mod(x, k) -> x` when 0 <= x < k,
  /// `Max(1, s0) -> s0` when s0 >= 1) and axioms (a fact folds to true, its negation to false).
  Expr simplify(Expr e) const;
  /// Interval evaluation of `simplify(e)` over the symbol ranges; booleans give [0,1]-style
  /// ranges. Never empty for a consistent environment.
  ValueRange bound(Expr e) const;
  /// true / false when the facts decide the boolean `e`; nullopt when they do not (or `e` is
  /// an int expression). Never records a guard.
  std::optional<bool> statically_known(Expr e) const;
  bool statically_known_true(Expr e) const { return statically_known(e) == true; }
  /// `e` evaluated with each backed symbol's hint; nullopt when an unbacked symbol remains
  /// after simplification, or evaluation fails (division by zero, overflow).
  std::optional<std::int64_t> evaluate_with_hints(Expr e) const;
  /// Symbols of `simplify(e)`, ascending.
  std::vector<int> free_symbols(Expr e) const;

  /// Classifies what the boolean `guard` (assumed to hold) implies, for the tracer to tell
  /// "refines a range" from "must become a runtime assert". Handles, after simplification:
  ///  * `a*s + b CMP c` over one symbol (any of ==, !=, <, <=, >, >=; `!=` only at a range
  ///    edge) -> Range (or Replacement for ==);
  ///  * `s % k == 0` -> Divisibility;
  ///  * a linear equality with a unit-coefficient symbol (`s0 == s1`, `s2 == 32*s0`,
  ///    `s1 == s0 + 1`) -> Replacement of the highest-id such symbol;
  ///  * decided guards -> AlwaysTrue / AlwaysFalse; anything else -> Other.
  /// To analyze a guard that evaluated to false, pass `sym_not(guard)`.
  GuardAnalysis analyze_guard(Expr guard) const;

 private:
  struct QueryCache;
  Expr simplify_rec(Expr e, QueryCache& cache) const;
  Expr simplify_node(Expr e, QueryCache& cache) const;
  Expr simplify_bool(Expr e, QueryCache& cache) const;
  Expr cancel_exact_division(Expr e, QueryCache& cache) const;
  Expr drop_dominated(Expr e, QueryCache& cache) const;
  bool divisible(Expr x, std::int64_t k) const;
  ValueRange bound_rec(Expr e, QueryCache& cache) const;
  ValueRange bound_node(Expr e, QueryCache& cache) const;
  std::int64_t divisor_of(Expr e) const;
  bool is_axiom(Expr b) const;
  std::optional<std::pair<int, Expr>> solve_for_symbol(Expr lhs, std::int64_t rhs) const;
  template <typename F>
  Status transaction(F&& body);
  Status constrain_range_impl(int sym, std::int64_t lo, std::int64_t hi);
  Status replace_impl(int sym, Expr e);
  Status add_divisibility_impl(Expr e, std::int64_t k);
  Status add_axiom_impl(Expr fact);
  Status narrow_expression(Expr e, ValueRange r);
  Status apply_comparison(Expr fact);
  Status set_range(int sym, ValueRange r);
  Status refresh();

  std::vector<SymbolInfo> symbols_;
  int backed_count_ = 0;
  int unbacked_count_ = 0;
  std::unordered_map<int, Expr> replacements_;
  std::unordered_map<Expr, std::int64_t> expr_divisors_;  // non-symbol e: e % k == 0
  std::unordered_map<Expr, ValueRange> expr_bounds_;      // non-symbol e: e in range
  std::vector<Expr> axioms_;
  bool in_transaction_ = false;
};

}  // namespace kiln::sym

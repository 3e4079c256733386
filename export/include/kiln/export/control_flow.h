// Higher-order ops: data-dependent control flow and compile regions (SEMANTICS.md,
// "Higher-order ops"; the bundle's calling convention is in docs/FORMAT.md).
//
//   // cond: both branches are traced into subgraphs; the runtime runs the one `pred` picks.
//   Tensor y = kiln::cond(x.size(0) > 4,
//                         [](Tensor x) { return x * 2; },
//                         [](Tensor x) { return x.clone(); }, {x});
//
//   // while_loop: int carries become unbacked symbols; tensor carries keep their metadata.
//   auto [i, acc] = kiln::while_loop([](SymInt i, Tensor acc) { return i < 5; },
//                                    [](SymInt i, Tensor acc) { return std::make_tuple(i + 1, acc * 2); },
//                                    {SymInt(0), x});
//
//   // A compile region: traced once, every call site invokes the same subgraph.
//   kiln::CompileRegion block("block", [&](Tensor x, Tensor w) { return tanh(linear(x, w)) + x; });
//   for (auto& layer : layers) x = block(x, layer.weight);
//
// Functions passed here take Tensor / SymInt parameters (one per operand, in order) or one
// `const Values&`, and return a Tensor, a SymInt, a std::vector<Tensor>, a std::tuple of
// those, or Values (cond_fn: a SymBool, a bool, or a one-element bool tensor). They may use
// tensors and sizes they capture (module parameters too): those are lifted to explicit
// subgraph inputs. They may not update their inputs in place (`x.add_(1)`: "Higher order
// ops do not support input mutation") nor return an input as it is ("... aliasing":
// return `x.clone()`).
//
// Outside export_program the same code runs eagerly: cond runs the branch `pred` picks,
// while_loop iterates, a compile region calls its function.
//
// Errors are kiln::ExportError (export_program returns them as its Status) naming the op,
// the branch and the caller's source line.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "kiln/export/export.h"

namespace kiln {

/// The predicate of cond (and the result of a while_loop's cond_fn): a bool, a SymBool
/// (`x.size(0) > 4`; a statically known one runs its branch inline, recording no cond), or
/// a one-element bool tensor (`sum(x) > 0`).
class Predicate {
 public:
  Predicate(bool value, SourceLoc loc = SourceLoc::current()) : value_(SymBool(value, loc)) {}  // NOLINT: implicit
  Predicate(SymBool value) : value_(std::move(value)) {}                                       // NOLINT: implicit
  Predicate(Tensor value) : value_(std::move(value)) {}                                        // NOLINT: implicit

  bool is_tensor() const { return std::holds_alternative<Tensor>(value_); }
  const Tensor& tensor() const { return std::get<Tensor>(value_); }
  const SymBool& symbool() const { return std::get<SymBool>(value_); }

 private:
  std::variant<SymBool, Tensor> value_;
};

/// A traced function in its uniform form.
using SubgraphFn = std::function<Values(const Values&)>;
using PredicateFn = std::function<Predicate(const Values&)>;

struct WhileLoopOptions {
  /// The most iterations this loop may run; 0 leaves it to the runtime's limit
  /// (SessionOptions::max_loop_iterations, default 1,000,000). Exceeding it is an error.
  std::int64_t max_iterations = 0;
};

namespace detail {

// The untyped entry points (control_flow.cpp). `loc` is the user's call.
Values cond_impl(const Predicate& pred, const SubgraphFn& true_fn, const SubgraphFn& false_fn, const Values& operands,
                 const SourceLoc& loc);
Values while_loop_impl(const PredicateFn& cond_fn, const SubgraphFn& body_fn, const Values& carries,
                       const WhileLoopOptions& options, const SourceLoc& loc);

struct RegionState {
  std::string name;
  SubgraphFn fn;
};
Values invoke_region(const RegionState& region, const Values& operands, const SourceLoc& loc);

[[noreturn]] void arity_error(const char* what, std::size_t want, std::size_t got);

template <typename F, typename Tuple>
struct ApplyResult;
template <typename F, typename... A>
struct ApplyResult<F, std::tuple<A...>> {
  using type = std::invoke_result_t<F&, A...>;
};

/// What calling F returns (F takes typed parameters or one `const Values&`).
template <typename F, bool = std::is_invocable_v<F&, const Values&>>
struct ResultOf {
  using type = std::invoke_result_t<F&, const Values&>;
};
template <typename F>
struct ResultOf<F, false> {
  using type = typename ApplyResult<F, typename FnTraits<F>::Args>::type;
};
template <typename F>
using result_of_t = std::decay_t<typename ResultOf<F>::type>;

/// Calls `fn` with `in` spread over its typed parameters (or as is).
template <typename F>
auto invoke_with(F& fn, const Values& in, const char* what) {
  if constexpr (std::is_invocable_v<F&, const Values&>) {
    return fn(in);
  } else {
    using Args = typename FnTraits<F>::Args;
    constexpr std::size_t n = std::tuple_size_v<Args>;
    if (in.size() != n) arity_error(what, n, in.size());
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      return fn(std::get<std::tuple_element_t<I, Args>>(
          checked_arg(in, I, std::is_same_v<std::tuple_element_t<I, Args>, Tensor>))...);
    }(std::make_index_sequence<n>{});
  }
}

template <typename F>
SubgraphFn to_subgraph_fn(F fn, const char* what) {
  return [fn = std::move(fn), what](const Values& in) mutable {
    Values out;
    append_outputs(out, invoke_with(fn, in, what));
    return out;
  };
}

template <typename F>
PredicateFn to_predicate_fn(F fn, const char* what) {
  return [fn = std::move(fn), what](const Values& in) mutable { return Predicate(invoke_with(fn, in, what)); };
}

[[noreturn]] void result_error(const std::string& message);

template <typename T>
T value_as(const Values& v, std::size_t i) {
  if (i >= v.size() || !std::holds_alternative<T>(v[i])) {
    result_error("result " + std::to_string(i) + " is not a " + (std::is_same_v<T, Tensor> ? "Tensor" : "SymInt"));
  }
  return std::get<T>(v[i]);
}

/// Rebuilds the user's return type R from the flat outputs.
template <typename R>
R from_values(const Values& v) {
  if constexpr (std::is_same_v<R, Values>) {
    return v;
  } else if constexpr (std::is_same_v<R, Tensor> || std::is_same_v<R, SymInt>) {
    return value_as<R>(v, 0);
  } else if constexpr (std::is_same_v<R, std::vector<Tensor>>) {
    std::vector<Tensor> out;
    for (std::size_t i = 0; i < v.size(); ++i) out.push_back(value_as<Tensor>(v, i));
    return out;
  } else {
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      return R(value_as<std::decay_t<std::tuple_element_t<I, R>>>(v, I)...);
    }(std::make_index_sequence<std::tuple_size_v<R>>{});
  }
}

}  // namespace detail

/// Runs `true_fn(operands...)` if `pred` holds, else `false_fn(operands...)`. While tracing a
/// symbolic `pred`, both branches become subgraphs of one `cond` node: they must return the
/// same structure, dtypes and ranks; an output size that differs between them (or is
/// data-dependent in either) becomes a fresh unbacked symbol with the merged range.
/// Returns what `true_fn` returns (Tensor, SymInt, std::vector<Tensor>, tuple or Values).
template <typename TrueFn, typename FalseFn>
auto cond(const Predicate& pred, TrueFn true_fn, FalseFn false_fn, const Values& operands = {},
          SourceLoc loc = SourceLoc::current()) {
  using R = detail::result_of_t<TrueFn>;
  return detail::from_values<R>(detail::cond_impl(pred, detail::to_subgraph_fn(std::move(true_fn), "cond: true_fn"),
                                                  detail::to_subgraph_fn(std::move(false_fn), "cond: false_fn"), operands,
                                                  loc));
}

/// `while (cond_fn(carries...)) carries = body_fn(carries...);` returning the final carries.
/// While tracing, both functions become subgraphs of one `while_loop` node. body_fn returns
/// the carries in order: tensor carries keep their dtype and shape; int (SymInt) carries are
/// unbacked symbols inside the loop and after it. Returns what body_fn returns.
template <typename CondFn, typename BodyFn>
auto while_loop(CondFn cond_fn, BodyFn body_fn, const Values& carries, const WhileLoopOptions& options = {},
                SourceLoc loc = SourceLoc::current()) {
  using R = detail::result_of_t<BodyFn>;
  return detail::from_values<R>(detail::while_loop_impl(detail::to_predicate_fn(std::move(cond_fn), "while_loop: cond_fn"),
                                                        detail::to_subgraph_fn(std::move(body_fn), "while_loop: body_fn"),
                                                        carries, options, loc));
}

/// A function marked as a compile region: while tracing, every call records an
/// `invoke_subgraph` node calling one shared subgraph, so a block called from 24 layers is
/// stored once. Calls whose traces differ (other input shapes or dtypes) get one subgraph
/// each. Parameters the function captures are lifted to subgraph inputs, so layers with
/// different weights share the subgraph. Copies of a CompileRegion are the same region.
template <typename F>
class CompileRegion {
 public:
  CompileRegion(std::string name, F fn)
      : state_(std::make_shared<detail::RegionState>(
            detail::RegionState{std::move(name), detail::to_subgraph_fn(std::move(fn), "compile region")})) {}

  const std::string& name() const { return state_->name; }

  /// The first operand of a call; it records the caller's source line.
  struct FirstArg {
    FirstArg(const Tensor& t, SourceLoc l = SourceLoc::current()) : value(t), loc(l) {}  // NOLINT: implicit
    FirstArg(const SymInt& s, SourceLoc l = SourceLoc::current()) : value(s), loc(l) {}  // NOLINT: implicit
    FirstArg(std::int64_t v, SourceLoc l = SourceLoc::current()) : value(SymInt(v)), loc(l) {}  // NOLINT: implicit
    FirstArg(int v, SourceLoc l = SourceLoc::current()) : value(SymInt(v)), loc(l) {}  // NOLINT: implicit
    Value value;
    SourceLoc loc;
  };
  /// Calls the region with one operand per parameter of the function.
  template <typename... Rest>
  auto operator()(const FirstArg& first, const Rest&... rest) const {
    return call(Values{first.value, Value(rest)...}, first.loc);
  }
  /// Calls a region whose function takes no parameters (it captures what it uses).
  auto operator()(SourceLoc loc = SourceLoc::current()) const { return call(Values{}, loc); }
  /// Calls the region with its operands as Values (for a function taking `const Values&`).
  auto call(const Values& operands, SourceLoc loc = SourceLoc::current()) const {
    return detail::from_values<detail::result_of_t<F>>(detail::invoke_region(*state_, operands, loc));
  }

 private:
  std::shared_ptr<detail::RegionState> state_;
};

/// `auto block = kiln::compile_region("block", fn);`
template <typename F>
CompileRegion<F> compile_region(std::string name, F fn) {
  return CompileRegion<F>(std::move(name), std::move(fn));
}

}  // namespace kiln

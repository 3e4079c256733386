// export_program: trace model code into a strict graph with symbolic shapes.
//
//   auto batch = kiln::Dim("batch", 2, 1024);
//   kiln::Result<kiln::ExportedProgram> ep = kiln::export_program(
//       [&](kiln::Tensor x) { return mlp(x); },
//       {kiln::input("x", kiln::Tensor::randn({8, 64}), {batch})});
//   if (!ep.ok()) { std::cerr << ep.status().message(); return 7; }
//   std::cout << ep->print();
//   ep->save("mlp.kiln");
//
// The function may take Tensor and SymInt parameters (one per input, in order) or a
// single `const Values&`, and return a Tensor, a SymInt, a std::vector<Tensor>, a
// std::tuple of those, or Values. State buffers the function uses (Module::register_buffer
// with {.state = true}) become the program's state tensors (module.h).
#pragma once

#include <functional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "kiln/export/dim.h"
#include "kiln/export/ir.h"
#include "kiln/export/serialize.h"
#include "kiln/export/tensor.h"

namespace kiln {

/// One example input with its dynamic-shape spec.
struct ExampleInput {
  std::string name;
  bool is_int = false;
  Tensor tensor;                 // tensors
  std::int64_t int_value = 0;    // ints
  std::vector<Dim> dims;         // tensors: one per dim; missing trailing dims are STATIC
  Dim int_dim = Dim::STATIC;     // ints: STATIC, DYNAMIC or AUTO (a named Dim is an error)
};

ExampleInput input(std::string name, Tensor example, std::vector<Dim> dims = {});
ExampleInput int_input(std::string name, std::int64_t example, Dim dynamism = Dim::STATIC);

/// A model input or output: a tensor or a (symbolic) int.
using Value = std::variant<Tensor, SymInt>;
using Values = std::vector<Value>;
using ModelFn = std::function<Values(const Values&)>;

struct ExportOptions {
  std::string name = "model";
  /// Golden self-test cases to embed, computed by running the model code eagerly: case 0
  /// on the example inputs, later cases with fresh random values for floating inputs (same
  /// shapes). `kiln validate` replays them. With state buffers (module.h) the cases form a
  /// sequence: each runs on the state the previous one left, from the initial values.
  int self_tests = 1;
  double self_test_rtol = 1e-4;
  double self_test_atol = 1e-5;
};

class ExportedProgram {
 public:
  ExportedProgram() = default;
  explicit ExportedProgram(ir::Program program) : program_(std::move(program)) {}

  const ir::Program& program() const { return program_; }
  ir::Program& program() { return program_; }
  /// A readable listing in the spirit of PyTorch's print_readable: inputs with symbolic
  /// shapes, symbols and ranges, nodes with shapes and source lines, runtime asserts,
  /// specializations and subgraphs.
  std::string print() const;
  /// Writes the bundle atomically (see save_bundle).
  Status save(const std::string& path, const SaveOptions& options = {}) const;

 private:
  ir::Program program_;
};

Result<ExportedProgram> export_program(const ModelFn& fn, const std::vector<ExampleInput>& inputs,
                                       const ExportOptions& options = {});

namespace detail {

template <typename T>
struct FnTraits : FnTraits<decltype(&T::operator())> {};
template <typename C, typename R, typename... A>
struct FnTraits<R (C::*)(A...) const> {
  using Args = std::tuple<std::decay_t<A>...>;
};
template <typename C, typename R, typename... A>
struct FnTraits<R (C::*)(A...)> {
  using Args = std::tuple<std::decay_t<A>...>;
};

inline void append_outputs(Values& out, const Tensor& t) { out.emplace_back(t); }
inline void append_outputs(Values& out, const SymInt& s) { out.emplace_back(s); }
inline void append_outputs(Values& out, const Values& v) { out.insert(out.end(), v.begin(), v.end()); }
inline void append_outputs(Values& out, const std::vector<Tensor>& v) { for (const auto& t : v) out.emplace_back(t); }
template <typename... T>
void append_outputs(Values& out, const std::tuple<T...>& t) {
  std::apply([&](const auto&... e) { (append_outputs(out, e), ...); }, t);
}

Value checked_arg(const Values& in, std::size_t i, bool want_tensor);

template <typename F, typename Tuple, std::size_t... I>
Values call_typed(F& fn, const Values& in, std::index_sequence<I...>) {
  Values out;
  append_outputs(out, fn(std::get<std::tuple_element_t<I, Tuple>>(
                         checked_arg(in, I, std::is_same_v<std::tuple_element_t<I, Tuple>, Tensor>))...));
  return out;
}

}  // namespace detail

/// Typed convenience: `export_program([](Tensor x, SymInt n) { ... }, inputs)`.
template <typename F, typename = std::enable_if_t<!std::is_convertible_v<F, ModelFn> || !std::is_invocable_v<F, const Values&>>>
Result<ExportedProgram> export_program(F fn, const std::vector<ExampleInput>& inputs, const ExportOptions& options = {}) {
  using Args = typename detail::FnTraits<F>::Args;
  ModelFn wrapped = [fn](const Values& in) mutable {
    return detail::call_typed<F, Args>(fn, in, std::make_index_sequence<std::tuple_size_v<Args>>{});
  };
  return export_program(wrapped, inputs, options);
}

}  // namespace kiln

// cond, while_loop and compile regions (after Values and the typed-call helpers they use).
#include "kiln/export/control_flow.h"  // IWYU pragma: export

// The values model code computes with: Tensor, SymInt, SymBool.
//
// The same model code runs in two modes:
//  * tracing (inside export_program): tensors are graph values with symbolic shapes, and
//    every op records a node; sizes are SymInts over the ShapeEnv's symbols;
//  * eager (outside): tensors hold data and ops run the CPU reference kernels, so golden
//    outputs and self-tests come from the model code itself.
//
// Converting a SymBool to bool is a *guard*: during tracing the shape engine decides it
// (see SEMANTICS.md: no guard, a refined range, a runtime assert, or an export error).
// Errors during tracing are thrown as kiln::ExportError and returned by export_program as
// a Status; in eager mode they are thrown too (eager mode is a development tool).
#pragma once

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <optional>
#include <source_location>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "kiln/base/status.h"
#include "kiln/export/symbolic/expr.h"
#include "kiln/format/dtype.h"

namespace kiln {

using SourceLoc = std::source_location;

/// Thrown by tracing and eager ops; export_program turns it into its Status.
class ExportError : public std::runtime_error {
 public:
  ExportError(StatusCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  StatusCode code() const { return code_; }
  Status status() const { return Status(code_, what()); }

 private:
  StatusCode code_;
};

class SymBool;
struct Operand;

/// An integer that may be symbolic (during tracing) or concrete. Carries the source
/// location where it was created (e.g. the `x.size(0)` call) for guard messages.
class SymInt {
 public:
  SymInt(std::int64_t value = 0, SourceLoc loc = SourceLoc::current());  // NOLINT: implicit
  SymInt(int value, SourceLoc loc = SourceLoc::current()) : SymInt(std::int64_t{value}, loc) {}  // NOLINT
  SymInt(sym::Expr expr, SourceLoc loc, bool user_loc = true);

  const sym::Expr& expr() const { return expr_; }
  const SourceLoc& loc() const { return loc_; }
  /// False for SymInts created inside Kiln (e.g. int inputs): their loc is not the user's.
  bool has_user_loc() const { return user_loc_; }
  /// The value when it is a constant (always in eager mode), else nullopt.
  std::optional<std::int64_t> maybe_int() const { return expr_.constant_value(); }
  bool is_symbolic() const { return !expr_.is_constant(); }
  /// The value, specializing a symbolic int to its example value (a guard `s == hint`).
  std::int64_t guard_int(SourceLoc loc = SourceLoc::current()) const;

  SymInt& operator+=(const SymInt& o);
  SymInt& operator-=(const SymInt& o);
  SymInt& operator*=(const SymInt& o);

 private:
  sym::Expr expr_;
  SourceLoc loc_;
  bool user_loc_ = true;
};

SymInt operator+(const SymInt& a, const SymInt& b);
SymInt operator-(const SymInt& a, const SymInt& b);
SymInt operator*(const SymInt& a, const SymInt& b);
SymInt operator-(const SymInt& a);
/// Python semantics: floor division, modulo with the sign of the divisor.
SymInt floordiv(const SymInt& a, const SymInt& b);
SymInt operator/(const SymInt& a, const SymInt& b);  // floor division
SymInt operator%(const SymInt& a, const SymInt& b);
SymInt sym_min(const SymInt& a, const SymInt& b);
SymInt sym_max(const SymInt& a, const SymInt& b);

/// A boolean over symbolic ints. `if (b)` guards; see check() and guard_or_false() for
/// the non-guarding alternatives.
class SymBool {
 public:
  SymBool(bool value, SourceLoc loc = SourceLoc::current());  // NOLINT: implicit
  SymBool(sym::Expr expr, SourceLoc loc) : expr_(expr), loc_(loc) {}

  const sym::Expr& expr() const { return expr_; }
  const SourceLoc& loc() const { return loc_; }
  std::optional<bool> maybe_bool() const { return expr_.bool_value(); }
  /// A guard: decided by the shape engine during tracing (may record a constraint).
  explicit operator bool() const;

 private:
  sym::Expr expr_;
  SourceLoc loc_;
};

SymBool operator==(const SymInt& a, const SymInt& b);
SymBool operator!=(const SymInt& a, const SymInt& b);
SymBool operator<(const SymInt& a, const SymInt& b);
SymBool operator<=(const SymInt& a, const SymInt& b);
SymBool operator>(const SymInt& a, const SymInt& b);
SymBool operator>=(const SymInt& a, const SymInt& b);
SymBool operator&&(const SymBool& a, const SymBool& b);
SymBool operator||(const SymBool& a, const SymBool& b);
SymBool operator!(const SymBool& a);

namespace detail {
struct TensorImpl;
}

/// A tensor: a traced graph value (inside export_program) or eager data.
class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<detail::TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return impl_ != nullptr; }
  DType dtype() const;
  std::int64_t dim() const;
  /// Size of dim `d` (negative counts from the end). Symbolic during tracing.
  SymInt size(std::int64_t d, SourceLoc loc = SourceLoc::current()) const;
  std::vector<SymInt> sizes(SourceLoc loc = SourceLoc::current()) const;
  SymInt numel(SourceLoc loc = SourceLoc::current()) const;
  /// True for a value of the graph being traced; false for eager data (including
  /// parameters, which become bundle constants when a traced op uses them).
  bool is_traced() const;

  // Eager data access (precondition: !is_traced()).
  std::vector<std::int64_t> concrete_shape() const;
  const std::vector<std::uint8_t>& bytes() const;
  template <typename T>
  std::vector<T> to_vector() const {
    const auto& b = bytes();
    std::vector<T> out(b.size() / sizeof(T));
    if (!out.empty()) std::memcpy(out.data(), b.data(), out.size() * sizeof(T));
    return out;
  }

  /// Eager tensor from raw little-endian bytes (size must equal numel * dtype_size).
  static Tensor from_bytes(DType dtype, std::vector<std::int64_t> shape, std::vector<std::uint8_t> bytes);
  static Tensor from_floats(std::vector<std::int64_t> shape, std::span<const float> values);
  static Tensor from_ints(std::vector<std::int64_t> shape, std::span<const std::int64_t> values);
  static Tensor from_bools(std::vector<std::int64_t> shape, std::span<const bool> values);
  /// Deterministic pseudo-random normal values (for examples and initial weights).
  static Tensor randn(std::vector<std::int64_t> shape, std::uint64_t seed = 0);

  // Methods (the same ops as the free functions in ops.h).
  Tensor reshape(std::vector<SymInt> shape, SourceLoc loc = SourceLoc::current()) const;
  Tensor view(std::vector<SymInt> shape, SourceLoc loc = SourceLoc::current()) const;
  Tensor permute(std::vector<std::int64_t> dims, SourceLoc loc = SourceLoc::current()) const;
  Tensor transpose(std::int64_t a, std::int64_t b, SourceLoc loc = SourceLoc::current()) const;
  Tensor unsqueeze(std::int64_t d, SourceLoc loc = SourceLoc::current()) const;
  Tensor squeeze(std::int64_t d, SourceLoc loc = SourceLoc::current()) const;
  Tensor slice(std::int64_t d, SymInt start, SymInt end, std::int64_t step = 1, SourceLoc loc = SourceLoc::current()) const;
  Tensor expand(std::vector<SymInt> shape, SourceLoc loc = SourceLoc::current()) const;
  Tensor to(DType dtype, SourceLoc loc = SourceLoc::current()) const;
  Tensor sum(std::vector<std::int64_t> dims = {}, bool keepdim = false, SourceLoc loc = SourceLoc::current()) const;
  Tensor mean(std::vector<std::int64_t> dims = {}, bool keepdim = false, SourceLoc loc = SourceLoc::current()) const;
  SymInt item(SourceLoc loc = SourceLoc::current()) const;
  /// A copy: a new value with the same contents (`return x.clone()` from a cond branch
  /// instead of returning its input).
  Tensor clone(SourceLoc loc = SourceLoc::current()) const;

  /// In-place updates (see ops.h): this tensor, and every copy of this handle, refers to
  /// the result afterwards. Inside a cond branch, while_loop function or compile region
  /// updating an input (or a captured tensor) is an export error; so is updating a
  /// parameter or a non-state buffer while tracing (state buffers: module.h).
  Tensor& add_(const Operand& other, SourceLoc loc = SourceLoc::current());
  Tensor& sub_(const Operand& other, SourceLoc loc = SourceLoc::current());
  Tensor& mul_(const Operand& other, SourceLoc loc = SourceLoc::current());
  Tensor& div_(const Operand& other, SourceLoc loc = SourceLoc::current());
  Tensor& fill_(double value, SourceLoc loc = SourceLoc::current());
  Tensor& zero_(SourceLoc loc = SourceLoc::current());
  Tensor& copy_(const Tensor& src, SourceLoc loc = SourceLoc::current());
  Tensor& index_copy_(std::int64_t dim, const Tensor& index, const Tensor& source, SourceLoc loc = SourceLoc::current());
  Tensor& slice_scatter_(const Tensor& source, std::int64_t dim, SymInt start, SymInt end, std::int64_t step = 1,
                         SourceLoc loc = SourceLoc::current());
  Tensor& select_scatter_(const Tensor& source, std::int64_t dim, SymInt index, SourceLoc loc = SourceLoc::current());

  const std::shared_ptr<detail::TensorImpl>& impl() const { return impl_; }

 private:
  std::shared_ptr<detail::TensorImpl> impl_;
};

}  // namespace kiln

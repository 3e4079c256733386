// Shared plumbing for the CPU kernels (internal to runtime/src/backends/cpu/kernels/):
// argument checks that produce "[op] ..." Status messages, dtype dispatch. Element
// conversions live in convert.h, broadcasting in broadcast.h, the attribute readers (shared
// with the other backends) in kernel/attrs.h.
//
// Error vocabulary used by every kernel:
//   kInvalidBundle  shapes, ranks, dtypes or attributes inconsistent with the op (the
//                   bundle, or the caller that built the views, is wrong);
//   kInvalidInput   data-dependent failures (an index out of range, integer division by 0);
//   kUnsupported    a valid request this build cannot run (a dtype, a feature).
// Messages start with "[opname] " and name the offending values.
#pragma once

#include <array>
#include <concepts>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

#include "backends/cpu/kernel.h"

namespace kiln::cpu::kernels {

/// Elementwise ops split a flat run over the pool from this many elements (a relu of 64K
/// floats takes ~15 us, well above a pool dispatch).
inline constexpr std::int64_t kParallelElements = 65536;

using Inputs = std::span<const TensorView>;
using Outputs = std::span<TensorView>;
using Attrs = std::span<const AttrValue>;

// ---------------------------------------------------------------------------------------
// Messages. Only built on the error path.

/// Wraps dims so str_cat prints them as "[2, 3]".
struct ShapeText {
  std::span<const std::int64_t> dims;
};
inline ShapeText shape_text(const TensorView& v) { return {v.dims()}; }
inline ShapeText shape_text(std::span<const std::int64_t> dims) { return {dims}; }

/// The name of a value in messages, with an optional index, formatted only when a message
/// is built (never on the success path): Name("x") -> "x", Name("dims", 2) -> "dims[2]".
struct Name {
  Name(const char* b) : base(b) {}  // NOLINT: implicit by design
  Name(std::string_view b) : base(b) {}  // NOLINT
  Name(std::string_view b, std::int64_t i) : base(b), index(i) {}
  std::string_view base;
  std::int64_t index = -1;
};

void append_text(std::string& s, std::string_view v);
void append_text(std::string& s, double v);
void append_text(std::string& s, DType v);
void append_text(std::string& s, ShapeText v);
void append_text(std::string& s, const Name& v);
void append_text(std::string& s, std::int64_t v);
inline void append_text(std::string& s, const char* v) { append_text(s, std::string_view(v)); }
inline void append_text(std::string& s, const std::string& v) { append_text(s, std::string_view(v)); }
template <std::integral T>
  requires(!std::same_as<T, std::int64_t> && !std::same_as<T, char>)
void append_text(std::string& s, T v) {
  append_text(s, static_cast<std::int64_t>(v));
}
inline void append_text(std::string& s, float v) { append_text(s, static_cast<double>(v)); }

template <typename... Parts>
std::string str_cat(const Parts&... parts) {
  std::string s;
  (append_text(s, parts), ...);
  return s;
}

/// Status(code, "[op] " + parts...).
template <typename... Parts>
[[gnu::cold, gnu::noinline]] Status op_error(StatusCode code, std::string_view op,
                                             const Parts&... parts) {
  return Status(code, str_cat("[", op, "] ", parts...));
}
template <typename... Parts>
[[gnu::cold, gnu::noinline]] Status invalid(std::string_view op, const Parts&... parts) {
  return op_error(StatusCode::kInvalidBundle, op, parts...);
}
template <typename... Parts>
[[gnu::cold, gnu::noinline]] Status invalid_input(std::string_view op, const Parts&... parts) {
  return op_error(StatusCode::kInvalidInput, op, parts...);
}
template <typename... Parts>
[[gnu::cold, gnu::noinline]] Status unsupported(std::string_view op, const Parts&... parts) {
  return op_error(StatusCode::kUnsupported, op, parts...);
}
/// kUnsupported "[op] dtype i8 not supported (x)".
[[gnu::cold]] Status unsupported_dtype(std::string_view op, DType dtype, std::string_view what);

// ---------------------------------------------------------------------------------------
// Argument checks.

/// An optional input the caller left out: rank 0 and no data (a real 0-d tensor has one
/// element, so it always has data).
inline bool is_absent(const TensorView& v) { return v.rank == 0 && v.data == nullptr; }

/// What a kernel accepts; check_io validates the counts and every view against it.
struct IoSpec {
  int min_inputs = 0;
  int max_inputs = 0;   // -1: no upper bound
  int num_outputs = 1;  // -1: any number >= 1
  std::uint32_t optional_inputs = 0;  // bit i: input i may be absent (see is_absent)
  bool unallocated_outputs = false;   // outputs may arrive with data == nullptr
};

// The checks below are inline fast paths (they run on every kernel call; the per-op
// budget is ~100 ns) that call an out-of-line function only to build the error.

/// True for a view check_view accepts.
bool view_is_valid(const TensorView& v, bool allow_unallocated);
/// Validates one view: a known dtype, rank in [0, kMaxRank], dims >= 0, a running product
/// of dims (times the element size) that fits in int64, and data present whenever
/// numel > 0. After it passes, numel() and nbytes() cannot overflow.
Status check_view(std::string_view op, Name name, const TensorView& v, bool allow_unallocated = false);
/// Checks input/output counts against `spec` and every view with check_view.
Status check_io(std::string_view op, Inputs inputs, Outputs outputs, const IoSpec& spec);

/// kInvalidBundle unless v.dtype == dtype.
Status check_dtype(std::string_view op, Name name, const TensorView& v, DType dtype);
/// kInvalidBundle unless b has the shape of a.
Status check_same_shape(std::string_view op, std::string_view name_a, const TensorView& a,
                        std::string_view name_b, const TensorView& b);
/// kInvalidBundle unless out.dims() == expected.
Status check_out_shape(std::string_view op, const TensorView& out,
                       std::span<const std::int64_t> expected, Name name = "out");
/// kInvalidBundle unless 0 <= dim < rank.
Status check_dim(std::string_view op, Name what, std::int64_t dim, int rank);

// The error builders behind the inline checks.
[[gnu::cold]] Status view_error(std::string_view op, Name name, const TensorView& v, bool allow_unallocated);
[[gnu::cold]] Status io_error(std::string_view op, Inputs inputs, Outputs outputs, const IoSpec& spec);
[[gnu::cold]] Status dtype_error(std::string_view op, Name name, const TensorView& v, DType dtype);
[[gnu::cold]] Status same_shape_error(std::string_view op, std::string_view name_a, const TensorView& a,
                                      std::string_view name_b, const TensorView& b);
[[gnu::cold]] Status out_shape_error(std::string_view op, const TensorView& out,
                                     std::span<const std::int64_t> expected, Name name);
[[gnu::cold]] Status dim_error(std::string_view op, Name what, std::int64_t dim, int rank);

inline bool same_dims(std::span<const std::int64_t> a, std::span<const std::int64_t> b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i] != b[i]) return false;
  }
  return true;
}

inline Status check_view(std::string_view op, Name name, const TensorView& v, bool allow_unallocated) {
  if (view_is_valid(v, allow_unallocated)) [[likely]] return Status();
  return view_error(op, name, v, allow_unallocated);
}

inline Status check_io(std::string_view op, Inputs inputs, Outputs outputs, const IoSpec& spec) {
  const auto num_in = static_cast<int>(inputs.size());
  const auto num_out = static_cast<int>(outputs.size());
  bool ok = num_in >= spec.min_inputs && (spec.max_inputs < 0 || num_in <= spec.max_inputs) && num_out >= 1 &&
            (spec.num_outputs < 0 || num_out == spec.num_outputs);
  for (int i = 0; ok && i < num_in; ++i) {
    ok = (((spec.optional_inputs >> i) & 1u) != 0 && is_absent(inputs[i])) || view_is_valid(inputs[i], false);
  }
  for (int i = 0; ok && i < num_out; ++i) ok = view_is_valid(outputs[i], spec.unallocated_outputs);
  if (ok) [[likely]] return Status();
  return io_error(op, inputs, outputs, spec);
}

inline Status check_dtype(std::string_view op, Name name, const TensorView& v, DType dtype) {
  if (v.dtype == dtype) [[likely]] return Status();
  return dtype_error(op, name, v, dtype);
}

inline Status check_same_shape(std::string_view op, std::string_view name_a, const TensorView& a,
                               std::string_view name_b, const TensorView& b) {
  if (same_dims(a.dims(), b.dims())) [[likely]] return Status();
  return same_shape_error(op, name_a, a, name_b, b);
}

inline Status check_out_shape(std::string_view op, const TensorView& out, std::span<const std::int64_t> expected,
                              Name name) {
  if (same_dims(out.dims(), expected)) [[likely]] return Status();
  return out_shape_error(op, out, expected, name);
}

inline Status check_dim(std::string_view op, Name what, std::int64_t dim, int rank) {
  if (dim >= 0 && dim < rank) [[likely]] return Status();
  return dim_error(op, what, dim, rank);
}

/// Row-major element strides of `v`.
std::array<std::int64_t, kMaxRank> contiguous_strides(const TensorView& v);
/// Product of dims [begin, end).
/// Both are exact when v.numel() > 0; for empty views they may wrap, so kernels must not
/// loop over them then (every kernel returns early when it has nothing to write).
std::int64_t dims_product(const TensorView& v, int begin, int end);

// ---------------------------------------------------------------------------------------
// DType dispatch: CType<D> is the storage type of one element.

struct Half {
  std::uint16_t bits;
};
struct BFloat16 {
  std::uint16_t bits;
};

template <DType D>
struct DTypeTraits;
template <> struct DTypeTraits<DType::kF32> { using type = float; };
template <> struct DTypeTraits<DType::kF16> { using type = Half; };
template <> struct DTypeTraits<DType::kBF16> { using type = BFloat16; };
template <> struct DTypeTraits<DType::kF64> { using type = double; };
template <> struct DTypeTraits<DType::kI8> { using type = std::int8_t; };
template <> struct DTypeTraits<DType::kI16> { using type = std::int16_t; };
template <> struct DTypeTraits<DType::kI32> { using type = std::int32_t; };
template <> struct DTypeTraits<DType::kI64> { using type = std::int64_t; };
template <> struct DTypeTraits<DType::kU8> { using type = std::uint8_t; };
// Bools are stored as bytes and read as `byte != 0`: bundle bytes are hostile, and a
// `bool` holding 2 would be undefined behaviour.
template <> struct DTypeTraits<DType::kBool> { using type = std::uint8_t; };

template <DType D>
using CType = typename DTypeTraits<D>::type;

/// Calls f.template operator()<D>() for the D in Ds equal to `dtype`; false if none is.
///   dispatch<DType::kF32, DType::kI64>(x.dtype, [&]<DType D>() { run<CType<D>>(...); })
template <DType... Ds, typename F>
bool dispatch(DType dtype, F&& f) {
  return ((dtype == Ds && (f.template operator()<Ds>(), true)) || ...);
}

#define KILN_FLOAT_DTYPES ::kiln::DType::kF32, ::kiln::DType::kF64
#define KILN_INT_DTYPES ::kiln::DType::kI32, ::kiln::DType::kI64
#define KILN_ARITH_DTYPES KILN_FLOAT_DTYPES, KILN_INT_DTYPES
#define KILN_ALL_INT_DTYPES \
  ::kiln::DType::kI8, ::kiln::DType::kI16, KILN_INT_DTYPES, ::kiln::DType::kU8
#define KILN_NUMERIC_DTYPES KILN_FLOAT_DTYPES, KILN_ALL_INT_DTYPES
#define KILN_ALL_DTYPES                                                              \
  KILN_NUMERIC_DTYPES, ::kiln::DType::kF16, ::kiln::DType::kBF16, ::kiln::DType::kBool

inline bool is_half_dtype(DType d) { return d == DType::kF16 || d == DType::kBF16; }

/// dtype_size without a call (hot in argument checks); dtype must be valid.
inline std::size_t element_size(DType d) {
  constexpr std::uint8_t kSizes[kDTypeCount] = {4, 2, 2, 8, 1, 2, 4, 8, 1, 1};
  return kSizes[static_cast<int>(d)];
}

/// v != v for floating types, false for integers (without tautology warnings).
template <typename T>
inline bool is_nan(T v) {
  if constexpr (std::is_floating_point_v<T>) return v != v; else return false;
}

/// Runs `kernel` on f32 copies of every f16/bf16 input and output, then rounds the f32
/// outputs back. The fallback that gives float kernels f16/bf16 support (PyTorch's CPU
/// kernels also compute half types in float). Allocates; views must have passed check_io.
Status run_via_f32(KernelFn kernel, KernelContext& ctx, Inputs inputs, Outputs outputs,
                   Attrs attrs);
/// True if any view in inputs or outputs is f16/bf16 (absent optionals ignored).
bool has_half_views(Inputs inputs, Outputs outputs);

}  // namespace kiln::cpu::kernels

// GCC 12 at -O2 only vectorizes loops whose trip count is a known multiple of the vector
// width (the "very cheap" cost model); the element loops here have run-time lengths.
// (Only the cost model changes: flags such as math-errno must match between caller and
// callee or GCC stops inlining the <cmath> wrappers.) Clang vectorizes at -O2 anyway.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("vect-cost-model=dynamic")
#endif

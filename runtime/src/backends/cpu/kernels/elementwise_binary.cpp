// Binary elementwise kernels: arithmetic, comparisons, logical ops, with numpy
// broadcasting. Inputs share one dtype (the exporter inserts casts); f16/bf16 run through
// f32 copies. Integer arithmetic wraps (two's complement), as PyTorch's does.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "backends/cpu/kernels/broadcast.h"
#include "backends/cpu/kernels/common.h"
#include "backends/cpu/thread_pool.h"
#include "backends/cpu/kernels/kernels.h"
#include "kernel/attrs.h"

namespace kiln::cpu::kernels {
namespace {

// ---------------------------------------------------------------------------------------
// Loops

template <typename T, typename O, typename F>
void loop_vv(const T* a, const T* b, O* o, std::int64_t n, F f) {
  for (std::int64_t i = 0; i < n; ++i) o[i] = f(a[i], b[i]);
}
template <typename T, typename O, typename F>
void loop_vs(const T* a, T b, O* o, std::int64_t n, F f) {
  for (std::int64_t i = 0; i < n; ++i) o[i] = f(a[i], b);
}
template <typename T, typename O, typename F>
void loop_sv(T a, const T* b, O* o, std::int64_t n, F f) {
  for (std::int64_t i = 0; i < n; ++i) o[i] = f(a, b[i]);
}
template <typename T, typename O, typename F>
void loop_strided(const T* a, std::int64_t sa, const T* b, std::int64_t sb, O* o,
                  std::int64_t n, F f) {
  for (std::int64_t i = 0; i < n; ++i) o[i] = f(a[i * sa], b[i * sb]);
}

template <typename T, typename O, typename F>
inline void binary_row(const T* a, std::int64_t sa, const T* b, std::int64_t sb, O* o,
                       std::int64_t n, F f) {
  if (sa == 1 && sb == 1) {
    loop_vv(a, b, o, n, f);
  } else if (sa == 1 && sb == 0) {
    loop_vs(a, *b, o, n, f);
  } else if (sa == 0 && sb == 1) {
    loop_sv(*a, b, o, n, f);
  } else {
    loop_strided(a, sa, b, sb, o, n, f);
  }
}

template <typename T, typename O, typename F>
void run_binary(const BroadcastPlan& plan, const void* a, const void* b, void* out, F f) {
  const T* pa = static_cast<const T*>(a);
  const T* pb = static_cast<const T*>(b);
  O* po = static_cast<O*>(out);
  const std::int64_t len = plan.inner();
  const std::int64_t sa = plan.inner_stride(0);
  const std::int64_t sb = plan.inner_stride(1);
  if (plan.rank == 1) {
    if (plan.numel > 0) binary_row(pa, sa, pb, sb, po, len, f);
    return;
  }
  for_each_row<2>(plan, [&](const std::array<std::int64_t, 2>& off, std::int64_t row) {
    binary_row(pa + off[0], sa, pb + off[1], sb, po + row * len, len, f);
  });
}

// ---------------------------------------------------------------------------------------
// Element functions

// Unsigned arithmetic wraps without undefined behaviour; at least `unsigned` wide so that
// narrow types are not promoted to (overflowing) int.
template <typename T>
using Unsigned = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;

template <typename T>
inline T wrap_add(T a, T b) {
  return static_cast<T>(static_cast<Unsigned<T>>(a) + static_cast<Unsigned<T>>(b));
}
template <typename T>
inline T wrap_sub(T a, T b) {
  return static_cast<T>(static_cast<Unsigned<T>>(a) - static_cast<Unsigned<T>>(b));
}
template <typename T>
inline T wrap_mul(T a, T b) {
  return static_cast<T>(static_cast<Unsigned<T>>(a) * static_cast<Unsigned<T>>(b));
}

struct AddFn {
  template <typename T>
  T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>) return wrap_add(a, b); else return a + b;
  }
};
struct SubFn {
  template <typename T>
  T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>) return wrap_sub(a, b); else return a - b;
  }
};
struct MulFn {
  template <typename T>
  T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>) return wrap_mul(a, b); else return a * b;
  }
};
// NaN-propagating, like torch.maximum / torch.minimum.
struct MaximumFn {
  template <typename T>
  T operator()(T a, T b) const { return (a > b || is_nan(a)) ? a : b; }
};
struct MinimumFn {
  template <typename T>
  T operator()(T a, T b) const { return (a < b || is_nan(a)) ? a : b; }
};

// Integer quotient truncated toward zero; b != 0 (checked before the loop).
template <typename T>
inline T int_div_trunc(T a, T b) {
  return b == -1 ? wrap_sub(T(0), a) : static_cast<T>(a / b);
}
template <typename T>
inline T int_div_floor(T a, T b) {
  if (b == -1) return wrap_sub(T(0), a);
  const T q = static_cast<T>(a / b);
  return ((a % b) != 0 && ((a < 0) != (b < 0))) ? static_cast<T>(q - 1) : q;
}
// PyTorch's div_floor_floating: floor(a / b) computed so that it agrees with remainder.
template <typename T>
inline T float_div_floor(T a, T b) {
  if (b == 0) return a / b;
  const T mod = std::fmod(a, b);
  T div = (a - mod) / b;
  if (mod != 0 && ((b < 0) != (mod < 0))) div -= T(1);
  if (div == 0) return std::copysign(T(0), a / b);
  T floordiv = std::floor(div);
  if (div - floordiv > T(0.5)) floordiv += T(1);
  return floordiv;
}

struct RemainderFn {
  template <typename T>
  T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>) {
      if (b == -1) return T(0);
      const T r = static_cast<T>(a % b);
      return (r != 0 && ((r < 0) != (b < 0))) ? static_cast<T>(r + b) : r;
    } else {
      const T r = std::fmod(a, b);
      return (r != 0 && ((b < 0) != (r < 0))) ? r + b : r;
    }
  }
};

// Integer power by squaring (wrapping); negative exponents follow PyTorch's powi.
template <typename T>
inline T int_pow(T base, T exp) {
  if (exp < 0) {
    if (base == 1) return T(1);
    if (base == -1) return (exp & 1) ? T(-1) : T(1);
    return T(0);
  }
  T result = 1;
  while (exp != 0) {
    if (exp & 1) result = wrap_mul(result, base);
    base = wrap_mul(base, base);
    exp = static_cast<T>(exp >> 1);
  }
  return result;
}

struct PowFn {
  template <typename T>
  T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>) return int_pow(a, b); else return std::pow(a, b);
  }
};

// ---------------------------------------------------------------------------------------
// Kernel bodies

constexpr IoSpec kBinaryIo{.min_inputs = 2, .max_inputs = 2, .num_outputs = 1};

// Common checks: counts, views, equal input dtypes, broadcast shapes.
Status prepare(std::string_view op, Inputs in, Outputs out, BroadcastPlan& plan) {
  KILN_RETURN_IF_ERROR(check_io(op, in, out, kBinaryIo));
  if (in[0].dtype != in[1].dtype) {
    return unsupported(op, "mixed input dtypes a.dtype=", in[0].dtype, " and b.dtype=", in[1].dtype,
                       " (the exporter casts operands to one dtype)");
  }
  return plan_broadcast(op, {{&in[0], "a"}, {&in[1], "b"}}, out[0], true, plan);
}

bool has_zero(const TensorView& v) {
  bool zero = false;
  dispatch<KILN_ALL_INT_DTYPES>(v.dtype, [&]<DType D>() {
    const CType<D>* p = v.as<CType<D>>();
    const std::int64_t n = v.numel();
    for (std::int64_t i = 0; i < n && !zero; ++i) zero = p[i] == 0;
  });
  return zero;
}

// One operand [P, M, L] and the other [P, 1, L] (dims grouped: equal outer dims, a middle
// the second one broadcasts over, equal inner dims), L short: the channel scale of a
// squeeze-excitation block in the blocked layout ([N, C/8, H, W, 8] * [N, C/8, 1, 1, 8]),
// where the plan's rows would be L = 8 elements each. Returns false when the shapes are
// not of that form.
struct RowBroadcast {
  std::int64_t outer = 1, middle = 1, inner = 1;
  bool b_broadcasts = true;  // else a does
};
bool row_broadcast(const TensorView& a, const TensorView& b, const TensorView& out, RowBroadcast& r) {
  if (a.rank != b.rank || a.rank != out.rank || a.rank < 3) return false;
  const bool a_full = std::equal(a.shape.begin(), a.shape.begin() + a.rank, out.shape.begin());
  const bool b_full = std::equal(b.shape.begin(), b.shape.begin() + b.rank, out.shape.begin());
  if (a_full == b_full) return false;
  const TensorView& small = a_full ? b : a;
  r.b_broadcasts = a_full;
  int d = out.rank - 1;
  r.inner = 1;
  for (; d >= 0 && small.shape[d] == out.shape[d] && small.shape[d] != 1; --d) r.inner *= out.shape[d];
  r.middle = 1;
  for (; d >= 0 && small.shape[d] == 1; --d) r.middle *= out.shape[d];
  r.outer = 1;
  for (; d >= 0; --d) {
    if (small.shape[d] != out.shape[d]) return false;
    r.outer *= out.shape[d];
  }
  return r.inner > 1 && r.inner <= 64 && r.middle > 1;
}

// Output dtype == input dtype; T from `Ds`. kIntDivisor: integer b must hold no zero.
template <bool kIntDivisor, DType... Ds, typename F>
Status same_dtype_op(std::string_view op, KernelFn self, KernelContext& ctx, Inputs in, Outputs out,
                     Attrs attrs, F f) {
  if (in.size() == 2 && out.size() == 1 && has_half_views(in, out)) {
    KILN_RETURN_IF_ERROR(check_io(op, in, out, kBinaryIo));
    return run_via_f32(self, ctx, in, out, attrs);
  }
  BroadcastPlan plan;
  KILN_RETURN_IF_ERROR(prepare(op, in, out, plan));
  KILN_RETURN_IF_ERROR(check_dtype(op, "out", out[0], in[0].dtype));
  if (kIntDivisor && !dtype_is_floating(in[1].dtype) && plan.numel > 0 && has_zero(in[1])) {
    return invalid_input(op, "integer division by zero");
  }
  const bool ok = dispatch<Ds...>(in[0].dtype, [&]<DType D>() {
    using T = CType<D>;
    if (plan.rank == 1 && plan.numel >= kParallelElements) {
      // One flat run (same shapes, or a scalar operand): split it over the pool.
      const T* a = in[0].as<T>();
      const T* b = in[1].as<T>();
      T* o = out[0].as<T>();
      const std::int64_t sa = plan.inner_stride(0), sb = plan.inner_stride(1);
      ctx.pool().parallel_for(plan.numel, ctx.pool().even_grain(plan.numel, 1, kParallelElements / 2),
                              [&](std::int64_t begin, std::int64_t end) {
        binary_row(a + begin * sa, sa, b + begin * sb, sb, o + begin, end - begin, f);
      });
      return;
    }
    if (RowBroadcast r; std::is_floating_point_v<T> && row_broadcast(in[0], in[1], out[0], r)) {
      const T* full = (r.b_broadcasts ? in[0] : in[1]).template as<T>();
      const T* small = (r.b_broadcasts ? in[1] : in[0]).template as<T>();
      T* o = out[0].as<T>();
      const std::int64_t rows = r.outer * r.middle;
      ctx.pool().parallel_for(rows, ctx.pool().even_grain(rows, r.inner, kParallelElements / 2), [&](std::int64_t r0, std::int64_t r1) {
        for (std::int64_t row = r0; row < r1; ++row) {
          const T* v = small + (row / r.middle) * r.inner;
          const T* x = full + row * r.inner;
          T* y = o + row * r.inner;
          if (r.b_broadcasts) {
            for (std::int64_t i = 0; i < r.inner; ++i) y[i] = f(x[i], v[i]);
          } else {
            for (std::int64_t i = 0; i < r.inner; ++i) y[i] = f(v[i], x[i]);
          }
        }
      });
      return;
    }
    run_binary<T, T>(plan, in[0].data, in[1].data, out[0].data, f);
  });
  return ok ? Status::Ok() : unsupported_dtype(op, in[0].dtype, "a");
}

// Output bool. Bool inputs compare as 0/1 whatever byte they hold.
template <typename Cmp>
Status compare_op(std::string_view op, KernelFn self, KernelContext& ctx, Inputs in, Outputs out,
                  Attrs attrs, Cmp cmp) {
  if (in.size() == 2 && out.size() == 1 && has_half_views(in, out)) {
    KILN_RETURN_IF_ERROR(check_io(op, in, out, kBinaryIo));
    return run_via_f32(self, ctx, in, out, attrs);
  }
  BroadcastPlan plan;
  KILN_RETURN_IF_ERROR(prepare(op, in, out, plan));
  KILN_RETURN_IF_ERROR(check_dtype(op, "out", out[0], DType::kBool));
  const bool ok = dispatch<KILN_NUMERIC_DTYPES, DType::kBool>(in[0].dtype, [&]<DType D>() {
    using T = CType<D>;
    if constexpr (D == DType::kBool) {
      run_binary<T, std::uint8_t>(plan, in[0].data, in[1].data, out[0].data, [cmp](T a, T b) {
        return static_cast<std::uint8_t>(cmp(a != 0, b != 0));
      });
    } else {
      run_binary<T, std::uint8_t>(plan, in[0].data, in[1].data, out[0].data,
                                  [cmp](T a, T b) { return static_cast<std::uint8_t>(cmp(a, b)); });
    }
  });
  return ok ? Status::Ok() : unsupported_dtype(op, in[0].dtype, "a");
}

template <typename F>
Status logical_op(std::string_view op, Inputs in, Outputs out, F f) {
  BroadcastPlan plan;
  KILN_RETURN_IF_ERROR(prepare(op, in, out, plan));
  if (in[0].dtype != DType::kBool) return unsupported_dtype(op, in[0].dtype, "a; expects b8");
  KILN_RETURN_IF_ERROR(check_dtype(op, "out", out[0], DType::kBool));
  run_binary<std::uint8_t, std::uint8_t>(plan, in[0].data, in[1].data, out[0].data,
                                         [f](std::uint8_t a, std::uint8_t b) {
                                           return static_cast<std::uint8_t>(f(a != 0, b != 0));
                                         });
  return Status::Ok();
}

enum class RoundingMode { kNone, kTrunc, kFloor };

Result<RoundingMode> rounding_mode(Attrs attrs) {
  KILN_ASSIGN_OR_RETURN(std::string_view mode, attr_string("div", attrs, 0, "rounding_mode", true));
  if (mode.empty()) return RoundingMode::kNone;
  if (mode == "trunc") return RoundingMode::kTrunc;
  if (mode == "floor") return RoundingMode::kFloor;
  return invalid("div", "rounding_mode='", mode, "' is not 'trunc', 'floor' or absent");
}

Status int_true_div(const BroadcastPlan& plan, Inputs in, Outputs out) {
  const bool ok = dispatch<KILN_FLOAT_DTYPES>(out[0].dtype, [&]<DType O>() {
    dispatch<KILN_ALL_INT_DTYPES>(in[0].dtype, [&]<DType D>() {
      using T = CType<D>;
      using R = CType<O>;
      run_binary<T, R>(plan, in[0].data, in[1].data, out[0].data,
                       [](T a, T b) { return static_cast<R>(a) / static_cast<R>(b); });
    });
  });
  return ok ? Status::Ok() : unsupported_dtype("div", out[0].dtype, "out of integer division");
}

Status int_div(const BroadcastPlan& plan, Inputs in, Outputs out, RoundingMode mode) {
  if (mode == RoundingMode::kNone) {
    if (dtype_is_floating(out[0].dtype)) return int_true_div(plan, in, out);
    return invalid("div", "true division of ", in[0].dtype, " operands needs a floating out.dtype, got ",
                   out[0].dtype, " (integer quotients need rounding_mode 'trunc' or 'floor')");
  }
  KILN_RETURN_IF_ERROR(check_dtype("div", "out", out[0], in[0].dtype));
  if (plan.numel > 0 && has_zero(in[1])) return invalid_input("div", "integer division by zero");
  dispatch<KILN_ALL_INT_DTYPES>(in[0].dtype, [&]<DType D>() {
    using T = CType<D>;
    if (mode == RoundingMode::kFloor) {
      run_binary<T, T>(plan, in[0].data, in[1].data, out[0].data,
                       [](T a, T b) { return int_div_floor(a, b); });
    } else {
      run_binary<T, T>(plan, in[0].data, in[1].data, out[0].data,
                       [](T a, T b) { return int_div_trunc(a, b); });
    }
  });
  return Status::Ok();
}

Status float_div(const BroadcastPlan& plan, Inputs in, Outputs out, RoundingMode mode) {
  KILN_RETURN_IF_ERROR(check_dtype("div", "out", out[0], in[0].dtype));
  dispatch<KILN_FLOAT_DTYPES>(in[0].dtype, [&]<DType D>() {
    using T = CType<D>;
    const void* a = in[0].data;
    const void* b = in[1].data;
    if (mode == RoundingMode::kNone) {
      run_binary<T, T>(plan, a, b, out[0].data, [](T x, T y) { return x / y; });
    } else if (mode == RoundingMode::kTrunc) {
      run_binary<T, T>(plan, a, b, out[0].data, [](T x, T y) { return std::trunc(x / y); });
    } else {
      run_binary<T, T>(plan, a, b, out[0].data, [](T x, T y) { return float_div_floor(x, y); });
    }
  });
  return Status::Ok();
}

}  // namespace

Status Add(KernelContext& ctx, Inputs in, Outputs out, Attrs attrs) {
  return same_dtype_op<false, KILN_NUMERIC_DTYPES>("add", Add, ctx, in, out, attrs, AddFn{});
}
Status Sub(KernelContext& ctx, Inputs in, Outputs out, Attrs attrs) {
  return same_dtype_op<false, KILN_NUMERIC_DTYPES>("sub", Sub, ctx, in, out, attrs, SubFn{});
}
Status Mul(KernelContext& ctx, Inputs in, Outputs out, Attrs attrs) {
  return same_dtype_op<false, KILN_NUMERIC_DTYPES>("mul", Mul, ctx, in, out, attrs, MulFn{});
}
Status Maximum(KernelContext& ctx, Inputs in, Outputs out, Attrs attrs) {
  return same_dtype_op<false, KILN_NUMERIC_DTYPES>("maximum", Maximum, ctx, in, out, attrs, MaximumFn{});
}
Status Minimum(KernelContext& ctx, Inputs in, Outputs out, Attrs attrs) {
  return same_dtype_op<false, KILN_NUMERIC_DTYPES>("minimum", Minimum, ctx, in, out, attrs, MinimumFn{});
}
Status Pow(KernelContext& ctx, Inputs in, Outputs out, Attrs attrs) {
  return same_dtype_op<false, KILN_ARITH_DTYPES>("pow", Pow, ctx, in, out, attrs, PowFn{});
}

Status Remainder(KernelContext& ctx, Inputs in, Outputs out, Attrs attrs) {
  return same_dtype_op<true, KILN_ARITH_DTYPES>("remainder", Remainder, ctx, in, out, attrs,
                                                RemainderFn{});
}

Status Div(KernelContext& ctx, Inputs in, Outputs out, Attrs attrs) {
  if (in.size() == 2 && out.size() == 1 && has_half_views(in, out)) {
    KILN_RETURN_IF_ERROR(check_io("div", in, out, kBinaryIo));
    return run_via_f32(Div, ctx, in, out, attrs);
  }
  BroadcastPlan plan;
  KILN_RETURN_IF_ERROR(prepare("div", in, out, plan));
  KILN_ASSIGN_OR_RETURN(RoundingMode mode, rounding_mode(attrs));
  switch (in[0].dtype) {
    case DType::kF32:
    case DType::kF64: return float_div(plan, in, out, mode);
    case DType::kI8:
    case DType::kI16:
    case DType::kI32:
    case DType::kI64:
    case DType::kU8: return int_div(plan, in, out, mode);
    default: return unsupported_dtype("div", in[0].dtype, "a");
  }
}

Status Eq(KernelContext& ctx, Inputs in, Outputs out, Attrs attrs) {
  return compare_op("eq", Eq, ctx, in, out, attrs, [](auto a, auto b) { return a == b; });
}
Status Ne(KernelContext& ctx, Inputs in, Outputs out, Attrs attrs) {
  return compare_op("ne", Ne, ctx, in, out, attrs, [](auto a, auto b) { return a != b; });
}
Status Lt(KernelContext& ctx, Inputs in, Outputs out, Attrs attrs) {
  return compare_op("lt", Lt, ctx, in, out, attrs, [](auto a, auto b) { return a < b; });
}
Status Le(KernelContext& ctx, Inputs in, Outputs out, Attrs attrs) {
  return compare_op("le", Le, ctx, in, out, attrs, [](auto a, auto b) { return a <= b; });
}
Status Gt(KernelContext& ctx, Inputs in, Outputs out, Attrs attrs) {
  return compare_op("gt", Gt, ctx, in, out, attrs, [](auto a, auto b) { return a > b; });
}
Status Ge(KernelContext& ctx, Inputs in, Outputs out, Attrs attrs) {
  return compare_op("ge", Ge, ctx, in, out, attrs, [](auto a, auto b) { return a >= b; });
}

Status LogicalAnd(KernelContext&, Inputs in, Outputs out, Attrs) {
  return logical_op("logical_and", in, out, [](bool a, bool b) { return a && b; });
}
Status LogicalOr(KernelContext&, Inputs in, Outputs out, Attrs) {
  return logical_op("logical_or", in, out, [](bool a, bool b) { return a || b; });
}
Status LogicalXor(KernelContext&, Inputs in, Outputs out, Attrs) {
  return logical_op("logical_xor", in, out, [](bool a, bool b) { return a != b; });
}

}  // namespace kiln::cpu::kernels

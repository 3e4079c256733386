// Unary elementwise kernels. Output shape and dtype equal the input's (logical_not: bool).
// Transcendental f32 ops use the vectorized loops of simd.h; f64 uses libm; f16/bf16 run
// through f32 copies. Integer neg/abs wrap (abs(INT_MIN) == INT_MIN, as in PyTorch).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <type_traits>

#include "backends/cpu/kernels/common.h"
#include "backends/cpu/thread_pool.h"
#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/kernels/simd.h"
#include "kernel/attrs.h"

namespace kiln::cpu::kernels {
namespace {

constexpr IoSpec kUnaryIo{.min_inputs = 1, .max_inputs = 1, .num_outputs = 1};

template <typename T, typename O, typename F>
void map1(const void* x, void* y, std::int64_t n, F f) {
  const T* in = static_cast<const T*>(x);
  O* out = static_cast<O*>(y);
  for (std::int64_t i = 0; i < n; ++i) out[i] = f(in[i]);
}

// Counts, views, out.shape == x.shape, and (unless out_dtype is given) out.dtype == x.dtype.
Status prepare(std::string_view op, Inputs in, Outputs out, std::optional<DType> out_dtype = {}) {
  KILN_RETURN_IF_ERROR(check_io(op, in, out, kUnaryIo));
  KILN_RETURN_IF_ERROR(check_same_shape(op, "x", in[0], "out", out[0]));
  return check_dtype(op, "out", out[0], out_dtype.value_or(in[0].dtype));
}

// Runs f on every element for the dtypes Ds; f16/bf16 through f32.
template <DType... Ds, typename F>
Status unary_op(std::string_view op, KernelFn self, KernelContext& ctx, Inputs in, Outputs out,
                Attrs attrs, F f) {
  KILN_RETURN_IF_ERROR(prepare(op, in, out));
  if (is_half_dtype(in[0].dtype)) return run_via_f32(self, ctx, in, out, attrs);
  const std::int64_t n = in[0].numel();
  const bool ok = dispatch<Ds...>(in[0].dtype, [&]<DType D>() {
    using T = CType<D>;
    if (n < kParallelElements) return map1<T, T>(in[0].data, out[0].data, n, f);
    const T* x = in[0].as<T>();
    T* y = out[0].as<T>();
    ctx.pool().parallel_for(n, ctx.pool().even_grain(n, 1, kParallelElements / 2),
                            [&](std::int64_t begin, std::int64_t end) { map1<T, T>(x + begin, y + begin, end - begin, f); });
  });
  return ok ? Status::Ok() : unsupported_dtype(op, in[0].dtype, "x");
}

using SimdLoop = void (*const SimdKernels::*)(const float*, float*, std::int64_t);

// A float-only op with a vectorized f32 loop (simd.h) and a scalar f64 function.
template <typename F64>
Status simd_float_op(std::string_view op, KernelFn self, KernelContext& ctx, Inputs in,
                     Outputs out, Attrs attrs, SimdLoop loop, F64 f64) {
  KILN_RETURN_IF_ERROR(prepare(op, in, out));
  const std::int64_t n = in[0].numel();
  switch (in[0].dtype) {
    case DType::kF32: {
      const auto fn = simd().*loop;
      const float* x = in[0].as<float>();
      float* y = out[0].as<float>();
      if (n < kParallelElements / 4) return fn(x, y, n), Status::Ok();  // these loops cost ~10x a relu
      ctx.pool().parallel_for(n, ctx.pool().even_grain(n, 1, kParallelElements / 8),
                              [&](std::int64_t begin, std::int64_t end) { fn(x + begin, y + begin, end - begin); });
      return Status::Ok();
    }
    case DType::kF64: map1<double, double>(in[0].data, out[0].data, n, f64); return Status::Ok();
    case DType::kF16:
    case DType::kBF16: return run_via_f32(self, ctx, in, out, attrs);
    default: return unsupported_dtype(op, in[0].dtype, "x");
  }
}

template <typename T>
inline T wrap_neg(T v) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;
    return static_cast<T>(U(0) - static_cast<U>(v));
  } else {
    return -v;
  }
}

// Clamps a double bound into T's range, rounding toward the inside of the interval.
template <typename T>
T int_bound(double v, bool is_min) {
  const double r = is_min ? std::ceil(v) : std::floor(v);
  if (!(r > static_cast<double>(std::numeric_limits<T>::lowest()))) return std::numeric_limits<T>::lowest();
  if (r >= static_cast<double>(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
  return static_cast<T>(r);
}

template <typename T>
void clamp_loop(const TensorView& x, const TensorView& y, std::optional<double> lo,
                std::optional<double> hi) {
  const std::int64_t n = x.numel();
  if constexpr (std::is_floating_point_v<T>) {
    const T l = lo ? static_cast<T>(*lo) : -std::numeric_limits<T>::infinity();
    const T h = hi ? static_cast<T>(*hi) : std::numeric_limits<T>::infinity();
    map1<T, T>(x.data, y.data, n, [l, h](T v) {
      v = v < l ? l : v;
      return v > h ? h : v;
    });
  } else {
    const T l = lo ? int_bound<T>(*lo, true) : std::numeric_limits<T>::lowest();
    const T h = hi ? int_bound<T>(*hi, false) : std::numeric_limits<T>::max();
    map1<T, T>(x.data, y.data, n, [l, h](T v) {
      v = v < l ? l : v;
      return v > h ? h : v;
    });
  }
}

}  // namespace

Status Neg(KernelContext& ctx, Inputs in, Outputs out, Attrs attrs) {
  return unary_op<KILN_NUMERIC_DTYPES>("neg", Neg, ctx, in, out, attrs,
                                       [](auto v) { return wrap_neg(v); });
}

Status Abs(KernelContext& ctx, Inputs in, Outputs out, Attrs attrs) {
  return unary_op<KILN_NUMERIC_DTYPES>("abs", Abs, ctx, in, out, attrs, [](auto v) {
    using T = decltype(v);
    if constexpr (std::is_floating_point_v<T>) {
      return std::fabs(v);
    } else if constexpr (std::is_signed_v<T>) {
      return v < 0 ? wrap_neg(v) : v;
    } else {
      return v;
    }
  });
}

Status Relu(KernelContext& ctx, Inputs in, Outputs out, Attrs attrs) {
  // `v < 0 ? 0 : v` keeps NaN (torch.relu(nan) is nan).
  return unary_op<KILN_NUMERIC_DTYPES>("relu", Relu, ctx, in, out, attrs, [](auto v) {
    using T = decltype(v);
    if constexpr (std::is_unsigned_v<T>) return v; else return v < T(0) ? T(0) : v;
  });
}

Status Sign(KernelContext& ctx, Inputs in, Outputs out, Attrs attrs) {
  return unary_op<KILN_NUMERIC_DTYPES>("sign", Sign, ctx, in, out, attrs, [](auto v) {
    using T = decltype(v);
    if constexpr (std::is_unsigned_v<T>) {
      return static_cast<T>(v != 0);
    } else {
      return static_cast<T>(static_cast<int>(T(0) < v) - static_cast<int>(v < T(0)));
    }
  });
}

Status Exp(KernelContext& ctx, Inputs in, Outputs out, Attrs attrs) {
  return simd_float_op("exp", Exp, ctx, in, out, attrs, &SimdKernels::exp,
                       [](double v) { return std::exp(v); });
}
Status Tanh(KernelContext& ctx, Inputs in, Outputs out, Attrs attrs) {
  return simd_float_op("tanh", Tanh, ctx, in, out, attrs, &SimdKernels::tanh,
                       [](double v) { return std::tanh(v); });
}
Status Sigmoid(KernelContext& ctx, Inputs in, Outputs out, Attrs attrs) {
  return simd_float_op("sigmoid", Sigmoid, ctx, in, out, attrs, &SimdKernels::sigmoid,
                       [](double v) { return 1.0 / (1.0 + std::exp(-v)); });
}
Status Silu(KernelContext& ctx, Inputs in, Outputs out, Attrs attrs) {
  return simd_float_op("silu", Silu, ctx, in, out, attrs, &SimdKernels::silu,
                       [](double v) { return v / (1.0 + std::exp(-v)); });
}
Status Sqrt(KernelContext& ctx, Inputs in, Outputs out, Attrs attrs) {
  return simd_float_op("sqrt", Sqrt, ctx, in, out, attrs, &SimdKernels::sqrt,
                       [](double v) { return std::sqrt(v); });
}
Status Rsqrt(KernelContext& ctx, Inputs in, Outputs out, Attrs attrs) {
  return simd_float_op("rsqrt", Rsqrt, ctx, in, out, attrs, &SimdKernels::rsqrt,
                       [](double v) { return 1.0 / std::sqrt(v); });
}

Status Gelu(KernelContext& ctx, Inputs in, Outputs out, Attrs attrs) {
  KILN_ASSIGN_OR_RETURN(std::string_view approximate, attr_string("gelu", attrs, 0, "approximate", true));
  if (approximate == "tanh") {
    return simd_float_op("gelu", Gelu, ctx, in, out, attrs, &SimdKernels::gelu_tanh, [](double v) {
      const double u = 0.7978845608028654 * (v + 0.044715 * v * v * v);
      return v / (1.0 + std::exp(-2.0 * u));
    });
  }
  if (approximate != "none" && !approximate.empty()) {
    return invalid("gelu", "approximate='", approximate, "' is not 'none' or 'tanh'");
  }
  return simd_float_op("gelu", Gelu, ctx, in, out, attrs, &SimdKernels::gelu_erf, [](double v) {
    return 0.5 * v * std::erfc(-v * 0.70710678118654752);
  });
}

#define KILN_FLOAT_UNARY(Enum, name, expr)                                          \
  Status Enum(KernelContext& ctx, Inputs in, Outputs out, Attrs attrs) {            \
    return unary_op<KILN_FLOAT_DTYPES>(name, Enum, ctx, in, out, attrs, [](auto v) { \
      using T = decltype(v);                                                        \
      return static_cast<T>(expr);                                                  \
    });                                                                             \
  }

KILN_FLOAT_UNARY(Log, "log", std::log(v))
KILN_FLOAT_UNARY(Reciprocal, "reciprocal", T(1) / v)
KILN_FLOAT_UNARY(Sin, "sin", std::sin(v))
KILN_FLOAT_UNARY(Cos, "cos", std::cos(v))
KILN_FLOAT_UNARY(Erf, "erf", std::erf(v))
KILN_FLOAT_UNARY(Atan, "atan", std::atan(v))
KILN_FLOAT_UNARY(Asin, "asin", std::asin(v))
KILN_FLOAT_UNARY(Acos, "acos", std::acos(v))
KILN_FLOAT_UNARY(Tan, "tan", std::tan(v))
KILN_FLOAT_UNARY(Sinh, "sinh", std::sinh(v))
KILN_FLOAT_UNARY(Cosh, "cosh", std::cosh(v))
KILN_FLOAT_UNARY(Asinh, "asinh", std::asinh(v))
KILN_FLOAT_UNARY(Acosh, "acosh", std::acosh(v))
KILN_FLOAT_UNARY(Atanh, "atanh", std::atanh(v))
KILN_FLOAT_UNARY(Hardsigmoid, "hardsigmoid", std::min(std::max(v + T(3), T(0)), T(6)) / T(6))
KILN_FLOAT_UNARY(Hardswish, "hardswish", v * std::min(std::max(v + T(3), T(0)), T(6)) / T(6))
#undef KILN_FLOAT_UNARY

// Rounding ops: identity on integers (as in PyTorch).
#define KILN_ROUNDING_UNARY(Enum, name, fn)                                                 \
  Status Enum(KernelContext& ctx, Inputs in, Outputs out, Attrs attrs) {                    \
    return unary_op<KILN_NUMERIC_DTYPES>(name, Enum, ctx, in, out, attrs, [](auto v) {       \
      if constexpr (std::is_floating_point_v<decltype(v)>) return fn(v); else return v;     \
    });                                                                                     \
  }

KILN_ROUNDING_UNARY(Floor, "floor", std::floor)
KILN_ROUNDING_UNARY(Ceil, "ceil", std::ceil)
KILN_ROUNDING_UNARY(Round, "round", std::nearbyint)  // half to even, like torch.round
#undef KILN_ROUNDING_UNARY

Status LeakyRelu(KernelContext& ctx, Inputs in, Outputs out, Attrs attrs) {
  KILN_ASSIGN_OR_RETURN(double slope, attr_float("leaky_relu", attrs, 0, "negative_slope"));
  return unary_op<KILN_FLOAT_DTYPES>("leaky_relu", LeakyRelu, ctx, in, out, attrs, [slope](auto v) {
    using T = decltype(v);
    return v > T(0) ? v : v * static_cast<T>(slope);
  });
}

Status LogicalNot(KernelContext& ctx, Inputs in, Outputs out, Attrs attrs) {
  KILN_RETURN_IF_ERROR(prepare("logical_not", in, out, DType::kBool));
  if (is_half_dtype(in[0].dtype)) return run_via_f32(LogicalNot, ctx, in, out, attrs);
  const bool ok = dispatch<KILN_NUMERIC_DTYPES, DType::kBool>(in[0].dtype, [&]<DType D>() {
    using T = CType<D>;
    map1<T, std::uint8_t>(in[0].data, out[0].data, in[0].numel(),
                          [](T v) { return static_cast<std::uint8_t>(v == T(0)); });
  });
  return ok ? Status::Ok() : unsupported_dtype("logical_not", in[0].dtype, "x");
}

Status Clamp(KernelContext& ctx, Inputs in, Outputs out, Attrs attrs) {
  KILN_ASSIGN_OR_RETURN(std::optional<double> lo, attr_optional_float("clamp", attrs, 0, "min"));
  KILN_ASSIGN_OR_RETURN(std::optional<double> hi, attr_optional_float("clamp", attrs, 1, "max"));
  KILN_RETURN_IF_ERROR(prepare("clamp", in, out));
  if (is_half_dtype(in[0].dtype)) return run_via_f32(Clamp, ctx, in, out, attrs);
  const bool ok = dispatch<KILN_NUMERIC_DTYPES>(in[0].dtype, [&]<DType D>() {
    clamp_loop<CType<D>>(in[0], out[0], lo, hi);
  });
  return ok ? Status::Ok() : unsupported_dtype("clamp", in[0].dtype, "x");
}

}  // namespace kiln::cpu::kernels

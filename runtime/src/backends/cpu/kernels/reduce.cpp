// Reductions over a set of dims: sum, mean, prod, amax, amin, any, all, var.
// Float sums and products accumulate in double (PyTorch's CPU acc_type for float), integer
// ones in wrapping 64-bit; amax/amin propagate NaN; reductions over zero elements give
// the identity (sum 0, prod 1, any false, all true; mean and var NaN) and are an error for
// amax/amin.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "backends/cpu/kernels/common.h"
#include "backends/cpu/kernels/convert.h"
#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/kernels/layout_kernels.h"
#include "backends/cpu/kernels/reduce.h"
#include "backends/cpu/kernels/simd.h"
#include "backends/cpu/thread_pool.h"
#include "kernel/attrs.h"

namespace kiln::cpu::kernels {
namespace {

constexpr IoSpec kReduceIo{.min_inputs = 1, .max_inputs = 1, .num_outputs = 1};
constexpr std::int64_t kChunk = 256;

// A reducer: Acc accumulator type, load(x) -> Acc, init(), combine(Acc, Acc), store(Acc, n).
template <DType In, DType Out>
struct SumReducer {
  static constexpr bool kFloat = kIsFloat<Out>;
  using Acc = std::conditional_t<kFloat, double, std::uint64_t>;
  static Acc load(CType<In> v) {
    if constexpr (kFloat) return convert<DType::kF64, In>(v);
    else return static_cast<std::uint64_t>(convert<DType::kI64, In>(v));
  }
  static Acc init() { return Acc(0); }
  static Acc combine(Acc a, Acc b) { return a + b; }
  static CType<Out> store(Acc a, std::int64_t) {
    if constexpr (kFloat) return convert<Out, DType::kF64>(a);
    else return convert<Out, DType::kI64>(static_cast<std::int64_t>(a));
  }
};

template <DType In, DType Out>
struct ProdReducer : SumReducer<In, Out> {
  using Base = SumReducer<In, Out>;
  using Acc = typename Base::Acc;
  static Acc init() { return Acc(1); }
  static Acc combine(Acc a, Acc b) { return a * b; }
};

template <DType In, DType Out>
struct MeanReducer : SumReducer<In, Out> {
  static CType<Out> store(double a, std::int64_t n) {
    return convert<Out, DType::kF64>(a / static_cast<double>(n));
  }
};

template <DType D, bool kMax>
struct ExtremeReducer {
  using Acc = CType<D>;
  static Acc load(Acc v) { return v; }
  static Acc init() {
    if constexpr (std::is_floating_point_v<Acc>) {
      return kMax ? -std::numeric_limits<Acc>::infinity() : std::numeric_limits<Acc>::infinity();
    } else {
      return kMax ? std::numeric_limits<Acc>::lowest() : std::numeric_limits<Acc>::max();
    }
  }
  static Acc combine(Acc a, Acc v) {
    if constexpr (kMax) return (v > a || is_nan(v)) ? v : a; else return (v < a || is_nan(v)) ? v : a;
  }
  static Acc store(Acc a, std::int64_t) { return a; }
};

template <DType In, bool kAll>
struct BoolReducer {
  using Acc = std::uint8_t;
  static Acc load(CType<In> v) { return static_cast<Acc>(v != CType<In>(0)); }
  static Acc init() { return kAll ? 1 : 0; }
  static Acc combine(Acc a, Acc b) { return kAll ? (a & b) : (a | b); }
  static Acc store(Acc a, std::int64_t) { return a; }
};

// Reduces n contiguous elements with 8 independent lanes (vectorizable).
template <typename R, typename T>
typename R::Acc reduce_row(const T* x, std::int64_t n) {
  using Acc = typename R::Acc;
  Acc lanes[8];
  for (int l = 0; l < 8; ++l) lanes[l] = R::init();
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int l = 0; l < 8; ++l) lanes[l] = R::combine(lanes[l], R::load(x[i + l]));
  }
  Acc acc = R::init();
  for (int l = 0; l < 8; ++l) acc = R::combine(acc, lanes[l]);
  for (; i < n; ++i) acc = R::combine(acc, R::load(x[i]));
  return acc;
}

// out[o, j] = reduce over r of x[o, r, j].
template <typename R, typename T, typename O>
void reduce_plan(const ReducePlan& p, O* out) {
  using Acc = typename R::Acc;
  const T* x = static_cast<const T*>(p.data);
  if (p.inner == 1) {
    for (std::int64_t o = 0; o < p.outer; ++o) out[o] = R::store(reduce_row<R>(x + o * p.reduce, p.reduce), p.reduce);
    return;
  }
  Acc acc[kChunk];
  for (std::int64_t o = 0; o < p.outer; ++o) {
    for (std::int64_t j0 = 0; j0 < p.inner; j0 += kChunk) {
      const std::int64_t c = std::min(kChunk, p.inner - j0);
      for (std::int64_t j = 0; j < c; ++j) acc[j] = R::init();
      for (std::int64_t r = 0; r < p.reduce; ++r) {
        const T* row = x + (o * p.reduce + r) * p.inner + j0;
        for (std::int64_t j = 0; j < c; ++j) acc[j] = R::combine(acc[j], R::load(row[j]));
      }
      O* dst = out + o * p.inner + j0;
      for (std::int64_t j = 0; j < c; ++j) dst[j] = R::store(acc[j], p.reduce);
    }
  }
}

struct ReduceArgs {
  ReducePlan plan;
  std::int64_t count = 0;  // elements per output
};

// Reads dims/keepdim at attrs[dims_at], attrs[keepdim_at] and plans the reduction.
Status prepare(std::string_view op, Inputs in, Outputs out, Attrs attrs, std::size_t dims_at,
               std::size_t keepdim_at, ReduceArgs& args) {
  KILN_RETURN_IF_ERROR(check_io(op, in, out, kReduceIo));
  KILN_ASSIGN_OR_RETURN(std::span<const std::int64_t> dims, attr_ints(op, attrs, dims_at, "dims"));
  KILN_ASSIGN_OR_RETURN(bool keepdim, attr_bool(op, attrs, keepdim_at, "keepdim"));
  KILN_RETURN_IF_ERROR(plan_reduce(op, in[0], dims, keepdim, out[0], args.plan));
  args.count = args.plan.reduce;
  return Status::Ok();
}

// sum / prod / mean: any numeric or bool input, output dtype from the view.
template <template <DType, DType> class R>
Status accumulate_op(std::string_view op, KernelFn self, KernelContext& ctx, Inputs in, Outputs out,
                     Attrs attrs, bool float_out_only) {
  ReduceArgs args;
  KILN_RETURN_IF_ERROR(prepare(op, in, out, attrs, 0, 1, args));
  if (has_half_views(in, out)) return run_via_f32(self, ctx, in, out, attrs);
  bool out_ok = false;
  bool in_ok = false;
  const auto run = [&]<DType O>() {
    out_ok = true;
    in_ok = dispatch<KILN_NUMERIC_DTYPES, DType::kBool>(in[0].dtype, [&]<DType I>() {
      reduce_plan<R<I, O>, CType<I>>(args.plan, out[0].as<CType<O>>());
    });
  };
  if (float_out_only) {
    dispatch<KILN_FLOAT_DTYPES>(out[0].dtype, run);
  } else {
    dispatch<KILN_FLOAT_DTYPES, KILN_INT_DTYPES>(out[0].dtype, run);
  }
  if (!out_ok) return unsupported_dtype(op, out[0].dtype, "out");
  return in_ok ? Status::Ok() : unsupported_dtype(op, in[0].dtype, "x");
}

template <bool kMax>
Status extreme_op(std::string_view op, KernelFn self, KernelContext& ctx, Inputs in, Outputs out,
                  Attrs attrs) {
  ReduceArgs args;
  KILN_RETURN_IF_ERROR(prepare(op, in, out, attrs, 0, 1, args));
  KILN_RETURN_IF_ERROR(check_dtype(op, "out", out[0], in[0].dtype));
  if (args.count == 0 && out[0].numel() > 0) {
    return invalid_input(op, "cannot reduce x.shape=", shape_text(in[0]), " over zero elements");
  }
  if (is_half_dtype(in[0].dtype)) return run_via_f32(self, ctx, in, out, attrs);
  const bool ok = dispatch<KILN_NUMERIC_DTYPES>(in[0].dtype, [&]<DType D>() {
    reduce_plan<ExtremeReducer<D, kMax>, CType<D>>(args.plan, out[0].as<CType<D>>());
  });
  return ok ? Status::Ok() : unsupported_dtype(op, in[0].dtype, "x");
}

template <bool kAll>
Status bool_op(std::string_view op, KernelFn self, KernelContext& ctx, Inputs in, Outputs out,
               Attrs attrs) {
  ReduceArgs args;
  KILN_RETURN_IF_ERROR(prepare(op, in, out, attrs, 0, 1, args));
  KILN_RETURN_IF_ERROR(check_dtype(op, "out", out[0], DType::kBool));
  if (is_half_dtype(in[0].dtype)) return run_via_f32(self, ctx, in, out, attrs);
  const bool ok = dispatch<KILN_NUMERIC_DTYPES, DType::kBool>(in[0].dtype, [&]<DType D>() {
    reduce_plan<BoolReducer<D, kAll>, CType<D>>(args.plan, out[0].as<std::uint8_t>());
  });
  return ok ? Status::Ok() : unsupported_dtype(op, in[0].dtype, "x");
}

// Two-pass variance in double: mean, then the sum of squared deviations.
template <typename T>
void variance(const ReducePlan& p, T* out, double correction, ThreadPool& pool) {
  const T* x = static_cast<const T*>(p.data);
  const double n = static_cast<double>(p.reduce);
  const double divisor = std::max(0.0, n - correction);
  if constexpr (std::is_same_v<T, float>) {
    if (p.inner == 1 && p.reduce > 0) {  // contiguous rows (group norm, var over the last dims)
      const SimdKernels& k = simd();
      pool.parallel_for(p.outer, pool.even_grain(p.outer, p.reduce, 8192), [&](std::int64_t o0, std::int64_t o1) {
        for (std::int64_t o = o0; o < o1; ++o) {
          const float* row = x + o * p.reduce;
          const float mean = static_cast<float>(static_cast<double>(k.row_sum(row, p.reduce)) / n);
          out[o] = static_cast<float>(static_cast<double>(k.row_sq_dev(row, mean, p.reduce)) / divisor);
        }
      });
      return;
    }
  }
  double mean[kChunk];
  double m2[kChunk];
  for (std::int64_t o = 0; o < p.outer; ++o) {
    for (std::int64_t j0 = 0; j0 < p.inner; j0 += kChunk) {
      const std::int64_t c = std::min(kChunk, p.inner - j0);
      for (std::int64_t j = 0; j < c; ++j) mean[j] = m2[j] = 0.0;
      for (std::int64_t r = 0; r < p.reduce; ++r) {
        const T* row = x + (o * p.reduce + r) * p.inner + j0;
        for (std::int64_t j = 0; j < c; ++j) mean[j] += static_cast<double>(row[j]);
      }
      for (std::int64_t j = 0; j < c; ++j) mean[j] /= n;
      for (std::int64_t r = 0; r < p.reduce; ++r) {
        const T* row = x + (o * p.reduce + r) * p.inner + j0;
        for (std::int64_t j = 0; j < c; ++j) {
          const double d = static_cast<double>(row[j]) - mean[j];
          m2[j] += d * d;
        }
      }
      T* dst = out + o * p.inner + j0;
      for (std::int64_t j = 0; j < c; ++j) dst[j] = static_cast<T>(m2[j] / divisor);
    }
  }
}

}  // namespace

Status Sum(KernelContext& ctx, Inputs in, Outputs out, Attrs attrs) {
  if (attrs.size() > 2 && attrs[2].type != AttrType::kNone) {
    KILN_ASSIGN_OR_RETURN(DType dtype, attr_dtype("sum", attrs, 2, "dtype"));
    if (out.size() == 1) KILN_RETURN_IF_ERROR(check_dtype("sum", "out", out[0], dtype));
  }
  return accumulate_op<SumReducer>("sum", Sum, ctx, in, out, attrs, false);
}
Status Prod(KernelContext& ctx, Inputs in, Outputs out, Attrs attrs) {
  return accumulate_op<ProdReducer>("prod", Prod, ctx, in, out, attrs, false);
}
Status Mean(KernelContext& ctx, Inputs in, Outputs out, Attrs attrs) {
  if (ctx.input_blocked(0) || ctx.output_blocked(0)) return pool_blocked(OpKind::Mean, Mean, ctx, in, out, attrs);
  return accumulate_op<MeanReducer>("mean", Mean, ctx, in, out, attrs, true);
}
Status Amax(KernelContext& ctx, Inputs in, Outputs out, Attrs attrs) {
  return extreme_op<true>("amax", Amax, ctx, in, out, attrs);
}
Status Amin(KernelContext& ctx, Inputs in, Outputs out, Attrs attrs) {
  return extreme_op<false>("amin", Amin, ctx, in, out, attrs);
}
Status Any(KernelContext& ctx, Inputs in, Outputs out, Attrs attrs) {
  return bool_op<false>("any", Any, ctx, in, out, attrs);
}
Status All(KernelContext& ctx, Inputs in, Outputs out, Attrs attrs) {
  return bool_op<true>("all", All, ctx, in, out, attrs);
}

Status Var(KernelContext& ctx, Inputs in, Outputs out, Attrs attrs) {
  KILN_RETURN_IF_ERROR(check_io("var", in, out, kReduceIo));
  KILN_ASSIGN_OR_RETURN(double correction, attr_float("var", attrs, 1, "correction"));
  ReduceArgs args;
  KILN_RETURN_IF_ERROR(prepare("var", in, out, attrs, 0, 2, args));
  KILN_RETURN_IF_ERROR(check_dtype("var", "out", out[0], in[0].dtype));
  if (is_half_dtype(in[0].dtype)) return run_via_f32(Var, ctx, in, out, attrs);
  const bool ok = dispatch<KILN_FLOAT_DTYPES>(in[0].dtype, [&]<DType D>() {
    variance(args.plan, out[0].as<CType<D>>(), correction, ctx.pool());
  });
  return ok ? Status::Ok() : unsupported_dtype("var", in[0].dtype, "x");
}

}  // namespace kiln::cpu::kernels

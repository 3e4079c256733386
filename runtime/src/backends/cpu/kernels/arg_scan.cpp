// argmax / argmin (first occurrence; NaN counts as the extreme, like PyTorch) and cumsum
// (accumulated in double for float outputs, wrapping int64 for integer outputs).
#include <algorithm>
#include <cstdint>
#include <span>

#include "backends/cpu/kernels/common.h"
#include "backends/cpu/kernels/convert.h"
#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/kernels/reduce.h"
#include "kernel/attrs.h"

namespace kiln::cpu::kernels {
namespace {

constexpr IoSpec kUnaryIo{.min_inputs = 1, .max_inputs = 1, .num_outputs = 1};
constexpr std::int64_t kChunk = 256;

// True if v replaces best: strictly more extreme, or the first NaN.
template <bool kMax, typename T>
inline bool better(T v, T best) {
  if (is_nan(best)) return false;
  return (kMax ? v > best : v < best) || is_nan(v);
}

template <bool kMax, typename T>
void arg_extreme(const ReducePlan& p, std::int64_t* out) {
  const T* x = static_cast<const T*>(p.data);
  if (p.inner == 1) {
    for (std::int64_t o = 0; o < p.outer; ++o) {
      const T* row = x + o * p.reduce;
      T best = row[0];
      std::int64_t index = 0;
      for (std::int64_t r = 1; r < p.reduce; ++r) {
        if (better<kMax>(row[r], best)) {
          best = row[r];
          index = r;
        }
      }
      out[o] = index;
    }
    return;
  }
  T best[kChunk];
  for (std::int64_t o = 0; o < p.outer; ++o) {
    for (std::int64_t j0 = 0; j0 < p.inner; j0 += kChunk) {
      const std::int64_t c = std::min(kChunk, p.inner - j0);
      std::int64_t* index = out + o * p.inner + j0;
      const T* first = x + o * p.reduce * p.inner + j0;
      for (std::int64_t j = 0; j < c; ++j) {
        best[j] = first[j];
        index[j] = 0;
      }
      for (std::int64_t r = 1; r < p.reduce; ++r) {
        const T* row = first + r * p.inner;
        for (std::int64_t j = 0; j < c; ++j) {
          const bool b = better<kMax>(row[j], best[j]);
          best[j] = b ? row[j] : best[j];
          index[j] = b ? r : index[j];
        }
      }
    }
  }
}

template <bool kMax>
Status arg_op(std::string_view op, KernelFn self, KernelContext& ctx, Inputs in, Outputs out,
              Attrs attrs) {
  KILN_RETURN_IF_ERROR(check_io(op, in, out, kUnaryIo));
  KILN_ASSIGN_OR_RETURN(std::int64_t dim, attr_int(op, attrs, 0, "dim"));
  KILN_ASSIGN_OR_RETURN(bool keepdim, attr_bool(op, attrs, 1, "keepdim"));
  KILN_RETURN_IF_ERROR(check_dtype(op, "out", out[0], DType::kI64));
  if (in[0].rank > 0) KILN_RETURN_IF_ERROR(check_dim(op, "dim", dim, in[0].rank));
  ReducePlan plan;
  KILN_RETURN_IF_ERROR(plan_reduce(op, in[0], std::span<const std::int64_t>(&dim, 1), keepdim, out[0], plan));
  if (plan.reduce == 0 && out[0].numel() > 0) {
    return invalid_input(op, "cannot reduce x.shape=", shape_text(in[0]), " over zero elements at dim ", dim);
  }
  if (is_half_dtype(in[0].dtype)) return run_via_f32(self, ctx, in, out, attrs);
  const bool ok = dispatch<KILN_NUMERIC_DTYPES, DType::kBool>(in[0].dtype, [&]<DType D>() {
    arg_extreme<kMax, CType<D>>(plan, out[0].as<std::int64_t>());
  });
  return ok ? Status::Ok() : unsupported_dtype(op, in[0].dtype, "x");
}

template <DType In, DType Out>
void cumsum_typed(const TensorView& x, const TensorView& y, std::int64_t outer, std::int64_t n,
                  std::int64_t inner) {
  constexpr bool kFloat = kIsFloat<Out>;
  using Acc = std::conditional_t<kFloat, double, std::uint64_t>;
  const auto load = [](CType<In> v) -> Acc {
    if constexpr (kFloat) return convert<DType::kF64, In>(v);
    else return static_cast<std::uint64_t>(convert<DType::kI64, In>(v));
  };
  const auto store = [](Acc a) -> CType<Out> {
    if constexpr (kFloat) return convert<Out, DType::kF64>(a);
    else return convert<Out, DType::kI64>(static_cast<std::int64_t>(a));
  };
  const CType<In>* src = x.as<CType<In>>();
  CType<Out>* dst = y.as<CType<Out>>();
  Acc acc[kChunk];
  for (std::int64_t o = 0; o < outer; ++o) {
    for (std::int64_t j0 = 0; j0 < inner; j0 += kChunk) {
      const std::int64_t c = std::min(kChunk, inner - j0);
      for (std::int64_t j = 0; j < c; ++j) acc[j] = Acc(0);
      for (std::int64_t r = 0; r < n; ++r) {
        const std::int64_t base = (o * n + r) * inner + j0;
        for (std::int64_t j = 0; j < c; ++j) {
          acc[j] += load(src[base + j]);
          dst[base + j] = store(acc[j]);
        }
      }
    }
  }
}

}  // namespace

Status Argmax(KernelContext& ctx, Inputs in, Outputs out, Attrs attrs) {
  return arg_op<true>("argmax", Argmax, ctx, in, out, attrs);
}
Status Argmin(KernelContext& ctx, Inputs in, Outputs out, Attrs attrs) {
  return arg_op<false>("argmin", Argmin, ctx, in, out, attrs);
}

Status Cumsum(KernelContext& ctx, Inputs in, Outputs out, Attrs attrs) {
  KILN_RETURN_IF_ERROR(check_io("cumsum", in, out, kUnaryIo));
  KILN_ASSIGN_OR_RETURN(std::int64_t dim, attr_int("cumsum", attrs, 0, "dim"));
  const TensorView& x = in[0];
  if (x.rank > 0 || dim != 0) KILN_RETURN_IF_ERROR(check_dim("cumsum", "dim", dim, x.rank));
  KILN_RETURN_IF_ERROR(check_same_shape("cumsum", "x", x, "out", out[0]));
  if (x.numel() == 0) return Status::Ok();
  if (has_half_views(in, out)) return run_via_f32(Cumsum, ctx, in, out, attrs);
  const int d = static_cast<int>(dim);
  const std::int64_t outer = x.rank == 0 ? 1 : dims_product(x, 0, d);
  const std::int64_t n = x.rank == 0 ? 1 : x.shape[d];
  const std::int64_t inner = x.rank == 0 ? 1 : dims_product(x, d + 1, x.rank);
  bool in_ok = false;
  const bool out_ok = dispatch<KILN_FLOAT_DTYPES, KILN_INT_DTYPES>(out[0].dtype, [&]<DType O>() {
    in_ok = dispatch<KILN_NUMERIC_DTYPES, DType::kBool>(x.dtype, [&]<DType I>() {
      cumsum_typed<I, O>(x, out[0], outer, n, inner);
    });
  });
  if (!out_ok) return unsupported_dtype("cumsum", out[0].dtype, "out");
  return in_ok ? Status::Ok() : unsupported_dtype("cumsum", x.dtype, "x");
}

}  // namespace kiln::cpu::kernels

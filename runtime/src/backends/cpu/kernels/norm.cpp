// Normalizations: batch_norm (inference, running statistics), layer_norm, softmax and
// log_softmax (numerically stable: the row max is subtracted first; a NaN anywhere in a
// row makes the whole row NaN, as in PyTorch). f32 rows use the vectorized loops of
// simd.h; f64 has scalar loops; f16/bf16 run through f32 copies.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "backends/cpu/kernels/common.h"
#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/kernels/layout_kernels.h"
#include "backends/cpu/thread_pool.h"
#include "backends/cpu/kernels/simd.h"
#include "kernel/attrs.h"

namespace kiln::cpu::kernels {
namespace {

constexpr std::int64_t kChunk = 256;

// Checks that an optional parameter is absent or a `dtype` tensor of shape `dims`.
Status check_param(std::string_view op, std::string_view name, const TensorView* p, DType dtype,
                   std::span<const std::int64_t> dims) {
  if (p == nullptr) return Status::Ok();
  KILN_RETURN_IF_ERROR(check_dtype(op, name, *p, dtype));
  bool same = static_cast<std::size_t>(p->rank) == dims.size();
  for (int i = 0; same && i < p->rank; ++i) same = p->shape[i] == dims[i];
  if (same) return Status::Ok();
  return invalid(op, name, ".shape=", shape_text(*p), " but expected ", shape_text(dims));
}

const TensorView* optional_input(Inputs in, std::size_t i) {
  return i < in.size() && !is_absent(in[i]) ? &in[i] : nullptr;
}

template <typename T>
void batch_norm_typed(const TensorView& x, const TensorView* w, const TensorView* b,
                      const TensorView& mean, const TensorView& var, double eps, const TensorView& y) {
  const std::int64_t batch = x.shape[0];
  const std::int64_t channels = x.shape[1];
  const std::int64_t plane = dims_product(x, 2, x.rank);
  const T* src = x.as<T>();
  T* dst = y.as<T>();
  for (std::int64_t c = 0; c < channels; ++c) {
    const double inv_std = 1.0 / std::sqrt(static_cast<double>(var.as<T>()[c]) + eps);
    const double scale = (w != nullptr ? static_cast<double>(w->as<T>()[c]) : 1.0) * inv_std;
    const double shift =
        (b != nullptr ? static_cast<double>(b->as<T>()[c]) : 0.0) - static_cast<double>(mean.as<T>()[c]) * scale;
    const T s = static_cast<T>(scale);
    const T t = static_cast<T>(shift);
    for (std::int64_t n = 0; n < batch; ++n) {
      const std::int64_t base = (n * channels + c) * plane;
      for (std::int64_t i = 0; i < plane; ++i) dst[base + i] = src[base + i] * s + t;
    }
  }
}

void layer_norm_f64(const double* x, const double* w, const double* b, double* y, std::int64_t rows,
                    std::int64_t n, double eps) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const double* in = x + r * n;
    double* out = y + r * n;
    double mean = 0.0;
    for (std::int64_t i = 0; i < n; ++i) mean += in[i];
    mean /= static_cast<double>(n);
    double var = 0.0;
    for (std::int64_t i = 0; i < n; ++i) var += (in[i] - mean) * (in[i] - mean);
    const double rstd = 1.0 / std::sqrt(var / static_cast<double>(n) + eps);
    for (std::int64_t i = 0; i < n; ++i) {
      out[i] = (in[i] - mean) * rstd * (w != nullptr ? w[i] : 1.0) + (b != nullptr ? b[i] : 0.0);
    }
  }
}

// Softmax (or log_softmax) of x viewed as [outer, n, inner] along n, for inner > 1 or
// double: columns are processed kChunk at a time so that loops over j vectorize.
template <typename T>
void softmax_cols(const T* x, T* y, std::int64_t outer, std::int64_t n, std::int64_t inner, bool log) {
  T mx[kChunk];
  T sum[kChunk];
  for (std::int64_t o = 0; o < outer; ++o) {
    for (std::int64_t j0 = 0; j0 < inner; j0 += kChunk) {
      const std::int64_t c = std::min(kChunk, inner - j0);
      const auto at = [&](std::int64_t r) { return (o * n + r) * inner + j0; };
      for (std::int64_t j = 0; j < c; ++j) {
        mx[j] = -std::numeric_limits<T>::infinity();
        sum[j] = 0;
      }
      for (std::int64_t r = 0; r < n; ++r) {
        const T* row = x + at(r);
        for (std::int64_t j = 0; j < c; ++j) mx[j] = (row[j] > mx[j] || row[j] != row[j]) ? row[j] : mx[j];
      }
      for (std::int64_t r = 0; r < n; ++r) {
        const T* row = x + at(r);
        T* out = y + at(r);
        T e[kChunk];
        for (std::int64_t j = 0; j < c; ++j) e[j] = row[j] - mx[j];
        if constexpr (std::is_same_v<T, float>) {
          simd().exp(e, e, c);
        } else {
          for (std::int64_t j = 0; j < c; ++j) e[j] = std::exp(e[j]);
        }
        for (std::int64_t j = 0; j < c; ++j) sum[j] += e[j];
        if (!log) std::copy(e, e + c, out);
      }
      for (std::int64_t j = 0; j < c; ++j) sum[j] = log ? mx[j] + std::log(sum[j]) : T(1) / sum[j];
      for (std::int64_t r = 0; r < n; ++r) {
        T* out = y + at(r);
        const T* row = x + at(r);
        if (log) {
          for (std::int64_t j = 0; j < c; ++j) out[j] = row[j] - sum[j];
        } else {
          for (std::int64_t j = 0; j < c; ++j) out[j] *= sum[j];
        }
      }
    }
  }
}

Status softmax_op(std::string_view op, KernelFn self, KernelContext& ctx, Inputs in, Outputs out,
                  Attrs attrs, bool log) {
  KILN_RETURN_IF_ERROR(check_io(op, in, out, {.min_inputs = 1, .max_inputs = 1, .num_outputs = 1}));
  KILN_ASSIGN_OR_RETURN(std::int64_t dim, attr_int(op, attrs, 0, "dim"));
  const TensorView& x = in[0];
  if (x.rank > 0 || dim != 0) KILN_RETURN_IF_ERROR(check_dim(op, "dim", dim, x.rank));
  KILN_RETURN_IF_ERROR(check_same_shape(op, "x", x, "out", out[0]));
  KILN_RETURN_IF_ERROR(check_dtype(op, "out", out[0], x.dtype));
  if (x.numel() == 0) return Status::Ok();
  if (is_half_dtype(x.dtype)) return run_via_f32(self, ctx, in, out, attrs);
  const int d = static_cast<int>(dim);
  const std::int64_t outer = x.rank == 0 ? 1 : dims_product(x, 0, d);
  const std::int64_t n = x.rank == 0 ? 1 : x.shape[d];
  const std::int64_t inner = x.rank == 0 ? 1 : dims_product(x, d + 1, x.rank);
  if (x.dtype == DType::kF32) {
    const float* src = x.as<float>();
    float* dst = out[0].as<float>();
    if (inner == 1) {
      // Rows split evenly over the pool once there are ~4K elements per thread.
      ctx.pool().parallel_for(outer, ctx.pool().even_grain(outer, n, 4096), [&](std::int64_t begin, std::int64_t end) {
        if (!log) return simd().softmax_rows(src + begin * n, dst + begin * n, end - begin, n);
        for (std::int64_t o = begin; o < end; ++o) simd().log_softmax_row(src + o * n, dst + o * n, n);
      });
    } else {
      softmax_cols(src, dst, outer, n, inner, log);
    }
    return Status::Ok();
  }
  if (x.dtype == DType::kF64) {
    softmax_cols(x.as<double>(), out[0].as<double>(), outer, n, inner, log);
    return Status::Ok();
  }
  return unsupported_dtype(op, x.dtype, "x");
}

}  // namespace

Status BatchNorm(KernelContext& ctx, Inputs in, Outputs out, Attrs attrs) {
  KILN_RETURN_IF_ERROR(check_io("batch_norm", in, out,
                                {.min_inputs = 5, .max_inputs = 5, .num_outputs = 1, .optional_inputs = 0b11110}));
  KILN_ASSIGN_OR_RETURN(double eps, attr_float("batch_norm", attrs, 0, "eps"));
  if (ctx.input_blocked(0) || ctx.output_blocked(0)) return batch_norm_blocked(ctx, in, out, attrs);
  const TensorView& x = in[0];
  if (is_absent(in[3]) || is_absent(in[4])) {
    return unsupported("batch_norm", "training mode (no running_mean/running_var) is not supported");
  }
  if (x.rank < 2) return invalid("batch_norm", "x must be at least 2-D, got x.shape=", shape_text(x));
  const std::int64_t channels[1] = {x.shape[1]};
  const char* names[4] = {"weight", "bias", "running_mean", "running_var"};
  for (int i = 1; i < 5; ++i) {
    KILN_RETURN_IF_ERROR(check_param("batch_norm", names[i - 1], optional_input(in, i), x.dtype, channels));
  }
  KILN_RETURN_IF_ERROR(check_same_shape("batch_norm", "x", x, "out", out[0]));
  KILN_RETURN_IF_ERROR(check_dtype("batch_norm", "out", out[0], x.dtype));
  if (x.numel() == 0) return Status::Ok();
  if (is_half_dtype(x.dtype)) return run_via_f32(BatchNorm, ctx, in, out, attrs);
  const bool ok = dispatch<KILN_FLOAT_DTYPES>(x.dtype, [&]<DType D>() {
    batch_norm_typed<CType<D>>(x, optional_input(in, 1), optional_input(in, 2), in[3], in[4], eps, out[0]);
  });
  if (!ok) return unsupported_dtype("batch_norm", x.dtype, "x");
  if (x.dtype == DType::kF32) apply_activation(ctx.fused_activation(), out[0].as<float>(), out[0].numel());
  return Status::Ok();
}

Status LayerNorm(KernelContext& ctx, Inputs in, Outputs out, Attrs attrs) {
  KILN_RETURN_IF_ERROR(check_io("layer_norm", in, out,
                                {.min_inputs = 1, .max_inputs = 3, .num_outputs = 1, .optional_inputs = 0b110}));
  KILN_ASSIGN_OR_RETURN(std::int64_t normalized_rank, attr_int("layer_norm", attrs, 0, "normalized_rank"));
  KILN_ASSIGN_OR_RETURN(double eps, attr_float("layer_norm", attrs, 1, "eps"));
  const TensorView& x = in[0];
  if (normalized_rank < 0 || normalized_rank > x.rank) {
    return invalid("layer_norm", "normalized_rank=", normalized_rank, " outside [0, ", x.rank, "] for x.shape=",
                   shape_text(x));
  }
  const int first = x.rank - static_cast<int>(normalized_rank);
  const std::span<const std::int64_t> norm_dims(x.shape.data() + first, static_cast<std::size_t>(normalized_rank));
  const TensorView* w = optional_input(in, 1);
  const TensorView* b = optional_input(in, 2);
  KILN_RETURN_IF_ERROR(check_param("layer_norm", "weight", w, x.dtype, norm_dims));
  KILN_RETURN_IF_ERROR(check_param("layer_norm", "bias", b, x.dtype, norm_dims));
  KILN_RETURN_IF_ERROR(check_same_shape("layer_norm", "x", x, "out", out[0]));
  KILN_RETURN_IF_ERROR(check_dtype("layer_norm", "out", out[0], x.dtype));
  if (is_half_dtype(x.dtype)) return run_via_f32(LayerNorm, ctx, in, out, attrs);
  const std::int64_t n = dims_product(x, first, x.rank);
  const std::int64_t rows = dims_product(x, 0, first);
  if (n == 0 || rows == 0) return Status::Ok();
  if (x.dtype == DType::kF32) {
    const auto row = simd().layer_norm_row;
    const float* wp = w != nullptr ? w->as<float>() : nullptr;
    const float* bp = b != nullptr ? b->as<float>() : nullptr;
    ctx.pool().parallel_for(rows, ctx.pool().even_grain(rows, n, 4096), [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t r = begin; r < end; ++r) {
        row(x.as<float>() + r * n, wp, bp, out[0].as<float>() + r * n, n, static_cast<float>(eps));
      }
    });
    return Status::Ok();
  }
  if (x.dtype == DType::kF64) {
    layer_norm_f64(x.as<double>(), w != nullptr ? w->as<double>() : nullptr, b != nullptr ? b->as<double>() : nullptr,
                   out[0].as<double>(), rows, n, eps);
    return Status::Ok();
  }
  return unsupported_dtype("layer_norm", x.dtype, "x");
}

Status Softmax(KernelContext& ctx, Inputs in, Outputs out, Attrs attrs) {
  return softmax_op("softmax", Softmax, ctx, in, out, attrs, false);
}
Status LogSoftmax(KernelContext& ctx, Inputs in, Outputs out, Attrs attrs) {
  return softmax_op("log_softmax", LogSoftmax, ctx, in, out, attrs, true);
}

}  // namespace kiln::cpu::kernels

// linear_q and embedding_q: validation, threading and the batch paths around the fused
// micro-kernels of quant.h.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "backends/cpu/gemm/gemm.h"
#include "backends/cpu/gemm/gemm_kernels.h"
#include "backends/cpu/gemm/gemm_packed_a.h"
#include "backends/cpu/kernels/common.h"
#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/kernels/quant.h"
#include "backends/cpu/thread_pool.h"

namespace kiln::cpu::kernels {
namespace {

// Checks weight/scales/zero points against each other and the logical width `k` implied
// by the weight; fills `qw`.
Status quant_weight(std::string_view op, const TensorView& w, const TensorView& scales, const TensorView* zero_points,
                    QuantWeight& qw) {
  if (w.dtype != DType::kI8 && w.dtype != DType::kU8) {
    return invalid(op, "weight must be i8 (int8) or u8 (packed int4), got ", w.dtype);
  }
  if (w.rank != 2) return invalid(op, "weight must be 2-D, got weight.shape=", shape_text(w));
  const int bits = w.dtype == DType::kI8 ? 8 : 4;
  const std::int64_t n = w.shape[0];
  if (w.shape[1] > (std::int64_t{1} << 61)) return invalid(op, "weight.shape[1]=", w.shape[1], " is too large");
  const std::int64_t k = bits == 8 ? w.shape[1] : w.shape[1] * 2;
  if (scales.dtype != DType::kF32 && scales.dtype != DType::kF16) {
    return invalid(op, "scales must be f32 or f16, got ", scales.dtype);
  }
  if (scales.rank != 2 || scales.shape[0] != n) {
    return invalid(op, "scales.shape=", shape_text(scales), " but weight.shape[0]=", n, " (expected [", n, ", groups])");
  }
  const std::int64_t groups = scales.shape[1];
  if (groups < 1 || (k > 0 && k % groups != 0) || (k == 0 && groups != 1)) {
    return invalid(op, "scales.shape[1]=", groups, " groups do not divide the weight's ", k, " columns");
  }
  const std::int64_t group = k > 0 ? k / groups : 1;
  if (bits == 4 && group % 2 != 0) {
    return invalid(op, "int4 group size ", group, " (", k, " columns / ", groups, " groups) must be even");
  }
  if (zero_points != nullptr) {
    if (bits == 8) return invalid(op, "int8 weights are symmetric: zero_points must be absent");
    KILN_RETURN_IF_ERROR(check_dtype(op, "zero_points", *zero_points, DType::kU8));
    KILN_RETURN_IF_ERROR(check_same_shape(op, "scales", scales, "zero_points", *zero_points));
  }
  qw = {static_cast<const std::uint8_t*>(w.data), bits, n, k, group, scales.data, scales.dtype == DType::kF16,
        zero_points != nullptr ? static_cast<const std::uint8_t*>(zero_points->data) : nullptr};
  return Status::Ok();
}

// Batches up to this many rows run the GEMV once per row (the weight then stays the
// bandwidth cost); larger ones run the SGEMM with W dequantized straight into its packed
// B panels.
constexpr std::int64_t kGemvMaxRows = 2;

// y[rows, n] = x[rows, k] W^T (+ bias) by sgemm_packed_a: x packed once as A, and each
// 16-column panel of B = W^T written by dequantize_panel (16 weight rows dequantized and
// transposed in registers). W is never materialized in f32 and B is packed once (no
// dequantized copy that the SGEMM packs again).
Status gemm_dequantizing(const QuantWeight& qw, const float* x, std::int64_t rows, const float* bias, float* y,
                         ThreadPool& pool) {
  Result<PackedA> a = pack_a_matrix(x, qw.k, rows, qw.k);
  if (!a.ok()) return op_error(StatusCode::kUnavailable, "linear_q", "no memory to pack the activations");
  const QuantKernels& kern = quant_kernels();
  constexpr std::int64_t kNr = gemm_detail::kNr;
  auto pack = [&](std::int64_t k0, std::int64_t kc, std::int64_t j0, std::int64_t cols, float* out) {
    for (std::int64_t q = 0; q * kNr < cols; ++q) {
      const std::int64_t r0 = j0 + q * kNr;
      kern.dequantize_panel(qw, r0, std::min(kNr, j0 + cols - r0), k0, kc, out + q * kc * kNr);
    }
  };
  GemmParams params;
  params.m = rows;
  params.n = qw.n;
  params.k = qw.k;
  params.a = x;
  params.lda = qw.k;
  params.c = y;
  params.ldc = qw.n;
  if (bias != nullptr) {
    params.bias = bias;
    params.bias_kind = GemmBias::kPerColumn;
  }
  const Status status = sgemm_packed_a(params, *a, pack, &pool);
  if (!status.ok()) return op_error(StatusCode::kUnavailable, "linear_q", "the SGEMM failed: ", status.message());
  return Status::Ok();
}

}  // namespace

Status LinearQ(KernelContext& ctx, Inputs in, Outputs out, Attrs) {
  KILN_RETURN_IF_ERROR(check_io("linear_q", in, out, {.min_inputs = 3, .max_inputs = 5, .num_outputs = 1,
                                                      .optional_inputs = 0b11000}));
  const TensorView& x = in[0];
  const TensorView* bias = in.size() >= 4 && !is_absent(in[3]) ? &in[3] : nullptr;
  const TensorView* zero_points = in.size() >= 5 && !is_absent(in[4]) ? &in[4] : nullptr;
  QuantWeight qw{};
  KILN_RETURN_IF_ERROR(quant_weight("linear_q", in[1], in[2], zero_points, qw));
  KILN_RETURN_IF_ERROR(check_dtype("linear_q", "x", x, DType::kF32));
  KILN_RETURN_IF_ERROR(check_dtype("linear_q", "out", out[0], DType::kF32));
  if (x.rank < 1) return invalid("linear_q", "x must be at least 1-D, got x.shape=", shape_text(x));
  if (x.shape[x.rank - 1] != qw.k) {
    return invalid("linear_q", "x.shape[", x.rank - 1, "]=", x.shape[x.rank - 1], " != the weight's ", qw.k, " columns");
  }
  if (bias != nullptr) {
    KILN_RETURN_IF_ERROR(check_dtype("linear_q", "bias", *bias, DType::kF32));
    if (bias->rank != 1 || bias->shape[0] != qw.n) {
      return invalid("linear_q", "bias.shape=", shape_text(*bias), " but weight.shape[0]=", qw.n);
    }
  }
  std::array<std::int64_t, kMaxRank> expected = x.shape;
  expected[x.rank - 1] = qw.n;
  KILN_RETURN_IF_ERROR(check_out_shape("linear_q", out[0], std::span<const std::int64_t>(expected.data(), x.rank)));
  if (out[0].numel() == 0) return Status::Ok();
  const std::int64_t rows = dims_product(x, 0, x.rank - 1);
  const float* xs = x.as<const float>();
  float* y = out[0].as<float>();
  const float* b = bias != nullptr ? bias->as<const float>() : nullptr;
  if (rows > kGemvMaxRows && qw.k > 0) return gemm_dequantizing(qw, xs, rows, b, y, ctx.pool());
  const QuantKernels& kern = quant_kernels();
  ThreadPool& pool = ctx.pool();
  // ~64 KiB of weight bytes per chunk at least, split evenly over the threads.
  const std::int64_t row_cost = std::max<std::int64_t>(1, qw.k * qw.bits / 8);
  const std::int64_t grain = std::max<std::int64_t>(4, pool.even_grain(qw.n, row_cost, 1 << 16) / 4 * 4);
  // int4 in whole 32-blocks: activations quantized to int8 per block, integer dot products.
  // int8 in whole 256-blocks: activations rounded to int16 per block (int8 activations cost
  // a 3-layer MLP's cosine 0.99983 < the 0.9999 int8 promises; docs/QUANTIZATION.md).
  const bool q8 = qw.bits == 4 && qw.group % 32 == 0;
  const bool q16 = qw.bits == 8 && qw.group % 256 == 0;
  std::vector<std::int16_t> x16(q16 ? static_cast<std::size_t>(qw.k) : 0);
  std::vector<float> x16scale(q16 ? static_cast<std::size_t>(qw.k / 256) : 0);
  std::vector<std::int8_t> xq(q8 ? static_cast<std::size_t>(qw.k) : 0);
  std::vector<float> xscale(q8 ? static_cast<std::size_t>(qw.k / 32) : 0);
  std::vector<std::int32_t> xsum(xscale.size());
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* xr = xs + r * qw.k;
    float* yr = y + r * qw.n;
    if (q8) {
      quantize_activations(xr, qw.k, xq.data(), xscale.data(), xsum.data());
      const QuantizedActivations xa{xq.data(), xscale.data(), xsum.data()};
      pool.parallel_for(qw.n, grain, [&](std::int64_t j0, std::int64_t j1) { kern.gemv_rows_int4_q8(qw, xa, j0, j1, yr + j0); });
    } else if (q16) {
      quantize_activations_i16(xr, qw.k, x16.data(), x16scale.data());
      const Int16Activations xa{x16.data(), x16scale.data()};
      pool.parallel_for(qw.n, grain, [&](std::int64_t j0, std::int64_t j1) { kern.gemv_rows_int8_q16(qw, xa, j0, j1, yr + j0); });
    } else {
      pool.parallel_for(qw.n, grain, [&](std::int64_t j0, std::int64_t j1) { kern.gemv_rows(qw, xr, j0, j1, yr + j0); });
    }
    if (b != nullptr) {
      for (std::int64_t j = 0; j < qw.n; ++j) yr[j] += b[j];
    }
  }
  return Status::Ok();
}

Status EmbeddingQ(KernelContext&, Inputs in, Outputs out, Attrs) {
  KILN_RETURN_IF_ERROR(check_io("embedding_q", in, out, {.min_inputs = 3, .max_inputs = 4, .num_outputs = 1,
                                                         .optional_inputs = 0b1000}));
  const TensorView* zero_points = in.size() >= 4 && !is_absent(in[3]) ? &in[3] : nullptr;
  QuantWeight qw{};
  KILN_RETURN_IF_ERROR(quant_weight("embedding_q", in[0], in[1], zero_points, qw));
  const TensorView& idx = in[2];
  if (idx.dtype != DType::kI64 && idx.dtype != DType::kI32) return unsupported_dtype("embedding_q", idx.dtype, "indices");
  if (idx.rank + 1 > kMaxRank) {
    return invalid("embedding_q", "indices.shape=", shape_text(idx), " gives a result of rank above ", kMaxRank);
  }
  std::array<std::int64_t, kMaxRank> expected{};
  std::copy_n(idx.shape.begin(), idx.rank, expected.begin());
  expected[idx.rank] = qw.k;
  KILN_RETURN_IF_ERROR(check_out_shape("embedding_q", out[0], std::span<const std::int64_t>(expected.data(), idx.rank + 1)));
  KILN_RETURN_IF_ERROR(check_dtype("embedding_q", "out", out[0], DType::kF32));
  const std::int64_t count = idx.numel();
  auto index_at = [&](std::int64_t i) {
    return idx.dtype == DType::kI64 ? idx.as<const std::int64_t>()[i] : std::int64_t{idx.as<const std::int32_t>()[i]};
  };
  for (std::int64_t i = 0; i < count; ++i) {
    const std::int64_t v = index_at(i);
    if (v < 0 || v >= qw.n) return invalid_input("embedding_q", "indices[", i, "]=", v, " out of range [0, ", qw.n, ")");
  }
  if (out[0].numel() == 0) return Status::Ok();
  const QuantKernels& kern = quant_kernels();
  float* y = out[0].as<float>();
  for (std::int64_t i = 0; i < count; ++i) {
    const std::int64_t v = index_at(i);
    kern.dequantize_rows(qw, v, v + 1, y + i * qw.k);
  }
  return Status::Ok();
}

}  // namespace kiln::cpu::kernels

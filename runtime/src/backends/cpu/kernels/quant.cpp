// linear_q and embedding_q: validation, threading and the batch paths around the fused
// micro-kernels of quant.h.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

#include "backends/cpu/gemm/gemm.h"
#include "backends/cpu/gemm/gemm_kernels.h"
#include "backends/cpu/gemm/gemm_packed_a.h"
#include "backends/cpu/kernels/common.h"
#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/kernels/quant.h"
#include "backends/cpu/kernels/quant_gemm.h"
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
// bandwidth cost); larger ones run the integer GEMM (int_gemm) when the weight allows it,
// else the SGEMM's micro-kernel on panels of W dequantized right before use.
constexpr std::int64_t kGemvMaxRows = 2;

// Panels of W^T per parallel_for chunk (16 weight rows each): the chunk's C columns stay
// in L2 across the K blocks, and 900 panels of a large layer still split evenly.
constexpr std::int64_t kPanelsPerChunk = 8;
// Activation rows swept over each dequantized panel (whole 6-row A panels): each panel is
// dequantized once per this many rows, and the A block (rows x kc floats) stays in L2.
constexpr std::int64_t kRowBlock = 144;

// y[rows, n] = x[rows, k] W^T (+ bias), K-blocked with the weight dequantized right before
// use: x is packed once (pack_a_matrix, K blocks of kc); each chunk of 16-column panels of
// B = W^T runs, per row block and K block, dequantize_panel into a kc x 16 buffer (16 KiB
// at kc = 256, in L1) and then the SGEMM's 6x16 micro-kernel over every A panel of the row
// block against it. The f32 weights exist only one panel at a time in each thread's cache
// (no 8 MiB packed-B block written by both threads and read back through L3, which made
// the sgemm_packed_a route ~5-12 % slower than f32 at batch 64 with 2 threads).
Status gemm_dequantizing(const QuantWeight& qw, const float* x, std::int64_t rows, const float* bias, float* y,
                         ThreadPool& pool) {
  Result<PackedA> a = pack_a_matrix(x, qw.k, rows, qw.k);
  if (!a.ok()) return op_error(StatusCode::kUnavailable, "linear_q", "no memory to pack the activations");
  const QuantKernels& kern = quant_kernels();
  const gemm_detail::GemmKernels& gk = gemm_detail::active_kernels();
  constexpr std::int64_t kNr = gemm_detail::kNr, kMr = gemm_detail::kMr;
  const std::int64_t n_panels = (qw.n + kNr - 1) / kNr, kc_max = a->kc();
  auto body = [&](std::int64_t q0, std::int64_t q1) {
    thread_local std::vector<float> panel;
    panel.resize(static_cast<std::size_t>(kc_max * kNr));
    for (std::int64_t i0 = 0; i0 < rows; i0 += kRowBlock) {
      const std::int64_t i1 = std::min(rows, i0 + kRowBlock);
      for (std::int64_t k0 = 0; k0 < qw.k; k0 += kc_max) {
        const std::int64_t kc = std::min(kc_max, qw.k - k0);
        const bool last = k0 + kc >= qw.k;
        const float* a_block = a->block(k0);
        for (std::int64_t q = q0; q < q1; ++q) {
          const std::int64_t j = q * kNr, cols = std::min(kNr, qw.n - j);
          kern.dequantize_panel(qw, j, cols, k0, kc, panel.data());
          const gemm_detail::Epilogue e{1.0f, k0 > 0 ? 1.0f : 0.0f, last && bias != nullptr ? bias + j : nullptr,
                                        nullptr, 0.0f, GemmActivation::kNone};
          for (std::int64_t i = i0; i < i1; i += kMr) {
            const gemm_detail::MicroTile tile{a_block + (i / kMr) * kc * kMr, panel.data(), y + i * qw.n + j, qw.n, kc,
                                              static_cast<int>(std::min(kMr, rows - i)), static_cast<int>(cols)};
            gk.micro_kernel(tile, e);
          }
        }
      }
    }
  };
  const double flops = 2.0 * static_cast<double>(rows) * static_cast<double>(qw.n) * static_cast<double>(qw.k);
  if (flops < 2.0e6) {
    body(0, n_panels);
  } else {
    pool.parallel_for(n_panels, std::min(kPanelsPerChunk, pool.even_grain(n_panels, 1, 1)), body);
  }
  return Status::Ok();
}

// K columns per integer micro-kernel call: 16 KiB of panel units either way (kc / 4 or kc / 2
// units of 32 x 4 bytes), in L1 while every activation tile of the row block runs on them.
constexpr std::int64_t kQ8Kc = 512;
constexpr std::int64_t kQ16Kc = 256;
// Panels (32 weight rows each) per parallel_for chunk: the chunk's C columns stay in L2
// across the K blocks, and the 448 panels of a 14336-row layer still split evenly.
constexpr std::int64_t kIntPanelsPerChunk = 8;
// Activation tiles (6 rows) swept over each unpacked panel: 144 rows, as kRowBlock.
constexpr std::int64_t kTilesPerRowBlock = kRowBlock / kIntGemmMr;

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

}  // namespace

// The integer GEMM (quant_gemm.h): int4 weights with groups of a multiple of 32 (int8
// activations, kQ8) and int8 weights with groups of a multiple of 256 (int16 activations,
// kQ16), the decode kernels' arithmetic, so a row gives the same result either way up to
// float rounding. Other weights take gemm_dequantizing.
bool int_gemm_supported(const QuantWeight& w) {
  return (w.bits == 4 && w.group % kQ8Block == 0) || (w.bits == 8 && w.group % kQ16Block == 0);
}

// x is quantized once into 6-row tiles (threaded over tiles); each chunk of 32-row weight panels runs, per row
// block and K block, panel_q8/panel_q16 into a per-thread buffer and then the
// micro-kernel over every tile of the row block, accumulating into y across K blocks.
Status int_gemm(const QuantWeight& w, const float* x, std::int64_t rows, const float* bias, float* y, ThreadPool& pool,
                const IntGemmKernels& kern) {
  const bool q8 = w.bits == 4;
  const std::int64_t block = q8 ? kQ8Block : kQ16Block, unit_cols = q8 ? 4 : 2;
  const std::int64_t blocks = w.k / block, tiles = (rows + kIntGemmMr - 1) / kIntGemmMr;
  // One tile: units, scales, then (kQ8) init values, rounded up to 64 bytes.
  const std::int64_t unit_bytes = w.k / unit_cols * kIntGemmMr * 4, meta_bytes = blocks * kIntGemmMr * 4;
  const std::int64_t tile_bytes = (unit_bytes + meta_bytes * (q8 ? 2 : 1) + 63) / 64 * 64;
  const std::unique_ptr<void, FreeDeleter> packed_owner(std::aligned_alloc(64, static_cast<std::size_t>(tile_bytes * tiles)));
  auto* packed = static_cast<std::uint8_t*>(packed_owner.get());
  if (packed == nullptr) return op_error(StatusCode::kUnavailable, "linear_q", "no memory to quantize the activations");
  auto tile_units = [&](std::int64_t t) { return packed + t * tile_bytes; };
  auto tile_scale = [&](std::int64_t t) { return reinterpret_cast<float*>(tile_units(t) + unit_bytes); };
  auto tile_init = [&](std::int64_t t) { return reinterpret_cast<std::int32_t*>(tile_units(t) + unit_bytes + meta_bytes); };
  auto tile_rows = [&](std::int64_t t) { return static_cast<int>(std::min<std::int64_t>(kIntGemmMr, rows - t * kIntGemmMr)); };

  const bool threaded =
      2.0 * static_cast<double>(rows) * static_cast<double>(w.n) * static_cast<double>(w.k) >= 2.0e6;
  auto quantize = [&](std::int64_t t0, std::int64_t t1) {
    for (std::int64_t t = t0; t < t1; ++t) {
      const float* xt = x + t * kIntGemmMr * w.k;
      if (q8) {
        kern.quantize_q8(xt, w.k, tile_rows(t), w.k, tile_units(t), tile_scale(t), tile_init(t));
      } else {
        kern.quantize_q16(xt, w.k, tile_rows(t), w.k, tile_units(t), tile_scale(t));
      }
    }
  };
  if (threaded) {
    pool.parallel_for(tiles, pool.even_grain(tiles, 1, 1), quantize);
  } else {
    quantize(0, tiles);
  }

  const std::int64_t kc_max = std::min(q8 ? kQ8Kc : kQ16Kc, w.k);
  const std::int64_t n_panels = (w.n + kIntGemmNr - 1) / kIntGemmNr;
  // The weight bytes of the next panel to unpack are asked into L2 while the tiles of the
  // current one run, a few cache lines before each tile (32 rows are too many streams for
  // the hardware prefetchers, and 128 prefetches at once stall on the miss buffers).
  const std::int64_t row_bytes = w.k * w.bits / 8;
  struct Prefetch {
    const std::uint8_t* first = nullptr;  // row 0 of the panel at the K block
    std::int64_t rows = 0, lines = 0, next = 0;  // lines per row; next of rows * lines
  };
  auto plan_prefetch = [&](std::int64_t p, std::int64_t k0) {
    Prefetch f;
    if (p >= n_panels || k0 >= w.k) return f;
    f.first = w.data + p * kIntGemmNr * row_bytes + k0 * w.bits / 8;
    f.rows = std::min<std::int64_t>(kIntGemmNr, w.n - p * kIntGemmNr);
    f.lines = (std::min(kc_max, w.k - k0) * w.bits / 8 + 63) / 64;
    return f;
  };
  auto prefetch_some = [&](Prefetch& f, std::int64_t count) {
    for (; count > 0 && f.next < f.rows * f.lines; --count, ++f.next) {
      __builtin_prefetch(f.first + (f.next / f.lines) * row_bytes + (f.next % f.lines) * 64, 0, 2);
    }
  };
  auto body = [&](std::int64_t p0, std::int64_t p1) {
    alignas(64) thread_local std::uint8_t units[std::max(kQ8Kc / 4, kQ16Kc / 2) * kIntGemmNr * 4];
    alignas(64) thread_local float scales[std::max(kQ8Kc / kQ8Block, kQ16Kc / kQ16Block) * kIntGemmNr];
    for (std::int64_t t0 = 0; t0 < tiles; t0 += kTilesPerRowBlock) {
      const std::int64_t t1 = std::min(tiles, t0 + kTilesPerRowBlock);
      for (std::int64_t k0 = 0; k0 < w.k; k0 += kc_max) {
        const std::int64_t kc = std::min(kc_max, w.k - k0);
        const bool last = k0 + kc >= w.k;
        for (std::int64_t p = p0; p < p1; ++p) {
          const std::int64_t j = p * kIntGemmNr;
          const int cols = static_cast<int>(std::min<std::int64_t>(kIntGemmNr, w.n - j));
          (q8 ? kern.panel_q8 : kern.panel_q16)(w, j, cols, k0, kc, units, scales);
          Prefetch ahead = p + 1 < p1 ? plan_prefetch(p + 1, k0) : plan_prefetch(p0, k0 + kc);
          const std::int64_t per_tile = (ahead.rows * ahead.lines + (t1 - t0) - 1) / (t1 - t0);
          for (std::int64_t t = t0; t < t1; ++t) {
            prefetch_some(ahead, per_tile);
            const IntGemmTile tile{tile_units(t) + k0 / unit_cols * kIntGemmMr * 4,
                                   tile_scale(t) + k0 / block * kIntGemmMr,
                                   q8 ? tile_init(t) + k0 / block * kIntGemmMr : nullptr,
                                   units,
                                   scales,
                                   kc / block,
                                   y + t * kIntGemmMr * w.n + j,
                                   w.n,
                                   tile_rows(t),
                                   cols,
                                   k0 > 0,
                                   last && bias != nullptr ? bias + j : nullptr};
            (q8 ? kern.tile_q8 : kern.tile_q16)(tile);
          }
        }
      }
    }
  };
  if (threaded) {
    pool.parallel_for(n_panels, std::min(kIntPanelsPerChunk, pool.even_grain(n_panels, 1, 1)), body);
  } else {
    body(0, n_panels);
  }
  return Status::Ok();
}

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
  if (rows > kGemvMaxRows && qw.k > 0) {
    if (int_gemm_supported(qw)) return int_gemm(qw, xs, rows, b, y, ctx.pool(), int_gemm_kernels());
    return gemm_dequantizing(qw, xs, rows, b, y, ctx.pool());
  }
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

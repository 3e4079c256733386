// Internal: the per-ISA micro-kernels of the quantized weight ops (linear_q, embedding_q;
// quant.cpp validates and drives them). Two builds: quant_scalar.cpp (portable) and
// quant_avx2.cpp (AVX2+FMA+F16C, compiled with -mavx2); quant_kernels() picks the AVX2 one
// when the CPU has it and KILN_CPU_ISA is not "baseline" (the choice simd() makes).
//
// Like gemm_kernels.h this header holds no inline functions or templates: an inline
// function emitted in quant_avx2.cpp could be the copy the linker keeps for every caller.
#pragma once

#include <cstdint>

namespace kiln::cpu::kernels {

/// A quantized weight W[n, k] (rows are output channels), already validated by the caller:
/// `bits` 8 (data: n rows of k int8) or 4 (n rows of k/2 bytes; element c of a row in the
/// low nibble of byte c/2 when c is even, the high one when odd). Element (r, c) is
/// (q(r, c) - zero(r, g)) * scale(r, g) with g = c / group; groups = k / group exactly
/// (group is even for int4). scales: [n][groups] f32, or IEEE half bits when scales_f16.
/// zero_points: [n][groups] u8 or null (zero 8 for int4, 0 for int8).
struct QuantWeight {
  const std::uint8_t* data;
  int bits;
  std::int64_t n, k, group;
  const void* scales;
  bool scales_f16;
  const std::uint8_t* zero_points;
};

/// x quantized to int8 per block of 32 (the int4 decode path, dynamic activation
/// quantization as in ExecuTorch's 8da4w or ggml's q8_0): block b has scale[b] = max|x| / 127
/// (0 for an all-zero block), q = nearbyint(x / scale) in [-127, 127], sum[b] = sum of its q.
/// Within a block the 32 values are stored even elements first (x0, x2, .., x30, x1, .., x31),
/// the order of an int4 row's low and high nibbles. quantize_activations() fills it.
struct QuantizedActivations {
  const std::int8_t* q;  // k values, permuted per block as above
  const float* scale;    // k / 32
  const std::int32_t* sum;
};

/// x rounded to int16 per block of 256 (the int8 decode path): block b has scale[b] =
/// max|x| / 32767 (0 for an all-zero block), q = nearbyint(x / scale) in [-32767, 32767], in
/// column order. The rounding error (~90 dB SQNR) is far below int8 weights' own (~40 dB),
/// unlike int8 activations. quantize_activations_i16() fills it.
struct Int16Activations {
  const std::int16_t* q;  // k values
  const float* scale;     // k / 256
};

struct QuantKernels {
  const char* name;
  /// out[r - row0] = sum_c x[c] * W(r, c) for rows [row0, row1).
  void (*gemv_rows)(const QuantWeight& w, const float* x, std::int64_t row0, std::int64_t row1, float* out);
  /// dst[(r - row0) * k + c] = W(r, c) for rows [row0, row1) (embedding rows; GEMM panels).
  void (*dequantize_rows)(const QuantWeight& w, std::int64_t row0, std::int64_t row1, float* dst);
  /// One 16-column panel of the SGEMM's packed B = W^T (gemm_packed_a.h's PackBFn layout):
  /// out[t * 16 + j] = W(row0 + j, col0 + t) for t < len, j < rows (rows <= 16); zeros for
  /// j >= rows.
  void (*dequantize_panel)(const QuantWeight& w, std::int64_t row0, std::int64_t rows, std::int64_t col0,
                           std::int64_t len, float* out);
  /// int4 with group % 32 == 0 only: out[r - row0] = sum over groups g of scale(r, g) *
  /// sum over its blocks b of x.scale[b] * (sum_k q(r, k) * x.q[k] - zero(r, g) * x.sum[b]),
  /// the dot products exact in int32.
  void (*gemv_rows_int4_q8)(const QuantWeight& w, const QuantizedActivations& x, std::int64_t row0, std::int64_t row1,
                            float* out);
  /// int8 with group % 256 == 0 only: out[r - row0] = sum over groups g of scale(r, g) *
  /// sum over its 256-blocks b of x.scale[b] * sum_k q(r, k) * x.q[k], the dot products
  /// exact in int32.
  void (*gemv_rows_int8_q16)(const QuantWeight& w, const Int16Activations& x, std::int64_t row0, std::int64_t row1,
                             float* out);
};

/// The rounding rule of every activation quantizer here (the decode paths' and the
/// integer GEMM's, quant_gemm.h), for one block of n values: scale = max|x| / qmax and
/// q[i] = nearbyint(clamp(x[i] * (1 / scale), -qmax, qmax)) (round to nearest even). A block
/// whose scale is 0 or subnormal gets scale 0 and q = 0; a block holding an inf or NaN gets
/// scale NaN and q = 0 (so the outputs it reaches are NaN, not silently finite). Returns the
/// scale.
float quantize_block(const float* x, std::int64_t n, float qmax, std::int32_t* q);

/// Fills q (k values), scale and sum (k / 32 each) from x[k]; k % 32 == 0. Portable, so
/// every ISA sees the same quantized activations.
void quantize_activations(const float* x, std::int64_t k, std::int8_t* q, float* scale, std::int32_t* sum);

/// Fills q (k values) and scale (k / 256) from x[k]; k % 256 == 0. Portable.
void quantize_activations_i16(const float* x, std::int64_t k, std::int16_t* q, float* scale);

/// The portable table (always available; tests compare both).
const QuantKernels& quant_kernels_scalar();
/// The AVX2 table, or nullptr when this CPU or build lacks AVX2/FMA/F16C or
/// KILN_CPU_ISA=baseline.
const QuantKernels* quant_kernels_avx2();
/// The best table for this CPU.
const QuantKernels& quant_kernels();

}  // namespace kiln::cpu::kernels

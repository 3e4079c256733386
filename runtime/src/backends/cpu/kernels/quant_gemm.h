// Internal: the integer GEMM of linear_q's batch path (more than two activation rows).
// quant_gemm.cpp drives it; the per-ISA kernels are quant_gemm_scalar.cpp (portable),
// quant_gemm_avx2.cpp (AVX2) and quant_gemm_avx512vnni.cpp (AVX-512 F/VL/BW/DQ + VNNI).
//
// y = x W^T is computed as the decode kernels compute it (quant.h), only batched: each row
// of x is rounded per block of columns to small integers with one f32 scale per block,
// each block's dot products with the weights are exact in int32, and each block's sum is
// converted once and scaled by (activation scale x weight scale). Two forms:
//
//   kQ8  (int4 weights, groups of a multiple of 32): activations int8 per block of 32,
//        scale max|x| / 127 (quantize_activations' rounding); weights as unsigned bytes
//        u = q - zero + 16 (1..31), so block b's dot product is sum u * xq - 16 * sum xq.
//        A unit is 4 consecutive columns: 4 bytes (vpdpbusd's u8 x s8 quadruple).
//   kQ16 (int8 weights, groups of a multiple of 256): activations int16 per block of 256,
//        scale max|x| / 32767 (quantize_activations_i16's rounding); weights sign-extended
//        to int16. A unit is 2 consecutive columns: two int16 (vpdpwssd's pair).
//
// Packed layouts (ISA-independent; every kernel table reads and writes the same bytes):
// - Activation tile: up to kIntGemmMr rows of x over all K columns. units: [K / unit
//   columns][kIntGemmMr][4 bytes]; scale: [K / block][kIntGemmMr] f32; kQ8 also init:
//   [K / block][kIntGemmMr] int32 = -16 * the block's sum of q. Rows past the tile's
//   count are zero (scale 0, init 0).
// - Weight panel: kIntGemmNr weight rows (output columns) over a range of K columns.
//   units: [len / unit columns][kIntGemmNr][4 bytes]; scale: [len / block][kIntGemmNr] f32,
//   the weight scale of the block's group. Rows past the panel's count are zero.
//
// Like quant.h this header holds no inline functions or templates (an inline function
// emitted in an AVX file could be the copy the linker keeps for every caller).
#pragma once

#include <cstdint>

#include "backends/cpu/kernels/quant.h"

namespace kiln {
class Status;
namespace cpu {
class ThreadPool;
}
}  // namespace kiln

namespace kiln::cpu::kernels {

/// Activation rows per packed tile and per micro-kernel call.
inline constexpr int kIntGemmMr = 6;
/// Weight rows (output columns) per packed panel.
inline constexpr int kIntGemmNr = 32;
/// Columns per block (one activation scale, one int32 sum) of each form.
inline constexpr std::int64_t kQ8Block = 32;
inline constexpr std::int64_t kQ16Block = 256;

/// One micro-kernel call: C[0..rows, 0..cols) (+)= the tile's rows times the panel's
/// columns over `blocks` whole blocks. a/a_scale/a_init point at the tile's first block of
/// the range (a_init: kQ8 only), b/b_scale at the panel's. rows <= kIntGemmMr, cols <=
/// kIntGemmNr. C is written (accumulate false) or added to (true), plus bias[0..cols) when
/// bias is not null. Plain aggregate: initialize every field.
struct IntGemmTile {
  const std::uint8_t* a;
  const float* a_scale;
  const std::int32_t* a_init;
  const std::uint8_t* b;
  const float* b_scale;
  std::int64_t blocks;
  float* c;
  std::int64_t ldc;
  int rows;
  int cols;
  bool accumulate;
  const float* bias;
};

struct IntGemmKernels {
  const char* name;
  /// Packs rows [0, rows) of x (row stride ldx, k columns, k % kQ8Block == 0; rows <=
  /// kIntGemmMr) into a kQ8 activation tile. Block b of a row: scale = max|x| / 127 and q =
  /// nearbyint(x * (1 / scale)) clamped to [-127, 127] (0 when max|x| / 127 is 0 or
  /// subnormal); a block holding an inf or NaN gets scale NaN and q = 0, so the row's
  /// outputs are NaN. Every table gives the same bytes.
  void (*quantize_q8)(const float* x, std::int64_t ldx, int rows, std::int64_t k, std::uint8_t* units, float* scale,
                      std::int32_t* init);
  /// The kQ16 tile: blocks of kQ16Block, scale max|x| / 32767, q in [-32767, 32767]; the
  /// same rules otherwise.
  void (*quantize_q16)(const float* x, std::int64_t ldx, int rows, std::int64_t k, std::uint8_t* units,
                       float* scale);
  /// Packs weight rows [row0, row0 + rows) (rows <= kIntGemmNr), columns [col0, col0 +
  /// len) of an int4 weight (group % 32 == 0; col0, len multiples of kQ8Block) into a kQ8
  /// panel.
  void (*panel_q8)(const QuantWeight& w, std::int64_t row0, int rows, std::int64_t col0, std::int64_t len,
                   std::uint8_t* units, float* scale);
  /// The kQ16 panel of an int8 weight (group % 256 == 0; col0, len multiples of kQ16Block).
  void (*panel_q16)(const QuantWeight& w, std::int64_t row0, int rows, std::int64_t col0, std::int64_t len,
                    std::uint8_t* units, float* scale);
  void (*tile_q8)(const IntGemmTile& tile);
  void (*tile_q16)(const IntGemmTile& tile);
};

/// Whether int_gemm runs this weight: int4 with group % 32 == 0 (kQ8) or int8 with group %
/// 256 == 0 (kQ16).
bool int_gemm_supported(const QuantWeight& w);

/// y[rows, w.n] = x[rows, w.k] W^T (+ bias[w.n] when not null) through `kernels`, threaded on
/// `pool` (quant.cpp; linear_q's batch path calls it with int_gemm_kernels()). Requires
/// int_gemm_supported(w), rows >= 1, w.k >= 1. kUnavailable when the packed activations
/// (about rows x k bytes for kQ8, twice that for kQ16) cannot be allocated.
Status int_gemm(const QuantWeight& w, const float* x, std::int64_t rows, const float* bias, float* y, ThreadPool& pool,
                const IntGemmKernels& kernels);

/// The portable table (always available; tests compare the others with it).
const IntGemmKernels& int_gemm_kernels_scalar();
/// The AVX2 table, or nullptr when this CPU or build lacks AVX2/FMA/F16C or
/// KILN_CPU_ISA=baseline.
const IntGemmKernels* int_gemm_kernels_avx2();
/// The AVX-512 VNNI table, or nullptr without AVX-512 F/VL/BW/DQ/VNNI or when
/// KILN_CPU_ISA is baseline or avx2.
const IntGemmKernels* int_gemm_kernels_avx512vnni();
/// The best table for this CPU.
const IntGemmKernels& int_gemm_kernels();

}  // namespace kiln::cpu::kernels

// Internal to the NCHW8c kernels (nchwc.cpp, conv_nchwc_dw.cpp, pool_nchwc.cpp): the
// per-ISA inner loops behind nchwc.h, as tables of plain functions (a portable build and an
// AVX2+FMA one, chosen like simd(): AVX2 unless the CPU lacks it or KILN_CPU_ISA=baseline),
// and the helpers the kernels' drivers share.
//
// The inner loops see one channel block at a time: a plane of pixel vectors [h][w][8]
// (element (y, x, lane) at (y * w + x) * 8 + lane).
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>

#include "backends/cpu/kernels/nchwc.h"

namespace kiln::cpu::nchwc::detail {

// ---------------------------------------------------------------------------------------
// Tile copies between the layouts (nchwc.cpp, nchwc_avx2.cpp)

struct TileKernels {
  /// count pixels of `channels` (1..8) plain rows (row c at src + c * src_stride) into pixel
  /// vectors: dst[p * 8 + c] = src[c * src_stride + p]; lanes >= channels get 0.
  void (*pack)(const float* src, std::int64_t src_stride, std::int64_t channels, std::int64_t count, float* dst);
  /// The inverse: dst[c * dst_stride + p] = src[p * 8 + c] for c < channels, p < count.
  void (*unpack)(const float* src, std::int64_t count, float* dst, std::int64_t dst_stride, std::int64_t channels);
};
const TileKernels& tile_kernels();
const TileKernels& tile_kernels_portable();
const TileKernels& tile_kernels_avx2();  // nchwc_avx2.cpp; only through tile_kernels()

/// Whether the AVX2 tables are the ones in use (simd_avx2() != nullptr).
bool use_avx2();

/// x's data as blocked: x.data itself when x is blocked, else a blocked copy (to_blocked,
/// threaded) in `storage`. Null when the copy cannot be allocated.
const float* blocked_input(const Act& x, std::unique_ptr<float[]>& storage, ThreadPool& pool);

/// Real channels of block b (1..8) of c channels.
inline std::int64_t block_channels(std::int64_t c, std::int64_t b) {
  return c - b * kBlock < kBlock ? c - b * kBlock : kBlock;
}

// ---------------------------------------------------------------------------------------
// Depthwise convolution (conv_nchwc_dw.inc, in conv_nchwc_dw.cpp and conv_nchwc_dw_avx2.cpp)

/// Activation applied in registers before the store (the others run over the stored row).
enum class InRegister : std::uint8_t { kClamp, kHardswish, kHardsigmoid };

/// One output row of one channel block: out[ox] = act(bias + sum_ij w[i][j] * in[iy][ix] +
/// residual[ox]) with iy = oy * stride_h - pad_h + i * dilation_h, ix likewise, taps
/// outside the plane skipped; act = clamp(., lo, hi), then hardswish / hardsigmoid; lanes
/// >= `lanes` stored as 0.
struct DepthwiseRow {
  const float* input;  // [h][w][8]
  std::int64_t h, w;
  const float* weights;  // [kh][kw][8]
  std::int64_t kh, kw, stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w;
  std::int64_t ow;
  const float* bias;      // [8]
  const float* residual;  // this row's [ow][8], or null
  float lo, hi;
  InRegister act;
  std::int64_t lanes;  // 1..8
  float* output;       // this row's [ow][8]
  // The columns (plan_depthwise_columns): output columns [inner_begin, inner_end) read only
  // inside the row; the row goes in `tiles` tiles of ow / tiles or one more pixels (<= 8).
  std::int64_t inner_begin, inner_end, tiles;
};

inline void plan_depthwise_columns(DepthwiseRow& a) {
  const std::int64_t sw = a.stride_w;
  a.inner_begin = std::min((a.pad_w + sw - 1) / sw, a.ow);
  const std::int64_t right = a.w - 1 + a.pad_w - (a.kw - 1) * a.dilation_w;  // the last in-row tap start
  a.inner_end = std::clamp<std::int64_t>(right < 0 ? 0 : right / sw + 1, a.inner_begin, a.ow);
  a.tiles = (a.ow + 7) / 8;
}

struct DepthwiseKernels {
  void (*row)(const DepthwiseRow& a, std::int64_t oy);
};
const DepthwiseKernels& depthwise_kernels();
const DepthwiseKernels& depthwise_kernels_portable();
const DepthwiseKernels& depthwise_kernels_avx2();

// ---------------------------------------------------------------------------------------
// Pools (pool_nchwc.inc, in pool_nchwc.cpp and pool_nchwc_avx2.cpp)

/// One output row of one channel block of a pool (pool.cpp's semantics; avg: no
/// dilation; adaptive: kh.. dilation unused, bins from h/w and oh/ow); lanes >= `lanes`
/// stored as 0.
struct PoolRow {
  const float* input;  // [h][w][8]
  std::int64_t h, w;
  std::int64_t kh, kw, stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w;
  bool count_include_pad;
  std::int64_t oh, ow;
  std::int64_t lanes;
  float* output;  // this row's [ow][8]
  /// max / avg: output columns [inner_begin, inner_end) whose windows lie inside the row
  /// (plan_pool_columns).
  std::int64_t inner_begin, inner_end;
};

/// The columns whose windows (kw taps dilation_w apart, or kw contiguous ones when
/// `dilated` is false: avg_pool2d) start at or after column 0 and end inside the row.
inline void plan_pool_columns(PoolRow& a, bool dilated) {
  const std::int64_t sw = a.stride_w, span = (a.kw - 1) * (dilated ? a.dilation_w : 1);
  a.inner_begin = std::min((a.pad_w + sw - 1) / sw, a.ow);
  const std::int64_t right = a.w - 1 + a.pad_w - span;
  a.inner_end = std::clamp<std::int64_t>(right < 0 ? 0 : right / sw + 1, a.inner_begin, a.ow);
}

struct PoolKernels {
  void (*max_row)(const PoolRow& a, std::int64_t oy);
  void (*avg_row)(const PoolRow& a, std::int64_t oy);
  void (*adaptive_avg_row)(const PoolRow& a, std::int64_t oy);
  /// out[lane] = mean of the plane's `pixels` vectors, summed in f32 per run of pixels and
  /// in double across runs.
  void (*mean)(const float* plane, std::int64_t pixels, float* out);
};
const PoolKernels& pool_kernels();
const PoolKernels& pool_kernels_portable();
const PoolKernels& pool_kernels_avx2();

}  // namespace kiln::cpu::nchwc::detail

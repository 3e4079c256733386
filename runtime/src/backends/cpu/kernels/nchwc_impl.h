// Internal to the NCHW8c kernels (nchwc.cpp, conv_nchwc_dw.cpp, pool_nchwc.cpp): the
// per-ISA inner loops behind nchwc.h, as tables of plain functions (a portable build and an
// AVX2+FMA one, chosen like simd(): AVX2 unless the CPU lacks it or KILN_CPU_ISA=baseline),
// and the helpers the kernels' drivers share.
//
// The inner loops see one channel block at a time: a plane of pixel vectors [h][w][8]
// (element (y, x, lane) at (y * w + x) * 8 + lane).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstddef>
#include <memory>
#include <new>

#include "backends/cpu/kernels/nchwc.h"
#include "backends/cpu/thread_pool.h"

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

/// Real channels of block b (1..8) of c channels.
inline std::int64_t block_channels(std::int64_t c, std::int64_t b) {
  return c - b * kBlock < kBlock ? c - b * kBlock : kBlock;
}

/// Rows of one channel block's plane as pixel vectors: row r at data + (r - first_row) *
/// w * 8.
struct PlaneRows {
  const float* data;
  std::int64_t first_row;
};
/// Rows [r0, r1) of block `block` of image `image` of x: x's own plane when x is blocked,
/// else packed from x's channel planes into `buffer` ((r1 - r0) * x.w * 8 floats).
PlaneRows block_rows(const Act& x, std::int64_t image, std::int64_t block, std::int64_t r0, std::int64_t r1,
                     float* buffer);

/// Floats rounded up to whole 64-byte lines (scratch parts that start on a line: a pixel
/// vector across two lines loads at half speed).
inline std::int64_t whole_lines(std::int64_t floats) { return (floats + 15) / 16 * 16; }

/// Whether a per-channel kernel (depthwise convolution, pooling) shares its output out
/// among the threads by rows rather than by channel blocks. The pool gives each thread the
/// same share of every call's indices (thread_pool.h), so a kernel whose split matches its
/// producer's reads what its own core just wrote; on two vCPUs whose L2s are apart, data
/// from the other core costs up to 3x. Its producer is typically a 1x1 expansion, which
/// conv2d_dense splits by output channels when the weights outweigh the input, i.e. when
/// the channels outnumber the input pixels, else by pixel bands: the same test here.
inline bool split_by_rows(const ThreadPool& pool, std::int64_t channels, std::int64_t in_pixels) {
  return pool.num_threads() > 1 && channels <= in_pixels;
}

/// Output rows [0, n * blocks * oh) in chunks over the pool, each chunk cut into bands of
/// at most `band` rows of one (image, block): fn(image, block, oy0, oy1, scratch) with
/// `scratch_floats` floats of the chunk's own, 64-byte aligned. `row_cost`: the work of a
/// row, for even chunks. The indices run in (image, block, row) order, or with `by_rows`
/// in (image, row share, block, row) order, where the rows of each image are cut into one
/// share per thread (so each thread runs the same rows of every block). False when the
/// scratch could not be allocated (fn then did not run on some rows).
template <typename Fn>
bool for_each_band(ThreadPool& pool, std::int64_t n, std::int64_t blocks, std::int64_t oh, std::int64_t band,
                   std::int64_t row_cost, std::int64_t scratch_floats, bool by_rows, const Fn& fn) {
  const std::int64_t parts = by_rows ? std::clamp<std::int64_t>(pool.num_threads(), 1, std::max<std::int64_t>(oh, 1)) : 1;
  const std::int64_t rows = n * blocks * oh;
  std::atomic<bool> failed{false};
  pool.parallel_for(rows, pool.even_grain(rows, row_cost, 1 << 14), [&](std::int64_t begin, std::int64_t end) {
    std::unique_ptr<float[]> storage;
    float* scratch = nullptr;
    if (scratch_floats > 0) {
      storage.reset(new (std::nothrow) float[static_cast<std::size_t>(scratch_floats + 16)]);
      if (storage == nullptr) {
        failed = true;
        return;
      }
      const std::uintptr_t at = reinterpret_cast<std::uintptr_t>(storage.get());
      scratch = storage.get() + ((64 - at % 64) % 64) / sizeof(float);
    }
    for (std::int64_t i = begin; i < end;) {
      if (parts == 1) {
        const std::int64_t oy0 = i % oh, item = i / oh;
        const std::int64_t oy1 = std::min({oh, oy0 + band, oy0 + (end - i)});
        fn(item / blocks, item % blocks, oy0, oy1, scratch);
        i += oy1 - oy0;
        continue;
      }
      // Index i: image i / (blocks * oh); within it, row share p covers the indices
      // [blocks * first(p), blocks * first(p + 1)) with first(p) = p * oh / parts, block
      // by block, its rows [first(p), first(p + 1)) each.
      const std::int64_t image = i / (blocks * oh), k = i % (blocks * oh);
      std::int64_t p = std::min(parts - 1, k / blocks * parts / oh);
      while (p + 1 < parts && (p + 1) * oh / parts * blocks <= k) ++p;
      while (p > 0 && p * oh / parts * blocks > k) --p;
      const std::int64_t first = p * oh / parts, share = (p + 1) * oh / parts - first;
      const std::int64_t block = (k - first * blocks) / share, oy0 = first + (k - first * blocks) % share;
      const std::int64_t oy1 = std::min({first + share, oy0 + band, oy0 + (end - i)});
      fn(image, block, oy0, oy1, scratch);
      i += oy1 - oy0;
    }
  });
  return !failed;
}

/// Output rows per band: about `pixels` output pixels and input rows of at most `pixels`
/// input pixels (input rows of a band: (band - 1) * stride + span), at least 1.
inline std::int64_t band_rows(std::int64_t pixels, std::int64_t ow, std::int64_t w, std::int64_t stride,
                              std::int64_t span) {
  const std::int64_t by_out = pixels / std::max<std::int64_t>(ow, 1);
  const std::int64_t in_rows = pixels / std::max<std::int64_t>(w, 1);
  const std::int64_t by_in = in_rows > span ? (in_rows - span) / stride + 1 : 1;
  return std::max<std::int64_t>(1, std::min(by_out, by_in));
}

// ---------------------------------------------------------------------------------------
// Depthwise convolution (conv_nchwc_dw.inc, in conv_nchwc_dw.cpp and conv_nchwc_dw_avx2.cpp)

/// The activation applied in registers before the store (gelu runs over the stored band):
/// none, max(v, lo), clamp(v, lo, hi), hardswish, hardsigmoid, silu.
enum class InRegister : std::uint8_t { kNone, kMax, kClamp, kHardswish, kHardsigmoid, kSilu };

/// Output pixels of a register tile at most: one accumulator each, and 12 independent FMA
/// chains keep both FMA pipes busy where 8 (4-cycle latency x 2 pipes) leave them waiting.
inline constexpr std::int64_t kDepthwiseTile = 12;

/// Output columns [begin, ...) of a row taken as `tiles` register tiles of `base` or (the
/// first `wider` ones) base + 1 pixels; `edge`: some tile's window crosses an end of the row.
struct ColumnRun {
  std::int64_t begin, tiles, base, wider;
  bool edge;
};

/// Output rows of one channel block: out[oy][ox] = act(bias + sum_ij w[i][j] * in[iy][ix] +
/// residual[oy][ox]) with iy = oy * stride_h - pad_h + i * dilation_h, ix likewise, taps
/// outside the plane skipped; act: InRegister (lo, hi: kMax's and kClamp's bounds); lanes
/// >= `lanes` stored as 0. Output and residual rows are ow * 8 floats apart, from the
/// call's first row oy0.
struct DepthwiseRows {
  PlaneRows input;  // the block's [h][w][8] plane (the rows the call reads)
  std::int64_t h, w;
  const float* weights;  // [kh][kw][8]
  std::int64_t kh, kw, stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w;
  std::int64_t ow;
  const float* bias;      // [8]
  const float* residual;  // [oy1 - oy0][ow][8], or null
  float lo, hi;
  InRegister act;
  std::int64_t lanes;  // 1..8
  float* output;       // [oy1 - oy0][ow][8]
  /// The row's columns as register tiles (plan_depthwise_columns); with edge_columns,
  /// columns [0, left_end) and [right_begin, ow) are left to column tiles.
  ColumnRun run;
  bool edge_columns;
  std::int64_t left_end, right_begin;
};

/// The columns of a depthwise row. The columns whose windows lie inside the row go in one
/// run of tiles of even widths (54 = 11 + 11 + 11 + 11 + 10, not 12 x 4 + 6: a narrow tile
/// has fewer FMA chains), and when they are at most a sixth of the row, the columns left
/// and right of them (1 at pad 1) in column tiles, up to 12 output rows of one column at a
/// time, every tap tested against the plane: as edge tiles of full width those cost
/// 10-25% at 28..112 pixels (3x3 at 14: 30 -> 23 us), as 1-pixel row tiles (one FMA chain
/// each) 8-14%. Else (7x7 planes, 5x5 at 14), one run of edge tiles (every input pixel
/// tested against the row), which measured faster there.
inline void plan_depthwise_columns(DepthwiseRows& a) {
  const std::int64_t sw = a.stride_w;
  const std::int64_t inner_begin = std::min((a.pad_w + sw - 1) / sw, a.ow);
  const std::int64_t right = a.w - 1 + a.pad_w - (a.kw - 1) * a.dilation_w;  // the last in-row tap start
  const std::int64_t inner_end = std::clamp<std::int64_t>(right < 0 ? 0 : right / sw + 1, inner_begin, a.ow);
  const std::int64_t edges = a.ow - (inner_end - inner_begin);
  a.edge_columns = edges > 0 && edges * 6 <= a.ow;
  a.left_end = a.edge_columns ? inner_begin : 0;
  a.right_begin = a.edge_columns ? inner_end : a.ow;
  const std::int64_t begin = a.left_end, count = a.right_begin - a.left_end;
  ColumnRun& r = a.run;
  r.begin = begin;
  r.tiles = (count + kDepthwiseTile - 1) / kDepthwiseTile;
  r.base = r.tiles > 0 ? count / r.tiles : 0;
  r.wider = count - r.base * r.tiles;
  r.edge = !a.edge_columns && (inner_begin > 0 || inner_end < a.ow);
}

struct DepthwiseKernels {
  /// Output rows [oy0, oy1).
  void (*rows)(const DepthwiseRows& a, std::int64_t oy0, std::int64_t oy1);
};
const DepthwiseKernels& depthwise_kernels();
const DepthwiseKernels& depthwise_kernels_portable();
const DepthwiseKernels& depthwise_kernels_avx2();

// ---------------------------------------------------------------------------------------
// Pools (pool_nchwc.inc, in pool_nchwc.cpp and pool_nchwc_avx2.cpp)

/// Output rows of one channel block of a pool (pool.cpp's semantics; avg: no dilation;
/// adaptive: kh.. dilation unused, bins from h/w and oh/ow); lanes >= `lanes` stored as 0.
/// Output rows are ow * 8 floats apart, from the call's first row oy0.
struct PoolRows {
  PlaneRows input;  // the block's [h][w][8] plane (the rows the call reads)
  std::int64_t h, w;
  std::int64_t kh, kw, stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w;
  bool count_include_pad;
  std::int64_t oh, ow;
  std::int64_t lanes;
  float* output;  // [oy1 - oy0][ow][8]
  /// max / avg: output columns [inner_begin, inner_end) whose windows lie inside the row
  /// (plan_pool_columns).
  std::int64_t inner_begin, inner_end;
};

/// The columns whose windows (kw taps dilation_w apart, or kw contiguous ones when
/// `dilated` is false: avg_pool2d) start at or after column 0 and end inside the row.
inline void plan_pool_columns(PoolRows& a, bool dilated) {
  const std::int64_t sw = a.stride_w, span = (a.kw - 1) * (dilated ? a.dilation_w : 1);
  a.inner_begin = std::min((a.pad_w + sw - 1) / sw, a.ow);
  const std::int64_t right = a.w - 1 + a.pad_w - span;
  a.inner_end = std::clamp<std::int64_t>(right < 0 ? 0 : right / sw + 1, a.inner_begin, a.ow);
}

struct PoolKernels {
  /// Output rows [oy0, oy1).
  void (*max_rows)(const PoolRows& a, std::int64_t oy0, std::int64_t oy1);
  void (*avg_rows)(const PoolRows& a, std::int64_t oy0, std::int64_t oy1);
  void (*adaptive_avg_rows)(const PoolRows& a, std::int64_t oy0, std::int64_t oy1);
  /// out[lane] = mean of the plane's `pixels` vectors, summed in f32 per run of pixels and
  /// in double across runs.
  void (*mean)(const float* plane, std::int64_t pixels, float* out);
};
const PoolKernels& pool_kernels();
const PoolKernels& pool_kernels_portable();
const PoolKernels& pool_kernels_avx2();

}  // namespace kiln::cpu::nchwc::detail

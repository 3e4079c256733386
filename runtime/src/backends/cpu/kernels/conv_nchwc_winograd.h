// The kernels behind conv2d_winograd (nchwc.h): Winograd F(4x4, 3x3) and F(2x2, 3x3) on
// NCHW8c, shared by conv_nchwc_winograd.cpp (the driver, the weights, the cost rule and the
// portable build), conv_nchwc_winograd_avx2.cpp (AVX2+FMA) and
// conv_nchwc_winograd_avx512.cpp (AVX-512).
//
// The algorithm (Lavin & Gray): a 4x4 output tile of one image needs the 6x6 input tile
// around it; per input channel block, V = B^T d B turns the 36 input pixel vectors (8
// channels each, read straight from NCHW8c) into 36 transformed ones ("xi" = 6 * row +
// column), and per output channel
//   M[xi][tile][k] = sum_c V[xi][tile][c] U[xi][c][k],   U = G g G^T (the weights, 6x6)
// is 36 independent GEMMs; the output tile is A^T M A + bias (+ residual, activation),
// written as 8-channel vectors. 36 multiplies per (input, output channel) pair make 16
// outputs instead of 144. F(2x2, 3x3) (4x4 input tiles, 16 values) makes 4 outputs from
// 16 multiplies instead of 36: more multiplies than F(4x4), but its U is 1.78x the raw
// weight instead of 4x, which is what few tiles per weight want (resnet's 7x7 layers at
// batch 1 would stream their 37.7 MB F(4x4) transform from memory for 4 tiles). Below, "36"
// is 16 for F(2x2), "4x4" output tiles 2x2 and "6x6" input tiles 4x4.
//
// The work, per tile group (tiles of the batch consecutive in the order image, tile row,
// tile column) and chunk of output block groups (one "unit" per pool task):
//  1. the input transform of every input block of the group's tiles into V (the thread's
//     buffer), laid out for the GEMM: [xi][row block][input block][row][8 channels], a row
//     block being at most `rows` tiles (the group split into even row blocks);
//  2. in passes over a few block groups at a time, whose M stays in L2: for each xi, each
//     block group of `width` output blocks and each row block, a register tile (rows x
//     width blocks) accumulates over every input channel and stores to M
//     [xi][output block][tile][8] (the thread's buffer), prefetching the next block group's
//     U meanwhile (kStreamed: the next pass's packed kernels); then
//  3. the output transform of every (tile, output block) of the pass into y.
// Groups hold at least 16 tiles (each U element streamed from memory feeds that many
// FMAs) and otherwise a V of 512 KiB; with several threads, a multiple of the thread count
// of groups, or, for few tiles (resnet's 14x14 and 7x7 layers), the block groups split
// between the threads, each transforming the group's input itself. No serial phase: one
// parallel_for over the units. The transformed weights U are [xi][block group][input
// channel][width blocks][8 lanes] (the last block group narrower), so one input channel's
// weights for a register tile are width * 8 consecutive floats, like conv2d_dense's.
//
// The weights (prepare_winograd) hold the 3x3 kernels packed for the weight transform
// ([block group][input channel][9 taps][width blocks][8 lanes]: 1x the raw weights), and by
// default (WinogradWeightMode::kStreamed) nothing else: each run transforms U itself, per
// pass over a few block groups into the thread's buffer (its packed kernels prefetched into
// L2 along the previous pass's register tiles), or, when several tile groups would each
// transform a small U (up to 1 MiB) again, once for the run over the pool. A run then reads
// 9 floats per kernel from memory instead of 36 (F(4x4)) or 16 (F(2x2)) and pays the
// transform (~1-20% of a layer's time: most on 256@14, where the cached U came from memory
// anyway). kCached (KILN_WINOGRAD_WEIGHTS=cached) keeps the whole U made by the first run
// instead: resnet18 then holds 37.8 MB of F(4x4) transforms for layers 1-3 and 50.3 MB of
// F(2x2) ones for layer4 (88 MB for 37.8 MB of weights). resnet18 at 224x224, `kiln run`
// peak RSS: 119.5 MiB cached, 62.5 MiB streamed (44.5 MiB of weights); time within -9..+5%
// of cached on resnet18/50 and densenet121 with AVX-512, +12% on resnet18 with the AVX2
// tables (docs/PERFORMANCE.md).
//
// Performance (AMD Zen 4, 1 core, resnet18 224x224 in a network run: weights from memory;
// the direct kernel conv2d_dense and the plain layout's Winograd for comparison), per 3x3
// stride-1 layer, 1 thread / 2 threads:
//   64@56   F(4x4) 0.66 / 0.37 ms   direct 2.05 / 1.11   plain Winograd ~1.25
//   128@28  F(4x4) 0.60 / 0.34 ms
//   256@14  F(4x4) 0.83 / 0.55 ms   direct 2.2 / 1.36
//   512@7   F(2x2) 1.37 / 0.83 ms   direct 3.5 / 2.7
// The GEMMs run at ~105 GFLOP/s per core (peak ~117), the transforms take 10-15% of
// 64@56 and less elsewhere; 256@14 and 512@7 on two threads are bound by streaming their
// U from memory (27 GB/s for both cores: 9.4 and 16.8 MB). bench/nchwc_winograd_bench.cpp
// has the layer shapes (resnet, RegNet-like widths, few channels, batch 4).
//
// Error (tests/kernels/conv_nchwc_winograd_test.cpp, ErrorOnResnetLayersStaysSmall:
// kaiming-uniform weights, inputs in [-1, 1], against a double reference; outputs' RMS
// ~0.8): F(4x4) max |error| 2.6e-5 (64@56) .. 6.2e-5 (512@7), RMS error 1.4e-6 .. 2.7e-6;
// F(2x2) max 1.2e-6 .. 2.8e-6; conv2d_dense max 3.4e-6 .. 7.7e-6. resnet18 end to end
// against PyTorch: max |diff| 5.7e-6, the worst element at 19% of its tolerance (rtol 1e-4,
// atol 1e-5; the plain layout: 13%). F(6x6, 3x3) is not built: simulated in float32 on the
// same layers (numpy, the same construction), its RMS error is 2x F(4x4)'s and its max
// 1.5x (7.5e-5 at 512@7: 0.45% of that layer's outputs miss rtol 1e-4 / atol 1e-5 against
// double, F(4x4) 0.04%), and it is not clearly faster: 64 multiplies per 36 outputs
// (-21%), but 56 and 28 are not multiples of 6 (+15% of tiles: -9% net on the GEMMs of
// resnet18's 56x56 and 28x28 layers, ~1.5% of the network) and it loses at 14x14 and 7x7.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "backends/cpu/kernels/conv_nchwc_kernels.h"
#include "backends/cpu/kernels/nchwc.h"

namespace kiln::cpu::nchwc {

/// The tile sizes: index 0 and 1 of WinogradKernels::transforms.
enum class WinogradTile : int { kF4 = 0, kF2 = 1 };
/// Output tile side (4, 2), input tile side (6, 4) and transformed values (36, 16).
inline constexpr int winograd_out_side(WinogradTile t) { return t == WinogradTile::kF4 ? 4 : 2; }
inline constexpr int winograd_in_side(WinogradTile t) { return winograd_out_side(t) + 2; }
inline constexpr int winograd_values(WinogradTile t) { return winograd_in_side(t) * winograd_in_side(t); }
inline constexpr int kWinogradMaxWidth = 6;      // output blocks per register tile
inline constexpr int kWinogradMaxRows = 16;      // tiles per register tile

/// One tile row's run of tiles, for one input channel block: the input transform.
struct WinogradInputRun {
  /// The input rows of the tile row (6 for F(4x4), 4 for F(2x2)): pixel x of row i at
  /// rows[i] + x * 8 (blocked pixels); null: a row outside the plane (zeros).
  const float* rows[6] = {};
  /// Pixels per row; column of tile 0's first input pixel (m * tx - pad_w, m = 4 or 2:
  /// may be < 0).
  std::int64_t w = 0, x0 = 0;
  /// Tiles: tile k reads columns x0 + mk .. x0 + mk + m + 1 (zeros outside [0, w)).
  std::int64_t count = 0;
  /// Real channels of the block (1..8): the lanes above read as zero.
  std::int64_t lanes = 8;
  /// Tile k's value xi goes to dst + xi * xi_stride + k * 8.
  float* dst = nullptr;
  std::int64_t xi_stride = 0;
};

/// One tile row's run of tiles, for one output block: the output transform and epilogue.
struct WinogradOutputRun {
  /// Tile k's value xi at m + xi * xi_stride + k * 8.
  const float* m = nullptr;
  std::int64_t xi_stride = 0;
  std::int64_t count = 0;
  /// Output rows of the tile row (1..m) and columns of the run (tile k writes columns mk
  /// .. min(mk + m, cols) - 1).
  std::int64_t rows = 4, cols = 0;
  /// 8 floats (the block's bias; zeros past out_channels).
  const float* bias = nullptr;
  /// Output pixel (i, j) of the run at out + i * out_row + j * 8; residual: null or the
  /// same with its own row stride (may be `out` itself).
  float* out = nullptr;
  std::int64_t out_row = 0;
  const float* residual = nullptr;
  std::int64_t residual_row = 0;
  TileActivation act = TileActivation::kNone;
  /// Real channels of the block (1..8): the lanes above are stored as zeros.
  std::int64_t lanes = 8;
};

/// A register tile: rows x B output blocks over every input channel.
struct WinogradGemmArgs {
  /// Row p of input block cb at v + cb * v_block_stride + p * 8 (8 channels).
  const float* v = nullptr;
  std::int64_t v_block_stride = 0;
  std::int64_t in_blocks = 0;
  /// Input channel c's B * 8 weights at u + c * B * 8.
  const float* u = nullptr;
  /// The cache lines [prefetch, prefetch + 16 * prefetch_lines) to fetch into L2 along the
  /// way, prefetch_per_block per input block (the next block group's U, or in kStreamed the
  /// next pass's packed kernels, spread over the register tiles before it, so that
  /// streaming from memory overlaps the FMAs instead of stalling the tile or transform that
  /// needs it first); null: none.
  const float* prefetch = nullptr;
  std::int64_t prefetch_lines = 0, prefetch_per_block = 0;
  /// Row p of output block b to m + b * m_block_stride + p * 8.
  float* m = nullptr;
  std::int64_t m_block_stride = 0;
};
using WinogradGemmFn = void (*)(const WinogradGemmArgs& a);

/// A tile size's transforms of one run.
struct WinogradTransforms {
  void (*input)(const WinogradInputRun& r);
  void (*output)(const WinogradOutputRun& r);
  /// U = G g G^T of `channels` input channels' 3x3 kernels for `lanes` output channels (a
  /// multiple of 8): channel c's tap t (3 * row + column) for output lane l at g + (9 c +
  /// t) * lanes + l; its value xi to u + c * lanes + l + xi * xi_stride.
  void (*weights)(const float* g, std::int64_t channels, std::int64_t lanes, float* u, std::int64_t xi_stride);
};

/// The kernels of one ISA: transforms[WinogradTile], gemm[B - 1][P - 1] for every B <=
/// kWinogradMaxWidth and P <= max_rows[B - 1].
struct WinogradKernels {
  const char* name;
  int max_rows[kWinogradMaxWidth];
  /// The width prepare_winograd packs for `out_blocks` output blocks.
  int (*preferred_width)(std::int64_t out_blocks);
  WinogradTransforms transforms[2];
  WinogradGemmFn gemm[kWinogradMaxWidth][kWinogradMaxRows];
};

/// Portable (8-lane GCC vectors), AVX2+FMA and AVX-512 kernels; the latter two null when
/// the CPU or KILN_CPU_ISA rules them out (as dense_kernels_avx2 / _avx512).
const WinogradKernels& winograd_kernels_portable();
const WinogradKernels* winograd_kernels_avx2();
const WinogradKernels* winograd_kernels_avx512();
/// The best of the three: what conv2d_winograd runs.
const WinogradKernels& winograd_kernels();

/// conv2d_winograd on a given ISA's kernels (tests compare every table the CPU runs), with
/// the tile size the cost rule picks (winograd_tile).
Status conv2d_winograd_on(const WinogradKernels& kernels, const Act& x, const WinogradWeights& w, const ConvShape& s,
                          const Epilogue& e, const Act& y, ThreadPool& pool, std::span<std::byte> workspace = {});
/// The same with a given tile size. The weights hold one transform, made by their first
/// run for the tile size it asks: a later run asking the other one runs the one made.
/// `workspace` (64-byte aligned, as conv2d_winograd's): the threads' buffers, one per
/// thread that can have work, then the run's transformed weights when it makes them, as
/// far as it holds them; the rest comes from the threads' own buffers.
Status conv2d_winograd_tile(const WinogradKernels& kernels, WinogradTile tile, const Act& x, const WinogradWeights& w,
                            const ConvShape& s, const Epilogue& e, const Act& y, ThreadPool& pool,
                            std::span<std::byte> workspace = {});

/// Where a run's transformed weights U come from.
enum class WinogradWeightMode {
  /// Transformed inside the run from the kernels packed at load (as large as the raw
  /// weights): per pass over a few block groups into the thread's buffer, or, when several
  /// tile groups would each transform it again and it is small (up to 1 MiB), once for the
  /// run. The weights hold 1x their raw size and each run reads 9 floats per kernel from
  /// memory instead of 36 (16). The default.
  kStreamed,
  /// Transformed whole by the first run and kept (4x the raw weights for F(4x4), 1.78x for
  /// F(2x2)), the packed kernels dropped: no transform per run, 2-5% faster on some CNNs,
  /// 1.5-2x the memory (KILN_WINOGRAD_WEIGHTS=cached).
  kCached,
};
/// The mode prepare_winograd gives: kCached when KILN_WINOGRAD_WEIGHTS=cached, else
/// kStreamed (read once).
WinogradWeightMode winograd_weight_mode();

/// prepare_winograd with the block-group width chosen by the caller (1..kWinogradMaxWidth)
/// and the weight mode.
Result<std::unique_ptr<WinogradWeights>> prepare_winograd_width(const float* w, const ConvShape& s, int width,
                                                                WinogradWeightMode mode = winograd_weight_mode());

/// Bytes the weights hold now: the packed kernels, and the whole transform once a run has
/// made it (kCached; then the packed kernels are dropped).
std::int64_t winograd_weight_bytes(const WinogradWeights& w);
/// The tile size of the whole transform the weights hold (false while they hold none:
/// before the first run, and always in kStreamed).
bool winograd_transformed_tile(const WinogradWeights& w, WinogradTile* tile);


/// The cost rule behind winograd_preferred: estimated microseconds of conv2d_dense and of
/// Winograd with each tile size on `threads` threads (this CPU's measured rates; weights
/// streamed from memory, as in a network; Winograd in `mode`), and the tile size it picks
/// for Winograd.
double direct_estimate_us(const ConvShape& s, std::int64_t n, std::int64_t oh, std::int64_t ow, int threads);
double winograd_estimate_us(WinogradTile tile, const ConvShape& s, std::int64_t n, std::int64_t oh, std::int64_t ow,
                            int threads, WinogradWeightMode mode = winograd_weight_mode());
WinogradTile winograd_tile(const ConvShape& s, std::int64_t n, std::int64_t oh, std::int64_t ow, int threads);

}  // namespace kiln::cpu::nchwc

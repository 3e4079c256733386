// The kernels behind conv2d_winograd (nchwc.h): Winograd F(4x4, 3x3) and F(2x2, 3x3) on
// NCHW8c, shared by
// conv_nchwc_winograd.cpp (the driver, the weights and the portable build),
// conv_nchwc_winograd_avx2.cpp (AVX2+FMA) and conv_nchwc_winograd_avx512.cpp (AVX-512).
//
// The algorithm (Lavin & Gray): a 4x4 output tile of one image needs the 6x6 input tile
// around it; per input channel block, V = B^T d B turns the 36 input pixel vectors into 36
// transformed ones ("xi" = 6 * row + column), and per output channel
//   M[xi][tile][k] = sum_c V[xi][tile][c] U[xi][c][k],   U = G g G^T (the weights, 6x6)
// is 36 independent GEMMs; the output tile is A^T M A + bias (+ residual, activation).
// 36 multiplies per (input, output channel) pair make 16 outputs instead of 144.
// F(2x2, 3x3) (4x4 input tiles, 16 values) makes 4 outputs from 16 instead of 36: more
// multiplies than F(4x4) but a transform of the weights 1.78x their size instead of 4x,
// which is what few tiles per weight want (resnet's 7x7 layers at batch 1 stream their
// 37.7 MB F(4x4) transform from DRAM for 4 tiles). Below, "36" is 16 for F(2x2), "4x4"
// output tiles 2x2 and "6x6" input tiles 4x4.
//
// The work, per tile group (a run of `group_tiles` tiles of the batch, consecutive in the
// order image, tile row, tile column) and range of output blocks (the group's "unit"):
//  1. the input transform of every input block of the group's tiles into V (the thread's
//     buffer), laid out for the GEMM: [xi][row block][input block][row][8 channels], a row
//     block being `rows` tiles (balanced: the group's tiles split into even row blocks of at
//     most that many);
//  2. for each xi, each block group of `width` output blocks and each row block: a
//     register tile of (rows x width blocks) accumulates over every input channel and
//     stores to M [xi][output block][tile][8] (the thread's buffer);
//  3. the output transform of every (tile, output block) of the unit into y.
// A group is small enough that its V and M stay in L2 next to the streamed U. The
// transformed weights U are [xi][block group][input channel][width blocks][8 lanes] (the
// last block group narrower), so one input channel's weights for a register tile are
// width * 8 consecutive floats, like conv2d_dense's packing (conv_nchwc_kernels.h).
#pragma once

#include <cstdint>
#include <memory>

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
  /// way, prefetch_per_block per input block (the next block group's U, spread over the
  /// register tiles before it, so that streaming U from memory overlaps the FMAs instead
  /// of stalling the first tile that needs it); null: none.
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
                          const Epilogue& e, const Act& y, ThreadPool& pool);
/// The same with a given tile size. The weights hold one transform, made by their first
/// run for the tile size it asks: a later run asking the other one runs the one made.
Status conv2d_winograd_tile(const WinogradKernels& kernels, WinogradTile tile, const Act& x, const WinogradWeights& w,
                            const ConvShape& s, const Epilogue& e, const Act& y, ThreadPool& pool);

/// prepare_winograd with the block-group width chosen by the caller (1..kWinogradMaxWidth).
Result<std::unique_ptr<WinogradWeights>> prepare_winograd_width(const float* w, const ConvShape& s, int width);

/// Bytes the weights hold now: the raw copy until the first run, then the transform.
std::int64_t winograd_weight_bytes(const WinogradWeights& w);
/// The tile size of the transform the weights hold (false until the first run).
bool winograd_transformed_tile(const WinogradWeights& w, WinogradTile* tile);

/// The cost rule behind winograd_preferred: estimated microseconds of conv2d_dense and of
/// Winograd with each tile size on `threads` threads (this CPU's measured rates; weights
/// streamed from memory, as in a network), and the tile size it picks for Winograd.
double direct_estimate_us(const ConvShape& s, std::int64_t n, std::int64_t oh, std::int64_t ow, int threads);
double winograd_estimate_us(WinogradTile tile, const ConvShape& s, std::int64_t n, std::int64_t oh, std::int64_t ow,
                            int threads);
WinogradTile winograd_tile(const ConvShape& s, std::int64_t n, std::int64_t oh, std::int64_t ow, int threads);

}  // namespace kiln::cpu::nchwc

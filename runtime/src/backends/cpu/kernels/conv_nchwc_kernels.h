// The micro-kernels behind conv2d_dense (nchwc.h), shared by conv_nchwc.cpp (the driver and
// the portable build), conv_nchwc_avx2.cpp (AVX2+FMA) and conv_nchwc_avx512.cpp (AVX-512:
// a zmm register holds two blocks).
//
// A tile is P output pixels x B output-channel blocks of one convolution group, held in
// registers: per input channel it loads the B weight vectors, broadcasts the P pixels' input
// values and runs P * B FMAs. The P pixels are anywhere in the image (a tile may span rows),
// each addressed by its own offset, but they share one list of kernel taps: the driver
// groups pixels by the taps their window has inside the input (the interior, each border
// strip, each corner), so no tap is tested in the loop and no padding is ever read.
//
// Weights (DenseWeights, made by prepare_dense_width) are packed per convolution group and
// per group of `width` output blocks ("block group", the last one narrower):
//   [input block cb][tap kh*kw][input channel ci of the block: 8][output block b: B][lane: 8]
// so one input channel's B weight vectors are B * 8 consecutive floats. Input channels past
// the group's own (the last block of an ungrouped convolution) and output lanes past
// out_channels have zero weights.
#pragma once

#include <cstdint>
#include <memory>

#include "backends/cpu/kernels/nchwc.h"

namespace kiln::cpu::nchwc {

/// The activations a tile applies itself (kSilu/kGelu* run over the finished output).
enum class TileActivation : std::int32_t { kNone, kRelu, kRelu6, kHardswish, kHardsigmoid };

/// One block group over a list of tiles. Offsets are in floats.
struct DenseTileArgs {
  /// The group's input channel 0 in the image.
  const float* in = nullptr;
  /// Floats between input channel blocks (8 * h * w), and between the channels of a
  /// block (1 blocked, h * w plain).
  std::int64_t in_block_stride = 0, in_channel_stride = 1;
  /// Input channel blocks; channels read in the last one (8 blocked; 1..8 plain input,
  /// which has no padded lanes to read).
  std::int64_t in_blocks = 0, last_block_channels = 8;
  /// The taps: input offset of each from a pixel's first tap, and its index i * kw + j.
  const std::int64_t* tap_in = nullptr;
  const std::int64_t* tap_index = nullptr;
  std::int64_t taps = 0;
  /// Weights of the block group ([in_blocks][kh*kw][8][B][8]) and floats per input block.
  const float* w = nullptr;
  std::int64_t w_block_stride = 0;
  /// B * 8 floats (zeros past out_channels).
  const float* bias = nullptr;
  /// Output block 0 of the group (blocked layout, or the driver's blocked scratch) and
  /// floats between output blocks; residual: null, or blocked with out's offsets.
  float* out = nullptr;
  std::int64_t out_block_stride = 0;
  const float* residual = nullptr;
  TileActivation act = TileActivation::kNone;
  /// Pixel runs (the kernel's offsets arrays null): pixel i of the call (tile i / P) reads
  /// its input at in + run_in + i * run_in_step and writes out + run_out + i * 8.
  std::int64_t run_in = 0, run_in_step = 0, run_out = 0;
};

/// Runs tiles of `pixels` pixels each, one after the other: tile k's pixel p reads its
/// input at in + in_off[k * pixels + p] (its first tap) and writes out + out_off[k *
/// pixels + p] (+ b * out_block_stride); with null offsets, at the run's (DenseTileArgs).
/// `blocked_input` selects the channel addressing.
using DenseTileFn = void (*)(const DenseTileArgs& a, const std::int64_t* in_off, const std::int64_t* out_off,
                             std::int64_t tiles);

/// The micro-kernels of one ISA: fn[blocked_input][B - 1][P - 1] for every B <= kMaxWidth
/// and P <= max_pixels[B - 1] (null beyond).
inline constexpr int kMaxWidth = 8;
inline constexpr int kMaxPixels = 16;
struct DenseKernels {
  const char* name;
  int max_pixels[kMaxWidth];
  /// The block-group width prepare_dense picks for `out_blocks` output blocks per group,
  /// `in_channels` input channels per group and `taps` = kh * kw.
  int (*preferred_width)(std::int64_t out_blocks, std::int64_t in_channels, std::int64_t taps);
  DenseTileFn fn[2][kMaxWidth][kMaxPixels];
  /// Winograd F(4x4, 3x3) transforms (conv_nchwc_winograd.cpp; the layouts:
  /// conv_nchwc_tile.inc).
  void (*winograd_input)(const float* x, bool blocked, std::int64_t channels, std::int64_t h, std::int64_t w,
                         std::int64_t in_blocks, std::int64_t pad_h, std::int64_t pad_w, std::int64_t tiles_w,
                         std::int64_t t0, std::int64_t count, float* v);
  void (*winograd_output)(const float* m, std::int64_t out_blocks, std::int64_t tiles_w, std::int64_t t0,
                          std::int64_t count, const float* bias, const float* residual, float* y, std::int64_t oh,
                          std::int64_t ow, TileActivation act, float* tiles_out);
};

/// The portable kernels (8-lane GCC vectors); the AVX2+FMA ones (null when the CPU lacks
/// AVX2/FMA or KILN_CPU_ISA=baseline); the AVX-512 ones (null when the CPU lacks AVX-512
/// F/VL/BW/DQ or KILN_CPU_ISA is avx2 or baseline).
const DenseKernels& dense_kernels_portable();
const DenseKernels* dense_kernels_avx2();
const DenseKernels* dense_kernels_avx512();
/// The kernels conv2d_dense runs: the best of the three this CPU (and KILN_CPU_ISA) allows.
const DenseKernels& dense_kernels();

/// conv2d_dense on the kernels of a given ISA (tests compare every table the CPU runs).
Status conv2d_dense_on(const DenseKernels& kernels, const Act& x, const DenseWeights& w, const ConvShape& s,
                       const Epilogue& e, const Act& y, ThreadPool& pool);

/// The checks both convolutions make (messages "[op] ..."): weights `prepared` for the
/// same channels, groups and kernel as `s`, a shape the kernel `supported`, x and y (and
/// the residual) of the extents `s` gives.
Status check_conv_call(const char* op, const Act& x, const ConvShape& prepared, bool supported, const ConvShape& s,
                       const Epilogue& e, const Act& y);

/// The rows of a 1x1 convolution (stride 1, no padding, one group) block group by block
/// group into a caller's blocked buffer: how conv2d_expand_depthwise (nchwc.h) makes its
/// depthwise convolution's input a band at a time, in cache (conv_nchwc.cpp). Made once
/// per call; run() is safe on several threads at once.
class PointwiseRows {
 public:
  virtual ~PointwiseRows() = default;
  /// Block groups of the output channels (the weights' own grouping, DenseWeights), and
  /// group q's first output block and block count.
  virtual std::int64_t block_groups() const = 0;
  virtual std::int64_t first_block(std::int64_t q) const = 0;
  virtual std::int64_t width(std::int64_t q) const = 0;
  /// Output rows [r0, r1) of image n, block group q: block b of the group (b < width(q))
  /// at out + b * out_block_stride as [r1 - r0][x.w][8], bias and activation applied
  /// (padded lanes: act(0), finite).
  virtual void run(std::int64_t n, std::int64_t q, std::int64_t r0, std::int64_t r1, float* out,
                   std::int64_t out_block_stride) const = 0;
};
/// PointwiseRows of x for weights `w` prepared for `s` (1x1, stride 1, no padding, dilation
/// 1, groups 1; x.c == s.in_channels) with epilogue `e` (no residual). kInvalidInput for
/// another shape, kUnavailable without memory.
Result<std::unique_ptr<PointwiseRows>> pointwise_rows(const DenseKernels& kernels, const Act& x, const DenseWeights& w,
                                                      const ConvShape& s, const Epilogue& e);

/// prepare_dense with the block-group width chosen by the caller (1..kMaxWidth; tests and
/// benchmarks), instead of dense_kernels().preferred_width.
Result<std::unique_ptr<DenseWeights>> prepare_dense_width(const float* w, const ConvShape& s, int width);

}  // namespace kiln::cpu::nchwc

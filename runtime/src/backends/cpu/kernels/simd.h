// Hot f32 loops compiled twice from simd_math.inc: once for the baseline target
// (simd_baseline.cpp) and once with AVX2+FMA+F16C (simd_avx2.cpp). simd() returns the
// best table the CPU supports (chosen once, with __builtin_cpu_supports), or the baseline
// one when the environment has KILN_CPU_ISA=baseline (the GEMM follows the same choice).
//
// Every function takes n elements; y may equal x (in place) but may not partially overlap.
// Accuracy: exp/sigmoid/silu/tanh within a few ulp of libm (exp flushes results below
// 2^-149 to 0); erf (used by gelu) ~2e-7 absolute.
#pragma once

#include <cstdint>

namespace kiln::cpu::kernels {

/// One (image, group) of a direct convolution (conv.cpp prepares it). The input is a
/// zero-padded copy split into `stride_w` column phases: input column x of padded row y of
/// channel c is at input[c * channel_stride + y * row_stride + (x % stride_w) * phase_stride
/// + x / stride_w], so every tap of a strided convolution reads contiguous floats. At least
/// 8 readable floats follow the last one. Weights are packed in blocks of 4 output
/// channels: weights[((block * channels + c) * kh * kw + tap) * 4 + o], zero past
/// out_channels; bias4 holds ceil(out_channels / 4) * 4 values (zeros without a bias).
struct ConvDirectArgs {
  const float* input;
  std::int64_t channels, channel_stride, row_stride, phase_stride;
  std::int64_t kh, kw, stride_h, stride_w, dilation_h, dilation_w;  // kh * kw <= 64
  const float* weights;
  const float* bias4;
  float* output;  // [out_channels][oh][ow]
  std::int64_t out_channels, out_plane, ow;
  bool relu;  // max(x, 0) on the way out
  // Depthwise: the block's 4 output channels each read their own input channel (channel o
  // at input + o * channel_stride, channels == 1), out_channels <= 4 (one block).
  bool depthwise;
};

/// One channel plane of a depthwise convolution (conv.cpp), read in place: output rows of
/// out[oh][ow] = clamp(bias + sum_ij weights[i * kw + j] * input[y][x], lo, hi) with
/// y = oy * stride_h - pad_h + i * dilation_h, x likewise, taps outside the plane skipped.
/// kh <= kConvDepthwiseMaxRows, kh * kw <= kConvDepthwiseMaxTaps. A call over output rows [oy0, oy1) copies the input rows
/// they read, zero-padded, to `scratch`: ((oy1 - oy0 - 1) * stride_h + (kh - 1) *
/// dilation_h + 1) rows of row_floats >= (ow + 8) * stride_w + (kw - 1) * dilation_w + 16
/// floats (so the last, partial pixel vector reads inside its row).
inline constexpr int kConvDepthwiseMaxRows = 16;
inline constexpr int kConvDepthwiseMaxTaps = 64;
struct ConvDepthwiseArgs {
  const float* input;  // [h][w]
  std::int64_t h, w, kh, kw, stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w;
  const float* weights;  // [kh][kw]
  float bias, lo, hi;    // lo/hi: -inf/inf without a clamp; relu 0/inf; relu6 0/6
  float* output;         // [oh][ow]
  std::int64_t oh, ow;
  float* scratch;
  std::int64_t row_floats;
};

/// Up to 8 channels of a depthwise convolution (one input and output channel per group;
/// conv.cpp), NCHW planes read and written in place: out[c][oy][ox] = act(bias[c] +
/// sum_ij weights[i * kw + j][c] * input[c][y][x]) with y = oy * stride_h - pad_h + i *
/// dilation_h, x likewise, taps outside the plane skipped. The block's channels sit in the
/// 8 lanes of a vector (conv_depthwise.inc transposes the rows it reads and writes), so
/// every stride, dilation and plane size runs whole vectors. kh <= kConvDepthwiseMaxRows,
/// kh * kw <= kConvDepthwiseMaxTaps. act = clamp(., lo, hi), then x * clamp(x + 3, 0, 6) / 6
/// when hardswish.
struct ConvDepthwiseBlockArgs {
  const float* input;     // channel 0 of the block: [channels][h][w]
  std::int64_t channels;  // 1..8
  std::int64_t h, w, kh, kw, stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w;
  const float* weights;  // [kh * kw][8]: tap-major, channel lanes (lanes >= channels: ignored)
  const float* bias;     // [8]
  float lo, hi;          // -inf/inf without a clamp; relu 0/inf; relu6 0/6
  bool hardswish;
  float* output;  // channel 0 of the block: [channels][oh][ow]
  std::int64_t oh, ow;
  /// conv_depthwise_block_scratch_floats(...) floats, owned by the caller (one per thread).
  float* scratch;
};
/// Pixels in one padded row of the block kernel's ring: the input columns output columns
/// [0, ow) read.
inline std::int64_t conv_depthwise_block_width(std::int64_t ow, std::int64_t kw, std::int64_t stride_w,
                                               std::int64_t dilation_w) {
  return (ow - 1) * stride_w + (kw - 1) * dilation_w + 1;
}
/// Input rows the ring holds: one output row's window.
inline std::int64_t conv_depthwise_block_ring(std::int64_t kh, std::int64_t dilation_h) {
  return (kh - 1) * dilation_h + 1;
}
/// Output rows the block kernel gathers before writing them back (at least 64 pixels, so
/// narrow planes go back in whole 8-pixel groups).
inline std::int64_t conv_depthwise_block_out_rows(std::int64_t ow) { return ow >= 64 ? 1 : 64 / ow; }
/// The scratch of one conv_depthwise_block call: the ring of padded pixel rows and
/// conv_depthwise_block_out_rows output rows of pixel vectors (+ one 8-pixel group).
inline std::int64_t conv_depthwise_block_scratch_floats(std::int64_t kh, std::int64_t kw, std::int64_t stride_w,
                                                        std::int64_t dilation_h, std::int64_t dilation_w,
                                                        std::int64_t ow) {
  return 8 * (conv_depthwise_block_ring(kh, dilation_h) * conv_depthwise_block_width(ow, kw, stride_w, dilation_w) +
              conv_depthwise_block_out_rows(ow) * ow + 8);
}

struct SimdKernels {
  const char* name;
  void (*exp)(const float* x, float* y, std::int64_t n);
  void (*tanh)(const float* x, float* y, std::int64_t n);
  void (*sigmoid)(const float* x, float* y, std::int64_t n);
  void (*silu)(const float* x, float* y, std::int64_t n);
  void (*gelu_erf)(const float* x, float* y, std::int64_t n);
  void (*gelu_tanh)(const float* x, float* y, std::int64_t n);
  void (*sqrt)(const float* x, float* y, std::int64_t n);
  void (*rsqrt)(const float* x, float* y, std::int64_t n);
  /// y = softmax(x) over `rows` contiguous rows of n (short rows a few at a time).
  void (*softmax_rows)(const float* x, float* y, std::int64_t rows, std::int64_t n);
  /// y = log_softmax(x) over one contiguous row.
  void (*log_softmax_row)(const float* x, float* y, std::int64_t n);
  /// y = (x - mean) / sqrt(var + eps) * w + b over one row (biased variance); w and b may
  /// be null (1 and 0).
  void (*layer_norm_row)(const float* x, const float* w, const float* b, float* y,
                         std::int64_t n, float eps);
  /// f32 <-> IEEE half bits (round to nearest even); null where the table has no hardware
  /// conversion (the baseline one), in which case callers convert in software.
  void (*f32_to_f16)(const float* x, std::uint16_t* y, std::int64_t n);
  void (*f16_to_f32)(const std::uint16_t* x, float* y, std::int64_t n);
  /// Sum of n floats, and sum of (x - mean)^2: 8 lanes in f32 per 512-element block, the
  /// blocks added in double (layer norm's and variance's statistics).
  float (*row_sum)(const float* x, std::int64_t n);
  float (*row_sq_dev)(const float* x, float mean, std::int64_t n);
  /// Output rows [oy0, oy1) of every output channel of one direct convolution.
  void (*conv_direct_rows)(const ConvDirectArgs& args, std::int64_t oy0, std::int64_t oy1);
  /// Winograd F(4x4, 3x3) input transform of every 6x6 tile of one [h][w] channel plane
  /// (conv_winograd.inc): tile (ty, tx) reads rows 4ty - pad_h .. +5 and columns 4tx - pad_w
  /// .. +5 (zeros outside) and writes B^T d B element xi (0..35) to
  /// v[xi * xi_stride + ty * tiles_w + tx].
  void (*winograd_input)(const float* plane, std::int64_t h, std::int64_t w, std::int64_t pad_h, std::int64_t pad_w,
                         std::int64_t tiles_h, std::int64_t tiles_w, float* v, std::int64_t xi_stride);
  /// The output transform of one output channel: out[oh][ow] = A^T m A + bias over each
  /// tile's products m[xi * xi_stride + ty * tiles_w + tx], max(., 0) when relu.
  void (*winograd_output)(const float* m, std::int64_t xi_stride, std::int64_t tiles_h, std::int64_t tiles_w,
                          float* out, std::int64_t oh, std::int64_t ow, float bias, bool relu);
  /// The weight transform U = G g G^T of one output channel's `channels` 3x3 kernels
  /// (w[c * 9 + 3 * row + column]): element xi of channel c goes to u[xi * xi_stride + c].
  void (*winograd_weights)(const float* w, std::int64_t channels, float* u, std::int64_t xi_stride);
  /// Output rows [oy0, oy1) of one depthwise channel plane (conv_depthwise.inc).
  void (*conv_depthwise_rows)(const ConvDepthwiseArgs& args, std::int64_t oy0, std::int64_t oy1);
  /// Output rows [oy0, oy1) of one block of up to 8 depthwise channels (conv_depthwise.inc).
  void (*conv_depthwise_block)(const ConvDepthwiseBlockArgs& args, std::int64_t oy0, std::int64_t oy1);
  /// A transposing copy of 32-bit elements (moved as bits, any payload):
  /// dst[a * dst_stride + b] = src[a + b * src_stride] for a < rows, b < cols, in 8 x 8
  /// tiles (one register transpose each in the AVX2 table).
  void (*transpose32)(const std::uint32_t* src, std::int64_t src_stride, std::uint32_t* dst, std::int64_t dst_stride,
                      std::int64_t rows, std::int64_t cols);
  /// n outputs of the fused bilinear gathers (gather_lerp2): with a = s[o0[b]], c = s[o2[b]],
  /// top = a + (s[o1[b]] - a) * w0[b], bot = c + (s[o3[b]] - c) * w1[b],
  /// d[b] = top + (bot - top) * w2[b], each step rounded as the separate f32 sub, mul and add
  /// kernels round it (8-lane gathers in the AVX2 table).
  void (*gather_lerp2_row)(const float* s, const std::int32_t* o0, const std::int32_t* o1, const std::int32_t* o2,
                           const std::int32_t* o3, const float* w0, const float* w1, const float* w2, float* d,
                           std::int64_t n);
  /// d[b] = a + (c - a) * w[b] with a = s[ia[b]], c = s[ic[b]], for b < n (a lerp of two
  /// gathers along one row; the same roundings).
  void (*lerp_gather_row)(const float* s, const std::int32_t* ia, const std::int32_t* ic, const float* w, float* d,
                          std::int64_t n);
  /// d[b] = a[b] + (c[b] - a[b]) * w for b < n (the same roundings).
  void (*lerp_rows)(const float* a, const float* c, float w, float* d, std::int64_t n);
};

/// The table for this CPU (AVX2+FMA when available).
const SimdKernels& simd();
/// The portable table (for tests comparing both paths).
const SimdKernels& simd_baseline();
/// The AVX2+FMA table, or nullptr when this CPU (or build) lacks it or KILN_CPU_ISA=baseline.
const SimdKernels* simd_avx2();
/// Whether the AVX-512 kernel tables (F, VL, BW, DQ) may run: the CPU has them, simd_avx2()
/// is usable and KILN_CPU_ISA is not avx2 (or baseline).
bool cpu_avx512_usable();

}  // namespace kiln::cpu::kernels

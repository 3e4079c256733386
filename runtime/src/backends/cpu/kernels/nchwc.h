// NCHW8c: the blocked channel layout of 4-D f32 activations on the CPU (issue 14).
//
// A logical [N, C, H, W] tensor stored blocked is [N, ceil(C / 8), H, W, 8]: the 8 channels
// of a block sit next to each other for every pixel, one AVX2 register. Element (n, c, y, x)
// is at ((n * Cb + c / 8) * H * W + y * W + x) * 8 + c % 8, Cb = ceil(C / 8). The lanes of
// the last block past C ("padded lanes") hold finite values, unspecified: a kernel never
// lets them reach a real channel (a convolution's weights for padded input channels are
// zero; elementwise ops keep finite values finite), and a reorder to plain drops them.
//
// The executor's layout pass (executor/layout.cpp) decides at load which values are
// blocked: a chain of convolutions, pools and the elementwise ops between them stays
// blocked, and a kernel whose input or output must be plain (the network's input, a
// reshape, a graph output) reads or writes plain NCHW itself (every kernel here takes
// either layout on either side: Act::blocked).
//
// Kernels (each threads over `pool`, checks nothing the caller already checked, and never
// reads or writes outside the extents its Acts describe):
// - reorders: to_blocked / to_plain (nchwc.cpp);
// - dense and grouped convolution (conv_nchwc.cpp): conv2d_dense;
// - Winograd for 3x3 stride-1 convolutions (conv_nchwc_winograd.cpp): conv2d_winograd;
// - depthwise convolution (conv_nchwc_dw.cpp): conv2d_depthwise, and conv2d_expand_depthwise
//   (a 1x1 expansion computed band by band into it);
// - pools (pool_nchwc.cpp): max_pool2d, avg_pool2d, adaptive_avg_pool2d, mean_hw.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "backends/cpu/kernel.h"
#include "backends/cpu/thread_pool.h"
#include "kiln/runtime/status.h"

namespace kiln::cpu::nchwc {

inline constexpr std::int64_t kBlock = 8;

/// Whether this build has the blocked kernels (the layout pass blocks nothing without them).
bool kernels_available();

/// Channels rounded up to a whole block.
inline constexpr std::int64_t padded_channels(std::int64_t c) { return (c + kBlock - 1) / kBlock * kBlock; }

/// A 4-D f32 activation [n, c, h, w] in either layout. `data` is the first element of
/// image 0. Stored floats: n * (blocked ? padded_channels(c) : c) * h * w.
struct Act {
  float* data = nullptr;
  std::int64_t n = 0, c = 0, h = 0, w = 0;
  bool blocked = false;

  std::int64_t stored_channels() const { return blocked ? padded_channels(c) : c; }
  std::int64_t image_floats() const { return stored_channels() * h * w; }
  std::int64_t floats() const { return n * image_floats(); }
  /// Offset of element (0, c, y, x) from the start of its image.
  std::int64_t offset(std::int64_t ch, std::int64_t y, std::int64_t x) const {
    return blocked ? ((ch / kBlock) * h * w + y * w + x) * kBlock + ch % kBlock : (ch * h + y) * w + x;
  }
};

/// Bytes of a [n, c, h, w] f32 tensor stored blocked; nullopt-free: callers check products
/// for overflow first (the executor's planner does).
inline std::int64_t blocked_floats(std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w) {
  return n * padded_channels(c) * h * w;
}

// ---------------------------------------------------------------------------------------
// Reorders (nchwc.cpp)

/// plain [n, c, hw] -> blocked [n, ceil(c/8), hw, 8]; the padded lanes get zeros.
void to_blocked(const float* src, float* dst, std::int64_t n, std::int64_t c, std::int64_t hw, ThreadPool& pool);
/// blocked [n, ceil(c/8), hw, 8] -> plain [n, c, hw] (padded lanes dropped).
void to_plain(const float* src, float* dst, std::int64_t n, std::int64_t c, std::int64_t hw, ThreadPool& pool);

// ---------------------------------------------------------------------------------------
// Convolution

/// conv2d's geometry. Output size: oh = (h + 2 pad_h - dilation_h (kh - 1) - 1) / stride_h + 1,
/// likewise ow (the caller checks oh, ow >= 1 and the channel counts).
struct ConvShape {
  std::int64_t in_channels = 0, out_channels = 0, groups = 1;
  std::int64_t kh = 1, kw = 1;
  std::int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dilation_h = 1, dilation_w = 1;
};

/// Weights of a dense or grouped convolution prepared for conv2d_dense, made once at load
/// or on first use; immutable afterwards and shared by concurrent runs. Their layout is
/// conv_nchwc.cpp's own: it derives its class from this one (so a unique_ptr of it can be
/// destroyed anywhere).
class DenseWeights {
 public:
  virtual ~DenseWeights() = default;
};
/// Weights of a depthwise convolution prepared for conv2d_depthwise (conv_nchwc_dw.cpp
/// derives its class from this one).
class DepthwiseWeights {
 public:
  virtual ~DepthwiseWeights() = default;
};

/// Whether conv2d_dense runs `s`: groups == 1 (any channel counts), or every group's input
/// and output channel counts are multiples of kBlock. Not depthwise.
bool dense_supported(const ConvShape& s);
/// Whether conv2d_depthwise runs `s`: groups == in_channels == out_channels (one input and
/// one output channel per group), any kernel size, stride, padding and dilation.
bool depthwise_supported(const ConvShape& s);

/// w: [out_channels, in_channels / groups, kh, kw] (conv2d's weight), plain f32. Fails with
/// kUnavailable when the memory cannot be had.
Result<std::unique_ptr<DenseWeights>> prepare_dense(const float* w, const ConvShape& s);
Result<std::unique_ptr<DepthwiseWeights>> prepare_depthwise(const float* w, const ConvShape& s);

/// The epilogue every convolution applies to its output tile before storing it:
/// y = act(conv(x) + bias + residual). bias: [out_channels] or null; residual: an Act of
/// y's shape (either layout, may be y itself only when identical to it) or null; act:
/// cpu::FusedActivation (kNone, kRelu, kRelu6, kHardswish, kHardsigmoid, kSilu, kGeluErf,
/// kGeluTanh).
struct Epilogue {
  const float* bias = nullptr;
  const Act* residual = nullptr;
  FusedActivation act = FusedActivation::kNone;
};

/// The weights of conv(x * scale) for conv2d_dense: `w`'s with input channel c multiplied
/// by scale[c] (c < s.in_channels, every group's channels in order), made in one pass over
/// `w` on `pool` (a squeeze-excitation's scale folded into the 1x1 convolution after it
/// costs the weights' size instead of a pass over the activation). kUnavailable when the
/// memory cannot be had.
Result<std::unique_ptr<DenseWeights>> scale_dense_inputs(const DenseWeights& w, const float* scale, ThreadPool& pool);
/// Floats `w` holds (its packed, padded size).
std::int64_t dense_weight_floats(const DenseWeights& w);

/// y = conv(x) with y.n == x.n, y.c == s.out_channels, y.h/y.w the output size; x.c ==
/// s.in_channels. Either layout on either side.
Status conv2d_dense(const Act& x, const DenseWeights& w, const ConvShape& s, const Epilogue& e, const Act& y,
                    ThreadPool& pool);

/// Winograd for 3x3 stride-1 convolutions on NCHW8c (conv_nchwc_winograd.cpp derives its
/// weights class from this one).
class WinogradWeights {
 public:
  virtual ~WinogradWeights() = default;
};
/// Whether conv2d_winograd runs `s`: 3x3, stride 1, dilation 1, groups 1, padding <= 2.
bool winograd_supported(const ConvShape& s);
/// The cost rule: whether conv2d_winograd beats conv2d_dense for `s` on an input of n
/// images with an oh x ow output, on `threads` threads.
bool winograd_preferred(const ConvShape& s, std::int64_t n, std::int64_t oh, std::int64_t ow, int threads);
/// Winograd's weights (w as for prepare_dense; conv_nchwc_winograd.h: the kernels packed,
/// transformed per run by default). kUnavailable without memory.
Result<std::unique_ptr<WinogradWeights>> prepare_winograd(const float* w, const ConvShape& s);
/// Same contract as conv2d_dense. `workspace` (KernelContext::workspace, 64-byte aligned):
/// memory the run may use for its per-thread buffers and transformed weights instead of
/// its own; what it does not cover comes from the threads' own buffers.
Status conv2d_winograd(const Act& x, const WinogradWeights& w, const ConvShape& s, const Epilogue& e, const Act& y,
                       ThreadPool& pool, std::span<std::byte> workspace = {});
/// The workspace a conv2d_winograd run with these arguments on `threads` threads uses whole
/// (its threads' buffers and the transformed weights it makes for the run): what a caller
/// that lends memory (GraphPlan::workspace) reserves for it; 0 when a thread's buffer is
/// small enough to stay in its core's L2 from layer to layer (it is then the thread's own).
/// Only x's and y's extents and layouts matter; `plain_residual`: a residual is fused and
/// stored plain.
std::uint64_t winograd_workspace_bytes(const WinogradWeights& w, const ConvShape& s, const Act& x, const Act& y,
                                       bool plain_residual, int threads);
Status conv2d_depthwise(const Act& x, const DepthwiseWeights& w, const ConvShape& s, const Epilogue& e, const Act& y,
                        ThreadPool& pool);
/// y = conv2d_depthwise(act(conv1x1(x) + bias)) without the 1x1 convolution's output: an
/// inverted bottleneck's expansion and its depthwise convolution in one pass, the expanded
/// rows made a band at a time into a thread's buffer that stays in L2 (the depthwise
/// convolution reads them there instead of from memory; a thread's consecutive bands share
/// their overlapping rows). x: the expansion's input, either layout; `ew`/`es`/`ee`: the
/// expansion's weights prepared by prepare_dense for a 1x1, stride-1, unpadded, ungrouped
/// `es` (es.out_channels == s.in_channels), its bias and activation (no residual); `dw`,
/// `s`, `e`: the depthwise convolution's, as for conv2d_depthwise; y blocked (and a residual,
/// if any). kInvalidInput for other shapes, kUnavailable without memory.
Status conv2d_expand_depthwise(const Act& x, const DenseWeights& ew, const ConvShape& es, const Epilogue& ee,
                               const DepthwiseWeights& dw, const ConvShape& s, const Epilogue& e, const Act& y,
                               ThreadPool& pool);

// ---------------------------------------------------------------------------------------
// Pools (pool_nchwc.cpp). Same semantics as the plain kernels of the same op (pool.cpp,
// reduce.cpp); either layout on either side; y's extents are the op's output size.

struct PoolShape {
  std::int64_t kh = 1, kw = 1, stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dilation_h = 1, dilation_w = 1;
  bool count_include_pad = true;  // avg_pool2d
};
Status max_pool2d(const Act& x, const PoolShape& s, const Act& y, ThreadPool& pool);
Status avg_pool2d(const Act& x, const PoolShape& s, const Act& y, ThreadPool& pool);
/// PyTorch's adaptive bins: rows [floor(i * h / oh), ceil((i + 1) * h / oh)).
Status adaptive_avg_pool2d(const Act& x, const Act& y, ThreadPool& pool);
/// mean over H and W (y: [n, c, 1, 1]).
Status mean_hw(const Act& x, const Act& y, ThreadPool& pool);

}  // namespace kiln::cpu::nchwc

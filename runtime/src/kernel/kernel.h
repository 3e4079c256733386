// The backend-neutral kernel interface: the views, attributes and context every kernel
// (CPU today, an accelerator's lowering too) is called with. One function per op in
// codegen/ops.def; backends/cpu/kernel.h declares the CPU table and CPU-only helpers.
//
// The executor (and export's eager mode) evaluates every output shape from the bundle's
// symbolic expressions, allocates the outputs, evaluates expression attributes to integers,
// and then calls the kernel. Kernels never trust those shapes: the bundle is hostile input,
// so each kernel first checks that its inputs and outputs are consistent (ranks, dims,
// dtypes, attribute values) and returns a Status naming the op and the mismatch
// ("[matmul] a.shape[1]=63 != b.shape[0]=64") instead of reading or writing out of bounds.
//
// Data-dependent ops (nonzero, masked_select) cannot know their output size in advance:
// the caller passes their outputs unallocated (data == nullptr) and the kernel calls
// KernelContext::allocate_output once it knows the size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "kiln/format/dtype.h"
#include "kiln/format/ops.h"
#include "kiln/runtime/internal/eager.h"
#include "kiln/runtime/status.h"

namespace kiln {

namespace cpu {
class ThreadPool;
class PackedB;
class PreparedWeights;
enum class GemmActivation : std::uint8_t;  // backends/cpu/gemm/gemm.h
}  // namespace cpu

// kMaxRank, TensorView and AttrValue: kiln/runtime/internal/eager.h (export builds them too).

/// A matmul operand that is a window of a larger row-major tensor (a slice along one of its
/// last two dims that the executor folded into the matmul): the operand's rows are `ld`
/// elements apart and its batch matrices `batch_stride` elements apart.
struct OperandWindow {
  std::int64_t ld = 0, batch_stride = 0;
};

/// A 1x1 convolution folded into the depthwise conv2d that reads its output (executor:
/// fuse_expansions, an inverted bottleneck's expansion): that output (the conv2d's input
/// 0) is never computed into memory; the conv2d's kernel makes it band by band from the 1x1
/// conv2d's own inputs (x, weight, bias), attributes, prepared weights and activation.
struct FoldedConv {
  std::span<const TensorView> inputs;
  std::span<const AttrValue> attrs;
  const cpu::PreparedWeights* prepared = nullptr;
  bool input_blocked = false;  // x's layout
  cpu::GemmActivation act{};
};

/// What a kernel may ask of its caller.
class KernelContext {
 public:
  virtual ~KernelContext() = default;
  /// Allocates output `index` (whose view the kernel received with data == nullptr) with
  /// the given shape and fills in `out`. Only data-dependent kernels call this. Fails
  /// (never throws) when the bytes cannot be had.
  virtual Result<TensorView> allocate_output(int index, DType dtype,
                                             std::span<const std::int64_t> shape) = 0;
  /// Threads the kernel may use (1 = run inline). Never null.
  virtual cpu::ThreadPool& pool() = 0;
  /// Input `index` (a constant weight) packed once at load for the SGEMM
  /// (backends/cpu/gemm/gemm.h): linear's weight as op(B) = W^T, matmul's constant 2-D B
  /// as is. Null when not packed; kernels then pack per call.
  virtual const cpu::PackedB* packed_b(int index) const {
    (void)index;
    return nullptr;
  }
  /// Input `index` (a constant weight) prepared once at load by the kernel's own
  /// cpu::prepare_weights (conv2d: Winograd-transformed, packed 3x3 weights). Null when not
  /// prepared (ProgramOptions::prepack_weights off, a non-constant weight, no memory);
  /// kernels then work from the raw input.
  virtual const cpu::PreparedWeights* prepared_weights(int index) const {
    (void)index;
    return nullptr;
  }
  /// The activation to apply to the output (cpu::FusedActivation); kNone unless the
  /// executor fused one into a kernel for which cpu::kernel_fuses() holds.
  virtual cpu::GemmActivation fused_activation() const;
  /// Matmul (f32): input `index` is a window of a larger tensor (OperandWindow); null when
  /// it is dense, as every other kernel's inputs are.
  virtual const OperandWindow* operand_window(int index) const {
    (void)index;
    return nullptr;
  }
  /// Whether input (or output) `index` is stored in the blocked NCHW8c layout
  /// (backends/cpu/kernels/nchwc.h): its view is then the physical [N, ceil(C/8), H, W, 8].
  /// Only kernels the layout pass (executor/layout.cpp) lets see blocked tensors are asked;
  /// the elementwise ones among them never need to know.
  virtual bool input_blocked(int index) const {
    (void)index;
    return false;
  }
  virtual bool output_blocked(int index) const {
    (void)index;
    return false;
  }
  /// A layout kernel (conv2d) whose input and output are plain but that should run its
  /// blocked kernels anyway, converting at its edges (the executor decides: NodeInfo).
  virtual bool blocked_kernel() const { return false; }
  /// conv2d with a residual add fused into it (executor: fuse_residual_adds): the tensor to
  /// add to the output before the activation, y = act(conv + bias + residual), of the
  /// output's shape; `blocked` says its layout. Null when nothing was fused.
  virtual const TensorView* residual(bool* blocked) const {
    if (blocked != nullptr) *blocked = false;
    return nullptr;
  }
  /// conv2d with a channel scale of its input fused into it (executor: fold_channel_scales,
  /// a squeeze-excitation's `mul(x, s)` before a 1x1 convolution): the kernel convolves
  /// x * s, s of shape [N or 1, C, 1, 1] with x's C; `blocked` says s's layout. Null when
  /// nothing was fused.
  virtual const TensorView* input_scale(bool* blocked) const {
    if (blocked != nullptr) *blocked = false;
    return nullptr;
  }
  /// conv2d with the 1x1 convolution making its input folded into it (FoldedConv); its
  /// input 0 then has a shape and no data. Null when nothing was folded.
  virtual const FoldedConv* folded_conv() const { return nullptr; }
  /// Bytes the kernel may use as working memory while it runs (64-byte aligned; empty when
  /// there are none): a stretch of the planned arena that no tensor occupies during this
  /// node (GraphPlan::workspace), so a kernel's buffers cost no memory of their own. It
  /// holds nothing from one call to the next. Kernels fall back to their own buffers when
  /// it is too small.
  virtual std::span<std::byte> workspace() const { return {}; }
};

using KernelFn = Status (*)(KernelContext& ctx, std::span<const TensorView> inputs,
                            std::span<TensorView> outputs, std::span<const AttrValue> attrs);

}  // namespace kiln

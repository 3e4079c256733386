// The CPU kernel table and CPU-only kernel helpers. The interface every kernel is called
// with (TensorView, AttrValue, KernelContext, KernelFn) is backend-neutral:
// kernel/kernel.h.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backends/cpu/gemm/gemm.h"
#include "kernel/kernel.h"
#include "kiln/format/ops.h"

namespace kiln::cpu {

/// An activation the executor fused into the node before it (a linear followed by a relu
/// whose input nothing else reads): that node's kernel applies it to its own result (linear:
/// in the SGEMM epilogue, hence the same enum), and the activation node only passes the
/// bytes on.
using FusedActivation = GemmActivation;

/// The instruction sets the CPU kernels run with on this machine (what the CPU and
/// KILN_CPU_ISA chose), e.g. "gemm avx512, conv avx512, vector avx2".
std::string kernel_isa_summary();

/// Whether the kernel of `op` applies `act` when its context asks (linear: all of them, in
/// the SGEMM epilogue; conv2d: all of them, in the SGEMM epilogue on the im2col and 1x1
/// paths, relu inside the Winograd and direct paths' stores, the others there and on the
/// depthwise paths in a pass over the finished output). Only f32 outputs are fused.
bool kernel_fuses(OpKind op, FusedActivation act);
/// Applies `act` to n floats in place (the fallback of a kernel that fused it).
void apply_activation(FusedActivation act, float* y, std::int64_t n);
/// "relu", "gelu", "gelu_tanh", "silu", "clamp" (kRelu6), "hardswish", "hardsigmoid" (""
/// for kNone): how profiles name a fused node.
const char* activation_name(FusedActivation act);

/// Weights a kernel prepared at load from a constant input (prepare_weights), opaque to
/// the executor, which keeps them for the Program's lifetime and hands them back through
/// KernelContext::prepared_weights. Immutable; shared read-only by concurrent runs.
class PreparedWeights {
 public:
  virtual ~PreparedWeights() = default;
};

/// Prepares input `index` (a constant, `weight`) of a node of `op` with attributes `attrs`
/// (expression attributes not evaluated: kExpr/kExprs then carry no values) for its
/// kernel. Null when the kernel has nothing to prepare for it (conv2d: the Winograd transform
/// of 3x3 stride-1 ungrouped weights of at least 64 x 64 channels, and the packed GEMM
/// operand of weights taking the GEMM paths; kernels/conv_prepared.h). Errors:
/// kUnavailable when the memory cannot be had (the caller then runs unprepared). `blocked`:
/// the node's activations are NCHW8c (executor/layout.cpp), so prepare for those kernels.
Result<std::unique_ptr<PreparedWeights>> prepare_weights(OpKind op, int index, const TensorView& weight,
                                                         std::span<const AttrValue> attrs, bool blocked = false);

/// Bytes of working memory the kernel of `op` uses for these arguments on `threads` threads
/// when its caller lends them (KernelContext::workspace; the executor plans them:
/// GraphPlan::workspace), 0 when it uses none. `in` and `out` need only their shapes (and
/// constant data); the flags say which of x and y are NCHW8c and whether a fused residual
/// is stored plain. Today: conv2d on the blocked Winograd kernel.
std::uint64_t workspace_bytes(OpKind op, const PreparedWeights* prepared, std::span<const TensorView> in,
                              const TensorView& out, std::span<const AttrValue> attrs, bool in_blocked, bool out_blocked,
                              bool plain_residual, int threads);

/// A run of `count` elements from element `offset` (C order) of a tensor.
struct ElementRange {
  std::int64_t offset = 0;
  std::int64_t count = 0;
};

/// Whether the kernel of `op` may run with its output sharing input 0's bytes
/// (out[0].data == in[0].data, same shape) and then changes only the elements
/// in_place_writes names: index_put (a KV cache row update). The executor uses this to
/// update a Session's state tensor in place, saving those elements first.
bool updates_in_place(OpKind op);
/// The elements of input 0 the kernel of `op` (updates_in_place) writes when it runs in
/// place on `in` with `attrs`, appended to `writes` (ranges may repeat or overlap, in the
/// kernel's write order). Fails with the Status the kernel itself returns for these inputs
/// (an index out of range: kInvalidInput naming it), in which case the kernel writes
/// nothing. kInternal for an op without in-place support.
Status in_place_writes(OpKind op, std::span<const TensorView> in, std::span<const AttrValue> attrs,
                       std::vector<ElementRange>& writes);

/// The CPU kernel for `op`, or nullptr if this build has none (higher-order ops are run by
/// the executor itself and have no kernel).
KernelFn cpu_kernel(OpKind op);

}  // namespace kiln::cpu

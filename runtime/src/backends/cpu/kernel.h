// The CPU kernel table and CPU-only kernel helpers. The interface every kernel is called
// with (TensorView, AttrValue, KernelContext, KernelFn) is backend-neutral:
// kernel/kernel.h.
#pragma once

#include "backends/cpu/gemm/gemm.h"
#include "kernel/kernel.h"
#include "kiln/format/ops.h"

namespace kiln::cpu {

/// An activation the executor fused into the node before it (a linear followed by a relu
/// whose input nothing else reads): that node's kernel applies it to its own result (linear:
/// in the SGEMM epilogue, hence the same enum), and the activation node only passes the
/// bytes on.
using FusedActivation = GemmActivation;

/// Whether the kernel of `op` applies `act` when its context asks (linear: all of them, in
/// the SGEMM epilogue; conv2d: relu). Only f32 outputs are fused.
bool kernel_fuses(OpKind op, FusedActivation act);
/// Applies `act` to n floats in place (the fallback of a kernel that fused it).
void apply_activation(FusedActivation act, float* y, std::int64_t n);
/// "relu", "gelu", "gelu_tanh", "silu" ("" for kNone): how profiles name a fused node.
const char* activation_name(FusedActivation act);

/// The CPU kernel for `op`, or nullptr if this build has none (higher-order ops are run by
/// the executor itself and have no kernel).
KernelFn cpu_kernel(OpKind op);

}  // namespace kiln::cpu

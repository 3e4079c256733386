// The blocked side of the layout kernels (layout_kernels.cpp): what conv2d, the pools and
// mean call when an input or output of theirs is stored NCHW8c (executor/layout.cpp).
#pragma once

#include <cstdint>
#include <span>

#include "backends/cpu/kernels/nchwc.h"
#include "kernel/kernel.h"

namespace kiln::cpu::kernels {

/// A 4-D operand of a layout kernel in either layout: its Act, and the logical
/// [N, C, H, W] view (the data of a blocked one is still blocked).
struct BlockedOperand {
  nchwc::Act act;
  TensorView logical;
};
/// `v` as a BlockedOperand: a plain 4-D view, or (blocked) a physical [N, C/8, H, W, 8] one
/// holding `channels` channels (-1: unknown, every lane counts). kInvalidBundle naming
/// `what` when the view does not fit.
Result<BlockedOperand> blocked_operand(const char* op, const char* what, const TensorView& v, bool blocked,
                                       std::int64_t channels);
/// Runs the op's plain kernel on plain copies of the blocked x (input 0) and y (output 0);
/// with a residual (conv2d), y = act(kernel without its activation + residual).
Status run_plain(KernelFn plain, KernelContext& ctx, std::span<const TensorView> in, std::span<TensorView> out,
                 std::span<const AttrValue> attrs, const BlockedOperand& x, const BlockedOperand& y,
                 const BlockedOperand* residual);

/// conv2d with a blocked input or output: nchwc::conv2d_dense/conv2d_depthwise with the
/// weights prepared at load (ConvWeights::nchwc_*), else the plain kernel via run_plain.
Status conv2d_blocked(KernelContext& ctx, std::span<const TensorView> in, std::span<TensorView> out,
                      std::span<const AttrValue> attrs);
/// The workspace conv2d_blocked would use for these arguments on `threads` threads
/// (nchwc::winograd_workspace_bytes when it takes Winograd; else 0). Only shapes, the
/// constant weight and attributes are read.
std::uint64_t conv2d_workspace_bytes(const PreparedWeights* prepared, std::span<const TensorView> in,
                                     const TensorView& out, std::span<const AttrValue> attrs, bool in_blocked,
                                     bool out_blocked, bool plain_residual, int threads);
/// max_pool2d, avg_pool2d, adaptive_avg_pool2d or mean (over H and W) with a blocked input
/// or output.
Status pool_blocked(OpKind op, KernelFn plain, KernelContext& ctx, std::span<const TensorView> in,
                    std::span<TensorView> out, std::span<const AttrValue> attrs);

/// batch_norm (inference) with a blocked input or output: y = act(x * scale + shift) per
/// channel, on the 8-channel vectors when both sides are blocked.
Status batch_norm_blocked(KernelContext& ctx, std::span<const TensorView> in, std::span<TensorView> out,
                          std::span<const AttrValue> attrs);

/// conv2d's checks on logical views (the plain kernel's, conv.cpp): shapes, attributes,
/// bias, the output size. Fills the shape and the bias pointer (null without one).
struct ConvCheck {
  nchwc::ConvShape shape;
  const float* bias = nullptr;
};
Status conv2d_check(std::span<const TensorView> in, const TensorView& out, std::span<const AttrValue> attrs,
                    ConvCheck& check);

/// max_pool2d / avg_pool2d / adaptive_avg_pool2d's checks on logical views (pool.cpp):
/// attributes, the output size; fills the window (unused for the adaptive pool).
Status pool2d_check(OpKind op, const TensorView& x, const TensorView& out, std::span<const AttrValue> attrs,
                    nchwc::PoolShape& s);

}  // namespace kiln::cpu::kernels

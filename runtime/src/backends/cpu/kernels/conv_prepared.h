// conv2d's weights prepared at load (conv2d_prepare, through cpu::prepare_weights): what
// KernelContext::prepared_weights(1) holds for a conv2d node.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>

#include "backends/cpu/gemm/gemm_packed_a.h"
#include "backends/cpu/kernel.h"
#include "backends/cpu/kernels/conv_winograd.h"
#include "backends/cpu/kernels/nchwc.h"

namespace kiln::cpu::kernels {

/// Either part may be null. A 3x3 ungrouped weight with >= 64 x 64 channels and stride and
/// dilation 1 gets both (the cost rule picks Winograd or the GEMM per input size).
struct ConvWeights final : PreparedWeights {
  /// 3x3 stride-1 ungrouped weights that Winograd may run. Their transform
  /// (winograd_prepare, 4x the weight's size) is made on the first run that picks Winograd
  /// (winograd_for), not at load: a layer whose input sizes never pick it (resnet18's 7x7
  /// layer4 at batch 1 runs the GEMM) never holds it.
  bool winograd_eligible = false;
  /// The transform of `w` (this weight), made once, thread-safe; null when it could not be
  /// allocated (the caller then transforms per call).
  const WinogradWeights* winograd_for(const float* w) const;
  /// Made by winograd_for; null until then.
  mutable std::unique_ptr<WinogradWeights> winograd;
  mutable std::once_flag winograd_once;
  /// Weights taking the GEMM paths (1x1, and kernels with more than 64 output channels per
  /// group; not depthwise): per group g, W_g [out_channels / groups x patch] packed as the
  /// SGEMM's A (pack_a_matrix), patch = in_channels / groups x kh x kw.
  std::unique_ptr<PackedA[]> gemm;
  std::int64_t out_channels = 0, groups = 0, patch = 0;
  std::int64_t winograd_k = 0, winograd_c = 0;  // the weight's output and input channels
  /// 1x1 ungrouped weights that conv_pointwise_transposed (conv_pointwise.h) may run, for
  /// inputs with few pixels (pointwise_transposed_profitable). W^T is packed on the first
  /// run that picks it (pointwise_for), not at load: most 1x1 layers never do.
  bool pointwise_eligible = false;
  std::int64_t pointwise_out = 0, pointwise_in = 0;  // the weight's output and input channels
  /// W^T of `w` (this weight), made once, thread-safe; null when it could not be allocated
  /// (the caller then takes the plain GEMM).
  const PackedB* pointwise_for(const float* w) const;
  mutable std::unique_ptr<PackedB> pointwise;
  mutable std::once_flag pointwise_once;
  /// A conv2d whose activations are NCHW8c (executor/layout.cpp): the blocked kernels'
  /// weights (nchwc.h), one of the two, made at load for `nchwc_shape`; nothing else is.
  /// Except for a weight Winograd may run (nchwc_winograd set): its direct kernel's copy is
  /// made by the first run that picks the direct kernel (nchwc_dense_lazy, nchwc_dense_for),
  /// so a layer that always runs Winograd never holds both.
  mutable std::unique_ptr<nchwc::DenseWeights> nchwc_dense;
  bool nchwc_dense_lazy = false;
  mutable std::once_flag nchwc_dense_once;
  /// nchwc_dense, made from `w` (this weight) on the first call when lazy, once,
  /// thread-safe; null when it could not be made (the caller then runs the plain kernel).
  const nchwc::DenseWeights* nchwc_dense_for(const float* w) const;
  std::unique_ptr<nchwc::DepthwiseWeights> nchwc_depthwise;
  /// For a 3x3 weight whose attributes allow it (stride and dilation 1, padding <= 2):
  /// Winograd's weights (its kernels packed, 1x; transformed per run by default), which the
  /// cost rule (nchwc::winograd_preferred) picks per input size.
  std::unique_ptr<nchwc::WinogradWeights> nchwc_winograd;
  nchwc::ConvShape nchwc_shape;
};

}  // namespace kiln::cpu::kernels

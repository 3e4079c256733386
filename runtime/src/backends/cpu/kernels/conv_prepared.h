// conv2d's weights prepared at load (conv2d_prepare, through cpu::prepare_weights): what
// KernelContext::prepared_weights(1) holds for a conv2d node.
#pragma once

#include <cstdint>
#include <memory>

#include "backends/cpu/gemm/gemm_packed_a.h"
#include "backends/cpu/kernel.h"
#include "backends/cpu/kernels/conv_winograd.h"

namespace kiln::cpu::kernels {

/// Either part may be null. A 3x3 ungrouped weight with >= 64 x 64 channels and stride and
/// dilation 1 gets both (the cost rule picks Winograd or the GEMM per input size).
struct ConvWeights final : PreparedWeights {
  /// The Winograd transform (winograd_prepare), 3x3 stride-1 ungrouped weights only.
  std::unique_ptr<WinogradWeights> winograd;
  /// Weights taking the GEMM paths (1x1, and kernels with more than 64 output channels per
  /// group; not depthwise): per group g, W_g [out_channels / groups x patch] packed as the
  /// SGEMM's A (pack_a_matrix), patch = in_channels / groups x kh x kw.
  std::unique_ptr<PackedA[]> gemm;
  std::int64_t out_channels = 0, groups = 0, patch = 0;
};

}  // namespace kiln::cpu::kernels

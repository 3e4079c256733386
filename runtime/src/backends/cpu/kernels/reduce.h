// Reduction planning shared by reduce.cpp and arg_scan.cpp: which dims are reduced, the
// expected output shape, and the input seen as [outer, reduce, inner].
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "backends/cpu/kernels/common.h"

namespace kiln::cpu::kernels {

struct ReducePlan {
  /// The input as [outer, reduce, inner] (row-major). When the reduced dims are not one
  /// contiguous block, `gathered` holds a copy of the input with the kept dims first and
  /// the reduced dims last (inner == 1).
  std::int64_t outer = 1;
  std::int64_t reduce = 1;
  std::int64_t inner = 1;
  const void* data = nullptr;
  std::unique_ptr<unsigned char[]> gathered;
};

/// Validates `dims` (each in [0, rank), no repeats; empty = all dims; for a 0-d input
/// dim 0 is accepted) and out.shape (reduced dims removed, or 1 with keepdim), and plans
/// the reduction. Copies the input (allocating) only when the reduced dims are not
/// adjacent after dropping size-1 dims.
Status plan_reduce(std::string_view op, const TensorView& x, std::span<const std::int64_t> dims,
                   bool keepdim, const TensorView& out, ReducePlan& plan);

}  // namespace kiln::cpu::kernels

// Numpy broadcasting of up to three operands against an output shape, collapsed to as
// few dims as possible so that the innermost loop is long and has simple strides.
//
//   BroadcastPlan plan;
//   KILN_RETURN_IF_ERROR(plan_broadcast("add", {{&a, "a"}, {&b, "b"}}, out, true, plan));
//   for_each_row<2>(plan, [&](const std::array<int64_t, 2>& offsets, int64_t row) { ... });
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string_view>

#include "backends/cpu/kernels/common.h"

namespace kiln::cpu::kernels {

struct BroadcastPlan {
  static constexpr int kMaxOperands = 3;
  int num_operands = 0;
  /// Collapsed rank, >= 1 (a 0-d problem is [1]).
  int rank = 1;
  // Left uninitialized on purpose (kernels build a plan per call): only entries below
  // `rank` are meaningful, and plan_broadcast writes all of them.
  std::array<std::int64_t, kMaxRank> shape;
  /// Element strides of each operand per collapsed dim; 0 where it is broadcast.
  std::array<std::array<std::int64_t, kMaxRank>, kMaxOperands> strides;
  std::int64_t numel = 0;

  std::int64_t inner() const { return shape[rank - 1]; }
  std::int64_t inner_stride(int operand) const { return strides[operand][rank - 1]; }
};

struct NamedView {
  const TensorView* view;
  std::string_view name;
};

/// Builds the plan for `operands` written into `out` (contiguous, row-major).
/// exact: out.shape must equal the broadcast of the operands' shapes (binary ops, where);
/// otherwise each operand only has to broadcast into out.shape (expand).
/// Errors: kInvalidBundle naming the operands whose shapes do not broadcast, or out.
Status plan_broadcast(std::string_view op, std::initializer_list<NamedView> operands,
                      const TensorView& out, bool exact, BroadcastPlan& plan);

/// Calls f(offsets, row) for every row of the innermost collapsed dim, in row-major order:
/// offsets[k] is operand k's element offset of the row's first element, `row` the row's
/// index (the output offset is row * plan.inner()). Nothing is called when numel == 0.
template <int N, typename F>
inline void for_each_row(const BroadcastPlan& plan, F&& f) {
  if (plan.numel == 0) return;
  const std::int64_t rows = plan.numel / plan.inner();
  const int outer = plan.rank - 1;
  std::array<std::int64_t, kMaxRank> index{};
  std::array<std::int64_t, N> offsets{};
  for (std::int64_t row = 0; row < rows; ++row) {
    f(offsets, row);
    for (int d = outer - 1; d >= 0; --d) {
      if (++index[d] < plan.shape[d]) {
        for (int k = 0; k < N; ++k) offsets[k] += plan.strides[k][d];
        break;
      }
      index[d] = 0;
      for (int k = 0; k < N; ++k) offsets[k] -= plan.strides[k][d] * (plan.shape[d] - 1);
    }
  }
}

/// A generic strided view for N-d copies: element strides (may be negative or 0) and a
/// base offset. Used by movement kernels (permute, flip, slice, expand).
struct StridedLayout {
  int rank = 0;
  std::array<std::int64_t, kMaxRank> shape{};
  std::array<std::int64_t, kMaxRank> strides{};
};

/// Copies `layout` (read from src + its strides, in elements of `elem_size` bytes) into
/// contiguous dst. Merges dims that are contiguous in both, uses memcpy for unit-stride
/// rows and 8 x 8 register transposes for transposing ones; with a pool, a copy of 256 KiB
/// or more is split over its threads.
void strided_copy(const void* src, const StridedLayout& layout, void* dst, std::size_t elem_size,
                  ThreadPool* pool = nullptr);

}  // namespace kiln::cpu::kernels

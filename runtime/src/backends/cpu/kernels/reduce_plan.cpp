#include <array>
#include <new>

#include "backends/cpu/kernels/broadcast.h"
#include "backends/cpu/kernels/reduce.h"

namespace kiln::cpu::kernels {
namespace {

// Marks the reduced dims; errors for out-of-range or repeated dims.
Status reduced_mask(std::string_view op, const TensorView& x, std::span<const std::int64_t> dims,
                    std::array<bool, kMaxRank>& reduced) {
  reduced.fill(dims.empty());
  for (std::size_t i = 0; i < dims.size(); ++i) {
    const std::int64_t d = dims[i];
    if (x.rank == 0 && d == 0) continue;
    KILN_RETURN_IF_ERROR(check_dim(op, Name("dims", static_cast<std::int64_t>(i)), d, x.rank));
    if (reduced[d]) return invalid(op, "dims[", i, "]=", d, " is repeated");
    reduced[d] = true;
  }
  return Status::Ok();
}

// Gathers x into kept-dims-first, reduced-dims-last order.
Status gather_reduced_last(std::string_view op, const TensorView& x,
                           const std::array<bool, kMaxRank>& reduced, ReducePlan& plan) {
  const auto strides = contiguous_strides(x);
  StridedLayout layout;
  for (int pass = 0; pass < 2; ++pass) {
    for (int d = 0; d < x.rank; ++d) {
      if (reduced[d] != (pass == 1)) continue;
      layout.shape[layout.rank] = x.shape[d];
      layout.strides[layout.rank] = strides[d];
      ++layout.rank;
    }
  }
  plan.gathered.reset(new (std::nothrow) unsigned char[x.nbytes()]);
  if (plan.gathered == nullptr) {
    return op_error(StatusCode::kUnavailable, op, "cannot allocate ", x.nbytes(), " bytes to reorder x");
  }
  strided_copy(x.data, layout, plan.gathered.get(), dtype_size(x.dtype));
  plan.data = plan.gathered.get();
  return Status::Ok();
}

}  // namespace

Status plan_reduce(std::string_view op, const TensorView& x, std::span<const std::int64_t> dims,
                   bool keepdim, const TensorView& out, ReducePlan& plan) {
  std::array<bool, kMaxRank> reduced{};
  KILN_RETURN_IF_ERROR(reduced_mask(op, x, dims, reduced));
  std::array<std::int64_t, kMaxRank> expected{};
  int out_rank = 0;
  for (int d = 0; d < x.rank; ++d) {
    if (!reduced[d]) {
      expected[out_rank++] = x.shape[d];
    } else if (keepdim) {
      expected[out_rank++] = 1;
    }
  }
  KILN_RETURN_IF_ERROR(check_out_shape(op, out, std::span<const std::int64_t>(expected.data(), out_rank)));
  // Blocks of reduced dims, ignoring size-1 dims (they change no offsets).
  int blocks = 0;
  bool in_block = false;
  plan.outer = plan.reduce = plan.inner = 1;
  for (int d = 0; d < x.rank; ++d) {
    if (x.shape[d] == 1) continue;
    if (reduced[d]) {
      if (!in_block) ++blocks;
      in_block = true;
      plan.reduce = static_cast<std::int64_t>(static_cast<std::uint64_t>(plan.reduce) * static_cast<std::uint64_t>(x.shape[d]));
    } else {
      in_block = false;
      std::int64_t& kept = blocks == 0 ? plan.outer : plan.inner;
      kept = static_cast<std::int64_t>(static_cast<std::uint64_t>(kept) * static_cast<std::uint64_t>(x.shape[d]));
    }
  }
  plan.data = x.data;
  if (out.numel() == 0) {  // nothing to write (products above may have wrapped)
    plan.outer = 0;
    plan.inner = 1;
    return Status::Ok();
  }
  if (x.numel() == 0) plan.reduce = 0;  // a reduced dim is 0 (its product may have wrapped)
  if (blocks > 1) {
    plan.outer = plan.outer * plan.inner;  // == out.numel(), so no overflow
    plan.inner = 1;
    if (x.numel() > 0) return gather_reduced_last(op, x, reduced, plan);
  }
  return Status::Ok();
}

}  // namespace kiln::cpu::kernels

#include "backends/cpu/kernels/broadcast.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "backends/cpu/kernels/simd.h"
#include "backends/cpu/thread_pool.h"

namespace kiln::cpu::kernels {
namespace {

std::string describe(std::initializer_list<NamedView> operands) {
  std::string s;
  for (const NamedView& o : operands) {
    if (!s.empty()) s += ", ";
    s += str_cat(o.name, ".shape=", shape_text(*o.view));
  }
  return s;
}

// Dim d of v when v is right-aligned against rank `rank` (missing leading dims are 1).
inline std::int64_t aligned_dim(const TensorView& v, int rank, int d) {
  const int vd = d - (rank - v.rank);
  return vd >= 0 ? v.shape[vd] : 1;
}

Status check_exact(std::string_view op, std::initializer_list<NamedView> operands,
                   const TensorView& out) {
  int rank = 0;
  for (const NamedView& o : operands) rank = o.view->rank > rank ? o.view->rank : rank;
  std::array<std::int64_t, kMaxRank> shape{};
  for (int d = 0; d < rank; ++d) {
    std::int64_t b = 1;
    for (const NamedView& o : operands) {
      const std::int64_t dim = aligned_dim(*o.view, rank, d);
      if (dim == 1) continue;
      if (b != 1 && b != dim) return invalid(op, "shapes do not broadcast: ", describe(operands));
      b = dim;
    }
    shape[d] = b;
  }
  bool same = out.rank == rank;
  for (int d = 0; same && d < rank; ++d) same = out.shape[d] == shape[d];
  if (same) return Status::Ok();
  return invalid(op, "out.shape=", shape_text(out), " but ", describe(operands), " broadcast to ",
                 shape_text(std::span<const std::int64_t>(shape.data(), rank)));
}

Status check_into(std::string_view op, std::initializer_list<NamedView> operands,
                  const TensorView& out) {
  for (const NamedView& o : operands) {
    bool ok = o.view->rank <= out.rank;
    for (int d = 0; ok && d < out.rank; ++d) {
      const std::int64_t dim = aligned_dim(*o.view, out.rank, d);
      ok = dim == 1 || dim == out.shape[d];
    }
    if (!ok) {
      return invalid(op, o.name, ".shape=", shape_text(*o.view), " does not broadcast to out.shape=",
                     shape_text(out));
    }
  }
  return Status::Ok();
}

// The common cheap case: every operand has out's shape or is a single element of rank
// <= out's, and at least one has out's shape (so out is their broadcast): one flat dim.
bool plan_flat(std::initializer_list<NamedView> operands, const TensorView& out, BroadcastPlan& plan) {
  bool any_full = false;
  int k = 0;
  for (const NamedView& o : operands) {
    if (same_dims(o.view->dims(), out.dims())) {
      plan.strides[k][0] = 1;
      any_full = true;
    } else if (o.view->rank <= out.rank && o.view->numel() == 1) {
      plan.strides[k][0] = 0;
    } else {
      return false;
    }
    ++k;
  }
  if (!any_full) return false;
  plan.num_operands = k;
  plan.rank = 1;
  plan.numel = out.numel();
  plan.shape[0] = plan.numel;
  return true;
}

}  // namespace

Status plan_broadcast(std::string_view op, std::initializer_list<NamedView> operands,
                      const TensorView& out, bool exact, BroadcastPlan& plan) {
  if (plan_flat(operands, out, plan)) return Status::Ok();
  KILN_RETURN_IF_ERROR(exact ? check_exact(op, operands, out) : check_into(op, operands, out));
  const int n = static_cast<int>(operands.size());
  plan.num_operands = n;
  if (out.numel() == 0) {  // nothing to iterate; operand strides might not even fit int64
    plan.rank = 1;
    plan.shape[0] = 0;
    plan.numel = 0;
    return Status::Ok();
  }
  const int rank = out.rank;
  std::array<std::array<std::int64_t, kMaxRank>, BroadcastPlan::kMaxOperands> full{};
  int k = 0;
  for (const NamedView& o : operands) {
    std::int64_t stride = 1;
    for (int d = rank - 1; d >= 0; --d) {
      const std::int64_t dim = aligned_dim(*o.view, rank, d);
      full[k][d] = dim == 1 ? 0 : stride;
      stride *= dim;
    }
    ++k;
  }
  plan.numel = 1;
  int r = 0;
  for (int d = 0; d < rank; ++d) {
    const std::int64_t size = out.shape[d];
    plan.numel *= size;
    if (size == 1) continue;
    bool merge = r > 0;
    for (int i = 0; merge && i < n; ++i) merge = plan.strides[i][r - 1] == full[i][d] * size;
    if (merge) {
      plan.shape[r - 1] *= size;
    } else {
      plan.shape[r++] = size;
    }
    for (int i = 0; i < n; ++i) plan.strides[i][r - 1] = full[i][d];
  }
  if (r == 0) {
    plan.shape[0] = 1;
    for (int i = 0; i < n; ++i) plan.strides[i][0] = 0;
    r = 1;
  }
  plan.rank = r;
  return Status::Ok();
}

namespace {

template <typename T>
void strided_rows(const T* src, const BroadcastPlan& plan, T* dst) {
  const std::int64_t len = plan.inner();
  const std::int64_t s = plan.inner_stride(0);
  if (s == 0 && len <= 8 && plan.rank >= 2) {
    // Every element repeated a few times (nearest upsampling's expand to [..., w, 2]): one
    // pass per row of the dim before, instead of one row of `len` elements at a time.
    BroadcastPlan outer = plan;
    outer.rank = plan.rank - 1;
    outer.numel = plan.numel / len;
    const std::int64_t m = outer.inner(), t = outer.inner_stride(0);
    for_each_row<1>(outer, [&](const std::array<std::int64_t, 1>& off, std::int64_t row) {
      const T* in = src + off[0];
      T* o = dst + row * m * len;
      for (std::int64_t a = 0; a < m; ++a) {
        const T v = in[a * t];
        for (std::int64_t i = 0; i < len; ++i) o[a * len + i] = v;
      }
    });
    return;
  }
  for_each_row<1>(plan, [&](const std::array<std::int64_t, 1>& off, std::int64_t row) {
    const T* in = src + off[0];
    T* o = dst + row * len;
    if (s == 1 && len <= 64) {
      // Short rows inline: fixed-size chunks, then an unrolled tail (a run-time-length
      // memcpy is a libc call, which costs more than the copy here).
      std::int64_t i = 0;
      for (; i + 8 <= len; i += 8) std::memcpy(o + i, in + i, 8 * sizeof(T));
#pragma GCC unroll 8
      for (int k = 0; k < 7; ++k) {
        if (i + k < len) o[i + k] = in[i + k];
      }
    } else if (s == 1) {
      std::memcpy(o, in, static_cast<std::size_t>(len) * sizeof(T));
    } else if (s == 0) {
      const T v = *in;
      for (std::int64_t i = 0; i < len; ++i) o[i] = v;
    } else {
      for (std::int64_t i = 0; i < len; ++i) o[i] = in[i * s];
    }
  });
}

// A transposing copy: the source is contiguous along dim j of the plan (stride 1) but not
// along the last dim. Copies small tiles of (dim j, last dim) so that the reads and writes
// of a tile stay in L1; tiles are only 8 wide because power-of-two source strides map a
// tile's rows to one cache set (8 rows fit its ways, 32 thrash: 5x slower when measured).
template <typename T>
void transposed_rows(const T* src, const BroadcastPlan& plan, int j, T* dst) {
  constexpr std::int64_t kTile = 8;
  const int r = plan.rank;
  std::array<std::int64_t, kMaxRank> dst_strides;
  std::int64_t s = 1;
  for (int d = r - 1; d >= 0; --d) {
    dst_strides[d] = s;
    s *= plan.shape[d];
  }
  const std::int64_t rows = plan.shape[j], cols = plan.shape[r - 1];
  const std::int64_t row_step = dst_strides[j], col_step = plan.strides[0][r - 1];
  std::array<std::int64_t, kMaxRank> index{};
  std::int64_t src_off = 0, dst_off = 0;
  while (true) {
    if constexpr (sizeof(T) == 4) {
      simd().transpose32(src + src_off, col_step, dst + dst_off, row_step, rows, cols);
    } else {
      for (std::int64_t a0 = 0; a0 < rows; a0 += kTile) {
        const std::int64_t a1 = std::min(rows, a0 + kTile);
        for (std::int64_t b0 = 0; b0 < cols; b0 += kTile) {
          const std::int64_t b1 = std::min(cols, b0 + kTile);
          for (std::int64_t a = a0; a < a1; ++a) {
            for (std::int64_t b = b0; b < b1; ++b) dst[dst_off + a * row_step + b] = src[src_off + a + b * col_step];
          }
        }
      }
    }
    // Next combination of the other dims.
    int d = r - 2;
    for (; d >= 0; --d) {
      if (d == j) continue;
      if (++index[d] < plan.shape[d]) {
        src_off += plan.strides[0][d];
        dst_off += dst_strides[d];
        break;
      }
      index[d] = 0;
      src_off -= plan.strides[0][d] * (plan.shape[d] - 1);
      dst_off -= dst_strides[d] * (plan.shape[d] - 1);
    }
    if (d < 0) return;
  }
}

template <typename T>
void copy_plan(const T* src, const BroadcastPlan& plan, T* dst) {
  if (plan.rank >= 2 && plan.inner_stride(0) != 1 && plan.inner() >= 8) {
    for (int j = plan.rank - 2; j >= 0; --j) {
      if (plan.strides[0][j] == 1 && plan.shape[j] >= 8) return transposed_rows(src, plan, j, dst);
    }
  }
  strided_rows(src, plan, dst);
}

// Below this many bytes a copy stays on the calling thread (waking the others costs more).
constexpr std::int64_t kMinParallelCopyBytes = 256 << 10;

// The copy split over the threads along the plan's first dim: the slab [r0, r1) of it is a
// copy of its own, from src + r0 * stride into the contiguous dst + r0 * (elements per
// index of that dim). Slabs are whole multiples of 8 indices where the dim allows, so a
// transposing copy keeps its full 8 x 8 tiles.
template <typename T>
void copy_plan_threaded(const T* src, const BroadcastPlan& plan, T* dst, ThreadPool* pool) {
  const std::int64_t outer = plan.shape[0];
  const std::int64_t bytes = plan.numel * static_cast<std::int64_t>(sizeof(T));
  if (pool == nullptr || pool->num_threads() < 2 || plan.rank < 2 || outer < 2 || bytes < kMinParallelCopyBytes) {
    return copy_plan(src, plan, dst);
  }
  const std::int64_t per_index = plan.numel / outer;
  const std::int64_t unit = outer >= 16 * pool->num_threads() ? 8 : 1;
  const std::int64_t units = (outer + unit - 1) / unit;
  const std::int64_t unit_bytes = per_index * unit * static_cast<std::int64_t>(sizeof(T));
  pool->parallel_for(units, pool->even_grain(units, unit_bytes, 64 << 10), [&](std::int64_t first, std::int64_t last) {
    BroadcastPlan slab = plan;
    const std::int64_t r0 = first * unit, r1 = std::min(outer, last * unit);
    slab.shape[0] = r1 - r0;
    slab.numel = slab.shape[0] * per_index;
    copy_plan(src + r0 * plan.strides[0][0], slab, dst + r0 * per_index);
  });
}

}  // namespace

void strided_copy(const void* src, const StridedLayout& layout, void* dst, std::size_t elem_size, ThreadPool* pool) {
  for (int d = 0; d < layout.rank; ++d) {
    if (layout.shape[d] == 0) return;
  }
  BroadcastPlan plan;
  plan.num_operands = 1;
  plan.numel = 1;
  int r = 0;
  for (int d = 0; d < layout.rank; ++d) {
    const std::int64_t size = layout.shape[d];
    plan.numel *= size;
    if (size == 1) continue;
    if (r > 0 && plan.strides[0][r - 1] == layout.strides[d] * size) {
      plan.shape[r - 1] *= size;
    } else {
      plan.shape[r++] = size;
    }
    plan.strides[0][r - 1] = layout.strides[d];
  }
  if (r == 0) {
    plan.shape[0] = 1;
    plan.strides[0][0] = 0;
    r = 1;
  }
  plan.rank = r;
  switch (elem_size) {
    case 1: copy_plan_threaded(static_cast<const std::uint8_t*>(src), plan, static_cast<std::uint8_t*>(dst), pool); break;
    case 2: copy_plan_threaded(static_cast<const std::uint16_t*>(src), plan, static_cast<std::uint16_t*>(dst), pool); break;
    case 4: copy_plan_threaded(static_cast<const std::uint32_t*>(src), plan, static_cast<std::uint32_t*>(dst), pool); break;
    default: copy_plan_threaded(static_cast<const std::uint64_t*>(src), plan, static_cast<std::uint64_t*>(dst), pool); break;
  }
}

}  // namespace kiln::cpu::kernels

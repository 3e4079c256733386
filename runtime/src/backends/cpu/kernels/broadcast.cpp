#include "backends/cpu/kernels/broadcast.h"

#include <cstring>
#include <string>

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

}  // namespace

Status plan_broadcast(std::string_view op, std::initializer_list<NamedView> operands,
                      const TensorView& out, bool exact, BroadcastPlan& plan) {
  KILN_RETURN_IF_ERROR(exact ? check_exact(op, operands, out) : check_into(op, operands, out));
  const int n = static_cast<int>(operands.size());
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
  plan.num_operands = n;
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
  for_each_row<1>(plan, [&](const std::array<std::int64_t, 1>& off, std::int64_t row) {
    const T* in = src + off[0];
    T* o = dst + row * len;
    if (s == 1) {
      std::memcpy(o, in, static_cast<std::size_t>(len) * sizeof(T));
    } else if (s == 0) {
      const T v = *in;
      for (std::int64_t i = 0; i < len; ++i) o[i] = v;
    } else {
      for (std::int64_t i = 0; i < len; ++i) o[i] = in[i * s];
    }
  });
}

}  // namespace

void strided_copy(const void* src, const StridedLayout& layout, void* dst, std::size_t elem_size) {
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
    case 1: strided_rows(static_cast<const std::uint8_t*>(src), plan, static_cast<std::uint8_t*>(dst)); break;
    case 2: strided_rows(static_cast<const std::uint16_t*>(src), plan, static_cast<std::uint16_t*>(dst)); break;
    case 4: strided_rows(static_cast<const std::uint32_t*>(src), plan, static_cast<std::uint32_t*>(dst)); break;
    default: strided_rows(static_cast<const std::uint64_t*>(src), plan, static_cast<std::uint64_t*>(dst)); break;
  }
}

}  // namespace kiln::cpu::kernels

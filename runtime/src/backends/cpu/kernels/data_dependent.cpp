// Data-dependent kernels: nonzero and masked_select size their output from the data and
// allocate it with KernelContext::allocate_output (an output that arrives allocated must
// already have the right shape); item copies one element into a 0-d output.
#include <array>
#include <cstdint>
#include <cstring>

#include "backends/cpu/kernels/broadcast.h"
#include "backends/cpu/kernels/common.h"
#include "backends/cpu/kernels/kernels.h"

namespace kiln::cpu::kernels {
namespace {

template <typename T>
inline bool nonzero_value(T v) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    return (v.bits & 0x7fffu) != 0;  // +-0 is zero, NaN is not
  } else {
    return v != T(0);
  }
}

// Gives output 0 the shape `shape`: allocates it when it arrived unallocated (data ==
// nullptr, the contract in kernel.h), else checks the view it came with.
Result<TensorView> output_of_shape(std::string_view op, KernelContext& ctx, Outputs out, DType dtype,
                                   std::span<const std::int64_t> shape) {
  if (out[0].data != nullptr) {
    KILN_RETURN_IF_ERROR(check_view(op, "out", out[0]));
    KILN_RETURN_IF_ERROR(check_dtype(op, "out", out[0], dtype));
    KILN_RETURN_IF_ERROR(check_out_shape(op, out[0], shape));
    return out[0];
  }
  KILN_ASSIGN_OR_RETURN(TensorView v, ctx.allocate_output(0, dtype, shape));
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  if (v.dtype != dtype || v.rank != static_cast<int>(shape.size()) || v.numel() != n ||
      (n > 0 && v.data == nullptr)) {
    return op_error(StatusCode::kInternal, op, "allocate_output returned a view that does not match the request");
  }
  out[0] = v;
  return v;
}

template <typename T>
std::int64_t count_nonzero(const T* p, std::int64_t n) {
  std::int64_t count = 0;
  for (std::int64_t i = 0; i < n; ++i) count += nonzero_value(p[i]) ? 1 : 0;
  return count;
}

// Writes the multi-index of every nonzero element, row-major, as rows of `rank` int64s.
template <typename T>
void nonzero_indices(const TensorView& x, std::int64_t* out) {
  const T* p = x.as<T>();
  const std::int64_t n = x.numel();
  std::array<std::int64_t, kMaxRank> pos{};
  for (std::int64_t i = 0; i < n; ++i) {
    if (nonzero_value(p[i])) {
      for (int d = 0; d < x.rank; ++d) *out++ = pos[d];
    }
    for (int d = x.rank - 1; d >= 0 && ++pos[d] == x.shape[d]; --d) pos[d] = 0;
  }
}

// The broadcast shape of x and mask as a data-less view; kInvalidBundle if incompatible.
Status broadcast_view(const TensorView& x, const TensorView& mask, TensorView& shape) {
  shape.rank = std::max(x.rank, mask.rank);
  for (int d = 0; d < shape.rank; ++d) {
    const int xd = d - (shape.rank - x.rank);
    const int md = d - (shape.rank - mask.rank);
    const std::int64_t a = xd >= 0 ? x.shape[xd] : 1;
    const std::int64_t b = md >= 0 ? mask.shape[md] : 1;
    if (a != b && a != 1 && b != 1) {
      return invalid("masked_select", "x.shape=", shape_text(x), " and mask.shape=", shape_text(mask),
                     " do not broadcast");
    }
    shape.shape[d] = a == 1 ? b : a;
  }
  return Status::Ok();
}

}  // namespace

Status Nonzero(KernelContext& ctx, Inputs in, Outputs out, Attrs) {
  KILN_RETURN_IF_ERROR(check_io("nonzero", in, out,
                                {.min_inputs = 1, .max_inputs = 1, .num_outputs = 1, .unallocated_outputs = true}));
  const TensorView& x = in[0];
  std::int64_t count = 0;
  dispatch<KILN_ALL_DTYPES>(x.dtype, [&]<DType D>() { count = count_nonzero(x.as<CType<D>>(), x.numel()); });
  const std::array<std::int64_t, 2> shape{count, x.rank};
  KILN_ASSIGN_OR_RETURN(TensorView y, output_of_shape("nonzero", ctx, out, DType::kI64, shape));
  if (count > 0 && x.rank > 0) {
    dispatch<KILN_ALL_DTYPES>(x.dtype, [&]<DType D>() { nonzero_indices<CType<D>>(x, y.as<std::int64_t>()); });
  }
  return Status::Ok();
}

Status MaskedSelect(KernelContext& ctx, Inputs in, Outputs out, Attrs) {
  KILN_RETURN_IF_ERROR(check_io("masked_select", in, out,
                                {.min_inputs = 2, .max_inputs = 2, .num_outputs = 1, .unallocated_outputs = true}));
  const TensorView& x = in[0];
  const TensorView& mask = in[1];
  if (mask.dtype != DType::kBool && mask.dtype != DType::kU8) {
    return unsupported_dtype("masked_select", mask.dtype, "mask; expects b8");
  }
  TensorView full;
  KILN_RETURN_IF_ERROR(broadcast_view(x, mask, full));
  BroadcastPlan plan;
  KILN_RETURN_IF_ERROR(plan_broadcast("masked_select", {{&mask, "mask"}, {&x, "x"}}, full, true, plan));
  const auto* m = mask.as<std::uint8_t>();
  const std::int64_t len = plan.inner();
  const std::int64_t sm = plan.inner_stride(0), sx = plan.inner_stride(1);
  std::int64_t count = 0;
  for_each_row<2>(plan, [&](const std::array<std::int64_t, 2>& off, std::int64_t) {
    for (std::int64_t i = 0; i < len; ++i) count += m[off[0] + i * sm] != 0 ? 1 : 0;
  });
  const std::array<std::int64_t, 1> shape{count};
  KILN_ASSIGN_OR_RETURN(TensorView y, output_of_shape("masked_select", ctx, out, x.dtype, shape));
  const auto elem = static_cast<std::int64_t>(dtype_size(x.dtype));
  const auto* src = static_cast<const unsigned char*>(x.data);
  auto* dst = static_cast<unsigned char*>(y.data);
  for_each_row<2>(plan, [&](const std::array<std::int64_t, 2>& off, std::int64_t) {
    for (std::int64_t i = 0; i < len; ++i) {
      if (m[off[0] + i * sm] == 0) continue;
      std::memcpy(dst, src + (off[1] + i * sx) * elem, static_cast<std::size_t>(elem));
      dst += elem;
    }
  });
  return Status::Ok();
}

Status Item(KernelContext& ctx, Inputs in, Outputs out, Attrs) {
  KILN_RETURN_IF_ERROR(check_io("item", in, out,
                                {.min_inputs = 1, .max_inputs = 1, .num_outputs = 1, .unallocated_outputs = true}));
  const TensorView& x = in[0];
  if (x.numel() != 1) return invalid("item", "x.shape=", shape_text(x), " must hold exactly one element");
  KILN_ASSIGN_OR_RETURN(TensorView y, output_of_shape("item", ctx, out, x.dtype, {}));
  std::memcpy(y.data, x.data, dtype_size(x.dtype));
  return Status::Ok();
}

}  // namespace kiln::cpu::kernels

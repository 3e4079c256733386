// where and masked_fill: selections by a bool mask, with broadcasting. Dtype-agnostic
// (elements are moved by size), so every dtype works.
#include <cstdint>
#include <cstring>

#include "backends/cpu/kernels/broadcast.h"
#include "backends/cpu/kernels/common.h"
#include "backends/cpu/kernels/convert.h"
#include "backends/cpu/kernels/kernels.h"

namespace kiln::cpu::kernels {
namespace {

// cond ? a : b on the bits, without a branch (so the contiguous loops vectorize; T is an
// unsigned integer of the element's size).
template <typename T>
inline T pick(std::uint8_t cond, T a, T b) {
  const T mask = static_cast<T>(T(0) - static_cast<T>(cond != 0));
  return static_cast<T>(b ^ ((a ^ b) & mask));
}

// out[i] = cond[i] ? a[i] : b[i] over one row with element strides.
template <typename T>
void where_row(const std::uint8_t* c, std::int64_t sc, const T* a, std::int64_t sa, const T* b,
               std::int64_t sb, T* o, std::int64_t n) {
  if (sc == 1 && sa == 1 && sb == 1) {
    for (std::int64_t i = 0; i < n; ++i) o[i] = pick(c[i], a[i], b[i]);
  } else if (sc == 1 && sa == 1 && sb == 0) {
    const T bv = *b;
    for (std::int64_t i = 0; i < n; ++i) o[i] = pick(c[i], a[i], bv);
  } else if (sc == 1 && sa == 0 && sb == 1) {
    const T av = *a;
    for (std::int64_t i = 0; i < n; ++i) o[i] = pick(c[i], av, b[i]);
  } else {
    for (std::int64_t i = 0; i < n; ++i) o[i] = c[i * sc] != 0 ? a[i * sa] : b[i * sb];
  }
}

template <typename T>
void where_typed(const BroadcastPlan& plan, const void* cond, const void* a, const void* b,
                 void* out) {
  const auto* pc = static_cast<const std::uint8_t*>(cond);
  const T* pa = static_cast<const T*>(a);
  const T* pb = static_cast<const T*>(b);
  T* po = static_cast<T*>(out);
  const std::int64_t len = plan.inner();
  const std::int64_t sc = plan.inner_stride(0);
  const std::int64_t sa = plan.inner_stride(1);
  const std::int64_t sb = plan.inner_stride(2);
  for_each_row<3>(plan, [&](const std::array<std::int64_t, 3>& off, std::int64_t row) {
    where_row(pc + off[0], sc, pa + off[1], sa, pb + off[2], sb, po + row * len, len);
  });
}

// Calls f.template operator()<T>() with an unsigned integer type of `size` bytes.
template <typename F>
void by_element_size(std::size_t size, F&& f) {
  switch (size) {
    case 1: f.template operator()<std::uint8_t>(); break;
    case 2: f.template operator()<std::uint16_t>(); break;
    case 4: f.template operator()<std::uint32_t>(); break;
    default: f.template operator()<std::uint64_t>(); break;
  }
}

}  // namespace

Status Where(KernelContext&, Inputs in, Outputs out, Attrs) {
  KILN_RETURN_IF_ERROR(check_io("where", in, out, {.min_inputs = 3, .max_inputs = 3, .num_outputs = 1}));
  const TensorView& cond = in[0];
  if (cond.dtype != DType::kBool && cond.dtype != DType::kU8) {
    return unsupported_dtype("where", cond.dtype, "condition; expects b8");
  }
  if (in[1].dtype != in[2].dtype) {
    return unsupported("where", "mixed dtypes a.dtype=", in[1].dtype, " and b.dtype=", in[2].dtype);
  }
  KILN_RETURN_IF_ERROR(check_dtype("where", "out", out[0], in[1].dtype));
  BroadcastPlan plan;
  KILN_RETURN_IF_ERROR(plan_broadcast("where", {{&cond, "condition"}, {&in[1], "a"}, {&in[2], "b"}},
                                      out[0], true, plan));
  by_element_size(dtype_size(out[0].dtype), [&]<typename T>() {
    where_typed<T>(plan, cond.data, in[1].data, in[2].data, out[0].data);
  });
  return Status::Ok();
}

Status MaskedFill(KernelContext&, Inputs in, Outputs out, Attrs) {
  KILN_RETURN_IF_ERROR(
      check_io("masked_fill", in, out, {.min_inputs = 3, .max_inputs = 3, .num_outputs = 1}));
  const TensorView& x = in[0];
  const TensorView& mask = in[1];
  const TensorView& value = in[2];
  if (mask.dtype != DType::kBool && mask.dtype != DType::kU8) {
    return unsupported_dtype("masked_fill", mask.dtype, "mask; expects b8");
  }
  if (value.numel() != 1) {
    return invalid("masked_fill", "value.shape=", shape_text(value), " must hold one element");
  }
  KILN_RETURN_IF_ERROR(check_dtype("masked_fill", "out", out[0], x.dtype));
  KILN_RETURN_IF_ERROR(check_same_shape("masked_fill", "x", x, "out", out[0]));
  BroadcastPlan plan;
  KILN_RETURN_IF_ERROR(plan_broadcast("masked_fill", {{&mask, "mask"}, {&x, "x"}, {&x, "x"}},
                                      out[0], true, plan));
  // The fill value converted to x's dtype, as a one-element operand with stride 0.
  alignas(8) unsigned char fill[8] = {};
  convert_buffer(value.data, value.dtype, fill, x.dtype, 1);
  for (int d = 0; d < plan.rank; ++d) plan.strides[1][d] = 0;
  by_element_size(dtype_size(x.dtype), [&]<typename T>() {
    where_typed<T>(plan, mask.data, fill, x.data, out[0].data);
  });
  return Status::Ok();
}

}  // namespace kiln::cpu::kernels

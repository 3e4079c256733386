// Bitwise kernels on integers and bools: and / or / xor / not and the two shifts, with
// numpy broadcasting (broadcast.h). PyTorch's semantics, including its rules for shift
// counts outside [0, bits) (ATen/native/cpu/BinaryOpsKernel.cpp).
#include <climits>
#include <cstdint>
#include <type_traits>

#include "backends/cpu/kernels/broadcast.h"
#include "backends/cpu/kernels/common.h"
#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/thread_pool.h"

namespace kiln::cpu::kernels {
namespace {

constexpr IoSpec kBinaryIo{.min_inputs = 2, .max_inputs = 2, .num_outputs = 1};

// a << b: counts < 0 or >= bits give 0; the shift is done unsigned (no overflow UB).
template <typename T>
T shift_left(T a, T b) {
  constexpr auto bits = static_cast<std::int64_t>(sizeof(T) * CHAR_BIT);
  const auto n = static_cast<std::int64_t>(static_cast<std::make_signed_t<T>>(b));
  if (n < 0 || n >= bits) return T(0);
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(static_cast<U>(a) << n));
}

// a >> b (arithmetic for signed types): counts < 0 or >= bits - signed give a >> (bits -
// signed), i.e. the sign fill for signed types and 0 for unsigned ones.
template <typename T>
T shift_right(T a, T b) {
  constexpr auto max_shift = static_cast<std::int64_t>(sizeof(T) * CHAR_BIT) - (std::is_signed_v<T> ? 1 : 0);
  const auto n = static_cast<std::int64_t>(static_cast<std::make_signed_t<T>>(b));
  if (n < 0 || n >= max_shift) {
    if constexpr (std::is_signed_v<T>) return static_cast<T>(a < 0 ? -1 : 0);
    else return T(0);
  }
  return static_cast<T>(a >> n);
}

template <typename T, typename F>
void bitwise_rows(const BroadcastPlan& plan, ThreadPool& pool, const T* a, const T* b, T* o, F f) {
  const std::int64_t len = plan.inner();
  const std::int64_t sa = plan.inner_stride(0), sb = plan.inner_stride(1);
  auto row = [&](const T* pa, const T* pb, T* po, std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i) po[i] = f(pa[i * sa], pb[i * sb]);
  };
  if (plan.rank == 1) {
    if (plan.numel == 0) return;
    if (plan.numel < kParallelElements) {
      row(a, b, o, len);
      return;
    }
    pool.parallel_for(plan.numel, pool.even_grain(plan.numel, 1, kParallelElements / 2),
                      [&](std::int64_t begin, std::int64_t end) { row(a + begin * sa, b + begin * sb, o + begin, end - begin); });
    return;
  }
  for_each_row<2>(plan, [&](const std::array<std::int64_t, 2>& off, std::int64_t r) {
    row(a + off[0], b + off[1], o + r * len, len);
  });
}

enum class Bitwise { kAnd, kOr, kXor, kShl, kShr };

// Integer (i8 i16 i32 i64 u8) operands of one dtype, out of the same dtype; and/or/xor also
// take bools (as 0/1, whatever byte they hold).
template <Bitwise kOp>
Status bitwise_binary(std::string_view op, KernelContext& ctx, Inputs in, Outputs out) {
  KILN_RETURN_IF_ERROR(check_io(op, in, out, kBinaryIo));
  if (in[0].dtype != in[1].dtype) {
    return unsupported(op, "mixed input dtypes a.dtype=", in[0].dtype, " and b.dtype=", in[1].dtype,
                       " (the exporter casts operands to one dtype)");
  }
  constexpr bool kShift = kOp == Bitwise::kShl || kOp == Bitwise::kShr;
  const DType dt = in[0].dtype;
  if (dt == DType::kBool && kShift) return unsupported_dtype(op, dt, "a; shifts take integers");
  BroadcastPlan plan;
  KILN_RETURN_IF_ERROR(plan_broadcast(op, {{&in[0], "a"}, {&in[1], "b"}}, out[0], true, plan));
  KILN_RETURN_IF_ERROR(check_dtype(op, "out", out[0], dt));
  if (dt == DType::kBool) {
    bitwise_rows<std::uint8_t>(plan, ctx.pool(), in[0].as<std::uint8_t>(), in[1].as<std::uint8_t>(),
                               out[0].as<std::uint8_t>(), [](std::uint8_t a, std::uint8_t b) {
                                 const bool x = a != 0, y = b != 0;
                                 if constexpr (kOp == Bitwise::kAnd) return static_cast<std::uint8_t>(x && y);
                                 else if constexpr (kOp == Bitwise::kOr) return static_cast<std::uint8_t>(x || y);
                                 else return static_cast<std::uint8_t>(x != y);
                               });
    return Status::Ok();
  }
  const bool ok = dispatch<KILN_ALL_INT_DTYPES>(dt, [&]<DType D>() {
    using T = CType<D>;
    bitwise_rows<T>(plan, ctx.pool(), in[0].as<T>(), in[1].as<T>(), out[0].as<T>(), [](T a, T b) {
      if constexpr (kOp == Bitwise::kAnd) return static_cast<T>(a & b);
      else if constexpr (kOp == Bitwise::kOr) return static_cast<T>(a | b);
      else if constexpr (kOp == Bitwise::kXor) return static_cast<T>(a ^ b);
      else if constexpr (kOp == Bitwise::kShl) return shift_left(a, b);
      else return shift_right(a, b);
    });
  });
  return ok ? Status::Ok() : unsupported_dtype(op, dt, kShift ? "a; shifts take integers" : "a; expects an integer or b8");
}

}  // namespace

Status BitwiseAnd(KernelContext& ctx, Inputs in, Outputs out, Attrs) {
  return bitwise_binary<Bitwise::kAnd>("bitwise_and", ctx, in, out);
}
Status BitwiseOr(KernelContext& ctx, Inputs in, Outputs out, Attrs) {
  return bitwise_binary<Bitwise::kOr>("bitwise_or", ctx, in, out);
}
Status BitwiseXor(KernelContext& ctx, Inputs in, Outputs out, Attrs) {
  return bitwise_binary<Bitwise::kXor>("bitwise_xor", ctx, in, out);
}
Status BitwiseLeftShift(KernelContext& ctx, Inputs in, Outputs out, Attrs) {
  return bitwise_binary<Bitwise::kShl>("bitwise_left_shift", ctx, in, out);
}
Status BitwiseRightShift(KernelContext& ctx, Inputs in, Outputs out, Attrs) {
  return bitwise_binary<Bitwise::kShr>("bitwise_right_shift", ctx, in, out);
}

Status BitwiseNot(KernelContext&, Inputs in, Outputs out, Attrs) {
  KILN_RETURN_IF_ERROR(check_io("bitwise_not", in, out, {.min_inputs = 1, .max_inputs = 1, .num_outputs = 1}));
  const TensorView& x = in[0];
  KILN_RETURN_IF_ERROR(check_same_shape("bitwise_not", "x", x, "out", out[0]));
  KILN_RETURN_IF_ERROR(check_dtype("bitwise_not", "out", out[0], x.dtype));
  const std::int64_t n = x.numel();
  if (x.dtype == DType::kBool) {
    const auto* p = x.as<std::uint8_t>();
    auto* o = out[0].as<std::uint8_t>();
    for (std::int64_t i = 0; i < n; ++i) o[i] = static_cast<std::uint8_t>(p[i] == 0);
    return Status::Ok();
  }
  const bool ok = dispatch<KILN_ALL_INT_DTYPES>(x.dtype, [&]<DType D>() {
    using T = CType<D>;
    const T* p = x.as<T>();
    T* o = out[0].as<T>();
    for (std::int64_t i = 0; i < n; ++i) o[i] = static_cast<T>(~p[i]);
  });
  return ok ? Status::Ok() : unsupported_dtype("bitwise_not", x.dtype, "x; expects an integer or b8");
}

}  // namespace kiln::cpu::kernels

// Data movement: reshape, permute, slice, cat, split, expand, pad, flip. Dtype-agnostic:
// elements are moved by size, so every dtype works. Outputs must not overlap inputs
// (reshape allows out == x).
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>

#include "backends/cpu/kernels/broadcast.h"
#include "backends/cpu/kernels/common.h"
#include "backends/cpu/kernels/convert.h"
#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/thread_pool.h"
#include "kernel/attrs.h"

namespace kiln::cpu::kernels {
namespace {

constexpr IoSpec kUnaryIo{.min_inputs = 1, .max_inputs = 1, .num_outputs = 1};

const unsigned char* byte_ptr(const TensorView& v, std::int64_t element) {
  return static_cast<const unsigned char*>(v.data) + element * static_cast<std::int64_t>(dtype_size(v.dtype));
}

// Copies n elements of T between two element strides (the inner loop of copy_box).
template <typename T>
void copy_strided_run(const unsigned char* src, std::int64_t ss, unsigned char* dst, std::int64_t ds, std::int64_t n) {
  const T* in = reinterpret_cast<const T*>(src);
  T* out = reinterpret_cast<T*>(dst);
  for (std::int64_t i = 0; i < n; ++i) out[i * ds] = in[i * ss];
}

// Copies a box of `shape` between two tensors with element strides. Size-1 dims are
// dropped and dims contiguous on both sides merged first, so a box like pad's
// [n, c, h, 1, w, 1] (every other element of the output) is a few long strided runs, not
// one memcpy per element; runs contiguous on both sides are memcpy'd.
void copy_box(const unsigned char* src, const std::array<std::int64_t, kMaxRank>& src_strides,
              unsigned char* dst, const std::array<std::int64_t, kMaxRank>& dst_strides,
              const std::array<std::int64_t, kMaxRank>& box, int box_rank, std::size_t elem) {
  std::array<std::int64_t, kMaxRank> shape{}, ss{}, ds{};
  int rank = 0;
  for (int d = 0; d < box_rank; ++d) {
    if (box[d] <= 0) return;
    if (box[d] == 1) continue;
    if (rank > 0 && ss[rank - 1] == src_strides[d] * box[d] && ds[rank - 1] == dst_strides[d] * box[d]) {
      shape[rank - 1] *= box[d];
      ss[rank - 1] = src_strides[d];
      ds[rank - 1] = dst_strides[d];
      continue;
    }
    shape[rank] = box[d];
    ss[rank] = src_strides[d];
    ds[rank] = dst_strides[d];
    ++rank;
  }
  const auto e = static_cast<std::int64_t>(elem);
  if (rank == 0) {
    std::memcpy(dst, src, elem);
    return;
  }
  const std::int64_t n = shape[rank - 1], sin = ss[rank - 1], din = ds[rank - 1];
  std::array<std::int64_t, kMaxRank> pos{};
  std::int64_t so = 0, dof = 0;
  while (true) {
    if (sin == 1 && din == 1) {
      std::memcpy(dst + dof * e, src + so * e, static_cast<std::size_t>(n) * elem);
    } else {
      switch (elem) {
        case 1: copy_strided_run<std::uint8_t>(src + so * e, sin, dst + dof * e, din, n); break;
        case 2: copy_strided_run<std::uint16_t>(src + so * e, sin, dst + dof * e, din, n); break;
        case 4: copy_strided_run<std::uint32_t>(src + so * e, sin, dst + dof * e, din, n); break;
        default: copy_strided_run<std::uint64_t>(src + so * e, sin, dst + dof * e, din, n); break;
      }
    }
    int d = rank - 2;
    for (; d >= 0; --d) {
      if (++pos[d] < shape[d]) {
        so += ss[d];
        dof += ds[d];
        break;
      }
      pos[d] = 0;
      so -= ss[d] * (shape[d] - 1);
      dof -= ds[d] * (shape[d] - 1);
    }
    if (d < 0) return;
  }
}

Status check_unary_dtype(std::string_view op, Inputs in, Outputs out) {
  KILN_RETURN_IF_ERROR(check_io(op, in, out, kUnaryIo));
  return check_dtype(op, "out", out[0], in[0].dtype);
}

}  // namespace

Status Reshape(KernelContext&, Inputs in, Outputs out, Attrs) {
  KILN_RETURN_IF_ERROR(check_unary_dtype("reshape", in, out));
  if (in[0].numel() != out[0].numel()) {
    return invalid("reshape", "x.shape=", shape_text(in[0]), " (", in[0].numel(), " elements) cannot become out.shape=",
                   shape_text(out[0]), " (", out[0].numel(), " elements)");
  }
  if (in[0].data != out[0].data && in[0].nbytes() > 0) std::memmove(out[0].data, in[0].data, in[0].nbytes());
  return Status::Ok();
}

Status Permute(KernelContext& ctx, Inputs in, Outputs out, Attrs attrs) {
  KILN_RETURN_IF_ERROR(check_unary_dtype("permute", in, out));
  KILN_ASSIGN_OR_RETURN(std::span<const std::int64_t> dims, attr_ints("permute", attrs, 0, "dims"));
  const TensorView& x = in[0];
  if (dims.size() != static_cast<std::size_t>(x.rank)) {
    return invalid("permute", "dims has ", dims.size(), " entries for x.shape=", shape_text(x));
  }
  const auto strides = contiguous_strides(x);
  std::array<bool, kMaxRank> seen{};
  StridedLayout layout;
  layout.rank = x.rank;
  for (int i = 0; i < x.rank; ++i) {
    KILN_RETURN_IF_ERROR(check_dim("permute", Name("dims", static_cast<std::int64_t>(i)), dims[i], x.rank));
    if (seen[dims[i]]) return invalid("permute", "dims[", i, "]=", dims[i], " is repeated");
    seen[dims[i]] = true;
    layout.shape[i] = x.shape[dims[i]];
    layout.strides[i] = strides[dims[i]];
  }
  KILN_RETURN_IF_ERROR(check_out_shape("permute", out[0], std::span<const std::int64_t>(layout.shape.data(), x.rank)));
  if (x.numel() > 0) strided_copy(x.data, layout, out[0].data, dtype_size(x.dtype), &ctx.pool());
  return Status::Ok();
}

Status Slice(KernelContext& ctx, Inputs in, Outputs out, Attrs attrs) {
  KILN_RETURN_IF_ERROR(check_unary_dtype("slice", in, out));
  KILN_ASSIGN_OR_RETURN(std::int64_t dim, attr_int("slice", attrs, 0, "dim"));
  KILN_ASSIGN_OR_RETURN(std::int64_t start, attr_int("slice", attrs, 1, "start"));
  KILN_ASSIGN_OR_RETURN(std::int64_t end, attr_int("slice", attrs, 2, "end"));
  KILN_ASSIGN_OR_RETURN(std::int64_t step, attr_int("slice", attrs, 3, "step"));
  const TensorView& x = in[0];
  KILN_RETURN_IF_ERROR(check_dim("slice", "dim", dim, x.rank));
  if (step < 1) return invalid("slice", "step=", step, " must be positive");
  const std::int64_t size = x.shape[dim];
  // Python-style clamping: negative counts from the end, then clamp into [0, size].
  if (start < 0) start += size;
  if (end < 0) end += size;
  start = std::clamp<std::int64_t>(start, 0, size);
  end = std::clamp<std::int64_t>(end, 0, size);
  const std::int64_t length = end > start ? (end - start - 1) / step + 1 : 0;
  StridedLayout layout;
  layout.rank = x.rank;
  layout.shape = x.shape;
  layout.strides = contiguous_strides(x);
  layout.shape[dim] = length;
  KILN_RETURN_IF_ERROR(check_out_shape("slice", out[0], std::span<const std::int64_t>(layout.shape.data(), x.rank)));
  const std::int64_t offset = start * layout.strides[dim];
  if (length > 1) layout.strides[dim] *= step;  // then step < size: no overflow
  if (out[0].numel() > 0) strided_copy(byte_ptr(x, offset), layout, out[0].data, dtype_size(x.dtype), &ctx.pool());
  return Status::Ok();
}

Status Cat(KernelContext& ctx, Inputs in, Outputs out, Attrs attrs) {
  KILN_RETURN_IF_ERROR(check_io("cat", in, out, {.min_inputs = 1, .max_inputs = -1, .num_outputs = 1}));
  KILN_ASSIGN_OR_RETURN(std::int64_t dim, attr_int("cat", attrs, 0, "dim"));
  const TensorView& y = out[0];
  KILN_RETURN_IF_ERROR(check_dim("cat", "dim", dim, y.rank));
  std::int64_t total = 0;
  for (std::size_t i = 0; i < in.size(); ++i) {
    const TensorView& t = in[i];
    KILN_RETURN_IF_ERROR(check_dtype("cat", Name("inputs", static_cast<std::int64_t>(i)), t, y.dtype));
    if (t.rank == 1 && t.shape[0] == 0) continue;  // PyTorch's legacy rule: [0] tensors are skipped
    bool ok = t.rank == y.rank;
    for (int d = 0; ok && d < y.rank; ++d) ok = d == dim || t.shape[d] == y.shape[d];
    if (!ok) {
      return invalid("cat", "inputs[", i, "].shape=", shape_text(t), " does not match out.shape=", shape_text(y),
                     " outside dim ", dim);
    }
    if (__builtin_add_overflow(total, t.shape[dim], &total)) {
      return invalid("cat", "inputs are too large to concatenate along dim ", dim);
    }
  }
  if (total != y.shape[dim]) {
    return invalid("cat", "inputs sum to ", total, " along dim ", dim, " but out.shape=", shape_text(y));
  }
  const std::int64_t outer = dims_product(y, 0, static_cast<int>(dim));
  const std::int64_t inner = dims_product(y, static_cast<int>(dim) + 1, y.rank);
  const auto elem = static_cast<std::int64_t>(dtype_size(y.dtype));
  const std::int64_t out_row = y.shape[dim] * inner * elem;
  // Large copies with a dimension after `dim` (a feature map's rows: NCHW, or NCHW8c's
  // [N, C/8, H, W, 8]) run on every thread, thread t copying the t-th share of those rows
  // of every channel: the rows that the convolutions before it (split into pixel bands)
  // wrote on that thread's core, and that the layer after it reads there.
  const std::int64_t rows = dim + 1 < y.rank ? y.shape[dim + 1] : 1;
  const std::int64_t parts = std::min<std::int64_t>(rows, ctx.pool().num_threads());
  const bool shared = parts > 1 && outer * out_row >= (std::int64_t{256} << 10);
  const std::int64_t row_bytes = inner / std::max<std::int64_t>(rows, 1) * elem;
  ctx.pool().parallel_for(shared ? parts : 1, 1, [&](std::int64_t first, std::int64_t last) {
    for (std::int64_t part = first; part < last; ++part) {
      // Bytes [b0, b1) of every (outer, channel) plane of `inner` elements.
      const std::int64_t b0 = shared ? part * rows / parts * row_bytes : 0;
      const std::int64_t b1 = shared ? (part + 1) * rows / parts * row_bytes : inner * elem;
      std::int64_t offset = 0;
      for (const TensorView& t : in) {
        if (t.rank != y.rank) continue;
        const std::int64_t chunk = t.shape[dim] * inner * elem;
        const auto* src = static_cast<const unsigned char*>(t.data);
        auto* dst = static_cast<unsigned char*>(y.data) + offset;
        if (!shared) {
          for (std::int64_t o = 0; o < outer && chunk > 0; ++o) {
            std::memcpy(dst + o * out_row, src + o * chunk, static_cast<std::size_t>(chunk));
          }
        } else {
          for (std::int64_t o = 0; o < outer; ++o) {
            for (std::int64_t c = 0; c < t.shape[dim]; ++c) {
              const std::int64_t plane = c * inner * elem;
              std::memcpy(dst + o * out_row + plane + b0, src + o * chunk + plane + b0, static_cast<std::size_t>(b1 - b0));
            }
          }
        }
        offset += chunk;
      }
    }
  });
  return Status::Ok();
}

Status Split(KernelContext&, Inputs in, Outputs out, Attrs attrs) {
  KILN_RETURN_IF_ERROR(check_io("split", in, out, {.min_inputs = 1, .max_inputs = 1, .num_outputs = -1}));
  KILN_ASSIGN_OR_RETURN(std::int64_t dim, attr_int("split", attrs, 0, "dim"));
  KILN_ASSIGN_OR_RETURN(std::span<const std::int64_t> sizes, attr_ints("split", attrs, 1, "sizes"));
  const TensorView& x = in[0];
  KILN_RETURN_IF_ERROR(check_dim("split", "dim", dim, x.rank));
  if (sizes.size() != out.size()) {
    return invalid("split", "sizes has ", sizes.size(), " entries for ", out.size(), " outputs");
  }
  std::int64_t total = 0;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] < 0 || sizes[i] > x.shape[dim]) {
      return invalid("split", "sizes[", i, "]=", sizes[i], " outside [0, ", x.shape[dim], "]");
    }
    if (__builtin_add_overflow(total, sizes[i], &total)) return invalid("split", "sizes overflow int64");
    std::array<std::int64_t, kMaxRank> expected = x.shape;
    expected[dim] = sizes[i];
    KILN_RETURN_IF_ERROR(check_dtype("split", Name("outputs", static_cast<std::int64_t>(i)), out[i], x.dtype));
    KILN_RETURN_IF_ERROR(check_out_shape("split", out[i], std::span<const std::int64_t>(expected.data(), x.rank),
                                         Name("outputs", static_cast<std::int64_t>(i))));
  }
  if (total != x.shape[dim]) {
    return invalid("split", "sizes sum to ", total, " but x.shape[", dim, "]=", x.shape[dim]);
  }
  const std::int64_t outer = dims_product(x, 0, static_cast<int>(dim));
  const std::int64_t inner = dims_product(x, static_cast<int>(dim) + 1, x.rank);
  const auto elem = static_cast<std::int64_t>(dtype_size(x.dtype));
  const std::int64_t in_row = x.shape[dim] * inner * elem;
  std::int64_t offset = 0;
  for (std::size_t i = 0; i < out.size(); ++i) {
    const std::int64_t chunk = sizes[i] * inner * elem;
    const auto* src = static_cast<const unsigned char*>(x.data) + offset;
    auto* dst = static_cast<unsigned char*>(out[i].data);
    for (std::int64_t o = 0; o < outer && chunk > 0; ++o) {
      std::memcpy(dst + o * chunk, src + o * in_row, static_cast<std::size_t>(chunk));
    }
    offset += chunk;
  }
  return Status::Ok();
}

Status Expand(KernelContext& ctx, Inputs in, Outputs out, Attrs) {
  KILN_RETURN_IF_ERROR(check_unary_dtype("expand", in, out));
  const TensorView& x = in[0];
  BroadcastPlan plan;
  KILN_RETURN_IF_ERROR(plan_broadcast("expand", {{&x, "x"}}, out[0], false, plan));
  StridedLayout layout;
  layout.rank = plan.rank;
  for (int d = 0; d < plan.rank; ++d) {
    layout.shape[d] = plan.shape[d];
    layout.strides[d] = plan.strides[0][d];
  }
  if (plan.numel > 0) strided_copy(x.data, layout, out[0].data, dtype_size(x.dtype), &ctx.pool());
  return Status::Ok();
}

Status Pad(KernelContext&, Inputs in, Outputs out, Attrs attrs) {
  KILN_RETURN_IF_ERROR(check_unary_dtype("pad", in, out));
  KILN_ASSIGN_OR_RETURN(std::span<const std::int64_t> pads, attr_ints("pad", attrs, 0, "pads"));
  KILN_ASSIGN_OR_RETURN(double value, attr_float("pad", attrs, 1, "value"));
  const TensorView& x = in[0];
  if (pads.size() % 2 != 0 || pads.size() > 2 * static_cast<std::size_t>(x.rank)) {
    return invalid("pad", "pads has ", pads.size(), " entries; expected an even number up to 2 * rank = ", 2 * x.rank);
  }
  // Per dim: left pad (negative crops) and the expected output size.
  std::array<std::int64_t, kMaxRank> left{};
  std::array<std::int64_t, kMaxRank> expected = x.shape;
  constexpr std::int64_t kMaxPad = std::int64_t{1} << 62;
  for (std::size_t i = 0; i < pads.size() / 2; ++i) {
    const int d = x.rank - 1 - static_cast<int>(i);
    const std::int64_t l = pads[2 * i], r = pads[2 * i + 1];
    if (l <= -kMaxPad || l >= kMaxPad || r <= -kMaxPad || r >= kMaxPad || x.shape[d] + l + r < 0) {
      return invalid("pad", "pads (", l, ", ", r, ") on dim ", d, " of x.shape=", shape_text(x),
                     " give a negative size");
    }
    left[d] = l;
    expected[d] = x.shape[d] + l + r;
  }
  KILN_RETURN_IF_ERROR(check_out_shape("pad", out[0], std::span<const std::int64_t>(expected.data(), x.rank)));
  const auto elem = static_cast<std::int64_t>(dtype_size(x.dtype));
  auto* dst = static_cast<unsigned char*>(out[0].data);
  fill_scalar(value, dst, x.dtype, out[0].numel());
  // The part of x that survives, and where it lands.
  std::array<std::int64_t, kMaxRank> box{};
  std::int64_t src_off = 0, dst_off = 0;
  const auto xs = contiguous_strides(x);
  const auto ys = contiguous_strides(out[0]);
  for (int d = 0; d < x.rank; ++d) {
    const std::int64_t s0 = std::max<std::int64_t>(0, -left[d]);
    const std::int64_t d0 = std::max<std::int64_t>(0, left[d]);
    box[d] = std::min(x.shape[d] - s0, expected[d] - d0);
    if (box[d] <= 0) return Status::Ok();  // nothing of x survives
    src_off += s0 * xs[d];
    dst_off += d0 * ys[d];
  }
  copy_box(byte_ptr(x, src_off), xs, dst + dst_off * elem, ys, box, x.rank, static_cast<std::size_t>(elem));
  return Status::Ok();
}

Status Flip(KernelContext& ctx, Inputs in, Outputs out, Attrs attrs) {
  KILN_RETURN_IF_ERROR(check_unary_dtype("flip", in, out));
  KILN_ASSIGN_OR_RETURN(std::span<const std::int64_t> dims, attr_ints("flip", attrs, 0, "dims"));
  const TensorView& x = in[0];
  KILN_RETURN_IF_ERROR(check_same_shape("flip", "x", x, "out", out[0]));
  StridedLayout layout;
  layout.rank = x.rank;
  layout.shape = x.shape;
  layout.strides = contiguous_strides(x);
  std::array<bool, kMaxRank> seen{};
  std::int64_t offset = 0;
  for (std::size_t i = 0; i < dims.size(); ++i) {
    KILN_RETURN_IF_ERROR(check_dim("flip", Name("dims", static_cast<std::int64_t>(i)), dims[i], x.rank));
    if (seen[dims[i]]) return invalid("flip", "dims[", i, "]=", dims[i], " is repeated");
    seen[dims[i]] = true;
  }
  if (x.numel() == 0) return Status::Ok();
  for (int d = 0; d < x.rank; ++d) {
    if (!seen[d]) continue;
    offset += (x.shape[d] - 1) * layout.strides[d];
    layout.strides[d] = -layout.strides[d];
  }
  strided_copy(byte_ptr(x, offset), layout, out[0].data, dtype_size(x.dtype), &ctx.pool());
  return Status::Ok();
}

}  // namespace kiln::cpu::kernels

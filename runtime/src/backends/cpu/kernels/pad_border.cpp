// pad_border: reflect / replicate / circular padding (PyTorch's reflection_pad*,
// replication_pad*, and pad(mode="circular")), any dtype, any rank. Each output index maps
// to one source index per dim (a table per dim), and rows are copied element by element,
// split over the pool for large outputs.
#include <array>
#include <cstdint>
#include <cstring>
#include <vector>

#include "backends/cpu/kernels/common.h"
#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/thread_pool.h"
#include "kernel/attrs.h"

namespace kiln::cpu::kernels {
namespace {

enum class BorderMode { kReflect, kReplicate, kCircular };

// The source index of padded position i (i in [0, n + l + r)) for a dim of size n.
std::int64_t source_index(BorderMode mode, std::int64_t i, std::int64_t l, std::int64_t n) {
  std::int64_t j = i - l;
  switch (mode) {
    case BorderMode::kReflect:
      if (j < 0) j = -j;
      if (j >= n) j = 2 * (n - 1) - j;
      return j;
    case BorderMode::kReplicate: return j < 0 ? 0 : j >= n ? n - 1 : j;
    case BorderMode::kCircular: return ((j % n) + n) % n;
  }
  return 0;
}

template <typename T>
void copy_rows(const TensorView& x, const std::array<std::vector<std::int64_t>, kMaxRank>& src,
               const std::array<std::int64_t, kMaxRank>& xs, const TensorView& out, std::int64_t begin,
               std::int64_t end) {
  const int rank = out.rank;
  const std::int64_t inner = out.shape[rank - 1];
  const T* px = x.as<T>();
  T* po = out.as<T>();
  const std::vector<std::int64_t>& last = src[rank - 1];
  for (std::int64_t r = begin; r < end; ++r) {
    std::int64_t rem = r, off = 0;
    for (int d = rank - 2; d >= 0; --d) {
      const std::int64_t i = rem % out.shape[d];
      rem /= out.shape[d];
      off += src[d][i] * xs[d];
    }
    T* o = po + r * inner;
    const T* row = px + off;
    for (std::int64_t j = 0; j < inner; ++j) o[j] = row[last[j]];
  }
}

}  // namespace

Status PadBorder(KernelContext& ctx, Inputs in, Outputs out, Attrs attrs) {
  constexpr std::string_view op = "pad_border";
  KILN_RETURN_IF_ERROR(check_io(op, in, out, {.min_inputs = 1, .max_inputs = 1, .num_outputs = 1}));
  KILN_ASSIGN_OR_RETURN(std::span<const std::int64_t> pads, attr_ints(op, attrs, 0, "pads"));
  KILN_ASSIGN_OR_RETURN(std::string_view mode_name, attr_string(op, attrs, 1, "mode"));
  BorderMode mode{};
  if (mode_name == "reflect") mode = BorderMode::kReflect;
  else if (mode_name == "replicate") mode = BorderMode::kReplicate;
  else if (mode_name == "circular") mode = BorderMode::kCircular;
  else return invalid(op, "mode='", mode_name, "' is not 'reflect', 'replicate' or 'circular'");
  const TensorView& x = in[0];
  KILN_RETURN_IF_ERROR(check_dtype(op, "out", out[0], x.dtype));
  if (pads.size() % 2 != 0 || pads.size() > 2 * static_cast<std::size_t>(x.rank)) {
    return invalid(op, "pads has ", pads.size(), " entries; expected an even number up to 2 * rank = ", 2 * x.rank);
  }
  std::array<std::int64_t, kMaxRank> left{};
  std::array<std::int64_t, kMaxRank> expected = x.shape;
  constexpr std::int64_t kMaxPad = std::int64_t{1} << 40;
  for (std::size_t i = 0; i < pads.size() / 2; ++i) {
    const int d = x.rank - 1 - static_cast<int>(i);
    const std::int64_t l = pads[2 * i], r = pads[2 * i + 1], n = x.shape[d];
    if (l < 0 || r < 0 || l > kMaxPad || r > kMaxPad) {
      return invalid(op, "pads (", l, ", ", r, ") on dim ", d, " must be in [0, 2^40]");
    }
    if (mode == BorderMode::kReflect && (l >= n || r >= n) && (l > 0 || r > 0)) {
      return invalid(op, "reflect pads (", l, ", ", r, ") on dim ", d, " must be < its size ", n, " (x.shape=",
                     shape_text(x), ")");
    }
    if (mode == BorderMode::kReplicate && n == 0 && (l > 0 || r > 0)) {
      return invalid(op, "replicate padding of the empty dim ", d, " (x.shape=", shape_text(x), ")");
    }
    if (mode == BorderMode::kCircular && (l > n || r > n) ) {
      return invalid(op, "circular pads (", l, ", ", r, ") on dim ", d, " must be <= its size ", n, " (x.shape=",
                     shape_text(x), ")");
    }
    if (mode == BorderMode::kCircular && n == 0 && (l > 0 || r > 0)) {
      return invalid(op, "circular padding of the empty dim ", d, " (x.shape=", shape_text(x), ")");
    }
    left[d] = l;
    expected[d] = n + l + r;
  }
  KILN_RETURN_IF_ERROR(check_out_shape(op, out[0], std::span<const std::int64_t>(expected.data(), x.rank)));
  const std::int64_t total = out[0].numel();
  if (total == 0) return Status::Ok();
  if (x.rank == 0) {
    std::memcpy(out[0].data, x.data, dtype_size(x.dtype));
    return Status::Ok();
  }
  std::array<std::vector<std::int64_t>, kMaxRank> src;
  for (int d = 0; d < x.rank; ++d) {
    src[d].resize(static_cast<std::size_t>(expected[d]));
    for (std::int64_t i = 0; i < expected[d]; ++i) src[d][i] = source_index(mode, i, left[d], x.shape[d]);
  }
  const auto xs = contiguous_strides(x);
  const std::int64_t inner = expected[x.rank - 1];
  const std::int64_t rows = total / inner;
  auto run = [&](std::int64_t begin, std::int64_t end) {
    switch (dtype_size(x.dtype)) {
      case 1: copy_rows<std::uint8_t>(x, src, xs, out[0], begin, end); break;
      case 2: copy_rows<std::uint16_t>(x, src, xs, out[0], begin, end); break;
      case 4: copy_rows<std::uint32_t>(x, src, xs, out[0], begin, end); break;
      default: copy_rows<std::uint64_t>(x, src, xs, out[0], begin, end); break;
    }
  };
  if (total < kParallelElements) {
    run(0, rows);
  } else {
    ctx.pool().parallel_for(rows, ctx.pool().even_grain(rows, inner, kParallelElements / 2), run);
  }
  return Status::Ok();
}

}  // namespace kiln::cpu::kernels

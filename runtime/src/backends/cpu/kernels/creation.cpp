// Creation ops (full, arange) and triangular masks (tril, triu over the last two dims).
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>

#include "backends/cpu/kernels/common.h"
#include "backends/cpu/kernels/convert.h"
#include "backends/cpu/kernels/kernels.h"
#include "kernel/attrs.h"

namespace kiln::cpu::kernels {
namespace {

// max(0, ceil((end - start) / step)) without overflow; step != 0.
std::uint64_t arange_length(std::int64_t start, std::int64_t end, std::int64_t step) {
  __extension__ using Wide = __int128;
  const Wide span = static_cast<Wide>(end) - start;
  if (span == 0 || (span > 0) != (step > 0)) return 0;
  const Wide s = step;
  const Wide n = (span + s + (step > 0 ? -1 : 1)) / s;
  return n > static_cast<Wide>(UINT64_MAX) ? UINT64_MAX : static_cast<std::uint64_t>(n);
}

template <DType D>
void arange_fill(CType<D>* out, std::int64_t n, std::int64_t start, std::int64_t step) {
  for (std::int64_t i = 0; i < n; ++i) {
    if constexpr (kIsFloat<D>) {
      out[i] = convert<D, DType::kF64>(static_cast<double>(start) + static_cast<double>(i) * static_cast<double>(step));
    } else {
      const auto v = static_cast<std::uint64_t>(start) + static_cast<std::uint64_t>(i) * static_cast<std::uint64_t>(step);
      out[i] = convert<D, DType::kI64>(static_cast<std::int64_t>(v));
    }
  }
}

Status triangle(std::string_view op, Inputs in, Outputs out, Attrs attrs, bool lower) {
  KILN_RETURN_IF_ERROR(check_io(op, in, out, {.min_inputs = 1, .max_inputs = 1, .num_outputs = 1}));
  KILN_ASSIGN_OR_RETURN(std::int64_t diagonal, attr_int(op, attrs, 0, "diagonal"));
  const TensorView& x = in[0];
  if (x.rank < 2) return invalid(op, "x must be at least 2-D, got x.shape=", shape_text(x));
  KILN_RETURN_IF_ERROR(check_same_shape(op, "x", x, "out", out[0]));
  KILN_RETURN_IF_ERROR(check_dtype(op, "out", out[0], x.dtype));
  if (x.numel() == 0) return Status::Ok();
  const std::int64_t rows = x.shape[x.rank - 2];
  const std::int64_t cols = x.shape[x.rank - 1];
  const std::int64_t mats = dims_product(x, 0, x.rank - 2);
  const std::size_t elem = dtype_size(x.dtype);
  diagonal = std::clamp<std::int64_t>(diagonal, -(std::int64_t{1} << 62), std::int64_t{1} << 62);
  const auto* src = static_cast<const unsigned char*>(x.data);
  auto* dst = static_cast<unsigned char*>(out[0].data);
  for (std::int64_t m = 0; m < mats; ++m) {
    for (std::int64_t i = 0; i < rows; ++i) {
      const std::int64_t offset = (m * rows + i) * cols;
      // Columns kept: tril j <= i + diagonal, triu j >= i + diagonal.
      const std::int64_t edge = std::clamp<std::int64_t>(i + diagonal + (lower ? 1 : 0), 0, cols);
      const std::int64_t keep_begin = lower ? 0 : edge;
      const std::int64_t keep_end = lower ? edge : cols;
      unsigned char* row = dst + offset * static_cast<std::int64_t>(elem);
      if (src != dst) {
        std::memcpy(row + keep_begin * elem, src + (offset + keep_begin) * static_cast<std::int64_t>(elem),
                    static_cast<std::size_t>(keep_end - keep_begin) * elem);
      }
      std::memset(lower ? row + keep_end * elem : row, 0,
                  static_cast<std::size_t>(lower ? cols - keep_end : keep_begin) * elem);
    }
  }
  return Status::Ok();
}

}  // namespace

Status Full(KernelContext&, Inputs in, Outputs out, Attrs attrs) {
  KILN_RETURN_IF_ERROR(check_io("full", in, out, {.min_inputs = 0, .max_inputs = 0, .num_outputs = 1}));
  KILN_ASSIGN_OR_RETURN(std::span<const std::int64_t> shape, attr_ints("full", attrs, 0, "shape"));
  KILN_ASSIGN_OR_RETURN(double value, attr_float("full", attrs, 1, "value"));
  KILN_ASSIGN_OR_RETURN(DType dtype, attr_dtype("full", attrs, 2, "dtype"));
  KILN_RETURN_IF_ERROR(check_dtype("full", "out", out[0], dtype));
  KILN_RETURN_IF_ERROR(check_out_shape("full", out[0], shape));
  fill_scalar(value, out[0].data, dtype, out[0].numel());
  return Status::Ok();
}

Status Arange(KernelContext&, Inputs in, Outputs out, Attrs attrs) {
  KILN_RETURN_IF_ERROR(check_io("arange", in, out, {.min_inputs = 0, .max_inputs = 0, .num_outputs = 1}));
  KILN_ASSIGN_OR_RETURN(std::int64_t start, attr_int("arange", attrs, 0, "start"));
  KILN_ASSIGN_OR_RETURN(std::int64_t end, attr_int("arange", attrs, 1, "end"));
  KILN_ASSIGN_OR_RETURN(std::int64_t step, attr_int("arange", attrs, 2, "step"));
  KILN_ASSIGN_OR_RETURN(DType dtype, attr_dtype("arange", attrs, 3, "dtype"));
  if (step == 0) return invalid("arange", "step must be nonzero");
  KILN_RETURN_IF_ERROR(check_dtype("arange", "out", out[0], dtype));
  const std::uint64_t length = arange_length(start, end, step);
  if (out[0].rank != 1 || static_cast<std::uint64_t>(out[0].shape[0]) != length) {
    return invalid("arange", "out.shape=", shape_text(out[0]), " but start=", start, ", end=", end, ", step=", step,
                   " give ", length, " elements");
  }
  const bool ok = dispatch<KILN_NUMERIC_DTYPES, DType::kF16, DType::kBF16>(dtype, [&]<DType D>() {
    arange_fill<D>(out[0].as<CType<D>>(), out[0].shape[0], start, step);
  });
  return ok ? Status::Ok() : unsupported_dtype("arange", dtype, "dtype");
}

Status Tril(KernelContext&, Inputs in, Outputs out, Attrs attrs) { return triangle("tril", in, out, attrs, true); }
Status Triu(KernelContext&, Inputs in, Outputs out, Attrs attrs) { return triangle("triu", in, out, attrs, false); }

}  // namespace kiln::cpu::kernels

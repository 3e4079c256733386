// topk(x; k, dim, largest, sorted): the k largest (or smallest) elements along dim and
// their i64 indices. Ties keep the lower index first; NaN counts as the largest value
// (PyTorch's CPU order). `sorted` = false still returns them sorted (allowed by PyTorch).
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <span>
#include <vector>

#include "backends/cpu/kernels/common.h"
#include "backends/cpu/kernels/kernels.h"
#include "kernel/attrs.h"

namespace kiln::cpu::kernels {
namespace {

constexpr IoSpec kTopkIo{.min_inputs = 1, .max_inputs = 1, .num_outputs = 2};

template <typename T>
void topk_rows(const TensorView& x, TensorView& values, TensorView& indices, std::int64_t k, int dim, bool largest) {
  std::int64_t outer = 1, inner = 1;
  for (int d = 0; d < dim; ++d) outer *= x.shape[d];
  for (int d = dim + 1; d < x.rank; ++d) inner *= x.shape[d];
  const std::int64_t n = x.rank == 0 ? 1 : x.shape[dim];
  const T* in = x.as<const T>();
  T* vo = values.as<T>();
  std::int64_t* io = indices.as<std::int64_t>();
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  auto before = [&](T a, T b) {
    const bool na = is_nan(a), nb = is_nan(b);
    if (na || nb) return largest ? (na && !nb) : (!na && nb);
    return largest ? a > b : a < b;
  };
  for (std::int64_t o = 0; o < outer; ++o) {
    for (std::int64_t j = 0; j < inner; ++j) {
      const T* row = in + o * n * inner + j;
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) { return before(row[a * inner], row[b * inner]); });
      for (std::int64_t r = 0; r < k; ++r) {
        const std::int64_t at = o * k * inner + r * inner + j;
        vo[at] = row[order[static_cast<std::size_t>(r)] * inner];
        io[at] = order[static_cast<std::size_t>(r)];
      }
    }
  }
}

}  // namespace

Status Topk(KernelContext& ctx, Inputs in, Outputs out, Attrs attrs) {
  constexpr std::string_view op = "topk";
  KILN_RETURN_IF_ERROR(check_io(op, in, out, kTopkIo));
  KILN_ASSIGN_OR_RETURN(std::int64_t k, attr_int(op, attrs, 0, "k"));
  KILN_ASSIGN_OR_RETURN(std::int64_t dim, attr_int(op, attrs, 1, "dim"));
  KILN_ASSIGN_OR_RETURN(bool largest, attr_bool(op, attrs, 2, "largest"));
  const TensorView& x = in[0];
  if (x.rank > 0) KILN_RETURN_IF_ERROR(check_dim(op, "dim", dim, x.rank));
  const std::int64_t n = x.rank == 0 ? 1 : x.shape[static_cast<std::size_t>(dim)];
  if (k < 0 || k > n) return invalid_input(op, "k=", k, " is outside [0, ", n, "] for x.shape=", shape_text(x));
  std::array<std::int64_t, kMaxRank> want = x.shape;
  if (x.rank > 0) want[static_cast<std::size_t>(dim)] = k;
  const std::span<const std::int64_t> expected(want.data(), static_cast<std::size_t>(x.rank));
  KILN_RETURN_IF_ERROR(check_out_shape(op, out[0], expected));
  KILN_RETURN_IF_ERROR(check_out_shape(op, out[1], expected));
  KILN_RETURN_IF_ERROR(check_dtype(op, "values", out[0], x.dtype));
  KILN_RETURN_IF_ERROR(check_dtype(op, "indices", out[1], DType::kI64));
  if (is_half_dtype(x.dtype)) return run_via_f32(Topk, ctx, in, out, attrs);
  const bool ok = dispatch<KILN_NUMERIC_DTYPES>(x.dtype, [&]<DType D>() {
    topk_rows<CType<D>>(x, out[0], out[1], k, static_cast<int>(dim), largest);
  });
  if (!ok) return unsupported(op, "dtype ", x.dtype, " (numeric dtypes only)");
  return Status::Ok();
}

}  // namespace kiln::cpu::kernels

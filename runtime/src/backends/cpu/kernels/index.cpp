// Indexing by integer tensors (i64 or i32 indices; any data dtype, moved by size):
// embedding, gather, index_select (indices must be in [0, size), as in PyTorch) and index
// (advanced indexing x[..., i0, i1, ...] with broadcasting index tensors on adjacent dims;
// negative indices count from the end). An index out of range is kInvalidInput naming it.
#include <algorithm>
#include <array>
#include <climits>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "backends/cpu/kernels/common.h"
#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/kernels/simd.h"
#include "backends/cpu/thread_pool.h"
#include "kernel/attrs.h"

namespace kiln::cpu::kernels {
namespace {

// Reads index i of an i64 or i32 tensor.
struct IndexReader {
  const void* data;
  bool wide;
  std::int64_t operator[](std::int64_t i) const {
    return wide ? static_cast<const std::int64_t*>(data)[i] : static_cast<const std::int32_t*>(data)[i];
  }
};

Status index_reader(std::string_view op, Name name, const TensorView& v, IndexReader& r) {
  if (v.dtype == DType::kBool || v.dtype == DType::kU8) {
    return unsupported(op, name, " is a boolean mask (", v.dtype, "); only integer indices are supported");
  }
  if (v.dtype != DType::kI64 && v.dtype != DType::kI32) return unsupported_dtype(op, v.dtype, str_cat(name));
  r = {v.data, v.dtype == DType::kI64};
  return Status::Ok();
}

[[gnu::cold]] Status out_of_range(std::string_view op, std::string_view name, std::int64_t pos,
                                  std::int64_t value, std::int64_t size) {
  return invalid_input(op, name, "[", pos, "]=", value, " out of range [0, ", size, ")");
}

// Copies `bytes` bytes; the element-size cases let the compiler inline small copies.
inline void copy_bytes(void* dst, const void* src, std::size_t bytes) {
  switch (bytes) {
    case 1: std::memcpy(dst, src, 1); break;
    case 2: std::memcpy(dst, src, 2); break;
    case 4: std::memcpy(dst, src, 4); break;
    case 8: std::memcpy(dst, src, 8); break;
    default: std::memcpy(dst, src, bytes); break;
  }
}

template <typename T>
void gather_typed(const TensorView& x, const TensorView& idx, const IndexReader& ix, int dim, T* out) {
  const auto xs = contiguous_strides(x);
  const T* src = x.as<T>();
  const int rank = idx.rank;
  const std::int64_t inner = rank == 0 ? 1 : idx.shape[rank - 1];
  const std::int64_t rows = inner == 0 ? 0 : idx.numel() / inner;
  const std::int64_t last_stride = rank == 0 || dim == rank - 1 ? 0 : xs[rank - 1];
  const std::int64_t dim_stride = rank == 0 ? 0 : xs[dim];
  std::array<std::int64_t, kMaxRank> pos{};
  std::int64_t base = 0;  // x offset of the row's first element, ignoring `dim`
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t j = 0; j < inner; ++j) {
      out[r * inner + j] = src[base + j * last_stride + ix[r * inner + j] * dim_stride];
    }
    for (int d = rank - 2; d >= 0; --d) {
      const std::int64_t step = d == dim ? 0 : xs[d];
      if (++pos[d] < idx.shape[d]) {
        base += step;
        break;
      }
      pos[d] = 0;
      base -= step * (idx.shape[d] - 1);
    }
  }
}

// Checks every index against [0, size).
Status check_indices(std::string_view op, std::string_view name, const IndexReader& ix, std::int64_t n,
                     std::int64_t size) {
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t v = ix[i];
    if (v < 0 || v >= size) return out_of_range(op, name, i, v, size);
  }
  return Status::Ok();
}

// Elements [begin, end) of out[pre, b] = src[pre * pre_stride + off[b]], element by element
// (post == 1: a gather of single elements, the core ATen IR's bilinear upsampling).
template <typename T>
void take_elements(const T* src, std::int64_t pre_stride, const std::int64_t* off, std::int64_t count, std::int64_t begin,
                   std::int64_t end, T* dst) {
  for (std::int64_t i = begin; i < end;) {
    const std::int64_t p = i / count, j0 = i % count, j1 = std::min(count, j0 + (end - i));
    const T* s = src + p * pre_stride;
    T* d = dst + i - j0;
    for (std::int64_t j = j0; j < j1; ++j) d[j] = s[off[j]];
    i += j1 - j0;
  }
}

// Below this many output bytes a gather stays on the calling thread.
constexpr std::int64_t kMinParallelTakeBytes = 128 << 10;

// out[pre, b, post] = x[pre, off[b], post] where off[b] already includes the dim strides.
// Single elements (post == 1) are gathered in typed loops, rows copied whole; split over
// the pool's threads from 128 KiB of output.
void take_rows(const TensorView& x, std::int64_t pre, std::int64_t pre_stride, std::span<const std::int64_t> offsets,
               std::int64_t post, void* out, ThreadPool& pool) {
  const std::size_t elem = dtype_size(x.dtype);
  const auto* src = static_cast<const unsigned char*>(x.data);
  auto* dst = static_cast<unsigned char*>(out);
  const auto count = static_cast<std::int64_t>(offsets.size());
  const std::int64_t rows = pre * count;
  const std::size_t row_bytes = static_cast<std::size_t>(post) * elem;
  auto body = [&](std::int64_t begin, std::int64_t end) {
    if (post == 1) {
      switch (elem) {
        case 1: return take_elements(reinterpret_cast<const std::uint8_t*>(src), pre_stride, offsets.data(), count, begin, end, reinterpret_cast<std::uint8_t*>(dst));
        case 2: return take_elements(reinterpret_cast<const std::uint16_t*>(src), pre_stride, offsets.data(), count, begin, end, reinterpret_cast<std::uint16_t*>(dst));
        case 4: return take_elements(reinterpret_cast<const std::uint32_t*>(src), pre_stride, offsets.data(), count, begin, end, reinterpret_cast<std::uint32_t*>(dst));
        case 8: return take_elements(reinterpret_cast<const std::uint64_t*>(src), pre_stride, offsets.data(), count, begin, end, reinterpret_cast<std::uint64_t*>(dst));
        default: break;
      }
    }
    for (std::int64_t i = begin; i < end; ++i) {
      const std::int64_t p = i / count, off = offsets[static_cast<std::size_t>(i % count)];
      copy_bytes(dst + static_cast<std::size_t>(i) * row_bytes, src + (p * pre_stride + off) * static_cast<std::int64_t>(elem), row_bytes);
    }
  };
  if (rows == 0) return;
  const auto total_bytes = static_cast<std::int64_t>(row_bytes) * rows;
  if (pool.num_threads() < 2 || total_bytes < kMinParallelTakeBytes) return body(0, rows);
  pool.parallel_for(rows, pool.even_grain(rows, static_cast<std::int64_t>(row_bytes), 32 << 10), body);
}

// The broadcast shape of the index tensors in[1..]; kInvalidBundle if they do not broadcast.
Status index_broadcast_shape(std::string_view op, Inputs in, std::array<std::int64_t, kMaxRank>& shape, int& rank) {
  rank = 0;
  for (std::size_t i = 1; i < in.size(); ++i) rank = std::max(rank, in[i].rank);
  for (int d = 0; d < rank; ++d) {
    std::int64_t b = 1;
    for (std::size_t i = 1; i < in.size(); ++i) {
      const int id = d - (rank - in[i].rank);
      const std::int64_t dim = id >= 0 ? in[i].shape[id] : 1;
      if (dim == 1) continue;
      if (b != 1 && b != dim) return invalid(op, "index tensor shapes do not broadcast (indices ", i - 1, ")");
      b = dim;
    }
    shape[d] = b;
  }
  return Status::Ok();
}

// x offsets (in elements) selected by each broadcast position of the index tensors. Each
// index tensor is checked and scaled to x offsets once, element by element, then added along
// the broadcast positions with an odometer over its own strides (0 where it broadcasts).
Status index_offsets(std::string_view op, Inputs in, int first_dim, std::span<const std::int64_t> bshape, std::vector<std::int64_t>& offsets) {
  const TensorView& x = in[0];
  const auto xs = contiguous_strides(x);
  std::int64_t count = 1;
  for (std::int64_t d : bshape) count *= d;
  offsets.assign(static_cast<std::size_t>(count), 0);
  if (count == 0) return Status::Ok();
  const int rank = static_cast<int>(bshape.size());
  std::vector<std::int64_t> scaled;
  for (std::size_t i = 1; i < in.size(); ++i) {
    const TensorView& t = in[i];
    IndexReader ix{};
    KILN_RETURN_IF_ERROR(index_reader(op, Name("indices", i - 1), t, ix));
    const int xd = first_dim + static_cast<int>(i) - 1;
    const std::int64_t size = x.shape[xd];
    // Every element of t is read at least once (count > 0, and t broadcasts to bshape).
    scaled.resize(static_cast<std::size_t>(t.numel()));
    for (std::int64_t e = 0; e < t.numel(); ++e) {
      std::int64_t v = ix[e];
      if (v < -size || v >= size) {
        return invalid_input(op, "indices[", i - 1, "] element ", e, " = ", v, " out of range for dim ", xd,
                             " of size ", size);
      }
      if (v < 0) v += size;
      scaled[static_cast<std::size_t>(e)] = v * xs[xd];
    }
    const auto ts = contiguous_strides(t);
    std::array<std::int64_t, kMaxRank> step{}, pos{};
    for (int d = 0; d < rank; ++d) {
      const int td = d - (rank - t.rank);
      step[d] = td >= 0 && t.shape[td] != 1 ? ts[td] : 0;
    }
    std::int64_t toff = 0;
    for (std::int64_t b = 0; b < count; ++b) {
      offsets[static_cast<std::size_t>(b)] += scaled[static_cast<std::size_t>(toff)];
      for (int d = rank - 1; d >= 0; --d) {
        if (++pos[d] < bshape[d]) {
          toff += step[d];
          break;
        }
        toff -= step[d] * (bshape[d] - 1);
        pos[d] = 0;
      }
    }
  }
  return Status::Ok();
}

// out[pos] (+)= values[pos'] for every position of the indexed shape: pre x bshape x post.
enum class Scatter { kSet, kAdd, kOr };

template <typename T, Scatter kMode>
void scatter_values(const TensorView& values, std::span<const std::int64_t> vstrides, std::int64_t pre,
                    std::int64_t pre_stride, std::span<const std::int64_t> offsets, std::int64_t post,
                    std::span<const std::int64_t> ishape, T* out) {
  const T* v = values.as<T>();
  const int rank = static_cast<int>(ishape.size());
  std::array<std::int64_t, kMaxRank> pos{};
  std::int64_t voff = 0;
  for (std::int64_t p = 0; p < pre; ++p) {
    for (std::int64_t off : offsets) {
      T* row = out + p * pre_stride + off;
      for (std::int64_t j = 0; j < post; ++j) {
        if constexpr (kMode == Scatter::kSet) {
          row[j] = v[voff];
        } else if constexpr (kMode == Scatter::kOr) {
          row[j] = static_cast<T>(row[j] != 0 || v[voff] != 0);
        } else if constexpr (std::is_integral_v<T>) {  // wraps, as PyTorch's integer add
          using U = std::make_unsigned_t<T>;
          row[j] = static_cast<T>(static_cast<U>(static_cast<U>(row[j]) + static_cast<U>(v[voff])));
        } else {
          row[j] = static_cast<T>(row[j] + v[voff]);
        }
        for (int d = rank - 1; d >= 0; --d) {  // advance the values offset in row-major order
          voff += vstrides[d];
          if (++pos[d] < ishape[d]) break;
          voff -= vstrides[d] * ishape[d];
          pos[d] = 0;
        }
      }
    }
  }
}

}  // namespace

Status Embedding(KernelContext& ctx, Inputs in, Outputs out, Attrs) {
  KILN_RETURN_IF_ERROR(check_io("embedding", in, out, {.min_inputs = 2, .max_inputs = 2, .num_outputs = 1}));
  const TensorView& weight = in[0];
  const TensorView& idx = in[1];
  IndexReader ix{};
  KILN_RETURN_IF_ERROR(index_reader("embedding", "indices", idx, ix));
  if (weight.rank < 1) return invalid("embedding", "weight must be at least 1-D, got weight.shape=", shape_text(weight));
  if (idx.rank + weight.rank - 1 > kMaxRank) {
    return invalid("embedding", "indices.shape=", shape_text(idx), " with weight.shape=", shape_text(weight),
                   " gives a result of rank above ", kMaxRank);
  }
  std::array<std::int64_t, kMaxRank> expected{};
  std::copy_n(idx.shape.begin(), idx.rank, expected.begin());
  std::copy_n(weight.shape.begin() + 1, weight.rank - 1, expected.begin() + idx.rank);
  KILN_RETURN_IF_ERROR(check_out_shape("embedding", out[0],
                                       std::span<const std::int64_t>(expected.data(), idx.rank + weight.rank - 1)));
  KILN_RETURN_IF_ERROR(check_dtype("embedding", "out", out[0], weight.dtype));
  const std::int64_t n = idx.numel();
  KILN_RETURN_IF_ERROR(check_indices("embedding", "indices", ix, n, weight.shape[0]));
  const std::int64_t row = dims_product(weight, 1, weight.rank);
  std::vector<std::int64_t> offsets(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) offsets[i] = ix[i] * row;
  take_rows(weight, 1, 0, offsets, row, out[0].data, ctx.pool());
  return Status::Ok();
}

Status IndexSelect(KernelContext& ctx, Inputs in, Outputs out, Attrs attrs) {
  KILN_RETURN_IF_ERROR(check_io("index_select", in, out, {.min_inputs = 2, .max_inputs = 2, .num_outputs = 1}));
  KILN_ASSIGN_OR_RETURN(std::int64_t dim, attr_int("index_select", attrs, 0, "dim"));
  const TensorView& x = in[0];
  const TensorView& idx = in[1];
  IndexReader ix{};
  KILN_RETURN_IF_ERROR(index_reader("index_select", "indices", idx, ix));
  if (idx.rank > 1) return invalid("index_select", "indices must be 0-D or 1-D, got indices.shape=", shape_text(idx));
  TensorView xv = x;  // a 0-d x is indexed as [1]
  if (xv.rank == 0) {
    xv.rank = 1;
    xv.shape[0] = 1;
  }
  KILN_RETURN_IF_ERROR(check_dim("index_select", "dim", dim, xv.rank));
  const int d = static_cast<int>(dim);
  const std::int64_t n = idx.numel();
  if (x.rank == 0 && n != 1) {
    return invalid("index_select", "a 0-d x takes exactly one index, got indices.shape=", shape_text(idx));
  }
  std::array<std::int64_t, kMaxRank> expected = xv.shape;
  expected[d] = n;
  KILN_RETURN_IF_ERROR(check_out_shape("index_select", out[0], std::span<const std::int64_t>(expected.data(), x.rank)));
  KILN_RETURN_IF_ERROR(check_dtype("index_select", "out", out[0], x.dtype));
  KILN_RETURN_IF_ERROR(check_indices("index_select", "indices", ix, n, xv.shape[d]));
  if (out[0].numel() == 0) return Status::Ok();
  const std::int64_t post = dims_product(xv, d + 1, xv.rank);
  std::vector<std::int64_t> offsets(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) offsets[i] = ix[i] * post;
  take_rows(xv, dims_product(xv, 0, d), xv.shape[d] * post, offsets, post, out[0].data, ctx.pool());
  return Status::Ok();
}

Status Gather(KernelContext&, Inputs in, Outputs out, Attrs attrs) {
  KILN_RETURN_IF_ERROR(check_io("gather", in, out, {.min_inputs = 2, .max_inputs = 2, .num_outputs = 1}));
  KILN_ASSIGN_OR_RETURN(std::int64_t dim, attr_int("gather", attrs, 0, "dim"));
  const TensorView& x = in[0];
  const TensorView& idx = in[1];
  IndexReader ix{};
  KILN_RETURN_IF_ERROR(index_reader("gather", "indices", idx, ix));
  if (idx.rank != x.rank) {
    return invalid("gather", "indices.shape=", shape_text(idx), " must have the rank of x.shape=", shape_text(x));
  }
  if (x.rank > 0 || dim != 0) KILN_RETURN_IF_ERROR(check_dim("gather", "dim", dim, x.rank));
  for (int d = 0; d < x.rank; ++d) {
    if (d != dim && idx.shape[d] > x.shape[d]) {
      return invalid("gather", "indices.shape[", d, "]=", idx.shape[d], " > x.shape[", d, "]=", x.shape[d]);
    }
  }
  KILN_RETURN_IF_ERROR(check_out_shape("gather", out[0], idx.dims()));
  KILN_RETURN_IF_ERROR(check_dtype("gather", "out", out[0], x.dtype));
  const std::int64_t size = x.rank == 0 ? 1 : x.shape[dim];
  KILN_RETURN_IF_ERROR(check_indices("gather", "indices", ix, idx.numel(), size));
  switch (dtype_size(x.dtype)) {
    case 1: gather_typed(x, idx, ix, static_cast<int>(dim), out[0].as<std::uint8_t>()); break;
    case 2: gather_typed(x, idx, ix, static_cast<int>(dim), out[0].as<std::uint16_t>()); break;
    case 4: gather_typed(x, idx, ix, static_cast<int>(dim), out[0].as<std::uint32_t>()); break;
    default: gather_typed(x, idx, ix, static_cast<int>(dim), out[0].as<std::uint64_t>()); break;
  }
  return Status::Ok();
}

Status Index(KernelContext& ctx, Inputs in, Outputs out, Attrs attrs) {
  KILN_RETURN_IF_ERROR(check_io("index", in, out, {.min_inputs = 2, .max_inputs = -1, .num_outputs = 1}));
  KILN_ASSIGN_OR_RETURN(std::span<const std::int64_t> dims, attr_ints("index", attrs, 0, "dims"));
  const TensorView& x = in[0];
  const auto k = static_cast<int>(in.size()) - 1;
  if (dims.size() != static_cast<std::size_t>(k)) {
    return invalid("index", "dims has ", dims.size(), " entries for ", k, " index tensors");
  }
  KILN_RETURN_IF_ERROR(check_dim("index", "dims[0]", dims[0], x.rank));
  for (int i = 1; i < k; ++i) {
    if (dims[i] != dims[0] + i) {
      return unsupported("index", "index tensors on non-adjacent dims (dims[", i, "]=", dims[i],
                         ") are not supported");
    }
  }
  const int first = static_cast<int>(dims[0]);
  if (first + k > x.rank) return invalid("index", k, " index tensors from dim ", first, " exceed x.rank=", x.rank);
  for (int i = 1; i <= k; ++i) {
    IndexReader unused{};
    KILN_RETURN_IF_ERROR(index_reader("index", Name("indices", i - 1), in[i], unused));
  }
  std::array<std::int64_t, kMaxRank> bshape{};
  int brank = 0;
  KILN_RETURN_IF_ERROR(index_broadcast_shape("index", in, bshape, brank));
  const int out_rank = x.rank - k + brank;
  if (out_rank > kMaxRank) return invalid("index", "result rank ", out_rank, " exceeds ", kMaxRank);
  std::array<std::int64_t, kMaxRank> expected{};
  std::copy_n(x.shape.begin(), first, expected.begin());
  std::copy_n(bshape.begin(), brank, expected.begin() + first);
  std::copy_n(x.shape.begin() + first + k, x.rank - first - k, expected.begin() + first + brank);
  KILN_RETURN_IF_ERROR(check_out_shape("index", out[0], std::span<const std::int64_t>(expected.data(), out_rank)));
  KILN_RETURN_IF_ERROR(check_dtype("index", "out", out[0], x.dtype));
  if (out[0].numel() == 0) return Status::Ok();
  std::vector<std::int64_t> offsets;
  KILN_RETURN_IF_ERROR(index_offsets("index", in, first, std::span<const std::int64_t>(bshape.data(), brank), offsets));
  const std::int64_t post = dims_product(x, first + k, x.rank);
  take_rows(x, dims_product(x, 0, first), dims_product(x, first, x.rank), offsets, post, out[0].data, ctx.pool());
  return Status::Ok();
}

namespace {

// Whether index tensor (or weight) t, right-aligned against the broadcast index shape of
// rank `brank`, varies along broadcast dim `along` only (size 1 on the others).
bool varies_only_along(const TensorView& t, int along, int brank) {
  if (t.rank > brank) return false;
  for (int d = 0; d < t.rank; ++d) {
    if (d + brank - t.rank != along && t.shape[d] != 1) return false;
  }
  return true;
}

// The n values of index tensor t (indices[i] of a gather, on x's dim xd of `size`) along
// broadcast dim `along`, wrapped and checked as index_offsets checks them.
Status index_along(const TensorView& t, int i, int along, int brank, std::int64_t n, int xd, std::int64_t size,
                   std::vector<std::int32_t>& out) {
  IndexReader ix{};
  KILN_RETURN_IF_ERROR(index_reader("index", Name("indices", i), t, ix));
  const auto ts = contiguous_strides(t);
  const int td = along - (brank - t.rank);
  const std::int64_t step = td >= 0 && t.shape[td] != 1 ? ts[td] : 0;
  out.resize(static_cast<std::size_t>(n));
  for (std::int64_t q = 0; q < n; ++q) {
    std::int64_t v = ix[q * step];
    if (v < -size || v >= size) {
      return invalid_input("index", "indices[", i, "] element ", q * step, " = ", v, " out of range for dim ", xd,
                           " of size ", size);
    }
    out[static_cast<std::size_t>(q)] = static_cast<std::int32_t>(v < 0 ? v + size : v);
  }
  return Status::Ok();
}

// gather_lerp2 when it is separable, as upsampling's is: two index dims, gathers 0 and 1
// reading one row index tensor and gathers 2 and 3 another, every row index varying along
// the first index dim only and every column index along the second only, w0 and w1 along
// the second, w2 along the first. Then top[by][bx] = H(row ya[by])[bx] for one lerp of two
// gathers along a source row, computed once for all the output rows that read that row (8
// of them when upsampling 8x), and the last lerp runs along rows, vectorized. The same
// roundings as the general path.
Status gather_lerp2_separable(KernelContext& ctx, const TensorView& x, int first, const std::array<std::span<const TensorView>, 4>& gathers,
                              const std::array<TensorView, 3>& weights, std::int64_t oh, std::int64_t ow, TensorView& out) {
  const std::int64_t h = x.shape[first], w = x.shape[first + 1];
  std::vector<std::int32_t> ya, yc;
  std::array<std::vector<std::int32_t>, 4> cols;
  KILN_RETURN_IF_ERROR(index_along(gathers[0][0], 0, 0, 2, oh, first, h, ya));
  KILN_RETURN_IF_ERROR(index_along(gathers[2][0], 0, 0, 2, oh, first, h, yc));
  for (std::size_t j = 0; j < 4; ++j) KILN_RETURN_IF_ERROR(index_along(gathers[j][1], 1, 1, 2, ow, first + 1, w, cols[j]));
  auto along = [&](const TensorView& t, int dim, std::int64_t n) {
    std::vector<float> v(static_cast<std::size_t>(n));
    const auto ts = contiguous_strides(t);
    const int td = dim - (2 - t.rank);
    const std::int64_t step = td >= 0 && t.shape[td] != 1 ? ts[td] : 0;
    for (std::int64_t q = 0; q < n; ++q) v[static_cast<std::size_t>(q)] = t.as<float>()[q * step];
    return v;
  };
  const std::vector<float> w0 = along(weights[0], 1, ow), w1 = along(weights[1], 1, ow), w2 = along(weights[2], 0, oh);
  const std::int64_t planes = dims_product(x, 0, first);
  constexpr std::int64_t kRows = 32;
  const std::int64_t row_blocks = (oh + kRows - 1) / kRows, units = planes * row_blocks;
  const SimdKernels& simd_k = simd();
  const float* src = x.as<float>();
  float* dst = out.as<float>();
  auto body = [&](std::int64_t u0, std::int64_t u1) {
    std::vector<float> top(static_cast<std::size_t>(ow)), bottom(static_cast<std::size_t>(ow));
    for (std::int64_t u = u0; u < u1; ++u) {
      const std::int64_t p = u / row_blocks, r0 = (u % row_blocks) * kRows, r1 = std::min(oh, r0 + kRows);
      const float* plane = src + p * h * w;
      float* o = dst + p * oh * ow;
      std::int64_t top_row = -1, bottom_row = -1;
      for (std::int64_t by = r0; by < r1; ++by) {
        const std::int32_t a = ya[static_cast<std::size_t>(by)], c = yc[static_cast<std::size_t>(by)];
        if (a != top_row) simd_k.lerp_gather_row(plane + a * w, cols[0].data(), cols[1].data(), w0.data(), top.data(), ow);
        if (c != bottom_row) simd_k.lerp_gather_row(plane + c * w, cols[2].data(), cols[3].data(), w1.data(), bottom.data(), ow);
        top_row = a;
        bottom_row = c;
        simd_k.lerp_rows(top.data(), bottom.data(), w2[static_cast<std::size_t>(by)], o + by * ow, ow);
      }
    }
  };
  ThreadPool& pool = ctx.pool();
  if (pool.num_threads() < 2 || planes * oh * ow * static_cast<std::int64_t>(sizeof(float)) < kMinParallelTakeBytes) {
    body(0, units);
  } else {
    pool.parallel_for(units, pool.even_grain(units, kRows * ow * 4, 32 << 10), body);
  }
  return Status::Ok();
}

}  // namespace

Status gather_lerp2(KernelContext& ctx, const TensorView& x, std::span<const std::int64_t> dims,
                    const std::array<std::span<const TensorView>, 4>& gathers, const std::array<TensorView, 3>& weights,
                    TensorView& out) {
  constexpr std::string_view op = "index";
  const auto k = static_cast<int>(dims.size());
  if (x.dtype != DType::kF32 || out.dtype != DType::kF32 || k == 0 || dims[0] < 0 || dims[0] + k != x.rank) {
    return Status(StatusCode::kInternal, "[index+lerp] x must be f32, indexed on its last dims");
  }
  const int first = static_cast<int>(dims[0]);
  // x and the index tensors of each gather, as index_broadcast_shape / index_offsets expect.
  std::array<std::array<TensorView, kMaxRank + 1>, 4> xi{};
  std::array<std::int64_t, kMaxRank> bshape{};
  int brank = 0;
  for (std::size_t j = 0; j < 4; ++j) {
    if (gathers[j].size() != static_cast<std::size_t>(k)) return Status(StatusCode::kInternal, "[index+lerp] index tensor count");
    xi[j][0] = x;
    for (int i = 0; i < k; ++i) {
      IndexReader unused{};
      KILN_RETURN_IF_ERROR(index_reader(op, Name("indices", i), gathers[j][static_cast<std::size_t>(i)], unused));
      xi[j][static_cast<std::size_t>(i) + 1] = gathers[j][static_cast<std::size_t>(i)];
    }
    std::array<std::int64_t, kMaxRank> shape{};
    int rank = 0;
    KILN_RETURN_IF_ERROR(index_broadcast_shape(op, Inputs(xi[j].data(), static_cast<std::size_t>(k) + 1), shape, rank));
    if (j == 0) {
      bshape = shape;
      brank = rank;
    } else if (rank != brank || !std::equal(shape.begin(), shape.begin() + rank, bshape.begin())) {
      // Load matched the pattern on the declared shapes; index tensors whose run-time shapes
      // disagree come from a bundle whose shapes lie: its error, not an internal one.
      return invalid("index", "the four gathers of a fused bilinear interpolation have index shapes that differ at run time");
    }
  }
  if (out.rank != first + brank || !std::equal(x.shape.begin(), x.shape.begin() + first, out.shape.begin()) ||
      !std::equal(bshape.begin(), bshape.begin() + brank, out.shape.begin() + first)) {
    return invalid("index", "out.shape=", shape_text(out), " does not match the gathers of x.shape=", shape_text(x));
  }
  // Each weight's element stride per index dim (0 where it broadcasts); size 1 on the dims
  // before them.
  std::array<std::array<std::int64_t, kMaxRank>, 3> wstep{};
  for (std::size_t j = 0; j < 3; ++j) {
    const TensorView& t = weights[j];
    if (t.dtype != DType::kF32) return Status(StatusCode::kInternal, "[index+lerp] weights must be f32");
    if (t.rank > out.rank) return invalid("index", "a fused bilinear interpolation's weight of rank ", t.rank, " for out.shape=", shape_text(out));
    const auto ts = contiguous_strides(t);
    for (int d = 0; d < out.rank; ++d) {
      const int td = d - (out.rank - t.rank);
      const std::int64_t size = td >= 0 ? t.shape[td] : 1;
      if (size != 1 && (d < first || size != out.shape[d])) {
        return invalid("index", "a fused bilinear interpolation's weight.shape=", shape_text(t), " does not broadcast over the index dims of out.shape=", shape_text(out));
      }
      if (d >= first) wstep[j][static_cast<std::size_t>(d - first)] = size != 1 ? ts[td] : 0;
    }
  }
  std::int64_t count = 1;
  for (int d = 0; d < brank; ++d) count *= bshape[static_cast<std::size_t>(d)];
  const std::int64_t pre = dims_product(x, 0, first), pre_stride = dims_product(x, first, x.rank);
  if (pre * count == 0) return Status::Ok();
  if (pre_stride > INT32_MAX) return Status(StatusCode::kInternal, "[index+lerp] a plane of 2^31 elements or more");
  if (k == 2 && brank == 2 && gathers[0][0].data == gathers[1][0].data && gathers[2][0].data == gathers[3][0].data &&
      varies_only_along(gathers[0][0], 0, 2) && varies_only_along(gathers[1][0], 0, 2) &&
      varies_only_along(gathers[2][0], 0, 2) && varies_only_along(gathers[3][0], 0, 2) &&
      varies_only_along(gathers[0][1], 1, 2) && varies_only_along(gathers[1][1], 1, 2) &&
      varies_only_along(gathers[2][1], 1, 2) && varies_only_along(gathers[3][1], 1, 2) &&
      varies_only_along(weights[0], 1, 2) && varies_only_along(weights[1], 1, 2) && varies_only_along(weights[2], 0, 2)) {
    return gather_lerp2_separable(ctx, x, first, gathers, weights, bshape[0], bshape[1], out);
  }
  // Seven tasks, over the threads: the four gathers' offsets (as 32-bit element offsets
  // within a plane, for the vector gathers) and the three weights over the index positions.
  std::array<std::vector<std::int32_t>, 4> offsets;
  std::array<std::vector<float>, 3> w;
  std::array<Status, 4> failed;
  ctx.pool().parallel_for(7, 1, [&](std::int64_t t0, std::int64_t t1) {
    std::vector<std::int64_t> wide;
    for (std::int64_t task = t0; task < t1; ++task) {
      if (task < 4) {
        const auto j = static_cast<std::size_t>(task);
        failed[j] = index_offsets(op, Inputs(xi[j].data(), static_cast<std::size_t>(k) + 1), first,
                                  std::span<const std::int64_t>(bshape.data(), static_cast<std::size_t>(brank)), wide);
        if (!failed[j].ok()) continue;
        offsets[j].assign(wide.begin(), wide.end());  // each < pre_stride <= INT32_MAX
        continue;
      }
      const auto j = static_cast<std::size_t>(task - 4);
      w[j].resize(static_cast<std::size_t>(count));
      const float* src = weights[j].as<float>();
      std::array<std::int64_t, kMaxRank> pos{};
      std::int64_t toff = 0;
      for (std::int64_t b = 0; b < count; ++b) {
        w[j][static_cast<std::size_t>(b)] = src[toff];
        for (int d = brank - 1; d >= 0; --d) {
          const auto du = static_cast<std::size_t>(d);
          if (++pos[du] < bshape[du]) {
            toff += wstep[j][du];
            break;
          }
          toff -= wstep[j][du] * (bshape[du] - 1);
          pos[du] = 0;
        }
      }
    }
  });
  for (const Status& st : failed) KILN_RETURN_IF_ERROR(st);
  // Blocks of index positions, every plane of each: a block's offsets and weights stay in
  // L1 while the planes reuse them.
  constexpr std::int64_t kBlock = 256;
  const std::int64_t blocks = (count + kBlock - 1) / kBlock;
  const auto row = simd().gather_lerp2_row;
  const float* src = x.as<float>();
  float* dst = out.as<float>();
  auto body = [&](std::int64_t first_block, std::int64_t last_block) {
    for (std::int64_t blk = first_block; blk < last_block; ++blk) {
      const std::int64_t b0 = blk * kBlock, n = std::min(count, b0 + kBlock) - b0;
      for (std::int64_t p = 0; p < pre; ++p) {
        row(src + p * pre_stride, offsets[0].data() + b0, offsets[1].data() + b0, offsets[2].data() + b0,
            offsets[3].data() + b0, w[0].data() + b0, w[1].data() + b0, w[2].data() + b0, dst + p * count + b0, n);
      }
    }
  };
  ThreadPool& pool = ctx.pool();
  if (pool.num_threads() < 2 || pre * count * static_cast<std::int64_t>(sizeof(float)) < kMinParallelTakeBytes) {
    body(0, blocks);
  } else {
    pool.parallel_for(blocks, pool.even_grain(blocks, kBlock * pre * 4, 32 << 10), body);
  }
  return Status::Ok();
}

namespace {

// index_put's checks and index arithmetic, shared by the kernel and index_put_writes (which
// must fail exactly where the kernel would, before anything is written).
struct IndexPutPlan {
  bool accumulate = false;
  int irank = 0;
  std::array<std::int64_t, kMaxRank> ishape{}, vstrides{};
  std::vector<std::int64_t> offsets;  // x element offsets per broadcast index position
  std::int64_t pre = 0, pre_stride = 0, post = 0;
};

Status plan_index_put(Inputs in, const TensorView& out, Attrs attrs, IndexPutPlan& plan) {
  constexpr std::string_view op = "index_put";
  KILN_ASSIGN_OR_RETURN(std::span<const std::int64_t> dims, attr_ints(op, attrs, 0, "dims"));
  KILN_ASSIGN_OR_RETURN(plan.accumulate, attr_bool(op, attrs, 1, "accumulate"));
  const TensorView& x = in[0];
  const TensorView& values = in[1];
  const auto k = static_cast<int>(in.size()) - 2;
  if (dims.size() != static_cast<std::size_t>(k)) {
    return invalid(op, "dims has ", dims.size(), " entries for ", k, " index tensors");
  }
  KILN_RETURN_IF_ERROR(check_dim(op, "dims[0]", dims[0], x.rank));
  for (int i = 1; i < k; ++i) {
    if (dims[i] != dims[0] + i) {
      return unsupported(op, "index tensors on non-adjacent dims (dims[", i, "]=", dims[i], ") are not supported");
    }
  }
  const int first = static_cast<int>(dims[0]);
  if (first + k > x.rank) return invalid(op, k, " index tensors from dim ", first, " exceed x.rank=", x.rank);
  KILN_RETURN_IF_ERROR(check_same_shape(op, "x", x, "out", out));
  KILN_RETURN_IF_ERROR(check_dtype(op, "out", out, x.dtype));
  KILN_RETURN_IF_ERROR(check_dtype(op, "values", values, x.dtype));
  // x followed by the index tensors, as index_broadcast_shape / index_offsets expect.
  std::array<TensorView, kMaxRank + 1> xi_storage{};  // k <= x.rank <= kMaxRank (checked above)
  xi_storage[0] = x;
  for (int i = 0; i < k; ++i) {
    IndexReader unused{};
    KILN_RETURN_IF_ERROR(index_reader(op, Name("indices", i), in[2 + i], unused));
    xi_storage[static_cast<std::size_t>(i) + 1] = in[2 + i];
  }
  const Inputs xi(xi_storage.data(), static_cast<std::size_t>(k) + 1);
  std::array<std::int64_t, kMaxRank> bshape{};
  int brank = 0;
  KILN_RETURN_IF_ERROR(index_broadcast_shape(op, xi, bshape, brank));
  plan.irank = x.rank - k + brank;  // the indexed shape: x[:first] + bshape + x[first + k:]
  if (plan.irank > kMaxRank) return invalid(op, "indexed rank ", plan.irank, " exceeds ", kMaxRank);
  std::copy_n(x.shape.begin(), first, plan.ishape.begin());
  std::copy_n(bshape.begin(), brank, plan.ishape.begin() + first);
  std::copy_n(x.shape.begin() + first + k, x.rank - first - k, plan.ishape.begin() + first + brank);
  const std::span<const std::int64_t> ish(plan.ishape.data(), static_cast<std::size_t>(plan.irank));
  // values broadcasts into the indexed shape (right-aligned; its dims equal or 1).
  if (values.rank > plan.irank) return invalid(op, "values.shape=", shape_text(values), " does not broadcast to the indexed shape ", shape_text(ish));
  const auto vs = contiguous_strides(values);
  for (int d = 0; d < plan.irank; ++d) {
    const int vd = d - (plan.irank - values.rank);
    if (vd < 0 || values.shape[vd] == 1) continue;
    if (values.shape[vd] != plan.ishape[d]) {
      return invalid(op, "values.shape=", shape_text(values), " does not broadcast to the indexed shape ", shape_text(ish));
    }
    plan.vstrides[d] = vs[vd];
  }
  std::int64_t icount = 1;
  for (int d = 0; d < plan.irank; ++d) icount *= plan.ishape[d];
  plan.offsets.clear();
  if (icount == 0) return Status::Ok();
  KILN_RETURN_IF_ERROR(index_offsets(op, xi, first, std::span<const std::int64_t>(bshape.data(), brank), plan.offsets));
  plan.pre = dims_product(x, 0, first);
  plan.pre_stride = dims_product(x, first, x.rank);
  plan.post = dims_product(x, first + k, x.rank);
  return Status::Ok();
}

}  // namespace

Status IndexPut(KernelContext&, Inputs in, Outputs out, Attrs attrs) {
  constexpr std::string_view op = "index_put";
  KILN_RETURN_IF_ERROR(check_io(op, in, out, {.min_inputs = 3, .max_inputs = -1, .num_outputs = 1}));
  IndexPutPlan plan;
  KILN_RETURN_IF_ERROR(plan_index_put(in, out[0], attrs, plan));
  const TensorView& x = in[0];
  const TensorView& values = in[1];
  if (out[0].data != x.data && x.numel() > 0) std::memcpy(out[0].data, x.data, x.nbytes());
  if (plan.offsets.empty()) return Status::Ok();
  const std::span<const std::int64_t> vstr(plan.vstrides.data(), plan.irank), ish(plan.ishape.data(), plan.irank);
  const std::int64_t pre = plan.pre, pre_stride = plan.pre_stride, post = plan.post;
  const std::vector<std::int64_t>& offsets = plan.offsets;
  if (!plan.accumulate) {
    switch (dtype_size(x.dtype)) {
      case 1: scatter_values<std::uint8_t, Scatter::kSet>(values, vstr, pre, pre_stride, offsets, post, ish, out[0].as<std::uint8_t>()); break;
      case 2: scatter_values<std::uint16_t, Scatter::kSet>(values, vstr, pre, pre_stride, offsets, post, ish, out[0].as<std::uint16_t>()); break;
      case 4: scatter_values<std::uint32_t, Scatter::kSet>(values, vstr, pre, pre_stride, offsets, post, ish, out[0].as<std::uint32_t>()); break;
      default: scatter_values<std::uint64_t, Scatter::kSet>(values, vstr, pre, pre_stride, offsets, post, ish, out[0].as<std::uint64_t>()); break;
    }
    return Status::Ok();
  }
  if (x.dtype == DType::kBool) {
    scatter_values<std::uint8_t, Scatter::kOr>(values, vstr, pre, pre_stride, offsets, post, ish, out[0].as<std::uint8_t>());
    return Status::Ok();
  }
  const bool ok = dispatch<KILN_NUMERIC_DTYPES>(x.dtype, [&]<DType D>() {
    using T = CType<D>;
    scatter_values<T, Scatter::kAdd>(values, vstr, pre, pre_stride, offsets, post, ish, out[0].as<T>());
  });
  return ok ? Status::Ok() : unsupported_dtype(op, x.dtype, "x with accumulate=True");
}

Status index_put_writes(Inputs in, Attrs attrs, std::vector<ElementRange>& writes) {
  if (in.size() < 3) return invalid("index_put", "expected at least 3 inputs, got ", in.size());
  IndexPutPlan plan;
  KILN_RETURN_IF_ERROR(plan_index_put(in, in[0], attrs, plan));
  if (plan.post == 0) return Status::Ok();
  for (std::int64_t p = 0; p < plan.pre; ++p) {
    for (std::int64_t off : plan.offsets) writes.push_back({p * plan.pre_stride + off, plan.post});
  }
  return Status::Ok();
}

}  // namespace kiln::cpu::kernels

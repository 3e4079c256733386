// 2-D pooling over [N, C, H, W] (or unbatched [C, H, W]): max_pool2d (with dilation and
// ceil_mode; NaN propagates), avg_pool2d (ceil_mode, count_include_pad) and the adaptive
// variants (window i spans [floor(i*In/Out), ceil((i+1)*In/Out))), all following PyTorch.
// Max pools take numeric dtypes, average pools floats; f16/bf16 via f32.
#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <vector>

#include "backends/cpu/kernels/common.h"
#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/kernels/layout_kernels.h"
#include "backends/cpu/thread_pool.h"
#include "backends/cpu/kernels/window.h"
#include "kernel/attrs.h"

namespace kiln::cpu::kernels {
namespace {

constexpr IoSpec kPoolIo{.min_inputs = 1, .max_inputs = 1, .num_outputs = 1};

struct PoolGeometry {
  Planes in;
  std::array<std::int64_t, 2> kernel{}, stride{}, padding{}, dilation{1, 1};
  std::int64_t oh = 0, ow = 0;
};

template <typename T>
T lowest() {
  if constexpr (std::is_floating_point_v<T>) return -std::numeric_limits<T>::infinity();
  else return std::numeric_limits<T>::lowest();
}

template <typename T>
inline T max_nan(T m, T v) {
  return (v > m || is_nan(v)) ? v : m;  // once NaN, m stays NaN
}

// Max over the window [y0, y1) x [x0, x1) stepping by (dy, dx); NaN wins.
template <typename T>
T window_max(const T* plane, std::int64_t width, std::int64_t y0, std::int64_t y1, std::int64_t dy,
             std::int64_t x0, std::int64_t x1, std::int64_t dx) {
  T m = lowest<T>();
  for (std::int64_t y = y0; y < y1; y += dy) {
    for (std::int64_t x = x0; x < x1; x += dx) {
      const T v = plane[y * width + x];
      m = max_nan(m, v);
    }
  }
  return m;
}

// First index >= lo of the arithmetic sequence start + i*step that is >= 0.
inline std::int64_t first_valid(std::int64_t start, std::int64_t step) {
  return start >= 0 ? start : start + ((-start + step - 1) / step) * step;
}

// Per output row: the column-wise max over the window's rows (a vectorizable pass over
// whole input rows), then each output's max over its window's columns of that row.
template <typename T>
void max_pool(const T* x, T* y, const PoolGeometry& g, ThreadPool& pool) {
  const std::int64_t h = g.in.height, w = g.in.width;
  const std::int64_t planes = g.in.batch * g.in.channels;
  const std::int64_t rows = planes * g.oh;
  pool.parallel_for(rows, pool.even_grain(rows, w * g.kernel[0], 8192), [&](std::int64_t r0, std::int64_t r1) {
    std::vector<T> colmax(static_cast<std::size_t>(w));
    T* cm = colmax.data();
    for (std::int64_t r = r0; r < r1; ++r) {
      const std::int64_t p = r / g.oh, oy = r % g.oh;
      const T* plane = x + p * h * w;
      T* out = y + p * g.oh * g.ow + oy * g.ow;
      const std::int64_t ys = oy * g.stride[0] - g.padding[0];
      const std::int64_t ye = std::min(ys + (g.kernel[0] - 1) * g.dilation[0] + 1, h);
      std::fill(cm, cm + w, lowest<T>());
      for (std::int64_t yy = first_valid(ys, g.dilation[0]); yy < ye; yy += g.dilation[0]) {
        const T* row = plane + yy * w;
        for (std::int64_t xx = 0; xx < w; ++xx) cm[xx] = max_nan(cm[xx], row[xx]);
      }
      // Windows wholly inside the row (dilation 1) without bounds checks; the 2- and
      // 3-wide ones unrolled so the compiler vectorizes them.
      std::int64_t lo = g.ow, hi = g.ow;
      if (g.dilation[1] == 1) {
        lo = std::min(g.ow, (g.padding[1] + g.stride[1] - 1) / g.stride[1]);
        hi = w + g.padding[1] >= g.kernel[1] ? std::min(g.ow, (w + g.padding[1] - g.kernel[1]) / g.stride[1] + 1) : 0;
        hi = std::max(hi, lo);
        const T* c0 = cm - g.padding[1];
        const std::int64_t sx = g.stride[1];
        if (g.kernel[1] == 2) {
          for (std::int64_t ox = lo; ox < hi; ++ox) out[ox] = max_nan(c0[ox * sx], c0[ox * sx + 1]);
        } else if (g.kernel[1] == 3) {
          for (std::int64_t ox = lo; ox < hi; ++ox) {
            out[ox] = max_nan(max_nan(c0[ox * sx], c0[ox * sx + 1]), c0[ox * sx + 2]);
          }
        } else {
          for (std::int64_t ox = lo; ox < hi; ++ox) {
            T m = c0[ox * sx];
            for (std::int64_t j = 1; j < g.kernel[1]; ++j) m = max_nan(m, c0[ox * sx + j]);
            out[ox] = m;
          }
        }
      }
      for (std::int64_t ox = 0; ox < g.ow; ++ox) {
        if (ox == lo) ox = hi;
        if (ox >= g.ow) break;
        const std::int64_t xs = ox * g.stride[1] - g.padding[1];
        const std::int64_t xe = std::min(xs + (g.kernel[1] - 1) * g.dilation[1] + 1, w);
        T m = lowest<T>();
        for (std::int64_t xx = first_valid(xs, g.dilation[1]); xx < xe; xx += g.dilation[1]) m = max_nan(m, cm[xx]);
        out[ox] = m;
      }
    }
  });
}

template <typename T>
void avg_pool(const T* x, T* y, const PoolGeometry& g, bool count_include_pad) {
  const std::int64_t h = g.in.height, w = g.in.width;
  const std::int64_t planes = g.in.batch * g.in.channels;
  for (std::int64_t p = 0; p < planes; ++p) {
    const T* plane = x + p * h * w;
    T* out = y + p * g.oh * g.ow;
    for (std::int64_t oy = 0; oy < g.oh; ++oy) {
      std::int64_t y0 = oy * g.stride[0] - g.padding[0];
      std::int64_t y1 = std::min(y0 + g.kernel[0], h + g.padding[0]);
      const std::int64_t pool_h = y1 - y0;
      y0 = std::max<std::int64_t>(y0, 0);
      y1 = std::min(y1, h);
      for (std::int64_t ox = 0; ox < g.ow; ++ox) {
        std::int64_t x0 = ox * g.stride[1] - g.padding[1];
        std::int64_t x1 = std::min(x0 + g.kernel[1], w + g.padding[1]);
        const std::int64_t pool_size = pool_h * (x1 - x0);
        x0 = std::max<std::int64_t>(x0, 0);
        x1 = std::min(x1, w);
        if (y0 >= y1 || x0 >= x1) {
          out[oy * g.ow + ox] = T(0);
          continue;
        }
        T sum = 0;
        for (std::int64_t yy = y0; yy < y1; ++yy) {
          for (std::int64_t xx = x0; xx < x1; ++xx) sum += plane[yy * w + xx];
        }
        const std::int64_t divisor = count_include_pad ? pool_size : (y1 - y0) * (x1 - x0);
        out[oy * g.ow + ox] = sum / static_cast<T>(divisor);
      }
    }
  }
}

// Adaptive windows: start = floor(i * in / out), end = ceil((i + 1) * in / out).
template <typename T, bool kMax>
void adaptive_pool(const T* x, T* y, const PoolGeometry& g) {
  const std::int64_t h = g.in.height, w = g.in.width;
  const std::int64_t planes = g.in.batch * g.in.channels;
  for (std::int64_t p = 0; p < planes; ++p) {
    const T* plane = x + p * h * w;
    T* out = y + p * g.oh * g.ow;
    for (std::int64_t oy = 0; oy < g.oh; ++oy) {
      const std::int64_t y0 = oy * h / g.oh;
      const std::int64_t y1 = ((oy + 1) * h + g.oh - 1) / g.oh;
      for (std::int64_t ox = 0; ox < g.ow; ++ox) {
        const std::int64_t x0 = ox * w / g.ow;
        const std::int64_t x1 = ((ox + 1) * w + g.ow - 1) / g.ow;
        if constexpr (kMax) {
          out[oy * g.ow + ox] = window_max(plane, w, y0, y1, 1, x0, x1, 1);
        } else {
          T sum = 0;
          for (std::int64_t yy = y0; yy < y1; ++yy) {
            for (std::int64_t xx = x0; xx < x1; ++xx) sum += plane[yy * w + xx];
          }
          out[oy * g.ow + ox] = sum / static_cast<T>((y1 - y0) * (x1 - x0));
        }
      }
    }
  }
}

Status check_pool_out(std::string_view op, const TensorView& x, const TensorView& out, const PoolGeometry& g) {
  KILN_RETURN_IF_ERROR(check_dtype(op, "out", out, x.dtype));
  const auto expected = planes_shape(x, g.in.channels, g.oh, g.ow);
  return check_out_shape(op, out, std::span<const std::int64_t>(expected.data(), x.rank));
}

// Reads kernel/stride/padding (and dilation for max pooling); computes the output size.
Status pool_geometry(std::string_view op, const TensorView& x, Attrs attrs, bool has_dilation,
                     bool ceil_mode, PoolGeometry& g) {
  KILN_RETURN_IF_ERROR(split_planes(op, x, g.in));
  KILN_RETURN_IF_ERROR(read_pair(op, attrs, 0, "kernel", 1, g.kernel));
  KILN_RETURN_IF_ERROR(read_pair(op, attrs, 1, "stride", 1, g.stride, &g.kernel));
  KILN_RETURN_IF_ERROR(read_pair(op, attrs, 2, "padding", 0, g.padding));
  if (has_dilation) KILN_RETURN_IF_ERROR(read_pair(op, attrs, 3, "dilation", 1, g.dilation));
  for (int i = 0; i < 2; ++i) {
    if (g.padding[i] * 2 > g.kernel[i]) {
      return invalid(op, "padding[", i, "]=", g.padding[i], " exceeds half of kernel[", i, "]=", g.kernel[i]);
    }
  }
  KILN_RETURN_IF_ERROR(window_output_size(op, "height", g.in.height, g.kernel[0], g.stride[0], g.padding[0],
                                          g.dilation[0], ceil_mode, g.oh));
  return window_output_size(op, "width", g.in.width, g.kernel[1], g.stride[1], g.padding[1], g.dilation[1],
                            ceil_mode, g.ow);
}

template <bool kMax>
Status adaptive_op(std::string_view op, KernelFn self, KernelContext& ctx, Inputs in, Outputs out,
                   Attrs attrs) {
  KILN_RETURN_IF_ERROR(check_io(op, in, out, kPoolIo));
  const TensorView& x = in[0];
  PoolGeometry g;
  KILN_RETURN_IF_ERROR(split_planes(op, x, g.in));
  std::array<std::int64_t, 2> size{};
  KILN_RETURN_IF_ERROR(read_pair(op, attrs, 0, "output_size", 0, size));
  g.oh = size[0];
  g.ow = size[1];
  for (int i = 0; i < 2; ++i) {
    const std::int64_t dim = i == 0 ? g.in.height : g.in.width;
    if (dim >= kMaxWindowParam) return invalid(op, "x.shape=", shape_text(x), " has a spatial dim too large");
    if (dim == 0 && size[i] > 0) {
      return invalid(op, "cannot pool x.shape=", shape_text(x), " with an empty spatial dim to output_size[", i,
                     "]=", size[i]);
    }
  }
  KILN_RETURN_IF_ERROR(check_pool_out(op, x, out[0], g));
  if (is_half_dtype(x.dtype)) return run_via_f32(self, ctx, in, out, attrs);
  if (out[0].numel() == 0) return Status::Ok();
  bool ok = false;
  if constexpr (kMax) {
    ok = dispatch<KILN_NUMERIC_DTYPES>(x.dtype, [&]<DType D>() {
      adaptive_pool<CType<D>, true>(x.as<CType<D>>(), out[0].as<CType<D>>(), g);
    });
  } else {
    ok = dispatch<KILN_FLOAT_DTYPES>(x.dtype, [&]<DType D>() {
      adaptive_pool<CType<D>, false>(x.as<CType<D>>(), out[0].as<CType<D>>(), g);
    });
  }
  return ok ? Status::Ok() : unsupported_dtype(op, x.dtype, "x");
}

}  // namespace

Status MaxPool2d(KernelContext& ctx, Inputs in, Outputs out, Attrs attrs) {
  KILN_RETURN_IF_ERROR(check_io("max_pool2d", in, out, kPoolIo));
  if (ctx.input_blocked(0) || ctx.output_blocked(0)) return pool_blocked(OpKind::MaxPool2d, MaxPool2d, ctx, in, out, attrs);
  KILN_ASSIGN_OR_RETURN(bool ceil_mode, attr_bool("max_pool2d", attrs, 4, "ceil_mode"));
  const TensorView& x = in[0];
  PoolGeometry g;
  KILN_RETURN_IF_ERROR(pool_geometry("max_pool2d", x, attrs, true, ceil_mode, g));
  KILN_RETURN_IF_ERROR(check_pool_out("max_pool2d", x, out[0], g));
  if (is_half_dtype(x.dtype)) return run_via_f32(MaxPool2d, ctx, in, out, attrs);
  const bool ok = dispatch<KILN_NUMERIC_DTYPES>(x.dtype, [&]<DType D>() {
    max_pool(x.as<CType<D>>(), out[0].as<CType<D>>(), g, ctx.pool());
  });
  return ok ? Status::Ok() : unsupported_dtype("max_pool2d", x.dtype, "x");
}

Status AvgPool2d(KernelContext& ctx, Inputs in, Outputs out, Attrs attrs) {
  KILN_RETURN_IF_ERROR(check_io("avg_pool2d", in, out, kPoolIo));
  if (ctx.input_blocked(0) || ctx.output_blocked(0)) return pool_blocked(OpKind::AvgPool2d, AvgPool2d, ctx, in, out, attrs);
  KILN_ASSIGN_OR_RETURN(bool ceil_mode, attr_bool("avg_pool2d", attrs, 3, "ceil_mode"));
  KILN_ASSIGN_OR_RETURN(bool count_include_pad, attr_bool("avg_pool2d", attrs, 4, "count_include_pad"));
  const TensorView& x = in[0];
  PoolGeometry g;
  KILN_RETURN_IF_ERROR(pool_geometry("avg_pool2d", x, attrs, false, ceil_mode, g));
  KILN_RETURN_IF_ERROR(check_pool_out("avg_pool2d", x, out[0], g));
  if (is_half_dtype(x.dtype)) return run_via_f32(AvgPool2d, ctx, in, out, attrs);
  const bool ok = dispatch<KILN_FLOAT_DTYPES>(x.dtype, [&]<DType D>() {
    avg_pool(x.as<CType<D>>(), out[0].as<CType<D>>(), g, count_include_pad);
  });
  return ok ? Status::Ok() : unsupported_dtype("avg_pool2d", x.dtype, "x");
}

Status pool2d_check(OpKind op, const TensorView& x, const TensorView& out, Attrs attrs, nchwc::PoolShape& s) {
  const std::string_view name = op_info(op).name;
  PoolGeometry g;
  if (op == OpKind::AdaptiveAvgPool2d) {
    KILN_RETURN_IF_ERROR(split_planes(name, x, g.in));
    std::array<std::int64_t, 2> size{};
    KILN_RETURN_IF_ERROR(read_pair(name, attrs, 0, "output_size", 0, size));
    if ((g.in.height == 0 && size[0] > 0) || (g.in.width == 0 && size[1] > 0)) {
      return invalid(name, "cannot pool x.shape=", shape_text(x), " with an empty spatial dim");
    }
    g.oh = size[0];
    g.ow = size[1];
    return check_pool_out(name, x, out, g);
  }
  const bool max = op == OpKind::MaxPool2d;
  KILN_ASSIGN_OR_RETURN(const bool ceil_mode, attr_bool(name, attrs, max ? 4 : 3, "ceil_mode"));
  KILN_RETURN_IF_ERROR(pool_geometry(name, x, attrs, max, ceil_mode, g));
  KILN_RETURN_IF_ERROR(check_pool_out(name, x, out, g));
  if (!max) {
    KILN_ASSIGN_OR_RETURN(s.count_include_pad, attr_bool(name, attrs, 4, "count_include_pad"));
  }
  s.kh = g.kernel[0];
  s.kw = g.kernel[1];
  s.stride_h = g.stride[0];
  s.stride_w = g.stride[1];
  s.pad_h = g.padding[0];
  s.pad_w = g.padding[1];
  s.dilation_h = g.dilation[0];
  s.dilation_w = g.dilation[1];
  return Status::Ok();
}

Status AdaptiveAvgPool2d(KernelContext& ctx, Inputs in, Outputs out, Attrs attrs) {
  if (ctx.input_blocked(0) || ctx.output_blocked(0)) {
    return pool_blocked(OpKind::AdaptiveAvgPool2d, AdaptiveAvgPool2d, ctx, in, out, attrs);
  }
  return adaptive_op<false>("adaptive_avg_pool2d", AdaptiveAvgPool2d, ctx, in, out, attrs);
}
Status AdaptiveMaxPool2d(KernelContext& ctx, Inputs in, Outputs out, Attrs attrs) {
  return adaptive_op<true>("adaptive_max_pool2d", AdaptiveMaxPool2d, ctx, in, out, attrs);
}

}  // namespace kiln::cpu::kernels

// aten 3-D convolution and pooling, and 1-D transposed convolution, by decomposition into
// Kiln's 2-D ops (no runtime op of their own):
// - conv3d: one conv2d per temporal tap k (with that tap's [O, C/g, kH, kW] weight, a
//   constant of its own when the weight is one, so the conv2d kernels prepare it at load)
//   over the frames it reads folded into the batch, [N, C, D, H, W] -> [N, D, C, H, W] ->
//   [N*D', C, H, W]; the taps' results summed and permuted back. With a static depth a tap
//   runs only over the output frames whose input frame is not padding, its result padded
//   to all frames (a 3-tap kernel over a 1-frame clip runs once). A temporal conv
//   (kH = kW = 1) stays in the input's layout, [N, C, D, H*W], with a 1x1 conv2d per tap;
// - conv_transpose3d: one conv_transpose2d per temporal tap over all frames, each result
//   spread to its output frames (zero insertion for the stride, an offset of k*dilation)
//   and summed, cropped by the padding; conv_transpose1d: a height-1 conv_transpose2d;
// - pooling: the 2-D pool over (H, W) on [N, C*D, H, W], then the window along D from
//   strided slices (maximum / add) or, adaptive, from means / amaxes of slices. The average
//   pools' divisor is separable (a product of per-dimension counts), so the 2-D pool
//   divides by its part and the D part (or divisor_override) is a constant factor.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "import/importer.h"

namespace kiln::pt2 {
namespace {

using sym::Expr;

Expr c(std::int64_t v) { return Expr::constant(v); }

// A per-dimension list of 3 from PyTorch's int list (one value for all, or empty).
std::vector<std::int64_t> triple(Importer& im, std::vector<std::int64_t> v, std::int64_t fallback, const char* what) {
  if (v.empty()) return {fallback, fallback, fallback};
  if (v.size() == 1) return {v[0], v[0], v[0]};
  if (v.size() != 3) im.bad(std::string(what) + " must have 1 or 3 values");
  return v;
}

std::int64_t static_size(Importer& im, const Expr& e, const std::string& what) {
  auto k = im.simplify(e).constant_value();
  if (!k) im.unsupported(what + " must be static");
  return *k;
}

Shape simplified(Importer& im, Shape s) {
  for (Expr& e : s) e = im.simplify(e);
  return s;
}

int reshape_to(Importer& im, int v, Shape s) { return im.reshape(v, simplified(im, std::move(s))); }

int slice(Importer& im, int v, std::int64_t dim, Expr start, Expr end, std::int64_t step, Shape out) {
  return im.emit(OpKind::Slice, {v}, {dim, im.simplify(start), im.simplify(end), step}, im.dtype(v), simplified(im, std::move(out)));
}

// Pads (F.pad order: last dim first, (lo, hi) pairs) with `value`; the output shape from
// the input's.
int pad(Importer& im, int v, const std::vector<std::int64_t>& pads, double value) {
  bool any = false;
  for (std::int64_t p : pads) any = any || p != 0;
  if (!any) return v;
  Shape s = im.shape(v);
  for (std::size_t i = 0; i + 1 < pads.size(); i += 2) {
    Expr& d = s[s.size() - 1 - i / 2];
    d = im.simplify(d + c(pads[i] + pads[i + 1]));
  }
  return im.emit(OpKind::Pad, {v}, {pads, value}, im.dtype(v), s);
}

int add(Importer& im, int a, int b) { return im.emit(OpKind::Add, {a, b}, {}, im.dtype(a), im.shape(a)); }

// The constant a tensor value holds, when it is one.
const ir::ConstantTensor* constant_of(Importer& im, int v) {
  const ir::Value& val = im.value(v);
  if (val.kind != ir::ValueKind::kConstant || val.constant < 0) return nullptr;
  const ir::ConstantTensor& t = im.program.constants[static_cast<std::size_t>(val.constant)];
  if (!t.data || t.shape.size() != 5) return nullptr;
  return &t;
}

// Temporal tap k of a 5-D conv weight, [A, B, kD, kH, kW] -> [A, B, kH, kW]: a new constant
// when the weight is one (the conv2d kernels prepare constant weights at load), else a slice.
int weight_tap(Importer& im, int w, std::int64_t k) {
  const Shape ws = im.shape(w);
  if (const ir::ConstantTensor* t = constant_of(im, w); t && t->dtype == im.dtype(w)) {
    const std::int64_t a = t->shape[0], b = t->shape[1], kd = t->shape[2], kh = t->shape[3], kw = t->shape[4];
    const std::size_t plane = static_cast<std::size_t>(kh * kw) * dtype_size(t->dtype);
    if (kd == 1) {  // the same bytes
      ir::ConstantTensor r = *t;
      r.shape = {a, b, kh, kw};
      r.name = t->name + "[:, :, 0]";
      im.program.constants.push_back(std::move(r));
      return im.constant_value(static_cast<int>(im.program.constants.size()) - 1);
    }
    if (t->data->size() == static_cast<std::size_t>(a * b * kd) * plane) {
      std::vector<std::uint8_t> bytes(static_cast<std::size_t>(a * b) * plane);
      for (std::int64_t r = 0; r < a * b; ++r) {
        std::memcpy(bytes.data() + static_cast<std::size_t>(r) * plane, t->data->data() + static_cast<std::size_t>(r * kd + k) * plane, plane);
      }
      return im.constant(t->dtype, {a, b, kh, kw}, std::move(bytes), t->name + "[:, :, " + std::to_string(k) + "]");
    }
  }
  const int s = slice(im, w, 2, c(k), c(k + 1), 1, {ws[0], ws[1], c(1), ws[3], ws[4]});
  return reshape_to(im, s, {ws[0], ws[1], ws[3], ws[4]});
}

// x [C, ...] (unbatched) as [1, C, ...]; `batched` tells which it was.
int with_batch(Importer& im, int x, std::size_t rank, bool& batched, const char* what) {
  const Shape xs = im.shape(x);
  if (xs.size() != rank && xs.size() != rank - 1) im.bad(std::string(what) + " input has the wrong rank");
  batched = xs.size() == rank;
  if (batched) return x;
  Shape s = xs;
  s.insert(s.begin(), c(1));
  return im.reshape(x, s);
}

Shape batched_shape(Shape s, bool batched) {
  if (!batched) s.insert(s.begin(), c(1));
  return s;
}

// The weight [O, C/g, kD, 1, 1] as a conv2d weight [O, C/g, kD, 1] (the same bytes).
int temporal_weight(Importer& im, int w) {
  const Shape ws = im.shape(w);
  if (const ir::ConstantTensor* t = constant_of(im, w); t && t->dtype == im.dtype(w)) {
    ir::ConstantTensor r = *t;
    r.shape = {t->shape[0], t->shape[1], t->shape[2], 1};
    r.name = t->name + "[:, :, :, :, 0]";
    im.program.constants.push_back(std::move(r));
    return im.constant_value(static_cast<int>(im.program.constants.size()) - 1);
  }
  return reshape_to(im, w, {ws[0], ws[1], ws[2], c(1)});
}

// The output frames [first, last] temporal tap k of a conv reads real (not padding) input
// frames for: frame t reads input frame t*stride + k*dilation - pad.
struct Tap {
  std::int64_t k, first, last;
  std::int64_t count() const { return last - first + 1; }
};

std::vector<Tap> frame_taps(std::int64_t kd, std::int64_t d, std::int64_t dout, std::int64_t stride, std::int64_t pad, std::int64_t dilation) {
  std::vector<Tap> taps;
  for (std::int64_t k = 0; k < kd; ++k) {
    const std::int64_t j0 = k * dilation - pad;  // the input frame of output frame 0
    const std::int64_t first = j0 >= 0 ? 0 : (-j0 + stride - 1) / stride;
    const std::int64_t last = d - 1 - j0 < 0 ? -1 : std::min(dout - 1, (d - 1 - j0) / stride);
    if (first <= last) taps.push_back({k, first, last});
  }
  // The taps over every output frame first (the first of them takes the bias).
  std::stable_sort(taps.begin(), taps.end(), [](const Tap& a, const Tap& b) { return a.count() > b.count(); });
  return taps;
}

// conv3d with per-dimension (lo, hi) padding: x [N, C, D, H, W], w [O, C/g, kD, kH, kW].
//
// With a static depth, each temporal tap runs only over the output frames whose input frame
// is not padding (a clip of one frame through a 3-tap kernel runs one tap) and its result is
// padded to all output frames. A temporal conv (kH = kW = 1, R(2+1)D's second half) stays in
// the input's layout as [N, C, D, H*W]: one conv2d with a [kD, 1] kernel, or a 1x1 conv2d per
// tap when most tap frames would read padding; others run on the frames [N*D, C, H, W].
int conv3d(Importer& im, int x, int w, std::optional<int> bias, const std::vector<std::int64_t>& stride,
           const std::vector<std::int64_t>& pad_lo, const std::vector<std::int64_t>& pad_hi,
           const std::vector<std::int64_t>& dilation, std::int64_t groups, DType dt, const Shape& out) {
  const Shape xs = im.shape(x), ws = im.shape(w);
  if (xs.size() != 5 || ws.size() != 5 || out.size() != 5) im.bad("conv3d needs [N, C, D, H, W] input and [O, C/g, kD, kH, kW] weight");
  const std::int64_t kd = static_size(im, ws[2], "the kernel size");
  const Expr n = xs[0], o = out[1], dout = out[2], hout = out[3], wout = out[4];
  const auto kh = im.simplify(ws[3]).constant_value(), kw = im.simplify(ws[4]).constant_value();
  const auto d = im.simplify(xs[2]).constant_value();
  const auto dout_k = im.simplify(dout).constant_value();
  const bool temporal = kh == 1 && kw == 1 && stride[1] == 1 && stride[2] == 1 && pad_lo[1] == 0 && pad_lo[2] == 0 &&
                        pad_hi[1] == 0 && pad_hi[2] == 0;
  if (temporal) {
    const Expr plane = im.simplify(xs[3] * xs[4]);
    const int v = reshape_to(im, x, {n, xs[1], xs[2], plane});
    if (!d || !dout_k) {
      // A symbolic depth: one conv2d with a [kD, 1] kernel.
      int p = v;
      std::int64_t pd = pad_lo[0];
      if (pad_lo[0] != pad_hi[0]) p = pad(im, v, {0, 0, pad_lo[0], pad_hi[0]}, 0.0), pd = 0;
      const int r = conv2d_node(im, p, temporal_weight(im, w), bias, {stride[0], 1}, {pd, 0}, {dilation[0], 1}, groups, dt,
                                simplified(im, {n, o, dout, plane}));
      return reshape_to(im, r, out);
    }
    const Shape full{n, o, dout, plane};
    int acc = -1;
    const std::vector<Tap> taps = frame_taps(kd, *d, *dout_k, stride[0], pad_lo[0], dilation[0]);
    // One conv2d with a [kD, 1] kernel over [N, C, D, H*W] when at least 3/4 of its tap
    // frames read real input (no copies: the conv pads); per-tap 1x1 convs when most would
    // read padding (a 3-tap kernel over a clip of 1 or 2 frames).
    std::int64_t real = 0;
    for (const Tap& t : taps) real += t.count();
    if (real * 4 >= kd * *dout_k * 3 && pad_lo[0] == pad_hi[0]) {
      const int r = conv2d_node(im, v, temporal_weight(im, w), bias, {stride[0], 1}, {pad_lo[0], 0}, {dilation[0], 1}, groups, dt,
                                simplified(im, full));
      return reshape_to(im, r, out);
    }
    const bool bias_in_conv = !taps.empty() && taps[0].count() == *dout_k;
    for (const Tap& t : taps) {
      const std::int64_t start = t.first * stride[0] + t.k * dilation[0] - pad_lo[0];
      const std::int64_t end = start + (t.count() - 1) * stride[0] + 1;
      const int f = start == 0 && end == *d && stride[0] == 1 ? v : slice(im, v, 2, c(start), c(end), stride[0], {n, xs[1], c(t.count()), plane});
      int y = conv2d_node(im, f, weight_tap(im, w, t.k), acc < 0 && bias_in_conv ? bias : std::nullopt, {1, 1}, {0, 0}, {1, 1}, groups,
                          dt, simplified(im, {n, o, c(t.count()), plane}));
      y = pad(im, y, {0, 0, t.first, *dout_k - 1 - t.last}, 0.0);
      acc = acc < 0 ? y : add(im, acc, y);
    }
    if (acc < 0) acc = im.emit(OpKind::Full, {}, {simplified(im, full), 0.0, dt}, dt, simplified(im, full));
    if (bias && !bias_in_conv) acc = im.emit(OpKind::Add, {acc, reshape_to(im, *bias, {o, c(1), c(1)})}, {}, dt, im.shape(acc));
    return reshape_to(im, acc, out);
  }
  // [N, D, C, H, W] (padded along H, W when the padding is asymmetric).
  int v = im.permute(x, {0, 2, 1, 3, 4});
  std::vector<std::int64_t> pad2{pad_lo[1], pad_lo[2]};
  if (pad_lo[1] != pad_hi[1] || pad_lo[2] != pad_hi[2]) {
    v = pad(im, v, {pad_lo[2], pad_hi[2], pad_lo[1], pad_hi[1]}, 0.0);
    pad2 = {0, 0};
  }
  const Shape vs = im.shape(v);
  const Shape out4 = simplified(im, {n * dout, o, hout, wout});
  auto conv = [&](int f, std::int64_t k, const Expr& count, std::optional<int> b) {
    f = reshape_to(im, f, {im.simplify(n * count), vs[2], vs[3], vs[4]});
    return conv2d_node(im, f, weight_tap(im, w, k), b, {stride[1], stride[2]}, pad2, {dilation[1], dilation[2]}, groups, dt,
                       simplified(im, {n * count, o, hout, wout}));
  };
  if (!d || !dout_k) {
    // A symbolic depth: pad it and run every tap over all output frames.
    v = pad(im, v, {0, 0, 0, 0, 0, 0, pad_lo[0], pad_hi[0]}, 0.0);
    const Expr padded = im.shape(v)[1];
    int acc = -1;
    for (std::int64_t k = 0; k < kd; ++k) {
      const Expr start = c(k * dilation[0]);
      const Expr end = im.simplify(start + (dout - c(1)) * c(stride[0]) + c(1));
      int f = v;
      if (!(k == 0 && stride[0] == 1 && im.simplify(end - padded).constant_value() == 0)) {
        f = slice(im, v, 1, start, end, stride[0], {n, dout, vs[2], vs[3], vs[4]});
      }
      const int y = conv(f, k, dout, k == 0 ? bias : std::nullopt);
      acc = acc < 0 ? y : add(im, acc, y);
    }
    return im.permute(reshape_to(im, acc, {n, dout, o, hout, wout}), {0, 2, 1, 3, 4});
  }
  const std::vector<Tap> taps = frame_taps(kd, *d, *dout_k, stride[0], pad_lo[0], dilation[0]);
  const bool bias_in_conv = !taps.empty() && taps[0].count() == *dout_k;
  const Expr plane = im.simplify(o * hout * wout);
  int acc = -1;
  for (const Tap& t : taps) {
    const std::int64_t start = t.first * stride[0] + t.k * dilation[0] - pad_lo[0];
    const std::int64_t end = start + (t.count() - 1) * stride[0] + 1;
    const bool whole = start == 0 && end == *d && stride[0] == 1;
    const int f = whole ? v : slice(im, v, 1, c(start), c(end), stride[0], {n, c(t.count()), vs[2], vs[3], vs[4]});
    int y = conv(f, t.k, c(t.count()), acc < 0 && bias_in_conv ? bias : std::nullopt);
    if (t.count() < *dout_k) {
      y = pad(im, reshape_to(im, y, {n, c(t.count()), plane}), {0, 0, t.first, *dout_k - 1 - t.last}, 0.0);
      y = reshape_to(im, y, out4);
    }
    acc = acc < 0 ? y : add(im, acc, y);
  }
  if (acc < 0) acc = im.emit(OpKind::Full, {}, {out4, 0.0, dt}, dt, out4);
  int r = im.permute(reshape_to(im, acc, {n, dout, o, hout, wout}), {0, 2, 1, 3, 4});
  if (bias && !bias_in_conv) r = im.emit(OpKind::Add, {r, reshape_to(im, *bias, {o, c(1), c(1), c(1)})}, {}, dt, im.shape(r));
  return r;
}

// conv_transpose3d: x [N, C, D, H, W], w [C, O/g, kD, kH, kW]. Output frame t gets
// conv_transpose2d(x[d], w[k]) for every d*stride + k*dilation == t + padding.
int conv_transpose3d(Importer& im, int x, int w, std::optional<int> bias, const std::vector<std::int64_t>& stride,
                     const std::vector<std::int64_t>& padding, const std::vector<std::int64_t>& output_padding,
                     const std::vector<std::int64_t>& dilation, std::int64_t groups, DType dt, const Shape& out) {
  const Shape xs = im.shape(x), ws = im.shape(w);
  if (xs.size() != 5 || ws.size() != 5 || out.size() != 5) im.bad("conv_transpose3d needs [N, C, D, H, W] input and [C, O/g, kD, kH, kW] weight");
  const std::int64_t kd = static_size(im, ws[2], "the kernel size");
  const std::int64_t sd = stride[0], dd = dilation[0];
  const Expr n = xs[0], d = xs[2], o = out[1], dout = out[2], hout = out[3], wout = out[4];
  const Expr frames = im.simplify(n * d);
  const int xf = reshape_to(im, im.permute(x, {0, 2, 1, 3, 4}), {frames, xs[1], xs[3], xs[4]});
  const Expr plane = im.simplify(o * hout * wout);
  // Every tap's frames on a common time axis of D*sd + dd*(kD-1) + output_padding frames
  // (the output before cropping by the padding).
  const Expr spread = im.simplify(d * c(sd));
  int acc = -1;
  for (std::int64_t k = 0; k < kd; ++k) {
    const int wk = weight_tap(im, w, k);
    int y = conv_transpose2d_nodes(im, xf, wk, std::nullopt, {stride[1], stride[2]}, {padding[1], padding[2]},
                                   {output_padding[1], output_padding[2]}, {dilation[1], dilation[2]}, groups, dt,
                                   simplified(im, {frames, o, hout, wout}));
    if (sd > 1) {
      y = reshape_to(im, y, {n, d, c(1), plane});
      y = pad(im, y, {0, 0, 0, sd - 1}, 0.0);  // [N, D, sd, F]: sd - 1 zero frames after each
    }
    y = reshape_to(im, y, {n, spread, plane});
    const std::int64_t lo = k * dd, hi = dd * (kd - 1 - k) + output_padding[0];
    y = pad(im, y, {0, 0, lo, hi}, 0.0);
    acc = acc < 0 ? y : add(im, acc, y);
  }
  int r = slice(im, acc, 1, c(padding[0]), im.simplify(c(padding[0]) + dout), 1, {n, dout, plane});
  r = im.permute(reshape_to(im, r, {n, dout, o, hout, wout}), {0, 2, 1, 3, 4});
  if (bias) r = im.emit(OpKind::Add, {r, reshape_to(im, *bias, {o, c(1), c(1), c(1)})}, {}, dt, im.shape(r));
  return r;
}

// conv_transpose1d through a height-1 conv_transpose2d: x [N, C, L] or [C, L], w [C, O/g, k].
int conv_transpose1d(Importer& im, int x, int w, std::optional<int> bias, const std::vector<std::int64_t>& stride,
                     const std::vector<std::int64_t>& padding, const std::vector<std::int64_t>& output_padding,
                     const std::vector<std::int64_t>& dilation, std::int64_t groups, DType dt, const Shape& out) {
  bool batched = true;
  x = with_batch(im, x, 3, batched, "conv_transpose1d");
  const Shape xs = im.shape(x), ws = im.shape(w);
  const Shape o3 = batched_shape(out, batched);
  if (o3.size() != 3) im.bad("conv_transpose1d output has the wrong rank");
  const int x4 = reshape_to(im, x, {xs[0], xs[1], c(1), xs[2]});
  const int w4 = reshape_to(im, w, {ws[0], ws[1], c(1), ws[2]});
  const int r = conv_transpose2d_nodes(im, x4, w4, bias, {1, stride[0]}, {0, padding[0]}, {0, output_padding[0]}, {1, dilation[0]},
                                       groups, dt, simplified(im, {o3[0], o3[1], c(1), o3[2]}));
  return im.reshape(r, out);
}


// The smallest value of `dt` (max pooling's padding).
double lowest(DType dt) {
  switch (dt) {
    case DType::kF32: case DType::kF64: case DType::kF16: case DType::kBF16: return -HUGE_VAL;
    case DType::kI8: return -128;
    case DType::kI16: return -32768;
    case DType::kI32: return static_cast<double>(std::numeric_limits<std::int32_t>::min());
    case DType::kI64: return static_cast<double>(std::numeric_limits<std::int64_t>::min());
    default: return 0;
  }
}

struct Pool3d {
  std::vector<std::int64_t> kernel, stride, padding, dilation;
  bool ceil = false;
};

Pool3d pool_args(Importer& im, bool max) {
  Pool3d p;
  p.kernel = triple(im, im.int_list(1, "kernel_size"), 1, "kernel_size");
  auto stride = im.int_list(2, "stride", {});
  p.stride = stride.empty() ? p.kernel : triple(im, stride, 1, "stride");
  p.padding = triple(im, im.int_list(3, "padding", {0}), 0, "padding");
  p.dilation = max ? triple(im, im.int_list(4, "dilation", {1}), 1, "dilation") : std::vector<std::int64_t>{1, 1, 1};
  p.ceil = im.bool_arg(max ? 5 : 4, "ceil_mode", false);
  check_window(im, max ? "max_pool3d" : "avg_pool3d", p.kernel, p.stride, p.padding, p.dilation);
  return p;
}

// The window along D of a pool over x [N, C, D, H, W]: the slices of the frames each tap
// reads, padded with `fill` (kd taps of `dout` frames each).
std::vector<int> depth_taps(Importer& im, int x, const Pool3d& p, std::int64_t d, std::int64_t dout, double fill) {
  const std::int64_t need = (dout - 1) * p.stride[0] + p.dilation[0] * (p.kernel[0] - 1) + 1;
  const int v = pad(im, x, {0, 0, 0, 0, p.padding[0], std::max<std::int64_t>(0, need - d - p.padding[0])}, fill);
  Shape s = im.shape(v);
  s[2] = c(dout);
  std::vector<int> taps;
  for (std::int64_t k = 0; k < p.kernel[0]; ++k) {
    const std::int64_t start = k * p.dilation[0];
    const bool whole = start == 0 && p.stride[0] == 1 && im.simplify(im.shape(v)[2]).constant_value() == dout;
    taps.push_back(whole ? v : slice(im, v, 2, c(start), c(start + (dout - 1) * p.stride[0] + 1), p.stride[0], s));
  }
  return taps;
}

// The 2-D pool over (H, W) of x [N, C, D, H, W] on [N, C*D, H, W]; x itself when the pool
// is the identity.
int pool_hw(Importer& im, int x, OpKind op, std::vector<ir::Attr> attrs, bool identity, const Expr& hout, const Expr& wout) {
  if (identity) return x;
  const Shape xs = im.shape(x);
  const Expr planes = im.simplify(xs[1] * xs[2]);
  const int v = reshape_to(im, x, {xs[0], planes, xs[3], xs[4]});
  const int r = im.emit(op, {v}, std::move(attrs), im.dtype(x), simplified(im, {xs[0], planes, hout, wout}));
  return reshape_to(im, r, {xs[0], xs[1], xs[2], hout, wout});
}

void check_indices(Importer& im) {
  if (im.num_outputs() > 1 && im.output_used(1)) im.unsupported("the indices output of 3-D max pooling");
}

void max_pool3d(Importer& im) {
  const DType dt = im.out_dtype();
  bool batched = true;
  const int x = with_batch(im, im.cast(im.tensor(0, "self"), dt), 5, batched, "max_pool3d");
  const Pool3d p = pool_args(im, true);
  const Shape xs = im.shape(x), out = batched_shape(im.out_shape(), batched);
  if (out.size() != 5) im.bad("max_pool3d output has the wrong rank");
  const std::int64_t d = static_size(im, xs[2], "the pooled depth");
  const std::int64_t dout = pooling_output_size(d, p.kernel[0], p.padding[0], p.stride[0], p.dilation[0], p.ceil);
  if (dout < 1) im.bad("max_pool3d window is larger than its padded input");
  if (auto k = im.simplify(out[2]).constant_value(); k && *k != dout) im.bad("max_pool3d output depth does not match its arguments");
  const bool identity_hw = p.kernel[1] == 1 && p.kernel[2] == 1 && p.stride[1] == 1 && p.stride[2] == 1 && p.padding[1] == 0 &&
                           p.padding[2] == 0;
  int v = pool_hw(im, x, OpKind::MaxPool2d,
                  {std::vector<std::int64_t>{p.kernel[1], p.kernel[2]}, std::vector<std::int64_t>{p.stride[1], p.stride[2]},
                   std::vector<std::int64_t>{p.padding[1], p.padding[2]}, std::vector<std::int64_t>{p.dilation[1], p.dilation[2]}, p.ceil},
                  identity_hw, out[3], out[4]);
  const std::vector<int> taps = depth_taps(im, v, p, d, dout, lowest(dt));
  v = taps[0];
  for (std::size_t k = 1; k < taps.size(); ++k) v = im.emit(OpKind::Maximum, {v, taps[k]}, {}, dt, im.shape(v));
  im.define(0, im.reshape(v, im.out_shape()));
  check_indices(im);
}

// PyTorch's average pooling divisor per output index along one dimension: the window
// clipped to the padded input (count_include_pad) or to the input.
std::vector<double> avg_divisors(std::int64_t in, std::int64_t k, std::int64_t pad, std::int64_t stride, std::int64_t out, bool include_pad) {
  std::vector<double> div;
  for (std::int64_t o = 0; o < out; ++o) {
    const std::int64_t start = o * stride - pad, end = std::min(start + k, in + pad);
    const std::int64_t clipped = std::min(end, in) - std::max<std::int64_t>(start, 0);
    div.push_back(static_cast<double>(include_pad ? end - start : clipped));
  }
  return div;
}

// A constant of `dt` with `shape` holding `values` (floating types).
int float_constant(Importer& im, DType dt, std::vector<std::int64_t> shape, const std::vector<double>& values, const std::string& name) {
  const std::size_t es = dtype_size(dt);
  std::vector<std::uint8_t> bytes(values.size() * es);
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (dt == DType::kF64) {
      std::memcpy(bytes.data() + 8 * i, &values[i], 8);
    } else if (dt == DType::kF32) {
      const float f = static_cast<float>(values[i]);
      std::memcpy(bytes.data() + 4 * i, &f, 4);
    } else {
      im.unsupported("3-D average pooling of " + std::string(dtype_name(dt)) + " with a varying divisor");
    }
  }
  return im.constant(dt, std::move(shape), std::move(bytes), name);
}

// x * factor, the factor a scalar when all of `values` are equal, else a constant of `shape`.
int scale_by(Importer& im, int x, const std::vector<double>& values, std::vector<std::int64_t> shape, const char* name) {
  const DType dt = im.dtype(x);
  const bool uniform = std::all_of(values.begin(), values.end(), [&](double v) { return v == values[0]; });
  if (uniform && values[0] == 1.0) return x;
  const int f = uniform ? im.scalar(values[0], dt) : float_constant(im, dt, std::move(shape), values, name);
  return im.emit(OpKind::Mul, {x, f}, {}, dt, im.shape(x));
}

void avg_pool3d(Importer& im) {
  const DType dt = im.out_dtype();
  if (!dtype_is_floating(dt)) im.unsupported("3-D average pooling of integers");
  bool batched = true;
  const int x = with_batch(im, im.cast(im.tensor(0, "self"), dt), 5, batched, "avg_pool3d");
  const Pool3d p = pool_args(im, false);
  const bool include_pad = im.bool_arg(5, "count_include_pad", true);
  const bool has_override = im.has(6, "divisor_override");
  const std::int64_t override_by = has_override ? im.int_arg(6, "divisor_override") : 0;
  if (has_override && override_by == 0) im.bad("divisor_override must not be 0");
  const Shape xs = im.shape(x), out = batched_shape(im.out_shape(), batched);
  if (out.size() != 5) im.bad("avg_pool3d output has the wrong rank");
  const std::int64_t d = static_size(im, xs[2], "the pooled depth");
  const std::int64_t dout = pooling_output_size(d, p.kernel[0], p.padding[0], p.stride[0], 1, p.ceil);
  if (dout < 1) im.bad("avg_pool3d window is larger than its padded input");
  if (auto k = im.simplify(out[2]).constant_value(); k && *k != dout) im.bad("avg_pool3d output depth does not match its arguments");
  const bool identity_hw = p.kernel[1] == 1 && p.kernel[2] == 1 && p.stride[1] == 1 && p.stride[2] == 1 && p.padding[1] == 0 &&
                           p.padding[2] == 0;
  // With divisor_override the 2-D pool divides by its window clipped to the padded input
  // (count_include_pad), which is multiplied back below.
  int v = pool_hw(im, x, OpKind::AvgPool2d,
                  {std::vector<std::int64_t>{p.kernel[1], p.kernel[2]}, std::vector<std::int64_t>{p.stride[1], p.stride[2]},
                   std::vector<std::int64_t>{p.padding[1], p.padding[2]}, p.ceil, has_override || include_pad},
                  identity_hw, out[3], out[4]);
  const std::vector<int> taps = depth_taps(im, v, p, d, dout, 0.0);
  v = taps[0];
  for (std::size_t k = 1; k < taps.size(); ++k) v = add(im, v, taps[k]);
  if (!has_override) {
    std::vector<double> inv;
    for (double q : avg_divisors(d, p.kernel[0], p.padding[0], p.stride[0], dout, include_pad)) inv.push_back(1.0 / q);
    v = scale_by(im, v, inv, {dout, 1, 1}, "avg_pool3d_depth_divisor");
  } else if (identity_hw) {
    v = scale_by(im, v, {1.0 / static_cast<double>(override_by)}, {}, "");
  } else {
    // The 2-D pool's divisors: kH * kW everywhere unless ceil_mode clips the last windows.
    std::vector<double> m;
    if (!p.ceil) {
      m.push_back(static_cast<double>(p.kernel[1] * p.kernel[2]) / static_cast<double>(override_by));
    } else {
      const std::int64_t h = static_size(im, xs[3], "the height with divisor_override and ceil_mode");
      const std::int64_t w = static_size(im, xs[4], "the width with divisor_override and ceil_mode");
      const std::int64_t ho = pooling_output_size(h, p.kernel[1], p.padding[1], p.stride[1], 1, true);
      const std::int64_t wo = pooling_output_size(w, p.kernel[2], p.padding[2], p.stride[2], 1, true);
      const auto dh = avg_divisors(h, p.kernel[1], p.padding[1], p.stride[1], ho, true);
      const auto dw = avg_divisors(w, p.kernel[2], p.padding[2], p.stride[2], wo, true);
      for (double a : dh) for (double b : dw) m.push_back(a * b / static_cast<double>(override_by));
    }
    const std::int64_t hw = static_cast<std::int64_t>(m.size());
    v = scale_by(im, v, m, hw == 1 ? std::vector<std::int64_t>{} : std::vector<std::int64_t>{
                                                                      static_size(im, out[3], "the pooled height"),
                                                                      static_size(im, out[4], "the pooled width")},
                 "avg_pool3d_divisor");
  }
  im.define(0, im.reshape(v, im.out_shape()));
}

// adaptive_{avg,max}_pool3d: the adaptive 2-D pool over (H, W), then PyTorch's adaptive
// windows [floor(i*D/od), ceil((i+1)*D/od)) along D.
void adaptive_pool3d(Importer& im, bool max) {
  const DType dt = im.out_dtype();
  bool batched = true;
  const int x = with_batch(im, max ? im.tensor(0, "self") : im.cast(im.tensor(0, "self"), dt), 5, batched, "adaptive pooling");
  const Shape xs = im.shape(x), out = batched_shape(im.out_shape(), batched);
  if (out.size() != 5) im.bad("3-D adaptive pooling output has the wrong rank");
  const std::int64_t od = static_size(im, out[2], "the adaptive pooling output size");
  const std::int64_t oh = static_size(im, out[3], "the adaptive pooling output size");
  const std::int64_t ow = static_size(im, out[4], "the adaptive pooling output size");
  if (od < 1 || oh < 1 || ow < 1 || od >= 65536) im.bad("3-D adaptive pooling output size must be in [1, 65536)");
  const bool identity_hw = im.simplify(xs[3]).constant_value() == oh && im.simplify(xs[4]).constant_value() == ow;
  int v = pool_hw(im, x, max ? OpKind::AdaptiveMaxPool2d : OpKind::AdaptiveAvgPool2d, {std::vector<std::int64_t>{oh, ow}}, identity_hw,
                  c(oh), c(ow));
  const OpKind reduce = max ? OpKind::Amax : OpKind::Mean;
  const Shape vs = im.shape(v);
  if (od == 1) {
    v = im.emit(reduce, {v}, {std::vector<std::int64_t>{2}, true}, dt, {vs[0], vs[1], c(1), vs[3], vs[4]});
  } else {
    const std::int64_t d = static_size(im, xs[2], "the pooled depth");
    if (d % od == 0) {
      if (d != od) {
        v = reshape_to(im, v, {vs[0], vs[1], c(od), c(d / od), vs[3], vs[4]});
        v = im.emit(reduce, {v}, {std::vector<std::int64_t>{3}, false}, dt, {vs[0], vs[1], c(od), vs[3], vs[4]});
      }
    } else {
      std::vector<int> parts;
      for (std::int64_t i = 0; i < od; ++i) {
        const std::int64_t start = i * d / od, end = ((i + 1) * d + od - 1) / od;
        const int s = slice(im, v, 2, c(start), c(end), 1, {vs[0], vs[1], c(end - start), vs[3], vs[4]});
        parts.push_back(im.emit(reduce, {s}, {std::vector<std::int64_t>{2}, true}, dt, {vs[0], vs[1], c(1), vs[3], vs[4]}));
      }
      v = im.emit(OpKind::Cat, parts, {std::int64_t{2}}, dt, {vs[0], vs[1], c(od), vs[3], vs[4]});
    }
  }
  im.define(0, im.reshape(v, im.out_shape()));
  check_indices(im);
}

// aten.conv3d / conv3d.padding (input, weight, bias, stride, padding, dilation, groups) and
// aten.conv_transpose{1,3}d (input, weight, bias, stride, padding, output_padding, groups,
// dilation).
void conv_op(Importer& im, bool transposed) {
  const DType dt = im.out_dtype();
  const int x = im.cast(im.tensor(0, "input"), dt);
  const int w = im.cast(im.tensor(1, "weight"), dt);
  std::optional<int> bias = im.opt_tensor(2, "bias");
  if (bias) bias = im.cast(*bias, dt);
  const std::vector<std::int64_t> stride = im.int_list(3, "stride", {1});
  const Shape out = im.out_shape();
  if (transposed) {
    im.define(0, convolution_volume(im, x, w, bias, stride, im.int_list(4, "padding", {0}), im.int_list(7, "dilation", {1}), true,
                                    im.int_list(5, "output_padding", {0}), im.int_arg(6, "groups", 1), dt, out));
    return;
  }
  const std::vector<std::int64_t> dilation = im.int_list(5, "dilation", {1});
  const std::int64_t groups = im.int_arg(6, "groups", 1);
  if (im.overload() != "padding") {
    im.define(0, convolution_volume(im, x, w, bias, stride, im.int_list(4, "padding", {0}), dilation, false, {0}, groups, dt, out));
    return;
  }
  // padding="same" / "valid": "same" pads dilation * (k - 1) in total, the odd one at the end.
  const std::string mode = im.string_arg(4, "padding");
  if (mode != "same" && mode != "valid") im.bad("conv3d padding must be 'same' or 'valid'");
  const Shape ws = im.shape(w);
  if (ws.size() != 5) im.bad("conv3d weight must be [O, C/g, kD, kH, kW]");
  const auto dil = triple(im, dilation, 1, "dilation");
  std::vector<std::int64_t> lo(3, 0), hi(3, 0);
  for (std::size_t i = 0; i < 3 && mode == "same"; ++i) {
    const std::int64_t total = dil[i] * (static_size(im, ws[2 + i], "the kernel size") - 1);
    lo[i] = total / 2;
    hi[i] = total - total / 2;
  }
  bool batched = true;
  const int x5 = with_batch(im, x, 5, batched, "conv3d");
  const int r = conv3d(im, x5, w, bias, triple(im, stride, 1, "stride"), lo, hi, dil, groups, dt, batched_shape(out, batched));
  im.define(0, im.reshape(r, out));
}

}  // namespace

int convolution_volume(Importer& im, int x, int w, std::optional<int> bias, std::vector<std::int64_t> stride,
                       std::vector<std::int64_t> padding, std::vector<std::int64_t> dilation, bool transposed,
                       std::vector<std::int64_t> output_padding, std::int64_t groups, DType dt, const Shape& out) {
  const std::int64_t spatial = im.rank(w) - 2;
  if (groups < 1) im.bad("convolution groups must be positive");
  if (spatial == 1) {
    if (!transposed) im.bad("1-D convolution reached the 3-D mapping");
    auto one = [](const std::vector<std::int64_t>& v, std::int64_t fallback) { return std::vector<std::int64_t>{v.empty() ? fallback : v[0]}; };
    if (im.rank(w) != 3) im.bad("conv_transpose1d weight must be [C, O/g, k]");
    check_window(im, "conv_transpose1d", {static_size(im, im.shape(w)[2], "the kernel size")}, one(stride, 1), one(padding, 0), one(dilation, 1));
    return conv_transpose1d(im, x, w, bias, one(stride, 1), one(padding, 0), one(output_padding, 0), one(dilation, 1), groups, dt, out);
  }
  if (spatial != 3) im.unsupported(std::to_string(spatial) + "-D " + (transposed ? "transposed " : "") + "convolution");
  stride = triple(im, stride, 1, "stride");
  padding = triple(im, padding, 0, "padding");
  dilation = triple(im, dilation, 1, "dilation");
  output_padding = triple(im, output_padding, 0, "output_padding");
  {
    std::vector<std::int64_t> kernel;
    const Shape ws = im.shape(w);
    for (std::size_t i = 2; i < ws.size(); ++i) kernel.push_back(static_size(im, ws[i], "the kernel size"));
    check_window(im, transposed ? "conv_transpose3d" : "conv3d", kernel, stride, padding, dilation);
    for (std::int64_t e : output_padding) {
      if (e < 0 || e >= (std::int64_t{1} << 20)) im.bad("conv_transpose3d output_padding " + std::to_string(e) + " is outside [0, 2^20)");
    }
  }
  bool batched = true;
  x = with_batch(im, x, 5, batched, transposed ? "conv_transpose3d" : "conv3d");
  const Shape out5 = batched_shape(out, batched);
  const int r = transposed ? conv_transpose3d(im, x, w, bias, stride, padding, output_padding, dilation, groups, dt, out5)
                           : conv3d(im, x, w, bias, stride, padding, padding, dilation, groups, dt, out5);
  return im.reshape(r, out);
}

void register_volume(HandlerTable& t) {
  t["aten.conv3d"] = [](Importer& im) { conv_op(im, false); };
  t["aten.conv_transpose1d"] = [](Importer& im) { conv_op(im, true); };
  t["aten.conv_transpose3d"] = [](Importer& im) { conv_op(im, true); };
  t["aten.max_pool3d"] = max_pool3d;
  t["aten.max_pool3d_with_indices"] = max_pool3d;
  t["aten.avg_pool3d"] = avg_pool3d;
  t["aten.adaptive_avg_pool3d"] = [](Importer& im) { adaptive_pool3d(im, false); };
  t["aten._adaptive_avg_pool3d"] = [](Importer& im) { adaptive_pool3d(im, false); };
  t["aten.adaptive_max_pool3d"] = [](Importer& im) { adaptive_pool3d(im, true); };
}

}  // namespace kiln::pt2

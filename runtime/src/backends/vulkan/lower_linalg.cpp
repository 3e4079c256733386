// Linear algebra lowerings: matmul / linear / bmm (matmul.comp, a tiled GEMM), conv2d
// (conv2d_gemm.comp, an implicit GEMM, or conv2d.comp for thin groups), and 2-D pooling
// (pool.comp).
#include "backends/cpu/kernels/common.h"
#include "backends/cpu/kernels/window.h"
#include "backends/vulkan/lowerer.h"
#include "kernel/attrs.h"

namespace kiln::vulkan {

using backend::SegmentTensor;
using cpu::kernels::read_pair;
using cpu::kernels::window_output_size;

// One tiled GEMM (several dispatches when the batch exceeds the z grid limit).
struct Lowerer::Gemm {
  std::int64_t m = 0, n = 0, k = 0;
  bool trans_b = false;
  std::int64_t batch = 1;
  Shape batch_dims, a_strides, b_strides;
};

Status Lowerer::linear_shape(Gemm& g, Shape& expect) const {
  const Shape& a = in(0)->shape;
  const Shape& b = in(1)->shape;
  if (a.empty() || b.size() != 2 || a.back() != b[1]) {
    return invalid("x.shape=", shape_text(a), " and weight.shape=", shape_text(b), " do not match");
  }
  g.k = a.back();
  g.n = b[0];
  g.m = numel(a) / std::max<std::int64_t>(g.k, 1);
  if (g.k == 0) g.m = numel(Shape(a.begin(), a.end() - 1));
  g.trans_b = true;
  expect = a;
  expect.back() = g.n;
  const SegmentTensor* bias = in(2);
  if (bias != nullptr && bias->shape != Shape{g.n}) return invalid("bias.shape=", shape_text(bias->shape), " != [", g.n, "]");
  return Status::Ok();
}

Status Lowerer::bmm_shape(Gemm& g, Shape& expect) const {
  const Shape& a = in(0)->shape;
  const Shape& b = in(1)->shape;
  if (a.size() != 3 || b.size() != 3 || a[0] != b[0] || a[2] != b[1]) {
    return invalid("a.shape=", shape_text(a), " and b.shape=", shape_text(b), " do not match for bmm");
  }
  g.m = a[1];
  g.k = a[2];
  g.n = b[2];
  g.batch = a[0];
  g.batch_dims = {a[0]};
  g.a_strides = {g.m * g.k};
  g.b_strides = {g.k * g.n};
  expect = {a[0], g.m, g.n};
  return Status::Ok();
}

// numpy matmul: 1-D operands promoted, batch dims broadcast.
Status Lowerer::matmul_shape(Gemm& g, Shape& expect) const {
  const Shape& a = in(0)->shape;
  const Shape& b = in(1)->shape;
  if (a.empty() || b.empty()) return invalid("operands must be at least 1-D");
  const bool a1 = a.size() == 1, b1 = b.size() == 1;
  const Shape am = a1 ? Shape{1, a[0]} : a;
  const Shape bm = b1 ? Shape{b[0], 1} : b;
  g.m = am[am.size() - 2];
  g.k = am.back();
  g.n = bm.back();
  if (bm[bm.size() - 2] != g.k) return invalid("a.shape=", shape_text(a), " and b.shape=", shape_text(b), " do not match");
  const Shape ab(am.begin(), am.end() - 2), bb(bm.begin(), bm.end() - 2);
  const std::size_t r = std::max(ab.size(), bb.size());
  Shape batch(r, 1), sa(r, 0), sb(r, 0);
  std::int64_t stride_a = g.m * g.k, stride_b = g.k * g.n;
  for (int i = static_cast<int>(r) - 1; i >= 0; --i) {
    const int ia = i - static_cast<int>(r - ab.size()), ib = i - static_cast<int>(r - bb.size());
    const std::int64_t da = ia >= 0 ? ab[ia] : 1, db = ib >= 0 ? bb[ib] : 1;
    if (da != db && da != 1 && db != 1) return invalid("batch dims of ", shape_text(a), " and ", shape_text(b), " do not broadcast");
    batch[i] = da == 1 ? db : da;
    sa[i] = da == 1 ? 0 : stride_a;
    sb[i] = db == 1 ? 0 : stride_b;
    stride_a *= da;
    stride_b *= db;
  }
  expect = batch;
  if (!a1) expect.push_back(g.m);
  if (!b1) expect.push_back(g.n);
  g.batch = numel(batch);
  std::vector<Shape> strides{sa, sb};
  Shape bd = batch;
  coalesce(bd, strides);
  if (bd.size() > MATMUL_MAX_BATCH_DIMS) {
    return unsupported("matmul with more than ", MATMUL_MAX_BATCH_DIMS, " non-mergeable batch dims");
  }
  g.batch_dims = bd;
  g.a_strides = strides[0];
  g.b_strides = strides[1];
  return Status::Ok();
}

Status Lowerer::matmul() {
  const bool linear = node_->op == OpKind::Linear;
  KILN_RETURN_IF_ERROR(expect_inputs(2, linear ? 3 : 2));
  Gemm g;
  Shape expect;
  if (linear) KILN_RETURN_IF_ERROR(linear_shape(g, expect));
  else if (node_->op == OpKind::Bmm) KILN_RETURN_IF_ERROR(bmm_shape(g, expect));
  else KILN_RETURN_IF_ERROR(matmul_shape(g, expect));
  if (out().shape != expect) return invalid("out.shape=", shape_text(out().shape), " != expected ", shape_text(expect));
  if (g.m * g.n * g.batch == 0) return Status::Ok();
  const bool bias = linear && in(2) != nullptr;
  const bool big = g.m >= 128 && g.n >= 128;
  const std::int64_t tile = big ? 64 : 32;
  const std::int64_t zmax = std::max<std::uint32_t>(1, limits_.maxComputeWorkGroupCount[2]);
  for (std::int64_t z0 = 0; z0 < g.batch; z0 += zmax) {
    Dispatch& d = add(big ? "matmul_f32_t64" : "matmul_f32_t32", {in_id(0), in_id(1)}, {out_id()});
    if (bias) d.reads.push_back(in_id(2));
    put(d, PC_MATMUL_M, g.m);
    put(d, PC_MATMUL_N, g.n);
    put(d, PC_MATMUL_K, g.k);
    put(d, PC_MATMUL_TRANS_B, g.trans_b ? 1 : 0);
    put(d, PC_MATMUL_HAS_BIAS, bias ? 1 : 0);
    put(d, PC_MATMUL_BATCH_RANK, static_cast<std::int64_t>(g.batch_dims.size()));
    for (std::size_t i = 0; i < g.batch_dims.size(); ++i) {
      put(d, PC_MATMUL_BATCH_DIMS + i, g.batch_dims[i]);
      put(d, PC_MATMUL_A_BATCH_STRIDES + i, g.a_strides[i]);
      put(d, PC_MATMUL_B_BATCH_STRIDES + i, g.b_strides[i]);
    }
    put(d, PC_MATMUL_Z_OFFSET, z0);
    d.bindings[0] = T(in_id(0));
    d.bindings[1] = T(in_id(1));
    d.bindings[2] = T(out_id());
    if (bias) d.bindings[3] = T(in_id(2));
    d.groups[0] = static_cast<std::uint32_t>((g.n + tile - 1) / tile);
    d.groups[1] = static_cast<std::uint32_t>((g.m + tile - 1) / tile);
    d.groups[2] = static_cast<std::uint32_t>(std::min(zmax, g.batch - z0));
    if (d.groups[0] > limits_.maxComputeWorkGroupCount[0] || d.groups[1] > limits_.maxComputeWorkGroupCount[1]) {
      return unsupported("matrix too large for the dispatch grid");
    }
  }
  return Status::Ok();
}

// A checked conv2d: x as [N, C, H, W], w [O, C/groups, KH, KW].
struct Lowerer::Conv {
  Shape x, w;
  std::array<std::int64_t, 2> stride{}, pad{}, dil{};
  std::int64_t groups = 1, oh = 0, ow = 0;
  bool bias = false;
};

Status Lowerer::conv2d() {
  KILN_RETURN_IF_ERROR(expect_inputs(2, 3));
  const std::string_view name = "conv2d";
  Conv c;
  KILN_RETURN_IF_ERROR(read_pair(name, attrs_, 0, "stride", 1, c.stride));
  KILN_RETURN_IF_ERROR(read_pair(name, attrs_, 1, "padding", 0, c.pad));
  KILN_RETURN_IF_ERROR(read_pair(name, attrs_, 2, "dilation", 1, c.dil));
  KILN_ASSIGN_OR_RETURN(c.groups, attr_int(name, attrs_, 3, "groups"));
  c.x = in(0)->shape;
  if (c.x.size() == 3) c.x.insert(c.x.begin(), 1);
  c.w = in(1)->shape;
  const Shape& x = c.x;
  const Shape& w = c.w;
  if (x.size() != 4 || w.size() != 4) return invalid("x.shape=", shape_text(in(0)->shape), " weight.shape=", shape_text(w));
  if (c.groups < 1 || x[1] % c.groups != 0 || w[0] % c.groups != 0 || w[1] != x[1] / c.groups) {
    return invalid("groups=", c.groups, " does not fit x.shape=", shape_text(x), " weight.shape=", shape_text(w));
  }
  KILN_RETURN_IF_ERROR(window_output_size(name, "height", x[2], w[2], c.stride[0], c.pad[0], c.dil[0], false, c.oh));
  KILN_RETURN_IF_ERROR(window_output_size(name, "width", x[3], w[3], c.stride[1], c.pad[1], c.dil[1], false, c.ow));
  Shape expect = {x[0], w[0], c.oh, c.ow};
  if (in(0)->shape.size() == 3) expect.erase(expect.begin());
  if (out().shape != expect) return invalid("out.shape=", shape_text(out().shape), " != expected ", shape_text(expect));
  const SegmentTensor* bias = in(2);
  if (bias != nullptr && bias->shape != Shape{w[0]}) return invalid("bias.shape=", shape_text(bias->shape));
  c.bias = bias != nullptr;
  if (numel(expect) == 0) return Status::Ok();
  const std::int64_t kdim = x[1] / c.groups * w[2] * w[3];
  if (kdim >= 16 && w[0] / c.groups >= 8) return conv2d_gemm(c);
  conv2d_direct(c);
  return Status::Ok();
}

// Implicit GEMM per group: tiles of output channels x output pixels through shared memory.
Status Lowerer::conv2d_gemm(const Conv& c) {
  const Shape& x = c.x;
  const Shape& w = c.w;
  const std::int64_t opg = w[0] / c.groups, kdim = x[1] / c.groups * w[2] * w[3];
  const std::int64_t cols = x[0] * c.oh * c.ow;
  const bool big = opg >= 64 && cols >= 64;
  const std::int64_t tile = big ? 64 : 32;
  Dispatch& d = add(big ? "conv2d_gemm_f32_t64" : "conv2d_gemm_f32_t32", {in_id(0), in_id(1)}, {out_id()});
  if (c.bias) d.reads.push_back(in_id(2));
  put(d, PC_CONVGEMM_OPG, opg);
  put(d, PC_CONVGEMM_COLS, cols);
  put(d, PC_CONVGEMM_K, kdim);
  put(d, PC_CONVGEMM_HAS_BIAS, c.bias ? 1 : 0);
  put(d, PC_CONVGEMM_C, x[1]);
  put(d, PC_CONVGEMM_H, x[2]);
  put(d, PC_CONVGEMM_W, x[3]);
  put(d, PC_CONVGEMM_OH, c.oh);
  put(d, PC_CONVGEMM_OW, c.ow);
  put(d, PC_CONVGEMM_KH, w[2]);
  put(d, PC_CONVGEMM_KW, w[3]);
  put(d, PC_CONVGEMM_STRIDE_H, c.stride[0]);
  put(d, PC_CONVGEMM_STRIDE_W, c.stride[1]);
  put(d, PC_CONVGEMM_PAD_H, c.pad[0]);
  put(d, PC_CONVGEMM_PAD_W, c.pad[1]);
  put(d, PC_CONVGEMM_DIL_H, c.dil[0]);
  put(d, PC_CONVGEMM_DIL_W, c.dil[1]);
  put(d, PC_CONVGEMM_O, w[0]);
  d.bindings[0] = T(in_id(0));
  d.bindings[1] = T(in_id(1));
  d.bindings[2] = T(out_id());
  if (c.bias) d.bindings[3] = T(in_id(2));
  d.groups[0] = static_cast<std::uint32_t>((cols + tile - 1) / tile);
  d.groups[1] = static_cast<std::uint32_t>((opg + tile - 1) / tile);
  d.groups[2] = static_cast<std::uint32_t>(c.groups);
  if (d.groups[0] > limits_.maxComputeWorkGroupCount[0] || d.groups[1] > limits_.maxComputeWorkGroupCount[1] ||
      d.groups[2] > limits_.maxComputeWorkGroupCount[2]) {
    return unsupported("convolution too large for the dispatch grid");
  }
  return Status::Ok();
}

// Direct convolution (depthwise and other thin groups): one invocation per output.
void Lowerer::conv2d_direct(const Conv& c) {
  const Shape& x = c.x;
  const Shape& w = c.w;
  const std::int64_t n = x[0] * w[0] * c.oh * c.ow;
  Dispatch& d = add("conv2d_f32", {in_id(0), in_id(1)}, {out_id()});
  if (c.bias) d.reads.push_back(in_id(2));
  put(d, PC_CONV2D_N, n);
  put(d, PC_CONV2D_C, x[1]);
  put(d, PC_CONV2D_H, x[2]);
  put(d, PC_CONV2D_W, x[3]);
  put(d, PC_CONV2D_O, w[0]);
  put(d, PC_CONV2D_OH, c.oh);
  put(d, PC_CONV2D_OW, c.ow);
  put(d, PC_CONV2D_KH, w[2]);
  put(d, PC_CONV2D_KW, w[3]);
  put(d, PC_CONV2D_STRIDE_H, c.stride[0]);
  put(d, PC_CONV2D_STRIDE_W, c.stride[1]);
  put(d, PC_CONV2D_PAD_H, c.pad[0]);
  put(d, PC_CONV2D_PAD_W, c.pad[1]);
  put(d, PC_CONV2D_DIL_H, c.dil[0]);
  put(d, PC_CONV2D_DIL_W, c.dil[1]);
  put(d, PC_CONV2D_GROUPS, c.groups);
  put(d, PC_CONV2D_HAS_BIAS, c.bias ? 1 : 0);
  d.bindings[0] = T(in_id(0));
  d.bindings[1] = T(in_id(1));
  d.bindings[2] = T(out_id());
  if (c.bias) d.bindings[3] = T(in_id(2));
  grid_1d(d, n, 256);
}

// The window of max_pool2d / avg_pool2d from the attributes, and the output size.
Status Lowerer::pool_window(std::array<std::int64_t, 2>& k, std::array<std::int64_t, 2>& s,
                            std::array<std::int64_t, 2>& p, std::array<std::int64_t, 2>& dil, bool& include_pad,
                            std::int64_t& oh, std::int64_t& ow) const {
  const std::string_view name = op();
  const Shape& xs = in(0)->shape;
  const std::int64_t H = xs[xs.size() - 2], W = xs.back();
  const bool is_max = node_->op == OpKind::MaxPool2d;
  KILN_RETURN_IF_ERROR(read_pair(name, attrs_, 0, "kernel", 1, k));
  KILN_RETURN_IF_ERROR(read_pair(name, attrs_, 1, "stride", 1, s, &k));
  KILN_RETURN_IF_ERROR(read_pair(name, attrs_, 2, "padding", 0, p));
  if (is_max) KILN_RETURN_IF_ERROR(read_pair(name, attrs_, 3, "dilation", 1, dil));
  KILN_ASSIGN_OR_RETURN(bool ceil_mode, attr_bool(name, attrs_, is_max ? 4 : 3, "ceil_mode"));
  if (!is_max) {
    KILN_ASSIGN_OR_RETURN(include_pad, attr_bool(name, attrs_, 4, "count_include_pad"));
  }
  for (int i = 0; i < 2; ++i) {
    if (p[i] * 2 > k[i]) return invalid("padding[", i, "]=", p[i], " exceeds half of kernel[", i, "]=", k[i]);
  }
  KILN_RETURN_IF_ERROR(window_output_size(name, "height", H, k[0], s[0], p[0], dil[0], ceil_mode, oh));
  return window_output_size(name, "width", W, k[1], s[1], p[1], dil[1], ceil_mode, ow);
}

Status Lowerer::pool() {
  KILN_RETURN_IF_ERROR(expect_inputs(1, 1));
  const Shape& xs = in(0)->shape;
  if (xs.size() != 3 && xs.size() != 4) return invalid("x must be 3-D or 4-D, got ", shape_text(xs));
  const std::int64_t H = xs[xs.size() - 2], W = xs.back();
  std::array<std::int64_t, 2> k{1, 1}, s{1, 1}, p{0, 0}, dil{1, 1};
  std::int64_t oh = 0, ow = 0;
  int mode = 0;
  bool include_pad = false;
  if (node_->op == OpKind::MaxPool2d || node_->op == OpKind::AvgPool2d) {
    mode = node_->op == OpKind::MaxPool2d ? POOL_MAX : POOL_AVG;
    KILN_RETURN_IF_ERROR(pool_window(k, s, p, dil, include_pad, oh, ow));
  } else {
    mode = node_->op == OpKind::AdaptiveAvgPool2d ? POOL_ADAPTIVE_AVG : POOL_ADAPTIVE_MAX;
    std::array<std::int64_t, 2> size{};
    KILN_RETURN_IF_ERROR(read_pair(op(), attrs_, 0, "output_size", 0, size));
    oh = size[0];
    ow = size[1];
    if ((H == 0 && oh > 0) || (W == 0 && ow > 0)) return invalid("cannot pool an empty spatial dim");
  }
  Shape expect = xs;
  expect[expect.size() - 2] = oh;
  expect.back() = ow;
  if (out().shape != expect) return invalid("out.shape=", shape_text(out().shape), " != expected ", shape_text(expect));
  const std::int64_t n = numel(expect);
  if (n == 0) return Status::Ok();
  Dispatch& d = add("pool_f32", {in_id(0)}, {out_id()});
  put(d, PC_POOL_N, n);
  put(d, PC_POOL_H, H);
  put(d, PC_POOL_W, W);
  put(d, PC_POOL_OH, oh);
  put(d, PC_POOL_OW, ow);
  put(d, PC_POOL_KH, k[0]);
  put(d, PC_POOL_KW, k[1]);
  put(d, PC_POOL_STRIDE_H, s[0]);
  put(d, PC_POOL_STRIDE_W, s[1]);
  put(d, PC_POOL_PAD_H, p[0]);
  put(d, PC_POOL_PAD_W, p[1]);
  put(d, PC_POOL_DIL_H, dil[0]);
  put(d, PC_POOL_DIL_W, dil[1]);
  put(d, PC_POOL_MODE, mode);
  put(d, PC_POOL_COUNT_INCLUDE_PAD, include_pad ? 1 : 0);
  d.bindings[0] = T(in_id(0));
  d.bindings[1] = T(out_id());
  grid_1d(d, n, 256);
  return Status::Ok();
}

}  // namespace kiln::vulkan

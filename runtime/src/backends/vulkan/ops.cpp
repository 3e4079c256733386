// Node -> dispatch lowering for the Vulkan backend. Each op's semantics follow the CPU
// kernel of the same name (backends/cpu/kernels/*.cpp); the comments at the top of each
// shader give its push-constant layout.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <string>

#include "backends/cpu/kernels/common.h"
#include "backends/cpu/kernels/window.h"
#include "backends/vulkan/lowering.h"

namespace kiln::vulkan {
namespace {

using backend::SegmentDesc;
using backend::SegmentNode;
using backend::SegmentTensor;
using cpu::AttrValue;
using cpu::kernels::attr_bool;
using cpu::kernels::attr_dtype;
using cpu::kernels::attr_float;
using cpu::kernels::attr_int;
using cpu::kernels::attr_ints;
using cpu::kernels::attr_optional_float;
using cpu::kernels::attr_string;
using Attrs = std::span<const AttrValue>;
using Shape = std::vector<std::int64_t>;

constexpr int kMaxDims = 6;

std::int32_t fbits(float f) {
  std::int32_t r;
  std::memcpy(&r, &f, 4);
  return r;
}

std::int64_t numel(const Shape& s) {
  std::int64_t n = 1;
  for (std::int64_t d : s) n *= d;
  return n;
}

Shape contiguous(const Shape& s) {
  Shape st(s.size(), 1);
  for (int d = static_cast<int>(s.size()) - 2; d >= 0; --d) st[d] = st[d + 1] * s[d + 1];
  return st;
}

std::string shape_text(const Shape& s) {
  std::string r = "[";
  for (std::size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

// Merges adjacent dims that every operand walks contiguously and drops size-1 dims, so that
// up to 6 dims reach the shader. strides[k] are per-operand strides over `shape`.
bool coalesce(Shape& shape, std::vector<Shape>& strides) {
  Shape s;
  std::vector<Shape> st(strides.size());
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    bool merge = !s.empty();
    for (std::size_t k = 0; merge && k < strides.size(); ++k) merge = st[k].back() == strides[k][d] * shape[d];
    if (merge) {
      s.back() *= shape[d];
      for (std::size_t k = 0; k < strides.size(); ++k) st[k].back() = strides[k][d];
    } else {
      s.push_back(shape[d]);
      for (std::size_t k = 0; k < strides.size(); ++k) st[k].push_back(strides[k][d]);
    }
  }
  shape = std::move(s);
  strides = std::move(st);
  return shape.size() <= kMaxDims;
}

// Strides that broadcast `in` (right-aligned) to `out`; false when not broadcastable.
bool broadcast_strides(const Shape& in, const Shape& out, Shape& strides) {
  if (in.size() > out.size()) return false;
  const Shape cs = contiguous(in);
  strides.assign(out.size(), 0);
  const std::size_t lead = out.size() - in.size();
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (in[i] == out[lead + i]) strides[lead + i] = in[i] == 1 ? 0 : cs[i];
    else if (in[i] == 1) strides[lead + i] = 0;
    else return false;
  }
  return true;
}

void grid_1d(Dispatch& d, std::int64_t items, std::int64_t per_group) {
  const std::int64_t groups = std::max<std::int64_t>(1, (items + per_group - 1) / per_group);
  const std::int64_t gx = std::min<std::int64_t>(groups, 65535);
  d.groups[0] = static_cast<std::uint32_t>(gx);
  d.groups[1] = static_cast<std::uint32_t>((groups + gx - 1) / gx);
  d.groups[2] = 1;
}

class Lowerer {
 public:
  Lowerer(const SegmentDesc& desc, const VkPhysicalDeviceLimits& limits, LoweredSegment& out)
      : desc_(desc), limits_(limits), out_(out) {}

  Status node(const SegmentNode& n);

 private:
  const SegmentTensor* in(std::size_t i) const {
    if (i >= node_->inputs.size() || node_->inputs[i] == backend::kAbsentTensor) return nullptr;
    return &desc_.tensors[node_->inputs[i]];
  }
  std::uint32_t in_id(std::size_t i) const { return node_->inputs[i]; }
  const SegmentTensor& out(std::size_t i = 0) const { return desc_.tensors[node_->outputs[i]]; }
  std::uint32_t out_id(std::size_t i = 0) const { return node_->outputs[i]; }
  std::string_view op() const { return op_name(node_->op); }

  template <typename... Args>
  Status invalid(const Args&... args) const {
    std::string m = "[" + std::string(op()) + "] ";
    ((m += to_str(args)), ...);
    return Status(StatusCode::kInvalidBundle, m);
  }
  template <typename... Args>
  Status unsupported(const Args&... args) const {
    std::string m = "[" + std::string(op()) + "] Vulkan: ";
    ((m += to_str(args)), ...);
    return Status(StatusCode::kUnsupported, m);
  }
  static std::string to_str(const std::string& s) { return s; }
  static std::string to_str(std::string_view s) { return std::string(s); }
  static std::string to_str(const char* s) { return s; }
  template <typename T>
  static std::string to_str(T v) { return std::to_string(v); }

  Dispatch& add(std::string_view variant, std::initializer_list<std::uint32_t> reads,
                std::initializer_list<std::uint32_t> writes) {
    Dispatch& d = out_.dispatches.emplace_back();
    d.variant = variant;
    d.reads = reads;
    d.writes = writes;
    return d;
  }
  static BindingRef T(std::uint32_t id) { return {BindingRef::kTensor, id}; }

  Status expect_inputs(std::size_t lo, std::size_t hi) const {
    if (node_->inputs.size() < lo || node_->inputs.size() > hi || node_->outputs.empty()) {
      return invalid("has ", node_->inputs.size(), " inputs and ", node_->outputs.size(), " outputs");
    }
    for (std::size_t i = 0; i < lo; ++i) {
      if (in(i) == nullptr) return invalid("input ", i, " is absent");
    }
    return Status::Ok();
  }

  // Lowering helpers.
  void copy(std::uint32_t src, std::uint32_t dst, Shape shape, Shape in_strides, Shape out_strides,
            std::int64_t in_off, std::int64_t out_off, Status& st);
  void fill(std::uint32_t dst, std::int64_t n, std::int32_t bits);
  Status elementwise_unary(int code, float alpha = 0, float beta = 0);
  Status binary(std::string_view variant, int code);
  Status where(std::uint32_t cond, std::uint32_t a, std::uint32_t b, const Shape* a_override);
  Status matmul();
  Status linear();
  Status conv2d();
  Status pool();
  Status reduce(int code);
  Status arg_reduce(bool is_max);
  Status cumsum();
  Status softmax(bool log);
  Status layer_norm();
  Status batch_norm();
  Status indexing();
  Status advanced_index();
  Status movement();
  Status creation();
  Status cast();

  const SegmentDesc& desc_;
  const VkPhysicalDeviceLimits& limits_;
  LoweredSegment& out_;
  const SegmentNode* node_ = nullptr;
  Attrs attrs_;
};

void Lowerer::copy(std::uint32_t src, std::uint32_t dst, Shape shape, Shape in_strides, Shape out_strides,
                   std::int64_t in_off, std::int64_t out_off, Status& st) {
  const std::int64_t n = numel(shape);
  if (n == 0) return;
  std::vector<Shape> strides{std::move(in_strides), std::move(out_strides)};
  if (!coalesce(shape, strides)) {
    st = unsupported("a copy over ", shape.size(), " non-mergeable dims (at most ", kMaxDims, ")");
    return;
  }
  Dispatch& d = add("copy_x32", {src}, {dst});
  d.push[0] = static_cast<std::int32_t>(n);
  d.push[1] = static_cast<std::int32_t>(shape.size());
  for (std::size_t i = 0; i < shape.size(); ++i) {
    d.push[2 + i] = static_cast<std::int32_t>(shape[i]);
    d.push[8 + i] = static_cast<std::int32_t>(strides[0][i]);
    d.push[14 + i] = static_cast<std::int32_t>(strides[1][i]);
  }
  d.push[20] = static_cast<std::int32_t>(in_off);
  d.push[21] = static_cast<std::int32_t>(out_off);
  d.bindings[0] = T(src);
  d.bindings[1] = T(dst);
  grid_1d(d, n, 256);
}

void Lowerer::fill(std::uint32_t dst, std::int64_t n, std::int32_t bits) {
  if (n == 0) return;
  Dispatch& d = add("fill_x32", {}, {dst});
  d.push[0] = static_cast<std::int32_t>(n);
  d.push[1] = bits;
  d.push[2] = 0;
  d.bindings[0] = T(dst);
  grid_1d(d, n, 256);
}

Status Lowerer::elementwise_unary(int code, float alpha, float beta) {
  KILN_RETURN_IF_ERROR(expect_inputs(1, 1));
  if (in(0)->shape != out().shape) return invalid("x.shape=", shape_text(in(0)->shape), " != out.shape=", shape_text(out().shape));
  const std::int64_t n = numel(out().shape);
  if (n == 0) return Status::Ok();
  Dispatch& d = add("unary_f32", {in_id(0)}, {out_id()});
  d.push[0] = static_cast<std::int32_t>(n);
  d.push[1] = code;
  d.push[2] = fbits(alpha);
  d.push[3] = fbits(beta);
  d.bindings[0] = T(in_id(0));
  d.bindings[1] = T(out_id());
  grid_1d(d, n, 256);
  return Status::Ok();
}

Status Lowerer::binary(std::string_view variant, int code) {
  KILN_RETURN_IF_ERROR(expect_inputs(2, 2));
  const Shape& os = out().shape;
  Shape sa, sb;
  // out.shape must be the broadcast of a and b.
  const std::size_t r = std::max(in(0)->shape.size(), in(1)->shape.size());
  Shape expect(r, 1);
  for (std::size_t i = 0; i < r; ++i) {
    const Shape& a = in(0)->shape;
    const Shape& b = in(1)->shape;
    const std::int64_t da = i + a.size() >= r ? a[i + a.size() - r] : 1;
    const std::int64_t db = i + b.size() >= r ? b[i + b.size() - r] : 1;
    if (da != db && da != 1 && db != 1) {
      return invalid("a.shape=", shape_text(a), " and b.shape=", shape_text(b), " do not broadcast");
    }
    expect[i] = da == 1 ? db : da;
  }
  if (expect != os) return invalid("out.shape=", shape_text(os), " is not the broadcast shape ", shape_text(expect));
  const std::int64_t n = numel(os);
  if (n == 0) return Status::Ok();
  broadcast_strides(in(0)->shape, os, sa);
  broadcast_strides(in(1)->shape, os, sb);
  Shape shape = os;
  std::vector<Shape> strides{sa, sb, contiguous(os)};
  if (!coalesce(shape, strides)) return unsupported("broadcast over more than ", kMaxDims, " dims");
  Dispatch& d = add(variant, {in_id(0), in_id(1)}, {out_id()});
  d.push[0] = static_cast<std::int32_t>(n);
  d.push[1] = code;
  d.push[2] = static_cast<std::int32_t>(shape.size());
  for (std::size_t i = 0; i < shape.size(); ++i) {
    d.push[3 + i] = static_cast<std::int32_t>(shape[i]);
    d.push[9 + i] = static_cast<std::int32_t>(strides[0][i]);
    d.push[15 + i] = static_cast<std::int32_t>(strides[1][i]);
  }
  d.push[21] = (in(0)->shape == os && in(1)->shape == os) ? 1 : 0;
  d.bindings[0] = T(in_id(0));
  d.bindings[1] = T(in_id(1));
  d.bindings[2] = T(out_id());
  grid_1d(d, n, 256);
  return Status::Ok();
}

// out = cond ? a : b. `a_scalar`: a has one element, broadcast everywhere (masked_fill).
Status Lowerer::where(std::uint32_t cond, std::uint32_t a, std::uint32_t b, const Shape* a_override) {
  const Shape& os = out().shape;
  Shape sc, sa, sb;
  const Shape& ashape = a_override != nullptr ? *a_override : desc_.tensors[a].shape;
  if (!broadcast_strides(desc_.tensors[cond].shape, os, sc) || !broadcast_strides(ashape, os, sa) ||
      !broadcast_strides(desc_.tensors[b].shape, os, sb)) {
    return invalid("operands do not broadcast to out.shape=", shape_text(os));
  }
  if (a_override != nullptr) std::fill(sa.begin(), sa.end(), 0);
  const std::int64_t n = numel(os);
  if (n == 0) return Status::Ok();
  Shape shape = os;
  std::vector<Shape> strides{sc, sa, sb, contiguous(os)};
  if (!coalesce(shape, strides)) return unsupported("broadcast over more than ", kMaxDims, " dims");
  Dispatch& d = add("where_x32", {cond, a, b}, {out_id()});
  d.push[0] = static_cast<std::int32_t>(n);
  d.push[1] = static_cast<std::int32_t>(shape.size());
  for (std::size_t i = 0; i < shape.size(); ++i) {
    d.push[2 + i] = static_cast<std::int32_t>(shape[i]);
    d.push[8 + i] = static_cast<std::int32_t>(strides[0][i]);
    d.push[14 + i] = static_cast<std::int32_t>(strides[1][i]);
    d.push[20 + i] = static_cast<std::int32_t>(strides[2][i]);
  }
  d.bindings[0] = T(cond);
  d.bindings[1] = T(a);
  d.bindings[2] = T(b);
  d.bindings[3] = T(out_id());
  grid_1d(d, n, 256);
  return Status::Ok();
}

// One tiled GEMM dispatch (or several when the batch exceeds the z grid limit).
struct Gemm {
  std::int64_t m = 0, n = 0, k = 0;
  bool trans_b = false;
  std::int64_t batch = 1;
  Shape batch_dims, a_strides, b_strides;
};

Status Lowerer::matmul() {
  KILN_RETURN_IF_ERROR(expect_inputs(2, node_->op == OpKind::Linear ? 3 : 2));
  const Shape& a = in(0)->shape;
  const Shape& b = in(1)->shape;
  const SegmentTensor* bias = node_->op == OpKind::Linear ? in(2) : nullptr;
  Gemm g;
  Shape expect;
  if (node_->op == OpKind::Linear) {
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
    if (bias != nullptr && bias->shape != Shape{g.n}) return invalid("bias.shape=", shape_text(bias->shape), " != [", g.n, "]");
  } else if (node_->op == OpKind::Bmm) {
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
  } else {  // numpy matmul
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
    if (bd.size() > 4) return unsupported("matmul with more than 4 non-mergeable batch dims");
    g.batch_dims = bd;
    g.a_strides = strides[0];
    g.b_strides = strides[1];
  }
  if (out().shape != expect) return invalid("out.shape=", shape_text(out().shape), " != expected ", shape_text(expect));
  if (g.m * g.n * g.batch == 0) return Status::Ok();
  const bool big = g.m >= 128 && g.n >= 128;
  const std::int64_t tile = big ? 64 : 32;
  const std::int64_t zmax = std::max<std::uint32_t>(1, limits_.maxComputeWorkGroupCount[2]);
  for (std::int64_t z0 = 0; z0 < g.batch; z0 += zmax) {
    std::initializer_list<std::uint32_t> reads = {in_id(0), in_id(1)};
    Dispatch& d = add(big ? "matmul_f32_t64" : "matmul_f32_t32", reads, {out_id()});
    if (bias != nullptr) d.reads.push_back(in_id(2));
    d.push[0] = static_cast<std::int32_t>(g.m);
    d.push[1] = static_cast<std::int32_t>(g.n);
    d.push[2] = static_cast<std::int32_t>(g.k);
    d.push[3] = g.trans_b ? 1 : 0;
    d.push[4] = bias != nullptr ? 1 : 0;
    d.push[5] = static_cast<std::int32_t>(g.batch_dims.size());
    for (std::size_t i = 0; i < g.batch_dims.size(); ++i) {
      d.push[6 + i] = static_cast<std::int32_t>(g.batch_dims[i]);
      d.push[10 + i] = static_cast<std::int32_t>(g.a_strides[i]);
      d.push[14 + i] = static_cast<std::int32_t>(g.b_strides[i]);
    }
    d.push[18] = static_cast<std::int32_t>(z0);
    d.bindings[0] = T(in_id(0));
    d.bindings[1] = T(in_id(1));
    d.bindings[2] = T(out_id());
    if (bias != nullptr) d.bindings[3] = T(in_id(2));
    d.groups[0] = static_cast<std::uint32_t>((g.n + tile - 1) / tile);
    d.groups[1] = static_cast<std::uint32_t>((g.m + tile - 1) / tile);
    d.groups[2] = static_cast<std::uint32_t>(std::min(zmax, g.batch - z0));
    if (d.groups[0] > limits_.maxComputeWorkGroupCount[0] || d.groups[1] > limits_.maxComputeWorkGroupCount[1]) {
      return unsupported("matrix too large for the dispatch grid");
    }
  }
  return Status::Ok();
}

Status Lowerer::conv2d() {
  KILN_RETURN_IF_ERROR(expect_inputs(2, 3));
  const std::string_view name = "conv2d";
  std::array<std::int64_t, 2> stride{}, pad{}, dil{};
  KILN_RETURN_IF_ERROR(cpu::kernels::read_pair(name, attrs_, 0, "stride", 1, stride));
  KILN_RETURN_IF_ERROR(cpu::kernels::read_pair(name, attrs_, 1, "padding", 0, pad));
  KILN_RETURN_IF_ERROR(cpu::kernels::read_pair(name, attrs_, 2, "dilation", 1, dil));
  KILN_ASSIGN_OR_RETURN(std::int64_t groups, attr_int(name, attrs_, 3, "groups"));
  Shape x = in(0)->shape;
  if (x.size() == 3) x.insert(x.begin(), 1);
  const Shape& w = in(1)->shape;
  if (x.size() != 4 || w.size() != 4) return invalid("x.shape=", shape_text(in(0)->shape), " weight.shape=", shape_text(w));
  if (groups < 1 || x[1] % groups != 0 || w[0] % groups != 0 || w[1] != x[1] / groups) {
    return invalid("groups=", groups, " does not fit x.shape=", shape_text(x), " weight.shape=", shape_text(w));
  }
  std::int64_t oh = 0, ow = 0;
  KILN_RETURN_IF_ERROR(cpu::kernels::window_output_size(name, "height", x[2], w[2], stride[0], pad[0], dil[0], false, oh));
  KILN_RETURN_IF_ERROR(cpu::kernels::window_output_size(name, "width", x[3], w[3], stride[1], pad[1], dil[1], false, ow));
  Shape expect = {x[0], w[0], oh, ow};
  if (in(0)->shape.size() == 3) expect.erase(expect.begin());
  if (out().shape != expect) return invalid("out.shape=", shape_text(out().shape), " != expected ", shape_text(expect));
  const SegmentTensor* bias = in(2);
  if (bias != nullptr && bias->shape != Shape{w[0]}) return invalid("bias.shape=", shape_text(bias->shape));
  const std::int64_t n = numel(expect);
  if (n == 0) return Status::Ok();
  const std::int64_t cpg = x[1] / groups, opg = w[0] / groups, kdim = cpg * w[2] * w[3];
  const std::int64_t cols = x[0] * oh * ow;
  if (kdim >= 16 && opg >= 8) {
    // Implicit GEMM per group: tiles of output channels x output pixels through shared memory.
    const bool big = opg >= 64 && cols >= 64;
    const std::int64_t tile = big ? 64 : 32;
    Dispatch& d = add(big ? "conv2d_gemm_f32_t64" : "conv2d_gemm_f32_t32", {in_id(0), in_id(1)}, {out_id()});
    if (bias != nullptr) d.reads.push_back(in_id(2));
    const std::int64_t p[] = {opg, cols, kdim, bias != nullptr ? 1 : 0, x[1], x[2], x[3], oh, ow, w[2], w[3],
                              stride[0], stride[1], pad[0], pad[1], dil[0], dil[1], w[0]};
    for (std::size_t i = 0; i < std::size(p); ++i) d.push[i] = static_cast<std::int32_t>(p[i]);
    d.bindings[0] = T(in_id(0));
    d.bindings[1] = T(in_id(1));
    d.bindings[2] = T(out_id());
    if (bias != nullptr) d.bindings[3] = T(in_id(2));
    d.groups[0] = static_cast<std::uint32_t>((cols + tile - 1) / tile);
    d.groups[1] = static_cast<std::uint32_t>((opg + tile - 1) / tile);
    d.groups[2] = static_cast<std::uint32_t>(groups);
    if (d.groups[0] > limits_.maxComputeWorkGroupCount[0] || d.groups[1] > limits_.maxComputeWorkGroupCount[1] ||
        d.groups[2] > limits_.maxComputeWorkGroupCount[2]) {
      return unsupported("convolution too large for the dispatch grid");
    }
    return Status::Ok();
  }
  // Direct convolution (depthwise and other thin groups): one invocation per output.
  Dispatch& d = add("conv2d_f32", {in_id(0), in_id(1)}, {out_id()});
  if (bias != nullptr) d.reads.push_back(in_id(2));
  const std::int64_t p[] = {n, x[1], x[2], x[3], w[0], oh, ow, w[2], w[3], stride[0], stride[1],
                            pad[0], pad[1], dil[0], dil[1], groups, bias != nullptr ? 1 : 0};
  for (std::size_t i = 0; i < std::size(p); ++i) d.push[i] = static_cast<std::int32_t>(p[i]);
  d.bindings[0] = T(in_id(0));
  d.bindings[1] = T(in_id(1));
  d.bindings[2] = T(out_id());
  if (bias != nullptr) d.bindings[3] = T(in_id(2));
  grid_1d(d, n, 256);
  return Status::Ok();
}

Status Lowerer::pool() {
  KILN_RETURN_IF_ERROR(expect_inputs(1, 1));
  const std::string_view name = op();
  const Shape& xs = in(0)->shape;
  if (xs.size() != 3 && xs.size() != 4) return invalid("x must be 3-D or 4-D, got ", shape_text(xs));
  const std::int64_t H = xs[xs.size() - 2], W = xs.back();
  const std::int64_t planes = numel(xs) / std::max<std::int64_t>(1, H * W);
  std::array<std::int64_t, 2> k{1, 1}, s{1, 1}, p{0, 0}, dil{1, 1};
  std::int64_t oh = 0, ow = 0;
  int mode = 0;
  bool include_pad = false;
  if (node_->op == OpKind::MaxPool2d || node_->op == OpKind::AvgPool2d) {
    const bool is_max = node_->op == OpKind::MaxPool2d;
    mode = is_max ? 0 : 1;
    KILN_RETURN_IF_ERROR(cpu::kernels::read_pair(name, attrs_, 0, "kernel", 1, k));
    KILN_RETURN_IF_ERROR(cpu::kernels::read_pair(name, attrs_, 1, "stride", 1, s, &k));
    KILN_RETURN_IF_ERROR(cpu::kernels::read_pair(name, attrs_, 2, "padding", 0, p));
    if (is_max) KILN_RETURN_IF_ERROR(cpu::kernels::read_pair(name, attrs_, 3, "dilation", 1, dil));
    KILN_ASSIGN_OR_RETURN(bool ceil_mode, attr_bool(name, attrs_, is_max ? 4 : 3, "ceil_mode"));
    if (!is_max) {
      KILN_ASSIGN_OR_RETURN(include_pad, attr_bool(name, attrs_, 4, "count_include_pad"));
    }
    for (int i = 0; i < 2; ++i) {
      if (p[i] * 2 > k[i]) return invalid("padding[", i, "]=", p[i], " exceeds half of kernel[", i, "]=", k[i]);
    }
    KILN_RETURN_IF_ERROR(cpu::kernels::window_output_size(name, "height", H, k[0], s[0], p[0], dil[0], ceil_mode, oh));
    KILN_RETURN_IF_ERROR(cpu::kernels::window_output_size(name, "width", W, k[1], s[1], p[1], dil[1], ceil_mode, ow));
  } else {
    mode = node_->op == OpKind::AdaptiveAvgPool2d ? 2 : 3;
    std::array<std::int64_t, 2> size{};
    KILN_RETURN_IF_ERROR(cpu::kernels::read_pair(name, attrs_, 0, "output_size", 0, size));
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
  (void)planes;
  Dispatch& d = add("pool_f32", {in_id(0)}, {out_id()});
  const std::int64_t v[] = {n, H, W, oh, ow, k[0], k[1], s[0], s[1], p[0], p[1], dil[0], dil[1], mode, include_pad ? 1 : 0};
  for (std::size_t i = 0; i < std::size(v); ++i) d.push[i] = static_cast<std::int32_t>(v[i]);
  d.bindings[0] = T(in_id(0));
  d.bindings[1] = T(out_id());
  grid_1d(d, n, 256);
  return Status::Ok();
}

Status Lowerer::reduce(int code) {
  KILN_RETURN_IF_ERROR(expect_inputs(1, 1));
  KILN_ASSIGN_OR_RETURN(std::span<const std::int64_t> dims, attr_ints(op(), attrs_, 0, "dims"));
  double correction = 0;
  if (code == 5) {  // var(dims, correction, keepdim)
    KILN_ASSIGN_OR_RETURN(correction, attr_float("var", attrs_, 1, "correction"));
  }
  KILN_ASSIGN_OR_RETURN(bool keepdim, attr_bool(op(), attrs_, code == 5 ? 2 : 1, "keepdim"));
  const Shape& xs = in(0)->shape;
  const int rank = static_cast<int>(xs.size());
  std::vector<bool> reduced(rank, dims.empty());
  for (std::int64_t d : dims) {
    if (d < 0 || d >= rank || reduced[d]) return invalid("dims has ", d, " (repeated or outside [0, ", rank, "))");
    reduced[d] = true;
  }
  const Shape cs = contiguous(xs);
  Shape kept, kept_st, red, red_st, expect;
  for (int d = 0; d < rank; ++d) {
    if (reduced[d]) {
      red.push_back(xs[d]);
      red_st.push_back(cs[d]);
      if (keepdim) expect.push_back(1);
    } else {
      kept.push_back(xs[d]);
      kept_st.push_back(cs[d]);
      expect.push_back(xs[d]);
    }
  }
  if (out().shape != expect) return invalid("out.shape=", shape_text(out().shape), " != expected ", shape_text(expect));
  const std::int64_t n_out = numel(kept), count = numel(red);
  if (n_out == 0) return Status::Ok();
  if (count == 0) {  // the identity (sum 0, prod 1; mean and var NaN); amax/amin: an error
    if ((code == 2 || code == 3) && node_->op != OpKind::Any && node_->op != OpKind::All) {
      return Status(StatusCode::kInvalidInput, "[" + std::string(op()) + "] reduction over zero elements");
    }
    if (node_->op == OpKind::Any || node_->op == OpKind::All) {
      fill(out_id(), n_out, node_->op == OpKind::All ? 1 : 0);  // any: false, all: true
      return Status::Ok();
    }
    const float identity = code == 0 ? 0.0f : code == 4 ? 1.0f : std::numeric_limits<float>::quiet_NaN();
    fill(out_id(), n_out, fbits(identity));
    return Status::Ok();
  }
  std::vector<Shape> ks{kept_st}, rs{red_st};
  if (!coalesce(kept, ks) || !coalesce(red, rs)) return unsupported("more than ", kMaxDims, " kept or reduced dims");
  const bool boolean = node_->op == OpKind::Any || node_->op == OpKind::All;
  Dispatch& d = add(boolean ? "reduce_b32" : "reduce_f32", {in_id(0)}, {out_id()});
  d.push[0] = static_cast<std::int32_t>(n_out);
  d.push[1] = static_cast<std::int32_t>(kept.size());
  for (std::size_t i = 0; i < kept.size(); ++i) {
    d.push[2 + i] = static_cast<std::int32_t>(kept[i]);
    d.push[8 + i] = static_cast<std::int32_t>(ks[0][i]);
  }
  d.push[14] = static_cast<std::int32_t>(red.size());
  for (std::size_t i = 0; i < red.size(); ++i) {
    d.push[15 + i] = static_cast<std::int32_t>(red[i]);
    d.push[21 + i] = static_cast<std::int32_t>(rs[0][i]);
  }
  d.push[27] = static_cast<std::int32_t>(count);
  d.push[28] = code;
  d.push[29] = fbits(static_cast<float>(correction));
  d.bindings[0] = T(in_id(0));
  d.bindings[1] = T(out_id());
  grid_1d(d, n_out, 1);
  return Status::Ok();
}

// The [outer, D, inner] split of `xs` around `dim` (rank 0: one element, dim 0).
bool split_at(const Shape& xs, std::int64_t dim, std::int64_t& outer, std::int64_t& d, std::int64_t& inner) {
  const auto rank = static_cast<std::int64_t>(xs.size());
  if (rank == 0) {
    outer = d = inner = 1;
    return dim == 0;
  }
  if (dim < 0 || dim >= rank) return false;
  outer = numel(Shape(xs.begin(), xs.begin() + dim));
  d = xs[dim];
  inner = numel(Shape(xs.begin() + dim + 1, xs.end()));
  return true;
}

Status Lowerer::arg_reduce(bool is_max) {
  KILN_RETURN_IF_ERROR(expect_inputs(1, 1));
  KILN_ASSIGN_OR_RETURN(std::int64_t dim, attr_int(op(), attrs_, 0, "dim"));
  KILN_ASSIGN_OR_RETURN(bool keepdim, attr_bool(op(), attrs_, 1, "keepdim"));
  const Shape& xs = in(0)->shape;
  std::int64_t outer = 0, len = 0, inner = 0;
  if (!split_at(xs, dim, outer, len, inner)) return invalid("dim=", dim, " for x.shape=", shape_text(xs));
  Shape expect = xs;
  if (!xs.empty()) {
    if (keepdim) expect[dim] = 1;
    else expect.erase(expect.begin() + dim);
  }
  if (out().shape != expect) return invalid("out.shape=", shape_text(out().shape), " != expected ", shape_text(expect));
  const std::int64_t rows = outer * inner;
  if (rows == 0) return Status::Ok();
  if (len == 0) return Status(StatusCode::kInvalidInput, "[" + std::string(op()) + "] cannot reduce over zero elements");
  Dispatch& d = add("argreduce_f32", {in_id(0)}, {out_id()});
  d.push[0] = static_cast<std::int32_t>(rows);
  d.push[1] = static_cast<std::int32_t>(len);
  d.push[2] = static_cast<std::int32_t>(inner);
  d.push[3] = is_max ? 0 : 1;
  d.bindings[0] = T(in_id(0));
  d.bindings[1] = T(out_id());
  grid_1d(d, rows, 1);
  return Status::Ok();
}

Status Lowerer::cumsum() {
  KILN_RETURN_IF_ERROR(expect_inputs(1, 1));
  KILN_ASSIGN_OR_RETURN(std::int64_t dim, attr_int("cumsum", attrs_, 0, "dim"));
  const Shape& xs = in(0)->shape;
  std::int64_t outer = 0, len = 0, inner = 0;
  if (!split_at(xs, dim, outer, len, inner)) return invalid("dim=", dim, " for x.shape=", shape_text(xs));
  if (out().shape != xs) return invalid("out.shape != x.shape");
  const std::int64_t lines = outer * inner;
  if (lines == 0 || len == 0) return Status::Ok();
  Dispatch& d = add("cumsum_f32", {in_id(0)}, {out_id()});
  d.push[0] = static_cast<std::int32_t>(lines);
  d.push[1] = static_cast<std::int32_t>(len);
  d.push[2] = static_cast<std::int32_t>(inner);
  d.bindings[0] = T(in_id(0));
  d.bindings[1] = T(out_id());
  grid_1d(d, lines, 64);
  return Status::Ok();
}

Status Lowerer::softmax(bool log) {
  KILN_RETURN_IF_ERROR(expect_inputs(1, 1));
  KILN_ASSIGN_OR_RETURN(std::int64_t dim, attr_int(op(), attrs_, 0, "dim"));
  const Shape& xs = in(0)->shape;
  const std::int64_t rank = static_cast<std::int64_t>(xs.size());
  if (dim < 0) dim += std::max<std::int64_t>(rank, 1);
  if (rank == 0 ? dim != 0 : (dim < 0 || dim >= rank)) return invalid("dim=", dim, " outside the rank ", rank);
  if (out().shape != xs) return invalid("out.shape=", shape_text(out().shape), " != x.shape=", shape_text(xs));
  const std::int64_t D = rank == 0 ? 1 : xs[dim];
  std::int64_t inner = 1;
  for (std::int64_t d = dim + 1; d < rank; ++d) inner *= xs[d];
  const std::int64_t n = numel(xs);
  if (n == 0) return Status::Ok();
  const std::int64_t rows = n / D;
  Dispatch& d = add("softmax_f32", {in_id(0)}, {out_id()});
  d.push[0] = static_cast<std::int32_t>(rows);
  d.push[1] = static_cast<std::int32_t>(D);
  d.push[2] = static_cast<std::int32_t>(inner);
  d.push[3] = log ? 1 : 0;
  d.bindings[0] = T(in_id(0));
  d.bindings[1] = T(out_id());
  grid_1d(d, rows, 1);
  return Status::Ok();
}

Status Lowerer::layer_norm() {
  KILN_RETURN_IF_ERROR(expect_inputs(1, 3));
  KILN_ASSIGN_OR_RETURN(std::int64_t nr, attr_int("layer_norm", attrs_, 0, "normalized_rank"));
  KILN_ASSIGN_OR_RETURN(double eps, attr_float("layer_norm", attrs_, 1, "eps"));
  const Shape& xs = in(0)->shape;
  if (nr < 0 || nr > static_cast<std::int64_t>(xs.size())) return invalid("normalized_rank=", nr, " for x.shape=", shape_text(xs));
  const Shape norm(xs.end() - nr, xs.end());
  for (std::size_t i = 1; i <= 2; ++i) {
    if (in(i) != nullptr && in(i)->shape != norm) return invalid(i == 1 ? "weight" : "bias", ".shape=", shape_text(in(i)->shape), " != ", shape_text(norm));
  }
  if (out().shape != xs) return invalid("out.shape != x.shape");
  const std::int64_t n = numel(norm), rows = numel(Shape(xs.begin(), xs.end() - nr));
  if (n == 0 || rows == 0) return Status::Ok();
  Dispatch& d = add("layernorm_f32", {in_id(0)}, {out_id()});
  d.push[0] = static_cast<std::int32_t>(rows);
  d.push[1] = static_cast<std::int32_t>(n);
  d.push[2] = fbits(static_cast<float>(eps));
  d.bindings[0] = T(in_id(0));
  for (std::size_t i = 1; i <= 2; ++i) {
    if (in(i) == nullptr) continue;
    d.push[2 + i] = 1;
    d.bindings[i] = T(in_id(i));
    d.reads.push_back(in_id(i));
  }
  d.bindings[3] = T(out_id());
  grid_1d(d, rows, 1);
  return Status::Ok();
}

Status Lowerer::batch_norm() {
  KILN_RETURN_IF_ERROR(expect_inputs(1, 5));
  KILN_ASSIGN_OR_RETURN(double eps, attr_float("batch_norm", attrs_, 0, "eps"));
  if (in(3) == nullptr || in(4) == nullptr) return unsupported("training mode (no running statistics)");
  const Shape& xs = in(0)->shape;
  if (xs.size() < 2) return invalid("x must be at least 2-D, got ", shape_text(xs));
  for (std::size_t i = 1; i <= 4; ++i) {
    if (in(i) != nullptr && in(i)->shape != Shape{xs[1]}) return invalid("parameter ", i, " has shape ", shape_text(in(i)->shape));
  }
  if (out().shape != xs) return invalid("out.shape != x.shape");
  const std::int64_t n = numel(xs);
  if (n == 0) return Status::Ok();
  Dispatch& d = add("batchnorm_f32", {in_id(0), in_id(3), in_id(4)}, {out_id()});
  d.push[0] = static_cast<std::int32_t>(n);
  d.push[1] = static_cast<std::int32_t>(xs[1]);
  d.push[2] = static_cast<std::int32_t>(numel(Shape(xs.begin() + 2, xs.end())));
  d.push[3] = fbits(static_cast<float>(eps));
  d.bindings[0] = T(in_id(0));
  for (std::size_t i = 1; i <= 2; ++i) {
    if (in(i) == nullptr) continue;
    d.push[3 + i] = 1;
    d.bindings[i] = T(in_id(i));
    d.reads.push_back(in_id(i));
  }
  d.bindings[3] = T(in_id(3));
  d.bindings[4] = T(in_id(4));
  d.bindings[5] = T(out_id());
  grid_1d(d, n, 256);
  return Status::Ok();
}

Status Lowerer::indexing() {
  KILN_RETURN_IF_ERROR(expect_inputs(2, 2));
  // A 0-d x is indexed as [1] (as on the CPU); its output stays 0-d.
  const Shape xs = in(0)->shape.empty() ? Shape{1} : in(0)->shape;
  const bool scalar_x = in(0)->shape.empty();
  const Shape& is = in(1)->shape;
  Dispatch d;
  d.variant = "index_x32";
  std::int64_t n = 0;
  if (node_->op == OpKind::Embedding || node_->op == OpKind::IndexSelect) {
    std::int64_t dim = 0;
    if (node_->op == OpKind::IndexSelect) {
      KILN_ASSIGN_OR_RETURN(dim, attr_int("index_select", attrs_, 0, "dim"));
      if (dim < 0) dim += static_cast<std::int64_t>(xs.size());
      if (is.size() > 1) return invalid("index must be 0-D or 1-D, got ", shape_text(is));
    }
    if (xs.empty() || dim < 0 || dim >= static_cast<std::int64_t>(xs.size())) return invalid("dim=", dim, " for x.shape=", shape_text(xs));
    Shape expect;
    if (node_->op == OpKind::Embedding) {
      expect = is;
      expect.insert(expect.end(), xs.begin() + 1, xs.end());
    } else {
      expect = xs;
      expect[dim] = numel(is);
      if (scalar_x) {
        if (numel(is) != 1) return invalid("a 0-d x takes exactly one index, got ", shape_text(is));
        expect.clear();
      }
    }
    if (out().shape != expect) return invalid("out.shape=", shape_text(out().shape), " != expected ", shape_text(expect));
    n = numel(expect);
    d.push[1] = 0;
    d.push[2] = static_cast<std::int32_t>(xs[dim]);
    d.push[3] = static_cast<std::int32_t>(numel(is));
    d.push[4] = static_cast<std::int32_t>(numel(Shape(xs.begin() + dim + 1, xs.end())));
  } else {  // gather
    KILN_ASSIGN_OR_RETURN(std::int64_t dim, attr_int("gather", attrs_, 0, "dim"));
    if (dim < 0) dim += static_cast<std::int64_t>(xs.size());
    const Shape xi = scalar_x ? Shape{} : xs;  // ranks compare with the real x
    if (is.size() != xi.size() || dim < 0 || dim >= static_cast<std::int64_t>(xs.size())) {
      return invalid("index.shape=", shape_text(is), " x.shape=", shape_text(xs), " dim=", dim);
    }
    for (std::size_t i = 0; i < xi.size(); ++i) {
      if (static_cast<std::int64_t>(i) != dim && is[i] > xs[i]) return invalid("index.shape[", i, "] > x.shape[", i, "]");
    }
    if (out().shape != is) return invalid("out.shape != index.shape");
    if (xs.size() > kMaxDims) return unsupported("gather over more than ", kMaxDims, " dims");
    n = numel(is);
    const Shape xst = contiguous(xs);
    const Shape ishape = scalar_x ? Shape{1} : is;
    d.push[1] = 1;
    d.push[2] = static_cast<std::int32_t>(xs[dim]);
    d.push[3] = static_cast<std::int32_t>(xs.size());
    d.push[4] = static_cast<std::int32_t>(dim);
    for (std::size_t i = 0; i < xs.size(); ++i) {
      d.push[5 + i] = static_cast<std::int32_t>(ishape[i]);
      d.push[11 + i] = static_cast<std::int32_t>(xst[i]);
    }
  }
  if (n == 0) return Status::Ok();
  d.push[0] = static_cast<std::int32_t>(n);
  d.reads = {in_id(0), in_id(1)};
  d.writes = {out_id()};
  d.bindings[0] = T(in_id(0));
  d.bindings[1] = T(in_id(1));
  d.bindings[2] = T(out_id());
  d.bindings[3] = {BindingRef::kError, 0};
  grid_1d(d, n, 256);
  out_.dispatches.push_back(std::move(d));
  out_.uses_error_buffer = true;
  return Status::Ok();
}

Status Lowerer::advanced_index() {
  if (node_->inputs.size() < 2 || node_->inputs.size() > 4 || node_->outputs.size() != 1) {
    return unsupported("index with ", node_->inputs.size() - 1, " index tensors (at most 3)");
  }
  for (std::size_t i = 0; i < node_->inputs.size(); ++i) {
    if (in(i) == nullptr) return invalid("input ", i, " is absent");
  }
  KILN_ASSIGN_OR_RETURN(std::span<const std::int64_t> dims, attr_ints("index", attrs_, 0, "dims"));
  const Shape& xs = in(0)->shape;
  const int k = static_cast<int>(node_->inputs.size()) - 1;
  const int rank = static_cast<int>(xs.size());
  if (static_cast<int>(dims.size()) != k) return invalid("dims has ", dims.size(), " entries for ", k, " index tensors");
  if (dims[0] < 0 || dims[0] >= rank) return invalid("dims[0]=", dims[0], " for rank ", rank);
  for (int i = 1; i < k; ++i) {
    if (dims[i] != dims[0] + i) return unsupported("index tensors on non-adjacent dims");
  }
  const int first = static_cast<int>(dims[0]);
  if (first + k > rank) return invalid(k, " index tensors from dim ", first, " exceed x.rank=", rank);
  // Broadcast shape of the index tensors.
  std::size_t brank = 0;
  for (int j = 1; j <= k; ++j) brank = std::max(brank, in(j)->shape.size());
  if (brank > 4) return unsupported("index tensors of rank > 4");
  Shape bshape(brank, 1);
  for (std::size_t d = 0; d < brank; ++d) {
    for (int j = 1; j <= k; ++j) {
      const Shape& t = in(j)->shape;
      const int td = static_cast<int>(d) - static_cast<int>(brank - t.size());
      const std::int64_t dim = td >= 0 ? t[td] : 1;
      if (dim == 1) continue;
      if (bshape[d] != 1 && bshape[d] != dim) return invalid("index tensor shapes do not broadcast");
      bshape[d] = dim;
    }
  }
  Shape expect(xs.begin(), xs.begin() + first);
  expect.insert(expect.end(), bshape.begin(), bshape.end());
  expect.insert(expect.end(), xs.begin() + first + k, xs.end());
  if (out().shape != expect) return invalid("out.shape=", shape_text(out().shape), " != expected ", shape_text(expect));
  const std::int64_t n = numel(expect);
  if (n == 0) return Status::Ok();
  const Shape xst = contiguous(xs);
  Dispatch& d = add("advindex_x32", {in_id(0)}, {out_id()});
  d.push[0] = static_cast<std::int32_t>(n);
  d.push[1] = k;
  d.push[2] = static_cast<std::int32_t>(numel(Shape(xs.begin() + first + k, xs.end())));
  d.push[3] = static_cast<std::int32_t>(numel(Shape(xs.begin() + first, xs.end())));
  d.push[4] = static_cast<std::int32_t>(numel(bshape));
  d.push[5] = static_cast<std::int32_t>(brank);
  for (std::size_t i = 0; i < brank; ++i) d.push[6 + i] = static_cast<std::int32_t>(bshape[i]);
  for (int j = 0; j < k; ++j) {
    const Shape& t = in(j + 1)->shape;
    Shape bs;
    broadcast_strides(t, bshape, bs);
    for (std::size_t i = 0; i < brank; ++i) d.push[10 + 4 * j + i] = static_cast<std::int32_t>(bs[i]);
    d.push[22 + j] = static_cast<std::int32_t>(xs[first + j]);
    d.push[25 + j] = static_cast<std::int32_t>(xst[first + j]);
    d.bindings[3 + j] = T(in_id(j + 1));
    d.reads.push_back(in_id(j + 1));
  }
  d.bindings[0] = T(in_id(0));
  d.bindings[1] = T(out_id());
  d.bindings[2] = {BindingRef::kError, 0};
  grid_1d(d, n, 256);
  out_.uses_error_buffer = true;
  return Status::Ok();
}

// The 32-bit word of a float attribute value converted to `dtype`'s device representation.
std::int32_t scalar_bits(double v, DType dtype) {
  if (dtype == DType::kF32) return fbits(static_cast<float>(v));
  if (dtype == DType::kBool) return v != 0.0 ? 1 : 0;
  if (std::isnan(v)) return 0;
  return static_cast<std::int32_t>(std::clamp(std::trunc(v), -2147483648.0, 2147483647.0));
}

Status Lowerer::movement() {
  const OpKind k = node_->op;
  KILN_RETURN_IF_ERROR(expect_inputs(1, k == OpKind::Cat ? SIZE_MAX : 1));
  const SegmentTensor& x = *in(0);
  for (std::size_t i = 0; i < node_->outputs.size(); ++i) {
    if (out(i).dtype != x.dtype) return invalid("out dtype differs from x dtype");
  }
  const Shape& xs = x.shape;
  const Shape& os = out().shape;
  const int rank = static_cast<int>(xs.size());
  Status st;
  switch (k) {
    case OpKind::Reshape:
    case OpKind::Identity: {
      if (numel(xs) != numel(os)) return invalid("x.shape=", shape_text(xs), " and out.shape=", shape_text(os), " differ in size");
      const std::int64_t n = numel(xs);
      copy(in_id(0), out_id(), {n}, {1}, {1}, 0, 0, st);
      return st;
    }
    case OpKind::Permute: {
      KILN_ASSIGN_OR_RETURN(std::span<const std::int64_t> dims, attr_ints("permute", attrs_, 0, "dims"));
      if (static_cast<int>(dims.size()) != rank) return invalid("dims has ", dims.size(), " entries for rank ", rank);
      const Shape cs = contiguous(xs);
      Shape expect(rank), ist(rank);
      std::vector<bool> seen(rank, false);
      for (int i = 0; i < rank; ++i) {
        std::int64_t d = dims[i] < 0 ? dims[i] + rank : dims[i];
        if (d < 0 || d >= rank || seen[d]) return invalid("dims is not a permutation");
        seen[d] = true;
        expect[i] = xs[d];
        ist[i] = cs[d];
      }
      if (os != expect) return invalid("out.shape=", shape_text(os), " != ", shape_text(expect));
      copy(in_id(0), out_id(), os, ist, contiguous(os), 0, 0, st);
      return st;
    }
    case OpKind::Slice: {
      KILN_ASSIGN_OR_RETURN(std::int64_t dim, attr_int("slice", attrs_, 0, "dim"));
      KILN_ASSIGN_OR_RETURN(std::int64_t start, attr_int("slice", attrs_, 1, "start"));
      KILN_ASSIGN_OR_RETURN(std::int64_t end, attr_int("slice", attrs_, 2, "end"));
      KILN_ASSIGN_OR_RETURN(std::int64_t step, attr_int("slice", attrs_, 3, "step"));
      if (dim < 0 || dim >= rank) return invalid("dim=", dim, " for rank ", rank);
      if (step < 1) return invalid("step=", step, " must be positive");
      const std::int64_t size = xs[dim];
      if (start < 0) start += size;
      if (end < 0) end += size;
      start = std::clamp<std::int64_t>(start, 0, size);
      end = std::clamp<std::int64_t>(end, 0, size);
      const std::int64_t len = end > start ? (end - start - 1) / step + 1 : 0;
      Shape expect = xs;
      expect[dim] = len;
      if (os != expect) return invalid("out.shape=", shape_text(os), " != ", shape_text(expect));
      Shape ist = contiguous(xs);
      const std::int64_t off = start * ist[dim];
      if (len > 1) ist[dim] *= step;  // then step < size: the stride stays in range
      copy(in_id(0), out_id(), os, ist, contiguous(os), off, 0, st);
      return st;
    }
    case OpKind::Cat: {
      KILN_ASSIGN_OR_RETURN(std::int64_t dim, attr_int("cat", attrs_, 0, "dim"));
      if (dim < 0) dim += static_cast<std::int64_t>(os.size());
      if (dim < 0 || dim >= static_cast<std::int64_t>(os.size())) return invalid("dim=", dim);
      const Shape ost = contiguous(os);
      std::int64_t at = 0;
      for (std::size_t i = 0; i < node_->inputs.size(); ++i) {
        const SegmentTensor* t = in(i);
        if (t == nullptr) return invalid("input ", i, " is absent");
        if (t->dtype != out().dtype) return invalid("input ", i, " has another dtype");
        if (t->shape.size() == 1 && t->shape[0] == 0 && os.size() != 1) continue;  // PyTorch skips 1-D empties
        if (t->shape.size() != os.size()) return invalid("input ", i, ".shape=", shape_text(t->shape), " vs out.shape=", shape_text(os));
        for (std::size_t d = 0; d < os.size(); ++d) {
          if (static_cast<std::int64_t>(d) != dim && t->shape[d] != os[d]) return invalid("input ", i, " shape mismatch");
        }
        if (at + t->shape[dim] > os[dim]) return invalid("inputs exceed out.shape[", dim, "]");
        copy(in_id(i), out_id(), t->shape, contiguous(t->shape), ost, 0, at * ost[dim], st);
        KILN_RETURN_IF_ERROR(st);
        at += t->shape[dim];
      }
      if (at != os[dim]) return invalid("inputs sum to ", at, " along dim ", dim, ", out has ", os[dim]);
      return Status::Ok();
    }
    case OpKind::Split: {
      KILN_ASSIGN_OR_RETURN(std::int64_t dim, attr_int("split", attrs_, 0, "dim"));
      KILN_ASSIGN_OR_RETURN(std::span<const std::int64_t> sizes, attr_ints("split", attrs_, 1, "sizes"));
      if (dim < 0) dim += rank;
      if (dim < 0 || dim >= rank) return invalid("dim=", dim);
      if (sizes.size() != node_->outputs.size()) return invalid(sizes.size(), " sizes for ", node_->outputs.size(), " outputs");
      const Shape xst = contiguous(xs);
      std::int64_t at = 0;
      for (std::size_t i = 0; i < sizes.size(); ++i) {
        Shape expect = xs;
        expect[dim] = sizes[i];
        if (sizes[i] < 0 || out(i).shape != expect) return invalid("output ", i, ".shape=", shape_text(out(i).shape), " != ", shape_text(expect));
        if (at + sizes[i] > xs[dim]) return invalid("sizes exceed x.shape[", dim, "]");
        copy(in_id(0), out_id(i), expect, xst, contiguous(expect), at * xst[dim], 0, st);
        KILN_RETURN_IF_ERROR(st);
        at += sizes[i];
      }
      if (at != xs[dim]) return invalid("sizes sum to ", at, ", x.shape[", dim, "]=", xs[dim]);
      return Status::Ok();
    }
    case OpKind::Expand: {
      Shape ist;
      if (!broadcast_strides(xs, os, ist)) return invalid("x.shape=", shape_text(xs), " does not expand to ", shape_text(os));
      copy(in_id(0), out_id(), os, ist, contiguous(os), 0, 0, st);
      return st;
    }
    case OpKind::Flip: {
      KILN_ASSIGN_OR_RETURN(std::span<const std::int64_t> dims, attr_ints("flip", attrs_, 0, "dims"));
      if (os != xs) return invalid("out.shape != x.shape");
      Shape ist = contiguous(xs);
      std::int64_t off = 0;
      std::vector<bool> seen(rank, false);
      for (std::int64_t d : dims) {
        if (d < 0) d += rank;
        if (d < 0 || d >= rank || seen[d]) return invalid("dims has a repeated or out-of-range dim");
        seen[d] = true;
        if (xs[d] > 0) off += (xs[d] - 1) * ist[d];
        ist[d] = -ist[d];
      }
      copy(in_id(0), out_id(), os, ist, contiguous(os), off, 0, st);
      return st;
    }
    case OpKind::Pad: {
      KILN_ASSIGN_OR_RETURN(std::span<const std::int64_t> pads, attr_ints("pad", attrs_, 0, "pads"));
      KILN_ASSIGN_OR_RETURN(double value, attr_float("pad", attrs_, 1, "value"));
      if (pads.size() % 2 != 0 || pads.size() > 2 * static_cast<std::size_t>(rank)) return invalid("pads has ", pads.size(), " entries");
      Shape left(rank, 0), expect = xs;
      for (std::size_t i = 0; i < pads.size() / 2; ++i) {
        const int d = rank - 1 - static_cast<int>(i);
        const std::int64_t l = pads[2 * i], r = pads[2 * i + 1];
        if (l < -(std::int64_t{1} << 40) || l > (std::int64_t{1} << 40) || r < -(std::int64_t{1} << 40) ||
            r > (std::int64_t{1} << 40) || xs[d] + l + r < 0) {
          return invalid("pads give a negative size on dim ", d);
        }
        left[d] = l;
        expect[d] = xs[d] + l + r;
      }
      if (os != expect) return invalid("out.shape=", shape_text(os), " != ", shape_text(expect));
      fill(out_id(), numel(os), scalar_bits(value, x.dtype));
      const Shape xst = contiguous(xs), ost = contiguous(os);
      Shape box(rank);
      std::int64_t soff = 0, doff = 0;
      for (int d = 0; d < rank; ++d) {
        const std::int64_t s0 = std::max<std::int64_t>(0, -left[d]), d0 = std::max<std::int64_t>(0, left[d]);
        box[d] = std::min(xs[d] - s0, expect[d] - d0);
        if (box[d] <= 0) return Status::Ok();
        soff += s0 * xst[d];
        doff += d0 * ost[d];
      }
      copy(in_id(0), out_id(), box, xst, ost, soff, doff, st);
      return st;
    }
    case OpKind::Tril:
    case OpKind::Triu: {
      KILN_ASSIGN_OR_RETURN(std::int64_t diag, attr_int(op(), attrs_, 0, "diagonal"));
      if (rank < 2) return invalid("x must be at least 2-D");
      if (os != xs) return invalid("out.shape != x.shape");
      const std::int64_t n = numel(xs);
      if (n == 0) return Status::Ok();
      Dispatch& d = add("tri_x32", {in_id(0)}, {out_id()});
      d.push[0] = static_cast<std::int32_t>(n);
      d.push[1] = static_cast<std::int32_t>(xs[rank - 2]);
      d.push[2] = static_cast<std::int32_t>(xs[rank - 1]);
      d.push[3] = static_cast<std::int32_t>(std::clamp<std::int64_t>(diag, -(std::int64_t{1} << 30), std::int64_t{1} << 30));
      d.push[4] = k == OpKind::Triu ? 1 : 0;
      d.bindings[0] = T(in_id(0));
      d.bindings[1] = T(out_id());
      grid_1d(d, n, 256);
      return Status::Ok();
    }
    default: return unsupported("not a movement op");
  }
}

Status Lowerer::creation() {
  if (!node_->inputs.empty() || node_->outputs.size() != 1) return invalid("takes no inputs and one output");
  const DType dt = out().dtype;
  const std::int64_t n = numel(out().shape);
  if (node_->op == OpKind::Full) {
    KILN_ASSIGN_OR_RETURN(double value, attr_float("full", attrs_, 1, "value"));
    if (dt != DType::kF32 && dt != DType::kBool && (value < -2147483648.0 || value >= 2147483648.0)) {
      return unsupported("full value ", value, " does not fit the device's 32-bit integers");
    }
    fill(out_id(), n, scalar_bits(value, dt));
    return Status::Ok();
  }
  KILN_ASSIGN_OR_RETURN(std::int64_t start, attr_int("arange", attrs_, 0, "start"));
  KILN_ASSIGN_OR_RETURN(std::int64_t end, attr_int("arange", attrs_, 1, "end"));
  KILN_ASSIGN_OR_RETURN(std::int64_t step, attr_int("arange", attrs_, 2, "step"));
  if (step == 0) return invalid("step must not be 0");
  constexpr std::int64_t kLim = std::int64_t{1} << 24;  // exact in f32 and i32
  if (std::abs(start) > kLim || std::abs(end) > kLim || std::abs(step) > kLim) {
    return unsupported("arange bounds beyond 2^24");
  }
  const std::int64_t span = end - start;
  const std::int64_t len = (span == 0 || (span > 0) != (step > 0)) ? 0 : (span + step + (step > 0 ? -1 : 1)) / step;
  if (out().shape != Shape{len}) return invalid("out.shape=", shape_text(out().shape), " != [", len, "]");
  if (len == 0) return Status::Ok();
  Dispatch& d = add("fill_x32", {}, {out_id()});
  d.push[0] = static_cast<std::int32_t>(len);
  d.push[1] = static_cast<std::int32_t>(start);
  d.push[2] = dt == DType::kF32 ? 1 : 2;
  d.push[3] = static_cast<std::int32_t>(step);
  d.bindings[0] = T(out_id());
  grid_1d(d, len, 256);
  return Status::Ok();
}

int device_kind(DType d) { return d == DType::kF32 ? 0 : d == DType::kBool ? 2 : 1; }

Status Lowerer::cast() {
  KILN_RETURN_IF_ERROR(expect_inputs(1, 1));
  if (in(0)->shape != out().shape) return invalid("out.shape != x.shape");
  const std::int64_t n = numel(out().shape);
  if (n == 0) return Status::Ok();
  Dispatch& d = add("cast_x32", {in_id(0)}, {out_id()});
  d.push[0] = static_cast<std::int32_t>(n);
  d.push[1] = device_kind(in(0)->dtype);
  d.push[2] = device_kind(out().dtype);
  d.bindings[0] = T(in_id(0));
  d.bindings[1] = T(out_id());
  grid_1d(d, n, 256);
  return Status::Ok();
}

int unary_code(OpKind k) {
  switch (k) {
    case OpKind::Neg: return 0;
    case OpKind::Abs: return 1;
    case OpKind::Exp: return 2;
    case OpKind::Log: return 3;
    case OpKind::Sqrt: return 4;
    case OpKind::Rsqrt: return 5;
    case OpKind::Reciprocal: return 6;
    case OpKind::Sin: return 7;
    case OpKind::Cos: return 8;
    case OpKind::Tanh: return 9;
    case OpKind::Sigmoid: return 10;
    case OpKind::Relu: return 11;
    case OpKind::Gelu: return 12;  // 13: tanh approximation
    case OpKind::Silu: return 14;
    case OpKind::Hardswish: return 15;
    case OpKind::Hardsigmoid: return 16;
    case OpKind::Erf: return 17;
    case OpKind::Floor: return 18;
    case OpKind::Ceil: return 19;
    case OpKind::Round: return 20;
    case OpKind::Sign: return 21;
    case OpKind::Clamp: return 22;
    case OpKind::LeakyRelu: return 23;
    default: return -1;
  }
}

int binary_code(OpKind k) {
  switch (k) {
    case OpKind::Add: return 0;
    case OpKind::Sub: return 1;
    case OpKind::Mul: return 2;
    case OpKind::Div: return 3;  // 4 trunc, 5 floor
    case OpKind::Pow: return 6;
    case OpKind::Maximum: return 7;
    case OpKind::Minimum: return 8;
    case OpKind::Remainder: return 9;
    default: return -1;
  }
}

int compare_code(OpKind k) {
  switch (k) {
    case OpKind::Eq: return 0;
    case OpKind::Ne: return 1;
    case OpKind::Lt: return 2;
    case OpKind::Le: return 3;
    case OpKind::Gt: return 4;
    case OpKind::Ge: return 5;
    default: return -1;
  }
}

int logical_code(OpKind k) {
  switch (k) {
    case OpKind::LogicalAnd: return 0;
    case OpKind::LogicalOr: return 1;
    case OpKind::LogicalXor: return 2;
    default: return -1;
  }
}

Status Lowerer::node(const SegmentNode& n) {
  node_ = &n;
  attrs_ = n.attrs;
  for (std::uint32_t t : n.inputs) {
    if (t != backend::kAbsentTensor && t >= desc_.tensors.size()) return invalid("input tensor ", t, " out of range");
  }
  for (std::uint32_t t : n.outputs) {
    if (t >= desc_.tensors.size()) return invalid("output tensor ", t, " out of range");
    // Never write a constant (shared by every segment) or a host input; never in place.
    const auto role = desc_.tensors[t].role;
    if (role != SegmentTensor::Role::kInternal && role != SegmentTensor::Role::kOutput) {
      return invalid("output tensor ", t, " is a segment input or a constant");
    }
    if (std::find(n.inputs.begin(), n.inputs.end(), t) != n.inputs.end()) return invalid("tensor ", t, " is both input and output");
  }
  const OpKind k = n.op;
  if (const int c = unary_code(k); c >= 0) {
    float alpha = 0, beta = 0;
    int code = c;
    if (k == OpKind::Gelu) {
      KILN_ASSIGN_OR_RETURN(std::string_view approx, attr_string("gelu", attrs_, 0, "approximate", true));
      if (approx == "tanh") code = 13;
      else if (!approx.empty() && approx != "none") return invalid("approximate='", approx, "'");
    } else if (k == OpKind::Clamp) {
      KILN_ASSIGN_OR_RETURN(std::optional<double> lo, attr_optional_float("clamp", attrs_, 0, "min"));
      KILN_ASSIGN_OR_RETURN(std::optional<double> hi, attr_optional_float("clamp", attrs_, 1, "max"));
      alpha = lo ? static_cast<float>(*lo) : -std::numeric_limits<float>::infinity();
      beta = hi ? static_cast<float>(*hi) : std::numeric_limits<float>::infinity();
    } else if (k == OpKind::LeakyRelu) {
      KILN_ASSIGN_OR_RETURN(double slope, attr_float("leaky_relu", attrs_, 0, "negative_slope"));
      alpha = static_cast<float>(slope);
    }
    return elementwise_unary(code, alpha, beta);
  }
  if (int c = binary_code(k); c >= 0) {
    if (k == OpKind::Div) {
      KILN_ASSIGN_OR_RETURN(std::string_view mode, attr_string("div", attrs_, 0, "rounding_mode", true));
      if (mode == "trunc") c = 4;
      else if (mode == "floor") c = 5;
      else if (!mode.empty()) return invalid("rounding_mode='", mode, "'");
    }
    return binary("binary_f32", c);
  }
  if (const int c = compare_code(k); c >= 0) return binary("compare_f32", c);
  if (const int c = logical_code(k); c >= 0) return binary("logical_b32", c);
  switch (k) {
    case OpKind::LogicalNot: {
      KILN_RETURN_IF_ERROR(expect_inputs(1, 1));
      if (in(0)->shape != out().shape) return invalid("out.shape != x.shape");
      const std::int64_t cnt = numel(out().shape);
      if (cnt == 0) return Status::Ok();
      // bool: the logical variant's `not a`; f32: x == 0 against the zero-filled dummy buffer.
      Dispatch& d = add(in(0)->dtype == DType::kBool ? "logical_b32" : "compare_f32", {in_id(0)}, {out_id()});
      d.push[0] = static_cast<std::int32_t>(cnt);
      d.push[1] = in(0)->dtype == DType::kBool ? 3 : 0;  // logical: 3 = not a; compare: 0 = eq (b = 0.0)
      d.push[2] = 1;                                      // one dim: a walks, b (the zero dummy) stays
      d.push[3] = static_cast<std::int32_t>(cnt);
      d.push[9] = 1;
      d.push[15] = 0;
      d.push[21] = 0;
      d.bindings[0] = T(in_id(0));
      d.bindings[1] = {BindingRef::kDummy, 0};  // zeros: rank 0 -> all offsets 0
      d.bindings[2] = T(out_id());
      grid_1d(d, cnt, 256);
      return Status::Ok();
    }
    case OpKind::Where:
      KILN_RETURN_IF_ERROR(expect_inputs(3, 3));
      return where(in_id(0), in_id(1), in_id(2), nullptr);
    case OpKind::MaskedFill: {
      KILN_RETURN_IF_ERROR(expect_inputs(3, 3));
      if (numel(in(2)->shape) != 1) return invalid("value must hold one element, got ", shape_text(in(2)->shape));
      if (out().shape != in(0)->shape) return invalid("out.shape != x.shape");
      const Shape scalar;
      return where(in_id(1), in_id(2), in_id(0), &scalar);
    }
    case OpKind::Matmul:
    case OpKind::Linear:
    case OpKind::Bmm: return matmul();
    case OpKind::Conv2d: return conv2d();
    case OpKind::MaxPool2d:
    case OpKind::AvgPool2d:
    case OpKind::AdaptiveAvgPool2d:
    case OpKind::AdaptiveMaxPool2d: return pool();
    case OpKind::Sum: return reduce(0);
    case OpKind::Mean: return reduce(1);
    case OpKind::Amax: return reduce(2);
    case OpKind::Amin: return reduce(3);
    case OpKind::Prod: return reduce(4);
    case OpKind::Any: return reduce(2);  // max over 0/1 (reduce_b32)
    case OpKind::All: return reduce(3);  // min over 0/1
    case OpKind::Var: return reduce(5);
    case OpKind::Argmax: return arg_reduce(true);
    case OpKind::Argmin: return arg_reduce(false);
    case OpKind::Cumsum: return cumsum();
    case OpKind::Softmax: return softmax(false);
    case OpKind::LogSoftmax: return softmax(true);
    case OpKind::LayerNorm: return layer_norm();
    case OpKind::BatchNorm: return batch_norm();
    case OpKind::Embedding:
    case OpKind::IndexSelect:
    case OpKind::Gather: return indexing();
    case OpKind::Index: return advanced_index();
    case OpKind::Identity:
    case OpKind::Reshape:
    case OpKind::Permute:
    case OpKind::Slice:
    case OpKind::Cat:
    case OpKind::Split:
    case OpKind::Expand:
    case OpKind::Flip:
    case OpKind::Pad:
    case OpKind::Tril:
    case OpKind::Triu: return movement();
    case OpKind::Full:
    case OpKind::Arange: return creation();
    case OpKind::Cast: return cast();
    default: return unsupported("op '", op(), "' has no Vulkan kernel");
  }
}

bool all_are(std::span<const DType> ds, DType d) {
  return std::all_of(ds.begin(), ds.end(), [d](DType x) { return x == d; });
}

bool is_index(DType d) { return d == DType::kI32 || d == DType::kI64; }

}  // namespace

bool dtype_on_device(DType d) {
  return d == DType::kF32 || d == DType::kI32 || d == DType::kI64 || d == DType::kBool;
}

bool op_supported(OpKind op, std::span<const DType> in, std::span<const DType> out, std::span<const AttrValue> attrs) {
  for (DType d : in) {
    if (!dtype_on_device(d)) return false;
  }
  for (DType d : out) {
    if (!dtype_on_device(d)) return false;
  }
  const bool f32_io = all_are(in, DType::kF32) && all_are(out, DType::kF32);
  if (unary_code(op) >= 0 || binary_code(op) >= 0) return f32_io && !out.empty();
  if (compare_code(op) >= 0) return in.size() == 2 && all_are(in, DType::kF32) && all_are(out, DType::kBool);
  if (logical_code(op) >= 0) return all_are(in, DType::kBool) && all_are(out, DType::kBool);
  switch (op) {
    case OpKind::LogicalNot:
      return in.size() == 1 && (in[0] == DType::kBool || in[0] == DType::kF32) && all_are(out, DType::kBool);
    case OpKind::Where:
      return in.size() == 3 && in[0] == DType::kBool && out.size() == 1 && in[1] == out[0] && in[2] == out[0];
    case OpKind::MaskedFill:
      return in.size() == 3 && in[1] == DType::kBool && out.size() == 1 && in[0] == out[0] && in[2] == out[0];
    case OpKind::Matmul:
    case OpKind::Linear:
    case OpKind::Bmm:
    case OpKind::Conv2d:
    case OpKind::MaxPool2d:
    case OpKind::AvgPool2d:
    case OpKind::AdaptiveAvgPool2d:
    case OpKind::AdaptiveMaxPool2d:
    case OpKind::Softmax:
    case OpKind::LogSoftmax:
    case OpKind::LayerNorm:
    case OpKind::BatchNorm:
    case OpKind::Mean:
    case OpKind::Amax:
    case OpKind::Amin:
    case OpKind::Prod:
    case OpKind::Var:
    case OpKind::Cumsum: return f32_io && !in.empty();
    case OpKind::Any:
    case OpKind::All: return in.size() == 1 && in[0] == DType::kBool && all_are(out, DType::kBool);
    case OpKind::Argmax:
    case OpKind::Argmin:
      return in.size() == 1 && in[0] == DType::kF32 && out.size() == 1 && out[0] == DType::kI64;
    case OpKind::Sum:
      // sum's optional dtype attribute must be absent or f32.
      if (attrs.size() > 2 && attrs[2].type != AttrType::kNone && attrs[2].i != static_cast<std::int64_t>(DType::kF32)) return false;
      return f32_io && !in.empty();
    case OpKind::Embedding:
    case OpKind::IndexSelect:
    case OpKind::Gather:
      return in.size() == 2 && is_index(in[1]) && out.size() == 1 && in[0] == out[0];
    case OpKind::Index:
      if (in.size() < 2 || in.size() > 4 || out.size() != 1 || in[0] != out[0]) return false;
      return std::all_of(in.begin() + 1, in.end(), is_index);
    case OpKind::Identity:
    case OpKind::Reshape:
    case OpKind::Permute:
    case OpKind::Slice:
    case OpKind::Cat:
    case OpKind::Split:
    case OpKind::Expand:
    case OpKind::Flip:
    case OpKind::Pad:
    case OpKind::Tril:
    case OpKind::Triu:
      return !in.empty() && !out.empty() && all_are(in, in[0]) && all_are(out, in[0]);
    case OpKind::Full:
    case OpKind::Arange: return in.empty() && out.size() == 1 && (op == OpKind::Full || out[0] != DType::kBool);
    case OpKind::Cast:
      // Not f32 -> integer (the CPU saturates through int64 and wraps; the device would not).
      return in.size() == 1 && out.size() == 1 && !(in[0] == DType::kF32 && is_index(out[0]));
    default: return false;  // data-dependent, higher-order, and ops without a shader
  }
}

Status lower_segment(const SegmentDesc& desc, const VkPhysicalDeviceLimits& limits, LoweredSegment& out) {
  Lowerer l(desc, limits, out);
  for (const SegmentNode& n : desc.nodes) {
    Status st = l.node(n);
    if (!st.ok()) return n.where.empty() ? st : st.with_context(n.where);
  }
  return Status::Ok();
}

}  // namespace kiln::vulkan

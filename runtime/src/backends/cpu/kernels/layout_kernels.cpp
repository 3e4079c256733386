// The blocked side of the layout kernels (executor/layout.cpp decides which tensors are
// NCHW8c): conv2d, max/avg/adaptive-avg pools and mean over H and W, called by those ops'
// kernels when KernelContext says an input or output is blocked. A blocked view arrives
// physical, [N, ceil(C/8), H, W, 8]; its logical channel count comes from the weight
// (conv2d) or from the plain side. What no blocked kernel runs goes through the op's plain
// kernel on plain copies (run_plain): correct for every shape, one reorder each way.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <new>
#include <vector>

#include "backends/cpu/kernels/common.h"
#include "backends/cpu/kernels/conv_prepared.h"
#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/kernels/layout_kernels.h"
#include "backends/cpu/kernels/nchwc.h"
#include "backends/cpu/thread_pool.h"

namespace kiln::cpu::nchwc {
bool kernels_available() { return true; }
}  // namespace kiln::cpu::nchwc

namespace kiln::cpu::kernels {
namespace {

namespace nc = cpu::nchwc;

// The context a plain kernel gets inside run_plain: the node's, but every tensor plain
// (and, with `no_activation`, nothing fused: the caller applies it after the residual).
class PlainContext final : public KernelContext {
 public:
  explicit PlainContext(KernelContext& base, bool no_activation = false) : base_(base), no_activation_(no_activation) {}
  Result<TensorView> allocate_output(int index, DType dtype, std::span<const std::int64_t> shape) override {
    return base_.allocate_output(index, dtype, shape);
  }
  ThreadPool& pool() override { return base_.pool(); }
  const PackedB* packed_b(int index) const override { return base_.packed_b(index); }
  const PreparedWeights* prepared_weights(int index) const override { return base_.prepared_weights(index); }
  FusedActivation fused_activation() const override { return no_activation_ ? FusedActivation::kNone : base_.fused_activation(); }
  const OperandWindow* operand_window(int index) const override { return base_.operand_window(index); }

 private:
  KernelContext& base_;
  bool no_activation_;
};

struct FloatBuffer {
  std::unique_ptr<float[]> data;
  bool alloc(std::int64_t n) {
    data.reset(new (std::nothrow) float[static_cast<std::size_t>(std::max<std::int64_t>(n, 1))]);
    return data != nullptr;
  }
};

}  // namespace

Result<BlockedOperand> blocked_operand(const char* op, const char* what, const TensorView& v, bool blocked,
                                       std::int64_t channels) {
  BlockedOperand b;
  if (!blocked) {
    if (v.rank != 4) return invalid(op, what, " must be 4-D, got shape ", shape_text(v));
    b.act = {v.as<float>(), v.shape[0], v.shape[1], v.shape[2], v.shape[3], false};
    b.logical = v;
    return b;
  }
  if (v.dtype != DType::kF32 || v.rank != 5 || v.shape[4] != nc::kBlock) {
    return invalid(op, what, " is blocked NCHW8c but its view is ", shape_text(v), " (expected [N, C/8, H, W, 8] f32)");
  }
  if (channels < 0) channels = v.shape[1] * nc::kBlock;  // unknown: every lane counts
  if (nc::padded_channels(channels) != v.shape[1] * nc::kBlock) {
    return invalid(op, what, " holds ", v.shape[1], " channel blocks, not the ", nc::padded_channels(channels) / nc::kBlock,
                   " of ", channels, " channels");
  }
  b.act = {v.as<float>(), v.shape[0], channels, v.shape[2], v.shape[3], true};
  b.logical = v;
  b.logical.rank = 4;
  b.logical.shape[1] = channels;
  b.logical.shape[4] = 0;
  return b;
}

Status run_plain(KernelFn plain, KernelContext& ctx, std::span<const TensorView> in, std::span<TensorView> out,
                 std::span<const AttrValue> attrs, const BlockedOperand& x, const BlockedOperand& y,
                 const BlockedOperand* residual) {
  std::vector<TensorView> ins(in.begin(), in.end());
  TensorView outs[1] = {y.logical};
  FloatBuffer xs, ys;
  if (x.act.blocked) {
    if (!xs.alloc(x.act.n * x.act.c * x.act.h * x.act.w)) return op_error(StatusCode::kUnavailable, "layout", "cannot allocate a plain copy");
    nc::to_plain(x.act.data, xs.data.get(), x.act.n, x.act.c, x.act.h * x.act.w, ctx.pool());
    ins[0] = x.logical;
    ins[0].data = xs.data.get();
  }
  if (y.act.blocked) {
    if (!ys.alloc(y.act.n * y.act.c * y.act.h * y.act.w)) return op_error(StatusCode::kUnavailable, "layout", "cannot allocate a plain copy");
    outs[0].data = ys.data.get();
  }
  PlainContext plain_ctx(ctx, residual != nullptr);
  KILN_RETURN_IF_ERROR(plain(plain_ctx, ins, std::span<TensorView>(outs, 1), attrs));
  if (residual != nullptr) {  // y = act(y + residual), on the plain result
    float* yp = outs[0].as<float>();
    const nc::Act& r = residual->act;
    const std::int64_t hw = y.act.h * y.act.w;
    for (std::int64_t i = 0; i < y.act.n; ++i) {
      for (std::int64_t c = 0; c < y.act.c; ++c) {
        float* row = yp + (i * y.act.c + c) * hw;
        const float* rimg = r.data + i * r.image_floats();
        for (std::int64_t p = 0; p < hw; ++p) row[p] += rimg[r.offset(c, p / y.act.w, p % y.act.w)];
        apply_activation(ctx.fused_activation(), row, hw);
      }
    }
  }
  if (y.act.blocked) nc::to_blocked(ys.data.get(), out[0].as<float>(), y.act.n, y.act.c, y.act.h * y.act.w, ctx.pool());
  return Status::Ok();
}

namespace {

// KernelContext::input_scale's s for image i: the C floats of its scale (s is [N or 1, C,
// 1, 1], plain or blocked: with H = W = 1 both store channel c of an image at c, padded
// to whole blocks when blocked).
struct ChannelScale {
  const float* data = nullptr;
  std::int64_t image_stride = 0;  // 0: one scale for every image
  const float* of(std::int64_t i) const { return data + i * image_stride; }
};

Result<ChannelScale> channel_scale(const TensorView& v, bool blocked, const BlockedOperand& x) {
  const std::int64_t c = x.act.c;
  bool ok = v.dtype == DType::kF32;
  std::int64_t n = 0, stored = 0;
  if (blocked) {
    ok = ok && v.rank == 5 && v.shape[1] * nc::kBlock == nc::padded_channels(c) && v.shape[2] == 1 && v.shape[3] == 1 &&
         v.shape[4] == nc::kBlock;
    stored = nc::padded_channels(c);
  } else {
    ok = ok && v.rank == 4 && v.shape[1] == c && v.shape[2] == 1 && v.shape[3] == 1;
    stored = c;
  }
  if (ok) n = v.shape[0];
  if (!ok || (n != 1 && n != x.act.n)) {
    return invalid("conv2d", "the fused input scale's shape ", shape_text(v), " is not [", x.act.n, " or 1, ", c, ", 1, 1]");
  }
  return ChannelScale{v.as<float>(), n == 1 ? 0 : stored};
}

// dst = x * s per channel, in x's layout.
void scale_channels(const nc::Act& x, const ChannelScale& s, float* dst, ThreadPool& pool) {
  const std::int64_t hw = x.h * x.w, planes = x.n * (x.blocked ? x.stored_channels() / nc::kBlock : x.c);
  const std::int64_t plane = x.blocked ? hw * nc::kBlock : hw;
  pool.parallel_for(planes, pool.even_grain(planes, plane, 16384), [&](std::int64_t first, std::int64_t last) {
    for (std::int64_t i = first; i < last; ++i) {
      const std::int64_t per_image = planes / x.n, img = i / per_image, k = i % per_image;
      const float* src = x.data + i * plane;
      float* d = dst + i * plane;
      const float* sc = s.of(img);
      if (x.blocked) {
        // Padded lanes: scale 0 would do, but their s may hold anything finite; keep them finite.
        float f[nc::kBlock];
        for (std::int64_t l = 0; l < nc::kBlock; ++l) f[l] = k * nc::kBlock + l < x.c ? sc[k * nc::kBlock + l] : 0.0f;
        for (std::int64_t p = 0; p < hw; ++p) {
          for (std::int64_t l = 0; l < nc::kBlock; ++l) d[p * nc::kBlock + l] = src[p * nc::kBlock + l] * f[l];
        }
      } else {
        const float f = sc[k];
        for (std::int64_t p = 0; p < hw; ++p) d[p] = src[p] * f;
      }
    }
  });
}

}  // namespace

namespace {

// conv2d's fused residual (KernelContext::residual) as an operand of y's shape; an empty
// operand (act.data null) when there is none.
Result<BlockedOperand> residual_operand(const KernelContext& ctx, const BlockedOperand& y) {
  bool blocked = false;
  const TensorView* rv = ctx.residual(&blocked);
  if (rv == nullptr) return BlockedOperand{};
  KILN_ASSIGN_OR_RETURN(const BlockedOperand residual, blocked_operand("conv2d", "residual", *rv, blocked, y.act.c));
  if (residual.logical.dtype != DType::kF32 || residual.act.n != y.act.n || residual.act.c != y.act.c ||
      residual.act.h != y.act.h || residual.act.w != y.act.w) {
    return invalid("conv2d", "residual.shape=", shape_text(residual.logical), " but out.shape=", shape_text(y.logical));
  }
  return residual;
}

// The contexts of conv2d_after_expansion's unfused path: the folded expansion's own (its
// prepared weights and activation, its input's layout, a blocked output) and the depthwise
// conv2d's without the fold.
class ExpansionContext final : public KernelContext {
 public:
  ExpansionContext(KernelContext& base, const FoldedConv& fc) : base_(base), fc_(fc) {}
  Result<TensorView> allocate_output(int index, DType dtype, std::span<const std::int64_t> shape) override {
    return base_.allocate_output(index, dtype, shape);
  }
  ThreadPool& pool() override { return base_.pool(); }
  const PreparedWeights* prepared_weights(int index) const override { return index == 1 ? fc_.prepared : nullptr; }
  FusedActivation fused_activation() const override { return fc_.act; }
  bool input_blocked(int index) const override { return index == 0 && fc_.input_blocked; }
  bool output_blocked(int index) const override { return index == 0; }

 private:
  KernelContext& base_;
  const FoldedConv& fc_;
};

class UnfoldedContext final : public KernelContext {
 public:
  explicit UnfoldedContext(KernelContext& base) : base_(base) {}
  Result<TensorView> allocate_output(int index, DType dtype, std::span<const std::int64_t> shape) override {
    return base_.allocate_output(index, dtype, shape);
  }
  ThreadPool& pool() override { return base_.pool(); }
  const PackedB* packed_b(int index) const override { return base_.packed_b(index); }
  const PreparedWeights* prepared_weights(int index) const override { return base_.prepared_weights(index); }
  FusedActivation fused_activation() const override { return base_.fused_activation(); }
  bool input_blocked(int index) const override { return base_.input_blocked(index); }
  bool output_blocked(int index) const override { return base_.output_blocked(index); }
  bool blocked_kernel() const override { return base_.blocked_kernel(); }
  const TensorView* residual(bool* blocked) const override { return base_.residual(blocked); }
  const TensorView* input_scale(bool* blocked) const override { return base_.input_scale(blocked); }

 private:
  KernelContext& base_;
};

// An expanded image smaller than this stays in L2 between the two convolutions anyway,
// and there the fused kernel's bands cost more than they save: shufflenet_v2_x0_5's 48- and
// 96-channel branches at 14x14 and 7x7 (38 and 19 KB) took 16 and 12 us fused against 10
// and 8 us apart (2 threads; the whole network 4 % slower), while its 24 channels at 28x28
// (75 KB) took 28 us fused against 37. Below it, the expansion runs into a scratch tensor
// and the depthwise conv reads that, as if unfolded.
constexpr std::int64_t kFoldMinImageBytes = 64 << 10;

bool same_conv(const nc::ConvShape& a, const nc::ConvShape& b) {
  return a.in_channels == b.in_channels && a.out_channels == b.out_channels && a.groups == b.groups && a.kh == b.kh &&
         a.kw == b.kw;
}

// A blocked conv2d whose input 0 the folded 1x1 expansion before it makes
// (KernelContext::folded_conv; executor: fuse_expansions): both nodes' checks on logical
// views, then nchwc::conv2d_expand_depthwise; when a prepared weight or a layout that
// kernel needs is missing, or the expanded image is small (kFoldMinImageBytes), the
// expansion into a scratch tensor and this conv2d on it.
Status conv2d_after_expansion(KernelContext& ctx, const FoldedConv& fc, std::span<const TensorView> in,
                              std::span<TensorView> out, std::span<const AttrValue> attrs) {
  if (fc.inputs.size() < 2 || in.size() < 2 || out.size() != 1) {
    return invalid("conv2d", "a folded expansion needs its x and weight, and this conv2d its weight");
  }
  const TensorView& ew = fc.inputs[1];
  const TensorView& dw = in[1];
  if (ew.rank != 4 || ew.dtype != DType::kF32 || dw.rank != 4 || dw.dtype != DType::kF32) {
    return invalid("conv2d", "a folded expansion and its depthwise conv2d need 4-D f32 weights, got ", shape_text(ew),
                   " and ", shape_text(dw));
  }
  KILN_ASSIGN_OR_RETURN(const BlockedOperand x0, blocked_operand("conv2d", "x", fc.inputs[0], fc.input_blocked, ew.shape[1]));
  KILN_ASSIGN_OR_RETURN(const BlockedOperand mid, blocked_operand("conv2d", "x", in[0], ctx.input_blocked(0), ew.shape[0]));
  KILN_ASSIGN_OR_RETURN(const BlockedOperand y, blocked_operand("conv2d", "out", out[0], ctx.output_blocked(0), dw.shape[0]));
  ConvCheck echeck, dcheck;
  std::vector<TensorView> logical(fc.inputs.begin(), fc.inputs.end());
  logical[0] = x0.logical;
  KILN_RETURN_IF_ERROR(conv2d_check(logical, mid.logical, fc.attrs, echeck));
  logical.assign(in.begin(), in.end());
  logical[0] = mid.logical;
  KILN_RETURN_IF_ERROR(conv2d_check(logical, y.logical, attrs, dcheck));
  const TensorView* rv = ctx.residual(nullptr);
  KILN_ASSIGN_OR_RETURN(const BlockedOperand residual, residual_operand(ctx, y));
  const auto* ep = static_cast<const ConvWeights*>(fc.prepared);
  const auto* dp = static_cast<const ConvWeights*>(ctx.prepared_weights(1));
  const nc::ConvShape& es = echeck.shape;
  const nc::ConvShape& ds = dcheck.shape;
  const bool fused = ep != nullptr && ep->nchwc_dense != nullptr && same_conv(ep->nchwc_shape, es) && dp != nullptr &&
                     dp->nchwc_depthwise != nullptr && same_conv(dp->nchwc_shape, ds) && mid.act.blocked &&
                     y.act.blocked && (rv == nullptr || residual.act.blocked) && es.kh == 1 && es.kw == 1 &&
                     es.stride_h == 1 && es.stride_w == 1 && es.pad_h == 0 && es.pad_w == 0 && es.dilation_h == 1 &&
                     es.dilation_w == 1 && es.groups == 1 && nc::depthwise_supported(ds);
  if (fused && mid.act.image_floats() * static_cast<std::int64_t>(sizeof(float)) >= kFoldMinImageBytes) {
    if (y.act.n * y.act.c * y.act.h * y.act.w == 0) return Status::Ok();
    const nc::Epilogue ee{echeck.bias, nullptr, fc.act};
    const nc::Epilogue de{dcheck.bias, rv != nullptr ? &residual.act : nullptr, ctx.fused_activation()};
    return nc::conv2d_expand_depthwise(x0.act, *ep->nchwc_dense, es, ee, *dp->nchwc_depthwise, ds, de, y.act, ctx.pool());
  }
  // Unfused: the expansion's output in a scratch tensor (in this conv2d's input layout).
  FloatBuffer scratch;
  if (!scratch.alloc(mid.act.floats())) {
    return op_error(StatusCode::kUnavailable, "conv2d", "cannot allocate the folded expansion's output");
  }
  TensorView mid_view[1] = {in[0]};
  mid_view[0].data = scratch.data.get();
  if (mid.act.blocked) {
    ExpansionContext ectx(ctx, fc);
    KILN_RETURN_IF_ERROR(conv2d_blocked(ectx, fc.inputs, mid_view, fc.attrs));
  } else {
    return op_error(StatusCode::kInternal, "conv2d", "a folded expansion's output must be blocked");
  }
  std::vector<TensorView> ins(in.begin(), in.end());
  ins[0] = mid_view[0];
  UnfoldedContext dctx(ctx);
  return conv2d_blocked(dctx, ins, out, attrs);
}

}  // namespace

std::uint64_t conv2d_workspace_bytes(const PreparedWeights* prepared_weights, std::span<const TensorView> in,
                                     const TensorView& out, std::span<const AttrValue> attrs, bool in_blocked,
                                     bool out_blocked, bool plain_residual, int threads) {
  const auto* prepared = static_cast<const ConvWeights*>(prepared_weights);
  if (prepared == nullptr || prepared->nchwc_winograd == nullptr || in.size() < 2) return 0;
  const TensorView& w = in[1];
  if (w.rank != 4 || attrs.size() < 4 || attrs[3].type != AttrType::kInt) return 0;
  auto x = blocked_operand("conv2d", "x", in[0], in_blocked, w.shape[1] * attrs[3].i);
  auto y = blocked_operand("conv2d", "out", out, out_blocked, w.shape[0]);
  if (!x.ok() || !y.ok()) return 0;
  // conv2d_blocked's choice: the same checks, the same cost rule.
  std::vector<TensorView> logical(in.begin(), in.end());
  logical[0] = x->logical;
  ConvCheck check;
  if (!conv2d_check(logical, y->logical, attrs, check).ok() || !same_conv(prepared->nchwc_shape, check.shape)) return 0;
  const nc::ConvShape& s = check.shape;
  if (!nc::winograd_supported(s) || !nc::winograd_preferred(s, y->act.n, y->act.h, y->act.w, threads)) return 0;
  return nc::winograd_workspace_bytes(*prepared->nchwc_winograd, s, x->act, y->act, plain_residual, threads);
}

Status conv2d_blocked(KernelContext& ctx, std::span<const TensorView> in_span, std::span<TensorView> out,
                      std::span<const AttrValue> attrs) {
  if (const FoldedConv* fc = ctx.folded_conv(); fc != nullptr) return conv2d_after_expansion(ctx, *fc, in_span, out, attrs);
  const TensorView& w = in_span[1];
  if (w.rank != 4 || w.dtype != DType::kF32 || attrs.size() < 4 || attrs[3].type != AttrType::kInt) {
    return invalid("conv2d", "a blocked conv2d needs a 4-D f32 weight and an int groups attribute");
  }
  const std::int64_t groups = attrs[3].i;
  KILN_ASSIGN_OR_RETURN(BlockedOperand x, blocked_operand("conv2d", "x", in_span[0], ctx.input_blocked(0), w.shape[1] * groups));
  KILN_ASSIGN_OR_RETURN(const BlockedOperand y, blocked_operand("conv2d", "out", out[0], ctx.output_blocked(0), w.shape[0]));
  const TensorView* rv = ctx.residual(nullptr);
  KILN_ASSIGN_OR_RETURN(const BlockedOperand residual, residual_operand(ctx, y));
  // A fused channel scale (conv(x * s)): scaled weights per image when they are smaller than
  // an image of x (the usual squeeze-excitation before a 1x1 projection), else x * s into a
  // scratch copy that every path below reads instead of x.
  bool scale_blocked = false;
  const TensorView* sv = ctx.input_scale(&scale_blocked);
  ChannelScale scale;
  FloatBuffer scaled_x;
  std::vector<TensorView> in_copy;
  std::span<const TensorView> in = in_span;
  if (sv != nullptr) {
    KILN_ASSIGN_OR_RETURN(scale, channel_scale(*sv, scale_blocked, x));
  }
  const auto* prepared = static_cast<const ConvWeights*>(ctx.prepared_weights(1));
  if (prepared != nullptr &&
      (prepared->nchwc_dense != nullptr || prepared->nchwc_dense_lazy || prepared->nchwc_depthwise != nullptr)) {
    // The plain kernel's checks (shapes, attributes, the output size) first: a blocked run
    // accepts exactly what the plain one does.
    ConvCheck check;
    std::vector<TensorView> logical(in.begin(), in.end());
    logical[0] = x.logical;
    KILN_RETURN_IF_ERROR(conv2d_check(logical, y.logical, attrs, check));
    const nc::ConvShape& s = check.shape;
    if (s.in_channels == prepared->nchwc_shape.in_channels && s.out_channels == prepared->nchwc_shape.out_channels &&
        s.groups == prepared->nchwc_shape.groups && s.kh == prepared->nchwc_shape.kh && s.kw == prepared->nchwc_shape.kw) {
      if (y.act.n * y.act.c * y.act.h * y.act.w == 0) return Status::Ok();
      nc::Epilogue e;
      e.bias = check.bias;
      e.act = ctx.fused_activation();
      e.residual = rv != nullptr ? &residual.act : nullptr;
      nc::Act xa = x.act, ya = y.act;
      const bool winograd = prepared->nchwc_winograd != nullptr && nc::winograd_supported(s) &&
                            nc::winograd_preferred(s, ya.n, ya.h, ya.w, ctx.pool().num_threads());
      const nc::DenseWeights* dense = winograd ? nullptr : prepared->nchwc_dense_for(w.as<float>());
      if (sv != nullptr && dense != nullptr && nc::dense_weight_floats(*dense) < xa.image_floats()) {
        for (std::int64_t i = 0; i < xa.n; ++i) {
          KILN_ASSIGN_OR_RETURN(auto wi, nc::scale_dense_inputs(*dense, scale.of(i), ctx.pool()));
          nc::Act xi = xa, yi = ya, ri;
          xi.data += i * xa.image_floats(), xi.n = 1;
          yi.data += i * ya.image_floats(), yi.n = 1;
          nc::Epilogue ei = e;
          if (e.residual != nullptr) {
            ri = *e.residual;
            ri.data += i * ri.image_floats(), ri.n = 1;
            ei.residual = &ri;
          }
          KILN_RETURN_IF_ERROR(nc::conv2d_dense(xi, *wi, s, ei, yi, ctx.pool()));
        }
        return Status::Ok();
      }
      if (sv != nullptr) {
        if (!scaled_x.alloc(xa.floats())) return op_error(StatusCode::kUnavailable, "conv2d", "cannot allocate the scaled input");
        scale_channels(xa, scale, scaled_x.data.get(), ctx.pool());
        xa.data = x.act.data = scaled_x.data.get();
        sv = nullptr;
      }
      Status st;
      if (winograd) {
        st = nc::conv2d_winograd(xa, *prepared->nchwc_winograd, s, e, ya, ctx.pool(), ctx.workspace());
      } else if (dense != nullptr) {
        st = nc::conv2d_dense(xa, *dense, s, e, ya, ctx.pool());
      } else if (prepared->nchwc_depthwise != nullptr) {
        st = nc::conv2d_depthwise(xa, *prepared->nchwc_depthwise, s, e, ya, ctx.pool());
      } else {
        st = Status(StatusCode::kUnsupported, "");  // the direct copy could not be made: the plain kernel
      }
      if (st.code() != StatusCode::kUnsupported) return st;
    }
  }
  if (sv != nullptr) {
    if (!scaled_x.alloc(x.act.floats())) return op_error(StatusCode::kUnavailable, "conv2d", "cannot allocate the scaled input");
    scale_channels(x.act, scale, scaled_x.data.get(), ctx.pool());
    x.act.data = scaled_x.data.get();
  }
  if (x.act.data != in_span[0].data) {
    in_copy.assign(in_span.begin(), in_span.end());
    in_copy[0].data = x.act.data;
    x.logical.data = x.act.data;
    in = in_copy;
  }
  return run_plain(Conv2d, ctx, in, out, attrs, x, y, rv != nullptr ? &residual : nullptr);
}

Status batch_norm_blocked(KernelContext& ctx, std::span<const TensorView> in, std::span<TensorView> out,
                          std::span<const AttrValue> attrs) {
  if (in.size() != 5 || out.size() != 1 || attrs.empty() || attrs[0].type != AttrType::kFloat) {
    return invalid("batch_norm", "expects x, weight?, bias?, running_mean, running_var and eps");
  }
  const double eps = attrs[0].f;
  // The channel count: a parameter's (every present one must agree with x's blocks).
  std::int64_t channels = -1;
  for (int i = 1; i < 5; ++i) {
    if (!is_absent(in[static_cast<std::size_t>(i)]) && in[static_cast<std::size_t>(i)].rank == 1) channels = in[static_cast<std::size_t>(i)].shape[0];
  }
  if (channels < 0 || is_absent(in[3]) || is_absent(in[4])) return invalid("batch_norm", "a blocked batch_norm needs running statistics of [C]");
  KILN_ASSIGN_OR_RETURN(const BlockedOperand x, blocked_operand("batch_norm", "x", in[0], ctx.input_blocked(0), channels));
  KILN_ASSIGN_OR_RETURN(const BlockedOperand y, blocked_operand("batch_norm", "out", out[0], ctx.output_blocked(0), channels));
  const char* names[4] = {"weight", "bias", "running_mean", "running_var"};
  for (int i = 1; i < 5; ++i) {
    const TensorView& t = in[static_cast<std::size_t>(i)];
    if (is_absent(t)) continue;
    if (t.dtype != DType::kF32 || t.rank != 1 || t.shape[0] != channels) {
      return invalid("batch_norm", names[i - 1], ".shape=", shape_text(t), " but x has ", channels, " channels");
    }
  }
  if (x.logical.dtype != DType::kF32 || y.logical.dtype != DType::kF32 || x.act.n != y.act.n || x.act.h != y.act.h ||
      x.act.w != y.act.w) {
    return invalid("batch_norm", "out.shape=", shape_text(y.logical), " but x.shape=", shape_text(x.logical));
  }
  if (!x.act.blocked || !y.act.blocked) return run_plain(BatchNorm, ctx, in, out, attrs, x, y, nullptr);
  // Per channel y = x * scale + shift (computed in double like the plain kernel); padded
  // lanes get 0 * x + 0.
  const std::int64_t blocks = nc::padded_channels(channels) / nc::kBlock, hw = x.act.h * x.act.w;
  std::vector<float> scale(static_cast<std::size_t>(blocks * nc::kBlock), 0.0f), shift(scale.size(), 0.0f);
  const float* w = is_absent(in[1]) ? nullptr : in[1].as<float>();
  const float* b = is_absent(in[2]) ? nullptr : in[2].as<float>();
  const float* mean = in[3].as<float>();
  const float* var = in[4].as<float>();
  for (std::int64_t c = 0; c < channels; ++c) {
    const double s = (w != nullptr ? w[c] : 1.0) / std::sqrt(static_cast<double>(var[c]) + eps);
    scale[static_cast<std::size_t>(c)] = static_cast<float>(s);
    shift[static_cast<std::size_t>(c)] = static_cast<float>((b != nullptr ? b[c] : 0.0) - mean[c] * s);
  }
  const FusedActivation act = ctx.fused_activation();
  const std::int64_t items = x.act.n * blocks;
  ctx.pool().parallel_for(items, ctx.pool().even_grain(items, hw * nc::kBlock, 16384), [&](std::int64_t i0, std::int64_t i1) {
    for (std::int64_t i = i0; i < i1; ++i) {
      const std::int64_t blk = i % blocks;
      const float* sc = scale.data() + blk * nc::kBlock;
      const float* sh = shift.data() + blk * nc::kBlock;
      const float* src = x.act.data + i * hw * nc::kBlock;
      float* dst = y.act.data + i * hw * nc::kBlock;
      for (std::int64_t p = 0; p < hw; ++p) {
        for (std::int64_t l = 0; l < nc::kBlock; ++l) dst[p * nc::kBlock + l] = src[p * nc::kBlock + l] * sc[l] + sh[l];
      }
      apply_activation(act, dst, hw * nc::kBlock);
    }
  });
  return Status::Ok();
}

const nchwc::DenseWeights* ConvWeights::nchwc_dense_for(const float* w) const {
  if (!nchwc_dense_lazy) return nchwc_dense.get();
  std::call_once(nchwc_dense_once, [&] {
    // From the weight as the program holds it: its mapped pages, if released after load,
    // fault back in from the file.
    auto made = nchwc::prepare_dense(w, nchwc_shape);
    if (made.ok()) nchwc_dense = std::move(made).value();  // else null: the plain kernel
  });
  return nchwc_dense.get();
}

Result<std::unique_ptr<PreparedWeights>> conv2d_prepare_blocked(const TensorView& weight, std::span<const AttrValue> attrs) {
  std::unique_ptr<PreparedWeights> none;
  if (weight.dtype != DType::kF32 || weight.rank != 4 || attrs.size() < 4 || attrs[3].type != AttrType::kInt) return none;
  nc::ConvShape s;
  s.groups = attrs[3].i;
  s.out_channels = weight.shape[0];
  s.in_channels = weight.shape[1] * s.groups;
  s.kh = weight.shape[2];
  s.kw = weight.shape[3];
  auto prepared = std::unique_ptr<ConvWeights>(new (std::nothrow) ConvWeights());
  if (prepared == nullptr) return op_error(StatusCode::kUnavailable, "conv2d", "cannot allocate prepared weights");
  prepared->nchwc_shape = s;
  if (nc::depthwise_supported(s)) {
    KILN_ASSIGN_OR_RETURN(prepared->nchwc_depthwise, nc::prepare_depthwise(weight.as<float>(), s));
  } else if (nc::dense_supported(s)) {
    // KILN_CONV_WINOGRAD=0: no Winograd. Only where the attributes allow it: a strided 3x3
    // layer holding Winograd's kernels would also make the direct kernel's copy on its first
    // run and read its raw weight back in (twice its size, resident).
    if (nc::winograd_supported(s) && conv_attrs_winograd(attrs, 2) && conv_winograd_enabled()) {
      auto winograd = nc::prepare_winograd(weight.as<float>(), s);
      if (winograd.ok()) prepared->nchwc_winograd = std::move(winograd).value();  // else the direct kernel only
    }
    // With Winograd, the direct kernel's copy waits for a run that picks it (nchwc_dense_for).
    prepared->nchwc_dense_lazy = prepared->nchwc_winograd != nullptr;
    if (!prepared->nchwc_dense_lazy) {
      KILN_ASSIGN_OR_RETURN(prepared->nchwc_dense, nc::prepare_dense(weight.as<float>(), s));
    }
  } else {
    return none;
  }
  return std::unique_ptr<PreparedWeights>(std::move(prepared));
}

namespace {

// mean over H and W of a 4-D x: dims {2, 3} (either order; export normalizes negative
// dims), keepdim giving [N, C, 1, 1] or [N, C].
Status mean_hw_check(const BlockedOperand& x, const BlockedOperand& y, std::span<const AttrValue> attrs) {
  if (attrs.size() < 2 || attrs[0].type != AttrType::kInts || attrs[0].ints.size() != 2 || attrs[1].type != AttrType::kBool) {
    return invalid("mean", "a blocked mean needs dims {2, 3} and keepdim");
  }
  const std::int64_t a = attrs[0].ints[0], b = attrs[0].ints[1];
  if (std::min(a, b) != 2 || std::max(a, b) != 3) return invalid("mean", "a blocked mean reduces dims 2 and 3, not ", a, " and ", b);
  const TensorView& v = y.logical;
  const bool keep = attrs[1].i != 0;
  const bool ok = keep ? v.rank == 4 && v.shape[0] == x.act.n && v.shape[1] == x.act.c && v.shape[2] == 1 && v.shape[3] == 1
                       : v.rank == 2 && v.shape[0] == x.act.n && v.shape[1] == x.act.c;
  if (!ok || v.dtype != DType::kF32) return invalid("mean", "out.shape=", shape_text(v), " for x.shape=", shape_text(x.logical));
  return Status::Ok();
}

}  // namespace

Status pool_blocked(OpKind op, KernelFn plain, KernelContext& ctx, std::span<const TensorView> in,
                    std::span<TensorView> out, std::span<const AttrValue> attrs) {
  const char* name = op_info(op).name.data();
  if (in.size() != 1 || out.size() != 1) return invalid(name, "expects one input and one output");
  // The channel count: the plain side's, else every lane (pools keep channels apart).
  std::int64_t channels = -1;
  if (!ctx.input_blocked(0) && in[0].rank == 4) channels = in[0].shape[1];
  if (!ctx.output_blocked(0) && out[0].rank >= 2) channels = out[0].shape[1];
  KILN_ASSIGN_OR_RETURN(const BlockedOperand x, blocked_operand(name, "x", in[0], ctx.input_blocked(0), channels));
  TensorView yv = out[0];
  BlockedOperand y;
  if (!ctx.output_blocked(0) && yv.rank == 2) {  // mean(keepdim=False): [N, C]
    y.act = {yv.as<float>(), yv.shape[0], yv.shape[1], 1, 1, false};
    y.logical = yv;
  } else {
    KILN_ASSIGN_OR_RETURN(y, blocked_operand(name, "out", yv, ctx.output_blocked(0), x.act.c));
  }
  if (x.logical.dtype != DType::kF32) return run_plain(plain, ctx, in, out, attrs, x, y, nullptr);
  Status st = Status(StatusCode::kUnsupported, "no blocked kernel");
  if (op == OpKind::Mean) {
    KILN_RETURN_IF_ERROR(mean_hw_check(x, y, attrs));
    st = nc::mean_hw(x.act, y.act, ctx.pool());
  } else {
    nc::PoolShape s;
    KILN_RETURN_IF_ERROR(pool2d_check(op, x.logical, y.logical, attrs, s));
    if (op == OpKind::MaxPool2d) st = nc::max_pool2d(x.act, s, y.act, ctx.pool());
    if (op == OpKind::AvgPool2d) st = nc::avg_pool2d(x.act, s, y.act, ctx.pool());
    if (op == OpKind::AdaptiveAvgPool2d) st = nc::adaptive_avg_pool2d(x.act, y.act, ctx.pool());
  }
  if (st.code() != StatusCode::kUnsupported) return st;
  return run_plain(plain, ctx, in, out, attrs, x, y, nullptr);
}

}  // namespace kiln::cpu::kernels

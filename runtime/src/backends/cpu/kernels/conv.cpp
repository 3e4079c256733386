// conv2d (NCHW, or unbatched CHW) with stride, padding, dilation and groups. The paths:
// - depthwise (one input and output channel per group) up to 16 kernel rows and 64 taps,
//   any stride, padding and dilation (use_depthwise_blocked): SimdKernels::
//   conv_depthwise_block on blocks of 8 channels, the channels in the vector lanes (input
//   rows transposed once into a ring, output rows transposed back), relu/relu6/hardswish in
//   the kernel; KILN_CONV_DEPTHWISE=rows / =0 select the two older depthwise kernels below;
// - depthwise with a column stride >= 2 or stride-1 rows of >= 32 pixels (use_depthwise,
//   KILN_CONV_DEPTHWISE=rows): SimdKernels::conv_depthwise_rows per plane;
// - up to kDirectMaxOut output channels per group, kernels of 2 to 64 taps: a direct
//   convolution over a padded, phase-split copy of the input (SimdKernels::
//   conv_direct_rows), where a GEMM would have too few rows to fill its micro-kernel;
//   the other depthwise convolutions take it too, 4 channels per tile;
// - depthwise 1x1 (or over 64 taps): a direct loop per plane;
// - 3x3 stride-1 ungrouped convolutions with enough channels and tiles (winograd_profitable):
//   Winograd F(4x4, 3x3) (conv_winograd.h);
// - 1x1 stride-1 unpadded ungrouped convolutions over few pixels with prepared weights
//   (pointwise_transposed_profitable: 7x7 planes, squeeze-excitation's single pixel):
//   Y^T = X^T W^T on the SGEMM with W^T packed on first use (conv_pointwise.h);
// - otherwise a GEMM per (image, group), W_g [out x patch] times the patches, bias and
//   activation in the SGEMM's epilogue. With weights prepared at load (ConvWeights::gemm,
//   conv_prepared.h) W_g is the prepacked A of sgemm_packed_a and the patches are written
//   straight into its packed B panels (im2col_panels; 1x1 stride-1 unpadded convolutions
//   pack the NCHW planes as they are), so a run packs only the activations, once. Without
//   them: im2col tiles of a few output rows + sgemm, which packs both operands per call.
// f32 (f16/bf16 via f32).
#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <string_view>

#include "backends/cpu/gemm/gemm.h"
#include "backends/cpu/gemm/gemm_packed_a.h"
#include "backends/cpu/kernels/common.h"
#include "backends/cpu/kernels/conv_pointwise.h"
#include "backends/cpu/kernels/conv_prepared.h"
#include "backends/cpu/kernels/conv_winograd.h"
#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/kernels/layout_kernels.h"
#include "backends/cpu/kernels/simd.h"
#include "backends/cpu/kernels/window.h"
#include "backends/cpu/thread_pool.h"
#include "kernel/attrs.h"

namespace kiln::cpu::kernels {
namespace {

struct ConvGeometry {
  Planes in;
  std::int64_t out_channels = 0, groups = 1;
  std::int64_t kh = 0, kw = 0;
  std::array<std::int64_t, 2> stride{}, padding{}, dilation{};
  std::int64_t oh = 0, ow = 0;
  std::int64_t group_in() const { return in.channels / groups; }
  std::int64_t group_out() const { return out_channels / groups; }
  std::int64_t patch() const { return group_in() * kh * kw; }
};

// im2col rows for output rows [oh0, oh1) of one image and group:
// col[(c * kh + i) * kw + j][(oh - oh0) * ow + x] = input[c][oh*sh - ph + i*dh][x*sw - pw + j*dw].
void im2col(const float* src, const ConvGeometry& g, std::int64_t oh0, std::int64_t oh1, float* col) {
  const std::int64_t cols = (oh1 - oh0) * g.ow;
  const std::int64_t h = g.in.height, w = g.in.width;
  for (std::int64_t c = 0; c < g.group_in(); ++c) {
    const float* plane = src + c * h * w;
    for (std::int64_t i = 0; i < g.kh; ++i) {
      for (std::int64_t j = 0; j < g.kw; ++j) {
        float* dst = col + ((c * g.kh + i) * g.kw + j) * cols;
        const std::int64_t dx = j * g.dilation[1] - g.padding[1];
        // Output columns whose input column x*sw + dx lies in [0, w).
        std::int64_t x_lo = dx >= 0 ? 0 : (-dx + g.stride[1] - 1) / g.stride[1];
        std::int64_t x_hi = w - dx <= 0 ? 0 : (w - dx - 1) / g.stride[1] + 1;
        x_lo = std::min(x_lo, g.ow);
        x_hi = std::clamp(x_hi, x_lo, g.ow);
        for (std::int64_t oy = oh0; oy < oh1; ++oy, dst += g.ow) {
          const std::int64_t y = oy * g.stride[0] - g.padding[0] + i * g.dilation[0];
          if (y < 0 || y >= h) {
            std::fill(dst, dst + g.ow, 0.0f);
            continue;
          }
          const float* row = plane + y * w;
          std::fill(dst, dst + x_lo, 0.0f);
          if (g.stride[1] == 1) {
            std::copy(row + x_lo + dx, row + x_hi + dx, dst + x_lo);
          } else {
            for (std::int64_t x = x_lo; x < x_hi; ++x) dst[x] = row[x * g.stride[1] + dx];
          }
          std::fill(dst + x_hi, dst + g.ow, 0.0f);
        }
      }
    }
  }
}

// im2col written straight into sgemm_packed_a's B panels (PackBFn): rows [k0, k0 + kc) of
// the patch matrix (k = (c * kh + i) * kw + j) x output pixels [j0, j0 + cols) of one image
// and group, 16 pixels per panel (a panel may span output rows), zeros for padding. Each
// panel's lanes get their input origin (oy * sh - ph, ox * sw - pw) once; a patch row then
// adds its tap's offset: a panel inside one output row whose taps fall inside the input row
// (stride 1) is a 16-float copy, the others a checked load per lane. The tap (c, i, j) of
// row k advances with k, no division per row.
void im2col_panels(const float* src, const ConvGeometry& g, std::int64_t k0, std::int64_t kc, std::int64_t j0,
                   std::int64_t cols, float* out) {
  const std::int64_t h = g.in.height, w = g.in.width, plane_floats = h * w;
  const std::int64_t sh = g.stride[0], sw = g.stride[1], dh = g.dilation[0], dw = g.dilation[1];
  for (std::int64_t q = 0; q * 16 < cols; ++q) {
    const std::int64_t lanes = std::min<std::int64_t>(16, cols - q * 16);
    std::int64_t y0[16], x0[16];
    for (std::int64_t l = 0; l < lanes; ++l) {
      const std::int64_t p = j0 + q * 16 + l, oy = p / g.ow, ox = p % g.ow;
      y0[l] = oy * sh - g.padding[0];
      x0[l] = ox * sw - g.padding[1];
    }
    // One output row: every lane reads the same input row, columns x0[0] + l * sw + dx.
    const bool one_row = y0[lanes - 1] == y0[0];
    float* dst = out + q * kc * 16;
    std::int64_t c = k0 / (g.kh * g.kw), i = k0 / g.kw % g.kh, j = k0 % g.kw;
    for (std::int64_t t = 0; t < kc; ++t, dst += 16) {
      const float* plane = src + c * plane_floats;
      const std::int64_t dy = i * dh, dx = j * dw;
      if (one_row) {
        const std::int64_t y = y0[0] + dy, xa = x0[0] + dx, xb = x0[lanes - 1] + dx;
        if (y < 0 || y >= h) {
          std::fill(dst, dst + 16, 0.0f);
        } else if (sw == 1 && xa >= 0 && xb < w && lanes == 16) {
          const float* row = plane + y * w + xa;
          for (int l = 0; l < 16; ++l) dst[l] = row[l];
        } else {
          const float* row = plane + y * w;
          for (std::int64_t l = 0; l < lanes; ++l) {
            const std::int64_t x = x0[l] + dx;
            dst[l] = x >= 0 && x < w ? row[x] : 0.0f;
          }
          std::fill(dst + lanes, dst + 16, 0.0f);
        }
      } else {
        for (std::int64_t l = 0; l < lanes; ++l) {
          const std::int64_t y = y0[l] + dy, x = x0[l] + dx;
          dst[l] = y >= 0 && y < h && x >= 0 && x < w ? plane[y * w + x] : 0.0f;
        }
        std::fill(dst + lanes, dst + 16, 0.0f);
      }
      if (++j == g.kw) {
        j = 0;
        if (++i == g.kh) i = 0, ++c;
      }
    }
  }
}

// One (image, group) with prepacked weights: dst [out][oh*ow] = act(W_g * patches + bias).
Status conv_group_packed(const float* x, const PackedA& wg, const float* bias, float* y, const ConvGeometry& g,
                         std::int64_t n, std::int64_t grp, GemmActivation act, ThreadPool* pool) {
  const std::int64_t spatial = g.oh * g.ow, in_plane = g.in.height * g.in.width;
  const float* src = x + (n * g.in.channels + grp * g.group_in()) * in_plane;
  GemmParams p;
  p.m = g.group_out();
  p.n = spatial;
  p.k = g.patch();
  p.c = y + (n * g.out_channels + grp * g.group_out()) * spatial;
  p.ldc = spatial;
  p.bias = bias != nullptr ? bias + grp * g.group_out() : nullptr;
  p.bias_kind = bias != nullptr ? GemmBias::kPerRow : GemmBias::kNone;
  p.activation = act;
  const bool plain = g.kh == 1 && g.kw == 1 && g.stride[0] == 1 && g.stride[1] == 1 && g.padding[0] == 0 &&
                     g.padding[1] == 0;
  if (plain) {  // the patch matrix is the NCHW planes themselves
    p.b = src;
    p.ldb = spatial;
    return sgemm_packed_a(p, wg, pool);
  }
  return sgemm_packed_a(
      p, wg,
      [&](std::int64_t k0, std::int64_t kc, std::int64_t j0, std::int64_t cols, float* out) {
        im2col_panels(src, g, k0, kc, j0, cols, out);
      },
      pool);
}

// Every (image, group) of a convolution with prepacked weights: many small problems
// (batches, groups) one per thread at a time, else one at a time, each over the pool.
Status conv_packed(const float* x, const ConvWeights& prepared, const float* bias, float* y, const ConvGeometry& g,
                   GemmActivation act, ThreadPool& pool) {
  const std::int64_t items = g.in.batch * g.groups;
  const double flops = 2.0 * static_cast<double>(g.group_out()) * static_cast<double>(g.patch()) *
                       static_cast<double>(g.oh * g.ow);
  if (pool.num_threads() > 1 && items >= 2 * pool.num_threads() && flops < 4.0e7) {
    std::atomic<bool> failed{false};
    pool.parallel_for(items, 1, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t it = begin; it < end; ++it) {
        const std::int64_t grp = it % g.groups;
        if (!conv_group_packed(x, prepared.gemm[grp], bias, y, g, it / g.groups, grp, act, nullptr).ok()) failed = true;
      }
    });
    if (failed) return op_error(StatusCode::kUnavailable, "conv2d", "the GEMM could not allocate its buffers");
    return Status::Ok();
  }
  for (std::int64_t it = 0; it < items; ++it) {
    const std::int64_t grp = it % g.groups;
    KILN_RETURN_IF_ERROR(conv_group_packed(x, prepared.gemm[grp], bias, y, g, it / g.groups, grp, act, &pool));
  }
  return Status::Ok();
}

// One output channel of a depthwise convolution (one input channel per group): a direct
// loop, much cheaper than a one-row GEMM over an im2col buffer.
void depthwise_plane(const float* src, const float* wk, float bias, float* dst, const ConvGeometry& g) {
  const std::int64_t h = g.in.height, w = g.in.width;
  for (std::int64_t oy = 0; oy < g.oh; ++oy) {
    float* out = dst + oy * g.ow;
    std::fill(out, out + g.ow, bias);
    for (std::int64_t i = 0; i < g.kh; ++i) {
      const std::int64_t y = oy * g.stride[0] - g.padding[0] + i * g.dilation[0];
      if (y < 0 || y >= h) continue;
      const float* row = src + y * w;
      for (std::int64_t j = 0; j < g.kw; ++j) {
        const float wv = wk[i * g.kw + j];
        const std::int64_t dx = j * g.dilation[1] - g.padding[1];
        std::int64_t x_lo = dx >= 0 ? 0 : (-dx + g.stride[1] - 1) / g.stride[1];
        std::int64_t x_hi = w - dx <= 0 ? 0 : (w - dx - 1) / g.stride[1] + 1;
        x_lo = std::min(x_lo, g.ow);
        x_hi = std::clamp(x_hi, x_lo, g.ow);
        if (g.stride[1] == 1) {
          const float* in = row + dx;
          for (std::int64_t x = x_lo; x < x_hi; ++x) out[x] += wv * in[x];
        } else {
          for (std::int64_t x = x_lo; x < x_hi; ++x) out[x] += wv * row[x * g.stride[1] + dx];
        }
      }
    }
  }
}

// One GEMM block of conv_group: dst[out][cols] = act(wg * src + bias) on the packed SGEMM
// with the bias and activation in its epilogue (no extra passes over the output); if the
// SGEMM cannot allocate, matmul_f32's fallback loops and separate passes.
void conv_gemm(const ConvGeometry& g, const float* wg, const float* src, std::int64_t cols, const float* bias,
               GemmActivation act, float* dst, std::int64_t ld, ThreadPool* pool) {
  const std::int64_t rows = g.group_out(), patch = g.patch();
  GemmParams p;
  p.m = rows;
  p.n = cols;
  p.k = patch;
  p.a = wg;
  p.lda = patch;
  p.b = src;
  p.ldb = cols;
  p.c = dst;
  p.ldc = ld;
  p.bias = bias;
  p.bias_kind = bias != nullptr ? GemmBias::kPerRow : GemmBias::kNone;
  p.activation = act;
  if (patch > 0 && sgemm(p, pool).ok()) return;
  matmul_f32(rows, cols, patch, wg, patch, src, cols, false, dst, ld, pool);
  for (std::int64_t o = 0; o < rows; ++o) {
    float* row = dst + o * ld;
    if (bias != nullptr) {
      for (std::int64_t i = 0; i < cols; ++i) row[i] += bias[o];
    }
    apply_activation(act, row, cols);
  }
}

// One (image, group): im2col tiles (none for unpadded stride-1 1x1 convolutions: the GEMM
// reads the NCHW planes directly) + GEMM with the bias and activation fused.
Status conv_group(const float* x, const float* w, const float* bias, float* y, const ConvGeometry& g, std::int64_t n,
                  std::int64_t grp, float* col, std::int64_t tile, GemmActivation act, ThreadPool* pool) {
  const std::int64_t spatial = g.oh * g.ow;
  const std::int64_t patch = g.patch();
  const std::int64_t in_plane = g.in.height * g.in.width;
  const float* src = x + (n * g.in.channels + grp * g.group_in()) * in_plane;
  const float* wg = w + grp * g.group_out() * patch;
  const float* bg = bias != nullptr ? bias + grp * g.group_out() : nullptr;
  float* dst = y + (n * g.out_channels + grp * g.group_out()) * spatial;
  if (g.group_in() == 1 && g.group_out() == 1) {
    depthwise_plane(src, wg, bg != nullptr ? *bg : 0.0f, dst, g);
    apply_activation(act, dst, spatial);
    return Status::Ok();
  }
  if (col == nullptr) {
    conv_gemm(g, wg, src, spatial, bg, act, dst, spatial, pool);
    return Status::Ok();
  }
  for (std::int64_t oh0 = 0; oh0 < g.oh; oh0 += tile) {
    const std::int64_t oh1 = std::min(g.oh, oh0 + tile);
    im2col(src, g, oh0, oh1, col);
    conv_gemm(g, wg, col, (oh1 - oh0) * g.ow, bg, act, dst + oh0 * g.ow, spatial, pool);
  }
  return Status::Ok();
}

// Output channels per group up to which the direct path beats im2col + GEMM. Measured on
// AVX2, 3x3, 2 threads: at 16 channels 130 vs 30 GFLOP/s (a 16-row GEMM runs its 6x16
// micro-kernel a third empty and pays for im2col), at 64 133 vs 95, at 128 on par, at 256
// GEMM wins 118 vs 67 (the direct tile's input rows no longer fit in L1).
constexpr std::int64_t kDirectMaxOut = 64;

// A comparison switch: on unless the environment variable `name` is "0".
bool switched_on(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr || std::string_view(v) != "0";
}

// KILN_CONV_WINOGRAD=0 turns the Winograd path off (to compare speed, or to rule out its
// larger rounding error); read once.
bool winograd_enabled() {
  static const bool enabled = switched_on("KILN_CONV_WINOGRAD");
  return enabled;
}

// KILN_CONV_PREPACK=0 leaves the GEMM paths' weights unprepared (the per-call im2col +
// sgemm), to compare speed; read once.
bool prepack_enabled() {
  static const bool enabled = switched_on("KILN_CONV_PREPACK");
  return enabled;
}

// Which kernel takes depthwise convolutions: KILN_CONV_DEPTHWISE=0 the older paths (direct
// tiles over a padded copy, per-plane loops), =rows the per-plane rows kernel
// (conv_depthwise_rows), otherwise the channel-blocked kernel (conv_depthwise_block); to
// compare speed; read once.
enum class DepthwiseKernel { kOff, kRows, kBlocked };
DepthwiseKernel depthwise_kernel() {
  static const DepthwiseKernel kernel = [] {
    const char* v = std::getenv("KILN_CONV_DEPTHWISE");
    if (v != nullptr && std::string_view(v) == "0") return DepthwiseKernel::kOff;
    if (v != nullptr && std::string_view(v) == "rows") return DepthwiseKernel::kRows;
    return DepthwiseKernel::kBlocked;
  }();
  return kernel;
}

// KILN_CONV_POINTWISE=0 keeps 1x1 convolutions over few pixels on the plain GEMM instead
// of the transposed one (conv_pointwise.h), to compare speed; read once.
bool pointwise_enabled() {
  static const bool enabled = switched_on("KILN_CONV_POINTWISE");
  return enabled;
}

// The Winograd shape of g, when g is a 3x3 stride-1 dilation-1 ungrouped convolution.
bool winograd_shape(const ConvGeometry& g, WinogradShape& s) {
  if (!winograd_enabled() || g.kh != 3 || g.kw != 3 || g.groups != 1) return false;
  if (g.stride[0] != 1 || g.stride[1] != 1 || g.dilation[0] != 1 || g.dilation[1] != 1) return false;
  s = WinogradShape{.n = g.in.batch, .c = g.in.channels, .h = g.in.height, .w = g.in.width, .k = g.out_channels,
                    .pad_h = g.padding[0], .pad_w = g.padding[1], .oh = g.oh, .ow = g.ow};
  return true;
}

bool use_direct(const ConvGeometry& g) {
  return g.group_out() <= kDirectMaxOut && g.kh * g.kw <= 64 && g.kh * g.kw > 1;
}

Status conv_direct(const float* x, const float* w, const float* bias, float* y, const ConvGeometry& g,
                   ThreadPool& pool, bool relu) {
  // Depthwise (one input and output channel per group): blocks of 4 groups share a tile,
  // each channel over its own plane.
  const bool depthwise = g.group_in() == 1 && g.group_out() == 1;
  const std::int64_t cin = g.group_in(), cout = g.group_out(), taps = g.kh * g.kw;
  const std::int64_t sw = g.stride[1];
  const std::int64_t hp = g.in.height + 2 * g.padding[0];
  const std::int64_t wp = g.in.width + 2 * g.padding[1];
  const std::int64_t phase_stride = (wp + sw - 1) / sw;
  const std::int64_t row_stride = sw * phase_stride;
  const std::int64_t channel_stride = hp * row_stride;
  const std::int64_t image_floats = g.in.channels * channel_stride;
  // Blocks of 4 output channels per group; depthwise: blocks of 4 groups.
  const std::int64_t blocks = depthwise ? (g.groups + 3) / 4 : (cout + 3) / 4;
  const std::int64_t units = depthwise ? blocks : g.groups;  // (image, unit) work items
  const std::int64_t pad_floats = g.in.batch * image_floats + 8;
  const std::int64_t weight_floats = depthwise ? blocks * taps * 4 : g.groups * blocks * cin * taps * 4;
  const std::int64_t bias_floats = depthwise ? blocks * 4 : g.groups * blocks * 4;
  std::unique_ptr<float[]> buffer(new (std::nothrow) float[pad_floats + weight_floats + bias_floats]);
  if (buffer == nullptr) {
    return op_error(StatusCode::kUnavailable, "conv2d", "cannot allocate ", pad_floats + weight_floats,
                    " floats of padded input");
  }
  float* padded = buffer.get();
  float* packed = padded + pad_floats;
  float* bias4 = packed + weight_floats;
  // Weights in blocks of 4 output channels, tap-major within a channel, zero-filled.
  std::fill(packed, packed + weight_floats + bias_floats, 0.0f);
  for (std::int64_t grp = 0; depthwise && grp < g.groups; ++grp) {
    for (std::int64_t t = 0; t < taps; ++t) packed[((grp / 4) * taps + t) * 4 + grp % 4] = w[grp * taps + t];
    if (bias != nullptr) bias4[grp] = bias[grp];
  }
  for (std::int64_t grp = 0; !depthwise && grp < g.groups; ++grp) {
    for (std::int64_t o = 0; o < cout; ++o) {
      const float* src = w + (grp * cout + o) * cin * taps;
      float* dst = packed + ((grp * blocks + o / 4) * cin * taps) * 4 + o % 4;
      for (std::int64_t i = 0; i < cin * taps; ++i) dst[i * 4] = src[i];
      if (bias != nullptr) bias4[grp * blocks * 4 + o] = bias[grp * cout + o];
    }
  }
  // The padded, phase-split input, one plane per task.
  const std::int64_t h = g.in.height, wd = g.in.width, ph = g.padding[0], pw = g.padding[1];
  std::fill(padded + pad_floats - 8, padded + pad_floats, 0.0f);
  pool.parallel_for(g.in.batch * g.in.channels, 4, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t plane = begin; plane < end; ++plane) {
      const float* src = x + plane * h * wd;
      float* dst = padded + plane * channel_stride;
      std::fill(dst, dst + ph * row_stride, 0.0f);
      std::fill(dst + (ph + h) * row_stride, dst + hp * row_stride, 0.0f);
      for (std::int64_t r = 0; r < h; ++r) {
        float* row = dst + (ph + r) * row_stride;
        const float* in = src + r * wd;
        if (sw == 1) {
          std::fill(row, row + pw, 0.0f);
          std::copy(in, in + wd, row + pw);
          std::fill(row + pw + wd, row + row_stride, 0.0f);
        } else {
          for (std::int64_t phase = 0; phase < sw; ++phase) {
            float* dst_phase = row + phase * phase_stride;
            for (std::int64_t k = 0; k < phase_stride; ++k) {
              const std::int64_t src_col = k * sw + phase - pw;
              dst_phase[k] = src_col >= 0 && src_col < wd ? in[src_col] : 0.0f;
            }
          }
        }
      }
    }
  });
  // Output rows of every (image, group), split into chunks that never straddle two.
  const auto rows = simd().conv_direct_rows;
  const std::int64_t total = g.in.batch * units * g.oh;
  const std::int64_t grain = std::max<std::int64_t>(1, total / (4 * pool.num_threads()));
  pool.parallel_for(total, grain, [&](std::int64_t begin, std::int64_t end) {
    while (begin < end) {
      const std::int64_t item = begin / g.oh, oy0 = begin % g.oh;
      const std::int64_t oy1 = std::min(g.oh, oy0 + (end - begin));
      const std::int64_t n = item / units, grp = item % units;
      ConvDirectArgs a{};
      if (depthwise) {  // grp is a block of 4 groups
        a.input = padded + n * image_floats + 4 * grp * channel_stride;
        a.weights = packed + grp * taps * 4;
        a.bias4 = bias4 + grp * 4;
        a.output = y + (n * g.out_channels + 4 * grp) * g.oh * g.ow;
        a.out_channels = std::min<std::int64_t>(4, g.groups - 4 * grp);
        a.depthwise = true;
      } else {
        a.input = padded + n * image_floats + grp * cin * channel_stride;
        a.weights = packed + grp * blocks * cin * taps * 4;
        a.bias4 = bias4 + grp * blocks * 4;
        a.output = y + (n * g.out_channels + grp * cout) * g.oh * g.ow;
        a.out_channels = cout;
      }
      a.channels = cin;
      a.channel_stride = channel_stride;
      a.row_stride = row_stride;
      a.phase_stride = phase_stride;
      a.kh = g.kh;
      a.kw = g.kw;
      a.stride_h = g.stride[0];
      a.stride_w = sw;
      a.dilation_h = g.dilation[0];
      a.dilation_w = g.dilation[1];
      a.out_plane = g.oh * g.ow;
      a.ow = g.ow;
      a.relu = relu;
      rows(a, oy0, oy1);
      begin += oy1 - oy0;
    }
  });
  return Status::Ok();
}

// The input plane and kernel window of g in a depthwise kernel's arguments
// (ConvDepthwiseArgs, ConvDepthwiseBlockArgs).
template <typename Args>
void set_window(Args& a, const ConvGeometry& g) {
  a.h = g.in.height;
  a.w = g.in.width;
  a.kh = g.kh;
  a.kw = g.kw;
  a.stride_h = g.stride[0];
  a.stride_w = g.stride[1];
  a.pad_h = g.padding[0];
  a.pad_w = g.padding[1];
  a.dilation_h = g.dilation[0];
  a.dilation_w = g.dilation[1];
}

// Depthwise (one input and output channel per group) with at most kConvDepthwiseMaxRows
// kernel rows and kConvDepthwiseMaxTaps taps: SimdKernels::conv_depthwise_rows on each plane in place, threaded over
// (image, channel, output rows); relu / relu6 clamp in the kernel, other activations on
// the chunk's rows while they are in cache.
// Stride-1 depthwise layers with rows narrower than 32 pixels stay on the direct path
// (conv_direct: 4 channels x 3 vectors per tile over a padded copy), which measured faster
// there (bench/conv_bench.cpp, 1 thread CPU time, loaded VM): 384@14 0.13-0.16 ms there vs
// 0.18 here, 960@7 0.12-0.18 vs 0.21, 5x5 240@14 0.10-0.14 vs 0.16; wider rows and strided
// layers are faster here: 144@56 0.40-0.41 vs 0.46 ms, stride-2 96@112 0.37-0.58 vs
// 0.94-1.65 ms.
bool use_depthwise(const ConvGeometry& g) {
  return g.group_in() == 1 && g.group_out() == 1 && g.kh <= kConvDepthwiseMaxRows &&
         g.kh * g.kw <= kConvDepthwiseMaxTaps && (g.stride[1] > 1 || g.ow >= 32);
}

Status conv_depthwise(const float* x, const float* w, const float* bias, float* y, const ConvGeometry& g,
                      FusedActivation act, ThreadPool& pool) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  float lo = -kInf, hi = kInf;
  if (act == FusedActivation::kRelu || act == FusedActivation::kRelu6) lo = 0.0f;
  if (act == FusedActivation::kRelu6) hi = 6.0f;
  const bool clamped = act == FusedActivation::kNone || act == FusedActivation::kRelu || act == FusedActivation::kRelu6;
  const auto rows = simd().conv_depthwise_rows;
  const std::int64_t planes = g.in.batch * g.out_channels, taps = g.kh * g.kw;
  const std::int64_t total = planes * g.oh;
  // Chunks of about 4K multiply-adds, at least one row; calls of at most kBatch rows, whose
  // padded input rows stay in L1.
  const std::int64_t grain = std::max<std::int64_t>(1, 4096 / std::max<std::int64_t>(1, g.ow * taps));
  constexpr std::int64_t kBatch = 8;
  const std::int64_t row_floats = ((g.ow + 8) * g.stride[1] + (g.kw - 1) * g.dilation[1] + 16 + 7) / 8 * 8;
  const std::int64_t scratch_floats = ((kBatch - 1) * g.stride[0] + (g.kh - 1) * g.dilation[0] + 1) * row_floats;
  std::atomic<bool> failed{false};
  pool.parallel_for(total, grain, [&](std::int64_t begin, std::int64_t end) {
    std::unique_ptr<float[]> scratch(new (std::nothrow) float[static_cast<std::size_t>(scratch_floats)]);
    if (scratch == nullptr) {
      failed = true;
      return;
    }
    while (begin < end) {
      const std::int64_t plane = begin / g.oh, oy0 = begin % g.oh;
      const std::int64_t oy1 = std::min({g.oh, oy0 + (end - begin), oy0 + kBatch});
      const std::int64_t c = plane % g.out_channels;
      ConvDepthwiseArgs a{};
      a.input = x + plane * g.in.height * g.in.width;
      set_window(a, g);
      a.weights = w + c * taps;
      a.bias = bias != nullptr ? bias[c] : 0.0f;
      a.lo = lo;
      a.hi = hi;
      a.output = y + plane * g.oh * g.ow;
      a.oh = g.oh;
      a.ow = g.ow;
      a.scratch = scratch.get();
      a.row_floats = row_floats;
      rows(a, oy0, oy1);
      if (!clamped) apply_activation(act, a.output + oy0 * g.ow, (oy1 - oy0) * g.ow);
      begin += oy1 - oy0;
    }
  });
  if (failed) return op_error(StatusCode::kUnavailable, "conv2d", "cannot allocate ", scratch_floats, " floats of rows");
  return Status::Ok();
}

// Depthwise (one input and output channel per group) with at most kConvDepthwiseMaxRows
// kernel rows and kConvDepthwiseMaxTaps taps, any stride, padding and dilation: blocks of 8
// channels (SimdKernels::conv_depthwise_block, the channels in the vector lanes), threaded
// over (image, block, output rows) with no serial phase; relu / relu6 / hardswish in the
// kernel, other activations on the chunk's rows while they are in cache.
bool use_depthwise_blocked(const ConvGeometry& g) {
  return g.group_in() == 1 && g.group_out() == 1 && g.kh <= kConvDepthwiseMaxRows &&
         g.kh * g.kw <= kConvDepthwiseMaxTaps;
}

Status conv_depthwise_blocked(const float* x, const float* w, const float* bias, float* y, const ConvGeometry& g,
                              FusedActivation act, ThreadPool& pool) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  float lo = -kInf, hi = kInf;
  if (act == FusedActivation::kRelu || act == FusedActivation::kRelu6) lo = 0.0f;
  if (act == FusedActivation::kRelu6) hi = 6.0f;
  const bool hardswish = act == FusedActivation::kHardswish;
  const bool in_kernel = hardswish || act == FusedActivation::kNone || act == FusedActivation::kRelu ||
                         act == FusedActivation::kRelu6;
  const auto kernel = simd().conv_depthwise_block;
  const std::int64_t channels = g.out_channels, taps = g.kh * g.kw, blocks = (channels + 7) / 8;
  const std::int64_t in_plane = g.in.height * g.in.width, out_plane = g.oh * g.ow;
  const std::int64_t total = g.in.batch * blocks * g.oh;
  // Chunks of at least ~16K multiply-adds (8 lanes each), whole planes when small: each
  // chunk transposes its first kernel window's rows again.
  const std::int64_t grain =
      std::clamp<std::int64_t>(2048 / std::max<std::int64_t>(1, g.ow * taps), 1, std::max<std::int64_t>(g.oh, 1));
  const std::int64_t scratch_floats =
      conv_depthwise_block_scratch_floats(g.kh, g.kw, g.stride[1], g.dilation[0], g.dilation[1], g.ow);
  std::atomic<bool> failed{false};
  pool.parallel_for(total, grain, [&](std::int64_t begin, std::int64_t end) {
    std::unique_ptr<float[]> scratch(new (std::nothrow) float[static_cast<std::size_t>(scratch_floats)]);
    if (scratch == nullptr) {
      failed = true;
      return;
    }
    alignas(32) float wblock[kConvDepthwiseMaxTaps * 8];
    alignas(32) float bblock[8];
    std::int64_t packed_block = -1;
    while (begin < end) {
      const std::int64_t item = begin / g.oh, oy0 = begin % g.oh;
      const std::int64_t oy1 = std::min(g.oh, oy0 + (end - begin));
      const std::int64_t n = item / blocks, c0 = item % blocks * 8, count = std::min<std::int64_t>(8, channels - c0);
      if (packed_block != c0) {  // the block's weights tap-major, channels in lanes
        std::fill(wblock, wblock + taps * 8, 0.0f);
        std::fill(bblock, bblock + 8, 0.0f);
        for (std::int64_t c = 0; c < count; ++c) {
          for (std::int64_t t = 0; t < taps; ++t) wblock[t * 8 + c] = w[(c0 + c) * taps + t];
          if (bias != nullptr) bblock[c] = bias[c0 + c];
        }
        packed_block = c0;
      }
      ConvDepthwiseBlockArgs a{};
      a.input = x + (n * g.in.channels + c0) * in_plane;
      a.channels = count;
      set_window(a, g);
      a.weights = wblock;
      a.bias = bblock;
      a.lo = lo;
      a.hi = hi;
      a.hardswish = hardswish;
      a.output = y + (n * channels + c0) * out_plane;
      a.oh = g.oh;
      a.ow = g.ow;
      a.scratch = scratch.get();
      kernel(a, oy0, oy1);
      if (!in_kernel) {
        for (std::int64_t c = 0; c < count; ++c) apply_activation(act, a.output + c * out_plane + oy0 * g.ow, (oy1 - oy0) * g.ow);
      }
      begin += oy1 - oy0;
    }
  });
  if (failed) return op_error(StatusCode::kUnavailable, "conv2d", "cannot allocate ", scratch_floats, " floats of rows");
  return Status::Ok();
}

Status conv_f32(const float* x, const float* w, const float* bias, float* y, const ConvGeometry& g, GemmActivation act,
                ThreadPool& pool) {
  const std::int64_t patch = g.patch();
  const bool depthwise = g.group_in() == 1 && g.group_out() == 1;
  const bool direct = depthwise || (g.kh == 1 && g.kw == 1 && g.stride[0] == 1 && g.stride[1] == 1 &&
                                    g.padding[0] == 0 && g.padding[1] == 0);
  // Output rows per tile: keep the column buffer near 4 MiB.
  const std::int64_t tile = std::clamp<std::int64_t>((std::int64_t{1} << 20) / std::max<std::int64_t>(patch * g.ow, 1),
                                                     1, g.oh);
  const std::size_t col_floats = direct ? 0 : static_cast<std::size_t>(patch * tile * g.ow);
  auto make_col = [&]() -> std::unique_ptr<float[]> {
    return direct ? nullptr : std::unique_ptr<float[]>(new (std::nothrow) float[col_floats]);
  };
  auto no_memory = [&] {
    return op_error(StatusCode::kUnavailable, "conv2d", "cannot allocate ", col_floats, " floats of im2col buffer");
  };
  const std::int64_t items = g.in.batch * g.groups;
  // Many small (image, group) problems (depthwise, batches): one per thread at a time.
  // Few large ones: one at a time, each GEMM split over the pool.
  if (pool.num_threads() > 1 && items >= pool.num_threads() && (depthwise || items % pool.num_threads() == 0 || items >= 4 * pool.num_threads())) {
    std::atomic<bool> failed{false};
    pool.parallel_for(items, 1, [&](std::int64_t begin, std::int64_t end) {
      std::unique_ptr<float[]> col = make_col();
      if (!direct && col == nullptr) {
        failed = true;
        return;
      }
      for (std::int64_t it = begin; it < end; ++it) {
        (void)conv_group(x, w, bias, y, g, it / g.groups, it % g.groups, col.get(), tile, act, nullptr);
      }
    });
    return failed ? no_memory() : Status::Ok();
  }
  std::unique_ptr<float[]> col = make_col();
  if (!direct && col == nullptr) return no_memory();
  for (std::int64_t it = 0; it < items; ++it) {
    KILN_RETURN_IF_ERROR(conv_group(x, w, bias, y, g, it / g.groups, it % g.groups, col.get(), tile, act, &pool));
  }
  return Status::Ok();
}

Status conv_geometry(const TensorView& x, const TensorView& w, Attrs attrs, ConvGeometry& g) {
  KILN_RETURN_IF_ERROR(split_planes("conv2d", x, g.in));
  if (w.rank != 4) return invalid("conv2d", "weight must be 4-D [O, C/groups, kH, kW], got weight.shape=", shape_text(w));
  KILN_RETURN_IF_ERROR(read_pair("conv2d", attrs, 0, "stride", 1, g.stride));
  KILN_RETURN_IF_ERROR(read_pair("conv2d", attrs, 1, "padding", 0, g.padding));
  KILN_RETURN_IF_ERROR(read_pair("conv2d", attrs, 2, "dilation", 1, g.dilation));
  KILN_ASSIGN_OR_RETURN(g.groups, attr_int("conv2d", attrs, 3, "groups"));
  g.out_channels = w.shape[0];
  g.kh = w.shape[2];
  g.kw = w.shape[3];
  if (g.groups < 1 || g.groups > std::max<std::int64_t>(g.in.channels, 1)) {
    return invalid("conv2d", "groups=", g.groups, " outside [1, ", g.in.channels, "]");
  }
  if (g.in.channels % g.groups != 0 || g.out_channels % g.groups != 0) {
    return invalid("conv2d", "groups=", g.groups, " does not divide in_channels=", g.in.channels,
                   " and out_channels=", g.out_channels);
  }
  if (w.shape[1] != g.in.channels / g.groups) {
    return invalid("conv2d", "weight.shape[1]=", w.shape[1], " != x channels ", g.in.channels, " / groups ", g.groups);
  }
  KILN_RETURN_IF_ERROR(window_output_size("conv2d", "height", g.in.height, g.kh, g.stride[0], g.padding[0],
                                          g.dilation[0], false, g.oh));
  return window_output_size("conv2d", "width", g.in.width, g.kw, g.stride[1], g.padding[1], g.dilation[1],
                            false, g.ow);
}

// The checks of conv2d (dtypes, shapes, attributes, bias, output size) on logical views.
Status check_conv(Inputs in, const TensorView& out, Attrs attrs, ConvGeometry& g) {
  const TensorView& x = in[0];
  const TensorView& w = in[1];
  const TensorView* bias = in.size() == 3 && !is_absent(in[2]) ? &in[2] : nullptr;
  if (x.dtype != DType::kF32) return unsupported_dtype("conv2d", x.dtype, "x");
  KILN_RETURN_IF_ERROR(check_dtype("conv2d", "weight", w, x.dtype));
  KILN_RETURN_IF_ERROR(check_dtype("conv2d", "out", out, x.dtype));
  KILN_RETURN_IF_ERROR(conv_geometry(x, w, attrs, g));
  if (bias != nullptr) {
    KILN_RETURN_IF_ERROR(check_dtype("conv2d", "bias", *bias, x.dtype));
    if (bias->rank != 1 || bias->shape[0] != g.out_channels) {
      return invalid("conv2d", "bias.shape=", shape_text(*bias), " but weight.shape[0]=", g.out_channels);
    }
  }
  const auto expected = planes_shape(x, g.out_channels, g.oh, g.ow);
  return check_out_shape("conv2d", out, std::span<const std::int64_t>(expected.data(), x.rank));
}

}  // namespace

bool conv_winograd_enabled() { return winograd_enabled(); }

bool conv_attrs_winograd(Attrs attrs, std::int64_t max_padding) {
  auto all = [&](std::size_t i, auto pred) {
    if (attrs.size() <= i || attrs[i].type == AttrType::kNone) return true;
    if (attrs[i].type != AttrType::kInts || attrs[i].ints.empty()) return false;
    return std::all_of(attrs[i].ints.begin(), attrs[i].ints.end(), pred);
  };
  const auto one = [](std::int64_t v) { return v == 1; };
  return all(0, one) && all(2, one) && all(1, [&](std::int64_t v) { return v >= 0 && v <= max_padding; });
}

Status conv2d_check(Inputs in, const TensorView& out, Attrs attrs, ConvCheck& check) {
  if (in.size() < 2) return invalid("conv2d", "expects x and weight");
  ConvGeometry g;
  KILN_RETURN_IF_ERROR(check_conv(in, out, attrs, g));
  nchwc::ConvShape& s = check.shape;
  s.in_channels = g.in.channels;
  s.out_channels = g.out_channels;
  s.groups = g.groups;
  s.kh = g.kh;
  s.kw = g.kw;
  s.stride_h = g.stride[0];
  s.stride_w = g.stride[1];
  s.pad_h = g.padding[0];
  s.pad_w = g.padding[1];
  s.dilation_h = g.dilation[0];
  s.dilation_w = g.dilation[1];
  check.bias = in.size() == 3 && !is_absent(in[2]) ? in[2].as<float>() : nullptr;
  return Status::Ok();
}

Status Conv2d(KernelContext& ctx, Inputs in, Outputs out, Attrs attrs) {
  if (const FoldedConv* fc = ctx.folded_conv(); fc != nullptr) {
    // Input 0 is the folded expansion's output: a shape without data, made by the kernel
    // from the expansion's own inputs (checked here like this node's).
    KILN_RETURN_IF_ERROR(check_io("conv2d", fc->inputs, out,
                                  {.min_inputs = 2, .max_inputs = 3, .num_outputs = 1, .optional_inputs = 0b100}));
    if (in.size() < 2) return invalid("conv2d", "expects 2 to 3 inputs, got ", in.size());
    KILN_RETURN_IF_ERROR(check_io("conv2d", in.subspan(1), out,
                                  {.min_inputs = 1, .max_inputs = 2, .num_outputs = 1, .optional_inputs = 0b10}));
    return conv2d_blocked(ctx, in, out, attrs);
  }
  KILN_RETURN_IF_ERROR(check_io("conv2d", in, out,
                                {.min_inputs = 2, .max_inputs = 3, .num_outputs = 1, .optional_inputs = 0b100}));
  if (ctx.input_blocked(0) || ctx.output_blocked(0) || ctx.blocked_kernel()) return conv2d_blocked(ctx, in, out, attrs);
  if (has_half_views(in, out)) return run_via_f32(Conv2d, ctx, in, out, attrs);
  const TensorView& x = in[0];
  const TensorView& w = in[1];
  const TensorView* bias = in.size() == 3 && !is_absent(in[2]) ? &in[2] : nullptr;
  ConvGeometry g;
  KILN_RETURN_IF_ERROR(check_conv(in, out[0], attrs, g));
  if (out[0].numel() == 0) return Status::Ok();
  const float* bp = bias != nullptr ? bias->as<float>() : nullptr;
  const bool relu = ctx.fused_activation() == FusedActivation::kRelu;
  // Only conv2d_prepare makes conv2d's prepared weights.
  const auto* weights = static_cast<const ConvWeights*>(ctx.prepared_weights(1));
  const bool transformable = weights != nullptr && weights->winograd_eligible && weights->winograd_k == g.out_channels &&
                             weights->winograd_c == g.in.channels;
  if (WinogradShape ws; winograd_shape(g, ws) && winograd_profitable(ws, transformable)) {
    const WinogradWeights* prepared = transformable ? weights->winograd_for(w.as<float>()) : nullptr;
    KILN_RETURN_IF_ERROR(
        conv_winograd_f32(x.as<float>(), w.as<float>(), prepared, bp, out[0].as<float>(), ws, ctx.pool(), relu));
    if (!relu) apply_activation(ctx.fused_activation(), out[0].as<float>(), out[0].numel());
    return Status::Ok();
  }
  if (use_depthwise_blocked(g) && depthwise_kernel() == DepthwiseKernel::kBlocked) {
    return conv_depthwise_blocked(x.as<float>(), w.as<float>(), bp, out[0].as<float>(), g, ctx.fused_activation(),
                                  ctx.pool());
  }
  if (use_depthwise(g) && depthwise_kernel() == DepthwiseKernel::kRows) {
    return conv_depthwise(x.as<float>(), w.as<float>(), bp, out[0].as<float>(), g, ctx.fused_activation(), ctx.pool());
  }
  if (use_direct(g)) {
    KILN_RETURN_IF_ERROR(conv_direct(x.as<float>(), w.as<float>(), bp, out[0].as<float>(), g, ctx.pool(), relu));
    if (!relu) apply_activation(ctx.fused_activation(), out[0].as<float>(), out[0].numel());
    return Status::Ok();
  }
  const bool plain_1x1 = g.kh == 1 && g.kw == 1 && g.groups == 1 && g.stride[0] == 1 && g.stride[1] == 1 &&
                         g.padding[0] == 0 && g.padding[1] == 0;
  if (plain_1x1 && pointwise_enabled() && weights != nullptr && weights->pointwise_eligible && weights->pointwise_out == g.out_channels &&
      weights->pointwise_in == g.in.channels &&
      pointwise_transposed_profitable(g.in.channels, g.out_channels, g.oh * g.ow)) {
    if (const PackedB* wt = weights->pointwise_for(w.as<float>()); wt != nullptr) {
      return conv_pointwise_transposed(x.as<float>(), *wt, bp, out[0].as<float>(), g.in.batch, g.in.channels,
                                       g.out_channels, g.oh * g.ow, ctx.fused_activation(), ctx.pool());
    }
  }
  if (weights != nullptr && weights->gemm != nullptr && weights->out_channels == g.out_channels &&
      weights->groups == g.groups && weights->patch == g.patch()) {
    return conv_packed(x.as<float>(), *weights, bp, out[0].as<float>(), g, ctx.fused_activation(), ctx.pool());
  }
  return conv_f32(x.as<float>(), w.as<float>(), bp, out[0].as<float>(), g, ctx.fused_activation(), ctx.pool());
}

const WinogradWeights* ConvWeights::winograd_for(const float* w) const {
  std::call_once(winograd_once, [&] {
    auto made = winograd_prepare(w, winograd_k, winograd_c);
    if (made.ok()) winograd = std::move(made).value();  // else null: transformed per call
  });
  return winograd.get();
}

const PackedB* ConvWeights::pointwise_for(const float* w) const {
  std::call_once(pointwise_once, [&] {
    // From the prepacked A copy when there is one: the raw weight's mapped pages may have
    // been released after load (Program: release_prepared_constants).
    auto made = gemm != nullptr && groups == 1 && patch == pointwise_in && out_channels == pointwise_out
                    ? pointwise_transposed_prepare(gemm[0])
                    : pointwise_transposed_prepare(w, pointwise_out, pointwise_in);
    if (made.ok()) pointwise.reset(new (std::nothrow) PackedB(std::move(made).value()));  // else null: plain GEMM
  });
  return pointwise.get();
}

Result<std::unique_ptr<PreparedWeights>> conv2d_prepare(const TensorView& weight, Attrs attrs, bool blocked) {
  std::unique_ptr<PreparedWeights> none;
  if (weight.dtype != DType::kF32 || weight.rank != 4) return none;
  // Attributes 0-3: stride, padding, dilation, groups (unevaluated expressions: not prepared).
  if (attrs.size() < 4 || attrs[3].type != AttrType::kInt) return none;
  const std::int64_t groups = attrs[3].i;
  const std::int64_t k = weight.shape[0], c = weight.shape[1], kh = weight.shape[2], kw = weight.shape[3];
  if (groups < 1 || k % groups != 0 || k == 0 || c == 0 || kh == 0 || kw == 0) return none;
  if (blocked) return conv2d_prepare_blocked(weight, attrs);
  auto prepared = std::unique_ptr<ConvWeights>(new (std::nothrow) ConvWeights());
  if (prepared == nullptr) return op_error(StatusCode::kUnavailable, "conv2d", "cannot allocate prepared weights");
  if (kh == 3 && kw == 3 && groups == 1 && conv_attrs_winograd(attrs, std::numeric_limits<std::int64_t>::max()) &&
      winograd_enabled() && winograd_channels(c, k)) {
    prepared->winograd_eligible = true;  // transformed on first use: winograd_for
    prepared->winograd_k = k;
    prepared->winograd_c = c;
  }
  // The GEMM paths' weights: not depthwise, not the direct path's (use_direct).
  const std::int64_t per_group = k / groups, taps = kh * kw;
  const bool depthwise = c == 1 && per_group == 1;
  const bool direct = per_group <= kDirectMaxOut && taps <= 64 && taps > 1;
  if (!depthwise && !direct && prepack_enabled()) {
    prepared->gemm.reset(new (std::nothrow) PackedA[static_cast<std::size_t>(groups)]);
    if (prepared->gemm == nullptr) return op_error(StatusCode::kUnavailable, "conv2d", "cannot allocate prepared weights");
    const std::int64_t patch = c * taps;
    for (std::int64_t grp = 0; grp < groups; ++grp) {
      KILN_ASSIGN_OR_RETURN(prepared->gemm[grp],
                            pack_a_matrix(weight.as<float>() + grp * per_group * patch, patch, per_group, patch));
    }
    prepared->out_channels = k;
    prepared->groups = groups;
    prepared->patch = patch;
  }
  if (kh == 1 && kw == 1 && groups == 1 && !depthwise) {
    prepared->pointwise_eligible = true;  // W^T packed on first use: pointwise_for
    prepared->pointwise_out = k;
    prepared->pointwise_in = c;
  }
  if (!prepared->winograd_eligible && prepared->gemm == nullptr && !prepared->pointwise_eligible) return none;
  return std::unique_ptr<PreparedWeights>(std::move(prepared));
}

}  // namespace kiln::cpu::kernels

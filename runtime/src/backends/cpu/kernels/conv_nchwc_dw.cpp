// Depthwise convolution on NCHW8c activations (nchwc.h): the prepared weights, the driver
// that threads over (image, channel block, output row), and the portable build of the row
// kernel (conv_nchwc_dw.inc; the AVX2 build is conv_nchwc_dw_avx2.cpp).
//
// The rows go in bands of one (image, block): a plain input's rows a band reads are
// packed into pixel vectors, likewise a plain residual's band, and a plain output band is
// computed into pixel vectors and unpacked into its channel planes, each while in cache.
//
// conv2d_expand_depthwise makes its input itself: per (image, share of the output rows,
// block group of the 1x1 expansion) it walks the rows in bands, computing the expanded rows
// a band reads into a thread's buffer (PointwiseRows, conv_nchwc.cpp) that stays in L2,
// keeping the rows the previous band shares with it, then runs the row kernel over them.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <utility>
#include <cstdlib>
#include <memory>
#include <new>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>  // nchwc_vec.inc uses AVX intrinsics when the build targets AVX
#endif

#include "backends/cpu/kernels/common.h"
#include "backends/cpu/kernels/conv_nchwc_kernels.h"
#include "backends/cpu/kernels/nchwc.h"
#include "backends/cpu/kernels/nchwc_impl.h"
#include "backends/cpu/scratch_buffer.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"  // 8-lane vectors in internal functions only
#endif
#if defined(__clang__)
#pragma clang diagnostic ignored "-Wpsabi"  // the same, for clang (the fuzz preset)
#endif

namespace kiln::cpu::nchwc {
namespace detail {
namespace dw_portable {

#define NCHWC_FMA8(a, b, c) ((a) * (b) + (c))
#include "backends/cpu/kernels/nchwc_vec.inc"
#define NCHWC_DW_TILE 4
#include "backends/cpu/kernels/conv_nchwc_dw.inc"
#undef NCHWC_DW_TILE
#undef NCHWC_FMA8

constexpr DepthwiseKernels kTable{depthwise_rows};

}  // namespace dw_portable

const DepthwiseKernels& depthwise_kernels_portable() { return dw_portable::kTable; }

const DepthwiseKernels& depthwise_kernels() {
  return use_avx2() ? depthwise_kernels_avx2() : depthwise_kernels_portable();
}

}  // namespace detail

namespace {

struct FreeDeleter {
  void operator()(float* p) const { std::free(p); }
};

// [blocks][kh * kw][8] taps, zeros in the padded lanes.
class PreparedDepthwise final : public DepthwiseWeights {
 public:
  PreparedDepthwise(std::unique_ptr<float, FreeDeleter> data, std::int64_t taps) : data_(std::move(data)), taps_(taps) {}
  const float* block(std::int64_t b) const { return data_.get() + b * taps_ * kBlock; }

 private:
  std::unique_ptr<float, FreeDeleter> data_;
  std::int64_t taps_;
};

// The row kernel's clamp and in-register activation for `act`; false when `act` runs over
// the stored band instead (gelu: erf / tanh cost more in registers than in a pass).
bool in_register(FusedActivation act, detail::DepthwiseRows& a) {
  using detail::InRegister;
  a.lo = 0.0f;
  a.hi = 6.0f;
  switch (act) {
    case FusedActivation::kNone: a.act = InRegister::kNone; return true;
    case FusedActivation::kRelu: a.act = InRegister::kMax; return true;
    case FusedActivation::kRelu6: a.act = InRegister::kClamp; return true;
    case FusedActivation::kHardswish: a.act = InRegister::kHardswish; return true;
    case FusedActivation::kHardsigmoid: a.act = InRegister::kHardsigmoid; return true;
    case FusedActivation::kSilu: a.act = InRegister::kSilu; return true;
    case FusedActivation::kGeluErf:
    case FusedActivation::kGeluTanh: a.act = InRegister::kNone; return false;
  }
  a.act = InRegister::kNone;
  return false;
}

// The row kernel's arguments every band of a call shares: the plane (h x w), the window,
// the output width and its column plan; `fused`: whether the kernel applies `act` itself.
detail::DepthwiseRows rows_proto(const ConvShape& s, std::int64_t h, std::int64_t w, std::int64_t ow,
                                 FusedActivation act, bool& fused) {
  detail::DepthwiseRows a{};
  fused = in_register(act, a);
  a.h = h;
  a.w = w;
  a.kh = s.kh;
  a.kw = s.kw;
  a.stride_h = s.stride_h;
  a.stride_w = s.stride_w;
  a.pad_h = s.pad_h;
  a.pad_w = s.pad_w;
  a.dilation_h = s.dilation_h;
  a.dilation_w = s.dilation_w;
  a.ow = ow;
  detail::plan_depthwise_columns(a);
  return a;
}

// Block `block`'s bias lanes (0 past `lanes` and without a bias).
void block_bias(const Epilogue& e, std::int64_t block, std::int64_t lanes, float* bias) {
  for (std::int64_t l = 0; l < kBlock; ++l) bias[l] = e.bias != nullptr && l < lanes ? e.bias[block * kBlock + l] : 0.0f;
}

}  // namespace

bool depthwise_supported(const ConvShape& s) {
  return s.groups >= 1 && s.groups == s.in_channels && s.in_channels == s.out_channels && s.kh >= 1 && s.kw >= 1 &&
         s.stride_h >= 1 && s.stride_w >= 1 && s.dilation_h >= 1 && s.dilation_w >= 1 && s.pad_h >= 0 && s.pad_w >= 0;
}

Result<std::unique_ptr<DepthwiseWeights>> prepare_depthwise(const float* w, const ConvShape& s) {
  const std::int64_t channels = s.out_channels, taps = s.kh * s.kw, blocks = (channels + kBlock - 1) / kBlock;
  const std::size_t bytes = static_cast<std::size_t>((blocks * taps * kBlock * 4 + 63) / 64 * 64);
  std::unique_ptr<float, FreeDeleter> data(static_cast<float*>(std::aligned_alloc(64, bytes)));
  if (data == nullptr) {
    return kernels::op_error(StatusCode::kUnavailable, "conv2d_depthwise", "cannot allocate ", bytes,
                             " bytes of prepared weights");
  }
  float* d = data.get();
  for (std::int64_t i = 0; i < blocks * taps * kBlock; ++i) d[i] = 0.0f;
  for (std::int64_t c = 0; c < channels; ++c) {
    for (std::int64_t t = 0; t < taps; ++t) d[((c / kBlock) * taps + t) * kBlock + c % kBlock] = w[c * taps + t];
  }
  std::unique_ptr<DepthwiseWeights> prepared(new (std::nothrow) PreparedDepthwise(std::move(data), taps));
  if (prepared == nullptr) {
    return kernels::op_error(StatusCode::kUnavailable, "conv2d_depthwise", "cannot allocate prepared weights");
  }
  return prepared;
}

Status conv2d_depthwise(const Act& x, const DepthwiseWeights& weights, const ConvShape& s, const Epilogue& e,
                        const Act& y, ThreadPool& pool) {
  const auto& w = static_cast<const PreparedDepthwise&>(weights);
  const std::int64_t channels = y.c, blocks = (channels + kBlock - 1) / kBlock, oh = y.h, ow = y.w;
  const Act* res = e.residual;
  const bool plain_in = !x.blocked, plain_out = !y.blocked, plain_res = res != nullptr && !res->blocked;
  const std::int64_t span_h = (s.kh - 1) * s.dilation_h + 1;
  // Bands of ~2K output pixels (and input rows of at most 2K pixels): a plain side's band
  // is packed or unpacked in one pass, in cache.
  const std::int64_t band = detail::band_rows(2048, ow, x.w, s.stride_h, span_h);
  const std::int64_t in_floats =
      plain_in ? detail::whole_lines(std::min((band - 1) * s.stride_h + span_h, x.h) * x.w * kBlock) : 0;
  const std::int64_t out_floats = plain_out ? detail::whole_lines(band * ow * kBlock) : 0;
  const std::int64_t res_floats = plain_res ? detail::whole_lines(band * ow * kBlock) : 0;
  const auto rows_kernel = detail::depthwise_kernels().rows;
  const detail::TileKernels& tiles = detail::tile_kernels();

  bool fused = false;
  const detail::DepthwiseRows proto = rows_proto(s, x.h, x.w, ow, e.act, fused);

  const bool ok = detail::for_each_band(
      pool, y.n, blocks, oh, band, ow * s.kh * s.kw, in_floats + out_floats + res_floats,
      detail::split_by_rows(pool, channels, x.h * x.w),
      [&](std::int64_t image, std::int64_t block, std::int64_t oy0, std::int64_t oy1, float* scratch) {
        float* in_buf = scratch;
        float* out_buf = in_buf + in_floats;
        float* res_buf = out_buf + out_floats;
        const std::int64_t lanes = detail::block_channels(channels, block), count = (oy1 - oy0) * ow;
        alignas(32) float bias[kBlock];
        block_bias(e, block, lanes, bias);
        detail::DepthwiseRows a = proto;
        a.bias = bias;
        a.weights = w.block(block);
        a.lanes = lanes;
        const std::int64_t r0 = std::max<std::int64_t>(0, oy0 * s.stride_h - s.pad_h);
        const std::int64_t r1 = std::max(r0, std::min(x.h, (oy1 - 1) * s.stride_h - s.pad_h + span_h));
        a.input = detail::block_rows(x, image, block, r0, r1, in_buf);
        if (res == nullptr) {
          a.residual = nullptr;
        } else if (res->blocked) {
          a.residual = res->data + image * res->image_floats() + (block * oh + oy0) * ow * kBlock;
        } else {
          tiles.pack(res->data + image * res->image_floats() + block * kBlock * oh * ow + oy0 * ow, oh * ow, lanes, count,
                     res_buf);
          a.residual = res_buf;
        }
        a.output = plain_out ? out_buf : y.data + image * y.image_floats() + (block * oh + oy0) * ow * kBlock;
        rows_kernel(a, oy0, oy1);
        if (!fused) apply_activation(e.act, a.output, count * kBlock);
        if (plain_out) {
          tiles.unpack(out_buf, count, y.data + image * y.image_floats() + block * kBlock * oh * ow + oy0 * ow, oh * ow,
                       lanes);
        }
      });
  if (!ok) {
    return kernels::op_error(StatusCode::kUnavailable, "conv2d_depthwise", "cannot allocate ",
                             in_floats + out_floats + res_floats, " floats of scratch");
  }
  return Status::Ok();
}

namespace {

thread_local ScratchBuffer t_band;  // a thread's expanded rows (conv2d_expand_depthwise)

// The expanded rows of a band, all blocks of a block group: about this many bytes, so they
// stay in L2 next to the input rows they are made from and the weights.
constexpr std::int64_t kExpandBandBytes = 128 << 10;

std::int64_t out_size(std::int64_t in, std::int64_t k, std::int64_t stride, std::int64_t pad, std::int64_t dilation) {
  const std::int64_t span = in + 2 * pad - dilation * (k - 1) - 1;
  return span < 0 ? -1 : span / stride + 1;
}

}  // namespace

Status conv2d_expand_depthwise(const Act& x, const DenseWeights& ew, const ConvShape& es, const Epilogue& ee,
                               const DepthwiseWeights& dw, const ConvShape& s, const Epilogue& e, const Act& y,
                               ThreadPool& pool) {
  const auto& w = static_cast<const PreparedDepthwise&>(dw);
  const Act* res = e.residual;
  const bool res_ok = res == nullptr || (res->blocked && res->n == y.n && res->c == y.c && res->h == y.h &&
                                         res->w == y.w && (res->data != nullptr || res->n == 0));
  if (!depthwise_supported(s) || es.out_channels != s.in_channels || !y.blocked || y.n != x.n || y.c != s.out_channels ||
      y.h != out_size(x.h, s.kh, s.stride_h, s.pad_h, s.dilation_h) ||
      y.w != out_size(x.w, s.kw, s.stride_w, s.pad_w, s.dilation_w) || (y.data == nullptr && y.n > 0) || !res_ok) {
    return kernels::op_error(StatusCode::kInvalidInput, "conv2d_expand_depthwise",
                             "needs a depthwise convolution of the expansion's channels into a blocked y of its "
                             "output size (and a blocked residual of y's shape)");
  }
  KILN_ASSIGN_OR_RETURN(const std::unique_ptr<PointwiseRows> rows,
                        pointwise_rows(dense_kernels(), x, ew, es, ee));
  if (x.n == 0) return Status::Ok();
  const std::int64_t channels = y.c, oh = y.h, ow = y.w, groups = rows->block_groups();
  const std::int64_t span_h = (s.kh - 1) * s.dilation_h + 1, row_floats = x.w * kBlock;
  // Output rows per band: the input rows they read, for every block of the widest group,
  // within kExpandBandBytes.
  std::int64_t widest = 1;
  for (std::int64_t q = 0; q < groups; ++q) widest = std::max(widest, rows->width(q));
  const std::int64_t cap_rows = std::max(span_h, kExpandBandBytes / (row_floats * 4 * widest));
  const std::int64_t band = std::max<std::int64_t>(1, (cap_rows - span_h) / s.stride_h + 1);
  const std::int64_t in_rows = std::min(x.h, (band - 1) * s.stride_h + span_h);
  const std::int64_t block_stride = detail::whole_lines(in_rows * row_floats), buffer_floats = widest * block_stride;
  const auto rows_kernel = detail::depthwise_kernels().rows;

  bool fused = false;
  const detail::DepthwiseRows proto = rows_proto(s, x.h, x.w, ow, e.act, fused);

  // Items (image, row share, block group): each thread takes its share of the rows of every
  // group, as conv2d_depthwise splits by rows (detail::split_by_rows), else whole groups.
  const std::int64_t parts = detail::split_by_rows(pool, channels, x.h * x.w)
                                 ? std::clamp<std::int64_t>(pool.num_threads(), 1, oh)
                                 : 1;
  const std::int64_t items = x.n * parts * groups;
  std::atomic<bool> failed{false};
  pool.parallel_for(items, 1, [&](std::int64_t first, std::int64_t last) {
    float* buf = t_band.get(buffer_floats);
    if (buf == nullptr) {
      failed = true;
      return;
    }
    for (std::int64_t i = first; i < last; ++i) {
      const std::int64_t image = i / (parts * groups), part = i / groups % parts, q = i % groups;
      const std::int64_t row0 = part * oh / parts, row1 = (part + 1) * oh / parts;
      const std::int64_t width = rows->width(q), block0 = rows->first_block(q);
      std::int64_t lo = 0, hi = 0;  // the expanded rows in buf
      for (std::int64_t oy0 = row0; oy0 < row1; oy0 += band) {
        const std::int64_t oy1 = std::min(row1, oy0 + band);
        const std::int64_t r0 = std::clamp<std::int64_t>(oy0 * s.stride_h - s.pad_h, 0, x.h);
        const std::int64_t r1 = std::clamp<std::int64_t>((oy1 - 1) * s.stride_h - s.pad_h + span_h, r0, x.h);
        // Rows the previous band made and this one reads move to the front.
        const std::int64_t keep = lo <= r0 && r0 < hi ? std::min(hi, r1) - r0 : 0;
        if (keep > 0 && r0 > lo) {
          for (std::int64_t b = 0; b < width; ++b) {
            float* plane = buf + b * block_stride;
            std::memmove(plane, plane + (r0 - lo) * row_floats, static_cast<std::size_t>(keep * row_floats) * sizeof(float));
          }
        }
        rows->run(image, q, r0 + keep, r1, buf + keep * row_floats, block_stride);
        lo = r0;
        hi = r1;
        for (std::int64_t b = 0; b < width; ++b) {
          const std::int64_t block = block0 + b, lanes = detail::block_channels(channels, block);
          alignas(32) float bias[kBlock];
          block_bias(e, block, lanes, bias);
          detail::DepthwiseRows a = proto;
          a.bias = bias;
          a.weights = w.block(block);
          a.lanes = lanes;
          a.input = detail::PlaneRows{buf + b * block_stride, r0};
          a.residual = res == nullptr ? nullptr : res->data + image * res->image_floats() + (block * oh + oy0) * ow * kBlock;
          a.output = y.data + image * y.image_floats() + (block * oh + oy0) * ow * kBlock;
          rows_kernel(a, oy0, oy1);
          if (!fused) apply_activation(e.act, a.output, (oy1 - oy0) * ow * kBlock);
        }
      }
    }
  });
  if (failed.load()) {
    return kernels::op_error(StatusCode::kUnavailable, "conv2d_expand_depthwise", "cannot allocate ", buffer_floats,
                             " floats of expanded rows");
  }
  return Status::Ok();
}

}  // namespace kiln::cpu::nchwc

// Depthwise convolution on NCHW8c activations (nchwc.h): the prepared weights, the driver
// that threads over (image, channel block, output row), and the portable build of the row
// kernel (conv_nchwc_dw.inc; the AVX2 build is conv_nchwc_dw_avx2.cpp).
//
// A plain input is reordered once (to_blocked, threaded) before the rows run; a plain
// residual row is packed into pixel vectors, and a plain output row is computed into a
// row of pixel vectors and unpacked into its 8 channel planes, each while it is in cache.
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <memory>
#include <new>

#include "backends/cpu/kernels/common.h"
#include "backends/cpu/kernels/nchwc.h"
#include "backends/cpu/kernels/nchwc_impl.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"  // 8-lane vectors in internal functions only
#endif

namespace kiln::cpu::nchwc {
namespace detail {
namespace dw_portable {

#define NCHWC_FMA8(a, b, c) ((a) * (b) + (c))
#include "backends/cpu/kernels/nchwc_vec.inc"
#include "backends/cpu/kernels/conv_nchwc_dw.inc"
#undef NCHWC_FMA8

constexpr DepthwiseKernels kTable{depthwise_row};

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

// The row kernel's clamp and in-register activation for `act`; true when `act` runs over
// the stored row instead (silu, gelu).
bool in_register(FusedActivation act, detail::DepthwiseRow& a) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  a.lo = -kInf;
  a.hi = kInf;
  a.act = detail::InRegister::kClamp;
  switch (act) {
    case FusedActivation::kNone: return true;
    case FusedActivation::kRelu: a.lo = 0.0f; return true;
    case FusedActivation::kRelu6: a.lo = 0.0f; a.hi = 6.0f; return true;
    case FusedActivation::kHardswish: a.act = detail::InRegister::kHardswish; return true;
    case FusedActivation::kHardsigmoid: a.act = detail::InRegister::kHardsigmoid; return true;
    case FusedActivation::kSilu:
    case FusedActivation::kGeluErf:
    case FusedActivation::kGeluTanh: return false;
  }
  return false;
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
  std::unique_ptr<float[]> x_copy;
  const float* in = detail::blocked_input(x, x_copy, pool);
  if (in == nullptr) {
    return kernels::op_error(StatusCode::kUnavailable, "conv2d_depthwise", "cannot allocate ",
                             blocked_floats(x.n, x.c, x.h, x.w), " floats for the blocked input");
  }
  const std::int64_t channels = y.c, blocks = (channels + kBlock - 1) / kBlock, oh = y.h, ow = y.w;
  const std::int64_t rows = y.n * blocks * oh;
  const Act* res = e.residual;
  const bool plain_out = !y.blocked, plain_res = res != nullptr && !res->blocked;
  const std::int64_t scratch_floats = ((plain_out ? 1 : 0) + (plain_res ? 1 : 0)) * ow * kBlock;
  const auto row_kernel = detail::depthwise_kernels().row;
  const detail::TileKernels& tiles = detail::tile_kernels();

  detail::DepthwiseRow proto{};
  const bool fused = in_register(e.act, proto);
  proto.h = x.h;
  proto.w = x.w;
  proto.kh = s.kh;
  proto.kw = s.kw;
  proto.stride_h = s.stride_h;
  proto.stride_w = s.stride_w;
  proto.pad_h = s.pad_h;
  proto.pad_w = s.pad_w;
  proto.dilation_h = s.dilation_h;
  proto.dilation_w = s.dilation_w;
  proto.ow = ow;
  detail::plan_depthwise_columns(proto);

  std::atomic<bool> failed{false};
  // Chunks of whole rows, at least ~16K multiply-adds of 8 lanes each.
  pool.parallel_for(rows, pool.even_grain(rows, ow * s.kh * s.kw, 1 << 14), [&](std::int64_t begin, std::int64_t end) {
    std::unique_ptr<float[]> scratch;
    if (scratch_floats > 0) {
      scratch.reset(new (std::nothrow) float[static_cast<std::size_t>(scratch_floats)]);
      if (scratch == nullptr) {
        failed = true;
        return;
      }
    }
    float* out_row = scratch.get();
    float* res_row = plain_out ? out_row + ow * kBlock : out_row;
    alignas(32) float bias[kBlock];
    detail::DepthwiseRow a = proto;
    a.bias = bias;
    std::int64_t oy = begin % oh, block = begin / oh % blocks, image = begin / oh / blocks;
    for (std::int64_t i = begin; i < end; ++i) {
      const std::int64_t lanes = detail::block_channels(channels, block);
      if (i == begin || oy == 0) {  // a new (image, block)
        a.input = in + (image * blocks + block) * x.h * x.w * kBlock;
        a.weights = w.block(block);
        a.lanes = lanes;
        for (std::int64_t l = 0; l < kBlock; ++l) bias[l] = e.bias != nullptr && l < lanes ? e.bias[block * kBlock + l] : 0.0f;
      }
      if (res == nullptr) {
        a.residual = nullptr;
      } else if (res->blocked) {
        a.residual = res->data + image * res->image_floats() + (block * oh + oy) * ow * kBlock;
      } else {
        tiles.pack(res->data + image * res->image_floats() + (block * kBlock * oh + oy) * ow, oh * ow, lanes, ow,
                   res_row);
        a.residual = res_row;
      }
      a.output = plain_out ? out_row : y.data + image * y.image_floats() + (block * oh + oy) * ow * kBlock;
      row_kernel(a, oy);
      if (!fused) apply_activation(e.act, a.output, ow * kBlock);
      if (plain_out) {
        tiles.unpack(out_row, ow, y.data + image * y.image_floats() + (block * kBlock * oh + oy) * ow, oh * ow, lanes);
      }
      if (++oy == oh) {
        oy = 0;
        if (++block == blocks) {
          block = 0;
          ++image;
        }
      }
    }
  });
  if (failed) {
    return kernels::op_error(StatusCode::kUnavailable, "conv2d_depthwise", "cannot allocate ", scratch_floats,
                             " floats of scratch");
  }
  return Status::Ok();
}

}  // namespace kiln::cpu::nchwc

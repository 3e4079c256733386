// Pools on NCHW8c activations (nchwc.h): the drivers that thread over (image, channel
// block, output row), and the portable build of the row kernels (pool_nchwc.inc; the AVX2
// build is pool_nchwc_avx2.cpp). The rows go in bands of one (image, block): a plain
// input's rows a band reads are packed into pixel vectors, and a plain output band is
// computed into pixel vectors and unpacked into its channel planes, each while in cache.
// mean_hw reads a plain input in place (one contiguous plane per channel).
#include <algorithm>
#include <cstdint>
#include <memory>
#include <new>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>  // nchwc_vec.inc uses AVX intrinsics when the build targets AVX
#endif

#include "backends/cpu/kernels/common.h"
#include "backends/cpu/kernels/nchwc.h"
#include "backends/cpu/kernels/nchwc_impl.h"
#include "backends/cpu/kernels/simd.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"  // 8-lane vectors in internal functions only
#endif
#if defined(__clang__)
#pragma clang diagnostic ignored "-Wpsabi"  // the same, for clang (the fuzz preset)
#endif

namespace kiln::cpu::nchwc {
namespace detail {
namespace pool_portable {

#define NCHWC_FMA8(a, b, c) ((a) * (b) + (c))
#include "backends/cpu/kernels/nchwc_vec.inc"
#include "backends/cpu/kernels/pool_nchwc.inc"
#undef NCHWC_FMA8

constexpr PoolKernels kTable{pool_rows_of<max_row>, pool_rows_of<avg_row>, pool_rows_of<adaptive_avg_row>, mean_plane};

}  // namespace pool_portable

const PoolKernels& pool_kernels_portable() { return pool_portable::kTable; }

const PoolKernels& pool_kernels() { return use_avx2() ? pool_kernels_avx2() : pool_kernels_portable(); }

}  // namespace detail

namespace {

using RowsKernel = void (*)(const detail::PoolRows&, std::int64_t, std::int64_t);

// Every output row of y through `rows_kernel` in bands; `taps`: a window's taps (the cost
// of a pixel); output rows [oy0, oy1) read input rows in_rows(oy0, oy1) = [r0, r1), and
// a band of output rows reads at most (band - 1) * stride + span input rows.
template <typename InRows>
Status run_rows(const char* op, const Act& x, const Act& y, const detail::PoolRows& proto, RowsKernel rows_kernel,
                std::int64_t taps, std::int64_t stride, std::int64_t span, const InRows& in_rows, ThreadPool& pool) {
  const std::int64_t channels = y.c, blocks = (channels + kBlock - 1) / kBlock, oh = y.h, ow = y.w;
  const bool plain_in = !x.blocked, plain_out = !y.blocked;
  const std::int64_t band = detail::band_rows(2048, ow, x.w, stride, span);
  const std::int64_t in_floats = plain_in ? detail::whole_lines(std::min((band - 1) * stride + span, x.h) * x.w * kBlock) : 0;
  const std::int64_t out_floats = plain_out ? detail::whole_lines(band * ow * kBlock) : 0;
  const detail::TileKernels& tiles = detail::tile_kernels();
  const bool ok = detail::for_each_band(
      pool, y.n, blocks, oh, band, ow * taps, in_floats + out_floats, detail::split_by_rows(pool, channels, x.h * x.w),
      [&](std::int64_t image, std::int64_t block, std::int64_t oy0, std::int64_t oy1, float* scratch) {
        float* out_buf = scratch + in_floats;
        const std::int64_t lanes = detail::block_channels(channels, block), count = (oy1 - oy0) * ow;
        detail::PoolRows a = proto;
        std::int64_t r0 = 0, r1 = 0;
        in_rows(oy0, oy1, r0, r1);
        a.input = detail::block_rows(x, image, block, r0, std::max(r0, r1), scratch);
        a.lanes = lanes;
        a.output = plain_out ? out_buf : y.data + image * y.image_floats() + (block * oh + oy0) * ow * kBlock;
        rows_kernel(a, oy0, oy1);
        if (plain_out) {
          tiles.unpack(out_buf, count, y.data + image * y.image_floats() + block * kBlock * oh * ow + oy0 * ow, oh * ow,
                       lanes);
        }
      });
  if (!ok) return kernels::op_error(StatusCode::kUnavailable, op, "cannot allocate ", in_floats + out_floats, " floats of scratch");
  return Status::Ok();
}

detail::PoolRows pool_rows(const Act& x, const PoolShape& s, const Act& y) {
  detail::PoolRows a{};
  a.h = x.h;
  a.w = x.w;
  a.kh = s.kh;
  a.kw = s.kw;
  a.stride_h = s.stride_h;
  a.stride_w = s.stride_w;
  a.pad_h = s.pad_h;
  a.pad_w = s.pad_w;
  a.dilation_h = s.dilation_h;
  a.dilation_w = s.dilation_w;
  a.count_include_pad = s.count_include_pad;
  a.oh = y.h;
  a.ow = y.w;
  return a;
}

// Max and avg pools: the rows of the windows of output rows [oy0, oy1).
Status window_pool(const char* op, const Act& x, const detail::PoolRows& a, const Act& y, RowsKernel rows_kernel,
                   ThreadPool& pool) {
  const std::int64_t span = (a.kh - 1) * a.dilation_h + 1;
  auto in_rows = [&](std::int64_t oy0, std::int64_t oy1, std::int64_t& r0, std::int64_t& r1) {
    r0 = std::max<std::int64_t>(0, oy0 * a.stride_h - a.pad_h);
    r1 = std::min(x.h, (oy1 - 1) * a.stride_h - a.pad_h + span);
  };
  return run_rows(op, x, y, a, rows_kernel, a.kh * a.kw, a.stride_h, span, in_rows, pool);
}

}  // namespace

Status max_pool2d(const Act& x, const PoolShape& s, const Act& y, ThreadPool& pool) {
  detail::PoolRows a = pool_rows(x, s, y);
  detail::plan_pool_columns(a, true);
  return window_pool("max_pool2d", x, a, y, detail::pool_kernels().max_rows, pool);
}

Status avg_pool2d(const Act& x, const PoolShape& s, const Act& y, ThreadPool& pool) {
  detail::PoolRows a = pool_rows(x, s, y);
  a.dilation_h = a.dilation_w = 1;  // avg_pool2d has none
  detail::plan_pool_columns(a, false);
  return window_pool("avg_pool2d", x, a, y, detail::pool_kernels().avg_rows, pool);
}

Status adaptive_avg_pool2d(const Act& x, const Act& y, ThreadPool& pool) {
  const detail::PoolRows a = pool_rows(x, PoolShape{}, y);
  const std::int64_t bin_h = y.h > 0 ? (x.h + y.h - 1) / y.h : 1, bin_w = y.w > 0 ? (x.w + y.w - 1) / y.w : 1;
  auto in_rows = [&](std::int64_t oy0, std::int64_t oy1, std::int64_t& r0, std::int64_t& r1) {
    r0 = oy0 * x.h / y.h;
    r1 = (oy1 * x.h + y.h - 1) / y.h;
  };
  return run_rows("adaptive_avg_pool2d", x, y, a, detail::pool_kernels().adaptive_avg_rows, (bin_h + 1) * (bin_w + 1),
                  bin_h, bin_h + 1, in_rows, pool);
}

Status mean_hw(const Act& x, const Act& y, ThreadPool& pool) {
  const std::int64_t channels = x.c, blocks = (channels + kBlock - 1) / kBlock, hw = x.h * x.w;
  const std::int64_t items = x.n * blocks;
  const auto mean = detail::pool_kernels().mean;
  const auto row_sum = kernels::simd().row_sum;
  pool.parallel_for(items, pool.even_grain(items, hw * kBlock, 1 << 15), [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      const std::int64_t image = i / blocks, block = i % blocks, lanes = detail::block_channels(channels, block);
      float v[kBlock] = {};
      if (x.blocked) {
        mean(x.data + image * x.image_floats() + block * hw * kBlock, hw, v);
      } else {
        for (std::int64_t l = 0; l < lanes; ++l) {
          const float* plane = x.data + image * x.image_floats() + (block * kBlock + l) * hw;
          v[l] = static_cast<float>(static_cast<double>(row_sum(plane, hw)) / static_cast<double>(hw));
        }
      }
      float* out = y.data + image * y.image_floats() + block * kBlock;  // [c] or [blocks][8] of 1x1 planes
      for (std::int64_t l = 0; l < (y.blocked ? kBlock : lanes); ++l) out[l] = l < lanes ? v[l] : 0.0f;
    }
  });
  return Status::Ok();
}

}  // namespace kiln::cpu::nchwc

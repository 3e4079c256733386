// Pools on NCHW8c activations (nchwc.h): the drivers that thread over (image, channel
// block, output row), and the portable build of the row kernels (pool_nchwc.inc; the AVX2
// build is pool_nchwc_avx2.cpp). A plain input is reordered once (to_blocked, threaded); a
// plain output row is computed into a row of pixel vectors and unpacked into its channel
// planes. mean_hw reads a plain input in place (one contiguous plane per channel).
#include <atomic>
#include <cstdint>
#include <memory>
#include <new>

#include "backends/cpu/kernels/common.h"
#include "backends/cpu/kernels/nchwc.h"
#include "backends/cpu/kernels/nchwc_impl.h"
#include "backends/cpu/kernels/simd.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"  // 8-lane vectors in internal functions only
#endif

namespace kiln::cpu::nchwc {
namespace detail {
namespace pool_portable {

#define NCHWC_FMA8(a, b, c) ((a) * (b) + (c))
#include "backends/cpu/kernels/nchwc_vec.inc"
#include "backends/cpu/kernels/pool_nchwc.inc"
#undef NCHWC_FMA8

constexpr PoolKernels kTable{max_row, avg_row, adaptive_avg_row, mean_plane};

}  // namespace pool_portable

const PoolKernels& pool_kernels_portable() { return pool_portable::kTable; }

const PoolKernels& pool_kernels() { return use_avx2() ? pool_kernels_avx2() : pool_kernels_portable(); }

}  // namespace detail

namespace {

using RowKernel = void (*)(const detail::PoolRow&, std::int64_t);

// Every output row of y through `row_kernel`; `taps`: a window's taps (the cost of a pixel).
Status run_rows(const char* op, const Act& x, const Act& y, detail::PoolRow proto, RowKernel row_kernel,
                std::int64_t taps, ThreadPool& pool) {
  std::unique_ptr<float[]> x_copy;
  const float* in = detail::blocked_input(x, x_copy, pool);
  if (in == nullptr) {
    return kernels::op_error(StatusCode::kUnavailable, op, "cannot allocate ", blocked_floats(x.n, x.c, x.h, x.w),
                             " floats for the blocked input");
  }
  const std::int64_t channels = y.c, blocks = (channels + kBlock - 1) / kBlock, oh = y.h, ow = y.w;
  const std::int64_t rows = y.n * blocks * oh;
  const bool plain_out = !y.blocked;
  const detail::TileKernels& tiles = detail::tile_kernels();
  std::atomic<bool> failed{false};
  pool.parallel_for(rows, pool.even_grain(rows, ow * taps, 1 << 14), [&](std::int64_t begin, std::int64_t end) {
    std::unique_ptr<float[]> out_row;
    if (plain_out) {
      out_row.reset(new (std::nothrow) float[static_cast<std::size_t>(ow * kBlock)]);
      if (out_row == nullptr) {
        failed = true;
        return;
      }
    }
    detail::PoolRow a = proto;
    std::int64_t oy = begin % oh, block = begin / oh % blocks, image = begin / oh / blocks;
    for (std::int64_t i = begin; i < end; ++i) {
      const std::int64_t lanes = detail::block_channels(channels, block);
      a.input = in + (image * blocks + block) * x.h * x.w * kBlock;
      a.lanes = lanes;
      a.output = plain_out ? out_row.get() : y.data + image * y.image_floats() + (block * oh + oy) * ow * kBlock;
      row_kernel(a, oy);
      if (plain_out) {
        tiles.unpack(out_row.get(), ow, y.data + image * y.image_floats() + (block * kBlock * oh + oy) * ow, oh * ow,
                     lanes);
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
  if (failed) return kernels::op_error(StatusCode::kUnavailable, op, "cannot allocate ", ow * kBlock, " floats of scratch");
  return Status::Ok();
}

detail::PoolRow pool_row(const Act& x, const PoolShape& s, const Act& y) {
  detail::PoolRow a{};
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

}  // namespace

Status max_pool2d(const Act& x, const PoolShape& s, const Act& y, ThreadPool& pool) {
  detail::PoolRow a = pool_row(x, s, y);
  detail::plan_pool_columns(a, true);
  return run_rows("max_pool2d", x, y, a, detail::pool_kernels().max_row, s.kh * s.kw, pool);
}

Status avg_pool2d(const Act& x, const PoolShape& s, const Act& y, ThreadPool& pool) {
  detail::PoolRow a = pool_row(x, s, y);
  a.dilation_h = a.dilation_w = 1;  // avg_pool2d has none
  detail::plan_pool_columns(a, false);
  return run_rows("avg_pool2d", x, y, a, detail::pool_kernels().avg_row, s.kh * s.kw, pool);
}

Status adaptive_avg_pool2d(const Act& x, const Act& y, ThreadPool& pool) {
  detail::PoolRow a = pool_row(x, PoolShape{}, y);
  const std::int64_t bin = (y.h > 0 ? x.h / y.h + 1 : 1) * (y.w > 0 ? x.w / y.w + 1 : 1);
  return run_rows("adaptive_avg_pool2d", x, y, a, detail::pool_kernels().adaptive_avg_row, bin, pool);
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

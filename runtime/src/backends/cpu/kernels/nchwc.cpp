// NCHW8c reorders (nchwc.h) and the tile copies the blocked kernels share (nchwc_impl.h):
// the portable loops here, the AVX2 8x8 transposes in nchwc_avx2.cpp.
#include <algorithm>
#include <cstdint>

#include "backends/cpu/kernels/nchwc.h"
#include "backends/cpu/kernels/nchwc_impl.h"
#include "backends/cpu/kernels/simd.h"

namespace kiln::cpu::nchwc {
namespace detail {
namespace {

void pack_portable(const float* src, std::int64_t src_stride, std::int64_t channels, std::int64_t count,
                   float* dst) {
  for (std::int64_t p0 = 0; p0 < count; p0 += kBlock) {
    const std::int64_t n = std::min(kBlock, count - p0);
    for (std::int64_t c = 0; c < kBlock; ++c) {
      const float* s = src + c * src_stride + p0;
      float* d = dst + p0 * kBlock + c;
      if (c < channels) {
        for (std::int64_t p = 0; p < n; ++p) d[p * kBlock] = s[p];
      } else {
        for (std::int64_t p = 0; p < n; ++p) d[p * kBlock] = 0.0f;
      }
    }
  }
}

void unpack_portable(const float* src, std::int64_t count, float* dst, std::int64_t dst_stride, std::int64_t channels) {
  for (std::int64_t p0 = 0; p0 < count; p0 += kBlock) {
    const std::int64_t n = std::min(kBlock, count - p0);
    for (std::int64_t c = 0; c < channels; ++c) {
      const float* s = src + p0 * kBlock + c;
      float* d = dst + c * dst_stride + p0;
      for (std::int64_t p = 0; p < n; ++p) d[p] = s[p * kBlock];
    }
  }
}

constexpr TileKernels kPortable{pack_portable, unpack_portable};

// Pixels per reorder work item: 16 KiB of one block, so an item's 8 plain rows stream.
constexpr std::int64_t kReorderPixels = 512;

// Calls fn(image, block, p0, p1) over every (image, block, pixel run) of a reorder,
// threaded evenly.
template <typename Fn>
void for_each_run(std::int64_t n, std::int64_t c, std::int64_t hw, ThreadPool& pool, const Fn& fn) {
  const std::int64_t blocks = (c + kBlock - 1) / kBlock;
  const std::int64_t runs = (hw + kReorderPixels - 1) / kReorderPixels;
  const std::int64_t items = n * blocks * runs;
  const std::int64_t run_floats = std::min(hw, kReorderPixels) * kBlock;
  pool.parallel_for(items, pool.even_grain(items, run_floats, 32768), [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      const std::int64_t run = i % runs, block = i / runs % blocks, image = i / runs / blocks;
      const std::int64_t p0 = run * kReorderPixels;
      fn(image, block, p0, std::min(hw, p0 + kReorderPixels));
    }
  });
}

}  // namespace

const TileKernels& tile_kernels_portable() { return kPortable; }

bool use_avx2() {
  static const bool avx2 = kernels::simd_avx2() != nullptr;
  return avx2;
}

const TileKernels& tile_kernels() { return use_avx2() ? tile_kernels_avx2() : tile_kernels_portable(); }

PlaneRows block_rows(const Act& x, std::int64_t image, std::int64_t block, std::int64_t r0, std::int64_t r1,
                     float* buffer) {
  const std::int64_t plane = x.h * x.w;
  if (x.blocked) return {x.data + image * x.image_floats() + block * plane * kBlock, 0};
  if (r1 > r0) {
    tile_kernels().pack(x.data + image * x.image_floats() + block * kBlock * plane + r0 * x.w, plane,
                        block_channels(x.c, block), (r1 - r0) * x.w, buffer);
  }
  return {buffer, r0};
}

}  // namespace detail

void to_blocked(const float* src, float* dst, std::int64_t n, std::int64_t c, std::int64_t hw, ThreadPool& pool) {
  const auto pack = detail::tile_kernels().pack;
  const std::int64_t cb = (c + kBlock - 1) / kBlock;
  detail::for_each_run(n, c, hw, pool, [&](std::int64_t image, std::int64_t block, std::int64_t p0, std::int64_t p1) {
    pack(src + (image * c + block * kBlock) * hw + p0, hw, detail::block_channels(c, block), p1 - p0,
         dst + ((image * cb + block) * hw + p0) * kBlock);
  });
}

void to_plain(const float* src, float* dst, std::int64_t n, std::int64_t c, std::int64_t hw, ThreadPool& pool) {
  const auto unpack = detail::tile_kernels().unpack;
  const std::int64_t cb = (c + kBlock - 1) / kBlock;
  detail::for_each_run(n, c, hw, pool, [&](std::int64_t image, std::int64_t block, std::int64_t p0, std::int64_t p1) {
    unpack(src + ((image * cb + block) * hw + p0) * kBlock, p1 - p0, dst + (image * c + block * kBlock) * hw + p0, hw,
           detail::block_channels(c, block));
  });
}

}  // namespace kiln::cpu::nchwc

// Winograd F(4x4, 3x3) on NCHW8c activations (conv_nchwc_kernels.h): the transforms are
// the ISA table's (conv_nchwc_tile.inc), the 36 products per tile a grouped 1x1
// convolution on the dense tile kernels.
#include <algorithm>
#include <atomic>
#include <memory>
#include <new>
#include <string>

#include "backends/cpu/kernels/conv_nchwc_kernels.h"

namespace kiln::cpu::nchwc {
namespace {

// V and M of one chunk of tiles stay in L2 next to a slice of U.
constexpr std::int64_t kChunkBytes = 256 << 10;
constexpr std::int64_t kMinChunk = 8, kMaxChunk = 252;

// The 36 products as a grouped 1x1 convolution: group xi maps the padded input channels of
// V[xi] to the padded output channels of M[xi].
ConvShape products_shape(const ConvShape& s) {
  ConvShape p;
  p.in_channels = 36 * padded_channels(s.in_channels);
  p.out_channels = 36 * padded_channels(s.out_channels);
  p.groups = 36;
  return p;
}

// Per-thread V and M, grow-only (a fresh allocation of this size would be an mmap and page
// faults on every run).
struct Scratch {
  std::unique_ptr<float[]> data;
  std::int64_t capacity = 0;
  float* get(std::int64_t floats) {
    if (floats > capacity) {
      data.reset(new (std::nothrow) float[static_cast<std::size_t>(floats)]);
      capacity = data != nullptr ? floats : 0;
    }
    return data.get();
  }
};
thread_local Scratch t_scratch;

// The products run inside a unit of the outer split, on its thread.
ThreadPool& inline_pool() {
  static ThreadPool pool(1);
  return pool;
}

}  // namespace

bool winograd_eligible(const ConvShape& s) {
  return s.groups == 1 && s.kh == 3 && s.kw == 3 && s.stride_h == 1 && s.stride_w == 1 && s.dilation_h == 1 &&
         s.dilation_w == 1 && s.in_channels >= 16 && s.out_channels >= 16 && s.in_channels <= 256 &&
         s.out_channels <= 256;
}

Result<std::unique_ptr<DenseWeights>> winograd_prepare(const float* w, const ConvShape& s) {
  const std::int64_t c = s.in_channels, k = s.out_channels, cp = padded_channels(c), kp = padded_channels(k);
  std::unique_ptr<float[]> u(new (std::nothrow) float[static_cast<std::size_t>(36 * kp * cp)]());
  if (u == nullptr) return Status(StatusCode::kUnavailable, "[prepare_dense] out of memory for the Winograd weights");
  static constexpr double kG[6][3] = {{1.0 / 4, 0, 0},
                                      {-1.0 / 6, -1.0 / 6, -1.0 / 6},
                                      {-1.0 / 6, 1.0 / 6, -1.0 / 6},
                                      {1.0 / 24, 1.0 / 12, 1.0 / 6},
                                      {1.0 / 24, -1.0 / 12, 1.0 / 6},
                                      {0, 0, 1}};
  for (std::int64_t o = 0; o < k; ++o) {
    for (std::int64_t i = 0; i < c; ++i) {
      const float* g = w + (o * c + i) * 9;
      double gg[6][3];  // G g
      for (int r = 0; r < 6; ++r) {
        for (int col = 0; col < 3; ++col) gg[r][col] = kG[r][0] * g[col] + kG[r][1] * g[3 + col] + kG[r][2] * g[6 + col];
      }
      for (int r = 0; r < 6; ++r) {
        for (int col = 0; col < 6; ++col) {
          const double v = gg[r][0] * kG[col][0] + gg[r][1] * kG[col][1] + gg[r][2] * kG[col][2];  // (G g) G^T
          u[static_cast<std::size_t>(((6 * r + col) * kp + o) * cp + i)] = static_cast<float>(v);
        }
      }
    }
  }
  return prepare_dense_width(u.get(), products_shape(s), dense_kernels().preferred_width(kp / kBlock, cp));
}

bool winograd_applies(const Act& x, const Act& y, const Epilogue& e) {
  const bool act = e.act == FusedActivation::kNone || e.act == FusedActivation::kRelu ||
                   e.act == FusedActivation::kRelu6 || e.act == FusedActivation::kHardswish ||
                   e.act == FusedActivation::kHardsigmoid;
  return x.blocked && y.blocked && (e.residual == nullptr || e.residual->blocked) && act &&
         ((y.h + 3) / 4) * ((y.w + 3) / 4) >= 4;
}

Status conv2d_winograd(const DenseKernels& kernels, const Act& x, const DenseWeights& u, const ConvShape& s,
                       const float* bias, const Epilogue& e, const Act& y, ThreadPool& pool) {
  const std::int64_t tiles_w = (y.w + 3) / 4, tiles = (y.h + 3) / 4 * tiles_w;
  const std::int64_t cb = padded_channels(s.in_channels) / kBlock, kb = padded_channels(s.out_channels) / kBlock;
  // Chunks of tiles per image: V and M in L2, at least 8 tiles for the products' tiles,
  // and a multiple of the threads when the images do not split evenly.
  const std::int64_t per_tile = 36 * (cb + kb) * kBlock * 4;
  const std::int64_t chunk = std::clamp(kChunkBytes / per_tile, kMinChunk, kMaxChunk);
  std::int64_t chunks = (tiles + chunk - 1) / chunk;
  const std::int64_t threads = pool.num_threads();
  if (threads > 1 && x.n % threads != 0) chunks = std::min(tiles, (chunks + threads - 1) / threads * threads);

  TileActivation act = TileActivation::kNone;
  switch (e.act) {
    case FusedActivation::kRelu: act = TileActivation::kRelu; break;
    case FusedActivation::kRelu6: act = TileActivation::kRelu6; break;
    case FusedActivation::kHardswish: act = TileActivation::kHardswish; break;
    case FusedActivation::kHardsigmoid: act = TileActivation::kHardsigmoid; break;
    default: break;
  }
  const ConvShape products = products_shape(s);
  const std::int64_t units = x.n * chunks;
  const std::int64_t unit_cost = (tiles / chunks + 1) * 36 * cb * kb * 64;
  std::atomic<bool> failed{false};
  pool.parallel_for(units, pool.even_grain(units, unit_cost, 1 << 18), [&](std::int64_t first, std::int64_t last) {
    for (std::int64_t i = first; i < last && !failed.load(std::memory_order_relaxed); ++i) {
      const std::int64_t n = i / chunks, t0 = i % chunks * tiles / chunks, t1 = (i % chunks + 1) * tiles / chunks;
      const std::int64_t count = t1 - t0;
      float* v = t_scratch.get(36 * (cb + kb) * kBlock * count);
      if (v == nullptr) {
        failed.store(true);
        return;
      }
      float* m = v + 36 * cb * kBlock * count;
      kernels.winograd_input(x.data + n * x.image_floats(), x.h, x.w, cb, s.pad_h, s.pad_w, tiles_w, t0, count, v);
      const Act va{v, 1, products.in_channels, 1, count, true}, ma{m, 1, products.out_channels, 1, count, true};
      if (!conv2d_dense_on(kernels, va, u, products, {}, ma, inline_pool(), DenseAlgorithm::kDirect).ok()) {
        failed.store(true);
        return;
      }
      const float* residual = e.residual != nullptr ? e.residual->data + n * e.residual->image_floats() : nullptr;
      kernels.winograd_output(m, kb, tiles_w, t0, count, bias, residual, y.data + n * y.image_floats(), y.h, y.w, act);
    }
  });
  if (failed.load()) return Status(StatusCode::kUnavailable, "[conv2d_dense] out of memory for the Winograd tiles");
  return Status::Ok();
}

}  // namespace kiln::cpu::nchwc

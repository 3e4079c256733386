// Winograd F(4x4, 3x3) on NCHW8c activations (nchwc.h: conv2d_winograd). Per chunk of 4x4
// output tiles of one image: the input transform V = B^T d B of every 6x6 input tile (36
// vectors per input block: each lane is a channel, so the transforms are plain vector
// arithmetic), the 36 products M[xi] = V[xi] U[xi] as one grouped 1x1 convolution (36
// groups) on the dense tile kernels, and the output transform Y = A^T M A with the
// epilogue. 36 multiplies per 4x4 outputs and channel pair instead of 144; the rounding
// error grows with the transforms as on the plain path (conv_winograd.h). Each thread
// takes whole chunks, sized so that V and M stay in L2 while U streams. The transforms are
// the kernel table's (conv_nchwc_tile.inc).
#include <algorithm>
#include <atomic>
#include <memory>
#include <new>
#include <string>

#include "backends/cpu/kernels/conv_nchwc_kernels.h"

namespace kiln::cpu::nchwc {
namespace {

// V and M of one chunk of tiles (measured on resnet18's layers: 256 KB beats 96 KB to
// 1.5 MB); at least 8 tiles for the products' register tiles.
constexpr std::int64_t kChunkBytes = 256 << 10;
constexpr std::int64_t kMinChunk = 8, kMaxChunk = 252;
// U is 36 / 9 = 4x the direct weights: 9.4 MB at 256 x 256 channels, 36 MB at 512.
constexpr std::int64_t kMaxChannels = 256;

class PackedWinograd final : public WinogradWeights {
 public:
  ConvShape shape;
  std::unique_ptr<DenseWeights> products;  // U, as the weights of products_shape(shape)
};

// The 36 products as a grouped 1x1 convolution: group xi maps the padded input channels of
// V[xi] to the padded output channels of M[xi].
ConvShape products_shape(const ConvShape& s) {
  ConvShape p;
  p.in_channels = 36 * padded_channels(s.in_channels);
  p.out_channels = 36 * padded_channels(s.out_channels);
  p.groups = 36;
  return p;
}

// Per-thread chunk buffers, grow-only (a fresh allocation of this size would be an mmap
// and page faults on every run).
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

// The activations the output transform applies; kNone for the others too.
bool transform_applies(FusedActivation act, TileActivation* tile) {
  switch (act) {
    case FusedActivation::kNone: *tile = TileActivation::kNone; return true;
    case FusedActivation::kRelu: *tile = TileActivation::kRelu; return true;
    case FusedActivation::kRelu6: *tile = TileActivation::kRelu6; return true;
    case FusedActivation::kHardswish: *tile = TileActivation::kHardswish; return true;
    case FusedActivation::kHardsigmoid: *tile = TileActivation::kHardsigmoid; return true;
    default: *tile = TileActivation::kNone; return false;
  }
}

// The epilogue where the output transform cannot apply it (a plain y or residual, silu,
// gelu): the chunk's tiles (A^T m A + bias, winograd_output's tiles_out) + residual, the
// activation, stored in y's layout; only the tile positions inside y.
void finish_tiles(const float* tiles_out, const Epilogue& e, const Act& y, std::int64_t n, std::int64_t out_blocks,
                  std::int64_t tiles_w, std::int64_t t0, std::int64_t count) {
  const std::int64_t plane = y.h * y.w;
  float* yimg = y.data + n * y.image_floats();
  const Act* r = e.residual;
  const float* rimg = r != nullptr ? r->data + n * r->image_floats() : nullptr;
  for (std::int64_t t = 0; t < count; ++t) {
    const std::int64_t oy0 = (t0 + t) / tiles_w * 4, ox0 = (t0 + t) % tiles_w * 4;
    const std::int64_t rows = std::min<std::int64_t>(4, y.h - oy0), cols = std::min<std::int64_t>(4, y.w - ox0);
    for (std::int64_t kb = 0; kb < out_blocks; ++kb) {
      float tile[16 * kBlock];
      std::copy_n(tiles_out + (kb * count + t) * 16 * kBlock, 16 * kBlock, tile);
      const std::int64_t lanes = std::min(kBlock, y.c - kb * kBlock);
      for (std::int64_t i = 0; i < rows; ++i) {
        for (std::int64_t j = 0; j < cols; ++j) {
          for (std::int64_t l = 0; l < lanes && rimg != nullptr; ++l) {
            tile[(4 * i + j) * kBlock + l] += rimg[r->offset(kb * kBlock + l, oy0 + i, ox0 + j)];
          }
        }
      }
      apply_activation(e.act, tile, 16 * kBlock);
      for (std::int64_t i = 0; i < rows; ++i) {
        for (std::int64_t j = 0; j < cols; ++j) {
          const float* v = tile + (4 * i + j) * kBlock;
          const std::int64_t pixel = (oy0 + i) * y.w + ox0 + j;
          if (y.blocked) {
            std::copy_n(v, kBlock, yimg + (kb * plane + pixel) * kBlock);
          } else {
            for (std::int64_t l = 0; l < lanes; ++l) yimg[(kb * kBlock + l) * plane + pixel] = v[l];
          }
        }
      }
    }
  }
}

}  // namespace

bool winograd_supported(const ConvShape& s) {
  return s.groups == 1 && s.kh == 3 && s.kw == 3 && s.stride_h == 1 && s.stride_w == 1 && s.dilation_h == 1 &&
         s.dilation_w == 1 && s.pad_h >= 0 && s.pad_h <= 2 && s.pad_w >= 0 && s.pad_w <= 2 && s.in_channels >= 1 &&
         s.out_channels >= 1 && s.in_channels <= kMaxChannels && s.out_channels <= kMaxChannels;
}

bool winograd_preferred(const ConvShape& s, std::int64_t n, std::int64_t oh, std::int64_t ow, int threads) {
  (void)n;
  (void)threads;
  // Measured against conv2d_dense (AVX-512 and AVX2, 1 and 2 threads, blocked in and out):
  // Winograd wins from 16 channels a side at 112x112 (299 against 530 us) down to 7x7
  // (256 channels: 234 against 472 us; 4 tiles, 49 of their 64 outputs used). Below 16
  // channels the transforms outweigh the products; below half the tile outputs used, the
  // 4x fewer multiplies stop paying for them.
  const std::int64_t tiles = (oh + 3) / 4 * ((ow + 3) / 4);
  return winograd_supported(s) && s.in_channels >= 16 && s.out_channels >= 16 && 2 * oh * ow >= 16 * tiles;
}

Result<std::unique_ptr<WinogradWeights>> prepare_winograd(const float* w, const ConvShape& s) {
  if (!winograd_supported(s)) {
    return Status(StatusCode::kInvalidInput,
                  "[prepare_winograd] unsupported convolution: in_channels=" + std::to_string(s.in_channels) +
                      " out_channels=" + std::to_string(s.out_channels) + " groups=" + std::to_string(s.groups) +
                      " kernel " + std::to_string(s.kh) + "x" + std::to_string(s.kw));
  }
  if (w == nullptr) return Status(StatusCode::kInvalidInput, "[prepare_winograd] w is null");
  const std::int64_t c = s.in_channels, k = s.out_channels, cp = padded_channels(c), kp = padded_channels(k);
  std::unique_ptr<float[]> u(new (std::nothrow) float[static_cast<std::size_t>(36 * kp * cp)]());
  auto packed = std::unique_ptr<PackedWinograd>(new (std::nothrow) PackedWinograd);
  if (u == nullptr || packed == nullptr) return Status(StatusCode::kUnavailable, "[prepare_winograd] out of memory");
  // U = G g G^T per (output, input) channel pair, element xi = 6 * row + column.
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
  const ConvShape p = products_shape(s);
  KILN_ASSIGN_OR_RETURN(packed->products, prepare_dense_width(u.get(), p, dense_kernels().preferred_width(kp / kBlock, cp)));
  packed->shape = s;
  return std::unique_ptr<WinogradWeights>(std::move(packed));
}

Status conv2d_winograd(const Act& x, const WinogradWeights& w, const ConvShape& s, const Epilogue& e, const Act& y,
                       ThreadPool& pool) {
  return conv2d_winograd_on(dense_kernels(), x, w, s, e, y, pool);
}

Status conv2d_winograd_on(const DenseKernels& kernels, const Act& x, const WinogradWeights& weights, const ConvShape& s,
                          const Epilogue& e, const Act& y, ThreadPool& pool) {
  const auto& w = static_cast<const PackedWinograd&>(weights);
  KILN_RETURN_IF_ERROR(check_conv_call("conv2d_winograd", x, w.shape, winograd_supported(s), s, e, y));
  if (x.n == 0) return Status::Ok();
  const std::int64_t tiles_w = (y.w + 3) / 4, tiles = (y.h + 3) / 4 * tiles_w;
  const std::int64_t cb = padded_channels(s.in_channels) / kBlock, kb = padded_channels(s.out_channels) / kBlock;
  std::unique_ptr<float[]> bias(new (std::nothrow) float[static_cast<std::size_t>(kb * kBlock)]());
  if (bias == nullptr) return Status(StatusCode::kUnavailable, "[conv2d_winograd] out of memory");
  if (e.bias != nullptr) std::copy(e.bias, e.bias + s.out_channels, bias.get());
  // The output transform applies the epilogue itself to a blocked y (and residual).
  TileActivation act = TileActivation::kNone;
  const bool direct_out = transform_applies(e.act, &act) && y.blocked && (e.residual == nullptr || e.residual->blocked);

  // Chunks of tiles per image, a multiple of the threads when the images do not split
  // evenly among them.
  const std::int64_t per_tile = 36 * (cb + kb) * kBlock * 4;
  const std::int64_t chunk = std::clamp(kChunkBytes / per_tile, kMinChunk, kMaxChunk);
  std::int64_t chunks = (tiles + chunk - 1) / chunk;
  const std::int64_t threads = pool.num_threads(), tile_cost = 36 * cb * kb * 64, min_cost = 1 << 18;
  if (threads > 1 && x.n % threads != 0 && x.n * tiles * tile_cost >= threads * min_cost) {
    chunks = std::min(tiles, (chunks + threads - 1) / threads * threads);
  }

  const ConvShape products = products_shape(s);
  const std::int64_t units = x.n * chunks;
  const std::int64_t unit_cost = (tiles + chunks - 1) / chunks * tile_cost;
  std::atomic<bool> failed{false};
  pool.parallel_for(units, pool.even_grain(units, unit_cost, min_cost), [&](std::int64_t first, std::int64_t last) {
    for (std::int64_t i = first; i < last && !failed.load(std::memory_order_relaxed); ++i) {
      const std::int64_t n = i / chunks, t0 = i % chunks * tiles / chunks, t1 = (i % chunks + 1) * tiles / chunks;
      const std::int64_t count = t1 - t0;
      const std::int64_t v_floats = 36 * cb * kBlock * count, m_floats = 36 * kb * kBlock * count;
      float* v = t_scratch.get(v_floats + m_floats + (direct_out ? 0 : 16 * kb * kBlock * count));
      if (v == nullptr) {
        failed.store(true);
        return;
      }
      float* m = v + v_floats;
      kernels.winograd_input(x.data + n * x.image_floats(), x.blocked, x.c, x.h, x.w, cb, s.pad_h, s.pad_w, tiles_w,
                             t0, count, v);
      const Act va{v, 1, products.in_channels, 1, count, true}, ma{m, 1, products.out_channels, 1, count, true};
      if (!conv2d_dense_on(kernels, va, *w.products, products, {}, ma, inline_pool()).ok()) {
        failed.store(true);
        return;
      }
      if (direct_out) {
        const float* residual = e.residual != nullptr ? e.residual->data + n * e.residual->image_floats() : nullptr;
        kernels.winograd_output(m, kb, tiles_w, t0, count, bias.get(), residual, y.data + n * y.image_floats(), y.h,
                                y.w, act, nullptr);
      } else {
        float* tiles_out = m + m_floats;
        kernels.winograd_output(m, kb, tiles_w, t0, count, bias.get(), nullptr, nullptr, y.h, y.w,
                                TileActivation::kNone, tiles_out);
        finish_tiles(tiles_out, e, y, n, kb, tiles_w, t0, count);
      }
    }
  });
  if (failed.load()) return Status(StatusCode::kUnavailable, "[conv2d_winograd] out of memory for the tiles");
  return Status::Ok();
}

}  // namespace kiln::cpu::nchwc

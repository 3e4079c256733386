// Winograd F(4x4, 3x3) convolution (conv_winograd.h); the transforms are
// SimdKernels::winograd_weights / winograd_input / winograd_output (conv_winograd.inc).
#include "backends/cpu/kernels/conv_winograd.h"

#include <algorithm>
#include <atomic>
#include <memory>
#include <new>

#include "backends/cpu/gemm/gemm.h"
#include "backends/cpu/gemm/gemm_packed_a.h"
#include "backends/cpu/kernels/common.h"
#include "backends/cpu/kernels/simd.h"
#include "backends/cpu/thread_pool.h"

namespace kiln::cpu::kernels {
namespace {

constexpr int kTransformed = 36;  // 6x6 values per tile and per weight

// With prepared weights (bench/conv_bench.cpp, AVX2, single-thread CPU ms, prepared
// Winograd vs im2col + SGEMM, docs/PERFORMANCE.md): 256@14 (16 tiles) 1.48 vs 2.83, 512@7
// (4 tiles) 4.08 vs 4.01: at 4 tiles each GEMM streams its 1 MiB slice of packed weights
// for 4 rows, and the 4x larger transformed weights make it bandwidth-bound. So from 8 tiles.
constexpr std::int64_t kWinogradMinTilesPrepared = 8;
// The distance between two of the 36 matrices of a buffer holding `floats` each: rounded up
// to a cache line, then to an odd number of lines. The transforms touch all 36 at once,
// and with a power-of-two distance (64 x 64 weights, 256 channels x 16 tiles) those 36
// streams fall into the same cache sets and evict each other (a 256-channel layer's
// weight transform ran 60x slower).
std::int64_t matrix_stride(std::int64_t floats) {
  std::int64_t stride = (floats + 15) / 16 * 16;
  if ((stride / 16) % 2 == 0) stride += 16;
  return stride;
}

}  // namespace

bool winograd_channels(std::int64_t c, std::int64_t k) { return c >= 64 && k >= 64; }

bool winograd_profitable(const WinogradShape& s, bool prepared) {
  // Measured with bench/conv_bench.cpp (AVX2, single-thread CPU time, docs/PERFORMANCE.md).
  // Below 64 channels the direct path runs near peak and the 36 GEMMs are thin (M = 32
  // fills the 6x16 micro-kernel poorly): no measurable gain, so it keeps them. Unprepared,
  // each of the 36 GEMMs packs its K x C slice of the transformed weights on every call,
  // which costs about as much as the multiplies at 16 tiles: resnet18's 256@14 (16 tiles)
  // went 2.95 -> 3.64 ms with Winograd, 128@28 (49 tiles) 2.76 -> 1.61 ms, 64@56 2.52 ->
  // 1.31 ms. Prepared weights remove that cost (kWinogradMinTilesPrepared).
  if (!winograd_channels(s.c, s.k)) return false;
  if (s.tiles() < (prepared ? kWinogradMinTilesPrepared : 32)) return false;
  const double weights = prepared ? 0.0 : static_cast<double>(s.k) * s.c;
  const double floats = kTransformed * (weights + static_cast<double>(s.c + 2 * s.k) * s.tiles());
  return floats * 4 <= 256.0 * (1 << 20);
}

Result<std::unique_ptr<WinogradWeights>> winograd_prepare(const float* w, std::int64_t k, std::int64_t c) {
  const std::int64_t u_stride = matrix_stride(k * c);
  std::unique_ptr<float[]> u(new (std::nothrow) float[kTransformed * u_stride]);
  std::unique_ptr<WinogradWeights> out(new (std::nothrow) WinogradWeights());
  if (u == nullptr || out == nullptr) {
    return op_error(StatusCode::kUnavailable, "conv2d", "cannot allocate ", kTransformed * u_stride,
                    " floats of Winograd weights");
  }
  const SimdKernels& isa = simd();
  for (std::int64_t o = 0; o < k; ++o) isa.winograd_weights(w + o * c * 9, c, u.get() + o * c, u_stride);
  out->k = k;
  out->c = c;
  for (int xi = 0; xi < kTransformed; ++xi) {
    // U[xi] is [k][c], row stride c: the A of M[xi] = U[xi] V[xi].
    KILN_ASSIGN_OR_RETURN(out->slices[static_cast<std::size_t>(xi)], pack_a_matrix(u.get() + xi * u_stride, c, k, c));
  }
  return out;
}

Status conv_winograd_f32(const float* x, const float* w, const WinogradWeights* prepared, const float* bias, float* y,
                         const WinogradShape& s, ThreadPool& pool, bool relu) {
  if (prepared != nullptr && (prepared->k != s.k || prepared->c != s.c)) {
    return op_error(StatusCode::kInternal, "conv2d", "prepared Winograd weights are ", prepared->k, " x ", prepared->c,
                    ", the layer ", s.k, " x ", s.c);
  }
  const std::int64_t tiles_h = s.tiles_h(), tiles_w = s.tiles_w();
  const std::int64_t per_image = tiles_h * tiles_w, tiles = s.tiles();
  const std::int64_t u_stride = matrix_stride(s.k * s.c), v_stride = matrix_stride(s.c * tiles),
                     m_stride = matrix_stride(s.k * tiles);
  const std::int64_t u_floats = prepared != nullptr ? 0 : kTransformed * u_stride, v_floats = kTransformed * v_stride,
                     m_floats = kTransformed * m_stride;
  std::unique_ptr<float[]> buffer(new (std::nothrow) float[u_floats + v_floats + m_floats]);
  if (buffer == nullptr) {
    return op_error(StatusCode::kUnavailable, "conv2d", "cannot allocate ", u_floats + v_floats + m_floats,
                    " floats of Winograd buffers");
  }
  float* u = buffer.get();  // [xi][k][c], matrices u_stride apart
  float* v = u + u_floats;  // [xi][c][tile]
  float* m = v + v_floats;  // [xi][k][tile]
  const SimdKernels& isa = simd();
  if (prepared == nullptr) {
    pool.parallel_for(s.k, 8, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t o = begin; o < end; ++o) {
        isa.winograd_weights(w + o * s.c * 9, s.c, u + o * s.c, u_stride);
      }
    });
  }
  pool.parallel_for(s.n * s.c, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t plane = begin; plane < end; ++plane) {
      const std::int64_t img = plane / s.c, c = plane % s.c;
      isa.winograd_input(x + plane * s.h * s.w, s.h, s.w, s.pad_h, s.pad_w, tiles_h, tiles_w,
                         v + c * tiles + img * per_image, v_stride);
    }
  });
  std::atomic<bool> failed{false};
  if (prepared != nullptr) {
    // M[xi] = U[xi] V[xi] with U[xi] packed at load: only V[xi] is packed here.
    pool.parallel_for(kTransformed, 1, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t xi = begin; xi < end; ++xi) {
        GemmParams p;
        p.m = s.k;
        p.n = tiles;
        p.k = s.c;
        p.b = v + xi * v_stride;
        p.ldb = tiles;
        p.c = m + xi * m_stride;
        p.ldc = tiles;
        if (!sgemm_packed_a(p, prepared->slices[static_cast<std::size_t>(xi)], nullptr).ok()) failed = true;
      }
    });
  } else {
    pool.parallel_for(kTransformed, 1, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t xi = begin; xi < end; ++xi) {
        GemmParams p;
        p.m = s.k;
        p.n = tiles;
        p.k = s.c;
        p.a = u + xi * u_stride;
        p.lda = s.c;
        p.b = v + xi * v_stride;
        p.ldb = tiles;
        p.c = m + xi * m_stride;
        p.ldc = tiles;
        if (!sgemm(p, nullptr).ok()) failed = true;
      }
    });
  }
  if (failed) return op_error(StatusCode::kUnavailable, "conv2d", "the Winograd GEMM could not allocate its buffers");
  pool.parallel_for(s.n * s.k, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t plane = begin; plane < end; ++plane) {
      const std::int64_t img = plane / s.k, o = plane % s.k;
      isa.winograd_output(m + o * tiles + img * per_image, m_stride, tiles_h, tiles_w, y + plane * s.oh * s.ow,
                          s.oh, s.ow, bias != nullptr ? bias[o] : 0.0f, relu);
    }
  });
  return Status::Ok();
}

}  // namespace kiln::cpu::kernels

// Winograd F(4x4, 3x3) convolution (conv_winograd.h); the transforms are
// SimdKernels::winograd_weights / winograd_input / winograd_output (conv_winograd.inc).
#include "backends/cpu/kernels/conv_winograd.h"

#include <atomic>
#include <memory>
#include <new>

#include "backends/cpu/gemm/gemm.h"
#include "backends/cpu/kernels/common.h"
#include "backends/cpu/kernels/simd.h"
#include "backends/cpu/thread_pool.h"

namespace kiln::cpu::kernels {
namespace {

constexpr int kTransformed = 36;  // 6x6 values per tile and per weight

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

bool winograd_profitable(const WinogradShape& s) {
  // Measured with bench/conv_bench.cpp (AVX2, single-thread CPU time, docs/PERFORMANCE.md).
  // Below 64 channels the direct path runs near peak and the 36 GEMMs are thin (M = 32
  // fills the 6x16 micro-kernel poorly): no measurable gain, so it keeps them. Each of
  // the 36 GEMMs packs its K x C slice of the transformed weights on every call, which
  // costs about as much as the multiplies at 16 tiles: resnet18's 256@14 (16 tiles) went
  // 2.95 -> 3.64 ms with Winograd, 128@28 (49 tiles) 2.76 -> 1.61 ms, 64@56 2.52 -> 1.31 ms.
  if (s.c < 64 || s.k < 64) return false;
  if (s.tiles() < 32) return false;
  const double floats = kTransformed * (static_cast<double>(s.k) * s.c + static_cast<double>(s.c + s.k) * s.tiles());
  return floats * 4 <= 256.0 * (1 << 20);
}

Status conv_winograd_f32(const float* x, const float* w, const float* bias, float* y, const WinogradShape& s,
                         ThreadPool& pool, bool relu) {
  const std::int64_t tiles_h = s.tiles_h(), tiles_w = s.tiles_w();
  const std::int64_t per_image = tiles_h * tiles_w, tiles = s.tiles();
  const std::int64_t u_stride = matrix_stride(s.k * s.c), v_stride = matrix_stride(s.c * tiles),
                     m_stride = matrix_stride(s.k * tiles);
  const std::int64_t u_floats = kTransformed * u_stride, v_floats = kTransformed * v_stride,
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
  pool.parallel_for(s.k, 8, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t o = begin; o < end; ++o) {
      isa.winograd_weights(w + o * s.c * 9, s.c, u + o * s.c, u_stride);
    }
  });
  pool.parallel_for(s.n * s.c, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t plane = begin; plane < end; ++plane) {
      const std::int64_t img = plane / s.c, c = plane % s.c;
      isa.winograd_input(x + plane * s.h * s.w, s.h, s.w, s.pad_h, s.pad_w, tiles_h, tiles_w,
                         v + c * tiles + img * per_image, v_stride);
    }
  });
  std::atomic<bool> failed{false};
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

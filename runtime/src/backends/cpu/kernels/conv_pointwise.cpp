// Transposed 1x1 convolutions (conv_pointwise.h).
#include "backends/cpu/kernels/conv_pointwise.h"

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <new>

#include "backends/cpu/kernels/common.h"

namespace kiln::cpu::kernels {
namespace {

// Y^T [pixels][out] per calling thread, grow-only (a fresh allocation of this size would be
// an mmap and page faults on every run).
struct TransposeBuffer {
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
thread_local TransposeBuffer t_buffer;

// dst[o][p] = src[p][o] for output channels [o0, o1), in 8x8 tiles.
void transpose_rows(const float* src, float* dst, std::int64_t pixels, std::int64_t channels, std::int64_t o0,
                    std::int64_t o1) {
  constexpr std::int64_t kTile = 8;
  for (std::int64_t ob = o0; ob < o1; ob += kTile) {
    const std::int64_t oe = std::min(o1, ob + kTile);
    for (std::int64_t pb = 0; pb < pixels; pb += kTile) {
      const std::int64_t pe = std::min(pixels, pb + kTile);
      for (std::int64_t o = ob; o < oe; ++o) {
        for (std::int64_t p = pb; p < pe; ++p) dst[o * pixels + p] = src[p * channels + o];
      }
    }
  }
}

}  // namespace

bool pointwise_transposed_profitable(std::int64_t in_channels, std::int64_t out_channels, std::int64_t pixels) {
  if (in_channels < 1 || out_channels < 1) return false;
  // Up to 8 pixels the plain GEMM's only B panel runs its narrow 6x8 / 6x4 tiles, which
  // stream all of W for a few columns; transposed, W^T is B in whole 16-column panels and
  // one pixel is a GEMV. From 9 pixels on, the narrow tiles waste less than the transposed
  // form's 6-row padding plus its transpose: measured with the SGEMM's narrow tiles,
  // mobilenet_v2's 7x7 layers (49 = 3 x 16 + 1) are faster plain (9.0-9.2 against 9.3-9.4
  // ms), EfficientNet-B0 and MobileNetV3 at 64x64 (2x2 planes, squeeze-excitation) faster
  // transposed.
  return pixels >= 1 && pixels <= 8;
}

Result<PackedB> pointwise_transposed_prepare(const float* w, std::int64_t out_channels, std::int64_t in_channels) {
  return pack_b(w, in_channels, in_channels, out_channels, /*trans_b=*/true, nullptr);
}

Result<PackedB> pointwise_transposed_prepare(const PackedA& w) {
  const std::int64_t m = w.m(), k = w.k();
  std::unique_ptr<float[]> plain(new (std::nothrow) float[static_cast<std::size_t>(std::max<std::int64_t>(m * k, 1))]);
  if (plain == nullptr) return op_error(StatusCode::kUnavailable, "conv2d", "cannot allocate ", m * k, " floats of weights");
  // PackedA: per K block of kc() columns, panel p holds rows 6p.. as [t * 6 + i].
  for (std::int64_t k0 = 0; k0 < k; k0 += w.kc()) {
    const std::int64_t kc = std::min(w.kc(), k - k0);
    const float* block = w.block(k0);
    for (std::int64_t row = 0; row < m; ++row) {
      const float* panel = block + row / 6 * kc * 6;
      for (std::int64_t t = 0; t < kc; ++t) plain[static_cast<std::size_t>(row * k + k0 + t)] = panel[t * 6 + row % 6];
    }
  }
  return pointwise_transposed_prepare(plain.get(), m, k);
}

Status conv_pointwise_transposed(const float* x, const PackedB& wt, const float* bias, float* y, std::int64_t batch,
                                 std::int64_t in_channels, std::int64_t out_channels, std::int64_t pixels,
                                 GemmActivation act, ThreadPool& pool) {
  float* yt = nullptr;
  if (pixels > 1) {
    yt = t_buffer.get(pixels * out_channels);
    if (yt == nullptr) {
      return op_error(StatusCode::kUnavailable, "conv2d", "cannot allocate ", pixels * out_channels,
                      " floats of transposed output");
    }
  }
  for (std::int64_t n = 0; n < batch; ++n) {
    float* out = y + n * out_channels * pixels;
    GemmParams p;
    p.m = pixels;
    p.n = out_channels;
    p.k = in_channels;
    p.trans_a = true;  // X^T: x is [in][pixels]
    p.a = x + n * in_channels * pixels;
    p.lda = pixels;
    p.c = pixels == 1 ? out : yt;  // one pixel: Y^T is Y
    p.ldc = out_channels;
    p.bias = bias;
    p.bias_kind = bias != nullptr ? GemmBias::kPerColumn : GemmBias::kNone;
    p.activation = act;
    KILN_RETURN_IF_ERROR(sgemm_prepacked(p, wt, &pool));
    if (pixels == 1) continue;
    const std::int64_t grain = std::max<std::int64_t>(8, 4096 / pixels / 8 * 8);
    pool.parallel_for((out_channels + 7) / 8, std::max<std::int64_t>(1, grain / 8),
                      [&](std::int64_t b0, std::int64_t b1) {
                        transpose_rows(yt, out, pixels, out_channels, b0 * 8, std::min(out_channels, b1 * 8));
                      });
  }
  return Status::Ok();
}

}  // namespace kiln::cpu::kernels

// Winograd F(4x4, 3x3) convolution for 3x3, stride-1, dilation-1, ungrouped conv2d (NCHW),
// the path conv.cpp takes for layers with enough channels (winograd_profitable).
//
// Per call: the weights are transformed (U = G g G^T, 36 values per (output, input)
// channel pair), every 6x6 input tile (stride 4) of every channel (V = B^T d B), then 36
// independent GEMMs M[xi] = U[xi] [K x C] * V[xi] [C x tiles] on the packed SGEMM, one
// per pool task, and the output transform Y = A^T M A + bias (+ relu) per output channel.
// 4x4 outputs cost 36 multiplies per channel pair instead of 144 (4x fewer), at the price
// of the transforms and a larger rounding error: the transforms scale tile values by up to
// 10 (B^T) and 19 (A^T) around the rounding of the products. With inputs in [-1, 1] the
// error stays below 1.7e-6 x (|bias| + sum |w| of the output channel) in
// tests/kernels/conv_test.cpp (AVX2 1.4e-6, baseline 1.6e-6, no FMA);
// on resnet18 (layers 1-3 take this path with prepared weights) the max |diff| to the
// golden is 8.8e-6 on one thread (docs/PERFORMANCE.md); the worst element uses 13% of its
// tolerance (rtol 1e-4, atol 1e-5). KILN_CONV_WINOGRAD=0 turns the path off.
//
// Prepared weights (winograd_prepare, made on the first run that picks Winograd,
// ConvWeights::winograd_for): U is transformed once and each U[xi] [K x C] packed as the
// SGEMM's A (pack_a_matrix); a run then packs only V[xi] (sgemm_packed_a), at every tile
// count. The product lands in M[xi] [K x tiles] as the output transform reads it. (An
// earlier orientation, M[xi]^T = V[xi]^T U[xi]^T with U as a packed B, ran 16 or 49 tiles
// as 3 or 9 thin row panels of a 6x16 tile with a pack of V and a transpose per slice.)
// Without them (a non-constant weight, prepack_weights off) the transform and the GEMM's
// packing of U are redone on every call, which is why the cost rule then wants many tiles
// per weight.
#pragma once

#include <array>
#include <cstdint>
#include <memory>

#include "backends/cpu/gemm/gemm.h"
#include "backends/cpu/gemm/gemm_packed_a.h"
#include "backends/cpu/kernel.h"
#include "kiln/runtime/status.h"

namespace kiln::cpu {
class ThreadPool;
}

namespace kiln::cpu::kernels {

/// A 3x3 stride-1 dilation-1 groups-1 conv2d: x [n][c][h][w] -> y [n][k][oh][ow] with
/// oh = h + 2 pad_h - 2, ow = w + 2 pad_w - 2.
struct WinogradShape {
  std::int64_t n = 0, c = 0, h = 0, w = 0, k = 0;
  std::int64_t pad_h = 0, pad_w = 0;
  std::int64_t oh = 0, ow = 0;
  std::int64_t tiles_h() const { return (oh + 3) / 4; }
  std::int64_t tiles_w() const { return (ow + 3) / 4; }
  std::int64_t tiles() const { return n * tiles_h() * tiles_w(); }
};

/// Weights of a k x c 3x3 layer transformed (U = G g G^T) and packed once: slices[xi] is
/// U[xi] ([k x c]) as sgemm_packed_a's A.
struct WinogradWeights final : PreparedWeights {
  std::int64_t k = 0, c = 0;
  std::array<PackedA, 36> slices;
};

/// The channel counts worth preparing Winograd weights for (the cost rule's channel part).
bool winograd_channels(std::int64_t c, std::int64_t k);

/// Transforms and packs w [k][c][3][3]. Errors: kUnavailable when memory fails.
Result<std::unique_ptr<WinogradWeights>> winograd_prepare(const float* w, std::int64_t k, std::int64_t c);

/// The cost rule: whether Winograd beats the im2col GEMM / direct paths for `s`: at least
/// 64 input and output channels (to feed the 36 GEMMs), buffers <= 256 MiB, and enough
/// tiles over the batch: 32 when the weights are transformed and packed on every call,
/// 8 with `prepared` weights.
bool winograd_profitable(const WinogradShape& s, bool prepared);

/// y = conv2d(x, w, bias) (+ relu) through F(4x4, 3x3). bias may be null; `prepared`
/// (may be null) must hold w's transform (k == s.k, c == s.c).
/// Errors: kUnavailable when the transform buffers cannot be allocated (y untouched).
Status conv_winograd_f32(const float* x, const float* w, const WinogradWeights* prepared, const float* bias, float* y,
                         const WinogradShape& s, ThreadPool& pool, bool relu);

}  // namespace kiln::cpu::kernels

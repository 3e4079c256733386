// conv2d_dense's AVX-512 tile kernels (conv_nchwc_kernels.h), compiled with -mavx512f
// -mavx512vl -mavx512bw -mavx512dq (the *_avx512.cpp rule). Reached only through
// dense_kernels_avx512(), after the CPU check. Uses nothing inline from shared headers.
//
// A zmm register holds two 8-channel blocks (the packed weights of blocks b and b + 1 of
// one input channel are 16 consecutive floats), so a tile of B blocks is B / 2 zmm
// accumulators per pixel (and a ymm one for an odd B); the 32 registers hold 8 pixels x 6
// blocks or 6 pixels x 8 blocks. On Zen 4, whose 512-bit FMAs are two 256-bit halves, the
// gain over AVX2 is the larger register tile and the embedded broadcast: a third of the
// instructions per FMA.
#include <cstdint>

#include "backends/cpu/kernels/conv_nchwc_kernels.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

// GCC 12's AVX-512 intrinsics pass an undefined vector as the unused merge source of the
// unmasked forms, which -Wmaybe-uninitialized reports at every inlined call.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace kiln::cpu::nchwc {
namespace avx512_impl {

// The Winograd transforms (8-lane vectors: one block) from the shared source.
#define KILN_NCHWC_FMA8(a, b, c) _mm256_fmadd_ps((a), (b), (c))
#include "backends/cpu/kernels/conv_nchwc_tile.inc"
#undef KILN_NCHWC_FMA8

// Accumulator sets (see conv_nchwc_tile.inc): 4 zmm chains in flight cover the latency.
constexpr int sets(int accumulators) { return accumulators <= 1 ? 4 : accumulators <= 3 ? 2 : 1; }

// act(v) for the activations a tile applies: clamp(v * scale + shift, lo, hi), times v for
// hardswish.
struct Activation {
  float scale = 1.0f, shift = 0.0f, lo = -__builtin_inff(), hi = __builtin_inff();
  bool multiply = false;
};
Activation activation(TileActivation act) {
  Activation f;
  switch (act) {
    case TileActivation::kNone: break;
    case TileActivation::kRelu: f.lo = 0.0f; break;
    case TileActivation::kRelu6: f.lo = 0.0f, f.hi = 6.0f; break;
    case TileActivation::kHardswish:
    case TileActivation::kHardsigmoid: f.scale = 1.0f / 6.0f, f.shift = 0.5f, f.lo = 0.0f, f.hi = 1.0f; break;
  }
  f.multiply = act == TileActivation::kHardswish;
  return f;
}
inline __m512 apply(__m512 v, const Activation& f) {
  const __m512 t = _mm512_min_ps(
      _mm512_max_ps(_mm512_fmadd_ps(v, _mm512_set1_ps(f.scale), _mm512_set1_ps(f.shift)), _mm512_set1_ps(f.lo)),
      _mm512_set1_ps(f.hi));
  return f.multiply ? _mm512_mul_ps(v, t) : t;
}
inline __m256 apply(__m256 v, const Activation& f) {
  const __m256 t = _mm256_min_ps(
      _mm256_max_ps(_mm256_fmadd_ps(v, _mm256_set1_ps(f.scale), _mm256_set1_ps(f.shift)), _mm256_set1_ps(f.lo)),
      _mm256_set1_ps(f.hi));
  return f.multiply ? _mm256_mul_ps(v, t) : t;
}

// Two blocks at p and p + stride as one zmm, and back.
inline __m512 load2(const float* p, std::int64_t stride) {
  return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(p)), _mm256_loadu_ps(p + stride), 1);
}
inline void store2(float* p, std::int64_t stride, __m512 v) {
  _mm256_storeu_ps(p, _mm512_castps512_ps256(v));
  _mm256_storeu_ps(p + stride, _mm512_extractf32x8_ps(v, 1));
}

// A tile's accumulators: Z zmm (two blocks each) and H (0 or 1) ymm per pixel.
template <int P, int Z, int H>
struct Acc {
  __m512 z[P][Z > 0 ? Z : 1];
  __m256 h[P];
};

// One input channel: the weight vectors, P broadcasts (folded into the FMA when used once),
// P * (Z + H) FMAs.
template <int P, int Z, int H>
[[gnu::always_inline]] inline void channel(Acc<P, Z, H>& acc, const float* const (&px)[P], std::int64_t d,
                                           const float* w) {
  __m512 wz[Z > 0 ? Z : 1];
#pragma GCC unroll 8
  for (int z = 0; z < Z; ++z) wz[z] = _mm512_loadu_ps(w + 16 * z);
  __m256 wh = H ? _mm256_loadu_ps(w + 16 * Z) : _mm256_setzero_ps();
#pragma GCC unroll 16
  for (int p = 0; p < P; ++p) {
    if constexpr (Z > 0) {
      const __m512 x = _mm512_set1_ps(px[p][d]);
#pragma GCC unroll 8
      for (int z = 0; z < Z; ++z) acc.z[p][z] = _mm512_fmadd_ps(x, wz[z], acc.z[p][z]);
      if constexpr (H > 0) acc.h[p] = _mm256_fmadd_ps(_mm512_castps512_ps256(x), wh, acc.h[p]);
    } else {
      acc.h[p] = _mm256_fmadd_ps(_mm256_set1_ps(px[p][d]), wh, acc.h[p]);
    }
  }
}

template <int P, int B, bool kBlockedInput>
void tiles(const DenseTileArgs& a, const std::int64_t* in_off, const std::int64_t* out_off, std::int64_t count) {
  constexpr int Z = B / 2, H = B % 2;
  constexpr int S = kBlockedInput ? sets(P * (Z + H)) : 1;
  // Locals: the epilogue's __m256 stores may alias anything, `a` included.
  const std::int64_t obs = a.out_block_stride;
  float* const out = a.out;
  const float* const residual = a.residual;
  const TileActivation act = a.act;
  __m512 bias_z[Z > 0 ? Z : 1];
#pragma GCC unroll 8
  for (int z = 0; z < Z; ++z) bias_z[z] = _mm512_loadu_ps(a.bias + 16 * z);
  const __m256 bias_h = H ? _mm256_loadu_ps(a.bias + 16 * Z) : _mm256_setzero_ps();
  for (std::int64_t k = 0; k < count; ++k) {
    std::int64_t io[P], oo[P];
    if (in_off != nullptr) {
#pragma GCC unroll 16
      for (int p = 0; p < P; ++p) io[p] = in_off[k * P + p], oo[p] = out_off[k * P + p];
    } else {
#pragma GCC unroll 16
      for (int p = 0; p < P; ++p) io[p] = a.run_in + (k * P + p) * a.run_in_step, oo[p] = a.run_out + (k * P + p) * 8;
    }
    Acc<P, Z, H> acc[S];
#pragma GCC unroll 16
    for (int p = 0; p < P; ++p) {
#pragma GCC unroll 8
      for (int z = 0; z < Z; ++z) {
        acc[0].z[p][z] = bias_z[z];
#pragma GCC unroll 4
        for (int s = 1; s < S; ++s) acc[s].z[p][z] = _mm512_setzero_ps();
      }
      if constexpr (H > 0) {
        acc[0].h[p] = bias_h;
#pragma GCC unroll 4
        for (int s = 1; s < S; ++s) acc[s].h[p] = _mm256_setzero_ps();
      }
    }
    const float* px[P];
#pragma GCC unroll 16
    for (int p = 0; p < P; ++p) px[p] = a.in + io[p];
    if (kBlockedInput && a.taps == 1) {
      // 1x1 (or a region with one tap): the input blocks only.
      const float* wt = a.w + a.tap_index[0] * (64 * B);
      std::int64_t d = a.tap_in[0];
      for (std::int64_t cb = 0; cb < a.in_blocks; ++cb, wt += a.w_block_stride, d += a.in_block_stride) {
#pragma GCC unroll 8
        for (int ci = 0; ci < 8; ++ci) channel<P, Z, H>(acc[ci % S], px, d + ci, wt + ci * 8 * B);
      }
    } else {
      const float* wb = a.w;
      for (std::int64_t cb = 0; cb < a.in_blocks; ++cb, wb += a.w_block_stride) {
        const std::int64_t ib = cb * a.in_block_stride;
        for (std::int64_t t = 0; t < a.taps; ++t) {
          const float* wt = wb + a.tap_index[t] * (64 * B);
          const std::int64_t d = ib + a.tap_in[t];
          if constexpr (kBlockedInput) {
#pragma GCC unroll 8
            for (int ci = 0; ci < 8; ++ci) channel<P, Z, H>(acc[ci % S], px, d + ci, wt + ci * 8 * B);
          } else {
            const std::int64_t channels = cb + 1 < a.in_blocks ? 8 : a.last_block_channels;
            for (std::int64_t ci = 0; ci < channels; ++ci) {
              channel<P, Z, H>(acc[0], px, d + ci * a.in_channel_stride, wt + ci * 8 * B);
            }
          }
        }
      }
    }
#pragma GCC unroll 4
    for (int s = 1; s < S; ++s) {
#pragma GCC unroll 16
      for (int p = 0; p < P; ++p) {
#pragma GCC unroll 8
        for (int z = 0; z < Z; ++z) acc[0].z[p][z] = _mm512_add_ps(acc[0].z[p][z], acc[s].z[p][z]);
        if constexpr (H > 0) acc[0].h[p] = _mm256_add_ps(acc[0].h[p], acc[s].h[p]);
      }
    }
    if (residual != nullptr) {
#pragma GCC unroll 16
      for (int p = 0; p < P; ++p) {
        const float* r = residual + oo[p];
#pragma GCC unroll 8
        for (int z = 0; z < Z; ++z) acc[0].z[p][z] = _mm512_add_ps(acc[0].z[p][z], load2(r + 2 * z * obs, obs));
        if constexpr (H > 0) acc[0].h[p] = _mm256_add_ps(acc[0].h[p], _mm256_loadu_ps(r + 2 * Z * obs));
      }
    }
    if (act != TileActivation::kNone) {
      const Activation f = activation(act);
#pragma GCC unroll 16
      for (int p = 0; p < P; ++p) {
#pragma GCC unroll 8
        for (int z = 0; z < Z; ++z) acc[0].z[p][z] = apply(acc[0].z[p][z], f);
        if constexpr (H > 0) acc[0].h[p] = apply(acc[0].h[p], f);
      }
    }
#pragma GCC unroll 16
    for (int p = 0; p < P; ++p) {
      float* o = out + oo[p];
#pragma GCC unroll 8
      for (int z = 0; z < Z; ++z) store2(o + 2 * z * obs, obs, acc[0].z[p][z]);
      if constexpr (H > 0) _mm256_storeu_ps(o + 2 * Z * obs, acc[0].h[p]);
    }
  }
}

template <int B, int P>
constexpr void fill(DenseKernels& k) {
  if constexpr (P > 0) {
    k.fn[0][B - 1][P - 1] = &tiles<P, B, false>;
    k.fn[1][B - 1][P - 1] = &tiles<P, B, true>;
    fill<B, P - 1>(k);
  }
}

// The widest tile of 8 pixels (6 blocks: 24 zmm accumulators) streams the fewest weight and
// input loads per FMA and wins on every layer with a long reduction, even with a narrower
// last block group (resnet18's 8 and 64 blocks); 8 blocks x 6 pixels (as many
// accumulators) measured 3-7 % slower on two threads across resnet18/50, densenet121 and
// the depthwise-separable nets. Short reductions (mobilenet_v2's expansions from 16 or 24
// channels) run 2 blocks wide: alone the widest tile is faster there too, but in the
// networks on two threads it is not (the expansion of 16 -> 48 channels at 112x112,
// mnasnet1_0's largest output, 0.151-0.162 ms against 0.169-0.207). A stem (fewer than 8
// input channels: the network's plain input, read channel plane by channel plane with a
// stride) runs 8 blocks wide, reading its input once instead of once per block group:
// the 3 -> 32, 3x3 stride-2 stem of mobilenet_v2 / mnasnet / efficientnet takes 10-15 %
// less inside the networks on one thread and on two (one group of 4 blocks, not 2 of 2),
// squeezenet's 3 -> 64 and resnet18's 7x7 3 -> 64 7-11 % less on two threads (one group
// of 8, not 6 + 2).
int preferred_width(std::int64_t out_blocks, std::int64_t in_channels, std::int64_t taps) {
  const std::int64_t widest = in_channels < kBlock ? 8 : in_channels * taps <= 32 ? 2 : 6;
  return static_cast<int>(out_blocks < widest ? out_blocks : widest);
}

constexpr DenseKernels make_kernels() {
  DenseKernels k{"avx512", {8, 8, 8, 8, 8, 8, 6, 6}, &preferred_width, {}, &nchwc_winograd_input, &nchwc_winograd_output};
  fill<1, 8>(k);
  fill<2, 8>(k);
  fill<3, 8>(k);
  fill<4, 8>(k);
  fill<5, 8>(k);
  fill<6, 8>(k);
  fill<7, 6>(k);
  fill<8, 6>(k);
  return k;
}
constexpr DenseKernels kKernels = make_kernels();

}  // namespace avx512_impl

const DenseKernels& dense_kernels_avx512_table() { return avx512_impl::kKernels; }

}  // namespace kiln::cpu::nchwc
#endif

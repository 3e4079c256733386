// conv2d_winograd's AVX-512 kernels, compiled with -mavx512f -mavx512vl -mavx512bw
// -mavx512dq (the *_avx512.cpp rule). Reached only through winograd_kernels_avx512(),
// after the CPU check. Uses nothing inline from shared headers.
//
// The transforms are conv_nchwc_winograd.inc's (8-lane vectors; 32 registers hold a
// tile's 36 values with less spilling). The register tiles are their own: a zmm register
// holds two output blocks (U's weights of blocks b and b + 1 of one input channel are 16
// consecutive floats), so a tile of B blocks is B / 2 zmm accumulators per row (and a ymm
// one for an odd B), as conv2d_dense's AVX-512 tiles.
#include <cstdint>

#include "backends/cpu/kernels/conv_nchwc_winograd.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace kiln::cpu::nchwc {
namespace winograd_avx512_impl {

#define KILN_WINO_FMA8(a, b, c) ((a) * (b) + (c))
#define KILN_WINO_WIDE_WEIGHTS
#include "backends/cpu/kernels/conv_nchwc_winograd.inc"
#undef KILN_WINO_WIDE_WEIGHTS
#undef KILN_WINO_FMA8

// Accumulator sets: 4 zmm chains in flight cover the FMA latency.
constexpr int sets(int accumulators) { return accumulators <= 1 ? 4 : accumulators <= 3 ? 2 : 1; }

template <int P, int Z, int H>
struct Acc {
  __m512 z[P][Z > 0 ? Z : 1];
  __m256 h[P];
};

// One input channel: the weight vectors, P broadcasts, P * (Z + H) FMAs.
template <int P, int Z, int H>
[[gnu::always_inline]] inline void channel(Acc<P, Z, H>& acc, const float* v, const float* w) {
  __m512 wz[Z > 0 ? Z : 1];
#pragma GCC unroll 8
  for (int z = 0; z < Z; ++z) wz[z] = _mm512_loadu_ps(w + 16 * z);
  const __m256 wh = H ? _mm256_loadu_ps(w + 16 * Z) : _mm256_setzero_ps();
#pragma GCC unroll 16
  for (int p = 0; p < P; ++p) {
    if constexpr (Z > 0) {
      const __m512 x = _mm512_set1_ps(v[p * 8]);
#pragma GCC unroll 8
      for (int z = 0; z < Z; ++z) acc.z[p][z] = _mm512_fmadd_ps(x, wz[z], acc.z[p][z]);
      if constexpr (H > 0) acc.h[p] = _mm256_fmadd_ps(_mm512_castps512_ps256(x), wh, acc.h[p]);
    } else {
      acc.h[p] = _mm256_fmadd_ps(_mm256_set1_ps(v[p * 8]), wh, acc.h[p]);
    }
  }
}

template <int P, int B>
void gemm(const WinogradGemmArgs& a) {
  constexpr int Z = B / 2, H = B % 2;
  constexpr int S = sets(P * (Z + H));
  Acc<P, Z, H> acc[S];
#pragma GCC unroll 4
  for (int s = 0; s < S; ++s) {
#pragma GCC unroll 16
    for (int p = 0; p < P; ++p) {
#pragma GCC unroll 8
      for (int z = 0; z < Z; ++z) acc[s].z[p][z] = _mm512_setzero_ps();
      acc[s].h[p] = _mm256_setzero_ps();
    }
  }
  const float* v = a.v;
  const float* u = a.u;
  const char* pf = reinterpret_cast<const char*>(a.prefetch);
  const char* const pf_end = pf + 64 * a.prefetch_lines;
  for (std::int64_t cb = 0; cb < a.in_blocks; ++cb, v += a.v_block_stride, u += 64 * B) {
    for (std::int64_t l = 0; l < a.prefetch_per_block && pf < pf_end; ++l, pf += 64) _mm_prefetch(pf, _MM_HINT_T1);
#pragma GCC unroll 8
    for (int ci = 0; ci < 8; ++ci) channel<P, Z, H>(acc[ci % S], v + ci, u + ci * 8 * B);
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
  const std::int64_t mbs = a.m_block_stride;
#pragma GCC unroll 16
  for (int p = 0; p < P; ++p) {
    float* m = a.m + p * 8;
#pragma GCC unroll 8
    for (int z = 0; z < Z; ++z) {
      _mm256_storeu_ps(m + 2 * z * mbs, _mm512_castps512_ps256(acc[0].z[p][z]));
      _mm256_storeu_ps(m + (2 * z + 1) * mbs, _mm512_extractf32x8_ps(acc[0].z[p][z], 1));
    }
    if constexpr (H > 0) _mm256_storeu_ps(m + 2 * Z * mbs, acc[0].h[p]);
  }
}

template <int B, int P>
constexpr void fill(WinogradKernels& k) {
  if constexpr (P > 0) {
    k.gemm[B - 1][P - 1] = &gemm<P, B>;
    fill<B, P - 1>(k);
  }
}

// Two blocks (one zmm) by 16 tiles: measured against 4 blocks x 12 tiles and 6 x 8 (24
// accumulators each), it wins on every layer of bench/nchwc_winograd_bench.cpp, by 2-3%
// where the FMAs bound the time (resnet18's 64@56: 611 / 627 / 637 us) and by 30% where
// streaming U does (512@7 with F(4x4), 4 tiles: 1241 / 1757 / 2122 us): a narrower block
// group is a finer step of the prefetched stream. resnet18 end to end: 17.9 against 18.2 ms
// (4 blocks) on one thread.
int preferred_width(std::int64_t out_blocks) {
  return out_blocks >= 2 ? 2 : 1;
}

constexpr WinogradKernels make_kernels() {
  WinogradKernels k{"avx512", {16, 16, 12, 12, 8, 8},
                    &preferred_width,
                    {{&wino4_input, &wino4_output, &wino4_weights}, {&wino2_input, &wino2_output, &wino2_weights}},
                    {}};
  fill<1, 16>(k);
  fill<2, 16>(k);
  fill<3, 12>(k);
  fill<4, 12>(k);
  fill<5, 8>(k);
  fill<6, 8>(k);
  return k;
}
constexpr WinogradKernels kKernels = make_kernels();

}  // namespace winograd_avx512_impl

const WinogradKernels& winograd_kernels_avx512_table() { return winograd_avx512_impl::kKernels; }

}  // namespace kiln::cpu::nchwc
#endif

// The AVX-512 VNNI integer-GEMM micro-kernels (quant_gemm.h), compiled with -mavx512f
// -mavx512vl -mavx512bw -mavx512dq -mavx512vnni (the *_avx512vnni.cpp rule). Reached only
// through int_gemm_kernels_avx512vnni(), after the CPU check. The quantizers and panel
// packers are quant_gemm_pack.inc's, as in the AVX2 table (the same bytes), compiled here
// with 32 vector registers and zmm widening.
//
// A zmm holds one unit of 16 weight rows (16 x 4 bytes): vpdpbusd (kQ8: u8 weights x s8
// activations, 64 products) or vpdpwssd (kQ16: int16 pairs, 32 products) adds a unit of one
// activation row, broadcast from memory, into 16 int32 sums. A call keeps 6 rows x 32
// columns of int32 block sums and of f32 totals in 24 registers; each block's sums are
// converted and scaled (activation x weight scale) once. On Zen 4 the VNNI instructions
// share the two FP-multiply pipes with the FMAs: the gain over the f32 SGEMM is the
// products per instruction (4x for kQ8, 2x for kQ16), less the per-block conversion.
#include <cstdint>
#include <cstring>
#include <limits>

#include "backends/cpu/kernels/quant_gemm.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#include "backends/cpu/avx2_transpose.h"

// GCC 12's AVX-512 intrinsics pass an undefined vector as the unused merge source of the
// unmasked forms, which -Wmaybe-uninitialized reports at every inlined call.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace kiln::cpu::kernels {

namespace {

// Word (b0, b1) of row j -> bytes (b0 & 15, b0 >> 4, b1 & 15, b1 >> 4) + offset[j].
void widen_q8(__m256i words, const std::int32_t (&offset)[16], std::uint8_t* dst) {
  const __m512i w = _mm512_cvtepu8_epi16(words);  // lane j: b0 | b1 << 16
  // (w | w << 4) & 0x0F0F0F0F in one ternary-logic op.
  const __m512i u = _mm512_ternarylogic_epi32(w, _mm512_slli_epi32(w, 4), _mm512_set1_epi8(0x0F), 0xA8);
  _mm512_store_si512(dst, _mm512_add_epi8(u, _mm512_load_si512(offset)));
}

void widen_q16(__m256i words, std::uint8_t* dst) { _mm512_store_si512(dst, _mm512_cvtepi8_epi16(words)); }

#include "backends/cpu/kernels/quant_gemm_pack.inc"

[[gnu::always_inline]] inline __m512i broadcast_unit(const std::uint8_t* p) {
  std::int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// c[r][0..cols) (+)= f[r] (+ bias), masked to the tile's columns.
template <int R>
void store_tile(const IntGemmTile& t, const __m512 (&f)[R][2]) {
  const __mmask16 m0 = t.cols >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << t.cols) - 1);
  const __mmask16 m1 = t.cols <= 16 ? 0 : t.cols >= 32 ? 0xFFFF : static_cast<__mmask16>((1u << (t.cols - 16)) - 1);
  __m512 bias0 = _mm512_setzero_ps(), bias1 = bias0;
  if (t.bias != nullptr) {
    bias0 = _mm512_maskz_loadu_ps(m0, t.bias);
    bias1 = _mm512_maskz_loadu_ps(m1, t.bias + 16);
  }
  for (int r = 0; r < R; ++r) {
    float* c = t.c + r * t.ldc;
    __m512 v0 = _mm512_add_ps(f[r][0], bias0), v1 = _mm512_add_ps(f[r][1], bias1);
    if (t.accumulate) {
      v0 = _mm512_add_ps(_mm512_maskz_loadu_ps(m0, c), v0);
      v1 = _mm512_add_ps(_mm512_maskz_loadu_ps(m1, c + 16), v1);
    }
    _mm512_mask_storeu_ps(c, m0, v0);
    _mm512_mask_storeu_ps(c + 16, m1, v1);
  }
}

// R rows x 32 columns; kQ8 (Units = 8 per block, vpdpbusd, sums start at the block's
// init) or kQ16 (Units = 128, vpdpwssd, sums start at 0).
template <int R, bool Q8>
void tile_rows(const IntGemmTile& t) {
  constexpr int kUnits = Q8 ? 8 : 128;
  if (t.accumulate) {
    // The C rows are read at the end: fetched now, their L2 latency hides behind the sums.
    for (int r = 0; r < R; ++r) {
      _mm_prefetch(reinterpret_cast<const char*>(t.c + r * t.ldc), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(t.c + r * t.ldc + 31), _MM_HINT_T0);
    }
  }
  __m512 f[R][2];
  for (int r = 0; r < R; ++r) f[r][0] = f[r][1] = _mm512_setzero_ps();
  const std::uint8_t* a = t.a;
  const std::uint8_t* b = t.b;
  for (std::int64_t blk = 0; blk < t.blocks; ++blk) {
    __m512i s[R][2];
    for (int r = 0; r < R; ++r) {
      s[r][0] = s[r][1] = Q8 ? _mm512_set1_epi32(t.a_init[blk * kIntGemmMr + r]) : _mm512_setzero_si512();
    }
    for (int u = 0; u < kUnits; ++u) {
      const __m512i b0 = _mm512_load_si512(b), b1 = _mm512_load_si512(b + 64);
      for (int r = 0; r < R; ++r) {
        const __m512i av = broadcast_unit(a + r * 4);
        if constexpr (Q8) {
          s[r][0] = _mm512_dpbusd_epi32(s[r][0], b0, av);
          s[r][1] = _mm512_dpbusd_epi32(s[r][1], b1, av);
        } else {
          s[r][0] = _mm512_dpwssd_epi32(s[r][0], b0, av);
          s[r][1] = _mm512_dpwssd_epi32(s[r][1], b1, av);
        }
      }
      a += kIntGemmMr * 4;
      b += kIntGemmNr * 4;
    }
    const __m512 s0 = _mm512_load_ps(t.b_scale + blk * kIntGemmNr), s1 = _mm512_load_ps(t.b_scale + blk * kIntGemmNr + 16);
    for (int r = 0; r < R; ++r) {
      const __m512 as = _mm512_set1_ps(t.a_scale[blk * kIntGemmMr + r]);
      f[r][0] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(s[r][0]), as), s0, f[r][0]);
      f[r][1] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(s[r][1]), as), s1, f[r][1]);
    }
  }
  store_tile<R>(t, f);
}

template <bool Q8>
void tile(const IntGemmTile& t) {
  switch (t.rows) {
    case 1: tile_rows<1, Q8>(t); break;
    case 2: tile_rows<2, Q8>(t); break;
    case 3: tile_rows<3, Q8>(t); break;
    case 4: tile_rows<4, Q8>(t); break;
    case 5: tile_rows<5, Q8>(t); break;
    default: tile_rows<6, Q8>(t); break;
  }
}

constexpr IntGemmKernels kAvx512Vnni{"avx512vnni", quantize_q8, quantize_q16, panel_q8, panel_q16, tile<true>, tile<false>};

}  // namespace

const IntGemmKernels& int_gemm_kernels_avx512vnni_table() { return kAvx512Vnni; }

}  // namespace kiln::cpu::kernels
#endif

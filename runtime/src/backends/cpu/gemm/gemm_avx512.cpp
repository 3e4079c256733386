// The AVX-512 GEMM table (this file is compiled with -mavx512f/vl/bw/dq by the *_avx512.cpp
// rule; gemm.cpp calls it only after checking the CPU). It is the AVX2 table plus a wide
// micro-kernel: a 12 x 32 tile of C (two 6-row A panels x two 16-column B panels, the same
// packed layouts as every ISA) in 24 zmm accumulators. Per k step: 2 B loads and 12
// broadcasts feed 24 FMAs, so the FMA ports, not the loads, set the pace on cores with two
// 512-bit FMA units (Intel server parts: ~2x the AVX2 6x16 tile's flops per cycle). Zen 4
// splits a 512-bit FMA into two 256-bit halves; there it mostly saves instructions.
// Same rules as gemm_avx2.cpp: anonymous namespace, no inline functions from headers
// other than the intrinsics.
#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>

#include <algorithm>
#include <chrono>

#include "backends/cpu/gemm/gemm_kernels.h"

namespace kiln::cpu::gemm_detail {
namespace {

#define KILN_INLINE inline __attribute__((always_inline))

// acc + x * w into acc's own register (see gemm_avx2.cpp's fma_into: GCC otherwise copies
// accumulators between registers).
KILN_INLINE __m512 fma_into(__m512 x, __m512 w, __m512 acc) {
  __asm__("vfmadd231ps %[w], %[x], %[acc]" : [acc] "+v"(acc) : [x] "v"(x), [w] "v"(w));
  return acc;
}

KILN_INLINE __mmask16 lanes(int count) {
  return count >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << (count > 0 ? count : 0)) - 1u);
}

// kRows: 6 or 12 rows of A (one or two panels); kCols: 16 or 32 columns (one or two B panels).
template <int kRows, int kCols>
void wide_tile(const WideTile& t, const Epilogue& e) {
  constexpr int kCv = kCols / 16;
  __m512 acc[kRows][kCv];
#pragma GCC unroll 12
  for (int i = 0; i < kRows; ++i) {
#pragma GCC unroll 2
    for (int v = 0; v < kCv; ++v) acc[i][v] = _mm512_setzero_ps();
  }
  const float* a0 = t.a;
  const float* a1 = t.a + t.kc * kMr;
  const float* b0 = t.b;
  const float* b1 = t.b + t.b_stride;
  for (long k = 0; k < t.kc; ++k) {
    const __m512 w0 = _mm512_loadu_ps(b0 + k * kNr);
    const __m512 w1 = kCv == 2 ? _mm512_loadu_ps(b1 + k * kNr) : w0;
#pragma GCC unroll 6
    for (int i = 0; i < kMr; ++i) {
      const __m512 x = _mm512_set1_ps(a0[k * kMr + i]);
      acc[i][0] = fma_into(x, w0, acc[i][0]);
      if constexpr (kCv == 2) acc[i][1] = fma_into(x, w1, acc[i][1]);
    }
    if constexpr (kRows == 12) {
#pragma GCC unroll 6
      for (int i = 0; i < kMr; ++i) {
        const __m512 x = _mm512_set1_ps(a1[k * kMr + i]);
        acc[kMr + i][0] = fma_into(x, w0, acc[kMr + i][0]);
        if constexpr (kCv == 2) acc[kMr + i][1] = fma_into(x, w1, acc[kMr + i][1]);
      }
    }
  }
  // Linear part: alpha, bias, beta; masked to the tile's m rows and n columns.
  const __mmask16 mask[2] = {lanes(t.n), lanes(t.n - 16)};
  const __m512 alpha = _mm512_set1_ps(e.alpha);
  const __m512 beta = _mm512_set1_ps(e.beta);
  __m512 bias[kCv];
#pragma GCC unroll 2
  for (int v = 0; v < kCv; ++v) {
    bias[v] = e.bias_col != nullptr ? _mm512_maskz_loadu_ps(mask[v], e.bias_col + 16 * v) : _mm512_setzero_ps();
  }
  const int rows = t.m < kRows ? t.m : kRows;
  for (int i = 0; i < rows; ++i) {
    float* c = t.c + i * t.ldc;
    const __m512 row_bias = e.bias_row != nullptr ? _mm512_set1_ps(e.bias_row[i]) : _mm512_setzero_ps();
#pragma GCC unroll 2
    for (int v = 0; v < kCv; ++v) {
      __m512 out = _mm512_fmadd_ps(alpha, acc[i][v], _mm512_add_ps(bias[v], row_bias));
      if (e.beta != 0.0f) out = _mm512_fmadd_ps(beta, _mm512_maskz_loadu_ps(mask[v], c + 16 * v), out);
      _mm512_mask_storeu_ps(c + 16 * v, mask[v], out);
    }
  }
  if (e.act == GemmActivation::kNone) return;
  // The activation: the AVX2 row epilogue over the stored rows (they are in L1).
  const Epilogue act{1.0f, 0.0f, nullptr, nullptr, 0.0f, e.act};
  const auto epilogue_row = avx2_kernels().epilogue_row;
  for (int i = 0; i < rows; ++i) epilogue_row(t.c + i * t.ldc, t.c + i * t.ldc, t.n, act);
}

// A tile of up to 12 rows and 32 columns. Up to 8 columns, and single 6 x 16 tiles, take
// the AVX2 kernels (their narrow paths), one 6-row panel at a time.
void wide_kernel(const WideTile& t, const Epilogue& e) {
  if (t.n <= 8 || (t.m <= kMr && t.n <= kNr)) {
    const auto micro = avx2_kernels().micro_kernel;
    for (int r = 0; r * kMr < t.m; ++r) {
      Epilogue er = e;
      if (e.bias_row != nullptr) er.bias_row = e.bias_row + r * kMr;
      const int m = t.m - r * kMr < kMr ? t.m - r * kMr : kMr;
      micro(MicroTile{t.a + r * t.kc * kMr, t.b, t.c + r * kMr * t.ldc, t.ldc, t.kc, m, t.n}, er);
    }
    return;
  }
  if (t.m > kMr) {
    if (t.n > kNr) {
      wide_tile<12, 32>(t, e);
    } else {
      wide_tile<12, 16>(t, e);
    }
  } else {
    wide_tile<6, 32>(t, e);
  }
}

// Seconds for `reps` rounds of 12 independent FMA chains on zmm (16 floats) or ymm (8)
// registers, in assembly so that the accumulators stay in registers (operands are zero:
// no denormals).
#define KILN_FMA12(R)                                                                              \
  "vfmadd231ps %%" R "14, %%" R "15, %%" R "0\n vfmadd231ps %%" R "14, %%" R "15, %%" R "1\n"         \
  "vfmadd231ps %%" R "14, %%" R "15, %%" R "2\n vfmadd231ps %%" R "14, %%" R "15, %%" R "3\n"         \
  "vfmadd231ps %%" R "14, %%" R "15, %%" R "4\n vfmadd231ps %%" R "14, %%" R "15, %%" R "5\n"         \
  "vfmadd231ps %%" R "14, %%" R "15, %%" R "6\n vfmadd231ps %%" R "14, %%" R "15, %%" R "7\n"         \
  "vfmadd231ps %%" R "14, %%" R "15, %%" R "8\n vfmadd231ps %%" R "14, %%" R "15, %%" R "9\n"         \
  "vfmadd231ps %%" R "14, %%" R "15, %%" R "10\n vfmadd231ps %%" R "14, %%" R "15, %%" R "11\n"
#define KILN_ZERO_REGS                                                                    \
  "vxorps %%xmm0, %%xmm0, %%xmm0\n vxorps %%xmm1, %%xmm1, %%xmm1\n vxorps %%xmm2, %%xmm2, %%xmm2\n"    \
  "vxorps %%xmm3, %%xmm3, %%xmm3\n vxorps %%xmm4, %%xmm4, %%xmm4\n vxorps %%xmm5, %%xmm5, %%xmm5\n"    \
  "vxorps %%xmm6, %%xmm6, %%xmm6\n vxorps %%xmm7, %%xmm7, %%xmm7\n vxorps %%xmm8, %%xmm8, %%xmm8\n"    \
  "vxorps %%xmm9, %%xmm9, %%xmm9\n vxorps %%xmm10, %%xmm10, %%xmm10\n vxorps %%xmm11, %%xmm11, %%xmm11\n" \
  "vxorps %%xmm14, %%xmm14, %%xmm14\n vxorps %%xmm15, %%xmm15, %%xmm15\n"

template <bool kZmm>
double fma_seconds(long reps) {
  const auto start = std::chrono::steady_clock::now();
  if constexpr (kZmm) {
    __asm__ volatile(KILN_ZERO_REGS "1:\n" KILN_FMA12("zmm") "dec %0\n jnz 1b\n"
                     : "+r"(reps)
                     :
                     : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10",
                       "xmm11", "xmm14", "xmm15", "cc");
  } else {
    __asm__ volatile(KILN_ZERO_REGS "1:\n" KILN_FMA12("ymm") "dec %0\n jnz 1b\n"
                     : "+r"(reps)
                     :
                     : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10",
                       "xmm11", "xmm14", "xmm15", "cc");
  }
  _mm256_zeroupper();  // the compiler's own vzeroupper insertion does not see inside asm
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}
#undef KILN_FMA12
#undef KILN_ZERO_REGS

}  // namespace

double avx512_fma_speedup() {
  // ~0.1 ms per round; the first rounds also wake the 512-bit units (and any frequency
  // license change), so the best of several rounds is kept.
  constexpr long kReps = 1 << 13;
  double zmm = 1e9, ymm = 1e9;
  for (int round = 0; round < 5; ++round) {
    zmm = std::min(zmm, fma_seconds<true>(kReps));
    ymm = std::min(ymm, fma_seconds<false>(kReps));
  }
  // zmm does twice the flops per instruction.
  return zmm > 0.0 ? 2.0 * ymm / zmm : 1.0;
}

const GemmKernels& avx512_kernels() {
  static const GemmKernels kKernels = [] {
    GemmKernels k = avx2_kernels();
    k.isa = GemmIsa::kAvx512;
    k.wide_kernel = wide_kernel;
    return k;
  }();
  return kKernels;
}

}  // namespace kiln::cpu::gemm_detail

#endif  // x86

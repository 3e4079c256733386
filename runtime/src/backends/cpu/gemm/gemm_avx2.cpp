// The AVX2/FMA kernels (this file is compiled with -mavx2 -mfma; gemm.cpp calls it only
// after checking the CPU). Everything here lives in an anonymous namespace and uses no
// inline functions or templates from headers other than the intrinsics: a COMDAT copy
// emitted from this file could be the one the linker keeps for the whole program.
#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>

#include "backends/cpu/gemm/gemm_kernels.h"
#include "backends/cpu/avx2_transpose.h"

namespace kiln::cpu::gemm_detail {
namespace {

#define KILN_INLINE inline __attribute__((always_inline))

alignas(32) const int kTailMaskTable[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};

// Lanes [0, count) set; count in [0, 8].
KILN_INLINE __m256i tail_mask(long count) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kTailMaskTable + 8 - count));
}

// ---- Vector math for the activations ----

// exp(x), ~1 ulp on [-87, 88] (Cephes expf polynomial); inputs are clamped to that range.
KILN_INLINE __m256 exp_ps(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.0f)), _mm256_set1_ps(88.0f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i exponent =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(exponent));
}

// erf(x): rational approximation on [-4, 4] (erf is +-1 in float beyond), ~4e-7 absolute.
KILN_INLINE __m256 erf_ps(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-4.0f)), _mm256_set1_ps(4.0f));
  const __m256 x2 = _mm256_mul_ps(x, x);
  __m256 p = _mm256_set1_ps(-2.72614225801306e-10f);
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(2.77068142495902e-08f));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-2.10102402082508e-06f));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-5.69250639462346e-05f));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-7.34990630326855e-04f));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-2.95459980854025e-03f));
  p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(-1.60960333262415e-02f));
  p = _mm256_mul_ps(p, x);
  __m256 q = _mm256_set1_ps(-1.45660718464996e-05f);
  q = _mm256_fmadd_ps(q, x2, _mm256_set1_ps(-2.13374055278905e-04f));
  q = _mm256_fmadd_ps(q, x2, _mm256_set1_ps(-1.68282697438203e-03f));
  q = _mm256_fmadd_ps(q, x2, _mm256_set1_ps(-7.37332916720468e-03f));
  q = _mm256_fmadd_ps(q, x2, _mm256_set1_ps(-1.42647390514189e-02f));
  return _mm256_div_ps(p, q);
}

// x * sigmoid(z) = x / (1 + exp(-z)).
KILN_INLINE __m256 times_sigmoid(__m256 x, __m256 z) {
  const __m256 e = exp_ps(_mm256_sub_ps(_mm256_setzero_ps(), z));
  return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

KILN_INLINE __m256 activate(__m256 x, GemmActivation act) {
  switch (act) {
    case GemmActivation::kNone:
      return x;
    case GemmActivation::kRelu:
      return _mm256_max_ps(x, _mm256_setzero_ps());
    case GemmActivation::kGeluTanh: {
      // 0.5 x (1 + tanh(u)) == x * sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3).
      const __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
      const __m256 inner = _mm256_fmadd_ps(_mm256_set1_ps(0.044715f), x3, x);
      return times_sigmoid(x, _mm256_mul_ps(_mm256_set1_ps(2.0f * 0.7978845608028654f), inner));
    }
    case GemmActivation::kGeluErf: {
      const __m256 erf = erf_ps(_mm256_mul_ps(x, _mm256_set1_ps(0.7071067811865476f)));
      const __m256 half_x = _mm256_mul_ps(x, _mm256_set1_ps(0.5f));
      return _mm256_fmadd_ps(half_x, erf, half_x);
    }
    case GemmActivation::kSilu:
      return times_sigmoid(x, x);
    // max/min_ps(constant, x) return x when x is NaN: NaN propagates as in clamp.
    case GemmActivation::kRelu6:
      return _mm256_min_ps(_mm256_set1_ps(6.0f), _mm256_max_ps(_mm256_setzero_ps(), x));
    case GemmActivation::kHardswish: {
      const __m256 r = _mm256_min_ps(_mm256_set1_ps(6.0f), _mm256_max_ps(_mm256_setzero_ps(), _mm256_add_ps(x, _mm256_set1_ps(3.0f))));
      return _mm256_div_ps(_mm256_mul_ps(x, r), _mm256_set1_ps(6.0f));
    }
    case GemmActivation::kHardsigmoid: {
      const __m256 r = _mm256_min_ps(_mm256_set1_ps(6.0f), _mm256_max_ps(_mm256_setzero_ps(), _mm256_add_ps(x, _mm256_set1_ps(3.0f))));
      return _mm256_div_ps(r, _mm256_set1_ps(6.0f));
    }
  }
  return x;
}

void activate_row(float* c, long n, GemmActivation act) {
  long j = 0;
  for (; j + 8 <= n; j += 8) _mm256_storeu_ps(c + j, activate(_mm256_loadu_ps(c + j), act));
  if (j < n) {
    const __m256i mask = tail_mask(n - j);
    _mm256_maskstore_ps(c + j, mask, activate(_mm256_maskload_ps(c + j, mask), act));
  }
}

// ---- Epilogue for GEMV results ----

KILN_INLINE __m256 linear_part(__m256 acc, __m256 old_c, __m256 bias, const Epilogue& e) {
  __m256 v = _mm256_fmadd_ps(_mm256_set1_ps(e.alpha), acc, bias);
  if (e.beta != 0.0f) v = _mm256_fmadd_ps(_mm256_set1_ps(e.beta), old_c, v);
  return v;
}

void epilogue_row(const float* acc, float* c, std::int64_t n, const Epilogue& e) {
  const __m256 row_bias = _mm256_set1_ps(e.bias_row_value);
  long j = 0;
  for (; j + 8 <= n; j += 8) {
    __m256 bias = row_bias;
    if (e.bias_col != nullptr) bias = _mm256_add_ps(bias, _mm256_loadu_ps(e.bias_col + j));
    const __m256 old_c = e.beta != 0.0f ? _mm256_loadu_ps(c + j) : _mm256_setzero_ps();
    _mm256_storeu_ps(c + j, activate(linear_part(_mm256_loadu_ps(acc + j), old_c, bias, e), e.act));
  }
  if (j < n) {
    const __m256i mask = tail_mask(n - j);
    __m256 bias = row_bias;
    if (e.bias_col != nullptr) bias = _mm256_add_ps(bias, _mm256_maskload_ps(e.bias_col + j, mask));
    const __m256 old_c = e.beta != 0.0f ? _mm256_maskload_ps(c + j, mask) : _mm256_setzero_ps();
    const __m256 v = linear_part(_mm256_maskload_ps(acc + j, mask), old_c, bias, e);
    _mm256_maskstore_ps(c + j, mask, activate(v, e.act));
  }
}

// ---- The 6x16 micro-kernel ----

// Stores the tile's linear part (alpha, beta, bias) from registers; kFull: a whole 6x16
// tile, else rows [0, m) and columns [0, n) with masked accesses.
template <bool kFull>
KILN_INLINE void store_tile(const __m256 (&acc)[kMr][2], const MicroTile& t, const Epilogue& e) {
  const __m256 alpha = _mm256_set1_ps(e.alpha);
  const __m256 beta = _mm256_set1_ps(e.beta);
  const bool use_beta = e.beta != 0.0f;
  const __m256i mask0 = tail_mask(t.n < 8 ? t.n : 8);
  const __m256i mask1 = tail_mask(t.n > 8 ? t.n - 8 : 0);
  __m256 bias0 = _mm256_setzero_ps(), bias1 = _mm256_setzero_ps();
  if (e.bias_col != nullptr) {
    bias0 = kFull ? _mm256_loadu_ps(e.bias_col) : _mm256_maskload_ps(e.bias_col, mask0);
    bias1 = kFull ? _mm256_loadu_ps(e.bias_col + 8) : _mm256_maskload_ps(e.bias_col + 8, mask1);
  }
#pragma GCC unroll 6
  for (int i = 0; i < kMr; ++i) {
    if (!kFull && i >= t.m) break;
    float* c = t.c + i * t.ldc;
    __m256 b0 = bias0, b1 = bias1;
    if (e.bias_row != nullptr) {
      const __m256 r = _mm256_broadcast_ss(e.bias_row + i);
      b0 = _mm256_add_ps(b0, r);
      b1 = _mm256_add_ps(b1, r);
    }
    __m256 v0 = _mm256_fmadd_ps(alpha, acc[i][0], b0);
    __m256 v1 = _mm256_fmadd_ps(alpha, acc[i][1], b1);
    if (kFull) {
      if (use_beta) {
        v0 = _mm256_fmadd_ps(beta, _mm256_loadu_ps(c), v0);
        v1 = _mm256_fmadd_ps(beta, _mm256_loadu_ps(c + 8), v1);
      }
      _mm256_storeu_ps(c, v0);
      _mm256_storeu_ps(c + 8, v1);
    } else {
      if (use_beta) {
        v0 = _mm256_fmadd_ps(beta, _mm256_maskload_ps(c, mask0), v0);
        v1 = _mm256_fmadd_ps(beta, _mm256_maskload_ps(c + 8, mask1), v1);
      }
      _mm256_maskstore_ps(c, mask0, v0);
      _mm256_maskstore_ps(c + 8, mask1, v1);
    }
  }
}

// acc + x * w into acc's own register. With _mm256_fmadd_ps, GCC 12 picks the 132/213
// forms and copies accumulators between registers, and in the 6x16 loop spilled one to
// the stack (1024^3 on one thread: ~90 GFLOP/s, ~78 % of peak; as conv_nchwc_avx2.cpp).
KILN_INLINE __m256 fma_into(__m256 x, __m256 w, __m256 acc) {
  __asm__("vfmadd231ps %[w], %[x], %[acc]" : [acc] "+x"(acc) : [x] "x"(x), [w] "x"(w));
  return acc;
}

// acc += a[0..kMr) (outer) b[0..kNr): one k step of the 6x16 tile.
KILN_INLINE void fma_step(__m256 (&acc)[kMr][2], const float* a, const float* b) {
  const __m256 b0 = _mm256_loadu_ps(b);
  const __m256 b1 = _mm256_loadu_ps(b + 8);
#pragma GCC unroll 6
  for (int i = 0; i < kMr; ++i) {
    const __m256 ai = _mm256_broadcast_ss(a + i);
    acc[i][0] = fma_into(ai, b0, acc[i][0]);
    acc[i][1] = fma_into(ai, b1, acc[i][1]);
  }
}

// Narrow tiles (the last B panel of an N that is not a multiple of 16: 49 = 3 x 16 + 1
// output pixels of a 7x7 convolution) would pay the whole 6x16 tile's 12 FMAs per k step
// for a few live columns. Up to 8 columns take a 6x8 tile (6 FMAs per k step, two k steps
// in flight so the 12 accumulators cover the FMA latency); up to 4 columns vectorize over
// the panel's 6 rows instead (one 8-float load of a[k*6 .. k*6 + 8), lanes 6 and 7 unused,
// times one broadcast B value per column: n FMAs per k step, four k steps in flight). Same
// sums per element as the full tile, in a different order of the partial sums.
KILN_INLINE void narrow8_step(__m256 (&acc)[kMr], const float* a, const float* b) {
  const __m256 b0 = _mm256_loadu_ps(b);
#pragma GCC unroll 6
  for (int i = 0; i < kMr; ++i) acc[i] = _mm256_fmadd_ps(_mm256_broadcast_ss(a + i), b0, acc[i]);
}

void micro_kernel_narrow8(const MicroTile& t, __m256 (&out)[kMr][2]) {
  __m256 acc0[kMr], acc1[kMr];
#pragma GCC unroll 6
  for (int i = 0; i < kMr; ++i) acc0[i] = acc1[i] = _mm256_setzero_ps();
  const float* a = t.a;
  const float* b = t.b;
  long k = 0;
  for (; k + 2 <= t.kc; k += 2, a += 2 * kMr, b += 2 * kNr) {
    narrow8_step(acc0, a, b);
    narrow8_step(acc1, a + kMr, b + kNr);
  }
  if (k < t.kc) narrow8_step(acc0, a, b);
#pragma GCC unroll 6
  for (int i = 0; i < kMr; ++i) {
    out[i][0] = _mm256_add_ps(acc0[i], acc1[i]);
    out[i][1] = _mm256_setzero_ps();
  }
}

// kCols (1..4) columns: acc[u][j] lane i = sum over k = u (mod 4) of a[k][i] * b[k][j].
template <int kCols>
void micro_kernel_narrow4(const MicroTile& t, __m256 (&out)[kMr][2]) {
  __m256 acc[4][kCols];
#pragma GCC unroll 4
  for (int u = 0; u < 4; ++u) {
#pragma GCC unroll 4
    for (int j = 0; j < kCols; ++j) acc[u][j] = _mm256_setzero_ps();
  }
  const float* a = t.a;
  const float* b = t.b;
  // The last k step's 8-float load would read 2 floats past the panel: it takes a masked load.
  const long kc = t.kc, body = kc > 0 ? kc - 1 : 0;
  long k = 0;
  for (; k + 4 <= body; k += 4, a += 4 * kMr, b += 4 * kNr) {
#pragma GCC unroll 4
    for (int u = 0; u < 4; ++u) {
      const __m256 av = _mm256_loadu_ps(a + u * kMr);
#pragma GCC unroll 4
      for (int j = 0; j < kCols; ++j) {
        acc[u][j] = _mm256_fmadd_ps(av, _mm256_broadcast_ss(b + u * kNr + j), acc[u][j]);
      }
    }
  }
  for (; k < kc; ++k, a += kMr, b += kNr) {
    const __m256 av = k + 1 < kc ? _mm256_loadu_ps(a) : _mm256_maskload_ps(a, tail_mask(kMr));
#pragma GCC unroll 4
    for (int j = 0; j < kCols; ++j) acc[0][j] = _mm256_fmadd_ps(av, _mm256_broadcast_ss(b + j), acc[0][j]);
  }
  // Columns of rows -> rows of columns: sums[j][i] to out[i] lanes j.
  alignas(32) float sums[kCols][8];
#pragma GCC unroll 4
  for (int j = 0; j < kCols; ++j) {
    _mm256_store_ps(sums[j], _mm256_add_ps(_mm256_add_ps(acc[0][j], acc[1][j]), _mm256_add_ps(acc[2][j], acc[3][j])));
  }
  alignas(32) float rows[kMr][8] = {};
  for (int i = 0; i < kMr; ++i) {
    for (int j = 0; j < kCols; ++j) rows[i][j] = sums[j][i];
  }
#pragma GCC unroll 6
  for (int i = 0; i < kMr; ++i) {
    out[i][0] = _mm256_load_ps(rows[i]);
    out[i][1] = _mm256_setzero_ps();
  }
}

// A tile of at most 8 columns: the narrow kernels, then the masked store and activation.
void micro_kernel_narrow(const MicroTile& t, const Epilogue& e) {
  __m256 acc[kMr][2];
  switch (t.n) {
    case 1: micro_kernel_narrow4<1>(t, acc); break;
    case 2: micro_kernel_narrow4<2>(t, acc); break;
    case 3: micro_kernel_narrow4<3>(t, acc); break;
    case 4: micro_kernel_narrow4<4>(t, acc); break;
    default: micro_kernel_narrow8(t, acc); break;
  }
  store_tile<false>(acc, t, e);
  if (e.act == GemmActivation::kNone) return;
  for (int i = 0; i < t.m; ++i) activate_row(t.c + i * t.ldc, t.n, e.act);
}

// Short tiles (the last row panel of an M that is not a multiple of 6: 49 pixels of a 7x7
// map, 37 tokens) would pay the whole tile's 12 FMAs per k step for a few live rows. kRows
// rows take 2 * kRows FMAs per k step, with kSteps k steps in flight on separate
// accumulators so that no accumulator waits on the FMA latency (kRows = 1: 4 steps, 2 or 3:
// 2). Loads then bound them: 2 B loads and kRows broadcasts per k step, 25 % of the full
// tile's time for 1 row, 33 % for 2. Same sums per element as the full tile, in a different
// order of the partial sums.
template <int kRows>
void micro_kernel_short(const MicroTile& t, __m256 (&out)[kMr][2]) {
  constexpr int kSteps = kRows == 1 ? 4 : kRows <= 3 ? 2 : 1;
  __m256 acc[kSteps][kRows][2];
#pragma GCC unroll 4
  for (int u = 0; u < kSteps; ++u) {
#pragma GCC unroll 5
    for (int i = 0; i < kRows; ++i) acc[u][i][0] = acc[u][i][1] = _mm256_setzero_ps();
  }
  const float* a = t.a;
  const float* b = t.b;
  const long kc = t.kc;
  long k = 0;
  for (; k + kSteps <= kc; k += kSteps, a += kSteps * kMr, b += kSteps * kNr) {
#pragma GCC unroll 4
    for (int u = 0; u < kSteps; ++u) {
      const __m256 b0 = _mm256_loadu_ps(b + u * kNr);
      const __m256 b1 = _mm256_loadu_ps(b + u * kNr + 8);
#pragma GCC unroll 5
      for (int i = 0; i < kRows; ++i) {
        const __m256 ai = _mm256_broadcast_ss(a + u * kMr + i);
        acc[u][i][0] = fma_into(ai, b0, acc[u][i][0]);
        acc[u][i][1] = fma_into(ai, b1, acc[u][i][1]);
      }
    }
  }
  for (; k < kc; ++k, a += kMr, b += kNr) {
    const __m256 b0 = _mm256_loadu_ps(b);
    const __m256 b1 = _mm256_loadu_ps(b + 8);
#pragma GCC unroll 5
    for (int i = 0; i < kRows; ++i) {
      const __m256 ai = _mm256_broadcast_ss(a + i);
      acc[0][i][0] = fma_into(ai, b0, acc[0][i][0]);
      acc[0][i][1] = fma_into(ai, b1, acc[0][i][1]);
    }
  }
#pragma GCC unroll 6
  for (int i = 0; i < kMr; ++i) out[i][0] = out[i][1] = _mm256_setzero_ps();
#pragma GCC unroll 5
  for (int i = 0; i < kRows; ++i) {
#pragma GCC unroll 4
    for (int u = 0; u < kSteps; ++u) {
      out[i][0] = _mm256_add_ps(out[i][0], acc[u][i][0]);
      out[i][1] = _mm256_add_ps(out[i][1], acc[u][i][1]);
    }
  }
}

// A tile of fewer than 6 rows and more than 8 columns: the short kernels, then the masked
// store and activation.
void micro_kernel_rows(const MicroTile& t, const Epilogue& e) {
  __m256 acc[kMr][2];
  switch (t.m) {
    case 1: micro_kernel_short<1>(t, acc); break;
    case 2: micro_kernel_short<2>(t, acc); break;
    case 3: micro_kernel_short<3>(t, acc); break;
    case 4: micro_kernel_short<4>(t, acc); break;
    default: micro_kernel_short<5>(t, acc); break;
  }
  store_tile<false>(acc, t, e);
  if (e.act == GemmActivation::kNone) return;
  for (int i = 0; i < t.m; ++i) activate_row(t.c + i * t.ldc, t.n, e.act);
}

void micro_kernel(const MicroTile& t, const Epilogue& e) {
  if (t.n <= 8) {
    micro_kernel_narrow(t, e);
    return;
  }
  if (t.m < kMr) {
    micro_kernel_rows(t, e);
    return;
  }
  __m256 acc[kMr][2];
#pragma GCC unroll 6
  for (int i = 0; i < kMr; ++i) {
    acc[i][0] = _mm256_setzero_ps();
    acc[i][1] = _mm256_setzero_ps();
    _mm_prefetch(reinterpret_cast<const char*>(t.c + i * t.ldc), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(t.c + i * t.ldc + 15), _MM_HINT_T0);
  }
  const float* a = t.a;
  const float* b = t.b;
  const long kc = t.kc;
  long k = 0;
  for (; k + 4 <= kc; k += 4) {
    _mm_prefetch(reinterpret_cast<const char*>(a + 96), _MM_HINT_T0);
    fma_step(acc, a, b);
    fma_step(acc, a + kMr, b + kNr);
    fma_step(acc, a + 2 * kMr, b + 2 * kNr);
    fma_step(acc, a + 3 * kMr, b + 3 * kNr);
    a += 4 * kMr;
    b += 4 * kNr;
  }
  for (; k < kc; ++k, a += kMr, b += kNr) fma_step(acc, a, b);
  if (t.m == kMr && t.n == kNr) {
    store_tile<true>(acc, t, e);
  } else {
    store_tile<false>(acc, t, e);
  }
  if (e.act == GemmActivation::kNone) return;
  for (int i = 0; i < t.m; ++i) activate_row(t.c + i * t.ldc, t.n, e.act);
}

// ---- GEMV kernels ----

// Sum of each of four vectors, as four lanes.
KILN_INLINE __m128 hsum4(__m256 a, __m256 b, __m256 c, __m256 d) {
  const __m256 s = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
  return _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
}

// Dot products of x with `rows` (1..4) rows of w; two accumulators per row hide FMA latency.
template <int kRows>
KILN_INLINE void dot_rows(const float* x, const float* w, long ldw, long k, float* out) {
  __m256 acc[4][2];
#pragma GCC unroll 4
  for (int r = 0; r < 4; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  long kk = 0;
  for (; kk + 16 <= k; kk += 16) {
    const __m256 x0 = _mm256_loadu_ps(x + kk), x1 = _mm256_loadu_ps(x + kk + 8);
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) {
      acc[r][0] = _mm256_fmadd_ps(_mm256_loadu_ps(w + r * ldw + kk), x0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(_mm256_loadu_ps(w + r * ldw + kk + 8), x1, acc[r][1]);
    }
  }
  for (; kk < k; kk += 8) {
    const __m256i mask = tail_mask(k - kk < 8 ? k - kk : 8);
    const __m256 x0 = _mm256_maskload_ps(x + kk, mask);
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) {
      acc[r][0] = _mm256_fmadd_ps(_mm256_maskload_ps(w + r * ldw + kk, mask), x0, acc[r][0]);
    }
  }
  alignas(16) float sums[4];
  _mm_store_ps(sums,
               hsum4(_mm256_add_ps(acc[0][0], acc[0][1]), _mm256_add_ps(acc[1][0], acc[1][1]),
                     _mm256_add_ps(acc[2][0], acc[2][1]), _mm256_add_ps(acc[3][0], acc[3][1])));
  for (int r = 0; r < kRows; ++r) out[r] = sums[r];
}

void gemv_rows(const float* x, const float* w, std::int64_t ldw, std::int64_t k, std::int64_t n,
               float* out) {
  long j = 0;
  for (; j + 4 <= n; j += 4) dot_rows<4>(x, w + j * ldw, ldw, k, out + j);
  for (; j < n; ++j) dot_rows<1>(x, w + j * ldw, ldw, k, out + j);
}

// out[j..j+8) += sum_r x[r] * rows[r][j..j+8) for kRows rows; masked when `mask` is set.
template <int kRows, bool kMasked>
KILN_INLINE void axpy_rows(const float* x, const float* b, long ldb, long j, __m256i mask,
                           float* out) {
  __m256 s = kMasked ? _mm256_maskload_ps(out + j, mask) : _mm256_loadu_ps(out + j);
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r) {
    const __m256 row =
        kMasked ? _mm256_maskload_ps(b + r * ldb + j, mask) : _mm256_loadu_ps(b + r * ldb + j);
    s = _mm256_fmadd_ps(_mm256_broadcast_ss(x + r), row, s);
  }
  if (kMasked) {
    _mm256_maskstore_ps(out + j, mask, s);
  } else {
    _mm256_storeu_ps(out + j, s);
  }
}

template <int kRows>
KILN_INLINE void axpy_row_block(const float* x, const float* b, long ldb, long n, float* out) {
  long j = 0;
  for (; j + 8 <= n; j += 8) axpy_rows<kRows, false>(x, b, ldb, j, __m256i{}, out);
  if (j < n) axpy_rows<kRows, true>(x, b, ldb, j, tail_mask(n - j), out);
}

// out[0..n) = sum_k x[k] * b[k][0..n): eight rows of B per pass over `out`, which stays in
// L1 (the caller passes at most a few hundred columns), each row read contiguously.
void gemv_cols(const float* x, const float* b, std::int64_t ldb, std::int64_t k, std::int64_t n,
               float* out) {
  for (long j = 0; j < n; ++j) out[j] = 0.0f;
  long kk = 0;
  for (; kk + 8 <= k; kk += 8) axpy_row_block<8>(x + kk, b + kk * ldb, ldb, n, out);
  for (; kk < k; ++kk) axpy_row_block<1>(x + kk, b + kk * ldb, ldb, n, out);
}

// kPanels 16-column panels side by side (kPanels independent streams from memory, which
// a single-stream walk cannot saturate); kUnroll k steps in flight so that at least 8
// accumulators cover the FMA latency.
template <int kPanels, int kUnroll>
KILN_INLINE void gemv_panel_group(const float* x, const float* w, long panel_stride, long k,
                                  float* out) {
  __m256 acc[kUnroll][kPanels][2];
  for (int u = 0; u < kUnroll; ++u) {
    for (int q = 0; q < kPanels; ++q) acc[u][q][0] = acc[u][q][1] = _mm256_setzero_ps();
  }
  long kk = 0;
  for (; kk + kUnroll <= k; kk += kUnroll) {
#pragma GCC unroll 4
    for (int u = 0; u < kUnroll; ++u) {
      const __m256 xv = _mm256_broadcast_ss(x + kk + u);
#pragma GCC unroll 4
      for (int q = 0; q < kPanels; ++q) {
        const float* row = w + q * panel_stride + (kk + u) * kNr;
        acc[u][q][0] = _mm256_fmadd_ps(xv, _mm256_loadu_ps(row), acc[u][q][0]);
        acc[u][q][1] = _mm256_fmadd_ps(xv, _mm256_loadu_ps(row + 8), acc[u][q][1]);
      }
    }
  }
  for (; kk < k; ++kk) {
    const __m256 xv = _mm256_broadcast_ss(x + kk);
    for (int q = 0; q < kPanels; ++q) {
      const float* row = w + q * panel_stride + kk * kNr;
      acc[0][q][0] = _mm256_fmadd_ps(xv, _mm256_loadu_ps(row), acc[0][q][0]);
      acc[0][q][1] = _mm256_fmadd_ps(xv, _mm256_loadu_ps(row + 8), acc[0][q][1]);
    }
  }
  for (int q = 0; q < kPanels; ++q) {
    for (int h = 0; h < 2; ++h) {
      __m256 sum = acc[0][q][h];
      for (int u = 1; u < kUnroll; ++u) sum = _mm256_add_ps(sum, acc[u][q][h]);
      _mm256_storeu_ps(out + q * kNr + h * 8, sum);
    }
  }
}

void gemv_packed(const float* x, const float* panels, std::int64_t panel_stride, std::int64_t k,
                 std::int64_t num_panels, float* out) {
  long p = 0;
  for (; p + 4 <= num_panels; p += 4) {
    gemv_panel_group<4, 1>(x, panels + p * panel_stride, panel_stride, k, out + p * kNr);
  }
  for (; p < num_panels; ++p) {
    gemv_panel_group<1, 4>(x, panels + p * panel_stride, panel_stride, k, out + p * kNr);
  }
}

// ---- Packing A ----


// A full 6-row panel of row-major A: 8 k at a time through an 8x8 transpose (rows 6, 7
// zero). Each column's 6 floats are stored with an 8-wide store that the next column
// overwrites; the last column of a group is stored exactly, so nothing is written past
// the panel.
void pack_a_panel_rows_avx2(const float* a, long lda, long kc, float* dst) {
  long k = 0;
  for (; k + 8 <= kc; k += 8) {
    __m256 r[8];
#pragma GCC unroll 6
    for (int i = 0; i < kMr; ++i) r[i] = _mm256_loadu_ps(a + i * lda + k);
    r[6] = r[7] = _mm256_setzero_ps();
    cpu::transpose8x8(r);
    float* out = dst + k * kMr;
#pragma GCC unroll 7
    for (int j = 0; j < 7; ++j) _mm256_storeu_ps(out + j * kMr, r[j]);
    _mm_storeu_ps(out + 7 * kMr, _mm256_castps256_ps128(r[7]));
    _mm_storel_pi(reinterpret_cast<__m64*>(out + 7 * kMr + 4), _mm256_extractf128_ps(r[7], 1));
  }
  for (; k < kc; ++k) {
    for (int i = 0; i < kMr; ++i) dst[k * kMr + i] = a[i * lda + k];
  }
}

void pack_a_avx2(const float* a, std::int64_t row_stride, std::int64_t col_stride, std::int64_t m,
                 std::int64_t kc, float* out) {
  if (col_stride != 1) {
    pack_a(a, row_stride, col_stride, m, kc, out);
    return;
  }
  const long full = m / kMr * kMr;
  for (long r0 = 0; r0 < full; r0 += kMr) {
    pack_a_panel_rows_avx2(a + r0 * row_stride, row_stride, kc, out + r0 * kc);
  }
  if (full < m) {
    pack_a(a + full * row_stride, row_stride, col_stride, m - full, kc, out + full * kc);
  }
}

}  // namespace

const GemmKernels& avx2_kernels() {
  static constexpr GemmKernels kKernels = {GemmIsa::kAvx2, micro_kernel, nullptr, gemv_rows,  gemv_cols,
                                           gemv_packed,    epilogue_row, pack_a_avx2};
  return kKernels;
}

}  // namespace kiln::cpu::gemm_detail

#endif  // x86

// The AVX2+FMA+F16C quantized micro-kernels (quant.h); compiled with -mavx2 -mfma -mf16c.
// Only reached through quant_kernels() after simd_avx2()'s CPU checks.
//
// A step converts 16 weights of a row to two 8-float vectors (int8: one 16-byte load,
// sign-extended; int4: 8 bytes split into nibbles, interleaved back into column order and
// recentred by the zero point in the int8 domain) and multiplies them into per-group
// accumulators; each group's sum is scaled once. Four rows share each load of x and give
// the FMAs eight independent dependency chains.
#include <cstdint>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "backends/cpu/kernels/quant.h"
#if defined(__x86_64__) || defined(__i386__)
#include "backends/cpu/avx2_transpose.h"
#endif

namespace kiln::cpu::kernels {

#if defined(__x86_64__) || defined(__i386__)
namespace {

float scale_at(const QuantWeight& w, std::int64_t index) {
  return w.scales_f16 ? _cvtsh_ss(static_cast<const std::uint16_t*>(w.scales)[index])
                      : static_cast<const float*>(w.scales)[index];
}

int zero_at(const QuantWeight& w, std::int64_t index) {
  if (w.zero_points != nullptr) return w.zero_points[index] & 0x0F;
  return w.bits == 4 ? 8 : 0;
}

// Columns [col, col + 16) of a row as 16 int8 values minus the zero point.
template <int Bits>
__m128i load16(const std::uint8_t* row, std::int64_t col, __m128i zero) {
  if constexpr (Bits == 8) {
    (void)zero;
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + col));
  } else {
    const __m128i mask = _mm_set1_epi8(0x0F);
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + col / 2));
    const __m128i lo = _mm_and_si128(b, mask);
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(b, 4), mask);
    return _mm_sub_epi8(_mm_unpacklo_epi8(lo, hi), zero);
  }
}

template <int Bits>
int scalar_value(const std::uint8_t* row, std::int64_t col, int zero) {
  if constexpr (Bits == 8) {
    return static_cast<std::int8_t>(row[col]) - zero;
  } else {
    const std::uint8_t byte = row[col / 2];
    return ((col & 1) != 0 ? byte >> 4 : byte & 0x0F) - zero;
  }
}

float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Accumulates 16 weights of one row times x[c .. c + 16) into (s0, s1).
template <int Bits>
[[gnu::always_inline]] inline void step16(const std::uint8_t* row, std::int64_t c, __m128i zero, __m256 x0, __m256 x1,
                                          __m256& s0, __m256& s1) {
  const __m128i q = load16<Bits>(row, c, zero);
  s0 = _mm256_fmadd_ps(x0, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), s0);
  s1 = _mm256_fmadd_ps(x1, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(q, 8))), s1);
}

template <int Bits>
float tail_dot(const std::uint8_t* row, const float* x, std::int64_t c0, std::int64_t c1, int zero) {
  float tail = 0.0f;
  for (std::int64_t c = c0; c < c1; ++c) tail += x[c] * static_cast<float>(scalar_value<Bits>(row, c, zero));
  return tail;
}

// out[0..4) = W(r0 .. r0 + 4, :) . x. The eight accumulators are named locals (an array of
// them was kept on the stack by GCC, a store-forwarding chain per FMA).
template <int Bits>
void rows_block4(const QuantWeight& w, const float* x, std::int64_t r0, float* out) {
  const std::int64_t groups = w.k / w.group;
  const std::int64_t row_bytes = Bits == 8 ? w.k : w.k / 2;
  const std::int64_t vec_len = w.group & ~std::int64_t{15};
  const std::uint8_t* ra = w.data + r0 * row_bytes;
  const std::uint8_t* rb = ra + row_bytes;
  const std::uint8_t* rc = rb + row_bytes;
  const std::uint8_t* rd = rc + row_bytes;
  __m256 acc_a = _mm256_setzero_ps(), acc_b = acc_a, acc_c = acc_a, acc_d = acc_a;
  float tail_a = 0, tail_b = 0, tail_c = 0, tail_d = 0;
  const bool symmetric = w.zero_points == nullptr;
  const int default_zero = Bits == 4 ? 8 : 0;
  for (std::int64_t g = 0; g < groups; ++g) {
    const std::int64_t c0 = g * w.group;
    const std::int64_t base = r0 * groups + g;
    const int za = symmetric ? default_zero : zero_at(w, base), zb = symmetric ? default_zero : zero_at(w, base + groups),
              zc = symmetric ? default_zero : zero_at(w, base + 2 * groups),
              zd = symmetric ? default_zero : zero_at(w, base + 3 * groups);
    const __m128i va = _mm_set1_epi8(static_cast<char>(za)), vb = _mm_set1_epi8(static_cast<char>(zb)),
                  vc = _mm_set1_epi8(static_cast<char>(zc)), vd = _mm_set1_epi8(static_cast<char>(zd));
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, b0 = a0, b1 = a0, c0v = a0, c1v = a0, d0 = a0, d1 = a0;
    for (std::int64_t c = c0; c < c0 + vec_len; c += 16) {
      const __m256 x0 = _mm256_loadu_ps(x + c);
      const __m256 x1 = _mm256_loadu_ps(x + c + 8);
      step16<Bits>(ra, c, va, x0, x1, a0, a1);
      step16<Bits>(rb, c, vb, x0, x1, b0, b1);
      step16<Bits>(rc, c, vc, x0, x1, c0v, c1v);
      step16<Bits>(rd, c, vd, x0, x1, d0, d1);
    }
    const float sa = scale_at(w, base), sb = scale_at(w, base + groups), sc = scale_at(w, base + 2 * groups),
                sd = scale_at(w, base + 3 * groups);
    acc_a = _mm256_fmadd_ps(_mm256_add_ps(a0, a1), _mm256_set1_ps(sa), acc_a);
    acc_b = _mm256_fmadd_ps(_mm256_add_ps(b0, b1), _mm256_set1_ps(sb), acc_b);
    acc_c = _mm256_fmadd_ps(_mm256_add_ps(c0v, c1v), _mm256_set1_ps(sc), acc_c);
    acc_d = _mm256_fmadd_ps(_mm256_add_ps(d0, d1), _mm256_set1_ps(sd), acc_d);
    if (vec_len != w.group) {
      tail_a += sa * tail_dot<Bits>(ra, x, c0 + vec_len, c0 + w.group, za);
      tail_b += sb * tail_dot<Bits>(rb, x, c0 + vec_len, c0 + w.group, zb);
      tail_c += sc * tail_dot<Bits>(rc, x, c0 + vec_len, c0 + w.group, zc);
      tail_d += sd * tail_dot<Bits>(rd, x, c0 + vec_len, c0 + w.group, zd);
    }
  }
  out[0] = hsum(acc_a) + tail_a;
  out[1] = hsum(acc_b) + tail_b;
  out[2] = hsum(acc_c) + tail_c;
  out[3] = hsum(acc_d) + tail_d;
}

template <int Bits>
void rows_block1(const QuantWeight& w, const float* x, std::int64_t r, float* out) {
  const std::int64_t groups = w.k / w.group;
  const std::int64_t row_bytes = Bits == 8 ? w.k : w.k / 2;
  const std::int64_t vec_len = w.group & ~std::int64_t{15};
  const std::uint8_t* row = w.data + r * row_bytes;
  __m256 acc = _mm256_setzero_ps();
  float tail = 0;
  for (std::int64_t g = 0; g < groups; ++g) {
    const std::int64_t c0 = g * w.group;
    const int z = zero_at(w, r * groups + g);
    const __m128i vz = _mm_set1_epi8(static_cast<char>(z));
    __m256 s0 = _mm256_setzero_ps(), s1 = s0;
    for (std::int64_t c = c0; c < c0 + vec_len; c += 16) {
      step16<Bits>(row, c, vz, _mm256_loadu_ps(x + c), _mm256_loadu_ps(x + c + 8), s0, s1);
    }
    const float s = scale_at(w, r * groups + g);
    acc = _mm256_fmadd_ps(_mm256_add_ps(s0, s1), _mm256_set1_ps(s), acc);
    tail += s * tail_dot<Bits>(row, x, c0 + vec_len, c0 + w.group, z);
  }
  *out = hsum(acc) + tail;
}

template <int Bits>
void gemv_rows_bits(const QuantWeight& w, const float* x, std::int64_t row0, std::int64_t row1, float* out) {
  std::int64_t r = row0;
  for (; r + 4 <= row1; r += 4) rows_block4<Bits>(w, x, r, out + (r - row0));
  for (; r < row1; ++r) rows_block1<Bits>(w, x, r, out + (r - row0));
}

void gemv_rows(const QuantWeight& w, const float* x, std::int64_t row0, std::int64_t row1, float* out) {
  if (w.bits == 8) {
    gemv_rows_bits<8>(w, x, row0, row1, out);
  } else {
    gemv_rows_bits<4>(w, x, row0, row1, out);
  }
}

template <int Bits>
void dequantize_rows_bits(const QuantWeight& w, std::int64_t row0, std::int64_t row1, float* dst) {
  const std::int64_t groups = w.k / w.group;
  const std::int64_t row_bytes = Bits == 8 ? w.k : w.k / 2;
  const std::int64_t vec_len = w.group & ~std::int64_t{15};
  for (std::int64_t r = row0; r < row1; ++r) {
    const std::uint8_t* row = w.data + r * row_bytes;
    float* out = dst + (r - row0) * w.k;
    for (std::int64_t g = 0; g < groups; ++g) {
      const std::int64_t c0 = g * w.group;
      const int zero_s = zero_at(w, r * groups + g);
      const __m128i zero = _mm_set1_epi8(static_cast<char>(zero_s));
      const float s = scale_at(w, r * groups + g);
      const __m256 sv = _mm256_set1_ps(s);
      for (std::int64_t c = c0; c < c0 + vec_len; c += 16) {
        const __m128i q = load16<Bits>(row, c, zero);
        _mm256_storeu_ps(out + c, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), sv));
        _mm256_storeu_ps(out + c + 8, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(q, 8))), sv));
      }
      for (std::int64_t c = c0 + vec_len; c < c0 + w.group; ++c) {
        out[c] = static_cast<float>(scalar_value<Bits>(row, c, zero_s)) * s;
      }
    }
  }
}

void dequantize_rows(const QuantWeight& w, std::int64_t row0, std::int64_t row1, float* dst) {
  if (w.bits == 8) {
    dequantize_rows_bits<8>(w, row0, row1, dst);
  } else {
    dequantize_rows_bits<4>(w, row0, row1, dst);
  }
}

// Columns [col, col + 8) of a row minus the zero point, as floats.
template <int Bits>
__m256 load8(const std::uint8_t* row, std::int64_t col, __m128i zero) {
  __m128i q;
  if constexpr (Bits == 8) {
    (void)zero;
    q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + col));
  } else {
    std::int32_t packed;
    __builtin_memcpy(&packed, row + col / 2, 4);
    const __m128i b = _mm_cvtsi32_si128(packed), mask = _mm_set1_epi8(0x0F);
    q = _mm_sub_epi8(_mm_unpacklo_epi8(_mm_and_si128(b, mask), _mm_and_si128(_mm_srli_epi16(b, 4), mask)), zero);
  }
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q));
}


// The panel in 8 x 8 tiles: 8 rows' columns dequantized (scaled per group), transposed in
// registers and stored as 8 rows of the panel. Needs col0, len and group multiples of 8.
template <int Bits>
void dequantize_panel_tiles(const QuantWeight& w, std::int64_t row0, std::int64_t rows, std::int64_t col0,
                            std::int64_t len, float* out) {
  const std::int64_t groups = w.k / w.group, row_bytes = Bits == 8 ? w.k : w.k / 2;
  for (int half = 0; half < 2; ++half) {
    const std::uint8_t* row_ptr[8];
    int live = 0;
    for (int i = 0; i < 8; ++i) {
      const std::int64_t j = half * 8 + i;
      row_ptr[i] = w.data + (row0 + (j < rows ? j : rows - 1)) * row_bytes;
      live += j < rows ? 1 : 0;
    }
    for (std::int64_t c = col0; c < col0 + len;) {
      const std::int64_t g = c / w.group, group_end = (g + 1) * w.group;
      const std::int64_t end = group_end < col0 + len ? group_end : col0 + len;
      __m256 scale[8];
      __m128i zero[8];
      __m256i zero32[8];
      for (int i = 0; i < 8; ++i) {
        const std::int64_t j = half * 8 + i;
        const std::int64_t index = (row0 + (j < rows ? j : rows - 1)) * groups + g;
        scale[i] = _mm256_set1_ps(i < live ? scale_at(w, index) : 0.0f);
        zero[i] = _mm_set1_epi8(static_cast<char>(zero_at(w, index)));
        zero32[i] = _mm256_set1_epi32(zero_at(w, index));
      }
      for (; c < end; c += 8) {
        __m256 r[8];
        if constexpr (Bits == 4) {
          // 8 nibbles (4 bytes) broadcast as one 32-bit word and shifted per lane: lane t
          // gets column c + t (low nibble first); minus the zero point in int32, exactly
          // as load8 computes it, in half the instructions.
          const __m256i shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28), mask = _mm256_set1_epi32(0x0F);
          for (int i = 0; i < 8; ++i) {
            std::int32_t word;
            __builtin_memcpy(&word, row_ptr[i] + c / 2, 4);
            const __m256i q = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(word), shifts), mask);
            r[i] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(q, zero32[i])), scale[i]);
          }
        } else {
          for (int i = 0; i < 8; ++i) r[i] = _mm256_mul_ps(load8<Bits>(row_ptr[i], c, zero[i]), scale[i]);
        }
        transpose8x8(r);
        float* dst = out + (c - col0) * 16 + half * 8;
        for (int t = 0; t < 8; ++t) _mm256_storeu_ps(dst + t * 16, r[t]);
      }
    }
  }
}

void dequantize_panel(const QuantWeight& w, std::int64_t row0, std::int64_t rows, std::int64_t col0, std::int64_t len,
                      float* out) {
  if (w.group % 8 == 0 && col0 % 8 == 0 && len % 8 == 0) {
    if (w.bits == 8) {
      dequantize_panel_tiles<8>(w, row0, rows, col0, len, out);
    } else {
      dequantize_panel_tiles<4>(w, row0, rows, col0, len, out);
    }
    return;
  }
  const std::int64_t groups = w.k / w.group;
  for (std::int64_t j = 0; j < 16; ++j) {
    for (std::int64_t t = 0; t < len; ++t) {
      const std::int64_t c = col0 + t, index = (row0 + j) * groups + c / w.group;
      const std::uint8_t* row = w.data + (row0 + j) * (w.bits == 8 ? w.k : w.k / 2);
      float v = 0.0f;
      if (j < rows) {
        v = scale_at(w, index) * static_cast<float>(w.bits == 8 ? scalar_value<8>(row, c, 0)
                                                                 : scalar_value<4>(row, c, zero_at(w, index)));
      }
      out[t * 16 + j] = v;
    }
  }
}

// One block of 32 int4 weights (16 bytes) times 32 int8 activations: 8 int32 partial sums.
// The low nibbles (even elements) go to the low 128-bit half, the high ones to the upper
// half, matching the activations' per-block order; maddubs multiplies the unsigned nibbles
// by the signed activations (|15 * 127 * 2| fits int16).
[[gnu::always_inline]] inline __m256i block_dot(const std::uint8_t* bytes, __m256i xq) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes));
  const __m256i w = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(b, 4), b), _mm256_set1_epi8(0x0F));
  return _mm256_madd_epi16(_mm256_maddubs_epi16(w, xq), _mm256_set1_epi16(1));
}

// Two consecutive blocks of 32 int4 weights (32 bytes) times their activations: the low
// nibbles of both blocks in one vector (block b in the low 128-bit half), the high ones in
// another; `even` and `odd` hold the two blocks' even and odd activations in the same
// halves. The two maddubs products are added in int16 (|2 * 2 * 15 * 127| fits) and summed
// pairwise into int32: lanes 0-3 are block b's partial sums, lanes 4-7 block b + 1's.
[[gnu::always_inline]] inline __m256i pair_dot(const std::uint8_t* bytes, __m256i even, __m256i odd) {
  const __m256i mask = _mm256_set1_epi8(0x0F);
  const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bytes));
  const __m256i lo = _mm256_and_si256(w, mask), hi = _mm256_and_si256(_mm256_srli_epi16(w, 4), mask);
  const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(lo, even), _mm256_maddubs_epi16(hi, odd));
  return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

template <int R>
void int4_q8_block(const QuantWeight& w, const QuantizedActivations& x, std::int64_t r0, float* out) {
  const std::int64_t groups = w.k / w.group, blocks_per_group = w.group / 32, row_bytes = w.k / 2;
  __m256 acc[R];
  float corr[R];
  for (int i = 0; i < R; ++i) acc[i] = _mm256_setzero_ps(), corr[i] = 0.0f;
  for (std::int64_t g = 0; g < groups; ++g) {
    float s[R];
    int z[R];
    for (int i = 0; i < R; ++i) {
      s[i] = scale_at(w, (r0 + i) * groups + g);
      z[i] = zero_at(w, (r0 + i) * groups + g);
    }
    for (std::int64_t b = g * blocks_per_group; b < (g + 1) * blocks_per_group; ++b) {
      if ((b & 3) == 0) {  // the next R rows' line at these columns (as int4_q8_g32_block)
        for (int i = 0; i < R && r0 + R + i < w.n; ++i) {
          _mm_prefetch(reinterpret_cast<const char*>(w.data + (r0 + R + i) * row_bytes + b * 16), _MM_HINT_T0);
        }
      }
      const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.q + b * 32));
      const float xs = x.scale[b];
      const auto xsum = static_cast<float>(x.sum[b]);
      if constexpr (R == 4) {
        const std::uint8_t* p = w.data + r0 * row_bytes + b * 16;
        const __m256i d0 = block_dot(p, xq), d1 = block_dot(p + row_bytes, xq), d2 = block_dot(p + 2 * row_bytes, xq),
                      d3 = block_dot(p + 3 * row_bytes, xq);
        acc[0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d0), _mm256_set1_ps(s[0] * xs), acc[0]);
        acc[1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d1), _mm256_set1_ps(s[1] * xs), acc[1]);
        acc[2] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d2), _mm256_set1_ps(s[2] * xs), acc[2]);
        acc[3] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d3), _mm256_set1_ps(s[3] * xs), acc[3]);
      } else {
        const __m256i d = block_dot(w.data + r0 * row_bytes + b * 16, xq);
        acc[0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d), _mm256_set1_ps(s[0] * xs), acc[0]);
      }
      for (int i = 0; i < R; ++i) corr[i] += s[i] * xs * static_cast<float>(z[i]) * xsum;
    }
  }
  for (int i = 0; i < R; ++i) out[i] = hsum(acc[i]) - corr[i];
}

// Group 32 (one block per group), groups a multiple of 8: the bookkeeping of 8 blocks at a
// time in vectors. A row's 8 weight scales (contiguous) are converted together and
// multiplied by the 8 activation scales; each block's combined scale is then one lane
// permute; the zero-point corrections of 8 blocks are one FMA (scale x zero x the block's
// activation scale x activation sum).
template <int R>
void int4_q8_g32_block(const QuantWeight& w, const QuantizedActivations& x, std::int64_t r0, float* out) {
  const std::int64_t blocks = w.k / 32, row_bytes = w.k / 2;
  const std::uint8_t* rows = w.data + r0 * row_bytes;
  __m256 acc[R], corr[R];
  for (int i = 0; i < R; ++i) acc[i] = _mm256_setzero_ps(), corr[i] = _mm256_setzero_ps();
  for (std::int64_t b0 = 0; b0 < blocks; b0 += 8) {
    // The next R rows' bytes at these columns, one row block ahead: the rows are read 32
    // bytes at a time each, row_bytes apart, a pattern the hardware prefetcher follows
    // poorly (decode of a [14336, 4096] int4 weight: 2.4-2.6 -> 1.1-1.5 ms on 2 threads).
    for (int i = 0; i < R && r0 + R + i < w.n; ++i) {
      const char* next = reinterpret_cast<const char*>(rows + (R + i) * row_bytes + b0 * 16);
      _mm_prefetch(next, _MM_HINT_T0);
      _mm_prefetch(next + 64, _MM_HINT_T0);
    }
    const __m256 xs = _mm256_loadu_ps(x.scale + b0);
    const __m256 xsx = _mm256_mul_ps(xs, _mm256_cvtepi32_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.sum + b0))));
    __m256 combined[R];
    for (int i = 0; i < R; ++i) {
      const std::int64_t index = (r0 + i) * blocks + b0;
      const __m256 s = w.scales_f16
                           ? _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(
                                 static_cast<const std::uint16_t*>(w.scales) + index)))
                           : _mm256_loadu_ps(static_cast<const float*>(w.scales) + index);
      combined[i] = _mm256_mul_ps(s, xs);
      __m256 z = _mm256_set1_ps(8.0f);
      if (w.zero_points != nullptr) {
        const __m128i zb = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(w.zero_points + index));
        z = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_cvtepu8_epi32(zb), _mm256_set1_epi32(0x0F)));
      }
      corr[i] = _mm256_fmadd_ps(_mm256_mul_ps(s, z), xsx, corr[i]);
    }
    for (int j = 0; j < 8; j += 2) {
      const std::int64_t b = b0 + j;
      const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.q + b * 32));
      const __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.q + b * 32 + 32));
      const __m256i even = _mm256_permute2x128_si256(x0, x1, 0x20), odd = _mm256_permute2x128_si256(x0, x1, 0x31);
      const __m256i lanes = _mm256_setr_epi32(j, j, j, j, j + 1, j + 1, j + 1, j + 1);
      for (int i = 0; i < R; ++i) {
        const __m256i d = pair_dot(rows + i * row_bytes + b * 16, even, odd);
        acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d), _mm256_permutevar8x32_ps(combined[i], lanes), acc[i]);
      }
    }
  }
  for (int i = 0; i < R; ++i) out[i] = hsum(acc[i]) - hsum(corr[i]);
}

void gemv_rows_int4_q8(const QuantWeight& w, const QuantizedActivations& x, std::int64_t row0, std::int64_t row1,
                       float* out) {
  std::int64_t r = row0;
  if (w.group == 32 && (w.k / 32) % 8 == 0) {
    for (; r + 4 <= row1; r += 4) int4_q8_g32_block<4>(w, x, r, out + (r - row0));
    for (; r < row1; ++r) int4_q8_g32_block<1>(w, x, r, out + (r - row0));
    return;
  }
  for (; r + 4 <= row1; r += 4) int4_q8_block<4>(w, x, r, out + (r - row0));
  for (; r < row1; ++r) int4_q8_block<1>(w, x, r, out + (r - row0));
}

// int8 weights against int16 activations: 16 weights per step sign-extended to int16 and
// multiplied pairwise into int32 (vpmaddwd; a 256-column block sums at most 256 products of
// 128 * 32767, well inside int32), one conversion and FMA per 256-block, four rows sharing
// each activation load.
template <int R>
void int8_q16_block(const QuantWeight& w, const Int16Activations& x, std::int64_t r0, float* out) {
  const std::int64_t groups = w.k / w.group, blocks_per_group = w.group / 256, row_bytes = w.k;
  const std::uint8_t* rows = w.data + r0 * row_bytes;
  __m256 acc[R];
  for (int i = 0; i < R; ++i) acc[i] = _mm256_setzero_ps();
  for (std::int64_t g = 0; g < groups; ++g) {
    __m256 group_acc[R];
    for (int i = 0; i < R; ++i) group_acc[i] = _mm256_setzero_ps();
    for (std::int64_t b = g * blocks_per_group; b < (g + 1) * blocks_per_group; ++b) {
      __m256i dot[R];
      for (int i = 0; i < R; ++i) dot[i] = _mm256_setzero_si256();
      for (std::int64_t c = b * 256; c < (b + 1) * 256; c += 16) {
        if ((c & 63) == 0) {  // the row block after next, into L2 (2.2-2.8 -> 1.75-2.0 ms on [14336, 4096])
          for (int i = 0; i < R && r0 + 2 * R + i < w.n; ++i) {
            _mm_prefetch(reinterpret_cast<const char*>(rows + (2 * R + i) * row_bytes + c), _MM_HINT_T1);
          }
        }
        const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.q + c));
        for (int i = 0; i < R; ++i) {
          const __m256i wv =
              _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rows + i * row_bytes + c)));
          dot[i] = _mm256_add_epi32(dot[i], _mm256_madd_epi16(wv, xv));
        }
      }
      const __m256 xs = _mm256_set1_ps(x.scale[b]);
      for (int i = 0; i < R; ++i) group_acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot[i]), xs, group_acc[i]);
    }
    for (int i = 0; i < R; ++i) {
      acc[i] = _mm256_fmadd_ps(group_acc[i], _mm256_set1_ps(scale_at(w, (r0 + i) * groups + g)), acc[i]);
    }
  }
  for (int i = 0; i < R; ++i) out[i] = hsum(acc[i]);
}

void gemv_rows_int8_q16(const QuantWeight& w, const Int16Activations& x, std::int64_t row0, std::int64_t row1,
                        float* out) {
  std::int64_t r = row0;
  for (; r + 4 <= row1; r += 4) int8_q16_block<4>(w, x, r, out + (r - row0));
  for (; r < row1; ++r) int8_q16_block<1>(w, x, r, out + (r - row0));
}

constexpr QuantKernels kAvx2{"avx2", gemv_rows, dequantize_rows, dequantize_panel, gemv_rows_int4_q8, gemv_rows_int8_q16};

}  // namespace

const QuantKernels& quant_kernels_avx2_table() { return kAvx2; }
#endif

}  // namespace kiln::cpu::kernels

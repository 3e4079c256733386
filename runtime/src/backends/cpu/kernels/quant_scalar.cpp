// The portable quantized micro-kernels (quant.h), and the run-time choice of table.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "backends/cpu/kernels/convert.h"
#include "backends/cpu/kernels/quant.h"
#include "backends/cpu/kernels/simd.h"

namespace kiln::cpu::kernels {
namespace {

float scale_at(const QuantWeight& w, std::int64_t index) {
  return w.scales_f16 ? half_to_float(static_cast<const std::uint16_t*>(w.scales)[index])
                      : static_cast<const float*>(w.scales)[index];
}

// q(r, c) - zero(r, g) for columns [col, col + len) of row r, all inside group g.
void values_of(const QuantWeight& w, std::int64_t r, std::int64_t g, std::int64_t col, std::int64_t len, float* out) {
  const std::int64_t groups = w.k / w.group;
  if (w.bits == 8) {
    const auto* row = reinterpret_cast<const std::int8_t*>(w.data) + r * w.k;
    const int zero = w.zero_points != nullptr ? w.zero_points[r * groups + g] : 0;
    for (std::int64_t c = 0; c < len; ++c) out[c] = static_cast<float>(row[col + c] - zero);
    return;
  }
  const std::uint8_t* row = w.data + r * (w.k / 2);
  const int zero = w.zero_points != nullptr ? w.zero_points[r * groups + g] & 0x0F : 8;
  for (std::int64_t c = 0; c < len; ++c) {
    const std::uint8_t byte = row[(col + c) / 2];
    out[c] = static_cast<float>((((col + c) & 1) != 0 ? byte >> 4 : byte & 0x0F) - zero);
  }
}

// Groups are handled in chunks of at most kChunk columns (a stack buffer).
constexpr std::int64_t kChunk = 256;

void gemv_rows(const QuantWeight& w, const float* x, std::int64_t row0, std::int64_t row1, float* out) {
  const std::int64_t groups = w.k / w.group;
  float values[kChunk];
  for (std::int64_t r = row0; r < row1; ++r) {
    float acc = 0.0f;
    for (std::int64_t g = 0; g < groups; ++g) {
      float group_sum = 0.0f;
      for (std::int64_t c0 = 0; c0 < w.group; c0 += kChunk) {
        const std::int64_t len = w.group - c0 < kChunk ? w.group - c0 : kChunk;
        const std::int64_t col = g * w.group + c0;
        values_of(w, r, g, col, len, values);
        for (std::int64_t c = 0; c < len; ++c) group_sum += x[col + c] * values[c];
      }
      acc += group_sum * scale_at(w, r * groups + g);
    }
    out[r - row0] = acc;
  }
}

void dequantize_rows(const QuantWeight& w, std::int64_t row0, std::int64_t row1, float* dst) {
  const std::int64_t groups = w.k / w.group;
  for (std::int64_t r = row0; r < row1; ++r) {
    float* out = dst + (r - row0) * w.k;
    for (std::int64_t g = 0; g < groups; ++g) {
      float* o = out + g * w.group;
      values_of(w, r, g, g * w.group, w.group, o);
      const float s = scale_at(w, r * groups + g);
      for (std::int64_t c = 0; c < w.group; ++c) o[c] *= s;
    }
  }
}

void dequantize_panel(const QuantWeight& w, std::int64_t row0, std::int64_t rows, std::int64_t col0, std::int64_t len,
                      float* out) {
  const std::int64_t groups = w.k / w.group;
  for (std::int64_t j = 0; j < 16; ++j) {
    if (j >= rows) {
      for (std::int64_t t = 0; t < len; ++t) out[t * 16 + j] = 0.0f;
      continue;
    }
    for (std::int64_t t = 0; t < len;) {
      const std::int64_t c = col0 + t, g = c / w.group;
      const std::int64_t n = std::min(len - t, (g + 1) * w.group - c);  // the rest of group g
      float values[kChunk];
      for (std::int64_t done = 0; done < n; done += kChunk) {
        const std::int64_t m = std::min(kChunk, n - done);
        values_of(w, row0 + j, g, c + done, m, values);
        const float s = scale_at(w, (row0 + j) * groups + g);
        for (std::int64_t i = 0; i < m; ++i) out[(t + done + i) * 16 + j] = values[i] * s;
      }
      t += n;
    }
  }
}

void gemv_rows_int4_q8(const QuantWeight& w, const QuantizedActivations& x, std::int64_t row0, std::int64_t row1,
                       float* out) {
  const std::int64_t groups = w.k / w.group;
  for (std::int64_t r = row0; r < row1; ++r) {
    const std::uint8_t* row = w.data + r * (w.k / 2);
    float acc = 0.0f;
    for (std::int64_t g = 0; g < groups; ++g) {
      const int zero = w.zero_points != nullptr ? w.zero_points[r * groups + g] & 0x0F : 8;
      const float s = scale_at(w, r * groups + g);
      for (std::int64_t b = g * w.group / 32; b < (g + 1) * w.group / 32; ++b) {
        std::int32_t dot = 0;
        for (int j = 0; j < 16; ++j) {
          const std::uint8_t byte = row[b * 16 + j];
          dot += (byte & 0x0F) * x.q[b * 32 + j] + (byte >> 4) * x.q[b * 32 + 16 + j];
        }
        acc += s * x.scale[b] * static_cast<float>(dot - zero * x.sum[b]);
      }
    }
    out[r - row0] = acc;
  }
}

void gemv_rows_int8_q16(const QuantWeight& w, const Int16Activations& x, std::int64_t row0, std::int64_t row1,
                        float* out) {
  const std::int64_t groups = w.k / w.group;
  for (std::int64_t r = row0; r < row1; ++r) {
    const auto* row = reinterpret_cast<const std::int8_t*>(w.data) + r * w.k;
    float acc = 0.0f;
    for (std::int64_t g = 0; g < groups; ++g) {
      float group_sum = 0.0f;
      for (std::int64_t b = g * w.group / 256; b < (g + 1) * w.group / 256; ++b) {
        std::int32_t dot = 0;
        for (std::int64_t c = b * 256; c < (b + 1) * 256; ++c) dot += row[c] * x.q[c];
        group_sum += x.scale[b] * static_cast<float>(dot);
      }
      acc += scale_at(w, r * groups + g) * group_sum;
    }
    out[r - row0] = acc;
  }
}

constexpr QuantKernels kScalar{"baseline", gemv_rows, dequantize_rows, dequantize_panel, gemv_rows_int4_q8, gemv_rows_int8_q16};

}  // namespace

float quantize_block(const float* x, std::int64_t n, float qmax, std::int32_t* q) {
  float amax = 0.0f;
  bool finite = true;
  for (std::int64_t i = 0; i < n; ++i) {
    const float a = std::fabs(x[i]);
    finite = finite && a <= std::numeric_limits<float>::max();  // false for inf and NaN
    amax = std::fmax(amax, a);
  }
  const float scale = amax / qmax;
  if (!finite || !(scale >= std::numeric_limits<float>::min())) {
    for (std::int64_t i = 0; i < n; ++i) q[i] = 0;
    return finite ? 0.0f : std::numeric_limits<float>::quiet_NaN();
  }
  const float inv = 1.0f / scale;
  for (std::int64_t i = 0; i < n; ++i) q[i] = static_cast<std::int32_t>(std::nearbyint(std::clamp(x[i] * inv, -qmax, qmax)));
  return scale;
}

void quantize_activations(const float* x, std::int64_t k, std::int8_t* q, float* scale, std::int32_t* sum) {
  std::int32_t v[32];
  for (std::int64_t b = 0; b < k / 32; ++b) {
    scale[b] = quantize_block(x + b * 32, 32, 127.0f, v);
    std::int32_t total = 0;
    for (int j = 0; j < 32; ++j) {
      q[b * 32 + (j % 2 == 0 ? j / 2 : 16 + j / 2)] = static_cast<std::int8_t>(v[j]);
      total += v[j];
    }
    sum[b] = total;
  }
}

void quantize_activations_i16(const float* x, std::int64_t k, std::int16_t* q, float* scale) {
  std::int32_t v[256];
  for (std::int64_t b = 0; b < k / 256; ++b) {
    scale[b] = quantize_block(x + b * 256, 256, 32767.0f, v);
    for (int j = 0; j < 256; ++j) q[b * 256 + j] = static_cast<std::int16_t>(v[j]);
  }
}

// Defined in quant_avx2.cpp (x86 only).
const QuantKernels& quant_kernels_avx2_table();

const QuantKernels& quant_kernels_scalar() { return kScalar; }

const QuantKernels* quant_kernels_avx2() {
#if defined(__x86_64__) || defined(__i386__)
  // simd_avx2() has made the checks (AVX2, FMA, F16C, KILN_CPU_ISA=baseline) once.
  return simd_avx2() != nullptr ? &quant_kernels_avx2_table() : nullptr;
#else
  return nullptr;
#endif
}

const QuantKernels& quant_kernels() {
  static const QuantKernels* const best = quant_kernels_avx2() != nullptr ? quant_kernels_avx2() : &kScalar;
  return *best;
}

}  // namespace kiln::cpu::kernels

// The portable integer-GEMM kernels (quant_gemm.h), and the run-time choice of table.
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "backends/cpu/kernels/convert.h"
#include "backends/cpu/kernels/quant_gemm.h"
#include "backends/cpu/kernels/simd.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace kiln::cpu::kernels {
namespace {

float scale_at(const QuantWeight& w, std::int64_t index) {
  return w.scales_f16 ? half_to_float(static_cast<const std::uint16_t*>(w.scales)[index])
                      : static_cast<const float*>(w.scales)[index];
}

// Rows [0, rows) of x into a tile of `block`-column blocks: q through quantize_block,
// written as units of `unit_bytes / value_bytes` values; init (when not null) = -16 * sum q.
template <typename T>
void quantize_tile(const float* x, std::int64_t ldx, int rows, std::int64_t k, std::int64_t block, float qmax,
                   std::uint8_t* units, float* scale, std::int32_t* init) {
  constexpr std::int64_t per_unit = 4 / sizeof(T);
  const std::int64_t blocks = k / block;
  std::memset(units, 0, static_cast<std::size_t>(k / per_unit * kIntGemmMr * 4));
  std::int32_t q[kQ16Block];
  for (int r = 0; r < kIntGemmMr; ++r) {
    for (std::int64_t b = 0; b < blocks; ++b) {
      const std::int64_t slot = b * kIntGemmMr + r;
      if (r >= rows) {
        scale[slot] = 0.0f;
        if (init != nullptr) init[slot] = 0;
        continue;
      }
      scale[slot] = quantize_block(x + r * ldx + b * block, block, qmax, q);
      std::int32_t sum = 0;
      for (std::int64_t i = 0; i < block; ++i) {
        const std::int64_t c = b * block + i;
        const T v = static_cast<T>(q[i]);
        std::memcpy(units + ((c / per_unit) * kIntGemmMr + r) * 4 + (c % per_unit) * sizeof(T), &v, sizeof(T));
        sum += q[i];
      }
      if (init != nullptr) init[slot] = -16 * sum;
    }
  }
}

void quantize_q8(const float* x, std::int64_t ldx, int rows, std::int64_t k, std::uint8_t* units, float* scale,
                 std::int32_t* init) {
  quantize_tile<std::int8_t>(x, ldx, rows, k, kQ8Block, 127.0f, units, scale, init);
}

void quantize_q16(const float* x, std::int64_t ldx, int rows, std::int64_t k, std::uint8_t* units, float* scale) {
  quantize_tile<std::int16_t>(x, ldx, rows, k, kQ16Block, 32767.0f, units, scale, nullptr);
}

// The panel's weight scales: scale[b * kIntGemmNr + j] for blocks of `block` columns.
void panel_scales(const QuantWeight& w, std::int64_t row0, int rows, std::int64_t col0, std::int64_t len,
                  std::int64_t block, float* scale) {
  const std::int64_t groups = w.k / w.group;
  for (std::int64_t b = 0; b < len / block; ++b) {
    const std::int64_t g = (col0 + b * block) / w.group;
    for (int j = 0; j < kIntGemmNr; ++j) scale[b * kIntGemmNr + j] = j < rows ? scale_at(w, (row0 + j) * groups + g) : 0.0f;
  }
}

void panel_q8(const QuantWeight& w, std::int64_t row0, int rows, std::int64_t col0, std::int64_t len,
              std::uint8_t* units, float* scale) {
  const std::int64_t groups = w.k / w.group;
  for (std::int64_t t = 0; t < len; ++t) {
    const std::int64_t c = col0 + t;
    for (int j = 0; j < kIntGemmNr; ++j) {
      std::uint8_t u = 0;
      if (j < rows) {
        const std::int64_t r = row0 + j, index = r * groups + c / w.group;
        const std::uint8_t byte = w.data[r * (w.k / 2) + c / 2];
        const int zero = w.zero_points != nullptr ? w.zero_points[index] & 0x0F : 8;
        u = static_cast<std::uint8_t>(((c & 1) != 0 ? byte >> 4 : byte & 0x0F) - zero + 16);
      }
      units[((t / 4) * kIntGemmNr + j) * 4 + t % 4] = u;
    }
  }
  panel_scales(w, row0, rows, col0, len, kQ8Block, scale);
}

void panel_q16(const QuantWeight& w, std::int64_t row0, int rows, std::int64_t col0, std::int64_t len,
               std::uint8_t* units, float* scale) {
  for (std::int64_t t = 0; t < len; ++t) {
    for (int j = 0; j < kIntGemmNr; ++j) {
      const std::int16_t v = j < rows ? static_cast<std::int8_t>(w.data[(row0 + j) * w.k + col0 + t]) : 0;
      std::memcpy(units + ((t / 2) * kIntGemmNr + j) * 4 + (t % 2) * 2, &v, 2);
    }
  }
  panel_scales(w, row0, rows, col0, len, kQ16Block, scale);
}

// The dot product of one 4-byte unit of the tile (row r) and of the panel (column j).
std::int32_t unit_dot_q8(const std::uint8_t* a, const std::uint8_t* b) {
  std::int32_t s = 0;
  for (int i = 0; i < 4; ++i) s += static_cast<std::int32_t>(b[i]) * static_cast<std::int8_t>(a[i]);
  return s;
}

std::int32_t unit_dot_q16(const std::uint8_t* a, const std::uint8_t* b) {
  std::int16_t x[2], w[2];
  std::memcpy(x, a, 4);
  std::memcpy(w, b, 4);
  return x[0] * w[0] + x[1] * w[1];
}

template <std::int64_t kUnits, std::int32_t (*Dot)(const std::uint8_t*, const std::uint8_t*)>
void tile(const IntGemmTile& t) {
  for (int r = 0; r < t.rows; ++r) {
    for (int j = 0; j < t.cols; ++j) {
      float acc = 0.0f;
      for (std::int64_t b = 0; b < t.blocks; ++b) {
        std::int32_t dot = t.a_init != nullptr ? t.a_init[b * kIntGemmMr + r] : 0;
        for (std::int64_t u = b * kUnits; u < (b + 1) * kUnits; ++u) {
          dot += Dot(t.a + (u * kIntGemmMr + r) * 4, t.b + (u * kIntGemmNr + j) * 4);
        }
        acc += static_cast<float>(dot) * t.a_scale[b * kIntGemmMr + r] * t.b_scale[b * kIntGemmNr + j];
      }
      float& c = t.c[r * t.ldc + j];
      c = (t.accumulate ? c : 0.0f) + acc + (t.bias != nullptr ? t.bias[j] : 0.0f);
    }
  }
}

constexpr IntGemmKernels kScalar{"baseline", quantize_q8,  quantize_q16, panel_q8, panel_q16,
                                 tile<kQ8Block / 4, unit_dot_q8>, tile<kQ16Block / 2, unit_dot_q16>};

#if defined(__x86_64__) || defined(__i386__)
bool has_avx512vnni() {
  // VNNI through CPUID (leaf 7, ECX bit 11): older compilers lack the builtin's name.
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool vnni = __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) != 0 && (ecx & (1u << 11)) != 0;
  return vnni && cpu_avx512_usable();
}
#endif

}  // namespace

#if defined(__x86_64__) || defined(__i386__)
// Defined in quant_gemm_avx2.cpp and quant_gemm_avx512vnni.cpp (x86 only).
const IntGemmKernels& int_gemm_kernels_avx2_table();
const IntGemmKernels& int_gemm_kernels_avx512vnni_table();
#endif

const IntGemmKernels& int_gemm_kernels_scalar() { return kScalar; }

const IntGemmKernels* int_gemm_kernels_avx2() {
#if defined(__x86_64__) || defined(__i386__)
  // simd_avx2() has made the checks (AVX2, FMA, F16C, KILN_CPU_ISA=baseline) once.
  return simd_avx2() != nullptr ? &int_gemm_kernels_avx2_table() : nullptr;
#else
  return nullptr;
#endif
}

const IntGemmKernels* int_gemm_kernels_avx512vnni() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool supported = has_avx512vnni();
  return supported && simd_avx2() != nullptr ? &int_gemm_kernels_avx512vnni_table() : nullptr;
#else
  return nullptr;
#endif
}

const IntGemmKernels& int_gemm_kernels() {
  static const IntGemmKernels* const best = int_gemm_kernels_avx512vnni() != nullptr ? int_gemm_kernels_avx512vnni()
                                            : int_gemm_kernels_avx2() != nullptr      ? int_gemm_kernels_avx2()
                                                                                      : &kScalar;
  return *best;
}

}  // namespace kiln::cpu::kernels

// The portable kernels: plain C++ loops written so the compiler can vectorize them for the
// baseline target. Used when the CPU lacks AVX2/FMA, and as the reference ISA in tests.
#include <algorithm>
#include <cmath>

#include "backends/cpu/gemm/gemm_kernels.h"

namespace kiln::cpu::gemm_detail {
namespace {

float activate(float x, GemmActivation act) {
  switch (act) {
    case GemmActivation::kNone:
      return x;
    case GemmActivation::kRelu:
      return x > 0.0f ? x : 0.0f;
    case GemmActivation::kGeluTanh: {
      const float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
      return 0.5f * x * (1.0f + std::tanh(u));
    }
    case GemmActivation::kGeluErf:
      return 0.5f * x * (1.0f + std::erf(x * 0.7071067811865476f));
    case GemmActivation::kSilu:
      return x / (1.0f + std::exp(-x));
    case GemmActivation::kRelu6:
      return std::min(std::max(x, 0.0f), 6.0f);
    case GemmActivation::kHardswish:
      return x * std::min(std::max(x + 3.0f, 0.0f), 6.0f) / 6.0f;
    case GemmActivation::kHardsigmoid:
      return std::min(std::max(x + 3.0f, 0.0f), 6.0f) / 6.0f;
  }
  return x;
}

void epilogue_row(const float* acc, float* c, std::int64_t n, const Epilogue& e) {
  for (std::int64_t j = 0; j < n; ++j) {
    float v = e.alpha * acc[j] + e.bias_row_value;
    if (e.beta != 0.0f) v += e.beta * c[j];
    if (e.bias_col != nullptr) v += e.bias_col[j];
    c[j] = v;
  }
  if (e.act == GemmActivation::kNone) return;
  for (std::int64_t j = 0; j < n; ++j) c[j] = activate(c[j], e.act);
}

void micro_kernel(const MicroTile& t, const Epilogue& e) {
  float acc[kMr][kNr] = {};
  for (std::int64_t k = 0; k < t.kc; ++k) {
    const float* a = t.a + k * kMr;
    const float* b = t.b + k * kNr;
    for (int i = 0; i < kMr; ++i) {
      for (int j = 0; j < kNr; ++j) acc[i][j] += a[i] * b[j];
    }
  }
  Epilogue row = e;
  for (int i = 0; i < t.m; ++i) {
    row.bias_row_value = e.bias_row != nullptr ? e.bias_row[i] : 0.0f;
    epilogue_row(acc[i], t.c + i * t.ldc, t.n, row);
  }
}

void gemv_rows(const float* x, const float* w, std::int64_t ldw, std::int64_t k, std::int64_t n,
               float* out) {
  for (std::int64_t j = 0; j < n; ++j) {
    const float* row = w + j * ldw;
    // Eight partial sums let the compiler vectorize without reassociating a single sum.
    float partial[8] = {};
    std::int64_t kk = 0;
    for (; kk + 8 <= k; kk += 8) {
      for (int l = 0; l < 8; ++l) partial[l] += x[kk + l] * row[kk + l];
    }
    float sum = 0.0f;
    for (; kk < k; ++kk) sum += x[kk] * row[kk];
    for (int l = 0; l < 8; ++l) sum += partial[l];
    out[j] = sum;
  }
}

void gemv_cols(const float* x, const float* b, std::int64_t ldb, std::int64_t k, std::int64_t n,
               float* out) {
  std::fill(out, out + n, 0.0f);
  for (std::int64_t kk = 0; kk < k; ++kk) {
    const float xk = x[kk];
    const float* row = b + kk * ldb;
    for (std::int64_t j = 0; j < n; ++j) out[j] += xk * row[j];
  }
}

void gemv_packed(const float* x, const float* panels, std::int64_t panel_stride, std::int64_t k,
                 std::int64_t num_panels, float* out) {
  for (std::int64_t p = 0; p < num_panels; ++p) {
    const float* panel = panels + p * panel_stride;
    float acc[kNr] = {};
    for (std::int64_t kk = 0; kk < k; ++kk) {
      for (int j = 0; j < kNr; ++j) acc[j] += x[kk] * panel[kk * kNr + j];
    }
    std::copy(acc, acc + kNr, out + p * kNr);
  }
}

}  // namespace

const GemmKernels& scalar_kernels() {
  static constexpr GemmKernels kKernels = {GemmIsa::kScalar,   micro_kernel, nullptr, gemv_rows,
                                           gemv_cols,          gemv_packed,  epilogue_row,
                                           gemm_detail::pack_a};
  return kKernels;
}

}  // namespace kiln::cpu::gemm_detail

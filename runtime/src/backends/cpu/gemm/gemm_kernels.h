// Internal: the per-ISA kernel table the GEMM driver (gemm.cpp) calls. One table per ISA
// (gemm_scalar.cpp, gemm_avx2.cpp); the driver picks one at run time.
//
// This header must stay free of inline functions and templates: it is included by
// gemm_avx2.cpp, which is compiled with -mavx2, and an inline function emitted there could
// be the copy the linker keeps for the whole program (then executed on a CPU without AVX2).
#pragma once

#include <cstdint>

#include "backends/cpu/gemm/gemm.h"

namespace kiln::cpu::gemm_detail {

/// Micro-tile shape: every ISA uses the same packed layouts (A panels of kMr rows stored
/// k-major, B panels of kNr columns stored k-major), so PackedB is ISA-independent.
inline constexpr int kMr = 6;
inline constexpr int kNr = 16;

/// alpha/beta/bias/activation applied when a result is stored. bias_col points at the
/// bias of the first stored column (or null); bias_row_value is added to every element
/// (a per-row bias value, 0 when none); act is kNone except at the last K block.
/// Plain aggregate without member initializers (see the note above): initialize all fields.
struct Epilogue {
  float alpha;
  float beta;
  const float* bias_col;
  const float* bias_row;  // micro-kernel only: bias of the tile's first row, or null
  float bias_row_value;   // GEMV only
  GemmActivation act;
};

/// One micro-tile: C[0..m, 0..n) (m <= kMr, n <= kNr) = epilogue(A_panel * B_panel).
/// a: kc x kMr packed A (a[k*kMr + i]); b: kc x kNr packed B (b[k*kNr + j]); both are
/// zero-padded, so the kernel may compute the full kMr x kNr tile. kc may be 0.
struct MicroTile {
  const float* a;
  const float* b;
  float* c;
  std::int64_t ldc;
  std::int64_t kc;
  int m;
  int n;
};

/// A wide tile (AVX-512): up to kWideMr rows (two A panels: the second at a + kc * kMr,
/// read only when m > kMr) by up to kWideNr columns (two B panels: the second at
/// b + b_stride, read only when n > kNr) of C; otherwise as MicroTile.
inline constexpr int kWideMr = 2 * kMr;
inline constexpr int kWideNr = 2 * kNr;
struct WideTile {
  const float* a;
  const float* b;
  std::int64_t b_stride;
  float* c;
  std::int64_t ldc;
  std::int64_t kc;
  int m;
  int n;
};

struct GemmKernels {
  GemmIsa isa;
  void (*micro_kernel)(const MicroTile& tile, const Epilogue& epilogue);
  /// Null, or a kernel for WideTiles that the drivers then use instead of micro_kernel
  /// (epilogue.bias_row covers the tile's rows, bias_col its columns).
  void (*wide_kernel)(const WideTile& tile, const Epilogue& epilogue);
  /// out[j] = dot(x[0..k), w + j*ldw) for j < n (W rows: the trans_b GEMV).
  void (*gemv_rows)(const float* x, const float* w, std::int64_t ldw, std::int64_t k,
                    std::int64_t n, float* out);
  /// out[j] = sum_k x[k] * b[k*ldb + j] for j < n (the non-transposed GEMV).
  void (*gemv_cols)(const float* x, const float* b, std::int64_t ldb, std::int64_t k,
                    std::int64_t n, float* out);
  /// out[p*kNr + j] = sum_k x[k] * panels[p][k*kNr + j] for p < num_panels; panel p
  /// starts at panels + p * panel_stride.
  void (*gemv_packed)(const float* x, const float* panels, std::int64_t panel_stride,
                      std::int64_t k, std::int64_t num_panels, float* out);
  /// c[j] = act(alpha * acc[j] + beta * c[j] + bias_col[j] + bias_row_value), j < n.
  void (*epilogue_row)(const float* acc, float* c, std::int64_t n, const Epilogue& epilogue);
  /// Same contract as gemm_detail::pack_a below.
  void (*pack_a)(const float* a, std::int64_t row_stride, std::int64_t col_stride, std::int64_t m,
                 std::int64_t kc, float* out);
};

/// The portable table (always available).
const GemmKernels& scalar_kernels();
/// The AVX2/FMA table; call only when the CPU supports AVX2 and FMA.
const GemmKernels& avx2_kernels();
/// The AVX-512 table (the AVX2 one plus wide_kernel); call only when cpu_has_avx512() holds.
const GemmKernels& avx512_kernels();
/// True when this build has the AVX2 table and the CPU can run it.
bool cpu_has_avx2_fma();
/// True when the CPU has AVX-512 F/VL/BW/DQ, AVX2 is usable and KILN_CPU_ISA is not avx2.
bool cpu_has_avx512();
/// Measured once (~1 ms): FMA flops per second on 512-bit vectors over 256-bit ones. About
/// 2 on cores with two 512-bit FMA units (Intel server parts), about 1 where a 512-bit FMA
/// is split into two 256-bit halves (AMD Zen 4) or takes both ports. Call only when
/// cpu_has_avx512() holds.
double avx512_fma_speedup();
/// The table sgemm uses now (set_gemm_isa_for_testing included); gemm.cpp.
const GemmKernels& active_kernels();

/// Packs rows [0, m) x columns [0, kc) of op(A) starting at `a` (element (i, k) at
/// a[i*row_stride + k*col_stride]) into ceil(m/kMr) panels of kc x kMr, zero-padding rows.
void pack_a(const float* a, std::int64_t row_stride, std::int64_t col_stride, std::int64_t m,
            std::int64_t kc, float* out);

/// Packs panels [p0, p1) of op(B) ([K,N]: element (k, j) at b[k*k_stride + j*n_stride]) in
/// the PackedB layout: panel p at out + p*K*kNr.
void pack_b_panels(const float* b, std::int64_t k_stride, std::int64_t n_stride, std::int64_t k,
                   std::int64_t n, std::int64_t p0, std::int64_t p1, float* out);

}  // namespace kiln::cpu::gemm_detail

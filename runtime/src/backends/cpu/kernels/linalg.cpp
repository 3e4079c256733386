// matmul (numpy semantics, broadcast batch dims), linear and bmm. f32 goes through
// matmul_f32 (the seam for a tuned SGEMM); f64 and integers use a plain loop (integers
// wrap); f16/bf16 run through f32 copies.
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <type_traits>
#include <vector>

#include "backends/cpu/kernels/broadcast.h"
#include "backends/cpu/kernels/common.h"
#include "backends/cpu/gemm/gemm.h"
#include "backends/cpu/kernels/gemv.h"
#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/thread_pool.h"

namespace kiln::cpu::kernels {
namespace {

// C[m, j0:j0+nb] += A[m, k0:k0+kb] * B[k0:k0+kb, j0:j0+nb], four k rows at a time.
void gemm_block(std::int64_t m, std::int64_t nb, std::int64_t kb, const float* a, std::int64_t lda,
                const float* b, std::int64_t ldb, float* c, std::int64_t ldc) {
  for (std::int64_t i = 0; i < m; ++i) {
    float* crow = c + i * ldc;
    const float* arow = a + i * lda;
    std::int64_t kk = 0;
    for (; kk + 4 <= kb; kk += 4) {
      const float a0 = arow[kk], a1 = arow[kk + 1], a2 = arow[kk + 2], a3 = arow[kk + 3];
      const float* b0 = b + kk * ldb;
      const float* b1 = b0 + ldb;
      const float* b2 = b1 + ldb;
      const float* b3 = b2 + ldb;
      for (std::int64_t j = 0; j < nb; ++j) {
        crow[j] += a0 * b0[j] + a1 * b1[j] + a2 * b2[j] + a3 * b3[j];
      }
    }
    for (; kk < kb; ++kk) {
      const float aik = arow[kk];
      const float* brow = b + kk * ldb;
      for (std::int64_t j = 0; j < nb; ++j) crow[j] += aik * brow[j];
    }
  }
}

// C = A * B with B [k, n]: cache blocks of B (128 x 256 floats) stay in L2.
void gemm_nn(std::int64_t m, std::int64_t n, std::int64_t k, const float* a, std::int64_t lda,
             const float* b, std::int64_t ldb, float* c, std::int64_t ldc) {
  constexpr std::int64_t kNb = 256;
  constexpr std::int64_t kKb = 128;
  for (std::int64_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, 0.0f);
  for (std::int64_t j0 = 0; j0 < n; j0 += kNb) {
    const std::int64_t nb = std::min(kNb, n - j0);
    for (std::int64_t k0 = 0; k0 < k; k0 += kKb) {
      const std::int64_t kb = std::min(kKb, k - k0);
      gemm_block(m, nb, kb, a + k0, lda, b + k0 * ldb + j0, ldb, c + j0, ldc);
    }
  }
}

float dot(const float* x, const float* y, std::int64_t n) {
  float lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int l = 0; l < 8; ++l) lanes[l] += x[i + l] * y[i + l];
  }
  float s = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
  for (; i < n; ++i) s += x[i] * y[i];
  return s;
}

// The accumulator of T: T for floats, a wrapping unsigned type (at least `unsigned`) for ints.
template <typename T, bool = std::is_integral_v<T>>
struct WideOf {
  using type = T;
};
template <typename T>
struct WideOf<T, true> {
  using type = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;
};
template <typename T>
using Wide = typename WideOf<T>::type;

// Plain i-k-j product for non-f32 dtypes (integers wrap).
template <typename T>
void matmul_generic(std::int64_t m, std::int64_t n, std::int64_t k, const T* a, const T* b,
                    bool b_transposed, T* c) {
  for (std::int64_t i = 0; i < m; ++i) {
    Wide<T>* crow = reinterpret_cast<Wide<T>*>(c + i * n);
    if constexpr (sizeof(Wide<T>) != sizeof(T)) {
      // Narrow integers: accumulate per element.
      for (std::int64_t j = 0; j < n; ++j) {
        Wide<T> s = 0;
        for (std::int64_t kk = 0; kk < k; ++kk) {
          const T bv = b_transposed ? b[j * k + kk] : b[kk * n + j];
          s += static_cast<Wide<T>>(a[i * k + kk]) * static_cast<Wide<T>>(bv);
        }
        c[i * n + j] = static_cast<T>(s);
      }
    } else {
      std::fill(crow, crow + n, Wide<T>(0));
      for (std::int64_t kk = 0; kk < k; ++kk) {
        const auto aik = static_cast<Wide<T>>(a[i * k + kk]);
        for (std::int64_t j = 0; j < n; ++j) {
          const T bv = b_transposed ? b[j * k + kk] : b[kk * n + j];
          crow[j] += aik * static_cast<Wide<T>>(bv);
        }
      }
    }
  }
}

// One [m,k] x [k,n] (or [n,k] transposed) product in any supported dtype.
bool matmul_any(DType dtype, std::int64_t m, std::int64_t n, std::int64_t k, const void* a,
                const void* b, bool b_transposed, void* c, ThreadPool* pool) {
  if (dtype == DType::kF32) {
    matmul_f32(m, n, k, static_cast<const float*>(a), k, static_cast<const float*>(b),
               b_transposed ? k : n, b_transposed, static_cast<float*>(c), n, pool);
    return true;
  }
  return dispatch<DType::kF64, KILN_ALL_INT_DTYPES>(dtype, [&]<DType D>() {
    using T = CType<D>;
    matmul_generic<T>(m, n, k, static_cast<const T*>(a), static_cast<const T*>(b), b_transposed,
                      static_cast<T*>(c));
  });
}

constexpr IoSpec kBinaryIo{.min_inputs = 2, .max_inputs = 2, .num_outputs = 1};

Status check_operand_dtypes(std::string_view op, Inputs in, Outputs out) {
  if (in[0].dtype != in[1].dtype) {
    return unsupported(op, "mixed dtypes a.dtype=", in[0].dtype, " and b.dtype=", in[1].dtype);
  }
  KILN_RETURN_IF_ERROR(check_dtype(op, "out", out[0], in[0].dtype));
  if (in[0].dtype == DType::kBool) return unsupported_dtype(op, in[0].dtype, "a");
  return Status::Ok();
}

// A fake view holding only the leading `rank` dims of v (for batch broadcasting).
TensorView batch_view(const TensorView& v, int rank) {
  TensorView b;
  b.rank = rank;
  for (int i = 0; i < rank; ++i) b.shape[i] = v.shape[i];
  return b;
}

struct MatmulShape {
  std::int64_t m = 1, n = 1, k = 1;
  TensorView a_batch, b_batch, out_batch;
};

// Checks a, b, out against numpy matmul rules and fills the problem sizes.
Status matmul_shape(const TensorView& a, const TensorView& b, const TensorView& out, MatmulShape& s) {
  if (a.rank < 1 || b.rank < 1) {
    return invalid("matmul", "operands must be at least 1-D, got a.shape=", shape_text(a),
                   " and b.shape=", shape_text(b));
  }
  const int ak = a.rank - 1;
  const int bk = b.rank == 1 ? 0 : b.rank - 2;
  s.k = a.shape[ak];
  if (s.k != b.shape[bk]) {
    return invalid("matmul", "a.shape[", ak, "]=", s.k, " != b.shape[", bk, "]=", b.shape[bk]);
  }
  s.m = a.rank >= 2 ? a.shape[a.rank - 2] : 1;
  s.n = b.rank >= 2 ? b.shape[b.rank - 1] : 1;
  s.a_batch = batch_view(a, std::max(a.rank - 2, 0));
  s.b_batch = batch_view(b, std::max(b.rank - 2, 0));
  const int batch_rank = std::max(s.a_batch.rank, s.b_batch.rank);
  const int out_rank = batch_rank + (a.rank >= 2 ? 1 : 0) + (b.rank >= 2 ? 1 : 0);
  if (out.rank != out_rank) {
    return invalid("matmul", "out.shape=", shape_text(out), " but a.shape=", shape_text(a),
                   " and b.shape=", shape_text(b), " give rank ", out_rank);
  }
  s.out_batch = batch_view(out, batch_rank);
  int d = batch_rank;
  if (a.rank >= 2 && out.shape[d++] != s.m) {
    return invalid("matmul", "out.shape=", shape_text(out), " but a.shape[", a.rank - 2, "]=", s.m);
  }
  if (b.rank >= 2 && out.shape[d] != s.n) {
    return invalid("matmul", "out.shape=", shape_text(out), " but b.shape[", b.rank - 1, "]=", s.n);
  }
  return Status::Ok();
}

}  // namespace

void matmul_f32(std::int64_t m, std::int64_t n, std::int64_t k, const float* a, std::int64_t lda,
                const float* b, std::int64_t ldb, bool b_transposed, float* c, std::int64_t ldc,
                ThreadPool* pool) {
  if (m <= 0 || n <= 0) return;
  // One row of A: B read in place (packing it would cost as much as the product).
  if (m == 1 && !b_transposed) return gemv_rows_f32(n, k, a, b, ldb, c, pool);
  // The packed AVX2/FMA SGEMM (gemm/gemm.h); the loops below remain as the fallback when
  // it cannot allocate its packing buffers.
  GemmParams params;
  params.m = m;
  params.n = n;
  params.k = k;
  params.trans_b = b_transposed;
  params.a = a;
  params.lda = lda;
  params.b = b;
  params.ldb = ldb;
  params.c = c;
  params.ldc = ldc;
  if (k > 0 && sgemm(params, pool).ok()) return;
  if (!b_transposed) return gemm_nn(m, n, k, a, lda, b, ldb, c, ldc);
  // Transpose B once so the inner loop runs along contiguous rows of B (dot products when
  // M is small or the copy cannot be allocated).
  std::unique_ptr<float[]> bt;
  if (m > 4 && k > 0) bt.reset(new (std::nothrow) float[static_cast<std::size_t>(k * n)]);
  if (bt == nullptr) {
    for (std::int64_t i = 0; i < m; ++i) {
      for (std::int64_t j = 0; j < n; ++j) c[i * ldc + j] = dot(a + i * lda, b + j * ldb, k);
    }
    return;
  }
  for (std::int64_t j = 0; j < n; ++j) {
    for (std::int64_t kk = 0; kk < k; ++kk) bt[kk * n + j] = b[j * ldb + kk];
  }
  gemm_nn(m, n, k, a, lda, bt.get(), n, c, ldc);
}

namespace {

// Whether `products` f32 products of m x n x k go to the threads one product each: each
// too small for the GEMV or the SGEMM to split over threads (a decode step's q kᵀ per head,
// 64 x 1088 under the GEMV's 128K multiply-adds per split; a Swin window's 49 x 32 x 49
// under the SGEMM's 1M, gemm.cpp's kMinParallelFlops), so that one by one they would all
// run on the calling thread, but enough of them to be worth waking the others.
bool small_products_to_threads(KernelContext& ctx, std::int64_t m, std::int64_t n, std::int64_t k,
                               std::int64_t products) {
  const std::int64_t work = m * n * std::max<std::int64_t>(k, 1);
  const std::int64_t split = m == 1 ? std::int64_t{1} << 17 : std::int64_t{1} << 20;
  return ctx.pool().num_threads() > 1 && products > 1 && work < split && products * work >= (std::int64_t{1} << 17);
}

}  // namespace

Status Matmul(KernelContext& ctx, Inputs in, Outputs out, Attrs attrs) {
  KILN_RETURN_IF_ERROR(check_io("matmul", in, out, kBinaryIo));
  if (has_half_views(in, out)) return run_via_f32(Matmul, ctx, in, out, attrs);
  KILN_RETURN_IF_ERROR(check_operand_dtypes("matmul", in, out));
  MatmulShape s;
  KILN_RETURN_IF_ERROR(matmul_shape(in[0], in[1], out[0], s));
  const TensorView& a = in[0];
  const TensorView& b = in[1];
  const DType dtype = a.dtype;
  if (!dispatch<KILN_NUMERIC_DTYPES>(dtype, [] <DType>() {})) return unsupported_dtype("matmul", dtype, "a");
  if (out[0].numel() == 0) return Status::Ok();
  const std::size_t elem = dtype_size(dtype);
  const auto* pa = static_cast<const unsigned char*>(a.data);
  const auto* pb = static_cast<const unsigned char*>(b.data);
  auto* pc = static_cast<unsigned char*>(out[0].data);
  // B as a window of a larger tensor (a slice the executor folded into this matmul).
  const OperandWindow* window = ctx.operand_window(1);
  if (window != nullptr && dtype != DType::kF32) return unsupported("matmul", "a windowed b of dtype ", dtype);
  if (s.b_batch.rank == 0) {
    // b is one matrix: fold a's batch dims into its rows.
    const std::int64_t rows = s.m * s.a_batch.numel();
    if (window != nullptr) {
      matmul_f32(rows, s.n, s.k, static_cast<const float*>(a.data), s.k, static_cast<const float*>(b.data), window->ld,
                 false, static_cast<float*>(out[0].data), s.n, &ctx.pool());
      return Status::Ok();
    }
    // A constant B was packed once at load.
    if (const PackedB* packed = ctx.packed_b(1); packed != nullptr && dtype == DType::kF32 && packed->k() == s.k && packed->n() == s.n) {
      GemmParams params;
      params.m = rows;
      params.n = s.n;
      params.k = s.k;
      params.a = static_cast<const float*>(a.data);
      params.lda = s.k;
      params.c = static_cast<float*>(out[0].data);
      params.ldc = s.n;
      if (sgemm_prepacked(params, *packed, &ctx.pool()).ok()) return Status::Ok();
    }
    matmul_any(dtype, rows, s.n, s.k, pa, pb, false, pc, &ctx.pool());
    return Status::Ok();
  }
  BroadcastPlan plan;
  KILN_RETURN_IF_ERROR(plan_broadcast("matmul", {{&s.a_batch, "a batch"}, {&s.b_batch, "b batch"}},
                                      s.out_batch, true, plan));
  const auto a_size = static_cast<std::int64_t>(elem) * s.m * s.k;
  const auto b_size = static_cast<std::int64_t>(elem) * (window != nullptr ? window->batch_stride : s.k * s.n);
  const auto c_size = static_cast<std::int64_t>(elem) * s.m * s.n;
  const std::int64_t len = plan.inner();
  // Many f32 products each too small to split: the products go to the threads instead,
  // each computed on one.
  const std::int64_t work = s.m * s.n * std::max<std::int64_t>(s.k, 1), products = s.out_batch.numel();
  if (dtype == DType::kF32 && small_products_to_threads(ctx, s.m, s.n, s.k, products)) {
    std::vector<std::array<std::int64_t, 3>> at;  // a, b, c offsets in elements of each
    at.reserve(static_cast<std::size_t>(products));
    for_each_row<2>(plan, [&](const std::array<std::int64_t, 2>& off, std::int64_t row) {
      for (std::int64_t i = 0; i < len; ++i) {
        at.push_back({off[0] + i * plan.inner_stride(0), off[1] + i * plan.inner_stride(1), row * len + i});
      }
    });
    const std::int64_t ldb = window != nullptr ? window->ld : s.n;
    const std::int64_t count = static_cast<std::int64_t>(at.size());
    ctx.pool().parallel_for(count, ctx.pool().even_grain(count, work, 1 << 16), [&](std::int64_t first, std::int64_t last) {
      for (std::int64_t p = first; p < last; ++p) {
        const auto& o = at[static_cast<std::size_t>(p)];
        matmul_f32(s.m, s.n, s.k, reinterpret_cast<const float*>(pa + o[0] * a_size), s.k,
                   reinterpret_cast<const float*>(pb + o[1] * b_size), ldb, false,
                   reinterpret_cast<float*>(pc + o[2] * c_size), s.n, nullptr);
      }
    });
    return Status::Ok();
  }
  for_each_row<2>(plan, [&](const std::array<std::int64_t, 2>& off, std::int64_t row) {
    for (std::int64_t i = 0; i < len; ++i) {
      const std::int64_t ai = off[0] + i * plan.inner_stride(0);
      const std::int64_t bi = off[1] + i * plan.inner_stride(1);
      if (window != nullptr) {
        matmul_f32(s.m, s.n, s.k, reinterpret_cast<const float*>(pa + ai * a_size), s.k,
                   reinterpret_cast<const float*>(pb + bi * b_size), window->ld, false,
                   reinterpret_cast<float*>(pc + (row * len + i) * c_size), s.n, &ctx.pool());
        continue;
      }
      matmul_any(dtype, s.m, s.n, s.k, pa + ai * a_size, pb + bi * b_size, false,
                 pc + (row * len + i) * c_size, &ctx.pool());
    }
  });
  return Status::Ok();
}

Status Bmm(KernelContext& ctx, Inputs in, Outputs out, Attrs attrs) {
  KILN_RETURN_IF_ERROR(check_io("bmm", in, out, kBinaryIo));
  if (has_half_views(in, out)) return run_via_f32(Bmm, ctx, in, out, attrs);
  KILN_RETURN_IF_ERROR(check_operand_dtypes("bmm", in, out));
  const TensorView& a = in[0];
  const TensorView& b = in[1];
  if (a.rank != 3 || b.rank != 3) {
    return invalid("bmm", "expects 3-D operands, got a.shape=", shape_text(a), " and b.shape=", shape_text(b));
  }
  if (a.shape[0] != b.shape[0]) return invalid("bmm", "a.shape[0]=", a.shape[0], " != b.shape[0]=", b.shape[0]);
  if (a.shape[2] != b.shape[1]) return invalid("bmm", "a.shape[2]=", a.shape[2], " != b.shape[1]=", b.shape[1]);
  const std::int64_t batch = a.shape[0], m = a.shape[1], k = a.shape[2], n = b.shape[2];
  const std::array<std::int64_t, 3> expected{batch, m, n};
  KILN_RETURN_IF_ERROR(check_out_shape("bmm", out[0], expected));
  if (out[0].numel() == 0) return Status::Ok();
  const auto elem = static_cast<std::int64_t>(dtype_size(a.dtype));
  const auto* pa = static_cast<const unsigned char*>(a.data);
  const auto* pb = static_cast<const unsigned char*>(b.data);
  auto* pc = static_cast<unsigned char*>(out[0].data);
  if (a.dtype == DType::kF32 && small_products_to_threads(ctx, m, n, k, batch)) {
    const auto* fa = static_cast<const float*>(a.data);
    const auto* fb = static_cast<const float*>(b.data);
    auto* fc = static_cast<float*>(out[0].data);
    const std::int64_t work = m * n * std::max<std::int64_t>(k, 1);
    ctx.pool().parallel_for(batch, ctx.pool().even_grain(batch, work, 1 << 16), [&](std::int64_t first, std::int64_t last) {
      for (std::int64_t i = first; i < last; ++i) {
        matmul_f32(m, n, k, fa + i * m * k, k, fb + i * k * n, n, false, fc + i * m * n, n, nullptr);
      }
    });
    return Status::Ok();
  }
  for (std::int64_t i = 0; i < batch; ++i) {
    if (!matmul_any(a.dtype, m, n, k, pa + i * m * k * elem, pb + i * k * n * elem, false,
                    pc + i * m * n * elem, &ctx.pool())) {
      return unsupported_dtype("bmm", a.dtype, "a");
    }
  }
  return Status::Ok();
}

Status Linear(KernelContext& ctx, Inputs in, Outputs out, Attrs attrs) {
  KILN_RETURN_IF_ERROR(check_io("linear", in, out, {.min_inputs = 2, .max_inputs = 3, .num_outputs = 1,
                                                    .optional_inputs = 0b100}));
  if (has_half_views(in, out)) return run_via_f32(Linear, ctx, in, out, attrs);
  const TensorView& x = in[0];
  const TensorView& w = in[1];
  const TensorView* bias = in.size() == 3 && !is_absent(in[2]) ? &in[2] : nullptr;
  KILN_RETURN_IF_ERROR(check_operand_dtypes("linear", in.first(2), out));
  if (x.rank < 1) return invalid("linear", "x must be at least 1-D, got x.shape=", shape_text(x));
  if (w.rank != 2) return invalid("linear", "weight must be 2-D, got weight.shape=", shape_text(w));
  const std::int64_t k = x.shape[x.rank - 1];
  const std::int64_t n = w.shape[0];
  if (w.shape[1] != k) {
    return invalid("linear", "x.shape[", x.rank - 1, "]=", k, " != weight.shape[1]=", w.shape[1]);
  }
  if (bias != nullptr) {
    KILN_RETURN_IF_ERROR(check_dtype("linear", "bias", *bias, x.dtype));
    if (bias->rank != 1 || bias->shape[0] != n) {
      return invalid("linear", "bias.shape=", shape_text(*bias), " but weight.shape[0]=", n);
    }
  }
  std::array<std::int64_t, kMaxRank> expected = x.shape;
  expected[x.rank - 1] = n;
  KILN_RETURN_IF_ERROR(check_out_shape("linear", out[0], std::span<const std::int64_t>(expected.data(), x.rank)));
  if (out[0].numel() == 0) return Status::Ok();
  const std::int64_t rows = dims_product(x, 0, x.rank - 1);
  if (x.dtype == DType::kF32 && rows > 0 && n > 0 && k > 0) {
    // One SGEMM with the bias fused into its epilogue; a constant weight was packed at load.
    GemmParams params;
    params.m = rows;
    params.n = n;
    params.k = k;
    params.trans_b = true;
    params.a = x.as<const float>();
    params.lda = k;
    params.b = w.as<const float>();
    params.ldb = k;
    params.c = out[0].as<float>();
    params.ldc = n;
    if (bias != nullptr) {
      params.bias = bias->as<const float>();
      params.bias_kind = GemmBias::kPerColumn;
    }
    params.activation = ctx.fused_activation();
    const PackedB* packed = ctx.packed_b(1);
    const Status st = packed != nullptr && packed->k() == k && packed->n() == n ? sgemm_prepacked(params, *packed, &ctx.pool())
                                                                               : sgemm(params, &ctx.pool());
    if (st.ok()) return st;
  }
  if (!matmul_any(x.dtype, rows, n, k, x.data, w.data, true, out[0].data, &ctx.pool())) {
    return unsupported_dtype("linear", x.dtype, "x");
  }
  if (bias != nullptr && rows > 0 && n > 0) {
    dispatch<KILN_NUMERIC_DTYPES>(x.dtype, [&]<DType D>() {
      using T = CType<D>;
      T* y = out[0].as<T>();
      const T* bv = bias->as<T>();
      for (std::int64_t r = 0; r < rows; ++r) {
        for (std::int64_t j = 0; j < n; ++j) y[r * n + j] = static_cast<T>(y[r * n + j] + bv[j]);
      }
    });
  }
  if (out[0].dtype == DType::kF32) apply_activation(ctx.fused_activation(), out[0].as<float>(), out[0].numel());
  return Status::Ok();
}

}  // namespace kiln::cpu::kernels

// gemv_rows_f32 (a row vector times a matrix read in place, the decode step's attention
// matmuls) against a double reference: odd sizes around its 32- and 8-column blocks, rows
// further apart than the columns read (a window of a KV cache), nothing read or written
// past the window, both code paths, and split over threads. And the matmul kernel taking
// that path for M = 1 with its B a window of a larger tensor (KernelContext::operand_window).
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "backends/cpu/kernels/gemv.h"
#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/kernels/simd.h"
#include "backends/cpu/thread_pool.h"
#include "kernel_testutil.h"

namespace kiln::cpu::testing {
namespace {

using kernels::gemv_rows_f32;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

struct Problem {
  std::int64_t n, k, ldb;
  std::vector<float> a, b;  // b: k rows of ldb floats, NaN past column n (never read)
  std::vector<double> want;
};

Problem make_problem(std::mt19937& rng, std::int64_t n, std::int64_t k, std::int64_t ldb) {
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  Problem p{n, k, ldb, std::vector<float>(static_cast<std::size_t>(k)), std::vector<float>(static_cast<std::size_t>(k * ldb + 8), kNaN), {}};
  for (float& x : p.a) x = u(rng);
  for (std::int64_t r = 0; r < k; ++r) {
    for (std::int64_t j = 0; j < n; ++j) p.b[static_cast<std::size_t>(r * ldb + j)] = u(rng);
  }
  p.want.assign(static_cast<std::size_t>(n), 0.0);
  for (std::int64_t j = 0; j < n; ++j) {
    for (std::int64_t r = 0; r < k; ++r) p.want[static_cast<std::size_t>(j)] += double(p.a[static_cast<std::size_t>(r)]) * p.b[static_cast<std::size_t>(r * ldb + j)];
  }
  return p;
}

// c has 8 sentinel floats after its n: they must stay untouched.
::testing::AssertionResult matches(const Problem& p, const std::vector<float>& c) {
  for (std::int64_t j = 0; j < p.n; ++j) {
    const double got = c[static_cast<std::size_t>(j)], want = p.want[static_cast<std::size_t>(j)];
    if (!(std::fabs(got - want) <= 1e-5 * (1.0 + static_cast<double>(p.k)) * 2.0)) {
      return ::testing::AssertionFailure() << "n=" << p.n << " k=" << p.k << " ldb=" << p.ldb << " column " << j << ": " << got << " != " << want;
    }
  }
  for (std::size_t j = static_cast<std::size_t>(p.n); j < c.size(); ++j) {
    if (c[j] != -7.0f) return ::testing::AssertionFailure() << "n=" << p.n << ": wrote past the end (column " << j << ")";
  }
  return ::testing::AssertionSuccess();
}

TEST(GemvRows, MatchesAReferenceForOddSizesAndRowsFurtherApartThanTheWindow) {
  std::mt19937 rng(15);
  ThreadPool two(2);
  int checked = 0;
  for (std::int64_t n : {1, 3, 7, 8, 9, 31, 32, 33, 40, 64, 65, 100, 1024, 1029}) {
    for (std::int64_t k : {0, 1, 2, 3, 5, 64, 129}) {
      for (std::int64_t pad : {0, 5, 77}) {
        const Problem p = make_problem(rng, n, k, n + pad);
        auto run = [&](auto&& body) {
          std::vector<float> c(static_cast<std::size_t>(n + 8), -7.0f);
          body(c.data());
          return c;
        };
        EXPECT_TRUE(matches(p, run([&](float* c) { kernels::gemv_rows_portable(0, n, k, p.a.data(), p.b.data(), p.ldb, c); })));
        if (kernels::simd_avx2() != nullptr) {
          EXPECT_TRUE(matches(p, run([&](float* c) { kernels::gemv_rows_avx2(0, n, k, p.a.data(), p.b.data(), p.ldb, c); })));
        }
        EXPECT_TRUE(matches(p, run([&](float* c) { gemv_rows_f32(n, k, p.a.data(), p.b.data(), p.ldb, c, nullptr); })));
        EXPECT_TRUE(matches(p, run([&](float* c) { gemv_rows_f32(n, k, p.a.data(), p.b.data(), p.ldb, c, &two); })));
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 14 * 7 * 3);
}

TEST(GemvRows, AColumnRangeWritesOnlyItsColumns) {
  std::mt19937 rng(16);
  const Problem p = make_problem(rng, 100, 7, 130);
  for (auto body : {kernels::gemv_rows_portable, kernels::simd_avx2() != nullptr ? kernels::gemv_rows_avx2 : kernels::gemv_rows_portable}) {
    std::vector<float> c(108, -7.0f);
    body(35, 77, p.k, p.a.data(), p.b.data(), p.ldb, c.data());
    for (std::int64_t j = 0; j < 108; ++j) {
      if (j < 35 || j >= 77) {
        EXPECT_EQ(c[static_cast<std::size_t>(j)], -7.0f) << j;
      } else {
        EXPECT_NEAR(c[static_cast<std::size_t>(j)], p.want[static_cast<std::size_t>(j)], 1e-4) << j;
      }
    }
  }
}

// The matmul kernel with B a window of a larger tensor, as the executor passes a folded
// cache slice: q [1, heads, 1, hd] times the first `ctx` columns of k_cache [1, heads, hd,
// max_ctx] (rows max_ctx apart), and a [1, heads, 1, ctx] times the first ctx rows of
// v_cache [1, heads, max_ctx, hd] (matrices max_ctx * hd apart).
class WindowContext : public PoolContext {
 public:
  explicit WindowContext(OperandWindow w, int threads = 1) : PoolContext(threads), window_(w) {}
  const OperandWindow* operand_window(int index) const override { return index == 1 ? &window_ : nullptr; }

 private:
  OperandWindow window_;
};

// tol: relative and absolute (float sums of ctx or hd products).
void check_cache_windows(std::mt19937& rng, std::int64_t heads, std::int64_t hd, std::int64_t max_ctx,
                         std::initializer_list<std::int64_t> contexts, double tol) {
  for (std::int64_t ctx : contexts) {
    for (int threads : {1, 2}) {
      SCOPED_TRACE("ctx " + std::to_string(ctx) + ", threads " + std::to_string(threads));
      // Scores: q k^T over the window k_cache[..., :ctx].
      const Tensor q = Tensor::random(DType::kF32, {1, heads, 1, hd}, rng);
      const Tensor k_cache = Tensor::random(DType::kF32, {1, heads, hd, max_ctx}, rng);
      Tensor scores(DType::kF32, {1, heads, 1, ctx});
      std::vector<double> want(static_cast<std::size_t>(heads * ctx), 0.0);
      for (std::int64_t h = 0; h < heads; ++h) {
        for (std::int64_t j = 0; j < ctx; ++j) {
          for (std::int64_t d = 0; d < hd; ++d) want[static_cast<std::size_t>(h * ctx + j)] += q.at(h * hd + d) * k_cache.at((h * hd + d) * max_ctx + j);
        }
      }
      TensorView kw = k_cache.view();
      kw.shape[3] = ctx;
      std::vector<TensorView> outs{scores.view()};
      WindowContext kctx({.ld = max_ctx, .batch_stride = hd * max_ctx}, threads);
      ASSERT_TRUE(run_views(OpKind::Matmul, {q.view(), kw}, outs, {}, &kctx).ok());
      EXPECT_TRUE(all_close(scores, want, tol, tol));
      EXPECT_TRUE(scores.canary_intact());
      // Values: a v over the window v_cache[:, :, :ctx].
      const Tensor a = Tensor::random(DType::kF32, {1, heads, 1, ctx}, rng);
      const Tensor v_cache = Tensor::random(DType::kF32, {1, heads, max_ctx, hd}, rng);
      Tensor out(DType::kF32, {1, heads, 1, hd});
      std::vector<double> want_v(static_cast<std::size_t>(heads * hd), 0.0);
      for (std::int64_t h = 0; h < heads; ++h) {
        for (std::int64_t d = 0; d < hd; ++d) {
          for (std::int64_t j = 0; j < ctx; ++j) want_v[static_cast<std::size_t>(h * hd + d)] += a.at(h * ctx + j) * v_cache.at((h * max_ctx + j) * hd + d);
        }
      }
      TensorView vw = v_cache.view();
      vw.shape[2] = ctx;
      std::vector<TensorView> vouts{out.view()};
      WindowContext vctx({.ld = hd, .batch_stride = max_ctx * hd}, threads);
      ASSERT_TRUE(run_views(OpKind::Matmul, {a.view(), vw}, vouts, {}, &vctx).ok());
      EXPECT_TRUE(all_close(out, want_v, tol, tol));
      EXPECT_TRUE(out.canary_intact());
    }
  }
}

TEST(MatmulKernel, OneRowTimesWindowsOfACacheMatchesTheReference) {
  std::mt19937 rng(17);
  check_cache_windows(rng, 3, 20, 45, {1, 9, 33, 45}, 1e-5);
  // Heads too small to split one by one (64 x 300 multiply-adds each), together enough for
  // two threads: the products go to the threads (a decode step's attention).
  check_cache_windows(rng, 8, 64, 320, {300}, 1e-4);
}

// Many small products of a broadcast batch on two threads, each on one: the same bits as
// on one thread, and the reference.
TEST(MatmulKernel, SmallProductsOfABatchShareTheThreads) {
  std::mt19937 rng(18);
  const Tensor a = Tensor::random(DType::kF32, {4, 1, 8, 32}, rng);
  const Tensor b = Tensor::random(DType::kF32, {1, 16, 32, 20}, rng);
  std::vector<double> want(static_cast<std::size_t>(4 * 16 * 8 * 20), 0.0);
  for (std::int64_t i = 0; i < 4; ++i) {
    for (std::int64_t j = 0; j < 16; ++j) {
      for (std::int64_t r = 0; r < 8; ++r) {
        for (std::int64_t c = 0; c < 20; ++c) {
          double sum = 0.0;
          for (std::int64_t k = 0; k < 32; ++k) sum += double(a.at((i * 8 + r) * 32 + k)) * b.at((j * 32 + k) * 20 + c);
          want[static_cast<std::size_t>(((i * 16 + j) * 8 + r) * 20 + c)] = sum;
        }
      }
    }
  }
  std::vector<std::vector<float>> got;
  for (int threads : {1, 2}) {
    Tensor out(DType::kF32, {4, 16, 8, 20});
    std::vector<TensorView> outs{out.view()};
    PoolContext ctx(threads);
    ASSERT_TRUE(run_views(OpKind::Matmul, {a.view(), b.view()}, outs, {}, &ctx).ok());
    EXPECT_TRUE(all_close(out, want, 1e-5, 1e-5)) << threads;
    EXPECT_TRUE(out.canary_intact());
    got.emplace_back(out.as<float>(), out.as<float>() + out.numel());
  }
  EXPECT_EQ(got[0], got[1]);
}

// bmm likewise: Swin's window attention is a batch of 49 x 32 x 49 products, each under
// the SGEMM's threshold for splitting one product over threads.
TEST(BmmKernel, SmallProductsOfABatchShareTheThreads) {
  std::mt19937 rng(19);
  constexpr std::int64_t kBatch = 24, kM = 49, kK = 32, kN = 49;
  const Tensor a = Tensor::random(DType::kF32, {kBatch, kM, kK}, rng);
  const Tensor b = Tensor::random(DType::kF32, {kBatch, kK, kN}, rng);
  std::vector<double> want(static_cast<std::size_t>(kBatch * kM * kN), 0.0);
  for (std::int64_t i = 0; i < kBatch; ++i) {
    for (std::int64_t r = 0; r < kM; ++r) {
      for (std::int64_t c = 0; c < kN; ++c) {
        double sum = 0.0;
        for (std::int64_t k = 0; k < kK; ++k) sum += double(a.at((i * kM + r) * kK + k)) * b.at((i * kK + k) * kN + c);
        want[static_cast<std::size_t>((i * kM + r) * kN + c)] = sum;
      }
    }
  }
  std::vector<std::vector<float>> got;
  for (int threads : {1, 2, 3}) {
    Tensor out(DType::kF32, {kBatch, kM, kN});
    std::vector<TensorView> outs{out.view()};
    PoolContext ctx(threads);
    ASSERT_TRUE(run_views(OpKind::Bmm, {a.view(), b.view()}, outs, {}, &ctx).ok());
    EXPECT_TRUE(all_close(out, want, 1e-5, 1e-5)) << threads;
    EXPECT_TRUE(out.canary_intact());
    got.emplace_back(out.as<float>(), out.as<float>() + out.numel());
  }
  EXPECT_EQ(got[0], got[1]);
  EXPECT_EQ(got[0], got[2]);
}

}  // namespace
}  // namespace kiln::cpu::testing

#include "backends/cpu/gemm/gemm.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/thread_pool.h"

namespace kiln::cpu {

// Names the ISA in test failure messages (found by argument-dependent lookup).
[[maybe_unused]] static void PrintTo(GemmIsa isa, std::ostream* os) {
  *os << (isa == GemmIsa::kScalar ? "scalar" : isa == GemmIsa::kAvx2 ? "avx2" : isa == GemmIsa::kAvx512 ? "avx512" : "auto");
}

namespace {

struct Shape {
  std::int64_t m, n, k;
};

// Odd sizes around the 6x16 tile, the 256 K block and the 144-row M block; the last three
// are large enough to be split over threads (by rows, by columns, unevenly).
const std::vector<Shape> kShapes = {
    {1, 1, 1},     {2, 3, 1},     {3, 1, 5},       {1, 17, 3},     {5, 64, 1},     {6, 16, 8},
    {7, 16, 17},   {12, 32, 256}, {13, 33, 257},   {17, 63, 65},   {63, 65, 17},   {65, 17, 63},
    {31, 48, 300}, {150, 40, 30}, {100, 130, 520}, {40, 300, 200}, {200, 64, 200},
};

const GemmActivation kActivations[] = {GemmActivation::kNone, GemmActivation::kRelu,
                                       GemmActivation::kGeluTanh, GemmActivation::kGeluErf,
                                       GemmActivation::kSilu, GemmActivation::kRelu6,
                                       GemmActivation::kHardswish, GemmActivation::kHardsigmoid};

double activate_reference(double x, GemmActivation act) {
  switch (act) {
    case GemmActivation::kNone:
      return x;
    case GemmActivation::kRelu:
      return x > 0 ? x : 0;
    case GemmActivation::kGeluTanh:
      return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
    case GemmActivation::kGeluErf:
      return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
    case GemmActivation::kSilu:
      return x / (1 + std::exp(-x));
    case GemmActivation::kRelu6:
      return std::min(std::max(x, 0.0), 6.0);
    case GemmActivation::kHardswish:
      return x * std::min(std::max(x + 3, 0.0), 6.0) / 6;
    case GemmActivation::kHardsigmoid:
      return std::min(std::max(x + 3, 0.0), 6.0) / 6;
  }
  return x;
}

// Owns the operands of one GEMM (with padded strides) and checks a result against a
// double-precision triple loop.
struct Problem {
  GemmParams params;
  std::vector<float> a, b, c, bias;

  Problem(Shape s, bool trans_a, bool trans_b, int pad, std::uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    GemmParams& p = params;
    p.m = s.m, p.n = s.n, p.k = s.k, p.trans_a = trans_a, p.trans_b = trans_b;
    p.lda = (trans_a ? s.m : s.k) + pad;
    p.ldb = (trans_b ? s.k : s.n) + pad;
    p.ldc = s.n + pad;
    a.resize(static_cast<std::size_t>((trans_a ? s.k : s.m) * p.lda));
    b.resize(static_cast<std::size_t>((trans_b ? s.n : s.k) * p.ldb));
    c.resize(static_cast<std::size_t>(s.m * p.ldc));
    bias.resize(static_cast<std::size_t>(std::max(s.m, s.n)));
    for (auto* v : {&a, &b, &c, &bias}) {
      for (float& x : *v) x = dist(rng);
    }
    p.a = a.data(), p.b = b.data(), p.c = c.data(), p.bias = bias.data();
  }

  double at_a(std::int64_t i, std::int64_t k) const {
    return params.trans_a ? a[k * params.lda + i] : a[i * params.lda + k];
  }
  double at_b(std::int64_t k, std::int64_t j) const {
    return params.trans_b ? b[j * params.ldb + k] : b[k * params.ldb + j];
  }

  // Restores C to its initial contents, runs `compute` (which writes params.c) and compares
  // every element, padding included, with the double-precision reference.
  template <typename Compute>
  void check(Compute compute, const std::string& label) {
    if (expected.empty()) compute_reference();
    c = initial_c;
    params.c = c.data();
    ASSERT_TRUE(compute().ok()) << label;
    for (std::size_t idx = 0; idx < c.size(); ++idx) {
      const auto i = static_cast<std::int64_t>(idx) / params.ldc;
      const auto j = static_cast<std::int64_t>(idx) % params.ldc;
      ASSERT_NEAR(c[idx], expected[idx], tolerance[idx])
          << label << " at (" << i << "," << j << ")" << (j >= params.n ? " (padding)" : "");
    }
  }

 private:
  std::vector<float> initial_c;
  std::vector<double> expected, tolerance;

  void compute_reference() {
    const GemmParams& p = params;
    initial_c = c;
    expected.assign(c.begin(), c.end());  // padding columns must stay untouched
    tolerance.assign(c.size(), 0.0);
    const double eps = std::numeric_limits<float>::epsilon();
    for (std::int64_t i = 0; i < p.m; ++i) {
      for (std::int64_t j = 0; j < p.n; ++j) {
        const std::size_t idx = static_cast<std::size_t>(i * p.ldc + j);
        double dot = 0, magnitude = 0;
        for (std::int64_t k = 0; k < p.k; ++k) {
          dot += at_a(i, k) * at_b(k, j);
          magnitude += std::fabs(at_a(i, k) * at_b(k, j));
        }
        double linear = p.alpha * dot;
        magnitude *= std::fabs(p.alpha);
        if (p.beta != 0) linear += p.beta * c[idx], magnitude += std::fabs(p.beta * c[idx]);
        const double bias = p.bias_kind == GemmBias::kPerColumn ? p.bias[j]
                            : p.bias_kind == GemmBias::kPerRow  ? p.bias[i]
                                                                : 0.0;
        linear += bias;
        magnitude += std::fabs(bias);
        expected[idx] = activate_reference(linear, p.activation);
        // Float accumulation error, plus with an activation its slope (<= 1.13) and its
        // polynomial approximation error.
        tolerance[idx] = magnitude * eps * (2.0 + std::sqrt(static_cast<double>(p.k)));
        if (p.activation != GemmActivation::kNone) {
          tolerance[idx] = 1.2 * tolerance[idx] + 1.5e-6 * (1 + std::fabs(linear));
        }
      }
    }
  }
};

std::string describe(const GemmParams& p, int threads) {
  return "m=" + std::to_string(p.m) + " n=" + std::to_string(p.n) + " k=" + std::to_string(p.k) +
         " ta=" + std::to_string(p.trans_a) + " tb=" + std::to_string(p.trans_b) +
         " threads=" + std::to_string(threads) + " act=" + std::to_string(int(p.activation)) +
         " bias=" + std::to_string(int(p.bias_kind));
}

// Runs one configuration through sgemm and through pack_b + sgemm_prepacked.
void check_both_paths(Problem& problem, ThreadPool* pool, const std::string& label) {
  problem.check([&] { return sgemm(problem.params, pool); }, label + " sgemm");
  const GemmParams& p = problem.params;
  Result<PackedB> packed = pack_b(p.b, p.ldb, p.k, p.n, p.trans_b, pool);
  ASSERT_TRUE(packed.ok()) << packed.status().to_string();
  problem.check([&] { return sgemm_prepacked(p, *packed, pool); }, label + " prepacked");
}

class GemmIsaTest : public ::testing::TestWithParam<GemmIsa> {
 protected:
  void SetUp() override {
    if (!set_gemm_isa_for_testing(GetParam())) GTEST_SKIP() << "CPU lacks this ISA";
    ASSERT_EQ(active_gemm_isa(), GetParam());
  }
  void TearDown() override { (void)set_gemm_isa_for_testing(GemmIsa::kAuto); }

  // An m x n x k problem varied by `seed`: A and B transposed or not, the bias kind, alpha,
  // beta, relu or `odd_act`; checked on both paths, on three threads for even seeds.
  void check_varied(std::int64_t m, std::int64_t n, std::int64_t k, std::uint32_t seed, GemmActivation odd_act) {
    Problem problem({m, n, k}, seed % 2 == 0, seed % 3 == 0, static_cast<int>(seed % 3), seed);
    problem.params.alpha = seed % 4 == 0 ? 1.0f : 1.5f;
    problem.params.beta = seed % 5 == 0 ? 0.0f : 0.5f;
    problem.params.bias_kind = static_cast<GemmBias>(seed % 3);
    problem.params.activation = seed % 2 == 0 ? GemmActivation::kRelu : odd_act;
    check_both_paths(problem, seed % 2 == 0 ? &pool3_ : nullptr, describe(problem.params, seed % 2 == 0 ? 3 : 1));
  }

  ThreadPool pool3_{3};
};

TEST_P(GemmIsaTest, MatchesReferenceForOddShapesTransposesAndThreads) {
  std::uint32_t seed = 1;
  for (const Shape& shape : kShapes) {
    for (int transposes = 0; transposes < 4; ++transposes) {
      for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool3_}) {
        Problem problem(shape, transposes & 1, transposes & 2, /*pad=*/transposes, seed++);
        check_both_paths(problem, pool, describe(problem.params, pool ? 3 : 1));
      }
    }
  }
}

TEST_P(GemmIsaTest, AppliesAlphaAndBeta) {
  std::uint32_t seed = 100;
  for (const Shape& shape : kShapes) {
    for (float beta : {0.0f, 1.0f, -0.75f}) {
      Problem problem(shape, false, true, 1, seed++);
      problem.params.alpha = -0.5f;
      problem.params.beta = beta;
      check_both_paths(problem, &pool3_,
                       describe(problem.params, 3) + " beta=" + std::to_string(beta));
    }
  }
}

TEST_P(GemmIsaTest, BetaZeroIgnoresNanInC) {
  Problem problem({9, 20, 7}, false, false, 0, 7);
  for (float& x : problem.c) x = std::numeric_limits<float>::quiet_NaN();
  ASSERT_TRUE(sgemm(problem.params, nullptr).ok());
  for (float x : problem.c) ASSERT_FALSE(std::isnan(x));
}

TEST_P(GemmIsaTest, AppliesBiasAndEveryActivation) {
  const std::vector<Shape> shapes = {
      {1, 1, 1}, {1, 37, 19}, {7, 19, 300}, {13, 33, 40}, {64, 48, 20}};
  std::uint32_t seed = 200;
  for (const Shape& shape : shapes) {
    for (GemmBias bias : {GemmBias::kNone, GemmBias::kPerColumn, GemmBias::kPerRow}) {
      for (GemmActivation act : kActivations) {
        const std::uint32_t problem_seed = seed++;
        Problem problem(shape, problem_seed % 2 == 0, true, 2, problem_seed);
        problem.params.alpha = 4.0f;  // spread pre-activations over about [-20, 20]
        problem.params.beta = 0.5f;
        problem.params.bias_kind = bias;
        problem.params.activation = act;
        check_both_paths(problem, &pool3_, describe(problem.params, 3));
      }
    }
  }
}

// K = 1 with B = 1: C = act(a), probing the activation approximations over a wide range.
TEST_P(GemmIsaTest, ActivationsAreAccurateOverWideRange) {
  for (GemmActivation act : kActivations) {
    Problem problem({2001, 1, 1}, false, false, 0, 3);
    for (std::int64_t i = 0; i < 2001; ++i) problem.a[i] = static_cast<float>(i - 1000) * 0.03f;
    problem.a[0] = -100.0f;
    problem.a[2000] = 100.0f;
    problem.b[0] = 1.0f;
    problem.params.activation = act;
    problem.check([&] { return sgemm(problem.params, nullptr); },
                  "act=" + std::to_string(int(act)));
  }
}

TEST_P(GemmIsaTest, GemvPathsMatchReference) {
  const std::vector<Shape> shapes = {{1, 15, 300}, {1, 1000, 300}, {1, 300, 1000}, {1, 33, 7}};
  std::uint32_t seed = 300;
  for (const Shape& shape : shapes) {
    for (int transposes = 0; transposes < 4; ++transposes) {
      for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool3_}) {
        Problem problem(shape, transposes & 1, transposes & 2, 3, seed++);
        problem.params.beta = 0.25f;
        problem.params.bias_kind = seed % 2 ? GemmBias::kPerColumn : GemmBias::kPerRow;
        problem.params.activation = GemmActivation::kSilu;
        check_both_paths(problem, pool, describe(problem.params, pool ? 3 : 1));
      }
    }
  }
}

// Large enough K * N that per-call packing splits B into several column blocks.
TEST_P(GemmIsaTest, SplitsWideBIntoColumnBlocks) {
  Problem problem({7, 1100, 2000}, false, true, 0, 11);
  problem.params.bias_kind = GemmBias::kPerColumn;
  problem.check([&] { return sgemm(problem.params, &pool3_); }, "wide");
}

TEST_P(GemmIsaTest, ZeroKOrZeroAlphaScalesCAndAddsBias) {
  for (float alpha : {1.0f, 0.0f}) {
    Problem problem({5, 21, alpha == 0.0f ? 4 : 0}, false, false, 1, 12);
    problem.params.alpha = alpha;
    problem.params.beta = 2.0f;
    problem.params.bias_kind = GemmBias::kPerRow;
    problem.params.activation = GemmActivation::kRelu;
    problem.params.a = nullptr;
    problem.params.b = nullptr;
    problem.check([&] { return sgemm(problem.params, nullptr); }, "alpha=" + std::to_string(alpha));
  }
}

// The narrow-tile kernels (a last B panel of 1..8 live columns: the 6x8 tile and the
// row-vector kernel for <= 4 columns) over every tail width, K lengths around their k
// unrolling (1, 2, 3, 4, 5, 9) and the 256 K block (a second K block: beta 1 on the
// partial sums), rows that do not fill the 6-row panel, every bias kind, alpha/beta and an
// activation; randomized sizes, both orientations of A, with and without threads.
TEST_P(GemmIsaTest, NarrowColumnTailsMatchReference) {
  std::mt19937 rng(77);
  std::uint32_t seed = 400;
  const std::int64_t ks[] = {1, 2, 3, 4, 5, 9, 37, 300};
  for (std::int64_t tail = 1; tail <= 9; ++tail) {
    for (std::int64_t k : ks) {
      const std::int64_t m = 1 + static_cast<std::int64_t>(rng() % 40);
      const std::int64_t n = 16 * static_cast<std::int64_t>(rng() % 3) + tail;
      check_varied(m, n, k, seed++, GemmActivation::kSilu);
    }
  }
}

// The short-tile kernels (the last row panel of an M that is not a multiple of 6, with more
// than 8 columns: 49 pixels, 37 tokens) over every row count 1..5 after 0..3 full panels, K
// lengths around their k unrolling (1 to 5, 7, 9) and the 256 K block, full and masked
// column tiles, every bias kind, alpha/beta and an activation, with and without threads.
TEST_P(GemmIsaTest, ShortRowTailsMatchReference) {
  std::mt19937 rng(78);
  std::uint32_t seed = 900;
  const std::int64_t ks[] = {1, 2, 3, 4, 5, 7, 9, 300};
  const std::int64_t ns[] = {9, 16, 17, 33, 48};
  for (std::int64_t rows = 1; rows <= 5; ++rows) {
    for (std::int64_t k : ks) {
      const std::int64_t m = 6 * static_cast<std::int64_t>(rng() % 4) + rows;
      const std::int64_t n = ns[rng() % 5];
      check_varied(m, n, k, seed++, GemmActivation::kGeluErf);
    }
  }
}

// The AVX-512 wide tile (12 x 32: two A panels x two B panels) and its narrower forms: row
// counts around 6 and 12 (one or two A panels, a masked last row), column counts around
// 8, 16 and 32 (the AVX2 fallback up to 8, one or two B panels, masked lanes), K of 1, 7
// and 300 (a second K block), every bias kind, alpha/beta, threads and an activation. On
// the other ISAs the same shapes exercise the 6 x 16 kernels.
TEST_P(GemmIsaTest, WideTileEdgesMatchReference) {
  std::uint32_t seed = 1300;
  const std::int64_t ms[] = {5, 6, 7, 11, 12, 13, 18, 25};
  const std::int64_t ns[] = {8, 9, 15, 16, 17, 31, 32, 33, 48, 65};
  for (std::int64_t m : ms) {
    for (std::int64_t n : ns) {
      for (std::int64_t k : {1, 7, 300}) check_varied(m, n, k, seed++, GemmActivation::kGeluTanh);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Isa, GemmIsaTest, ::testing::Values(GemmIsa::kScalar, GemmIsa::kAvx2, GemmIsa::kAvx512),
                         [](const auto& info) {
                           return std::string(info.param == GemmIsa::kScalar ? "Scalar"
                                              : info.param == GemmIsa::kAvx2 ? "Avx2"
                                                                             : "Avx512");
                         });

TEST(GemmTest, RejectsInvalidParameters) {
  float data[64] = {};
  GemmParams ok{
      .m = 2, .n = 3, .k = 4, .a = data, .lda = 4, .b = data, .ldb = 3, .c = data, .ldc = 3};
  ASSERT_TRUE(sgemm(ok, nullptr).ok());
  auto expect_invalid = [](GemmParams p, const char* what) {
    const Status s = sgemm(p, nullptr);
    EXPECT_EQ(s.code(), StatusCode::kInvalidInput) << what;
    EXPECT_NE(s.message().find("[sgemm]"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(what), std::string::npos) << s.message();
  };
  GemmParams p = ok;
  p.m = -1;
  expect_invalid(p, "negative size");
  p = ok, p.lda = 3;
  expect_invalid(p, "lda=3 < k=4");
  p = ok, p.trans_b = true;
  expect_invalid(p, "ldb=3 < k=4");
  p = ok, p.ldc = 2;
  expect_invalid(p, "ldc=2 < n=3");
  p = ok, p.c = nullptr;
  expect_invalid(p, "c is null");
  p = ok, p.bias_kind = GemmBias::kPerRow;
  expect_invalid(p, "bias is null");
}

TEST(GemmTest, PrepackedRejectsMismatchedShape) {
  float data[64] = {};
  Result<PackedB> packed = pack_b(data, 3, 4, 3, false, nullptr);
  ASSERT_TRUE(packed.ok());
  EXPECT_EQ(packed->k(), 4);
  EXPECT_EQ(packed->n(), 3);
  GemmParams p{.m = 2, .n = 3, .k = 5, .a = data, .lda = 5, .c = data, .ldc = 3};
  const Status s = sgemm_prepacked(p, *packed, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kInvalidInput);
  EXPECT_FALSE(pack_b(data, 2, 4, 3, false, nullptr).ok());  // ldb < n
  EXPECT_FALSE(pack_b(nullptr, 3, 4, 3, false, nullptr).ok());
}

TEST(GemmTest, ScalarIsAlwaysAvailable) {
  EXPECT_TRUE(set_gemm_isa_for_testing(GemmIsa::kScalar));
  EXPECT_EQ(active_gemm_isa(), GemmIsa::kScalar);
  EXPECT_TRUE(set_gemm_isa_for_testing(GemmIsa::kAuto));
  EXPECT_NE(active_gemm_isa(), GemmIsa::kAuto);
}

}  // namespace
}  // namespace kiln::cpu

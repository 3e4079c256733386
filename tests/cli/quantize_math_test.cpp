// The numbers of `kiln quantize` (cli/quantize_math.h): the input moments, GPTQ's factor and
// GPTQ against rounding to nearest, on inputs whose correlation is known.
#include "quantize_math.h"

#include "quantize_testutil.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

namespace kiln::cli::quant {
namespace {

using quant_test::correlated_inputs;

// The mean x x^T of the `rows` rows of x.
std::vector<double> moments_of(const std::vector<float>& x, std::int64_t rows, std::int64_t k) {
  InputMoments m(k);
  EXPECT_TRUE(m.add(x.data(), rows).ok());
  return m.mean();
}

std::vector<float> normal_weights(std::int64_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> w(static_cast<std::size_t>(n));
  for (float& v : w) v = normal(rng);
  return w;
}

// Dequantized symmetric int4 weights (f16 scales, zero 8).
std::vector<float> dequantize_int4(const QuantizedWeight& q) {
  std::vector<float> out(static_cast<std::size_t>(q.rows * q.cols));
  const std::int64_t groups = q.cols / q.group;
  for (std::int64_t r = 0; r < q.rows; ++r) {
    for (std::int64_t c = 0; c < q.cols; ++c) {
      const std::uint8_t b = q.data[static_cast<std::size_t>(r * (q.cols / 2) + c / 2)];
      const int level = (c % 2 == 0 ? b & 0x0F : b >> 4) - 8;
      std::uint16_t h;
      std::memcpy(&h, q.scales.data() + (r * groups + c / q.group) * 2, 2);
      // f16 -> f32 for normal positive/negative values (what these weights' scales are).
      const int exponent = (h >> 10) & 0x1F, mantissa = h & 0x3FF;
      const float scale = (h & 0x8000 ? -1.0f : 1.0f) * std::ldexp(1.0f + mantissa / 1024.0f, exponent - 15);
      out[static_cast<std::size_t>(r * q.cols + c)] = static_cast<float>(level) * scale;
    }
  }
  return out;
}

// Squared error of y = x W^T against the dequantized weight, summed over x's rows.
double output_error(const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>& wq, std::int64_t rows,
                    std::int64_t n, std::int64_t k) {
  double total = 0;
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t o = 0; o < n; ++o) {
      double d = 0;
      for (std::int64_t j = 0; j < k; ++j) {
        d += double(x[static_cast<std::size_t>(r * k + j)]) *
             (double(w[static_cast<std::size_t>(o * k + j)]) - double(wq[static_cast<std::size_t>(o * k + j)]));
      }
      total += d * d;
    }
  }
  return total;
}

TEST(QuantizeMath, InputMomentsAreTheMeanOuterProductAndSkipNonFiniteRows) {
  const std::int64_t k = 5, rows = 70;  // more rows than one block of 32
  std::vector<float> x = correlated_inputs(rows, k, 2, 1);
  x[3 * k + 1] = NAN;
  InputMoments m(k);
  ASSERT_TRUE(m.add(x.data(), 40).ok());
  ASSERT_TRUE(m.add(x.data() + 40 * k, rows - 40).ok());
  EXPECT_EQ(m.rows(), rows - 1);
  EXPECT_EQ(m.nonfinite_rows(), 1);
  const std::vector<double> h = m.mean();
  for (std::int64_t i = 0; i < k; ++i) {
    for (std::int64_t j = 0; j < k; ++j) {
      double want = 0;
      for (std::int64_t r = 0; r < rows; ++r) {
        if (r != 3) want += double(x[static_cast<std::size_t>(r * k + i)]) * x[static_cast<std::size_t>(r * k + j)];
      }
      // Float sums of up to 256 products (the SGEMM), then double.
      EXPECT_NEAR(h[static_cast<std::size_t>(i * k + j)], want / double(rows - 1), 1e-5 * (1 + std::fabs(want / double(rows - 1))))
          << i << "," << j;
    }
  }
}

TEST(QuantizeMath, GptqFactorIsTheUpperCholeskyFactorOfTheDampedInverse) {
  const std::int64_t k = 24;
  const std::vector<float> x = correlated_inputs(200, k, 4, 2);
  std::vector<double> h = moments_of(x, 200, k);
  h[static_cast<std::size_t>(7 * k + 7)] = 0;  // a dead channel gets 1 on the diagonal
  for (std::int64_t j = 0; j < k; ++j) h[static_cast<std::size_t>(7 * k + j)] = h[static_cast<std::size_t>(j * k + 7)] = 0;
  auto u = gptq_factor(h, k, 0.01);
  ASSERT_TRUE(u.ok()) << u.status().message();
  double diag = 0;
  for (std::int64_t i = 0; i < k; ++i) diag += i == 7 ? 1.0 : h[static_cast<std::size_t>(i * k + i)];
  const double damp = 0.01 * diag / double(k);
  // U upper triangular with a positive diagonal, and U^T U (H + damp I) = I.
  for (std::int64_t i = 0; i < k; ++i) {
    EXPECT_GT((*u)[static_cast<std::size_t>(i * k + i)], 0);
    for (std::int64_t j = 0; j < i; ++j) EXPECT_EQ((*u)[static_cast<std::size_t>(i * k + j)], 0);
  }
  for (std::int64_t i = 0; i < k; ++i) {
    for (std::int64_t j = 0; j < k; ++j) {
      double v = 0;
      for (std::int64_t p = 0; p < k; ++p) {
        double hinv_ip = 0;  // (U^T U)[i][p]
        for (std::int64_t q = 0; q < k; ++q) hinv_ip += (*u)[static_cast<std::size_t>(q * k + i)] * (*u)[static_cast<std::size_t>(q * k + p)];
        const double hd = (p == j ? (p == 7 ? 1.0 : 0.0) + damp : 0.0) + h[static_cast<std::size_t>(p * k + j)];
        v += hinv_ip * hd;
      }
      EXPECT_NEAR(v, i == j ? 1.0 : 0.0, 1e-8) << i << "," << j;
    }
  }
}

TEST(QuantizeMath, BlockedFloatFactorMatchesTheDoubleFactor) {
  // k 300: three blocks of 128, so both SGEMMs run (the columns before a block, the rows
  // before a block of the inverse).
  const std::int64_t k = 300;
  const std::vector<float> x = correlated_inputs(600, k, 40, 8);
  std::vector<double> h = moments_of(x, 600, k);
  for (std::int64_t j = 0; j < k; ++j) h[static_cast<std::size_t>(131 * k + j)] = h[static_cast<std::size_t>(j * k + 131)] = 0;
  auto exact = gptq_factor(h, k, 0.01);
  auto blocked = gptq_factor_blocked(h, k, 0.01);
  ASSERT_TRUE(exact.ok()) << exact.status().message();
  ASSERT_TRUE(blocked.ok()) << blocked.status().message();
  ASSERT_EQ(blocked->size(), exact->size());
  double largest = 0, diff = 0;
  for (std::size_t i = 0; i < exact->size(); ++i) {
    largest = std::max(largest, std::fabs((*exact)[i]));
    diff = std::max(diff, std::fabs((*exact)[i] - double((*blocked)[i])));
  }
  EXPECT_LT(diff, 1e-4 * largest) << diff << " of " << largest;
  for (std::int64_t i = 0; i < k; ++i) {
    for (std::int64_t j = 0; j < i; ++j) ASSERT_EQ((*blocked)[static_cast<std::size_t>(i * k + j)], 0.0f) << i << "," << j;
  }
  const std::vector<double> indefinite{1.0, 2.0, 2.0, 1.0};
  EXPECT_FALSE(gptq_factor_blocked(indefinite, 2, 0.01).ok());
}

TEST(QuantizeMath, GptqOnAWideLayerTakesTheBlockedFactor) {
  const std::int64_t n = 8, k = kBlockedFactorFrom + 64;
  const std::vector<float> w = normal_weights(n * k, 9);
  const std::vector<float> x = correlated_inputs(2 * k, k, 24, 10);
  const std::vector<double> h = moments_of(x, 2 * k, k);
  const WeightFormat f{4, 32, true, false, true};
  const QuantizedWeight gptq = quantize_weight(w.data(), n, k, false, f, &h);
  ASSERT_TRUE(gptq.calibrated);
  EXPECT_GT(gptq.output_sqnr_db, gptq.nearest_output_sqnr_db + 2.0);
}

TEST(QuantizeMath, GptqFactorRefusesAMatrixThatIsNotPositiveDefinite) {
  const std::vector<double> h{1.0, 2.0, 2.0, 1.0};  // eigenvalues 3 and -1
  auto u = gptq_factor(h, 2, 0.01);
  ASSERT_FALSE(u.ok());
  EXPECT_EQ(u.status().message(), "the inputs' second-moment matrix is not positive definite with 1 % damping");
}

TEST(QuantizeMath, GptqWithUncorrelatedInputsIsRoundingToNearest) {
  const std::int64_t n = 16, k = 64;
  const std::vector<float> w = normal_weights(n * k, 3);
  std::vector<double> identity(static_cast<std::size_t>(k * k), 0.0);
  for (std::int64_t i = 0; i < k; ++i) identity[static_cast<std::size_t>(i * k + i)] = 2.0;
  const WeightFormat f{4, 32, true, false, true};
  const QuantizedWeight nearest = quantize_weight(w.data(), n, k, false, f);
  const QuantizedWeight gptq = quantize_weight(w.data(), n, k, false, f, &identity);
  ASSERT_TRUE(gptq.calibrated);
  EXPECT_EQ(gptq.data, nearest.data);
  EXPECT_EQ(gptq.scales, nearest.scales);
  EXPECT_EQ(gptq.gptq_rows, 0);  // not smaller: every row keeps rounding to nearest's levels
  EXPECT_NEAR(gptq.output_sqnr_db, gptq.nearest_output_sqnr_db, 1e-9);
  EXPECT_FALSE(nearest.calibrated);
}

TEST(QuantizeMath, GptqLowersTheOutputErrorOnCorrelatedInputsItDidNotSee) {
  const std::int64_t n = 48, k = 128;
  const std::vector<float> w = normal_weights(n * k, 4);
  const std::vector<float> calibration = correlated_inputs(1024, k, 16, 5);
  const std::vector<float> unseen = correlated_inputs(256, k, 16, 5, 77);  // the same factors, other rows
  const std::vector<double> h = moments_of(calibration, 1024, k);
  const WeightFormat f{4, 32, true, false, true};
  // Transposed storage (a matmul's B[K, N]) gives the same result as the rows.
  std::vector<float> wt(w.size());
  for (std::int64_t o = 0; o < n; ++o) for (std::int64_t j = 0; j < k; ++j) wt[static_cast<std::size_t>(j * n + o)] = w[static_cast<std::size_t>(o * k + j)];
  const QuantizedWeight nearest = quantize_weight(w.data(), n, k, false, f);
  const QuantizedWeight gptq = quantize_weight(w.data(), n, k, false, f, &h);
  const QuantizedWeight gptq_t = quantize_weight(wt.data(), n, k, true, f, &h);
  EXPECT_EQ(gptq_t.data, gptq.data);
  EXPECT_EQ(gptq_t.scales, gptq.scales);
  ASSERT_TRUE(gptq.calibrated);
  EXPECT_EQ(gptq.damp_fraction, 0.01);
  EXPECT_GT(gptq.gptq_rows, n / 2);
  // On the calibration inputs (its own measure) and on held-out rows of the same
  // distribution, by more than 2 dB; the weights themselves are further from the f32 ones.
  EXPECT_GT(gptq.output_sqnr_db, gptq.nearest_output_sqnr_db + 2.0);
  const double e_nearest = output_error(calibration, w, dequantize_int4(nearest), 1024, n, k);
  const double e_gptq = output_error(calibration, w, dequantize_int4(gptq), 1024, n, k);
  EXPECT_GT(10 * std::log10(e_nearest / e_gptq), 2.0);
  EXPECT_NEAR(10 * std::log10(e_nearest / e_gptq), gptq.output_sqnr_db - gptq.nearest_output_sqnr_db, 0.01);
  EXPECT_GT(10 * std::log10(output_error(unseen, w, dequantize_int4(nearest), 256, n, k) /
                            output_error(unseen, w, dequantize_int4(gptq), 256, n, k)),
            2.0);
  EXPECT_LT(gptq.sqnr_db, nearest.sqnr_db);
}

}  // namespace
}  // namespace kiln::cli::quant

// linear_q / embedding_q against a reference that dequantizes the weight in double and
// multiplies in double; both micro-kernel tables (portable, AVX2) and 1 or 2 threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "backends/cpu/kernels/quant.h"
#include "backends/cpu/thread_pool.h"
#include "kernel_testutil.h"

namespace kiln::cpu::testing {
namespace {

using kernels::QuantKernels;
using kernels::QuantWeight;

class PoolContext : public TestContext {
 public:
  explicit PoolContext(int threads) : pool_(threads) {}
  ThreadPool& pool() override { return pool_; }

 private:
  ThreadPool pool_;
};

// A random quantized weight [n, k] with its dequantized values (double, row-major).
struct QWeight {
  Tensor data, scales, zero_points;
  bool has_zero_points = false;
  int bits = 8;
  std::int64_t n = 0, k = 0, group = 0;
  std::vector<double> dequantized;
};

QWeight make_weight(std::mt19937& rng, int bits, std::int64_t n, std::int64_t k, std::int64_t group, bool f16_scales,
                    bool zero_points) {
  QWeight w;
  w.bits = bits;
  w.n = n;
  w.k = k;
  w.group = group;
  w.has_zero_points = zero_points;
  const std::int64_t groups = k / group;
  w.data = bits == 8 ? Tensor(DType::kI8, {n, k}) : Tensor(DType::kU8, {n, k / 2});
  w.scales = Tensor(f16_scales ? DType::kF16 : DType::kF32, {n, groups});
  if (zero_points) w.zero_points = Tensor(DType::kU8, {n, groups});
  std::uniform_int_distribution<int> q8(-127, 127), q4(0, 15);
  std::uniform_real_distribution<double> scale(0.001, 0.05);
  w.dequantized.assign(static_cast<std::size_t>(n * k), 0.0);
  for (std::int64_t r = 0; r < n; ++r) {
    for (std::int64_t g = 0; g < groups; ++g) {
      w.scales.set(r * groups + g, scale(rng));
      if (zero_points) w.zero_points.set(r * groups + g, q4(rng));
    }
  }
  auto* bytes = w.data.as<std::uint8_t>();
  for (std::int64_t r = 0; r < n; ++r) {
    for (std::int64_t c = 0; c < k; ++c) {
      const std::int64_t g = c / group;
      const double s = w.scales.at(r * groups + g);  // read back: f16 rounding included
      double q = 0;
      if (bits == 8) {
        const int v = q8(rng);
        w.data.set(r * k + c, v);
        q = v;
      } else {
        const int v = q4(rng);
        std::uint8_t& b = bytes[r * (k / 2) + c / 2];
        b = static_cast<std::uint8_t>(c % 2 == 0 ? (b & 0xF0) | v : (b & 0x0F) | (v << 4));
        q = v - (zero_points ? w.zero_points.at(r * groups + g) : 8.0);
      }
      w.dequantized[static_cast<std::size_t>(r * k + c)] = q * s;
    }
  }
  return w;
}

std::vector<double> reference_linear(const Tensor& x, const QWeight& w, const Tensor* bias, std::int64_t rows) {
  std::vector<double> y(static_cast<std::size_t>(rows * w.n));
  for (std::int64_t i = 0; i < rows; ++i) {
    for (std::int64_t j = 0; j < w.n; ++j) {
      double acc = bias != nullptr ? bias->at(j) : 0.0;
      for (std::int64_t c = 0; c < w.k; ++c) acc += x.at(i * w.k + c) * w.dequantized[static_cast<std::size_t>(j * w.k + c)];
      y[static_cast<std::size_t>(i * w.n + j)] = acc;
    }
  }
  return y;
}

Status run_linear_q(const Tensor& x, const QWeight& w, const Tensor* bias, Tensor& out, int threads) {
  std::vector<TensorView> in{x.view(), w.data.view(), w.scales.view(), bias != nullptr ? bias->view() : absent()};
  if (w.has_zero_points) in.push_back(w.zero_points.view());
  std::vector<TensorView> outs{out.view()};
  PoolContext ctx(threads);
  return run_views(OpKind::LinearQ, in, outs, {}, &ctx);
}

struct Case {
  int bits;
  std::int64_t rows, n, k, group;
  bool f16_scales, zero_points, bias;
};

// The activations the int4 decode path (<= 2 rows, groups of whole 32-blocks) computes
// with: each block of 32 rounded to int8 steps of max|x| / 127 (float arithmetic, as the
// kernel's contract in quant.h states).
Tensor int8_rounded_activations(const Tensor& x) {
  Tensor out(DType::kF32, x.shape());
  for (std::int64_t b = 0; b < x.numel() / 32; ++b) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x.as<float>()[b * 32 + j]));
    const float s = amax / 127.0f, inv = s > 0 ? 1.0f / s : 0.0f;
    for (int j = 0; j < 32; ++j) out.as<float>()[b * 32 + j] = std::nearbyint(x.as<float>()[b * 32 + j] * inv) * s;
  }
  return out;
}

void check_case(const Case& c, std::uint32_t seed) {
  std::mt19937 rng(seed);
  const QWeight w = make_weight(rng, c.bits, c.n, c.k, c.group, c.f16_scales, c.zero_points);
  const Tensor x = Tensor::random(DType::kF32, {c.rows, c.k}, rng, -1.0, 1.0);
  const Tensor bias = Tensor::random(DType::kF32, {c.n}, rng);
  const bool q8_path = c.bits == 4 && c.group % 32 == 0 && c.rows <= 2;
  const std::vector<double> want =
      reference_linear(q8_path ? int8_rounded_activations(x) : x, w, c.bias ? &bias : nullptr, c.rows);
  for (int threads : {1, 2}) {
    Tensor out(DType::kF32, {c.rows, c.n});
    ASSERT_TRUE(run_linear_q(x, w, c.bias ? &bias : nullptr, out, threads).ok());
    EXPECT_TRUE(out.canary_intact());
    // Float accumulation over k terms of size ~|x| * |w| <= 1 * 127 * 0.05.
    EXPECT_TRUE(all_close(out, want, 1e-4, 2e-5 * static_cast<double>(c.k)))
        << "bits " << c.bits << " rows " << c.rows << " n " << c.n << " k " << c.k << " group " << c.group
        << " threads " << threads;
  }
}

TEST(LinearQKernel, Int8PerChannelMatchesDequantizedReferenceOverOddShapes) {
  // K not a multiple of 16 or 8; one row (GEMV), two rows, and batches taking the panel path.
  const Case cases[] = {
      {8, 1, 5, 37, 37, false, false, false}, {8, 1, 13, 8, 8, false, false, true},
      {8, 2, 9, 45, 45, true, false, true},   {8, 3, 7, 45, 45, false, false, false},
      {8, 5, 70, 33, 33, true, false, true},  {8, 1, 131, 100, 100, false, false, true},
      {8, 17, 130, 64, 64, false, false, true},  {8, 3, 700, 40, 40, false, false, true},  // 3 panels
  };
  std::uint32_t seed = 1;
  for (const Case& c : cases) check_case(c, seed++);
}

TEST(LinearQKernel, Int8GroupwiseScalesMatchReference) {
  check_case({8, 1, 11, 96, 32, false, false, true}, 11);
  check_case({8, 4, 11, 90, 18, true, false, false}, 12);
}

TEST(LinearQKernel, Int8DecodeOverWholeBlocksMatchesReference) {
  // Per-channel (one group of K = 128 / 256 / 4096) and groupwise (32, 64, 256, 512): rows
  // not a multiple of the 4-row block, one and two activation rows. Groups of a multiple of
  // 256 take the int16-activation kernel; its rounding (~2^-15 of a block's max) stays
  // inside the f32 reference's tolerance.
  const Case cases[] = {
      {8, 1, 7, 128, 128, false, false, true},  {8, 2, 13, 96, 32, true, false, false},
      {8, 1, 9, 4096, 4096, false, false, false}, {8, 2, 70, 192, 64, true, false, true},
      {8, 1, 13, 256, 256, false, false, true}, {8, 2, 6, 1024, 512, true, false, false},
      {8, 1, 11, 768, 256, false, false, false},
  };
  std::uint32_t seed = 40;
  for (const Case& c : cases) check_case(c, seed++);
}

TEST(LinearQKernel, Int4Group32DecodeEightBlocksAtATimeMatchesReference) {
  // K a multiple of 256 (whole runs of 8 groups of 32): f16 and f32 scales, with and
  // without zero points, row counts not a multiple of the 4-row block.
  const Case cases[] = {
      {4, 1, 13, 256, 32, true, true, true},  {4, 2, 7, 512, 32, false, false, false},
      {4, 1, 6, 256, 32, false, true, false}, {4, 2, 21, 4096, 32, true, false, true},
  };
  std::uint32_t seed = 50;
  for (const Case& c : cases) check_case(c, seed++);
}

TEST(LinearQKernel, BatchPathDequantizesPanelsOverManyChunksAndKBlocks) {
  // n past several 8-panel chunks and not a multiple of 16 (a partial last panel); k = 4096
  // in 16 K blocks of 256 (the C tile accumulates across them, bias at the last one).
  check_case({8, 16, 1030, 4096, 4096, false, false, true}, 60);
  check_case({4, 7, 1043, 256, 32, true, true, true}, 61);
}

TEST(LinearQKernel, BatchPathCrossesRowBlocksAndUnalignedKBlocks) {
  // 150 rows: two row blocks (144 + 6) of activation panels swept over each dequantized
  // panel. k = 600 splits into 3 K blocks of 200 columns (the 8-column tiles); k = 300 into
  // 2 of 150 (not a multiple of 8: the element-wise panel path); group 20 / 30 / 50 straddle
  // the K block boundaries.
  check_case({8, 150, 37, 600, 600, false, false, true}, 62);
  check_case({4, 150, 19, 600, 20, true, true, false}, 63);
  check_case({8, 9, 33, 300, 50, true, false, true}, 64);
  check_case({4, 3, 17, 300, 30, false, false, true}, 65);
}

TEST(LinearQKernel, ActivationQuantizationScalesRoundsAndOrdersByNibble) {
  std::vector<float> x(64);
  for (int i = 0; i < 64; ++i) x[i] = static_cast<float>(i % 32) - (i < 32 ? 10.0f : 0.0f);
  std::vector<std::int8_t> q(64);
  std::vector<float> scale(2);
  std::vector<std::int32_t> sum(2);
  kernels::quantize_activations(x.data(), 64, q.data(), scale.data(), sum.data());
  EXPECT_FLOAT_EQ(scale[0], 21.0f / 127.0f);  // max |x| of block 0 is |-10 + 31| = 21
  EXPECT_FLOAT_EQ(scale[1], 31.0f / 127.0f);
  for (int b = 0; b < 2; ++b) {
    std::int32_t total = 0;
    for (int j = 0; j < 32; ++j) {
      const auto want = static_cast<std::int8_t>(std::nearbyint(x[b * 32 + j] / scale[b]));
      EXPECT_NEAR(q[b * 32 + (j % 2 == 0 ? j / 2 : 16 + j / 2)], want, 1) << b << " " << j;  // 1/s vs /s rounding
      total += q[b * 32 + j];
    }
    EXPECT_EQ(sum[b], total);
  }
  EXPECT_EQ(q[16 + 15], 127);  // block 0's x31 = 21, the last odd element
}

TEST(LinearQKernel, PortableAndAvx2MicroKernelsAgree) {
  const QuantKernels* avx2 = kernels::quant_kernels_avx2();
  if (avx2 == nullptr) GTEST_SKIP() << "no AVX2 on this CPU or KILN_CPU_ISA=baseline";
  const QuantKernels& scalar = kernels::quant_kernels_scalar();
  std::mt19937 rng(7);
  for (const Case& c : {Case{8, 1, 23, 77, 77, false, false, false}, Case{4, 1, 23, 80, 16, true, true, false},
                        Case{4, 1, 9, 36, 12, false, false, false}, Case{4, 1, 13, 128, 64, true, true, false},
                        Case{4, 1, 6, 96, 32, false, false, false}, Case{8, 1, 13, 128, 128, false, false, false},
                        Case{8, 1, 6, 96, 32, true, false, false}, Case{4, 1, 13, 256, 32, true, true, false},
                        Case{4, 1, 6, 512, 32, false, false, false}, Case{8, 1, 40, 64, 64, false, false, false},
                        Case{8, 1, 13, 512, 512, false, false, false}, Case{8, 1, 7, 768, 256, true, false, false},
                        Case{4, 1, 17, 64, 16, true, true, false}}) {
    const QWeight w = make_weight(rng, c.bits, c.n, c.k, c.group, c.f16_scales, c.zero_points);
    const QuantWeight qw{w.data.as<const std::uint8_t>(), c.bits, c.n, c.k, c.group, w.scales.data(), c.f16_scales,
                         c.zero_points ? w.zero_points.as<const std::uint8_t>() : nullptr};
    const Tensor x = Tensor::random(DType::kF32, {c.k}, rng);
    std::vector<float> a(static_cast<std::size_t>(c.n)), b(static_cast<std::size_t>(c.n));
    scalar.gemv_rows(qw, x.as<const float>(), 0, c.n, a.data());
    avx2->gemv_rows(qw, x.as<const float>(), 0, c.n, b.data());
    for (std::int64_t j = 0; j < c.n; ++j) EXPECT_NEAR(a[j], b[j], 1e-4 * (1 + std::fabs(a[j]))) << j;
    if (c.bits == 8 && c.group % 256 == 0) {
      std::vector<std::int16_t> xq(static_cast<std::size_t>(c.k));
      std::vector<float> xs(static_cast<std::size_t>(c.k / 256));
      kernels::quantize_activations_i16(x.as<const float>(), c.k, xq.data(), xs.data());
      const kernels::Int16Activations xa{xq.data(), xs.data()};
      scalar.gemv_rows_int8_q16(qw, xa, 0, c.n, a.data());
      avx2->gemv_rows_int8_q16(qw, xa, 0, c.n, b.data());
      for (std::int64_t j = 0; j < c.n; ++j) EXPECT_NEAR(a[j], b[j], 1e-4 * (1 + std::fabs(a[j]))) << "q16 " << j;
    }
    if (c.bits == 4 && c.group % 32 == 0) {
      std::vector<std::int8_t> xq(static_cast<std::size_t>(c.k));
      std::vector<float> xs(static_cast<std::size_t>(c.k / 32));
      std::vector<std::int32_t> xsum(xs.size());
      kernels::quantize_activations(x.as<const float>(), c.k, xq.data(), xs.data(), xsum.data());
      const kernels::QuantizedActivations xa{xq.data(), xs.data(), xsum.data()};
      scalar.gemv_rows_int4_q8(qw, xa, 0, c.n, a.data());
      avx2->gemv_rows_int4_q8(qw, xa, 0, c.n, b.data());
      for (std::int64_t j = 0; j < c.n; ++j) EXPECT_NEAR(a[j], b[j], 1e-4 * (1 + std::fabs(a[j]))) << "q8 " << j;
    }
    // One SGEMM B panel of a partial 16-row group from the last rows, over the columns
    // from a multiple of 8 (the tiled path when group and length allow, else per element).
    const std::int64_t prow = std::min<std::int64_t>(c.n, 16) - (c.n > 3 ? 1 : 0), pr0 = c.n - prow;
    const std::int64_t col0 = c.k / 2 / 8 * 8, len = c.k - col0;
    std::vector<float> pa(static_cast<std::size_t>(16 * len), -1.0f), pb(pa.size(), -2.0f);
    scalar.dequantize_panel(qw, pr0, prow, col0, len, pa.data());
    avx2->dequantize_panel(qw, pr0, prow, col0, len, pb.data());
    for (std::int64_t t = 0; t < len; ++t) {
      for (std::int64_t j = 0; j < 16; ++j) {
        const std::size_t i = static_cast<std::size_t>(t * 16 + j);
        const double want = j < prow ? w.dequantized[static_cast<std::size_t>((pr0 + j) * c.k + col0 + t)] : 0.0;
        ASSERT_EQ(pa[i], pb[i]) << "panel t " << t << " j " << j;
        ASSERT_NEAR(pa[i], want, 1e-6 * (1 + std::fabs(want))) << "panel t " << t << " j " << j;
      }
    }
    std::vector<float> da(static_cast<std::size_t>(c.n * c.k)), db(da.size());
    scalar.dequantize_rows(qw, 0, c.n, da.data());
    avx2->dequantize_rows(qw, 0, c.n, db.data());
    for (std::size_t i = 0; i < da.size(); ++i) {
      ASSERT_EQ(da[i], db[i]) << i;
      ASSERT_NEAR(da[i], w.dequantized[i], 1e-6 * (1 + std::fabs(w.dequantized[i]))) << i;
    }
  }
}

TEST(LinearQKernel, RejectsInconsistentWeightsScalesAndOperands) {
  std::mt19937 rng(3);
  const QWeight w8 = make_weight(rng, 8, 4, 16, 16, false, false);
  const QWeight w4 = make_weight(rng, 4, 4, 16, 8, false, true);
  const Tensor x = Tensor::random(DType::kF32, {2, 16}, rng);
  Tensor out(DType::kF32, {2, 4});
  auto run5 = [&](TensorView weight, TensorView scales, TensorView bias, TensorView zero, const Tensor& xin, Tensor& o) {
    std::vector<TensorView> in{xin.view(), weight, scales, bias, zero};
    std::vector<TensorView> outs{o.view()};
    return run_views(OpKind::LinearQ, in, outs, {});
  };
  EXPECT_TRUE(fails_with(run5(w8.data.view(), w8.scales.view(), absent(), w4.zero_points.view(), x, out),
                         StatusCode::kInvalidBundle, "linear_q", "int8 weights are symmetric: zero_points must be absent"));
  const Tensor three_groups(DType::kF32, {4, 3});
  EXPECT_TRUE(fails_with(run5(w8.data.view(), three_groups.view(), absent(), absent(), x, out), StatusCode::kInvalidBundle,
                         "linear_q", "scales.shape[1]=3 groups do not divide the weight's 16 columns"));
  const Tensor odd_groups(DType::kF32, {4, 16});  // int4 with 16 columns: groups of 1
  EXPECT_TRUE(fails_with(run5(w4.data.view(), odd_groups.view(), absent(), absent(), x, out), StatusCode::kInvalidBundle,
                         "linear_q", "int4 group size 1 (16 columns / 16 groups) must be even"));
  const Tensor wrong_rows(DType::kF32, {5, 1});
  EXPECT_TRUE(fails_with(run5(w8.data.view(), wrong_rows.view(), absent(), absent(), x, out), StatusCode::kInvalidBundle,
                         "linear_q", "scales.shape=[5, 1] but weight.shape[0]=4"));
  const Tensor f32_weight(DType::kF32, {4, 16});
  EXPECT_TRUE(fails_with(run5(f32_weight.view(), w8.scales.view(), absent(), absent(), x, out), StatusCode::kInvalidBundle,
                         "linear_q", "weight must be i8 (int8) or u8 (packed int4), got f32"));
  const Tensor narrow_x = Tensor::random(DType::kF32, {2, 15}, rng);
  EXPECT_TRUE(fails_with(run5(w8.data.view(), w8.scales.view(), absent(), absent(), narrow_x, out),
                         StatusCode::kInvalidBundle, "linear_q", "x.shape[1]=15 != the weight's 16 columns"));
  const Tensor bad_bias(DType::kF32, {3});
  EXPECT_TRUE(fails_with(run5(w8.data.view(), w8.scales.view(), bad_bias.view(), absent(), x, out),
                         StatusCode::kInvalidBundle, "linear_q", "bias.shape=[3] but weight.shape[0]=4"));
  Tensor wrong_out(DType::kF32, {2, 5});
  EXPECT_TRUE(fails_with(run5(w8.data.view(), w8.scales.view(), absent(), absent(), x, wrong_out),
                         StatusCode::kInvalidBundle, "linear_q"));
}

TEST(EmbeddingQKernel, GathersDequantizedRowsOfInt8AndInt4Tables) {
  std::mt19937 rng(21);
  for (const Case& c : {Case{8, 0, 11, 37, 37, false, false, false}, Case{4, 0, 9, 40, 8, true, true, false},
                        Case{4, 0, 6, 64, 32, true, false, false}}) {
    const QWeight w = make_weight(rng, c.bits, c.n, c.k, c.group, c.f16_scales, c.zero_points);
    const Tensor idx = Tensor::of(DType::kI64, {2, 3}, {0, c.n - 1, 3, 3, 1, 2});
    Tensor out(DType::kF32, {2, 3, c.k});
    std::vector<const Tensor*> in{&w.data, &w.scales, &idx};
    if (c.zero_points) in.push_back(&w.zero_points);
    ASSERT_TRUE(run(OpKind::EmbeddingQ, in, {&out}).ok());
    std::vector<double> want;
    for (std::int64_t i = 0; i < idx.numel(); ++i) {
      const auto row = static_cast<std::int64_t>(idx.at(i));
      for (std::int64_t col = 0; col < c.k; ++col) want.push_back(w.dequantized[static_cast<std::size_t>(row * c.k + col)]);
    }
    EXPECT_TRUE(all_close(out, want, 1e-6, 1e-7));
  }
}

TEST(EmbeddingQKernel, RejectsOutOfRangeIndicesAndBadOutput) {
  std::mt19937 rng(22);
  const QWeight w = make_weight(rng, 8, 4, 8, 8, false, false);
  const Tensor idx = Tensor::of(DType::kI32, {2}, {1, 4});
  Tensor out(DType::kF32, {2, 8});
  EXPECT_TRUE(fails_with(run(OpKind::EmbeddingQ, {&w.data, &w.scales, &idx}, {&out}), StatusCode::kInvalidInput, "embedding_q",
                         "indices[1]=4 out of range [0, 4)"));
  const Tensor neg = Tensor::of(DType::kI64, {1}, {-1});
  Tensor out1(DType::kF32, {1, 8});
  EXPECT_TRUE(fails_with(run(OpKind::EmbeddingQ, {&w.data, &w.scales, &neg}, {&out1}), StatusCode::kInvalidInput,
                         "embedding_q", "indices[0]=-1 out of range [0, 4)"));
  Tensor wrong(DType::kF32, {1, 7});
  EXPECT_TRUE(fails_with(run(OpKind::EmbeddingQ, {&w.data, &w.scales, &neg}, {&wrong}), StatusCode::kInvalidBundle,
                         "embedding_q"));
}

}  // namespace
}  // namespace kiln::cpu::testing

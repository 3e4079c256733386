// linear_q / embedding_q against a reference that dequantizes the weight in double and
// multiplies in double; every micro-kernel table (portable, AVX2, AVX-512 VNNI for the
// integer GEMM) and 1 or 2 threads. Paths that round the activations (int4 groups of a
// multiple of 32: int8 per block of 32; int8 groups of a multiple of 256: int16 per block
// of 256) are checked twice: tightly against the reference on the activations rounded as
// the kernel contract says (the integer dot products are exact), and against the exact
// activations within the bound the rounding allows, sum_k |W(n, k)| * scale(block of k) / 2.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <random>
#include <vector>

#include "backends/cpu/kernels/quant.h"
#include "backends/cpu/kernels/quant_gemm.h"
#include "backends/cpu/thread_pool.h"
#include "kernel_testutil.h"

namespace kiln::cpu::testing {
namespace {

using kernels::QuantKernels;
using kernels::QuantWeight;

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

// The activation block every path with this weight format rounds to (0: f32 activations).
std::int64_t activation_block(int bits, std::int64_t group) {
  if (bits == 4 && group % 32 == 0) return 32;
  if (bits == 8 && group % 256 == 0) return 256;
  return 0;
}

// x [rows, k] rounded per block as the kernels' contract states (quant.h quantize_block,
// written here independently): steps of s = max|x| / qmax, q = nearbyint(x * (1 / s)).
// half_step[i] gets s / 2 of element i's block (|x - rounded| <= s / 2 up to float rounding).
struct Rounded {
  Tensor x;
  std::vector<double> half_step;
};
Rounded rounded_activations(const Tensor& x, std::int64_t block, float qmax) {
  Rounded out{Tensor(DType::kF32, x.shape()), std::vector<double>(static_cast<std::size_t>(x.numel()))};
  const float* in = x.as<const float>();
  for (std::int64_t b = 0; b < x.numel() / block; ++b) {
    float amax = 0;
    for (std::int64_t j = 0; j < block; ++j) amax = std::max(amax, std::fabs(in[b * block + j]));
    const float s = amax / qmax, inv = s > 0 ? 1.0f / s : 0.0f;
    for (std::int64_t j = 0; j < block; ++j) {
      const std::int64_t i = b * block + j;
      out.x.as<float>()[i] = std::nearbyint(in[i] * inv) * s;
      out.half_step[static_cast<std::size_t>(i)] = 0.5 * s;
    }
  }
  return out;
}

// Checks `got` against the reference on the exact activations within the rounding bound
// plus the float tolerance.
::testing::AssertionResult within_rounding_bound(const Tensor& got, const Tensor& x, const Rounded& r, const QWeight& w,
                                                 const Tensor* bias, std::int64_t rows, double rtol, double atol) {
  const std::vector<double> exact = reference_linear(x, w, bias, rows);
  for (std::int64_t i = 0; i < rows; ++i) {
    for (std::int64_t j = 0; j < w.n; ++j) {
      double bound = 0;
      for (std::int64_t c = 0; c < w.k; ++c) {
        bound += std::fabs(w.dequantized[static_cast<std::size_t>(j * w.k + c)]) * r.half_step[static_cast<std::size_t>(i * w.k + c)];
      }
      const double want = exact[static_cast<std::size_t>(i * w.n + j)], have = got.at(i * w.n + j);
      if (!(std::fabs(have - want) <= bound * (1 + 1e-5) + atol + rtol * std::fabs(want))) {
        return ::testing::AssertionFailure() << "row " << i << " col " << j << ": " << have << " vs exact " << want
                                             << ", rounding bound " << bound;
      }
    }
  }
  return ::testing::AssertionSuccess();
}

void check_case(const Case& c, std::uint32_t seed) {
  std::mt19937 rng(seed);
  const QWeight w = make_weight(rng, c.bits, c.n, c.k, c.group, c.f16_scales, c.zero_points);
  const Tensor x = Tensor::random(DType::kF32, {c.rows, c.k}, rng, -1.0, 1.0);
  const Tensor bias = Tensor::random(DType::kF32, {c.n}, rng);
  const std::int64_t block = activation_block(c.bits, c.group);
  const Rounded r = block > 0 ? rounded_activations(x, block, block == 32 ? 127.0f : 32767.0f) : Rounded{x, {}};
  const std::vector<double> want = reference_linear(r.x, w, c.bias ? &bias : nullptr, c.rows);
  for (int threads : {1, 2}) {
    Tensor out(DType::kF32, {c.rows, c.n});
    ASSERT_TRUE(run_linear_q(x, w, c.bias ? &bias : nullptr, out, threads).ok());
    EXPECT_TRUE(out.canary_intact());
    // Float accumulation over k terms of size ~|x| * |w| <= 1 * 127 * 0.05.
    EXPECT_TRUE(all_close(out, want, 1e-4, 2e-5 * static_cast<double>(c.k)))
        << "bits " << c.bits << " rows " << c.rows << " n " << c.n << " k " << c.k << " group " << c.group
        << " threads " << threads;
    if (block > 0) {
      EXPECT_TRUE(within_rounding_bound(out, x, r, w, c.bias ? &bias : nullptr, c.rows, 1e-4, 2e-5 * static_cast<double>(c.k)))
          << "bits " << c.bits << " rows " << c.rows << " n " << c.n << " k " << c.k << " group " << c.group;
    }
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
  // Formats the integer GEMM does not take (int8 groups not a multiple of 256, int4 groups
  // of 16): n past several 8-panel chunks and not a multiple of 16 (a partial last panel);
  // k = 4000 in 16 K blocks of <= 256 (the C tile accumulates across them, bias at the
  // last one).
  check_case({8, 16, 1030, 4000, 4000, false, false, true}, 60);
  check_case({4, 7, 1043, 256, 16, true, true, true}, 61);
}

TEST(LinearQKernel, IntegerGemmMatchesReferenceAcrossTilesPanelsAndKBlocks) {
  // Rows across 6-row tiles (3, 7, 13, 16, 64) and the 144-row block (150); n across
  // 32-row panels (31, 33, 65) and 8-panel chunks on 2 threads (700); k across K blocks
  // (int4: 512 columns, so 1056 and 800 end in a 32- and a 288-column block; int8: 256).
  const Case cases[] = {
      {4, 3, 33, 1056, 32, true, false, true},   {4, 7, 70, 800, 32, true, true, false},
      {4, 13, 31, 256, 64, false, true, true},   {4, 16, 65, 4096, 128, true, false, true},
      {4, 64, 47, 512, 32, true, false, false},  {4, 150, 40, 96, 32, false, false, true},
      {4, 20, 700, 512, 32, true, false, true},  {8, 3, 33, 256, 256, false, false, true},
      {8, 7, 70, 768, 768, true, false, false},  {8, 16, 31, 1024, 512, false, false, true},
      {8, 64, 65, 4096, 4096, false, false, true}, {8, 150, 33, 512, 256, true, false, false},
      {8, 20, 700, 512, 512, false, false, true},
  };
  std::uint32_t seed = 70;
  for (const Case& c : cases) check_case(c, seed++);
}

// A random weight and activations for the table comparisons.
struct IntGemmFixture {
  QWeight w;
  QuantWeight qw;
  Tensor x, bias;
};
IntGemmFixture int_gemm_fixture(const Case& c, std::uint32_t seed) {
  std::mt19937 rng(seed);
  IntGemmFixture f;
  f.w = make_weight(rng, c.bits, c.n, c.k, c.group, c.f16_scales, c.zero_points);
  f.qw = QuantWeight{f.w.data.as<const std::uint8_t>(), c.bits, c.n, c.k, c.group, f.w.scales.data(), c.f16_scales,
                     c.zero_points ? f.w.zero_points.as<const std::uint8_t>() : nullptr};
  f.x = Tensor::random(DType::kF32, {c.rows, c.k}, rng, -3.0, 3.0);
  f.bias = Tensor::random(DType::kF32, {c.n}, rng);
  return f;
}

std::vector<const kernels::IntGemmKernels*> int_gemm_tables() {
  std::vector<const kernels::IntGemmKernels*> tables{&kernels::int_gemm_kernels_scalar()};
  if (kernels::int_gemm_kernels_avx2() != nullptr) tables.push_back(kernels::int_gemm_kernels_avx2());
  if (kernels::int_gemm_kernels_avx512vnni() != nullptr) tables.push_back(kernels::int_gemm_kernels_avx512vnni());
  return tables;
}

TEST(LinearQKernel, IntegerGemmTablesPackTheSameBytesAndAgree) {
  const auto tables = int_gemm_tables();
  const kernels::IntGemmKernels& scalar = *tables[0];
  for (const Case& c : {Case{4, 6, 32, 512, 32, true, false, false}, Case{4, 4, 23, 96, 32, false, true, false},
                        Case{4, 1, 17, 256, 64, true, true, false}, Case{4, 5, 9, 160, 160, false, false, false},
                        Case{8, 6, 32, 256, 256, false, false, false}, Case{8, 2, 19, 512, 512, true, false, false},
                        Case{8, 5, 30, 768, 256, false, false, false}}) {
    const IntGemmFixture f = int_gemm_fixture(c, static_cast<std::uint32_t>(c.n * 7 + c.k));
    const bool q8 = c.bits == 4;
    const std::int64_t block = q8 ? kernels::kQ8Block : kernels::kQ16Block, blocks = c.k / block;
    const std::size_t unit_bytes = static_cast<std::size_t>(c.k / (q8 ? 4 : 2) * 4);
    struct Packed {
      std::vector<std::uint8_t> a_units, b_units;
      std::vector<float> a_scale, b_scale, out;
      std::vector<std::int32_t> a_init;
    };
    auto pack = [&](const kernels::IntGemmKernels& k) {
      Packed p;
      p.a_units.assign(unit_bytes * kernels::kIntGemmMr, 0xAB);
      p.a_scale.assign(static_cast<std::size_t>(blocks * kernels::kIntGemmMr), -1.0f);
      p.a_init.assign(p.a_scale.size(), -1);
      // 64-byte aligned panel buffers, as the driver's.
      p.b_units.assign(unit_bytes * kernels::kIntGemmNr + 64, 0xCD);
      p.b_scale.assign(static_cast<std::size_t>(blocks * kernels::kIntGemmNr) + 16, -1.0f);
      auto* bu = reinterpret_cast<std::uint8_t*>((reinterpret_cast<std::uintptr_t>(p.b_units.data()) + 63) / 64 * 64);
      auto* bs = reinterpret_cast<float*>((reinterpret_cast<std::uintptr_t>(p.b_scale.data()) + 63) / 64 * 64);
      const int rows = static_cast<int>(c.rows), cols = static_cast<int>(c.n);
      if (q8) {
        k.quantize_q8(f.x.as<const float>(), c.k, rows, c.k, p.a_units.data(), p.a_scale.data(), p.a_init.data());
        k.panel_q8(f.qw, 0, cols, 0, c.k, bu, bs);
      } else {
        k.quantize_q16(f.x.as<const float>(), c.k, rows, c.k, p.a_units.data(), p.a_scale.data());
        k.panel_q16(f.qw, 0, cols, 0, c.k, bu, bs);
      }
      p.out.assign(static_cast<std::size_t>(kernels::kIntGemmMr * 40), 0.5f);
      const kernels::IntGemmTile tile{p.a_units.data(), p.a_scale.data(), q8 ? p.a_init.data() : nullptr, bu, bs, blocks,
                                      p.out.data(), 40, rows, cols, true, f.bias.as<const float>()};
      (q8 ? k.tile_q8 : k.tile_q16)(tile);
      p.b_units.assign(bu, bu + unit_bytes * kernels::kIntGemmNr);
      p.b_scale.assign(bs, bs + blocks * kernels::kIntGemmNr);
      return p;
    };
    const Packed want = pack(scalar);
    for (const auto* table : tables) {
      const Packed got = pack(*table);
      const std::string where = std::string(table->name) + " bits " + std::to_string(c.bits) + " k " + std::to_string(c.k);
      EXPECT_EQ(got.a_units, want.a_units) << where;
      EXPECT_EQ(got.a_scale, want.a_scale) << where;
      if (q8) {
        EXPECT_EQ(got.a_init, want.a_init) << where;
      }
      EXPECT_EQ(got.b_units, want.b_units) << where;
      EXPECT_EQ(got.b_scale, want.b_scale) << where;
      for (std::size_t i = 0; i < want.out.size(); ++i) {
        ASSERT_NEAR(got.out[i], want.out[i], 1e-5 * (1 + std::fabs(want.out[i]))) << where << " out " << i;
      }
    }
  }
}

TEST(LinearQKernel, IntegerGemmOfEveryTableMatchesTheReference) {
  // The whole driver on each table (the linear_q tests above run only the best one).
  for (const Case& c : {Case{4, 13, 70, 1056, 32, true, true, true}, Case{8, 9, 45, 768, 256, false, false, true}}) {
    const IntGemmFixture f = int_gemm_fixture(c, 90);
    const std::int64_t block = activation_block(c.bits, c.group);
    const Rounded r = rounded_activations(f.x, block, block == 32 ? 127.0f : 32767.0f);
    const std::vector<double> want = reference_linear(r.x, f.w, &f.bias, c.rows);
    for (const auto* table : int_gemm_tables()) {
      for (int threads : {1, 2}) {
        ThreadPool pool(threads);
        Tensor out(DType::kF32, {c.rows, c.n});
        ASSERT_TRUE(kernels::int_gemm(f.qw, f.x.as<const float>(), c.rows, f.bias.as<const float>(), out.as<float>(), pool,
                                      *table)
                        .ok());
        EXPECT_TRUE(out.canary_intact());
        EXPECT_TRUE(all_close(out, want, 1e-4, 2e-5 * static_cast<double>(c.k) * 3)) << table->name << " threads " << threads;
      }
    }
  }
}

TEST(LinearQKernel, IntegerGemmAgreesWithTheDecodePathRowByRow) {
  // The same rounding and integer arithmetic: a batch row's result is the decode result
  // of that row up to float summation order.
  for (const Case& c : {Case{4, 7, 40, 512, 32, true, false, true}, Case{8, 7, 40, 512, 256, false, false, true}}) {
    const IntGemmFixture f = int_gemm_fixture(c, 91);
    Tensor batch(DType::kF32, {c.rows, c.n});
    ASSERT_TRUE(run_linear_q(f.x, f.w, &f.bias, batch, 1).ok());
    for (std::int64_t i = 0; i < c.rows; ++i) {
      Tensor xi(DType::kF32, {1, c.k}), yi(DType::kF32, {1, c.n});
      std::copy_n(f.x.as<const float>() + i * c.k, c.k, xi.as<float>());
      ASSERT_TRUE(run_linear_q(xi, f.w, &f.bias, yi, 1).ok());
      for (std::int64_t j = 0; j < c.n; ++j) {
        EXPECT_NEAR(batch.at(i * c.n + j), yi.at(j), 1e-5 * (1 + std::fabs(yi.at(j)))) << c.bits << " " << i << " " << j;
      }
    }
  }
}

TEST(LinearQKernel, NonFiniteActivationsGiveNonFiniteRowsOnEveryPath) {
  // A NaN or inf in a row makes its block's scale NaN: that row's outputs are NaN (the f32
  // product would be NaN or inf), the other rows are unaffected. Decode (1 row) and batch.
  std::mt19937 rng(92);
  for (const Case& c : {Case{4, 4, 20, 256, 32, true, false, false}, Case{8, 4, 20, 512, 256, false, false, false},
                        Case{4, 1, 20, 256, 32, true, false, false}, Case{8, 1, 20, 512, 512, false, false, false}}) {
    const QWeight w = make_weight(rng, c.bits, c.n, c.k, c.group, c.f16_scales, c.zero_points);
    for (const float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
      Tensor x = Tensor::random(DType::kF32, {c.rows, c.k}, rng);
      x.as<float>()[(c.rows - 1) * c.k + 37] = bad;
      Tensor out(DType::kF32, {c.rows, c.n});
      ASSERT_TRUE(run_linear_q(x, w, nullptr, out, 1).ok());
      for (std::int64_t j = 0; j < c.n; ++j) {
        EXPECT_FALSE(std::isfinite(out.at((c.rows - 1) * c.n + j))) << c.bits << " rows " << c.rows << " col " << j;
        if (c.rows > 1) {
          EXPECT_TRUE(std::isfinite(out.at(j))) << c.bits << " col " << j;
        }
      }
    }
  }
}

TEST(LinearQKernel, QuantizeBlockRoundsToNearestEvenAndFlagsSpecialBlocks) {
  std::int32_t q[4];
  const float halves[4] = {2.5f, -0.5f, 1.5f, 127.0f};  // scale 1: ties to even
  EXPECT_EQ(kernels::quantize_block(halves, 4, 127.0f, q), 1.0f);
  EXPECT_EQ(q[0], 2);
  EXPECT_EQ(q[1], 0);
  EXPECT_EQ(q[2], 2);
  EXPECT_EQ(q[3], 127);
  const float zeros[4] = {0.0f, -0.0f, 0.0f, 0.0f};
  EXPECT_EQ(kernels::quantize_block(zeros, 4, 127.0f, q), 0.0f);
  const float tiny[4] = {1e-40f, 0.0f, -1e-40f, 0.0f};  // max / 127 is subnormal: a zero block
  EXPECT_EQ(kernels::quantize_block(tiny, 4, 127.0f, q), 0.0f);
  EXPECT_EQ(q[0], 0);
  const float nan[4] = {1.0f, std::numeric_limits<float>::quiet_NaN(), 2.0f, 3.0f};
  EXPECT_TRUE(std::isnan(kernels::quantize_block(nan, 4, 127.0f, q)));
  EXPECT_EQ(q[0], 0);
  const float inf[4] = {1.0f, -std::numeric_limits<float>::infinity(), 2.0f, 3.0f};
  EXPECT_TRUE(std::isnan(kernels::quantize_block(inf, 4, 127.0f, q)));
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
    const Tensor idx = Tensor::of(DType::kI64, {2, 3}, {0, static_cast<double>(c.n - 1), 3, 3, 1, 2});
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

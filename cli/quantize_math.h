// The numbers of `kiln quantize` (docs/QUANTIZATION.md): per-group scale fitting, weight
// quantization by rounding to the nearest level, and GPTQ (Frantar et al. 2022), which
// quantizes a weight's columns in order and spreads each column's rounding error over the
// columns not yet quantized, weighted by the second moments of the layer's inputs measured
// on calibration data. The bundle rewrite is cli/quantize.cpp; the calibration runs that
// measure the inputs are cli/calibrate.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/base/status.h"

namespace kiln::cli::quant {

/// How one weight is stored.
struct WeightFormat {
  int bits = 8;              // 8: q in [-127, 127], symmetric; 4: q in [0, 15]
  std::int64_t group = 0;    // weights per scale along a row (must divide the row)
  bool f16 = false;          // scales rounded to f16 (else f32)
  bool zero_points = false;  // int4 only: a u8 zero point per group (else zero 8)
  bool search = true;        // int4: search each group's scale for the least squared error
};

/// `s` as its stored dtype gives it back (f16 rounding when `f16`).
float stored_scale(float s, bool f16);

/// One group's scale and zero point.
struct GroupFit {
  float scale = 0;
  int zero = 0;
};

/// The level of v for a scale with reciprocal `inv` (0 for a zero scale): round half away
/// from zero, plus the zero point, clamped to [qmin, qmax]; the zero point itself when
/// v / scale is not finite.
int level(float v, float inv, int zero, int qmin, int qmax);

/// The scale (and zero point) of the group v[0, n). The first candidate is the plain range
/// mapping: int8 scale = amax / 127; symmetric int4 (ggml q4_0 style) the
/// largest-magnitude value mapped to -8; asymmetric int4 (max - min) / 15 with
/// zero = round(-min / scale). For int4 with `format.search`, narrower ranges (and for
/// symmetric int4 the extreme mapped towards +7) are tried too, each followed by a
/// least-squares refit of the scale to the levels it chose; the smallest squared error wins
/// (ties keep the earlier candidate, so it is never worse than the plain mapping). Scales
/// are rounded to their stored dtype before the levels are chosen.
GroupFit fit_group(const float* v, std::int64_t n, const WeightFormat& format);

/// E[x x^T] of a linear layer's inputs x (rows of length k), accumulated over calibration
/// runs: the "Hessian" of GPTQ's layer-wise squared output error.
class InputMoments {
 public:
  explicit InputMoments(std::int64_t k);
  std::int64_t k() const { return k_; }
  /// Rows seen so far.
  std::int64_t rows() const { return rows_; }
  /// Adds the `rows` rows of x (row-major, k floats each): x^T x of chunks of 256 rows by
  /// the runtime's SGEMM (float, relative error ~1e-5), summed in double. A row holding a
  /// non-finite value is skipped and counted in nonfinite_rows(). kUnavailable when the
  /// SGEMM's buffers cannot be allocated.
  [[nodiscard]] Status add(const float* x, std::int64_t rows);
  std::int64_t nonfinite_rows() const { return nonfinite_; }
  /// The mean x x^T (k x k, row-major, symmetric); zeros when no row was added.
  std::vector<double> mean() const;
  /// Bytes it holds.
  std::uint64_t bytes() const { return sum_.size() * sizeof(double); }

 private:
  std::int64_t k_;
  std::int64_t rows_ = 0, nonfinite_ = 0;
  std::vector<double> sum_;  // upper triangle used, k x k
};

/// GPTQ's factor: the upper-triangular U with U^T U = (H + damp I)^-1, where H is the k x k
/// mean x x^T and damp = `damp_fraction` x the mean of H's diagonal (an input channel that
/// was always zero gets H[i][i] = 1 first). kInvalidInput when H + damp I is not positive
/// definite in double precision (the caller retries with more damping).
Result<std::vector<double>> gptq_factor(const std::vector<double>& h, std::int64_t k, double damp_fraction);

/// gptq_factor's U in float, by blocks of 128: the O(k^3) products by the runtime's SGEMM
/// (float, as GPTQ usually runs), the blocks' own columns with double sums. ~1e-4 relative
/// to the double factor. kInvalidInput as gptq_factor (more often: float pivots).
Result<std::vector<float>> gptq_factor_blocked(const std::vector<double>& h, std::int64_t k, double damp_fraction);

/// Input dims above this use gptq_factor_blocked, the others gptq_factor (where the double
/// factor costs < 0.2 s).
inline constexpr std::int64_t kBlockedFactorFrom = 1024;

/// GPTQ's factor of one H, kept for the next weight with the same H (layers that read the
/// same input). The caller keeps that H alive and unchanged while it is cached.
struct FactorCache {
  const std::vector<double>* h = nullptr;  // the H `u` was made from; null: empty cache
  std::int64_t cols = 0;
  std::vector<float> u;  // empty: H + damp I was never positive definite
  double damp = 0;
};

/// A quantized weight: rows x cols logical (rows = output channels, quantized along cols).
struct QuantizedWeight {
  std::vector<std::uint8_t> data;         // int8: rows x cols bytes; int4: rows x cols / 2
  std::vector<std::uint8_t> scales;       // rows x groups, f16 or f32
  std::vector<std::uint8_t> zero_points;  // rows x groups u8 (zero_points only)
  std::int64_t rows = 0, cols = 0, group = 0;
  /// SQNR of the dequantized weight against the original, dB (inf when exact).
  double sqnr_db = 0;
  /// With calibration: SQNR of the layer's output on the calibration inputs,
  /// 10 log10(sum_r w_r^T H w_r / sum_r d_r^T H d_r) with d = w - dequantized w, for the
  /// result and for rounding to nearest (what it would have been without GPTQ); and how
  /// many rows kept GPTQ's levels (a row keeps rounding to nearest's when GPTQ's error on
  /// the calibration inputs is not smaller).
  bool calibrated = false;
  double output_sqnr_db = 0, nearest_output_sqnr_db = 0;
  std::int64_t gptq_rows = 0;
  double damp_fraction = 0;  // the damping GPTQ's factor needed
};

/// Quantizes w (rows x cols; `transposed`: stored as cols x rows, i.e. w[c * rows + r])
/// in groups of `format.group` along cols. Without `h` every value is rounded to the nearest
/// level of its group's fit_group scale. With `h` (the cols x cols mean x x^T of the layer's
/// inputs) GPTQ: per row, columns in order; at each group's first column the group's scale
/// is fitted to the row as updated so far; each column's rounding error e is spread over the
/// later columns (w[j] -= e / U[i][i] * U[i][j], U = gptq_factor(h), or gptq_factor_blocked for
/// cols > kBlockedFactorFrom, 1 % damping,
/// raised tenfold up to 100 % when H is not positive definite). The column loop runs in
/// float, in blocks of whole groups (>= 128 columns): updates inside a block right away,
/// to the columns after it as one SGEMM per block ("lazy batch" GPTQ); the output errors
/// d^T H d are one SGEMM per 256 rows. A row keeps GPTQ's levels only when its error is
/// smaller than rounding to nearest's. Everything runs on up to hardware_concurrency
/// threads; when an SGEMM cannot allocate its buffers, the weight is rounded to nearest
/// (calibrated false).
/// With `cache`, the factor is taken from it when it was made from the same `h` (pointer)
/// and cols, else made and stored in it.
QuantizedWeight quantize_weight(const float* w, std::int64_t rows, std::int64_t cols, bool transposed,
                                const WeightFormat& format, const std::vector<double>* h = nullptr,
                                FactorCache* cache = nullptr);

}  // namespace kiln::cli::quant

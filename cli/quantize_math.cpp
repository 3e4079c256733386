#include "quantize_math.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

#include "backends/cpu/gemm/gemm.h"
#include "backends/cpu/kernels/convert.h"
#include "backends/cpu/thread_pool.h"

namespace kiln::cli::quant {

float stored_scale(float s, bool f16) {
  return f16 ? cpu::kernels::half_to_float(cpu::kernels::float_to_half(s)) : s;
}

int level(float v, float inv, int zero, int qmin, int qmax) {
  const float x = v * inv;
  if (inv == 0 || !std::isfinite(x)) return zero;
  const float c = std::clamp(x, -1e6f, 1e6f);
  return std::clamp(static_cast<int>(c + std::copysign(0.5f, c)) + zero, qmin, qmax);
}

namespace {

// The pool of the SGEMMs of this file (moments, GPTQ's updates, the output errors).
cpu::ThreadPool& gemm_pool() {
  static cpu::ThreadPool pool(0);  // one thread per hardware thread
  return pool;
}

int qmin_of(int bits) { return bits == 8 ? -127 : 0; }
int qmax_of(int bits) { return bits == 8 ? 127 : 15; }

// a . b with eight partial sums: independent chains the compiler can keep in vector
// registers (a single running sum is one add's latency per element).
double dot(const double* a, const double* b, std::int64_t n) {
  double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int l = 0; l < 8; ++l) acc[l] += a[i + l] * b[i + l];
  }
  for (; i < n; ++i) acc[0] += a[i] * b[i];
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

// Squared error of v[0, n) quantized with (scale, zero); also the sums v (q - z) and
// (q - z)^2 that give the least-squares scale for those levels.
double group_error(const float* v, std::int64_t n, float scale, int zero, int qmin, int qmax, double& vq, double& qq) {
  const float inv = scale != 0 ? 1.0f / scale : 0.0f;
  double err = 0;
  vq = 0, qq = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const int q = level(v[i], inv, zero, qmin, qmax) - zero;
    const double d = static_cast<double>(v[i]) - static_cast<double>(q) * scale;
    err += d * d;
    vq += static_cast<double>(v[i]) * q;
    qq += static_cast<double>(q) * q;
  }
  return err;
}

// f(i) for every i in [begin, end) on gemm_pool(), in chunks of at least ~2^20
// multiply-adds of `work` (the total), claimed dynamically so rows of unequal work (a
// triangle's) balance; less work than that runs inline.
template <typename F>
void parallel_rows(std::int64_t begin, std::int64_t end, std::int64_t work, const F& f) {
  const std::int64_t n = end - begin;
  if (n <= 0) return;
  const std::int64_t per_row = std::max<std::int64_t>(1, work / n);
  const std::int64_t grain = std::max<std::int64_t>(1, (std::int64_t{1} << 20) / per_row);
  gemm_pool().parallel_for(n, grain, [&](std::int64_t first, std::int64_t last) {
    for (std::int64_t i = first; i < last; ++i) f(begin + i);
  });
}

}  // namespace

GroupFit fit_group(const float* v, std::int64_t n, const WeightFormat& format) {
  const int bits = format.bits;
  const bool f16 = format.f16, zero_points = format.zero_points;
  float amax = 0, extreme = 0, lo = 0, hi = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    if (std::fabs(v[i]) > amax) amax = std::fabs(v[i]), extreme = v[i];
    lo = std::min(lo, v[i]);
    hi = std::max(hi, v[i]);
  }
  const int qmin = qmin_of(bits), qmax = qmax_of(bits);
  // The plain mapping (shrink 1), or the range shrunk; `flip`: symmetric int4's extreme
  // towards +7, the other side then getting the extra level.
  auto candidate = [&](float shrink, bool flip) {
    GroupFit f;
    if (bits == 8) {
      f.scale = stored_scale(amax * shrink / 127.0f, f16);
    } else if (!zero_points) {
      f.scale = stored_scale(extreme * shrink / (flip ? 7.0f : -8.0f), f16);
      f.zero = 8;
    } else {
      f.scale = stored_scale((hi - lo) * shrink / 15.0f, f16);
      f.zero = f.scale != 0 ? std::clamp(static_cast<int>(std::lround(-lo * shrink / f.scale)), 0, 15) : 0;
    }
    return f;
  };
  GroupFit best = candidate(1.0f, false);
  // int8 keeps the plain mapping (the search gained ~0.1 dB there, at ~10x the time).
  if (!format.search || bits == 8 || best.scale == 0 || !std::isfinite(best.scale)) return best;
  double vq = 0, qq = 0;
  double best_err = group_error(v, n, best.scale, best.zero, qmin, qmax, vq, qq);
  constexpr int kSteps = 8;  // shrink 1.0, 0.96, .., 0.72
  for (int flip = 0; flip < (zero_points ? 1 : 2); ++flip) {
    for (int step = 0; step < kSteps; ++step) {
      GroupFit f = candidate(1.0f - 0.04f * static_cast<float>(step), flip != 0);
      if (f.scale == 0 || !std::isfinite(f.scale)) continue;
      double err = group_error(v, n, f.scale, f.zero, qmin, qmax, vq, qq);
      if (err < best_err) best_err = err, best = f;
      if (qq == 0) continue;
      const float refit = stored_scale(static_cast<float>(vq / qq), f16);
      if (refit == 0 || !std::isfinite(refit)) continue;
      f.scale = refit;
      err = group_error(v, n, f.scale, f.zero, qmin, qmax, vq, qq);
      if (err < best_err) best_err = err, best = f;
    }
  }
  return best;
}

InputMoments::InputMoments(std::int64_t k) : k_(k), sum_(static_cast<std::size_t>(k * k), 0.0) {}

Status InputMoments::add(const float* x, std::int64_t rows) {
  // Chunks of rows: the chunk's x^T x by the runtime's SGEMM (float sums of up to kChunk
  // products, relative error ~1e-5), added to the double sums.
  // The float buffers are scratch, shared by every InputMoments of the thread (grown, not
  // made again on every call: a k x k product is 64 MiB at k 4096).
  constexpr std::int64_t kChunk = 256;
  thread_local std::vector<float> chunk, product;
  if (chunk.size() < static_cast<std::size_t>(k_ * kChunk)) chunk.resize(static_cast<std::size_t>(k_ * kChunk));
  if (product.size() < static_cast<std::size_t>(k_ * k_)) product.resize(static_cast<std::size_t>(k_ * k_));
  for (std::int64_t r0 = 0; r0 < rows; r0 += kChunk) {
    std::int64_t n = 0;
    for (std::int64_t r = r0; r < std::min(rows, r0 + kChunk); ++r) {
      const float* row = x + r * k_;
      bool finite = true;
      for (std::int64_t i = 0; i < k_ && finite; ++i) finite = std::isfinite(row[i]);
      if (!finite) {
        ++nonfinite_;
        continue;
      }
      std::copy(row, row + k_, chunk.begin() + n * k_);
      ++n;
    }
    if (n == 0) continue;
    const Status done = cpu::sgemm({.m = k_, .n = k_, .k = n, .trans_a = true, .a = chunk.data(), .lda = k_,
                                    .b = chunk.data(), .ldb = k_, .c = product.data(), .ldc = k_},
                                   &gemm_pool());
    if (!done.ok()) return done;
    for (std::int64_t i = 0; i < k_; ++i) {
      double* s = sum_.data() + i * k_;
      const float* p = product.data() + i * k_;
      for (std::int64_t j = i; j < k_; ++j) s[j] += p[j];
    }
    rows_ += n;
  }
  return Status::Ok();
}

std::vector<double> InputMoments::mean() const {
  std::vector<double> h(sum_.size(), 0.0);
  if (rows_ == 0) return h;
  const double inv = 1.0 / static_cast<double>(rows_);
  for (std::int64_t i = 0; i < k_; ++i) {
    for (std::int64_t j = i; j < k_; ++j) {
      const double v = sum_[static_cast<std::size_t>(i * k_ + j)] * inv;
      h[static_cast<std::size_t>(i * k_ + j)] = v;
      h[static_cast<std::size_t>(j * k_ + i)] = v;
    }
  }
  return h;
}

namespace {

// Rows [i0, i1) of X = L^-1 (lower triangular, k x k) whose entries before column i0
// already hold -(sum over p < i0 of L[i][p] X[p][.]): row i = (e_i - that - sum over
// i0 <= p < i of L[i][p] X[p][.]) / L[i][i], the rows before it in the block first.
template <typename T>
void finish_inverse_rows(const std::vector<T>& l, std::vector<T>& x, std::int64_t k, std::int64_t i0, std::int64_t i1) {
  for (std::int64_t i = i0; i < i1; ++i) {
    T* out = x.data() + i * k;
    const T* li = l.data() + i * k;
    for (std::int64_t p = i0; p < i; ++p) {
      const T c = li[p];
      const T* row = x.data() + p * k;
      for (std::int64_t j = 0; j <= p; ++j) out[j] -= c * row[j];
    }
    out[i] += T{1};
    const T d = T{1} / li[i];
    for (std::int64_t j = 0; j <= i; ++j) out[j] *= d;
  }
}

// damp_fraction x the mean of H's diagonal, a zero entry (a channel that was always zero)
// counted as 1, as the factors set it.
double damping(const std::vector<double>& h, std::int64_t k, double damp_fraction) {
  double diag_mean = 0;
  for (std::int64_t i = 0; i < k; ++i) {
    const double d = h[static_cast<std::size_t>(i * k + i)];
    diag_mean += d == 0 ? 1.0 : d;
  }
  return damp_fraction * diag_mean / static_cast<double>(std::max<std::int64_t>(k, 1));
}

// "1 % damping" (damp_fraction 0.01).
std::string damping_text(double damp_fraction) {
  std::ostringstream os;
  os << damp_fraction * 100 << " % damping";
  return os.str();
}

}  // namespace

Result<std::vector<double>> gptq_factor(const std::vector<double>& h, std::int64_t k, double damp_fraction) {
  const auto at = [k](std::int64_t i, std::int64_t j) { return static_cast<std::size_t>(i * k + j); };
  const double damp = damping(h, k, damp_fraction);
  // With P the order reversal, the lower Cholesky factor L of P (H + damp I) P gives
  // U = P L^-1 P, upper triangular, with U^T U = (H + damp I)^-1: one factorization and
  // one triangular inverse. Both run in panels of kPanel rows, so that a row of the
  // matrix (k doubles) is read from memory once per panel, not once per row.
  constexpr std::int64_t kPanel = 32;
  std::vector<double> l(static_cast<std::size_t>(k * k), 0.0);
  for (std::int64_t j0 = 0; j0 < k; j0 += kPanel) {
    const std::int64_t j1 = std::min(k, j0 + kPanel);
    // Every row i >= j0: its entries in the panel's columns, less the columns before j0.
    parallel_rows(j0, k, (k - j0) * (j1 - j0) * j0, [&](std::int64_t i) {
      double* li = l.data() + i * k;
      for (std::int64_t j = j0; j < std::min(j1, i + 1); ++j) {
        double s = h[at(k - 1 - i, k - 1 - j)];
        if (i == j) s = (s == 0 ? 1.0 : s) + damp;
        li[j] = s - dot(li, l.data() + j * k, j0);
      }
    });
    // The panel's columns, one after another.
    for (std::int64_t j = j0; j < j1; ++j) {
      const double* lj = l.data() + j * k;
      const double pivot = lj[j] - dot(lj + j0, lj + j0, j - j0);
      if (!(pivot > 0) || !std::isfinite(pivot)) {
        return Status(StatusCode::kInvalidInput, "the inputs' second-moment matrix is not positive definite with " +
                                                     damping_text(damp_fraction));
      }
      const double root = std::sqrt(pivot);
      l[at(j, j)] = root;
      for (std::int64_t i = j + 1; i < k; ++i) {
        double* li = l.data() + i * k;
        li[j] = (li[j] - dot(li + j0, lj + j0, j - j0)) / root;
      }
    }
  }
  // Row i of L^-1 = (e_i - sum_{p < i} L[i][p] row p of L^-1) / L[i][i]; the rows of a
  // panel take the rows before it together, then each other in order (the same sums in
  // the same order as row by row).
  std::vector<double> inv(static_cast<std::size_t>(k * k), 0.0);
  for (std::int64_t i0 = 0; i0 < k; i0 += kPanel) {
    const std::int64_t i1 = std::min(k, i0 + kPanel);
    for (std::int64_t p = 0; p < i0; ++p) {
      const double* row = inv.data() + p * k;
      for (std::int64_t i = i0; i < i1; ++i) {
        const double c = l[at(i, p)];
        double* out = inv.data() + i * k;
        for (std::int64_t j = 0; j <= p; ++j) out[j] -= c * row[j];
      }
    }
    finish_inverse_rows(l, inv, k, i0, i1);
  }
  // U[i][j] = inv[k - 1 - i][k - 1 - j]: the flat array reversed.
  std::vector<double>().swap(l);
  std::reverse(inv.begin(), inv.end());
  return inv;
}

Result<std::vector<float>> gptq_factor_blocked(const std::vector<double>& h, std::int64_t k, double damp_fraction) {
  const auto at = [k](std::int64_t i, std::int64_t j) { return static_cast<std::size_t>(i * k + j); };
  const double damp = damping(h, k, damp_fraction);
  constexpr std::int64_t kBlock = 128;
  // L overwrites the lower triangle of A = P (H + damp I) P, block column by block column:
  // the columns before the block by one SGEMM, then the block's own columns.
  std::vector<float> l(static_cast<std::size_t>(k * k), 0.0f);
  parallel_rows(0, k, k * k, [&](std::int64_t i) {
    for (std::int64_t j = 0; j <= i; ++j) {
      const double v = h[at(k - 1 - i, k - 1 - j)];
      l[at(i, j)] = static_cast<float>(i == j ? (v == 0 ? 1.0 : v) + damp : v);
    }
  });
  for (std::int64_t j0 = 0; j0 < k; j0 += kBlock) {
    const std::int64_t j1 = std::min(k, j0 + kBlock);
    if (j0 > 0) {
      KILN_RETURN_IF_ERROR(cpu::sgemm({.m = k - j0, .n = j1 - j0, .k = j0, .trans_b = true, .alpha = -1.0f, .beta = 1.0f,
                                        .a = l.data() + j0 * k, .lda = k, .b = l.data() + j0 * k, .ldb = k,
                                        .c = l.data() + j0 * k + j0, .ldc = k},
                                       &gemm_pool()));
    }
    for (std::int64_t j = j0; j < j1; ++j) {
      const float* lj = l.data() + j * k;
      double pivot = lj[j];
      for (std::int64_t p = j0; p < j; ++p) pivot -= static_cast<double>(lj[p]) * lj[p];
      if (!(pivot > 0) || !std::isfinite(pivot)) {
        return Status(StatusCode::kInvalidInput, "the inputs' second-moment matrix is not positive definite with " +
                                                     damping_text(damp_fraction));
      }
      const double root = std::sqrt(pivot);
      l[at(j, j)] = static_cast<float>(root);
      parallel_rows(j + 1, k, (k - j) * (j - j0 + 1), [&](std::int64_t i) {
        float* li = l.data() + i * k;
        double s = li[j];
        for (std::int64_t p = j0; p < j; ++p) s -= static_cast<double>(li[p]) * lj[p];
        li[j] = static_cast<float>(s / root);
      });
    }
  }
  // X = L^-1 by block rows: X[i0:i1, :i0] = -L_ii^-1 (L[i0:i1, :i0] X[:i0, :i0]) (the
  // negated product by one SGEMM), and X_ii = L_ii^-1, by substitution row by row.
  std::vector<float> x(static_cast<std::size_t>(k * k), 0.0f);
  for (std::int64_t i0 = 0; i0 < k; i0 += kBlock) {
    const std::int64_t i1 = std::min(k, i0 + kBlock);
    if (i0 > 0) {
      KILN_RETURN_IF_ERROR(cpu::sgemm({.m = i1 - i0, .n = i0, .k = i0, .alpha = -1.0f, .a = l.data() + i0 * k, .lda = k,
                                        .b = x.data(), .ldb = k,
                                        .c = x.data() + i0 * k, .ldc = k},
                                       &gemm_pool()));
    }
    finish_inverse_rows(l, x, k, i0, i1);
  }
  std::vector<float>().swap(l);
  std::reverse(x.begin(), x.end());
  return x;
}

namespace {

// One row's levels (with the zero point added) and its groups' fits.
struct RowLevels {
  std::vector<int> q;
  std::vector<GroupFit> fits;
};

void round_to_nearest(const float* row, std::int64_t cols, const WeightFormat& f, RowLevels& out) {
  const int qmin = qmin_of(f.bits), qmax = qmax_of(f.bits);
  for (std::int64_t g = 0; g < cols / f.group; ++g) {
    const float* v = row + g * f.group;
    const GroupFit fit = fit_group(v, f.group, f);
    out.fits[static_cast<std::size_t>(g)] = fit;
    const float inv = fit.scale != 0 ? 1.0f / fit.scale : 0.0f;
    for (std::int64_t c = 0; c < f.group; ++c) {
      out.q[static_cast<std::size_t>(g * f.group + c)] = level(v[c], inv, fit.zero, qmin, qmax);
    }
  }
}

// GPTQ's column block: the columns whose updates to each other are applied right away;
// each block's updates to the columns after it are one SGEMM ("lazy batch" GPTQ). A group
// must lie inside one block (its scale is fitted when its first column is reached, to the
// row updated by every column before it), so a block is whole groups; a group of the whole
// row is fitted at column 0, before any update.
std::int64_t gptq_block_width(std::int64_t group, std::int64_t cols) {
  if (group == cols) return std::min<std::int64_t>(cols, 128);
  return group >= 128 ? group : 128 / group * group;
}

// GPTQ on the n rows of `w` (n x cols floats, updated in place) with the float factor
// `u`: columns in order; levels and fits into out[0, n). `err` holds n x block floats.
Status gptq_rows(std::vector<float>& w, std::int64_t n, const std::vector<float>& u, std::int64_t cols, const WeightFormat& f,
                 std::vector<RowLevels>& out, std::vector<float>& err) {
  const int qmin = qmin_of(f.bits), qmax = qmax_of(f.bits);
  const std::int64_t block = gptq_block_width(f.group, cols);
  err.resize(static_cast<std::size_t>(n * block));
  std::vector<GroupFit> fit(static_cast<std::size_t>(n));
  std::vector<float> inv(static_cast<std::size_t>(n));
  for (std::int64_t i1 = 0; i1 < cols; i1 += block) {
    const std::int64_t i2 = std::min(cols, i1 + block);
    parallel_rows(0, n, n * block * block / 2 + n * block * 40, [&](std::int64_t t) {
      const auto ti = static_cast<std::size_t>(t);
      float* wr = w.data() + t * cols;
      float* er = err.data() + t * block;
      for (std::int64_t i = i1; i < i2; ++i) {
        if (i % f.group == 0) {
          fit[ti] = fit_group(wr + i, f.group, f);
          out[ti].fits[static_cast<std::size_t>(i / f.group)] = fit[ti];
          inv[ti] = fit[ti].scale != 0 ? 1.0f / fit[ti].scale : 0.0f;
        }
        const int q = level(wr[i], inv[ti], fit[ti].zero, qmin, qmax);
        out[ti].q[static_cast<std::size_t>(i)] = q;
        const float* ui = u.data() + i * cols;
        const float e = (wr[i] - static_cast<float>(q - fit[ti].zero) * fit[ti].scale) / ui[i];
        er[i - i1] = e;
        for (std::int64_t j = i + 1; j < i2; ++j) wr[j] -= e * ui[j];
      }
    });
    if (i2 < cols) {
      // w[:, i2:] -= err x u[i1:i2, i2:]
      KILN_RETURN_IF_ERROR(cpu::sgemm({.m = n, .n = cols - i2, .k = i2 - i1, .alpha = -1.0f, .beta = 1.0f, .a = err.data(),
                                        .lda = block, .b = u.data() + i1 * cols + i2, .ldb = cols, .c = w.data() + i2, .ldc = cols},
                                       &gemm_pool()));
    }
  }
  return Status::Ok();
}

void put_scale(std::vector<std::uint8_t>& out, std::size_t index, float s, bool f16) {
  if (f16) {
    const std::uint16_t h = cpu::kernels::float_to_half(s);
    std::memcpy(out.data() + index * 2, &h, 2);
  } else {
    std::memcpy(out.data() + index * 4, &s, 4);
  }
}

// Sums of one thread's rows.
struct RowSums {
  double signal = 0, noise = 0;          // weight space
  double out_signal = 0, out_noise = 0;  // output space (calibrated)
  double nearest_noise = 0;
  std::int64_t gptq_rows = 0;
};

double db(double signal, double noise) { return noise > 0 ? 10.0 * std::log10(signal / noise) : INFINITY; }


// GPTQ's U in float (gptq_factor_blocked above kBlockedFactorFrom, else gptq_factor) with
// 1 % damping, raised tenfold up to 100 % while H + damp I is not positive definite;
// empty when it never is. `damp` gets the fraction used.
std::vector<float> float_factor(const std::vector<double>& h, std::int64_t cols, double& damp) {
  for (damp = 0.01; damp <= 1.0 + 1e-9; damp *= 10) {
    if (cols > kBlockedFactorFrom) {
      auto factor = gptq_factor_blocked(h, cols, damp);
      if (factor.ok()) return std::move(factor).value();
    } else {
      auto factor = gptq_factor(h, cols, damp);
      if (factor.ok()) return std::vector<float>(factor->begin(), factor->end());
    }
  }
  damp = 0;
  return {};
}

// forms[3t .. 3t + 2] = the output errors d^T H d of row t (of n) rounded to nearest and
// with GPTQ, and the row's own w^T H w: the residuals and rows as the 3n rows of `d`, one
// SGEMM y = d H, then each d_i . y_i in double.
Status output_errors(const std::vector<float>& rows, const std::vector<RowLevels>& nearest,
                     const std::vector<RowLevels>& compensated, std::int64_t n, std::int64_t cols, std::int64_t group,
                     const std::vector<float>& h, std::vector<float>& d, std::vector<float>& y, std::vector<double>& forms) {
  parallel_rows(0, n, n * cols * 6, [&](std::int64_t t) {
    const float* row = rows.data() + t * cols;
    float* dn = d.data() + 3 * t * cols;
    for (int way = 0; way < 2; ++way) {
      const RowLevels& lv = way == 0 ? nearest[static_cast<std::size_t>(t)] : compensated[static_cast<std::size_t>(t)];
      float* out = dn + way * cols;
      for (std::int64_t c = 0; c < cols; ++c) {
        const GroupFit& fit = lv.fits[static_cast<std::size_t>(c / group)];
        out[c] = row[c] - static_cast<float>(lv.q[static_cast<std::size_t>(c)] - fit.zero) * fit.scale;
      }
    }
    std::copy(row, row + cols, dn + 2 * cols);
  });
  KILN_RETURN_IF_ERROR(cpu::sgemm(
      {.m = 3 * n, .n = cols, .k = cols, .a = d.data(), .lda = cols, .b = h.data(), .ldb = cols, .c = y.data(), .ldc = cols},
      &gemm_pool()));
  forms.assign(static_cast<std::size_t>(3 * n), 0.0);
  for (std::int64_t i = 0; i < 3 * n; ++i) {
    const float* a = d.data() + i * cols;
    const float* b = y.data() + i * cols;
    double acc = 0;
    for (std::int64_t c = 0; c < cols; ++c) acc += static_cast<double>(a[c]) * b[c];
    forms[static_cast<std::size_t>(i)] = acc;
  }
  return Status::Ok();
}

// Row r's levels, scales and zero points into q; its weight-space signal and noise into
// `sums`. Two rows never share a byte (int4 rows have an even length), so rows may be
// stored in parallel.
void store_row(QuantizedWeight& q, std::int64_t r, const float* row, const RowLevels& lv, const WeightFormat& format,
               RowSums& sums) {
  const std::int64_t cols = q.cols, groups = cols / format.group;
  for (std::int64_t g = 0; g < groups; ++g) {
    const GroupFit& fit = lv.fits[static_cast<std::size_t>(g)];
    if (format.zero_points) q.zero_points[static_cast<std::size_t>(r * groups + g)] = static_cast<std::uint8_t>(fit.zero);
    put_scale(q.scales, static_cast<std::size_t>(r * groups + g), fit.scale, format.f16);
  }
  for (std::int64_t c = 0; c < cols; ++c) {
    const float v = row[c];
    const GroupFit& fit = lv.fits[static_cast<std::size_t>(c / format.group)];
    const int v_q = lv.q[static_cast<std::size_t>(c)];
    const double back = static_cast<double>(v_q - fit.zero) * fit.scale;
    sums.signal += static_cast<double>(v) * v;
    sums.noise += (v - back) * (v - back);
    if (format.bits == 8) {
      q.data[static_cast<std::size_t>(r * cols + c)] = static_cast<std::uint8_t>(static_cast<std::int8_t>(v_q));
    } else {
      std::uint8_t& b = q.data[static_cast<std::size_t>(r * (cols / 2) + c / 2)];
      b = static_cast<std::uint8_t>(c % 2 == 0 ? (b & 0xF0) | v_q : (b & 0x0F) | (v_q << 4));
    }
  }
}

}  // namespace

QuantizedWeight quantize_weight(const float* w, std::int64_t rows, std::int64_t cols, bool transposed,
                                const WeightFormat& format, const std::vector<double>* h, FactorCache* cache) {
  QuantizedWeight q;
  q.rows = rows;
  q.cols = cols;
  q.group = format.group;
  const std::int64_t groups = cols / format.group;
  q.data.assign(static_cast<std::size_t>(format.bits == 8 ? rows * cols : rows * cols / 2), 0);
  q.scales.assign(static_cast<std::size_t>(rows * groups) * (format.f16 ? 2 : 4), 0);
  if (format.zero_points) q.zero_points.assign(static_cast<std::size_t>(rows * groups), 0);
  // GPTQ's factor and H, in float for the SGEMMs (as GPTQ is usually run).
  std::vector<float> u, hf;
  if (h != nullptr) {
    if (cache != nullptr && cache->h == h && cache->cols == cols) {
      u = cache->u;
      q.damp_fraction = cache->damp;
    } else {
      u = float_factor(*h, cols, q.damp_fraction);
      if (cache != nullptr) *cache = FactorCache{h, cols, u, q.damp_fraction};
    }
    q.calibrated = !u.empty();
    if (q.calibrated) hf.assign(h->begin(), h->end());
  }
  // Rows in blocks of kRows; every row writes its own bytes, scales and zero points.
  constexpr std::int64_t kRows = 256;
  const auto k = static_cast<std::size_t>(cols);
  const std::int64_t block_rows = std::min(rows, kRows);
  std::vector<float> original(static_cast<std::size_t>(block_rows) * k), work, err, d, y;
  std::vector<double> forms;
  std::vector<char> finite(static_cast<std::size_t>(block_rows));
  const RowLevels empty{std::vector<int>(k), std::vector<GroupFit>(static_cast<std::size_t>(groups))};
  std::vector<RowLevels> nearest(static_cast<std::size_t>(block_rows), empty), compensated;
  if (q.calibrated) {
    compensated.assign(static_cast<std::size_t>(block_rows), empty);
    d.resize(3 * original.size());
    y.resize(d.size());
  }
  std::vector<RowSums> row_sums(static_cast<std::size_t>(block_rows));
  RowSums total;
  std::vector<const RowLevels*> chosen(static_cast<std::size_t>(block_rows));
  for (std::int64_t b0 = 0; b0 < rows; b0 += kRows) {
    const std::int64_t n = std::min(kRows, rows - b0);
    parallel_rows(0, n, n * cols * 64, [&](std::int64_t t) {
      float* row = original.data() + t * cols;
      bool ok = true;
      for (std::int64_t c = 0; c < cols; ++c) {
        row[c] = transposed ? w[c * rows + b0 + t] : w[(b0 + t) * cols + c];
        ok = ok && std::isfinite(row[c]);
      }
      finite[static_cast<std::size_t>(t)] = ok;
      round_to_nearest(row, cols, format, nearest[static_cast<std::size_t>(t)]);
      chosen[static_cast<std::size_t>(t)] = &nearest[static_cast<std::size_t>(t)];
      row_sums[static_cast<std::size_t>(t)] = RowSums{};
    });
    if (q.calibrated) {
      work.assign(original.begin(), original.begin() + n * cols);
      const Status done = gptq_rows(work, n, u, cols, format, compensated, err);
      // The SGEMM fails only when its buffers cannot be allocated: keep rounding to nearest.
      if (!done.ok()) q.calibrated = false;
    }
    if (q.calibrated && !output_errors(original, nearest, compensated, n, cols, format.group, hf, d, y, forms).ok()) {
      q.calibrated = false;
    }
    if (q.calibrated) {
      for (std::int64_t t = 0; t < n; ++t) {
        const auto ti = static_cast<std::size_t>(t);
        const double* f3 = forms.data() + 3 * t;
        const double form_nearest = f3[0], form_gptq = f3[1], form_signal = f3[2];
        if (!finite[ti]) continue;  // rounding to nearest; not counted in the output SQNR
        double err_out = form_nearest;
        if (form_gptq < form_nearest) chosen[ti] = &compensated[ti], err_out = form_gptq, ++total.gptq_rows;
        total.out_signal += form_signal;
        total.out_noise += err_out;
        total.nearest_noise += form_nearest;
      }
    }
    parallel_rows(0, n, n * cols * 8, [&](std::int64_t t) {
      store_row(q, b0 + t, original.data() + t * cols, *chosen[static_cast<std::size_t>(t)], format,
                row_sums[static_cast<std::size_t>(t)]);
    });
    for (std::int64_t t = 0; t < n; ++t) total.signal += row_sums[static_cast<std::size_t>(t)].signal, total.noise += row_sums[static_cast<std::size_t>(t)].noise;
  }
  q.sqnr_db = db(total.signal, total.noise);
  if (q.calibrated) {
    q.output_sqnr_db = db(total.out_signal, total.out_noise);
    q.nearest_output_sqnr_db = db(total.out_signal, total.nearest_noise);
    q.gptq_rows = total.gptq_rows;
  }
  return q;
}

}  // namespace kiln::cli::quant

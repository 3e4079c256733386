// TEMPORARY (until the blocked kernels land from their branches): plain-loop reorders, the
// support predicates, and kernels that answer kUnsupported so that callers take the plain
// path via run_plain. Deleted when conv_nchwc.cpp, conv_nchwc_dw.cpp, pool_nchwc.cpp and
// nchwc.cpp are merged.
#include "backends/cpu/kernels/nchwc.h"

namespace kiln::cpu::nchwc {

bool kernels_available() { return false; }

void to_blocked(const float* src, float* dst, std::int64_t n, std::int64_t c, std::int64_t hw, ThreadPool&) {
  const std::int64_t cb = padded_channels(c) / kBlock;
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t b = 0; b < cb; ++b)
      for (std::int64_t p = 0; p < hw; ++p)
        for (std::int64_t l = 0; l < kBlock; ++l) {
          const std::int64_t ch = b * kBlock + l;
          dst[((i * cb + b) * hw + p) * kBlock + l] = ch < c ? src[(i * c + ch) * hw + p] : 0.0f;
        }
}

void to_plain(const float* src, float* dst, std::int64_t n, std::int64_t c, std::int64_t hw, ThreadPool&) {
  const std::int64_t cb = padded_channels(c) / kBlock;
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t ch = 0; ch < c; ++ch)
      for (std::int64_t p = 0; p < hw; ++p) dst[(i * c + ch) * hw + p] = src[((i * cb + ch / kBlock) * hw + p) * kBlock + ch % kBlock];
}

bool dense_supported(const ConvShape& s) {
  if (depthwise_supported(s)) return false;
  if (s.groups == 1) return true;
  return (s.in_channels / s.groups) % kBlock == 0 && (s.out_channels / s.groups) % kBlock == 0;
}
bool depthwise_supported(const ConvShape& s) { return s.groups == s.in_channels && s.groups == s.out_channels; }

Result<std::unique_ptr<DenseWeights>> prepare_dense(const float*, const ConvShape&) {
  return Status(StatusCode::kUnavailable, "blocked dense weights: pending");
}
Result<std::unique_ptr<DepthwiseWeights>> prepare_depthwise(const float*, const ConvShape&) {
  return Status(StatusCode::kUnavailable, "blocked depthwise weights: pending");
}
Status conv2d_dense(const Act&, const DenseWeights&, const ConvShape&, const Epilogue&, const Act&, ThreadPool&) {
  return Status(StatusCode::kUnsupported, "pending");
}
Status conv2d_depthwise(const Act&, const DepthwiseWeights&, const ConvShape&, const Epilogue&, const Act&, ThreadPool&) {
  return Status(StatusCode::kUnsupported, "pending");
}
Status max_pool2d(const Act&, const PoolShape&, const Act&, ThreadPool&) { return Status(StatusCode::kUnsupported, "pending"); }
Status avg_pool2d(const Act&, const PoolShape&, const Act&, ThreadPool&) { return Status(StatusCode::kUnsupported, "pending"); }
Status adaptive_avg_pool2d(const Act&, const Act&, ThreadPool&) { return Status(StatusCode::kUnsupported, "pending"); }
Status mean_hw(const Act&, const Act&, ThreadPool&) { return Status(StatusCode::kUnsupported, "pending"); }

}  // namespace kiln::cpu::nchwc

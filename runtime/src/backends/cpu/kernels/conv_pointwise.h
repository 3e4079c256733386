// 1x1 convolutions (stride 1, no padding, one group) over few output pixels, run transposed:
// Y^T [pixels x out] = X^T [pixels x in] * W^T [in x out] on the SGEMM with W^T packed once
// (sgemm_prepacked's B), then Y^T transposed into the NCHW output. The plain GEMM (W * X,
// conv.cpp) puts the pixels in its B panels: a few pixels (a squeeze-excitation's single
// one, the 2x2 planes of a network at 64x64) run its narrow tiles, streaming all of W for a
// few columns. Transposed, W^T is B in whole 16-column panels, the pixels are the 6-row
// A panels, and a single pixel takes the GEMV path.
#pragma once

#include <cstdint>

#include "backends/cpu/gemm/gemm.h"
#include "backends/cpu/gemm/gemm_packed_a.h"
#include "backends/cpu/thread_pool.h"
#include "kiln/runtime/status.h"

namespace kiln::cpu::kernels {

/// Whether the transposed form is the faster one for a 1x1 convolution of `in_channels` ->
/// `out_channels` over `pixels` output pixels per image: 1 to 8 pixels (measured; see the
/// source).
bool pointwise_transposed_profitable(std::int64_t in_channels, std::int64_t out_channels, std::int64_t pixels);

/// W [out_channels x in_channels] (a 1x1 weight) packed as W^T for conv_pointwise_transposed.
/// Errors: kUnavailable when the allocation fails.
Result<PackedB> pointwise_transposed_prepare(const float* w, std::int64_t out_channels, std::int64_t in_channels);

/// The same W^T made from W's prepacked A copy (pack_a_matrix of W [out x in]), so the
/// mapped pages of the raw weight, released after load, are not faulted back in.
/// Errors: kUnavailable when an allocation fails.
Result<PackedB> pointwise_transposed_prepare(const PackedA& w);

/// y [batch][out_channels][pixels] = act(W x + bias) for x [batch][in_channels][pixels], with
/// W^T from pointwise_transposed_prepare; bias may be null. Threaded over the pool (the
/// GEMM, then the transpose by output channel blocks).
/// Errors: kUnavailable when the transpose buffer or a GEMM buffer cannot be allocated.
Status conv_pointwise_transposed(const float* x, const PackedB& wt, const float* bias, float* y, std::int64_t batch,
                                 std::int64_t in_channels, std::int64_t out_channels, std::int64_t pixels,
                                 GemmActivation act, ThreadPool& pool);

}  // namespace kiln::cpu::kernels

// Sliding-window geometry shared by conv2d and the pooling kernels: reading (h, w) pair
// attributes and computing output sizes with overflow-checked arithmetic.
#pragma once

#include <array>
#include <cstdint>

#include "backends/cpu/kernels/common.h"

namespace kiln::cpu::kernels {

/// Largest kernel, stride, padding or dilation accepted (keeps all window arithmetic far
/// from int64 overflow).
inline constexpr std::int64_t kMaxWindowParam = std::int64_t{1} << 31;

/// Reads an (h, w) attribute given as 1 value (used for both) or 2 values, each in
/// [min_value, kMaxWindowParam). An empty list gives `fallback` when it is set, else an error.
Status read_pair(std::string_view op, Attrs attrs, std::size_t index, std::string_view name,
                 std::int64_t min_value, std::array<std::int64_t, 2>& out,
                 const std::array<std::int64_t, 2>* fallback = nullptr);

/// PyTorch's pooling/convolution output size along one dim:
///   floor_or_ceil((in + 2 pad - dilation (kernel - 1) - 1) / stride) + 1,
/// with ceil_mode's rule that the last window must start inside the input or left padding.
/// Errors (kInvalidBundle, naming `dim_name`) when the result is below 1, the kernel is
/// outside [1, kMaxWindowParam) or `in` is absurdly large.
Status window_output_size(std::string_view op, std::string_view dim_name, std::int64_t in,
                          std::int64_t kernel, std::int64_t stride, std::int64_t pad,
                          std::int64_t dilation, bool ceil_mode, std::int64_t& out);

/// Input spatial layout of a [N, C, H, W] or unbatched [C, H, W] tensor.
struct Planes {
  std::int64_t batch = 1;
  std::int64_t channels = 1;
  std::int64_t height = 0;
  std::int64_t width = 0;
};

/// Checks x is 3-D or 4-D and splits its shape.
Status split_planes(std::string_view op, const TensorView& x, Planes& p);

/// The output shape for x's batch/channel dims and (oh, ow), with x's rank.
std::array<std::int64_t, 4> planes_shape(const TensorView& x, std::int64_t channels,
                                         std::int64_t oh, std::int64_t ow);

}  // namespace kiln::cpu::kernels

#include "backends/cpu/kernels/window.h"

#include "kernel/attrs.h"

namespace kiln::cpu::kernels {

Status read_pair(std::string_view op, Attrs attrs, std::size_t index, std::string_view name,
                 std::int64_t min_value, std::array<std::int64_t, 2>& out,
                 const std::array<std::int64_t, 2>* fallback) {
  KILN_ASSIGN_OR_RETURN(std::span<const std::int64_t> v, attr_ints(op, attrs, index, name));
  if (v.empty() && fallback != nullptr) {
    out = *fallback;
    return Status::Ok();
  }
  if (v.size() != 1 && v.size() != 2) {
    return invalid(op, name, " has ", v.size(), " values, expected 1 or 2");
  }
  out = {v[0], v[v.size() - 1]};
  for (std::size_t i = 0; i < 2; ++i) {
    if (out[i] < min_value || out[i] >= kMaxWindowParam) {
      return invalid(op, name, "[", i, "]=", out[i], " outside [", min_value, ", ", kMaxWindowParam, ")");
    }
  }
  return Status::Ok();
}

Status window_output_size(std::string_view op, std::string_view dim_name, std::int64_t in,
                          std::int64_t kernel, std::int64_t stride, std::int64_t pad,
                          std::int64_t dilation, bool ceil_mode, std::int64_t& out) {
  // A dim can be huge when another dim is 0; bounding it and the kernel keeps the
  // arithmetic below far from overflow (stride, pad, dilation are < 2^31 already).
  if (in >= (std::int64_t{1} << 62)) return invalid(op, "input ", dim_name, "=", in, " is too large");
  if (kernel < 1 || kernel >= kMaxWindowParam) {
    return invalid(op, "kernel ", dim_name, "=", kernel, " outside [1, ", kMaxWindowParam, ")");
  }
  const std::int64_t span = dilation * (kernel - 1) + 1;
  std::int64_t numerator = in + 2 * pad - span + (ceil_mode ? stride - 1 : 0);
  // Floor division (numerator may be negative).
  std::int64_t q = numerator / stride;
  if (numerator % stride != 0 && numerator < 0) --q;
  out = q + 1;
  if (ceil_mode && out > 0 && (out - 1) * stride >= in + pad) --out;
  if (out < 1) {
    return invalid(op, "output ", dim_name, " size ", out, " is too small: input ", dim_name, "=", in,
                   ", kernel=", kernel, ", stride=", stride, ", padding=", pad, ", dilation=", dilation);
  }
  return Status::Ok();
}

Status split_planes(std::string_view op, const TensorView& x, Planes& p) {
  if (x.rank != 3 && x.rank != 4) {
    return invalid(op, "x must be 3-D [C, H, W] or 4-D [N, C, H, W], got x.shape=", shape_text(x));
  }
  const int o = x.rank - 3;
  p.batch = o == 1 ? x.shape[0] : 1;
  p.channels = x.shape[o];
  p.height = x.shape[o + 1];
  p.width = x.shape[o + 2];
  return Status::Ok();
}

std::array<std::int64_t, 4> planes_shape(const TensorView& x, std::int64_t channels,
                                         std::int64_t oh, std::int64_t ow) {
  if (x.rank == 3) return {channels, oh, ow, 0};
  return {x.shape[0], channels, oh, ow};
}

}  // namespace kiln::cpu::kernels

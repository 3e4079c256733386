// Strided copy of 32-bit words over up to KILN_MAX_DIMS dims: for every index of `shape`,
// out[out_offset + sum(idx * out_stride)] = in[in_offset + sum(idx * in_stride)].
// Strides may be 0 (expand) or negative (flip). Serves reshape, identity, permute, slice,
// cat, split, expand, flip and pad.
// Push constants: PC_COPY_*.
#version 450
#include "common.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer I { uint src[]; };
layout(std430, binding = 1) buffer O { uint dst[]; };
void main() {
  uint i = linear_id();
  if (i >= uint(P(PC_COPY_N))) return;
  int is = P(PC_COPY_IN_OFFSET), os = P(PC_COPY_OUT_OFFSET);
  uint rest = i;
  for (int d = P(PC_COPY_RANK) - 1; d >= 0; --d) {
    uint dim = uint(P(PC_COPY_SHAPE + d));
    int k = int(rest % dim);
    rest /= dim;
    is += k * P(PC_COPY_IN_STRIDES + d);
    os += k * P(PC_COPY_OUT_STRIDES + d);
  }
  dst[os] = src[is];
}

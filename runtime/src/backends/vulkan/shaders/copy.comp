// Strided copy of 32-bit words over up to 6 dims: for every index of `shape`,
// out[out_offset + sum(idx * out_stride)] = in[in_offset + sum(idx * in_stride)].
// Strides may be 0 (expand) or negative (flip). Serves reshape, identity, permute, slice,
// cat, split, expand, flip and pad.
// p: [0] n, [1] rank, [2..7] shape, [8..13] in strides, [14..19] out strides,
//    [20] in offset, [21] out offset.
#version 450
#include "common.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer I { uint src[]; };
layout(std430, binding = 1) buffer O { uint dst[]; };
void main() {
  uint i = linear_id();
  if (i >= uint(P(0))) return;
  int is = P(20), os = P(21);
  uint rest = i;
  for (int d = P(1) - 1; d >= 0; --d) {
    uint dim = uint(P(2 + d));
    int k = int(rest % dim);
    rest /= dim;
    is += k * P(8 + d);
    os += k * P(14 + d);
  }
  dst[os] = src[is];
}

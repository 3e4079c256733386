// out = cond ? a : b (32-bit words; cond is uint 0/1), broadcast over up to 6 dims.
// masked_fill(x, mask, value) is where(mask, value, x) with value's strides all 0.
// p: [0] n, [1] rank, [2..7] out shape, [8..13] cond strides, [14..19] a strides,
//    [20..25] b strides.
#version 450
#include "common.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer C { uint c[]; };
layout(std430, binding = 1) readonly buffer A { uint a[]; };
layout(std430, binding = 2) readonly buffer B { uint b[]; };
layout(std430, binding = 3) writeonly buffer O { uint o[]; };
void main() {
  uint i = linear_id();
  if (i >= uint(P(0))) return;
  uint ic = 0u, ia = 0u, ib = 0u, rest = i;
  for (int d = P(1) - 1; d >= 0; --d) {
    uint dim = uint(P(2 + d));
    uint k = rest % dim;
    rest /= dim;
    ic += k * uint(P(8 + d));
    ia += k * uint(P(14 + d));
    ib += k * uint(P(20 + d));
  }
  o[i] = c[ic] != 0u ? a[ia] : b[ib];
}

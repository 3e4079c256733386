// out = cond ? a : b (32-bit words; cond is uint 0/1), broadcast over up to KILN_MAX_DIMS dims.
// masked_fill(x, mask, value) is where(mask, value, x) with value's strides all 0.
// Push constants: PC_WHERE_*.
#version 450
#include "common.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer C { uint c[]; };
layout(std430, binding = 1) readonly buffer A { uint a[]; };
layout(std430, binding = 2) readonly buffer B { uint b[]; };
layout(std430, binding = 3) writeonly buffer O { uint o[]; };
void main() {
  uint i = linear_id();
  if (i >= uint(P(PC_WHERE_N))) return;
  uint ic = 0u, ia = 0u, ib = 0u, rest = i;
  for (int d = P(PC_WHERE_RANK) - 1; d >= 0; --d) {
    uint dim = uint(P(PC_WHERE_SHAPE + d));
    uint k = rest % dim;
    rest /= dim;
    ic += k * uint(P(PC_WHERE_COND_STRIDES + d));
    ia += k * uint(P(PC_WHERE_A_STRIDES + d));
    ib += k * uint(P(PC_WHERE_B_STRIDES + d));
  }
  o[i] = c[ic] != 0u ? a[ia] : b[ib];
}

// out[i] = value (32-bit word), or start + i * step (integer ramps for arange, stored as
// f32 or i32; |values| <= 2^24 so both are exact).
// p: [0] n, [1] value bits / start, [2] mode (0 fill, 1 f32 ramp, 2 i32 ramp), [3] step.
#version 450
#include "common.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) writeonly buffer O { uint o[]; };
void main() {
  uint i = linear_id();
  if (i >= uint(P(0))) return;
  if (P(2) == 0) o[i] = uint(P(1));
  else if (P(2) == 1) o[i] = floatBitsToUint(float(P(1) + int(i) * P(3)));
  else o[i] = uint(P(1) + int(i) * P(3));
}

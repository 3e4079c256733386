// out[i] = value (32-bit word), or start + i * step (integer ramps for arange, stored as
// f32 or i32; |values| <= 2^24 so both are exact).
// Push constants: PC_FILL_* (PC_FILL_MODE: FILL_CONSTANT, FILL_RAMP_F32, FILL_RAMP_I32).
#version 450
#include "common.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) writeonly buffer O { uint o[]; };
void main() {
  uint i = linear_id();
  if (i >= uint(P(PC_FILL_N))) return;
  int mode = P(PC_FILL_MODE);
  if (mode == FILL_CONSTANT) o[i] = uint(P(PC_FILL_VALUE));
  else if (mode == FILL_RAMP_F32) o[i] = floatBitsToUint(float(P(PC_FILL_VALUE) + int(i) * P(PC_FILL_STEP)));
  else o[i] = uint(P(PC_FILL_VALUE) + int(i) * P(PC_FILL_STEP));
}

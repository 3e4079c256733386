// Casts between the device representations DEVICE_F32, DEVICE_I32, DEVICE_BOOL (uint 0/1).
// f32 -> i32 truncates (NaN -> 0, saturating); anything -> bool is != 0.
// Push constants: PC_CAST_*.
#version 450
#include "common.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer I { uint x[]; };
layout(std430, binding = 1) writeonly buffer O { uint o[]; };
void main() {
  uint i = linear_id();
  if (i >= uint(P(PC_CAST_N))) return;
  uint w = x[i];
  int from = P(PC_CAST_FROM), to = P(PC_CAST_TO);
  float f;
  int n;
  if (from == DEVICE_F32) { f = uintBitsToFloat(w); }
  else if (from == DEVICE_I32) { f = float(int(w)); }
  else { f = w != 0u ? 1.0 : 0.0; }
  uint r;
  if (to == DEVICE_F32) {
    r = from == DEVICE_F32 ? w : floatBitsToUint(f);
  } else if (to == DEVICE_I32) {
    if (from == DEVICE_I32) r = w;
    else if (from == DEVICE_BOOL) r = w != 0u ? 1u : 0u;
    else if (isnan(f)) r = 0u;
    else r = uint(int(clamp(trunc(f), -2147483648.0, 2147483520.0)));
  } else {
    r = (from == DEVICE_F32 ? f != 0.0 : w != 0u) ? 1u : 0u;
  }
  o[i] = r;
}

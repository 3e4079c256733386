// Casts between the device representations: 0 f32, 1 i32, 2 bool (uint 0/1).
// f32 -> i32 truncates (NaN -> 0, saturating); anything -> bool is != 0.
// p: [0] n, [1] from, [2] to.
#version 450
#include "common.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer I { uint x[]; };
layout(std430, binding = 1) writeonly buffer O { uint o[]; };
void main() {
  uint i = linear_id();
  if (i >= uint(P(0))) return;
  uint w = x[i];
  int from = P(1), to = P(2);
  float f;
  int n;
  if (from == 0) { f = uintBitsToFloat(w); }
  else if (from == 1) { f = float(int(w)); }
  else { f = w != 0u ? 1.0 : 0.0; }
  uint r;
  if (to == 0) {
    r = from == 0 ? w : floatBitsToUint(f);
  } else if (to == 1) {
    if (from == 1) r = w;
    else if (from == 2) r = w != 0u ? 1u : 0u;
    else if (isnan(f)) r = 0u;
    else r = uint(int(clamp(trunc(f), -2147483648.0, 2147483520.0)));
  } else {
    r = (from == 0 ? f != 0.0 : w != 0u) ? 1u : 0u;
  }
  o[i] = r;
}

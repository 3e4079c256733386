// argmax / argmin along one dim: one 64-wide workgroup per row of the [outer, D, inner]
// view; the first occurrence of the extreme wins and NaN counts as the extreme (the first
// NaN), as in the CPU kernel. Indices are written as i32 words.
// Push constants: PC_ARGREDUCE_* (PC_ARGREDUCE_OP: ARGREDUCE_MAX or ARGREDUCE_MIN).
#version 450
#include "common.glsl"
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer Y { uint y[]; };
shared float sv[64];
shared uint si[64];

// Whether (v, i) comes first in a sequential scan's answer over (b, j).
bool wins(float v, uint i, float b, uint j, bool is_max) {
  bool vn = isnan(v), bn = isnan(b);
  if (vn || bn) return vn && (!bn || i < j);
  if (v == b) return i < j;
  return is_max ? v > b : v < b;
}

void main() {
  uint row = linear_group();
  if (row >= uint(P(PC_ARGREDUCE_ROWS))) return;
  uint t = gl_LocalInvocationID.x;
  uint D = uint(P(PC_ARGREDUCE_D)), inner = uint(P(PC_ARGREDUCE_INNER));
  bool is_max = P(PC_ARGREDUCE_OP) == ARGREDUCE_MAX;
  uint base = (row / inner) * D * inner + row % inner;
  float best = 0.0;
  uint bi = 0xffffffffu;
  for (uint j = t; j < D; j += 64u) {
    float v = x[base + j * inner];
    if (bi == 0xffffffffu || wins(v, j, best, bi, is_max)) { best = v; bi = j; }
  }
  sv[t] = best;
  si[t] = bi;
  barrier();
  for (uint s = 32u; s > 0u; s >>= 1) {
    if (t < s && si[t + s] != 0xffffffffu &&
        (si[t] == 0xffffffffu || wins(sv[t + s], si[t + s], sv[t], si[t], is_max))) {
      sv[t] = sv[t + s];
      si[t] = si[t + s];
    }
    barrier();
  }
  if (t == 0u) y[row] = si[0];
}

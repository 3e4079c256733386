// softmax / log_softmax along one dim: one 64-wide workgroup per row of the [outer, D,
// inner] view (row = outer * inner + i; element j at row base + j * inner). Max-subtracted.
// Push constants: PC_SOFTMAX_*.
#version 450
#include "common.glsl"
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer Y { float y[]; };
shared float part[64];
void main() {
  uint row = linear_group();
  if (row >= uint(P(PC_SOFTMAX_ROWS))) return;
  uint t = gl_LocalInvocationID.x;
  uint D = uint(P(PC_SOFTMAX_D)), inner = uint(P(PC_SOFTMAX_INNER));
  uint base = (row / inner) * D * inner + row % inner;
  float m = uintBitsToFloat(0xff800000u);
  for (uint j = t; j < D; j += 64u) {
    float v = x[base + j * inner];
    m = (v > m || isnan(v)) ? v : m;
  }
  part[t] = m;
  barrier();
  for (uint s = 32u; s > 0u; s >>= 1) {
    if (t < s) { float u = part[t], v = part[t + s]; part[t] = (v > u || isnan(v)) ? v : u; }
    barrier();
  }
  m = part[0];
  barrier();
  float sum = 0.0;
  for (uint j = t; j < D; j += 64u) sum += exp(x[base + j * inner] - m);
  part[t] = sum;
  barrier();
  for (uint s = 32u; s > 0u; s >>= 1) {
    if (t < s) part[t] += part[t + s];
    barrier();
  }
  sum = part[0];
  if (P(PC_SOFTMAX_LOG) != 0) {
    float ls = log(sum);
    for (uint j = t; j < D; j += 64u) y[base + j * inner] = x[base + j * inner] - m - ls;
  } else {
    float inv = 1.0 / sum;
    for (uint j = t; j < D; j += 64u) y[base + j * inner] = exp(x[base + j * inner] - m) * inv;
  }
}

// layer_norm over rows of n elements (biased variance, two passes), one 64-wide workgroup
// per row; weight/bias optional (shaped like the row).
// Push constants: PC_LAYERNORM_*.
#version 450
#include "common.glsl"
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer Wt { float w[]; };
layout(std430, binding = 2) readonly buffer Bs { float b[]; };
layout(std430, binding = 3) writeonly buffer Y { float y[]; };
shared float part[64];
float block_sum(float v, uint t) {
  part[t] = v;
  barrier();
  for (uint s = 32u; s > 0u; s >>= 1) {
    if (t < s) part[t] += part[t + s];
    barrier();
  }
  float r = part[0];
  barrier();
  return r;
}
void main() {
  uint row = linear_group();
  if (row >= uint(P(PC_LAYERNORM_ROWS))) return;
  uint t = gl_LocalInvocationID.x;
  uint n = uint(P(PC_LAYERNORM_N));
  uint base = row * n;
  float s = 0.0;
  for (uint j = t; j < n; j += 64u) s += x[base + j];
  float mean = block_sum(s, t) / float(n);
  float q = 0.0;
  for (uint j = t; j < n; j += 64u) { float d = x[base + j] - mean; q += d * d; }
  float rstd = 1.0 / sqrt(block_sum(q, t) / float(n) + PF(PC_LAYERNORM_EPS));
  for (uint j = t; j < n; j += 64u) {
    float v = (x[base + j] - mean) * rstd;
    if (P(PC_LAYERNORM_HAS_WEIGHT) != 0) v *= w[j];
    if (P(PC_LAYERNORM_HAS_BIAS) != 0) v += b[j];
    y[base + j] = v;
  }
}

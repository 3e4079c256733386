// layer_norm over rows of n elements (biased variance, two passes), one 64-wide workgroup
// per row; weight/bias optional (shaped like the row).
// p: [0] rows, [1] n, [2] eps (f32 bits), [3] has_weight, [4] has_bias.
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
  if (row >= uint(P(0))) return;
  uint t = gl_LocalInvocationID.x;
  uint n = uint(P(1));
  uint base = row * n;
  float s = 0.0;
  for (uint j = t; j < n; j += 64u) s += x[base + j];
  float mean = block_sum(s, t) / float(n);
  float q = 0.0;
  for (uint j = t; j < n; j += 64u) { float d = x[base + j] - mean; q += d * d; }
  float rstd = 1.0 / sqrt(block_sum(q, t) / float(n) + PF(2));
  for (uint j = t; j < n; j += 64u) {
    float v = (x[base + j] - mean) * rstd;
    if (P(3) != 0) v *= w[j];
    if (P(4) != 0) v += b[j];
    y[base + j] = v;
  }
}

// Inference batch_norm over x [N, C, plane...]: y = x * s + t with s = w / sqrt(var + eps),
// t = b - mean * s (weight/bias optional).
// Push constants: PC_BATCHNORM_*.
#version 450
#include "common.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer Wt { float w[]; };
layout(std430, binding = 2) readonly buffer Bs { float b[]; };
layout(std430, binding = 3) readonly buffer Mean { float mean[]; };
layout(std430, binding = 4) readonly buffer Var { float var_[]; };
layout(std430, binding = 5) writeonly buffer Y { float y[]; };
void main() {
  uint i = linear_id();
  if (i >= uint(P(PC_BATCHNORM_N))) return;
  uint c = (i / uint(P(PC_BATCHNORM_PLANE))) % uint(P(PC_BATCHNORM_C));
  float s = (P(PC_BATCHNORM_HAS_WEIGHT) != 0 ? w[c] : 1.0) / sqrt(var_[c] + PF(PC_BATCHNORM_EPS));
  float t = (P(PC_BATCHNORM_HAS_BIAS) != 0 ? b[c] : 0.0) - mean[c] * s;
  y[i] = x[i] * s + t;
}

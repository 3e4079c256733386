// cumsum along one dim: one invocation per line of the [outer, D, inner] view, summing
// serially (f32 accumulation; the CPU accumulates in double).
// Push constants: PC_CUMSUM_*.
#version 450
#include "common.glsl"
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer Y { float y[]; };
void main() {
  uint line = linear_id();
  if (line >= uint(P(PC_CUMSUM_LINES))) return;
  uint D = uint(P(PC_CUMSUM_D)), inner = uint(P(PC_CUMSUM_INNER));
  uint base = (line / inner) * D * inner + line % inner;
  float s = 0.0;
  for (uint j = 0u; j < D; ++j) {
    s += x[base + j * inner];
    y[base + j * inner] = s;
  }
}

// y = f(x), f32. p: [0] n, [1] op, [2] alpha (f32 bits), [3] beta (f32 bits).
#version 450
#include "common.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer Y { float y[]; };

// Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7).
float erf_approx(float v) {
  float a = abs(v);
  float t = 1.0 / (1.0 + 0.3275911 * a);
  float poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))));
  float r = 1.0 - poly * exp(-a * a);
  return v < 0.0 ? -r : r;
}
float tanh_safe(float v) {
  float t = exp(-2.0 * abs(v));
  float r = (1.0 - t) / (1.0 + t);
  return v < 0.0 ? -r : r;
}

void main() {
  uint i = linear_id();
  if (i >= uint(P(0))) return;
  float v = x[i];
  float r;
  switch (P(1)) {
    case 0: r = -v; break;
    case 1: r = abs(v); break;
    case 2: r = exp(v); break;
    case 3: r = log(v); break;
    case 4: r = sqrt(v); break;
    case 5: r = 1.0 / sqrt(v); break;
    case 6: r = 1.0 / v; break;
    case 7: r = sin(v); break;
    case 8: r = cos(v); break;
    case 9: r = isnan(v) ? v : tanh_safe(v); break;
    case 10: r = 1.0 / (1.0 + exp(-v)); break;
    case 11: r = v < 0.0 ? 0.0 : v; break;
    case 12: r = 0.5 * v * (1.0 + erf_approx(v * 0.70710678118654752)); break;
    case 13: {
      float u = 0.7978845608028654 * (v + 0.044715 * v * v * v);
      r = v / (1.0 + exp(-2.0 * u));
      break;
    }
    case 14: r = v / (1.0 + exp(-v)); break;
    case 15: r = v * min(max(v + 3.0, 0.0), 6.0) / 6.0; break;
    case 16: r = min(max(v + 3.0, 0.0), 6.0) / 6.0; break;
    case 17: r = erf_approx(v); break;
    case 18: r = floor(v); break;
    case 19: r = ceil(v); break;
    case 20: r = roundEven(v); break;
    case 21: r = float(int(0.0 < v) - int(v < 0.0)); break;
    case 22: {  // clamp(min = alpha, max = beta); absent bounds are +-inf
      r = v < PF(2) ? PF(2) : v;
      r = r > PF(3) ? PF(3) : r;
      break;
    }
    case 23: r = v > 0.0 ? v : v * PF(2); break;
    default: r = v; break;
  }
  y[i] = r;
}

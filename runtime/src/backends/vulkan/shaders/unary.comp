// y = f(x), f32; f = the UNARY_* code in PC_UNARY_OP (push constants: PC_UNARY_*).
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
  if (i >= uint(P(PC_UNARY_N))) return;
  float v = x[i];
  float r;
  switch (P(PC_UNARY_OP)) {
    case UNARY_NEG: r = -v; break;
    case UNARY_ABS: r = abs(v); break;
    case UNARY_EXP: r = exp(v); break;
    case UNARY_LOG: r = log(v); break;
    case UNARY_SQRT: r = sqrt(v); break;
    case UNARY_RSQRT: r = 1.0 / sqrt(v); break;
    case UNARY_RECIPROCAL: r = 1.0 / v; break;
    case UNARY_SIN: r = sin(v); break;
    case UNARY_COS: r = cos(v); break;
    case UNARY_TANH: r = isnan(v) ? v : tanh_safe(v); break;
    case UNARY_SIGMOID: r = 1.0 / (1.0 + exp(-v)); break;
    case UNARY_RELU: r = v < 0.0 ? 0.0 : v; break;
    case UNARY_GELU: r = 0.5 * v * (1.0 + erf_approx(v * 0.70710678118654752)); break;
    case UNARY_GELU_TANH: {
      float u = 0.7978845608028654 * (v + 0.044715 * v * v * v);
      r = v / (1.0 + exp(-2.0 * u));
      break;
    }
    case UNARY_SILU: r = v / (1.0 + exp(-v)); break;
    case UNARY_HARDSWISH: r = v * min(max(v + 3.0, 0.0), 6.0) / 6.0; break;
    case UNARY_HARDSIGMOID: r = min(max(v + 3.0, 0.0), 6.0) / 6.0; break;
    case UNARY_ERF: r = erf_approx(v); break;
    case UNARY_FLOOR: r = floor(v); break;
    case UNARY_CEIL: r = ceil(v); break;
    case UNARY_ROUND: r = roundEven(v); break;
    case UNARY_SIGN: r = float(int(0.0 < v) - int(v < 0.0)); break;
    case UNARY_CLAMP: {  // clamp(min = alpha, max = beta); absent bounds are +-inf
      r = v < PF(PC_UNARY_ALPHA) ? PF(PC_UNARY_ALPHA) : v;
      r = r > PF(PC_UNARY_BETA) ? PF(PC_UNARY_BETA) : r;
      break;
    }
    case UNARY_LEAKY_RELU: r = v > 0.0 ? v : v * PF(PC_UNARY_ALPHA); break;
    case UNARY_ATAN: r = atan(v); break;
    // asin / acos through the two-argument atan: some drivers' asin is off by 3e-4 near 0.9.
    case UNARY_ASIN: r = atan(v, sqrt((1.0 - v) * (1.0 + v))); break;  // NaN past 1 from the sqrt
    case UNARY_ACOS: r = atan(sqrt((1.0 - v) * (1.0 + v)), v); break;
    case UNARY_TAN: r = tan(v); break;
    case UNARY_SINH:  // the series near 0, where (e^v - e^-v) / 2 cancels
      r = abs(v) < 0.125 ? v * (1.0 + v * v * (1.0 / 6.0 + v * v * (1.0 / 120.0))) : sinh(v);
      break;
    case UNARY_COSH: r = cosh(v); break;
    case UNARY_ASINH: {  // odd; the series near 0, where log(|v| + sqrt(v^2 + 1)) cancels
      float a = abs(v);
      float m = a < 0.125 ? a * (1.0 - a * a * (1.0 / 6.0 - a * a * (3.0 / 40.0))) : log(a + sqrt(a * a + 1.0));
      r = v < 0.0 ? -m : m;
      break;
    }
    case UNARY_ACOSH: r = log(v + sqrt(v * v - 1.0)); break;
    case UNARY_ATANH:  // the series near 0, where log((1 + v) / (1 - v)) / 2 cancels
      r = abs(v) < 0.125 ? v * (1.0 + v * v * (1.0 / 3.0 + v * v * (1.0 / 5.0 + v * v * (1.0 / 7.0)))) : 0.5 * log((1.0 + v) / (1.0 - v));
      break;
    default: r = v; break;
  }
  y[i] = r;
}

// out = a (op) b with numpy broadcasting over up to 6 dims (a/b strides are 0 on broadcast
// dims). Variants: OUT_BOOL (comparisons: uint 0/1 out), LOGICAL (uint in, uint out).
// p: [0] n, [1] op, [2] rank, [3..8] out shape, [9..14] a strides, [15..20] b strides,
//    [21] contiguous (1: a, b and out have the same layout; no index math).
#version 450
#include "common.glsl"
layout(local_size_x = 256) in;
#ifdef LOGICAL
layout(std430, binding = 0) readonly buffer A { uint a[]; };
layout(std430, binding = 1) readonly buffer B { uint b[]; };
#else
layout(std430, binding = 0) readonly buffer A { float a[]; };
layout(std430, binding = 1) readonly buffer B { float b[]; };
#endif
#if defined(OUT_BOOL) || defined(LOGICAL)
layout(std430, binding = 2) writeonly buffer O { uint o[]; };
#else
layout(std430, binding = 2) writeonly buffer O { float o[]; };
#endif

float fmod_c(float x, float y) { return x - y * trunc(x / y); }

float div_floor(float x, float y) {  // PyTorch's div_floor_floating
  if (y == 0.0) return x / y;
  float m = fmod_c(x, y);
  float d = (x - m) / y;
  if (m != 0.0 && ((y < 0.0) != (m < 0.0))) d -= 1.0;
  if (d == 0.0) return (x / y) < 0.0 ? -0.0 : 0.0;
  float f = floor(d);
  if (d - f > 0.5) f += 1.0;
  return f;
}

float pow_c(float x, float y) {  // C pow for the cases that matter
  if (y == 0.0) return 1.0;
  if (x == 1.0) return 1.0;
  if (isnan(x) || isnan(y)) return x + y;
  if (x == 0.0) return y < 0.0 ? 1.0 / 0.0 : 0.0;
  if (x < 0.0) {
    if (trunc(y) != y) return 0.0 / 0.0;
    float r = exp2(y * log2(-x));
    return mod(abs(y), 2.0) == 1.0 ? -r : r;
  }
  return exp2(y * log2(x));
}

void main() {
  uint i = linear_id();
  if (i >= uint(P(0))) return;
  uint ia = i, ib = i;
  if (P(21) == 0) {
    ia = 0u; ib = 0u;
    uint rest = i;
    for (int d = P(2) - 1; d >= 0; --d) {
      uint dim = uint(P(3 + d));
      uint c = rest % dim;
      rest /= dim;
      ia += c * uint(P(9 + d));
      ib += c * uint(P(15 + d));
    }
  }
#ifdef LOGICAL
  bool x = a[ia] != 0u, y = b[ib] != 0u;
  bool r;
  switch (P(1)) {
    case 0: r = x && y; break;
    case 1: r = x || y; break;
    case 2: r = x != y; break;
    default: r = !x; break;  // logical_not
  }
  o[i] = r ? 1u : 0u;
#elif defined(OUT_BOOL)
  float x = a[ia], y = b[ib];
  bool r;
  switch (P(1)) {
    case 0: r = x == y; break;
    case 1: r = x != y; break;
    case 2: r = x < y; break;
    case 3: r = x <= y; break;
    case 4: r = x > y; break;
    default: r = x >= y; break;
  }
  o[i] = r ? 1u : 0u;
#else
  float x = a[ia], y = b[ib];
  float r;
  switch (P(1)) {
    case 0: r = x + y; break;
    case 1: r = x - y; break;
    case 2: r = x * y; break;
    case 3: r = x / y; break;
    case 4: r = trunc(x / y); break;
    case 5: r = div_floor(x, y); break;
    case 6: r = pow_c(x, y); break;
    case 7: r = (x > y || isnan(x)) ? x : y; break;
    case 8: r = (x < y || isnan(x)) ? x : y; break;
    default: {  // remainder, Python semantics
      float m = fmod_c(x, y);
      r = (m != 0.0 && ((y < 0.0) != (m < 0.0))) ? m + y : m;
      break;
    }
  }
  o[i] = r;
#endif
}

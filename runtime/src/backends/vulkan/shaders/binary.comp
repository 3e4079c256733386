// out = a (op) b with numpy broadcasting over up to KILN_MAX_DIMS dims (a/b strides are 0
// on broadcast dims). Variants: OUT_BOOL (comparisons COMPARE_*: uint 0/1 out), LOGICAL
// (LOGICAL_*: uint in, uint out), INT_IN with OUT_BOOL (comparisons of i32/i64 held as
// 32-bit ints), else BINARY_* on f32. Push constants: PC_BINARY_*
// (PC_BINARY_CONTIGUOUS: a, b and out have the same layout; no index math).
#version 450
#include "common.glsl"
layout(local_size_x = 256) in;
#ifdef LOGICAL
layout(std430, binding = 0) readonly buffer A { uint a[]; };
layout(std430, binding = 1) readonly buffer B { uint b[]; };
#elif defined(INT_IN)
layout(std430, binding = 0) readonly buffer A { int a[]; };
layout(std430, binding = 1) readonly buffer B { int b[]; };
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
  if (i >= uint(P(PC_BINARY_N))) return;
  uint ia = i, ib = i;
  if (P(PC_BINARY_CONTIGUOUS) == 0) {
    ia = 0u; ib = 0u;
    uint rest = i;
    for (int d = P(PC_BINARY_RANK) - 1; d >= 0; --d) {
      uint dim = uint(P(PC_BINARY_SHAPE + d));
      uint c = rest % dim;
      rest /= dim;
      ia += c * uint(P(PC_BINARY_A_STRIDES + d));
      ib += c * uint(P(PC_BINARY_B_STRIDES + d));
    }
  }
#ifdef LOGICAL
  bool x = a[ia] != 0u, y = b[ib] != 0u;
  bool r;
  switch (P(PC_BINARY_OP)) {
    case LOGICAL_AND: r = x && y; break;
    case LOGICAL_OR: r = x || y; break;
    case LOGICAL_XOR: r = x != y; break;
    default: r = !x; break;  // LOGICAL_NOT
  }
  o[i] = r ? 1u : 0u;
#elif defined(OUT_BOOL)
#ifdef INT_IN
  int x = a[ia], y = b[ib];
#else
  float x = a[ia], y = b[ib];
#endif
  bool r;
  switch (P(PC_BINARY_OP)) {
    case COMPARE_EQ: r = x == y; break;
    case COMPARE_NE: r = x != y; break;
    case COMPARE_LT: r = x < y; break;
    case COMPARE_LE: r = x <= y; break;
    case COMPARE_GT: r = x > y; break;
    default: r = x >= y; break;  // COMPARE_GE
  }
  o[i] = r ? 1u : 0u;
#else
  float x = a[ia], y = b[ib];
  float r;
  switch (P(PC_BINARY_OP)) {
    case BINARY_ADD: r = x + y; break;
    case BINARY_SUB: r = x - y; break;
    case BINARY_MUL: r = x * y; break;
    case BINARY_DIV: r = x / y; break;
    case BINARY_DIV_TRUNC: r = trunc(x / y); break;
    case BINARY_DIV_FLOOR: r = div_floor(x, y); break;
    case BINARY_POW: r = pow_c(x, y); break;
    case BINARY_MAXIMUM: r = (x > y || isnan(x)) ? x : y; break;
    case BINARY_MINIMUM: r = (x < y || isnan(x)) ? x : y; break;
    default: {  // BINARY_REMAINDER, Python semantics
      float m = fmod_c(x, y);
      r = (m != 0.0 && ((y < 0.0) != (m < 0.0))) ? m + y : m;
      break;
    }
  }
  o[i] = r;
#endif
}

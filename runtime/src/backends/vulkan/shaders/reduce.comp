// One 64-wide workgroup per output element: sum / mean / amax / amin / prod / var over the
// reduced dims (up to KILN_MAX_DIMS kept and KILN_MAX_DIMS reduced, each with its input
// stride). NaN propagates through amax/amin. var is two-pass (mean, then squared
// deviations) divided by max(0, count - correction).
// Push constants: PC_REDUCE_* (PC_REDUCE_OP: REDUCE_*).
#version 450
#include "common.glsl"
layout(local_size_x = 64) in;
#ifdef BOOL_IO
// any / all: bool words in and out; any is REDUCE_AMAX and all is REDUCE_AMIN over 0/1.
layout(std430, binding = 0) readonly buffer X { uint xw[]; };
layout(std430, binding = 1) writeonly buffer Y { uint yw[]; };
float load(uint i) { return xw[i] != 0u ? 1.0 : 0.0; }
void store(uint i, float v) { yw[i] = v != 0.0 ? 1u : 0u; }
#else
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer Y { float y[]; };
float load(uint i) { return x[i]; }
void store(uint i, float v) { y[i] = v; }
#endif
shared float part[64];

float combine(int op, float u, float v) {
  if (op == REDUCE_SUM || op == REDUCE_MEAN || op == REDUCE_VAR) return u + v;
  if (op == REDUCE_PROD) return u * v;
  if (isnan(u)) return u;
  if (isnan(v)) return v;
  return op == REDUCE_AMAX ? max(u, v) : min(u, v);
}

// Input offset of reduced element r of the output whose first element is at `base`.
uint element(uint base, uint r) {
  uint off = base;
  for (int d = P(PC_REDUCE_RED_RANK) - 1; d >= 0; --d) {
    uint dim = uint(P(PC_REDUCE_RED_DIMS + d));
    off += (r % dim) * uint(P(PC_REDUCE_RED_STRIDES + d));
    r /= dim;
  }
  return off;
}

void main() {
  uint o = linear_group();
  if (o >= uint(P(PC_REDUCE_N))) return;
  uint t = gl_LocalInvocationID.x;
  int op = P(PC_REDUCE_OP);
  uint base = 0u, rest = o;
  for (int d = P(PC_REDUCE_KEPT_RANK) - 1; d >= 0; --d) {
    uint dim = uint(P(PC_REDUCE_KEPT_DIMS + d));
    base += (rest % dim) * uint(P(PC_REDUCE_KEPT_STRIDES + d));
    rest /= dim;
  }
  float init = (op == REDUCE_SUM || op == REDUCE_MEAN || op == REDUCE_VAR) ? 0.0
              : op == REDUCE_PROD ? 1.0
              : uintBitsToFloat(op == REDUCE_AMAX ? 0xff800000u : 0x7f800000u);
  float acc = init;
  uint count = uint(P(PC_REDUCE_COUNT));
  for (uint r = t; r < count; r += 64u) acc = combine(op, acc, load(element(base, r)));
  part[t] = acc;
  barrier();
  for (uint s = 32u; s > 0u; s >>= 1) {
    if (t < s) part[t] = combine(op, part[t], part[t + s]);
    barrier();
  }
  float total = part[0];
  if (op == REDUCE_VAR) {
    float mean = total / float(count);
    barrier();
    float q = 0.0;
    for (uint r = t; r < count; r += 64u) { float d = load(element(base, r)) - mean; q += d * d; }
    part[t] = q;
    barrier();
    for (uint s = 32u; s > 0u; s >>= 1) {
      if (t < s) part[t] += part[t + s];
      barrier();
    }
    if (t == 0u) store(o, part[0] / max(0.0, float(count) - PF(PC_REDUCE_CORRECTION)));
    return;
  }
  if (t == 0u) store(o, op == REDUCE_MEAN ? total / float(count) : total);
}

// One 64-wide workgroup per output element: sum / mean / amax / amin / prod / var over the
// reduced dims (up to 6 kept and 6 reduced, each with its input stride). NaN propagates
// through amax/amin. var is two-pass (mean, then squared deviations) divided by
// max(0, count - correction).
// p: [0] n_out, [1] kept rank, [2..7] kept dims, [8..13] kept strides, [14] reduced rank,
//    [15..20] reduced dims, [21..26] reduced strides, [27] reduced count,
//    [28] op (0 sum, 1 mean, 2 amax, 3 amin, 4 prod, 5 var), [29] correction (f32 bits).
#version 450
#include "common.glsl"
layout(local_size_x = 64) in;
#ifdef BOOL_IO
// any / all: bool words in and out; any is amax (op 2) and all is amin (op 3) over 0/1.
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
  if (op <= 1 || op == 5) return u + v;
  if (op == 4) return u * v;
  if (isnan(u)) return u;
  if (isnan(v)) return v;
  return op == 2 ? max(u, v) : min(u, v);
}

// Input offset of reduced element r of the output whose first element is at `base`.
uint element(uint base, uint r) {
  uint off = base;
  for (int d = P(14) - 1; d >= 0; --d) {
    uint dim = uint(P(15 + d));
    off += (r % dim) * uint(P(21 + d));
    r /= dim;
  }
  return off;
}

void main() {
  uint o = linear_group();
  if (o >= uint(P(0))) return;
  uint t = gl_LocalInvocationID.x;
  int op = P(28);
  uint base = 0u, rest = o;
  for (int d = P(1) - 1; d >= 0; --d) {
    uint dim = uint(P(2 + d));
    base += (rest % dim) * uint(P(8 + d));
    rest /= dim;
  }
  float init = (op <= 1 || op == 5) ? 0.0 : op == 4 ? 1.0 : uintBitsToFloat(op == 2 ? 0xff800000u : 0x7f800000u);
  float acc = init;
  uint count = uint(P(27));
  for (uint r = t; r < count; r += 64u) acc = combine(op, acc, load(element(base, r)));
  part[t] = acc;
  barrier();
  for (uint s = 32u; s > 0u; s >>= 1) {
    if (t < s) part[t] = combine(op, part[t], part[t + s]);
    barrier();
  }
  float total = part[0];
  if (op == 5) {
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
    if (t == 0u) store(o, part[0] / max(0.0, float(count) - PF(29)));
    return;
  }
  if (t == 0u) store(o, op == 1 ? total / float(count) : total);
}

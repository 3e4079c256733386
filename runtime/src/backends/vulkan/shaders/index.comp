// Indexed reads with range checks (indices are i32 on the device). An out-of-range index
// writes 0 and records (flag, position, value) in the error buffer the host checks.
// mode 0 (index_select / embedding): out[o, k, q] = x[o, idx[k], q] over [outer, n_idx, inner].
// mode 1 (gather): out has idx's shape; x offset = sum over d != dim of k_d * xstride_d
//   + idx * xstride_dim.
// p: [0] n_out, [1] mode, [2] dim size, mode 0: [3] n_idx, [4] inner;
//    mode 1: [3] rank, [4] dim, [5..10] out dims, [11..16] x strides.
#version 450
#include "common.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer X { uint x[]; };
layout(std430, binding = 1) readonly buffer I { int idx[]; };
layout(std430, binding = 2) writeonly buffer O { uint o[]; };
layout(std430, binding = 3) buffer E { uint err[]; };
void main() {
  uint i = linear_id();
  if (i >= uint(P(0))) return;
  int size = P(2);
  uint src;
  int v;
  uint pos;
  if (P(1) == 0) {
    uint inner = uint(P(4)), nidx = uint(P(3));
    uint q = i % inner;
    uint k = (i / inner) % nidx;
    uint outer = i / (inner * nidx);
    pos = k;
    v = idx[k];
    src = (outer * uint(size) + uint(v)) * inner + q;
  } else {
    pos = i;
    v = idx[i];
    uint off = 0u, rest = i;
    int dim = P(4);
    for (int d = P(3) - 1; d >= 0; --d) {
      uint n = uint(P(5 + d));
      uint k = rest % n;
      rest /= n;
      if (d != dim) off += k * uint(P(11 + d));
    }
    src = off + uint(v) * uint(P(11 + dim));
  }
  if (v < 0 || v >= size) {
    if (atomicExchange(err[0], 1u) == 0u) { err[1] = pos; err[2] = uint(v); }
    o[i] = 0u;
    return;
  }
  o[i] = x[src];
}

// Indexed reads with range checks (indices are i32 on the device). An out-of-range index
// writes 0 and records (flag, position, value) in the error buffer the host checks.
// INDEX_SELECT (index_select / embedding): out[o, k, q] = x[o, idx[k], q] over
//   [outer, n_idx, inner].
// INDEX_GATHER (gather): out has idx's shape; x offset = sum over d != dim of
//   k_d * xstride_d + idx * xstride_dim.
// Push constants: PC_INDEX_* (both modes), PC_INDEX_COUNT / PC_INDEX_INNER (select),
// PC_GATHER_* (gather).
#version 450
#include "common.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer X { uint x[]; };
layout(std430, binding = 1) readonly buffer I { int idx[]; };
layout(std430, binding = 2) writeonly buffer O { uint o[]; };
layout(std430, binding = 3) buffer E { uint err[]; };
void main() {
  uint i = linear_id();
  if (i >= uint(P(PC_INDEX_N))) return;
  int size = P(PC_INDEX_DIM_SIZE);
  uint src;
  int v;
  uint pos;
  if (P(PC_INDEX_MODE) == INDEX_SELECT) {
    uint inner = uint(P(PC_INDEX_INNER)), nidx = uint(P(PC_INDEX_COUNT));
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
    int dim = P(PC_GATHER_DIM);
    for (int d = P(PC_GATHER_RANK) - 1; d >= 0; --d) {
      uint n = uint(P(PC_GATHER_SHAPE + d));
      uint k = rest % n;
      rest /= n;
      if (d != dim) off += k * uint(P(PC_GATHER_X_STRIDES + d));
    }
    src = off + uint(v) * uint(P(PC_GATHER_X_STRIDES + dim));
  }
  if (v < 0 || v >= size) {
    if (atomicExchange(err[0], 1u) == 0u) { err[1] = pos; err[2] = uint(v); }
    o[i] = 0u;
    return;
  }
  o[i] = x[src];
}

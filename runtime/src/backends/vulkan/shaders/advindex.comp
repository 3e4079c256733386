// index(x, i0, i1, i2; dims): advanced indexing by up to ADVINDEX_MAX_INDICES index tensors
// on adjacent dims starting at `first`, broadcast together to bshape (up to
// ADVINDEX_MAX_RANK dims). Out = x.shape[:first] + bshape + x.shape[first+k:], seen as
// [outer, nb, post]. Negative indices count from the end; an index outside [-size, size)
// writes 0 and sets the error buffer. Push constants: PC_ADVINDEX_* (index j's strides over
// bshape at PC_ADVINDEX_STRIDES + ADVINDEX_MAX_RANK * j, 0 = broadcast).
#version 450
#include "common.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer X { uint x[]; };
layout(std430, binding = 1) writeonly buffer O { uint o[]; };
layout(std430, binding = 2) buffer E { uint err[]; };
layout(std430, binding = 3) readonly buffer I0 { int i0[]; };
layout(std430, binding = 4) readonly buffer I1 { int i1[]; };
layout(std430, binding = 5) readonly buffer I2 { int i2[]; };

int read_index(int j, uint off) { return j == 0 ? i0[off] : j == 1 ? i1[off] : i2[off]; }

void main() {
  uint i = linear_id();
  if (i >= uint(P(PC_ADVINDEX_N))) return;
  uint post = uint(P(PC_ADVINDEX_POST)), nb = uint(P(PC_ADVINDEX_NB));
  uint q = i % post;
  uint b = (i / post) % nb;
  uint outer = i / (post * nb);
  uint src = outer * uint(P(PC_ADVINDEX_BLOCK)) + q;
  for (int j = 0; j < P(PC_ADVINDEX_K); ++j) {
    uint off = 0u, rest = b;
    for (int d = P(PC_ADVINDEX_BRANK) - 1; d >= 0; --d) {
      uint dim = uint(P(PC_ADVINDEX_BSHAPE + d));
      off += (rest % dim) * uint(P(PC_ADVINDEX_STRIDES + ADVINDEX_MAX_RANK * j + d));
      rest /= dim;
    }
    int v = read_index(j, off);
    int size = P(PC_ADVINDEX_SIZES + j);
    if (v < -size || v >= size) {
      if (atomicExchange(err[0], 1u) == 0u) { err[1] = b; err[2] = uint(v); }
      o[i] = 0u;
      return;
    }
    if (v < 0) v += size;
    src += uint(v) * uint(P(PC_ADVINDEX_X_STRIDES + j));
  }
  o[i] = x[src];
}

// index(x, i0, i1, i2; dims): advanced indexing by up to 3 index tensors on adjacent dims
// starting at `first`, broadcast together to bshape (up to 4 dims). Out = x.shape[:first]
// + bshape + x.shape[first+k:], seen as [outer, nb, post]. Negative indices count from the
// end; an index outside [-size, size) writes 0 and sets the error buffer.
// p: [0] n_out, [1] k, [2] post, [3] block (= prod x.shape[first:]), [4] nb, [5] brank,
//    [6..9] bshape, [10..21] index j's strides over bshape (4 per j, 0 = broadcast),
//    [22..24] sizes of the indexed dims, [25..27] x strides of the indexed dims.
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
  if (i >= uint(P(0))) return;
  uint post = uint(P(2)), nb = uint(P(4));
  uint q = i % post;
  uint b = (i / post) % nb;
  uint outer = i / (post * nb);
  uint src = outer * uint(P(3)) + q;
  for (int j = 0; j < P(1); ++j) {
    uint off = 0u, rest = b;
    for (int d = P(5) - 1; d >= 0; --d) {
      uint dim = uint(P(6 + d));
      off += (rest % dim) * uint(P(10 + 4 * j + d));
      rest /= dim;
    }
    int v = read_index(j, off);
    int size = P(22 + j);
    if (v < -size || v >= size) {
      if (atomicExchange(err[0], 1u) == 0u) { err[1] = b; err[2] = uint(v); }
      o[i] = 0u;
      return;
    }
    if (v < 0) v += size;
    src += uint(v) * uint(P(25 + j));
  }
  o[i] = x[src];
}

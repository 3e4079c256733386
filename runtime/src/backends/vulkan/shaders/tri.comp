// tril / triu over the last two dims (32-bit words): keep x where col - row <= diagonal
// (tril) or col - row >= diagonal (triu), else 0.
// Push constants: PC_TRI_*.
#version 450
#include "common.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer I { uint x[]; };
layout(std430, binding = 1) writeonly buffer O { uint o[]; };
void main() {
  uint i = linear_id();
  if (i >= uint(P(PC_TRI_N))) return;
  uint cols = uint(P(PC_TRI_COLS));
  int col = int(i % cols);
  int row = int((i / cols) % uint(P(PC_TRI_ROWS)));
  int k = col - row;
  int diagonal = P(PC_TRI_DIAGONAL);
  bool keep = P(PC_TRI_UPPER) != 0 ? k >= diagonal : k <= diagonal;
  o[i] = keep ? x[i] : 0u;
}

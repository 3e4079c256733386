// tril / triu over the last two dims (32-bit words): keep x where col - row <= diagonal
// (tril) or col - row >= diagonal (triu), else 0.
// p: [0] n, [1] rows, [2] cols, [3] diagonal, [4] upper.
#version 450
#include "common.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer I { uint x[]; };
layout(std430, binding = 1) writeonly buffer O { uint o[]; };
void main() {
  uint i = linear_id();
  if (i >= uint(P(0))) return;
  int col = int(i % uint(P(2)));
  int row = int((i / uint(P(2))) % uint(P(1)));
  int k = col - row;
  bool keep = P(4) != 0 ? k >= P(3) : k <= P(3);
  o[i] = keep ? x[i] : 0u;
}

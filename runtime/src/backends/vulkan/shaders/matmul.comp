// Tiled C[b] = A[b] (M x K) * B[b] (K x N, or N x K when transposed) + bias[N].
// A 16 x 16 workgroup computes a (16 TM) x (16 TM) tile of C through shared memory, BK = 16
// deep; each invocation holds TM x TM accumulators. Batch index = workgroup z (plus
// PC_MATMUL_Z_OFFSET); batch dims (up to MATMUL_MAX_BATCH_DIMS, broadcast with 0 strides)
// give A's and B's offsets. Push constants: PC_MATMUL_*.
#version 450
#include "common.glsl"
#ifndef TM
#define TM 4
#endif
#define BT (16 * TM)
#define BK 16
layout(local_size_x = 16, local_size_y = 16) in;
layout(std430, binding = 0) readonly buffer A { float a[]; };
layout(std430, binding = 1) readonly buffer B { float b[]; };
layout(std430, binding = 2) writeonly buffer C { float c[]; };
layout(std430, binding = 3) readonly buffer Bias { float bias[]; };

shared float As[BK][BT + 1];
shared float Bs[BK][BT + 1];

void main() {
  uint tx = gl_LocalInvocationID.x, ty = gl_LocalInvocationID.y;
  uint tid = ty * 16u + tx;
  uint M = uint(P(PC_MATMUL_M)), N = uint(P(PC_MATMUL_N)), K = uint(P(PC_MATMUL_K));
  bool transB = P(PC_MATMUL_TRANS_B) != 0;
  uint row0 = gl_WorkGroupID.y * BT, col0 = gl_WorkGroupID.x * BT;
  uint batch = gl_WorkGroupID.z + uint(P(PC_MATMUL_Z_OFFSET));
  uint aoff = 0u, boff = 0u, rest = batch;
  for (int d = P(PC_MATMUL_BATCH_RANK) - 1; d >= 0; --d) {
    uint dim = uint(P(PC_MATMUL_BATCH_DIMS + d));
    uint k = rest % dim;
    rest /= dim;
    aoff += k * uint(P(PC_MATMUL_A_BATCH_STRIDES + d));
    boff += k * uint(P(PC_MATMUL_B_BATCH_STRIDES + d));
  }
  uint coff = batch * M * N;

  float acc[TM][TM];
  for (int i = 0; i < TM; ++i)
    for (int j = 0; j < TM; ++j) acc[i][j] = 0.0;

  for (uint k0 = 0u; k0 < K; k0 += BK) {
    for (uint e = tid; e < BT * BK; e += 256u) {
      uint m = e / BK, kk = e % BK;
      uint gr = row0 + m, gk = k0 + kk;
      As[kk][m] = (gr < M && gk < K) ? a[aoff + gr * K + gk] : 0.0;
      uint n, kb;
      if (transB) { n = e / BK; kb = e % BK; } else { kb = e / BT; n = e % BT; }
      uint gc = col0 + n, gkb = k0 + kb;
      float v = 0.0;
      if (gc < N && gkb < K) v = transB ? b[boff + gc * K + gkb] : b[boff + gkb * N + gc];
      Bs[kb][n] = v;
    }
    barrier();
    for (uint kk = 0u; kk < BK; ++kk) {
      float av[TM], bv[TM];
      for (int i = 0; i < TM; ++i) av[i] = As[kk][ty + 16u * uint(i)];
      for (int j = 0; j < TM; ++j) bv[j] = Bs[kk][tx + 16u * uint(j)];
      for (int i = 0; i < TM; ++i)
        for (int j = 0; j < TM; ++j) acc[i][j] += av[i] * bv[j];
    }
    barrier();
  }
  for (int i = 0; i < TM; ++i) {
    uint r = row0 + ty + 16u * uint(i);
    if (r >= M) continue;
    for (int j = 0; j < TM; ++j) {
      uint col = col0 + tx + 16u * uint(j);
      if (col >= N) continue;
      c[coff + r * N + col] = acc[i][j] + (P(PC_MATMUL_HAS_BIAS) != 0 ? bias[col] : 0.0);
    }
  }
}

// 2-D convolution as an implicit GEMM per group g (workgroup z):
//   C[o][n] = sum_k W[g opg + o][k] * X(n, k),  o < opg, n < N * OH * OW, k < cpg * KH * KW,
// where X(n, k) reads the input pixel that output position n and kernel tap k meet (0 in
// the padding): no im2col buffer. Tiled exactly like matmul.comp (16 x 16 invocations,
// (16 TM)^2 tile, BK = 16 through shared memory).
// Push constants: PC_CONVGEMM_*.
#version 450
#include "common.glsl"
#ifndef TM
#define TM 4
#endif
#define BT (16 * TM)
#define BK 16
layout(local_size_x = 16, local_size_y = 16) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer Wt { float w[]; };
layout(std430, binding = 2) writeonly buffer Y { float y[]; };
layout(std430, binding = 3) readonly buffer Bias { float bias[]; };

shared float As[BK][BT + 1];
shared float Bs[BK][BT + 1];

void main() {
  uint tx = gl_LocalInvocationID.x, ty = gl_LocalInvocationID.y;
  uint tid = ty * 16u + tx;
  uint M = uint(P(PC_CONVGEMM_OPG)), N = uint(P(PC_CONVGEMM_COLS)), K = uint(P(PC_CONVGEMM_K));
  int C = P(PC_CONVGEMM_C), H = P(PC_CONVGEMM_H), W = P(PC_CONVGEMM_W);
  int OH = P(PC_CONVGEMM_OH), OW = P(PC_CONVGEMM_OW), KH = P(PC_CONVGEMM_KH), KW = P(PC_CONVGEMM_KW);
  uint g = gl_WorkGroupID.z;
  int cpg = int(K) / (KH * KW);
  uint row0 = gl_WorkGroupID.y * BT, col0 = gl_WorkGroupID.x * BT;
  uint woff = g * M * K;
  int plane = OH * OW;

  float acc[TM][TM];
  for (int i = 0; i < TM; ++i)
    for (int j = 0; j < TM; ++j) acc[i][j] = 0.0;

  for (uint k0 = 0u; k0 < K; k0 += BK) {
    for (uint e = tid; e < BT * BK; e += 256u) {
      uint m = e / BK, kk = e % BK;
      uint gr = row0 + m, gk = k0 + kk;
      As[kk][m] = (gr < M && gk < K) ? w[woff + gr * K + gk] : 0.0;
      uint kb = e / BT, n = e % BT;
      uint gc = col0 + n, gkb = k0 + kb;
      float v = 0.0;
      if (gc < N && gkb < K) {
        int img = int(gc) / plane, rem = int(gc) % plane;
        int oy = rem / OW, ox = rem % OW;
        int c = int(gkb) / (KH * KW), r = int(gkb) % (KH * KW);
        int iy = oy * P(PC_CONVGEMM_STRIDE_H) - P(PC_CONVGEMM_PAD_H) + (r / KW) * P(PC_CONVGEMM_DIL_H);
        int ix = ox * P(PC_CONVGEMM_STRIDE_W) - P(PC_CONVGEMM_PAD_W) + (r % KW) * P(PC_CONVGEMM_DIL_W);
        if (iy >= 0 && iy < H && ix >= 0 && ix < W) {
          v = x[((img * C + int(g) * cpg + c) * H + iy) * W + ix];
        }
      }
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
    uint o = g * M + r;
    for (int j = 0; j < TM; ++j) {
      uint col = col0 + tx + 16u * uint(j);
      if (col >= N) continue;
      int img = int(col) / plane, rem = int(col) % plane;
      y[(uint(img) * uint(P(PC_CONVGEMM_O)) + o) * uint(plane) + uint(rem)] = acc[i][j] + (P(PC_CONVGEMM_HAS_BIAS) != 0 ? bias[o] : 0.0);
    }
  }
}

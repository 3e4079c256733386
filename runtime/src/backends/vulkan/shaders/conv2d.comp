// Direct 2-D convolution, one invocation per output element (groups and depthwise
// included). x [N, C, H, W], w [O, C/groups, KH, KW], bias [O]?, out [N, O, OH, OW].
// Push constants: PC_CONV2D_*.
#version 450
#include "common.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer W { float w[]; };
layout(std430, binding = 2) writeonly buffer Y { float y[]; };
layout(std430, binding = 3) readonly buffer Bias { float bias[]; };
void main() {
  uint i = linear_id();
  if (i >= uint(P(PC_CONV2D_N))) return;
  int C = P(PC_CONV2D_C), H = P(PC_CONV2D_H), W = P(PC_CONV2D_W), O = P(PC_CONV2D_O);
  int OH = P(PC_CONV2D_OH), OW = P(PC_CONV2D_OW), KH = P(PC_CONV2D_KH), KW = P(PC_CONV2D_KW);
  int ox = int(i % uint(OW));
  int oy = int((i / uint(OW)) % uint(OH));
  int o = int((i / uint(OW * OH)) % uint(O));
  int n = int(i / uint(OW * OH * O));
  int cpg = C / P(PC_CONV2D_GROUPS), opg = O / P(PC_CONV2D_GROUPS);
  int g = o / opg;
  int iy0 = oy * P(PC_CONV2D_STRIDE_H) - P(PC_CONV2D_PAD_H), ix0 = ox * P(PC_CONV2D_STRIDE_W) - P(PC_CONV2D_PAD_W);
  float acc = 0.0;
  for (int c = 0; c < cpg; ++c) {
    int xbase = (n * C + g * cpg + c) * H * W;
    int wbase = (o * cpg + c) * KH * KW;
    for (int ky = 0; ky < KH; ++ky) {
      int iy = iy0 + ky * P(PC_CONV2D_DIL_H);
      if (iy < 0 || iy >= H) continue;
      for (int kx = 0; kx < KW; ++kx) {
        int ix = ix0 + kx * P(PC_CONV2D_DIL_W);
        if (ix < 0 || ix >= W) continue;
        acc += x[xbase + iy * W + ix] * w[wbase + ky * KW + kx];
      }
    }
  }
  if (P(PC_CONV2D_HAS_BIAS) != 0) acc += bias[o];
  y[i] = acc;
}

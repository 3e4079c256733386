// Direct 2-D convolution, one invocation per output element (groups and depthwise
// included). x [N, C, H, W], w [O, C/groups, KH, KW], bias [O]?, out [N, O, OH, OW].
// p: [0] n_out, [1] C, [2] H, [3] W, [4] O, [5] OH, [6] OW, [7] KH, [8] KW, [9] sh,
//    [10] sw, [11] ph, [12] pw, [13] dh, [14] dw, [15] groups, [16] has_bias.
#version 450
#include "common.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer W { float w[]; };
layout(std430, binding = 2) writeonly buffer Y { float y[]; };
layout(std430, binding = 3) readonly buffer Bias { float bias[]; };
void main() {
  uint i = linear_id();
  if (i >= uint(P(0))) return;
  int C = P(1), H = P(2), W = P(3), O = P(4), OH = P(5), OW = P(6), KH = P(7), KW = P(8);
  int ox = int(i % uint(OW));
  int oy = int((i / uint(OW)) % uint(OH));
  int o = int((i / uint(OW * OH)) % uint(O));
  int n = int(i / uint(OW * OH * O));
  int cpg = C / P(15), opg = O / P(15);
  int g = o / opg;
  int iy0 = oy * P(9) - P(11), ix0 = ox * P(10) - P(12);
  float acc = 0.0;
  for (int c = 0; c < cpg; ++c) {
    int xbase = (n * C + g * cpg + c) * H * W;
    int wbase = (o * cpg + c) * KH * KW;
    for (int ky = 0; ky < KH; ++ky) {
      int iy = iy0 + ky * P(13);
      if (iy < 0 || iy >= H) continue;
      for (int kx = 0; kx < KW; ++kx) {
        int ix = ix0 + kx * P(14);
        if (ix < 0 || ix >= W) continue;
        acc += x[xbase + iy * W + ix] * w[wbase + ky * KW + kx];
      }
    }
  }
  if (P(16) != 0) acc += bias[o];
  y[i] = acc;
}

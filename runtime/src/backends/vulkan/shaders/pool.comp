// 2-D pooling over planes [P, H, W] -> [P, OH, OW], PyTorch's windows (see cpu pool.cpp).
// mode 0 max (dilation; NaN wins), 1 avg (count_include_pad), 2 adaptive avg, 3 adaptive max.
// p: [0] n_out, [1] H, [2] W, [3] OH, [4] OW, [5] kh, [6] kw, [7] sh, [8] sw, [9] ph, [10] pw,
//    [11] dh, [12] dw, [13] mode, [14] count_include_pad.
#version 450
#include "common.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer Y { float y[]; };

int first_valid(int start, int step) { return start >= 0 ? start : start + ((-start + step - 1) / step) * step; }

void main() {
  uint i = linear_id();
  if (i >= uint(P(0))) return;
  int H = P(1), W = P(2), OH = P(3), OW = P(4);
  int ox = int(i % uint(OW));
  int oy = int((i / uint(OW)) % uint(OH));
  int plane = int(i / uint(OW * OH));
  int base = plane * H * W;
  int mode = P(13);
  int y0, y1, x0, x1, dy = 1, dx = 1;
  if (mode == 0) {
    int ys = oy * P(7) - P(9), xs = ox * P(8) - P(10);
    dy = P(11); dx = P(12);
    y1 = min(ys + (P(5) - 1) * dy + 1, H);
    x1 = min(xs + (P(6) - 1) * dx + 1, W);
    y0 = first_valid(ys, dy);
    x0 = first_valid(xs, dx);
  } else if (mode == 1) {
    y0 = oy * P(7) - P(9);
    y1 = min(y0 + P(5), H + P(9));
    x0 = ox * P(8) - P(10);
    x1 = min(x0 + P(6), W + P(10));
    int pool_size = (y1 - y0) * (x1 - x0);
    y0 = max(y0, 0); y1 = min(y1, H);
    x0 = max(x0, 0); x1 = min(x1, W);
    if (y0 >= y1 || x0 >= x1) { y[i] = 0.0; return; }
    float s = 0.0;
    for (int yy = y0; yy < y1; ++yy)
      for (int xx = x0; xx < x1; ++xx) s += x[base + yy * W + xx];
    int divisor = P(14) != 0 ? pool_size : (y1 - y0) * (x1 - x0);
    y[i] = s / float(divisor);
    return;
  } else {
    y0 = oy * H / OH; y1 = ((oy + 1) * H + OH - 1) / OH;
    x0 = ox * W / OW; x1 = ((ox + 1) * W + OW - 1) / OW;
    if (mode == 2) {
      float s = 0.0;
      for (int yy = y0; yy < y1; ++yy)
        for (int xx = x0; xx < x1; ++xx) s += x[base + yy * W + xx];
      y[i] = s / float((y1 - y0) * (x1 - x0));
      return;
    }
  }
  float m = uintBitsToFloat(0xff800000u);  // -inf
  for (int yy = y0; yy < y1; yy += dy)
    for (int xx = x0; xx < x1; xx += dx) {
      float v = x[base + yy * W + xx];
      m = (v > m || isnan(v)) ? v : m;
      if (isnan(m)) { y[i] = m; return; }
    }
  y[i] = m;
}

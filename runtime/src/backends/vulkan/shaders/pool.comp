// 2-D pooling over planes [P, H, W] -> [P, OH, OW], PyTorch's windows (see cpu pool.cpp).
// PC_POOL_MODE: POOL_MAX (dilation; NaN wins), POOL_AVG (count_include_pad),
// POOL_ADAPTIVE_AVG, POOL_ADAPTIVE_MAX. Push constants: PC_POOL_*.
#version 450
#include "common.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer Y { float y[]; };

int first_valid(int start, int step) { return start >= 0 ? start : start + ((-start + step - 1) / step) * step; }

void main() {
  uint i = linear_id();
  if (i >= uint(P(PC_POOL_N))) return;
  int H = P(PC_POOL_H), W = P(PC_POOL_W), OH = P(PC_POOL_OH), OW = P(PC_POOL_OW);
  int KH = P(PC_POOL_KH), KW = P(PC_POOL_KW), SH = P(PC_POOL_STRIDE_H), SW = P(PC_POOL_STRIDE_W);
  int PH = P(PC_POOL_PAD_H), PW = P(PC_POOL_PAD_W);
  int ox = int(i % uint(OW));
  int oy = int((i / uint(OW)) % uint(OH));
  int plane = int(i / uint(OW * OH));
  int base = plane * H * W;
  int mode = P(PC_POOL_MODE);
  int y0, y1, x0, x1, dy = 1, dx = 1;
  if (mode == POOL_MAX) {
    int ys = oy * SH - PH, xs = ox * SW - PW;
    dy = P(PC_POOL_DIL_H); dx = P(PC_POOL_DIL_W);
    y1 = min(ys + (KH - 1) * dy + 1, H);
    x1 = min(xs + (KW - 1) * dx + 1, W);
    y0 = first_valid(ys, dy);
    x0 = first_valid(xs, dx);
  } else if (mode == POOL_AVG) {
    y0 = oy * SH - PH;
    y1 = min(y0 + KH, H + PH);
    x0 = ox * SW - PW;
    x1 = min(x0 + KW, W + PW);
    int pool_size = (y1 - y0) * (x1 - x0);
    y0 = max(y0, 0); y1 = min(y1, H);
    x0 = max(x0, 0); x1 = min(x1, W);
    if (y0 >= y1 || x0 >= x1) { y[i] = 0.0; return; }
    float s = 0.0;
    for (int yy = y0; yy < y1; ++yy)
      for (int xx = x0; xx < x1; ++xx) s += x[base + yy * W + xx];
    int divisor = P(PC_POOL_COUNT_INCLUDE_PAD) != 0 ? pool_size : (y1 - y0) * (x1 - x0);
    y[i] = s / float(divisor);
    return;
  } else {
    y0 = oy * H / OH; y1 = ((oy + 1) * H + OH - 1) / OH;
    x0 = ox * W / OW; x1 = ((ox + 1) * W + OW - 1) / OW;
    if (mode == POOL_ADAPTIVE_AVG) {
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

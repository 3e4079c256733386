// index_put(x, values, index; dims=[dim], accumulate=false) on 32-bit words, with one index
// tensor (any rank; its elements in order). The indexed shape x.shape[:dim] + index.shape +
// x.shape[dim+1:] is walked as [pre, count, post]; `values` is dense in it. Element i goes
// to x offset (p * size + index[c]) * post + q; an index outside [-size, size) sets the error
// buffer (word 3: PC_INDEXPUT_TAG, naming the node for the host's message). Modes:
//   INDEXPUT_SAVE     the update is in place (x is the output): before anything is written,
//                     undo[2i] = the offset element i will write, undo[2i+1] = the word there
//                     (0xffffffff and nothing for an index out of range);
//   INDEXPUT_WRITE    out[offset] = values[i], unless the error buffer is set (a SAVE or any
//                     earlier range check of the segment failed): then nothing is written;
//   INDEXPUT_RESTORE  out[undo[2i]] = undo[2i+1] for the recorded offsets (a failed run).
// Push constants: PC_INDEXPUT_*.
#version 450
#include "common.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) buffer X { uint x[]; };
layout(std430, binding = 1) readonly buffer V { uint v[]; };
layout(std430, binding = 2) readonly buffer I { int idx[]; };
layout(std430, binding = 3) buffer E { uint err[]; };
layout(std430, binding = 4) buffer U { uint undo[]; };

void main() {
  uint i = linear_id();
  if (i >= uint(P(PC_INDEXPUT_N))) return;
  int mode = P(PC_INDEXPUT_MODE);
  if (mode == INDEXPUT_RESTORE) {
    uint at = undo[2u * i];
    if (at < uint(P(PC_INDEXPUT_X_N))) x[at] = undo[2u * i + 1u];
    return;
  }
  if (mode == INDEXPUT_WRITE && err[0] != 0u) return;
  uint post = uint(P(PC_INDEXPUT_POST)), count = uint(P(PC_INDEXPUT_COUNT));
  uint q = i % post;
  uint c = (i / post) % count;
  uint pre = i / (post * count);
  int size = P(PC_INDEXPUT_SIZE);
  int r = idx[c];
  if (r < -size || r >= size) {
    if (atomicExchange(err[0], 1u) == 0u) {
      err[1] = c;
      err[2] = uint(r);
      err[3] = uint(P(PC_INDEXPUT_TAG));
    }
    if (mode == INDEXPUT_SAVE) undo[2u * i] = 0xffffffffu;
    return;
  }
  if (r < 0) r += size;
  uint at = (pre * uint(size) + uint(r)) * post + q;
  if (mode == INDEXPUT_SAVE) {
    undo[2u * i] = at;
    undo[2u * i + 1u] = x[at];
    return;
  }
  x[at] = v[i];
}

// Shared by every Kiln compute shader. Sizes arrive in one 128-byte push-constant block of
// KILN_PUSH_WORDS ints (floats as intBitsToFloat), so one pipeline serves every shape; the
// slot of each field and the op codes are named in shader_abi.h, which the lowering
// (lower_*.cpp) includes too.
#extension GL_GOOGLE_include_directive : enable
#include "shader_abi.h"

layout(push_constant) uniform PushConstants { int p[KILN_PUSH_WORDS]; } pc;

#define P(i) pc.p[i]
#define PF(i) intBitsToFloat(pc.p[i])

// Linear invocation index for 1-D work dispatched as a 2-D grid (x is capped at 65535
// groups; the host spreads the rest over y).
uint linear_id() {
  return gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
}
// Linear workgroup index for one-workgroup-per-item kernels dispatched as a 2-D grid.
uint linear_group() { return gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x; }

bool is_nan(float v) { return isnan(v); }

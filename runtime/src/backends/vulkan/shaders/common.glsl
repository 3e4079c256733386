// Shared by every Kiln compute shader. Sizes arrive in one 128-byte push-constant block of
// 32 ints (floats as intBitsToFloat), so one pipeline serves every shape; the layout of
// each shader's p[] is documented at its top and mirrored in ops.cpp.
#extension GL_GOOGLE_include_directive : enable

layout(push_constant) uniform PushConstants { int p[32]; } pc;

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

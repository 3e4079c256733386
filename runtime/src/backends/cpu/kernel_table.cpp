// The OpKind -> CPU kernel table, generated from codegen/ops.def by the X-macro: an op
// added to ops.def without a kernel in kernels/kernels.h stops this file compiling.
#include <array>
#include <cstddef>
#include <string>

#include "backends/cpu/kernel.h"
#include "backends/cpu/kernels/conv_nchwc_kernels.h"
#include "backends/cpu/kernels/simd.h"
#include "backends/cpu/kernels/kernels.h"
#include "backends/cpu/kernels/layout_kernels.h"

namespace kiln::cpu {
namespace {

constexpr std::array<KernelFn, kOpCount> kKernels = {
#define KILN_OP(Enum, name, min_in, max_in, num_out, attrs) kernels::Enum,
#include "ops.def"
#undef KILN_OP
};

// Selects, not std::min/max (which compiled to branches: 5 ns per element on data of
// mixed signs); NaN stays NaN.
inline float relu6(float v) {
  v = v < 0.0f ? 0.0f : v;
  return v > 6.0f ? 6.0f : v;
}

// y[i] = f(y[i]) in blocks of 8 with a fixed trip count, which GCC's -O2 cost model
// vectorizes (a plain loop over n it leaves scalar).
template <typename F>
void map_in_place(float* y, std::int64_t n, F f) {
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) y[i + j] = f(y[i + j]);
  }
  for (; i < n; ++i) y[i] = f(y[i]);
}

}  // namespace

std::string kernel_isa_summary() {
  const GemmIsa gemm = active_gemm_isa();
  const char* gemm_name = gemm == GemmIsa::kAvx512 ? "avx512" : gemm == GemmIsa::kAvx2 ? "avx2" : "baseline";
  return std::string("gemm ") + gemm_name + ", conv " + nchwc::dense_kernels().name + ", vector " + kernels::simd().name;
}

bool kernel_fuses(OpKind op, FusedActivation act) {
  if (act == FusedActivation::kNone) return false;
  return op == OpKind::Linear || op == OpKind::Conv2d || op == OpKind::BatchNorm;
}

void apply_activation(FusedActivation act, float* y, std::int64_t n) {
  const kernels::SimdKernels& k = kernels::simd();
  switch (act) {
    case FusedActivation::kNone: return;
    case FusedActivation::kRelu: return map_in_place(y, n, [](float v) { return v < 0.0f ? 0.0f : v; });
    case FusedActivation::kGeluErf: return k.gelu_erf(y, y, n);
    case FusedActivation::kGeluTanh: return k.gelu_tanh(y, y, n);
    case FusedActivation::kSilu: return k.silu(y, y, n);
    case FusedActivation::kRelu6: return map_in_place(y, n, [](float v) { return relu6(v); });
    case FusedActivation::kHardswish: return map_in_place(y, n, [](float v) { return v * relu6(v + 3.0f) / 6.0f; });
    case FusedActivation::kHardsigmoid: return map_in_place(y, n, [](float v) { return relu6(v + 3.0f) / 6.0f; });
  }
}

const char* activation_name(FusedActivation act) {
  switch (act) {
    case FusedActivation::kNone: return "";
    case FusedActivation::kRelu: return "relu";
    case FusedActivation::kGeluErf: return "gelu";
    case FusedActivation::kGeluTanh: return "gelu_tanh";
    case FusedActivation::kSilu: return "silu";
    case FusedActivation::kRelu6: return "clamp";
    case FusedActivation::kHardswish: return "hardswish";
    case FusedActivation::kHardsigmoid: return "hardsigmoid";
  }
  return "";
}

Result<std::unique_ptr<PreparedWeights>> prepare_weights(OpKind op, int index, const TensorView& weight,
                                                         std::span<const AttrValue> attrs, bool blocked) {
  if (op == OpKind::Conv2d && index == 1) return kernels::conv2d_prepare(weight, attrs, blocked);
  return std::unique_ptr<PreparedWeights>();
}

std::uint64_t workspace_bytes(OpKind op, const PreparedWeights* prepared, std::span<const TensorView> in,
                              const TensorView& out, std::span<const AttrValue> attrs, bool in_blocked, bool out_blocked,
                              bool plain_residual, int threads) {
  if (op == OpKind::Conv2d) {
    return kernels::conv2d_workspace_bytes(prepared, in, out, attrs, in_blocked, out_blocked, plain_residual, threads);
  }
  return 0;
}

bool updates_in_place(OpKind op) { return op == OpKind::IndexPut; }

Status in_place_writes(OpKind op, std::span<const TensorView> in, std::span<const AttrValue> attrs,
                       std::vector<ElementRange>& writes) {
  if (op == OpKind::IndexPut) return kernels::index_put_writes(in, attrs, writes);
  return Status(StatusCode::kInternal, std::string(op_info(op).name) + " does not run in place");
}

KernelFn cpu_kernel(OpKind op) {
  const auto index = static_cast<std::size_t>(op);
  return index < kKernels.size() ? kKernels[index] : nullptr;
}

}  // namespace kiln::cpu

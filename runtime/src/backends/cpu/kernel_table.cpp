// The OpKind -> CPU kernel table, generated from codegen/ops.def by the X-macro: an op
// added to ops.def without a kernel in kernels/kernels.h stops this file compiling.
#include <algorithm>
#include <array>
#include <cstddef>

#include "backends/cpu/kernel.h"
#include "backends/cpu/kernels/simd.h"
#include "backends/cpu/kernels/kernels.h"

namespace kiln::cpu {
namespace {

constexpr std::array<KernelFn, kOpCount> kKernels = {
#define KILN_OP(Enum, name, min_in, max_in, num_out, attrs) kernels::Enum,
#include "ops.def"
#undef KILN_OP
};

}  // namespace

bool kernel_fuses(OpKind op, FusedActivation act) {
  if (act == FusedActivation::kNone) return false;
  return op == OpKind::Linear || op == OpKind::Conv2d;
}

void apply_activation(FusedActivation act, float* y, std::int64_t n) {
  const kernels::SimdKernels& k = kernels::simd();
  switch (act) {
    case FusedActivation::kNone: return;
    case FusedActivation::kRelu:
      for (std::int64_t i = 0; i < n; ++i) y[i] = y[i] < 0.0f ? 0.0f : y[i];  // NaN stays NaN
      return;
    case FusedActivation::kGeluErf: return k.gelu_erf(y, y, n);
    case FusedActivation::kGeluTanh: return k.gelu_tanh(y, y, n);
    case FusedActivation::kSilu: return k.silu(y, y, n);
    case FusedActivation::kRelu6:
      for (std::int64_t i = 0; i < n; ++i) y[i] = std::min(std::max(y[i], 0.0f), 6.0f);
      return;
    case FusedActivation::kHardswish:
      for (std::int64_t i = 0; i < n; ++i) y[i] = y[i] * std::min(std::max(y[i] + 3.0f, 0.0f), 6.0f) / 6.0f;
      return;
    case FusedActivation::kHardsigmoid:
      for (std::int64_t i = 0; i < n; ++i) y[i] = std::min(std::max(y[i] + 3.0f, 0.0f), 6.0f) / 6.0f;
      return;
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
                                                         std::span<const AttrValue> attrs) {
  if (op == OpKind::Conv2d && index == 1) return kernels::conv2d_prepare(weight, attrs);
  return std::unique_ptr<PreparedWeights>();
}

KernelFn cpu_kernel(OpKind op) {
  const auto index = static_cast<std::size_t>(op);
  return index < kKernels.size() ? kKernels[index] : nullptr;
}

}  // namespace kiln::cpu

// The OpKind -> CPU kernel table, generated from codegen/ops.def by the X-macro: an op
// added to ops.def without a kernel in kernels/kernels.h stops this file compiling.
#include <array>
#include <cstddef>

#include "backends/cpu/kernel.h"
#include "backends/cpu/kernels/kernels.h"

namespace kiln::cpu {
namespace {

constexpr std::array<KernelFn, kOpCount> kKernels = {
#define KILN_OP(Enum, name, min_in, max_in, num_out, attrs) kernels::Enum,
#include "ops.def"
#undef KILN_OP
};

}  // namespace

KernelFn cpu_kernel(OpKind op) {
  const auto index = static_cast<std::size_t>(op);
  return index < kKernels.size() ? kKernels[index] : nullptr;
}

}  // namespace kiln::cpu

#include "kernel/kernel.h"

#include "backends/cpu/gemm/gemm.h"

namespace kiln {

cpu::GemmActivation KernelContext::fused_activation() const { return cpu::GemmActivation::kNone; }

}  // namespace kiln

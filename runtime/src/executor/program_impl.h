// Internal state of a loaded Program.
#pragma once

#include <vector>

#include "backends/cpu/kernel.h"
#include "kiln/format/ops.h"
#include "kiln/runtime/program.h"

namespace kiln {

struct Program::Impl {
  std::vector<OpKind> kinds;            // per Program.op_names index
  std::vector<cpu::KernelFn> kernels;   // per Program.op_names index
};

}  // namespace kiln

// cast and identity.
#include <cstring>

#include "backends/cpu/kernels/common.h"
#include "backends/cpu/kernels/convert.h"
#include "backends/cpu/kernels/kernels.h"
#include "kernel/attrs.h"

namespace kiln::cpu::kernels {

constexpr IoSpec kUnaryIo{.min_inputs = 1, .max_inputs = 1, .num_outputs = 1};

Status Cast(KernelContext&, Inputs in, Outputs out, Attrs attrs) {
  KILN_RETURN_IF_ERROR(check_io("cast", in, out, kUnaryIo));
  KILN_ASSIGN_OR_RETURN(DType dtype, attr_dtype("cast", attrs, 0, "dtype"));
  KILN_RETURN_IF_ERROR(check_dtype("cast", "out", out[0], dtype));
  KILN_RETURN_IF_ERROR(check_same_shape("cast", "x", in[0], "out", out[0]));
  convert_buffer(in[0].data, in[0].dtype, out[0].data, dtype, in[0].numel());
  return Status::Ok();
}

Status Identity(KernelContext&, Inputs in, Outputs out, Attrs) {
  KILN_RETURN_IF_ERROR(check_io("identity", in, out, kUnaryIo));
  KILN_RETURN_IF_ERROR(check_dtype("identity", "out", out[0], in[0].dtype));
  KILN_RETURN_IF_ERROR(check_same_shape("identity", "x", in[0], "out", out[0]));
  if (in[0].data != out[0].data && in[0].nbytes() > 0) {
    std::memmove(out[0].data, in[0].data, in[0].nbytes());
  }
  return Status::Ok();
}

}  // namespace kiln::cpu::kernels

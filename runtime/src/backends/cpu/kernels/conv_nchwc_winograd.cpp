// Winograd F(4x4, 3x3) on NCHW8c: not yet written (see nchwc.h). Until it is,
// winograd_supported() says no, so the layout kernels run conv2d_dense.
#include "backends/cpu/kernels/nchwc.h"

namespace kiln::cpu::nchwc {

bool winograd_supported(const ConvShape&) { return false; }
bool winograd_preferred(const ConvShape&, std::int64_t, std::int64_t, std::int64_t, int) { return false; }
Result<std::unique_ptr<WinogradWeights>> prepare_winograd(const float*, const ConvShape&) {
  return Status(StatusCode::kUnsupported, "Winograd on NCHW8c is not built yet");
}
Status conv2d_winograd(const Act&, const WinogradWeights&, const ConvShape&, const Epilogue&, const Act&, ThreadPool&) {
  return Status(StatusCode::kUnsupported, "Winograd on NCHW8c is not built yet");
}

}  // namespace kiln::cpu::nchwc

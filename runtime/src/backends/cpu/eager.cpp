// kiln/runtime/internal/eager.h: one op's CPU kernel on caller-owned tensors, one thread.
#include "kiln/runtime/internal/eager.h"

#include "backends/cpu/kernel.h"
#include "backends/cpu/thread_pool.h"

namespace kiln::eager {
namespace {

class EagerContext final : public KernelContext {
 public:
  explicit EagerContext(const AllocateOutput& allocate) : allocate_(allocate) {}
  Result<TensorView> allocate_output(int index, DType dtype, std::span<const std::int64_t> shape) override {
    if (!allocate_) return Status(StatusCode::kInternal, "eager kernel call: no output allocator");
    return allocate_(index, dtype, shape);
  }
  cpu::ThreadPool& pool() override {
    static cpu::ThreadPool single(1);
    return single;
  }

 private:
  const AllocateOutput& allocate_;
};

}  // namespace

bool has_cpu_kernel(OpKind op) { return cpu::cpu_kernel(op) != nullptr; }

Status run_cpu_kernel(OpKind op, std::span<const TensorView> inputs, std::span<TensorView> outputs,
                      std::span<const AttrValue> attrs, const AllocateOutput& allocate) {
  const KernelFn kernel = cpu::cpu_kernel(op);
  if (kernel == nullptr) {
    return Status(StatusCode::kUnsupported, std::string(op_name(op)) + " has no CPU kernel for eager execution");
  }
  EagerContext ctx(allocate);
  return kernel(ctx, inputs, outputs, attrs);
}

}  // namespace kiln::eager

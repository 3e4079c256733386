// The one runtime-internal interface export may use: run one op's CPU kernel, eagerly, on
// tensors the caller owns. Export folds constants and runs its eager mode through it
// (export/src/trace/eager.cpp); tests/format/layering_test.cpp checks that export includes
// nothing else of the runtime beyond its public headers. Not installed, no stability promise.
//
// It also declares the two plain structs every kernel is called with (TensorView,
// AttrValue): the kernel interface itself (KernelContext, KernelFn) stays inside the runtime,
// in runtime/src/kernel/kernel.h, which includes this header.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string_view>

#include "kiln/base/status.h"
#include "kiln/format/dtype.h"
#include "kiln/format/ops.h"

namespace kiln {

inline constexpr int kMaxRank = 8;

/// A dense, C-contiguous tensor the caller owns. Must outlive the kernel call.
struct TensorView {
  DType dtype = DType::kF32;
  int rank = 0;
  std::array<std::int64_t, kMaxRank> shape{};
  void* data = nullptr;

  std::int64_t numel() const {
    std::int64_t n = 1;
    for (int i = 0; i < rank; ++i) n *= shape[i];
    return n;
  }
  std::size_t nbytes() const { return static_cast<std::size_t>(numel()) * dtype_size(dtype); }
  std::span<const std::int64_t> dims() const { return {shape.data(), static_cast<std::size_t>(rank)}; }
  template <typename T>
  T* as() const { return static_cast<T*>(data); }
};

/// One attribute after expression evaluation. Expressions (AttrType::kExpr/kExprs) arrive
/// evaluated: kExpr as `i`, kExprs as `ints`. Absent optional attributes have type kNone.
struct AttrValue {
  AttrType type = AttrType::kNone;
  std::int64_t i = 0;
  double f = 0.0;
  std::string_view s;
  std::span<const std::int64_t> ints;
  std::span<const double> floats;
};

namespace eager {

/// Allocates output `index` of a data-dependent op (nonzero, masked_select), whose view the
/// kernel received with data == nullptr, once the kernel knows its shape; returns its view.
using AllocateOutput = std::function<Result<TensorView>(int index, DType dtype, std::span<const std::int64_t> shape)>;

/// Whether this build has a CPU kernel for `op` (higher-order ops, run by the executor
/// itself, have none).
bool has_cpu_kernel(OpKind op);

/// Runs the CPU kernel of `op` on one thread: `outputs` are allocated by the caller (those
/// of a data-dependent op are passed with data == nullptr and get their memory from
/// `allocate`). The kernel checks shapes, dtypes and attributes as it does for a bundle and
/// answers a mismatch with its Status; an op without a CPU kernel is kUnsupported.
Status run_cpu_kernel(OpKind op, std::span<const TensorView> inputs, std::span<TensorView> outputs,
                      std::span<const AttrValue> attrs, const AllocateOutput& allocate);

}  // namespace eager
}  // namespace kiln

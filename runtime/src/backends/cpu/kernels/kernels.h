// Declarations of the CPU kernels, one per op of codegen/ops.def, named after the op's
// enumerator. kernel_table.cpp builds the OpKind -> KernelFn table from ops.def with the
// X-macro, so an op added there without a kernel here fails to compile. Higher-order ops
// (run by the executor) are declared as null kernels.
//
// Every kernel has the KernelFn signature (kernel.h) and the contract stated there: it
// validates counts, dtypes, shapes and attributes before touching data and reports
// problems as "[opname] ..." Statuses (common.h lists the codes). Inputs and outputs must
// not overlap unless noted (elementwise kernels allow out == an input of the same shape).
#pragma once

#include "backends/cpu/kernel.h"

namespace kiln::cpu::kernels {

#define KILN_DECLARE_KERNEL(Enum)                                                     \
  Status Enum(KernelContext& ctx, std::span<const TensorView> inputs,                 \
              std::span<TensorView> outputs, std::span<const AttrValue> attrs)

// elementwise_binary.cpp
KILN_DECLARE_KERNEL(Add);
KILN_DECLARE_KERNEL(Sub);
KILN_DECLARE_KERNEL(Mul);
KILN_DECLARE_KERNEL(Div);
KILN_DECLARE_KERNEL(Pow);
KILN_DECLARE_KERNEL(Maximum);
KILN_DECLARE_KERNEL(Minimum);
KILN_DECLARE_KERNEL(Remainder);
KILN_DECLARE_KERNEL(Eq);
KILN_DECLARE_KERNEL(Ne);
KILN_DECLARE_KERNEL(Lt);
KILN_DECLARE_KERNEL(Le);
KILN_DECLARE_KERNEL(Gt);
KILN_DECLARE_KERNEL(Ge);
KILN_DECLARE_KERNEL(LogicalAnd);
KILN_DECLARE_KERNEL(LogicalOr);
KILN_DECLARE_KERNEL(LogicalXor);

// elementwise_unary.cpp
KILN_DECLARE_KERNEL(Neg);
KILN_DECLARE_KERNEL(Abs);
KILN_DECLARE_KERNEL(Exp);
KILN_DECLARE_KERNEL(Log);
KILN_DECLARE_KERNEL(Sqrt);
KILN_DECLARE_KERNEL(Rsqrt);
KILN_DECLARE_KERNEL(Reciprocal);
KILN_DECLARE_KERNEL(Sin);
KILN_DECLARE_KERNEL(Cos);
KILN_DECLARE_KERNEL(Tanh);
KILN_DECLARE_KERNEL(Sigmoid);
KILN_DECLARE_KERNEL(Relu);
KILN_DECLARE_KERNEL(Gelu);
KILN_DECLARE_KERNEL(Silu);
KILN_DECLARE_KERNEL(Hardswish);
KILN_DECLARE_KERNEL(Hardsigmoid);
KILN_DECLARE_KERNEL(Erf);
KILN_DECLARE_KERNEL(Floor);
KILN_DECLARE_KERNEL(Ceil);
KILN_DECLARE_KERNEL(Round);
KILN_DECLARE_KERNEL(Sign);
KILN_DECLARE_KERNEL(LogicalNot);
KILN_DECLARE_KERNEL(Clamp);
KILN_DECLARE_KERNEL(LeakyRelu);

// cast.cpp
KILN_DECLARE_KERNEL(Cast);
KILN_DECLARE_KERNEL(Identity);

// select.cpp
KILN_DECLARE_KERNEL(Where);
KILN_DECLARE_KERNEL(MaskedFill);

// reduce.cpp
KILN_DECLARE_KERNEL(Sum);
KILN_DECLARE_KERNEL(Mean);
KILN_DECLARE_KERNEL(Amax);
KILN_DECLARE_KERNEL(Amin);
KILN_DECLARE_KERNEL(Prod);
KILN_DECLARE_KERNEL(Any);
KILN_DECLARE_KERNEL(All);
KILN_DECLARE_KERNEL(Var);

// arg_scan.cpp
KILN_DECLARE_KERNEL(Argmax);
KILN_DECLARE_KERNEL(Argmin);
KILN_DECLARE_KERNEL(Cumsum);

// linalg.cpp
KILN_DECLARE_KERNEL(Matmul);
KILN_DECLARE_KERNEL(Linear);
KILN_DECLARE_KERNEL(Bmm);

// conv.cpp
KILN_DECLARE_KERNEL(Conv2d);

// norm.cpp
KILN_DECLARE_KERNEL(BatchNorm);
KILN_DECLARE_KERNEL(LayerNorm);
KILN_DECLARE_KERNEL(Softmax);
KILN_DECLARE_KERNEL(LogSoftmax);

// pool.cpp
KILN_DECLARE_KERNEL(MaxPool2d);
KILN_DECLARE_KERNEL(AvgPool2d);
KILN_DECLARE_KERNEL(AdaptiveAvgPool2d);
KILN_DECLARE_KERNEL(AdaptiveMaxPool2d);

// index.cpp
KILN_DECLARE_KERNEL(Embedding);
KILN_DECLARE_KERNEL(Gather);
KILN_DECLARE_KERNEL(IndexSelect);
KILN_DECLARE_KERNEL(Index);

// creation.cpp
KILN_DECLARE_KERNEL(Full);
KILN_DECLARE_KERNEL(Arange);
KILN_DECLARE_KERNEL(Tril);
KILN_DECLARE_KERNEL(Triu);

// movement.cpp
KILN_DECLARE_KERNEL(Reshape);
KILN_DECLARE_KERNEL(Permute);
KILN_DECLARE_KERNEL(Slice);
KILN_DECLARE_KERNEL(Cat);
KILN_DECLARE_KERNEL(Split);
KILN_DECLARE_KERNEL(Expand);
KILN_DECLARE_KERNEL(Pad);
KILN_DECLARE_KERNEL(Flip);

// data_dependent.cpp
KILN_DECLARE_KERNEL(Nonzero);
KILN_DECLARE_KERNEL(MaskedSelect);
KILN_DECLARE_KERNEL(Item);

#undef KILN_DECLARE_KERNEL

// Higher-order ops: the executor runs their subgraphs itself.
inline constexpr KernelFn Cond = nullptr;
inline constexpr KernelFn WhileLoop = nullptr;
inline constexpr KernelFn InvokeSubgraph = nullptr;

/// The f32 matrix product C[m,n] = A[m,k] * op(B) (op(B) = B[k,n], or B[n,k] transposed
/// when b_transposed), row strides lda/ldb/ldc in elements; C is overwritten and must not
/// alias A or B. Used by matmul, linear, bmm and conv2d; the seam for a faster SGEMM.
void matmul_f32(std::int64_t m, std::int64_t n, std::int64_t k, const float* a, std::int64_t lda,
                const float* b, std::int64_t ldb, bool b_transposed, float* c, std::int64_t ldc);

}  // namespace kiln::cpu::kernels

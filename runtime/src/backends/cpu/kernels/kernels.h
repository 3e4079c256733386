// The CPU kernels, one per op of codegen/ops.def, named after the op's enumerator.
// kernel_table.cpp builds the OpKind -> KernelFn table from ops.def with the X-macro, so
// an op added there without a kernel here fails to compile. Higher-order ops (run by the
// executor) are declared as null kernels.
//
// Contract (kernel/kernel.h): each kernel validates the input/output counts, every view (dtype,
// rank, dims, data), the dtypes, the shapes (the output shape must equal the one the op
// computes) and the attributes before touching data, and reports problems as Statuses
// whose message starts with "[opname] " and names the values:
//   kInvalidBundle  inconsistent shapes, ranks, dtypes or attributes;
//   kInvalidInput   data-dependent failures (an index out of range, integer division by 0,
//                   amax/argmax over zero elements);
//   kUnsupported    dtypes or features this build does not run (each group lists its dtypes);
//   kUnavailable    a scratch allocation failed (conv2d im2col, some reductions).
// Inputs and outputs must not overlap, except that the unary and binary elementwise
// kernels, where, masked_fill, reshape and identity accept out == an input of the same
// shape and dtype.
// Empty tensors (a 0 dim) are fine everywhere. Kernels run on the calling thread.
//
// f16/bf16: data movement, cast, where/masked_fill, indexing, full/arange handle them
// natively; every computing kernel accepts them too by running on f32 copies (allocates;
// results rounded back, as PyTorch's CPU kernels compute half types in float).
#pragma once

#include <array>
#include <memory>
#include <span>

#include "backends/cpu/kernel.h"
#include "kernel/kernel.h"

namespace kiln::cpu::kernels {

#define KILN_DECLARE_KERNEL(Enum)                                                     \
  Status Enum(KernelContext& ctx, std::span<const TensorView> inputs,                 \
              std::span<TensorView> outputs, std::span<const AttrValue> attrs)

// Binary elementwise (elementwise_binary.cpp). Numpy broadcasting (ranks aligned right;
// out.shape must be the broadcast shape). Both inputs share one dtype (mixed dtypes:
// kUnsupported; the exporter casts). Integer arithmetic wraps.
//   add sub mul maximum minimum: f32 f64 i8 i16 i32 i64 u8, out dtype = input dtype;
//     maximum/minimum propagate NaN.
//   div: floats: a / b, or trunc / floor (PyTorch's div_floor_floating) with the
//     rounding_mode attribute; integers: "trunc"/"floor" give the input dtype (division by
//     zero is kInvalidInput, INT_MIN / -1 wraps), no rounding mode needs a float out dtype
//     (true division in that dtype).
//   pow: f32 f64 i32 i64 (integer negative powers follow PyTorch's powi: 1, +-1 or 0).
//   remainder: Python semantics (sign of the divisor); f32 f64 i32 i64.
//   eq ne lt le gt ge: numeric and bool inputs, bool output.
//   logical_and logical_or logical_xor: bool inputs and output.
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

// Bitwise (bitwise.cpp), PyTorch's semantics; numpy broadcasting, one input dtype, out
// dtype = input dtype.
//   bitwise_and bitwise_or bitwise_xor: i8 i16 i32 i64 u8 and b8 (bools as 0/1).
//   bitwise_left_shift bitwise_right_shift: i8 i16 i32 i64 u8. a << b with a count outside
//     [0, bits) gives 0; a >> b is arithmetic for signed types, and a count outside
//     [0, bits - 1] (signed) or [0, bits) (unsigned) gives the sign fill (-1 or 0) / 0.
//   bitwise_not(x): i8 i16 i32 i64 u8 (~x) and b8 (logical not).
KILN_DECLARE_KERNEL(BitwiseAnd);
KILN_DECLARE_KERNEL(BitwiseOr);
KILN_DECLARE_KERNEL(BitwiseXor);
KILN_DECLARE_KERNEL(BitwiseLeftShift);
KILN_DECLARE_KERNEL(BitwiseRightShift);
KILN_DECLARE_KERNEL(BitwiseNot);

// Unary elementwise (elementwise_unary.cpp). out.shape = x.shape, out dtype = x dtype
// (logical_not: bool).
//   neg abs relu sign floor ceil round clamp: f32 f64 i8 i16 i32 i64 u8 (rounding ops
//     are the identity on integers; round is half-to-even; clamp takes optional float
//     min/max, min > max gives max; relu keeps NaN).
//   exp log sqrt rsqrt reciprocal sin cos tanh sigmoid erf silu hardswish hardsigmoid
//   leaky_relu gelu ("none" | "tanh"): f32 f64. f32 exp/tanh/sigmoid/silu/gelu/sqrt use
//     the vectorized loops of simd.h (a few ulp; gelu ~1e-7 absolute).
//   logical_not: any numeric or bool input (x == 0).
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
KILN_DECLARE_KERNEL(Atan);
KILN_DECLARE_KERNEL(Asin);
KILN_DECLARE_KERNEL(Acos);
KILN_DECLARE_KERNEL(Tan);
KILN_DECLARE_KERNEL(Sinh);
KILN_DECLARE_KERNEL(Cosh);
KILN_DECLARE_KERNEL(Asinh);
KILN_DECLARE_KERNEL(Acosh);
KILN_DECLARE_KERNEL(Atanh);
KILN_DECLARE_KERNEL(Floor);
KILN_DECLARE_KERNEL(Ceil);
KILN_DECLARE_KERNEL(Round);
KILN_DECLARE_KERNEL(Sign);
KILN_DECLARE_KERNEL(LogicalNot);
KILN_DECLARE_KERNEL(Clamp);
KILN_DECLARE_KERNEL(LeakyRelu);

// cast (every dtype to every dtype; rules in convert.h: float -> int truncates, NaN -> 0,
// saturates to int64 then wraps; -> bool is != 0) and identity (a copy) (cast.cpp).
KILN_DECLARE_KERNEL(Cast);
KILN_DECLARE_KERNEL(Identity);

// where(cond, a, b) and masked_fill(x, mask, value) (select.cpp): any dtype; cond/mask
// bool (or u8), broadcast; masked_fill's out has x's shape and `value` is a one-element
// tensor of any dtype, converted to x's.
KILN_DECLARE_KERNEL(Where);
KILN_DECLARE_KERNEL(MaskedFill);

// Reductions over `dims` (empty = all; each in [0, rank), no repeats) with keepdim
// (reduce.cpp). Input: numeric or bool.
//   sum prod: out f32 f64 i32 i64 (sum's optional dtype attribute must match out);
//     floats accumulate in double, integers in wrapping int64. Empty: 0 / 1.
//   mean: float out; var(correction): floats, divides by max(0, N - correction).
//   amax amin: out dtype = x dtype, NaN propagates; over zero elements: kInvalidInput.
//   any all: bool out.
KILN_DECLARE_KERNEL(Sum);
KILN_DECLARE_KERNEL(Mean);
KILN_DECLARE_KERNEL(Amax);
KILN_DECLARE_KERNEL(Amin);
KILN_DECLARE_KERNEL(Prod);
KILN_DECLARE_KERNEL(Any);
KILN_DECLARE_KERNEL(All);
KILN_DECLARE_KERNEL(Var);

// argmax / argmin(dim, keepdim): numeric or bool input, i64 out, the first occurrence of
// the extreme (NaN counts as the extreme). cumsum(dim): numeric or bool input, out f32 f64
// i32 i64 (accumulated in double / wrapping int64) (arg_scan.cpp).
KILN_DECLARE_KERNEL(Argmax);
KILN_DECLARE_KERNEL(Argmin);
KILN_DECLARE_KERNEL(Cumsum);

// Linear algebra (linalg.cpp); one dtype for all operands: f32 (through matmul_f32), f64
// and integers (plain loops, wrapping).
//   matmul: numpy semantics: 1-D x 1-D (dot, 0-d out), 1-D x 2-D, 2-D x 1-D, and batched
//     operands with broadcast batch dims.
//   linear(x[..., K], weight[N, K], bias[N]?): x weight^T + bias.
//   bmm: [B, M, K] x [B, K, N].
KILN_DECLARE_KERNEL(Matmul);
KILN_DECLARE_KERNEL(Linear);
KILN_DECLARE_KERNEL(Bmm);

// conv2d(x [N, C, H, W] or [C, H, W], weight [O, C/groups, kH, kW], bias[O]?) with
// stride, padding (symmetric), dilation (each 1 or 2 values) and groups: f32 (conv.cpp).
KILN_DECLARE_KERNEL(Conv2d);
// conv2d's prepare_weights (backends/cpu/kernel.h): a ConvWeights (conv_prepared.h) with
// the Winograd-transformed weights of a 3x3 stride-1 ungrouped weight with >= 64 x 64
// channels and/or the weights of the GEMM paths packed as the SGEMM's A; else null.
Result<std::unique_ptr<PreparedWeights>> conv2d_prepare(const TensorView& weight, std::span<const AttrValue> attrs,
                                                        bool blocked = false);
// With `blocked` (a conv2d the layout pass keeps NCHW8c): a ConvWeights holding only the
// blocked kernels' weights (layout_kernels.cpp).
Result<std::unique_ptr<PreparedWeights>> conv2d_prepare_blocked(const TensorView& weight, std::span<const AttrValue> attrs);
// Whether conv2d may use Winograd: unless KILN_CONV_WINOGRAD=0 (read once; conv.cpp).
bool conv_winograd_enabled();
// Whether conv2d's attributes (0-2: stride, padding, dilation; absent: 1, 0, 1) allow
// Winograd: stride and dilation 1, padding at most `max_padding` (conv.cpp).
bool conv_attrs_winograd(std::span<const AttrValue> attrs, std::int64_t max_padding);

// Normalizations (norm.cpp): f32 f64.
//   batch_norm(x[N, C, ...], weight?, bias?, running_mean, running_var): inference only
//     (missing running statistics: kUnsupported).
//   layer_norm(x, weight?, bias?): over the last normalized_rank dims (biased variance);
//     weight/bias shaped like those dims.
//   softmax / log_softmax(dim): max-subtracted; a NaN makes its whole slice NaN.
KILN_DECLARE_KERNEL(BatchNorm);
KILN_DECLARE_KERNEL(LayerNorm);
KILN_DECLARE_KERNEL(Softmax);
KILN_DECLARE_KERNEL(LogSoftmax);

// topk(x; k, dim, largest, sorted) -> (values [.., k, ..], i64 indices) along dim, sorted
// by value (ties: lower index first; NaN is the largest); numeric dtypes (topk.cpp).
KILN_DECLARE_KERNEL(Topk);

// 2-D pooling over [N, C, H, W] or [C, H, W], PyTorch's output sizes and windows
// (pool.cpp). max pools: numeric dtypes, NaN propagates; average pools: f32 f64.
//   max_pool2d(kernel, stride (empty = kernel), padding <= kernel / 2, dilation, ceil_mode)
//   avg_pool2d(kernel, stride, padding, ceil_mode, count_include_pad)
//   adaptive_*_pool2d(output_size): window i = [floor(i In / Out), ceil((i + 1) In / Out)).
KILN_DECLARE_KERNEL(MaxPool2d);
KILN_DECLARE_KERNEL(AvgPool2d);
KILN_DECLARE_KERNEL(AdaptiveAvgPool2d);
KILN_DECLARE_KERNEL(AdaptiveMaxPool2d);

// Indexing by i64 or i32 index tensors, any data dtype (index.cpp). Out-of-range indices
// are kInvalidInput naming the position and value; boolean masks are kUnsupported.
//   embedding(weight[V, ...], indices): out = indices.shape + weight.shape[1:], 0 <= i < V.
//   gather(x, indices; dim): indices of x's rank, indices.shape[d] <= x.shape[d] for d !=
//     dim, 0 <= i < x.shape[dim].
//   index_select(x, indices[n]; dim): 0 <= i < x.shape[dim].
//   index(x, i0, i1, ...; dims): advanced indexing by broadcasting index tensors on
//     adjacent ascending dims (the result dims replace them in place); negative indices
//     count from the end. Non-adjacent dims: kUnsupported.
KILN_DECLARE_KERNEL(Embedding);
KILN_DECLARE_KERNEL(Gather);
KILN_DECLARE_KERNEL(IndexSelect);
KILN_DECLARE_KERNEL(Index);
//   index_put(x, values, i0, i1, ...; dims, accumulate): out = x with out[..., i0, i1, ...]
//     = values (broadcast to the indexed shape that index() would return), or += values
//     with accumulate (bools: or). Same index rules as index; with repeated indices and no
//     accumulate the last write wins. values has x's dtype.
KILN_DECLARE_KERNEL(IndexPut);
// The elements of x index_put writes for these inputs (cpu::in_place_writes).
Status index_put_writes(std::span<const TensorView> in, std::span<const AttrValue> attrs, std::vector<ElementRange>& writes);

// Weight-only quantized linear and embedding (quant.cpp; formats in codegen/ops.def and
// docs/QUANTIZATION.md). f32 activations and outputs; the weight is i8 [N,K] (int8) or u8
// [N,K/2] (packed int4), scales f32/f16 [N,G] with G dividing K, zero points u8 [N,G]
// (int4 only). Dequantization is fused: no f32 copy of the whole weight is made (batches
// above two rows dequantize 256-row panels, one per thread at a time, for the SGEMM).
KILN_DECLARE_KERNEL(LinearQ);
KILN_DECLARE_KERNEL(EmbeddingQ);

// Creation (creation.cpp). full(shape, value, dtype) and arange(start, end, step, dtype)
// (out length must be max(0, ceil((end - start) / step)); step != 0) for every dtype;
// tril / triu(diagonal) over the last two dims, any dtype.
KILN_DECLARE_KERNEL(Full);
KILN_DECLARE_KERNEL(Arange);
KILN_DECLARE_KERNEL(Tril);
KILN_DECLARE_KERNEL(Triu);

// Data movement, any dtype (movement.cpp).
//   reshape (numel must match), permute(dims), slice(dim, start, end, step >= 1; start and
//   end clamped Python-style), cat(dim; 1-D empty inputs are skipped, as in PyTorch),
//   split(dim, sizes; one output per size), expand (x broadcast to out.shape),
//   pad(pads: (left, right) pairs from the last dim; negative pads crop; value), flip(dims).
KILN_DECLARE_KERNEL(Reshape);
KILN_DECLARE_KERNEL(Permute);
KILN_DECLARE_KERNEL(Slice);
KILN_DECLARE_KERNEL(Cat);
KILN_DECLARE_KERNEL(Split);
KILN_DECLARE_KERNEL(Expand);
KILN_DECLARE_KERNEL(Pad);
KILN_DECLARE_KERNEL(Flip);
// pad_border(x; pads, mode), any dtype (pad_border.cpp): pads as for pad, each >= 0;
// mode "reflect" (mirror without repeating the edge; each pad < the dim's size),
// "replicate" (repeat the edge; a padded dim must not be empty) or "circular" (wrap
// around; each pad <= the dim's size).
KILN_DECLARE_KERNEL(PadBorder);

// Data-dependent (data_dependent.cpp). The output arrives unallocated (data == nullptr)
// and is allocated with KernelContext::allocate_output once its size is known (a view
// that arrives allocated must already have that shape).
//   nonzero(x): i64 [count, rank] of row-major multi-indices (-0.0 is zero, NaN is not).
//   masked_select(x, mask): x and mask broadcast together; selected values, 1-D.
//   item(x): x must hold one element; copied into the 0-d output of x's dtype.
KILN_DECLARE_KERNEL(Nonzero);
KILN_DECLARE_KERNEL(MaskedSelect);
KILN_DECLARE_KERNEL(Item);

#undef KILN_DECLARE_KERNEL

// Higher-order ops: the executor runs their subgraphs itself.
inline constexpr KernelFn Cond = nullptr;
inline constexpr KernelFn WhileLoop = nullptr;
inline constexpr KernelFn InvokeSubgraph = nullptr;

/// The f32 matrix product C[m,n] = A[m,k] * op(B) (op(B) = B[k,n], or B stored [n,k] when
/// b_transposed), row strides lda/ldb/ldc in elements; C is overwritten and must not alias
/// A or B. Used by matmul, linear, bmm and conv2d: the packed SGEMM (backends/cpu/gemm),
/// split over `pool` when given, with cache-blocked loops as the fallback.
void matmul_f32(std::int64_t m, std::int64_t n, std::int64_t k, const float* a, std::int64_t lda,
                const float* b, std::int64_t ldb, bool b_transposed, float* c, std::int64_t ldc,
                ThreadPool* pool = nullptr);

/// Bilinear interpolation as the core ATen IR spells it, in one pass (the executor's
/// gather-lerp fusion): out = lerp(lerp(g[0], g[1], w[0]), lerp(g[2], g[3], w[1]), w[2]),
/// lerp(a, b, w) = a + (b - a) * w rounded step by step as the separate sub, mul and add
/// kernels round it, where g[j] = index(x, gathers[j]..., dims) gathers on x's last dims
/// (as the index kernel, with its range checks) and each weight broadcasts into out with
/// size 1 on x's dims before the first indexed one. f32 only.
Status gather_lerp2(KernelContext& ctx, const TensorView& x, std::span<const std::int64_t> dims,
                    const std::array<std::span<const TensorView>, 4>& gathers, const std::array<TensorView, 3>& weights,
                    TensorView& out);

}  // namespace kiln::cpu::kernels

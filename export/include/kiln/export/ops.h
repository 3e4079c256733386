// Ops on traced and eager tensors. Each op validates its inputs, names itself in errors
// ("[matmul] a.size(1)=63 != b.size(0)=64 (model.cpp:41)"), computes its output shape
// symbolically (guards through the shape engine) and records a node (tracing) or runs
// the CPU kernel (eager). The `loc` parameters default to the caller's source line:
// never pass them explicitly.
//
// Scalars: an `Operand` is a tensor or a number; numbers become 0-d constants with
// PyTorch's promotion (int tensor + 0.5 -> f32). Dims may be negative (from the end).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "kiln/export/tensor.h"

namespace kiln {

/// A tensor or a scalar operand of an elementwise op. The source location is captured
/// where the operand is converted, i.e. on the user's line of an operator expression.
struct Operand {
  Operand(const Tensor& t, SourceLoc loc = SourceLoc::current()) : tensor(t), loc(loc) {}  // NOLINT
  Operand(double v, SourceLoc loc = SourceLoc::current()) : value(v), loc(loc) {}          // NOLINT
  Operand(float v, SourceLoc loc = SourceLoc::current()) : value(v), loc(loc) {}           // NOLINT
  Operand(int v, SourceLoc loc = SourceLoc::current()) : value(v), is_int(true), loc(loc) {}  // NOLINT
  Operand(std::int64_t v, SourceLoc loc = SourceLoc::current()) : value(static_cast<double>(v)), is_int(true), loc(loc) {}  // NOLINT
  /// A SymInt acts like a Python int scalar (the tensor's dtype wins; bool becomes i64): a
  /// known value folds, a symbolic one becomes a 0-d tensor computed from the symbol.
  Operand(const SymInt& v, SourceLoc loc = SourceLoc::current())  // NOLINT
      : value(v.maybe_int() ? static_cast<double>(*v.maybe_int()) : 0.0), is_int(true), loc(loc) {
    if (v.is_symbolic()) symbol = v;
  }
  Tensor tensor;
  double value = 0.0;
  bool is_int = false;
  std::optional<SymInt> symbol;  // a symbolic SymInt operand
  SourceLoc loc;
};

// Elementwise binary (broadcasting)
Tensor add(const Operand& a, const Operand& b, SourceLoc loc = SourceLoc::current());
Tensor sub(const Operand& a, const Operand& b, SourceLoc loc = SourceLoc::current());
Tensor mul(const Operand& a, const Operand& b, SourceLoc loc = SourceLoc::current());
Tensor div(const Operand& a, const Operand& b, SourceLoc loc = SourceLoc::current());
Tensor pow(const Operand& a, const Operand& b, SourceLoc loc = SourceLoc::current());
Tensor maximum(const Operand& a, const Operand& b, SourceLoc loc = SourceLoc::current());
Tensor minimum(const Operand& a, const Operand& b, SourceLoc loc = SourceLoc::current());
Tensor eq(const Operand& a, const Operand& b, SourceLoc loc = SourceLoc::current());
Tensor ne(const Operand& a, const Operand& b, SourceLoc loc = SourceLoc::current());
Tensor lt(const Operand& a, const Operand& b, SourceLoc loc = SourceLoc::current());
Tensor le(const Operand& a, const Operand& b, SourceLoc loc = SourceLoc::current());
Tensor gt(const Operand& a, const Operand& b, SourceLoc loc = SourceLoc::current());
Tensor ge(const Operand& a, const Operand& b, SourceLoc loc = SourceLoc::current());
Tensor logical_and(const Tensor& a, const Tensor& b, SourceLoc loc = SourceLoc::current());
Tensor logical_or(const Tensor& a, const Tensor& b, SourceLoc loc = SourceLoc::current());

Tensor operator+(const Operand& a, const Operand& b);
Tensor operator-(const Operand& a, const Operand& b);
Tensor operator*(const Operand& a, const Operand& b);
Tensor operator/(const Operand& a, const Operand& b);
Tensor operator-(const Tensor& a);

// Elementwise unary
Tensor neg(const Tensor& x, SourceLoc loc = SourceLoc::current());
Tensor abs(const Tensor& x, SourceLoc loc = SourceLoc::current());
Tensor exp(const Tensor& x, SourceLoc loc = SourceLoc::current());
Tensor log(const Tensor& x, SourceLoc loc = SourceLoc::current());
Tensor sqrt(const Tensor& x, SourceLoc loc = SourceLoc::current());
Tensor rsqrt(const Tensor& x, SourceLoc loc = SourceLoc::current());
Tensor sin(const Tensor& x, SourceLoc loc = SourceLoc::current());
Tensor atan(const Tensor& x, SourceLoc loc = SourceLoc::current());
Tensor asin(const Tensor& x, SourceLoc loc = SourceLoc::current());
Tensor acos(const Tensor& x, SourceLoc loc = SourceLoc::current());
Tensor tan(const Tensor& x, SourceLoc loc = SourceLoc::current());
Tensor sinh(const Tensor& x, SourceLoc loc = SourceLoc::current());
Tensor cosh(const Tensor& x, SourceLoc loc = SourceLoc::current());
Tensor asinh(const Tensor& x, SourceLoc loc = SourceLoc::current());
Tensor acosh(const Tensor& x, SourceLoc loc = SourceLoc::current());
Tensor atanh(const Tensor& x, SourceLoc loc = SourceLoc::current());
Tensor cos(const Tensor& x, SourceLoc loc = SourceLoc::current());
Tensor tanh(const Tensor& x, SourceLoc loc = SourceLoc::current());
Tensor sigmoid(const Tensor& x, SourceLoc loc = SourceLoc::current());
Tensor relu(const Tensor& x, SourceLoc loc = SourceLoc::current());
/// approximate: "none" (erf) or "tanh".
Tensor gelu(const Tensor& x, const std::string& approximate = "none", SourceLoc loc = SourceLoc::current());
Tensor silu(const Tensor& x, SourceLoc loc = SourceLoc::current());
Tensor hardswish(const Tensor& x, SourceLoc loc = SourceLoc::current());
Tensor logical_not(const Tensor& x, SourceLoc loc = SourceLoc::current());
Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max, SourceLoc loc = SourceLoc::current());
Tensor cast(const Tensor& x, DType dtype, SourceLoc loc = SourceLoc::current());

// Selection
Tensor where(const Tensor& condition, const Operand& a, const Operand& b, SourceLoc loc = SourceLoc::current());
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value, SourceLoc loc = SourceLoc::current());

// Reductions (dims empty = all)
Tensor sum(const Tensor& x, std::vector<std::int64_t> dims = {}, bool keepdim = false, SourceLoc loc = SourceLoc::current());
Tensor mean(const Tensor& x, std::vector<std::int64_t> dims = {}, bool keepdim = false, SourceLoc loc = SourceLoc::current());
Tensor amax(const Tensor& x, std::vector<std::int64_t> dims = {}, bool keepdim = false, SourceLoc loc = SourceLoc::current());
Tensor amin(const Tensor& x, std::vector<std::int64_t> dims = {}, bool keepdim = false, SourceLoc loc = SourceLoc::current());
Tensor argmax(const Tensor& x, std::int64_t dim, bool keepdim = false, SourceLoc loc = SourceLoc::current());

// Linear algebra, neural-network layers
Tensor matmul(const Tensor& a, const Tensor& b, SourceLoc loc = SourceLoc::current());
Tensor bmm(const Tensor& a, const Tensor& b, SourceLoc loc = SourceLoc::current());
/// y = x W^T + b with W [out, in]; bias may be undefined.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), SourceLoc loc = SourceLoc::current());
Tensor softmax(const Tensor& x, std::int64_t dim, SourceLoc loc = SourceLoc::current());
Tensor log_softmax(const Tensor& x, std::int64_t dim, SourceLoc loc = SourceLoc::current());
/// Normalizes over the trailing `normalized_rank` dims; weight/bias may be undefined.
Tensor layer_norm(const Tensor& x, std::int64_t normalized_rank, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5, SourceLoc loc = SourceLoc::current());
Tensor embedding(const Tensor& weight, const Tensor& indices, SourceLoc loc = SourceLoc::current());
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), std::vector<std::int64_t> stride = {1, 1},
              std::vector<std::int64_t> padding = {0, 0}, std::vector<std::int64_t> dilation = {1, 1},
              std::int64_t groups = 1, SourceLoc loc = SourceLoc::current());
Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                  const Tensor& running_var, double eps = 1e-5, SourceLoc loc = SourceLoc::current());
Tensor max_pool2d(const Tensor& x, std::vector<std::int64_t> kernel, std::vector<std::int64_t> stride = {},
                  std::vector<std::int64_t> padding = {0, 0}, SourceLoc loc = SourceLoc::current());
Tensor avg_pool2d(const Tensor& x, std::vector<std::int64_t> kernel, std::vector<std::int64_t> stride = {},
                  std::vector<std::int64_t> padding = {0, 0}, SourceLoc loc = SourceLoc::current());
Tensor adaptive_avg_pool2d(const Tensor& x, std::vector<std::int64_t> output_size, SourceLoc loc = SourceLoc::current());

// Creation
Tensor full(std::vector<SymInt> shape, double value, DType dtype = DType::kF32, SourceLoc loc = SourceLoc::current());
Tensor zeros(std::vector<SymInt> shape, DType dtype = DType::kF32, SourceLoc loc = SourceLoc::current());
Tensor ones(std::vector<SymInt> shape, DType dtype = DType::kF32, SourceLoc loc = SourceLoc::current());
Tensor arange(SymInt end, DType dtype = DType::kI64, SourceLoc loc = SourceLoc::current());
Tensor arange(SymInt start, SymInt end, SymInt step = 1, DType dtype = DType::kI64, SourceLoc loc = SourceLoc::current());
Tensor tril(const Tensor& x, std::int64_t diagonal = 0, SourceLoc loc = SourceLoc::current());
Tensor triu(const Tensor& x, std::int64_t diagonal = 0, SourceLoc loc = SourceLoc::current());

// Data movement
Tensor reshape(const Tensor& x, std::vector<SymInt> shape, SourceLoc loc = SourceLoc::current());
Tensor permute(const Tensor& x, std::vector<std::int64_t> dims, SourceLoc loc = SourceLoc::current());
Tensor transpose(const Tensor& x, std::int64_t a, std::int64_t b, SourceLoc loc = SourceLoc::current());
Tensor unsqueeze(const Tensor& x, std::int64_t dim, SourceLoc loc = SourceLoc::current());
Tensor squeeze(const Tensor& x, std::int64_t dim, SourceLoc loc = SourceLoc::current());
Tensor flatten(const Tensor& x, std::int64_t start_dim = 0, std::int64_t end_dim = -1, SourceLoc loc = SourceLoc::current());
/// Python slicing x[start:end:step] along `dim`; start/end clamp like Python.
Tensor slice(const Tensor& x, std::int64_t dim, SymInt start, SymInt end, std::int64_t step = 1, SourceLoc loc = SourceLoc::current());
Tensor cat(const std::vector<Tensor>& xs, std::int64_t dim = 0, SourceLoc loc = SourceLoc::current());
std::vector<Tensor> split(const Tensor& x, std::vector<SymInt> sizes, std::int64_t dim = 0, SourceLoc loc = SourceLoc::current());
Tensor expand(const Tensor& x, std::vector<SymInt> shape, SourceLoc loc = SourceLoc::current());
Tensor gather(const Tensor& x, std::int64_t dim, const Tensor& index, SourceLoc loc = SourceLoc::current());
Tensor index_select(const Tensor& x, std::int64_t dim, const Tensor& index, SourceLoc loc = SourceLoc::current());
/// Advanced indexing with integer tensors on the adjacent dims first_dim, first_dim + 1, ...
/// (PyTorch's x[:, :, i, j]): the result's shape is x's dims before first_dim, then the
/// indices' broadcast shape, then x's dims after the indexed ones. Negative indices count
/// from the end; one out of range fails the run (exit 3).
Tensor index(const Tensor& x, std::int64_t first_dim, const std::vector<Tensor>& indices,
             SourceLoc loc = SourceLoc::current());

// Scatters: x with some of its elements replaced (new tensors; x is unchanged). The source
// takes x's dtype.
/// x with x.select(dim, index[i]) = source.select(dim, i): index is a 1-D i64/i32 tensor,
/// source has x's shape except source.size(dim) == index.size(0). Each position is checked
/// at run time: one >= x.size(dim) or < -x.size(dim) is kInvalidInput naming this line (a
/// negative one counts from the end, as in index_put).
Tensor index_copy(const Tensor& x, std::int64_t dim, const Tensor& index, const Tensor& source, SourceLoc loc = SourceLoc::current());
/// x with x[start:end:step] (along dim) = source (PyTorch's slice_scatter; no clamping or
/// negative bounds): 0 <= start <= end <= x.size(dim) must hold, statically (else an
/// export error) or, for symbolic bounds such as a decode position, as runtime asserts at
/// this line (kInvalidInput when a run breaks one). source.size(dim) is the slice length.
Tensor slice_scatter(const Tensor& x, const Tensor& source, std::int64_t dim, SymInt start, SymInt end, std::int64_t step = 1,
                     SourceLoc loc = SourceLoc::current());
/// x with x.select(dim, index) = source (rank x.dim() - 1); a constant negative index counts
/// from the end; bounds as slice_scatter.
Tensor select_scatter(const Tensor& x, const Tensor& source, std::int64_t dim, SymInt index, SourceLoc loc = SourceLoc::current());

// Copies and in-place updates. In-place ops are functional underneath: the handle `x` (and
// every copy of it) refers to the new value; the result keeps x's dtype and shape. A state
// buffer (Module::register_buffer with {.state = true}) may be updated: the program's
// state output is its final value (module.h). Export errors naming the tensor and the
// line: updating a parameter or a non-state buffer while tracing; updating an eager tensor
// (a constant) with a traced value; updating an input, a state or a captured tensor inside
// a cond branch, while_loop function or compile region.
Tensor clone(const Tensor& x, SourceLoc loc = SourceLoc::current());
Tensor& add_(Tensor& x, const Operand& other, SourceLoc loc = SourceLoc::current());
Tensor& sub_(Tensor& x, const Operand& other, SourceLoc loc = SourceLoc::current());
Tensor& mul_(Tensor& x, const Operand& other, SourceLoc loc = SourceLoc::current());
Tensor& div_(Tensor& x, const Operand& other, SourceLoc loc = SourceLoc::current());
Tensor& fill_(Tensor& x, double value, SourceLoc loc = SourceLoc::current());
Tensor& zero_(Tensor& x, SourceLoc loc = SourceLoc::current());
/// x = src broadcast to x's shape.
Tensor& copy_(Tensor& x, const Tensor& src, SourceLoc loc = SourceLoc::current());
/// x = index_copy(x, dim, index, source): a KV cache written at tensor positions.
Tensor& index_copy_(Tensor& x, std::int64_t dim, const Tensor& index, const Tensor& source, SourceLoc loc = SourceLoc::current());
/// x[start:end:step] = source along dim (slice_scatter): a KV cache written at a SymInt
/// position, `cache.slice_scatter_(k, 1, pos, pos + seq)`.
Tensor& slice_scatter_(Tensor& x, const Tensor& source, std::int64_t dim, SymInt start, SymInt end, std::int64_t step = 1,
                       SourceLoc loc = SourceLoc::current());
/// x.select(dim, index) = source (select_scatter).
Tensor& select_scatter_(Tensor& x, const Tensor& source, std::int64_t dim, SymInt index, SourceLoc loc = SourceLoc::current());

// Data-dependent: sizes only known at run time (unbacked symbols)
/// The value of a one-element tensor as a SymInt (an unbacked symbol while tracing).
SymInt item(const Tensor& x, SourceLoc loc = SourceLoc::current());
/// Indices of the non-zero elements: i64[u, rank] with u in [0, numel].
Tensor nonzero(const Tensor& x, SourceLoc loc = SourceLoc::current());
/// The elements of x where mask (broadcast) is true: 1-D of unbacked size.
Tensor masked_select(const Tensor& x, const Tensor& mask, SourceLoc loc = SourceLoc::current());

}  // namespace kiln

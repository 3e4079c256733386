// What the Vulkan backend does with each op of codegen/ops.def: one OpLowering row per op
// (the dtypes it runs, and its lowering), collected into an OpKind-indexed table by the
// X-macro. An op added to ops.def without a row here stops this file compiling; an op the
// device does not run says so with kNoVulkanKernel (it stays on the CPU).
#include <algorithm>
#include <array>

#include "backends/vulkan/lowerer.h"

namespace kiln::vulkan {

using backend::SegmentNode;
using backend::SegmentTensor;
using DTypes = std::span<const DType>;

namespace {

/// One op's entry. Both null (kNoVulkanKernel): the op never runs on the device.
struct OpLowering {
  /// Whether the device runs a node with these dtypes and attributes (op_supported's
  /// answer once every dtype is one the device stores).
  bool (*supports)(DTypes in, DTypes out, Attrs attrs) = nullptr;
  /// Lowers a node whose tensor references were checked (Lowerer::node).
  Status (*lower)(Lowerer& l) = nullptr;
};

constexpr OpLowering kNoVulkanKernel{};

// ---- Dtype rules ----------------------------------------------------------------------------

bool all_are(DTypes ds, DType d) {
  return std::all_of(ds.begin(), ds.end(), [d](DType x) { return x == d; });
}
bool is_index(DType d) { return d == DType::kI32 || d == DType::kI64; }
bool f32_io(DTypes in, DTypes out) { return all_are(in, DType::kF32) && all_are(out, DType::kF32); }

bool f32_elementwise(DTypes in, DTypes out, Attrs) { return f32_io(in, out) && !out.empty(); }
bool f32_op(DTypes in, DTypes out, Attrs) { return f32_io(in, out) && !in.empty(); }
// f32 against f32, or integer against integer (both i32/i64: 32-bit words on the device).
bool f32_compare(DTypes in, DTypes out, Attrs) {
  if (in.size() != 2 || !all_are(out, DType::kBool)) return false;
  return all_are(in, DType::kF32) || (is_index(in[0]) && is_index(in[1]));
}
bool bool_logical(DTypes in, DTypes out, Attrs) { return all_are(in, DType::kBool) && all_are(out, DType::kBool); }
bool logical_not_dtypes(DTypes in, DTypes out, Attrs) {
  return in.size() == 1 && (in[0] == DType::kBool || in[0] == DType::kF32) && all_are(out, DType::kBool);
}
bool where_dtypes(DTypes in, DTypes out, Attrs) {
  return in.size() == 3 && in[0] == DType::kBool && out.size() == 1 && in[1] == out[0] && in[2] == out[0];
}
bool masked_fill_dtypes(DTypes in, DTypes out, Attrs) {
  return in.size() == 3 && in[1] == DType::kBool && out.size() == 1 && in[0] == out[0] && in[2] == out[0];
}
bool sum_dtypes(DTypes in, DTypes out, Attrs attrs) {
  // sum's optional dtype attribute must be absent or f32.
  if (attrs.size() > 2 && attrs[2].type != AttrType::kNone && attrs[2].i != static_cast<std::int64_t>(DType::kF32)) return false;
  return f32_io(in, out) && !in.empty();
}
bool bool_reduce(DTypes in, DTypes out, Attrs) {
  return in.size() == 1 && in[0] == DType::kBool && all_are(out, DType::kBool);
}
bool arg_reduce_dtypes(DTypes in, DTypes out, Attrs) {
  return in.size() == 1 && in[0] == DType::kF32 && out.size() == 1 && out[0] == DType::kI64;
}
bool lookup_dtypes(DTypes in, DTypes out, Attrs) {
  return in.size() == 2 && is_index(in[1]) && out.size() == 1 && in[0] == out[0];
}
bool advanced_index_dtypes(DTypes in, DTypes out, Attrs) {
  if (in.size() < 2 || in.size() > 1 + ADVINDEX_MAX_INDICES || out.size() != 1 || in[0] != out[0]) return false;
  return std::all_of(in.begin() + 1, in.end(), is_index);
}
// index_put: x and values of one dtype, one integer index tensor, accumulate=false.
bool index_put_dtypes(DTypes in, DTypes out, Attrs attrs) {
  if (in.size() != 3 || out.size() != 1 || in[0] != out[0] || in[1] != in[0] || !is_index(in[2])) return false;
  return attrs.size() >= 2 && (attrs[1].type == AttrType::kBool || attrs[1].type == AttrType::kInt) && attrs[1].i == 0;
}
bool movement_dtypes(DTypes in, DTypes out, Attrs) {  // 32-bit words move whatever they hold
  return !in.empty() && !out.empty() && all_are(in, in[0]) && all_are(out, in[0]);
}
bool full_dtypes(DTypes in, DTypes out, Attrs) { return in.empty() && out.size() == 1; }
bool arange_dtypes(DTypes in, DTypes out, Attrs) { return in.empty() && out.size() == 1 && out[0] != DType::kBool; }
bool cast_dtypes(DTypes in, DTypes out, Attrs) {
  // Not f32 -> integer (the CPU saturates through int64 and wraps; the device would not).
  return in.size() == 1 && out.size() == 1 && !(in[0] == DType::kF32 && is_index(out[0]));
}

// ---- Lowerings ------------------------------------------------------------------------------

template <int Code>
Status unary(Lowerer& l) { return l.unary(Code); }
template <int Code>
Status binary(Lowerer& l) { return l.binary("binary_f32", Code); }
template <int Code>
Status compare(Lowerer& l) { return l.binary("compare_f32", Code); }
template <int Code>
Status logical(Lowerer& l) { return l.binary("logical_b32", Code); }
template <int Code>
Status reduce(Lowerer& l) { return l.reduce(Code); }
template <Status (Lowerer::*Method)()>
Status call(Lowerer& l) { return (l.*Method)(); }
Status argmax(Lowerer& l) { return l.arg_reduce(true); }
Status argmin(Lowerer& l) { return l.arg_reduce(false); }
Status softmax(Lowerer& l) { return l.softmax(false); }
Status log_softmax(Lowerer& l) { return l.softmax(true); }

}  // namespace

// ---- One row per op of codegen/ops.def, named after its enumerator --------------------------
namespace op_rows {

// Elementwise binary
constexpr OpLowering Add{f32_elementwise, binary<BINARY_ADD>};
constexpr OpLowering Sub{f32_elementwise, binary<BINARY_SUB>};
constexpr OpLowering Mul{f32_elementwise, binary<BINARY_MUL>};
constexpr OpLowering Div{f32_elementwise, binary<BINARY_DIV>};  // rounding_mode: BINARY_DIV_TRUNC / _FLOOR
constexpr OpLowering Pow{f32_elementwise, binary<BINARY_POW>};
constexpr OpLowering Maximum{f32_elementwise, binary<BINARY_MAXIMUM>};
constexpr OpLowering Minimum{f32_elementwise, binary<BINARY_MINIMUM>};
constexpr OpLowering Remainder{f32_elementwise, binary<BINARY_REMAINDER>};
constexpr OpLowering Eq{f32_compare, compare<COMPARE_EQ>};
constexpr OpLowering Ne{f32_compare, compare<COMPARE_NE>};
constexpr OpLowering Lt{f32_compare, compare<COMPARE_LT>};
constexpr OpLowering Le{f32_compare, compare<COMPARE_LE>};
constexpr OpLowering Gt{f32_compare, compare<COMPARE_GT>};
constexpr OpLowering Ge{f32_compare, compare<COMPARE_GE>};
constexpr OpLowering LogicalAnd{bool_logical, logical<LOGICAL_AND>};
constexpr OpLowering LogicalOr{bool_logical, logical<LOGICAL_OR>};
constexpr OpLowering LogicalXor{bool_logical, logical<LOGICAL_XOR>};

// Elementwise unary
constexpr OpLowering Neg{f32_elementwise, unary<UNARY_NEG>};
constexpr OpLowering Abs{f32_elementwise, unary<UNARY_ABS>};
constexpr OpLowering Exp{f32_elementwise, unary<UNARY_EXP>};
constexpr OpLowering Log{f32_elementwise, unary<UNARY_LOG>};
constexpr OpLowering Sqrt{f32_elementwise, unary<UNARY_SQRT>};
constexpr OpLowering Rsqrt{f32_elementwise, unary<UNARY_RSQRT>};
constexpr OpLowering Reciprocal{f32_elementwise, unary<UNARY_RECIPROCAL>};
constexpr OpLowering Sin{f32_elementwise, unary<UNARY_SIN>};
constexpr OpLowering Cos{f32_elementwise, unary<UNARY_COS>};
constexpr OpLowering Tanh{f32_elementwise, unary<UNARY_TANH>};
constexpr OpLowering Sigmoid{f32_elementwise, unary<UNARY_SIGMOID>};
constexpr OpLowering Relu{f32_elementwise, unary<UNARY_RELU>};
constexpr OpLowering Gelu{f32_elementwise, unary<UNARY_GELU>};  // approximate='tanh': UNARY_GELU_TANH
constexpr OpLowering Silu{f32_elementwise, unary<UNARY_SILU>};
constexpr OpLowering Hardswish{f32_elementwise, unary<UNARY_HARDSWISH>};
constexpr OpLowering Hardsigmoid{f32_elementwise, unary<UNARY_HARDSIGMOID>};
constexpr OpLowering Erf{f32_elementwise, unary<UNARY_ERF>};
constexpr OpLowering Floor{f32_elementwise, unary<UNARY_FLOOR>};
constexpr OpLowering Ceil{f32_elementwise, unary<UNARY_CEIL>};
constexpr OpLowering Round{f32_elementwise, unary<UNARY_ROUND>};
constexpr OpLowering Sign{f32_elementwise, unary<UNARY_SIGN>};
constexpr OpLowering Atan{f32_elementwise, unary<UNARY_ATAN>};
constexpr OpLowering Asin{f32_elementwise, unary<UNARY_ASIN>};
constexpr OpLowering Acos{f32_elementwise, unary<UNARY_ACOS>};
constexpr OpLowering Tan{f32_elementwise, unary<UNARY_TAN>};
constexpr OpLowering Sinh{f32_elementwise, unary<UNARY_SINH>};
constexpr OpLowering Cosh{f32_elementwise, unary<UNARY_COSH>};
constexpr OpLowering Asinh{f32_elementwise, unary<UNARY_ASINH>};
constexpr OpLowering Acosh{f32_elementwise, unary<UNARY_ACOSH>};
constexpr OpLowering Atanh{f32_elementwise, unary<UNARY_ATANH>};
constexpr OpLowering LogicalNot{logical_not_dtypes, call<&Lowerer::logical_not>};
constexpr OpLowering Clamp{f32_elementwise, unary<UNARY_CLAMP>};
constexpr OpLowering LeakyRelu{f32_elementwise, unary<UNARY_LEAKY_RELU>};
constexpr OpLowering Cast{cast_dtypes, call<&Lowerer::cast>};
constexpr OpLowering Identity{movement_dtypes, call<&Lowerer::reshape>};

// Selection
constexpr OpLowering Where{where_dtypes, call<&Lowerer::where>};
constexpr OpLowering MaskedFill{masked_fill_dtypes, call<&Lowerer::masked_fill>};

// Reductions
constexpr OpLowering Sum{sum_dtypes, reduce<REDUCE_SUM>};
constexpr OpLowering Mean{f32_op, reduce<REDUCE_MEAN>};
constexpr OpLowering Amax{f32_op, reduce<REDUCE_AMAX>};
constexpr OpLowering Amin{f32_op, reduce<REDUCE_AMIN>};
constexpr OpLowering Prod{f32_op, reduce<REDUCE_PROD>};
constexpr OpLowering Any{bool_reduce, reduce<REDUCE_AMAX>};  // max over 0/1 (reduce_b32)
constexpr OpLowering All{bool_reduce, reduce<REDUCE_AMIN>};  // min over 0/1
constexpr OpLowering Argmax{arg_reduce_dtypes, argmax};
constexpr OpLowering Argmin{arg_reduce_dtypes, argmin};
constexpr OpLowering Var{f32_op, reduce<REDUCE_VAR>};
constexpr OpLowering Cumsum{f32_op, call<&Lowerer::cumsum>};

// Linear algebra and convolution
constexpr OpLowering Matmul{f32_op, call<&Lowerer::matmul>};
constexpr OpLowering Linear{f32_op, call<&Lowerer::matmul>};
constexpr OpLowering Bmm{f32_op, call<&Lowerer::matmul>};
constexpr OpLowering Conv2d{f32_op, call<&Lowerer::conv2d>};
constexpr OpLowering BatchNorm{f32_op, call<&Lowerer::batch_norm>};
constexpr OpLowering LayerNorm{f32_op, call<&Lowerer::layer_norm>};
constexpr OpLowering MaxPool2d{f32_op, call<&Lowerer::pool>};
constexpr OpLowering AvgPool2d{f32_op, call<&Lowerer::pool>};
constexpr OpLowering AdaptiveAvgPool2d{f32_op, call<&Lowerer::pool>};
constexpr OpLowering AdaptiveMaxPool2d{f32_op, call<&Lowerer::pool>};
constexpr OpLowering Softmax{f32_op, softmax};
constexpr OpLowering LogSoftmax{f32_op, log_softmax};
constexpr OpLowering Embedding{lookup_dtypes, call<&Lowerer::indexing>};
constexpr OpLowering Topk = kNoVulkanKernel;

// Creation
constexpr OpLowering Full{full_dtypes, call<&Lowerer::full>};
constexpr OpLowering Arange{arange_dtypes, call<&Lowerer::arange>};
constexpr OpLowering Tril{movement_dtypes, call<&Lowerer::tri>};
constexpr OpLowering Triu{movement_dtypes, call<&Lowerer::tri>};

// Data movement
constexpr OpLowering Reshape{movement_dtypes, call<&Lowerer::reshape>};
constexpr OpLowering Permute{movement_dtypes, call<&Lowerer::permute>};
constexpr OpLowering Slice{movement_dtypes, call<&Lowerer::slice>};
constexpr OpLowering Cat{movement_dtypes, call<&Lowerer::cat>};
constexpr OpLowering Split{movement_dtypes, call<&Lowerer::split>};
constexpr OpLowering Expand{movement_dtypes, call<&Lowerer::expand>};
constexpr OpLowering Pad{movement_dtypes, call<&Lowerer::pad>};
constexpr OpLowering Flip{movement_dtypes, call<&Lowerer::flip>};
constexpr OpLowering Gather{lookup_dtypes, call<&Lowerer::indexing>};
constexpr OpLowering IndexSelect{lookup_dtypes, call<&Lowerer::indexing>};
constexpr OpLowering Index{advanced_index_dtypes, call<&Lowerer::advanced_index>};

// Data-dependent (output shapes from the data) and higher-order (subgraphs): the CPU's.
constexpr OpLowering Nonzero = kNoVulkanKernel;
constexpr OpLowering MaskedSelect = kNoVulkanKernel;
constexpr OpLowering Item = kNoVulkanKernel;
constexpr OpLowering Cond = kNoVulkanKernel;
constexpr OpLowering WhileLoop = kNoVulkanKernel;
constexpr OpLowering InvokeSubgraph = kNoVulkanKernel;


constexpr OpLowering BitwiseAnd = kNoVulkanKernel;
constexpr OpLowering BitwiseOr = kNoVulkanKernel;
constexpr OpLowering BitwiseXor = kNoVulkanKernel;
constexpr OpLowering BitwiseLeftShift = kNoVulkanKernel;
constexpr OpLowering BitwiseRightShift = kNoVulkanKernel;
constexpr OpLowering BitwiseNot = kNoVulkanKernel;
constexpr OpLowering PadBorder = kNoVulkanKernel;
constexpr OpLowering IndexPut{index_put_dtypes, call<&Lowerer::index_put>};

// Quantized weights (int8/int4): the CPU's fused-dequantization kernels.
constexpr OpLowering LinearQ = kNoVulkanKernel;
constexpr OpLowering EmbeddingQ = kNoVulkanKernel;

}  // namespace op_rows

namespace {

// Indexed by OpKind: ops.def's order is the enum's.
constexpr std::array kOps = std::to_array<OpLowering>({
#define KILN_OP(Enum, name, min_in, max_in, num_out, attrs) op_rows::Enum,
#include "ops.def"
#undef KILN_OP
});
static_assert(kOps.size() == kOpCount, "one OpLowering row per op of codegen/ops.def");
// GCC's UBSan instrumentation makes function-pointer comparisons non-constant, so the
// sanitizer builds skip this check; every other build (CI's dev build included) makes it.
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
static_assert(std::all_of(kOps.begin(), kOps.end(),
                          [](const OpLowering& r) { return (r.supports == nullptr) == (r.lower == nullptr); }),
              "an op the device supports has a lowering, and only such an op");
#endif

const OpLowering& row(OpKind op) {
  static constexpr OpLowering kNone{};
  const auto index = static_cast<std::size_t>(op);
  return index < kOps.size() ? kOps[index] : kNone;
}

}  // namespace

Status Lowerer::node(const SegmentNode& n) {
  node_ = &n;
  attrs_ = n.attrs;
  for (std::uint32_t t : n.inputs) {
    if (t != backend::kAbsentTensor && t >= desc_.tensors.size()) return invalid("input tensor ", t, " out of range");
  }
  for (std::uint32_t t : n.outputs) {
    if (t >= desc_.tensors.size()) return invalid("output tensor ", t, " out of range");
    // Never write a constant (shared by every segment) or a host input; never in place,
    // except an index_put updating a device-resident tensor (kDevice) where it lies.
    const auto role = desc_.tensors[t].role;
    const bool device_update = role == SegmentTensor::Role::kDevice && n.op == OpKind::IndexPut && !n.inputs.empty() &&
                               n.inputs[0] < desc_.tensors.size() && desc_.tensors[n.inputs[0]].role == SegmentTensor::Role::kDevice &&
                               desc_.tensors[n.inputs[0]].io_index == desc_.tensors[t].io_index;
    if (role != SegmentTensor::Role::kInternal && role != SegmentTensor::Role::kOutput && !device_update) {
      return invalid("output tensor ", t, " is a segment input, a constant or device state");
    }
    if (std::find(n.inputs.begin(), n.inputs.end(), t) != n.inputs.end()) return invalid("tensor ", t, " is both input and output");
  }
  const OpLowering& r = row(n.op);
  if (r.lower == nullptr) return unsupported("op '", op(), "' has no Vulkan kernel");
  return r.lower(*this);
}

bool dtype_on_device(DType d) {
  return d == DType::kF32 || d == DType::kI32 || d == DType::kI64 || d == DType::kBool;
}

bool op_supported(OpKind op, DTypes in, DTypes out, Attrs attrs) {
  if (!std::all_of(in.begin(), in.end(), dtype_on_device) || !std::all_of(out.begin(), out.end(), dtype_on_device)) {
    return false;
  }
  const OpLowering& r = row(op);
  return r.supports != nullptr && r.supports(in, out, attrs);
}

}  // namespace kiln::vulkan

// Which ops and dtypes run on the device (op_supported), and the op -> lowering map.
#include "backends/vulkan/lowerer.h"

namespace kiln::vulkan {

using backend::SegmentNode;
using backend::SegmentTensor;
using cpu::AttrValue;

namespace {

int unary_code(OpKind k) {
  switch (k) {
    case OpKind::Neg: return UNARY_NEG;
    case OpKind::Abs: return UNARY_ABS;
    case OpKind::Exp: return UNARY_EXP;
    case OpKind::Log: return UNARY_LOG;
    case OpKind::Sqrt: return UNARY_SQRT;
    case OpKind::Rsqrt: return UNARY_RSQRT;
    case OpKind::Reciprocal: return UNARY_RECIPROCAL;
    case OpKind::Sin: return UNARY_SIN;
    case OpKind::Cos: return UNARY_COS;
    case OpKind::Tanh: return UNARY_TANH;
    case OpKind::Sigmoid: return UNARY_SIGMOID;
    case OpKind::Relu: return UNARY_RELU;
    case OpKind::Gelu: return UNARY_GELU;
    case OpKind::Silu: return UNARY_SILU;
    case OpKind::Hardswish: return UNARY_HARDSWISH;
    case OpKind::Hardsigmoid: return UNARY_HARDSIGMOID;
    case OpKind::Erf: return UNARY_ERF;
    case OpKind::Floor: return UNARY_FLOOR;
    case OpKind::Ceil: return UNARY_CEIL;
    case OpKind::Round: return UNARY_ROUND;
    case OpKind::Sign: return UNARY_SIGN;
    case OpKind::Clamp: return UNARY_CLAMP;
    case OpKind::LeakyRelu: return UNARY_LEAKY_RELU;
    default: return -1;
  }
}

int binary_code(OpKind k) {
  switch (k) {
    case OpKind::Add: return BINARY_ADD;
    case OpKind::Sub: return BINARY_SUB;
    case OpKind::Mul: return BINARY_MUL;
    case OpKind::Div: return BINARY_DIV;
    case OpKind::Pow: return BINARY_POW;
    case OpKind::Maximum: return BINARY_MAXIMUM;
    case OpKind::Minimum: return BINARY_MINIMUM;
    case OpKind::Remainder: return BINARY_REMAINDER;
    default: return -1;
  }
}

int compare_code(OpKind k) {
  switch (k) {
    case OpKind::Eq: return COMPARE_EQ;
    case OpKind::Ne: return COMPARE_NE;
    case OpKind::Lt: return COMPARE_LT;
    case OpKind::Le: return COMPARE_LE;
    case OpKind::Gt: return COMPARE_GT;
    case OpKind::Ge: return COMPARE_GE;
    default: return -1;
  }
}

int logical_code(OpKind k) {
  switch (k) {
    case OpKind::LogicalAnd: return LOGICAL_AND;
    case OpKind::LogicalOr: return LOGICAL_OR;
    case OpKind::LogicalXor: return LOGICAL_XOR;
    default: return -1;
  }
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
    // Never write a constant (shared by every segment) or a host input; never in place.
    const auto role = desc_.tensors[t].role;
    if (role != SegmentTensor::Role::kInternal && role != SegmentTensor::Role::kOutput) {
      return invalid("output tensor ", t, " is a segment input or a constant");
    }
    if (std::find(n.inputs.begin(), n.inputs.end(), t) != n.inputs.end()) return invalid("tensor ", t, " is both input and output");
  }
  const OpKind k = n.op;
  if (const int c = unary_code(k); c >= 0) return unary(c);
  if (const int c = binary_code(k); c >= 0) return binary("binary_f32", c);
  if (const int c = compare_code(k); c >= 0) return binary("compare_f32", c);
  if (const int c = logical_code(k); c >= 0) return binary("logical_b32", c);
  switch (k) {
    case OpKind::LogicalNot: return logical_not();
    case OpKind::Where: return where();
    case OpKind::MaskedFill: return masked_fill();
    case OpKind::Matmul:
    case OpKind::Linear:
    case OpKind::Bmm: return matmul();
    case OpKind::Conv2d: return conv2d();
    case OpKind::MaxPool2d:
    case OpKind::AvgPool2d:
    case OpKind::AdaptiveAvgPool2d:
    case OpKind::AdaptiveMaxPool2d: return pool();
    case OpKind::Sum: return reduce(REDUCE_SUM);
    case OpKind::Mean: return reduce(REDUCE_MEAN);
    case OpKind::Amax: return reduce(REDUCE_AMAX);
    case OpKind::Amin: return reduce(REDUCE_AMIN);
    case OpKind::Prod: return reduce(REDUCE_PROD);
    case OpKind::Any: return reduce(REDUCE_AMAX);  // max over 0/1 (reduce_b32)
    case OpKind::All: return reduce(REDUCE_AMIN);  // min over 0/1
    case OpKind::Var: return reduce(REDUCE_VAR);
    case OpKind::Argmax: return arg_reduce(true);
    case OpKind::Argmin: return arg_reduce(false);
    case OpKind::Cumsum: return cumsum();
    case OpKind::Softmax: return softmax(false);
    case OpKind::LogSoftmax: return softmax(true);
    case OpKind::LayerNorm: return layer_norm();
    case OpKind::BatchNorm: return batch_norm();
    case OpKind::Embedding:
    case OpKind::IndexSelect:
    case OpKind::Gather: return indexing();
    case OpKind::Index: return advanced_index();
    case OpKind::Identity:
    case OpKind::Reshape: return reshape();
    case OpKind::Permute: return permute();
    case OpKind::Slice: return slice();
    case OpKind::Cat: return cat();
    case OpKind::Split: return split();
    case OpKind::Expand: return expand();
    case OpKind::Flip: return flip();
    case OpKind::Pad: return pad();
    case OpKind::Tril:
    case OpKind::Triu: return tri();
    case OpKind::Full: return full();
    case OpKind::Arange: return arange();
    case OpKind::Cast: return cast();
    default: return unsupported("op '", op(), "' has no Vulkan kernel");
  }
}

namespace {

bool all_are(std::span<const DType> ds, DType d) {
  return std::all_of(ds.begin(), ds.end(), [d](DType x) { return x == d; });
}

bool is_index(DType d) { return d == DType::kI32 || d == DType::kI64; }

}  // namespace

bool dtype_on_device(DType d) {
  return d == DType::kF32 || d == DType::kI32 || d == DType::kI64 || d == DType::kBool;
}

bool op_supported(OpKind op, std::span<const DType> in, std::span<const DType> out, std::span<const AttrValue> attrs) {
  for (DType d : in) {
    if (!dtype_on_device(d)) return false;
  }
  for (DType d : out) {
    if (!dtype_on_device(d)) return false;
  }
  const bool f32_io = all_are(in, DType::kF32) && all_are(out, DType::kF32);
  if (unary_code(op) >= 0 || binary_code(op) >= 0) return f32_io && !out.empty();
  if (compare_code(op) >= 0) return in.size() == 2 && all_are(in, DType::kF32) && all_are(out, DType::kBool);
  if (logical_code(op) >= 0) return all_are(in, DType::kBool) && all_are(out, DType::kBool);
  switch (op) {
    case OpKind::LogicalNot:
      return in.size() == 1 && (in[0] == DType::kBool || in[0] == DType::kF32) && all_are(out, DType::kBool);
    case OpKind::Where:
      return in.size() == 3 && in[0] == DType::kBool && out.size() == 1 && in[1] == out[0] && in[2] == out[0];
    case OpKind::MaskedFill:
      return in.size() == 3 && in[1] == DType::kBool && out.size() == 1 && in[0] == out[0] && in[2] == out[0];
    case OpKind::Matmul:
    case OpKind::Linear:
    case OpKind::Bmm:
    case OpKind::Conv2d:
    case OpKind::MaxPool2d:
    case OpKind::AvgPool2d:
    case OpKind::AdaptiveAvgPool2d:
    case OpKind::AdaptiveMaxPool2d:
    case OpKind::Softmax:
    case OpKind::LogSoftmax:
    case OpKind::LayerNorm:
    case OpKind::BatchNorm:
    case OpKind::Mean:
    case OpKind::Amax:
    case OpKind::Amin:
    case OpKind::Prod:
    case OpKind::Var:
    case OpKind::Cumsum: return f32_io && !in.empty();
    case OpKind::Any:
    case OpKind::All: return in.size() == 1 && in[0] == DType::kBool && all_are(out, DType::kBool);
    case OpKind::Argmax:
    case OpKind::Argmin:
      return in.size() == 1 && in[0] == DType::kF32 && out.size() == 1 && out[0] == DType::kI64;
    case OpKind::Sum:
      // sum's optional dtype attribute must be absent or f32.
      if (attrs.size() > 2 && attrs[2].type != AttrType::kNone && attrs[2].i != static_cast<std::int64_t>(DType::kF32)) return false;
      return f32_io && !in.empty();
    case OpKind::Embedding:
    case OpKind::IndexSelect:
    case OpKind::Gather:
      return in.size() == 2 && is_index(in[1]) && out.size() == 1 && in[0] == out[0];
    case OpKind::Index:
      if (in.size() < 2 || in.size() > 4 || out.size() != 1 || in[0] != out[0]) return false;
      return std::all_of(in.begin() + 1, in.end(), is_index);
    case OpKind::Identity:
    case OpKind::Reshape:
    case OpKind::Permute:
    case OpKind::Slice:
    case OpKind::Cat:
    case OpKind::Split:
    case OpKind::Expand:
    case OpKind::Flip:
    case OpKind::Pad:
    case OpKind::Tril:
    case OpKind::Triu:
      return !in.empty() && !out.empty() && all_are(in, in[0]) && all_are(out, in[0]);
    case OpKind::Full:
    case OpKind::Arange: return in.empty() && out.size() == 1 && (op == OpKind::Full || out[0] != DType::kBool);
    case OpKind::Cast:
      // Not f32 -> integer (the CPU saturates through int64 and wraps; the device would not).
      return in.size() == 1 && out.size() == 1 && !(in[0] == DType::kF32 && is_index(out[0]));
    default: return false;  // data-dependent, higher-order, and ops without a shader
  }
}

}  // namespace kiln::vulkan

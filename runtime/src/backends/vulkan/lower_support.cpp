// Which ops and dtypes run on the device (op_supported), and the op -> lowering map.
#include "backends/vulkan/lowerer.h"

namespace kiln::vulkan {

using backend::SegmentNode;
using backend::SegmentTensor;
using cpu::AttrValue;

namespace {

int unary_code(OpKind k) {
  switch (k) {
    case OpKind::Neg: return 0;
    case OpKind::Abs: return 1;
    case OpKind::Exp: return 2;
    case OpKind::Log: return 3;
    case OpKind::Sqrt: return 4;
    case OpKind::Rsqrt: return 5;
    case OpKind::Reciprocal: return 6;
    case OpKind::Sin: return 7;
    case OpKind::Cos: return 8;
    case OpKind::Tanh: return 9;
    case OpKind::Sigmoid: return 10;
    case OpKind::Relu: return 11;
    case OpKind::Gelu: return 12;  // 13: tanh approximation
    case OpKind::Silu: return 14;
    case OpKind::Hardswish: return 15;
    case OpKind::Hardsigmoid: return 16;
    case OpKind::Erf: return 17;
    case OpKind::Floor: return 18;
    case OpKind::Ceil: return 19;
    case OpKind::Round: return 20;
    case OpKind::Sign: return 21;
    case OpKind::Clamp: return 22;
    case OpKind::LeakyRelu: return 23;
    default: return -1;
  }
}

int binary_code(OpKind k) {
  switch (k) {
    case OpKind::Add: return 0;
    case OpKind::Sub: return 1;
    case OpKind::Mul: return 2;
    case OpKind::Div: return 3;  // 4 trunc, 5 floor
    case OpKind::Pow: return 6;
    case OpKind::Maximum: return 7;
    case OpKind::Minimum: return 8;
    case OpKind::Remainder: return 9;
    default: return -1;
  }
}

int compare_code(OpKind k) {
  switch (k) {
    case OpKind::Eq: return 0;
    case OpKind::Ne: return 1;
    case OpKind::Lt: return 2;
    case OpKind::Le: return 3;
    case OpKind::Gt: return 4;
    case OpKind::Ge: return 5;
    default: return -1;
  }
}

int logical_code(OpKind k) {
  switch (k) {
    case OpKind::LogicalAnd: return 0;
    case OpKind::LogicalOr: return 1;
    case OpKind::LogicalXor: return 2;
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
    case OpKind::Sum: return reduce(0);
    case OpKind::Mean: return reduce(1);
    case OpKind::Amax: return reduce(2);
    case OpKind::Amin: return reduce(3);
    case OpKind::Prod: return reduce(4);
    case OpKind::Any: return reduce(2);  // max over 0/1 (reduce_b32)
    case OpKind::All: return reduce(3);  // min over 0/1
    case OpKind::Var: return reduce(5);
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

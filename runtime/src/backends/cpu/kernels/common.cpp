#include "backends/cpu/kernels/common.h"

#include <cinttypes>
#include <cstdio>
#include <limits>
#include <memory>
#include <vector>

#include "backends/cpu/kernels/convert.h"

namespace kiln::cpu::kernels {

void append_text(std::string& s, std::string_view v) { s.append(v); }

void append_text(std::string& s, std::int64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%" PRId64, v);
  s += buf;
}

void append_text(std::string& s, double v) {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%.9g", v);
  s += buf;
}

void append_text(std::string& s, DType v) {
  if (dtype_is_valid(static_cast<std::uint8_t>(v))) {
    s.append(dtype_name(v));
  } else {
    s += "dtype#";
    append_text(s, static_cast<std::int64_t>(v));
  }
}

void append_text(std::string& s, ShapeText v) {
  s += '[';
  for (std::size_t i = 0; i < v.dims.size(); ++i) {
    if (i > 0) s += ", ";
    append_text(s, v.dims[i]);
  }
  s += ']';
}

Status unsupported_dtype(std::string_view op, DType dtype, std::string_view what) {
  return unsupported(op, "dtype ", dtype, " not supported (", what, ")");
}

Status check_view(std::string_view op, std::string_view name, const TensorView& v,
                  bool allow_unallocated) {
  if (!dtype_is_valid(static_cast<std::uint8_t>(v.dtype))) {
    return invalid(op, name, " has an unknown dtype ", v.dtype);
  }
  if (v.rank < 0 || v.rank > kMaxRank) {
    return invalid(op, name, ".rank=", v.rank, " outside [0, ", kMaxRank, "]");
  }
  if (allow_unallocated && v.data == nullptr) return Status::Ok();
  std::int64_t n = static_cast<std::int64_t>(dtype_size(v.dtype));
  for (int i = 0; i < v.rank; ++i) {
    if (v.shape[i] < 0) return invalid(op, name, ".shape[", i, "]=", v.shape[i], " is negative");
    if (__builtin_mul_overflow(n, v.shape[i], &n)) {
      return invalid(op, name, ".shape=", shape_text(v), " is too large");
    }
  }
  if (n > 0 && v.data == nullptr) {
    return invalid(op, name, " has shape ", shape_text(v), " but no data");
  }
  return Status::Ok();
}

Status check_io(std::string_view op, Inputs inputs, Outputs outputs, const IoSpec& spec) {
  const auto num_in = static_cast<int>(inputs.size());
  if (num_in < spec.min_inputs || (spec.max_inputs >= 0 && num_in > spec.max_inputs)) {
    if (spec.min_inputs == spec.max_inputs) {
      return invalid(op, "expects ", spec.min_inputs, " inputs, got ", num_in);
    }
    if (spec.max_inputs < 0) {
      return invalid(op, "expects at least ", spec.min_inputs, " inputs, got ", num_in);
    }
    return invalid(op, "expects ", spec.min_inputs, " to ", spec.max_inputs, " inputs, got ",
                   num_in);
  }
  const auto num_out = static_cast<int>(outputs.size());
  if ((spec.num_outputs >= 0 && num_out != spec.num_outputs) || num_out < 1) {
    return invalid(op, "expects ", spec.num_outputs, " outputs, got ", num_out);
  }
  for (int i = 0; i < num_in; ++i) {
    const TensorView& v = inputs[i];
    if (((spec.optional_inputs >> i) & 1u) != 0 && is_absent(v)) continue;
    if (Status s = check_view(op, str_cat("input ", i), v); !s.ok()) return s;
  }
  for (int i = 0; i < num_out; ++i) {
    Status s = check_view(op, str_cat("output ", i), outputs[i], spec.unallocated_outputs);
    if (!s.ok()) return s;
  }
  return Status::Ok();
}

Status check_dtype(std::string_view op, std::string_view name, const TensorView& v, DType dtype) {
  if (v.dtype == dtype) return Status::Ok();
  return invalid(op, name, ".dtype=", v.dtype, " but expected ", dtype);
}

Status check_same_shape(std::string_view op, std::string_view name_a, const TensorView& a,
                        std::string_view name_b, const TensorView& b) {
  bool same = a.rank == b.rank;
  for (int i = 0; same && i < a.rank; ++i) same = a.shape[i] == b.shape[i];
  if (same) return Status::Ok();
  return invalid(op, name_b, ".shape=", shape_text(b), " != ", name_a, ".shape=", shape_text(a));
}

Status check_out_shape(std::string_view op, const TensorView& out,
                       std::span<const std::int64_t> expected, std::string_view name) {
  bool same = static_cast<std::size_t>(out.rank) == expected.size();
  for (int i = 0; same && i < out.rank; ++i) same = out.shape[i] == expected[i];
  if (same) return Status::Ok();
  return invalid(op, name, ".shape=", shape_text(out), " but expected ", shape_text(expected));
}

Status check_dim(std::string_view op, std::string_view what, std::int64_t dim, int rank) {
  if (dim >= 0 && dim < rank) return Status::Ok();
  return invalid(op, what, "=", dim, " outside [0, ", rank, ")");
}

std::array<std::int64_t, kMaxRank> contiguous_strides(const TensorView& v) {
  std::array<std::int64_t, kMaxRank> strides{};
  std::int64_t s = 1;
  for (int i = v.rank - 1; i >= 0; --i) {
    strides[i] = s;
    s *= v.shape[i];
  }
  return strides;
}

std::int64_t dims_product(const TensorView& v, int begin, int end) {
  std::int64_t n = 1;
  for (int i = begin; i < end; ++i) n *= v.shape[i];
  return n;
}

// ---------------------------------------------------------------------------------------
// Attributes

namespace {

const char* type_name(AttrType t) {
  switch (t) {
    case AttrType::kNone: return "none";
    case AttrType::kInt: return "int";
    case AttrType::kFloat: return "float";
    case AttrType::kBool: return "bool";
    case AttrType::kString: return "string";
    case AttrType::kInts: return "ints";
    case AttrType::kFloats: return "floats";
    case AttrType::kExpr: return "expr";
    case AttrType::kExprs: return "exprs";
    case AttrType::kDType: return "dtype";
    case AttrType::kGraph: return "graph";
  }
  return "unknown";
}

// The attribute at `index`, or an error naming it when missing or of another type.
Result<const AttrValue*> attr_at(std::string_view op, Attrs attrs, std::size_t index,
                                 std::string_view name, AttrType t1, AttrType t2) {
  if (index >= attrs.size()) {
    return invalid(op, "missing attribute '", name, "' (#", index, "; got ", attrs.size(),
                   " attributes)");
  }
  const AttrValue& a = attrs[index];
  if (a.type != t1 && a.type != t2) {
    return invalid(op, "attribute '", name, "' has type ", type_name(a.type), ", expected ",
                   type_name(t1));
  }
  return &a;
}

}  // namespace

Result<std::int64_t> attr_int(std::string_view op, Attrs attrs, std::size_t index,
                              std::string_view name) {
  KILN_ASSIGN_OR_RETURN(const AttrValue* a,
                        attr_at(op, attrs, index, name, AttrType::kInt, AttrType::kExpr));
  return a->i;
}

Result<bool> attr_bool(std::string_view op, Attrs attrs, std::size_t index, std::string_view name) {
  KILN_ASSIGN_OR_RETURN(const AttrValue* a,
                        attr_at(op, attrs, index, name, AttrType::kBool, AttrType::kInt));
  return a->i != 0;
}

Result<double> attr_float(std::string_view op, Attrs attrs, std::size_t index,
                          std::string_view name) {
  KILN_ASSIGN_OR_RETURN(const AttrValue* a,
                        attr_at(op, attrs, index, name, AttrType::kFloat, AttrType::kFloat));
  return a->f;
}

Result<std::optional<double>> attr_optional_float(std::string_view op, Attrs attrs,
                                                  std::size_t index, std::string_view name) {
  if (index >= attrs.size() || attrs[index].type == AttrType::kNone) {
    return std::optional<double>();
  }
  KILN_ASSIGN_OR_RETURN(double v, attr_float(op, attrs, index, name));
  return std::optional<double>(v);
}

Result<std::span<const std::int64_t>> attr_ints(std::string_view op, Attrs attrs,
                                                std::size_t index, std::string_view name) {
  KILN_ASSIGN_OR_RETURN(const AttrValue* a,
                        attr_at(op, attrs, index, name, AttrType::kInts, AttrType::kExprs));
  return a->ints;
}

Result<std::string_view> attr_string(std::string_view op, Attrs attrs, std::size_t index,
                                     std::string_view name, bool optional) {
  if (optional && (index >= attrs.size() || attrs[index].type == AttrType::kNone)) {
    return std::string_view();
  }
  KILN_ASSIGN_OR_RETURN(const AttrValue* a,
                        attr_at(op, attrs, index, name, AttrType::kString, AttrType::kString));
  return a->s;
}

Result<DType> attr_dtype(std::string_view op, Attrs attrs, std::size_t index,
                         std::string_view name) {
  KILN_ASSIGN_OR_RETURN(const AttrValue* a,
                        attr_at(op, attrs, index, name, AttrType::kDType, AttrType::kInt));
  if (a->i < 0 || a->i >= kDTypeCount) {
    return invalid(op, "attribute '", name, "'=", a->i, " is not a dtype");
  }
  return static_cast<DType>(a->i);
}

// ---------------------------------------------------------------------------------------
// f16/bf16 through f32

bool has_half_views(Inputs inputs, Outputs outputs) {
  for (const TensorView& v : inputs) {
    if (!is_absent(v) && is_half_dtype(v.dtype)) return true;
  }
  for (const TensorView& v : outputs) {
    if (is_half_dtype(v.dtype)) return true;
  }
  return false;
}

namespace {

// Rewrites a half view into an f32 one backed by `storage` (converted when `copy_in`).
void widen(TensorView& v, std::vector<std::unique_ptr<float[]>>& storage, bool copy_in) {
  const std::int64_t n = v.numel();
  auto buf = std::make_unique<float[]>(static_cast<std::size_t>(n > 0 ? n : 1));
  if (copy_in) convert_buffer(v.data, v.dtype, buf.get(), DType::kF32, n);
  v.dtype = DType::kF32;
  v.data = buf.get();
  storage.push_back(std::move(buf));
}

}  // namespace

Status run_via_f32(KernelFn kernel, KernelContext& ctx, Inputs inputs, Outputs outputs,
                   Attrs attrs) {
  std::vector<std::unique_ptr<float[]>> storage;
  std::array<TensorView, 16> in_small;
  std::vector<TensorView> in_large;
  std::span<TensorView> in = inputs.size() <= in_small.size()
                                 ? std::span<TensorView>(in_small.data(), inputs.size())
                                 : (in_large.resize(inputs.size()), std::span<TensorView>(in_large));
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    in[i] = inputs[i];
    if (!is_absent(in[i]) && is_half_dtype(in[i].dtype)) widen(in[i], storage, true);
  }
  std::vector<TensorView> out(outputs.begin(), outputs.end());
  for (TensorView& v : out) {
    if (is_half_dtype(v.dtype)) widen(v, storage, false);
  }
  if (has_half_views(in, out)) {  // cannot happen; guards against endless recursion
    return Status(StatusCode::kInternal, "run_via_f32 left a half view");
  }
  KILN_RETURN_IF_ERROR(kernel(ctx, in, out, attrs));
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (is_half_dtype(outputs[i].dtype)) {
      convert_buffer(out[i].data, DType::kF32, outputs[i].data, outputs[i].dtype, outputs[i].numel());
    }
  }
  return Status::Ok();
}

}  // namespace kiln::cpu::kernels

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

void append_text(std::string& s, const Name& v) {
  s.append(v.base);
  if (v.index >= 0) {
    s += '[';
    append_text(s, v.index);
    s += ']';
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

bool view_is_valid(const TensorView& v, bool allow_unallocated) {
  if (!dtype_is_valid(static_cast<std::uint8_t>(v.dtype)) || v.rank < 0 || v.rank > kMaxRank) return false;
  if (allow_unallocated && v.data == nullptr) return true;
  auto n = static_cast<std::int64_t>(element_size(v.dtype));
  for (int i = 0; i < v.rank; ++i) {
    if (v.shape[i] < 0 || __builtin_mul_overflow(n, v.shape[i], &n)) return false;
  }
  return n == 0 || v.data != nullptr;
}

Status view_error(std::string_view op, Name name, const TensorView& v, bool allow_unallocated) {
  if (!dtype_is_valid(static_cast<std::uint8_t>(v.dtype))) {
    return invalid(op, name, " has an unknown dtype ", v.dtype);
  }
  if (v.rank < 0 || v.rank > kMaxRank) {
    return invalid(op, name, ".rank=", v.rank, " outside [0, ", kMaxRank, "]");
  }
  if (allow_unallocated && v.data == nullptr) return Status::Ok();
  auto n = static_cast<std::int64_t>(element_size(v.dtype));
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

Status io_error(std::string_view op, Inputs inputs, Outputs outputs, const IoSpec& spec) {
  const auto num_in = static_cast<int>(inputs.size());
  if (num_in < spec.min_inputs || (spec.max_inputs >= 0 && num_in > spec.max_inputs)) {
    if (spec.min_inputs == spec.max_inputs) {
      return invalid(op, "expects ", spec.min_inputs, " inputs, got ", num_in);
    }
    if (spec.max_inputs < 0) {
      return invalid(op, "expects at least ", spec.min_inputs, " inputs, got ", num_in);
    }
    return invalid(op, "expects ", spec.min_inputs, " to ", spec.max_inputs, " inputs, got ", num_in);
  }
  const auto num_out = static_cast<int>(outputs.size());
  if ((spec.num_outputs >= 0 && num_out != spec.num_outputs) || num_out < 1) {
    return invalid(op, "expects ", spec.num_outputs, " outputs, got ", num_out);
  }
  for (int i = 0; i < num_in; ++i) {
    const TensorView& v = inputs[i];
    if (((spec.optional_inputs >> i) & 1u) != 0 && is_absent(v)) continue;
    KILN_RETURN_IF_ERROR(view_error(op, Name("inputs", i), v, false));
  }
  for (int i = 0; i < num_out; ++i) {
    KILN_RETURN_IF_ERROR(view_error(op, Name("outputs", i), outputs[i], spec.unallocated_outputs));
  }
  return Status(StatusCode::kInternal, str_cat("[", op, "] io_error found no error"));
}

Status dtype_error(std::string_view op, Name name, const TensorView& v, DType dtype) {
  return invalid(op, name, ".dtype=", v.dtype, " but expected ", dtype);
}

Status same_shape_error(std::string_view op, std::string_view name_a, const TensorView& a,
                        std::string_view name_b, const TensorView& b) {
  return invalid(op, name_b, ".shape=", shape_text(b), " != ", name_a, ".shape=", shape_text(a));
}

Status out_shape_error(std::string_view op, const TensorView& out, std::span<const std::int64_t> expected,
                       Name name) {
  return invalid(op, name, ".shape=", shape_text(out), " but expected ", shape_text(expected));
}

Status dim_error(std::string_view op, Name what, std::int64_t dim, int rank) {
  return invalid(op, what, "=", dim, " outside [0, ", rank, ")");
}

std::array<std::int64_t, kMaxRank> contiguous_strides(const TensorView& v) {
  std::array<std::int64_t, kMaxRank> strides{};
  std::uint64_t s = 1;
  for (int i = v.rank - 1; i >= 0; --i) {
    strides[i] = static_cast<std::int64_t>(s);
    s *= static_cast<std::uint64_t>(v.shape[i]);
  }
  return strides;
}

std::int64_t dims_product(const TensorView& v, int begin, int end) {
  std::uint64_t n = 1;
  for (int i = begin; i < end; ++i) n *= static_cast<std::uint64_t>(v.shape[i]);
  return static_cast<std::int64_t>(n);
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

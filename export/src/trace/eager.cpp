// Eager execution: ops on concrete tensors through the runtime's CPU kernels, by way of
// the one runtime-internal interface export uses (kiln/runtime/internal/eager.h).
#include <cstring>

#include "kiln/runtime/internal/eager.h"
#include "trace/context.h"

namespace kiln::detail {
namespace {

TensorView view_of(const Tensor& t) {
  TensorView v;
  if (!t.defined()) return v;  // an absent optional input: rank 0, data == nullptr
  v.dtype = t.dtype();
  v.rank = static_cast<int>(t.dim());
  for (int i = 0; i < v.rank; ++i) v.shape[static_cast<std::size_t>(i)] = *t.impl()->shape[static_cast<std::size_t>(i)].constant_value();
  v.data = const_cast<std::uint8_t*>(t.bytes().data());
  return v;
}

// Attribute storage that outlives the kernel call (AttrValue holds spans).
struct AttrStorage {
  std::vector<AttrValue> values;
  std::vector<std::vector<std::int64_t>> ints;
  std::vector<std::string> strings;
};

void convert(const std::vector<ir::Attr>& attrs, AttrStorage& st, OpKind op, const SourceLoc& loc) {
  st.ints.reserve(attrs.size());
  st.strings.reserve(attrs.size());
  for (const ir::Attr& a : attrs) {
    AttrValue v;
    std::visit([&](const auto& x) {
      using T = std::decay_t<decltype(x)>;
      if constexpr (std::is_same_v<T, std::int64_t>) { v.type = AttrType::kInt; v.i = x; }
      else if constexpr (std::is_same_v<T, double>) { v.type = AttrType::kFloat; v.f = x; }
      else if constexpr (std::is_same_v<T, bool>) { v.type = AttrType::kBool; v.i = x; }
      else if constexpr (std::is_same_v<T, std::string>) { st.strings.push_back(x); v.type = AttrType::kString; v.s = st.strings.back(); }
      else if constexpr (std::is_same_v<T, std::vector<std::int64_t>>) { st.ints.push_back(x); v.type = AttrType::kInts; v.ints = st.ints.back(); }
      else if constexpr (std::is_same_v<T, std::vector<double>>) { v.type = AttrType::kFloats; v.floats = x; }
      else if constexpr (std::is_same_v<T, sym::Expr>) {
        auto c = x.constant_value();
        if (!c) op_error(op_name(op), "symbolic attribute in eager mode", loc, StatusCode::kInternal);
        v.type = AttrType::kExpr;
        v.i = *c;
      } else if constexpr (std::is_same_v<T, std::vector<sym::Expr>>) {
        std::vector<std::int64_t> vals;
        for (const sym::Expr& e : x) {
          auto c = e.constant_value();
          if (!c) op_error(op_name(op), "symbolic attribute in eager mode", loc, StatusCode::kInternal);
          vals.push_back(*c);
        }
        st.ints.push_back(std::move(vals));
        v.type = AttrType::kExprs;
        v.ints = st.ints.back();
      } else if constexpr (std::is_same_v<T, DType>) { v.type = AttrType::kDType; v.i = static_cast<std::int64_t>(x); }
      else if constexpr (std::is_same_v<T, ir::GraphRef>) { v.type = AttrType::kGraph; v.i = x.index; }
    }, a);
    st.values.push_back(v);
  }
}

}  // namespace

Tensor make_eager(DType dtype, std::vector<std::int64_t> shape) {
  std::uint64_t n = 1;
  for (std::int64_t d : shape) n *= static_cast<std::uint64_t>(d);
  return Tensor::from_bytes(dtype, std::move(shape), std::vector<std::uint8_t>(n * dtype_size(dtype), 0));
}

std::vector<Tensor> run_eager(OpKind op, const std::vector<Tensor>& inputs, const std::vector<ir::Attr>& attrs,
                              const std::vector<OutSpec>& outs, const SourceLoc& loc) {
  if (!eager::has_cpu_kernel(op)) op_error(op_name(op), "has no CPU kernel for eager execution", loc, StatusCode::kUnsupported);
  std::vector<TensorView> in;
  for (const Tensor& t : inputs) in.push_back(view_of(t));
  std::vector<Tensor> results(outs.size());
  std::vector<TensorView> out(outs.size());
  for (std::size_t i = 0; i < outs.size(); ++i) {
    if (outs[i].allocated_by_kernel) {
      out[i].dtype = outs[i].dtype;
      continue;
    }
    std::vector<std::int64_t> shape;
    for (const sym::Expr& d : outs[i].shape) {
      auto c = d.constant_value();
      if (!c) op_error(op_name(op), "symbolic output shape in eager mode", loc, StatusCode::kInternal);
      shape.push_back(*c);
    }
    results[i] = make_eager(outs[i].dtype, shape);
    out[i] = view_of(results[i]);
  }
  AttrStorage attr_storage;
  convert(attrs, attr_storage, op, loc);
  // Data-dependent ops (nonzero, masked_select) size their outputs themselves.
  const eager::AllocateOutput allocate = [&results](int index, DType dtype,
                                                     std::span<const std::int64_t> shape) -> Result<TensorView> {
    if (index < 0 || static_cast<std::size_t>(index) >= results.size()) return Status(StatusCode::kInternal, "bad output index");
    results[static_cast<std::size_t>(index)] = make_eager(dtype, {shape.begin(), shape.end()});
    return view_of(results[static_cast<std::size_t>(index)]);
  };
  const Status st = eager::run_cpu_kernel(op, in, out, attr_storage.values, allocate);
  if (!st.ok()) throw ExportError(st.code() == StatusCode::kInvalidBundle ? StatusCode::kExportError : st.code(),
                                  st.message() + " (" + loc_text(loc) + ")");
  return results;
}

}  // namespace kiln::detail

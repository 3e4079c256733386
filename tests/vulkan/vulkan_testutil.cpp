#include "vulkan/vulkan_testutil.h"

#include <cmath>
#include <cstring>

#include "backends/cpu/thread_pool.h"

namespace kiln::vulkan::testing {

bool is_no_device(const Status& s) {
  if (s.code() != StatusCode::kUnavailable) return false;
  const std::string& m = s.message();
  return m.find("no Vulkan device") != std::string::npos || m.find("no Vulkan loader") != std::string::npos ||
         m.find("no Vulkan driver") != std::string::npos || m.find("has no Vulkan backend") != std::string::npos;
}

backend::Backend* shared_backend(std::string* why) {
  static std::string reason;
  static std::unique_ptr<backend::Backend> backend = [] {
    backend::BackendOptions options;
    options.validation = true;
    auto r = backend::create_backend("vulkan", options);
    if (!r.ok()) {
      reason = r.status().to_string();
      if (!is_no_device(r.status())) {
        ADD_FAILURE() << "Vulkan is present but unusable: " << reason;
        reason = "(failed) " + reason;
      }
      return std::unique_ptr<backend::Backend>();
    }
    return std::move(r).value();
  }();
  if (why != nullptr) *why = reason;
  return backend.get();
}

namespace {
std::uint32_t add_tensor(backend::SegmentDesc& d, backend::SegmentTensor t) {
  d.tensors.push_back(std::move(t));
  return static_cast<std::uint32_t>(d.tensors.size() - 1);
}
}  // namespace

std::uint32_t Graph::input(Tensor t) {
  backend::SegmentTensor st;
  st.role = backend::SegmentTensor::Role::kInput;
  st.dtype = t.dtype();
  st.shape = t.shape();
  st.io_index = desc.num_inputs++;
  const std::uint32_t id = add_tensor(desc, st);
  host.emplace(id, std::move(t));
  return id;
}

std::uint32_t Graph::constant(Tensor t, std::uint32_t index) {
  // A backend keeps one device copy per constant index (one Program's constants); the tests
  // share one backend across graphs, so every constant gets a process-unique index.
  static std::uint32_t next = 1000;
  index = next++;
  backend::SegmentTensor st;
  st.role = backend::SegmentTensor::Role::kConstant;
  st.dtype = t.dtype();
  st.shape = t.shape();
  st.constant = index;
  const std::uint32_t id = add_tensor(desc, st);
  host.emplace(id, std::move(t));
  return id;
}

std::uint32_t Graph::internal(DType dtype, Shape shape) {
  backend::SegmentTensor st;
  st.role = backend::SegmentTensor::Role::kInternal;
  st.dtype = dtype;
  st.shape = std::move(shape);
  return add_tensor(desc, st);
}

std::uint32_t Graph::output(DType dtype, Shape shape) {
  backend::SegmentTensor st;
  st.role = backend::SegmentTensor::Role::kOutput;
  st.dtype = dtype;
  st.shape = std::move(shape);
  st.io_index = desc.num_outputs++;
  return add_tensor(desc, st);
}

void Graph::node(OpKind op, std::vector<std::uint32_t> inputs, std::vector<std::uint32_t> outputs, AttrList a) {
  attrs.reserve(64);
  attrs.push_back(std::move(a));
  backend::SegmentNode& n = desc.nodes.emplace_back();
  n.op = op;
  n.inputs = std::move(inputs);
  n.outputs = std::move(outputs);
  const auto span = attrs.back().span();
  n.attrs.assign(span.begin(), span.end());
  n.where = "node " + std::to_string(desc.nodes.size() - 1) + " (" + std::string(op_name(op)) + ")";
}

Constants::Constants(const Graph& g) {
  for (const auto& [id, t] : g.host) {
    const auto& st = g.desc.tensors[id];
    if (st.role == backend::SegmentTensor::Role::kConstant) data_.emplace(st.constant, t);
  }
}

std::span<const std::uint8_t> Constants::constant_data(std::uint32_t index) const {
  auto it = data_.find(index);
  if (it == data_.end()) return {};
  return {static_cast<const std::uint8_t*>(it->second.data()),
          static_cast<std::size_t>(it->second.numel()) * dtype_size(it->second.dtype())};
}

namespace {
// The CPU reference's context: a real one-thread pool (kernels may ask for it).
class CpuContext : public KernelContext {
 public:
  Result<TensorView> allocate_output(int, DType, std::span<const std::int64_t>) override {
    return Status(StatusCode::kInternal, "data-dependent ops are not part of Vulkan segments");
  }
  cpu::ThreadPool& pool() override {
    static cpu::ThreadPool one(1);
    return one;
  }
};
}  // namespace

Result<std::vector<Tensor>> run_cpu(const Graph& g) {
  std::vector<Tensor> values(g.desc.tensors.size());
  for (std::size_t i = 0; i < g.desc.tensors.size(); ++i) {
    const auto& t = g.desc.tensors[i];
    auto it = g.host.find(static_cast<std::uint32_t>(i));
    values[i] = it != g.host.end() ? it->second : Tensor(t.dtype, t.shape);
  }
  for (std::size_t k = 0; k < g.desc.nodes.size(); ++k) {
    const auto& n = g.desc.nodes[k];
    std::vector<TensorView> ins, outs;
    for (std::uint32_t id : n.inputs) ins.push_back(id == backend::kAbsentTensor ? cpu::testing::absent() : values[id].view());
    for (std::uint32_t id : n.outputs) outs.push_back(values[id].view());
    CpuContext ctx;
    const KernelFn fn = cpu::cpu_kernel(n.op);
    if (fn == nullptr) return Status(StatusCode::kInternal, "no CPU kernel");
    KILN_RETURN_IF_ERROR(fn(ctx, ins, outs, g.attrs[k].span()));
  }
  std::vector<Tensor> outs(g.desc.num_outputs);
  for (std::size_t i = 0; i < g.desc.tensors.size(); ++i) {
    const auto& t = g.desc.tensors[i];
    if (t.role == backend::SegmentTensor::Role::kOutput) outs[t.io_index] = values[i];
  }
  return outs;
}

Result<std::vector<Tensor>> run_vulkan(backend::Backend& b, const Graph& g) {
  Constants constants(g);
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<backend::PreparedSegment> seg, b.prepare(g.desc, constants));
  std::vector<TensorView> ins(g.desc.num_inputs), outs(g.desc.num_outputs);
  std::vector<Tensor> results(g.desc.num_outputs);
  for (std::size_t i = 0; i < g.desc.tensors.size(); ++i) {
    const auto& t = g.desc.tensors[i];
    if (t.role == backend::SegmentTensor::Role::kInput) ins[t.io_index] = g.host.at(static_cast<std::uint32_t>(i)).view();
    if (t.role == backend::SegmentTensor::Role::kOutput) {
      // Poison the output so a missing write cannot pass.
      results[t.io_index] = Tensor(t.dtype, t.shape);
      std::memset(results[t.io_index].data(), 0x7f, static_cast<std::size_t>(results[t.io_index].numel()) * dtype_size(t.dtype));
      outs[t.io_index] = results[t.io_index].view();
    }
  }
  KILN_RETURN_IF_ERROR(seg->run({ins, outs}));
  for (const Tensor& r : results) {
    if (!r.canary_intact()) return Status(StatusCode::kInternal, "output canary overwritten");
  }
  return results;
}

::testing::AssertionResult outputs_match(const std::vector<Tensor>& got, const std::vector<Tensor>& want, double rtol,
                                         double atol) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << got.size() << " outputs, want " << want.size();
  for (std::size_t i = 0; i < got.size(); ++i) {
    auto r = dtype_is_floating(want[i].dtype()) ? cpu::testing::all_close(got[i], want[i].values(), rtol, atol)
                                                : cpu::testing::all_equal(got[i], want[i].values());
    if (!r) return ::testing::AssertionFailure() << "output " << i << ": " << r.message();
  }
  return ::testing::AssertionSuccess();
}

}  // namespace kiln::vulkan::testing

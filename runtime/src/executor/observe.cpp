// SessionOptions::observer: each executed node's outputs handed to the caller, and the
// extra segment outputs that bring an accelerator's intermediates to host memory for it.
#include <algorithm>
#include <array>

#include "backends/cpu/kernels/nchwc.h"
#include "executor/session_impl.h"

namespace kiln {

void Session::Impl::observe_nodes(const Frame& f, std::uint32_t first, std::uint32_t last) {
  std::vector<ObservedValue> outs;
  // Plain copies of blocked (NCHW8c) outputs: the observer sees every tensor plain.
  std::vector<std::vector<float>> plain;
  std::vector<std::array<std::int64_t, 4>> plain_shape;
  for (std::uint32_t n = first; n <= last; ++n) {
    const NodeInfo& ni = f.info->nodes[n];
    outs.assign(ni.outputs.size(), ObservedValue{});
    plain.assign(ni.outputs.size(), {});
    plain_shape.assign(ni.outputs.size(), {});
    for (std::size_t k = 0; k < ni.outputs.size(); ++k) {
      const std::uint32_t v = ni.outputs[k];
      const ValueInfo& vi = f.info->values[v];
      ObservedValue& o = outs[k];
      if (vi.kind == fb::ValueKind::SymInt || vi.kind == fb::ValueKind::SymBool) {
        const Result<std::int64_t> value = eval(vi.expr);  // bound by bind_node already
        o.kind = value.ok() ? ObservedValue::Kind::kInt : ObservedValue::Kind::kAbsent;
        o.int_value = value.ok() ? *value : 0;
        continue;
      }
      const TensorView& t = f.views[v];
      if (vi.kind == fb::ValueKind::None || t.data == nullptr) {
        o.kind = ObservedValue::Kind::kAbsent;
        continue;
      }
      o.dtype = t.dtype;
      if (vi.blocked && t.rank == 5) {
        const Result<std::int64_t> c = eval(vi.shape->Get(1));
        if (!c.ok()) {
          o.kind = ObservedValue::Kind::kAbsent;
          continue;
        }
        auto& shape = plain_shape[k];
        shape = {t.shape[0], *c, t.shape[2], t.shape[3]};
        plain[k].resize(static_cast<std::size_t>(shape[0] * shape[1] * shape[2] * shape[3]));
        cpu::nchwc::to_plain(static_cast<const float*>(t.data), plain[k].data(), shape[0], shape[1], shape[2] * shape[3], pool);
        o.shape = std::span<const std::int64_t>(shape.data(), 4);
        o.data = {reinterpret_cast<const std::uint8_t*>(plain[k].data()), plain[k].size() * sizeof(float)};
        continue;
      }
      o.shape = std::span<const std::int64_t>(t.shape.data(), static_cast<std::size_t>(t.rank));
      o.data = {static_cast<const std::uint8_t*>(t.data), t.nbytes()};
    }
    options.observer(NodeObservation{f.graph_id, n, static_cast<std::uint32_t>(calls.size()), outs});
  }
}

Result<const std::vector<std::uint32_t>*> Session::Impl::segment_outputs(Frame& f, std::uint32_t s) {
  const std::vector<std::uint32_t>& planned = f.plan->segment_outputs[s];
  if (!options.observer) return &planned;
  // Every value the segment produces becomes an output, in node order after the planned
  // ones (the same order on every run, as the prepared segment's io_index expects). The
  // values the host does not read otherwise get heap bytes of their own: their arena
  // slots, if any, may be shared with others by lifetime.
  observed_outputs = planned;
  const Segment& seg = f.info->segments[s];
  for (std::uint32_t n = seg.first; n <= seg.last; ++n) {
    for (std::uint32_t v : f.info->nodes[n].outputs) {
      if (f.info->values[v].kind != fb::ValueKind::Tensor) continue;
      if (std::find(observed_outputs.begin(), observed_outputs.end(), v) != observed_outputs.end()) continue;
      observed_outputs.push_back(v);
      KILN_ASSIGN_OR_RETURN(f.views[v].data, heap_alloc(f, v, f.views[v].nbytes()));
    }
  }
  return &observed_outputs;
}

}  // namespace kiln

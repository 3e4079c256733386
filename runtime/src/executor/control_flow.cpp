// Control-flow nodes: cond and invoke_subgraph call one graph, while_loop calls its
// condition and body graphs until the condition is false. A call runs through run_graph
// with the caller's symbols saved and restored (a subgraph binds its own); its results are
// copied out before the callee's memory is reused.
#include <algorithm>
#include <cstring>
#include <new>

#include "executor/session_impl.h"

namespace kiln {

Result<CallArg> owned_copy(const CallArg& value, std::unique_ptr<std::uint8_t[]>& storage) {
  CallArg out = value;
  if (!value.is_int) {
    const std::size_t bytes = value.t.nbytes();
    storage.reset(new (std::nothrow) std::uint8_t[std::max<std::size_t>(bytes, 1)]);
    if (storage == nullptr) return out_of_memory(bytes, "a subgraph result");
    if (bytes) std::memcpy(storage.get(), value.t.data, bytes);
    out.t.data = storage.get();
  }
  return out;
}

// Writes one output of a control-flow node from the callee's result.
Status Session::Impl::store_output(Frame& f, std::uint32_t n, std::size_t k, const CallArg& value) {
  const NodeInfo& ni = f.info->nodes[n];
  const std::uint32_t v = ni.outputs[k];
  const ValueInfo& vi = f.info->values[v];
  if (vi.kind == fb::ValueKind::SymInt || vi.kind == fb::ValueKind::SymBool) {
    if (!value.is_int) return Status(StatusCode::kInvalidBundle, "node " + std::to_string(n) + ": output " + std::to_string(k) + " is symbolic, the subgraph returned a tensor");
    KILN_ASSIGN_OR_RETURN(void* data, heap_alloc(f, v, 8));
    f.views[v] = make_view(DType::kI64, {}, data);
    std::memcpy(f.views[v].data, &value.i, 8);
    return Status::Ok();
  }
  if (value.is_int) return Status(StatusCode::kInvalidBundle, "node " + std::to_string(n) + ": output " + std::to_string(k) + " is a tensor, the subgraph returned an int");
  if (value.t.dtype != vi.dtype) return Status(StatusCode::kInvalidBundle, "node " + std::to_string(n) + ": output " + std::to_string(k) + " dtype differs from the subgraph's");
  TensorView& dst = f.views[v];
  const std::size_t bytes = value.t.nbytes();
  if (f.plan->offset[v] >= 0 && !f.plan->dynamic[v]) {
    if (dst.rank != value.t.rank || !std::equal(dst.shape.begin(), dst.shape.begin() + dst.rank, value.t.shape.begin())) {
      return Status(StatusCode::kInvalidBundle, "node " + std::to_string(n) + ": output " + std::to_string(k) + " has a different shape than the bundle says" + location(p, ni.debug));
    }
  } else {
    KILN_ASSIGN_OR_RETURN(void* data, heap_alloc(f, v, bytes));
    dst = make_view(value.t.dtype, value.t.dims(), data);
  }
  if (bytes) std::memcpy(dst.data, value.t.data, bytes);
  return Status::Ok();
}

Status Session::Impl::run_control_flow(Frame& f, std::uint32_t n) {
  const NodeInfo& ni = f.info->nodes[n];
  struct CallScope {  // names this node when the run's node budget runs out inside it
    std::vector<const NodeInfo*>& calls;
    ~CallScope() { calls.pop_back(); }
  };
  calls.push_back(&ni);
  CallScope scope{calls};
  auto arg_of = [&](std::uint32_t v) -> Result<CallArg> {
    const ValueInfo& vi = f.info->values[v];
    CallArg a;
    if (vi.kind == fb::ValueKind::SymInt || vi.kind == fb::ValueKind::SymBool) {
      auto x = eval(vi.expr);
      if (!x.ok()) return x.status();
      a.is_int = true;
      a.i = *x;
    } else {
      a.t = f.views[v];
    }
    return a;
  };
  auto truth = [&](const CallArg& a, const char* what) -> Result<bool> {
    if (a.is_int) return a.i != 0;
    if (a.t.numel() != 1) return bad_input(std::string(what) + " must have one element, it has " + std::to_string(a.t.numel()) + location(p, ni.debug));
    switch (a.t.dtype) {
      case DType::kBool: case DType::kU8: case DType::kI8: return *static_cast<const std::uint8_t*>(a.t.data) != 0;
      case DType::kI32: return *static_cast<const std::int32_t*>(a.t.data) != 0;
      case DType::kI64: return *static_cast<const std::int64_t*>(a.t.data) != 0;
      case DType::kF32: return *static_cast<const float*>(a.t.data) != 0.0f;
      default: return Status(StatusCode::kUnsupported, std::string(what) + " of dtype " + std::string(dtype_name(a.t.dtype)));
    }
  };
  // Calls preserve the caller's symbols: a subgraph binds its own.
  const std::vector<std::int64_t> saved_symbols = symbols;
  const std::vector<std::uint8_t> saved_bound = bound;
  auto restore = [&] {
    symbols = saved_symbols;
    bound = saved_bound;
  };
  std::vector<CallArg> args;
  Status st = Status::Ok();
  // cond and invoke_subgraph: outputs are copied out before the callee's memory is reused.
  std::vector<CallArg> results(ni.outputs.size());
  std::vector<std::unique_ptr<std::uint8_t[]>> keep(ni.outputs.size());
  auto keep_sink = [&](std::size_t k, const CallArg& value) -> Status {
    if (!value.is_int) KILN_RETURN_IF_ERROR(reserve(value.t.nbytes(), 0, f, static_cast<std::int32_t>(ni.outputs[k]), false));
    KILN_ASSIGN_OR_RETURN(results[k], owned_copy(value, keep[k]));
    return Status::Ok();
  };
  if (ni.op == OpKind::Cond || ni.op == OpKind::InvokeSubgraph) {
    std::uint32_t callee = ni.subgraphs[0];
    std::size_t first_operand = 0;
    if (ni.op == OpKind::Cond) {
      KILN_ASSIGN_OR_RETURN(CallArg pred, arg_of(ni.inputs[0]));
      KILN_ASSIGN_OR_RETURN(bool take, truth(pred, "the cond predicate"));
      callee = ni.subgraphs[take ? 0 : 1];
      first_operand = 1;
    }
    for (std::size_t k = first_operand; k < ni.inputs.size(); ++k) {
      KILN_ASSIGN_OR_RETURN(CallArg a, arg_of(ni.inputs[k]));
      args.push_back(a);
    }
    st = run_graph(callee, args, false, keep_sink, nullptr);
    restore();
    if (!st.ok()) return st;
    for (std::size_t k = 0; k < results.size(); ++k) KILN_RETURN_IF_ERROR(store_output(f, n, k, results[k]));
  } else {  // while_loop
    for (std::uint32_t v : ni.inputs) {
      KILN_ASSIGN_OR_RETURN(CallArg a, arg_of(v));
      args.push_back(a);
    }
    const std::size_t carries = ni.outputs.size();
    std::int64_t limit = options.max_loop_iterations;
    const auto* node = f.graph->nodes()->Get(n);
    if (count(node->attrs()) > 0 && node->attrs()->Get(0)->kind() == fb::AttrKind::Int) limit = node->attrs()->Get(0)->i();
    std::vector<std::unique_ptr<std::uint8_t[]>> store(carries), next(carries);
    std::vector<CallArg> next_args(carries);
    bool go = false;
    for (std::int64_t iteration = 0;; ++iteration) {
      auto cond_sink = [&](std::size_t, const CallArg& value) -> Status {
        KILN_ASSIGN_OR_RETURN(bool b, truth(value, "the while_loop condition"));
        go = b;
        return Status::Ok();
      };
      st = run_graph(ni.subgraphs[0], args, false, cond_sink, nullptr);
      if (!st.ok()) break;
      if (!go) break;
      if (iteration >= limit) {
        st = bad_input("while_loop ran more than " + std::to_string(limit) + " iterations (raise SessionOptions::max_loop_iterations or the loop's max_iterations)" + location(p, ni.debug));
        break;
      }
      auto body_sink = [&](std::size_t k, const CallArg& value) -> Status {
        if (!value.is_int) KILN_RETURN_IF_ERROR(reserve(value.t.nbytes(), 0, f, static_cast<std::int32_t>(ni.outputs[k]), false));
        KILN_ASSIGN_OR_RETURN(next_args[k], owned_copy(value, next[k]));
        return Status::Ok();
      };
      st = run_graph(ni.subgraphs[1], args, false, body_sink, nullptr);
      if (!st.ok()) break;
      std::swap(store, next);
      for (std::size_t k = 0; k < carries; ++k) args[k] = next_args[k];
      restore();
    }
    restore();
    if (!st.ok()) return st;
    for (std::size_t k = 0; k < carries; ++k) KILN_RETURN_IF_ERROR(store_output(f, n, k, args[k]));
  }
  return Status::Ok();
}

}  // namespace kiln

// Stateful programs (mutable buffers): the core IR's BUFFER_MUTATION outputs and the
// training IR's in-place updates of buffers imported as state tensors, run step by step
// against the fixtures' `sequences` (each from the initial values, every step on the state
// the one before left), and the Session's state API:
// read / set / reset / snapshot / restore, and a failed run leaving the state unchanged.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "import/zip_testutil.h"
#include "kiln/export/import_pt2.h"
#include "kiln/export/serialize.h"
#include "kiln/format/kiln_generated.h"
#include "kiln/runtime/bundle.h"
#include "kiln/runtime/npy.h"
#include "kiln/runtime/program.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

fs::path stateful_dir(const std::string& model) { return fs::path(KILN_FIXTURES_DIR) / ".." / "torch_export_stateful" / model; }

HostTensor read_npy_or_die(const fs::path& p) {
  auto t = read_npy_any_order(p.string());
  EXPECT_TRUE(t.ok()) << p << ": " << t.status().message();
  return t.ok() ? std::move(*t) : HostTensor{};
}

::testing::AssertionResult matches(const HostTensor& g, const HostTensor& want, double rtol = 1e-4, double atol = 1e-5) {
  if (g.shape != want.shape) return ::testing::AssertionFailure() << "shape " << json(g.shape).dump() << " != " << json(want.shape).dump();
  if (g.dtype != want.dtype) return ::testing::AssertionFailure() << "dtype " << dtype_name(g.dtype) << " != " << dtype_name(want.dtype);
  for (std::int64_t i = 0; i < want.numel(); ++i) {
    const double a = g.element(i), b = want.element(i);
    if (!(std::abs(a - b) <= atol + rtol * std::abs(b))) return ::testing::AssertionFailure() << "element " << i << ": " << a << " != " << b;
  }
  return ::testing::AssertionSuccess();
}

struct Loaded {
  ir::Program ir;
  std::shared_ptr<const Program> program;
};

// import -> bundle bytes -> Bundle (verified) -> Program.
Result<Loaded> load(const fs::path& archive, const std::string& backend = "cpu") {
  auto ep = import_pt2(archive.string());
  if (!ep.ok()) return ep.status();
  auto bytes = serialize_bundle(ep->program());
  if (!bytes.ok()) return bytes.status();
  auto bundle = Bundle::from_bytes(*bytes);
  if (!bundle.ok()) return bundle.status();
  ProgramOptions options;
  options.backend = backend;
  auto program = Program::load(std::move(bundle).value(), options);
  if (!program.ok()) return program.status();
  return Loaded{ep->program(), *program};
}

// The inputs of one sequence step, in signature order.
std::vector<HostValue> step_inputs(const fs::path& dir, const ir::Program& p, const json& step) {
  std::vector<HostValue> out;
  for (const ir::InputSpec& in : p.inputs) out.push_back(HostValue::of(read_npy_or_die(dir / step["inputs"][in.name].get<std::string>())));
  return out;
}

class CounterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto l = load(stateful_dir("counter") / "model.core.pt2");
    ASSERT_TRUE(l.ok()) << l.status().message();
    loaded = std::move(*l);
  }
  HostTensor f32(std::vector<std::int64_t> shape, std::vector<float> v) {
    HostTensor t{DType::kF32, std::move(shape), {}};
    t.data.resize(v.size() * 4);
    std::memcpy(t.data.data(), v.data(), t.data.size());
    return t;
  }
  Loaded loaded;
};

// ---- import ------------------------------------------------------------------------------

TEST(StatefulImport, BufferMutationsBecomeStateTensorsWithTheBuffersInitialValues) {
  auto l = load(stateful_dir("counter") / "model.core.pt2");
  ASSERT_TRUE(l.ok()) << l.status().message();
  ASSERT_EQ(l->ir.states.size(), 2u);
  EXPECT_EQ(l->ir.states[0].name, "total");
  EXPECT_EQ(l->ir.states[0].dtype, DType::kF32);
  EXPECT_EQ(l->ir.states[0].shape, (std::vector<std::int64_t>{4}));
  EXPECT_EQ(l->ir.states[1].name, "steps");
  EXPECT_EQ(l->ir.states[1].dtype, DType::kI64);
  EXPECT_TRUE(l->ir.states[1].shape.empty());
  // The user sees only `x` in and the two user outputs out.
  ASSERT_EQ(l->ir.inputs.size(), 1u);
  EXPECT_EQ(l->ir.inputs[0].name, "x");
  EXPECT_EQ(l->ir.outputs.size(), 2u);
  const fb::Program& p = l->program->bundle().program();
  ASSERT_NE(p.signature()->states(), nullptr);
  EXPECT_EQ(p.signature()->states()->size(), 2u);
  const auto* entry = p.graphs()->Get(p.entry_graph());
  EXPECT_EQ(entry->inputs()->size(), 3u);   // x, total, steps
  EXPECT_EQ(entry->outputs()->size(), 4u);  // mul, add_2, new total, new steps
  Session s(*l->program);
  EXPECT_EQ(s.state_names(), (std::vector<std::string>{"total", "steps"}));
}

// Runs every sequence of `dir`'s manifest on `session` (each from the initial values, every
// step on the state the step before left) against the goldens; returns the steps run.
int run_sequences(const fs::path& dir, const Loaded& l, Session& session) {
  std::ifstream f(dir / "manifest.json");
  const json m = json::parse(f);
  int steps = 0;
  for (const json& seq : m["sequences"]) {
    SCOPED_TRACE(seq["name"].get<std::string>());
    session.reset_state();
    for (std::size_t j = 0; j < seq["steps"].size(); ++j) {
      SCOPED_TRACE("step " + std::to_string(j));
      const json& step = seq["steps"][j];
      auto r = session.run(step_inputs(dir, l.ir, step));
      EXPECT_TRUE(r.ok()) << r.status().message();
      if (!r.ok()) return steps;
      EXPECT_EQ(r->outputs.size(), step["outputs"].size());
      for (std::size_t o = 0; o < r->outputs.size() && o < step["outputs"].size(); ++o) {
        EXPECT_TRUE(matches(r->outputs[o].tensor, read_npy_or_die(dir / step["outputs"][o].get<std::string>()))) << "output " << o;
      }
      ++steps;
    }
  }
  return steps;
}

// Both IRs: the core IR's BUFFER_MUTATION outputs and the training IR's in-place add_ on
// the buffers become the same state.
TEST(StatefulImport, CounterBothIrsRunEverySequenceStepAgainstTheGoldens) {
  const fs::path dir = stateful_dir("counter");
  for (const char* file : {"model.core.pt2", "model.pt2"}) {
    for (const char* backend : {"cpu", "vulkan"}) {
      SCOPED_TRACE(std::string(file) + " on " + backend);
      auto l = load(dir / file, backend);
      if (!l.ok() && l.status().code() == StatusCode::kUnavailable) continue;  // no Vulkan device
      ASSERT_TRUE(l.ok()) << l.status().message();
      ASSERT_EQ(l->ir.states.size(), 2u);
      EXPECT_EQ(l->ir.states[0].name, "total");
      EXPECT_EQ(l->ir.states[1].name, "steps");
      Session session(*l->program);
      EXPECT_EQ(run_sequences(dir, *l, session), 3);
      // The state holds what the last step computed: the step counter is 3.
      auto count = session.read_state("steps");
      ASSERT_TRUE(count.ok()) << count.status().message();
      EXPECT_EQ(count->element(0), 3.0);
    }
  }
}

// The other ways PyTorch code updates a buffer (tests/fixtures/torch_extra/stateful, made by
// generate_stateful.py with PyTorch 2.6): advanced-index assignment at a position tensor,
// chained in-place ops, a shift register through cat + copy_, an RNN state overwritten from
// itself, an int64 step counter, select assignments, a reset flag through where, a
// streaming conv's carried frames. Each model's one state buffer, both IRs, CPU and Vulkan,
// every step of the 4-step sequence against PyTorch's.
TEST(StatefulImport, EveryWayOfUpdatingABufferRunsItsSequenceOnBothIrsAndBackends) {
  const std::vector<std::pair<std::string, std::string>> models = {
      {"index_assign_cache", "cache"}, {"ema", "running"},      {"rolling_window", "window"},
      {"reassigned_hidden", "h"},      {"int_step", "step"},     {"select_assign", "buf"},
      {"masked_reset", "acc"},         {"streaming_conv1d", "state"}};
  for (const auto& [model, state] : models) {
    const fs::path dir = fs::path(KILN_EXTRA_FIXTURES_DIR) / "stateful" / model;
    for (const char* file : {"model.core.pt2", "model.pt2"}) {
      for (const char* backend : {"cpu", "vulkan"}) {
        SCOPED_TRACE(model + "/" + file + " on " + backend);
        auto l = load(dir / file, backend);
        if (!l.ok() && l.status().code() == StatusCode::kUnavailable) continue;  // no Vulkan device
        ASSERT_TRUE(l.ok()) << l.status().message();
        ASSERT_EQ(l->ir.states.size(), 1u);
        EXPECT_EQ(l->ir.states[0].name, state);
        Session session(*l->program);
        EXPECT_EQ(run_sequences(dir, *l, session), 4);
      }
    }
  }
}

// The KV cache: the core IR's index_put(cache, [None, None, input_pos], rows) and the
// training IR's cache.index_copy_(2, input_pos, rows) write the new K/V rows into the
// k_cache_i / v_cache_i state; prefill and decode steps match PyTorch's.
TEST(StatefulImport, KvDecoderBothIrsRunPrefillAndDecodeStepsAgainstTheGoldens) {
  const fs::path dir = stateful_dir("kv_decoder");
  std::ifstream f(dir / "manifest.json");
  const json m = json::parse(f);
  std::size_t want = 0;
  for (const json& seq : m["sequences"]) want += seq["steps"].size();
  for (const char* file : {"model.core.pt2", "model.pt2"}) {
    for (const char* backend : {"cpu", "vulkan"}) {
      SCOPED_TRACE(std::string(file) + " on " + backend);
      auto l = load(dir / file, backend);
      if (!l.ok() && l.status().code() == StatusCode::kUnavailable) continue;  // no Vulkan device
      ASSERT_TRUE(l.ok()) << l.status().message();
      ASSERT_EQ(l->ir.states.size(), 4u);
      EXPECT_EQ(l->ir.states[0].name, "k_cache_0");
      EXPECT_EQ(l->ir.states[3].name, "v_cache_1");
      Session session(*l->program);
      EXPECT_EQ(run_sequences(dir, *l, session), static_cast<int>(want));
    }
  }
}

// The training IR's in-place update is an index_put into the state, not a copy of the cache
// through a cat: a decode step writes the new rows only.
TEST(StatefulImport, TrainingIrIndexCopyOfTheCacheIsAnIndexPut) {
  auto ep = import_pt2((stateful_dir("kv_decoder") / "model.pt2").string());
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  const ir::Program& p = ep->program();
  const ir::Graph& g = p.graphs[static_cast<std::size_t>(p.entry)];
  int index_puts = 0;
  for (const ir::Node& n : g.nodes) index_puts += n.op == OpKind::IndexPut;
  EXPECT_EQ(index_puts, 4);
  // Each state output is an IndexPut of its state input.
  const std::size_t users = p.outputs.size();
  for (std::size_t k = 0; k < p.states.size(); ++k) {
    SCOPED_TRACE(p.states[k].name);
    const int out = g.outputs[users + k];
    auto producer = std::find_if(g.nodes.begin(), g.nodes.end(), [&](const ir::Node& n) { return n.outputs[0] == out; });
    ASSERT_NE(producer, g.nodes.end());
    EXPECT_EQ(producer->op, OpKind::IndexPut);
    EXPECT_EQ(producer->inputs[0], g.inputs[p.inputs.size() + k]);
  }
}

// The counter's training IR with `self.total[1:3].fill_(5)` before `self.total.add_(...)`:
// a write into a slice of a buffer reaches the state through a slice_scatter.
TEST(StatefulImport, TrainingIrWriteIntoASliceOfABufferUpdatesTheState) {
  auto entries = kiln::testing::read_zip((stateful_dir("counter") / "model.pt2").string());
  json m = json::parse(entries.at("serialized_exported_program.json"));
  json& g = m["graph_module"]["graph"];
  auto arg = [](const std::string& name, json a) { return json{{"name", name}, {"arg", a}}; };
  json slice = {{"target", "torch.ops.aten.slice.Tensor"},
                {"inputs", json::array({arg("self", {{"as_tensor", {{"name", "b_total"}}}}), arg("dim", {{"as_int", 0}}),
                                        arg("start", {{"as_int", 1}}), arg("end", {{"as_int", 3}})})},
                {"outputs", json::array({{{"as_tensor", {{"name", "middle"}}}}})},
                {"metadata", json::object()}};
  json fill = {{"target", "torch.ops.aten.fill_.Scalar"},
               {"inputs", json::array({arg("self", {{"as_tensor", {{"name", "middle"}}}}), arg("value", {{"as_float", 5.0}})})},
               {"outputs", json::array({{{"as_tensor", {{"name", "fill_"}}}}})},
               {"metadata", json::object()}};
  g["nodes"].insert(g["nodes"].begin(), fill);
  g["nodes"].insert(g["nodes"].begin(), slice);
  json two = g["tensor_values"]["b_total"];
  two["sizes"] = json::array({{{"as_int", 2}}});
  g["tensor_values"]["middle"] = two;
  g["tensor_values"]["fill_"] = two;
  entries["serialized_exported_program.json"] = m.dump();
  const fs::path p = fs::temp_directory_path() / ("kiln_slice_state_" + std::to_string(::getpid()) + ".pt2");
  ASSERT_TRUE(kiln::testing::write_zip(p.string(), entries));
  auto ep = import_pt2(p.string());
  fs::remove(p);
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  auto bytes = serialize_bundle(ep->program());
  ASSERT_TRUE(bytes.ok()) << bytes.status().message();
  auto program = Program::load(std::move(Bundle::from_bytes(*bytes)).value());
  ASSERT_TRUE(program.ok()) << program.status().message();
  Session s(**program);
  HostTensor x{DType::kF32, {1, 4}, std::vector<std::uint8_t>(16)};
  const float ones[4] = {1, 1, 1, 1};
  std::memcpy(x.data.data(), ones, 16);
  for (int call = 1; call <= 2; ++call) {
    auto r = s.run(std::vector<HostValue>{HostValue::of(x)});
    ASSERT_TRUE(r.ok()) << r.status().message();
    // Every call sets total[1:3] to 5, then adds 1 everywhere.
    const std::vector<double> want = {static_cast<double>(call), 6, 6, static_cast<double>(call)};
    for (int k = 0; k < 4; ++k) EXPECT_EQ(r->outputs[0].tensor.element(k), want[static_cast<std::size_t>(k)]) << "call " << call << " element " << k;
    EXPECT_EQ(s.read_state("total")->element(1), 6.0);
  }
}

// ---- verification of state declarations ---------------------------------------------------

TEST(StatefulFormat, InconsistentStateDeclarationsAreRefusedNamingTheProblem) {
  auto ep = import_pt2((stateful_dir("counter") / "model.core.pt2").string());
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  const ir::Program good = ep->program();
  struct Case {
    std::function<void(ir::Program&)> edit;
    std::string message;
  };
  const int entry = good.entry;
  const std::vector<Case> cases = {
      {[](ir::Program& p) { p.states[1].name = "total"; }, "state 1 'total': duplicate state name"},
      {[](ir::Program& p) { p.states[0].name = ""; }, "state 0: missing name"},
      {[](ir::Program& p) { p.states[0].initial = p.states[1].initial; },
       "state 0 'total': initial value (constant " + std::to_string(good.states[1].initial) + ") has a different dtype or shape"},
      {[](ir::Program& p) { p.states.pop_back(); }, "inputs/outputs do not match the signature (3/4 vs 2/3, states included)"},
      {[entry](ir::Program& p) {
         ir::Graph& g = p.graphs[static_cast<std::size_t>(entry)];
         g.values[static_cast<std::size_t>(g.inputs[1])].dtype = DType::kF64;
       },
       "input 1 (state 'total'): dtype f64 differs from the state's f32"},
      {[entry](ir::Program& p) {
         ir::Graph& g = p.graphs[static_cast<std::size_t>(entry)];
         g.values[static_cast<std::size_t>(g.outputs[2])].shape = {sym::Expr::constant(5)};
       },
       "output 2 (state 'total'), dim 0: not the state's static size 4"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.message);
    ir::Program p = good;
    c.edit(p);
    auto bytes = serialize_bundle(p);
    Status st = bytes.ok() ? Bundle::from_bytes(*bytes).status() : bytes.status();
    ASSERT_FALSE(st.ok());
    EXPECT_EQ(st.code(), StatusCode::kInvalidBundle) << st.message();
    EXPECT_NE(st.message().find(c.message), std::string::npos) << st.message();
  }
}

// ---- the Session's state ------------------------------------------------------------------

TEST_F(CounterTest, StateStartsAtTheInitialValuesAndAdvancesPerRun) {
  Session s(*loaded.program);
  auto total = s.read_state("total");
  ASSERT_TRUE(total.ok());
  EXPECT_TRUE(matches(*total, f32({4}, {0, 0, 0, 0})));
  const std::vector<HostValue> in = {HostValue::of(f32({2, 4}, {1, 2, 3, 4, 10, 20, 30, 40}))};
  auto r1 = s.run(in);
  ASSERT_TRUE(r1.ok()) << r1.status().message();
  EXPECT_TRUE(matches(r1->outputs[0].tensor, f32({4}, {11, 22, 33, 44})));
  EXPECT_EQ(r1->outputs[1].tensor.element(0), 1.0);
  auto r2 = s.run(in);
  ASSERT_TRUE(r2.ok()) << r2.status().message();
  EXPECT_TRUE(matches(r2->outputs[0].tensor, f32({4}, {22, 44, 66, 88})));
  EXPECT_EQ(r2->outputs[1].tensor.element(0), 2.0);
  EXPECT_TRUE(matches(*s.read_state("total"), f32({4}, {22, 44, 66, 88})));
  // Another session on the same Program has its own state.
  Session other(*loaded.program);
  EXPECT_TRUE(matches(*other.read_state("total"), f32({4}, {0, 0, 0, 0})));
  s.reset_state();
  EXPECT_TRUE(matches(*s.read_state("total"), f32({4}, {0, 0, 0, 0})));
  EXPECT_EQ(s.read_state("steps")->element(0), 0.0);
}

TEST_F(CounterTest, AFailedRunLeavesTheStateUnchanged) {
  // The node budget ends the run part way through the graph, after the new total was
  // computed: nothing may be committed.
  Session s(*loaded.program, {.max_nodes_executed = 2});
  ASSERT_TRUE(s.set_state("total", f32({4}, {1, 2, 3, 4})).ok());
  auto r = s.run(std::vector<HostValue>{HostValue::of(f32({1, 4}, {5, 5, 5, 5}))});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidInput);
  EXPECT_NE(r.status().message().find("budget"), std::string::npos) << r.status().message();
  EXPECT_TRUE(matches(*s.read_state("total"), f32({4}, {1, 2, 3, 4})));
  EXPECT_EQ(s.read_state("steps")->element(0), 0.0);
  // Bad input also changes nothing.
  auto bad = s.run(std::vector<HostValue>{HostValue::of(f32({4}, {5, 5, 5, 5}))});
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(matches(*s.read_state("total"), f32({4}, {1, 2, 3, 4})));
}

TEST_F(CounterTest, SetStateIsCheckedLikeAnInput) {
  Session s(*loaded.program);
  Status st = s.set_state("total", f32({3}, {1, 2, 3}));
  EXPECT_EQ(st.code(), StatusCode::kInvalidInput);
  EXPECT_EQ(st.message(), "state total: shape [3], expected [4]");
  st = s.set_state("steps", f32({}, {1}));
  EXPECT_EQ(st.code(), StatusCode::kInvalidInput);
  EXPECT_EQ(st.message(), "state steps: dtype f32, expected i64");
  HostTensor short_data = f32({4}, {1, 2, 3, 4});
  short_data.data.resize(8);
  st = s.set_state("total", short_data);
  EXPECT_EQ(st.message(), "state total: 8 bytes of data for 16 expected");
  st = s.set_state("nope", f32({4}, {1, 2, 3, 4}));
  EXPECT_EQ(st.code(), StatusCode::kInvalidInput);
  EXPECT_EQ(st.message(), "no state tensor named 'nope' (state tensors: total, steps)");
  EXPECT_EQ(s.read_state("nope").status().message(), "no state tensor named 'nope' (state tensors: total, steps)");
  // Nothing changed.
  EXPECT_TRUE(matches(*s.read_state("total"), f32({4}, {0, 0, 0, 0})));
  // A good value is what the next run reads.
  ASSERT_TRUE(s.set_state("total", f32({4}, {100, 0, 0, 0})).ok());
  auto r = s.run(std::vector<HostValue>{HostValue::of(f32({1, 4}, {1, 1, 1, 1}))});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_TRUE(matches(r->outputs[0].tensor, f32({4}, {101, 1, 1, 1})));
}

TEST_F(CounterTest, SnapshotAndRestoreForkAndRewind) {
  Session s(*loaded.program);
  const std::vector<HostValue> in = {HostValue::of(f32({1, 4}, {1, 2, 3, 4}))};
  ASSERT_TRUE(s.run(in).ok());
  const StateSnapshot after_one = s.snapshot_state();
  EXPECT_EQ(after_one.names, (std::vector<std::string>{"total", "steps"}));
  ASSERT_TRUE(s.run(in).ok());
  ASSERT_TRUE(s.run(in).ok());
  EXPECT_EQ(s.read_state("steps")->element(0), 3.0);
  // Rewind.
  ASSERT_TRUE(s.restore_state(after_one).ok());
  EXPECT_TRUE(matches(*s.read_state("total"), f32({4}, {1, 2, 3, 4})));
  EXPECT_EQ(s.read_state("steps")->element(0), 1.0);
  // Fork: a second session continues from the same point.
  Session fork(*loaded.program);
  ASSERT_TRUE(fork.restore_state(after_one).ok());
  auto r = fork.run(in);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(matches(r->outputs[0].tensor, f32({4}, {2, 4, 6, 8})));
  // A snapshot that does not fit is refused and changes nothing.
  StateSnapshot wrong = after_one;
  wrong.values[0] = f32({2}, {1, 2});
  Status st = s.restore_state(wrong);
  EXPECT_EQ(st.code(), StatusCode::kInvalidInput);
  EXPECT_EQ(st.message(), "state total: shape [2], expected [4]");
  EXPECT_EQ(s.read_state("steps")->element(0), 1.0);
  StateSnapshot other_program;
  st = s.restore_state(other_program);
  EXPECT_EQ(st.code(), StatusCode::kInvalidInput);
  EXPECT_EQ(st.message(), "the snapshot's state tensors (0) are not this program's (2)");
}

}  // namespace
}  // namespace kiln

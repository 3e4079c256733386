// State buffers in the tracing API (Module::register_buffer with {.state = true}): the
// export's functional form, the runtime running it step after step against references
// computed here, bounds as runtime errors, and the export errors for in-place updates of
// constants.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "../../samples/models/kv_decoder.h"
#include "common/exported.h"
#include "kiln/export/control_flow.h"
#include "kiln/format/kiln_generated.h"

namespace kiln {
namespace {

using testing::host_tensor;
using testing::load_exported;

HostValue ints(std::vector<std::int64_t> shape, const std::vector<std::int64_t>& v) {
  return HostValue::of(host_tensor(Tensor::from_ints(std::move(shape), v)));
}

std::vector<float> floats_of(const HostTensor& t) {
  std::vector<float> out(t.data.size() / 4);
  std::memcpy(out.data(), t.data.data(), t.data.size());
  return out;
}

// A running sum, a step counter, and a scale that is read but never written.
struct Counter : Module {
  Tensor total, steps, scale;
  Counter() {
    total = register_buffer("total", zeros({4}), {.state = true});
    steps = register_buffer("steps", zeros({}, DType::kI64), {.state = true});
    scale = register_buffer("scale", Tensor::from_floats({4}, std::vector<float>{1, 2, 3, 4}), {.state = true});
  }
  std::vector<Tensor> operator()(const Tensor& x) {
    total.add_(x);
    steps.add_(1);
    return {total * scale, steps.clone()};  // reads after the update see it
  }
};

TEST(State, CounterExportsFunctionalFormAndRunsASequence) {
  Counter model;
  ExportOptions options;
  options.self_tests = 3;
  auto ep = export_program([&](Tensor x) { return model(x); }, {input("x", Tensor::from_floats({4}, std::vector<float>{1, 1, 1, 1}))},
                           options);
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  const ir::Program& p = ep->program();
  ASSERT_EQ(p.states.size(), 3u);
  EXPECT_EQ(p.states[0].name, "total");
  EXPECT_EQ(p.states[0].dtype, DType::kF32);
  EXPECT_EQ(p.states[0].shape, (std::vector<std::int64_t>{4}));
  EXPECT_EQ(p.states[1].name, "steps");
  EXPECT_EQ(p.states[1].dtype, DType::kI64);
  EXPECT_TRUE(p.states[1].shape.empty());
  EXPECT_EQ(p.states[2].name, "scale");
  EXPECT_EQ(*p.constants[static_cast<std::size_t>(p.states[2].initial)].data, model.scale.bytes());
  const ir::Graph& g = p.graphs[0];
  ASSERT_EQ(g.inputs.size(), 1u + 3u);
  ASSERT_EQ(g.outputs.size(), 2u + 3u);
  EXPECT_EQ(g.outputs[4], g.inputs[3]) << "a state the forward only reads returns its input";
  EXPECT_NE(g.outputs[2], g.inputs[1]);
  EXPECT_NE(ep->print().find("states:\n    total: f32[4] (input 1, output 2)"), std::string::npos) << ep->print();

  // Export left the buffers as they were, although the eager self-tests updated them.
  EXPECT_EQ(model.total.to_vector<float>(), (std::vector<float>{0, 0, 0, 0}));
  EXPECT_EQ(model.steps.to_vector<std::int64_t>(), (std::vector<std::int64_t>{0}));
  // The self-tests are a sequence: case 2 sees the sums of cases 0 and 1.
  ASSERT_EQ(p.self_tests.size(), 3u);
  std::vector<float> sum(4, 0.0f);
  for (const ir::SelfTestCase& c : p.self_tests) {
    const auto* in = reinterpret_cast<const float*>(c.inputs[0].data->data());
    for (int i = 0; i < 4; ++i) sum[static_cast<std::size_t>(i)] += in[i];
  }
  const auto* last = reinterpret_cast<const float*>(p.self_tests[2].outputs[0].data->data());
  for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(last[i], sum[static_cast<std::size_t>(i)] * static_cast<float>(i + 1));

  auto program = load_exported(*ep);
  ASSERT_TRUE(program);
  Session session(*program);
  EXPECT_EQ(session.state_names(), (std::vector<std::string>{"total", "steps", "scale"}));
  std::vector<float> expected(4, 0.0f);
  for (int step = 1; step <= 5; ++step) {
    const std::vector<float> x{0.5f * static_cast<float>(step), -1.0f, 2.0f, static_cast<float>(step * step)};
    for (std::size_t i = 0; i < 4; ++i) expected[i] += x[i];
    std::vector<HostValue> in{testing::floats(x)};
    auto r = session.run(in);
    ASSERT_TRUE(r.ok()) << r.status().message();
    ASSERT_EQ(r->outputs.size(), 2u) << "the caller sees only the user outputs";
    const std::vector<float> got = floats_of(r->outputs[0].tensor);
    for (std::size_t i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(got[i], expected[i] * static_cast<float>(i + 1)) << "step " << step;
    EXPECT_EQ(r->outputs[1].tensor.element(0), step);
  }
  auto total = session.read_state("total");
  ASSERT_TRUE(total.ok());
  EXPECT_EQ(floats_of(*total), expected);
  session.reset_state();
  std::vector<HostValue> in{testing::floats({1, 1, 1, 1})};
  auto r = session.run(in);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->outputs[1].tensor.element(0), 1);
}

// A cache written at tensor positions with index_copy_ (the PyTorch fixture's form).
struct IndexCopyCache : Module {
  Tensor cache;
  IndexCopyCache() { cache = register_buffer("cache", zeros({8, 2}), {.state = true}); }
  Tensor operator()(const Tensor& pos, const Tensor& rows) {
    cache.index_copy_(0, pos, rows);  // kIndexCopyLine
    return cache.sum({1});
  }
};
constexpr int kIndexCopyLine = __LINE__ - 4;

TEST(State, IndexCopyAtTensorPositionsAndOutOfRangePositionIsRuntimeError) {
  IndexCopyCache model;
  Dim n("n", 1, 8);
  auto ep = export_program([&](Tensor pos, Tensor rows) { return model(pos, rows); },
                           {input("pos", Tensor::from_ints({2}, std::vector<std::int64_t>{0, 1}), {n}),
                            input("rows", Tensor::from_floats({2, 2}, std::vector<float>{1, 2, 3, 4}), {n})});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  ASSERT_EQ(ep->program().states.size(), 1u);
  EXPECT_EQ(ep->program().states[0].name, "cache");
  auto program = load_exported(*ep);
  ASSERT_TRUE(program);
  Session session(*program);
  std::vector<float> ref(8, 0.0f);
  const std::vector<std::vector<std::int64_t>> steps{{0, 1, 2}, {3}, {2, 7}};
  float value = 1.0f;
  for (const auto& pos : steps) {
    std::vector<float> rows;
    for (std::int64_t p : pos) {
      rows.push_back(value);
      rows.push_back(10.0f * value);
      ref[static_cast<std::size_t>(p)] = 11.0f * value;
      value += 1.0f;
    }
    HostTensor r{DType::kF32, {static_cast<std::int64_t>(pos.size()), 2}, {}};
    r.data.resize(rows.size() * 4);
    std::memcpy(r.data.data(), rows.data(), r.data.size());
    std::vector<HostValue> in{ints({static_cast<std::int64_t>(pos.size())}, pos), HostValue::of(r)};
    auto out = session.run(in);
    ASSERT_TRUE(out.ok()) << out.status().message();
    EXPECT_EQ(floats_of(out->outputs[0].tensor), ref);
  }
  const auto before = session.read_state("cache");
  ASSERT_TRUE(before.ok());
  std::vector<HostValue> bad{ints({1}, {8}), testing::floats({1, 1})};
  bad[1].tensor.shape = {1, 2};
  bad[1].tensor.data.resize(8);
  auto out = session.run(bad);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), StatusCode::kInvalidInput);
  EXPECT_NE(out.status().message().find("out of range"), std::string::npos) << out.status().message();
  EXPECT_NE(out.status().message().find("state_test.cpp:" + std::to_string(kIndexCopyLine)), std::string::npos) << out.status().message();
  EXPECT_EQ(session.read_state("cache")->data, before->data) << "a failed run leaves the state as it was";
}

models::KvDecoderConfig small_config() { return {.vocab = 32, .d = 16, .layers = 2, .heads = 2, .max_ctx = 12}; }

Result<ExportedProgram> export_step(models::KvDecoder& model) {
  Dim seq("seq", 1, model.config.max_ctx);
  return export_program([&](Tensor ids, SymInt pos) { return model.step(ids, pos); },
                        {input("ids", Tensor::from_ints({1, 3}, std::vector<std::int64_t>{1, 2, 3}), {Dim::STATIC, seq}),
                         int_input("input_pos", 2, Dim::DYNAMIC)});
}

TEST(State, KvCacheDecoderMatchesFullRecomputationStepByStep) {
  models::KvDecoder model(small_config());
  auto ep = export_step(model);
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  const ir::Program& p = ep->program();
  ASSERT_EQ(p.states.size(), 4u);
  EXPECT_EQ(p.states[0].name, "att.0.k_cache");
  EXPECT_EQ(p.states[1].name, "att.0.v_cache");
  EXPECT_EQ(p.states[3].name, "att.1.v_cache");
  EXPECT_EQ(p.states[0].shape, (std::vector<std::int64_t>{1, 2, 8, 12}));  // keys transposed
  EXPECT_EQ(p.states[1].shape, (std::vector<std::int64_t>{1, 2, 12, 8}));
  auto program = load_exported(*ep);
  ASSERT_TRUE(program);
  Session session(*program);

  std::vector<std::int64_t> tokens{5, 17, 3, 9, 30};
  std::int64_t pos = 0;
  std::vector<std::int64_t> feed = tokens;  // prefill, then one token per step
  for (int step = 0; step < 6; ++step) {
    std::vector<HostValue> in{ints({1, static_cast<std::int64_t>(feed.size())}, feed), HostValue::integer(pos)};
    auto r = session.run(in);
    ASSERT_TRUE(r.ok()) << "step " << step << ": " << r.status().message();
    const HostTensor& logits = r->outputs[0].tensor;
    ASSERT_EQ(logits.shape, (std::vector<std::int64_t>{1, static_cast<std::int64_t>(feed.size()), 32}));
    // Reference: the whole sequence so far, recomputed eagerly without the cache.
    const std::vector<float> ref = model.full(Tensor::from_ints({1, static_cast<std::int64_t>(tokens.size())}, tokens)).to_vector<float>();
    const std::vector<float> got = floats_of(logits);
    const std::size_t rows = feed.size(), first = tokens.size() - rows;
    for (std::size_t i = 0; i < rows * 32; ++i) {
      ASSERT_NEAR(got[i], ref[first * 32 + i], 1e-4) << "step " << step << ", element " << i;
    }
    pos += static_cast<std::int64_t>(feed.size());
    std::size_t best = 0;  // greedy: the next token is the argmax of the last row
    for (std::size_t v = 1; v < 32; ++v) if (got[(rows - 1) * 32 + v] > got[(rows - 1) * 32 + best]) best = v;
    tokens.push_back(static_cast<std::int64_t>(best));
    feed = {static_cast<std::int64_t>(best)};
  }
  // The cache holds the rows of every position so far; beyond them, the initial zeros.
  auto k = session.read_state("att.1.v_cache");
  ASSERT_TRUE(k.ok());
  const std::vector<float> kv = floats_of(*k);
  for (std::int64_t h = 0; h < 2; ++h) {
    for (std::int64_t t = 0; t < 12; ++t) {
      float norm = 0.0f;
      for (std::int64_t e = 0; e < 8; ++e) norm += std::fabs(kv[static_cast<std::size_t>((h * 12 + t) * 8 + e)]);
      if (t < pos) EXPECT_GT(norm, 0.0f) << "head " << h << " position " << t;
      else EXPECT_EQ(norm, 0.0f) << "head " << h << " position " << t;
    }
  }
}

TEST(State, DecodePositionBeyondTheCacheIsARuntimeError) {
  models::KvDecoder model(small_config());
  auto ep = export_step(model);
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  auto program = load_exported(*ep);
  ASSERT_TRUE(program);
  Session session(*program);
  std::vector<HostValue> prefill{ints({1, 4}, {1, 2, 3, 4}), HostValue::integer(0)};
  ASSERT_TRUE(session.run(prefill).ok());
  const StateSnapshot before = session.snapshot_state();
  for (const auto& [tokens, pos] : std::vector<std::pair<std::vector<std::int64_t>, std::int64_t>>{{{7}, 12}, {{7, 8, 9}, 10}, {{7}, -1}}) {
    std::vector<HostValue> in{ints({1, static_cast<std::int64_t>(tokens.size())}, tokens), HostValue::integer(pos)};
    auto r = session.run(in);
    ASSERT_FALSE(r.ok()) << "pos " << pos;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidInput);
    EXPECT_NE(r.status().message().find("kv_decoder.h:"), std::string::npos) << r.status().message();
    const StateSnapshot after = session.snapshot_state();
    for (std::size_t k = 0; k < before.values.size(); ++k) EXPECT_EQ(after.values[k].data, before.values[k].data);
  }
  std::vector<HostValue> last{ints({1, 1}, {7}), HostValue::integer(11)};  // the last slot is fine
  EXPECT_TRUE(session.run(last).ok());
}

struct UpdatesParameter : Module {
  Tensor w, running;
  UpdatesParameter() {
    w = register_parameter("w", Tensor::from_floats({2}, std::vector<float>{1, 2}));
    running = register_buffer("running", zeros({2}));
  }
};

TEST(State, InPlaceUpdateOfParameterOrNonStateBufferIsExportError) {
  UpdatesParameter m;
  const int line = __LINE__ + 1;
  auto ep = export_program([&](Tensor x) { m.w.add_(x); return x * m.w; }, {input("x", Tensor::randn({2}))});
  ASSERT_FALSE(ep.ok());
  EXPECT_EQ(ep.status().code(), StatusCode::kExportError);
  EXPECT_EQ(ep.status().message(),
            "[add_] cannot update parameter 'w' in place: parameters and buffers are constants of the exported program. A "
            "buffer the model updates must be registered as state: register_buffer(name, value, {.state = true}) (state_test.cpp:" +
                std::to_string(line) + ")");
  EXPECT_EQ(m.w.to_vector<float>(), (std::vector<float>{1, 2})) << "the parameter is unchanged";

  const int line2 = __LINE__ + 1;
  ep = export_program([&](Tensor x) { m.running.copy_(x); return x + m.running; }, {input("x", Tensor::randn({2}))});
  ASSERT_FALSE(ep.ok());
  EXPECT_NE(ep.status().message().find("[copy_] cannot update buffer 'running' in place"), std::string::npos) << ep.status().message();
  EXPECT_NE(ep.status().message().find("(state_test.cpp:" + std::to_string(line2) + ")"), std::string::npos) << ep.status().message();
  // A scalar update (computed eagerly while tracing) is refused the same way.
  ep = export_program([&](Tensor x) { m.running.mul_(2.0); return x + m.running; }, {input("x", Tensor::randn({2}))});
  ASSERT_FALSE(ep.ok());
  EXPECT_NE(ep.status().message().find("[mul_] cannot update buffer 'running' in place"), std::string::npos) << ep.status().message();
}

struct CondCounter : Module {
  Tensor total;
  CondCounter() { total = register_buffer("total", zeros({2}), {.state = true}); }
};

TEST(State, UpdatingStateInsideCondIsExportError) {
  CondCounter m;
  auto ep = export_program(
      [&](Tensor x) -> Tensor {
        return cond(gt(sum(x), 0.0), [&](Tensor v) { m.total.add_(v); return m.total * 1.0; }, [](Tensor v) { return v.clone(); },
                    {x});
      },
      {input("x", Tensor::randn({2}))});
  ASSERT_FALSE(ep.ok());
  EXPECT_NE(ep.status().message().find("updates state 'total' in place with add_"), std::string::npos) << ep.status().message();
}

TEST(State, StateReadInsideCondIsLiftedAndSeesTheUpdate) {
  CondCounter m;
  auto ep = export_program(
      [&](Tensor x) -> Tensor {
        m.total.add_(x);
        return cond(gt(sum(x), 0.0), [&](Tensor v) { return v + m.total; }, [&](Tensor v) { return v - m.total; }, {x});
      },
      {input("x", Tensor::from_floats({2}, std::vector<float>{1, 2}))});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  auto program = load_exported(*ep);
  ASSERT_TRUE(program);
  Session session(*program);
  std::vector<float> total{0, 0};
  for (const std::vector<float>& x : {std::vector<float>{1, 2}, std::vector<float>{-5, 1}, std::vector<float>{3, 3}}) {
    for (std::size_t i = 0; i < 2; ++i) total[i] += x[i];
    const bool positive = x[0] + x[1] > 0;
    std::vector<HostValue> in{testing::floats(x)};
    auto r = session.run(in);
    ASSERT_TRUE(r.ok()) << r.status().message();
    const std::vector<float> got = floats_of(r->outputs[0].tensor);
    for (std::size_t i = 0; i < 2; ++i) EXPECT_FLOAT_EQ(got[i], positive ? x[i] + total[i] : x[i] - total[i]);
  }
}

TEST(State, TwoStatesWithOneNameIsExportError) {
  CondCounter a, b;  // neither registered under a parent: both are "total"
  auto ep = export_program([&](Tensor x) { a.total.add_(x); b.total.add_(x); return x * 1.0; }, {input("x", Tensor::randn({2}))});
  ASSERT_FALSE(ep.ok());
  EXPECT_EQ(ep.status().code(), StatusCode::kExportError);
  EXPECT_EQ(ep.status().message(), "two state tensors are named 'total': register their modules (register_module) under distinct names");
}

TEST(State, ScatterOpsOnStateAndEagerAgree) {
  struct M : Module {
    Tensor s;
    M() { s = register_buffer("s", zeros({3, 4}), {.state = true}); }
    Tensor operator()(const Tensor& row, const Tensor& block, SymInt at) {
      s.select_scatter_(row, 0, -1);            // s[-1] = row
      s.slice_scatter_(block, 1, at, at + 2);   // s[:, at:at+2] = block
      s.sub_(1.0);
      Tensor r = s * 2.0;
      s.div_(2.0);
      return r;
    }
  } m;
  auto args = [](float base) {
    std::vector<float> block(6);
    for (std::size_t i = 0; i < 6; ++i) block[i] = base + static_cast<float>(i);
    return std::make_pair(Tensor::from_floats({4}, std::vector<float>{base, base, base, base}), Tensor::from_floats({3, 2}, block));
  };
  auto [row0, block0] = args(1.0f);
  auto ep = export_program([&](Tensor row, Tensor block, SymInt at) { return m(row, block, at); },
                           {input("row", row0), input("block", block0), int_input("at", 1, Dim::DYNAMIC)});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  auto program = load_exported(*ep);
  ASSERT_TRUE(program);
  Session session(*program);
  for (int step = 0; step < 3; ++step) {
    auto [row, block] = args(static_cast<float>(step) * 3.0f);
    const std::int64_t at = step % 3;
    const std::vector<float> ref = m(row, block, SymInt(at)).to_vector<float>();  // eager, on the module's own state
    std::vector<HostValue> in{HostValue::of(host_tensor(row)), HostValue::of(host_tensor(block)), HostValue::integer(at)};
    auto r = session.run(in);
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_EQ(floats_of(r->outputs[0].tensor), ref) << "step " << step;
  }
  std::vector<HostValue> in{HostValue::of(host_tensor(row0)), HostValue::of(host_tensor(block0)), HostValue::integer(3)};
  auto r = session.run(in);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidInput);
}

TEST(State, BundleRoundTripListsStateInInspectAndValidatesTheSequence) {
  Counter model;
  ExportOptions options;
  options.self_tests = 3;  // a sequence: kiln validate replays it in order on one session
  auto ep = export_program([&](Tensor x) { return model(x); }, {input("x", Tensor::from_floats({4}, std::vector<float>{1, 1, 1, 1}))},
                           options);
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("kiln_state_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "counter.kiln").string();
  ASSERT_TRUE(ep->save(path).ok());
  auto bundle = Bundle::open(path);
  ASSERT_TRUE(bundle.ok()) << bundle.status().message();
  const auto* states = (*bundle)->program().signature()->states();
  ASSERT_NE(states, nullptr);
  ASSERT_EQ(states->size(), 3u);
  EXPECT_EQ(states->Get(1)->name()->str(), "steps");
  const std::string kiln = std::string(KILN_BINARY_DIR) + "/bin/kiln";
  if (!std::filesystem::exists(kiln)) GTEST_SKIP() << kiln << " not built";
  std::string text;
  for (const char* args : {" inspect ", " validate "}) {
    FILE* f = ::popen((kiln + args + path + " 2>&1").c_str(), "r");
    ASSERT_NE(f, nullptr);
    char buf[4096];
    std::size_t n = 0;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
    EXPECT_EQ(::pclose(f), 0) << text;
  }
  EXPECT_NE(text.find("total"), std::string::npos) << text;
  EXPECT_NE(text.find("steps"), std::string::npos) << text;
  EXPECT_NE(text.find("self-test case0: passed"), std::string::npos) << text;
  EXPECT_NE(text.find("self-test case2: passed"), std::string::npos) << text;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kiln

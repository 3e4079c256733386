// State updates in the Session (docs/FORMAT.md, "State"): a KV cache row write (index_put
// on the state's own value, which nothing reads afterwards) runs in place on the Session's
// buffer and writes only the new rows; anything else is copied. A failed run leaves every
// state byte-identical, in-place writes included (undo log); positions outside the cache
// are kInvalidInput naming the source line and never write out of bounds; sessions on one
// Program run concurrently, each with its own state; a decode loop's heap stays flat.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <thread>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
// From the sanitizer runtime (sanitizer/allocator_interface.h, not installed with GCC here).
extern "C" std::size_t __sanitizer_get_current_allocated_bytes();
#else
#include <malloc.h>
#endif

#include "../../samples/models/kv_decoder.h"
#include "common/exported.h"
#include "kiln/export/import_pt2.h"
#include "kiln/export/serialize.h"
#include "kiln/runtime/program.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using sym::Expr;

fs::path kv_dir() { return fs::path(KILN_FIXTURES_DIR) / ".." / "torch_export_stateful" / "kv_decoder"; }

// Bytes of heap memory in use now (the sanitizers' allocator under ASan/TSan).
std::size_t live_heap_bytes() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  return __sanitizer_get_current_allocated_bytes();
#else
  const struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd;
#endif
}

HostTensor npy(const fs::path& p) {
  auto t = read_npy_any_order(p.string());
  EXPECT_TRUE(t.ok()) << p << ": " << t.status().message();
  return t.ok() ? std::move(*t) : HostTensor{};
}

HostTensor i64(std::vector<std::int64_t> shape, const std::vector<std::int64_t>& v) {
  HostTensor t{DType::kI64, std::move(shape), {}};
  t.data.resize(v.size() * 8);
  std::memcpy(t.data.data(), v.data(), t.data.size());
  return t;
}

HostTensor f32(std::vector<std::int64_t> shape, const std::vector<float>& v) {
  HostTensor t{DType::kF32, std::move(shape), {}};
  t.data.resize(v.size() * 4);
  std::memcpy(t.data.data(), v.data(), t.data.size());
  return t;
}

std::vector<float> floats_of(const HostTensor& t) {
  std::vector<float> out(t.data.size() / 4);
  std::memcpy(out.data(), t.data.data(), t.data.size());
  return out;
}

::testing::AssertionResult close_to(const HostTensor& got, const HostTensor& want) {
  if (got.shape != want.shape || got.dtype != want.dtype) return ::testing::AssertionFailure() << "shape or dtype differs";
  for (std::int64_t i = 0; i < want.numel(); ++i) {
    const double a = got.element(i), b = want.element(i);
    if (!(std::abs(a - b) <= 1e-5 + 1e-4 * std::abs(b))) return ::testing::AssertionFailure() << "element " << i << ": " << a << " != " << b;
  }
  return ::testing::AssertionSuccess();
}

// One step of a fixture sequence: its inputs (ids, input_pos) and golden output.
struct Step {
  std::vector<HostValue> inputs;
  HostTensor want;
};

std::vector<Step> sequence(const std::string& name, int steps) {
  std::vector<Step> out;
  for (int j = 0; j < steps; ++j) {
    const std::string stem = "cases/" + name + "." + std::to_string(j);
    out.push_back({{HostValue::of(npy(kv_dir() / (stem + ".in.ids.npy"))), HostValue::of(npy(kv_dir() / (stem + ".in.input_pos.npy")))},
                   npy(kv_dir() / (stem + ".out.0.npy"))});
  }
  return out;
}

std::shared_ptr<const Program> load_kv_decoder(const std::string& backend = "cpu") {
  auto ep = import_pt2((kv_dir() / "model.core.pt2").string());
  EXPECT_TRUE(ep.ok()) << ep.status().message();
  if (!ep.ok()) return nullptr;
  auto bytes = serialize_bundle(ep->program());
  if (!bytes.ok()) return nullptr;
  auto bundle = Bundle::from_bytes(*bytes);
  if (!bundle.ok()) return nullptr;
  ProgramOptions options;
  options.backend = backend;
  auto program = Program::load(std::move(bundle).value(), options);
  if (!program.ok()) {
    EXPECT_EQ(program.status().code(), StatusCode::kUnavailable) << program.status().message();
    return nullptr;
  }
  return *program;
}

// kv_decoder: 4 state tensors f32[1, 4, 64, 16] (k/v caches of 2 layers); a step of s
// positions writes s rows of 16 floats per head and cache.
constexpr std::uint64_t kCacheBytes = 4 * 64 * 16 * 4;
constexpr std::uint64_t kRowBytesPerPosition = 4 /*states*/ * 4 /*heads*/ * 16 * 4;

TEST(StateUpdate, KvDecoderStepsWriteOnlyTheNewRowsAndMatchTheGoldens) {
  for (const char* backend : {"cpu", "vulkan"}) {
    SCOPED_TRACE(backend);
    auto program = load_kv_decoder(backend);
    if (program == nullptr) continue;  // no Vulkan device
    Session s(*program);
    const std::vector<Step> steps = sequence("prefill5_decode3", 4);
    for (std::size_t j = 0; j < steps.size(); ++j) {
      SCOPED_TRACE("step " + std::to_string(j));
      auto r = s.run(steps[j].inputs);
      ASSERT_TRUE(r.ok()) << r.status().message();
      EXPECT_TRUE(close_to(r->outputs[0].tensor, steps[j].want));
      const std::uint64_t positions = j == 0 ? 5 : 1;
      EXPECT_EQ(s.last_stats().state_bytes_written, positions * kRowBytesPerPosition);
    }
    // The new caches are not in the arena (they are the Session's buffers, updated in
    // place): a decode step's arena holds one transposed K (16 KiB) and small tensors;
    // computing the caches there and copying them took 83,520 bytes.
    EXPECT_LT(s.last_stats().arena_bytes, 2 * kCacheBytes);
  }
}

TEST(StateUpdate, AFailedDecodeStepLeavesTheStateByteIdentical) {
  auto program = load_kv_decoder();
  ASSERT_NE(program, nullptr);
  const std::vector<Step> steps = sequence("prefill5_decode3", 2);
  Session good(*program);
  ASSERT_TRUE(good.run(steps[0].inputs).ok());
  const StateSnapshot after_prefill = good.snapshot_state();
  // The node budget ends the decode step at node 63, after both layers wrote their K/V
  // rows in place (nodes 19, 20, 61, 62).
  Session limited(*program, {.max_nodes_executed = 63});
  ASSERT_TRUE(limited.restore_state(after_prefill).ok());
  auto r = limited.run(steps[1].inputs);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidInput);
  EXPECT_NE(r.status().message().find("budget"), std::string::npos) << r.status().message();
  EXPECT_EQ(limited.last_stats().state_bytes_written, kRowBytesPerPosition);  // written, then undone
  const StateSnapshot after_failure = limited.snapshot_state();
  ASSERT_EQ(after_failure.values.size(), after_prefill.values.size());
  for (std::size_t k = 0; k < after_prefill.values.size(); ++k) {
    EXPECT_EQ(after_failure.values[k].data, after_prefill.values[k].data) << after_prefill.names[k];
  }
  // The good session continues from the same state to the golden.
  auto next = good.run(steps[1].inputs);
  ASSERT_TRUE(next.ok()) << next.status().message();
  EXPECT_TRUE(close_to(next->outputs[0].tensor, steps[1].want));
}

TEST(StateUpdate, KvDecoderPositionOutsideTheCacheIsBadInputWithTheSourceLine) {
  auto program = load_kv_decoder();
  ASSERT_NE(program, nullptr);
  Session s(*program);
  const std::vector<Step> steps = sequence("prefill5_decode3", 1);
  ASSERT_TRUE(s.run(steps[0].inputs).ok());
  const StateSnapshot before = s.snapshot_state();
  for (std::int64_t pos : {64, 1000, -65}) {
    SCOPED_TRACE(pos);
    auto r = s.run(std::vector<HostValue>{HostValue::of(i64({1, 1}, {3})), HostValue::of(i64({1}, {pos}))});
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidInput);
    EXPECT_EQ(exit_code(r.status().code()), 3);
    // The position embedding (max_ctx rows) reads input_pos first.
    EXPECT_EQ(r.status().message(),
              "[embedding] indices[0]=" + std::to_string(pos) + " out of range [0, 64) [main, node 1] (/gen/gen_stateful.py:38, pos)");
    const StateSnapshot after = s.snapshot_state();
    for (std::size_t k = 0; k < before.values.size(); ++k) EXPECT_EQ(after.values[k].data, before.values[k].data);
  }
}

TEST(StateUpdate, EightSessionsOnOneProgramRunConcurrentlyEachWithItsOwnState) {
  auto program = load_kv_decoder();
  ASSERT_NE(program, nullptr);
  const std::vector<Step> a = sequence("prefill5_decode3", 4), b = sequence("prefill17_decode2", 3);
  std::vector<std::thread> threads;
  std::vector<int> failures(8, 0);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      Session s(*program);
      const std::vector<Step>& steps = t % 2 ? b : a;
      for (int round = 0; round < 3; ++round) {
        s.reset_state();
        for (const Step& step : steps) {
          auto r = s.run(step.inputs);
          if (!r.ok() || !close_to(r->outputs[0].tensor, step.want)) ++failures[static_cast<std::size_t>(t)];
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < 8; ++t) EXPECT_EQ(failures[static_cast<std::size_t>(t)], 0) << "session " << t;
}

TEST(StateUpdate, HeapStaysFlatAcrossAThousandDecodeSteps) {
  auto program = load_kv_decoder();
  ASSERT_NE(program, nullptr);
  Session s(*program);
  const std::vector<Step> steps = sequence("prefill5_decode3", 1);
  ASSERT_TRUE(s.run(steps[0].inputs).ok());
  std::vector<std::vector<HostValue>> decode;
  for (std::int64_t pos = 5; pos < 64; ++pos) {
    decode.push_back({HostValue::of(i64({1, 1}, {pos % 96})), HostValue::of(i64({1}, {pos}))});
  }
  RunResult result;
  for (const auto& in : decode) ASSERT_TRUE(s.run(in, result).ok());  // every capacity settles
  const std::size_t before = live_heap_bytes();
  int failed = 0;
  for (int i = 0; i < 1000; ++i) failed += !s.run(decode[static_cast<std::size_t>(i) % decode.size()], result).ok();
  const std::size_t after = live_heap_bytes();
  EXPECT_EQ(failed, 0);
  // Any per-step allocation kept (or a cache copy) would add at least 8 KB over 1,000 steps.
  EXPECT_LE(after, before + 4096) << "heap grew from " << before << " to " << after << " bytes";
  EXPECT_EQ(s.last_stats().state_bytes_written, kRowBytesPerPosition);
}

// ---- programs built as IR ------------------------------------------------------------------

ir::NodeMeta meta(std::uint32_t line) { return ir::NodeMeta{{"cache.cpp", line, 1}, "", ""}; }

// State `cache` f32[4, 2] (rows 0..3 = 1..8) and, with `two_caches`, `cache2` likewise;
// inputs rows f32[1, 2], pos i64[1] (and pos2 i64[1]); cache = index_put(cache, rows, [pos])
// (cache2 likewise at pos2); output y = neg(new cache), or with `read_old`, new - old cache
// (the old value is read after the update: no in-place write).
ir::Program cache_program(bool two_caches, bool read_old) {
  ir::Program p;
  p.name = "cache";
  const Expr C1 = Expr::constant(1), C2 = Expr::constant(2), C4 = Expr::constant(4);
  const std::vector<float> initial = {1, 2, 3, 4, 5, 6, 7, 8};
  auto bytes = std::make_shared<std::vector<std::uint8_t>>(initial.size() * 4);
  std::memcpy(bytes->data(), initial.data(), bytes->size());
  ir::Graph g;
  g.name = "main";
  const int rows = g.add_value({ir::ValueKind::kTensor, DType::kF32, {C1, C2}, {}, -1, "rows"});
  const int pos = g.add_value({ir::ValueKind::kTensor, DType::kI64, {C1}, {}, -1, "pos"});
  const int pos2 = two_caches ? g.add_value({ir::ValueKind::kTensor, DType::kI64, {C1}, {}, -1, "pos2"}) : -1;
  const int cache = g.add_value({ir::ValueKind::kTensor, DType::kF32, {C4, C2}, {}, -1, "cache"});
  const int cache2 = two_caches ? g.add_value({ir::ValueKind::kTensor, DType::kF32, {C4, C2}, {}, -1, "cache2"}) : -1;
  const int updated = g.add_value({ir::ValueKind::kTensor, DType::kF32, {C4, C2}, {}, -1, "updated"});
  const int updated2 = two_caches ? g.add_value({ir::ValueKind::kTensor, DType::kF32, {C4, C2}, {}, -1, "updated2"}) : -1;
  const int y = g.add_value({ir::ValueKind::kTensor, DType::kF32, {C4, C2}, {}, -1, "y"});
  const std::vector<ir::Attr> put = {std::vector<std::int64_t>{0}, false};
  g.nodes.push_back({OpKind::IndexPut, {cache, rows, pos}, {updated}, put, {}, meta(7)});
  if (two_caches) g.nodes.push_back({OpKind::IndexPut, {cache2, rows, pos2}, {updated2}, put, {}, meta(8)});
  if (read_old) {
    g.nodes.push_back({OpKind::Sub, {updated, cache}, {y}, {}, {}, meta(9)});
  } else {
    g.nodes.push_back({OpKind::Neg, {updated}, {y}, {}, {}, meta(9)});
  }
  g.inputs = {rows, pos};
  if (two_caches) g.inputs.push_back(pos2);
  g.inputs.push_back(cache);
  if (two_caches) g.inputs.push_back(cache2);
  g.outputs = {y, updated};
  if (two_caches) g.outputs.push_back(updated2);
  p.graphs = {g};
  p.inputs.push_back({"rows", false, DType::kF32, {C1, C2}, ir::Dynamism::kStatic, 0, {}});
  p.inputs.push_back({"pos", false, DType::kI64, {C1}, ir::Dynamism::kStatic, 0, {}});
  if (two_caches) p.inputs.push_back({"pos2", false, DType::kI64, {C1}, ir::Dynamism::kStatic, 0, {}});
  p.outputs.push_back({"y", false, DType::kF32, {C4, C2}, {}});
  p.constants.push_back({"cache.initial", DType::kF32, {4, 2}, bytes});
  p.states.push_back({"cache", DType::kF32, {4, 2}, 0});
  if (two_caches) {
    p.constants.push_back({"cache2.initial", DType::kF32, {4, 2}, bytes});
    p.states.push_back({"cache2", DType::kF32, {4, 2}, 1});
  }
  return p;
}

std::vector<float> state_of(const Session& s, const std::string& name) {
  auto t = s.read_state(name);
  EXPECT_TRUE(t.ok()) << t.status().message();
  return t.ok() ? floats_of(*t) : std::vector<float>{};
}

TEST(StateUpdate, AnIndexOutsideTheStateIsBadInputNamingTheNodeAndWritesNothing) {
  auto program = testing::load_program(cache_program(false, false));
  ASSERT_NE(program, nullptr);
  Session s(*program);
  for (std::int64_t pos : {4, 100, -5}) {
    SCOPED_TRACE(pos);
    auto r = s.run(std::vector<HostValue>{HostValue::of(f32({1, 2}, {-1, -1})), HostValue::of(i64({1}, {pos}))});
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidInput);
    EXPECT_EQ(r.status().message(), "[index_put] indices[0] element 0 = " + std::to_string(pos) +
                                        " out of range for dim 0 of size 4 [main, node 0] (cache.cpp:7)");
    EXPECT_EQ(state_of(s, "cache"), (std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8}));
  }
  // A negative index counts from the end, as in PyTorch; the run writes one row in place.
  auto r = s.run(std::vector<HostValue>{HostValue::of(f32({1, 2}, {-1, -2})), HostValue::of(i64({1}, {-1}))});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(floats_of(r->outputs[0].tensor), (std::vector<float>{-1, -2, -3, -4, -5, -6, 1, 2}));
  EXPECT_EQ(state_of(s, "cache"), (std::vector<float>{1, 2, 3, 4, 5, 6, -1, -2}));
  EXPECT_EQ(s.last_stats().state_bytes_written, 8u);
}

TEST(StateUpdate, AnErrorAfterAnInPlaceWriteUndoesIt) {
  auto program = testing::load_program(cache_program(true, false));
  ASSERT_NE(program, nullptr);
  Session s(*program);
  const HostValue rows = HostValue::of(f32({1, 2}, {-1, -2}));
  // cache's row 1 is written in place, then cache2's index is out of range.
  auto r = s.run(std::vector<HostValue>{rows, HostValue::of(i64({1}, {1})), HostValue::of(i64({1}, {9}))});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "[index_put] indices[0] element 0 = 9 out of range for dim 0 of size 4 [main, node 1] (cache.cpp:8)");
  EXPECT_EQ(s.last_stats().state_bytes_written, 8u);
  EXPECT_EQ(state_of(s, "cache"), (std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(state_of(s, "cache2"), (std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8}));
  // Both in range: both rows written, 8 bytes each.
  r = s.run(std::vector<HostValue>{rows, HostValue::of(i64({1}, {1})), HostValue::of(i64({1}, {2}))});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(state_of(s, "cache"), (std::vector<float>{1, 2, -1, -2, 5, 6, 7, 8}));
  EXPECT_EQ(state_of(s, "cache2"), (std::vector<float>{1, 2, 3, 4, -1, -2, 7, 8}));
  EXPECT_EQ(s.last_stats().state_bytes_written, 16u);
}

TEST(StateUpdate, AStateWhoseOldValueIsReadAfterTheUpdateIsCopiedInstead) {
  auto program = testing::load_program(cache_program(false, true));
  ASSERT_NE(program, nullptr);
  Session s(*program);
  auto r = s.run(std::vector<HostValue>{HostValue::of(f32({1, 2}, {10, 20})), HostValue::of(i64({1}, {2}))});
  ASSERT_TRUE(r.ok()) << r.status().message();
  // y = new - old: the old value was still there when sub read it.
  EXPECT_EQ(floats_of(r->outputs[0].tensor), (std::vector<float>{0, 0, 0, 0, 5, 14, 0, 0}));
  EXPECT_EQ(state_of(s, "cache"), (std::vector<float>{1, 2, 3, 4, 10, 20, 7, 8}));
  EXPECT_EQ(s.last_stats().state_bytes_written, 32u);  // the whole state, copied
  // Again from the new state.
  r = s.run(std::vector<HostValue>{HostValue::of(f32({1, 2}, {1, 1})), HostValue::of(i64({1}, {0}))});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(floats_of(r->outputs[0].tensor), (std::vector<float>{0, -1, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(state_of(s, "cache"), (std::vector<float>{1, 1, 3, 4, 10, 20, 7, 8}));
}


// ---- slices of the cache folded into attention's matmuls -----------------------------------

// The decoder of samples/models/kv_decoder.h (small), traced: its attention slices the
// first pos + t positions out of k_cache (dim 3, the last) and v_cache (dim 2) for q k^T and
// a v. With fusion on, those slices are folded into the matmuls (no slice runs; the matmul
// reads the window of the cache); off, every slice copies. Both give the same logits at
// every prefill and decode step, and the same state (to rounding: fusion off also leaves
// linear+gelu unfused).
TEST(StateUpdate, CacheSlicesFoldedIntoTheMatmulsGiveTheSameLogitsAsCopiedSlices) {
  models::KvDecoder model({.vocab = 16, .d = 16, .layers = 2, .heads = 2, .max_ctx = 12});
  Dim seq("seq", 1, 12);
  ExportOptions eo;
  eo.self_tests = 0;
  auto ep = export_program([&](Tensor ids, SymInt pos) { return model.step(ids, pos); },
                           {input("ids", Tensor::from_ints({1, 3}, std::vector<std::int64_t>{1, 2, 3}), {Dim::STATIC, seq}),
                            int_input("input_pos", 2, Dim::DYNAMIC)},
                           eo);
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  auto load = [&](bool fuse) {
    auto bytes = serialize_bundle(ep->program());
    EXPECT_TRUE(bytes.ok());
    auto bundle = Bundle::from_bytes(*bytes);
    EXPECT_TRUE(bundle.ok());
    ProgramOptions po;
    po.fuse_activations = fuse;
    auto program = Program::load(std::move(bundle).value(), po);
    EXPECT_TRUE(program.ok()) << program.status().message();
    return *program;
  };
  const auto folded = load(true), copied = load(false);
  Session a(*folded, {.profile = true}), b(*copied, {.profile = true});
  // With an observer the folded slices are computed after all: it sees every slice's value
  // (cached keys and values: finite, not all zero).
  int observed_slices = 0;
  const std::vector<NodePlacement> placement = folded->placement(0);
  SessionOptions oo;
  oo.observer = [&](const NodeObservation& o) {
    if (o.graph != 0 || o.outputs.empty() || placement.at(o.node).op != "slice") return;
    const ObservedValue& v = o.outputs[0];
    bool finite = true, nonzero = false;
    for (std::size_t i = 0; i + 4 <= v.data.size(); i += 4) {
      float x;
      std::memcpy(&x, v.data.data() + i, 4);
      finite &= std::isfinite(x);
      nonzero |= x != 0.0f;
    }
    observed_slices += finite && nonzero;
  };
  Session c(*folded, oo);
  auto count_slices = [](const Session& s) {
    int n = 0;
    for (const RunStats::Op& op : s.last_stats().ops) n += op.op == "slice";
    return n;
  };
  // Prefill 5 tokens at 0, then decode steps at 5..11 (the last fills the cache).
  std::vector<std::vector<HostValue>> steps;
  steps.push_back({HostValue::of(i64({1, 5}, {3, 1, 4, 1, 5})), HostValue::integer(0)});
  for (std::int64_t pos = 5; pos < 12; ++pos) steps.push_back({HostValue::of(i64({1, 1}, {(pos * 7) % 16})), HostValue::integer(pos)});
  for (const auto& step : steps) {
    SCOPED_TRACE(step[1].int_value);
    auto ra = a.run(step), rb = b.run(step), rc = c.run(step);
    ASSERT_TRUE(ra.ok()) << ra.status().message();
    ASSERT_TRUE(rb.ok()) << rb.status().message();
    ASSERT_TRUE(rc.ok()) << rc.status().message();
    EXPECT_TRUE(close_to(rc->outputs[0].tensor, ra->outputs[0].tensor));
    EXPECT_EQ(ra->outputs[0].tensor.shape, (std::vector<std::int64_t>{1, step[0].tensor.shape[1], 16}));
    EXPECT_TRUE(close_to(ra->outputs[0].tensor, rb->outputs[0].tensor));
    EXPECT_EQ(count_slices(a), 0);
    EXPECT_EQ(count_slices(b), 4);  // K and V, two layers
  }
  EXPECT_EQ(observed_slices, 4 * static_cast<int>(steps.size()));
  for (const char* name : {"att.0.k_cache", "att.1.v_cache"}) {
    auto sa = a.read_state(name), sb = b.read_state(name);
    ASSERT_TRUE(sa.ok() && sb.ok()) << name;
    EXPECT_TRUE(close_to(*sa, *sb)) << name;
  }
}

}  // namespace
}  // namespace kiln

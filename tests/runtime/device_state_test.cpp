// State kept on the accelerator (docs/FORMAT.md, "State"; StateUpdate::kDevice): with the
// Vulkan backend running every node that reads or updates a state tensor, the Session keeps
// it in a device buffer between runs — a decode step uploads its inputs, not the caches —
// and downloads it only when read (read_state, snapshot_state, a host-side plan). Checked
// here against the fixtures' goldens and the CPU: every sequence step of both fixtures and
// both IRs, the bytes a decode step moves, read/snapshot/restore/reset/set, a failed step
// (the device-side undo log), and two Sessions on one Program. Skips without a Vulkan device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "common/exported.h"
#include "kiln/export/import_pt2.h"
#include "kiln/export/module.h"
#include "kiln/export/ops.h"
#include "kiln/export/serialize.h"
#include "kiln/format/kiln_generated.h"
#include "kiln/runtime/npy.h"
#include "kiln/runtime/program.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

fs::path fixture(const std::string& model) { return fs::path(KILN_FIXTURES_DIR) / ".." / "torch_export_stateful" / model; }

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

::testing::AssertionResult close_to(const HostTensor& got, const HostTensor& want) {
  if (got.shape != want.shape || got.dtype != want.dtype) return ::testing::AssertionFailure() << "shape or dtype differs";
  for (std::int64_t i = 0; i < want.numel(); ++i) {
    const double a = got.element(i), b = want.element(i);
    if (!(std::abs(a - b) <= 1e-5 + 1e-4 * std::abs(b))) return ::testing::AssertionFailure() << "element " << i << ": " << a << " != " << b;
  }
  return ::testing::AssertionSuccess();
}

// A bundle loaded for `backend` (Vulkan with the validation layer); null when that backend
// is unavailable here (no Vulkan device), any other failure failing the test.
std::shared_ptr<const Program> load_bundle(std::vector<std::uint8_t> bytes, const std::string& backend) {
  auto bundle = Bundle::from_bytes(std::move(bytes));
  EXPECT_TRUE(bundle.ok()) << bundle.status().message();
  if (!bundle.ok()) return nullptr;
  ProgramOptions options;
  options.backend = backend;
#if defined(__SANITIZE_THREAD__)
  options.validation = false;  // the layer's threads are not instrumented: TSan reports its own locking
#else
  options.validation = backend == "vulkan";  // the Khronos layer: any message fails the run
#endif
  auto program = Program::load(std::move(bundle).value(), options);
  if (!program.ok()) {
    EXPECT_EQ(program.status().code(), StatusCode::kUnavailable) << program.status().message();
    return nullptr;
  }
  return *program;
}

std::shared_ptr<const Program> load_fixture(const std::string& model, const std::string& archive, const std::string& backend) {
  auto ep = import_pt2((fixture(model) / archive).string());
  EXPECT_TRUE(ep.ok()) << ep.status().message();
  if (!ep.ok()) return nullptr;
  auto bytes = serialize_bundle(ep->program());
  EXPECT_TRUE(bytes.ok()) << bytes.status().message();
  if (!bytes.ok()) return nullptr;
  return load_bundle(std::move(bytes).value(), backend);
}

#define VULKAN_PROGRAM_OR_SKIP(var, ...)                            \
  auto var = __VA_ARGS__;                                           \
  if (var == nullptr) {                                             \
    if (::testing::Test::HasFailure()) return;                      \
    GTEST_SKIP() << "no Vulkan device";                             \
  }

// One step of a fixture sequence: inputs in signature order, the golden outputs.
struct Step {
  std::vector<HostValue> inputs;
  std::vector<HostTensor> want;
};

// Every sequence of `model`'s cases/ (cases/<sequence>.<step>.in.<input>.npy), in name order.
std::vector<std::pair<std::string, std::vector<Step>>> sequences(const std::string& model, const Program& program) {
  const fb::Signature& sig = *program.bundle().program().signature();
  const std::string first = sig.inputs()->Get(0)->name()->str();
  const std::string suffix = ".0.in." + first + ".npy";
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(fixture(model) / "cases")) {
    const std::string f = e.path().filename().string();
    if (f.size() > suffix.size() && f.compare(f.size() - suffix.size(), suffix.size(), suffix) == 0) names.push_back(f.substr(0, f.size() - suffix.size()));
  }
  std::sort(names.begin(), names.end());
  std::vector<std::pair<std::string, std::vector<Step>>> out;
  for (const std::string& name : names) {
    std::vector<Step> steps;
    for (int j = 0;; ++j) {
      const std::string stem = name + "." + std::to_string(j);
      if (!fs::exists(fixture(model) / "cases" / (stem + ".in." + first + ".npy"))) break;
      Step s;
      for (std::uint32_t i = 0; i < sig.inputs()->size(); ++i) {
        s.inputs.push_back(HostValue::of(npy(fixture(model) / "cases" / (stem + ".in." + sig.inputs()->Get(i)->name()->str() + ".npy"))));
      }
      for (std::uint32_t o = 0; o < sig.outputs()->size(); ++o) s.want.push_back(npy(fixture(model) / "cases" / (stem + ".out." + std::to_string(o) + ".npy")));
      steps.push_back(std::move(s));
    }
    out.emplace_back(name, std::move(steps));
  }
  return out;
}

std::vector<Step> kv_sequence(const Program& program, const std::string& name) {
  for (auto& [n, steps] : sequences("kv_decoder", program)) {
    if (n == name) return steps;
  }
  ADD_FAILURE() << "no sequence " << name;
  return {};
}

// Every state of `a` equals `b`'s (within the goldens' tolerance).
void expect_same_state(const Session& a, const Session& b) {
  for (const std::string& name : a.state_names()) {
    auto x = a.read_state(name), y = b.read_state(name);
    ASSERT_TRUE(x.ok()) << x.status().message();
    ASSERT_TRUE(y.ok()) << y.status().message();
    EXPECT_TRUE(close_to(*x, *y)) << name;
  }
}

// kv_decoder: 4 caches f32[1, 4, 64, 16]; a decode step writes one row of 16 floats per head.
constexpr std::uint64_t kCacheBytes = 4 * 64 * 16 * 4;
constexpr std::uint64_t kRowBytes = 4 /*caches*/ * 4 /*heads*/ * 16 * 4;

TEST(DeviceState, BothFixturesBothIrsRunEverySequenceStepOnVulkanAgainstTheGoldensAndTheCpuState) {
  int steps_run = 0;
  for (const char* model : {"counter", "kv_decoder"}) {
    for (const char* archive : {"model.pt2", "model.core.pt2"}) {
      SCOPED_TRACE(std::string(model) + "/" + archive);
      VULKAN_PROGRAM_OR_SKIP(vk, load_fixture(model, archive, "vulkan"));
      auto cpu = load_fixture(model, archive, "cpu");
      ASSERT_NE(cpu, nullptr);
      Session v(*vk), c(*cpu);
      for (const auto& [name, steps] : sequences(model, *vk)) {
        SCOPED_TRACE(name);
        v.reset_state();
        c.reset_state();
        for (std::size_t j = 0; j < steps.size(); ++j) {
          SCOPED_TRACE("step " + std::to_string(j));
          auto got = v.run(steps[j].inputs);
          ASSERT_TRUE(got.ok()) << got.status().message();
          ASSERT_TRUE(c.run(steps[j].inputs).ok());
          ASSERT_EQ(got->outputs.size(), steps[j].want.size());
          for (std::size_t o = 0; o < steps[j].want.size(); ++o) EXPECT_TRUE(close_to(got->outputs[o].tensor, steps[j].want[o])) << "output " << o;
          expect_same_state(v, c);
          ++steps_run;
        }
      }
    }
  }
  EXPECT_GE(steps_run, 2 * (3 + 9));
}

TEST(DeviceState, AKvDecodeStepUploadsItsInputsNotTheCaches) {
  for (const char* archive : {"model.pt2", "model.core.pt2"}) {
    SCOPED_TRACE(archive);
    VULKAN_PROGRAM_OR_SKIP(vk, load_fixture("kv_decoder", archive, "vulkan"));
    Session s(*vk);
    const std::vector<Step> steps = kv_sequence(*vk, "prefill5_decode3");
    ASSERT_EQ(steps.size(), 4u);
    for (std::size_t j = 0; j < steps.size(); ++j) {
      SCOPED_TRACE("step " + std::to_string(j));
      auto got = s.run(steps[j].inputs);
      ASSERT_TRUE(got.ok()) << got.status().message();
      EXPECT_TRUE(close_to(got->outputs[0].tensor, steps[j].want[0]));
      const RunStats& st = s.last_stats();
      if (j == 0) {  // the initial values go up once, with the prefill
        EXPECT_GE(st.bytes_uploaded, 4 * kCacheBytes);
        EXPECT_EQ(st.state_bytes_written, 5 * kRowBytes);
        continue;
      }
      // A decode step: ids and input_pos (8 bytes each), the mask the CPU computes (64
      // bools) and the residual crossing back to the device (64 floats): no cache (16 KiB
      // each; 66,960 bytes went up per step when the caches were on the host).
      EXPECT_GT(st.bytes_uploaded, 0u);
      EXPECT_LT(st.bytes_uploaded, 1024u);
      EXPECT_LT(st.bytes_downloaded, 2048u);  // the logits and small tensors, no cache
      EXPECT_EQ(st.state_bytes_written, kRowBytes);
    }
  }
}

TEST(DeviceState, ReadSnapshotRestoreResetAndSetOnVulkanGiveTheCpusValues) {
  VULKAN_PROGRAM_OR_SKIP(vk, load_fixture("kv_decoder", "model.core.pt2", "vulkan"));
  auto cpu = load_fixture("kv_decoder", "model.core.pt2", "cpu");
  ASSERT_NE(cpu, nullptr);
  Session v(*vk), c(*cpu);
  const std::vector<Step> steps = kv_sequence(*vk, "prefill5_decode3");
  ASSERT_EQ(steps.size(), 4u);
  expect_same_state(v, c);  // the initial values
  ASSERT_TRUE(v.run(steps[0].inputs).ok());
  ASSERT_TRUE(c.run(steps[0].inputs).ok());
  expect_same_state(v, c);  // downloaded from the device
  // Snapshot, go on, rewind: the same step gives the same golden again.
  const StateSnapshot after_prefill = v.snapshot_state();
  ASSERT_EQ(after_prefill.values.size(), 4u);
  const StateSnapshot cpu_after_prefill = c.snapshot_state();
  for (std::size_t k = 0; k < 4; ++k) EXPECT_TRUE(close_to(after_prefill.values[k], cpu_after_prefill.values[k])) << after_prefill.names[k];
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE(round);
    auto got = v.run(steps[1].inputs);
    ASSERT_TRUE(got.ok()) << got.status().message();
    EXPECT_TRUE(close_to(got->outputs[0].tensor, steps[1].want[0]));
    ASSERT_TRUE(v.restore_state(after_prefill).ok());  // uploaded before the next run
  }
  EXPECT_EQ(v.read_state("k_cache_0")->data, after_prefill.values[0].data);
  // set_state: the same value on both backends, then a decode step on both.
  std::vector<float> pattern(4 * 64 * 16);
  for (std::size_t i = 0; i < pattern.size(); ++i) pattern[i] = static_cast<float>(i % 7) * 0.25f - 0.5f;
  ASSERT_TRUE(v.set_state("v_cache_1", f32({1, 4, 64, 16}, pattern)).ok());
  ASSERT_TRUE(c.set_state("v_cache_1", f32({1, 4, 64, 16}, pattern)).ok());
  EXPECT_EQ(v.read_state("v_cache_1")->data, f32({1, 4, 64, 16}, pattern).data);
  auto got_v = v.run(steps[1].inputs);
  auto got_c = c.run(steps[1].inputs);
  ASSERT_TRUE(got_v.ok()) << got_v.status().message();
  ASSERT_TRUE(got_c.ok()) << got_c.status().message();
  EXPECT_TRUE(close_to(got_v->outputs[0].tensor, got_c->outputs[0].tensor));
  EXPECT_FALSE(close_to(got_v->outputs[0].tensor, steps[1].want[0])) << "the set value was used";
  expect_same_state(v, c);
  // reset_state: the initial values, and the sequence from the start gives its goldens.
  v.reset_state();
  Session fresh(*cpu);
  expect_same_state(v, fresh);
  for (std::size_t j = 0; j < steps.size(); ++j) {
    auto got = v.run(steps[j].inputs);
    ASSERT_TRUE(got.ok()) << got.status().message();
    EXPECT_TRUE(close_to(got->outputs[0].tensor, steps[j].want[0])) << "step " << j;
  }
}

// A cache written at positions, then read at other positions in the same device segment:
// a read out of range fails the segment after the cache write.
struct WriteThenRead : Module {
  Tensor cache;
  WriteThenRead() { cache = register_buffer("cache", zeros({8, 2}), {.state = true}); }
  Tensor operator()(const Tensor& pos, const Tensor& rows, const Tensor& sel) {
    cache.index_copy_(0, pos, rows);
    return index_select(cache, 0, sel) * 2.0f;
  }
};

std::vector<std::uint8_t> write_then_read_bundle() {
  WriteThenRead model;
  auto ep = export_program([&](Tensor pos, Tensor rows, Tensor sel) { return model(pos, rows, sel); },
                           {input("pos", Tensor::from_ints({1}, std::vector<std::int64_t>{0})),
                            input("rows", Tensor::from_floats({1, 2}, std::vector<float>{1, 2})),
                            input("sel", Tensor::from_ints({2}, std::vector<std::int64_t>{0, 1}))});
  EXPECT_TRUE(ep.ok()) << ep.status().message();
  if (!ep.ok()) return {};
  auto bytes = serialize_bundle(ep->program());
  EXPECT_TRUE(bytes.ok()) << bytes.status().message();
  return bytes.ok() ? std::move(bytes).value() : std::vector<std::uint8_t>{};
}

std::vector<HostValue> write_then_read_inputs(std::int64_t pos, float a, std::int64_t sel0, std::int64_t sel1) {
  return {HostValue::of(i64({1}, {pos})), HostValue::of(f32({1, 2}, {a, -a})), HostValue::of(i64({2}, {sel0, sel1}))};
}

TEST(DeviceState, AFailedStepLeavesTheDeviceStateByteIdentical) {
  const std::vector<std::uint8_t> bytes = write_then_read_bundle();
  ASSERT_FALSE(bytes.empty());
  VULKAN_PROGRAM_OR_SKIP(vk, load_bundle(bytes, "vulkan"));
  auto cpu = load_bundle(bytes, "cpu");
  ASSERT_NE(cpu, nullptr);
  Session v(*vk), c(*cpu);
  for (std::int64_t p = 0; p < 8; p += 2) {  // rows 0, 2, 4, 6 written on the device
    auto in = write_then_read_inputs(p, static_cast<float>(p + 1), p, 0);
    auto got = v.run(in);
    ASSERT_TRUE(got.ok()) << got.status().message();
    ASSERT_TRUE(c.run(in).ok());
    EXPECT_EQ(v.last_stats().state_bytes_written, 8u);
    EXPECT_EQ(v.last_stats().bytes_uploaded, p == 0 ? 64u + 8 + 8 + 16 : 8u + 8 + 16) << "the cache goes up once";
  }
  // (a) The read after the write is out of range: the device wrote row 3, then the segment
  // failed; its undo log puts row 3 back. (b) The write position is out of range: nothing
  // is written, with the CPU kernel's message. Before each, a good step leaves the newest
  // state on the device only, so read_state afterwards downloads the device's copy.
  float value = 10;
  for (const auto& [in, what] : {std::pair{write_then_read_inputs(3, 9, 1, 8), std::string("[index] index 8")},
                                  std::pair{write_then_read_inputs(8, 9, 1, 1), std::string("[index_put] indices[0] element 0 = 8 out of range for dim 0 of size 8")},
                                  std::pair{write_then_read_inputs(-9, 9, 1, 1), std::string("[index_put] indices[0] element 0 = -9 out of range for dim 0 of size 8")}}) {
    SCOPED_TRACE(what);
    auto good = write_then_read_inputs(1, value++, 1, 0);
    ASSERT_TRUE(v.run(good).ok());
    ASSERT_TRUE(c.run(good).ok());
    auto before = c.read_state("cache");
    ASSERT_TRUE(before.ok());
    auto got = v.run(in);
    ASSERT_FALSE(got.ok());
    EXPECT_EQ(got.status().code(), StatusCode::kInvalidInput) << got.status().message();
    EXPECT_TRUE(got.status().message().starts_with(what)) << got.status().message();
    auto on_cpu = c.run(in);
    ASSERT_FALSE(on_cpu.ok());
    EXPECT_EQ(on_cpu.status().code(), StatusCode::kInvalidInput);
    if (what.starts_with("[index_put]")) {  // the CPU's message; the node and source line
      EXPECT_TRUE(on_cpu.status().message().starts_with(what)) << on_cpu.status().message();
      EXPECT_NE(got.status().message().find("device_state_test.cpp:"), std::string::npos) << got.status().message();
    }
    auto after = v.read_state("cache");  // downloaded: the device's copy
    ASSERT_TRUE(after.ok()) << after.status().message();
    EXPECT_EQ(after->data, before->data) << "a failed run leaves the state byte-identical";
  }
  // A run that fails before its segment reaches the device (an index beyond the device's
  // 32-bit range, refused at upload) writes nothing, and undoes nothing either: the undo log
  // still holds the previous step's rows.
  {
    auto good = write_then_read_inputs(6, value++, 1, 0);
    ASSERT_TRUE(v.run(good).ok());
    ASSERT_TRUE(c.run(good).ok());
    auto before = c.read_state("cache");
    auto got = v.run(write_then_read_inputs(2, 9, 1, std::int64_t{1} << 40));
    ASSERT_FALSE(got.ok());
    EXPECT_NE(got.status().message().find("32-bit"), std::string::npos) << got.status().message();
    EXPECT_EQ(v.read_state("cache")->data, before->data);
  }
  // A failure right after a read_state (the host copy current too): the device's copy is
  // put back as well, as the next step, reading row 3 without writing it, shows.
  ASSERT_TRUE(v.read_state("cache").ok());
  ASSERT_FALSE(v.run(write_then_read_inputs(3, 9, 1, 8)).ok());
  auto in = write_then_read_inputs(5, 5, 3, 2);
  auto got_v = v.run(in), got_c = c.run(in);
  ASSERT_TRUE(got_v.ok()) << got_v.status().message();
  ASSERT_TRUE(got_c.ok());
  EXPECT_EQ(got_v->outputs[0].tensor.data, got_c->outputs[0].tensor.data);
  EXPECT_EQ(v.read_state("cache")->data, c.read_state("cache")->data);
}

TEST(DeviceState, AKvDecodeStepOutsideTheCacheLeavesTheStateAndTheNextStepIsGolden) {
  VULKAN_PROGRAM_OR_SKIP(vk, load_fixture("kv_decoder", "model.core.pt2", "vulkan"));
  Session s(*vk);
  const std::vector<Step> steps = kv_sequence(*vk, "prefill5_decode3");
  ASSERT_TRUE(s.run(steps[0].inputs).ok());
  const StateSnapshot before = s.snapshot_state();
  for (std::int64_t pos : {64, -65, 1000}) {
    SCOPED_TRACE(pos);
    auto r = s.run(std::vector<HostValue>{HostValue::of(i64({1, 1}, {3})), HostValue::of(i64({1}, {pos}))});
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidInput) << r.status().message();
    const StateSnapshot after = s.snapshot_state();
    ASSERT_EQ(after.values.size(), before.values.size());
    for (std::size_t k = 0; k < before.values.size(); ++k) EXPECT_EQ(after.values[k].data, before.values[k].data) << before.names[k];
  }
  for (std::size_t j = 1; j < steps.size(); ++j) {
    auto got = s.run(steps[j].inputs);
    ASSERT_TRUE(got.ok()) << got.status().message();
    EXPECT_TRUE(close_to(got->outputs[0].tensor, steps[j].want[0])) << "step " << j;
  }
}

TEST(DeviceState, TwoSessionsOnOneVulkanProgramKeepSeparateState) {
  VULKAN_PROGRAM_OR_SKIP(vk, load_fixture("kv_decoder", "model.core.pt2", "vulkan"));
  const std::vector<Step> a = kv_sequence(*vk, "prefill5_decode3"), b = kv_sequence(*vk, "prefill17_decode2");
  ASSERT_EQ(a.size(), 4u);
  ASSERT_EQ(b.size(), 3u);
  Session sa(*vk), sb(*vk);
  for (std::size_t j = 0; j < a.size(); ++j) {  // interleaved step by step
    auto ra = sa.run(a[j].inputs);
    ASSERT_TRUE(ra.ok()) << ra.status().message();
    EXPECT_TRUE(close_to(ra->outputs[0].tensor, a[j].want[0])) << "a, step " << j;
    if (j < b.size()) {
      auto rb = sb.run(b[j].inputs);
      ASSERT_TRUE(rb.ok()) << rb.status().message();
      EXPECT_TRUE(close_to(rb->outputs[0].tensor, b[j].want[0])) << "b, step " << j;
    }
  }
  EXPECT_NE(sa.read_state("k_cache_0")->data, sb.read_state("k_cache_0")->data);
  sb.reset_state();  // one Session's reset leaves the other's device state alone
  auto again = sa.run(a[3].inputs);  // rewrites row 7 with the same values: the same golden
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_TRUE(close_to(again->outputs[0].tensor, a[3].want[0])) << "sa kept its cache";
  EXPECT_EQ(sb.read_state("k_cache_0")->data, Session(*vk).read_state("k_cache_0")->data);
}

TEST(DeviceState, FourSessionsOnOneVulkanProgramRunConcurrentlyEachWithItsOwnDeviceState) {
  VULKAN_PROGRAM_OR_SKIP(vk, load_fixture("kv_decoder", "model.core.pt2", "vulkan"));
  const std::vector<Step> a = kv_sequence(*vk, "prefill5_decode3"), b = kv_sequence(*vk, "prefill17_decode2");
  std::vector<int> failures(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      Session s(*vk);
      const std::vector<Step>& steps = t % 2 ? b : a;
      for (int round = 0; round < 2; ++round) {
        s.reset_state();
        for (const Step& step : steps) {
          auto got = s.run(step.inputs);
          if (!got.ok() || !close_to(got->outputs[0].tensor, step.want[0])) ++failures[static_cast<std::size_t>(t)];
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(failures, std::vector<int>(4, 0));
}

// A state only read (scale: stays on the device, uploaded once and after set_state) next to
// one replaced by an add (total: its new value is computed on the device, downloaded and
// copied in on the host, and uploaded again by the next run).
struct ScaledSum : Module {
  Tensor total, scale;
  ScaledSum() {
    total = register_buffer("total", zeros({4}), {.state = true});
    scale = register_buffer("scale", Tensor::from_floats({4}, std::vector<float>{1, 2, 3, 4}), {.state = true});
  }
  Tensor operator()(const Tensor& x) {
    total.add_(x);
    return total * scale;
  }
};

TEST(DeviceState, AStateOnlyReadStaysOnTheDeviceNextToOneTheHostReplaces) {
  ScaledSum model;
  auto ep = export_program([&](Tensor x) { return model(x); }, {input("x", Tensor::from_floats({4}, std::vector<float>{1, 1, 1, 1}))});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  auto bytes = serialize_bundle(ep->program());
  ASSERT_TRUE(bytes.ok());
  VULKAN_PROGRAM_OR_SKIP(vk, load_bundle(*bytes, "vulkan"));
  auto cpu = load_bundle(*bytes, "cpu");
  ASSERT_NE(cpu, nullptr);
  const std::vector<StatePlacement> placed = vk->state_placement();
  ASSERT_EQ(placed.size(), 2u);
  EXPECT_EQ(placed[0].name, "total");
  EXPECT_EQ(placed[0].backend, "cpu");  // its new value comes from an add, not an index_put
  EXPECT_EQ(placed[1].name, "scale");
  EXPECT_EQ(placed[1].backend, "vulkan");
  Session v(*vk), c(*cpu);
  const HostValue x = testing::floats({0.5f, 1, 2, -1});
  for (int run = 0; run < 4; ++run) {
    SCOPED_TRACE(run);
    if (run == 2) {  // a new scale: uploaded by the next run
      const HostTensor scale = f32({4}, {-1, 0.5f, 2, 3});
      ASSERT_TRUE(v.set_state("scale", scale).ok());
      ASSERT_TRUE(c.set_state("scale", scale).ok());
    }
    auto got = v.run(std::vector<HostValue>{x});
    auto want = c.run(std::vector<HostValue>{x});
    ASSERT_TRUE(got.ok()) << got.status().message();
    ASSERT_TRUE(want.ok());
    EXPECT_EQ(got->outputs[0].tensor.data, want->outputs[0].tensor.data);
    // x and total (16 bytes each) every run; scale with the first run and after set_state.
    EXPECT_EQ(v.last_stats().bytes_uploaded, run == 0 || run == 2 ? 48u : 32u);
    expect_same_state(v, c);
  }
}

}  // namespace
}  // namespace kiln

// Export -> bundle -> Program/Session, against eager execution of the same model code.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <thread>

#include "../../samples/models/models.h"
#include "common/exported.h"
#include "kiln/export/guards.h"
#include "kiln/export/testing/format_sample.h"
#include "kiln/runtime/program.h"

namespace kiln {
namespace {

HostTensor host(const Tensor& t) { return testing::host_tensor(t); }
std::shared_ptr<const Program> load(const ExportedProgram& ep) { return testing::load_exported(ep); }

void expect_close(const HostTensor& got, const Tensor& want, float rtol = 1e-4f, float atol = 1e-5f) {
  ASSERT_EQ(got.shape, want.concrete_shape());
  ASSERT_EQ(got.dtype, want.dtype());
  if (got.dtype != DType::kF32) {
    EXPECT_EQ(got.data, want.bytes());
    return;
  }
  const auto w = want.to_vector<float>();
  std::vector<float> g(w.size());
  std::memcpy(g.data(), got.data.data(), g.size() * 4);
  for (std::size_t i = 0; i < w.size(); ++i) {
    ASSERT_NEAR(g[i], w[i], atol + rtol * std::fabs(w[i])) << "element " << i;
  }
}

Status run_status(const Program& program, std::vector<HostValue> inputs) {
  Session s(program);
  auto r = s.run(inputs);
  return r.ok() ? Status::Ok() : r.status();
}

TEST(Executor, MlpMatchesEagerForEveryBatch) {
  models::Mlp model;
  auto ep = export_program([&](Tensor x) { return model(x); }, {input("x", Tensor::randn({4, 64}), {Dim("batch", 2, 1024)})});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  auto program = load(*ep);
  ASSERT_NE(program, nullptr);
  Session session(*program, {.threads = 2});
  for (std::int64_t batch : {2, 3, 17, 64}) {
    const Tensor x = Tensor::randn({batch, 64}, static_cast<std::uint64_t>(batch));
    const Tensor want = model(x);  // eager
    auto r = session.run(std::vector<HostValue>{HostValue::of(host(x))});
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_EQ(r->variant, "generic");
    expect_close(r->outputs[0].tensor, want);
  }
}

TEST(Executor, InputChecksNameTheInputDimAndConstraint) {
  models::Mlp model;
  auto ep = export_program([&](Tensor x) { return model(x); }, {input("x", Tensor::randn({4, 64}), {Dim("batch", 2, 1024)})});
  ASSERT_TRUE(ep.ok());
  auto program = load(*ep);
  auto check = [&](std::vector<HostValue> in, const std::string& message) {
    const Status s = run_status(*program, std::move(in));
    EXPECT_EQ(s.code(), StatusCode::kInvalidInput) << s.to_string();
    EXPECT_EQ(exit_code(s.code()), 3);
    EXPECT_EQ(s.message(), message);
  };
  check({HostValue::of(host(Tensor::randn({2000, 64})))}, "input x.size(0) = 2000 (batch, s0) is outside the range [2, 1024]");
  check({HostValue::of(host(Tensor::randn({1, 64})))}, "input x.size(0) = 1 (batch, s0) is outside the range [2, 1024]");
  check({HostValue::of(host(Tensor::randn({4, 63})))}, "input x: dim 1 is 63, expected 64");
  check({HostValue::of(host(Tensor::randn({4, 64, 1})))}, "input x: rank 3, expected 2 f32[s0, 64]");
  check({HostValue::of(host(Tensor::from_ints({4, 64}, std::vector<std::int64_t>(256, 1))))}, "input x: dtype i64, expected f32");
  check({}, "expected 1 inputs, got 0");
  check({HostValue::integer(3)}, "input x: expected a tensor, got an int");
}

TEST(Executor, UnbackedAssertFailsWithSourceLine) {
  int low_line = 0, high_line = 0;  // each bound's assert points at its own check
  auto ep = export_program(
      [&](Tensor x, Tensor n_t) {
        SymInt n = n_t.item();
        check(n >= 2), low_line = __LINE__;
        check(n <= 10), high_line = __LINE__;
        return slice(x, 0, 0, n) * 2.0;
      },
      {input("x", Tensor::randn({16, 3})), input("n_t", Tensor::from_ints({}, std::vector<std::int64_t>{4}))});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  auto program = load(*ep);
  ASSERT_NE(program, nullptr);
  const Tensor x = Tensor::randn({16, 3}, 9);
  auto n = [](std::int64_t v) { return HostValue::of(host(Tensor::from_ints({}, std::vector<std::int64_t>{v}))); };
  Session s(*program);
  auto ok = s.run(std::vector<HostValue>{HostValue::of(host(x)), n(5)});
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ(ok->outputs[0].tensor.shape, (std::vector<std::int64_t>{5, 3}));
  const Status low = run_status(*program, {HostValue::of(host(x)), n(1)});
  EXPECT_EQ(low.code(), StatusCode::kInvalidInput);
  EXPECT_EQ(low.message().rfind("runtime assertion failed: u0 >= 2 (executor_test.cpp:" + std::to_string(low_line), 0), 0u)
      << low.message();
  const Status high = run_status(*program, {HostValue::of(host(x)), n(11)});
  EXPECT_EQ(high.message().rfind("runtime assertion failed: u0 <= 10 (executor_test.cpp:" + std::to_string(high_line), 0),
            0u)
      << high.message();
}

TEST(Executor, NonzeroBindsItsSize) {
  auto ep = export_program([](Tensor x) { return nonzero(gt(x, 0.0)); }, {input("x", Tensor::randn({3, 4}))});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  auto program = load(*ep);
  ASSERT_NE(program, nullptr);
  std::vector<float> v{1, -1, 0, 2, 0, 0, 3, -4, 5, 0, 0, 0};
  const Tensor x = Tensor::from_floats({3, 4}, v);
  Session s(*program);
  auto r = s.run(std::vector<HostValue>{HostValue::of(host(x))});
  ASSERT_TRUE(r.ok()) << r.status().message();
  const std::vector<std::int64_t> want{0, 0, 0, 3, 1, 2, 2, 0};
  ASSERT_EQ(r->outputs[0].tensor.shape, (std::vector<std::int64_t>{4, 2}));
  std::vector<std::int64_t> got(8);
  std::memcpy(got.data(), r->outputs[0].tensor.data.data(), 64);
  EXPECT_EQ(got, want);
}

TEST(Executor, SpecializationDispatchOrder) {
  Dim s("s", 1, 4096);
  s.specialize_on({"s % 16 == 0", "s == 32"});
  auto ep = export_program([](Tensor x) { return relu(x); }, {input("x", Tensor::randn({5, 8}), {s})});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  auto program = load(*ep);
  ASSERT_NE(program, nullptr);
  Session session(*program);
  std::vector<std::string> seen;
  for (std::int64_t n : {5, 16, 7, 32, 48, 8}) {
    auto r = session.run(std::vector<HostValue>{HostValue::of(host(Tensor::randn({n, 8})))});
    ASSERT_TRUE(r.ok()) << r.status().message();
    seen.push_back(r->variant);
  }
  EXPECT_EQ(seen, (std::vector<std::string>{"generic", "s % 16 == 0", "generic", "s % 16 == 0", "s % 16 == 0", "generic"}));
}

TEST(Executor, DerivedDimAndDivisibilityAreChecked) {
  Dim n("n", 2, 100);
  auto ep = export_program([](Tensor x, Tensor y) { return slice(y, 0, 1, INT64_MAX) + x; },
                           {input("x", Tensor::randn({5}), {n}), input("y", Tensor::randn({6}), {n + 1})});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  auto program = load(*ep);
  ASSERT_NE(program, nullptr);
  EXPECT_TRUE(run_status(*program, {HostValue::of(host(Tensor::randn({7}))), HostValue::of(host(Tensor::randn({8})))}).ok());
  const Status bad = run_status(*program, {HostValue::of(host(Tensor::randn({7}))), HostValue::of(host(Tensor::randn({9})))});
  EXPECT_EQ(bad.code(), StatusCode::kInvalidInput);
  EXPECT_EQ(bad.message(), "input y: dim 0 is 9, expected s0 + 1 = 8");

  auto div = export_program(
      [](Tensor x) {
        if (x.size(0) % 4 == 0) return x.reshape({-1, 4});
        return x.reshape({1, -1});
      },
      {input("x", Tensor::randn({8}), {Dim::DYNAMIC})});
  ASSERT_TRUE(div.ok()) << div.status().message();
  auto dprog = load(*div);
  ASSERT_NE(dprog, nullptr);
  EXPECT_TRUE(run_status(*dprog, {HostValue::of(host(Tensor::randn({12})))}).ok());
  const Status six = run_status(*dprog, {HostValue::of(host(Tensor::randn({6})))});
  EXPECT_EQ(six.code(), StatusCode::kInvalidInput);
  EXPECT_EQ(six.message().rfind("runtime assertion failed: s0 % 4 == 0", 0), 0u) << six.message();
}

// The decoder with dynamic batch and sequence length.
Result<ExportedProgram> export_decoder(const models::Decoder& model) {
  return export_program([&](Tensor x) { return model(x); },
                        {input("ids", Tensor::from_ints({2, 5}, std::vector<std::int64_t>(10, 1)),
                               {Dim("batch", 1, 8), Dim("seq", 1, 128)})});
}

TEST(Executor, DecoderMatchesEager) {
  models::Decoder model;
  auto ep = export_decoder(model);
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  auto program = load(*ep);
  ASSERT_NE(program, nullptr);
  Session session(*program);
  for (auto [b, t] : {std::pair<std::int64_t, std::int64_t>{1, 1}, {2, 7}, {3, 16}}) {
    std::vector<std::int64_t> ids(static_cast<std::size_t>(b * t));
    for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int64_t>((i * 37) % 256);
    const Tensor x = Tensor::from_ints({b, t}, ids);
    const Tensor want = model(x);
    auto r = session.run(std::vector<HostValue>{HostValue::of(host(x))});
    ASSERT_TRUE(r.ok()) << r.status().message();
    expect_close(r->outputs[0].tensor, want, 1e-4f, 1e-4f);
  }
}

// One Program shared by 8 threads, each with its own Session (2 pool threads each), over
// varying shapes: every result equals the single-threaded one bit for bit.
TEST(Executor, EightThreadsShareOneProgram) {
  models::Decoder model;
  auto ep = export_decoder(model);
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  auto program = load(*ep);
  ASSERT_NE(program, nullptr);
  std::vector<std::vector<HostValue>> inputs;
  std::vector<HostTensor> expected;
  Session reference(*program);
  for (std::int64_t t = 1; t <= 8; ++t) {
    std::vector<std::int64_t> ids(static_cast<std::size_t>(2 * t));
    for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int64_t>((i * 31 + static_cast<std::size_t>(t)) % 256);
    inputs.push_back({HostValue::of(host(Tensor::from_ints({2, t}, ids)))});
    auto r = reference.run(inputs.back());
    ASSERT_TRUE(r.ok()) << r.status().message();
    expected.push_back(r->outputs[0].tensor);
  }
  std::atomic<int> mismatches{0}, failures{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < 8; ++w) {
    threads.emplace_back([&, w] {
      Session session(*program, {.threads = 2});
      for (int round = 0; round < 20; ++round) {
        const std::size_t k = static_cast<std::size_t>(w + round) % inputs.size();
        auto r = session.run(inputs[k]);
        if (!r.ok()) {
          ++failures;
          continue;
        }
        if (r->outputs[0].tensor.data != expected[k].data) ++mismatches;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(mismatches.load(), 0);
}

TEST(Executor, ReusedResultKeepsItsBuffers) {
  models::Mlp model;
  auto ep = export_program([&](Tensor x) { return model(x); }, {input("x", Tensor::randn({4, 64}), {Dim("batch", 2, 1024)})});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  auto program = load(*ep);
  ASSERT_NE(program, nullptr);
  Session session(*program);
  RunResult result;
  const std::uint8_t* buffer = nullptr;
  for (int seed = 1; seed <= 3; ++seed) {
    const Tensor x = Tensor::randn({5, 64}, static_cast<std::uint64_t>(seed));
    ASSERT_TRUE(session.run(std::vector<HostValue>{HostValue::of(host(x))}, result).ok());
    expect_close(result.outputs[0].tensor, model(x));
    if (buffer != nullptr) {
      EXPECT_EQ(result.outputs[0].tensor.data.data(), buffer) << "reallocated on run " << seed;
    }
    buffer = result.outputs[0].tensor.data.data();
  }
  const Status bad = session.run(std::vector<HostValue>{HostValue::integer(3)}, result);
  EXPECT_EQ(bad.code(), StatusCode::kInvalidInput);
}

TEST(Executor, MissingOpsAreListedAtLoad) {
  auto sample = testing::make_format_sample();
  sample->program.op_names[0] = "frobnicate";
  sample->program.op_names[1] = "warp_drive";
  auto bytes = sample->bytes();
  ASSERT_TRUE(bytes.ok());
  auto bundle = Bundle::from_bytes(*bytes);
  ASSERT_TRUE(bundle.ok()) << bundle.status().message();
  auto program = Program::load(std::move(bundle).value());
  ASSERT_FALSE(program.ok());
  EXPECT_EQ(program.status().code(), StatusCode::kUnsupported);
  EXPECT_EQ(exit_code(program.status().code()), 6);
  EXPECT_EQ(program.status().message(), "this build cannot run 2 ops used by the bundle: frobnicate (2 nodes), warp_drive (2 nodes)");
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

TEST(HostTensor, ElementReadsEveryDtype) {
  auto make = [](DType dt, std::vector<std::uint8_t> bytes) {
    HostTensor t;
    t.dtype = dt;
    t.shape = {static_cast<std::int64_t>(bytes.size() / dtype_size(dt))};
    t.data = std::move(bytes);
    return t;
  };
  auto bytes_of = [](auto... v) {
    std::vector<std::uint8_t> out;
    (..., [&] {
      const auto* p = reinterpret_cast<const std::uint8_t*>(&v);
      out.insert(out.end(), p, p + sizeof(v));
    }());
    return out;
  };
  EXPECT_EQ(make(DType::kF32, bytes_of(1.5f, -2.25f)).element(1), -2.25);
  EXPECT_EQ(make(DType::kF64, bytes_of(0.1)).element(0), 0.1);
  EXPECT_EQ(make(DType::kF16, bytes_of(std::uint16_t{0x3e00}, std::uint16_t{0xc000})).element(0), 1.5);  // half 1.5, -2
  EXPECT_EQ(make(DType::kF16, bytes_of(std::uint16_t{0x3e00}, std::uint16_t{0xc000})).element(1), -2.0);
  EXPECT_EQ(make(DType::kBF16, bytes_of(std::uint16_t{0x3fc0})).element(0), 1.5);
  EXPECT_EQ(make(DType::kI8, bytes_of(std::int8_t{-7})).element(0), -7.0);
  EXPECT_EQ(make(DType::kI16, bytes_of(std::int16_t{-300})).element(0), -300.0);
  EXPECT_EQ(make(DType::kI32, bytes_of(std::int32_t{1} << 30)).element(0), 1073741824.0);
  EXPECT_EQ(make(DType::kI64, bytes_of(std::int64_t{-5}, std::int64_t{1} << 40)).element(1), 1099511627776.0);
  EXPECT_EQ(make(DType::kU8, bytes_of(std::uint8_t{200})).element(0), 200.0);
  EXPECT_EQ(make(DType::kBool, bytes_of(std::uint8_t{0}, std::uint8_t{7})).element(1), 1.0);
}

}  // namespace
}  // namespace kiln

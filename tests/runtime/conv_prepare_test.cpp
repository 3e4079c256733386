// Load-time preparation of conv2d weights (the Winograd transform, packed) and activations
// fused into conv2d/linear, through export -> bundle -> Program/Session against eager
// execution, with ProgramOptions::prepack_weights on and off.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/exported.h"
#include "kiln/export/ops.h"
#include "kiln/runtime/bundle.h"
#include "kiln/runtime/program.h"

namespace kiln {
namespace {

// Runs `ep` on x (profiled) and compares with `want`; returns the profile's op names.
std::vector<std::string> run_like_eager(const ExportedProgram& ep, const Tensor& x, const Tensor& want, bool prepack,
                                        float tol) {
  std::vector<std::string> ops;
  const auto program = testing::load_exported(ep, {.prepack_weights = prepack});
  EXPECT_NE(program, nullptr);
  if (program == nullptr) return ops;
  Session session(*program, {.threads = 2, .profile = true});
  auto r = session.run(std::vector<HostValue>{HostValue::of(testing::host_tensor(x))});
  EXPECT_TRUE(r.ok()) << r.status().message();
  if (!r.ok()) return ops;
  for (const RunStats::Op& op : session.last_stats().ops) ops.push_back(op.op);
  EXPECT_EQ(r->outputs[0].tensor.shape, want.concrete_shape());
  const auto w = want.to_vector<float>();
  std::vector<float> got(w.size());
  std::memcpy(got.data(), r->outputs[0].tensor.data.data(), got.size() * sizeof(float));
  for (std::size_t i = 0; i < w.size(); ++i) {
    EXPECT_NEAR(got[i], w[i], tol * (1.0f + std::fabs(w[i]))) << "element " << i << " prepack=" << prepack;
    if (std::fabs(got[i] - w[i]) > tol * (1.0f + std::fabs(w[i]))) break;
  }
  return ops;
}

TEST(ConvPrepare, FusedActivationsAndPreparedWeightsMatchEager) {
  // A MobileNet-like chain at 2 x 7x7 (8 Winograd tiles: only prepared weights take
  // Winograd there): 3x3 64 -> 64 + ReLU6 (clamp 0..6), 3x3 64 -> 72 + hardswish, depthwise 3x3 +
  // silu, 1x1 72 -> 64 + relu, and a clamp that is not ReLU6 (stays a node).
  const Tensor w1 = Tensor::randn({64, 64, 3, 3}, 21) * 0.05, b1 = Tensor::randn({64}, 22);
  const Tensor w2 = Tensor::randn({72, 64, 3, 3}, 23) * 0.05, b2 = Tensor::randn({72}, 24);
  const Tensor w3 = Tensor::randn({72, 1, 3, 3}, 25) * 0.3;
  const Tensor w4 = Tensor::randn({64, 72, 1, 1}, 26) * 0.1, b4 = Tensor::randn({64}, 27);
  auto model = [&](Tensor x) {
    Tensor a = clamp(conv2d(x, w1, b1, {1, 1}, {1, 1}), 0.0, 6.0);
    Tensor h = hardswish(conv2d(a, w2, b2, {1, 1}, {1, 1}));
    Tensor d = silu(conv2d(h, w3, Tensor(), {1, 1}, {1, 1}, {1, 1}, 72));
    Tensor r = relu(conv2d(d, w4, b4));
    return clamp(r, -1.0, 1.0);
  };
  const Tensor x = Tensor::randn({2, 64, 7, 7}, 28);
  auto ep = export_program(model, {input("x", x)});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  const Tensor want = model(x);
  for (bool prepack : {true, false}) {
    const std::vector<std::string> ops = run_like_eager(*ep, x, want, prepack, 2e-5f);
    auto has = [&](const std::string& name) { return std::count(ops.begin(), ops.end(), name); };
    EXPECT_EQ(has("conv2d+clamp"), 1) << "prepack=" << prepack;
    EXPECT_EQ(has("conv2d+hardswish"), 1);
    EXPECT_EQ(has("conv2d+silu"), 1);
    EXPECT_EQ(has("conv2d+relu"), 1);
    EXPECT_EQ(has("clamp"), 1);  // clamp(-1, 1) on a value read by nothing else: not a ReLU6, not fused
    EXPECT_EQ(has("conv2d"), 0);
  }
}

TEST(ConvPrepare, ResnetStageShapesMatchEagerPreparedOrNot) {
  // 3x3 128 -> 128 at batch 2: 14x14 (32 tiles, Winograd prepared or not) and 7x7 (8
  // tiles: Winograd only with prepared weights). Both agree with eager.
  const Tensor w = Tensor::randn({128, 128, 3, 3}, 31) * 0.03, b = Tensor::randn({128}, 32);
  auto model = [&](Tensor x) { return relu(conv2d(x, w, b, {1, 1}, {1, 1})); };
  for (const std::vector<std::int64_t>& shape : {std::vector<std::int64_t>{2, 128, 14, 14}, std::vector<std::int64_t>{2, 128, 7, 7}}) {
    const Tensor x = Tensor::randn(shape, 33);
    auto ep = export_program(model, {input("x", x)});
    ASSERT_TRUE(ep.ok()) << ep.status().message();
    const Tensor want = model(x);
    for (bool prepack : {true, false}) {
      const std::vector<std::string> ops = run_like_eager(*ep, x, want, prepack, 2e-5f);
      EXPECT_EQ(std::count(ops.begin(), ops.end(), "conv2d+relu"), 1);
    }
  }
}

// Loads `ep` saved to a file, mapped or read into memory.
std::shared_ptr<const Program> load_saved(const ExportedProgram& ep, const std::string& name, bool mmap) {
  const std::string path = (std::filesystem::temp_directory_path() / (name + "-" + std::to_string(::getpid()) + ".kiln")).string();
  EXPECT_TRUE(ep.save(path).ok());
  auto bundle = Bundle::open(path, {.use_mmap = mmap});
  std::filesystem::remove(path);  // the mapping keeps the file's pages
  EXPECT_TRUE(bundle.ok()) << bundle.status().message();
  if (!bundle.ok()) return nullptr;
  auto program = Program::load(std::move(bundle).value());
  EXPECT_TRUE(program.ok()) << program.status().message();
  return program.ok() ? *program : nullptr;
}

TEST(ConvPrepare, MappedPagesOfPreparedWeightsAreReleasedAndRunsStillMatch) {
  // A 3x3 128 -> 128 weight (576 KiB) read only by its conv2d, prepared at load: its mapped
  // pages leave the resident set. A second weight also read by a mul stays mapped.
  const Tensor w = Tensor::randn({128, 128, 3, 3}, 41) * 0.03, b = Tensor::randn({128}, 42);
  const Tensor w2 = Tensor::randn({128, 128, 3, 3}, 43) * 0.03;
  auto model = [&](Tensor x) { return relu(conv2d(x, w, b, {1, 1}, {1, 1})); };
  auto shared = [&](Tensor x, Tensor s) { return conv2d(x, w2, Tensor(), {1, 1}, {1, 1}) + sum(w2 * s); };
  const Tensor x = Tensor::randn({1, 128, 14, 14}, 44);
  auto ep = export_program(model, {input("x", x)});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  const std::size_t weight_bytes = 128 * 128 * 9 * sizeof(float);
  for (bool mmap : {true, false}) {
    const auto program = load_saved(*ep, "release", mmap);
    ASSERT_NE(program, nullptr);
    if (mmap) {
      EXPECT_GE(program->released_weight_bytes(), weight_bytes - 2 * 4096);  // whole pages inside it
      EXPECT_LE(program->released_weight_bytes(), weight_bytes);
    } else {
      EXPECT_EQ(program->released_weight_bytes(), 0u);  // held in memory: nothing to release
    }
    Session session(*program);
    auto r = session.run(std::vector<HostValue>{HostValue::of(testing::host_tensor(x))});
    ASSERT_TRUE(r.ok()) << r.status().message();
    const auto want = model(x).to_vector<float>();
    std::vector<float> got(want.size());
    std::memcpy(got.data(), r->outputs[0].tensor.data.data(), got.size() * sizeof(float));
    for (std::size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], 2e-5f * (1.0f + std::fabs(want[i]))) << i;
  }
  auto ep2 = export_program(shared, {input("x", x), input("s", Tensor::randn({1}, 45))});
  ASSERT_TRUE(ep2.ok()) << ep2.status().message();
  const auto program = load_saved(*ep2, "keep", true);
  ASSERT_NE(program, nullptr);
  EXPECT_EQ(program->released_weight_bytes(), 0u);  // w2 is also read by a mul: it stays
}

// Resident bytes of the mapping that holds `p` (/proc/self/smaps); -1 when unknown.
long long resident_bytes_of_mapping(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    unsigned long long lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-') {
      inside = at >= lo && at < hi;
      continue;
    }
    if (inside && line.rfind("Rss:", 0) == 0) return std::stoll(line.substr(4)) * 1024;
  }
  return -1;
}

// Checking a segment's checksum (at open, or verify_segments) reads every page of it; the
// pages leave the resident set again, so that loading a checked bundle does not hold its
// weights twice while kernels make their prepared copies.
TEST(ConvPrepare, CheckedSegmentsLeaveTheResidentSet) {
  const Tensor w = Tensor::randn({1024, 512}, 51);  // 2 MiB
  auto model = [&](Tensor x) { return matmul(x, w); };
  auto ep = export_program(model, {input("x", Tensor::randn({1, 1024}, 52))});
  ASSERT_TRUE(ep.ok()) << ep.status().message();
  const std::string path =
      (std::filesystem::temp_directory_path() / ("checked-" + std::to_string(::getpid()) + ".kiln")).string();
  ASSERT_TRUE(ep->save(path).ok());
  auto bundle = Bundle::open(path, {.verify_segment_checksums = true, .use_mmap = true});
  std::filesystem::remove(path);
  ASSERT_TRUE(bundle.ok()) << bundle.status().message();
  std::size_t largest = 0;
  for (std::size_t i = 1; i < (*bundle)->segment_count(); ++i) {
    if ((*bundle)->segment_data(i).size() > (*bundle)->segment_data(largest).size()) largest = i;
  }
  const auto data = (*bundle)->segment_data(largest);
  ASSERT_GE(data.size(), std::size_t{2} << 20);
  const long long checked = resident_bytes_of_mapping(data.data());
  if (checked < 0) GTEST_SKIP() << "no /proc/self/smaps";
  EXPECT_LT(checked, 256 << 10);
  unsigned sum = 0;
  for (std::size_t i = 0; i < data.size(); i += 4096) sum += data[i];  // read every page
  EXPECT_GE(resident_bytes_of_mapping(data.data()), (std::int64_t{2} << 20) - 8192) << sum;
  ASSERT_TRUE((*bundle)->verify_segments().ok());
  EXPECT_LT(resident_bytes_of_mapping(data.data()), 256 << 10);
}

}  // namespace
}  // namespace kiln

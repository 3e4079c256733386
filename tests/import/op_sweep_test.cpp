// The op sweep of tests/fixtures/op_sweep: one tiny module per aten op or composite (3-D
// convolution and pooling, scatter, recurrent layers, grid sampling, the math functions,
// ...), exported by PyTorch 2.6 in both IRs (make_sweep.py) with PyTorch's eager outputs.
// Every case is imported and run on the CPU and on Vulkan and must match PyTorch (rtol 1e-4, atol 1e-5),
// or be listed in unsupported.txt with the error it gives today: exit-6 "unsupported" and a
// message naming the op. A listed case that starts to work fails the test too, so the list
// stays the truth.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "kiln/export/import_pt2.h"
#include "kiln/export/serialize.h"
#include "kiln/runtime/bundle.h"
#include "kiln/runtime/npy.h"
#include "kiln/runtime/program.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

const fs::path kSweep = fs::path(KILN_SOURCE_DIR) / "tests" / "fixtures" / "op_sweep";

struct SweepCase {
  std::string name, file;  // case folder, archive (model.pt2: training IR, model.core.pt2: core IR)
  std::string backend;     // cpu, or vulkan (ops without a device kernel run on the CPU)
};

void PrintTo(const SweepCase& c, std::ostream* os) { *os << c.name << "/" << c.file << " on " << c.backend; }

std::vector<SweepCase> sweep_cases() {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(kSweep)) {
    if (e.is_directory()) names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  std::vector<SweepCase> cases;
  for (const char* backend : {"cpu", "vulkan"}) {
    for (const auto& n : names) {
      for (const char* file : {"model.pt2", "model.core.pt2"}) cases.push_back({n, file, backend});
    }
  }
  return cases;
}

std::string ir_of(const std::string& file) { return file == "model.pt2" ? "training" : "core"; }

// unsupported.txt: "CASE IR message text" per line ('#' comments).
std::map<std::string, std::string> expected_unsupported() {
  std::map<std::string, std::string> out;
  std::ifstream f(kSweep / "unsupported.txt");
  std::string line;
  while (std::getline(f, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream s(line);
    std::string name, ir, message;
    s >> name >> ir;
    std::getline(s >> std::ws, message);
    out[name + " " + ir] = message;
  }
  return out;
}

// Imports, loads and runs the case on the inputs `<prefix>in<i>.npy`; returns the first
// failure, or Ok with `outputs` set.
Status import_and_run(const fs::path& dir, const std::string& file, const std::string& backend, std::vector<HostValue>* outputs,
                      const std::string& prefix = "") {
  auto ep = import_pt2((dir / file).string());
  if (!ep.ok()) return ep.status();
  auto bytes = serialize_bundle(ep->program());
  if (!bytes.ok()) return bytes.status();
  ProgramOptions options;
  options.backend = backend;
  auto program = Program::load(std::move(Bundle::from_bytes(*bytes)).value(), options);
  if (!program.ok()) return program.status();
  std::vector<HostValue> in;
  for (int i = 0; fs::exists(dir / (prefix + "in" + std::to_string(i) + ".npy")); ++i) {
    auto t = read_npy_any_order((dir / (prefix + "in" + std::to_string(i) + ".npy")).string());
    if (!t.ok()) return t.status();
    in.push_back(HostValue::of(std::move(*t)));
  }
  Session session(**program);
  auto r = session.run(in);
  if (!r.ok()) return r.status();
  *outputs = std::move(r->outputs);
  return Status::Ok();
}

void expect_outputs(const fs::path& dir, const std::string& prefix, const std::vector<HostValue>& outputs);

class OpSweep : public ::testing::TestWithParam<SweepCase> {};

TEST_P(OpSweep, MatchesPyTorchOrIsAListedUnsupportedOp) {
  const SweepCase& c = GetParam();
  const fs::path dir = kSweep / c.name;
  const auto unsupported = expected_unsupported();
  const auto listed = unsupported.find(c.name + " " + ir_of(c.file));
  std::vector<HostValue> outputs;
  const Status st = import_and_run(dir, c.file, c.backend, &outputs);
  if (!st.ok() && st.code() == StatusCode::kUnavailable && c.backend != "cpu") GTEST_SKIP() << st.message();
  if (listed != unsupported.end()) {
    ASSERT_FALSE(st.ok()) << c.name << " " << ir_of(c.file) << " now works: remove it from unsupported.txt";
    EXPECT_EQ(st.code(), StatusCode::kUnsupported) << st.message();
    EXPECT_NE(st.message().find(listed->second), std::string::npos) << st.message();
    return;
  }
  ASSERT_TRUE(st.ok()) << st.message();
  expect_outputs(dir, "", outputs);
  // A case exported with a dynamic dim also runs at another size of it (alt_in*, alt_out*).
  if (fs::exists(dir / "alt_in0.npy")) {
    std::vector<HostValue> alt;
    const Status st2 = import_and_run(dir, c.file, c.backend, &alt, "alt_");
    ASSERT_TRUE(st2.ok()) << "at the other size: " << st2.message();
    expect_outputs(dir, "alt_", alt);
  }
}

void expect_outputs(const fs::path& dir, const std::string& prefix, const std::vector<HostValue>& outputs) {
  int count = 0;
  for (; fs::exists(dir / (prefix + "out" + std::to_string(count) + ".npy")); ++count) {
  }
  ASSERT_EQ(outputs.size(), static_cast<std::size_t>(count)) << prefix;
  for (int o = 0; o < count; ++o) {
    auto want = read_npy_any_order((dir / (prefix + "out" + std::to_string(o) + ".npy")).string());
    ASSERT_TRUE(want.ok()) << want.status().message();
    const HostTensor& got = outputs[static_cast<std::size_t>(o)].tensor;
    ASSERT_EQ(got.shape, want->shape) << "output " << o;
    ASSERT_EQ(got.dtype, want->dtype) << "output " << o;
    for (std::int64_t i = 0; i < want->numel(); ++i) {
      const double a = got.element(i), b = want->element(i);
      if (std::isnan(b)) {
        EXPECT_TRUE(std::isnan(a)) << "output " << o << " element " << i;
      } else if (std::isinf(b)) {
        EXPECT_EQ(a, b) << "output " << o << " element " << i;
      } else {
        ASSERT_LE(std::abs(a - b), 1e-5 + 1e-4 * std::abs(b)) << "output " << o << " element " << i << ": " << a << " vs " << b;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Torch26, OpSweep, ::testing::ValuesIn(sweep_cases()),
                         [](const ::testing::TestParamInfo<SweepCase>& info) {
                           return info.param.name + "_" + ir_of(info.param.file) + "_" + info.param.backend;
                         });

// Every line of unsupported.txt names a case of the sweep.
TEST(OpSweepList, NamesOnlyCasesThatExist) {
  for (const auto& [key, message] : expected_unsupported()) {
    const std::string name = key.substr(0, key.find(' '));
    const std::string ir = key.substr(key.find(' ') + 1);
    EXPECT_TRUE(fs::is_directory(kSweep / name)) << key;
    EXPECT_TRUE(ir == "training" || ir == "core") << key;
    EXPECT_FALSE(message.empty()) << key;
  }
}

}  // namespace
}  // namespace kiln

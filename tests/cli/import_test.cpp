// `kiln import` end to end: import -> validate -> run on PyTorch fixtures, exit codes for
// unsupported ops (6), corrupt archives (2) and wrong goldens (5), and no partial output.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zip.h>

#include <array>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "kiln/export/import_pt2.h"
#include "kiln/runtime/npy.h"
#include "cli_testutil.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

using Cmd = kiln::cli_test::CommandResult;

Cmd kiln_cmd(const std::string& args) {
  return kiln::cli_test::shell(std::string(KILN_BIN) + " " + args + " 2>&1");
}

std::string fixture(const std::string& rel) { return (fs::path(KILN_SOURCE_DIR) / "tests/fixtures/torch_export" / rel).string(); }

class ImportCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kiln_import_cli_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& n) const { return (dir_ / n).string(); }
  fs::path dir_;
};

TEST_F(ImportCli, ImportValidateAndRunTheDecoder) {
  const std::string out = path("decoder.kiln");
  Cmd r = kiln_cmd("import " + fixture("decoder/model.pt2") + " -o " + out + " --self-test-dir " + fixture("decoder") + " --compress zstd");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("3 self-test(s)"), std::string::npos) << r.out;
  r = kiln_cmd("validate " + out);
  EXPECT_EQ(r.code, 0) << r.out;
  r = kiln_cmd("run " + out + " --input ids=" + fixture("decoder/cases/valid1.in.ids.npy") + " --output-dir " + path("o"));
  ASSERT_EQ(r.code, 0) << r.out;
  auto got = read_npy(path("o/out0.npy"));
  auto want = read_npy(fixture("decoder/cases/valid1.out.0.npy"));
  ASSERT_TRUE(got.ok() && want.ok());
  ASSERT_EQ(got->shape, want->shape);
  const float* g = reinterpret_cast<const float*>(got->data.data());
  const float* w = reinterpret_cast<const float*>(want->data.data());
  for (std::int64_t i = 0; i < want->numel(); ++i) ASSERT_NEAR(g[i], w[i], 1e-5 + 1e-4 * std::abs(w[i])) << i;
  r = kiln_cmd("run " + out + " --input ids=" + fixture("decoder/cases/invalid0.in.ids.npy"));
  EXPECT_EQ(r.code, 3) << r.out;
  EXPECT_NE(r.out.find("ids.size(1) = 129"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[1, 128]"), std::string::npos) << r.out;
}

TEST_F(ImportCli, RuntimeAssertFromTorchCheckFailsWithExit3) {
  const std::string out = path("item.kiln");
  ASSERT_EQ(kiln_cmd("import " + fixture("item_size/model.core.pt2") + " -o " + out).code, 0);
  const Cmd r = kiln_cmd("run " + out + " " + fixture("item_size/cases/invalid1.in.x.npy") + " " +
                         fixture("item_size/cases/invalid1.in.n.npy"));
  EXPECT_EQ(r.code, 3) << r.out;
  EXPECT_NE(r.out.find("runtime assertion failed: u0 <= 16 (u0 = item(n_t))"), std::string::npos) << r.out;
}

TEST_F(ImportCli, WrongGoldenFailsValidationWithExit5) {
  const std::string out = path("mlp.kiln");
  const Cmd r = kiln_cmd("import " + fixture("mlp/model.pt2") + " -o " + out + " --self-test-case x=" +
                         fixture("mlp/cases/valid0.in.x.npy") + " --self-test-output " + fixture("mlp/cases/valid1.out.0.npy"));
  // valid1's output has another batch size, so it cannot match valid0's input.
  ASSERT_EQ(r.code, 0) << r.out;
  const Cmd v = kiln_cmd("validate " + out);
  EXPECT_EQ(v.code, 5) << v.out;
}

TEST_F(ImportCli, UnsupportedOpsExit6ListingEveryOpAndWriteNothing) {
  // The mlp archive with relu renamed to an op nobody has.
  std::map<std::string, std::string> entries;
  int err = 0;
  zip_t* in = zip_open(fixture("mlp/model.pt2").c_str(), ZIP_RDONLY, &err);
  ASSERT_NE(in, nullptr);
  for (zip_int64_t i = 0; i < zip_get_num_entries(in, 0); ++i) {
    zip_stat_t st;
    zip_stat_index(in, static_cast<zip_uint64_t>(i), 0, &st);
    std::string data(st.size, '\0');
    zip_file_t* f = zip_fopen_index(in, static_cast<zip_uint64_t>(i), 0);
    zip_fread(f, data.data(), st.size);
    zip_fclose(f);
    const std::string from = "torch.ops.aten.relu.default";
    for (std::size_t at = data.find(from); at != std::string::npos; at = data.find(from, at)) {
      data.replace(at, from.size(), "torch.ops.aten.frobnicate.default");
    }
    entries[st.name] = data;
  }
  zip_discard(in);
  zip_t* z = zip_open(path("bad.pt2").c_str(), ZIP_CREATE | ZIP_TRUNCATE, &err);
  for (const auto& [name, data] : entries) {
    void* copy = std::malloc(data.size() + 1);
    std::memcpy(copy, data.data(), data.size());
    zip_file_add(z, name.c_str(), zip_source_buffer(z, copy, data.size(), 1), ZIP_FL_OVERWRITE);
  }
  ASSERT_EQ(zip_close(z), 0);
  const Cmd r = kiln_cmd("import " + path("bad.pt2") + " -o " + path("bad.kiln"));
  EXPECT_EQ(r.code, 6) << r.out;
  EXPECT_NE(r.out.find("aten.frobnicate.default (x1)"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(path("bad.kiln")));
  const Cmd j = kiln_cmd("import " + path("bad.pt2") + " -o " + path("bad.kiln") + " --json");
  EXPECT_EQ(j.code, 6);
  EXPECT_NE(j.out.find("\"exit_code\": 6"), std::string::npos) << j.out;
}

TEST_F(ImportCli, CorruptArchiveExit2AndUsageErrorsExit1) {
  std::ofstream(path("junk.pt2")) << "PK\x03\x04 definitely not a zip";
  Cmd r = kiln_cmd("import " + path("junk.pt2") + " -o " + path("junk.kiln"));
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_FALSE(fs::exists(path("junk.kiln")));
  r = kiln_cmd("import " + fixture("mlp/model.pt2"));  // no -o
  EXPECT_EQ(r.code, 1) << r.out;
  r = kiln_cmd("import " + fixture("mlp/model.pt2") + " -o " + path("m.kiln") + " --dim s77=0:5000");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("widens"), std::string::npos) << r.out;
}

TEST_F(ImportCli, JsonSummaryAndSpecialization) {
  const std::string out = path("spec.kiln");
  const Cmd r = kiln_cmd("import " + fixture("mlp/model.pt2") + " -o " + out + " --specialize 's77 == 1' --strip-debug --json");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("\"nodes\""), std::string::npos) << r.out;
  const Cmd run = kiln_cmd("run " + out + " " + fixture("mlp/cases/valid0.in.x.npy") + " --output-dir " + path("o"));
  ASSERT_EQ(run.code, 0) << run.out;
}

TEST_F(ImportCli, CoreIrBufferMutationsImportAsStateThatInspectLists) {
  const std::string out = path("counter.kiln");
  const std::string archive = (fs::path(KILN_SOURCE_DIR) / "tests/fixtures/torch_export_stateful/counter/model.core.pt2").string();
  const Cmd imported = kiln_cmd("import " + archive + " -o " + out);
  ASSERT_EQ(imported.code, 0) << imported.out;
  const Cmd r = kiln_cmd("inspect " + out);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("state (kept across runs; initial values from constants)\n  total: f32[4]  initial = constant "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  steps: i64[]  initial = constant "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("x: f32[s"), std::string::npos) << r.out;  // the user's input only
}

std::string file_bytes(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

TEST_F(ImportCli, RunWithStateDirCarriesTheStateFromRunToRun) {
  const fs::path fx = fs::path(KILN_SOURCE_DIR) / "tests/fixtures/torch_export_stateful/counter";
  const std::string bundle = path("counter.kiln");
  ASSERT_EQ(kiln_cmd("import " + (fx / "model.core.pt2").string() + " -o " + bundle).code, 0);
  const std::string state = path("state");  // absent: the initial values
  for (int step = 0; step < 3; ++step) {
    SCOPED_TRACE(step);
    const std::string in = (fx / "cases" / ("three_calls." + std::to_string(step) + ".in.x.npy")).string();
    const Cmd r = kiln_cmd("run " + bundle + " " + in + " --state " + state + " -o " + path("out"));
    ASSERT_EQ(r.code, 0) << r.out;
    for (int o = 0; o < 2; ++o) {
      auto got = read_npy(path("out/out" + std::to_string(o) + ".npy"));
      auto want = read_npy((fx / "cases" / ("three_calls." + std::to_string(step) + ".out." + std::to_string(o) + ".npy")).string());
      ASSERT_TRUE(got.ok() && want.ok());
      ASSERT_EQ(got->shape, want->shape);
      for (std::int64_t i = 0; i < want->numel(); ++i) EXPECT_NEAR(got->element(i), want->element(i), 1e-4) << "output " << o;
    }
  }
  auto steps = read_npy(state + "/steps.npy");
  ASSERT_TRUE(steps.ok()) << steps.status().message();
  EXPECT_EQ(steps->element(0), 3.0);
  // A failed run (a wrong input) leaves the state directory byte-identical.
  const std::string total_before = file_bytes(state + "/total.npy"), steps_before = file_bytes(state + "/steps.npy");
  const Cmd bad = kiln_cmd("run " + bundle + " " + (fx / "cases/three_calls.0.out.0.npy").string() + " --state " + state + " -o " + path("out"));
  EXPECT_EQ(bad.code, 3) << bad.out;
  EXPECT_EQ(file_bytes(state + "/total.npy"), total_before);
  EXPECT_EQ(file_bytes(state + "/steps.npy"), steps_before);
  EXPECT_EQ(std::distance(fs::directory_iterator(state), fs::directory_iterator{}), 2);
  // A state file of the wrong shape: exit 3 naming the state tensor.
  fs::copy_file(fx / "cases/three_calls.0.in.x.npy", state + "/total.npy", fs::copy_options::overwrite_existing);
  const Cmd wrong = kiln_cmd("run " + bundle + " " + (fx / "cases/three_calls.0.in.x.npy").string() + " --state " + state + " -o " + path("out"));
  EXPECT_EQ(wrong.code, 3) << wrong.out;
  EXPECT_NE(wrong.out.find("state total: shape ["), std::string::npos) << wrong.out;
  EXPECT_EQ(file_bytes(state + "/steps.npy"), steps_before);
}

}  // namespace
}  // namespace kiln

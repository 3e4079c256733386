// The `kiln` binary against hostile files and inputs (issue 16): special files, bombs,
// out-of-range and ill-typed inputs, refused output targets, write errors, temporaries of
// killed runs, escaped control characters, and the exit code of every case (docs/CLI.md).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zstd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kiln/export/testing/format_sample.h"
#include "kiln/format/file_format.h"
#include "kiln/format/kiln_generated.h"
#include "kiln/runtime/npy.h"
#include "cli_testutil.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

using Cmd = kiln::cli_test::CommandResult;

// Runs `kiln ARGS` (under `timeout 60`, so a hang fails the test instead of stalling it),
// optionally after shell `prefix` commands such as `ulimit`.
Cmd kiln_cmd(const std::string& args, bool with_stderr = true, const std::string& prefix = "") {
  const std::string cmd = prefix + "timeout 60 " + KILN_BIN + " " + args + (with_stderr ? " 2>&1" : " 2>/dev/null");
  return kiln::cli_test::shell("sh -c '" + cmd + "'");
}

std::string fixture(const std::string& rel) { return (fs::path(KILN_SOURCE_DIR) / "tests/fixtures/torch_export" / rel).string(); }

bool contains(const std::string& text, const std::string& needle) { return text.find(needle) != std::string::npos; }

class Hardening : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("kiln_hardening_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    const Cmd r = kiln_cmd("import " + fixture("dyn_int/model.pt2") + " -o " + path("dyn_int.kiln"));
    ASSERT_EQ(r.code, 0) << r.out;
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  static std::string path(const std::string& name) { return (dir_ / name).string(); }
  static std::string dyn_int() { return path("dyn_int.kiln"); }
  static std::string x_input() { return "x=" + fixture("dyn_int/cases/valid0.in.x.npy"); }
  static fs::path dir_;
};
fs::path Hardening::dir_;

// ---- item 1 and 7: int inputs ------------------------------------------------------------

TEST_F(Hardening, IntInputOutsideInt64IsAnInputError) {
  const Cmd r = kiln_cmd("run " + dyn_int() + " --input " + x_input() + " --input n=9223372036854775808 -o " + path("o1"));
  EXPECT_EQ(r.code, 3) << r.out;
  EXPECT_TRUE(contains(r.out, "kiln: error: input 'n': 9223372036854775808 is outside the int64 range "
                              "[-9223372036854775808, 9223372036854775807]")) << r.out;
  EXPECT_EQ(kiln_cmd("run " + dyn_int() + " --input " + x_input() + " --input n=-99999999999999999999 -o " + path("o1")).code, 3);
}

TEST_F(Hardening, IntInputThatIsNeitherAnIntegerNorAFileSaysWhatWasExpected) {
  const Cmd r = kiln_cmd("run " + dyn_int() + " --input " + x_input() + " --input n=abc -o " + path("o1"));
  EXPECT_EQ(r.code, 3) << r.out;
  EXPECT_TRUE(contains(r.out, "kiln: error: input 'n' takes an integer (or a .npy file holding one): 'abc' is neither "
                              "(abc: cannot open: No such file or directory)")) << r.out;
}

TEST_F(Hardening, IntInputFromANpyFileRunsLikeTheInteger) {
  const Cmd r = kiln_cmd("run " + dyn_int() + " --input " + x_input() + " --input n=" + fixture("dyn_int/cases/valid0.in.n.npy") +
                         " -o " + path("from_npy"));
  ASSERT_EQ(r.code, 0) << r.out;
  for (int k = 0; k < 2; ++k) {
    auto got = read_npy(path("from_npy/out" + std::to_string(k) + ".npy"));
    auto want = read_npy(fixture("dyn_int/cases/valid0.out." + std::to_string(k) + ".npy"));
    ASSERT_TRUE(got.ok() && want.ok());
    EXPECT_EQ(got->shape, want->shape);
    EXPECT_EQ(got->data, want->data);
  }
  // bench takes the same inputs.
  EXPECT_EQ(kiln_cmd("bench " + dyn_int() + " --iters 1 --warmup 0 --input " + x_input() + " --input n=" +
                     fixture("dyn_int/cases/valid0.in.n.npy")).code, 0);
  // A bool 0-d array is an int input of 0 or 1.
  HostTensor flag;
  flag.dtype = DType::kBool;
  flag.data = {1};
  ASSERT_TRUE(write_npy(path("flag.npy"), flag).ok());
  // (dyn_int's n must be >= 2: the value 1 reaches the range check, which names it.)
  const Cmd b = kiln_cmd("run " + dyn_int() + " --input " + x_input() + " --input n=" + path("flag.npy"));
  EXPECT_EQ(b.code, 3) << b.out;
  EXPECT_TRUE(contains(b.out, "kiln: error: input n = 1 (s1) is outside the range [2, inf]")) << b.out;
}

// Self-test manifests take the same int inputs: a 0-d u8 array for n.
TEST_F(Hardening, SelfTestManifestTakesIntInputsFromNpy) {
  ASSERT_EQ(kiln_cmd("run " + dyn_int() + " --input " + x_input() + " --input n=3 -o " + path("golden")).code, 0);
  HostTensor n;
  n.dtype = DType::kU8;
  n.data = {3};
  fs::create_directories(path("u8case"));
  ASSERT_TRUE(write_npy(path("u8case/n.npy"), n).ok());
  std::ofstream(path("u8case/manifest.json")) << R"({"valid": [{"name": "u8", "inputs": {"x": ")" << fixture("dyn_int/cases/valid0.in.x.npy")
                                              << R"(", "n": "n.npy"}, "outputs": [")" << path("golden/out0.npy") << R"(", ")"
                                              << path("golden/out1.npy") << R"("]}]})";
  const Cmd i = kiln_cmd("import " + fixture("dyn_int/model.pt2") + " -o " + path("u8.kiln") + " --self-test-dir " + path("u8case"));
  ASSERT_EQ(i.code, 0) << i.out;
  const Cmd v = kiln_cmd("validate " + path("u8.kiln"));
  EXPECT_EQ(v.code, 0) << v.out;
  EXPECT_TRUE(contains(v.out, "self-test u8: passed")) << v.out;
}

TEST_F(Hardening, IntInputFromAFloatOrLongerArrayIsRefused) {
  const Cmd f = kiln_cmd("run " + dyn_int() + " --input " + x_input() + " --input n=" + fixture("dyn_int/cases/valid0.in.x.npy"));
  EXPECT_EQ(f.code, 3) << f.out;
  EXPECT_TRUE(contains(f.out, "kiln: error: input 'n': " + fixture("dyn_int/cases/valid0.in.x.npy") + ": holds f32[")) << f.out;
  HostTensor two;
  two.dtype = DType::kI64;
  two.shape = {2};
  two.data.resize(16);
  ASSERT_TRUE(write_npy(path("two.npy"), two).ok());
  const Cmd t = kiln_cmd("run " + dyn_int() + " --input " + x_input() + " --input n=" + path("two.npy"));
  EXPECT_EQ(t.code, 3) << t.out;
  EXPECT_TRUE(contains(t.out, "holds i64[2] (2 elements); an int input needs a 0-d or one-element array")) << t.out;
}

TEST_F(Hardening, HugeNpyShapeSaysWhatIsWrong) {
  const std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 4611686018427387904), }";
  std::string h = header + std::string((64 - (10 + header.size() + 1) % 64) % 64, ' ') + "\n";
  std::ofstream f(path("huge.npy"), std::ios::binary);
  f << "\x93NUMPY" << '\x01' << '\x00' << static_cast<char>(h.size() & 0xff) << static_cast<char>(h.size() >> 8) << h;
  f.close();
  const Cmd r = kiln_cmd("run " + dyn_int() + " --input x=" + path("huge.npy") + " --input n=2");
  EXPECT_EQ(r.code, 3) << r.out;
  EXPECT_TRUE(contains(r.out, "input 'x': " + path("huge.npy") + ": shape (2, 4611686018427387904) has more than 2^63-1 elements"))
      << r.out;
}

// ---- item 2: special files ---------------------------------------------------------------

TEST_F(Hardening, FifosDirectoriesAndDevicesAreRefusedWithoutHanging) {
  const std::string fifo = path("pipe");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (const std::string& bundle : {fifo, std::string("/dev/zero"), dir_.string()}) {
    for (const char* cmd : {"inspect ", "run ", "validate "}) {
      const Cmd r = kiln_cmd(cmd + bundle);
      EXPECT_EQ(r.code, 2) << cmd << bundle << ": " << r.out;
      EXPECT_TRUE(contains(r.out, "kiln: error: " + bundle + ": is a")) << r.out;  // the path once
      EXPECT_TRUE(contains(r.out, ", not a regular file")) << r.out;
    }
  }
  EXPECT_EQ(kiln_cmd("run /dev/zero").out, "kiln: error: /dev/zero: is a character device, not a regular file\n");
  for (const std::string& npy : {fifo, std::string("/dev/zero"), dir_.string()}) {
    const Cmd r = kiln_cmd("run " + dyn_int() + " --input x=" + npy + " --input n=2");
    EXPECT_EQ(r.code, 3) << npy << ": " << r.out;
    EXPECT_TRUE(contains(r.out, "kiln: error: input 'x': " + npy + ": is a")) << r.out;
  }
  // The model of an import, and a self-test manifest and its files.
  EXPECT_EQ(kiln_cmd("import " + fifo + " -o " + path("f.kiln")).code, 2);
  const Cmd m = kiln_cmd("import " + fixture("dyn_int/model.pt2") + " -o " + path("f.kiln") + " --self-test-dir " + fifo);
  EXPECT_EQ(m.code, 1) << m.out;
  EXPECT_TRUE(contains(m.out, fifo + ": is a FIFO, not a regular file")) << m.out;
  fs::create_directories(path("cases"));
  std::ofstream(path("cases/manifest.json"))
      << R"({"valid": [{"name": "c", "inputs": {"x": "/dev/zero", "n": ")" << fifo << R"("}, "outputs": ["a.npy", "b.npy"]}]})";
  const Cmd c = kiln_cmd("import " + fixture("dyn_int/model.pt2") + " -o " + path("f.kiln") + " --self-test-dir " + path("cases"));
  EXPECT_NE(c.code, 0) << c.out;
  EXPECT_NE(c.code, 124) << "the import hung";
  EXPECT_TRUE(contains(c.out, "/dev/zero: is a character device, not a regular file")) << c.out;
  EXPECT_FALSE(fs::exists(path("f.kiln")));
}

// ---- item 3: mapped bundles --------------------------------------------------------------

TEST_F(Hardening, NoMmapRunsTheSame) {
  const Cmd r = kiln_cmd("run --no-mmap " + dyn_int() + " --input " + x_input() + " --input n=3 -o " + path("nommap"));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(kiln_cmd("inspect --no-mmap " + dyn_int()).code, 0);
  EXPECT_EQ(kiln_cmd("validate --no-mmap " + dyn_int()).code, 0);
}

// Truncated in place under a running process: a clean exit 2 (SIGBUS caught), and with
// --no-mmap the run does not notice at all.
TEST_F(Hardening, BundleTruncatedWhileMappedExitsTwo) {
  ASSERT_EQ(kiln_cmd("import " + fixture("convnet/model.pt2") + " -o " + path("c.kiln")).code, 0);
  const std::string x = fixture("convnet/cases/valid0.in.x.npy");
  for (const bool mmap : {true, false}) {
    fs::copy_file(path("c.kiln"), path("trunc.kiln"), fs::copy_options::overwrite_existing);
    // 0.07 ms per run: 20000 runs outlast the wait for the mapping below.
    const std::string bundle = path("trunc.kiln"), input = "x=" + x, log_path = path("bench.out");
    std::vector<const char*> argv{KILN_BIN, "bench", bundle.c_str(), "--input", input.c_str(), "--warmup", "0", "--iters",
                                  mmap ? "1000000" : "20000"};
    if (!mmap) argv.push_back("--no-mmap");
    argv.push_back(nullptr);
    const pid_t child = ::fork();
    if (child == 0) {
      std::FILE* log = std::freopen(log_path.c_str(), "w", stderr);
      if (log == nullptr || ::dup2(STDERR_FILENO, STDOUT_FILENO) < 0) ::_exit(126);
      ::execv(KILN_BIN, const_cast<char* const*>(argv.data()));
      ::_exit(127);
    }
    // Truncate once the bundle is open (mapped, or read and closed): its load is done when
    // bench's first iteration runs, which the mapping (or 0.3 s) tells.
    for (int i = 0; i < 1000; ++i) {
      std::ifstream maps("/proc/" + std::to_string(child) + "/maps");
      const std::string text((std::istreambuf_iterator<char>(maps)), std::istreambuf_iterator<char>());
      if (mmap && contains(text, "trunc.kiln")) break;
      if (!mmap && i == 30) break;
      ::usleep(10000);
    }
    fs::resize_file(path("trunc.kiln"), 4096);
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    std::ifstream f(path("bench.out"));
    const std::string out((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    ASSERT_TRUE(WIFEXITED(status)) << out;
    if (mmap) {
      EXPECT_EQ(WEXITSTATUS(status), 2) << out;
      EXPECT_TRUE(contains(out, "kiln: error: the bundle file changed while it was mapped (truncated or rewritten in place); "
                                "replace bundles by rename, or use --no-mmap")) << out;
    } else {
      EXPECT_EQ(WEXITSTATUS(status), 0) << out;
    }
  }
}

// ---- item 4: bombs -----------------------------------------------------------------------

// The format sample with its last (zstd) segment replaced by a frame of `zeros` zero bytes,
// compressed in 1 MiB steps (the bytes never exist in memory at once).
std::vector<std::uint8_t> zstd_bomb(std::uint64_t zeros) {
  testing::FormatSampleOptions o;
  o.compression = format::Compression::kZstd;
  auto bytes = testing::make_format_sample(o)->bytes();
  EXPECT_TRUE(bytes.ok());
  std::vector<std::uint8_t> b = *bytes;
  format::FileHeader h;
  EXPECT_EQ(format::decode_header(b, h), format::HeaderStatus::kOk);
  std::vector<format::SegmentEntry> segments;
  for (std::uint32_t i = 0; i < h.segment_count; ++i) {
    segments.push_back(format::decode_segment_entry(b.data() + h.segment_table_offset + i * format::kSegmentEntrySize));
  }
  format::SegmentEntry& last = segments.back();
  EXPECT_EQ(last.compression, format::Compression::kZstd);
  ZSTD_CCtx* cctx = ZSTD_createCCtx();
  ZSTD_CCtx_setPledgedSrcSize(cctx, zeros);
  const std::vector<std::uint8_t> chunk(1 << 20, 0);
  std::vector<std::uint8_t> frame, out(ZSTD_CStreamOutSize());
  for (std::uint64_t left = zeros; left > 0;) {
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(left, chunk.size()));
    left -= n;
    ZSTD_inBuffer in{chunk.data(), n, 0};
    const ZSTD_EndDirective mode = left == 0 ? ZSTD_e_end : ZSTD_e_continue;
    for (bool done = false; !done;) {
      ZSTD_outBuffer o{out.data(), out.size(), 0};
      const std::size_t rem = ZSTD_compressStream2(cctx, &o, &in, mode);
      frame.insert(frame.end(), out.data(), out.data() + o.pos);
      done = mode == ZSTD_e_end ? rem == 0 : in.pos == in.size;
    }
  }
  ZSTD_freeCCtx(cctx);
  b.resize(last.offset);
  b.insert(b.end(), frame.begin(), frame.end());
  last.stored_size = frame.size();
  last.size = zeros;
  last.checksum = format::checksum(frame);
  h.file_size = b.size();
  for (std::size_t i = 0; i < segments.size(); ++i) {
    format::encode_segment_entry(segments[i], b.data() + h.segment_table_offset + i * format::kSegmentEntrySize);
  }
  const std::span<const std::uint8_t> parts[] = {
      std::span<const std::uint8_t>(b.data() + h.flatbuffer_offset, h.flatbuffer_size),
      std::span<const std::uint8_t>(b.data() + h.segment_table_offset, segments.size() * format::kSegmentEntrySize)};
  h.metadata_checksum = format::checksum(parts);
  const auto header = format::encode_header(h);
  std::copy(header.begin(), header.end(), b.begin());
  return b;
}

// A segment that expands to 1 GiB: inspect reads the metadata only, so it succeeds with
// 512 MiB of address space (it used to decompress every segment).
TEST_F(Hardening, InspectNeverDecompresses) {
  const auto bomb = zstd_bomb(std::uint64_t{1} << 30);
  std::ofstream(path("bomb.kiln"), std::ios::binary).write(reinterpret_cast<const char*>(bomb.data()), static_cast<std::streamsize>(bomb.size()));
  const Cmd r = kiln_cmd("inspect " + path("bomb.kiln"), true, "ulimit -v 524288; ");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(contains(r.out, "1073741824")) << r.out;  // the declared size is shown
  // Loading for a run does decompress: under the same limit it fails cleanly (exit 2).
  const Cmd v = kiln_cmd("validate " + path("bomb.kiln"), true, "ulimit -v 524288; ");
  EXPECT_EQ(v.code, 2) << v.out;
  EXPECT_TRUE(contains(v.out, "cannot allocate 1073741824 bytes to decompress")) << v.out;
}

// ---- item 5: exit codes and messages -----------------------------------------------------

TEST_F(Hardening, HelpListsEveryExitCode) {
  const Cmd r = kiln_cmd("--help");
  EXPECT_EQ(r.code, 0);
  for (const char* line : {"  0   success", "  1   usage error", "  2   the bundle or model file is invalid", "  3   the inputs are invalid",
                           "  4   a requested backend", "  5   validation failed", "  6   unsupported", "  7   export failed",
                           "  8   an output could not be written", "  70  internal error"}) {
    EXPECT_TRUE(contains(r.out, line)) << line << "\n" << r.out;
  }
  EXPECT_TRUE(contains(kiln_cmd("run --help").out, "  8   an output could not be written"));
}

TEST_F(Hardening, UsageErrorWithJsonPrintsTheErrorObject) {
  const Cmd r = kiln_cmd("run --json --no-such-flag " + dyn_int(), false);
  EXPECT_EQ(r.code, 1);
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["error"]["code"], "usage");
  EXPECT_EQ(j["error"]["exit_code"], 1);
  EXPECT_TRUE(contains(j["error"]["message"].get<std::string>(), "--no-such-flag")) << r.out;
}

TEST_F(Hardening, ImportRejectsBadTolerancesAndMissingModels) {
  for (const char* bad : {"--rtol nan", "--rtol -1", "--atol inf", "--atol -0.5"}) {
    const Cmd r = kiln_cmd("import " + fixture("dyn_int/model.pt2") + " -o " + path("t.kiln") + " " + bad);
    EXPECT_EQ(r.code, 1) << bad << ": " << r.out;
    EXPECT_TRUE(contains(r.out, "is not a tolerance (a finite number >= 0)")) << r.out;
  }
  const Cmd dim = kiln_cmd("import " + fixture("dyn_int/model.pt2") + " -o " + path("t.kiln") + " --dim s77=10:2");
  EXPECT_EQ(dim.code, 1) << dim.out;
  EXPECT_TRUE(contains(dim.out, "kiln: error: --dim 's77=10:2': the range is empty (MIN 10 > MAX 2)")) << dim.out;
  const Cmd huge = kiln_cmd("import " + fixture("dyn_int/model.pt2") + " -o " + path("t.kiln") + " --dim x.0=1:99999999999999999999");
  EXPECT_EQ(huge.code, 1) << huge.out;
  EXPECT_TRUE(contains(huge.out, "MIN and MAX must be integers in the int64 range")) << huge.out;
  const Cmd mod0 = kiln_cmd("import " + fixture("dyn_int/model.pt2") + " -o " + path("t.kiln") + " --specialize \"s77 % 0 == 0\"");
  EXPECT_EQ(mod0.code, 1) << mod0.out;
  EXPECT_TRUE(contains(mod0.out, "kiln: error: --specialize 's77 % 0 == 0': divides by zero (a divisor or modulus is 0)")) << mod0.out;
  const Cmd div0 = kiln_cmd("import " + fixture("dyn_int/model.pt2") + " -o " + path("t.kiln") + " --specialize \"s77 // 0 == 1\"");
  EXPECT_EQ(div0.code, 1) << div0.out;
  EXPECT_TRUE(contains(div0.out, "divides by zero")) << div0.out;
  const Cmd unknown = kiln_cmd("import " + fixture("dyn_int/model.pt2") + " -o " + path("t.kiln") + " --specialize \"s99 == 3\"");
  EXPECT_EQ(unknown.code, 1) << unknown.out;
  EXPECT_TRUE(contains(unknown.out, "unknown symbol 's99'")) << unknown.out;
  const Cmd missing = kiln_cmd("import " + path("missing.pt2") + " -o " + path("t.kiln"));
  EXPECT_EQ(missing.code, 2) << missing.out;
  EXPECT_TRUE(contains(missing.out, "kiln: error: import: " + path("missing.pt2") + ": cannot open: No such file or directory")) << missing.out;
  EXPECT_FALSE(fs::exists(path("t.kiln")));
}

TEST_F(Hardening, ValidateReportsASelfTestsRuntimeErrorWithItsCode) {
  // A golden case whose n is negative: the run fails its input checks (exit 3), which
  // validate must report as such, not as a tolerance failure (5).
  const Cmd i = kiln_cmd("import " + fixture("dyn_int/model.pt2") + " -o " + path("neg.kiln") + " --self-test-case " + x_input() +
                         " --self-test-case n=-5 --self-test-output " + fixture("dyn_int/cases/valid0.out.0.npy") +
                         " --self-test-output " + fixture("dyn_int/cases/valid0.out.1.npy"));
  ASSERT_EQ(i.code, 0) << i.out;
  const Cmd run = kiln_cmd("run " + path("neg.kiln") + " --input " + x_input() + " --input n=-5");
  ASSERT_NE(run.code, 0);
  const Cmd v = kiln_cmd("validate " + path("neg.kiln"));
  EXPECT_EQ(v.code, run.code) << v.out;
  EXPECT_TRUE(contains(v.out, "kiln: error: validation failed: self-test 'case0': ")) << v.out;
  EXPECT_FALSE(contains(v.out, "outside its tolerance")) << v.out;
  const Cmd j = kiln_cmd("validate --json " + path("neg.kiln"), false);
  EXPECT_EQ(j.code, run.code);
  EXPECT_TRUE(nlohmann::json::parse(j.out)["self_tests"][0].contains("error_code")) << j.out;
}

// The format sample with `edit` applied to its program.
std::string write_sample(const std::string& path, const std::function<void(fb::ProgramT&)>& edit) {
  auto sample = testing::make_format_sample({});
  edit(sample->program);
  EXPECT_TRUE(sample->write(path).ok());
  return path;
}

TEST_F(Hardening, InspectChecksStructureLikeRun) {
  const std::string bad = write_sample(path("one_branch.kiln"), [](fb::ProgramT& p) {
    for (auto& n : p.graphs[0]->nodes) {
      if (p.op_names[n->op] == "cond") n->subgraphs = {1};
    }
  });
  const Cmd run = kiln_cmd("run " + bad + " x=1");
  const Cmd inspect = kiln_cmd("inspect " + bad);
  EXPECT_EQ(inspect.code, 2) << inspect.out;
  EXPECT_EQ(run.code, 2) << run.out;
  EXPECT_TRUE(contains(inspect.out, "cond calls 2 subgraphs, not 1")) << inspect.out;
}

TEST_F(Hardening, ControlCharactersFromFilesAreEscaped) {
  const std::string evil = write_sample(path("evil.kiln"), [](fb::ProgramT& p) {
    p.symbols[0]->name = "batch\x1b]0;pwned\x07";
    p.graphs[0]->name = "main\x1b[2J";
    p.debug->strings[1] = "model\r.cpp\x9b";
  });
  for (const std::string& args : {"inspect --graph " + evil, "inspect --dot - " + evil}) {
    const Cmd r = kiln_cmd(args);
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_FALSE(contains(r.out, "\x1b")) << args;
    EXPECT_FALSE(contains(r.out, "\x07")) << args;
    EXPECT_FALSE(contains(r.out, "\r")) << args;
    EXPECT_FALSE(contains(r.out, "\x9b")) << args;
  }
  const Cmd r = kiln_cmd("inspect " + evil);
  EXPECT_TRUE(contains(r.out, "batch\\x1b]0;pwned\\x07")) << r.out;
  const Cmd j = kiln_cmd("inspect --json " + evil, false);
  ASSERT_EQ(j.code, 0);
  EXPECT_FALSE(contains(j.out, "\x1b"));
  EXPECT_TRUE(nlohmann::json::accept(j.out)) << j.out;
}

// ---- item 6: outputs ---------------------------------------------------------------------

TEST_F(Hardening, OutputTargetsThatAreNotRegularFilesAreRefused) {
  const std::string fifo = path("out_fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  fs::create_symlink(path("elsewhere.kiln"), path("link.kiln"));
  std::ofstream(path("copy.pt2"), std::ios::binary) << std::ifstream(fixture("dyn_int/model.pt2"), std::ios::binary).rdbuf();
  for (const std::string& target : {fifo, std::string("/dev/null"), path("link.kiln"), path("copy.pt2")}) {
    const Cmd r = kiln_cmd("import " + path("copy.pt2") + " -o " + target);
    EXPECT_EQ(r.code, 1) << target << ": " << r.out;
    EXPECT_TRUE(contains(r.out, "refusing to ")) << r.out;
  }
  EXPECT_TRUE(fs::is_fifo(fifo));
  EXPECT_TRUE(fs::is_symlink(path("link.kiln")));
  EXPECT_FALSE(fs::exists(path("elsewhere.kiln")));
  EXPECT_EQ(fs::file_size(path("copy.pt2")), fs::file_size(fixture("dyn_int/model.pt2")));
  // run's outputs and inspect --dot's file.
  fs::create_directories(path("outs"));
  ASSERT_EQ(::mkfifo(path("outs/out1.npy").c_str(), 0600), 0);
  const Cmd run = kiln_cmd("run " + dyn_int() + " --input " + x_input() + " --input n=3 -o " + path("outs"));
  EXPECT_EQ(run.code, 1) << run.out;
  EXPECT_TRUE(contains(run.out, "refusing to replace '" + path("outs/out1.npy") + "': it is a FIFO")) << run.out;
  EXPECT_FALSE(fs::exists(path("outs/out0.npy")));  // nothing of the set was written
  EXPECT_EQ(kiln_cmd("inspect " + dyn_int() + " --dot " + fifo).code, 1);
}

TEST_F(Hardening, WriteErrorsExitEight) {
  std::ofstream(path("a_file")) << "x";
  const Cmd file_dir = kiln_cmd("run " + dyn_int() + " --input " + x_input() + " --input n=3 -o " + path("a_file"));
  EXPECT_EQ(file_dir.code, 8) << file_dir.out;
  EXPECT_TRUE(contains(file_dir.out, "cannot write to '" + path("a_file") + "': it exists and is not a directory")) << file_dir.out;
  const Cmd parent = kiln_cmd("import " + fixture("dyn_int/model.pt2") + " -o " + path("no/such/t.kiln"));
  EXPECT_EQ(parent.code, 8) << parent.out;
  // A full disk, simulated with a file size limit (SIGXFSZ ignored: write fails with EFBIG).
  const std::string full = "trap \"\" XFSZ; ulimit -f 1; ";
  const Cmd run = kiln_cmd("run " + dyn_int() + " --input " + x_input() + " --input n=3000 -o " + path("full"), true, full);
  EXPECT_EQ(run.code, 8) << run.out;
  EXPECT_TRUE(contains(run.out, "kiln: error: cannot write '" + path("full/out1.npy") + "': File too large")) << run.out;
  EXPECT_FALSE(fs::exists(path("full/out0.npy")));  // all or nothing
  const Cmd imp = kiln_cmd("import " + fixture("dyn_int/model.pt2") + " -o " + path("full.kiln"), true, full);
  EXPECT_EQ(imp.code, 8) << imp.out;
  for (const auto& e : fs::directory_iterator(dir_)) EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
  for (const auto& e : fs::directory_iterator(path("full"))) ADD_FAILURE() << "left behind: " << e.path();
}

TEST_F(Hardening, StaleTemporariesOfKilledRunsAreRemovedByTheNextWrite) {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);
  const std::string dead = std::to_string(child);
  fs::create_directories(path("stale/.kiln-outputs.tmp." + dead));
  std::ofstream(path("stale/.kiln-outputs.tmp." + dead + "/out0.npy")) << "x";
  std::ofstream(path("stale/out1.npy.tmp." + dead)) << "x";
  std::ofstream(path(".m.kiln.tmp." + dead + ".Ab12Cd")) << "x";
  const Cmd r = kiln_cmd("run " + dyn_int() + " --input " + x_input() + " --input n=3 -o " + path("stale"));
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_FALSE(fs::exists(path("stale/.kiln-outputs.tmp." + dead)));
  EXPECT_TRUE(fs::exists(path("stale/out0.npy")));
  EXPECT_TRUE(fs::exists(path("stale/out1.npy")));
  const Cmd i = kiln_cmd("import " + fixture("dyn_int/model.pt2") + " -o " + path("m.kiln"));
  ASSERT_EQ(i.code, 0) << i.out;
  EXPECT_FALSE(fs::exists(path(".m.kiln.tmp." + dead + ".Ab12Cd")));
}

// SIGTERM in the middle of an import, once its temporary bundle exists: the handler removes
// it and the process dies of the signal.
TEST_F(Hardening, SigtermDuringImportLeavesNoTemporary) {
  fs::create_directories(path("term"));
  const std::string model = (fs::path(KILN_SOURCE_DIR) / "tests/fixtures/torch_extra/mobilenet_v3/model.pt2").string();
  ASSERT_TRUE(fs::exists(model));
  int interrupted = 0;
  for (int attempt = 0; attempt < 20 && interrupted < 3; ++attempt) {
    const pid_t child = ::fork();
    if (child == 0) {
      ::execl(KILN_BIN, KILN_BIN, "import", model.c_str(), "-o", path("term/m.kiln").c_str(), "--compress", "zstd",
              static_cast<char*>(nullptr));
      ::_exit(127);
    }
    bool seen = false;
    for (int spin = 0; spin < 200000 && !seen; ++spin) {
      std::error_code ec;
      for (const auto& e : fs::directory_iterator(path("term"), ec)) seen = seen || e.path().filename().string().find(".tmp.") != std::string::npos;
      if (!seen && ::waitpid(child, nullptr, WNOHANG) == child) break;
    }
    int status = 0;
    if (seen) {
      ::kill(child, SIGTERM);
      ASSERT_EQ(::waitpid(child, &status, 0), child);
      if (WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) ++interrupted;
    } else {
      ::waitpid(child, &status, 0);
    }
    for (const auto& e : fs::directory_iterator(path("term"))) {
      EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << "left behind: " << e.path();
    }
    fs::remove(path("term/m.kiln"));
  }
  EXPECT_GT(interrupted, 0) << "no import was caught while writing its temporary";
}

}  // namespace
}  // namespace kiln

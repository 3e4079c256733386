// The `.npy` reader treats files as hostile: truncation, overflowing shapes, malformed and
// oversized headers and special files end in a kInvalidInput naming the file and the
// problem. Also the scalar reading of int inputs and the write side's temporaries.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "kiln/runtime/file_io.h"
#include "kiln/runtime/npy.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<std::uint8_t>;

// A version 1.0 file with `header` (padded as NumPy does) followed by `data_bytes` zeros.
Bytes npy(const std::string& header, std::size_t data_bytes, int major = 1) {
  std::string h = header;
  const std::size_t prefix = major == 1 ? 10 : 12;
  h.append((64 - (prefix + h.size() + 1) % 64) % 64, ' ');
  h += '\n';
  Bytes out = {0x93, 'N', 'U', 'M', 'P', 'Y', static_cast<std::uint8_t>(major), 0};
  for (std::size_t i = 0; i < prefix - 8; ++i) out.push_back(static_cast<std::uint8_t>(h.size() >> (8 * i)));
  out.insert(out.end(), h.begin(), h.end());
  out.resize(out.size() + data_bytes, 0);
  return out;
}

std::string error_of(const Bytes& bytes) {
  auto t = parse_npy(bytes, "t.npy");
  if (t.ok()) return "";
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidInput);
  return t.status().message();
}

TEST(Npy, ReadsWhatItWrites) {
  HostTensor t;
  t.dtype = DType::kI32;
  t.shape = {2, 3};
  t.data.resize(24);
  for (std::size_t i = 0; i < 24; ++i) t.data[i] = static_cast<std::uint8_t>(i);
  auto back = parse_npy(encode_npy(t));
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->shape, t.shape);
  EXPECT_EQ(back->data, t.data);
  auto scalar = parse_npy(npy("{'descr': '<i8', 'fortran_order': False, 'shape': (), }", 8));
  ASSERT_TRUE(scalar.ok()) << scalar.status().to_string();
  EXPECT_TRUE(scalar->shape.empty());
}

TEST(Npy, TruncationIsNamed) {
  const Bytes good = npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 24);
  for (std::size_t n = 0; n < good.size(); ++n) {
    const std::string m = error_of(Bytes(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n)));
    EXPECT_FALSE(m.empty()) << n;
  }
  EXPECT_EQ(error_of(Bytes(good.begin(), good.begin() + 9)), "t.npy: not a .npy file (bad magic)");
  EXPECT_EQ(error_of(Bytes(good.begin(), good.begin() + 40)),
            "t.npy: truncated header: it declares 118 bytes, the file has 30 after the length field");
  EXPECT_EQ(error_of(Bytes(good.begin(), good.end() - 4)),
            "t.npy: the data is 20 bytes, but shape (2, 3) of f32 needs 24 (truncated?)");
  EXPECT_EQ(error_of(npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 28)),
            "t.npy: the data is 28 bytes, but shape (2, 3) of f32 needs 24");
}

TEST(Npy, HugeShapesAreRefusedWithoutOverflow) {
  EXPECT_EQ(error_of(npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2305843009213693952), }", 0)),
            "t.npy: shape (2, 2305843009213693952) of f32 needs more than 2^64 bytes");
  EXPECT_EQ(error_of(npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 4611686018427387904), }", 0)),
            "t.npy: shape (2, 4611686018427387904) has more than 2^63-1 elements");
  EXPECT_EQ(error_of(npy("{'descr': '|u1', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", 0)),
            "t.npy: shape (4294967296, 4294967296) has more than 2^63-1 elements");
  EXPECT_EQ(error_of(npy("{'descr': '|u1', 'fortran_order': False, 'shape': (4611686018427387904, 2, 0), }", 0)),
            "t.npy: shape (4611686018427387904, 2, 0) has more than 2^63-1 elements");
  EXPECT_EQ(error_of(npy("{'descr': '<f4', 'fortran_order': False, 'shape': (9223372036854775808,), }", 0)),
            "t.npy: dimension 9223372036854775808 of the shape is larger than 2^63-1");
  EXPECT_EQ(error_of(npy("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999999999999,), }", 0)),
            "t.npy: dimension 99999999999999999999999999999 of the shape is larger than 2^63-1");
  EXPECT_EQ(error_of(npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1), }", 4)),
            "t.npy: the shape has more than 8 dimensions");
  // A zero dimension makes the product 0 even after a huge one: that is a valid empty array.
  auto empty = parse_npy(npy("{'descr': '<f4', 'fortran_order': False, 'shape': (0, 9223372036854775807), }", 0));
  EXPECT_TRUE(empty.ok()) << empty.status().to_string();
}

TEST(Npy, MalformedHeadersAreNamed) {
  const auto header_error = [](const std::string& h) { return error_of(npy(h, 4)); };
  EXPECT_EQ(header_error("['descr']"), "t.npy: malformed header: the header is not a dict");
  EXPECT_EQ(header_error("{'descr': '<f4', 'fortran_order': False}"), "t.npy: malformed header: the header lacks 'shape'");
  EXPECT_EQ(header_error("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1}"),
            "t.npy: malformed header: unexpected key 'x' in the header (only 'descr', 'fortran_order', 'shape')");
  EXPECT_EQ(header_error("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (1,)}"),
            "t.npy: malformed header: 'descr' must be one quoted dtype string");
  EXPECT_EQ(header_error("{'descr': '<f4', 'fortran_order': Maybe, 'shape': (1,)}"),
            "t.npy: malformed header: 'fortran_order' must be True or False");
  EXPECT_EQ(header_error("{'descr': '<f4', 'fortran_order': False, 'shape': (-1,)}"),
            "t.npy: malformed header: 'shape' has a negative dimension");
  EXPECT_EQ(header_error("{'descr': '<f4', 'fortran_order': False, 'shape': [1]}"),
            "t.npy: malformed header: 'shape' must be a tuple of integers like (2, 3)");
  EXPECT_EQ(header_error("{'descr': '<f4', 'fortran_order': False, 'shape': (1,)} trailing"),
            "t.npy: malformed header: unexpected text after the header dict");
  EXPECT_EQ(header_error("{'descr: '<f4'"), "t.npy: malformed header: expected ':' after 'descr: '");
  EXPECT_EQ(header_error(std::string("{'descr': '\x1b[31m', 'fortran_order': False, 'shape': (1,)}")),
            "t.npy: dtype '\\x1b[31m' is not supported (little-endian f32, f16, f64, i64, i32, i16, i8, u8, bool)");
  EXPECT_EQ(header_error("{'descr': '>f4', 'fortran_order': False, 'shape': (1,)}"),
            "t.npy: dtype '>f4' is not supported (little-endian f32, f16, f64, i64, i32, i16, i8, u8, bool)");
  EXPECT_EQ(header_error("{'descr': '<f4', 'fortran_order': True, 'shape': (1,)}"),
            "t.npy: Fortran-order arrays are not supported (use C order)");
  Bytes v9 = npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1,)}", 4);
  v9[6] = 9;
  EXPECT_EQ(error_of(v9), "t.npy: .npy format version 9 is not supported (1, 2 or 3)");
}

// Deep and long headers: nesting is not parsed at all (a tuple of integers only), and a
// header over the limit is refused before it is copied or parsed.
TEST(Npy, DeepAndLongHeadersAreRefused) {
  EXPECT_EQ(error_of(npy("{'descr': '<f4', 'fortran_order': False, 'shape': " + std::string(5000, '(') + "}", 4)),
            "t.npy: malformed header: 'shape' must be a tuple of integers like (2, 3)");
  const std::string long_header = "{'descr': '<f4', 'fortran_order': False, 'shape': (1,)" + std::string(70000, ' ') + "}";
  EXPECT_EQ(error_of(npy(long_header, 4, 2)).rfind("t.npy: the header is ", 0), 0u);
  EXPECT_NE(error_of(npy(long_header, 4, 2)).find("bytes, more than the limit of 65536"), std::string::npos);
  NpyLimits generous;
  generous.max_header_bytes = 1 << 20;
  EXPECT_TRUE(parse_npy(npy(long_header, 4, 2), "t.npy", generous).ok());
}

TEST(Npy, FortranOrderIsTransposedWhenAllowed) {
  Bytes f = npy("{'descr': '|u1', 'fortran_order': True, 'shape': (2, 3), }", 6);
  for (std::size_t i = 0; i < 6; ++i) f[f.size() - 6 + i] = static_cast<std::uint8_t>(i);  // column-major 0..5
  NpyLimits limits;
  limits.allow_fortran_order = true;
  auto t = parse_npy(f, "t.npy", limits);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(t->shape, (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(t->data, (Bytes{0, 2, 4, 1, 3, 5}));
}

class NpyFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("kiln_npy_test_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& n) const { return (dir_ / n).string(); }
  fs::path dir_;
};

TEST_F(NpyFiles, SpecialFilesAreRefusedWithoutBlocking) {
  ASSERT_EQ(::mkfifo(path("p.npy").c_str(), 0600), 0);
  EXPECT_EQ(read_npy(path("p.npy")).status().message(), path("p.npy") + ": is a FIFO, not a regular file");
  EXPECT_EQ(read_npy("/dev/zero").status().message(), "/dev/zero: is a character device, not a regular file");
  EXPECT_EQ(read_npy(dir_.string()).status().message(), dir_.string() + ": is a directory, not a regular file");
  EXPECT_EQ(read_npy(path("missing.npy")).status().message(), path("missing.npy") + ": cannot open: No such file or directory");
  EXPECT_EQ(read_npy(path("missing.npy")).status().code(), StatusCode::kInvalidInput);
}

TEST_F(NpyFiles, FilesOverTheSizeCapAreRefusedBeforeReading) {
  const Bytes b = npy("{'descr': '<f4', 'fortran_order': False, 'shape': (256,), }", 1024);
  std::ofstream(path("a.npy"), std::ios::binary).write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  NpyLimits limits;
  limits.max_file_bytes = 1000;
  EXPECT_EQ(read_npy(path("a.npy"), limits).status().message(), path("a.npy") + ": is 1152 bytes, more than the limit of 1000");
  EXPECT_TRUE(read_npy(path("a.npy")).ok());
}

TEST(Npy, ScalarIntsFromZeroDimOrOneElementArrays) {
  const auto tensor = [](DType dtype, std::vector<std::int64_t> shape, Bytes data) {
    HostTensor t;
    t.dtype = dtype;
    t.shape = std::move(shape);
    t.data = std::move(data);
    return t;
  };
  EXPECT_EQ(*npy_scalar_int(tensor(DType::kI64, {}, {0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}), "n.npy"), -2);
  EXPECT_EQ(*npy_scalar_int(tensor(DType::kI32, {1}, {7, 0, 0, 0}), "n.npy"), 7);
  EXPECT_EQ(*npy_scalar_int(tensor(DType::kI16, {1, 1}, {0xff, 0xff}), "n.npy"), -1);
  EXPECT_EQ(*npy_scalar_int(tensor(DType::kI8, {}, {0x80}), "n.npy"), -128);
  EXPECT_EQ(*npy_scalar_int(tensor(DType::kU8, {}, {200}), "n.npy"), 200);
  EXPECT_EQ(*npy_scalar_int(tensor(DType::kBool, {}, {1}), "n.npy"), 1);
  auto two = npy_scalar_int(tensor(DType::kI64, {2}, Bytes(16, 0)), "n.npy");
  EXPECT_EQ(two.status().code(), StatusCode::kInvalidInput);
  EXPECT_EQ(two.status().message(),
            "n.npy: holds i64[2] (2 elements); an int input needs a 0-d or one-element array of an integer or bool dtype");
  auto f = npy_scalar_int(tensor(DType::kF32, {}, Bytes(4, 0)), "n.npy");
  EXPECT_EQ(f.status().message(),
            "n.npy: holds f32[]; an int input needs an integer or bool dtype (i64, i32, i16, i8, u8, bool), not f32");
}

// ---------------------------------------------------------------------------------------
// Writing: targets, temporaries, cleanup

TEST_F(NpyFiles, WriteRefusesTargetsThatAreNotRegularFiles) {
  HostTensor t;
  t.shape = {1};
  t.data.resize(4);
  ASSERT_EQ(::mkfifo(path("fifo.npy").c_str(), 0600), 0);
  fs::create_symlink(path("real.npy"), path("link.npy"));
  for (const char* name : {"fifo.npy", "link.npy"}) {
    const Status s = write_npy(path(name), t);
    EXPECT_EQ(s.code(), StatusCode::kUsage) << name;
    EXPECT_NE(s.message().find("refusing to replace '" + path(name) + "': it is a"), std::string::npos) << s.message();
  }
  EXPECT_FALSE(fs::exists(path("real.npy")));
  EXPECT_TRUE(fs::is_fifo(path("fifo.npy")));
  EXPECT_EQ(write_npy("/dev/full", t).code(), StatusCode::kUsage);
  const Status missing = write_npy(path("no/such/dir/x.npy"), t);
  EXPECT_EQ(missing.code(), StatusCode::kIoError);
  EXPECT_EQ(missing.message(), "cannot write '" + path("no/such/dir/x.npy") + "': No such file or directory");
  EXPECT_TRUE(write_npy(path("ok.npy"), t).ok());
  EXPECT_TRUE(write_npy(path("ok.npy"), t).ok());  // a regular file is replaced
}

// A dead writer's temporaries (its PID is in the name) are removed by the next write; a
// live process's are left alone, and so are other files.
TEST_F(NpyFiles, StaleTemporariesOfDeadProcessesAreRemoved) {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ASSERT_GT(child, 0);
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);
  const std::string dead = std::to_string(child), live = std::to_string(::getppid());
  for (const std::string& n : {"out0.npy.tmp." + dead, "out0.npy.tmp." + live, std::string("out0.npy.tmp.x"), "out1.npy.tmp." + dead}) {
    std::ofstream(path(n)) << "x";
  }
  fs::create_directories(path(".kiln-outputs.tmp." + dead));
  std::ofstream(path(".kiln-outputs.tmp." + dead + "/out0.npy")) << "x";
  HostTensor t;
  t.shape = {1};
  t.data.resize(4);
  ASSERT_TRUE(write_npy(path("out0.npy"), t).ok());
  EXPECT_FALSE(fs::exists(path("out0.npy.tmp." + dead)));
  EXPECT_TRUE(fs::exists(path("out0.npy.tmp." + live)));
  EXPECT_TRUE(fs::exists(path("out0.npy.tmp.x")));
  EXPECT_TRUE(fs::exists(path("out1.npy.tmp." + dead)));  // another target's: removed when out1.npy is written
  remove_stale_temporaries(path("kiln-outputs"));
  EXPECT_FALSE(fs::exists(path(".kiln-outputs.tmp." + dead)));
}

// SIGTERM and SIGINT unlink the registered temporaries, then the process dies of the signal.
// A signal this process inherited as ignored (a background job of a non-interactive shell
// ignores SIGINT; nohup, SIGHUP) stays ignored, as the handler promises: the child then
// survives its raise and the files stay.
TEST_F(NpyFiles, SignalsRemoveRegisteredTemporaries) {
  for (int sig : {SIGTERM, SIGINT}) {
    struct sigaction inherited {};
    ASSERT_EQ(::sigaction(sig, nullptr, &inherited), 0);
    const bool ignored = inherited.sa_handler == SIG_IGN;
    const std::string file = path("f.tmp"), folder = path("staging");
    std::ofstream(file) << "x";
    fs::create_directories(folder);
    std::ofstream(folder + "/a.npy") << "x";
    const pid_t child = ::fork();
    if (child == 0) {
      install_cleanup_handler();
      register_temporary(folder);
      register_temporary(folder + "/a.npy");
      register_temporary(file);
      ::raise(sig);
      ::_exit(0);  // not reached
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    if (ignored) {
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "signal " << sig << ": " << status;
      EXPECT_TRUE(fs::exists(file));
      fs::remove_all(folder);
      fs::remove(file);
      continue;
    }
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == sig) << "signal " << sig << ": " << status;
    EXPECT_FALSE(fs::exists(file));
    EXPECT_FALSE(fs::exists(folder));
  }
}

}  // namespace
}  // namespace kiln

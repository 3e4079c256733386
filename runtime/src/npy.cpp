#include "kiln/runtime/npy.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

namespace kiln {
namespace {

Status bad(const std::string& name, const std::string& m) { return Status(StatusCode::kInvalidInput, name + ": " + m); }

struct DescrName {
  const char* descr;
  DType dtype;
};
constexpr DescrName kDescrs[] = {{"<f4", DType::kF32}, {"<f2", DType::kF16}, {"<f8", DType::kF64}, {"<i8", DType::kI64},
                                 {"<i4", DType::kI32}, {"<i2", DType::kI16}, {"|i1", DType::kI8}, {"|u1", DType::kU8},
                                 {"|b1", DType::kBool}};

// The value of `'key': value` in the header dict (value up to the next ',' at depth 0 or '}').
std::string dict_value(const std::string& header, const std::string& key) {
  const std::size_t k = header.find("'" + key + "'");
  if (k == std::string::npos) return "";
  std::size_t i = header.find(':', k);
  if (i == std::string::npos) return "";
  ++i;
  int depth = 0;
  std::string out;
  for (; i < header.size(); ++i) {
    const char c = header[i];
    if (c == '(') ++depth;
    if (c == ')') --depth;
    if (depth == 0 && (c == ',' || c == '}')) break;
    out += c;
  }
  const std::size_t a = out.find_first_not_of(" "), b = out.find_last_not_of(" ");
  return a == std::string::npos ? "" : out.substr(a, b - a + 1);
}

}  // namespace

Result<HostTensor> parse_npy(std::span<const std::uint8_t> bytes, const std::string& name) {
  static const std::uint8_t magic[] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
  if (bytes.size() < 10 || std::memcmp(bytes.data(), magic, 6) != 0) return bad(name, "not a .npy file (bad magic)");
  const int major = bytes[6];
  std::size_t header_len, offset;
  if (major == 1) {
    header_len = bytes[8] | (bytes[9] << 8);
    offset = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) return bad(name, "truncated header");
    header_len = bytes[8] | (bytes[9] << 8) | (bytes[10] << 16) | (static_cast<std::size_t>(bytes[11]) << 24);
    offset = 12;
  } else {
    return bad(name, ".npy format version " + std::to_string(major) + " is not supported");
  }
  if (header_len > bytes.size() - offset) return bad(name, "truncated header");
  const std::string header(reinterpret_cast<const char*>(bytes.data() + offset), header_len);
  offset += header_len;
  std::string descr = dict_value(header, "descr");
  if (descr.size() >= 2 && (descr.front() == '\'' || descr.front() == '"')) descr = descr.substr(1, descr.size() - 2);
  if (descr == "<b1" || descr == "|b1" || descr == "b1") descr = "|b1";
  if (descr == "<u1") descr = "|u1";
  if (descr == "<i1") descr = "|i1";
  HostTensor t;
  bool known = false;
  for (const auto& d : kDescrs) {
    if (descr == d.descr) {
      t.dtype = d.dtype;
      known = true;
    }
  }
  if (!known) return bad(name, "dtype '" + descr + "' is not supported (little-endian f32, f16, f64, i64, i32, i16, i8, u8, bool)");
  if (dict_value(header, "fortran_order") != "False") return bad(name, "Fortran-order arrays are not supported (use C order)");
  std::string shape = dict_value(header, "shape");
  if (shape.size() < 2 || shape.front() != '(' || shape.back() != ')') return bad(name, "malformed shape in header");
  shape = shape.substr(1, shape.size() - 2);
  std::uint64_t numel = 1;
  std::size_t i = 0;
  while (i < shape.size()) {
    while (i < shape.size() && (shape[i] == ' ' || shape[i] == ',')) ++i;
    if (i >= shape.size()) break;
    std::uint64_t v = 0;
    std::size_t digits = 0;
    while (i < shape.size() && shape[i] >= '0' && shape[i] <= '9' && digits < 18) v = v * 10 + static_cast<std::uint64_t>(shape[i++] - '0'), ++digits;
    if (digits == 0 || (i < shape.size() && shape[i] != ',' && shape[i] != ' ')) return bad(name, "malformed shape in header");
    t.shape.push_back(static_cast<std::int64_t>(v));
    if (t.shape.size() > 8 || __builtin_mul_overflow(numel, v, &numel)) return bad(name, "shape too large");
  }
  std::uint64_t nbytes;
  if (__builtin_mul_overflow(numel, dtype_size(t.dtype), &nbytes) || nbytes != bytes.size() - offset) {
    return bad(name, "data is " + std::to_string(bytes.size() - offset) + " bytes, the header implies " + std::to_string(numel * dtype_size(t.dtype)));
  }
  t.data.assign(bytes.begin() + static_cast<std::ptrdiff_t>(offset), bytes.end());
  if (t.dtype == DType::kBool) for (auto& b : t.data) b = b != 0;
  return t;
}

Result<HostTensor> read_npy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status(StatusCode::kInvalidInput, path + ": cannot open: " + std::strerror(errno));
  std::vector<std::uint8_t> bytes((std::istreambuf_iterator<char>(in)), {});
  return parse_npy(bytes, path);
}

std::vector<std::uint8_t> encode_npy(const HostTensor& t) {
  std::string descr = "<f4";
  for (const auto& d : kDescrs) if (d.dtype == t.dtype) descr = d.descr;
  std::string shape = "(";
  for (std::size_t i = 0; i < t.shape.size(); ++i) shape += std::to_string(t.shape[i]) + (t.shape.size() == 1 || i + 1 < t.shape.size() ? "," : "");
  shape += ")";
  std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  const std::size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  const std::uint8_t magic[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, static_cast<std::uint8_t>(header.size() & 0xFF),
                                  static_cast<std::uint8_t>(header.size() >> 8)};
  std::vector<std::uint8_t> out(sizeof(magic) + header.size() + t.data.size());
  std::memcpy(out.data(), magic, sizeof(magic));
  std::memcpy(out.data() + sizeof(magic), header.data(), header.size());
  if (!t.data.empty()) std::memcpy(out.data() + sizeof(magic) + header.size(), t.data.data(), t.data.size());
  return out;
}

Status write_npy(const std::string& path, const HostTensor& tensor) {
  const std::vector<std::uint8_t> bytes = encode_npy(tensor);
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status(StatusCode::kIoError, "cannot write '" + path + "': " + std::strerror(errno));
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t w = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (w <= 0) break;
    done += static_cast<std::size_t>(w);
  }
  const bool ok = done == bytes.size() && ::close(fd) == 0;
  if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    return Status(StatusCode::kIoError, "cannot write '" + path + "': " + std::strerror(errno));
  }
  return Status::Ok();
}

}  // namespace kiln

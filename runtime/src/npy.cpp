#include "kiln/runtime/npy.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>

#include "kiln/runtime/file_io.h"

namespace kiln {
namespace {

constexpr std::size_t kMaxRank = 8;

Status bad(const std::string& name, const std::string& m) { return Status(StatusCode::kInvalidInput, name + ": " + m); }

struct DescrName {
  const char* descr;
  DType dtype;
};
constexpr DescrName kDescrs[] = {{"<f4", DType::kF32}, {"<f2", DType::kF16}, {"<f8", DType::kF64}, {"<i8", DType::kI64},
                                 {"<i4", DType::kI32}, {"<i2", DType::kI16}, {"|i1", DType::kI8}, {"|u1", DType::kU8},
                                 {"|b1", DType::kBool}};

// Printable text of hostile header bytes for an error message (at most 40 characters).
std::string quoted(std::string_view s) {
  std::string out = "'";
  for (std::size_t i = 0; i < s.size() && i < 40; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  return out + (s.size() > 40 ? "...'" : "'");
}

// The header: a Python dict literal {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
// with exactly these three keys, as NumPy writes and reads it.
struct Header {
  std::string descr;
  bool fortran_order = false;
  std::vector<std::int64_t> shape;
};

class HeaderParser {
 public:
  HeaderParser(std::string_view text, const std::string& name) : s_(text), name_(name) {}

  Result<Header> parse() {
    Header h;
    bool have_descr = false, have_order = false, have_shape = false;
    skip_space();
    if (!eat('{')) return error("the header is not a dict");
    for (;;) {
      skip_space();
      if (eat('}')) break;
      auto key = string_literal();
      if (!key) return error("expected a quoted key in the header dict");
      skip_space();
      if (!eat(':')) return error("expected ':' after " + quoted(*key));
      skip_space();
      if (*key == "descr") {
        auto v = string_literal();
        if (!v || have_descr) return error("'descr' must be one quoted dtype string");
        h.descr = *v;
        have_descr = true;
      } else if (*key == "fortran_order") {
        if (have_order) return error("'fortran_order' given twice");
        if (literal("True")) h.fortran_order = true;
        else if (literal("False")) h.fortran_order = false;
        else return error("'fortran_order' must be True or False");
        have_order = true;
      } else if (*key == "shape") {
        if (have_shape) return error("'shape' given twice");
        KILN_RETURN_IF_ERROR(shape(h.shape));
        have_shape = true;
      } else {
        return error("unexpected key " + quoted(*key) + " in the header (only 'descr', 'fortran_order', 'shape')");
      }
      skip_space();
      if (eat(',')) continue;
      skip_space();
      if (eat('}')) break;
      return error("expected ',' or '}' in the header dict");
    }
    skip_space();
    if (pos_ != s_.size()) return error("unexpected text after the header dict");
    if (!have_descr || !have_order || !have_shape) {
      return error(std::string("the header lacks ") + (!have_descr ? "'descr'" : !have_order ? "'fortran_order'" : "'shape'"));
    }
    return h;
  }

 private:
  Status error(const std::string& m) const { return bad(name_, "malformed header: " + m); }
  void skip_space() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) ++pos_;
  }
  bool eat(char c) {
    if (pos_ < s_.size() && s_[pos_] == c) return ++pos_, true;
    return false;
  }
  bool literal(std::string_view word) {
    if (s_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }
  std::optional<std::string> string_literal() {
    if (pos_ >= s_.size() || (s_[pos_] != '\'' && s_[pos_] != '"')) return std::nullopt;
    const char q = s_[pos_++];
    const std::size_t end = s_.find(q, pos_);
    if (end == std::string_view::npos) return std::nullopt;
    std::string out(s_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return out;
  }
  Status shape(std::vector<std::int64_t>& dims) {
    if (!eat('(')) return error("'shape' must be a tuple of integers like (2, 3)");
    for (;;) {
      skip_space();
      if (eat(')')) return Status::Ok();
      if (pos_ < s_.size() && s_[pos_] == '-') return error("'shape' has a negative dimension");
      const std::size_t start = pos_;
      std::uint64_t v = 0;
      bool too_large = false;
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') {
        const auto digit = static_cast<std::uint64_t>(s_[pos_++] - '0');
        if (v > (static_cast<std::uint64_t>(INT64_MAX) - digit) / 10) too_large = true;
        else v = v * 10 + digit;
      }
      if (pos_ == start) return error("'shape' must be a tuple of integers like (2, 3)");
      if (too_large) return bad(name_, "dimension " + std::string(s_.substr(start, pos_ - start)) + " of the shape is larger than 2^63-1");
      if (dims.size() == kMaxRank) return bad(name_, "the shape has more than " + std::to_string(kMaxRank) + " dimensions");
      dims.push_back(static_cast<std::int64_t>(v));
      skip_space();
      if (eat(',')) continue;
      skip_space();
      if (eat(')')) return Status::Ok();
      return error("'shape' must be a tuple of integers like (2, 3)");
    }
  }

  std::string_view s_;
  const std::string& name_;
  std::size_t pos_ = 0;
};

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string out = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + (shape.size() == 1 ? ",)" : ")");
}

// Fortran data of shape S is C data of shape reversed(S): reverse every axis back.
HostTensor from_fortran_order(const HostTensor& reversed_c, const std::vector<std::int64_t>& dims) {
  HostTensor out;
  out.dtype = reversed_c.dtype;
  out.shape = dims;
  out.data.resize(reversed_c.data.size());
  const std::size_t es = dtype_size(out.dtype), r = dims.size();
  std::vector<std::int64_t> idx(r, 0), src_strides(r, 1);
  for (std::size_t d = 1; d < r; ++d) src_strides[d] = src_strides[d - 1] * dims[d - 1];
  const std::int64_t n = out.numel();
  for (std::int64_t i = 0; i < n; ++i) {
    std::int64_t src = 0;
    for (std::size_t d = 0; d < r; ++d) src += idx[d] * src_strides[d];
    std::memcpy(out.data.data() + static_cast<std::size_t>(i) * es, reversed_c.data.data() + static_cast<std::size_t>(src) * es, es);
    for (std::size_t d = r; d-- > 0;) {
      if (++idx[d] < dims[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

}  // namespace

Result<HostTensor> parse_npy(std::span<const std::uint8_t> bytes, const std::string& name, const NpyLimits& limits) {
  static const std::uint8_t magic[] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
  if (bytes.size() < 10 || std::memcmp(bytes.data(), magic, 6) != 0) return bad(name, "not a .npy file (bad magic)");
  const int major = bytes[6];
  std::uint64_t header_len;
  std::size_t offset;
  if (major == 1) {
    header_len = bytes[8] | (bytes[9] << 8);
    offset = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) return bad(name, "truncated header (" + std::to_string(bytes.size()) + " bytes)");
    header_len = bytes[8] | (bytes[9] << 8) | (bytes[10] << 16) | (static_cast<std::uint64_t>(bytes[11]) << 24);
    offset = 12;
  } else {
    return bad(name, ".npy format version " + std::to_string(major) + " is not supported (1, 2 or 3)");
  }
  if (header_len > limits.max_header_bytes) {
    return bad(name, "the header is " + std::to_string(header_len) + " bytes, more than the limit of " +
                         std::to_string(limits.max_header_bytes));
  }
  if (header_len > bytes.size() - offset) {
    return bad(name, "truncated header: it declares " + std::to_string(header_len) + " bytes, the file has " +
                         std::to_string(bytes.size() - offset) + " after the length field");
  }
  const std::string_view text(reinterpret_cast<const char*>(bytes.data() + offset), header_len);
  offset += header_len;
  KILN_ASSIGN_OR_RETURN(Header h, HeaderParser(text, name).parse());
  std::string descr = h.descr;
  if (descr == "<b1" || descr == "b1" || descr == "?" || descr == "|?") descr = "|b1";
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
  if (!known) return bad(name, "dtype " + quoted(h.descr) + " is not supported (little-endian f32, f16, f64, i64, i32, i16, i8, u8, bool)");
  if (h.fortran_order && !limits.allow_fortran_order) return bad(name, "Fortran-order arrays are not supported (use C order)");
  std::uint64_t numel = 1, nbytes = 0;
  // Every running product stays <= 2^63-1, so HostTensor::numel() (int64, left to right)
  // cannot overflow either, even for shapes like (2^62, 2, 0).
  for (std::int64_t d : h.shape) {
    if (__builtin_mul_overflow(numel, static_cast<std::uint64_t>(d), &numel) || numel > static_cast<std::uint64_t>(INT64_MAX)) {
      return bad(name, "shape " + shape_text(h.shape) + " has more than 2^63-1 elements");
    }
  }
  if (__builtin_mul_overflow(numel, dtype_size(t.dtype), &nbytes)) {
    return bad(name, "shape " + shape_text(h.shape) + " of " + std::string(dtype_name(t.dtype)) + " needs more than 2^64 bytes");
  }
  const std::uint64_t have = bytes.size() - offset;
  if (nbytes != have) {
    return bad(name, "the data is " + std::to_string(have) + " bytes, but shape " + shape_text(h.shape) + " of " +
                         std::string(dtype_name(t.dtype)) + " needs " + std::to_string(nbytes) +
                         (nbytes > have ? " (truncated?)" : ""));
  }
  t.shape = h.fortran_order ? std::vector<std::int64_t>(h.shape.rbegin(), h.shape.rend()) : h.shape;
  t.data.assign(bytes.begin() + static_cast<std::ptrdiff_t>(offset), bytes.end());
  if (t.dtype == DType::kBool) for (auto& b : t.data) b = b != 0;
  if (h.fortran_order && h.shape.size() >= 2) return from_fortran_order(t, h.shape);
  t.shape = h.shape;
  return t;
}

Result<HostTensor> read_npy(const std::string& path, const NpyLimits& limits) {
  auto bytes = read_regular_file(path, limits.max_file_bytes, StatusCode::kInvalidInput);
  if (!bytes.ok()) return bytes.status();
  return parse_npy(*bytes, path, limits);
}

Result<std::int64_t> npy_scalar_int(const HostTensor& t, const std::string& name) {
  const std::int64_t n = t.numel();
  std::string shape = "[";
  for (std::size_t i = 0; i < t.shape.size(); ++i) shape += (i ? ", " : "") + std::to_string(t.shape[i]);
  shape += "]";
  const std::string found = std::string(dtype_name(t.dtype)) + shape;
  if (n != 1) {
    return bad(name, "holds " + found + " (" + std::to_string(n) +
                         " elements); an int input needs a 0-d or one-element array of an integer or bool dtype");
  }
  const std::uint8_t* p = t.data.data();
  switch (t.dtype) {
    case DType::kI64: { std::int64_t v; std::memcpy(&v, p, 8); return v; }
    case DType::kI32: { std::int32_t v; std::memcpy(&v, p, 4); return v; }
    case DType::kI16: { std::int16_t v; std::memcpy(&v, p, 2); return v; }
    case DType::kI8: return static_cast<std::int64_t>(static_cast<std::int8_t>(*p));
    case DType::kU8: return static_cast<std::int64_t>(*p);
    case DType::kBool: return static_cast<std::int64_t>(*p != 0);
    default:
      return bad(name, "holds " + found + "; an int input needs an integer or bool dtype (i64, i32, i16, i8, u8, bool), not " +
                           std::string(dtype_name(t.dtype)));
  }
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

namespace {

// Writes `bytes` to a new file at `path`; 0 or the errno of the failure.
int write_all(const std::string& path, const std::vector<std::uint8_t>& bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) return errno;
  std::size_t done = 0;
  int error = 0;
  while (done < bytes.size()) {
    const ssize_t w = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      error = w < 0 ? errno : ENOSPC;
      break;
    }
    done += static_cast<std::size_t>(w);
  }
  if (::close(fd) != 0 && error == 0) error = errno;
  return error;
}

Status write_error(const std::string& path, int error) {
  return Status(StatusCode::kIoError, "cannot write '" + path + "': " + std::strerror(error));
}

}  // namespace

Status write_npy_file(const std::string& path, const HostTensor& tensor) {
  const int error = write_all(path, encode_npy(tensor));
  return error == 0 ? Status::Ok() : write_error(path, error);
}

Status write_npy(const std::string& path, const HostTensor& tensor) {
  KILN_RETURN_IF_ERROR(check_output_target(path));
  remove_stale_temporaries(path);
  const std::string tmp = temporary_name(path);
  const int slot = register_temporary(tmp);
  int error = write_all(tmp, encode_npy(tensor));
  if (error == 0 && ::rename(tmp.c_str(), path.c_str()) != 0) error = errno;
  if (error != 0) ::unlink(tmp.c_str());
  unregister_temporary(slot);
  return error == 0 ? Status::Ok() : write_error(path, error);
}

}  // namespace kiln

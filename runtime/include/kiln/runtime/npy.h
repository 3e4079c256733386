// Reading and writing NumPy `.npy` files (format version 1.0/2.0/3.0; little-endian; f32,
// f16, f64, i64, i32, i16, i8, u8, bool). Untrusted input: a malformed file is a
// kInvalidInput Status naming the file and the problem, never a crash, a hang or an
// allocation the file's size does not justify:
//   - read_npy opens only regular files (a FIFO, a directory or /dev/zero is refused at
//     once, see file_io.h) no larger than NpyLimits::max_file_bytes;
//   - the header is at most NpyLimits::max_header_bytes (NumPy writes < 64 KiB) and must be
//     a dict with 'descr', 'fortran_order' and 'shape';
//   - the shape has at most 8 dims, each a non-negative integer; its element count (every
//     running product, left to right) must stay below 2^63, its byte size must not overflow
//     64 bits, and the data that follows must be exactly that size.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kiln/runtime/program.h"
#include "kiln/runtime/status.h"

namespace kiln {

struct NpyLimits {
  /// Largest `.npy` file read_npy opens (16 GiB).
  std::uint64_t max_file_bytes = std::uint64_t{16} << 30;
  /// Largest header (the dict after the magic and length fields).
  std::uint64_t max_header_bytes = 65536;
  /// Accept Fortran-order arrays, returned C-contiguous (transposed on read).
  bool allow_fortran_order = false;
};

Result<HostTensor> read_npy(const std::string& path, const NpyLimits& limits = {});
Result<HostTensor> parse_npy(std::span<const std::uint8_t> bytes, const std::string& name = "npy",
                             const NpyLimits& limits = {});

/// The value of an int (or bool) input given as a `.npy` array: a 0-d or one-element array
/// of an integer dtype (i8, i16, i32, i64, u8) or bool (0 or 1). Anything else is a
/// kInvalidInput naming `name`, the dtype and shape found and what was expected.
Result<std::int64_t> npy_scalar_int(const HostTensor& tensor, const std::string& name);

/// Writes atomically (a temporary `PATH.tmp.PID` registered with the SIGINT/SIGTERM cleanup
/// handler, then rename). kIoError on failure, naming the path and the OS error.
Status write_npy(const std::string& path, const HostTensor& tensor);
/// Writes the file `path` (no rename, no temporary): for callers that stage outputs.
Status write_npy_file(const std::string& path, const HostTensor& tensor);
std::vector<std::uint8_t> encode_npy(const HostTensor& tensor);

}  // namespace kiln

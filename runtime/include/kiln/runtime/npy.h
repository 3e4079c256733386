// Reading and writing NumPy `.npy` files (format version 1.0/2.0/3.0; little-endian,
// C order; f32, f16, f64, i64, i32, i16, i8, u8, bool). Untrusted input: a malformed file
// is a kInvalidInput Status naming the file and the problem, never a crash.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "kiln/runtime/program.h"
#include "kiln/runtime/status.h"

namespace kiln {

Result<HostTensor> read_npy(const std::string& path);
Result<HostTensor> parse_npy(std::span<const std::uint8_t> bytes, const std::string& name = "npy");
/// Writes atomically (temporary file, then rename). kIoError on failure.
Status write_npy(const std::string& path, const HostTensor& tensor);
std::vector<std::uint8_t> encode_npy(const HostTensor& tensor);

}  // namespace kiln

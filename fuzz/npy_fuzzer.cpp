// libFuzzer target: the `.npy` reader (parse_npy) on arbitrary bytes.
//
// Each input is parsed as C order only and with Fortran order allowed. A parsed array must
// be self-consistent (its data exactly numel × the dtype size, at most 8 dims), survive a
// round trip through encode_npy, and give npy_scalar_int a value or a kInvalidInput error;
// a refused one must be a non-empty kInvalidInput. Anything else is a crash
// (__builtin_trap); ASan/UBSan catch over-reads and overflows.
//
//   scripts/fuzz.sh 300        # build (fuzz preset), fuzz the bundle and .npy readers
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "kiln/runtime/npy.h"

namespace {

void check(std::span<const std::uint8_t> bytes, bool fortran) {
  kiln::NpyLimits limits;
  limits.allow_fortran_order = fortran;
  auto t = kiln::parse_npy(bytes, "fuzz.npy", limits);
  if (!t.ok()) {
    if (t.status().code() != kiln::StatusCode::kInvalidInput || t.status().message().empty()) __builtin_trap();
    return;
  }
  if (t->shape.size() > 8) __builtin_trap();
  if (t->data.size() != static_cast<std::uint64_t>(t->numel()) * kiln::dtype_size(t->dtype)) __builtin_trap();
  auto again = kiln::parse_npy(kiln::encode_npy(*t), "again.npy");
  if (!again.ok() || again->shape != t->shape || again->dtype != t->dtype || again->data != t->data) __builtin_trap();
  auto scalar = kiln::npy_scalar_int(*t, "fuzz.npy");
  if (!scalar.ok() && scalar.status().code() != kiln::StatusCode::kInvalidInput) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::uint8_t> input(data, size);
  check(input, false);
  check(input, true);
  return 0;
}

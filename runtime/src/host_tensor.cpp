// HostTensor::element: one element of any dtype as a double (validate's and the tests'
// comparisons of outputs with expected values).
#include <cstring>

#include "backends/cpu/kernels/convert.h"
#include "kiln/runtime/program.h"

namespace kiln {
namespace {

template <typename T>
T load(const std::vector<std::uint8_t>& data, std::int64_t i) {
  T v;
  std::memcpy(&v, data.data() + static_cast<std::size_t>(i) * sizeof(T), sizeof(T));
  return v;
}

}  // namespace

double HostTensor::element(std::int64_t i) const {
  switch (dtype) {
    case DType::kF32: return load<float>(data, i);
    case DType::kF16: return cpu::kernels::half_to_float(load<std::uint16_t>(data, i));
    case DType::kBF16: return cpu::kernels::bf16_to_float(load<std::uint16_t>(data, i));
    case DType::kF64: return load<double>(data, i);
    case DType::kI8: return load<std::int8_t>(data, i);
    case DType::kI16: return load<std::int16_t>(data, i);
    case DType::kI32: return load<std::int32_t>(data, i);
    case DType::kI64: return static_cast<double>(load<std::int64_t>(data, i));
    case DType::kU8: return load<std::uint8_t>(data, i);
    case DType::kBool: return load<std::uint8_t>(data, i) != 0 ? 1.0 : 0.0;
  }
  return 0.0;
}

}  // namespace kiln

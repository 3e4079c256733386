// What ships to a device: an app that links only the Kiln runtime (kiln_runtime: no export
// code, no CLI11, no JSON library; it builds in the `runtime-only` preset, -fno-exceptions).
// It loads a bundle, runs it once with inputs from .npy files (or integers, for int inputs)
// given in signature order, and prints each output and the variant that ran.
//
//   kiln_sample_deploy model.kiln ids.npy [3 ...]
//
// Size: 908,464 bytes stripped (887 KiB) in the runtime-only preset (MinSizeRel, x86-64,
// GCC 12, the Vulkan backend and its SPIR-V included; libzstd, libxxhash and libstdc++
// linked dynamically). See docs/PERFORMANCE.md.
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kiln/runtime/bundle.h"
#include "kiln/runtime/npy.h"
#include "kiln/runtime/program.h"

using namespace kiln;

namespace {

int fail(const Status& s) {
  std::fprintf(stderr, "error: %s\n", s.message().c_str());
  return exit_code(s.code());
}

// "3" or "-2" is an int input; anything else names a .npy file.
bool parse_int(const char* text, std::int64_t& value) {
  char* end = nullptr;
  errno = 0;
  value = std::strtoll(text, &end, 10);
  return *text != '\0' && *end == '\0' && errno == 0;
}

double element(const HostTensor& t, std::int64_t i) {
  const std::uint8_t* p = t.data.data();
  switch (t.dtype) {
    case DType::kF32: { float v; std::memcpy(&v, p + 4 * i, 4); return v; }
    case DType::kF64: { double v; std::memcpy(&v, p + 8 * i, 8); return v; }
    case DType::kI64: { std::int64_t v; std::memcpy(&v, p + 8 * i, 8); return static_cast<double>(v); }
    case DType::kI32: { std::int32_t v; std::memcpy(&v, p + 4 * i, 4); return v; }
    case DType::kBool:
    case DType::kU8: return p[i];
    default: return 0.0;
  }
}

void print_tensor(std::size_t index, const HostTensor& t) {
  std::printf("output %zu: %s[", index, std::string(dtype_name(t.dtype)).c_str());
  for (std::size_t d = 0; d < t.shape.size(); ++d) std::printf("%s%" PRId64, d ? ", " : "", t.shape[d]);
  std::printf("]");
  const bool printable = t.dtype == DType::kF32 || t.dtype == DType::kF64 || t.dtype == DType::kI64 ||
                         t.dtype == DType::kI32 || t.dtype == DType::kBool || t.dtype == DType::kU8;
  if (printable) {
    const std::int64_t shown = t.numel() < 6 ? t.numel() : 6;
    std::printf(" =");
    for (std::int64_t i = 0; i < shown; ++i) std::printf(" %.6g", element(t, i));
    if (shown < t.numel()) std::printf(" ... (%" PRId64 " values)", t.numel());
  }
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s BUNDLE [INPUT.npy | INT]...   (inputs in signature order)\n", argv[0]);
    return 1;
  }
  auto bundle = Bundle::open(argv[1]);
  if (!bundle.ok()) return fail(bundle.status());
  auto program = Program::load(std::move(bundle).value());
  if (!program.ok()) return fail(program.status());

  std::vector<HostValue> inputs;
  for (int i = 2; i < argc; ++i) {
    std::int64_t value = 0;
    if (parse_int(argv[i], value)) {
      inputs.push_back(HostValue::integer(value));
      continue;
    }
    auto tensor = read_npy(argv[i]);
    if (!tensor.ok()) return fail(tensor.status());
    inputs.push_back(HostValue::of(std::move(tensor).value()));
  }

  Session session(**program);
  auto result = session.run(inputs);
  if (!result.ok()) return fail(result.status());
  for (std::size_t i = 0; i < result->outputs.size(); ++i) {
    const HostValue& out = result->outputs[i];
    if (out.is_int) std::printf("output %zu: int = %" PRId64 "\n", i, out.int_value);
    else print_tensor(i, out.tensor);
  }
  std::printf("variant: %s (backend %s, peak %" PRIu64 " bytes)\n", result->variant.c_str(),
              (*program)->backend_name().c_str(), session.last_stats().peak_bytes);
  return 0;
}

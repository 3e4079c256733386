// Runs the bundle consumer_export wrote on its example batch and compares with the eager
// output it saved. Links kiln::runtime only.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "kiln/runtime/bundle.h"
#include "kiln/runtime/npy.h"
#include "kiln/runtime/program.h"

int main(int argc, char** argv) {
  if (argc != 2) return std::fprintf(stderr, "usage: %s BUNDLE.kiln\n", argv[0]), 1;
  const std::string path = argv[1];
  auto bundle = kiln::Bundle::open(path);
  if (!bundle.ok()) return std::fprintf(stderr, "%s\n", bundle.status().message().c_str()), 2;
  auto program = kiln::Program::load(std::move(bundle).value());
  if (!program.ok()) return std::fprintf(stderr, "%s\n", program.status().message().c_str()), 6;
  auto x = kiln::read_npy(path + ".x.npy");
  auto want = kiln::read_npy(path + ".want.npy");
  if (!x.ok() || !want.ok()) return std::fprintf(stderr, "cannot read the example npy files\n"), 3;
  kiln::Session session(**program);
  auto r = session.run(std::vector<kiln::HostValue>{kiln::HostValue::of(*x)});
  if (!r.ok()) return std::fprintf(stderr, "%s\n", r.status().message().c_str()), 3;
  const kiln::HostTensor& got = r->outputs[0].tensor;
  if (got.shape != want->shape || got.data.size() != want->data.size()) return std::fprintf(stderr, "shape mismatch\n"), 5;
  float max_diff = 0.0f;
  for (std::size_t i = 0; i < got.data.size() / 4; ++i) {
    float a, b;
    std::memcpy(&a, got.data.data() + 4 * i, 4);
    std::memcpy(&b, want->data.data() + 4 * i, 4);
    max_diff = std::fmax(max_diff, std::fabs(a - b));
  }
  std::printf("ran %s: f32[%lld, %lld], variant %s, max |runtime - eager| = %g\n", path.c_str(),
              static_cast<long long>(got.shape[0]), static_cast<long long>(got.shape[1]), r->variant.c_str(), max_diff);
  return max_diff <= 1e-5f ? 0 : 5;
}

// Exports relu(x @ W^T + b) with a dynamic batch to the bundle named on the command line,
// and writes an example input batch next to it (BUNDLE.x.npy) with the eager output
// (BUNDLE.want.npy) for consumer_run to compare against.
#include <cstdio>
#include <string>

#include "kiln/export/export.h"
#include "kiln/export/ops.h"
#include "kiln/runtime/npy.h"

int main(int argc, char** argv) {
  if (argc != 2) return std::fprintf(stderr, "usage: %s OUT.kiln\n", argv[0]), 1;
  const std::string path = argv[1];
  const kiln::Tensor w = kiln::Tensor::randn({3, 4}, 1), b = kiln::Tensor::randn({3}, 2);
  auto model = [&](kiln::Tensor x) { return kiln::relu(kiln::linear(x, w, b)); };
  auto ep = kiln::export_program(model, {kiln::input("x", kiln::Tensor::randn({2, 4}, 3), {kiln::Dim("batch", 1, 64)})},
                                 {.name = "tiny"});
  if (!ep.ok()) return std::fprintf(stderr, "export failed: %s\n", ep.status().message().c_str()), 7;
  if (kiln::Status s = ep->save(path); !s.ok()) return std::fprintf(stderr, "%s\n", s.message().c_str()), 8;
  const kiln::Tensor x = kiln::Tensor::randn({5, 4}, 4);
  const kiln::Tensor want = model(x);
  for (const auto& [file, t] : {std::pair{path + ".x.npy", x}, std::pair{path + ".want.npy", want}}) {
    kiln::Status s = kiln::write_npy(file, {t.dtype(), t.concrete_shape(), t.bytes()});
    if (!s.ok()) return std::fprintf(stderr, "%s\n", s.message().c_str()), 8;
  }
  std::printf("exported %s\n", path.c_str());
  return 0;
}

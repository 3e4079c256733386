// The smallest end-to-end use of Kiln: export an MLP with a dynamic batch, save it with a
// self-test, load it with the runtime and run it on a batch of 3.
//
//   kiln_sample_mlp out/mlp.kiln
#include <cstdio>

#include "../models/models.h"
#include "kiln/runtime/program.h"

using namespace kiln;

int main(int argc, char** argv) {
  const char* path = argc > 1 ? argv[1] : "mlp.kiln";
  models::Mlp model(64, 128, 10);
  auto ep = export_program([&](Tensor x) { return model(x); },
                           {input("x", Tensor::randn({4, 64}), {Dim("batch", 1, 1024)})}, {.name = "mlp"});
  if (!ep.ok()) return std::fprintf(stderr, "export failed: %s\n", ep.status().message().c_str()), exit_code(ep.status().code());
  std::printf("%s", ep->print().c_str());
  if (Status s = ep->save(path); !s.ok()) return std::fprintf(stderr, "%s\n", s.message().c_str()), exit_code(s.code());

  auto bundle = Bundle::open(path);
  if (!bundle.ok()) return std::fprintf(stderr, "%s\n", bundle.status().message().c_str()), 2;
  auto program = Program::load(std::move(bundle).value());
  if (!program.ok()) return std::fprintf(stderr, "%s\n", program.status().message().c_str()), exit_code(program.status().code());
  const Tensor x = Tensor::randn({3, 64}, 42);
  Session session(**program);
  auto result = session.run(std::vector<HostValue>{HostValue::of({x.dtype(), x.concrete_shape(), x.bytes()})});
  if (!result.ok()) return std::fprintf(stderr, "%s\n", result.status().message().c_str()), exit_code(result.status().code());
  const auto& out = result->outputs[0].tensor;
  const auto want = model(x).to_vector<float>();  // eager, for comparison
  float max_diff = 0.0f;
  for (std::size_t i = 0; i < want.size(); ++i) {
    float got;
    std::memcpy(&got, out.data.data() + 4 * i, 4);
    max_diff = std::max(max_diff, std::abs(got - want[i]));
  }
  std::printf("ran %s: output [%lld, %lld], variant %s, max |runtime - eager| = %g\n", path, static_cast<long long>(out.shape[0]),
              static_cast<long long>(out.shape[1]), result->variant.c_str(), max_diff);
  return 0;
}

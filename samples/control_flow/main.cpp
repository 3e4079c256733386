// Control flow in an exported model: a compile region shared by four residual blocks, a
// cond on the batch size, and a while_loop whose trip count is a dynamic int input.
// Exports the model, saves the bundle, runs it with the runtime for several batch sizes
// and trip counts, and compares every output with eager execution of the same code.
//
//   kiln_sample_control_flow out/control_flow.kiln
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kiln/export/export.h"
#include "kiln/export/module.h"
#include "kiln/export/ops.h"
#include "kiln/runtime/program.h"

using namespace kiln;

struct Block : Module {
  Tensor weight, bias;
  explicit Block(std::uint64_t seed) {
    weight = register_parameter("weight", Tensor::randn({16, 16}, seed) * 0.25);
    bias = register_parameter("bias", Tensor::randn({16}, seed + 1) * 0.1);
  }
};

struct Model : Module {
  std::vector<std::unique_ptr<Block>> blocks;
  Block head{99};

  Model() {
    for (int i = 0; i < 4; ++i) {
      blocks.push_back(std::make_unique<Block>(static_cast<std::uint64_t>(10 * i + 1)));
      register_module("blocks." + std::to_string(i), *blocks.back());
    }
    register_module("head", head);
  }

  // x: [batch, 16]; n: how many refinement steps the loop runs.
  std::tuple<Tensor, SymInt> operator()(Tensor x, SymInt n) const {
    // One subgraph, called once per block with that block's weights.
    CompileRegion residual("residual", [](Tensor h, Tensor w, Tensor b) { return h + tanh(linear(h, w, b)); });
    for (const auto& block : blocks) x = residual(x, block->weight, block->bias);

    // Large batches are normalized; small ones only scaled. Symbolic: both branches are kept.
    x = cond(x.size(0) > 4, [](Tensor h) { return layer_norm(h, 1); }, [](Tensor h) { return h * 0.5; }, {x});

    // Refine n times with the head's weights (captured: lifted to loop inputs).
    auto [steps, y] = while_loop([&](SymInt i, Tensor) { return i < n; },
                                 [&](SymInt i, Tensor h) { return std::make_tuple(i + 1, h + 0.1 * sigmoid(linear(h, head.weight))); },
                                 {SymInt(0), x});
    return {y, steps};
  }
};

HostValue host(const Tensor& t) { return HostValue::of({t.dtype(), t.concrete_shape(), t.bytes()}); }

int main(int argc, char** argv) {
  const char* path = argc > 1 ? argv[1] : "control_flow.kiln";
  Model model;
  auto ep = export_program([&](Tensor x, SymInt n) { return model(x, n); },
                           {input("x", Tensor::randn({8, 16}), {Dim("batch", 1, 64)}), int_input("n", 3, Dim::DYNAMIC)},
                           {.name = "control_flow"});
  if (!ep.ok()) return std::fprintf(stderr, "export failed: %s\n", ep.status().message().c_str()), exit_code(ep.status().code());
  std::printf("%s", ep->print().c_str());
  if (Status s = ep->save(path); !s.ok()) return std::fprintf(stderr, "%s\n", s.message().c_str()), exit_code(s.code());

  std::printf("saved %s: %zu graphs (main, the region once, two cond branches, loop cond and body)\n", path,
              ep->program().graphs.size());
  auto bundle = Bundle::open(path);
  if (!bundle.ok()) return std::fprintf(stderr, "%s\n", bundle.status().message().c_str()), 2;
  auto program = Program::load(std::move(bundle).value());
  if (!program.ok()) return std::fprintf(stderr, "%s\n", program.status().message().c_str()), exit_code(program.status().code());
  Session session(**program);

  float worst = 0.0f;
  for (std::int64_t batch : {2, 8}) {
    for (std::int64_t n : {0, 3, 10}) {
      const Tensor x = Tensor::randn({batch, 16}, static_cast<std::uint64_t>(100 * batch + n));
      auto result = session.run(std::vector<HostValue>{host(x), HostValue::integer(n)});
      if (!result.ok()) return std::fprintf(stderr, "%s\n", result.status().message().c_str()), exit_code(result.status().code());
      const auto [want, want_steps] = model(x, SymInt(n));  // eager: the same code, no trace
      const auto w = want.to_vector<float>();
      const auto& got = result->outputs[0].tensor;
      float diff = 0.0f;
      for (std::size_t i = 0; i < w.size(); ++i) {
        float g;
        std::memcpy(&g, got.data.data() + 4 * i, 4);
        diff = std::max(diff, std::abs(g - w[i]));
      }
      worst = std::max(worst, diff);
      std::printf("batch %lld, n %lld: %s branch, %lld loop steps, max |runtime - eager| = %g\n", static_cast<long long>(batch),
                  static_cast<long long>(n), batch > 4 ? "layer_norm" : "scale", static_cast<long long>(result->outputs[1].int_value),
                  diff);
      if (result->outputs[1].int_value != *want_steps.maybe_int()) return std::fprintf(stderr, "loop count differs\n"), 1;
    }
  }
  return worst < 1e-4f ? 0 : 1;
}

// A small CNN (conv, batch norm in eval mode, relu, max pooling, a residual block, global
// average pooling, a linear head) exported with a dynamic batch and a derived image size
// H = W = 32*h: any multiple of 32 from 32 to 128 px. The bundle runs batch 1 and 3 at 32
// and 64 px (compared with eager execution of the same code); 40 px is rejected by the
// runtime with a message naming the input, the dim and the constraint.
//
//   kiln_sample_convnet out/convnet.kiln
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "../models/models.h"
#include "kiln/runtime/program.h"

using namespace kiln;

namespace {

// Conv -> BatchNorm (running statistics, i.e. eval mode).
struct ConvBn : Module {
  Tensor weight, gamma, beta, mean, var;
  ConvBn(std::int64_t in, std::int64_t out, std::uint64_t seed) {
    weight = register_parameter("weight", models::scaled_randn({out, in, 3, 3}, seed, 1.0f / std::sqrt(9.0f * in)));
    gamma = register_parameter("bn.weight", models::scaled_randn({out}, seed + 1, 0.1f) + 1.0);
    beta = register_parameter("bn.bias", models::scaled_randn({out}, seed + 2, 0.1f));
    mean = register_parameter("bn.running_mean", models::scaled_randn({out}, seed + 3, 0.1f));
    var = register_parameter("bn.running_var", abs(models::scaled_randn({out}, seed + 4, 0.2f)) + 1.0);
  }
  Tensor operator()(const Tensor& x) const {
    ModuleScope scope(*this);
    return batch_norm(conv2d(x, weight, Tensor(), {1, 1}, {1, 1}), gamma, beta, mean, var);
  }
};

struct ConvNet : Module {
  ConvBn stem{3, 16, 1}, a{16, 16, 10}, b{16, 16, 20};
  models::Linear head{16, 10, 30};
  ConvNet() {
    register_module("stem", stem);
    register_module("block.a", a);
    register_module("block.b", b);
    register_module("head", head);
  }
  // x: f32[batch, 3, 32*h, 32*h] -> logits f32[batch, 10]
  Tensor operator()(const Tensor& x) const {
    Tensor y = max_pool2d(relu(stem(x)), {2, 2});   // [batch, 16, 16*h, 16*h]
    y = relu(y + b(relu(a(y))));                      // residual block
    y = adaptive_avg_pool2d(y, {1, 1});               // [batch, 16, 1, 1]
    return head(flatten(y, 1));
  }
};

HostValue host(const Tensor& t) { return HostValue::of({t.dtype(), t.concrete_shape(), t.bytes()}); }

}  // namespace

int main(int argc, char** argv) {
  const char* path = argc > 1 ? argv[1] : "convnet.kiln";
  ConvNet model;
  Dim batch("batch", 1, 16), h("h", 1, 4);
  auto ep = export_program([&](Tensor x) { return model(x); },
                           {input("x", Tensor::randn({2, 3, 64, 64}, 7), {batch, Dim::STATIC, 32 * h, 32 * h})},
                           {.name = "convnet"});
  if (!ep.ok()) return std::fprintf(stderr, "export failed: %s\n", ep.status().message().c_str()), exit_code(ep.status().code());
  std::printf("%s\n", ep->print().c_str());
  if (Status s = ep->save(path); !s.ok()) return std::fprintf(stderr, "%s\n", s.message().c_str()), exit_code(s.code());
  std::printf("wrote %s\n\n", path);

  auto bundle = Bundle::open(path);
  if (!bundle.ok()) return std::fprintf(stderr, "%s\n", bundle.status().message().c_str()), 2;
  auto program = Program::load(std::move(bundle).value());
  if (!program.ok()) return std::fprintf(stderr, "%s\n", program.status().message().c_str()), exit_code(program.status().code());
  Session session(**program);

  std::printf("%-6s %-6s %-12s %s\n", "batch", "pixels", "logits", "max |runtime - eager|");
  for (std::int64_t n : {1, 3}) {
    for (std::int64_t px : {32, 64}) {
      const Tensor x = Tensor::randn({n, 3, px, px}, static_cast<std::uint64_t>(100 * n + px));
      auto r = session.run(std::vector<HostValue>{host(x)});
      if (!r.ok()) return std::fprintf(stderr, "run failed: %s\n", r.status().message().c_str()), exit_code(r.status().code());
      const HostTensor& out = r->outputs[0].tensor;
      const std::vector<float> want = model(x).to_vector<float>();
      float diff = 0.0f;
      for (std::size_t i = 0; i < want.size(); ++i) {
        float got;
        std::memcpy(&got, out.data.data() + 4 * i, 4);
        diff = std::max(diff, std::abs(got - want[i]));
      }
      std::printf("%-6lld %-6lld [%lld, %lld]%4s %g\n", static_cast<long long>(n), static_cast<long long>(px),
                  static_cast<long long>(out.shape[0]), static_cast<long long>(out.shape[1]), "", diff);
      if (diff > 1e-3f) return std::fprintf(stderr, "runtime and eager disagree\n"), 5;
    }
  }

  // 40 px is not 32*h for any integer h: the runtime refuses it before running anything.
  auto bad = session.run(std::vector<HostValue>{host(Tensor::randn({1, 3, 40, 40}, 1))});
  if (bad.ok()) return std::fprintf(stderr, "40 px was accepted\n"), 1;
  std::printf("\n40 px rejected (%s): %s\n", std::string(status_code_name(bad.status().code())).c_str(),
              bad.status().message().c_str());
  return 0;
}

// Models shared by the control-flow export tests and their end-to-end runs.
#pragma once

#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "kiln/export/export.h"
#include "kiln/export/module.h"
#include "kiln/export/ops.h"

namespace kiln::cf_models {

// SEMANTICS.md case 4: branches returning 6 and 2 elements.
inline Tensor case4_model(Tensor x) {
  return cond(gt(sum(x), 0.0), [](Tensor v) { return sin(v); }, [](Tensor v) { return cos(slice(v, 0, 0, 2)); }, {x});
}

// PyTorch's cond_dyn fixture: a symbolic predicate and a module's parameters used in a branch.
struct Affine : Module {
  Tensor weight, bias;
  explicit Affine(int n, std::uint64_t seed = 1) {
    weight = register_parameter("weight", Tensor::randn({n, n}, seed));
    bias = register_parameter("bias", Tensor::randn({n}, seed + 100));
  }
  Tensor operator()(const Tensor& x) const {
    ModuleScope scope(*this);
    return linear(x, weight, bias);
  }
};

struct CondDyn : Module {
  Affine l{8};
  CondDyn() { register_module("l", l); }
  Tensor operator()(const Tensor& x, const Tensor& y) const {
    return cond(x.size(0) > 4, [&](Tensor a, Tensor b) { return l(a) + sum(b); },
                [&](Tensor a, Tensor b) { return a * 2.0 - mean(b); }, {x, y});
  }
};

// PyTorch's while_loop fixture: an int and a tensor carry.
inline auto loop_model(Tensor x) {
  return while_loop([](SymInt i, Tensor) { return i < 5; },
                    [](SymInt i, Tensor v) { return std::make_tuple(i + 1, v * 1.5 + 1.0); }, {SymInt(0), x});
}

// A cond inside a cond branch, using y (captured from the entry graph, two levels up) and n.
inline Tensor nested_model(Tensor x, Tensor y, SymInt n) {
  return cond(gt(sum(x), 0.0),
              [&](Tensor a) {
                return cond(gt(sum(a), 1.0), [&](Tensor b) { return b + y * 2.0 + full({n}, 1.0).sum(); },
                            [&](Tensor b) { return b - y; }, {a});
              },
              [&](Tensor a) { return a * 3.0; }, {x});
}

struct Layer : Module {
  Affine fc;
  explicit Layer(std::uint64_t seed) : fc(16, seed) { register_module("fc", fc); }
};

struct Stack : Module {
  std::vector<std::unique_ptr<Layer>> layers;
  explicit Stack(int n) {
    for (int i = 0; i < n; ++i) {
      layers.push_back(std::make_unique<Layer>(static_cast<std::uint64_t>(i + 1)));
      register_module("layers." + std::to_string(i), *layers.back());
    }
  }
};

// Each layer's weights are captured by the region's function and lifted to subgraph inputs.
inline Tensor run_stack(const Stack& s, Tensor x, int calls, bool use_region) {
  auto body = [](Tensor h, Tensor w, Tensor b) {
    Tensor y = tanh(linear(h, w, b));
    y = y * sigmoid(y) + h;
    return layer_norm(y, 1) * 0.5 + relu(y) * 0.5;
  };
  CompileRegion block("block", body);
  for (int i = 0; i < calls; ++i) {
    const Affine& fc = s.layers[static_cast<std::size_t>(i) % s.layers.size()]->fc;
    x = use_region ? block(x, fc.weight, fc.bias) : body(x, fc.weight, fc.bias);
  }
  return x;
}

// The size of the serialized program (the FlatBuffer): the file itself is padded to
// 4096-byte segment boundaries.
}  // namespace kiln::cf_models

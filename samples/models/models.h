// Small real models written with Kiln's export API: the architectures of the PyTorch
// fixtures (../shared/fixtures/torch_export/{mlp,decoder}). Used by samples, tests and
// benchmarks. Weights are deterministic pseudo-random (or loaded by the caller).
#pragma once

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "kiln/export/export.h"
#include "kiln/export/module.h"
#include "kiln/export/ops.h"

namespace kiln::models {

inline Tensor scaled_randn(std::vector<std::int64_t> shape, std::uint64_t seed, float scale) {
  Tensor t = Tensor::randn(shape, seed);
  std::vector<float> v = t.to_vector<float>();
  for (float& x : v) x *= scale;
  return Tensor::from_floats(std::move(shape), v);
}

inline Tensor filled(std::vector<std::int64_t> shape, float value) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return Tensor::from_floats(std::move(shape), std::vector<float>(static_cast<std::size_t>(n), value));
}

struct Linear : Module {
  Tensor weight, bias;
  Linear(std::int64_t in, std::int64_t out, std::uint64_t seed, bool with_bias = true) {
    const float scale = 1.0f / std::sqrt(static_cast<float>(in));
    weight = register_parameter("weight", scaled_randn({out, in}, seed, scale));
    if (with_bias) bias = register_parameter("bias", scaled_randn({out}, seed + 1, scale));
  }
  Tensor operator()(const Tensor& x) const {
    ModuleScope scope(*this);
    return linear(x, weight, bias);
  }
};

struct LayerNorm : Module {
  Tensor weight, bias;
  explicit LayerNorm(std::int64_t d) {
    weight = register_parameter("weight", filled({d}, 1.0f));
    bias = register_parameter("bias", filled({d}, 0.0f));
  }
  Tensor operator()(const Tensor& x) const {
    ModuleScope scope(*this);
    return layer_norm(x, 1, weight, bias, 1e-5);
  }
};

struct Embedding : Module {
  Tensor weight;
  Embedding(std::int64_t n, std::int64_t d, std::uint64_t seed) { weight = register_parameter("weight", Tensor::randn({n, d}, seed)); }
  Tensor operator()(const Tensor& ids) const {
    ModuleScope scope(*this);
    return embedding(weight, ids);
  }
};

/// Linear-ReLU-Linear (fixture `mlp`).
struct Mlp : Module {
  Linear fc1, fc2;
  Mlp(std::int64_t in = 64, std::int64_t hidden = 128, std::int64_t out = 10) : fc1(in, hidden, 1), fc2(hidden, out, 3) {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
  }
  Tensor operator()(const Tensor& x) const { return fc2(relu(fc1(x))); }
};

/// Causal multi-head self-attention (fixture `decoder`'s Attn).
struct Attention : Module {
  std::int64_t heads;
  Linear qkv, o;
  Attention(std::int64_t d, std::int64_t h, std::uint64_t seed) : heads(h), qkv(d, 3 * d, seed), o(d, d, seed + 2) {
    register_module("qkv", qkv);
    register_module("o", o);
  }
  Tensor operator()(const Tensor& x) const {
    ModuleScope scope(*this);
    const SymInt b = x.size(0), t = x.size(1), d = x.size(2);
    const std::int64_t hd = *d.maybe_int() / heads;
    auto parts = split(qkv(x), {d, d, d}, -1);
    auto heads_of = [&](const Tensor& y) { return y.view({b, t, heads, hd}).transpose(1, 2); };
    const Tensor q = heads_of(parts[0]), k = heads_of(parts[1]), v = heads_of(parts[2]);
    Tensor a = matmul(q, k.transpose(-1, -2)) / std::sqrt(static_cast<double>(hd));
    const Tensor mask = tril(ones({t, t}, DType::kBool));
    a = softmax(masked_fill(a, logical_not(mask), -INFINITY), -1);
    return o(matmul(a, v).transpose(1, 2).reshape({b, t, d}));
  }
};

struct FeedForward : Module {
  Linear up, down;
  FeedForward(std::int64_t d, std::uint64_t seed) : up(d, 4 * d, seed), down(4 * d, d, seed + 2) {
    register_module("0", up);
    register_module("2", down);
  }
  Tensor operator()(const Tensor& x) const { return down(gelu(up(x))); }
};

/// GPT-style decoder (fixture `decoder`): token + position embeddings, pre-norm blocks.
struct Decoder : Module {
  std::int64_t layers;
  Embedding emb, pos;
  std::vector<std::unique_ptr<LayerNorm>> ln1, ln2;
  std::vector<std::unique_ptr<Attention>> att;
  std::vector<std::unique_ptr<FeedForward>> mlp;
  LayerNorm lnf;
  Linear out;

  Decoder(std::int64_t vocab = 256, std::int64_t d = 64, std::int64_t n_layers = 2, std::int64_t heads = 4, std::int64_t max_seq = 128)
      : layers(n_layers), emb(vocab, d, 11), pos(max_seq, d, 12), lnf(d), out(d, vocab, 13, /*with_bias=*/false) {
    register_module("emb", emb);
    register_module("pos", pos);
    for (std::int64_t i = 0; i < n_layers; ++i) {
      const std::string k = std::to_string(i);
      ln1.push_back(std::make_unique<LayerNorm>(d));
      att.push_back(std::make_unique<Attention>(d, heads, 100 + 10 * static_cast<std::uint64_t>(i)));
      ln2.push_back(std::make_unique<LayerNorm>(d));
      mlp.push_back(std::make_unique<FeedForward>(d, 105 + 10 * static_cast<std::uint64_t>(i)));
      register_module("ln1." + k, *ln1.back());
      register_module("att." + k, *att.back());
      register_module("ln2." + k, *ln2.back());
      register_module("mlp." + k, *mlp.back());
    }
    register_module("lnf", lnf);
    register_module("out", out);
  }

  Tensor operator()(const Tensor& ids) const {
    Tensor x = emb(ids) + pos(arange(ids.size(1)));
    for (std::int64_t i = 0; i < layers; ++i) {
      const auto k = static_cast<std::size_t>(i);
      x = x + (*att[k])((*ln1[k])(x));
      x = x + (*mlp[k])((*ln2[k])(x));
    }
    return out(lnf(x));
  }
};

}  // namespace kiln::models

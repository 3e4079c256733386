// A GPT-style decoder with a KV cache, written with Kiln's export API: the model of
// samples/kv_decode, bench/kv_decode_bench.cpp, tests/export/state_test.cpp (PyTorch:
// bench/kv_decoder_torch.py); its weights directory (in and out): kv_decoder_weights.h.
//
// Two forwards over the same weights:
//  * step(ids [1, seq], pos): the cached decoder. Each attention layer keeps its keys and
//    values in state buffers k_cache [1, heads, head_dim, max_ctx] (transposed: the slice
//    of the first pos + seq positions is q k^T's right operand as it is, no transpose copy)
//    and v_cache [1, heads, max_ctx, head_dim]; a call writes positions [pos, pos + seq)
//    (slice_scatter_) and attends over [0, pos + seq).
//    Prefill is step(prompt, 0); decoding is step(last token, n). pos + seq <= max_ctx is
//    a runtime assert of the exported program.
//  * full(ids [1, seq]): no cache, causal attention over the whole sequence: what a
//    stateless program recomputes on every decoding step.
// Pre-norm blocks (LayerNorm, attention, LayerNorm, GELU MLP), learned positions, untied
// output projection without bias.
#pragma once

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "models.h"

namespace kiln::models {

struct KvDecoderConfig {
  std::int64_t vocab = 256;
  std::int64_t d = 256;
  std::int64_t layers = 4;
  std::int64_t heads = 4;
  std::int64_t max_ctx = 1024;
};

struct CachedAttention : Module {
  std::int64_t heads, head_dim;
  Linear qkv, o;
  Tensor k_cache, v_cache;

  CachedAttention(const KvDecoderConfig& c, std::uint64_t seed)
      : heads(c.heads), head_dim(c.d / c.heads), qkv(c.d, 3 * c.d, seed), o(c.d, c.d, seed + 2) {
    register_module("qkv", qkv);
    register_module("o", o);
    k_cache = register_buffer("k_cache", zeros({1, heads, head_dim, c.max_ctx}), {.state = true});
    v_cache = register_buffer("v_cache", zeros({1, heads, c.max_ctx, head_dim}), {.state = true});
  }

  // x [1, t, d] -> q, k, v [1, heads, t, head_dim]
  std::vector<Tensor> project(const Tensor& x) const {
    const SymInt t = x.size(1), d = x.size(2);
    std::vector<Tensor> parts = split(qkv(x), {d, d, d}, -1);
    for (Tensor& p : parts) p = p.view({1, t, heads, head_dim}).transpose(1, 2);
    return parts;
  }

  // softmax(q k^T / sqrt(hd), masked where !allowed) v, back to [1, t, d]; kt = k^T.
  Tensor attend(const Tensor& q, const Tensor& kt, const Tensor& v, const Tensor& allowed) const {
    Tensor a = matmul(q, kt) / std::sqrt(static_cast<double>(head_dim));
    a = softmax(masked_fill(a, logical_not(allowed), -INFINITY), -1);
    return o(matmul(a, v).transpose(1, 2).reshape({1, q.size(2), heads * head_dim}));
  }

  Tensor step(const Tensor& x, const SymInt& pos) {
    ModuleScope scope(*this);
    const SymInt t = x.size(1);
    std::vector<Tensor> qkv_ = project(x);
    k_cache.slice_scatter_(qkv_[1].transpose(-1, -2), 3, pos, pos + t);
    v_cache.slice_scatter_(qkv_[2], 2, pos, pos + t);
    const Tensor keys_t = k_cache.slice(3, 0, pos + t), values = v_cache.slice(2, 0, pos + t);
    // Query i (position pos + i) sees key j when j <= pos + i.
    const Tensor allowed = le(arange(pos + t).unsqueeze(0), arange(pos, pos + t).unsqueeze(1));
    return attend(qkv_[0], keys_t, values, allowed);
  }

  Tensor full(const Tensor& x) const {
    ModuleScope scope(*this);
    const SymInt t = x.size(1);
    std::vector<Tensor> qkv_ = project(x);
    return attend(qkv_[0], qkv_[1].transpose(-1, -2), qkv_[2], tril(ones({t, t}, DType::kBool)));
  }
};

struct KvDecoder : Module {
  KvDecoderConfig config;
  Embedding emb, pos_emb;
  std::vector<std::unique_ptr<LayerNorm>> ln1, ln2;
  std::vector<std::unique_ptr<CachedAttention>> att;
  std::vector<std::unique_ptr<FeedForward>> mlp;
  LayerNorm lnf;
  Linear out;

  explicit KvDecoder(const KvDecoderConfig& c = {})
      : config(c), emb(c.vocab, c.d, 11), pos_emb(c.max_ctx, c.d, 12), lnf(c.d), out(c.d, c.vocab, 13, /*with_bias=*/false) {
    register_module("emb", emb);
    register_module("pos", pos_emb);
    for (std::int64_t i = 0; i < c.layers; ++i) {
      const std::string k = std::to_string(i);
      ln1.push_back(std::make_unique<LayerNorm>(c.d));
      att.push_back(std::make_unique<CachedAttention>(c, 100 + 10 * static_cast<std::uint64_t>(i)));
      ln2.push_back(std::make_unique<LayerNorm>(c.d));
      mlp.push_back(std::make_unique<FeedForward>(c.d, 105 + 10 * static_cast<std::uint64_t>(i)));
      register_module("ln1." + k, *ln1.back());
      register_module("att." + k, *att.back());
      register_module("ln2." + k, *ln2.back());
      register_module("mlp." + k, *mlp.back());
    }
    register_module("lnf", lnf);
    register_module("out", out);
  }

  /// Logits [1, seq, vocab] of tokens at positions [pos, pos + seq), updating the caches.
  Tensor step(const Tensor& ids, const SymInt& pos) {
    Tensor x = emb(ids) + pos_emb(arange(pos, pos + ids.size(1)));
    for (std::size_t k = 0; k < att.size(); ++k) {
      x = x + att[k]->step((*ln1[k])(x), pos);
      x = x + (*mlp[k])((*ln2[k])(x));
    }
    return out(lnf(x));
  }

  /// Logits [1, seq, vocab] of tokens at positions [0, seq), without the caches.
  Tensor full(const Tensor& ids) const {
    Tensor x = emb(ids) + pos_emb(arange(ids.size(1)));
    for (std::size_t k = 0; k < att.size(); ++k) {
      x = x + att[k]->full((*ln1[k])(x));
      x = x + (*mlp[k])((*ln2[k])(x));
    }
    return out(lnf(x));
  }
};

}  // namespace kiln::models

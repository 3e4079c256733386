"""samples/models/kv_decoder.h in PyTorch, and its weights directory format.

The model: GPT-style, pre-norm blocks (LayerNorm, attention, LayerNorm, GELU MLP), learned
positions, untied output projection without bias. Two forwards over the same weights, as
in the C++ model:
  * forward(ids [1, t], pos): the cached decoder. Each attention layer keeps k_cache /
    v_cache buffers [1, heads, max_ctx, head_dim] and writes them in place
    (`cache[:, :, pos:pos + t] = k`), as gpt-fast-style decoders do (Kiln's model keeps its
    keys transposed, where PyTorch's `keys.transpose(-1, -2)` is a free view; the results
    are the same).
  * full(ids [batch, t]): no cache, causal attention over positions [0, t): for training.

The weights directory (`kiln_sample_kv_decode ... --weights-out DIR` writes it,
`--weights-in DIR` reads it): DIR/<parameter>.npy (f32, C order, PyTorch's names and
shapes: `emb.weight`, `att.0.qkv.weight`, `mlp.0.2.bias`, ...; no caches) and
DIR/config.txt (`key value` lines: vocab, d, layers, heads, max_ctx, optionally prompt).
Used by bench/compare_kv_decode.py and bench/train_kv_decoder.py.
"""
import math
import os

import numpy as np
import torch
import torch.nn as nn

CONFIG_KEYS = ("vocab", "d", "layers", "heads", "max_ctx")


class Attention(nn.Module):
    def __init__(self, d, heads, max_ctx):
        super().__init__()
        self.heads, self.hd = heads, d // heads
        self.qkv, self.o = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.register_buffer("k_cache", torch.zeros(1, heads, max_ctx, self.hd))
        self.register_buffer("v_cache", torch.zeros(1, heads, max_ctx, self.hd))

    def _split(self, x):
        b, t, d = x.shape
        return (p.view(b, t, self.heads, self.hd).transpose(1, 2) for p in self.qkv(x).split(d, -1))

    def _attend(self, q, keys, values, allowed):
        a = q @ keys.transpose(-1, -2) / math.sqrt(self.hd)
        a = a.masked_fill(~allowed, float("-inf")).softmax(-1)
        b, _, t, _ = q.shape
        return self.o((a @ values).transpose(1, 2).reshape(b, t, self.heads * self.hd))

    def forward(self, x, pos):
        t = x.shape[1]
        q, k, v = self._split(x)
        self.k_cache[:, :, pos:pos + t] = k
        self.v_cache[:, :, pos:pos + t] = v
        keys, values = self.k_cache[:, :, :pos + t], self.v_cache[:, :, :pos + t]
        allowed = torch.arange(pos + t)[None, :] <= torch.arange(pos, pos + t)[:, None]
        return self._attend(q, keys, values, allowed)

    def full(self, x):
        t = x.shape[1]
        q, k, v = self._split(x)
        return self._attend(q, k, v, torch.ones(t, t, dtype=torch.bool).tril())


class KvDecoder(nn.Module):
    def __init__(self, vocab, d, layers, heads, max_ctx, **_):
        super().__init__()
        self.emb, self.pos = nn.Embedding(vocab, d), nn.Embedding(max_ctx, d)
        self.ln1 = nn.ModuleList(nn.LayerNorm(d) for _ in range(layers))
        self.att = nn.ModuleList(Attention(d, heads, max_ctx) for _ in range(layers))
        self.ln2 = nn.ModuleList(nn.LayerNorm(d) for _ in range(layers))
        self.mlp = nn.ModuleList(nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d)) for _ in range(layers))
        self.lnf, self.out = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)

    def _blocks(self, x, attend):
        for ln1, att, ln2, mlp in zip(self.ln1, self.att, self.ln2, self.mlp):
            x = x + attend(att, ln1(x))
            x = x + mlp(ln2(x))
        return self.out(self.lnf(x))

    def forward(self, ids, pos):
        x = self.emb(ids) + self.pos(torch.arange(pos, pos + ids.shape[1]))
        return self._blocks(x, lambda att, h: att(h, pos))

    def full(self, ids):
        x = self.emb(ids) + self.pos(torch.arange(ids.shape[1]))
        return self._blocks(x, lambda att, h: att.full(h))

    def reset(self):
        for att in self.att:
            att.k_cache.zero_()
            att.v_cache.zero_()


def read_config(weights_dir):
    cfg = {}
    for line in open(os.path.join(weights_dir, "config.txt")):
        key, value = line.split()
        cfg[key] = int(value)
    return cfg


def load_model(weights_dir):
    """KvDecoder of DIR/config.txt with DIR's weights (eval mode), and the config."""
    cfg = read_config(weights_dir)
    model = KvDecoder(**cfg).eval()
    state = {f[:-4]: torch.from_numpy(np.load(os.path.join(weights_dir, f)))
             for f in os.listdir(weights_dir) if f.endswith(".npy") and f[:-4] in model.state_dict()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and all(k.endswith("_cache") for k in missing), (missing, unexpected)
    return model, cfg


def save_model(model, cfg, weights_dir):
    """Writes DIR/<parameter>.npy (f32, no caches) and DIR/config.txt, as --weights-out does."""
    os.makedirs(weights_dir, exist_ok=True)
    for name, value in model.state_dict().items():
        if not name.endswith("_cache"):
            np.save(os.path.join(weights_dir, name + ".npy"), value.detach().numpy().astype(np.float32))
    with open(os.path.join(weights_dir, "config.txt"), "w") as f:
        f.writelines(f"{key} {cfg[key]}\n" for key in CONFIG_KEYS)

"""What calibrated int4 quantization would give the trained KV decoder (issue 17), emulated
in PyTorch 1.13 before building it into `kiln quantize`.

The model: tests/fixtures/kv_decoder_trained (bench/train_kv_decoder.py). Every linear
layer but the head goes to int4, group 32, symmetric, with `kiln quantize`'s scale search
(cli/quantize.cpp fit_group: shrink 1.0 .. 0.72, both signs of the extreme, least-squares
refit, f16 scales); the head to int8 per channel, as the default. Activations stay f32.
Calibration: 4 KiB of GPL-3 (training text); evaluation: four 128-byte windows of the
held-out Apache-2.0 text, positions 16..127 (448 predictions), teacher-forced, against f32:
argmax agreement and KL(p_f32 || p_q). Three ways:
  * plain:    the scale search as kiln quantize does it;
  * weighted: the same search minimizing sum_j E[x_j^2] (w_j - q_j)^2 (activation-aware
              scales, the input channels' second moments from the calibration text);
  * gptq:     GPTQ (Frantar et al. 2022): columns quantized in order, each one's error
              spread over the columns not yet quantized through the Cholesky factor of the
              inverse of H = E[x x^T] (1 % damping), group scales fitted when a group starts.
Measured 2026-11-28: plain 90.4 % / 0.0343 nats, weighted 90.2 % / 0.0347, gptq 96.0 % /
0.0112 (with one 128-byte calibration window instead of 32: gptq 93.1 % / 0.0308).
GPTQ is now built: `kiln quantize --calibrate DIR` (cli/quantize_math.cpp; measured in
tests/cli/quantize_decode_test.cpp, docs/QUANTIZATION.md). Run: /usr/bin/python3 bench/gptq_emulate.py (about a minute).
"""
import os
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from kv_decoder_torch import load_model  # noqa: E402

LICENSES = "/usr/share/common-licenses"
WINDOW = 128


def text(name, limit=None):
    data = open(os.path.join(LICENSES, name), "rb").read()[:limit]
    return np.frombuffer(data, dtype=np.uint8).astype(np.int64)


model, _ = load_model(os.path.join(HERE, "..", "tests", "fixtures", "kv_decoder_trained"))
held = text("Apache-2.0")
calib = text("GPL-3", 4096)
linears = {n: mod for n, mod in model.named_modules() if isinstance(mod, torch.nn.Linear) and n != "out"}
original = {n: p.detach().clone() for n, p in model.named_parameters()}

# Every linear's inputs over the calibration text (f32 weights): rows of X.
inputs = {n: [] for n in linears}
hooks = [mod.register_forward_hook(lambda mod, inp, out, n=n: inputs[n].append(inp[0].reshape(-1, inp[0].shape[-1]).double()))
         for n, mod in linears.items()]
with torch.no_grad():
    for s in range(0, len(calib) - WINDOW, WINDOW):
        model.full(torch.tensor(calib[s:s + WINDOW]).view(1, -1))
for h in hooks:
    h.remove()
X = {n: torch.cat(rows) for n, rows in inputs.items()}
second_moments = {n: (x * x).mean(0).numpy() for n, x in X.items()}


def levels(v, scale):
    """Symmetric int4 levels (-8..7) of v for `scale`, rounding half away from zero."""
    inv = 1.0 / scale if scale != 0 else 0.0
    return np.clip(np.floor(np.abs(v * inv) + 0.5) * np.sign(v * inv) + 8, 0, 15) - 8


def fit_group(v, h):
    """kiln quantize's int4 scale search for one group, its squared error weighted by h."""
    extreme = v[np.argmax(np.abs(v))]
    best = extreme / -8.0
    if best == 0:
        return 0.0

    def error(scale):
        q = levels(v, scale)
        d = v - q * scale
        return (h * d * d).sum(), q

    best_err, _ = error(best)
    for flip in (0, 1):
        for step in range(8):
            scale = extreme * (1 - 0.04 * step) / (7.0 if flip else -8.0)
            err, q = error(scale)
            if err < best_err:
                best_err, best = err, scale
            qq = (h * q * q).sum()
            refit = (h * v * q).sum() / qq if qq != 0 else 0.0
            if refit != 0:
                err, _ = error(refit)
                if err < best_err:
                    best_err, best = err, refit
    return np.float32(np.float16(best))


def quantize(w, h, group=32):
    out = w.copy()
    for r in range(w.shape[0]):
        for c0 in range(0, w.shape[1], group):
            v = w[r, c0:c0 + group]
            scale = fit_group(v, h[c0:c0 + group])
            out[r, c0:c0 + group] = levels(v, scale) * scale
    return out


def gptq(w, x, group=32, damp=0.01):
    """GPTQ: columns in order, each one's rounding error spread over the later columns."""
    W = torch.tensor(w, dtype=torch.float64).clone()
    H = x.T @ x / x.shape[0]
    H += damp * H.diag().mean() * torch.eye(H.shape[0], dtype=torch.float64)
    Hinv = torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(H)), upper=True)
    Q = torch.zeros_like(W)
    ones = np.ones(group)
    for i in range(W.shape[1]):
        if i % group == 0:  # the group's scales from the weights as updated so far
            block = W[:, i:i + group].numpy().astype(np.float32)
            scales = np.array([fit_group(block[r], ones) for r in range(W.shape[0])])
        wi = W[:, i].numpy()
        Q[:, i] = torch.tensor(np.array([levels(wi[r], scales[r]) * scales[r] for r in range(len(wi))]))
        err = (W[:, i] - Q[:, i]) / Hinv[i, i]
        W[:, i + 1:] -= err.unsqueeze(1) * Hinv[i, i + 1:].unsqueeze(0)
    return Q.numpy().astype(np.float32)


def next_token_probs():
    probs = []
    with torch.no_grad():
        for s in (0, 1000, 2000, 3000):
            logits = model.full(torch.tensor(held[s:s + WINDOW]).view(1, -1))[0, 16:]
            probs.append(torch.softmax(logits.double(), -1))
    return torch.cat(probs)


def report(label, quantized):
    """Loads `quantized` (name -> int4 weight) and the int8 head, compares with f32."""
    with torch.no_grad():
        for n, mod in linears.items():
            mod.weight.copy_(torch.tensor(quantized[n]))
        head = original["out.weight"].numpy()
        s = np.abs(head).max(1, keepdims=True) / 127.0
        model.out.weight.copy_(torch.tensor(np.round(head / s) * s))
    q = next_token_probs()
    agree = (q.argmax(-1) == p32.argmax(-1)).double().mean().item()
    kl = (p32 * (p32.clamp_min(1e-30).log() - q.clamp_min(1e-30).log())).sum(-1).mean().item()
    print(f"{label:9} teacher-forced agreement {agree * 100:.1f}%  KL {kl:.4f}")


p32 = next_token_probs()
weights = {n: original[n + ".weight"].numpy().astype(np.float32) for n in linears}
report("plain", {n: quantize(w, np.ones(w.shape[1])) for n, w in weights.items()})
report("weighted", {n: quantize(w, second_moments[n]) for n, w in weights.items()})
report("gptq", {n: gptq(w, X[n]) for n, w in weights.items()})

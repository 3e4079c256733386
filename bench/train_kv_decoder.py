"""Trains samples/models/kv_decoder.h's architecture as a byte-level language model.

The model is bench/kv_decoder_torch.py's KvDecoder (the PyTorch mirror of the C++ model,
vocab 256 = bytes). The corpus is the license texts of /usr/share/common-licenses
(Debian's base-files package: the same bytes on every Debian 12 machine), the files listed
in TRAIN and HELD_OUT below, read in that order; their SHA-256 is printed so a run can tell
when its corpus differs. The held-out file (Apache-2.0) is never trained on: its loss
measures generalization, and a slice of it (`heldout.npy`) is the text the quantization
test (tests/cli/quantize_decode_test.cpp) teacher-forces and prompts with.

Training: random windows of max_ctx + 1 bytes of the training text, fixed seed, AdamW
(weight decay on the 2-D weights), linear warmup then cosine decay, gradient clipping;
PyTorch 1.13 on the CPU, deterministic for a given seed and thread count. Writes DIR in
the format of `kiln_sample_kv_decode --weights-out` (DIR/<parameter>.npy, f32, and
DIR/config.txt) plus DIR/heldout.npy (i64 byte values), and reports train / held-out loss
in bits per byte.

    flock /tmp/kiln-cpu.lock /usr/bin/python3 bench/train_kv_decoder.py --out tests/fixtures/kv_decoder_trained
"""
import argparse, hashlib, math, os, sys, time

import numpy as np
import torch
import torch.nn.functional as F

from kv_decoder_torch import KvDecoder, load_model, save_model

LICENSES = "/usr/share/common-licenses"
TRAIN = ["GPL-1", "GPL-2", "GPL-3", "LGPL-2", "LGPL-2.1", "LGPL-3", "GFDL-1.2", "GFDL-1.3",
         "MPL-1.1", "MPL-2.0", "Artistic", "BSD", "CC0-1.0"]
HELD_OUT = "Apache-2.0"
SNIPPET = (1024, 1024 + 512)  # heldout.npy: these bytes of the held-out file

ap = argparse.ArgumentParser()
ap.add_argument("--out", required=True, help="weights directory to write")
ap.add_argument("--d", type=int, default=128)
ap.add_argument("--layers", type=int, default=2)
ap.add_argument("--heads", type=int, default=4)
ap.add_argument("--max-ctx", type=int, default=128)
ap.add_argument("--steps", type=int, default=1200)
ap.add_argument("--batch", type=int, default=32)
ap.add_argument("--lr", type=float, default=2e-3)
ap.add_argument("--weight-decay", type=float, default=0.1)
ap.add_argument("--seed", type=int, default=0)
ap.add_argument("--threads", type=int, default=2)
args = ap.parse_args()
torch.manual_seed(args.seed)
torch.set_num_threads(args.threads)


def read(name):
    with open(os.path.join(LICENSES, name), "rb") as f:
        return f.read()


train_bytes = b"".join(read(n) for n in TRAIN)
held_bytes = read(HELD_OUT)
digest = hashlib.sha256(train_bytes + held_bytes).hexdigest()
print(f"corpus: {len(train_bytes)} training bytes ({len(TRAIN)} files), {len(held_bytes)} held-out bytes ({HELD_OUT}); sha256 {digest[:16]}")
train = torch.tensor(list(train_bytes), dtype=torch.long)
held = torch.tensor(list(held_bytes), dtype=torch.long)

cfg = dict(vocab=256, d=args.d, layers=args.layers, heads=args.heads, max_ctx=args.max_ctx)
model = KvDecoder(**cfg)
for name, p in model.named_parameters():  # GPT-2's initialization
    if name.endswith("bias") and p.dim() == 1 and not name.startswith(("ln", "lnf")):
        torch.nn.init.zeros_(p)
    elif p.dim() == 2:
        torch.nn.init.normal_(p, std=0.02)
decay = [p for p in model.parameters() if p.dim() == 2]
no_decay = [p for p in model.parameters() if p.dim() < 2]
opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
                        lr=args.lr, betas=(0.9, 0.95))
warmup = max(1, args.steps // 20)
sched = torch.optim.lr_scheduler.LambdaLR(
    opt, lambda s: (s + 1) / warmup if s < warmup else 0.1 + 0.45 * (1 + math.cos(math.pi * (s - warmup) / (args.steps - warmup))))
T = args.max_ctx
gen = torch.Generator().manual_seed(args.seed)


def windows(data, starts):
    idx = torch.as_tensor(starts)[:, None] + torch.arange(T + 1)[None, :]
    w = data[idx]
    return w[:, :-1], w[:, 1:]


@torch.no_grad()
def bits_per_byte(data, starts):
    model.eval()
    total, count = 0.0, 0
    for i in range(0, len(starts), 64):
        x, y = windows(data, starts[i:i + 64])
        total += F.cross_entropy(model.full(x).reshape(-1, 256), y.reshape(-1), reduction="sum").item()
        count += y.numel()
    model.train()
    return total / count / math.log(2)


held_starts = list(range(0, len(held) - T - 1, T))  # every non-overlapping window
train_eval_starts = torch.randint(0, len(train) - T - 1, (256,), generator=gen).tolist()
t0 = time.time()
model.train()
for step in range(args.steps):
    x, y = windows(train, torch.randint(0, len(train) - T - 1, (args.batch,), generator=gen))
    loss = F.cross_entropy(model.full(x).reshape(-1, 256), y.reshape(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    sched.step()
    if step % 100 == 0 or step == args.steps - 1:
        print(f"step {step:5d}  loss {loss.item() / math.log(2):.3f} bits/byte  lr {sched.get_last_lr()[0]:.2e}  {time.time() - t0:6.1f} s",
              flush=True)
train_s = time.time() - t0
train_bpb, held_bpb = bits_per_byte(train, train_eval_starts), bits_per_byte(held, held_starts)
print(f"trained {args.steps} steps x {args.batch} x {T} bytes in {train_s:.0f} s; "
      f"loss: train {train_bpb:.3f} bits/byte, held-out {held_bpb:.3f} bits/byte")

model.eval()
save_model(model, cfg, args.out)
snippet = np.array(list(held_bytes[SNIPPET[0]:SNIPPET[1]]), dtype=np.int64)
np.save(os.path.join(args.out, "heldout.npy"), snippet)

# The written directory, read back into a fresh model, decodes with the KV cache exactly as
# the cache-free forward predicts (the sample's step path), and greedy continuation of the
# snippet's start shows what was learned.
with torch.no_grad():
    loaded, _ = load_model(args.out)
    ids = torch.from_numpy(snippet[:T])[None]
    full = loaded.full(ids)
    stepped = torch.cat([loaded(ids[:, :16], 0)] + [loaded(ids[:, i:i + 1], i) for i in range(16, T)], 1)
    err = (full - stepped).abs().max().item()
    assert err < 1e-3, f"cached decode differs from the full forward by {err}"
    p = full.softmax(-1)[0]
    top1 = p.max(-1).values.mean().item()
    hit = (p.argmax(-1)[:-1] == ids[0, 1:]).float().mean().item()
    loaded.reset()
    prompt = snippet[:32].tolist()
    seq = list(prompt)
    logits = loaded(torch.tensor([prompt]), 0)
    while len(seq) < T:
        seq.append(int(logits[0, -1].argmax()))
        logits = loaded(torch.tensor([[seq[-1]]]), len(seq) - 1)
print(f"held-out snippet (first {T} bytes): mean top-1 probability {top1:.3f}, argmax = next byte {hit:.1%}")
print("greedy continuation of", repr(bytes(prompt).decode("latin-1")), "->", repr(bytes(seq[32:]).decode("latin-1")))
print(f"wrote {args.out}")

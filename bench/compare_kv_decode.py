"""One KV-cache decode step: Kiln vs PyTorch eager, same model, same weights, batch 1.

The model is samples/models/kv_decoder.h (GPT-style, pre-norm, learned positions) written
as a PyTorch nn.Module (bench/kv_decoder_torch.py) whose attention layers keep k_cache /
v_cache buffers [1, heads, max_ctx, head_dim] and write them in place. Its weights
come from the Kiln sample (`--weights-out`), and the script first checks that PyTorch's
greedy decoding reproduces the sample's tokens. Then, for each context N, both sides
prefill N tokens and time one decode step at position N: PyTorch in this process
(torch.set_num_threads(T)), Kiln through `kiln_kv_decode_bench` (T threads, the same
d=256 / 4-layer / max_ctx 1088 model, deterministic weights). The sides alternate
`--rounds` times and each keeps its best median; wall and CPU times are both reported
(prefer CPU time on a loaded machine).

    build/dev/samples/kiln_sample_kv_decode /tmp/kv.kiln --max-ctx 1088 --weights-out /tmp/kvw
    taskset -c 1 /usr/bin/python3 bench/compare_kv_decode.py --weights /tmp/kvw \\
        --kiln-bench build/dev/bench/kiln_kv_decode_bench --rounds 3
"""
import argparse, json, math, os, statistics, subprocess, time

import numpy as np
import torch

from kv_decoder_torch import load_model

ap = argparse.ArgumentParser()
ap.add_argument("--weights", required=True, help="directory written by kiln_sample_kv_decode --weights-out")
ap.add_argument("--kiln-bench", help="kiln_kv_decode_bench binary (omit to time PyTorch only)")
ap.add_argument("--kiln-baseline", help="another kiln_kv_decode_bench binary (an earlier build), alternated with the others")
ap.add_argument("--contexts", type=int, nargs="+", default=[16, 64, 256, 1024])
ap.add_argument("--threads", type=int, default=1)
ap.add_argument("--iters", type=int, default=50)
ap.add_argument("--rounds", type=int, default=1)
args = ap.parse_args()
torch.set_num_threads(args.threads)
torch.set_grad_enabled(False)

model, cfg = load_model(args.weights)

# Same weights, same tokens: PyTorch's greedy decoding must reproduce the sample's.
tokens = np.load(os.path.join(args.weights, "tokens.npy")).tolist()
prompt = tokens[:cfg["prompt"]]
seq = list(prompt)
logits = model(torch.tensor([prompt]), 0)
while len(seq) < len(tokens):
    seq.append(int(logits[0, -1].argmax()))
    logits = model(torch.tensor([[seq[-1]]]), len(seq) - 1)
if seq != tokens:
    first = next(i for i, (a, b) in enumerate(zip(seq, tokens)) if a != b)
    raise SystemExit(f"PyTorch's tokens differ from Kiln's at position {first}: {seq[first]} vs {tokens[first]}")
print(f"PyTorch {torch.__version__} reproduces the sample's {len(tokens) - len(prompt)} greedy tokens")


def bench_tokens(n):  # as in kv_decode_bench.cpp
    return torch.tensor([[(i * 37 + 11) % cfg["vocab"] for i in range(n)]])


def torch_step_ms(context):
    model.reset()
    model(bench_tokens(context), 0)
    step = bench_tokens(1)
    for _ in range(5):
        model(step, context)
    wall, cpu = [], []
    for _ in range(args.iters):
        w0, c0 = time.perf_counter(), time.process_time()
        model(step, context)
        wall.append(1e3 * (time.perf_counter() - w0))
        cpu.append(1e3 * (time.process_time() - c0))
    return statistics.median(wall), statistics.median(cpu)


def kiln_step_ms(context, binary=None):
    out = subprocess.run([binary or args.kiln_bench, f"--benchmark_filter=BM_KvDecodeStep/{context}$", "--benchmark_format=json",
                          "--benchmark_repetitions=3", "--benchmark_report_aggregates_only=true"],
                         check=True, capture_output=True, text=True,
                         env=dict(os.environ, KILN_BENCH_THREADS=str(args.threads))).stdout
    runs = [b for b in json.loads(out)["benchmarks"] if b.get("aggregate_name") == "median"]
    scale = {"ms": 1.0, "us": 1e-3, "ns": 1e-6}[runs[0]["time_unit"]]
    return runs[0]["real_time"] * scale, runs[0]["cpu_time"] * scale


best = {}
for _ in range(args.rounds):
    for context in args.contexts:
        baseline = (lambda c: kiln_step_ms(c, args.kiln_baseline)) if args.kiln_baseline else None
        for side, fn in (("torch", torch_step_ms), ("kiln", kiln_step_ms if args.kiln_bench else None), ("before", baseline)):
            if fn is None:
                continue
            wall, cpu = fn(context)
            w0, c0 = best.get((side, context), (math.inf, math.inf))
            best[(side, context)] = (min(w0, wall), min(c0, cpu))

# One thread: CPU time (steadier on a shared machine); more: wall time (a worker thread's CPU
# time is not the caller's).
basis = "CPU" if args.threads == 1 else "wall"
print(f"one decode step, batch 1, {args.threads} thread(s); ms (wall / CPU)")
print(f"{'context':>8} {'PyTorch eager':>18} {'Kiln':>18} {'speedup (' + basis + ')':>14}" + (f" {'Kiln before':>18} {'speedup':>8}" if args.kiln_baseline else ""))
for context in args.contexts:
    tw, tc = best[("torch", context)]
    line = f"{context:>8} {tw:8.3f} / {tc:7.3f}"
    if ("kiln", context) in best:
        kw, kc = best[("kiln", context)]
        line += f" {kw:8.3f} / {kc:7.3f} {(tc / kc if basis == 'CPU' else tw / kw):13.2f}x"
    if ("before", context) in best:
        bw, bc = best[("before", context)]
        line += f" {bw:8.3f} / {bc:7.3f} {(tc / bc if basis == 'CPU' else tw / bw):7.2f}x"
    print(line)

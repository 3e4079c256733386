"""Kiln vs PyTorch eager, side by side in one run, on the torch.export fixtures.

For each fixture: `kiln import model.pt2` (timed), then for each valid case the median
latency of `kiln bench --threads T` against PyTorch eager with torch.set_num_threads(T) on
the same inputs and weights. The PyTorch model is the original nn.Module from the
fixtures' generate.py with the exported state_dict loaded (true eager), or, for models
whose class is not known, `ExportedProgram.module()`. With an older PyTorch (Debian 12's
1.13, no torch.export) the weights are read from the archive itself and only the models with
a known class run: mlp, convnet, decoder, and torchvision models named by the manifest's
"model" (../shared/fixtures/torch_export_perf, bench/make_cnn_archives.py).

    python3 bench/compare_pytorch.py --kiln build/dev/bin/kiln --threads 2 --rounds 5 \
        --generate tests/fixtures/torch_export/generate.py \
        tests/fixtures/torch_export/{mlp,convnet,decoder} tests/fixtures/torch_extra/{mobilenet_v3,vit,encoder}
"""
import argparse, json, os, statistics, subprocess, sys, tempfile, time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pt2_weights import archive_state, fixture_classes, module_state  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--kiln", required=True)
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--iters", type=int, default=50)
ap.add_argument("--rounds", type=int, default=1,
                help="alternate Kiln and PyTorch this many times per case and keep each side's best "
                     "median (a shared machine's transient load then hits both sides alike)")
ap.add_argument("--generate", help="generate.py whose model classes give true eager modules")
ap.add_argument("fixtures", nargs="+")
args = ap.parse_args()
torch.set_num_threads(args.threads)
torch.set_grad_enabled(False)

classes = fixture_classes(args.generate) if args.generate else {}


def torch_module(name, ep):
    if name in classes:
        m = classes[name]()
        state = dict(ep.state_dict)
        state.update({k: v for k, v in ep.constants.items() if isinstance(v, torch.Tensor)})
        m.load_state_dict(state, strict=False)
        return m.eval(), "nn.Module"
    return ep.module(), "ExportedProgram.module()"


def median_ms(fn, iters, warmup=5):
    for _ in range(warmup):
        fn()
    t = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        t.append((time.perf_counter() - t0) * 1000)
    return statistics.median(t)


rows = []
tmp = tempfile.mkdtemp()
for d in args.fixtures:
    name = os.path.basename(os.path.normpath(d))
    man = json.load(open(os.path.join(d, "manifest.json")))
    bundle = os.path.join(tmp, name + ".kiln")
    archive = os.path.join(d, "model.pt2")
    if not os.path.exists(archive):
        archive = os.path.join(d, "model.core.pt2")  # the 224x224 CNNs: core IR only
    t0 = time.perf_counter()
    subprocess.run([args.kiln, "import", archive, "-o", bundle], check=True, capture_output=True)
    import_ms = (time.perf_counter() - t0) * 1000
    tv_name = man.get("model")
    if hasattr(torch, "export") and hasattr(torch.export, "load"):
        ep = torch.export.load(archive)
        mod, kind = torch_module(name, ep)
    elif name in classes:
        mod = classes[name]()
        missing = mod.load_state_dict(archive_state(archive), strict=False)
        mod, kind = mod.eval(), "nn.Module (weights from the archive)"
    elif tv_name and hasattr(__import__("torchvision").models, tv_name):
        # A torchvision model (manifest "model"): its own nn.Module with the archive's weights.
        mod = getattr(__import__("torchvision").models, tv_name)()
        state = module_state(archive)
        if tv_name.startswith("mnasnet"):  # its loader insists on the state dict's version metadata
            state = __import__("collections").OrderedDict(state)
            state._metadata = {"": {"version": 2}}
        mod.load_state_dict(state, strict=True)
        mod, kind = mod.eval(), f"torchvision {tv_name} (weights from the archive)"
    else:
        print(f"{name}: skipped (PyTorch {torch.__version__} has no torch.export and the class is unknown)")
        continue
    for case in man["valid"]:
        files = [os.path.join(d, case["inputs"][n]) for n in man["inputs"]]
        arrays = [np.load(f) for f in files]
        tensors = [torch.from_numpy(a) for a in arrays]
        want = np.load(os.path.join(d, case["outputs"][0]))
        got = mod(*tensors)
        got = got[0] if isinstance(got, (tuple, list)) else got
        err = float(np.max(np.abs(got.numpy() - want))) if want.size else 0.0
        cmd = [args.kiln, "bench", bundle, "--threads", str(args.threads), "--iters", str(args.iters), "--warmup", "5", "--json"]
        for n, f in zip(man["inputs"], files):
            cmd += ["--input", f"{n}={f}"]
        t_ms, k = None, None
        for _ in range(args.rounds):
            t = median_ms(lambda: mod(*tensors), args.iters)
            t_ms = t if t_ms is None else min(t_ms, t)
            r = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
            k = r if k is None or r["median_ms"] < k["median_ms"] else k
        shape = "x".join(str(s) for s in arrays[0].shape)
        rows.append((name, shape, k["median_ms"], t_ms, t_ms / k["median_ms"], import_ms, kind, err))
        print(f"{name:14s} {shape:14s} kiln {k['median_ms']:9.4f} ms  torch {t_ms:9.4f} ms  ratio {t_ms / k['median_ms']:6.2f}x  "
              f"(import {import_ms:.0f} ms, torch {kind}, torch vs golden {err:.1e})", flush=True)

print(f"\n| model | input | kiln ms | PyTorch {torch.__version__} eager ms | speedup |")
print("| --- | --- | ---: | ---: | ---: |")
for name, shape, k_ms, t_ms, ratio, _, _, _ in rows:
    print(f"| {name} | {shape} | {k_ms:.4f} | {t_ms:.4f} | {ratio:.2f}x |")

"""Kiln vs ONNX Runtime, side by side in one run, on torchvision CNNs with the same weights.

For each fixture directory (a torch.export archive model.pt2 or model.core.pt2 of a torchvision
model named by manifest.json's "model", or of a model class of the fixtures' generate.py given
with --generate (mlp, convnet, decoder), plus cases/*.npy): the weights are read from the
archive (bench/pt2_weights.py) into that nn.Module, which `torch.onnx.export`
writes as an ONNX file (opset 13, PyTorch 1.13 from Debian 12 suffices); the archive is
imported with `kiln import`. Each valid case then runs on both sides, alternating, --rounds
times: ONNX Runtime through bench/ort_bench.mjs (the npm package onnxruntime-node, CPU
provider, graph optimizations "all", --threads intra-op threads) and `kiln bench --threads`.
The best median of each side is kept (a shared machine's transient load then hits both
alike). Both outputs are checked against the case's golden output.

ONNX Runtime is a benchmark-only dependency, never needed by the build or CI:

    mkdir -p /work/.ort && (cd /work/.ort && npm install --ignore-scripts onnxruntime-node)
    /usr/bin/python3 bench/compare_ort.py --kiln build/dev/bin/kiln --ort-dir /work/.ort --threads 2 --rounds 5 \
        ../shared/fixtures/torch_export_perf/{resnet18,mobilenet_v2}
    /usr/bin/python3 bench/compare_ort.py --kiln build/dev/bin/kiln --ort-dir /work/.ort --threads 2 --rounds 5 \
        --generate tests/fixtures/torch_export/generate.py tests/fixtures/torch_export/{mlp,convnet,decoder}
"""
import argparse, json, os, subprocess, sys, tempfile, time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pt2_weights import archive_state, fixture_classes, module_state, segmentation_out_only  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--kiln", required=True, help="the kiln CLI")
ap.add_argument("--ort-dir", required=True, help="folder where `npm install onnxruntime-node` was run")
ap.add_argument("--node", default="node")
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--iters", type=int, default=50)
ap.add_argument("--warmup", type=int, default=5)
ap.add_argument("--rounds", type=int, default=5, help="alternate the two sides this many times; best median each")
ap.add_argument("--work", help="folder for the .onnx and .kiln files (default: a temporary one)")
ap.add_argument("--generate", help="generate.py whose model classes (mlp, convnet, decoder) give the ONNX side its module")
ap.add_argument("fixtures", nargs="+")
args = ap.parse_args()
torch.set_grad_enabled(False)
ORT_DRIVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ort_bench.mjs")


def archive_path(d):
    for name in ("model.pt2", "model.core.pt2"):
        if os.path.exists(os.path.join(d, name)):
            return os.path.join(d, name)
    sys.exit(f"{d}: no model.pt2 or model.core.pt2")


classes = fixture_classes(args.generate) if args.generate else {}


def export_onnx(model_name, pt2, onnx_path, example, input_name):
    import torchvision
    if model_name in classes:  # a fixture of generate.py: its class with the archive's weights
        module = classes[model_name]()
        module.load_state_dict(archive_state(pt2), strict=False)
        module.eval()
        torch.onnx.export(module, (example,), onnx_path, input_names=[input_name], output_names=["y"], opset_version=14,
                          do_constant_folding=True)  # 14: the decoder's causal mask (tril)
        return module
    if hasattr(torchvision.models, model_name):
        module = getattr(torchvision.models, model_name)()
    elif hasattr(torchvision.models.video, model_name):  # r3d_18, mc3_18, r2plus1d_18: [N, 3, T, H, W] clips
        module = getattr(torchvision.models.video, model_name)()
    elif hasattr(torchvision.models.segmentation, model_name):  # as bench/make_cnn_archives.py wraps it
        module = segmentation_out_only(getattr(torchvision.models.segmentation, model_name)(
            weights=None, weights_backbone=None, aux_loss=False))
    else:
        sys.exit(f"torchvision {torchvision.__version__} has no model '{model_name}' (mlp/convnet/decoder need --generate)")
    state = module_state(pt2)
    if model_name.startswith("mnasnet"):  # its loader insists on the state dict's version metadata
        state = __import__("collections").OrderedDict(state)
        state._metadata = {"": {"version": 2}}
    module.load_state_dict(state, strict=True)
    module.eval()
    torch.onnx.export(module, (example,), onnx_path, input_names=[input_name], output_names=["y"], opset_version=13,
                      do_constant_folding=True)
    return module


def run(cmd):
    """stdout of cmd; on failure, exits naming the command and showing its stderr."""
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"failed (exit {r.returncode}): {' '.join(cmd)}\n{r.stderr.strip()}")
    return r.stdout


def errors(got, want):
    d = np.abs(got.astype(np.float64) - want.astype(np.float64))
    return float(d.max()), bool(np.allclose(got, want, rtol=1e-4, atol=1e-5))


work = args.work or tempfile.mkdtemp(prefix="compare_ort_")
os.makedirs(work, exist_ok=True)
rows = []
for d in args.fixtures:
    name = os.path.basename(os.path.normpath(d))
    man = json.load(open(os.path.join(d, "manifest.json")))
    model_name = man.get("model", name)
    pt2 = archive_path(d)
    onnx_path = os.path.join(work, name + ".onnx")
    bundle = os.path.join(work, name + ".kiln")
    run([args.kiln, "import", pt2, "-o", bundle])
    for case in man["valid"]:
        if len(man["inputs"]) != 1:
            sys.exit(f"{name}: only single-input models are supported")
        input_name = man["inputs"][0]
        x_file = os.path.join(d, case["inputs"][input_name])
        golden = os.path.join(d, case["outputs"][0])
        x, want = np.load(x_file), np.load(golden)
        module = export_onnx(model_name, pt2, onnx_path, torch.from_numpy(x), input_name)
        torch_err, _ = errors(module(torch.from_numpy(x)).numpy(), want)
        out_dir = os.path.join(work, name + ".out")
        run([args.kiln, "run", bundle, "--input", f"{input_name}={x_file}", "--output-dir", out_dir])
        kiln_err, kiln_ok = errors(np.load(os.path.join(out_dir, "out0.npy")), want)
        kiln_cmd = [args.kiln, "bench", bundle, "--threads", str(args.threads), "--iters", str(args.iters),
                    "--warmup", str(args.warmup), "--json", "--input", f"{input_name}={x_file}"]
        ort_cmd = [args.node, ORT_DRIVER, "--ort-dir", args.ort_dir, "--model", onnx_path, "--input", f"{input_name}={x_file}",
                   "--golden", golden, "--threads", str(args.threads), "--iters", str(args.iters),
                   "--warmup", str(args.warmup)]
        kiln_ms, ort_ms, ort = [], [], None
        for r in range(args.rounds):
            o = json.loads(run(ort_cmd))
            k = json.loads(run(kiln_cmd))
            ort = o
            ort_ms.append(o["median_ms"])
            kiln_ms.append(k["median_ms"])
            print(f"{name} round {r + 1}: ORT {o['median_ms']:.3f} ms, Kiln {k['median_ms']:.3f} ms", flush=True)
        shape = "x".join(str(s) for s in x.shape)
        rows.append((name, shape, min(ort_ms), max(ort_ms), min(kiln_ms), max(kiln_ms), ort["ort_version"]))
        print(f"{name} {shape}: max |error| vs golden: Kiln {kiln_err:.1e} ({'within' if kiln_ok else 'OUTSIDE'} "
              f"rtol 1e-4 atol 1e-5), ONNX Runtime {ort['max_abs_err']:.1e}, torch {torch.__version__} {torch_err:.1e}",
              flush=True)

version = rows[0][6] if rows else "?"
print(f"\n{args.threads} threads, {args.rounds} rounds alternating, best median each (range of the round medians)")
print(f"| model | input | ONNX Runtime {version} ms | Kiln ms | ORT / Kiln |")
print("| --- | --- | ---: | ---: | ---: |")
for name, shape, o_best, o_worst, k_best, k_worst, _ in rows:
    print(f"| {name} | {shape} | {o_best:.4g} ({o_best:.4g}–{o_worst:.4g}) | {k_best:.4g} ({k_best:.4g}–{k_worst:.4g}) | "
          f"{o_best / k_best:.2f} |")

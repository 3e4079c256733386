# Device side, PyTorch half: export torchvision models with torch.export (random init, eval),
# save one input and PyTorch's CPU output, write the same module as ONNX (for ONNX Runtime's
# CPU provider on the machine's CPU), and time PyTorch CUDA eager (fp32, batch 1).
# Usage: torch_side.py WORK MODEL...   (a video model, e.g. r3d_18, takes 1x3x16x112x112)
import copy, json, os, sys, time
import numpy as np
import torch, torchvision

work = sys.argv[1]
names = sys.argv[2:]
torch.manual_seed(0)
res = {"torch": torch.__version__, "torchvision": torchvision.__version__,
       "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None, "models": {}}
torch.backends.cudnn.benchmark = True
VIDEO = {"r3d_18", "mc3_18", "r2plus1d_18", "s3d", "mvit_v1_b", "swin3d_t"}


def build(name):
    if name in VIDEO:
        return getattr(torchvision.models.video, name)().eval(), torch.randn(1, 3, 16, 112, 112)
    return getattr(torchvision.models, name)().eval(), torch.randn(1, 3, 224, 224)


for name in names:
    t0 = time.time()
    r = {}
    try:
        m, x = build(name)
        with torch.no_grad():
            ref = m(x)
        ep = torch.export.export(m, (x,)).run_decompositions()
        torch.export.save(ep, os.path.join(work, name + ".pt2"))
        np.save(os.path.join(work, name + ".x.npy"), x.numpy())
        np.save(os.path.join(work, name + ".ref.npy"), ref.numpy())
        r["export_s"] = round(time.time() - t0, 2)
    except Exception as e:  # noqa: BLE001 - report and go on with the next model
        print(name, "export failed:", repr(e)[:300], flush=True)
        continue
    try:
        t1 = time.time()
        with torch.no_grad():
            try:
                torch.onnx.export(m, (x,), os.path.join(work, name + ".onnx"), input_names=["x"], opset_version=17, dynamo=False)
            except TypeError:
                torch.onnx.export(m, (x,), os.path.join(work, name + ".onnx"), input_names=["x"], opset_version=17)
        r["onnx_s"] = round(time.time() - t1, 2)
    except Exception as e:  # noqa: BLE001
        r["onnx_error"] = repr(e)[:200]
    if torch.cuda.is_available():
        mc, xc = copy.deepcopy(m).cuda(), x.cuda()  # m itself stays on the CPU
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        with torch.no_grad():
            for _ in range(20):
                mc(xc)
            torch.cuda.synchronize()
            ts = []
            for _ in range(100):
                a = time.perf_counter()
                y = mc(xc)
                torch.cuda.synchronize()
                ts.append((time.perf_counter() - a) * 1e3)
        ts.sort()
        r["cuda_eager_fp32_ms_median"] = round(ts[len(ts) // 2], 4)
        r["cuda_vs_cpu_max_abs"] = float((y.cpu() - ref).abs().max())
        del mc, xc
    for threads in (16, 2):
        torch.set_num_threads(threads)
        with torch.no_grad():
            for _ in range(2):
                m(x)
            ts = []
            for _ in range(10 if threads == 16 else 5):
                a = time.perf_counter(); m(x); ts.append((time.perf_counter() - a) * 1e3)
        ts.sort()
        r[f"cpu_eager_{threads}t_ms_median"] = round(ts[len(ts) // 2], 3)
    res["models"][name] = r
    print(name, r, flush=True)
json.dump(res, open(os.path.join(work, "torch_side.json"), "w"), indent=1)

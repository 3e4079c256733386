# Device side, PyTorch half: export torchvision CNNs with torch.export (random init, eval),
# save one input and PyTorch's CPU output, and time PyTorch CUDA eager (fp32, batch 1).
import copy, json, os, sys, time
import numpy as np
import torch, torchvision

work = sys.argv[1]
names = sys.argv[2:]
torch.manual_seed(0)
res = {"torch": torch.__version__, "torchvision": torchvision.__version__,
       "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None, "models": {}}
torch.backends.cudnn.benchmark = True
for name in names:
    t0 = time.time()
    m = getattr(torchvision.models, name)().eval()
    x = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        ref = m(x)
    ep = torch.export.export(m, (x,)).run_decompositions()
    torch.export.save(ep, os.path.join(work, name + ".pt2"))
    np.save(os.path.join(work, name + ".x.npy"), x.numpy())
    np.save(os.path.join(work, name + ".ref.npy"), ref.numpy())
    r = {"export_s": round(time.time() - t0, 2)}
    if torch.cuda.is_available():
        mc, xc = copy.deepcopy(m).cuda(), x.cuda()  # m itself stays on the CPU
        for tf32 in (False,):
            torch.backends.cuda.matmul.allow_tf32 = tf32
            torch.backends.cudnn.allow_tf32 = tf32
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
            r["cuda_eager_fp32_ms_p10"] = round(ts[len(ts) // 10], 4)
            r["cuda_vs_cpu_max_abs"] = float((y.cpu() - ref).abs().max())
        # 16-thread CPU eager for scale
        torch.set_num_threads(16)
        with torch.no_grad():
            for _ in range(3):
                m(x)
            ts = []
            for _ in range(20):
                a = time.perf_counter(); m(x); ts.append((time.perf_counter() - a) * 1e3)
        ts.sort()
        r["cpu_eager_16t_ms_median"] = round(ts[len(ts) // 2], 3)
    res["models"][name] = r
    print(name, r, flush=True)
json.dump(res, open(os.path.join(work, "torch_side.json"), "w"), indent=1)

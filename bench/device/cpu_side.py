# Device side, CPU half: Kiln (`kiln bench --threads T`) against ONNX Runtime's CPU provider
# (python onnxruntime, graph optimizations "all", T intra-op threads) on the machine's CPU,
# same module and input (torch_side.py wrote the .onnx, the .kiln came from its .pt2).
# Alternates the two sides --rounds times and keeps each side's best median, like
# bench/compare_ort.py does on the development VM. Also checks ORT's output against PyTorch.
# KILN_ALT_ISA=avx2 adds a third side: Kiln with KILN_CPU_ISA=avx2 (its AVX2 GEMM and conv
# kernels) next to its default choice on this CPU.
# Usage: cpu_side.py WORK THREADS ROUNDS ITERS MODEL...
import json, os, subprocess, sys, time
import numpy as np
import onnxruntime as ort

# KILN_LD: the folder of the kiln CLI's own shared libraries (kept out of this process's loader path).
kiln_env = dict(os.environ, LD_LIBRARY_PATH=os.environ.get("KILN_LD", ""))
work, threads, rounds, iters = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
for name in sys.argv[5:]:
    onnx, kb = os.path.join(work, name + ".onnx"), os.path.join(work, name + ".kiln")
    xf = os.path.join(work, name + ".x.npy")
    if not (os.path.exists(onnx) and os.path.exists(kb)):
        print(name, "skipped: no .onnx or .kiln", flush=True)
        continue
    x = np.load(xf)
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    s = ort.InferenceSession(onnx, so, providers=["CPUExecutionProvider"])
    feed = {s.get_inputs()[0].name: x}
    y = s.run(None, feed)[0]
    ref = np.load(os.path.join(work, name + ".ref.npy"))
    ort_err = float(np.abs(y - ref).max())
    best_k = best_o = best_alt = float("inf")
    alt = os.environ.get("KILN_ALT_ISA")
    isas = {}

    def kiln_ms(extra_env):
        out = subprocess.run(["kiln", "bench", kb, "--threads", str(threads), "--input", f"x={xf}", "--warmup", "3",
                              "--iters", str(iters), "--json"], capture_output=True, text=True, env=dict(kiln_env, **extra_env))
        if out.returncode != 0:
            print(name, "kiln bench failed:", out.stderr[-300:], flush=True)
            return float("inf")
        j = json.loads(out.stdout)
        isas[extra_env.get("KILN_CPU_ISA", "default")] = j.get("cpu_kernels")
        return j["median_ms"]

    for _ in range(rounds):
        best_k = min(best_k, kiln_ms({}))
        if alt:
            best_alt = min(best_alt, kiln_ms({"KILN_CPU_ISA": alt}))
        for _ in range(3):
            s.run(None, feed)
        ts = []
        for _ in range(iters):
            a = time.perf_counter(); s.run(None, feed); ts.append((time.perf_counter() - a) * 1e3)
        ts.sort()
        best_o = min(best_o, ts[len(ts) // 2])
    row = {"model": name, "threads": threads, "kiln_ms": round(best_k, 3), "ort_ms": round(best_o, 3),
           "ort_over_kiln": round(best_o / best_k, 3), "ort_max_abs_err": ort_err, "kiln_cpu": isas.get("default")}
    if alt:
        row.update({f"kiln_{alt}_ms": round(best_alt, 3), f"ort_over_kiln_{alt}": round(best_o / best_alt, 3),
                    f"kiln_{alt}_cpu": isas.get(alt)})
    print(json.dumps(row), flush=True)

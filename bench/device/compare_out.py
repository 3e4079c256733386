import json, sys
import numpy as np
got = np.load(sys.argv[1]).astype(np.float64); want = np.load(sys.argv[2]).astype(np.float64)
d = np.abs(got - want)
cos = float((got * want).sum() / (np.linalg.norm(got) * np.linalg.norm(want) + 1e-30))
print(json.dumps({"shape": list(got.shape), "max_abs": float(d.max()), "max_ref": float(np.abs(want).max()),
                  "allclose_1e-3_1e-4": bool(np.allclose(got, want, rtol=1e-3, atol=1e-4)), "cosine": cos,
                  "argmax_equal": bool(got.argmax() == want.argmax())}))

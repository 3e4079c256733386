"""The state_dict stored in a torch.export .pt2 archive, read without torch.export.

The archive keeps each parameter and buffer as raw little-endian bytes (data/weights/weight_N,
data/constants/...) described by model_{weights,constants}_config.json, so an older PyTorch
(Debian 12's 1.13) can load the same weights into the original nn.Module.
"""
import json
import zipfile

import numpy as np

# torch.export serde ScalarType codes (torch/_export/serde/schema.py) -> NumPy dtypes.
ARCHIVE_DTYPES = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 7: np.float32, 8: np.float64, 12: np.bool_}


def archive_state(pt2):
    """{name: torch.Tensor} for every weight and constant tensor of the archive `pt2`."""
    import torch
    z = zipfile.ZipFile(pt2)
    state = {}
    for kind in ("weights", "constants"):
        cfg_name = next((n for n in z.namelist() if n.endswith(f"data/{kind}/model_{kind}_config.json")), None)
        if cfg_name is None:
            continue
        base = cfg_name.rsplit("/", 1)[0]
        for name, entry in json.loads(z.read(cfg_name))["config"].items():
            meta = entry["tensor_meta"]
            sizes = [d["as_int"] for d in meta["sizes"]]
            strides = [d["as_int"] for d in meta["strides"]]
            dt = ARCHIVE_DTYPES[meta["dtype"]]
            raw = np.frombuffer(z.read(base + "/" + entry["path_name"]), dtype=dt)
            arr = np.lib.stride_tricks.as_strided(raw[meta["storage_offset"]["as_int"]:], sizes,
                                                  [s * raw.itemsize for s in strides]).copy()
            state[name] = torch.from_numpy(arr)
    return state


def module_state(pt2):
    """archive_state without the constants torch.export lifted out of forward (swin's shift
    masks: lifted_tensor_N), which are not the module's state: it makes them itself."""
    return {k: v for k, v in archive_state(pt2).items() if not k.rsplit(".", 1)[-1].startswith("lifted_tensor_")}


def fixture_classes(generate_path):
    """{fixture name: nn.Module class} for mlp, convnet and decoder, from the fixtures'
    generate.py (its model classes only: the code from `class MLP` up to `def build_visible`),
    or for every model of a file with a MODELS table (bench/custom_cnns.py)."""
    import torch
    src = open(generate_path).read()
    if "\nMODELS = {" in src:  # bench/custom_cnns.py: MODELS = {name: (class, input shape)}
        ns = {"__name__": "custom_cnns"}
        exec(compile(src, generate_path, "exec"), ns)
        return {name: cls for name, (cls, _) in ns["MODELS"].items()}
    src = src[src.index("class MLP"): src.index("def build_visible")]
    ns = {"torch": torch, "nn": torch.nn, "F": torch.nn.functional}
    exec(compile(src, generate_path, "exec"), ns)
    return {"mlp": ns["MLP"], "convnet": ns["ConvNet"], "decoder": ns["Decoder"]}


def segmentation_out_only(model):
    """A torchvision segmentation model's {'out': ...} as one tensor (an nn.Module wrapping
    it as `model`, so its state dict keys start with "model.")."""
    import torch

    class OutOnly(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.model = m

        def forward(self, x):
            return self.model(x)["out"]

    return OutOnly(model)

"""torchvision CNNs at 224x224 (video models: 8 frames of 112x112) as torch.export archives for bench/compare_ort.py (issue 14's
model list beyond ../shared/fixtures/torch_export_perf): core ATen IR in the PT2 layout
(model.core.pt2, which bench/pt2_weights.py reads for the ONNX side), random init with a
fixed seed, eval mode, batch 1, plus one input and PyTorch's output as the golden case.
Needs PyTorch 2.6 (../shared/tools/torch26.sh); a benchmark tool, never used by the build.

    mkdir -p /var/tmp/kiln-torch26/script && cp tests/fixtures/torch_zoo/{make_archives,generate}.py bench/pt2_weights.py /var/tmp/kiln-torch26/script/
    bash ../shared/tools/torch26.sh run /work/perf/cnn bench/make_cnn_archives.py /io [MODEL ...]
"""
import os, sys

import torch
import torchvision.models as tvm

sys.path.insert(0, "/script")
from make_archives import write_case_folder  # noqa: E402  (tests/fixtures/torch_zoo/make_archives.py, copied next to this script)
from pt2_weights import segmentation_out_only  # noqa: E402  (bench/pt2_weights.py, copied likewise)

MODELS = ["squeezenet1_1", "mobilenet_v3_small", "mobilenet_v3_large", "efficientnet_b0", "shufflenet_v2_x1_0",
          "regnet_y_400mf", "resnet50", "mnasnet1_0", "densenet121"]


# Video models whose final pooling needs more than 8 frames of 112x112.
VIDEO_INPUT = {"s3d": (1, 3, 16, 224, 224)}


def build(name):
    """torchvision.models.NAME, torchvision.models.video.NAME, or torchvision.models.segmentation.NAME (its 'out' only)."""
    if hasattr(tvm, name):
        return getattr(tvm, name)()
    if hasattr(tvm.video, name):
        return getattr(tvm.video, name)()
    return segmentation_out_only(getattr(tvm.segmentation, name)(weights=None, weights_backbone=None, aux_loss=False))


def main(out, names):
    for name in names or MODELS:
        torch.manual_seed(0)
        m = build(name).eval()
        x = torch.randn(*VIDEO_INPUT.get(name, (1, 3, 8, 112, 112))) if hasattr(tvm.video, name) else torch.randn(1, 3, 224, 224)
        write_case_folder(os.path.join(out, name), name, m, x)
        print("WROTE", name, flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])

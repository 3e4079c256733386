"""CNN architectures that are not torchvision classifiers, for issue 14's "models you never saw":
the building blocks of segmentation, detection, super-resolution and diffusion networks, written
as plain nn.Modules (PyTorch 1.13 and 2.x alike) so that one file gives both sides of
bench/compare_ort.py their model:

- unet:       a 4-level U-Net (ConvTranspose2d 2x2/2 upsampling, skip concats, BN + ReLU), 256x256;
- yolo_csp:   a CSP detector backbone and neck (Conv-BN-SiLU, C3 blocks, SPPF max pools,
              nearest upsampling, concats, three 1x1 heads), 320x320;
- espcn:      super-resolution (5x5 and 3x3 convs, tanh, PixelShuffle x3), 224x224;
- gn_resnet:  residual blocks with GroupNorm(32) + SiLU (diffusion U-Nets' ResBlock), 128x128;
- ghostnet:   Ghost modules (1x1 conv + cheap depthwise, concat), squeeze-excitation, 224x224;
- hourglass:  strided-conv encoder, bilinear-upsampling decoder with additive skips, 256x256.

Export them (PyTorch 2.6, ../shared/tools/torch26.sh) into fixture folders that compare_ort.py reads:

    mkdir -p /work/perf/custom && cp tests/fixtures/torch_zoo/{make_archives,generate}.py /var/tmp/kiln-torch26/script/
    bash ../shared/tools/torch26.sh run /work/perf/custom bench/custom_cnns.py /io [MODEL ...]
    /usr/bin/python3 bench/compare_ort.py --kiln build/dev/bin/kiln --ort-dir /work/.ort --threads 2 \
        --generate bench/custom_cnns.py /work/perf/custom/*/
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


def conv_bn(cin, cout, k=3, s=1, act=nn.ReLU, groups=1):
    layers = [nn.Conv2d(cin, cout, k, s, (k - 1) // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
    if act is not None:
        layers.append(act())
    return nn.Sequential(*layers)


class UNet(nn.Module):
    def __init__(self, cin=3, classes=2, base=32):
        super().__init__()
        ch = [base, base * 2, base * 4, base * 8, base * 16]
        self.down = nn.ModuleList()
        prev = cin
        for c in ch:
            self.down.append(nn.Sequential(conv_bn(prev, c), conv_bn(c, c)))
            prev = c
        self.up = nn.ModuleList()
        self.merge = nn.ModuleList()
        for c in reversed(ch[:-1]):
            self.up.append(nn.ConvTranspose2d(c * 2, c, 2, 2))
            self.merge.append(nn.Sequential(conv_bn(c * 2, c), conv_bn(c, c)))
        self.head = nn.Conv2d(base, classes, 1)

    def forward(self, x):
        skips = []
        for i, block in enumerate(self.down):
            if i > 0:
                x = F.max_pool2d(x, 2)
            x = block(x)
            skips.append(x)
        for up, merge, skip in zip(self.up, self.merge, reversed(skips[:-1])):
            x = merge(torch.cat([up(x), skip], 1))
        return self.head(x)


class Bottleneck(nn.Module):
    def __init__(self, c, shortcut=True):
        super().__init__()
        self.cv1 = conv_bn(c, c, 1, act=nn.SiLU)
        self.cv2 = conv_bn(c, c, 3, act=nn.SiLU)
        self.add = shortcut

    def forward(self, x):
        y = self.cv2(self.cv1(x))
        return x + y if self.add else y


class C3(nn.Module):
    def __init__(self, cin, cout, n=1, shortcut=True):
        super().__init__()
        h = cout // 2
        self.cv1 = conv_bn(cin, h, 1, act=nn.SiLU)
        self.cv2 = conv_bn(cin, h, 1, act=nn.SiLU)
        self.m = nn.Sequential(*[Bottleneck(h, shortcut) for _ in range(n)])
        self.cv3 = conv_bn(2 * h, cout, 1, act=nn.SiLU)

    def forward(self, x):
        return self.cv3(torch.cat([self.m(self.cv1(x)), self.cv2(x)], 1))


class SPPF(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        h = cin // 2
        self.cv1 = conv_bn(cin, h, 1, act=nn.SiLU)
        self.cv2 = conv_bn(h * 4, cout, 1, act=nn.SiLU)

    def forward(self, x):
        x = self.cv1(x)
        y1 = F.max_pool2d(x, 5, 1, 2)
        y2 = F.max_pool2d(y1, 5, 1, 2)
        y3 = F.max_pool2d(y2, 5, 1, 2)
        return self.cv2(torch.cat([x, y1, y2, y3], 1))


class YoloCSP(nn.Module):
    def __init__(self, outputs=85 * 3):
        super().__init__()
        s = nn.SiLU
        self.stem = conv_bn(3, 32, 6, 2, act=s)
        self.b1 = nn.Sequential(conv_bn(32, 64, 3, 2, act=s), C3(64, 64, 1))
        self.b2 = nn.Sequential(conv_bn(64, 128, 3, 2, act=s), C3(128, 128, 2))
        self.b3 = nn.Sequential(conv_bn(128, 256, 3, 2, act=s), C3(256, 256, 3))
        self.b4 = nn.Sequential(conv_bn(256, 512, 3, 2, act=s), C3(512, 512, 1), SPPF(512, 512))
        self.lat4 = conv_bn(512, 256, 1, act=s)
        self.td3 = C3(512, 256, 1, False)
        self.lat3 = conv_bn(256, 128, 1, act=s)
        self.td2 = C3(256, 128, 1, False)
        self.down2 = conv_bn(128, 128, 3, 2, act=s)
        self.bu3 = C3(256, 256, 1, False)
        self.down3 = conv_bn(256, 256, 3, 2, act=s)
        self.bu4 = C3(512, 512, 1, False)
        self.heads = nn.ModuleList([nn.Conv2d(c, outputs, 1) for c in (128, 256, 512)])

    def forward(self, x):
        x = self.b1(self.stem(x))
        p2 = self.b2(x)
        p3 = self.b3(p2)
        p4 = self.b4(p3)
        l4 = self.lat4(p4)
        t3 = self.td3(torch.cat([F.interpolate(l4, scale_factor=2.0, mode="nearest"), p3], 1))
        l3 = self.lat3(t3)
        o2 = self.td2(torch.cat([F.interpolate(l3, scale_factor=2.0, mode="nearest"), p2], 1))
        o3 = self.bu3(torch.cat([self.down2(o2), l3], 1))
        o4 = self.bu4(torch.cat([self.down3(o3), l4], 1))
        outs = [h(o).flatten(2) for h, o in zip(self.heads, (o2, o3, o4))]
        return torch.cat(outs, 2)


class ESPCN(nn.Module):
    def __init__(self, channels=3, scale=3):
        super().__init__()
        self.c1 = nn.Conv2d(channels, 64, 5, padding=2)
        self.c2 = nn.Conv2d(64, 32, 3, padding=1)
        self.c3 = nn.Conv2d(32, channels * scale * scale, 3, padding=1)
        self.shuffle = nn.PixelShuffle(scale)

    def forward(self, x):
        x = torch.tanh(self.c1(x))
        x = torch.tanh(self.c2(x))
        return torch.sigmoid(self.shuffle(self.c3(x)))


class GNResBlock(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.n1 = nn.GroupNorm(32, cin)
        self.c1 = nn.Conv2d(cin, cout, 3, padding=1)
        self.n2 = nn.GroupNorm(32, cout)
        self.c2 = nn.Conv2d(cout, cout, 3, padding=1)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x):
        h = self.c1(F.silu(self.n1(x)))
        h = self.c2(F.silu(self.n2(h)))
        return self.skip(x) + h


class GNResNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 64, 3, padding=1)
        self.blocks = nn.Sequential(GNResBlock(64, 64), GNResBlock(64, 128), nn.Conv2d(128, 128, 3, 2, 1),
                                    GNResBlock(128, 128), GNResBlock(128, 256), nn.Conv2d(256, 256, 3, 2, 1),
                                    GNResBlock(256, 256), GNResBlock(256, 256))
        self.out = nn.Sequential(nn.GroupNorm(32, 256), nn.SiLU(), nn.Conv2d(256, 4, 3, padding=1))

    def forward(self, x):
        return self.out(self.blocks(self.stem(x)))


class GhostModule(nn.Module):
    def __init__(self, cin, cout, relu=True):
        super().__init__()
        init = cout // 2
        self.primary = conv_bn(cin, init, 1, act=nn.ReLU if relu else None)
        self.cheap = conv_bn(init, init, 3, groups=init, act=nn.ReLU if relu else None)

    def forward(self, x):
        y = self.primary(x)
        return torch.cat([y, self.cheap(y)], 1)


class GhostBottleneck(nn.Module):
    def __init__(self, cin, mid, cout, stride, se):
        super().__init__()
        self.ghost1 = GhostModule(cin, mid)
        self.dw = conv_bn(mid, mid, 3, stride, groups=mid, act=None) if stride > 1 else nn.Identity()
        self.se = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(mid, mid // 4, 1), nn.ReLU(),
                                nn.Conv2d(mid // 4, mid, 1), nn.Hardsigmoid()) if se else None
        self.ghost2 = GhostModule(mid, cout, relu=False)
        self.shortcut = nn.Identity() if cin == cout and stride == 1 else nn.Sequential(
            conv_bn(cin, cin, 3, stride, groups=cin, act=None), conv_bn(cin, cout, 1, act=None))

    def forward(self, x):
        y = self.dw(self.ghost1(x))
        if self.se is not None:
            y = y * self.se(y)
        return self.ghost2(y) + self.shortcut(x)


class GhostNet(nn.Module):
    CFG = [(16, 16, 16, 1, False), (16, 48, 24, 2, False), (24, 72, 24, 1, False), (24, 72, 40, 2, True),
           (40, 120, 40, 1, True), (40, 240, 80, 2, False), (80, 200, 80, 1, False), (80, 480, 112, 1, True),
           (112, 672, 112, 1, True), (112, 672, 160, 2, True), (160, 960, 160, 1, True)]

    def __init__(self, classes=1000):
        super().__init__()
        self.stem = conv_bn(3, 16, 3, 2)
        self.blocks = nn.Sequential(*[GhostBottleneck(*c) for c in self.CFG])
        self.head = conv_bn(160, 960, 1)
        self.fc = nn.Sequential(nn.Linear(960, 1280), nn.ReLU(), nn.Linear(1280, classes))

    def forward(self, x):
        x = self.head(self.blocks(self.stem(x)))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class Hourglass(nn.Module):
    def __init__(self, classes=17):
        super().__init__()
        ch = [32, 64, 128, 256]
        self.stem = conv_bn(3, ch[0], 3, 2)
        self.enc = nn.ModuleList([nn.Sequential(conv_bn(a, b, 3, 2), conv_bn(b, b)) for a, b in zip(ch, ch[1:])])
        self.lat = nn.ModuleList([conv_bn(c, c, 1) for c in ch[:-1]])
        self.dec = nn.ModuleList([conv_bn(b, a, 3) for a, b in zip(ch, ch[1:])])
        self.head = nn.Conv2d(ch[0], classes, 1)

    def forward(self, x):
        x = self.stem(x)
        skips = []
        for enc in self.enc:
            skips.append(x)
            x = enc(x)
        for lat, dec, skip in zip(reversed(self.lat), reversed(self.dec), reversed(skips)):
            x = F.interpolate(dec(x), scale_factor=2.0, mode="bilinear", align_corners=False) + lat(skip)
        return self.head(x)


# name -> (class, input shape)
MODELS = {
    "unet": (UNet, (1, 3, 256, 256)),
    "yolo_csp": (YoloCSP, (1, 3, 320, 320)),
    "espcn": (ESPCN, (1, 3, 224, 224)),
    "gn_resnet": (GNResNet, (1, 3, 128, 128)),
    "ghostnet": (GhostNet, (1, 3, 224, 224)),
    "hourglass": (Hourglass, (1, 3, 256, 256)),
}


def _randomize_norms(m):
    """Random batch-norm statistics and affine parameters, so that folding them is tested."""
    g = torch.Generator().manual_seed(1)
    for mod in m.modules():
        if isinstance(mod, nn.BatchNorm2d):
            mod.running_mean.copy_(torch.randn(mod.num_features, generator=g) * 0.1)
            mod.running_var.copy_(torch.rand(mod.num_features, generator=g) + 0.5)
            mod.weight.data.copy_(torch.rand(mod.num_features, generator=g) + 0.5)
            mod.bias.data.copy_(torch.randn(mod.num_features, generator=g) * 0.1)


def main(out, names):
    import os, sys
    sys.path.insert(0, "/script")
    from make_archives import write_case_folder  # tests/fixtures/torch_zoo/make_archives.py, copied next to this script
    for name in names or MODELS:
        cls, shape = MODELS[name]
        torch.manual_seed(0)
        m = cls().eval()
        with torch.no_grad():
            _randomize_norms(m)
        x = torch.randn(*shape)
        y = write_case_folder(os.path.join(out, name), name, m, x)
        print("WROTE", name, tuple(y.shape), flush=True)


if __name__ == "__main__":
    import sys
    main(sys.argv[1], sys.argv[2:])

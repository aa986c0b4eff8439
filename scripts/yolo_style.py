"""YOLOv8-style detector and pose networks in plain PyTorch, for tests and exports.

What a training framework of the YOLOv8 family exports, built here from the published structure
(no framework, no downloaded weights): convolution + batch norm + SiLU blocks, C2f blocks (a
split into two halves, a chain of bottlenecks, a concat of every stage), SPPF (three chained
5x5 max pools), a PAN neck (nearest upsampling and concat, then strided convolutions back down),
decoupled heads per level, and the box decoding inside the graph: distribution focal loss (DFL)
bins through a softmax and a fixed 1x1 convolution, anchor points and strides, boxes as
centre x, centre y, width, height in input pixels. Classes go through a sigmoid.

- `YoloStyle(nc=80)`: output [1, 4 + nc, A].
- `YoloStyle(nc=1, keypoints=17)`: pose; output [1, 4 + nc + 3 * keypoints, A], each keypoint as
  x, y (input pixels) and a visibility score.

A = sum over the strides 8, 16, 32 of (H / s) * (W / s). Weights are seeded random; batch norm
statistics are randomised too, so that folding them is exercised with values other than 0 and 1.
"""

from __future__ import annotations

import torch
from torch import nn

REG_MAX = 16
STRIDES = (8, 16, 32)


class ConvBnAct(nn.Module):
    def __init__(self, c_in: int, c_out: int, k: int = 1, stride: int = 1):
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, k, stride, k // 2, bias=False)
        self.bn = nn.BatchNorm2d(c_out)
        self.act = nn.SiLU()

    def forward(self, x):
        return self.act(self.bn(self.conv(x)))


class Bottleneck(nn.Module):
    def __init__(self, c: int, shortcut: bool):
        super().__init__()
        self.a = ConvBnAct(c, c, 3)
        self.b = ConvBnAct(c, c, 3)
        self.shortcut = shortcut

    def forward(self, x):
        y = self.b(self.a(x))
        return x + y if self.shortcut else y


class C2f(nn.Module):
    def __init__(self, c_in: int, c_out: int, n: int, shortcut: bool):
        super().__init__()
        self.half = c_out // 2
        self.cv1 = ConvBnAct(c_in, 2 * self.half, 1)
        self.blocks = nn.ModuleList(Bottleneck(self.half, shortcut) for _ in range(n))
        self.cv2 = ConvBnAct((2 + len(self.blocks)) * self.half, c_out, 1)

    def forward(self, x):
        parts = list(self.cv1(x).split((self.half, self.half), 1))
        for block in self.blocks:
            parts.append(block(parts[-1]))
        return self.cv2(torch.cat(parts, 1))


class Sppf(nn.Module):
    def __init__(self, c_in: int, c_out: int):
        super().__init__()
        hidden = c_in // 2
        self.cv1 = ConvBnAct(c_in, hidden, 1)
        self.pool = nn.MaxPool2d(5, 1, 2)
        self.cv2 = ConvBnAct(4 * hidden, c_out, 1)

    def forward(self, x):
        a = self.cv1(x)
        b = self.pool(a)
        c = self.pool(b)
        return self.cv2(torch.cat((a, b, c, self.pool(c)), 1))


def branch(c_in: int, hidden: int, c_out: int) -> nn.Sequential:
    return nn.Sequential(ConvBnAct(c_in, hidden, 3), ConvBnAct(hidden, hidden, 3), nn.Conv2d(hidden, c_out, 1))


class YoloStyle(nn.Module):
    def __init__(self, nc: int = 80, keypoints: int = 0, widths=(16, 32, 64, 128, 256)):
        super().__init__()
        w0, w1, w2, w3, w4 = widths
        self.nc, self.keypoints = nc, keypoints
        self.stem = ConvBnAct(3, w0, 3, 2)
        self.down1 = nn.Sequential(ConvBnAct(w0, w1, 3, 2), C2f(w1, w1, 1, True))
        self.down2 = nn.Sequential(ConvBnAct(w1, w2, 3, 2), C2f(w2, w2, 2, True))
        self.down3 = nn.Sequential(ConvBnAct(w2, w3, 3, 2), C2f(w3, w3, 2, True))
        self.down4 = nn.Sequential(ConvBnAct(w3, w4, 3, 2), C2f(w4, w4, 1, True), Sppf(w4, w4))
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.top4 = C2f(w4 + w3, w3, 1, False)
        self.top3 = C2f(w3 + w2, w2, 1, False)
        self.bottom4_down = ConvBnAct(w2, w2, 3, 2)
        self.bottom4 = C2f(w2 + w3, w3, 1, False)
        self.bottom5_down = ConvBnAct(w3, w3, 3, 2)
        self.bottom5 = C2f(w3 + w4, w4, 1, False)
        levels = (w2, w3, w4)
        c_box = max(16, w2 // 4, 4 * REG_MAX)
        c_cls = max(w2, min(nc, 100))
        self.box = nn.ModuleList(branch(c, c_box, 4 * REG_MAX) for c in levels)
        self.cls = nn.ModuleList(branch(c, c_cls, nc) for c in levels)
        if keypoints:
            c_kpt = max(w2 // 4, 3 * keypoints)
            self.kpt = nn.ModuleList(branch(c, c_kpt, 3 * keypoints) for c in levels)
        # DFL: the expectation over the bins as a fixed 1x1 convolution.
        self.dfl = nn.Conv2d(REG_MAX, 1, 1, bias=False).requires_grad_(False)
        self.dfl.weight.data[:] = torch.arange(REG_MAX, dtype=torch.float32).view(1, REG_MAX, 1, 1)

    def features(self, x):
        p3 = self.down2(self.down1(self.stem(x)))
        p4 = self.down3(p3)
        p5 = self.down4(p4)
        t4 = self.top4(torch.cat((self.up(p5), p4), 1))
        n3 = self.top3(torch.cat((self.up(t4), p3), 1))
        n4 = self.bottom4(torch.cat((self.bottom4_down(n3), t4), 1))
        n5 = self.bottom5(torch.cat((self.bottom5_down(n4), p5), 1))
        return (n3, n4, n5)

    @staticmethod
    def anchors(feats):
        points, strides = [], []
        for f, s in zip(feats, STRIDES):
            h, w = f.shape[2], f.shape[3]
            sy = torch.arange(h, dtype=torch.float32) + 0.5
            sx = torch.arange(w, dtype=torch.float32) + 0.5
            gy, gx = torch.meshgrid(sy, sx, indexing="ij")
            points.append(torch.stack((gx, gy), -1).view(-1, 2))
            strides.append(torch.full((h * w, 1), float(s)))
        return torch.cat(points).transpose(0, 1), torch.cat(strides).transpose(0, 1)

    def forward(self, x):
        feats = self.features(x)
        n = x.shape[0]
        raw = torch.cat([torch.cat((b(f), c(f)), 1).view(n, 4 * REG_MAX + self.nc, -1) for f, b, c in zip(feats, self.box, self.cls)], 2)
        box, cls = raw.split((4 * REG_MAX, self.nc), 1)
        a = box.shape[2]
        bins = box.view(n, 4, REG_MAX, a).transpose(2, 1).softmax(1)
        dist = self.dfl(bins).view(n, 4, a)
        points, strides = self.anchors(feats)
        lt, rb = dist.chunk(2, 1)
        x1y1, x2y2 = points - lt, points + rb
        boxes = torch.cat(((x1y1 + x2y2) / 2, x2y2 - x1y1), 1) * strides
        out = torch.cat((boxes, cls.sigmoid()), 1)
        if not self.keypoints:
            return out
        k = self.keypoints
        kpt = torch.cat([head(f).view(n, 3 * k, -1) for f, head in zip(feats, self.kpt)], 2).view(n, k, 3, a)
        xy = (kpt[:, :, :2] * 2.0 + (points - 0.5)) * strides
        kpts = torch.cat((xy, kpt[:, :, 2:3].sigmoid()), 2).view(n, 3 * k, a)
        return torch.cat((out, kpts), 1)


def seeded(nc: int = 80, keypoints: int = 0, seed: int = 0) -> YoloStyle:
    """A YoloStyle net with seeded weights and randomised batch-norm statistics, in eval mode."""
    torch.manual_seed(seed)
    model = YoloStyle(nc=nc, keypoints=keypoints)
    g = torch.Generator().manual_seed(seed + 1)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
            m.running_var.copy_(torch.rand(m.num_features, generator=g) * 0.5 + 0.75)
            m.weight.data.copy_(torch.rand(m.num_features, generator=g) * 0.5 + 0.75)
            m.bias.data.copy_(torch.randn(m.num_features, generator=g) * 0.1)
    return model.eval()

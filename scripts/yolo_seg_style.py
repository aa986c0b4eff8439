"""A YOLOv8-seg-style instance segmentation network in plain PyTorch, for tests and exports.

What a training framework of the YOLOv8 family exports for `-seg` models, built here from the
published structure on top of `yolo_style.py`'s detector (no framework, no downloaded weights):
the detector's backbone, neck and decoded boxes and sigmoided classes, plus

- a prototype branch on the stride-8 feature map: 3x3 convolution, a 2x2 stride-2 transposed
  convolution (to stride 4), two more convolutions, `nm` prototype channels out;
- a mask-coefficient branch per level (two 3x3 convolutions and a 1x1 to `nm` channels), its
  anchors flattened and concatenated like the class scores.

`YoloSegStyle(nc, nm)` returns two outputs, as YOLOv8-seg's ONNX export does:
- output0 `[1, 4 + nc + nm, A]`: centre x, centre y, width, height in input pixels, `nc` class
  scores after the sigmoid, `nm` mask coefficients (raw);
- output1 `[1, nm, H / 4, W / 4]`: the prototypes.

A = sum over the strides 8, 16, 32 of (H / s) * (W / s). Weights are seeded random with He's
variance (so that scores and masks vary across the image), batch norm statistics randomised
(`seeded`).
"""

from __future__ import annotations

import torch
from torch import nn

from yolo_style import ConvBnAct, YoloStyle, branch


class Proto(nn.Module):
    """The prototype branch: stride 8 in, stride 4 out."""

    def __init__(self, c_in: int, hidden: int, nm: int):
        super().__init__()
        self.cv1 = ConvBnAct(c_in, hidden, 3)
        self.up = nn.ConvTranspose2d(hidden, hidden, 2, 2, 0, bias=True)
        self.cv2 = ConvBnAct(hidden, hidden, 3)
        self.cv3 = ConvBnAct(hidden, nm, 1)

    def forward(self, x):
        return self.cv3(self.cv2(self.up(self.cv1(x))))


class YoloSegStyle(YoloStyle):
    def __init__(self, nc: int = 80, nm: int = 32, widths=(16, 32, 64, 128, 256)):
        super().__init__(nc=nc, keypoints=0, widths=widths)
        self.nm = nm
        w2, w3, w4 = widths[2], widths[3], widths[4]
        self.proto = Proto(w2, max(nm, w2 // 2), nm)
        c_mask = max(w2 // 4, nm)
        self.mask = nn.ModuleList(branch(c, c_mask, nm) for c in (w2, w3, w4))

    def forward(self, x):
        feats = self.features(x)
        n = x.shape[0]
        out = self.detect(feats, n)
        coeffs = torch.cat([m(f).view(n, self.nm, -1) for f, m in zip(feats, self.mask)], 2)
        return torch.cat((out, coeffs), 1), self.proto(feats[0])

    def detect(self, feats, n):
        """The detector's decoded boxes and sigmoided classes for these features."""
        from yolo_style import REG_MAX

        raw = torch.cat([torch.cat((b(f), c(f)), 1).view(n, 4 * REG_MAX + self.nc, -1) for f, b, c in zip(feats, self.box, self.cls)], 2)
        box, cls = raw.split((4 * REG_MAX, self.nc), 1)
        a = box.shape[2]
        bins = box.view(n, 4, REG_MAX, a).transpose(2, 1).softmax(1)
        dist = self.dfl(bins).view(n, 4, a)
        points, strides = self.anchors(feats)
        lt, rb = dist.chunk(2, 1)
        x1y1, x2y2 = points - lt, points + rb
        boxes = torch.cat(((x1y1 + x2y2) / 2, x2y2 - x1y1), 1) * strides
        return torch.cat((boxes, cls.sigmoid()), 1)


def seeded(nc: int = 80, nm: int = 32, seed: int = 0) -> YoloSegStyle:
    """A YoloSegStyle net with seeded weights and randomised batch-norm statistics, in eval mode."""
    torch.manual_seed(seed)
    model = YoloSegStyle(nc=nc, nm=nm)
    g = torch.Generator().manual_seed(seed + 1)
    for m in model.modules():
        # Variance-keeping weights (He), so that the outputs depend on the input as a trained
        # net's do: PyTorch's default initialisation shrinks activations layer after layer, and
        # every anchor would score alike and every mask would sit at 0.5.
        if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d)) and m is not model.dfl:
            fan_in = m.weight[0].numel() if isinstance(m, nn.Conv2d) else m.weight[:, 0].numel()
            m.weight.data.copy_(torch.randn(m.weight.shape, generator=g) * (2.0 / fan_in) ** 0.5)
    for c in model.cls:
        # Milder class logits: scores spread over 0..1 rather than saturated at 1.
        c[-1].weight.data.mul_(0.25)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
            m.running_var.copy_(torch.rand(m.num_features, generator=g) * 0.5 + 0.75)
            m.weight.data.copy_(torch.rand(m.num_features, generator=g) * 0.5 + 0.75)
            m.bias.data.copy_(torch.randn(m.num_features, generator=g) * 0.1)
    return model.eval()

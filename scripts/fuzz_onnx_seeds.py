"""Writes the onnx fuzz target's seed corpus (fuzz/corpus/onnx/): small models torch exports,
covering the local operators the importer reads (conv, pool, activations, element-wise, resize,
concat) and a global tail (pool, flatten, linear). Weights are random and tiny; run once and
commit the files. Needs the project's .venv (torch, onnx)."""
import os
import sys

import torch
from torch import nn

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fuzz", "corpus", "onnx")


class Local(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(3, 4, 3, padding=1)
        self.b = nn.Conv2d(4, 4, 3, stride=2, padding=1, groups=2)
        self.bn = nn.BatchNorm2d(4)

    def forward(self, x):
        y = torch.relu(self.a(x))
        z = self.bn(self.b(y))
        z = nn.functional.interpolate(z, scale_factor=2.0, mode="nearest")
        return torch.cat([torch.sigmoid(z) * y, nn.functional.max_pool2d(y, 3, 1, 1)], dim=1)


class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.c = nn.Conv2d(3, 6, 3, stride=2)
        self.fc = nn.Linear(6, 5)

    def forward(self, x):
        y = nn.functional.avg_pool2d(torch.clamp(self.c(x), 0, 6), 2)
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(y, 1), 1))


def main():
    os.makedirs(OUT, exist_ok=True)
    torch.manual_seed(0)
    for name, model, dynamic in [("local", Local(), False), ("head", Head(), False), ("local-dynamic", Local(), True)]:
        path = os.path.join(OUT, name + ".onnx")
        axes = {"x": {2: "h", 3: "w"}} if dynamic else None
        torch.onnx.export(model.eval(), (torch.zeros(1, 3, 16, 16),), path, input_names=["x"], dynamic_axes=axes,
                          dynamo=False, opset_version=17)
        print(path, os.path.getsize(path), "bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())

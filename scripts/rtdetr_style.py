"""RT-DETR-style detector in plain PyTorch, for tests and exports.

What a real-time DETR exports, built here from the published structure (no framework, no
downloaded weights), small enough for CPU tests at 640x640:

- an HGNetv2-style stem: a strided convolution, then a zero `Pad` of one row and column that
  feeds both a 2x2 convolution branch and a 2x2 max pool branch (so the pad cannot be folded into
  one consumer), concatenated;
- convolution stages with batch norm and ReLU down to stride 32;
- an AIFI encoder on the stride-32 map: flatten, a fixed 2-d sine-cosine position embedding, one
  transformer encoder layer (multi-head attention, layer norms, a GELU feed-forward: `Erf`);
- a CCFM-style neck: nearest upsampling and concatenation to stride 8, strided convolutions back;
- the decoder: levels projected and flattened, fixed anchors with a validity mask (`Where` on the
  features), an encoder head scoring every position, query selection by `TopK` over the best
  class score (`ReduceMax`), the selected features and boxes gathered (`GatherElements` with an
  `Expand`ed index), one decoder layer with self-attention and multi-scale deformable
  cross-attention (`GridSample`, bilinear, zero padding), box and class heads;
- the deployed post-processor of RT-DETR exports: top-k over the flattened query x class
  scores, `label = index mod classes` (`Mod`), `query = index div classes`, boxes gathered, and a
  comparison mask (`Greater`, `And`, `Not`, `Where`) that zeroes the boxes of queries whose
  anchors were invalid.

Outputs: `boxes` [1, K, 4] (cx, cy, w, h, normalised), `scores` [1, K], `labels` [1, K] (as
float, so that every output compares as a number). Weights are seeded random; batch norm
statistics are randomised too.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

STRIDES = (8, 16, 32)


class ConvBnAct(nn.Module):
    def __init__(self, c_in: int, c_out: int, k: int = 3, stride: int = 1, padding: int | None = None, act: bool = True):
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, k, stride, k // 2 if padding is None else padding, bias=False)
        self.bn = nn.BatchNorm2d(c_out)
        self.act = nn.ReLU() if act else nn.Identity()

    def forward(self, x):
        return self.act(self.bn(self.conv(x)))


class Stem(nn.Module):
    """HGNetv2's stem: the padded map feeds a convolution branch and a pooling branch."""

    def __init__(self, c_in: int, c_mid: int, c_out: int):
        super().__init__()
        self.stem1 = ConvBnAct(c_in, c_mid, 3, 2)
        self.stem2a = ConvBnAct(c_mid, c_mid // 2, 2, 1, 0)
        self.stem2b = ConvBnAct(c_mid // 2, c_mid, 2, 1, 0)
        self.stem3 = ConvBnAct(c_mid * 2, c_mid, 3, 2)
        self.stem4 = ConvBnAct(c_mid, c_out, 1, 1)
        self.pool = nn.MaxPool2d(2, 1, 0, ceil_mode=True)

    def forward(self, x):
        x = self.stem1(x)
        x = F.pad(x, [0, 1, 0, 1])
        x2 = self.stem2a(x)
        x2 = F.pad(x2, [0, 1, 0, 1])
        x2 = self.stem2b(x2)
        x1 = self.pool(x)
        x = torch.cat([x1, x2], 1)
        return self.stem4(self.stem3(x))


class Stage(nn.Module):
    """A strided convolution, then an HG block: a chain of convolutions, all concatenated and squeezed."""

    def __init__(self, c_in: int, c_out: int, stride: int):
        super().__init__()
        self.down = ConvBnAct(c_in, c_in, 3, stride) if stride > 1 else nn.Identity()
        self.chain = nn.ModuleList([ConvBnAct(c_in if i == 0 else c_out // 2, c_out // 2, 3) for i in range(2)])
        self.squeeze = ConvBnAct(c_in + 2 * (c_out // 2), c_out, 1)

    def forward(self, x):
        x = self.down(x)
        ys = [x]
        for m in self.chain:
            ys.append(m(ys[-1]))
        return self.squeeze(torch.cat(ys, 1))


def sincos_embedding(w: int, h: int, dim: int, temperature: float = 10000.0) -> torch.Tensor:
    """The fixed 2-d position embedding of RT-DETR's AIFI: [1, h * w, dim]."""
    gy, gx = torch.meshgrid(torch.arange(h, dtype=torch.float32), torch.arange(w, dtype=torch.float32), indexing="ij")
    pos = dim // 4
    omega = 1.0 / temperature ** (torch.arange(pos, dtype=torch.float32) / pos)
    ox = gx.flatten()[:, None] * omega[None]
    oy = gy.flatten()[:, None] * omega[None]
    return torch.cat([ox.sin(), ox.cos(), oy.sin(), oy.cos()], 1)[None]


class Attention(nn.Module):
    """Multi-head attention written out (Linear, MatMul, Softmax), as exporters emit it."""

    def __init__(self, c: int, heads: int):
        super().__init__()
        self.heads = heads
        self.q = nn.Linear(c, c)
        self.k = nn.Linear(c, c)
        self.v = nn.Linear(c, c)
        self.out = nn.Linear(c, c)

    def forward(self, q, k, v):
        b, n, c = q.shape
        hd = c // self.heads
        split = lambda t: t.view(b, -1, self.heads, hd).transpose(1, 2)  # noqa: E731
        a = (split(self.q(q)) @ split(self.k(k)).transpose(-1, -2)) / hd**0.5
        y = a.softmax(-1) @ split(self.v(v))
        return self.out(y.transpose(1, 2).reshape(b, n, c))


class Aifi(nn.Module):
    """One transformer encoder layer over the stride-32 map (post-norm, GELU feed-forward)."""

    def __init__(self, c: int, heads: int, ffn: int):
        super().__init__()
        self.attn = Attention(c, heads)
        self.fc1 = nn.Linear(c, ffn)
        self.fc2 = nn.Linear(ffn, c)
        self.norm1 = nn.LayerNorm(c)
        self.norm2 = nn.LayerNorm(c)

    def forward(self, x):
        b, c, h, w = x.shape
        src = x.flatten(2).permute(0, 2, 1)
        pos = sincos_embedding(w, h, c).to(x.dtype)
        q = src + pos
        src = self.norm1(src + self.attn(q, q, src))
        src = self.norm2(src + self.fc2(F.gelu(self.fc1(src))))
        return src.permute(0, 2, 1).reshape(b, c, h, w)


class DeformableAttention(nn.Module):
    """Multi-scale deformable attention: each query samples points around its box on every level."""

    def __init__(self, c: int, heads: int, levels: int, points: int):
        super().__init__()
        self.heads, self.levels, self.points = heads, levels, points
        self.offsets = nn.Linear(c, heads * levels * points * 2)
        self.weights = nn.Linear(c, heads * levels * points)
        self.value = nn.Linear(c, c)
        self.out = nn.Linear(c, c)

    def forward(self, query, ref_boxes, value, shapes):
        b, nq, c = query.shape
        nh, nl, npnt = self.heads, self.levels, self.points
        hd = c // nh
        v = self.value(value).view(b, -1, nh, hd)
        off = self.offsets(query).view(b, nq, nh, nl, npnt, 2)
        att = self.weights(query).view(b, nq, nh, nl * npnt).softmax(-1).view(b, nq, nh, nl, npnt)
        ref_xy = ref_boxes[:, :, None, None, None, :2]
        ref_wh = ref_boxes[:, :, None, None, None, 2:]
        loc = ref_xy + off / npnt * ref_wh * 0.5
        grids = 2 * loc - 1
        sampled = []
        start = 0
        for lvl, (h, w) in enumerate(shapes):
            vl = v[:, start : start + h * w].permute(0, 2, 3, 1).reshape(b * nh, hd, h, w)
            start += h * w
            gl = grids[:, :, :, lvl].permute(0, 2, 1, 3, 4).reshape(b * nh, nq, npnt, 2)
            sampled.append(F.grid_sample(vl, gl, mode="bilinear", padding_mode="zeros", align_corners=False))
        att = att.permute(0, 2, 1, 3, 4).reshape(b * nh, 1, nq, nl * npnt)
        out = (torch.stack(sampled, -2).flatten(-2) * att).sum(-1).view(b, nh * hd, nq)
        return self.out(out.permute(0, 2, 1))


class RtdetrStyle(nn.Module):
    def __init__(self, nc: int = 80, queries: int = 100, keep: int = 100, c: int = 64):
        super().__init__()
        self.nc, self.queries, self.keep = nc, queries, keep
        self.stem = Stem(3, 16, 32)  # stride 4
        self.s8 = Stage(32, 64, 2)
        self.s16 = Stage(64, 96, 2)
        self.s32 = Stage(96, 128, 2)
        self.lat32 = ConvBnAct(128, c, 1, act=False)
        self.aifi = Aifi(c, 4, 2 * c)
        self.lat16 = ConvBnAct(96, c, 1)
        self.lat8 = ConvBnAct(64, c, 1)
        self.fuse16 = Stage(2 * c, c, 1)
        self.fuse8 = Stage(2 * c, c, 1)
        self.down8 = ConvBnAct(c, c, 3, 2)
        self.pan16 = Stage(2 * c, c, 1)
        self.down16 = ConvBnAct(c, c, 3, 2)
        self.pan32 = Stage(2 * c, c, 1)
        self.proj = nn.ModuleList([ConvBnAct(c, c, 1, act=False) for _ in STRIDES])
        self.enc_out = nn.Sequential(nn.Linear(c, c), nn.LayerNorm(c))
        self.enc_score = nn.Linear(c, nc)
        self.enc_box = nn.Sequential(nn.Linear(c, c), nn.ReLU(), nn.Linear(c, 4))
        self.self_attn = Attention(c, 4)
        self.norm1 = nn.LayerNorm(c)
        self.cross = DeformableAttention(c, 4, len(STRIDES), 4)
        self.norm2 = nn.LayerNorm(c)
        self.ffn = nn.Sequential(nn.Linear(c, 2 * c), nn.ReLU(), nn.Linear(2 * c, c))
        self.norm3 = nn.LayerNorm(c)
        self.dec_score = nn.Linear(c, nc)
        self.dec_box = nn.Sequential(nn.Linear(c, c), nn.ReLU(), nn.Linear(c, 4))

    @staticmethod
    def anchors(shapes, eps: float = 1e-2):
        """Per-position anchor boxes in logit space, and which are valid (away from the border)."""
        out = []
        for lvl, (h, w) in enumerate(shapes):
            gy, gx = torch.meshgrid(torch.arange(h, dtype=torch.float32), torch.arange(w, dtype=torch.float32), indexing="ij")
            xy = (torch.stack([gx, gy], -1) + 0.5) / torch.tensor([w, h], dtype=torch.float32)
            wh = torch.full_like(xy, 0.05 * 2.0**lvl)
            out.append(torch.cat([xy, wh], -1).view(-1, 4))
        a = torch.cat(out)[None]
        valid = ((a > eps) & (a < 1 - eps)).all(-1, keepdim=True)
        return torch.log(a / (1 - a)), valid

    def forward(self, x):
        f8 = self.s8(self.stem(x))
        f16 = self.s16(f8)
        f32 = self.s32(f16)
        p32 = self.aifi(self.lat32(f32))
        u16 = self.fuse16(torch.cat([F.interpolate(p32, scale_factor=2.0, mode="nearest"), self.lat16(f16)], 1))
        n8 = self.fuse8(torch.cat([F.interpolate(u16, scale_factor=2.0, mode="nearest"), self.lat8(f8)], 1))
        n16 = self.pan16(torch.cat([self.down8(n8), u16], 1))
        n32 = self.pan32(torch.cat([self.down16(n16), p32], 1))
        levels = [n8, n16, n32]
        shapes = [tuple(t.shape[2:]) for t in levels]
        feats = torch.cat([p(t).flatten(2).permute(0, 2, 1) for p, t in zip(self.proj, levels)], 1)
        b, n, c = feats.shape

        anchors, valid = self.anchors(shapes)
        memory = torch.where(valid, feats, torch.zeros_like(feats))
        enc = self.enc_out(memory)
        enc_scores = self.enc_score(enc)
        best = enc_scores.max(-1).values
        top = torch.topk(best, self.queries, dim=1).indices
        idx = top.unsqueeze(-1).expand(-1, -1, c)
        query = torch.gather(enc, 1, idx)
        ref_logit = self.enc_box(query) + torch.gather(anchors.expand(b, -1, -1), 1, top.unsqueeze(-1).expand(-1, -1, 4))
        ref = ref_logit.sigmoid()

        q = query
        q = self.norm1(q + self.self_attn(q, q, q))
        q = self.norm2(q + self.cross(q, ref, memory, shapes))
        q = self.norm3(q + self.ffn(q))
        boxes = (self.dec_box(q) + ref_logit).sigmoid()
        logits = self.dec_score(q)

        # The deployed post-processor: the best query x class pairs.
        scores, flat = torch.topk(logits.sigmoid().flatten(1), self.keep, dim=1)
        labels = torch.remainder(flat, self.nc)
        which = torch.div(flat, self.nc, rounding_mode="floor")
        kept = torch.gather(boxes, 1, which.unsqueeze(-1).expand(-1, -1, 4))
        valid_q = torch.gather(valid.expand(b, -1, -1)[:, :, 0], 1, top)
        ok = torch.gather(valid_q, 1, which) & ~(scores < 0)
        wide = kept[..., 2:] > 0
        kept = torch.where(ok.unsqueeze(-1) & wide.all(-1, keepdim=True), kept, torch.zeros_like(kept))
        return kept, scores, labels.to(torch.float32)


def seeded(nc: int = 80, seed: int = 0) -> RtdetrStyle:
    """An RtdetrStyle with seeded random weights and batch-norm statistics, in eval mode."""
    torch.manual_seed(seed)
    model = RtdetrStyle(nc=nc)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.1, 0.1)
            m.running_var.uniform_(0.5, 1.5)
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.uniform_(-0.1, 0.1)
    return model.eval()


if __name__ == "__main__":
    import sys

    m = seeded()
    with torch.no_grad():
        outs = m(torch.rand(1, 3, 640, 640))
    print([tuple(o.shape) for o in outs], file=sys.stderr)
    print(f"parameters: {sum(p.numel() for p in m.parameters()) / 1e6:.2f} M", file=sys.stderr)

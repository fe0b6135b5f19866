"""Single-person pose with Google's MoveNet (category ``movenet``): Lightning (192×192) and
Thunder (256×256); output (1, 1, 17, 3): y, x, score of COCO's 17 keypoints in [0, 1].

``--weights none`` builds MoveNet's architecture: a MobileNetV2 backbone, a feature pyramid
to stride 4, CenterNet heads (person centre, keypoint heatmaps, regressions, offsets) and
MoveNet's decoding in the graph (the centre nearest the frame's middle, regressed
keypoints refined on the heatmaps). Pretrained weights come as the seed's exporter gets them:
the TF Hub SavedModel, converted with tf2onnx and imported with onnx2torch.
"""

from __future__ import annotations

from ..core.spec import Preprocessing
from .base import Family
from .pose import oks
from .vision import COCO_KEYPOINTS, COCO_SIGMAS

SIZES = {"movenet_lightning": 192, "movenet_thunder": 256}


class MoveNet(Family):
    word = "movenet"
    category = "movenet"
    task = "pose"
    models = ("movenet_lightning", "movenet_thunder")
    aliases = {"movenet_lightning": ("lightning",), "movenet_thunder": ("thunder",)}
    model_help = "MoveNet single-person pose: lightning (192) or thunder (256) (alone: lightning)"
    factory = "pteforge.models.ported:build_movenet"
    input_dtype = "float32"
    labels_file = "pose_keypoints.txt"
    outputs = "(1, 1, 17, 3): y, x, score per COCO keypoint, in [0, 1] of the input"
    min_agreement = 0.9  # mean OKS against eager
    order = 50

    def input_shape_of(self, name):
        return (1, SIZES[name], SIZES[name], 3)

    def preprocessing_of(self, name):
        # RGB 0-255 as float, NHWC, letterboxed to a square as MoveNet's tutorial pads
        return Preprocessing(size=SIZES[name], fit="letterbox", layout="NHWC", scale=1.0)

    def label_names(self) -> list[str]:
        return list(COCO_KEYPOINTS)

    def decode(self, outputs, meta, names):
        return [{"class": 0, "name": "person", "score": round(float(outputs[0][0, 0, :, 2].mean()), 4),
                 "keypoints": self.keypoints(outputs, meta)}]

    @staticmethod
    def keypoints(outputs, meta) -> list[list[float]]:
        size = round(meta.shape[1] * meta.gain + 2 * meta.pad[0])
        points = []
        for y, x, s in outputs[0][0, 0].tolist():
            px, py = meta.to_photo(x * size, y * size)
            points.append([round(px, 1), round(py, 1), round(s, 4)])
        return points

    def agreement(self, reference, outputs, meta):
        """OKS between eager's keypoints and the program's, the person's scale taken as the
        box around eager's keypoints (at least a tenth of the photo)."""
        ref, mine = self.keypoints(reference, meta), self.keypoints(outputs, meta)
        xs, ys = [p[0] for p in ref], [p[1] for p in ref]
        h, w = meta.shape
        area = max((max(xs) - min(xs)) * (max(ys) - min(ys)), h * w / 10)
        return oks(ref, mine, area, COCO_SIGMAS)


def MoveNetNet(width: float = 1.0):
    import torch
    import torchvision
    from torch import nn

    def head(cin: int, cout: int) -> nn.Module:
        return nn.Sequential(nn.Conv2d(cin, cin, 3, 1, 1, groups=cin), nn.Conv2d(cin, 96, 1), nn.ReLU(inplace=True),
                             nn.Conv2d(96, cout, 1))

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            features = torchvision.models.mobilenet_v2(width_mult=width).features
            self.stages = nn.ModuleList([features[:4], features[4:7], features[7:14], features[14:18]])  # strides 4..32
            chans = [features[3].out_channels, features[6].out_channels, features[13].out_channels, features[17].out_channels]
            self.lateral = nn.ModuleList([nn.Conv2d(c, 64, 1) for c in chans])
            self.smooth = nn.Sequential(nn.Conv2d(64, 64, 3, 1, 1, groups=64), nn.Conv2d(64, 64, 1), nn.ReLU(inplace=True))
            self.center, self.heatmap = head(64, 1), head(64, 17)
            self.regression, self.offset = head(64, 34), head(64, 34)

        def forward(self, image):
            x = image.permute(0, 3, 1, 2) / 127.5 - 1.0
            feats = []
            for stage in self.stages:
                x = stage(x)
                feats.append(x)
            y = self.lateral[3](feats[3])
            for k in (2, 1, 0):
                y = nn.functional.interpolate(y, size=feats[k].shape[-2:], mode="bilinear", align_corners=False)
                y = y + self.lateral[k](feats[k])
            y = self.smooth(y)
            return decode(torch.sigmoid(self.center(y)), torch.sigmoid(self.heatmap(y)), self.regression(y), self.offset(y))

    return Net()


def decode(center, heat, regression, offset):
    """MoveNet's decoding: the person centre nearest the middle, keypoints regressed from it,
    each refined to its heatmap peak weighted by distance to the regressed point, plus its
    offset; (B, 1, 17, 3) y, x, score in [0, 1]."""
    import torch

    b, k, h, w = heat.shape
    ys = torch.arange(h, dtype=torch.float32).view(1, 1, h, 1)
    xs = torch.arange(w, dtype=torch.float32).view(1, 1, 1, w)
    prior = 1.0 / (torch.sqrt((ys - (h - 1) / 2) ** 2 + (xs - (w - 1) / 2) ** 2) + 1.0)
    at = torch.argmax((center * prior).flatten(1), 1)  # (B,)
    cy, cx = (at // w).float(), (at % w).float()
    reg = regression.flatten(2).gather(2, at.view(b, 1, 1).expand(b, 2 * k, 1)).view(b, k, 2)
    ry, rx = cy.view(b, 1) + reg[..., 0], cx.view(b, 1) + reg[..., 1]
    dist = torch.sqrt((ys - ry.view(b, k, 1, 1)) ** 2 + (xs - rx.view(b, k, 1, 1)) ** 2)
    peak = torch.argmax((heat / (dist + 1.8)).flatten(2), 2)  # (B, K)
    py, px = (peak // w).float(), (peak % w).float()
    off = offset.view(b, k, 2, h * w).gather(3, peak.view(b, k, 1, 1).expand(b, k, 2, 1)).view(b, k, 2)
    score = heat.flatten(2).gather(2, peak.view(b, k, 1)).view(b, k)
    y, x = (py + off[..., 0]) / h, (px + off[..., 1]) / w
    return torch.stack((y, x, score), -1).view(b, 1, k, 3)

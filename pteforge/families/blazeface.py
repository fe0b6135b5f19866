"""Face detection with MediaPipe's BlazeFace (category ``blazeface``): 896 SSD anchors on a
128×128 input in [-1, 1]; per anchor 16 regressors (box and six landmarks) and one score.

``--weights none`` builds BlazeFace's own architecture (the front-camera model: BlazeBlocks,
two heads at strides 8 and 16, as MediaPipe's graph and its PyTorch port by M. Hollemans);
pretrained weights come from the ONNX file the seed's exporter converts (PINTO's model zoo).
"""

from __future__ import annotations

from functools import lru_cache

from ..core.spec import Preprocessing
from .vision import box_iou
from .base import Family

SIZE = 128
SCORE_THRESHOLD = 0.75  # MediaPipe's min_score_thresh for the front model
LANDMARKS = ("right_eye", "left_eye", "nose", "mouth", "right_ear", "left_ear")


@lru_cache(maxsize=1)
def anchors():
    """MediaPipe's SSD anchors for the front model: 2 per cell on the 16×16 grid (stride 8),
    6 per cell on the 8×8 grid (strides 16, three layers), fixed size: (896, 2) centres in [0, 1]."""
    import torch

    rows = []
    for grid, per_cell in ((16, 2), (8, 6)):
        for y in range(grid):
            for x in range(grid):
                rows += [((x + 0.5) / grid, (y + 0.5) / grid)] * per_cell
    return torch.tensor(rows)


def decode_boxes(raw):
    """(896, 16) regressors → (896, 16) in [0, 1] image coordinates: x1, y1, x2, y2, then
    six (x, y) landmarks."""
    import torch

    a = anchors()
    cx = raw[:, 0] / SIZE + a[:, 0]
    cy = raw[:, 1] / SIZE + a[:, 1]
    w, h = raw[:, 2] / SIZE, raw[:, 3] / SIZE
    out = [cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2]
    for k in range(6):
        out += [raw[:, 4 + 2 * k] / SIZE + a[:, 0], raw[:, 5 + 2 * k] / SIZE + a[:, 1]]
    return torch.stack(out, 1)


class BlazeFace(Family):
    word = "blazeface"
    category = "blazeface"
    task = "face-detection"
    models = ("blazeface",)
    model_help = "MediaPipe BlazeFace, front camera, 128×128 (alone: blazeface)"
    factory = "pteforge.models.ported:build_blazeface"
    input_shape = (1, 3, SIZE, SIZE)
    preprocessing = Preprocessing(size=SIZE, fit="stretch", mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5))
    labels_file = "blazeface_landmarks.txt"
    outputs = "(1, 896, 16) box + 6 landmark regressors per anchor; (1, 896, 1) score logits"
    min_agreement = 0.9
    order = 60

    def label_names(self) -> list[str]:
        return ["face", *LANDMARKS]

    @staticmethod
    def anchor_table(outputs, meta):
        """Every anchor's (score, box and landmarks in photo pixels as 8 (x, y) pairs)."""
        import torch

        raw, logits = outputs[0][0].float(), outputs[1][0, :, 0].float()
        coords = decode_boxes(raw).reshape(-1, 8, 2) * SIZE
        x, y = meta.to_photo(coords[..., 0], coords[..., 1])
        return torch.sigmoid(logits.clamp(-100, 100)), torch.stack((x, y), -1)

    def faces(self, outputs, meta, threshold: float = SCORE_THRESHOLD, top: int | None = None) -> list[dict]:
        """Faces as MediaPipe finds them: sigmoid score ≥ ``threshold`` (or the ``top``
        strongest anchors), NMS at IoU 0.3, boxes and landmarks in photo pixels."""
        import torch
        import torchvision

        scores, pts = self.anchor_table(outputs, meta)
        boxes = pts[:, :2].reshape(-1, 4)
        keep = torch.topk(scores, top).indices if top else torch.nonzero(scores >= threshold).flatten()
        keep = keep[torchvision.ops.nms(boxes[keep], scores[keep], 0.3)]
        return [{"box": [round(float(v), 1) for v in boxes[i]], "score": round(float(scores[i]), 4), "class": 0,
                 "name": "face", "anchor": i, "keypoints": [[round(float(x), 1), round(float(y), 1), 1.0] for x, y in pts[i, 2:]]}
                for i in keep.tolist()]

    def decode(self, outputs, meta, names):
        return self.faces(outputs, meta)

    def agreement(self, reference, outputs, meta):
        """Per eager face (or eager's five strongest anchors when none passes MediaPipe's
        threshold, as with random weights): the program's box at the same anchor has IoU
        ≥ 0.9 with eager's and its score is within 0.05."""
        faces = self.faces(reference, meta) or self.faces(reference, meta, top=5)
        if not faces:
            return 1.0
        (ref_scores, ref_pts), (scores, pts) = self.anchor_table(reference, meta), self.anchor_table(outputs, meta)
        hits = sum(int(box_iou(ref_pts[a, :2].reshape(4).tolist(), pts[a, :2].reshape(4).tolist()) >= 0.9
                       and abs(float(scores[a]) - float(ref_scores[a])) <= 0.05) for a in (f["anchor"] for f in faces))
        return hits / len(faces)


def _net():
    import torch
    from torch import nn

    class BlazeBlock(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int = 1):
            super().__init__()
            self.stride, self.pad = stride, cout - cin
            self.convs = nn.Sequential(
                nn.Conv2d(cin, cin, 3, stride, 0 if stride == 2 else 1, groups=cin), nn.BatchNorm2d(cin),
                nn.Conv2d(cin, cout, 1), nn.BatchNorm2d(cout))
            self.act = nn.ReLU(inplace=True)

        def forward(self, x):
            h = nn.functional.pad(x, (0, 2, 0, 2)) if self.stride == 2 else x
            if self.stride == 2:
                x = nn.functional.max_pool2d(x, self.stride, self.stride)
            if self.pad > 0:
                x = nn.functional.pad(x, (0, 0, 0, 0, 0, self.pad))
            return self.act(self.convs(h) + x)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            widths = [(24, 24), (24, 28), (28, 32, 2), (32, 36), (36, 42), (42, 48, 2), (48, 56), (56, 64),
                      (64, 72), (72, 80), (80, 88)]
            self.backbone1 = nn.Sequential(nn.Conv2d(3, 24, 5, 2, 0), nn.BatchNorm2d(24), nn.ReLU(inplace=True),
                                           *[BlazeBlock(*w) for w in widths])
            self.backbone2 = nn.Sequential(BlazeBlock(88, 96, 2), *[BlazeBlock(96, 96) for _ in range(4)])
            self.classifier_8, self.classifier_16 = nn.Conv2d(88, 2, 1), nn.Conv2d(96, 6, 1)
            self.regressor_8, self.regressor_16 = nn.Conv2d(88, 32, 1), nn.Conv2d(96, 96, 1)

        def forward(self, x):
            b = x.shape[0]
            x = self.backbone1(nn.functional.pad(x, (1, 2, 1, 2)))
            h = self.backbone2(x)
            scores = torch.cat([self.classifier_8(x).permute(0, 2, 3, 1).reshape(b, -1, 1),
                                self.classifier_16(h).permute(0, 2, 3, 1).reshape(b, -1, 1)], 1)
            boxes = torch.cat([self.regressor_8(x).permute(0, 2, 3, 1).reshape(b, -1, 16),
                               self.regressor_16(h).permute(0, 2, 3, 1).reshape(b, -1, 16)], 1)
            return boxes, scores

    return Net


def BlazeFaceNet():
    return _net()()

"""Object detection: Ultralytics YOLO (category ``yolo``), and the YOLO head every YOLO family
shares: (1, 4 + classes + extra, anchors), boxes as cx, cy, w, h in input pixels."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from ..core.spec import Preprocessing
from .vision import Letterbox, box_iou, installed
from .base import Family


@dataclass
class Detection:
    box: tuple[float, float, float, float]  # x1, y1, x2, y2 in original image pixels
    score: float
    cls: int
    anchor: int = -1  # column of the head output it came from
    extra: Any = None  # the anchor's channels after the class scores (keypoints, mask coefficients)

    def to_dict(self, names: list[str] | None = None) -> dict:
        d = {"box": [round(v, 1) for v in self.box], "score": round(self.score, 4), "class": self.cls}
        if names and self.cls < len(names):
            d["name"] = names[self.cls]
        return d


def _rows(out):
    return (out[0] if out.dim() == 3 else out).transpose(0, 1).float()  # (anchors, channels)


def _photo_box(lb: Letterbox, cx, cy, w, h) -> tuple[float, float, float, float]:
    x1, y1 = lb.to_photo(cx - w / 2, cy - h / 2)
    x2, y2 = lb.to_photo(cx + w / 2, cy + h / 2)
    return (min(max(x1, 0), lb.shape[1]), min(max(y1, 0), lb.shape[0]),
            min(max(x2, 0), lb.shape[1]), min(max(y2, 0), lb.shape[0]))


def decode_yolo(out, lb: Letterbox, nc: int | None = None, conf: float = 0.25, iou: float = 0.45,
                max_det: int = 300) -> list[Detection]:
    """Decode a YOLO head as Ultralytics' predictor does: best of the ``nc`` class scores per
    anchor, confidence threshold, class-aware NMS, boxes mapped back through the letterbox
    to the photo and clipped to it."""
    import torch
    import torchvision

    pred = _rows(out)
    nc = pred.shape[1] - 4 if nc is None else nc
    scores, classes = pred[:, 4:4 + nc].max(1)
    keep = scores > conf
    anchors = torch.nonzero(keep).flatten()
    pred, scores, classes = pred[keep], scores[keep], classes[keep]
    cx, cy, w, h = pred[:, 0], pred[:, 1], pred[:, 2], pred[:, 3]
    boxes = torch.stack((cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2), 1)
    idx = torchvision.ops.batched_nms(boxes, scores, classes, iou)[:max_det]
    return [
        Detection(_photo_box(lb, *pred[i, :4].tolist()), float(scores[i]), int(classes[i]), int(anchors[i]),
                  pred[i, 4 + nc:])
        for i in idx.tolist()
    ]


def anchor_agreement(reference: list[Detection], out, lb: Letterbox, nc: int | None = None, iou: float = 0.9,
                     tie: float = 1e-3) -> float:
    """Fraction of reference boxes the program reproduces at the same anchor: a box with
    IoU ≥ ``iou`` whose score for the reference class is its best (within ``tie``).

    Robust where NMS and argmax are not: with random weights many class scores are equal
    to 1e-6, and which one wins says nothing about the program."""
    if not reference:
        return 1.0
    return sum(_same_box(det, _rows(out)[det.anchor], lb, nc, iou, tie) for det in reference) / len(reference)


def _same_box(det: Detection, row, lb: Letterbox, nc: int | None, iou: float = 0.9, tie: float = 1e-3) -> bool:
    nc = row.numel() - 4 if nc is None else nc
    scores = row[4:4 + nc]
    same_class = float(scores[det.cls]) >= float(scores.max()) - tie
    return same_class and box_iou(det.box, _photo_box(lb, *row[:4].tolist())) >= iou


def matched_fraction(reference: list[Detection], candidate: list[Detection], iou: float = 0.9) -> float:
    """Fraction of reference boxes matched by a same-class candidate box with IoU ≥ ``iou``."""
    if not reference:
        return 1.0 if not candidate else 0.0
    used: set[int] = set()
    hits = 0
    for r in reference:
        best, best_iou = None, iou
        for j, c in enumerate(candidate):
            if j in used or c.cls != r.cls:
                continue
            v = box_iou(r.box, c.box)
            if v >= best_iou:
                best, best_iou = j, v
        if best is not None:
            used.add(best)
            hits += 1
    return hits / len(reference)


class YoloFamily(Family):
    """What every Ultralytics YOLO family shares: the letterboxed 640 input, the head, the
    builder, and agreement measured at the eager detections' own anchors."""

    factory = "pteforge.models.ultralytics_models:build"
    input_shape = (1, 3, 640, 640)
    preprocessing = Preprocessing(size=640, fit="letterbox")
    labels_file = "coco_classes.txt"
    labels_from: ClassVar[str | None] = "ultralytics"  # Family's type: Face has none
    model_class: ClassVar[str] = "DetectionModel"  # ultralytics.nn.tasks class the yaml builds
    nc: ClassVar[int] = 80  # the catalog models' classes (a checkpoint of the user's has its own)
    extra: ClassVar[int] = 0  # channels per anchor after the class scores (keypoints)
    conf: ClassVar[float] = 0.25  # the app's score threshold
    resizable = 32  # the largest stride: anchors are made for the input's size

    def output_classes(self, outputs):
        return self.classes(outputs) if self.task in ("detection", "segmentation") else None

    def classes(self, outputs: list) -> int:
        """How many classes the head scores: its channels per anchor less the box and what
        follows the scores, so a model of any number of classes decodes."""
        return _rows(outputs[0]).shape[1] - 4 - self.extra_of(outputs)

    def extra_of(self, outputs: list) -> int:
        return self.extra

    def yaml(self, name: str) -> str:
        """The Ultralytics model yaml that builds ``name``'s architecture."""
        return f"{name}.yaml"

    def checkpoint(self, name: str) -> str:
        """Where pretrained weights come from: an Ultralytics release asset name, or a URL."""
        return f"{name}.pt"

    def label_names(self) -> list[str]:
        """COCO's class names, from the dataset file Ultralytics ships (not imported)."""
        import yaml

        path = installed("ultralytics", "cfg", "datasets", "coco.yaml")
        if path is None:
            raise FileNotFoundError("Ultralytics' cfg/datasets/coco.yaml is not installed: reinstall ultralytics")
        names = yaml.safe_load(path.read_text())["names"]
        return [names[i] for i in sorted(names)]

    def detections(self, outputs: list, meta: Letterbox, conf: float | None = None, max_det: int = 300) -> list[Detection]:
        return decode_yolo(outputs[0], meta, self.classes(outputs), self.conf if conf is None else conf, max_det=max_det)

    def decode(self, outputs, meta, names):
        return [self.result(d, outputs, meta, names) for d in self.detections(outputs, meta)]

    def result(self, det: Detection, outputs: list, meta: Letterbox, names) -> dict:
        return det.to_dict(names)

    def agreement(self, reference, outputs, meta):
        """Mean over eager's detections of the program's agreement at the same anchor. With
        no detection above the app's threshold (random weights), eager's five strongest
        anchors are compared instead, so the metric is never vacuous."""
        dets = self.detections(reference, meta) or self.detections(reference, meta, conf=0.0, max_det=5)
        if not dets:
            return 1.0
        return sum(self.match(d, reference, outputs, meta) for d in dets) / len(dets)

    def boxes_matched(self, reference, outputs, meta, iou: float = 0.5) -> float:
        """The fraction of eager's boxes the program has too: same class at the same anchor,
        IoU ≥ ``iou`` (the int8 accuracy budget's measure, looser than ``agreement``'s 0.9)."""
        dets = self.detections(reference, meta) or self.detections(reference, meta, conf=0.0, max_det=5)
        rows, nc = _rows(outputs[0]), self.classes(outputs)
        return sum(_same_box(d, rows[d.anchor], meta, nc, iou=iou) for d in dets) / len(dets) if dets else 1.0

    def match(self, det: Detection, reference: list, outputs: list, meta: Letterbox) -> float:
        """1.0 when the program has the same box and class at ``det``'s anchor, else 0.0."""
        return float(_same_box(det, _rows(outputs[0])[det.anchor], meta, self.classes(outputs)))



class ObjectDetection(YoloFamily):
    word = "yolo"
    category = "yolo"
    task = "detection"
    models = ("yolo11n", "yolov8n", "yolov5nu")
    aliases = {"yolov5nu": ("yolov5n",)}
    model_help = "YOLO detectors, e.g. yolo11n yolov8n (alone: yolo11n)"
    outputs = "(1, 84, 8400): cx, cy, w, h + 80 class scores per anchor"
    order = 20

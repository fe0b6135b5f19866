"""Pose estimation: Ultralytics YOLO pose models (category ``yolo-pose``): a person box and
COCO's 17 keypoints per detection; agreement with eager is COCO's keypoint similarity (OKS)."""

from __future__ import annotations

import math

from .vision import COCO_KEYPOINTS, COCO_SIGMAS
from .detection import Detection, YoloFamily, _rows, _same_box


def keypoints(det_extra, meta, count: int = 17) -> list[list[float]]:
    """A pose head's keypoint channels (x, y, score per keypoint, in input pixels) mapped
    back to the photo and clipped to it."""
    values = det_extra.tolist()
    h, w = meta.shape
    out = []
    for k in range(count):  # clipped to the photo, as Ultralytics' predictor does
        x, y = meta.to_photo(values[3 * k], values[3 * k + 1])
        out.append([round(min(max(x, 0.0), w), 1), round(min(max(y, 0.0), h), 1), round(values[3 * k + 2], 4)])
    return out


def oks(a: list, b: list, area: float, sigmas=COCO_SIGMAS) -> float:
    """Object keypoint similarity of two sets of keypoints of the same object, every keypoint
    counted (neither side is ground truth: visibility flags would only hide differences)."""
    area = max(area, 1.0)
    terms = [math.exp(-((p[0] - q[0]) ** 2 + (p[1] - q[1]) ** 2) / (2 * area * (2 * s) ** 2)) for p, q, s in zip(a, b, sigmas)]
    return sum(terms) / len(terms)


class Pose(YoloFamily):
    word = "yolo-pose"
    category = "yolo-pose"
    task = "pose"
    models = ("yolo11n-pose", "yolov8n-pose")
    model_help = "YOLO pose models, e.g. yolo11n-pose yolov8n-pose (alone: yolo11n-pose)"
    model_class = "PoseModel"
    nc = 1
    extra = 3 * len(COCO_KEYPOINTS)
    labels_file = "pose_keypoints.txt"
    outputs = "(1, 56, 8400): cx, cy, w, h, person score, 17 × (x, y, score) per anchor"
    min_agreement = 0.9  # mean OKS against eager
    order = 30

    def label_names(self) -> list[str]:
        return list(COCO_KEYPOINTS)

    def result(self, det: Detection, outputs, meta, names) -> dict:
        d = det.to_dict(["person"])
        d["keypoints"] = keypoints(det.extra, meta)
        return d

    def match(self, det, reference, outputs, meta) -> float:
        """OKS between eager's keypoints and the program's at the same anchor (0 when the
        program's box there is not eager's)."""
        row, nc = _rows(outputs[0])[det.anchor], self.classes(outputs)
        if not _same_box(det, row, meta, nc):
            return 0.0
        box = det.box
        return oks(keypoints(det.extra, meta), keypoints(row[4 + nc:], meta), (box[2] - box[0]) * (box[3] - box[1]))

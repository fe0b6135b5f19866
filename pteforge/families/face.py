"""Face detection with community YOLO face models (category ``yolo-face``): Ultralytics
detectors trained on WIDER FACE with one class, face; decoded and compared as detection."""

from __future__ import annotations

from .detection import YoloFamily

# The community weights the seed's exporter downloads (YapaLab/yolo-face release 1.0.0); its
# table has no yolov8n-face, which comes from akanametov/yolo-face, the project YapaLab forked.
WEIGHTS = {
    "yolov8n-face": "https://github.com/akanametov/yolo-face/releases/download/v0.0.0/yolov8n-face.pt",
    "yolov10n-face": "https://github.com/YapaLab/yolo-face/releases/download/1.0.0/yolov10n-face.pt",
    "yolov11n-face": "https://github.com/YapaLab/yolo-face/releases/download/1.0.0/yolov11n-face.pt",
}


class Face(YoloFamily):
    word = "yolo-face"
    category = "yolo-face"
    task = "face-detection"
    models = ("yolov8n-face", "yolov10n-face", "yolov11n-face")
    model_help = "YOLO face detectors (community weights), e.g. yolov8n-face yolov11n-face (alone: yolov8n-face)"
    nc = 1
    labels_file = "face_classes.txt"
    labels_from = None
    outputs = "(1, 5, 8400): cx, cy, w, h, face score per anchor"
    order = 35

    def yaml(self, name: str) -> str:
        # the architecture is the detector's own, with one class: yolov11n-face is yolo11n
        return name.removesuffix("-face").replace("yolov11", "yolo11") + ".yaml"

    def checkpoint(self, name: str) -> str:
        return WEIGHTS[name]

    def label_names(self) -> list[str]:
        return ["face"]

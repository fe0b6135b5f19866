"""The model catalog: the seed tool's models, each with what an app needs to use it."""

from __future__ import annotations

from ..registry import Registry
from ..spec import InputSpec, ModelSpec, Preprocessing

IMAGENET = Preprocessing(size=224, resize=256, mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))
YOLO = Preprocessing(size=640, letterbox=True)


def _tv(name: str) -> ModelSpec:
    return ModelSpec(
        name=name,
        family="mobilenet",
        task="classification",
        inputs=(InputSpec((1, 3, 224, 224)),),
        factory="pteforge.models.torchvision_models:build",
        preprocessing=IMAGENET,
        labels="imagenet",
    )


def _yolo(name: str) -> ModelSpec:
    return ModelSpec(
        name=name,
        family="yolo",
        task="detection",
        inputs=(InputSpec((1, 3, 640, 640)),),
        factory="pteforge.models.ultralytics_models:build",
        preprocessing=YOLO,
        labels="coco",
    )


CATALOG_MODELS = (
    _tv("mobilenet_v3_small"),
    _tv("mobilenet_v2"),
    _tv("mobilenet_v3_large"),
    _yolo("yolo11n"),
    _yolo("yolov8n"),
    _yolo("yolov5nu"),
)
DEFAULT_MOBILENET = "mobilenet_v3_small"
DEFAULT_YOLO = "yolo11n"
LABEL_FILES = {"imagenet": "imagenet_classes.txt", "coco": "coco_classes.txt"}


def build_catalog() -> Registry[ModelSpec]:
    registry: Registry[ModelSpec] = Registry("model")
    for spec in CATALOG_MODELS:
        aliases = ("yolov5n",) if spec.name == "yolov5nu" else ()
        registry.register(spec.name, spec, aliases=aliases)
    return registry


def labels_for(kind: str) -> list[str]:
    """Class names from the library's own metadata (torchvision, Ultralytics), kept in the
    user cache per library version: reading them imports torch, ~3 s."""
    from importlib import metadata

    from ..cache import cache_root
    from ..io import write_atomic

    library = "torchvision" if kind == "imagenet" else "ultralytics"
    path = cache_root() / "labels" / f"{kind}-{library}-{metadata.version(library)}.txt"
    try:
        return path.read_text().splitlines()
    except OSError:
        pass
    if kind == "imagenet":
        from .torchvision_models import imagenet_labels

        names = imagenet_labels()
    else:
        from .ultralytics_models import coco_labels

        names = coco_labels()
    try:
        write_atomic(path, "\n".join(names) + "\n")
    except OSError:
        pass
    return names

"""Ultralytics YOLO detectors, built from the model yaml, detection head in export mode."""

from __future__ import annotations

import os

from ..errors import WeightsError
from ..spec import WEIGHTS_NONE, WEIGHTS_PRETRAINED, ModelSpec
from .synthetic import statistics_batch
from .weights import load_state_dict_file, recalibrate_batchnorm

os.environ.setdefault("YOLO_OFFLINE", "1")  # never phone home from a build step


def _quiet():
    from ultralytics.utils import LOGGER

    LOGGER.setLevel("WARNING")


def build(spec: ModelSpec, weights: str, seed: int):
    import torch

    _quiet()
    torch.manual_seed(seed)
    if weights == WEIGHTS_PRETRAINED:
        from ultralytics.nn.tasks import load_checkpoint

        try:  # Ultralytics' own download and loading code (trusted release assets)
            model, _ = load_checkpoint(f"{spec.name}.pt")
        except Exception as exc:
            raise WeightsError(
                f"cannot download pretrained weights {spec.name}.pt ({type(exc).__name__})",
                fix="use --weights none for random initialisation or --weights PATH for a local state dict",
            ) from None
    else:
        from ultralytics.nn.tasks import DetectionModel

        model = DetectionModel(f"{spec.name}.yaml", nc=80, verbose=False)
        if weights == WEIGHTS_NONE:
            recalibrate_batchnorm(model, lambda i: statistics_batch(spec, seed * 1000 + i, batch=4))
        else:
            load_state_dict_file(model, weights)
    model = to_export_mode(model)
    # A dry run, as Ultralytics' exporter does: the Detect head computes its anchors
    # for this input shape once and keeps them, so torch.export captures them as
    # constants instead of an arange/expand/full subgraph that runs on the portable
    # kernels every inference (measured on yolo11n/XNNPACK: 6 arange, 3 full and 3
    # _local_scalar_dense fewer outside the delegate).
    with torch.no_grad():
        model(torch.zeros(spec.inputs[0].shape))
    return model


def to_export_mode(model):
    """What Ultralytics' own exporter does before an ExecuTorch export."""
    from ultralytics.nn.modules import Detect
    from ultralytics.utils.export.executorch import executorch_wrapper

    model = model.float().eval()
    for p in model.parameters():
        p.requires_grad = False
    model = model.fuse()
    model = executorch_wrapper(model)
    for m in model.modules():
        if isinstance(m, Detect):
            m.dynamic = False
            m.export = True
            m.format = "executorch"
    return model


def coco_labels() -> list[str]:
    """COCO class names from the dataset yaml that Ultralytics ships (no download)."""
    from pathlib import Path

    import ultralytics
    from ultralytics.utils import YAML

    names = YAML.load(Path(ultralytics.__file__).parent / "cfg" / "datasets" / "coco.yaml")["names"]
    return [names[i] for i in sorted(names)]

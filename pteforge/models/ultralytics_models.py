"""Ultralytics YOLO models (detection, pose, segmentation, ...), built from the model yaml
with the head in export mode; the family says which model class and how many classes."""

from __future__ import annotations

import os
from typing import cast

from ..core.errors import WeightsError
from ..core.spec import WEIGHTS_NONE, WEIGHTS_PRETRAINED, ModelSpec
from ..families import family
from ..families.detection import YoloFamily
from .synthetic import statistics_batch
from .ultralytics_checkpoint import SOURCE, read
from .weights import load_state_dict_file, recalibrate_batchnorm

# Never phone home or pip-install from a build step: Ultralytics patches PIL.Image.open to
# install a HEIF plugin the first time an image does not decode, for every later caller.
os.environ.setdefault("YOLO_OFFLINE", "1")
os.environ.setdefault("YOLO_AUTOINSTALL", "false")



def _quiet():
    from ultralytics.utils import LOGGER

    LOGGER.setLevel("WARNING")


def build(spec: ModelSpec, weights: str, seed: int):
    import torch


    fam = cast(YoloFamily, family(spec.family))  # an Ultralytics model's family
    _quiet()
    torch.manual_seed(seed)
    own = None
    if spec.source == SOURCE:
        assert spec.path is not None  # a checkpoint's spec names its file
        own = read(spec.path)
    if weights == WEIGHTS_PRETRAINED and own is None:
        model = _pretrained(fam.checkpoint(spec.name))
    else:
        from ultralytics.nn import tasks

        if own is not None:  # a checkpoint of the user's: its own architecture and classes
            model = getattr(tasks, own.kind)(own.yaml, nc=len(own.names), verbose=False)
        else:
            model = getattr(tasks, fam.model_class)(fam.yaml(spec.name), nc=fam.nc, verbose=False)
        if weights == WEIGHTS_PRETRAINED and own is not None:  # pretrained without one: _pretrained above
            own.load_into(model)
        elif weights == WEIGHTS_NONE:
            recalibrate_batchnorm(model, lambda i: statistics_batch(spec, seed * 1000 + i, batch=4))
        else:
            load_state_dict_file(model, weights)
    model = to_export_mode(model)
    # A dry run, as Ultralytics' exporter does: the head computes its anchors for this
    # input shape once and keeps them, so torch.export captures them as constants instead
    # of an arange/expand/full subgraph that runs on the portable kernels every inference
    # (measured on yolo11n/XNNPACK: 6 arange, 3 full and 3 _local_scalar_dense fewer
    # outside the delegate).
    with torch.no_grad():
        model(torch.zeros(spec.inputs[0].shape))
    return model


def _pretrained(checkpoint: str):
    """Ultralytics' own download and loading code: a release asset name (yolo11n.pt), or a
    URL of community weights, downloaded once into the user cache."""
    from ultralytics.nn.tasks import load_checkpoint

    try:
        if checkpoint.startswith(("https://", "http://")):
            from ..core.io import cache_root

            path = cache_root() / "weights" / checkpoint.rsplit("/", 1)[-1]
            if not path.exists():
                import torch

                path.parent.mkdir(parents=True, exist_ok=True)
                torch.hub.download_url_to_file(checkpoint, str(path), progress=False)
            checkpoint = str(path)
        model, _ = load_checkpoint(checkpoint)
        return model
    except Exception as exc:
        raise WeightsError(
            f"cannot download pretrained weights {checkpoint} ({type(exc).__name__})",
            fix="use --weights none for random initialisation or --weights PATH for a local state dict",
        ) from None


def to_export_mode(model):
    """What Ultralytics' own exporter does before an ExecuTorch export."""
    from ultralytics.nn.modules import Detect  # Pose and Segment heads are Detects
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

"""torchvision classifiers: the library's own weights and download code."""

from __future__ import annotations

from ..core.errors import WeightsError, one_line
from ..core.spec import WEIGHTS_PRETRAINED, ModelSpec
from .weights import initialise


def build(spec: ModelSpec, weights: str, seed: int):
    import torch
    import torchvision

    torch.manual_seed(seed)
    if weights == WEIGHTS_PRETRAINED:
        enum = torchvision.models.get_model_weights(spec.name).DEFAULT
        try:
            model = torchvision.models.get_model(spec.name, weights=enum)
        except Exception as exc:  # URLError, socket errors, HTTP errors, truncated files
            raise WeightsError(
                f"cannot download pretrained weights for {spec.name} ({one_line(exc, 160)})",
                fix="use --weights none for random initialisation or --weights PATH for a local checkpoint",
            ) from None
        return model.eval()
    return initialise(torchvision.models.get_model(spec.name, weights=None), spec, weights, seed)

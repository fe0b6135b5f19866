"""torchvision classifiers: the library's own weights and download code."""

from __future__ import annotations

from ..errors import WeightsError, one_line
from ..spec import WEIGHTS_NONE, WEIGHTS_PRETRAINED, ModelSpec
from .synthetic import statistics_batch
from .weights import load_state_dict_file, recalibrate_batchnorm


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
    model = torchvision.models.get_model(spec.name, weights=None)
    if weights == WEIGHTS_NONE:
        recalibrate_batchnorm(model, lambda i: statistics_batch(spec, seed * 1000 + i, batch=8))
    else:
        load_state_dict_file(model, weights)
    return model.eval()

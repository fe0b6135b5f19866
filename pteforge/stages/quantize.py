"""PT2E quantization of a captured program with a backend's quantizer."""

from __future__ import annotations

from ..spec import ModelSpec
from ..models.synthetic import make_inputs


def calibration_inputs(spec: ModelSpec, seed: int, samples: int) -> list[tuple]:
    # Seeds far from the verification inputs', so calibration never sees them.
    return [make_inputs(spec, 10_000 + seed * 997 + i) for i in range(samples)]


def quantize(exported, quantizer, spec: ModelSpec, seed: int, samples: int):
    """prepare_pt2e → calibrate → convert_pt2e → torch.export again.

    ``module(check_guards=False)``: under torch 2.13 the Arm quantizer fails on the
    guard nodes that ``module()`` inserts.
    """
    import torch
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    example = make_inputs(spec, seed)
    module = exported.module(check_guards=False)
    prepared = prepare_pt2e(module, quantizer)
    with torch.no_grad():
        for batch in calibration_inputs(spec, seed, samples):
            prepared(*batch)
    converted = convert_pt2e(prepared)
    return torch.export.export(converted, example)

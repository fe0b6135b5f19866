"""Reduced precision of a captured program: PT2E quantization with calibration, and fp16."""

from __future__ import annotations

from pathlib import Path

from ..models.synthetic import make_inputs
from ..spec import ExportConfig, ModelSpec


def calibration_set(spec: ModelSpec, config: ExportConfig) -> tuple[list[tuple], dict]:
    """``config.calibration_samples`` input tuples and what they were.

    Image models get real photos through the model's own preprocessing: the images
    in ``--calibration DIR`` (sorted, the first N), or by default seeded random views
    of the photos our dependencies ship, for half the samples. The rest are seeded
    synthetic inputs, whose seeds lie far from the verification inputs'.
    """
    from ..vision import image_views, images_in, model_input, shipped_images, takes_images

    n = max(config.calibration_samples, 1)
    batches: list[tuple] = []
    facts: dict = {"samples": n}
    if takes_images(spec):
        if config.calibration_dir:
            paths = images_in(Path(config.calibration_dir))[:n]
            batches = [(model_input(p, spec),) for p in paths]
            facts["source"] = f"--calibration {config.calibration_dir}"
        else:
            photos = shipped_images()
            want = n // 2
            views = [v for i, p in enumerate(photos) for v in image_views(p, -(-want // len(photos)), config.seed + i)] if photos else []
            batches = [(model_input(v, spec),) for v in views[:want]]
            facts["source"] = "views of the photos dependencies ship (" + ", ".join(p.name for p in photos) + ") + seeded synthetic"
    else:
        facts["source"] = "seeded synthetic"
    facts["images"] = len(batches)
    synthetic = n - len(batches)
    batches += [make_inputs(spec, 10_000 + config.seed * 997 + i) for i in range(synthetic)]
    facts["synthetic"] = synthetic
    return batches, facts


def quantize(exported, plan, batches: list[tuple], example: tuple):
    """prepare_pt2e → calibrate → convert_pt2e (or the backend's own flow) → torch.export again.

    ``module(check_guards=False)``: under torch 2.13 the Arm quantizer fails on the
    guard nodes that ``module()`` inserts.
    """
    import torch
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    module = exported.module(check_guards=False)
    if plan.quantize is not None:
        with torch.no_grad():
            return torch.export.export(plan.quantize(module, batches), example)
    prepared = prepare_pt2e(module, plan.quantizer)
    with torch.no_grad():
        for batch in batches:
            prepared(*batch)
    converted = convert_pt2e(prepared)
    return torch.export.export(converted, example)


def half_program(exported, example: tuple):
    """The captured program with fp16 weights and compute, keeping fp32 inputs and
    outputs: an app feeds the same tensors as for fp32, and the casts at the edges
    run in the delegate."""
    import copy

    import torch

    class Half(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = copy.deepcopy(inner).to(torch.float16)

        def forward(self, *args):
            out = self.inner(*[a.half() if a.is_floating_point() else a for a in args])
            if isinstance(out, torch.Tensor):
                return out.float() if out.is_floating_point() else out
            return tuple(o.float() if o.is_floating_point() else o for o in out)

    return torch.export.export(Half(exported.module(check_guards=False)), example)

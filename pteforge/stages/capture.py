"""Build the eager model and capture it once with torch.export.

The capture (a ``.pt2``) and the reference (inputs and eager outputs) are files,
so that every target lowers from the same capture, in this process or another.
"""

from __future__ import annotations

import importlib
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import CaptureError
from ..result import Stage
from ..spec import ExportConfig, ModelSpec
from ..models.synthetic import make_inputs


@dataclass(frozen=True)
class Capture:
    model: str
    pt2_path: str
    reference_path: str  # torch.save'd {"inputs", "outputs", and for image models "images", "image_outputs", "image_names"}
    timings: dict[str, float] = field(default_factory=dict)
    # "backend:precision" -> .pt2 of the model after that backend's source transform
    # (torchao weight-only int4 must be applied to the eager model, before capture)
    variants: dict[str, str] = field(default_factory=dict)
    # more than one target of this run quantizes it: each saves what it quantized for the others
    share_quantized: bool = False


def variant_key(backend: str, precision) -> str:
    return f"{backend}:{getattr(precision, 'value', precision)}"


def build_model(spec: ModelSpec, weights: str, seed: int):
    module_name, _, func_name = spec.factory.partition(":")
    if spec.source == "factory":
        from ..models.custom import build_factory

        return build_factory(spec, weights, seed)
    factory = getattr(importlib.import_module(module_name), func_name)
    return factory(spec, weights, seed)


def summarize_export_error(exc: BaseException) -> str:
    """torch.export's messages run to pages; keep the sentence that says what broke."""
    text = str(exc).strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    name = type(exc).__name__
    key = next(
        (
            ln
            for ln in lines
            if any(k in ln for k in ("data-dependent", "Data-dependent", "control flow", "Could not guard", "Unsupported", "not supported"))
        ),
        lines[0] if lines else name,
    )
    hint = ""
    if "data" in text.lower() and "depend" in text.lower() or "control flow" in text.lower():
        hint = " — the model branches on tensor values; rewrite with torch.cond/torch.where or move the branch out of forward()"
    return f"torch.export failed ({name}): {key[:240]}{hint}"


def reference_inputs(spec: ModelSpec, config: ExportConfig) -> list[tuple]:
    """The example input (seed) plus ``verify_inputs`` more seeded inputs."""
    return [make_inputs(spec, config.seed + i) for i in range(1 + max(config.verify_inputs, 0))]


def capture(
    spec: ModelSpec, config: ExportConfig, work_dir: Path, model=None, on_stage=None, variants: tuple = ()
) -> Capture:
    """Export ``spec`` once; save the program and the eager reference outputs.

    ``variants`` are (backend, precision) pairs whose backend transforms the eager
    model before capture; each is captured once more, after its transform.
    """
    from ..workers import one_thread

    with one_thread():
        return _capture(spec, config, work_dir, model, variants)


def _capture(spec: ModelSpec, config: ExportConfig, work_dir: Path, model, variants: tuple) -> Capture:
    import torch

    from ..io import check_writable_tmp
    from ..models.custom import reference_model

    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    if model is None:
        model = build_model(spec, config.weights, config.seed)
    timings[Stage.BUILD.value] = time.perf_counter() - t0

    inputs = reference_inputs(spec, config)
    t0 = time.perf_counter()
    try:
        with torch.no_grad():
            exported = torch.export.export(model, inputs[0])
    except Exception as exc:
        raise CaptureError(summarize_export_error(exc), fix="see https://pytorch.org/docs/stable/export.html") from exc
    timings[Stage.CAPTURE.value] = time.perf_counter() - t0

    t0 = time.perf_counter()
    reference = {"inputs": [list(x) for x in inputs]}
    eager = reference_model(spec, model)
    with torch.no_grad():
        reference["outputs"] = [flatten_outputs(eager(*x)) for x in inputs]
        reference.update(validation_images(spec, eager))
    timings[Stage.REFERENCE.value] = time.perf_counter() - t0

    work_dir = Path(work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    pt2 = work_dir / f"{spec.name}.pt2"
    ref = work_dir / f"{spec.name}.reference.pt"
    saved: dict[str, str] = {}
    with check_writable_tmp(work_dir):
        torch.export.save(exported, str(pt2))
        torch.save(reference, ref)
        if variants:
            t0 = time.perf_counter()
            for backend, precision in variants:
                key = variant_key(backend, precision)
                path = work_dir / f"{spec.name}.{key.replace(':', '_')}.pt2"
                torch.export.save(transformed_capture(model, backend, precision, inputs[0]), str(path))
                saved[key] = str(path)
            timings[Stage.CAPTURE_VARIANTS.value] = time.perf_counter() - t0
    return Capture(spec.name, str(pt2), str(ref), timings, saved)


def transformed_capture(model, backend: str, precision, example: tuple):
    """The eager model after ``backend``'s source transform for ``precision``, captured."""
    import copy

    import torch
    from torchao.quantization import quantize_

    from ..backends import default_registry

    config = default_registry().get(backend).source_transform(precision)
    variant = copy.deepcopy(model)
    quantize_(variant, config.ao_base_config, config.filter_fn)
    with torch.no_grad():
        return torch.export.export(variant, example)


def validation_images(spec: ModelSpec, model) -> dict:
    """Eager outputs on the photos our dependencies ship, for image models: the
    validation set precisions are compared on."""
    from ..vision import model_input, shipped_images, takes_images

    if not takes_images(spec):
        return {}
    photos = shipped_images()
    images = [[model_input(p, spec)] for p in photos]
    return {
        "images": images,
        "image_outputs": [flatten_outputs(model(*x)) for x in images],
        "image_names": [p.name for p in photos],
    }


def flatten_outputs(out) -> list:
    import torch

    if isinstance(out, torch.Tensor):
        return [out.detach().clone()]
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in flatten_outputs(o)]
    if isinstance(out, dict):
        return [t for k in sorted(out) for t in flatten_outputs(out[k])]
    return []

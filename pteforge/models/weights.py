"""Loading weights safely, and making random weights worth comparing."""

from __future__ import annotations

import pickle
from pathlib import Path

from ..core.errors import ModelError, WeightsError, message_line
from ..core.spec import WEIGHTS_NONE
from ..core.units import listed
from .synthetic import statistics_batch
from .ultralytics_checkpoint import is_checkpoint, state_dict


def load_state_dict_file(model, path: str) -> None:
    """Load a local checkpoint into ``model``: with ``torch.load(weights_only=True)``, or
    as safetensors (a ``.safetensors`` file).

    Accepts a state dict, or a dict holding one under ``state_dict``/``model``, its keys
    as a wrapper saved them (``_unwrapped``). A pickle that needs arbitrary code is
    refused and nothing in it runs.
    """
    import torch  # 3.8 s: factory.py, which config files import, imports this module

    p = Path(path)
    if not p.is_file():
        raise WeightsError(
            f"weights file '{path}' does not exist",
            fix="give --weights pretrained, --weights none, or the path of a local checkpoint",
        )
    if p.suffix == ".safetensors":
        obj = _safetensors(p)
    else:
        obj = _torch_load(p)
    if isinstance(obj, dict):
        for key in ("state_dict", "model"):
            if key in obj and isinstance(obj[key], dict):
                obj = obj[key]
                break
    if not isinstance(obj, dict) or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        raise WeightsError(
            f"weights file '{path}' does not hold a state dict of tensors",
            fix="save the weights with torch.save(model.state_dict(), path)",
        )
    obj = _unwrapped(obj, set(model.state_dict()))
    meta = any(t.is_meta for t in [*model.parameters(), *model.buffers()])  # built without values: take the file's
    try:
        model.load_state_dict(obj, strict=True, assign=meta)
    except RuntimeError as exc:
        first = message_line(exc, 200)
        raise WeightsError(
            f"weights file '{path}' does not match the model: {first}",
            fix=f"export it with its own architecture and classes: --model {path}" if is_checkpoint(p)
            else "use a checkpoint of this exact architecture",
        ) from None
    if meta and (left := [n for n, t in [*model.named_parameters(), *model.named_buffers()] if t.is_meta]):
        raise WeightsError(f"the model was built on the meta device, and weights file '{path}' gives no values for "
                           f"{listed(left, 3)}",
                           fix="build the model on the CPU (its buffers made there), then load the file")


def _torch_load(p: Path):
    """What ``torch.load(weights_only=True)`` reads from ``p``: a pickle that needs
    arbitrary code is refused, or read as an Ultralytics checkpoint without running it."""
    import torch

    try:
        return torch.load(p, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raw = str(exc)  # torch's reason is its paragraph after two paragraphs of advice
        _, found, rest = raw.partition("WeightsUnpickler error:")
        reason = found + " " + rest.strip().split("\n\n")[0] if found else raw
        first = message_line(ValueError(reason), 240)
        if not is_checkpoint(p):
            raise WeightsError(
                f"refused to load '{p}': it is not a plain state dict ({first})",
                fix="save the weights with torch.save(model.state_dict(), path); pickled objects are never executed",
            ) from None
        return _checkpoint_state(p)
    except Exception as exc:
        raise WeightsError(
            f"cannot read weights file '{p}': {type(exc).__name__}",
            fix="give a checkpoint written by torch.save(model.state_dict(), path)",
        ) from None


def _safetensors(p: Path) -> dict:
    """A ``.safetensors`` file's tensors (Hugging Face's format: no pickle at all)."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        return load_file(str(p))
    except (SafetensorError, OSError, ValueError) as exc:
        raise WeightsError(f"cannot read safetensors file '{p}': {message_line(exc, 200)}",
                           fix="give a file written by safetensors.torch.save_file(model.state_dict(), path)") from None


def _checkpoint_state(path: Path) -> dict:
    """An Ultralytics checkpoint's weights, read without running it (a WeightsError if not)."""
    try:
        return state_dict(path)
    except ModelError as exc:
        raise WeightsError(str(exc), fix=exc.fix) from None


# What wrapping a model adds to every key of its state dict: DataParallel and
# DistributedDataParallel (``module.``), torch.compile (``_orig_mod.``), a training module
# holding the network as ``self.model`` (Lightning).
WRAPPER_PREFIXES = ("module.", "_orig_mod.", "model.")


def _unwrapped(state: dict, expected: set[str]) -> dict:
    """``state`` with the prefixes a wrapper put on all of its keys taken off, when the
    model's own keys do not have them."""
    while set(state) != expected:
        prefix = next((p for p in WRAPPER_PREFIXES if state and all(k.startswith(p) for k in state)
                       and not any(k.startswith(p) for k in expected)), None)
        if prefix is None:
            break
        state = {k[len(prefix):]: v for k, v in state.items()}
    return state


def recalibrate_batchnorm(model, inputs_fn, batches: int = 4) -> None:
    """Re-estimate BatchNorm running statistics on ``inputs_fn(i)`` batches.

    A freshly initialised network has running mean 0 / var 1, which do not match
    its activations: its outputs collapse (measured ~1e-9 for mobilenet_v3_small)
    and any comparison passes. With the statistics re-estimated, outputs have a
    healthy spread, so verification means something.
    """
    import torch

    bns = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if not bns:
        return
    for bn in bns:
        bn.reset_running_stats()
        bn.momentum = None  # cumulative average over the calibration batches
    saved = own_buffers(model, but=bns)
    model.train()
    try:
        with torch.no_grad():
            for i in range(batches):
                model(*inputs_fn(i))
    finally:
        put_back(model, saved)
    model.eval()


def own_buffers(model, but=()) -> dict:
    """A copy of every buffer of ``model`` (but those of the modules in ``but``), by name:
    a model's own running state (a streaming model's average, a step counter), which
    forward passes change in place. Re-estimating BatchNorm statistics or calibrating a
    quantizer must not start the exported program mid-stream (``put_back`` after them):
    a model averaging its features into a buffer came out of int8 calibration with 16
    inputs' worth of average in it (its xnnpack:int8 artifact failed verification at
    -18 dB; with this and stages/quantize.py's ``_updates_buffers``, 30 dB)."""
    skip = {id(b) for m in but for b in m.buffers(recurse=False)}
    return {name: value.detach().clone() for name, value in model.named_buffers() if id(value) not in skip}


def put_back(model, saved: dict) -> None:
    """Restore the buffers ``own_buffers`` copied, by name, into ``model`` (the same
    module, or what a quantizer made of it in place)."""
    import torch

    with torch.no_grad():
        for name, value in saved.items():
            owner_name, _, attr = name.rpartition(".")
            try:
                owner = model.get_submodule(owner_name)
            except AttributeError:
                continue
            now = owner._buffers.get(attr)
            if now is not None and now.shape == value.shape and now.dtype == value.dtype:
                now.copy_(value)
            elif attr in owner._buffers:
                owner._buffers[attr] = value


def initialise(model, spec, weights: str, seed: int, batch: int = 8):
    """Random weights made worth comparing (``--weights none``: BatchNorm statistics
    re-estimated on photo views and synthetic inputs), or a local state dict."""
    if weights == WEIGHTS_NONE:
        recalibrate_batchnorm(model, lambda i: statistics_batch(spec, seed * 1000 + i, batch=batch))
    else:
        load_state_dict_file(model, weights)
    return model.eval()

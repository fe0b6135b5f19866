"""Ultralytics checkpoints (``yolo train``'s ``best.pt``), read without running them.

Such a file pickles the model object itself: Ultralytics' and torch.nn's classes, which
``torch.load(weights_only=True)`` refuses and a plain ``torch.load`` would run. Here every
class or function the pickle names stands for ``_Recorded``, which only keeps what it is
given: the unpickler rebuilds tensors (torch's own allowlist) and plain containers, and
nothing the file names is imported or called. What a module kept (``_parameters``,
``_buffers``, ``_modules``, ``yaml``, ``names``) is then read off the records: the model's
architecture (its yaml, as Ultralytics builds it), its class names and its state dict.
"""

from __future__ import annotations

import re
import zipfile
from dataclasses import dataclass, replace
from pathlib import Path

from ..core.errors import ModelError, UsageError, WeightsError, message_line
from ..core.spec import InputSpec, ModelSpec
from ..families import family

# The Ultralytics model classes pteforge exports, and the family each one is.
FAMILIES = {"DetectionModel": "yolo", "SegmentationModel": "yolo-seg", "PoseModel": "yolo-pose"}

SOURCE = "ultralytics"  # ModelSpec.source of a checkpoint of the user's (--model best.pt)


class _Recorded:
    """What the pickle built where it named a class or function: its arguments and state."""

    def __init__(self, *args, **kwargs):
        self.args = args

    def __setstate__(self, state):
        if isinstance(state, dict):
            self.__dict__.update(state)


def is_checkpoint(path: str | Path) -> bool:
    """Whether ``path`` pickles Ultralytics' own classes, read from the pickle's opcodes
    (torch imported only for a file whose pickle names Ultralytics at all)."""
    try:
        with zipfile.ZipFile(path) as archive:
            pickle = next((n for n in archive.namelist() if n.endswith("/data.pkl")), None)
            named = pickle is not None and b"ultralytics." in archive.read(pickle)
    except (zipfile.BadZipFile, OSError):
        return False
    return named and any(g.startswith("ultralytics.") for g in _globals(path))


def _globals(path) -> list[str]:
    import torch

    try:
        return torch.serialization.get_unsafe_globals_in_checkpoint(str(path))
    except Exception:  # noqa: BLE001 - not a file torch can read: not a checkpoint
        return []


@dataclass(frozen=True)
class Checkpoint:
    kind: str  # the model's class: DetectionModel, PoseModel, ...
    yaml: dict  # its architecture, as ultralytics.nn.tasks builds it
    names: tuple[str, ...]  # its class names, in class order
    state: dict  # its state dict (the tensors as saved: fp16 in a finished run's file)
    imgsz: int | None  # the square size it was trained at, if the file says

    @property
    def family(self) -> str:
        return FAMILIES[self.kind]

    def load_into(self, model) -> None:
        """Its weights into ``model`` (built from ``yaml``); a checkpoint saved after
        ``fuse()`` (no BatchNorm) loads into the fused model."""
        import torch

        if not any(".bn." in k for k in self.state) and any(".bn." in k for k in model.state_dict()):
            model.fuse(verbose=False)
        try:
            with torch.no_grad():
                model.load_state_dict(self.state, strict=True)
        except RuntimeError as exc:
            raise WeightsError(f"the weights in the checkpoint do not match the architecture its yaml builds: "
                               f"{message_line(exc, 200)}",
                               fix="give the best.pt or last.pt that yolo train wrote, as it wrote it") from None


def _recorded(path: str | Path) -> tuple:
    """(the model's record, everything the file saved), nothing in it run."""
    import torch

    stand_ins = [(type(name.rpartition(".")[2], (_Recorded,), {}), name) for name in _globals(path)]
    try:
        with torch.serialization.safe_globals(stand_ins):
            saved = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - whatever the unpickler raises, the file is refused
        named = re.search(r"GLOBAL (\S+)", str(exc))  # torch refuses os, sys, ... even as stand-ins
        why = f"it names {named.group(1)}, which no model needs (nothing in it was run)" if named else type(exc).__name__
        raise ModelError(f"refused to read the Ultralytics checkpoint '{path}': {why}",
                         fix="give the best.pt or last.pt that yolo train wrote, as it wrote it") from None
    model = (saved.get("ema") or saved.get("model")) if isinstance(saved, dict) else None
    if not isinstance(model, _Recorded) or not isinstance(getattr(model, "yaml", None), dict):
        raise ModelError(f"'{path}' holds no Ultralytics model (no 'model' or 'ema' in it)",
                         fix="give the best.pt or last.pt that yolo train wrote")
    return model, saved


def state_dict(path: str | Path) -> dict:
    """The state dict of the model in an Ultralytics checkpoint, nothing in it run."""
    return _state_dict(_recorded(path)[0])


def read(path: str | Path) -> Checkpoint:
    """The model in an Ultralytics checkpoint, nothing in it run (module docstring)."""
    model, saved = _recorded(path)
    kind = type(model).__name__
    if kind not in FAMILIES:
        raise ModelError(f"'{path}' is an Ultralytics {kind}: pteforge exports detection, segmentation and pose "
                         "checkpoints", fix=f"yolo export model={path} format=onnx, then --model {Path(path).stem}.onnx")
    names = getattr(model, "names", None) or {i: f"class{i}" for i in range(int(model.yaml.get("nc") or 0))}
    names = names if isinstance(names, dict) else dict(enumerate(names))
    args = saved.get("train_args") if isinstance(saved.get("train_args"), dict) else {}
    size = args.get("imgsz")
    return Checkpoint(kind=kind, yaml=model.yaml, names=tuple(str(names[i]) for i in sorted(names)),
                      state=_state_dict(model), imgsz=size if isinstance(size, int) else None)


def _state_dict(module, prefix: str = "", out: dict | None = None) -> dict:
    """``module.state_dict()`` from what its records kept: parameters, persistent buffers,
    submodules in their order."""
    import torch

    out = {} if out is None else out
    kept = module.__dict__
    transient = kept.get("_non_persistent_buffers_set")
    transient = transient if isinstance(transient, (set, frozenset)) else set()
    for group in ("_parameters", "_buffers"):
        for name, value in (kept.get(group) or {}).items():
            if isinstance(value, torch.Tensor) and name not in transient:
                out[prefix + name] = value
    for name, child in (kept.get("_modules") or {}).items():
        if isinstance(child, _Recorded):
            _state_dict(child, f"{prefix}{name}.", out)
    return out


def checkpoint_spec(path: str, inputs: tuple, dtypes: tuple[str, ...] = ()):
    """``--model best.pt``: the checkpoint's own family (``yolo``, ``yolo-seg``,
    ``yolo-pose``), classes (its labels file, ``<name>_labels.txt``) and input size (the
    size it was trained at, 640 if it does not say; ``--input-shape 1,3,S,S`` changes it)."""
    p = Path(path)
    found = read(p)
    kpts = found.yaml.get("kpt_shape")
    if found.kind == "PoseModel" and list(kpts or []) != [17, 3]:
        raise ModelError(f"'{path}' is a pose model of {kpts[0] if kpts else '?'} keypoints: the yolo-pose family (and "
                         "the app) read COCO's 17 person keypoints",
                         fix=f"yolo export model={path} format=onnx, then --model {p.stem}.onnx")
    if len(inputs) > 1 or any(d != "float32" for d in dtypes):
        raise UsageError(f"'{path}' takes one float32 image", fix="give one --input-shape 1,3,S,S and no --input-dtype")
    fam = family(found.family)
    assert fam.preprocessing is not None  # a YOLO family's letterbox
    size = found.imgsz or 640
    own = fam.task in ("detection", "segmentation")  # a pose model's labels are its keypoints
    spec = ModelSpec(name=p.stem, family=fam.category, task=fam.task, inputs=(InputSpec((1, 3, size, size)),),
                     factory=fam.factory, source=SOURCE, path=str(p.resolve()),
                     preprocessing=replace(fam.preprocessing, size=size),
                     labels=f"{p.stem}_labels.txt" if own else fam.labels_file, names=found.names if own else ())
    return fam.resized(spec, inputs[0].shape) if inputs else spec

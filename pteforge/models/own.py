"""A ``--model`` of one's own: which source it is (a model file, recognised by its
content, or a factory), and its spec from that source's module."""

from __future__ import annotations

import zipfile
from pathlib import Path

from ..core.errors import ModelError, UsageError
from ..core.limits import check_archive
from ..core.spec import InputSpec, ModelSpec
from .factory import factory_spec
from .onnx.spec import onnx_spec
from .pt2 import pt2_spec
from .torchscript import torchscript_spec
from .ultralytics_checkpoint import checkpoint_spec, is_checkpoint

TORCHSCRIPT_SUFFIXES = (".pt", ".pth", ".ptl", ".torchscript", ".jit")
FILE_SUFFIXES = (".pt2", ".onnx", *TORCHSCRIPT_SUFFIXES)  # a --model that is a file, not a factory


def file_kind(path: str | Path) -> str | None:
    """What a model file is, read from its content, whatever its name (``.jit``, ``.bin``,
    none): ``pt2`` (torch.export.save), ``torchscript`` (a zip with TorchScript's ``code/``),
    ``checkpoint`` (a torch.save zip: weights or a pickled module, never unpickled here),
    ``onnx`` (an ONNX ModelProto with a graph), or None. A zip archive whose directory
    breaks ``core.limits`` (a member's or the total declared size, the count, the ratio) is
    refused (ModelError) before anything reads a member."""
    p = Path(path)
    if not p.is_file():
        return None
    if zipfile.is_zipfile(p):
        try:  # judged by its directory (core/limits.py) before any reader inflates a member
            names = [m.filename for m in check_archive(p, error=ModelError)]
        except (zipfile.BadZipFile, OSError):
            return None
        if any(n.endswith("/archive_format") or n.endswith("serialized_exported_program.json") for n in names):
            return "pt2"
        if any("/code/" in n or n.startswith("code/") for n in names):
            return "torchscript"
        return "checkpoint" if any(n.endswith("data.pkl") for n in names) else None
    with p.open("rb") as f:
        head = f.read(2)
    if head[:1] == b"\x80":  # a pickle (torch.save's legacy format): not ONNX
        return "checkpoint"
    import onnx  # 0.4 s: config files import this module for FILE_SUFFIXES (ui/config.py)

    try:
        graph = onnx.load(str(p), load_external_data=False).graph
    except Exception:  # noqa: BLE001 - protobuf's errors: not ONNX
        return None
    return "onnx" if len(graph.node) else None


def custom_spec(ref: str, inputs: tuple[InputSpec, ...], dtypes: tuple[str, ...] = ()) -> ModelSpec:
    """A ``--model``: a model file, recognised by its content (a .pt2, an ONNX file, a
    TorchScript program, an Ultralytics checkpoint), or ``package.module:factory(...)``.
    ``inputs``: the ``--input-shape``s with their dtypes; ``dtypes``: the ``--input-dtype``s
    as given, which a file that says its dtypes checks (with or without shapes)."""
    kind = file_kind(ref) if Path(ref).suffix != ".py" else None
    if kind is None and ref.endswith(FILE_SUFFIXES):
        kind = {".pt2": "pt2", ".onnx": "onnx"}.get(Path(ref).suffix, "torchscript")  # its own error says why not
    by_name = kind in ("torchscript", "checkpoint")  # a TorchScript forward's arguments have names too
    if kind != "onnx" and any((i.name and not by_name) or i.value is not None for i in inputs):
        named = next(i for i in inputs if (i.name and not by_name) or i.value is not None)
        in_order = " ".join(f"--input-shape {_unnamed(i)}" for i in inputs if i.value is None)
        raise UsageError(f"--input-shape {named.name or ''}{'=' if named.name else ''}... names an input or gives a value: "
                         f"that applies to ONNX files and TorchScript programs, whose inputs the file names",
                         fix=f"give the shapes in forward's order, without names: {in_order or '--input-shape 1,3,224,224'}")
    if kind == "pt2":
        return pt2_spec(ref, inputs, dtypes)
    if kind == "onnx":
        return onnx_spec(ref, inputs, dtypes)
    if kind in ("torchscript", "checkpoint"):
        if kind == "checkpoint" and is_checkpoint(ref):
            return checkpoint_spec(ref, inputs, dtypes)
        return torchscript_spec(ref, inputs)
    if Path(ref).is_file() and Path(ref).suffix != ".py":
        raise UsageError(f"'{ref}' is not a model file pteforge reads (not a torch.export program, a TorchScript "
                         "program, a torch.save checkpoint nor an ONNX graph)",
                         fix="give a .pt2, an ONNX file, a TorchScript file, or package.module:factory")
    return factory_spec(ref, inputs)


def _unnamed(given: InputSpec) -> str:
    """``given`` as ``--input-shape`` takes it without a name: ``int64:1,12``."""
    dims = ",".join(map(str, given.shape))
    return dims if given.dtype == "float32" else f"{given.dtype}:{dims}"

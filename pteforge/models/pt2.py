"""``torch.export.save`` files (.pt2): the program's own inputs, checked against the
``--input-shape``s and ``--input-dtype``s given; its module is the eager reference."""

from __future__ import annotations

import logging
import zipfile
from pathlib import Path
from typing import Any

from ..core.errors import ModelError, UsageError
from ..core.limits import check_archive
from ..core.spec import InputSpec, ModelSpec


def pt2_spec(path: str, given: tuple[InputSpec, ...] = (), dtypes: tuple[str, ...] = ()) -> ModelSpec:
    """A spec for a ``torch.export.save`` file. Its inputs are the program's: their dtypes
    (``dtypes``, the ``--input-dtype``s, must be the same), and the shapes it was exported
    with, or ``given`` (``--input-shape``) where its dynamic dims allow them (a static dim
    must match, a dynamic one be in its range)."""
    import torch  # 3.8 s: own.py, which config files import, imports this module

    p = Path(path)
    if not p.is_file():
        raise UsageError(f"model file '{path}' does not exist", fix="give the path of a .pt2 written by torch.export.save")
    fix = "write it with torch.export.save(torch.export.export(model, inputs), 'model.pt2')"
    if not zipfile.is_zipfile(p):  # checked first: torch logs a whole traceback before raising
        raise ModelError(f"'{path}' is not a torch.export program (not a zip archive, as torch.export.save writes)", fix=fix)
    try:  # its members' declared sizes and count, before torch inflates any (core/limits.py)
        check_archive(p, error=ModelError)
    except zipfile.BadZipFile as exc:
        raise ModelError(f"'{path}' is not a torch.export program (a damaged zip archive: {exc})", fix=fix) from None
    export_log = logging.getLogger("torch.export")
    level = export_log.level
    export_log.setLevel(logging.ERROR)  # its "Ran into the following error" traceback: the line below says it
    try:
        ep = torch.export.load(str(p))
    except Exception as exc:
        raise ModelError(f"'{path}' is not a torch.export program ({type(exc).__name__})", fix=fix) from None
    finally:
        export_log.setLevel(level)
    inputs = []
    placeholders = [n for n in ep.graph.nodes if n.op == "placeholder" and n.name in ep.graph_signature.user_inputs]
    if given and len(given) != len(placeholders):
        raise UsageError(f"--input-shape given {len(given)} time(s) for '{path}', whose program takes "
                         f"{len(placeholders)} input(s)", fix="give one --input-shape per input, or none")
    for i, node in enumerate(placeholders):
        val = node.meta.get("val")
        shape, bounds = _dims(val, ep.range_constraints)  # a dynamic dim: the size it was exported with
        dtype = str(val.dtype).replace("torch.", "")
        if given:
            check_dims(path, node.name, bounds, given[i].shape)
            shape = given[i].shape
        inputs.append(InputSpec(shape, dtype))
    check_dtypes(path, [n.name for n in placeholders], inputs, dtypes)
    return ModelSpec(
        name=p.stem,
        family="custom",
        task="custom",
        inputs=tuple(inputs),
        factory="pteforge.models.pt2:build_pt2",
        source="pt2",
        path=str(p.resolve()),
    )


def _dims(val, ranges) -> tuple[tuple[int, ...], list[tuple[int, int | None]]]:
    """An input's shape as it was exported, and each dim's (least, most): both its size for
    a static dim, its range for a dynamic one (most None: no upper bound). Read before
    anything calls ``int()`` on a dynamic dim, which makes it static at its example size."""
    shape: list[int] = []
    bounds: list[tuple[int, int | None]] = []
    for d in val.shape:
        node: Any = getattr(d, "node", None)  # torch's SymNode of a symbolic dim (r is None without one)
        r = ranges.get(node.expr) if node is not None else None
        if r is None:
            shape.append(int(d))
            bounds.append((int(d), int(d)))
        else:
            shape.append(int(node.hint) if node.hint is not None else int(r.lower))
            try:
                high = int(r.upper)
            except (TypeError, ValueError, AttributeError, OverflowError):  # torch's int_oo
                high = None
            bounds.append((int(r.lower), high))
    return tuple(shape), bounds


def check_dtypes(path: str, names: list[str], inputs: list[InputSpec], dtypes: tuple[str, ...]) -> None:
    """The ``--input-dtype``s given for a file that says its inputs' dtypes itself (a .pt2, an
    .onnx): one for every input or one per input, each the file's own."""
    if not dtypes:
        return
    if len(dtypes) not in (1, len(inputs)):
        raise UsageError(f"--input-dtype given {len(dtypes)} times for '{path}', whose program takes "
                         f"{len(inputs)} input(s)", fix="give one --input-dtype per input, or none")
    for i, (name, spec) in enumerate(zip(names, inputs)):
        want = dtypes[i] if len(dtypes) > 1 else dtypes[0]
        if want != spec.dtype:
            raise UsageError(f"--input-dtype {want} for input {name} of '{path}', whose program takes {spec.dtype}",
                             fix=f"give --input-dtype {spec.dtype}, or none: the file says its inputs' dtypes")


def check_dims(path: str, name: str, bounds: list[tuple[int, int | None]], shape: tuple[int, ...]) -> None:
    """``shape`` (``--input-shape``) against input ``name``'s dims in the program."""
    if len(shape) == len(bounds) and all(low <= s and (high is None or s <= high)
                                         for s, (low, high) in zip(shape, bounds)):
        return

    def said(low: int, high: int | None) -> str:
        return str(low) if low == high else f"{low} or more" if high is None else f"{low}..{high}"

    raise UsageError(f"--input-shape {','.join(map(str, shape))} does not fit input {name} of '{path}', "
                     f"whose dims are {', '.join(said(lo, hi) for lo, hi in bounds)}",
                     fix="give a shape the program was exported for, or export it again with that shape")


def build_pt2(spec: ModelSpec, weights: str, seed: int):
    """The eager reference of a .pt2 is the program's own module."""
    import torch

    return torch.export.load(spec.path).module()

"""TorchScript files (``torch.jit.script(model).save``, ``torch.jit.trace``, PyTorch
Mobile's ``.ptl``): ``forward``'s arguments bound to the ``--input-shape``s, by name or in
order, the others left at their defaults."""

from __future__ import annotations

import warnings
import zipfile
from pathlib import Path

from ..core.errors import ModelError, UsageError, one_line
from ..core.registry import closest
from ..core.spec import InputSpec, ModelSpec
from .signature import forward_signature


def torchscript_spec(path: str, inputs: tuple[InputSpec, ...]) -> ModelSpec:
    """A spec for a TorchScript file (``torch.jit.script(model).save``, ``torch.jit.trace``,
    PyTorch Mobile's ``.ptl``): it keeps no input shapes, so ``--input-shape`` gives them,
    in order or by the name of ``forward``'s argument (``--input-shape attention_mask=1,16``);
    ``forward``'s other arguments with defaults stay at them (``torchscript_inputs``).
    A ``torch.save`` file (a state dict, a pickled module) holds no program: refused,
    saying how to export it instead."""
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"model file '{path}' does not exist", fix="give the path of a TorchScript file")
    try:
        with zipfile.ZipFile(p) as archive:
            scripted = any("/code/" in name for name in archive.namelist())
    except (zipfile.BadZipFile, OSError):
        scripted = False
    if not scripted:
        raise ModelError(f"'{path}' is not a TorchScript program (a torch.save file of weights or a pickled module "
                         "holds no code to export)",
                         fix=f"give the factory that builds the model: --model package.module:factory --weights {path}, "
                             "or save the model as TorchScript: torch.jit.script(model).save('model.pt')")
    arguments = forward_arguments(_load_torchscript(str(p)))
    if not inputs:
        tensors = [a for a in arguments if a.tensor]
        takes = f" (forward's tensors: {', '.join(a.name + ('' if a.has_default else ' (required)') for a in tensors)})" \
            if tensors else ""
        raise UsageError(f"'{path}' is TorchScript, which keeps no input shapes{takes}",
                         fix="give one --input-shape (and --input-dtype) per input, in order or by name, e.g. --input-shape "
                             + (f"{tensors[0].name}=1,3,224,224" if tensors else "1,3,224,224"))
    return ModelSpec(name=p.stem, family="custom", task="custom", inputs=torchscript_inputs(path, arguments, inputs),
                     factory="pteforge.models.torchscript:build_torchscript", source="torchscript", path=str(p.resolve()))


class Argument:
    """One argument of a TorchScript ``forward`` (its schema's): name, type as TorchScript
    writes it, and whether it has a default value."""

    def __init__(self, name: str, type_: str, has_default: bool):
        self.name, self.type, self.has_default = name, type_, has_default

    @property
    def tensor(self) -> bool:
        """Whether ``--input-shape`` can give it: a ``Tensor`` or an ``Optional[Tensor]``."""
        return self.type in ("Tensor", "Optional[Tensor]")

    def __str__(self) -> str:
        return f"{self.name}: {self.type}"


def forward_arguments(module) -> list[Argument]:
    """The arguments of a TorchScript module's ``forward``, ``self`` left out."""
    schema = getattr(getattr(module, "forward", None), "schema", None)
    if schema is None:
        return []
    return [Argument(a.name, str(a.type), a.has_default_value()) for a in schema.arguments[1:]]


def torchscript_inputs(path: str, arguments: list[Argument], inputs: tuple[InputSpec, ...]) -> tuple[InputSpec, ...]:
    """``inputs`` bound to ``forward``'s arguments and named by them, in ``forward``'s order:
    named ones by name, the others in order to the arguments left. What no input gives
    keeps its default; refused in one line: a name ``forward`` does not take, an input
    given to an argument that is no tensor, and each argument without a default that
    is left (a tensor: which ``--input-shape`` gives it; another type: that pteforge feeds
    tensors only)."""
    names = [a.name for a in arguments]
    if not names:  # no schema to bind by: today's positional feeding
        return inputs
    by_name = {a.name: a for a in arguments}
    bound: dict[str, InputSpec] = {}
    for given in inputs:
        if not given.name:  # the named ones first
            continue
        if given.name not in by_name:
            near = closest(given.name, names)
            raise UsageError(f"--input-shape {given.name}=...: '{path}' forward takes no '{given.name}'"
                             + (f" (did you mean '{near}'?)" if near else "") + f"; it takes {', '.join(map(str, arguments))}",
                             fix=f"name one of forward's arguments: --input-shape {near or names[0]}=...")
        bound[given.name] = given
    free = iter(a for a in arguments if a.name not in bound)
    for given in (i for i in inputs if not i.name):
        arg = next(free, None)
        if arg is None:
            raise UsageError(f"{len(inputs)} --input-shape given; '{path}' forward takes {len(names)} arguments "
                             f"({', '.join(map(str, arguments))})", fix="give one --input-shape per tensor forward takes")
        bound[arg.name] = InputSpec(given.shape, given.dtype, arg.name)
    _check_bound(path, arguments, bound)
    return tuple(bound[n] for n in names if n in bound)


def _check_bound(path: str, arguments: list[Argument], bound: dict[str, InputSpec]) -> None:
    """Refuses an input given to an argument that is no tensor, then the arguments
    without a default that no input gives."""
    for arg in arguments:
        if arg.name in bound and not arg.tensor:
            raise UsageError(f"--input-shape gives a tensor for {arg}, an argument of '{path}' forward that is no tensor",
                             fix="give --input-shape for forward's tensor arguments only"
                                 + (f", by name: --input-shape NAME=... ({', '.join(a.name for a in arguments if a.tensor)})"
                                    if any(a.tensor for a in arguments) else ""))
    missing = [a for a in arguments if a.name not in bound and not a.has_default]
    tensors = [a for a in missing if a.tensor]
    if tensors:
        raise UsageError(f"'{path}' forward needs {', '.join(map(str, tensors))}, which no --input-shape gives",
                         fix=" ".join(f"--input-shape {a.name}=..." for a in tensors) + " (with --input-dtype where not float32)")
    if missing:
        raise ModelError(f"'{path}' forward takes {', '.join(map(str, missing))} without a default besides its tensors; "
                         "pteforge feeds tensors only",
                         fix="script a module whose forward takes only tensors and calls this one with those values, "
                             "or export the model with --model package.module:factory from its PyTorch code")


def _load_torchscript(path: str):
    import torch  # 3.8 s: own.py, which config files import, imports this module

    try:
        model = torch.jit.load(path, map_location="cpu").eval()
    except Exception as exc:  # noqa: BLE001 - torch.jit.load raises RuntimeError for most things
        raise ModelError(f"torch.jit.load cannot read '{path}': {one_line(exc, 160)}",
                         fix="save it again with torch.jit.script(model).save(path) in this torch version") from None
    for param in model.parameters():  # as loaded they require grad: the converted program's
        param.requires_grad_(False)   # tensors could not be copied ("graph leaves … deepcopy")
    return model


def build_torchscript(spec: ModelSpec, weights: str, seed: int):
    """The TorchScript module itself: torch.export cannot capture it, so the capture
    converts it (``torch._export.converter.TS2EPConverter``); it is also the eager reference.
    Where the inputs are not all of ``forward``'s arguments, each a plain ``Tensor``, in
    order: ``given_arguments``."""
    assert spec.path is not None  # a TorchScript file's spec names it
    model = _load_torchscript(spec.path)
    arguments = forward_arguments(model)
    names = [i.name for i in spec.inputs]
    if not all(names) or (names == [a.name for a in arguments] and all(a.type == "Tensor" for a in arguments)):
        for value, name in zip(list(model.forward.graph.inputs())[1:], names if all(names) else ()):
            value.setDebugName(name)  # what the program's inputs are named by: x, not TorchScript's x.1
        return model
    return given_arguments(model, spec.inputs)


def given_arguments(model, inputs: tuple[InputSpec, ...]):
    """``model`` called with ``inputs`` by name (``torchscript_inputs``), its other arguments
    at their defaults, as a TorchScript module whose ``forward`` takes those tensors alone:
    a Python module calling it so, traced (the call to the scripted ``forward``, its
    branches included, is kept whole: ``prim::CallMethod`` with the defaults as constants)."""
    import torch

    names = [i.name for i in inputs if i.name is not None]
    assert len(names) == len(inputs)  # bound to forward's arguments (torchscript_inputs): each named
    # zeros: any value is a valid index (a BERT's token_type_ids index an embedding of 2 rows);
    # the trace keeps the call to the scripted forward whole, so the values shape nothing
    example = tuple(torch.zeros(i.shape, dtype=getattr(torch, i.dtype)) for i in inputs)

    class Given(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.scripted = model

        def forward(self, *args):
            return self.scripted(**dict(zip(names, args)))

    setattr(Given.forward, "__signature__", forward_signature(names))  # what inspect.signature reads
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.jit.trace's deprecation
        return torch.jit.trace(Given().eval(), example, check_trace=False, strict=False)

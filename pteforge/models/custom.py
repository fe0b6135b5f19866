"""User models: ``package.module:factory``, ``path/to/file.py:factory``, or a
``torch.export.save`` (.pt2) or ONNX file."""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.util
import logging
import os
import re
import sys
import zipfile
from pathlib import Path

from ..core.errors import ModelError, UsageError, WeightsError, one_line
from ..core.registry import closest
from ..core.limits import Entry, check_archive, check_entries
from ..core.spec import WEIGHTS_NONE, WEIGHTS_PRETRAINED, InputSpec, ModelSpec


_FACTORY_RE = re.compile(r"^\s*([A-Za-z_][\w.]*|[^:()]+?\.py):([A-Za-z_]\w*)\s*(\((.*)\))?\s*$", re.S)


def parse_factory(ref: str) -> tuple[str, str, tuple, dict]:
    """``package.module:factory`` or ``package.module:factory(3, num_classes=10, weights=None)``
    (the module may be a ``.py`` file's path): (module, function, args, kwargs). Arguments
    must be Python literals: they are read with ``ast.literal_eval``, never executed."""
    m = _FACTORY_RE.match(ref)
    if not m:
        raise UsageError(
            f"malformed --model '{ref}'",
            fix="write --model package.module:factory or path/to/file.py:factory, optionally with literal "
                "arguments: 'pkg.mod:factory(num_classes=10, weights_backbone=None)', or --model file.pt2",
        )
    module, func, call = m.group(1), m.group(2), m.group(4)
    if call is None or not call.strip():
        return module, func, (), {}
    try:
        node = ast.parse(f"f({call})", mode="eval").body
        if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
            raise ValueError("*args and **kwargs are not literals")
        return module, func, tuple(ast.literal_eval(a) for a in node.args), {k.arg: ast.literal_eval(k.value) for k in node.keywords}
    except (SyntaxError, ValueError) as exc:
        raise UsageError(
            f"--model '{ref}': the factory's arguments must be Python literals ({type(exc).__name__}: {exc})",
            fix="use numbers, strings, True/False/None, tuples, lists and dicts, e.g. (num_classes=10, weights_backbone=None)",
        ) from None


# factory names that say nothing of the model: its file's or module's name is used instead
GENERIC_FACTORIES = frozenset({"build", "make", "create", "get", "load", "model", "net", "main", "factory", "export",
                               "build_model", "make_model", "create_model", "get_model", "load_model", "model_fn"})


def factory_name(func: str, args: tuple, module: str = "") -> str:
    """The model's name: the factory's, or the model name a generic factory is given as its
    first argument (``timm:create_model('deit_tiny_patch16_224')`` is deit_tiny_patch16_224),
    or, for a factory whose name says nothing (``my_net.py:build``), its file's (my_net)."""
    if args and isinstance(args[0], str) and re.fullmatch(r"[\w.\-/]{1,100}", args[0]):
        return re.sub(r"[^\w.\-]", "_", args[0].rsplit("/", 1)[-1])
    if func.lower() in GENERIC_FACTORIES and module:
        return Path(module).stem if module.endswith(".py") else module.rsplit(".", 1)[-1]
    return func


def factory_spec(ref: str, inputs: tuple[InputSpec, ...], name: str | None = None) -> ModelSpec:
    module, func, args, _ = parse_factory(ref)
    if module.endswith(".py"):  # recorded by its absolute path: workers, validate and the cache find it
        path = Path(module).expanduser()
        if not path.is_file():
            raise UsageError(f"--model {ref}: no such file {module}", fix="give the path of the .py file that defines the factory")
        ref = str(path.resolve()) + ref.strip()[len(module):]
    elif not _findable(module):  # a typo costs a second, not the run's captures
        raise ModelError(f"cannot import '{module}' for --model {ref}: no module named '{module.partition('.')[0]}'",
                         fix=IMPORT_FIX)
    if not inputs:
        raise UsageError(
            f"--model {ref} needs its input shape",
            fix="add --input-shape 1,3,224,224 (repeat it for several inputs)",
        )
    return ModelSpec(
        name=name or factory_name(func, args, module),
        family="custom",
        task="custom",
        inputs=inputs,
        factory=ref,
        source="factory",
    )


def build_factory(spec: ModelSpec, weights: str, seed: int):
    import torch

    factory, args, kwargs = check_factory(spec.factory)
    torch.manual_seed(seed)
    try:
        model = factory(*args, **kwargs)
    except Exception as exc:
        if _offline(exc):
            raise WeightsError(
                f"factory {spec.factory} could not download what it loads: {one_line(exc, 160)}",
                fix="run it once where there is a network (the library caches its downloads), or build it without "
                    "downloads and give a local state dict with --weights PATH",
            ) from None
        raise ModelError(
            f"factory {spec.factory} raised {one_line(exc)}",
            fix="fix the factory so that it returns an nn.Module",
        ) from None
    if not isinstance(model, torch.nn.Module):
        raise ModelError(
            f"factory {spec.factory} returned {type(model).__name__}, not a torch.nn.Module",
            fix="return the model instance (an nn.Module) from the factory",
        )
    if weights == WEIGHTS_NONE:
        _normalise(model, spec, seed)
    elif weights != WEIGHTS_PRETRAINED:
        from .weights import load_state_dict_file

        load_state_dict_file(model, weights)
    return model.eval()


def _offline(exc: BaseException) -> bool:
    """Whether ``exc`` (or what it was raised from) is a download that found no network:
    urllib's and requests' connection errors, DNS and socket failures, Hugging Face Hub's
    offline errors."""
    import socket
    import urllib.error

    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, (urllib.error.URLError, ConnectionError, socket.gaierror, TimeoutError)) or \
                type(exc).__name__ in ("ConnectionError", "LocalEntryNotFoundError", "OfflineModeIsEnabled"):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


IMPORT_FIX = "check the module path; it must be importable from the current directory (or the config file's)"


def _findable(module: str) -> bool:
    """Whether the top package of ``package.module`` can be found, without importing
    anything (``torchvision.models`` would import torchvision here: ~2.5 s before any work);
    a submodule that is not there is the capture's to report."""
    _import_here()
    try:
        return importlib.util.find_spec(module.partition(".")[0]) is not None
    except (ImportError, ValueError):
        return False


def _import_here() -> None:
    """The current directory on ``sys.path``, as ``python -m`` puts it (a console script does not)."""
    if "" not in sys.path and str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))


def import_from(directory: Path) -> None:
    """Make ``package.module`` references importable from ``directory`` too (a config
    file's, found from a subdirectory), in this process and in every worker it starts: the
    fork server, spawned workers and a local Ray cluster inherit ``PYTHONPATH``. After the
    current directory, as a child puts ``PYTHONPATH`` after its own first entry."""
    root = str(directory.resolve())
    if root not in sys.path:
        sys.path.insert(1, root)
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if root not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([*paths, root])


def check_factory(ref: str):
    """(the factory ``ref`` names, its arguments, its keyword arguments), once its module
    imports and the name in it is callable: checked before any work (``--dry-run`` too)."""
    module_name, func_name, args, kwargs = parse_factory(ref)
    try:
        module = import_factory_module(module_name)
    except Exception as exc:
        raise ModelError(
            f"cannot import '{module_name}' for --model {ref}: {type(exc).__name__}: {exc}",
            fix=IMPORT_FIX,
        ) from None
    factory = getattr(module, func_name, None)
    if not callable(factory):
        near = closest(func_name, [n for n in dir(module) if callable(getattr(module, n, None))], cutoff=0.6)
        raise ModelError(
            f"factory {ref}: '{module_name}' has no callable '{func_name}'" + (f": did you mean '{near}'?" if near else ""),
            fix=f"name the factory {module_name}:{near}" if near else f"define def {func_name}() -> torch.nn.Module in {module_name}",
        )
    return factory, args, kwargs


def import_factory_module(name: str):
    """``package.module`` (importable from the current directory too), or a ``.py`` file by
    its path (imported once per process under a name of its own; its directory goes on
    ``sys.path`` for the file's own imports)."""
    if not name.endswith(".py"):
        _import_here()
        return importlib.import_module(name)
    import hashlib

    path = Path(name).resolve()
    stem = re.sub(r"\W", "_", path.stem)
    key = f"pteforge_user_{stem}_{hashlib.sha1(str(path).encode()).hexdigest()[:8]}"
    if key in sys.modules:
        return sys.modules[key]
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))
    found = importlib.util.spec_from_file_location(key, path)
    module = importlib.util.module_from_spec(found)
    sys.modules[key] = module
    try:
        found.loader.exec_module(module)
    except BaseException:
        del sys.modules[key]
        raise
    return module


def import_for_capture(spec: ModelSpec) -> None:
    """Import a factory's module in this process, for what it registers that its capture
    file needs to load (a ``torch.library`` custom operator); an import that fails leaves
    the load to say what is missing."""
    if spec.source != "factory":
        return
    try:
        import_factory_module(parse_factory(spec.factory)[0])
    except Exception:  # noqa: BLE001 - the capture imported it; here it is only a courtesy
        pass


def factory_code(name: str) -> str | None:
    """The file that defines a factory's module, when there is one (for the cache key)."""
    if name.endswith(".py"):
        return name if Path(name).is_file() else None
    try:
        found = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None  # the capture reports the missing module
    return found.origin if found is not None and found.origin and Path(found.origin).is_file() else None


def _normalise(model, spec: ModelSpec, seed: int) -> None:
    """Random weights worth comparing, as for catalog models: BatchNorm statistics
    re-estimated on seeded inputs (a fresh EfficientNet's outputs are ~1e-14 otherwise,
    and any comparison passes or none does). A model that cannot run a batch of 8 in
    training mode gets batches of its own size; one that cannot run in training mode at
    all keeps its statistics."""
    from .synthetic import make_inputs
    from .weights import recalibrate_batchnorm

    for batch in (8, None):
        try:
            recalibrate_batchnorm(model, lambda i: make_inputs(spec, seed * 1000 + i, batch=batch))
            return
        except Exception:  # noqa: BLE001 - a model whose training mode differs: next size, then as is
            model.eval()


def pt2_spec(path: str, given: tuple[InputSpec, ...] = (), dtypes: tuple[str, ...] = ()) -> ModelSpec:
    """A spec for a ``torch.export.save`` file. Its inputs are the program's: their dtypes
    (``dtypes``, the ``--input-dtype``s, must be the same), and the shapes it was exported
    with, or ``given`` (``--input-shape``) where its dynamic dims allow them (a static dim
    must match, a dynamic one be in its range)."""
    import torch

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
            _check_dims(path, node.name, bounds, given[i].shape)
            shape = given[i].shape
        inputs.append(InputSpec(shape, dtype))
    _check_dtypes(path, [n.name for n in placeholders], inputs, dtypes)
    return ModelSpec(
        name=p.stem,
        family="custom",
        task="custom",
        inputs=tuple(inputs),
        factory="pteforge.models.custom:build_pt2",
        source="pt2",
        path=str(p.resolve()),
    )


def _dims(val, ranges) -> tuple[tuple[int, ...], list[tuple[int, int | None]]]:
    """An input's shape as it was exported, and each dim's (least, most): both its size for
    a static dim, its range for a dynamic one (most None: no upper bound). Read before
    anything calls ``int()`` on a dynamic dim, which makes it static at its example size."""
    shape, bounds = [], []
    for d in val.shape:
        node = getattr(d, "node", None)
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


def _check_dtypes(path: str, names: list[str], inputs: list[InputSpec], dtypes: tuple[str, ...]) -> None:
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


def _check_dims(path: str, name: str, bounds: list[tuple[int, int | None]], shape: tuple[int, ...]) -> None:
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
    import onnx

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
        raise UsageError(f"--input-shape {named.name or ''}{'=' if named.name else ''}... names an input or gives a value: "
                         f"that applies to ONNX files, whose inputs have names", fix="give the shapes in order, e.g. --input-shape 1,3,224,224")
    if kind == "pt2":
        return pt2_spec(ref, inputs, dtypes)
    if kind == "onnx":
        return onnx_spec(ref, inputs, dtypes)
    if kind in ("torchscript", "checkpoint"):
        from .ultralytics_checkpoint import checkpoint_spec, is_checkpoint

        if kind == "checkpoint" and is_checkpoint(ref):
            return checkpoint_spec(ref, inputs, dtypes)
        return torchscript_spec(ref, inputs)
    if Path(ref).is_file() and Path(ref).suffix != ".py":
        raise UsageError(f"'{ref}' is not a model file pteforge reads (not a torch.export program, a TorchScript "
                         "program, a torch.save checkpoint nor an ONNX graph)",
                         fix="give a .pt2, an ONNX file, a TorchScript file, or package.module:factory")
    return factory_spec(ref, inputs)


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
                     factory="pteforge.models.custom:build_torchscript", source="torchscript", path=str(p.resolve()))


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
    for given in (i for i in inputs if i.name):
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
    import torch

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
    import warnings

    import torch

    names = [i.name for i in inputs]
    # zeros: any value is a valid index (a BERT's token_type_ids index an embedding of 2 rows);
    # the trace keeps the call to the scripted forward whole, so the values shape nothing
    example = tuple(torch.zeros(i.shape, dtype=getattr(torch, i.dtype)) for i in inputs)

    class Given(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.scripted = model

        def forward(self, *args):
            return self.scripted(**dict(zip(names, args)))

    Given.forward.__signature__ = forward_signature(names)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.jit.trace's deprecation
        return torch.jit.trace(Given().eval(), example, check_trace=False, strict=False)


_ONNX_DTYPES = {1: "float32", 2: "uint8", 3: "int8", 5: "int16", 6: "int32", 7: "int64", 9: "bool", 10: "float16", 11: "float64"}


def onnx_spec(path: str, inputs: tuple[InputSpec, ...] = (), dtypes: tuple[str, ...] = ()) -> ModelSpec:
    """A spec for an ONNX file: inputs from its graph. ``inputs`` (the ``--input-shape``s)
    give the shapes, by input name (``images=1,3,640,640``) or in the graph's order: they
    must keep its static dims, and a dynamic dim not given is asked for (a leading batch dim
    alone is 1). A scalar input is given its value (``sr=int64:16000``). ``dtypes``, the
    ``--input-dtype``s, must be the graph's."""
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"model file '{path}' does not exist", fix="give the path of an .onnx file")
    graph = _onnx_graph(path)
    check_external_data(p, graph)
    weights = {init.name for init in graph.initializer}
    values = [v for v in graph.input if v.name not in weights]
    names = [v.name for v in values]
    given = _given_by_name(path, names, inputs)
    found, asked, wrong = [], [], []
    for value in values:
        tensor = value.type.tensor_type
        dtype = _ONNX_DTYPES.get(tensor.elem_type)
        if dtype is None:
            raise ModelError(f"'{path}': input {value.name} has an ONNX type pteforge cannot feed ({tensor.elem_type})",
                             fix="export the model with float or integer inputs")
        dims = [d.dim_value if d.dim_value > 0 else (d.dim_param or f"dim{i}") for i, d in enumerate(tensor.shape.dim)]
        spec = given.get(value.name)
        if spec is None:
            dynamic = [i for i, d in enumerate(dims) if isinstance(d, str)]
            if dynamic and dynamic != [0]:
                asked.append((value.name, dims))
            found.append(InputSpec(tuple(1 if isinstance(d, str) else d for d in dims), dtype, value.name))
            continue
        if spec.dtype not in (dtype, "float32"):
            wrong.append((value.name, spec.dtype, dtype))
        if not dims and (spec.value is not None or len(spec.shape) == 1):  # a scalar: its value
            found.append(InputSpec((), dtype, value.name, spec.value if spec.value is not None else float(spec.shape[0])))
            continue
        if spec.value is not None:
            raise UsageError(f"--input-shape {value.name}={spec.value:g} for '{path}': input {value.name} is no scalar "
                             f"but a tensor of dims {', '.join(map(str, dims))}", fix="give its shape, e.g. 1,3,224,224")
        _check_dims(path, value.name, [(d, d) if isinstance(d, int) else (1, None) for d in dims], spec.shape)
        found.append(InputSpec(spec.shape, dtype, value.name))
    if asked:
        said = "; ".join(f"{name} [{', '.join(map(str, dims))}]" for name, dims in asked)
        example = " ".join(f"--input-shape {name}={','.join(str(d) if isinstance(d, int) else d.upper() for d in dims)}"
                           for name, dims in asked)
        raise UsageError(f"'{path}' has dynamic dims its program needs fixed: {said}",
                         fix=f"give them, e.g. {example} (numbers for the upper-case names)")
    _check_dtypes(path, names, found, dtypes)
    for name, said, dtype in wrong:
        raise UsageError(f"--input-shape {name}={said}:... for '{path}', whose input {name} is {dtype}",
                         fix=f"give {name}={dtype}:... or leave the dtype out: the file says it")
    return ModelSpec(name=p.stem, family="custom", task="custom", inputs=tuple(found),
                     factory="pteforge.models.custom:build_onnx_named", source="onnx", path=str(p.resolve()))


def _onnx_graph(path: str):
    import onnx

    try:
        return onnx.load(str(path), load_external_data=False).graph
    except Exception as exc:
        raise ModelError(f"'{path}' is not an ONNX model ({one_line(exc, 120)})",
                         fix="give a file written by torch.onnx.export or an ONNX exporter") from None


def check_external_data(path: Path, graph) -> None:
    """An ONNX file's external data judged before ``onnx.load`` reads it: every tensor's
    file inside the model's folder and there, no more tensors, bytes each and bytes in all
    than ``core.limits`` allows. Refused in one line naming the file, the tensor and the limit."""
    from onnx import TensorProto

    folder = Path(os.path.abspath(path)).parent  # where onnx.load looks, a symlinked file's own folder
    entries = []
    for tensor in _graph_tensors(graph):
        if tensor.data_location != TensorProto.EXTERNAL:
            continue
        info = {e.key: e.value for e in tensor.external_data}
        location = info.get("location", "")
        if not location or os.path.isabs(location) or os.path.normpath(location).split(os.sep)[0] == "..":
            raise ModelError(f"'{path}': tensor {tensor.name}'s external data '{location}' is not a file in the "
                             "model's folder",
                             fix="keep the external data files beside the .onnx file, named relatively")
        where = folder / location
        if not where.is_file():
            raise ModelError(f"'{path}': tensor {tensor.name}'s external data file '{location}' is missing",
                             fix="copy the .onnx file together with its external data files")
        entries.append(Entry(tensor.name, _external_length(info, where)))
    check_entries(path, entries, error=ModelError, part="external tensor")


def _external_length(info: dict[str, str], where: Path) -> int:
    """The bytes an external tensor's entry says ``onnx.load`` will read: its ``length``, or
    the rest of its file after ``offset``."""
    try:
        offset = int(info.get("offset") or 0)
        return int(info["length"]) if info.get("length") else max(where.stat().st_size - offset, 0)
    except ValueError:
        return 0  # onnx.load refuses it in its own words


def _graph_tensors(graph):
    """Every tensor a graph holds: its initializers, sparse ones, and its nodes' attributes,
    subgraphs (an If's branches, a Loop's body) included."""
    yield from graph.initializer
    for sparse in graph.sparse_initializer:
        yield sparse.values
        yield sparse.indices
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("t"):
                yield attr.t
            yield from attr.tensors
            if attr.HasField("g"):
                yield from _graph_tensors(attr.g)
            for sub in attr.graphs:
                yield from _graph_tensors(sub)


def _given_by_name(path: str, names: list[str], inputs: tuple[InputSpec, ...]) -> dict[str, InputSpec]:
    """The ``--input-shape``s of a file's inputs: by name, the unnamed ones in the graph's
    order for the inputs not named."""
    named = {i.name: i for i in inputs if i.name}
    unknown = [n for n in named if n not in names]
    if unknown:
        raise UsageError(f"--input-shape {unknown[0]}=...: '{path}' has no input {unknown[0]}",
                         fix=f"its inputs are {', '.join(names)}")
    rest = [n for n in names if n not in named]
    positional = [i for i in inputs if not i.name]
    if positional and len(positional) != len(rest):
        raise UsageError(f"'{path}' has {len(names)} input(s) ({', '.join(names)}); {len(inputs)} --input-shape given",
                         fix="give one --input-shape per input, or name them: --input-shape NAME=1,3,224,224")
    return {**named, **dict(zip(rest, positional))}


def build_onnx(spec: ModelSpec, weights: str, seed: int):
    """The ONNX graph as a PyTorch module (onnx2torch): what torch.export captures.

    onnx2torch converts each operator at the versions it knows, with pteforge's converters
    (``onnx_converters``: what it lacks, and each newer version read as the older one whose
    meaning it keeps); a file an operator of which is still left is converted down with
    ONNX's own version converter, to opset 17 then 13, and imported again. What the graph computes from its constants alone is computed
    first (``_folded``), and the file as it is imported when that fails. The reference
    stays ONNX Runtime on the original file."""
    import onnx
    from onnx2torch import convert

    from .onnx_converters import register
    from .onnx_graph import checked, fixed, folded, outputs_by_identity, plain_names, seeded_feeds

    _newer_converters()
    register()
    original = plain_names(fixed(onnx.load(spec.path), spec.inputs))
    candidates = [(m, how) for m, how in ((checked(folded(original), original, seeded_feeds(original)), "folded"),
                                          (original, "as given")) if m is not None]
    errors = []
    for model, how in candidates:
        opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
        for target in [opset, *(v for v in ONNX2TORCH_OPSETS if v < opset)]:
            try:
                converted = convert(outputs_by_identity(
                    model if target == opset else onnx.version_converter.convert_version(model, target)))
                return _own_storage(with_constant_arguments(converted)).eval()
            except Exception as exc:  # noqa: BLE001 - onnx2torch raises what its converters raise
                errors.append(f"the graph {how} at opset {target}: {one_line(exc, 160)}")
    missing = _unconverted(candidates[0][0])  # the folded graph's, when there is one: what is left to convert
    if missing:
        (node, op, domain, version), more = missing[0], len(missing) - 1
        ops = sorted({f"{o}-{v}" for _, o, _, v in missing})
        raise ModelError(f"'{spec.path}': no converter to PyTorch for {op} (opset {version}{', domain ' + domain if domain else ''})"
                         f" at node {node}" + (f", and {more} more node(s) of {', '.join(ops)}" if more else ""),
                         fix=f"pteforge would need an onnx2torch converter for {', '.join(ops)} "
                             "(onnx2torch.node_converters.registry.add_converter); where it is a branch or a shape "
                             "computed from an input, give that input's shape or value with --input-shape NAME=... so it "
                             "folds away; or export the model with --model from its PyTorch code") from None
    raise ModelError(f"onnx2torch cannot import '{spec.path}': {'; '.join(errors)}",
                     fix="export the PyTorch model directly with --model, or re-export the ONNX file with the "
                         "operators onnx2torch converts") from None


def _own_storage(module):
    """``module`` with each weight and constant in a storage of its own, as compact as its
    values, and without the empty constants nothing reads (the region of interest of a
    Resize taken by its scales): ``torch.export.save`` groups tensors by storage, and
    several empty ones (all at address 0: a Paddle file's Resize nodes) or views into a
    shared one failed it ("numel: integer multiplication overflow")."""
    import torch

    used = {n.target for n in module.graph.nodes if n.op == "get_attr"} if hasattr(module, "graph") else None
    for name, tensor in list(module.named_buffers()) if used is not None else []:
        if tensor.numel() == 0 and name not in used:
            owner, _, leaf = name.rpartition(".")
            del module.get_submodule(owner)._buffers[leaf]
    for owner in module.modules():
        for kind in ("_parameters", "_buffers"):
            for name, tensor in list(getattr(owner, kind).items()):
                if tensor is None or not isinstance(tensor, torch.Tensor):
                    continue
                compact = tensor.is_contiguous() and tensor.storage_offset() == 0 and \
                    tensor.untyped_storage().nbytes() == tensor.numel() * tensor.element_size()
                if not compact:
                    fresh = tensor.detach().clone(memory_format=torch.contiguous_format)
                    getattr(owner, kind)[name] = torch.nn.Parameter(fresh, tensor.requires_grad) \
                        if kind == "_parameters" else fresh
    return module


def _unconverted(model) -> list[tuple[str, str, str, int]]:
    """The nodes of ``model`` (its main graph) that onnx2torch has no converter for at the
    file's opset: (node name, op type, domain, opset)."""
    from onnx2torch.node_converters.registry import get_converter

    opsets = {o.domain or "": o.version for o in model.opset_import}
    missing = []
    for i, node in enumerate(model.graph.node):
        domain = "" if node.domain in ("", "ai.onnx") else node.domain
        version = opsets.get(domain, opsets.get("ai.onnx", 0))
        try:
            get_converter(node.op_type, version, domain or "")
        except NotImplementedError:
            missing.append((node.name or f"#{i}", node.op_type, domain, version))
    return missing


ONNX2TORCH_OPSETS = (17, 13)  # opsets a newer file is converted down to, in turn


@functools.cache
def _newer_converters() -> tuple:
    """Register an onnx2torch converter for ``Split`` 18 (Split 13 with an optional
    ``num_outputs``, which ONNX's version converter cannot take down to 17); the module types
    it adds. The other versions onnx2torch lacks that mean what an older one means are read
    as that one (``onnx_converters.same_meaning``)."""
    import torch
    from onnx2torch.node_converters.registry import _CONVERTER_REGISTRY, OperationDescription, add_converter
    from onnx2torch.node_converters.split import OnnxSplit13
    from onnx2torch.utils.common import OperationConverterResult, onnx_mapping_from_node

    class OnnxSplit18(OnnxSplit13):
        def forward(self, input_tensor, split=None):
            if split is not None:
                return super().forward(input_tensor, split)
            size = input_tensor.shape[self.axis]  # num_outputs chunks, the last one smaller
            return torch.split(input_tensor, -(-size // self.num_splits), dim=self.axis)

    if OperationDescription(domain="", operation_type="Split", version=18) not in _CONVERTER_REGISTRY:
        @add_converter(operation_type="Split", version=18)
        def _split18(node, graph):  # noqa: ARG001 - onnx2torch's converter signature
            module = OnnxSplit18(axis=node.attributes.get("axis", 0), num_splits=len(node.output_values))
            return OperationConverterResult(torch_module=module, onnx_mapping=onnx_mapping_from_node(node=node))
    return (OnnxSplit18,)


def with_constant_arguments(graph):
    """onnx2torch's ``Pad`` (opset 11+), ``Reshape``, ``Resize`` and ``Slice`` modules read
    their pads, shape, scales and bounds from tensor inputs when they run (``.tolist()``,
    ``.numpy()``), which torch.export refuses as data-dependent even where the file gives
    those inputs as constants (Ultralytics' YOLO files: the upsampling's scales, the head's
    slices); each of those whose arguments are the file's constants is replaced with one
    holding them as numbers (the same ``F.pad``, ``reshape``, ``interpolate`` or slicing)."""
    import torch

    builders = _by_numbers()

    def constant(arg):
        if not isinstance(arg, torch.fx.Node) or arg.op != "get_attr":
            return None
        value = graph
        for part in arg.target.split("."):
            value = getattr(value, part, None)
        return value.detach() if isinstance(value, torch.Tensor) else None

    changed = False
    for node in list(graph.graph.nodes):
        module = graph.get_submodule(node.target) if node.op == "call_module" else None
        names, build = builders.get(type(module), ((), None))
        if build is None:
            continue
        given = dict(zip(names, node.args[1:]))
        given.update(node.kwargs)
        values = {k: constant(v) for k, v in given.items() if v is not None}
        if not values or any(v is None for v in values.values()):
            continue
        fixed = build(module, values)
        if fixed is None:
            continue
        name = f"{node.target}/fixed"
        graph.add_submodule(name, fixed)
        with graph.graph.inserting_before(node):
            node.replace_all_uses_with(graph.graph.call_module(name, (node.args[0],)))
        graph.graph.erase_node(node)
        changed = True
    if changed:
        graph.graph.eliminate_dead_code()
        graph.delete_all_unused_submodules()
        graph.recompile()
    return graph


@functools.cache
def _by_numbers() -> dict:
    """onnx2torch's module type -> (its tensor arguments after the input, by name; how to
    make the module doing the same with their constant values as numbers, or None to keep it)."""
    from onnx2torch.node_converters.pad import OnnxPadDynamic, _onnx_padding_to_torch
    from onnx2torch.node_converters.reshape import OnnxReshape
    from onnx2torch.node_converters.resize import OnnxResize, OnnxResizeV10, _onnx_mode_to_torch_mode
    from onnx2torch.node_converters.slice import OnnxSlice, _get_slices
    from onnx2torch.node_converters.split import OnnxSplit13

    FixedPad, FixedReshape, FixedResize, FixedSplit, FixedSlice = _fixed_modules()

    def pad(module, v):
        """Pads of the dims padded only (the leading unpadded ones dropped): FixedPad takes
        reflect and edge padding of any tensor's last 1-3 dims, where torch's F.pad (and
        onnx2torch) take it with batch and channel dims only (a [1, 576] audio frame)."""
        pads = _onnx_padding_to_torch(v["pads"].tolist())
        while len(pads) > 2 and pads[-2:] == [0, 0]:
            pads = pads[:-2]
        if module.mode != "constant" and len(pads) > 6:
            return None
        return FixedPad(pads, module.mode, float(v["constant_value"].item()) if "constant_value" in v else 0.0)

    def resize(module, v):
        """By constant scales only (Ultralytics' upsampling): not output sizes, a region of
        interest, or a batch or channel scale."""
        inner = getattr(module, "_resize", module)  # OnnxResizeV10 wraps an OnnxResize
        scales = v["scales"].tolist() if "scales" in v else []
        if any(v[k].nelement() for k in ("roi", "sizes") if k in v) or len(scales) < 3 or scales[:2] != [1, 1]:
            return None
        mode = _onnx_mode_to_torch_mode(inner.onnx_mode, len(scales) - 2)
        return FixedResize([float(s) for s in scales[2:]], mode, inner.align_corners)

    def slice_(module, v):
        if not {"starts", "ends"} <= set(v):
            return None
        flip_dims, pos, neg = _get_slices(v["starts"].tolist(), v["ends"].tolist(), v.get("axes"), v.get("steps"))

        def ints(slices: list) -> list:  # numpy's integers (axes, steps) as Python's
            return [slice(*(None if b is None else int(b) for b in (s.start, s.stop, s.step))) if isinstance(s, slice)
                    else s for s in slices]

        return FixedSlice([int(d) for d in flip_dims], ints(pos), ints(neg))

    return {
        OnnxPadDynamic: (("pads", "constant_value"), pad),
        OnnxReshape: (("shape",), lambda module, v: FixedReshape(v["shape"].tolist())),
        OnnxResize: (("roi", "scales", "sizes"), resize),
        OnnxResizeV10: (("scales",), resize),
        OnnxSlice: (("starts", "ends", "axes", "steps"), slice_),
        **{split: (("split",), lambda module, v: FixedSplit([int(n) for n in v["split"].tolist()], module.axis))
           for split in (OnnxSplit13, *_newer_converters())},
        **_tensor_arguments(_by_numbers_module),
    }


def _tensor_arguments(by_numbers) -> dict:
    """``_by_numbers``' entries for axes, shapes and repeats given as tensors (opset 13+,
    tf2onnx's and spox's files)."""
    from onnx2torch.node_converters.expand import OnnxExpand
    from onnx2torch.node_converters.reduce import OnnxReduceSumDynamicAxes
    from onnx2torch.node_converters.squeeze import OnnxSqueezeDynamicAxes
    from onnx2torch.node_converters.tile import OnnxTile
    from onnx2torch.node_converters.unsqueeze import OnnxUnsqueezeDynamicAxes

    return {
        OnnxSqueezeDynamicAxes: (("axes",), lambda module, v: by_numbers("squeeze", sorted(v["axes"].tolist())[::-1])),
        OnnxUnsqueezeDynamicAxes: (("axes",), lambda module, v: by_numbers("unsqueeze", sorted(v["axes"].tolist()))),
        OnnxReduceSumDynamicAxes: (("axes",), lambda module, v: by_numbers(
            "sum", (sorted(v["axes"].tolist()), bool(module._keepdims))) if v["axes"].nelement() else None),
        OnnxExpand: (("shape",), lambda module, v: by_numbers("expand", v["shape"].tolist())),
        OnnxTile: (("repeats",), lambda module, v: by_numbers("repeat", v["repeats"].tolist())),
    }


@functools.cache
def _fixed_modules() -> tuple:
    """The modules ``_by_numbers`` puts in: a pad, reshape, resize, split and slice by numbers."""
    import torch
    from onnx2torch.node_converters.slice import _do_slice

    class FixedPad(torch.nn.Module):
        def __init__(self, pads: list[int], mode: str, value: float):
            super().__init__()
            self.pads, self.mode, self.value = pads, mode, value

        def forward(self, x):
            if self.mode == "constant":
                return torch.nn.functional.pad(x, self.pads, value=self.value)
            padded = len(self.pads) // 2  # reflect, replicate: as [1, C, *padded dims], C all the others
            lead = x.shape[:x.dim() - padded]
            y = torch.nn.functional.pad(x.reshape(1, -1, *x.shape[x.dim() - padded:]), self.pads, mode=self.mode)
            return y.reshape(*lead, *y.shape[2:])

    class FixedReshape(torch.nn.Module):
        def __init__(self, shape: list[int]):
            super().__init__()
            self.shape = shape

        def forward(self, x):  # ONNX's 0: that dimension of the input
            return torch.reshape(x, [x.shape[i] if d == 0 else d for i, d in enumerate(self.shape)])

    class FixedResize(torch.nn.Module):
        def __init__(self, scales: list[float], mode: str, align_corners: bool | None):
            super().__init__()
            self.scales, self.mode, self.align_corners = scales, mode, align_corners

        def forward(self, x):
            return torch.nn.functional.interpolate(x, scale_factor=self.scales, mode=self.mode,
                                                   align_corners=self.align_corners)

    class FixedSplit(torch.nn.Module):
        def __init__(self, sizes: list[int], axis: int):
            super().__init__()
            self.sizes, self.axis = sizes, axis

        def forward(self, x):
            return torch.split(x, self.sizes, dim=self.axis)

    class FixedSlice(torch.nn.Module):
        def __init__(self, flip_dims: list, pos: list, neg: list):
            super().__init__()
            self.flip_dims, self.pos, self.neg = flip_dims, pos, neg

        def forward(self, x):
            return _do_slice(x, self.flip_dims, self.pos, self.neg)

    return FixedPad, FixedReshape, FixedResize, FixedSplit, FixedSlice


def _by_numbers_module(op: str, numbers):
    """``op`` with its numbers as a module (``_tensor_arguments``)."""
    return _by_numbers_class()(op, [int(n) for n in numbers] if op != "sum" else numbers)


@functools.cache
def _by_numbers_class():
    import torch

    class ByNumbers(torch.nn.Module):
        """``op`` with its numbers: squeeze or unsqueeze by axes (in the order to apply them),
        sum over (axes, keepdims), expand to a shape (ONNX's broadcasting), repeat."""

        def __init__(self, op: str, numbers):
            super().__init__()
            self.op, self.numbers = op, numbers

        def forward(self, x):
            if self.op in ("squeeze", "unsqueeze"):
                for axis in self.numbers:
                    x = x.squeeze(axis) if self.op == "squeeze" else x.unsqueeze(axis)
                return x
            if self.op == "sum":
                return torch.sum(x, dim=self.numbers[0], keepdim=self.numbers[1])
            if self.op == "expand":
                return x.expand(torch.broadcast_shapes(tuple(x.shape), tuple(self.numbers)))
            return x.repeat(*self.numbers)

    return ByNumbers


def build_onnx_named(spec: ModelSpec, weights: str, seed: int):
    """``build_onnx``, taking the graph's inputs under their ONNX names and returning its
    outputs as a dict keyed by theirs: the names the manifest gives the program's inputs
    and outputs, as the app's author knows them from the file."""
    import onnx
    import torch

    converted = build_onnx(spec, weights, seed)
    graph = onnx.load(spec.path, load_external_data=False).graph
    initializers = {init.name for init in graph.initializer}
    outputs = [o.name for o in graph.output]

    class Named(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.onnx = converted  # not "graph": see onnx_file_model

        def forward(self, *args):
            out = self.onnx(*args)
            values = list(out) if isinstance(out, (list, tuple)) else [out]
            if len(values) == len(outputs) == len(set(outputs)) and all(isinstance(v, torch.Tensor) for v in values):
                return dict(zip(outputs, values))
            return out

    held = spec.held
    Named.forward.__signature__ = forward_signature([i.name for i in graph.input
                                                     if i.name not in initializers and i.name not in held])
    return Named().eval()


class OnnxReference:
    """The eager reference of an ONNX model: ONNX Runtime running the original file, called
    like a module."""

    def __init__(self, path: str, held: tuple[InputSpec, ...] = ()):
        import numpy as np
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.log_severity_level = 3
        self.session = onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        self.held = {i.name: np.array(i.value, dtype=np.dtype(i.dtype)) for i in held}
        self.names = [i.name for i in self.session.get_inputs() if i.name not in self.held]

    def __call__(self, *inputs):
        import torch

        feeds = {**self.held, **{n: x.detach().cpu().numpy() for n, x in zip(self.names, inputs)}}
        outputs = self.session.run(None, feeds)
        return [torch.from_numpy(o) for o in outputs]


def reference_model(spec: ModelSpec, model):
    """What the program is compared with: the model itself, or ONNX Runtime on an ONNX file."""
    return OnnxReference(spec.path, tuple(i for i in spec.inputs if i.value is not None)) if spec.source == "onnx" else model



def onnx_file_model(path, name: str, nhwc: bool = False, int_input: bool = False):
    """A published ONNX file imported with onnx2torch, taking pteforge's input: NCHW turned to
    the file's NHWC (``nhwc``), float values rounded to the file's int32 (``int_input``)."""
    import torch

    graph = build_onnx(ModelSpec(name=name, family="custom", task="custom", inputs=(), factory="", source="onnx",
                                 path=str(path)), WEIGHTS_PRETRAINED, 0)

    class Adapted(torch.nn.Module):
        def __init__(self):
            super().__init__()
            # not "graph": the GraphModule torch.export makes of this has a graph of its own, and
            # lowering then looked the imported layers up in it ("nonexistent attribute c/Conv of graph")
            self.onnx = graph

        def forward(self, x):
            x = x.permute(0, 2, 3, 1) if nhwc else x
            return self.onnx(x.round().to(torch.int32) if int_input else x)

    return Adapted().eval()


# --task's words: the app's tasks, each the first family that does it (or a family's own category)
TASKS = {"classification": "classification", "detection": "detection", "pose": "pose", "face": "face-detection",
         "segmentation": "segmentation"}


def three(text, flag: str) -> tuple[float, float, float] | None:
    """``0.485,0.456,0.406`` (or a list of three numbers): one number per RGB channel."""
    if text is None or isinstance(text, tuple):
        return text
    try:
        values = tuple(float(v) for v in (text.split(",") if isinstance(text, str) else text))
    except (TypeError, ValueError):
        values = ()
    if len(values) != 3 or (flag == "--std" and any(v <= 0 for v in values)):
        raise UsageError(f"{flag} {text}: give three numbers, one per RGB channel" + (", each above 0" if flag == "--std" else ""),
                         fix=f"e.g. {flag} " + ("0.485,0.456,0.406" if flag == "--mean" else "0.229,0.224,0.225"))
    return values


def as_task(spec: ModelSpec, task: str | None = None, name: str | None = None, labels_file: str | None = None,
            mean=None, std=None, fit: str | None = None) -> ModelSpec:
    """A model of one's own as the app shows it: ``task`` makes it that family's (category,
    decoding in validate and --draw, agreement on the photos, preprocessing from its input
    shape), ``name`` names it, ``labels_file`` gives its classes (one per line), and
    ``mean``/``std``/``fit`` override the family's preprocessing."""
    from dataclasses import replace

    from ..families import families
    from ..core.spec import Preprocessing
    from ..core.system import file_name

    if name:
        spec = replace(spec, name=name, labels=f"{file_name(name)}_labels.txt" if spec.names else spec.labels)
    if task is None:
        if labels_file or mean or std or fit:
            raise UsageError("--labels-file, --mean, --std and --fit describe a task's model", fix="give --task too, "
                             f"one of {', '.join(TASKS)}")
        return spec
    fam = next((f for f in families() if f.category == task), None) or \
        next((f for f in families() if f.task == TASKS.get(task) and f.preprocessing is not None), None)
    if fam is None:
        raise UsageError(f"unknown --task '{task}'", fix=f"one of {', '.join(TASKS)}")
    if len(spec.fed) != 1 or len(spec.fed[0].shape) != 4 or spec.fed[0].dtype not in ("float32", None):
        raise UsageError(f"--task {task} takes a model of one float image input, NCHW or NHWC; {spec.name} takes "
                         f"{', '.join('x'.join(map(str, i.shape)) for i in spec.fed)}", fix="leave out --task")
    shape = spec.fed[0].shape
    layout = "NCHW" if shape[1] in (1, 3) else "NHWC" if shape[-1] in (1, 3) else None
    height, width = (shape[2], shape[3]) if layout == "NCHW" else (shape[1], shape[2])
    if layout is None or height != width:
        raise UsageError(f"--task {task}: the app feeds square RGB images, and {spec.name} takes {'x'.join(map(str, shape))}",
                         fix="export it with a 1,3,S,S (or 1,S,S,3) input")
    mean, std = three(mean, "--mean"), three(std, "--std")
    base = fam.preprocessing or Preprocessing(size=height)
    pre = replace(base, size=height, layout=layout, mean=tuple(mean or base.mean), std=tuple(std or base.std),
                  fit=fit or base.fit, resize=(round(height * base.resize / base.size) if base.resize else None))
    names = ()
    if labels_file:
        path = Path(labels_file)
        if not path.is_file():
            raise UsageError(f"--labels-file {labels_file}: no such file", fix="give a text file, one class name per line")
        from ..core.limits import read_text_file

        names = tuple(line.strip() for line in read_text_file(path, "--labels-file").splitlines() if line.strip())
        if not names:
            raise UsageError(f"--labels-file {labels_file} names no class", fix="write one class name per line")
    return replace(spec, family=fam.category, task=fam.task, preprocessing=pre,
                   labels=f"{spec.name}_labels.txt" if names else fam.labels_file, names=names)


def from_table(table: dict, inputs: tuple, dtypes: tuple, own: dict) -> ModelSpec:
    """A config file's ``[[model]]`` table as a spec: its source with its own input shapes
    and dtypes (else the file's top-level ones), its own task, name, labels and
    preprocessing (else the top level's), and its backends and precision, kept as requests
    (``ModelSpec.targets``; ``*:PRECISION``: the run's backends at that precision)."""
    from dataclasses import replace

    from ..core.spec import InputSpec

    if table.get("input_dtype"):
        dtypes = tuple(InputSpec.check_dtype(d) for d in table["input_dtype"])
    if table.get("input_shape"):
        inputs = tuple(InputSpec.parse(shape, dtypes[i] if len(dtypes) > 1 else (dtypes[0] if dtypes else "float32"))
                       for i, shape in enumerate(table["input_shape"]))
    mine = {**own, **{k: table[k] for k in ("task", "name", "labels_file", "mean", "std", "fit") if table.get(k)}}
    spec = as_task(custom_spec(table["source"], inputs, dtypes), **mine)
    backends, precision = table.get("backends"), table.get("precision")
    if backends or precision:
        requests = [b if ":" in b or not precision else f"{b}:{precision}" for b in backends] if backends else \
            [f"*:{precision}"]
        spec = replace(spec, targets=tuple(requests))
    return spec


def forward_signature(names: list[str] | None):
    """``forward(self, <names>)``: what torch.export names a wrapper's inputs by, given to
    its ``forward`` (which takes ``*args``) as ``__signature__``. Names that are not
    Python identifiers are made so (ONNX's ``input.1``: ``input_1``); ``forward(self,
    *args)`` for None or names that would then collide."""
    import inspect
    import keyword
    import re

    this = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    made = [re.sub(r"\W|^(?=\d)", "_", n) for n in names or []]
    made = [f"{n}_" if keyword.iskeyword(n) or n == "self" else n for n in made]
    if names is None or len(set(made)) != len(made):
        return inspect.Signature([this, inspect.Parameter("args", inspect.Parameter.VAR_POSITIONAL)])
    return inspect.Signature([this, *(inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in made)])

"""User factories: ``package.module:factory`` or ``path/to/file.py:factory``, with literal
arguments, imported from the current directory (or the config file's)."""

from __future__ import annotations

import ast
import hashlib
import importlib
import importlib.util
import inspect
import os
import re
import socket
import sys
import urllib.error
from pathlib import Path
from typing import cast

from ..core.errors import ModelError, UsageError, WeightsError, one_line
from ..core.registry import closest
from ..core.spec import WEIGHTS_NONE, WEIGHTS_PRETRAINED, InputSpec, ModelSpec
from .synthetic import make_inputs
from .weights import load_state_dict_file, recalibrate_batchnorm

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
        node = cast(ast.Call, ast.parse(f"f({call})", mode="eval").body)  # f(...): a call
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
    import torch  # 3.8 s: config files import this module for factory_name (ui/config.py)

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
    model = _on_the_cpu(model, spec.factory, weights)
    if weights not in (WEIGHTS_NONE, WEIGHTS_PRETRAINED):
        load_state_dict_file(model, weights)
    _materialized(model, spec, seed)
    if weights == WEIGHTS_NONE:
        _normalise(model, spec, seed)
    return model.eval()


def _on_the_cpu(model, ref: str, weights: str):
    """``model`` with its tensors on the CPU, where pteforge captures and proves it: one a
    factory put on a GPU (``.cuda()``, ``.to("mps")``) is moved there. One built on the
    meta device (no values, as large models are built) takes its values from ``--weights
    FILE``; without one it is refused, naming the fix."""
    tensors = [*model.parameters(), *model.buffers()]
    if any(t.is_meta for t in tensors):
        if weights in (WEIGHTS_NONE, WEIGHTS_PRETRAINED):
            raise ModelError(f"factory {ref} returned a model on the meta device: its tensors have no values to export",
                             fix="build it on the CPU, or give its weights with --weights FILE (loaded into it)")
        return model
    return model.cpu() if any(t.device.type != "cpu" for t in tensors) else model


def _materialized(model, spec: ModelSpec, seed: int) -> None:
    """Lazy layers (``nn.LazyLinear``) given their shapes the way they take them, by one
    call on a seeded example input: torch.export cannot capture a layer whose weights do
    not exist yet. A checkpoint already gave them theirs."""
    import torch

    lazy = [name for name, p in model.named_parameters() if torch.nn.parameter.is_lazy(p)]
    if not lazy:
        return
    torch.manual_seed(seed)
    try:
        with torch.no_grad():
            model(*make_inputs(spec, seed))
    except Exception as exc:
        raise ModelError(f"the model's lazy layers ({', '.join(lazy[:3])}) could not take their shapes from the "
                         f"example input: {one_line(exc)}",
                         fix="give the input shapes the model takes (--input-shape), or build the layers with "
                             "their sizes") from None


def _offline(exc: BaseException | None) -> bool:
    """Whether ``exc`` (or what it was raised from) is a download that found no network:
    urllib's and requests' connection errors, DNS and socket failures, Hugging Face Hub's
    offline errors."""
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
    _check_arguments(ref, factory, module_name, func_name, args, kwargs)
    return factory, args, kwargs


def _check_arguments(ref: str, factory, module_name: str, func_name: str, args: tuple, kwargs: dict) -> None:
    """Refuse, before any work, arguments the factory's signature does not take (a
    required one left out: it raised TypeError once the run had started)."""
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):  # a builtin or C callable: its call says
        return
    try:
        signature.bind(*args, **kwargs)
    except TypeError as exc:
        needed = [p.name for p in signature.parameters.values()
                  if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        example = ", ".join(f"{n}=..." for n in needed)
        raise UsageError(f"--model {ref}: {func_name}{signature} {exc}",
                         fix=f"give its arguments as Python literals: --model '{module_name}:{func_name}({example})'") from None


def import_factory_module(name: str):
    """``package.module`` (importable from the current directory too), or a ``.py`` file by
    its path (imported once per process under a name of its own; its directory goes on
    ``sys.path`` for the file's own imports)."""
    if not name.endswith(".py"):
        _import_here()
        return importlib.import_module(name)
    path = Path(name).resolve()
    stem = re.sub(r"\W", "_", path.stem)
    key = f"pteforge_user_{stem}_{hashlib.sha1(str(path).encode()).hexdigest()[:8]}"
    if key in sys.modules:
        return sys.modules[key]
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))
    found = importlib.util.spec_from_file_location(key, path)
    assert found is not None and found.loader is not None  # a file's spec, with its source loader
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


# what a factory's model is made of, for the cache key: at most this many of the user's own files
MAX_SOURCES = 2000
_PTEFORGE = Path(__file__).resolve().parent.parent


def factory_sources(name: str) -> tuple[list[str], list[str]]:
    """What a factory's module ``name`` is made of, for the cache key, read from its source
    without importing it: (the user's own source files it reaches through its imports,
    itself first; the installed top-level packages it or they import, whose versions pin
    their code). A module that is itself installed (``timm``) is a package, not files.
    An import made at run time (``importlib.import_module``) is not seen: ``--no-cache``.

    The factory's file alone is not the model: a model built from a sibling module
    (``from blocks import Block``) whose file changed came from the cache, with the old
    model's program and proof."""
    roots = _search_roots(name)
    first = (Path(name).resolve() if Path(name).is_file() else None) if name.endswith(".py") else _locate(name, roots)
    if first is None:
        return [], []  # the capture reports the missing module
    if _kind(first) != "own":
        return [], [name.split(".")[0]]
    files, packages, pending = [first], set(), [first]
    while pending and len(files) < MAX_SOURCES:
        path = pending.pop()
        for found in _imported(path, roots):
            if isinstance(found, str):
                packages.add(found)
            elif found not in files:
                files.append(found)
                pending.append(found)
    return [str(f) for f in files], sorted(packages)


def _search_roots(name: str) -> list[Path]:
    """Where imports are found: a ``.py`` factory's own directory, the current one, then ``sys.path``."""
    roots = [Path(name).resolve().parent] if name.endswith(".py") else []
    roots += [Path.cwd()] + [Path(p).resolve() for p in sys.path if p]
    return list(dict.fromkeys(r for r in roots if r.is_dir()))


def _kind(path: Path) -> str:
    """``"installed"`` for a file of site-packages, ``"known"`` for the standard library's and
    pteforge's (in the key already, an editable install's too), ``"own"`` for the user's
    (anywhere else)."""
    import sysconfig

    if path.is_relative_to(_PTEFORGE):
        return "known"
    if any(part in ("site-packages", "dist-packages") for part in path.parts):
        return "installed"
    if any(path.is_relative_to(Path(sysconfig.get_path(k)).resolve()) for k in ("stdlib", "platstdlib")):
        return "known"
    return "own"


def _locate(module: str, roots: list[Path]) -> Path | None:
    """The file of ``module`` (``a.b``: ``a/b.py`` or ``a/b/__init__.py``) under the first root that holds it."""
    parts = module.split(".")
    for root in roots:
        base = root.joinpath(*parts)
        for candidate in (base.parent / f"{parts[-1]}.py", base / "__init__.py"):
            if candidate.is_file():
                return candidate.resolve()
    return None


def _imported(path: Path, roots: list[Path]):
    """What the module at ``path`` imports: a file of the user's own, or an installed
    top-level package's name (the standard library and what cannot be found: nothing)."""
    try:
        tree = ast.parse(path.read_bytes())
    except (OSError, SyntaxError, ValueError):
        return
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
            candidates = [[".".join(n.split(".")[:k]) for k in range(len(n.split(".")), 0, -1)] for n in names]
            yield from _found(candidates, roots)
        elif isinstance(node, ast.ImportFrom) and node.level:  # from . import x, from ..m import y
            base = path.parents[min(node.level, len(path.parents)) - 1]
            module = node.module.split(".") if node.module else []
            for parts in [[*module, alias.name] for alias in node.names] + [module]:
                found = _locate(".".join(parts), [base]) if parts else base / "__init__.py"
                if found is not None and found.is_file():
                    yield found.resolve()
        elif isinstance(node, ast.ImportFrom) and node.module:
            candidates = [[f"{node.module}.{alias.name}" for alias in node.names] + [node.module]]
            yield from _found(candidates, roots)


def _found(candidates: list[list[str]], roots: list[Path]):
    """For each import's candidate modules (longest first: ``a.b``, then ``a``): the user's
    files among them, or the installed top-level package they belong to."""
    for names in candidates:
        for module in names:
            found = _locate(module, roots)
            if found is None:
                continue
            kind = _kind(found)
            if kind == "own":
                yield found
                continue
            if kind == "installed":
                yield module.split(".")[0]
            break


def _normalise(model, spec: ModelSpec, seed: int) -> None:
    """Random weights worth comparing, as for catalog models: BatchNorm statistics
    re-estimated on seeded inputs (a fresh EfficientNet's outputs are ~1e-14 otherwise,
    and any comparison passes or none does). A model that cannot run a batch of 8 in
    training mode gets batches of its own size; one that cannot run in training mode at
    all keeps its statistics."""
    for batch in (8, None):
        try:
            recalibrate_batchnorm(model, lambda i: make_inputs(spec, seed * 1000 + i, batch=batch))
            return
        except Exception:  # noqa: BLE001 - a model whose training mode differs: next size, then as is
            model.eval()

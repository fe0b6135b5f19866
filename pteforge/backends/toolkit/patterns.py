"""Pattern graphs a backend's pass matches programs against, built only where one can match.

XNNPACK's lowering converts bilinear upsampling and attention subgraphs, and Vulkan's
fuses RoPE, by matching the program against small pattern programs, which ExecuTorch
builds (``torch.export`` and ``to_edge`` of tiny models) the first time a process lowers
to that backend: ~2 s (XNNPACK's six) and ~1.5 s (Vulkan's three) of every process on
this machine, for every model, though most models hold none of them. A match needs every operator of the pattern in the
program (``SubgraphMatcher`` compares the targets of call nodes), so the operators each
pattern holds, kept on disk once they are known, say when no pattern can match: then the
pass runs with no patterns, which is what it would have done after finding no match.

The operators are kept per pattern set under a key of the ExecuTorch and torch versions
and the pattern modules' source, in the cache directory (``PTEFORGE_CACHE_DIR``). pteforge
ships them for the versions it is locked to (``pteforge/data/patterns.json``, under the
same keys), so a machine's first run does not make them either; other versions make
them once. ``python -m pteforge.backends.toolkit.patterns`` prints that file again, made from the
installed ExecuTorch.

Core ML's quantizer is the same, pattern by pattern: each of its annotators builds its
pattern graphs (``torch.export`` of a tiny module each, 405 in all, ~0.2 s each: 82 of the
84 s a tiny model's ``coreml:int8`` job took) at every annotation, whatever the program
holds. ``built_only_where_they_can_match`` keys each pattern by what its graph is made
from (its class, the functions and flags it closes over, the example inputs' shapes) and
gives one whose operators the program lacks a graph that matches nothing, in no time.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import inspect
import json
from collections.abc import Callable
from importlib.metadata import version as installed
from pathlib import Path

from ...patches.executorch_patches import replaced_in_executorch as replaced


def op_names(graph_module) -> set[str]:
    """The targets of the call nodes of ``graph_module`` and its submodules, as text."""
    import torch

    return {op_name(n.target) for m in graph_module.modules() if isinstance(m, torch.fx.GraphModule)
            for n in m.graph.nodes if n.op == "call_function"}


def op_name(target) -> str:
    """A call's target as text that is the same in every process: an operator's name (an
    edge operator's is its ATen operator's), a function's module and qualified name (the
    text of a builtin or a pybind function holds its address)."""
    import torch

    op = getattr(target, "_op", None)  # an edge operator's ATen operator
    if isinstance(op, torch._ops.OpOverload):
        return str(op)
    if isinstance(target, torch._ops.OpOverload | torch._ops.OpOverloadPacket):
        return str(target)
    if isinstance(target, torch._ops.HigherOrderOperator):
        return f"higher_order.{target.name()}"
    module, name = getattr(target, "__module__", None), getattr(target, "__qualname__", None)
    return f"{module}.{name}" if isinstance(name, str) else str(target)


def can_match(graph_module, module, build: Callable[[], list], name: str = "") -> bool:
    """Whether one of the pattern graphs ``build()`` makes (``module`` defines them) may
    match in ``graph_module``: it has every operator of one of them."""
    try:
        patterns = needed(module, build, name)
    except Exception:  # noqa: BLE001 - no source to key by, or making them failed: the pass makes them as it would
        return True
    have = op_names(graph_module)
    return any(ops <= have for ops in patterns)


def needed(module, build: Callable[[], list], name: str = "") -> list[frozenset[str]]:
    """The operators of each pattern graph ``build()`` makes: read from the cache
    directory, or from the built graphs, then written there."""
    path = _path(module, name)
    for ops in (_read(path), _shipped().get(path.stem)):
        if isinstance(ops, list) and ops and all(isinstance(o, list) and o and all(isinstance(op, str) for op in o)
                                                 for o in ops):
            return [frozenset(o) for o in ops]
    # none kept or shipped for these versions, or a damaged file: learned again from the graphs
    ops = [sorted(op_names(graph)) for graph in build()]
    from ...core.io import keep

    keep(path, json.dumps(ops))  # or, in a cache that cannot be written, built again next time
    return [frozenset(o) for o in ops]


SHIPPED = Path(__file__).parents[2] / "data" / "patterns.json"


@functools.cache
def _shipped() -> dict:
    try:
        table = json.loads(SHIPPED.read_text())
    except (OSError, ValueError):
        return {}
    return table if isinstance(table, dict) else {}


def _path(module, name: str) -> Path:
    import torch

    from ...core.io import cache_root

    source = Path(module.__file__).read_bytes()
    version = installed("executorch")
    key = hashlib.sha256(b"\0".join([version.encode(), torch.__version__.encode(), source])).hexdigest()[:24]
    return cache_root() / "patterns" / f"{module.__name__}{'.' + name if name else ''}-{key}.json"


@contextlib.contextmanager
def only_where_they_can_match(passes):
    """Inside, each pass of ``passes`` — (pass class, the module of its patterns, the name
    of the module's function that returns them, the type of what it returns) — runs with
    no patterns on a program that lacks an operator of every one of them."""
    with contextlib.ExitStack() as stack:
        for cls, module, getter, empty in passes:
            stack.enter_context(replaced(cls, "call", _guarded(cls.call, module, getter, empty)))
        yield


def maker(module, getter: str) -> Callable[[], list]:
    """What makes the pattern graphs of ``module``'s function ``getter``, as a list."""
    return lambda: list(getattr(module, getter)())


def _guarded(call, module, getter: str, empty):
    def guarded(self, graph_module):
        if can_match(graph_module, module, maker(module, getter)):
            return call(self, graph_module)
        with replaced(module, getter, empty):  # list() or dict(): no patterns
            return call(self, graph_module)

    return guarded


@contextlib.contextmanager
def built_only_where_they_can_match(module, attr: str, have: set[str]):
    """Inside, ``module.attr(pattern, example_inputs, ...)``, which builds the graph of the
    ``torch.nn.Module`` ``pattern`` by exporting it, gives a graph that matches nothing
    (``never_matching``) for a pattern whose operators are known and not all in ``have``
    (the program's ``op_names``): ``SubgraphMatcher`` matches a pattern only where every
    one of its operators is, so the matcher finds what it would have found, nothing. A
    pattern not known yet is built, and its operators are kept (``keyed_path``); one that
    cannot be keyed (``pattern_key``) is built."""
    build = getattr(module, attr)
    path = keyed_path(module)
    known = {**_keyed(_shipped().get(path.stem)), **_keyed(_read(path))}
    learned: dict[str, list[str]] = {}

    def guarded(pattern, example_inputs, *args, **kwargs):
        key = pattern_key(module, pattern, example_inputs, args, kwargs)
        ops = known.get(key) if key is not None else None
        if ops is not None and not set(ops) <= have:
            return never_matching()
        graph = build(pattern, example_inputs, *args, **kwargs)
        if key is not None and ops is None:
            known[key] = learned[key] = sorted(op_names(graph))
        return graph

    try:
        with replaced(module, attr, guarded):
            yield
    finally:
        if learned:
            _learn(path, learned)


def pattern_key(module, pattern, example_inputs, args=(), kwargs=None) -> str | None:
    """What the graph of ``pattern`` is made from, as text: its classes (defined in
    ``module``, whose source keys the table), what their functions close over and default
    to and their other attributes, the example inputs' shapes and dtypes and the other
    arguments; None when one of them is not plain (a tensor's values, an object, a
    pattern with state of its own: the pattern is then built)."""
    import torch

    mro = type(pattern).__mro__
    ours = [c for c in mro if c.__module__ == module.__name__]
    if not ours or any(c not in ours and c not in torch.nn.Module.__mro__ for c in mro):
        return None
    if any(not k.startswith("_") and k != "training" for k in vars(pattern)) or any(pattern.children()) \
            or any(True for _ in pattern.parameters()) or any(True for _ in pattern.buffers()):
        return None

    def described(value):
        if isinstance(value, torch.Tensor):
            return ["tensor", list(value.shape), str(value.dtype)]
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        if isinstance(value, (tuple, list)):
            return [described(v) for v in value]
        if isinstance(value, dict):
            return sorted([str(k), described(v)] for k, v in value.items())
        if isinstance(value, torch._ops.OpOverload | torch._ops.OpOverloadPacket):
            return str(value)
        if inspect.isfunction(value) and value.__module__ == module.__name__:  # a function of the pattern's own
            return [value.__qualname__, [described(c.cell_contents) for c in value.__closure__ or ()],
                    described(value.__defaults__), described(value.__kwdefaults__)]
        name, where = getattr(value, "__qualname__", None), getattr(value, "__module__", None)
        if callable(value) and isinstance(name, str) and isinstance(where, str) and "<locals>" not in name:
            return f"{where}:{name}"
        raise ValueError(value)

    try:
        classes = [[c.__qualname__, described({k: v for k, v in vars(c).items()
                                               if inspect.isfunction(v) or not (k.startswith("__") and k.endswith("__"))})]
                   for c in ours]
        return json.dumps([classes, described(tuple(example_inputs)), described(tuple(args)), described(kwargs or {})])
    except (ValueError, TypeError):
        return None


def _nowhere(x):
    """The operator of ``never_matching``'s graph, in no program."""
    raise AssertionError("a pattern graph that matches nothing was run")


def never_matching():
    """A pattern graph (as ``torch.export`` makes them, returning its output and the map of
    its named nodes) whose one operator no program holds."""
    import torch
    from torch.fx.graph import _PyTreeCodeGen, _PyTreeInfo
    from torch.utils import _pytree

    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    y = graph.call_function(_nowhere, (x,))
    flat, spec = _pytree.tree_flatten((y, {"output": y}))
    graph.output(flat)
    graph._codegen = _PyTreeCodeGen(_PyTreeInfo(["x"], _pytree.tree_flatten(((x,), {}))[1], spec))
    return torch.fx.GraphModule(torch.nn.Module(), graph)


def keyed_path(module) -> Path:
    """Where the operators of ``module``'s pattern graphs are kept, key by key."""
    return _path(module, "keyed")


def _read(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _keyed(table) -> dict[str, list[str]]:
    """The well-formed entries of a kept or shipped table of pattern key -> operators."""
    if not isinstance(table, dict):
        return {}
    return {k: v for k, v in table.items() if isinstance(v, list) and v and all(isinstance(op, str) for op in v)}


def _learn(path: Path, learned: dict[str, list[str]]) -> None:
    from filelock import FileLock

    from ...core.io import keep

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(path) + ".lock"):  # another job's entries kept too
            keep(path, json.dumps({**_keyed(_read(path)), **learned}, sort_keys=True))
    except OSError:
        pass  # a cache that cannot be written: built again next time


def pattern_keys(module, attr: str, run: Callable[[], object],
                 build: Callable[[str], bool] = lambda key: False) -> dict[str, list[str] | None]:
    """Each pattern ``run()`` asks ``module.attr`` to build, by key: its operators where
    ``build(key)``, else None (not built: it gets ``never_matching()``)."""
    made = getattr(module, attr)
    asked: dict[str, list[str] | None] = {}

    def recording(pattern, example_inputs, *args, **kwargs):
        key = pattern_key(module, pattern, example_inputs, args, kwargs)
        if key is None:  # built wherever it is asked for: nothing to know
            return made(pattern, example_inputs, *args, **kwargs)
        if asked.get(key) is not None or not build(key):  # built already, or not to be
            asked.setdefault(key, None)
            return never_matching()
        graph = made(pattern, example_inputs, *args, **kwargs)
        asked[key] = sorted(op_names(graph))
        return graph

    with replaced(module, attr, recording):
        run()
    return asked


def pattern_sets() -> list[tuple]:
    """(module, build, name) of every pattern set pteforge makes only where it can match:
    each backend's own (``Backend.pattern_sets``)."""
    from ...backends import default_registry

    return [s for backend in default_registry() for s in backend.pattern_sets()]


def keyed_pattern_sets() -> list[tuple]:
    """(module, attr, run) of every builder pteforge calls only for patterns that can match:
    each backend's own (``Backend.keyed_pattern_sets``)."""
    from ...backends import default_registry

    return [s for backend in default_registry() for s in backend.keyed_pattern_sets()]


def make_table(keyed: Callable[[str], bool] = lambda key: True) -> dict[str, list[list[str]] | dict]:
    """What ``SHIPPED`` holds for the installed versions, made from the pattern graphs
    (of the keyed ones, those ``keyed(key)`` says; the others' keys map to None)."""
    made: dict = {_path(module, name).stem: [sorted(op_names(graph)) for graph in build()]
                  for module, build, name in pattern_sets()}
    for module, attr, run in keyed_pattern_sets():
        made[keyed_path(module).stem] = pattern_keys(module, attr, run, keyed)
    return made


if __name__ == "__main__":
    print(json.dumps(make_table(), indent=1, sort_keys=True))

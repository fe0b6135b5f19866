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
them once. ``python -m pteforge.stages.patterns`` prints that file again, made from the
installed ExecuTorch.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
from collections.abc import Callable
from pathlib import Path


def op_names(graph_module) -> set[str]:
    """The targets of the call nodes of ``graph_module`` and its submodules, as text."""
    import torch

    return {str(getattr(n.target, "_op", n.target)) for m in graph_module.modules() if isinstance(m, torch.fx.GraphModule)
            for n in m.graph.nodes if n.op == "call_function"}


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
    try:
        kept = json.loads(path.read_text())
    except (OSError, ValueError):
        kept = None
    for ops in (kept, _shipped().get(path.stem)):
        if isinstance(ops, list) and ops and all(isinstance(o, list) and o and all(isinstance(op, str) for op in o)
                                                 for o in ops):
            return [frozenset(o) for o in ops]
    # none kept or shipped for these versions, or a damaged file: learned again from the graphs
    ops = [sorted(op_names(graph)) for graph in build()]
    from ..io import write_atomic

    try:
        write_atomic(path, json.dumps(ops))
    except OSError:
        pass  # a read-only cache: built again next time
    return [frozenset(o) for o in ops]


SHIPPED = Path(__file__).parent.parent / "data" / "patterns.json"


@functools.cache
def _shipped() -> dict:
    try:
        table = json.loads(SHIPPED.read_text())
    except (OSError, ValueError):
        return {}
    return table if isinstance(table, dict) else {}


def _path(module, name: str) -> Path:
    from importlib.metadata import version as installed

    import torch

    from ..cache import cache_root

    source = Path(module.__file__).read_bytes()
    version = installed("executorch")
    key = hashlib.sha256(b"\0".join([version.encode(), torch.__version__.encode(), source])).hexdigest()[:24]
    return cache_root() / "patterns" / f"{module.__name__}{'.' + name if name else ''}-{key}.json"


@contextlib.contextmanager
def replaced(obj, attr: str, value):
    """``obj.attr`` is ``value`` inside."""
    real = getattr(obj, attr)
    setattr(obj, attr, value)
    try:
        yield
    finally:
        setattr(obj, attr, real)


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


def pattern_sets() -> list[tuple]:
    """(module, build, name) of every pattern set pteforge makes only where it can match."""
    from ..backends.vulkan import pattern_sets as vulkan
    from ..backends.xnnpack import pattern_sets as xnnpack

    return [*xnnpack(), *vulkan()]


def made_now() -> dict[str, list[list[str]]]:
    """What ``SHIPPED`` holds for the installed versions, made from the pattern graphs."""
    return {_path(module, name).stem: [sorted(op_names(graph)) for graph in build()] for module, build, name in pattern_sets()}


if __name__ == "__main__":
    print(json.dumps(made_now(), indent=1, sort_keys=True))

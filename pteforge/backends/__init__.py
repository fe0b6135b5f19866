"""Every backend pteforge knows, one file each, found rather than listed.

Built-in backends are the modules of this package (files starting with ``_`` and
``base`` are not backends): each :class:`Backend` subclass with a ``name`` that a module
defines is one backend. Third-party backends come in through the entry-point group
``pteforge.backends`` (``name = "package.module:BackendClass"``), as llm and hatchling
load their plugins. Backends are ordered by their ``order`` attribute, then name.

Discovery imports no SDK (backend files import their SDKs inside methods), and a
plugin that fails to load is reported, not fatal: it cannot break ``--backends xnnpack``.
"""

from __future__ import annotations

from functools import lru_cache

from ..core.kernels import in_no_kernel_library
from ..core.registry import Registry, discover
from ..core.spec import Target
from .base import Availability, Backend, Check, chain_precisions

ENTRY_POINT_GROUP = "pteforge.backends"
# entry points that failed to load: "name (value): why"
PLUGIN_ERRORS: list[str] = []


@lru_cache(maxsize=1)
def backend_classes() -> tuple[type[Backend], ...]:
    """Built-in and third-party backend classes, in ``order``."""
    return tuple(discover(__name__, __path__, Backend, "name", ENTRY_POINT_GROUP, PLUGIN_ERRORS))


def build_registry(classes=None) -> Registry[Backend]:
    registry: Registry[Backend] = Registry("backend")
    for cls in classes if classes is not None else backend_classes():
        registry.register(cls.name, cls(), aliases=cls.aliases)
    return registry


@lru_cache(maxsize=1)
def default_registry() -> Registry[Backend]:
    return build_registry()


def availability(backend: Backend, host, os_name: str | None = None) -> Availability:
    """Can ``backend`` lower, and run on ``host``: this host, or host OS ``os_name``'s."""
    try:
        lower = backend.lower_check() if os_name is None else backend.lower_check_on(os_name)
    except Exception as exc:  # a broken SDK install must not break the table
        from ..core.errors import one_line

        lower = Check(False, f"availability check failed: {one_line(exc)}")
    return Availability(backend.name, lower, backend.run_check(host))


def program_check(host, delegates, operators) -> Check:
    """Can a program calling ``delegates`` and ``operators`` run on ``host``? A no names
    the backends whose devices would run it (from their files)."""
    registry = default_registry()
    for delegate in dict.fromkeys(delegates):
        if delegate not in host.backends:
            owner = next((b for b in registry if b.runtime_name == delegate), None)
            where = ", ".join(owner.platforms) if owner else "a device whose runtime has it"
            return Check(False, f"{delegate} is not registered in {host.where}", f"run it on a device: {where}")
    missing = [op for op in dict.fromkeys(operators) if op not in host.operators]
    nowhere = in_no_kernel_library(missing)  # what the host has is not missing
    if nowhere:
        return Check(False, *nowhere, anywhere=False)
    # a backend's own kernels (cortex_m::, cadence::) are the cause a user knows: name them first
    owned = {b.ops_namespace for b in registry if b.ops_namespace}
    missing.sort(key=lambda op: op.split("::")[0] not in owned)
    if missing:
        namespace = missing[0].split("::")[0]
        owner = next((b for b in registry if b.ops_namespace == namespace), None)
        where = f"{owner.title}: {', '.join(owner.platforms)}" if owner else "a runtime built with these kernels"
        more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
        return Check(False, f"the {namespace}:: kernels are not in {host.where} ({missing[0]}{more})",
                     f"run it on a device whose ExecuTorch links them ({where})")
    return Check(True, f"every delegate and kernel it calls is in {host.where}")


def source_transform_variants(targets) -> tuple:
    """(backend, precision) pairs whose backend transforms the eager model before capture."""
    registry = default_registry()
    return tuple(
        dict.fromkeys((t.primary, t.precision) for t in targets if t.precision in registry.get(t.primary).source_transform_precisions)
    )


__all__ = ["Availability", "Backend", "Check", "backend_classes", "build_registry", "default_registry", "availability",
           "program_check", "source_transform_variants"]


def lowering_key(target: Target) -> tuple:
    """Targets with equal keys make the same program (``Backend.lowering_key`` of each
    backend in the chain, at the precision it lowers at)."""
    chain = [default_registry().get(name) for name in target.backends]
    return tuple(b.lowering_key(at) for b, at in zip(chain, chain_precisions(chain, target.precision)))

"""Per-platform backend priorities and the fallback order over artifacts.

Each backend file declares its own rank per platform (``priority``); the tables here
are computed from the registry, so a new backend places itself.
"""

from __future__ import annotations

from ..core.errors import UsageError
from ..core.registry import unknown_name_message

from ..core.fallback import DESKTOP_OS, PLATFORMS, order_for


def priorities() -> dict[str, tuple[str, ...]]:
    """Platform -> backends in the order an app should try them (accelerators first, the
    CPU fallbacks, which work everywhere, last); from each backend's ``priority``."""
    from ..backends import default_registry

    backends = list(default_registry())
    return {
        p: tuple(b.name for b in sorted((b for b in backends if p in b.priority), key=lambda b: (b.priority[p], b.order)))
        for p in PLATFORMS
    }


def cpu_last() -> tuple[str, ...]:
    """The CPU backends every platform falls back to, in the order apps try them, last
    (each backend's ``cpu_fallback``)."""
    from ..backends import default_registry

    return tuple(b.name for b in sorted((b for b in default_registry() if b.cpu_fallback), key=lambda b: b.cpu_fallback))


def parse_platform(name: str) -> str:
    if name not in PLATFORMS and name != "all":
        raise UsageError(unknown_name_message("platform", name, [*PLATFORMS, "all"]),
                         fix=f"use --target {', '.join(PLATFORMS)} or all")
    return name


def parse_device(name: str) -> str:
    """A device's platform for ``select``: one of ``PLATFORMS``, a desktop's OS (``macos``,
    ``linux``, ``windows``) or ``all``."""
    if name not in (*PLATFORMS, *DESKTOP_OS, "all"):
        raise UsageError(unknown_name_message("platform", name, [*PLATFORMS, *DESKTOP_OS, "all"]),
                         fix=f"use --platform {', '.join((*PLATFORMS, *DESKTOP_OS))} or all")
    return name


def targets_for(platform: str) -> list[str]:
    """``--target ios`` → the backends to export, in priority order."""
    table = priorities()
    if platform == "all":
        seen: dict[str, None] = {}
        last = cpu_last()
        for chain in table.values():
            seen.update(dict.fromkeys(b for b in chain if b not in last))
        seen.update(dict.fromkeys(last[:1]))  # the first CPU fallback, once
        return list(seen)
    return list(table[parse_platform(platform)])


def describe() -> str:
    """``ios: coreml metal xnnpack; android: ...`` for the command line's help."""
    return "; ".join(f"{p}: {' '.join(chain)}" for p, chain in priorities().items())


def fallback_order(entries, platform: str | None) -> list:
    """The artifacts of one model in the order an app should try them on ``platform``, by
    the backends' declared priorities (``core.fallback.order_for``)."""
    return order_for(entries, platform, priorities(), cpu_last())


def fallback_tables() -> tuple[dict[str, tuple[str, ...]], tuple[str, ...]]:
    """What the manifest's fallback table is computed from: each platform's backends in
    priority order, and the CPU fallbacks."""
    return priorities(), cpu_last()

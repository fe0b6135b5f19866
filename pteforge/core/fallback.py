"""The platforms an app runs on, and the order it tries a model's artifacts in: plain
functions of the entries and of the backends' priorities, given as data (the backends'
registry computes those: ``app/platforms.py``), so the reports order without it."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

PLATFORMS = ("ios", "android", "desktop", "embedded", "web")
# What a manifest entry's `devices` must hold for the entry to serve a platform.
PLATFORM_OS = {
    "ios": {"ios"},
    "android": {"android"},
    "desktop": {"linux", "windows", "macos"},
    "embedded": {"embedded"},
    "web": {"web"},
}


# A desktop device by its operating system: desktop's order, its artifacts for that OS only
DESKTOP_OS = ("macos", "linux", "windows")


def host_platform() -> str:
    return "desktop"  # pteforge runs on Linux, macOS or Windows hosts


def order_for(entries: Iterable[Any], platform: str | None, table: dict[str, tuple[str, ...]], last: tuple[str, ...]) -> list:
    """The artifacts of one model in the order an app should try them on ``platform`` (or
    on a desktop device of one OS, ``linux``: desktop's order, that OS's artifacts only).

    Priority backends first (``table``: platform -> backends), then any other artifact whose
    platforms include this one (accelerators before CPU), the CPU fallbacks (``last``) last;
    an OUT_OF_BUDGET artifact after all of them.
    ``None`` means any platform.
    """
    oses = ({platform} if platform in DESKTOP_OS else PLATFORM_OS.get(platform)) if platform else None
    platform = "desktop" if platform in DESKTOP_OS else platform
    priority = table.get(platform, ()) if platform else ()

    def rank(e: Any) -> tuple[int, int]:
        primary = e.backends[0]
        if primary in priority:
            return (0, priority.index(primary))
        return (1, last.index(primary) + 1 if primary in last else 0)

    usable = [e for e in entries if oses is None or oses & set(getattr(e, "devices", None) or e.platforms)]
    # an artifact below its accuracy budget (offered only with --offer-out-of-budget) is never tried first
    return sorted(usable, key=lambda e: (str(e.status) == "OUT_OF_BUDGET", *rank(e), e.precision != "fp32", e.name))


def fallback_table(models: Sequence[Any], table: dict[str, tuple[str, ...]], last: tuple[str, ...]) -> dict[str, dict[str, list[str]]]:
    """Each model's artifacts in the order an app tries them, per platform (the manifest's ``fallback``)."""
    out: dict[str, dict[str, list[str]]] = {}
    for name in dict.fromkeys(m.base_model for m in models):
        mine = [m for m in models if m.base_model == name]
        out[name] = {p: [e.name for e in order_for(mine, p, table, last)] for p in PLATFORMS}
    return out

"""Per-platform backend priorities (seed 004) and the fallback order over artifacts."""

from __future__ import annotations

import sys

from .errors import UsageError
from .registry import unknown_name_message

# Seed 004's recommended priorities: accelerators first, XNNPACK (works everywhere) last.
PRIORITIES: dict[str, tuple[str, ...]] = {
    "ios": ("coreml", "metal", "xnnpack"),  # the seed's mps is metal since ExecuTorch 1.5
    "android": ("qnn", "vulkan", "xnnpack"),
    "desktop": ("vulkan", "xnnpack"),
    "embedded": ("ethos-u55", "xnnpack"),
    "web": ("xnnpack",),
}
# What a manifest entry's `platforms` must hold for the entry to serve a platform.
PLATFORM_OS = {
    "ios": {"ios"},
    "android": {"android"},
    "desktop": {"linux", "windows", "macos"},
    "embedded": {"embedded"},
    "web": {"web"},
}
CPU_LAST = ("xnnpack", "portable")


def parse_platform(name: str) -> str:
    if name not in PRIORITIES and name != "all":
        raise UsageError(unknown_name_message("platform", name, [*PRIORITIES, "all"]),
                         fix="use --target ios, android, desktop, embedded, web or all")
    return name


def targets_for(platform: str) -> list[str]:
    """``--target ios`` → the backends to export, in priority order."""
    if platform == "all":
        seen: dict[str, None] = {}
        for chain in PRIORITIES.values():
            seen.update(dict.fromkeys(b for b in chain if b not in CPU_LAST))
        seen.update(dict.fromkeys(("xnnpack",)))
        return list(seen)
    return list(PRIORITIES[parse_platform(platform)])


def host_platform() -> str:
    if sys.platform.startswith("darwin"):
        return "desktop"
    if sys.platform.startswith(("linux", "win")):
        return "desktop"
    return "embedded"


def fallback_order(entries, platform: str | None) -> list:
    """The artifacts of one model in the order an app should try them on ``platform``.

    Priority backends first (seed 004), then any other artifact whose platforms
    include this one (accelerators before CPU), XNNPACK and portable last. ``None``
    means any platform.
    """
    priority = PRIORITIES.get(platform, ()) if platform else ()
    oses = PLATFORM_OS.get(platform) if platform else None

    def rank(e):
        primary = e.backends[0]
        if primary in priority:
            return (0, priority.index(primary))
        return (1, CPU_LAST.index(primary) + 1 if primary in CPU_LAST else 0)

    usable = [e for e in entries if oses is None or oses & set(getattr(e, "devices", None) or e.platforms)]
    return sorted(usable, key=lambda e: (*rank(e), e.precision != "fp32", e.name))

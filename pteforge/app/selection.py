"""Run-time selection with fallback: the best artifact of a model this runtime can load.

``load_best`` walks a platform's fallback order (seed 004: iOS Core ML > Metal >
XNNPACK, Android QNN > Vulkan > XNNPACK, ...) and skips, with a reason, every
artifact whose delegates this runtime lacks, whose file is missing or altered, or
that fails to load.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..backends import program_check
from ..core.errors import UsageError, one_line
from ..core.io import differs
from ..core.registry import unknown_name_message
from ..core.system import os_name
from ..report.manifest import MANIFEST_NAME, Manifest, ModelEntry, load_manifest
from ..runtime.host import Host, load_runtime
from ..runtime.isolate import IsolatedRuntime
from .platforms import fallback_order, parse_device

Loader = Callable[[Path], object]


@dataclass
class Selection:
    model: str
    platform: str | None
    entry: ModelEntry | None = None
    path: Path | None = None
    program: object | None = None
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (artifact name, why)
    # for a device of ``platform`` (``select --platform``): what it tries, in order; nothing is loaded here
    device: bool = False
    order: list[str] = field(default_factory=list)


def _manifest(manifest) -> tuple[Manifest, Path]:
    if isinstance(manifest, Manifest):
        from ..report.manifest import check_paths

        check_paths(manifest, Path(".") / MANIFEST_NAME)
        return manifest, Path(".")
    path = Path(manifest)
    if path.is_dir():
        path = path / MANIFEST_NAME
    loaded = load_manifest(path)
    if loaded is None:
        raise UsageError(f"no manifest at {path}", fix="export first, or name the manifest: pteforge select DIR_OR_INDEX_JSON MODEL")
    return loaded, path.parent


def choose(manifest, model: str, platform: str | None, here, load: Loader, device: bool = False) -> Selection:
    """The first artifact of ``model`` in ``platform``'s fallback order (this host's
    OS's when None: a Linux host's leaves out what only macOS loads; any platform's for ``all``) that can run on ``here`` (a
    :class:`pteforge.runtime.host.Host`) and that ``load`` loads. ``device``: answer for a device
    of ``platform`` instead, which has its own delegates: the first artifact of its order
    whose file is intact (the device falls back along ``order`` when one does not load)."""
    man, base = _manifest(manifest)
    if platform is not None:
        parse_device(platform)
    mine = [e for e in man.models if e.base_model == model]
    if not mine:
        held = [e for e in (*man.outOfBudget, *man.notForApp, *man.failed) if e.base_model == model]
        if held:  # the model was exported, and none of its artifacts is for an app
            rows = ", ".join(f"{e.target}: {e.status if e.platforms else 'loaded by the app on no platform'}"
                             for e in held)
            raise UsageError(f"the manifest offers the app no artifact of {model} ({rows})",
                             fix="export it again for another backend or precision (EXPORT_SUMMARY.md says why each "
                                 "is held back); --offer-out-of-budget offers the OUT_OF_BUDGET ones")
        names = sorted({e.base_model for e in man.models})
        raise UsageError(unknown_name_message("model", model, names), fix="pick a model the manifest holds")
    device = device and platform not in (None, "all")
    selection = Selection(model, platform, device=device)
    order = fallback_order(mine, None if platform == "all" else platform or os_name())
    selection.order = [e.name for e in order]
    for entry in order:
        path = base / entry.file
        check = None if device else program_check(here, entry.delegation.get("delegates_in_program", []),
                                                        entry.delegation.get("kernels", []))
        if entry.status == "MISMATCH":
            selection.skipped.append((entry.name, "its outputs differed from the original's (MISMATCH)"))
        elif check is not None and not check.ok:
            selection.skipped.append((entry.name, check.reason))
        elif why := differs(path, entry.size, entry.hash):
            selection.skipped.append((entry.name, f"file {entry.file} {why}"))
        elif device:
            selection.entry, selection.path = entry, path
            return selection
        else:
            try:
                program = load(path)
            except Exception as exc:  # noqa: BLE001 - a failed load is a reason to fall back
                selection.skipped.append((entry.name, f"failed to load: {one_line(exc)}"))
                continue
            selection.entry, selection.path, selection.program = entry, path, program
            return selection
    return selection


def select(manifest, model: str, platform: str | None = None) -> Selection:
    """Which artifact a device of ``platform`` loads first (its fallback order, its own
    delegates: nothing is loaded here), or without ``platform`` the decision of
    :func:`load_best` on this host, with every file opened in a child process (a damaged
    file cannot take this process down); nothing stays loaded."""
    with IsolatedRuntime() as child:
        here = Host.from_dict(child.request("host"))

        def load(path):
            reply = child.request("load", path=str(path))
            if not reply["ok"]:
                raise RuntimeError(reply["error"])

        return choose(manifest, model, platform, here, load, device=platform is not None)


def load_best(manifest, model: str, platform: str | None = None) -> Selection:
    """Load the best artifact of ``model`` for ``platform`` in this process.

    Returns the loaded ``executorch.runtime`` program, the manifest entry chosen and
    why each earlier artifact was skipped (``selection.program`` is None when none fit).
    """
    from executorch.runtime import Verification


    runtime = load_runtime()

    def load(path: Path):
        program = runtime.load_program(path, verification=Verification.InternalConsistency)
        program.load_method("forward")  # delegates initialise here: a missing runtime fails now
        return program

    return choose(manifest, model, platform, Host.here(), load)

"""Longest jobs first: a run's (model, target) jobs ordered by how long each will take.

With more jobs than workers, the run ends when its last job does; starting the long ones
(Arm's quantize-and-compile, OpenVINO, big models) first keeps the short ones for the
end, when they fill the gaps. A job's duration is what an earlier run measured for the
same model and target (kept in the user cache), else a guess: its slowest backend's
``cost`` times the size of the captured program.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..core.result import Record, Stage
from ..core.spec import Target

# What a (model, target) job spends: every stage but the model's own (its capture, made
# once for all its targets) and what runs after the exports. A simulated target's runs
# count: Cortex-M's 14 runs on its reference kernels are ~4 s of its ~15 s.
JOB_STAGES = tuple(s for s in Stage if s not in (Stage.BUILD, Stage.CAPTURE, Stage.REFERENCE, Stage.CAPTURE_VARIANTS,
                                                 Stage.TIMING, Stage.ARM64))


def _path() -> Path:
    from ..core.io import cache_root

    return cache_root() / "durations.json"


def measured() -> dict[str, float]:
    try:
        data = json.loads(_path().read_text())
        return {k: float(v) for k, v in data.items()} if isinstance(data, dict) else {}
    except (OSError, ValueError, TypeError):
        return {}


def _key(model: str, target: str) -> str:
    return f"{model}|{target}"


def estimate(model: str, target: Target, capture_bytes: int, known: dict[str, float]) -> float:
    """Seconds the job is expected to take (measured, or guessed from the backends' cost)."""
    if _key(model, target.name) in known:
        return known[_key(model, target.name)]
    from ..backends import default_registry

    registry = default_registry()
    cost = max(registry.get(b).cost for b in target.backends)
    # quantizing (calibration) added ~40 %: TOSA int8 14.1 s against fp32 10.2 s
    return cost * (1.4 if target.precision.quantized else 1.0) * (1.0 + capture_bytes / 4e6)


def order(jobs: list, known: dict[str, float] | None = None) -> list:
    """``jobs`` as (model, target, capture path, job) tuples, longest first (stable)."""
    known = measured() if known is None else known

    def size(path: str) -> int:
        try:
            return os.path.getsize(path)
        except OSError:
            return 0

    return sorted(jobs, key=lambda j: -estimate(j[0], j[1], size(j[2]), known))


def remember(records: list[Record]) -> None:
    """Keep how long each finished job took, for the next run's order."""
    from filelock import FileLock

    from ..core.io import keep

    done = {_key(r.model, r.target): round(sum(r.timings.get(s.value, 0.0) for s in JOB_STAGES), 2)
            for r in records if r.artifact is not None and not r.cache and not r.same_program_as}
    if not done:
        return
    path = _path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(path) + ".lock", timeout=30):
            keep(path, json.dumps({**measured(), **done}, indent=0, sort_keys=True) + "\n")
    except OSError:
        pass  # a cache that cannot be written: the next run guesses again

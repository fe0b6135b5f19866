"""Speed figures of an export run: the p50 after warm-up of every artifact that runs here.

Every latency pteforge shows (terminal summary, EXPORT_SUMMARY.md, report.html) is one
of these numbers or one from ``pteforge bench``: measured in a process that runs
artifacts (here a worker of the run's pool, forked with ExecuTorch's runtime already
imported, torch on one thread as in :mod:`pteforge.runtime.child`), after warm-up runs, one
artifact at a time while no other job runs. Nothing else is shown as a latency. A
program slower than ``SECONDS_PER_RUN`` gets fewer timed runs (at least
``timing.MIN_RUNS``) and fewer warm-up runs (at least one); its ``runs`` and ``warmup``
say how many.

Timing is skipped, with the reason in the entry's ``bench``, when its estimated cost
(from the verification runs) would exceed ``MAX_FRACTION`` of the export's wall time;
the pairs that ``--precision auto`` or a reduced precision's comparison needs are
always timed.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

from ..backends import program_check
from ..core.result import Record, ran_here
from ..core.timing import MIN_RUNS
from ..runtime.child import _bench, _inspect
from ..runtime.host import Host

DEFAULT_RUNS = 10  # timed runs per artifact in an export (pteforge bench: 20)
WARMUP = 3
COMPARISON_RUNS = 20  # pairs compared against each other get more runs
# An export's timed runs of one artifact take about this per run asked for: a program slower
# than 100 ms a run (the portable fp32 mobilenet_v3_small: 176 ms) gets fewer, at least
# timing.MIN_RUNS, and its ``runs`` says so (pteforge bench always does all of them).
SECONDS_PER_RUN = 0.1
MAX_FRACTION = 0.25  # of the export's wall time


def timing_plan(records: list[Record], needed: list[Record], export_seconds: float, runs: int) -> list[tuple[Record, int]]:
    """(row, runs) to time: ``needed`` rows, then every other row that ran here within the
    budget; rows left out get ``latency = {"skipped": why}``. ``runs`` 0: none at all."""
    plan = [(r, max(runs, COMPARISON_RUNS)) for r in needed if r.artifact and _untimed(r)] if runs > 0 else []
    chosen = {id(r) for r, _ in plan}
    budget, spent = MAX_FRACTION * export_seconds, 0.0
    for rec in records:
        if id(rec) in chosen or not ran_here(rec) or rec.artifact is None or not _untimed(rec):
            continue
        cost = estimated_seconds(rec, runs)
        if runs <= 0:
            rec.latency = {"skipped": "timing turned off (--bench-runs 0)"}
        elif spent + cost > budget:
            rec.latency = {"skipped": f"timing would cost ~{cost:.0f} s, more than {MAX_FRACTION:.0%} of the "
                                      f"{export_seconds:.0f} s export; run pteforge bench"}
        else:
            spent += cost
            plan.append((rec, runs))
    return plan


def _untimed(rec: Record) -> bool:
    """No p50 yet: none measured, or only why an earlier run did not time it (a row restored
    from the cache keeps its numbers, never an earlier run's --bench-runs 0 or budget)."""
    return rec.latency is None or "skipped" in rec.latency


def estimated_seconds(rec: Record, runs: int) -> float:
    """What timing ``rec`` will cost: its verification's time per inference × the first
    run, the warm-up and the timed runs (each within its share, ``SECONDS_PER_RUN`` a run)."""
    v = rec.verification
    if v is None or "verify" not in rec.timings:
        return 0.0
    pace = rec.timings["verify"] / max(1, v.inputs + ((v.images or {}).get("images") or 0))
    timed = min(runs * pace, max(MIN_RUNS * pace, runs * SECONDS_PER_RUN))
    warm = min(WARMUP * pace, max(pace, WARMUP * SECONDS_PER_RUN))
    return pace + warm + timed


def time_artifacts(items: list[tuple[str, int, list]], warmup: int = WARMUP,
                   on_stage: Callable[[str], None] | None = None) -> dict[str, dict]:
    """Bench numbers per path (a worker job; ``items``: path, runs, what its seeded ids are
    drawn below per input): load, first run, p50/p90 after ``warmup``, peak RSS, threads;
    ``{"skipped": why}`` for a file that cannot be timed here."""
    import torch

    from ..app.validate import seeded_inputs

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as in the child: torch only copies outputs (see child.py)
    here = Host.here()
    out: dict[str, dict] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="pteforge-speed-") as tmp:
            for path, runs, highs in items:
                info = _inspect({"path": path})
                check = program_check(here, info["delegates"], info["operators"])
                if not check.ok:
                    out[path] = {"skipped": check.reason}
                    continue
                inputs = Path(tmp) / "in.pt"
                torch.save([seeded_inputs(info["inputs"], 0, highs)], inputs)
                numbers = _bench({"path": path, "inputs": str(inputs), "runs": runs, "warmup": warmup,
                                  "budget_s": runs * SECONDS_PER_RUN})
                out[path] = {k: (round(v, 3) if isinstance(v, float) else v) for k, v in numbers.items()}
    finally:
        torch.set_num_threads(threads)
    return out

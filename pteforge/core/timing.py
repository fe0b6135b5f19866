"""Latency statistics measured the same way for every runtime (ExecuTorch, eager, ONNX Runtime)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


MIN_RUNS = 5  # a time budget never leaves fewer timed runs than this


def measure(run: Callable[[], object], runs: int, warmup: int, budget_s: float | None = None) -> dict:
    """First run, then ``warmup`` untimed runs, then ``runs`` timed ones: milliseconds.

    ``budget_s``: the timed runs' time, by the warm-up's pace; a slower program gets fewer
    (never fewer than ``MIN_RUNS``), and ``runs`` says how many there were. The warm-up
    has the same share per run (``warmup`` × ``budget_s`` / ``runs``): a slower program
    warms up on fewer runs (never fewer than one after the first), and ``warmup`` says how
    many. (The portable mobilenet_v3_small, ~250 ms a run: one, not three, after its
    first run had set up what it keeps.)
    """
    t0 = time.perf_counter()
    run()
    first = (time.perf_counter() - t0) * 1000
    share = warmup * budget_s / max(runs, 1) if budget_s is not None else None
    t0 = time.perf_counter()
    warmed = 0
    while warmed < warmup:
        run()
        warmed += 1
        spent = time.perf_counter() - t0
        if share is not None and spent + spent / warmed > share:
            break  # another run would outlast the warm-up's share
    if budget_s is not None and warmed:
        pace = (time.perf_counter() - t0) / warmed
        runs = min(runs, max(MIN_RUNS, int(budget_s / pace)))
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        run()
        times.append((time.perf_counter() - t0) * 1000)
    times.sort()
    return {
        "first_run_ms": first,
        "p10_ms": times[int(round(0.1 * (len(times) - 1)))],
        "p50_ms": statistics.median(times),
        "p90_ms": times[min(len(times) - 1, int(round(0.9 * (len(times) - 1))))],
        "runs": len(times),
        "warmup": warmed,
    }

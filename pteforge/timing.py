"""Latency statistics measured the same way for every runtime (ExecuTorch, eager, ONNX Runtime)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def measure(run: Callable[[], object], runs: int, warmup: int) -> dict:
    """First run, then ``warmup`` untimed runs, then ``runs`` timed ones: milliseconds."""
    t0 = time.perf_counter()
    run()
    first = (time.perf_counter() - t0) * 1000
    for _ in range(warmup):
        run()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        run()
        times.append((time.perf_counter() - t0) * 1000)
    times.sort()
    return {
        "first_run_ms": first,
        "p50_ms": statistics.median(times),
        "p90_ms": times[min(len(times) - 1, int(round(0.9 * (len(times) - 1))))],
        "runs": len(times),
    }

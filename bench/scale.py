"""Ray against the local pool, measured side by side in one run, and throughput for N workers.

    uv run python bench/scale.py [--model mobilenet_v3_small] [--repeat 2] [--zoo 50]

1. The default run — ``pteforge export --mobilenet M --weights none``, every target that
   lowers here — with the local worker pool and with ``--executor ray`` (a local cluster
   started by the run, as a user without a cluster gets it), alternating, ``--repeat``
   times each, every run with its own output and a fresh cache. Goals: the local run
   ≤ 60 s on this machine; Ray's overhead ≤ 10 % (ratio of the medians ≤ 1.10).
2. N workers, simulated from what part 1 measured: each job's duration (the capture once
   per model, then each target's quantize/lower/serialize/verify/write) from the local
   run's manifest, for a zoo of ``--zoo`` copies of the model, scheduled as pteforge
   does (every capture, then the jobs longest first) and in plan order, on N workers.
   A simulation, not a measurement: it leaves out transfer and start-up costs (part 1
   measures those on one machine).
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CAPTURE_KEYS = ("model_build", "model_capture", "model_reference", "model_capture_variants")
JOB_KEYS = ("load", "quantize", "lower", "serialize", "verify", "write", "bundle")


def run(args: list[str], cache: Path) -> tuple[float, int]:
    env = {**os.environ, "PTEFORGE_CACHE_DIR": str(cache), "PYTHONWARNINGS": "ignore"}
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pteforge", *args], env=env, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
    if proc.returncode not in (0, 1):
        sys.stderr.write(proc.stderr[-2000:])
    return time.perf_counter() - t0, proc.returncode


def makespan(captures: list[float], jobs: list[float], workers: int, longest_first: bool) -> float:
    """Every capture (in parallel), then the jobs, each on the first free worker."""
    free = [0.0] * workers
    for d in captures:
        heapq.heappush(free, heapq.heappop(free) + d)
    start = max(free) if captures else 0.0  # jobs wait for the captures (pteforge's order)
    free = [max(f, start) for f in free]
    heapq.heapify(free)
    for d in sorted(jobs, reverse=True) if longest_first else jobs:
        heapq.heappush(free, heapq.heappop(free) + d)
    return max(free)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="mobilenet_v3_small")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--zoo", type=int, default=50, help="models in the simulated zoo (copies of the measured one)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="pteforge-bench-scale-"))
    base = ["export", "--mobilenet", args.model, "--weights", "none", "--no-cache"]
    walls: dict[str, list[float]] = {"local": [], "ray": []}
    for i in range(args.repeat):
        for executor in ("local", "ray"):
            out = work / f"{executor}-{i}"
            wall, code = run([*base, "--executor", executor, "--out", str(out)], work / f"cache-{executor}-{i}")
            walls[executor].append(wall)
            print(f"default run, {executor:<5} #{i + 1}: {wall:7.1f} s  (exit {code})", flush=True)
    local, ray = statistics.median(walls["local"]), statistics.median(walls["ray"])

    manifest = json.loads((work / "local-0" / "index.json").read_text())
    entries = manifest["models"] + manifest.get("references", []) + manifest.get("failed", [])
    capture = sum(entries[0]["timings"].get(k, 0.0) for k in CAPTURE_KEYS)
    jobs = [sum(e["timings"].get(k, 0.0) for k in JOB_KEYS) for e in entries]
    print(f"\nmeasured in the local run: capture {capture:.1f} s, {len(jobs)} target jobs, "
          f"{sum(jobs):.1f} s of job time (longest {max(jobs):.1f} s)")

    print("\nratios and goals, measured side by side in this run "
          f"(medians of {args.repeat}, one model: {args.model}):")
    print(f"  default run, local pool: {local:.1f} s   (goal ≤ 60 s)")
    print(f"  Ray / local: {ray:.1f} / {local:.1f} = {ray / local:.2f}   (goal ≤ 1.10: Ray's overhead ≤ 10 %)")

    zoo_captures, zoo_jobs = [capture] * args.zoo, jobs * args.zoo
    serial = makespan(zoo_captures, zoo_jobs, 1, True)
    print(f"\nsimulated: a zoo of {args.zoo} × {args.model} ({len(zoo_jobs)} jobs), N workers "
          "(measured durations; no transfer or start-up costs):")
    print(f"  {'N':>4}  {'longest first':>14}  {'plan order':>11}  {'speed-up':>8}  {'efficiency':>10}")
    for n in (1, 2, 4, 8, 16, 32, 64, 128):
        best, plain = makespan(zoo_captures, zoo_jobs, n, True), makespan(zoo_captures, zoo_jobs, n, False)
        print(f"  {n:>4}  {best / 60:>12.1f} m  {plain / 60:>9.1f} m  {serial / best:>7.1f}×  {serial / best / n:>9.0%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Export throughput, verification overhead, peak memory and the cache, measured in one run.

    uv run python bench/export_throughput.py [--model mobilenet_v3_small]

1. The default run, ``pteforge export --mobilenet M --backends <every target that lowers
   here>``: its wall time (goal ≤ 60 s on the 2-core machine), and against the sum of one
   cold ``pteforge export --backends X`` process per target (goal: ratio ≤ 0.25). The peak
   memory of the one run is the largest total RSS of its process tree, sampled every 50 ms (goal ≤ 4 GiB).
2. What verification adds (goal ≤ 10 %): the one run against the same run with
   ``--no-verify``, three of each, alternating, so that a slow stretch of a shared
   machine does not land on one side only; the median of each side.
3. The one run again, unchanged, with the cache warm (goal ≤ 1 s).
4. What the reference simulators cost (``--simulation-only``; goal ≤ 15 %): the one run
   against the same run with ``--no-simulate``, three of each, alternating; the medians,
   and each row's simulate stage. Results go to ``bench/export_throughput.json``.

This machine's pace moves from hour to hour (a cold single XNNPACK run of
mobilenet_v3_small has taken 10.8 s in one session and 22–33 s in others, the same code),
so the bench times a fixed CPU-bound reference (``PACE``: a pure-Python loop, one thread)
at its start and end: compare figures only between runs of a similar pace.

Every run uses ``--weights none``, its own output directory and a fresh cache
directory (``--no-cache`` for the cold runs), so no run reuses another's work.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil


def run(args: list[str], cache: Path) -> tuple[float, int, int]:
    """(seconds, exit code, peak total RSS of the process tree in bytes)."""
    env = {**os.environ, "PTEFORGE_CACHE_DIR": str(cache), "PYTHONWARNINGS": "ignore"}
    t0 = time.perf_counter()
    proc = psutil.Popen([sys.executable, "-m", "pteforge", *args], env=env,
                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = 0
    while proc.poll() is None:
        total = 0
        try:
            for p in [proc, *proc.children(recursive=True)]:
                try:
                    total += p.memory_info().rss
                except psutil.Error:
                    pass
        except psutil.Error:
            pass
        peak = max(peak, total)
        time.sleep(0.05)
    wall = time.perf_counter() - t0
    if proc.returncode not in (0,):
        sys.stderr.write(proc.stderr.read().decode()[-2000:])
    return wall, proc.returncode, peak


PACE = "import time; t = time.perf_counter(); s = 0\nfor i in range(20_000_000): s += i\nprint(time.perf_counter() - t)"


def pace() -> float:
    """Seconds this machine takes for ``PACE`` now, in a process of its own."""
    out = subprocess.run([sys.executable, "-c", PACE], capture_output=True, text=True, check=True)
    return float(out.stdout)


def lowerable_targets() -> list[str]:
    from pteforge.backends import default_registry

    return [b.name for b in default_registry() if b.lower_check().ok]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="mobilenet_v3_small")
    ap.add_argument("--cache-only", action="store_true", help="only part 3: fill the cache, then re-export unchanged")
    ap.add_argument("--ratio-only", action="store_true", help="only part 1: the one run and the cold single runs")
    ap.add_argument("--simulation-only", action="store_true",
                    help="only part 4: the default run with and without --no-simulate, alternating")
    args = ap.parse_args()
    targets = lowerable_targets()
    base = ["export", "--mobilenet", args.model, "--weights", "none"]
    work = Path(tempfile.mkdtemp(prefix="pteforge-bench-throughput-"))
    print(f"{args.model} to {len(targets)} targets: {' '.join(targets)}", flush=True)
    start_pace = pace()
    print(f"this machine's pace: {start_pace:.2f} s for the reference loop\n", flush=True)
    if args.cache_only:
        print(f"\nunchanged re-export: {cache_part(base, targets, work):.2f} s, median of 3 (goal ≤ 1 s)")
        return 0
    if args.simulation_only:
        simulation_part(base, targets, work, start_pace)
        return 0

    one, code, peak = run([*base, "--backends", *targets, "--out", str(work / "one"), "--no-cache"], work / "cache-one")
    print(f"one run, every target:         {one:7.1f} s  (exit {code}, peak RSS of its process tree {peak / 2**30:.2f} GiB)", flush=True)
    manifest = json.loads((work / "one" / "index.json").read_text())
    stages = {}
    for e in manifest["models"] + manifest.get("references", []):
        for k, v in e["timings"].items():
            stages[k] = stages.get(k, 0.0) + v

    singles = {}
    for t in targets:
        wall, code, _ = run([*base, "--backends", t, "--out", str(work / f"single-{t}"), "--no-cache"], work / f"cache-{t}")
        singles[t] = wall
        print(f"  cold single run {t:<12}   {wall:7.1f} s  (exit {code})", flush=True)
    total = sum(singles.values())
    if args.ratio_only:
        print(f"\n  the default run: {one:.1f} s wall   (goal ≤ 60 s)")
        print(f"  one run / sum of {len(targets)} cold single runs = {one:.1f} / {total:.1f} = {one / total:.2f}   (goal ≤ 0.25)")
        print(f"  this machine's pace: {start_pace:.2f} s at the start, {pace():.2f} s at the end")
        return 0

    with_verify, without = [one], []  # alternating: with, without, with, without, with, without
    for i in range(3):
        if i:
            wall, code, _ = run([*base, "--backends", *targets, "--out", str(work / f"verify-{i}"), "--no-cache"], work / f"cache-v-{i}")
            with_verify.append(wall)
            print(f"one run again:                 {wall:7.1f} s  (exit {code})", flush=True)
        wall, code, _ = run([*base, "--backends", *targets, "--out", str(work / f"noverify-{i}"), "--no-cache", "--no-verify"],
                            work / f"cache-nv-{i}")
        without.append(wall)
        print(f"one run, --no-verify:          {wall:7.1f} s  (exit {code})", flush=True)
    verify_median, noverify = statistics.median(with_verify), statistics.median(without)

    warm = cache_part(base, targets, work)

    print("\nratios, measured side by side in this run:")
    print(f"  the default run (every target, one process): {one:.1f} s wall, {sum(v for k, v in stages.items() if not k.startswith('model_')):.0f} s of target-job time   (goal ≤ 60 s)")
    print(f"  one run / sum of {len(targets)} cold single runs = {one:.1f} / {total:.1f} = {one / total:.2f}   (goal ≤ 0.25); "
          f"with the median of the 3 one runs, {verify_median:.1f} / {total:.1f} = {verify_median / total:.2f}")
    print(f"  verification adds {100 * (verify_median - noverify) / noverify:+.1f} % to the run's wall time "
          f"(median {verify_median:.1f} vs {noverify:.1f} s; verify stage total {stages.get('verify', 0):.1f} s "
          f"of worker time)   (goal ≤ 10 %)")
    print(f"  peak memory of the all-targets run: {peak / 2**30:.2f} GiB   (goal ≤ 4 GiB)")
    print(f"  unchanged re-export: {warm:.2f} s, median of 3   (goal ≤ 1 s)")
    print(f"  this machine's pace: {start_pace:.2f} s at the start, {pace():.2f} s at the end")
    return 0


def simulation_part(base: list[str], targets: list[str], work: Path, start_pace: float) -> None:
    """The default run with its simulations and without (``--no-simulate``), alternating."""
    from pteforge.core import system

    runs: dict[str, list[float]] = {"simulate": [], "no-simulate": []}
    stage, statuses = {}, {}
    for i in range(3):
        for side, extra in (("simulate", []), ("no-simulate", ["--no-simulate"])):
            out = work / f"{side}-{i}"
            wall, code, _ = run([*base, "--backends", *targets, "--out", str(out), "--no-cache", *extra], work / f"cache-{side}-{i}")
            runs[side].append(wall)
            print(f"one run{', --no-simulate' if extra else ''}: {wall:7.1f} s  (exit {code})", flush=True)
            if side == "simulate" and not stage:
                man = json.loads((out / "index.json").read_text())
                rows = man["models"] + man.get("references", []) + man.get("failed", [])
                stage = {e["target"]: e["timings"]["simulate"] for e in rows if "simulate" in e["timings"]}
                statuses = {e["target"]: e["status"] for e in rows}
    with_sim, without = statistics.median(runs["simulate"]), statistics.median(runs["no-simulate"])
    added = 100 * (with_sim - without) / without
    print(f"\n  simulations add {added:+.1f} % to the default run's wall time (median {with_sim:.1f} vs {without:.1f} s)"
          f"   (goal ≤ 15 %)")
    print(f"  simulate stage per row (s of worker time): {json.dumps(stage)}")
    cpu = system.cpu_name()
    result = {"cpu": cpu, "cores": os.cpu_count(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "targets": targets, "walls_s": runs, "median_s": {"simulate": with_sim, "no-simulate": without},
              "added_percent": round(added, 1), "simulate_stage_s": stage, "statuses": statuses,
              "pace_s": {"start": start_pace, "end": pace()}}
    path = Path(__file__).with_name("export_throughput.json")
    existing = json.loads(path.read_text()) if path.exists() else {}
    path.write_text(json.dumps({**existing, "simulation": result}, indent=1) + "\n")
    print(f"  written to {path}")


def cache_part(base: list[str], targets: list[str], work: Path) -> float:
    """Fill a fresh cache with one run, then time the same run unchanged three times: the median."""
    fill, code, _ = run([*base, "--backends", *targets, "--out", str(work / "cached")], work / "cache-warm")
    print(f"filling the cache:             {fill:7.1f} s  (exit {code})", flush=True)
    times = []
    for _ in range(3):
        warm, code, _ = run([*base, "--backends", *targets, "--out", str(work / "cached")], work / "cache-warm")
        times.append(warm)
        print(f"unchanged re-export (cache):   {warm:7.2f} s  (exit {code})", flush=True)
    return sorted(times)[1]


if __name__ == "__main__":
    raise SystemExit(main())

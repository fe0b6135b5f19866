"""Soak: many exports in a row in one process, through the API, and what they leave behind.

    uv run python bench/soak.py [--runs 30] [--out bench/soak.json]

Each run exports a seeded tiny model (a different seed each time, so nothing repeats by
accident) to xnnpack, xnnpack:int8 and portable, with the cache on for even runs and off
for odd ones, and verifies and times them. Before the first run and after every run it
reads this process's open file descriptors, threads, RSS and child processes (psutil).

Goals, printed as figures from this one run: open descriptors and children at the end no
more than after the first run (the pool's fork server and runtime child, started by the
first, are reused), RSS growth after the first run below 20 %, and no process of the run
left after the last run but multiprocessing's fork server and resource tracker (shared by
every run; they exit with this process).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # tiny_models, a --model factory


def snapshot(proc) -> dict:
    return {"fds": proc.num_fds(), "threads": proc.num_threads(), "rss_mb": round(proc.memory_info().rss / 2**20, 1),
            "children": len(proc.children(recursive=True))}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--out", default=str(ROOT / "bench" / "soak.json"))
    args = ap.parse_args()

    import psutil

    from pteforge.core import system
    from pteforge.api import export, plan_targets
    from pteforge.models.factory import factory_spec
    from pteforge.core.spec import ExportConfig, InputSpec

    me = psutil.Process()
    rows = [{"run": 0, **snapshot(me)}]
    with tempfile.TemporaryDirectory(prefix="pteforge-soak-") as tmp:
        os.environ["PTEFORGE_CACHE_DIR"] = str(Path(tmp) / "cache")
        plan = plan_targets(["xnnpack", "xnnpack:int8", "portable"])
        for i in range(1, args.runs + 1):
            spec = factory_spec("tiny_models:tiny", (InputSpec((1, 3, 16, 16)),), name=f"tiny{i}")
            config = ExportConfig(out_dir=Path(tmp) / f"out{i}", weights="none", seed=i, cache=i % 2 == 0, bench_runs=3)
            t0 = time.perf_counter()
            result = export([spec], plan, config)
            statuses = sorted({r.status.value for r in result.records})
            rows.append({"run": i, "seconds": round(time.perf_counter() - t0, 2), "cache": config.cache,
                         "statuses": statuses, **snapshot(me)})
            print(json.dumps(rows[-1]), flush=True)
    time.sleep(1)
    # what may stay while this process lives: multiprocessing's fork server and resource
    # tracker, started once and shared by every run (they exit with this process)
    kept = ("multiprocessing.forkserver", "multiprocessing.resource_tracker")
    left = [" ".join(p.cmdline())[:120] for p in me.children(recursive=True)
            if not any(k in " ".join(p.cmdline()) for k in kept)]
    first, last = rows[1], rows[-1]
    report = {
        "cpu": platform.processor() or platform.machine(), "cpu_model": system.cpu_name(), "python": platform.python_version(),
        "runs": args.runs, "rows": rows,
        "fds_growth_after_first": last["fds"] - first["fds"],
        "children_growth_after_first": last["children"] - first["children"],
        "rss_growth_after_first": round(last["rss_mb"] / first["rss_mb"] - 1, 3),
        "left_after_last_run": left,
        "every_run_verified": all(r["statuses"] == ["VERIFIED"] for r in rows[1:]),
    }
    report["goals_met"] = (report["fds_growth_after_first"] <= 0 and report["children_growth_after_first"] <= 0
                           and report["rss_growth_after_first"] < 0.2 and not left and report["every_run_verified"])
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({k: v for k, v in report.items() if k != "rows"}, indent=2))
    return 0 if report["goals_met"] else 1


if __name__ == "__main__":
    sys.exit(main())

"""How long a language model's export takes: this tree against an earlier commit of
pteforge, side by side in one run, and whether they write the same bytes.

    uv run python bench/llm_export.py [--config 270m|tiny] [--work DIR] [--baseline REV]
                                      [--rounds 1] [--targets xnnpack xnnpack:8da4w] [--json FILE]

1. One checkpoint: ``bench/llm.py``'s (Gemma 3 270M's real config, or a 2-layer one with
   ``--config tiny``, seeded random weights, its byte-level BPE tokenizer). A ``--work``
   folder that bench/llm.py filled is reused as it is.
2. ``--baseline`` (default: the commit before the export-time work) is checked out in a
   git worktree; each side runs ``pteforge export --llm CKPT --backends TARGETS --no-cache``
   in a fresh process, taking turns over ``--rounds`` rounds, on this machine's cores (the
   run's own two workers). Its wall time counts everything the user waits for: start-up,
   build, captures, lowering, proof, writing.
3. Printed and written (``--json``): each side's wall time per round and the median, the
   most memory its processes held at once (RSS summed over the process tree), each
   target's stage times from its manifest, the ratio this tree / baseline (the goal of #52:
   <= 0.5), and whether every program file (``.pte``, ``.mismatch.pte``) has the same bytes
   on both sides. The CPU is named.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from llm import tokenizer  # noqa: E402
from llm_optimum import work_checkpoint  # noqa: E402

BASELINE = "647f00f"  # the head before the export-time work of 2026-11-27
GOAL = 0.5


def worktree(rev: str, where: Path) -> Path:
    """``rev`` of this repository, checked out at ``where`` (made once, kept)."""
    if not (where / "pteforge" / "__init__.py").is_file():
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-f", str(where), rev],
                       check=True, capture_output=True)
    return where


def export(tree: Path, ckpt: Path, out: Path, targets: list[str], max_seq_len: int, log: Path) -> tuple[float, float]:
    """Wall seconds of one ``pteforge export --llm`` run with ``tree``'s package, and the
    largest memory its processes held together (RSS, sampled every 0.2 s), in GB."""
    import psutil

    env = {**os.environ, "PYTHONPATH": str(tree), "PYTHONWARNINGS": "ignore"}
    cmd = [sys.executable, "-m", "pteforge", "export", "--llm", str(ckpt), "--weights", "pretrained",
           "--max-seq-len", str(max_seq_len), "--backends", *targets, "--no-cache", "--out", str(out)]
    peak = 0
    t0 = time.perf_counter()
    with open(log, "w") as f:
        # exit 1: a target missed its proof (8da4w on random weights); its program is still written
        proc = psutil.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=tree)
        while proc.poll() is None:
            rss = 0
            for p in [proc, *proc.children(recursive=True)]:
                with contextlib.suppress(psutil.Error):
                    rss += p.memory_info().rss
            peak = max(peak, rss)
            time.sleep(0.2)
    wall = time.perf_counter() - t0
    if proc.returncode not in (0, 1):
        raise SystemExit(f"pteforge export with {tree} failed (exit {proc.returncode}); see {log}")
    return wall, peak / 1e9


def programs(out: Path) -> dict[str, dict]:
    """Each target's program file (its digest and size) and stage times, from the manifest."""
    manifest = json.loads((out / "index.json").read_text())
    found = {}
    for e in manifest["models"] + manifest.get("failed", []):
        path = out / e["file"] if e.get("file") else None
        found[e["target"]] = {
            "status": e["status"], "file": e.get("file"),
            "sha256": hashlib.sha256(path.read_bytes()).hexdigest() if path and path.is_file() else None,
            "timings": {k: round(v, 1) for k, v in e.get("timings", {}).items()}}
    return found


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", choices=["270m", "tiny"], default="270m")
    ap.add_argument("--work", type=Path, default=None, help="kept between runs (the checkpoint, the worktree)")
    ap.add_argument("--baseline", default=BASELINE, help="the commit to compare with")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--targets", nargs="+", default=["xnnpack", "xnnpack:8da4w"])
    ap.add_argument("--max-seq-len", type=int, default=192, help="bench/llm.py's: a 128-token prompt and 64 more")
    ap.add_argument("--json", type=Path, default=None, help="write the results here (bench/llm_export.json)")
    args = ap.parse_args()
    from pteforge.core import system

    work, ckpt = work_checkpoint(args.work, args.config, "pteforge-llm-export-")
    if not (ckpt / "tokenizer.json").is_file():
        tokenizer(ckpt, json.loads((ckpt / "config.json").read_text())["vocab_size"])
    rev = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", args.baseline], check=True,
                         capture_output=True, text=True).stdout.strip()
    sides = {f"baseline {rev}": worktree(args.baseline, work / f"baseline-{rev}"), "this tree": ROOT}
    print(f"CPU: {system.cpu_name()}, {os.cpu_count()} cores; {ckpt.name}, targets {' '.join(args.targets)}",
          flush=True)

    walls: dict[str, list[float]] = {name: [] for name in sides}
    peaks: dict[str, list[float]] = {name: [] for name in sides}
    made: dict[str, list[dict]] = {name: [] for name in sides}
    for r in range(args.rounds):
        order = list(sides) if r % 2 == 0 else list(sides)[::-1]
        for name in order:
            out = work / f"out-{name.split()[0]}-{r}"
            shutil.rmtree(out, ignore_errors=True)  # each run writes into an empty folder
            wall, peak = export(sides[name], ckpt, out, args.targets, args.max_seq_len, work / f"{out.name}.log")
            walls[name].append(round(wall, 1))
            peaks[name].append(round(peak, 2))
            made[name].append(programs(out))
            print(f"round {r + 1}: {name}: {wall:.0f} s, peak memory {peak:.1f} GB", flush=True)

    base, ours = (statistics.median(walls[n]) for n in sides)
    ratio = ours / base
    digests = {made[n][r][t]["sha256"] for n in sides for r in range(args.rounds) for t in args.targets}
    same = len(digests) == len(args.targets) and None not in digests
    print(f"\nexport of {' + '.join(args.targets)}, median of {args.rounds} round(s):")
    for name in sides:
        print(f"  {name}: {statistics.median(walls[name]):.0f} s (rounds {walls[name]}), peak memory "
              f"{max(peaks[name]):.1f} GB")
        for target, entry in made[name][-1].items():
            print(f"    {target}: {entry['status']}, {entry['timings']}")
    print(f"this tree / baseline: {ratio:.2f} (goal <= {GOAL}: {'met' if ratio <= GOAL else 'MISSED'}); "
          f"identical program bytes: {same}")
    if args.json:
        args.json.write_text(json.dumps({
            "cpu": system.cpu_name(), "cores": os.cpu_count(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "config": args.config, "targets": args.targets, "maxSeqLen": args.max_seq_len, "baseline": rev,
            "walls": walls, "peakMemoryGB": peaks, "ratio": round(ratio, 3), "goal": GOAL, "identicalBytes": same, "programs": made,
        }, indent=1) + "\n")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())

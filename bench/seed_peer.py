"""The seed tool's own job, side by side with pteforge's, in one run.

    uv run python bench/seed_peer.py [--seed PATH] [--rounds 4] [--default-run]

The executorch_flutter models repo's exporter (``python/main.py``, pinned at ``PIN``)
exports MobileNet V3 small for xnnpack, coreml and vulkan. pteforge does the same job and
more: it verifies each program against eager PyTorch (on seeded inputs and the photos),
times what runs here, and writes the manifest and reports. Both run with random weights
(the seed's ``weights='DEFAULT'`` becomes ``weights=None`` in a temporary copy: nothing
downloads), in alternating rounds so that a slow stretch of a shared machine lands on both
sides, each pteforge run with ``--no-cache`` (no artifact from the cache; the host's
runtime facts, asked once before the rounds, are). The ratio is
pteforge's median wall time over the seed's (goal ≤ 0.33, issue #72). ``--default-run``
also times the README's first command (every backend that lowers here, 12 artifacts) in
each round, beside the seed (goal: ≤ 30 s, issue #72).

``--seed`` takes the models repo: a git directory (a clone or a mirror; the pinned commit
is read from it) or a checkout. Without it the bench clones the repository at ``PIN``.
Results go to ``bench/seed_peer.json`` with the CPU named.
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

from pteforge.core.system import cpu_name

PIN = "b319e1a"  # "feat: Export models (all) with backends (all) for ExecuTorch 1.0.1, 1.1.0"
URL = "https://github.com/abdelaziz-mahdy/executorch_flutter_models"
BACKENDS = ["xnnpack", "coreml", "vulkan"]
RANDOM = ("mobilenet_v3_small(weights='DEFAULT')", "mobilenet_v3_small(weights=None)")


def seed_copy(source: str | None, into: Path) -> Path:
    """The seed's ``python/`` folder at ``PIN`` in ``into``, its weights made random."""
    git = ["git"]
    if source is None:
        subprocess.run([*git, "clone", "--quiet", "--filter=blob:none", "--no-checkout", URL, str(into / "repo")],
                       check=True)
        source = str(into / "repo")
    where = Path(source)
    if (where / "python" / "main.py").is_file() and not (where / "HEAD").is_file():
        files = {p.relative_to(where).as_posix(): p.read_bytes() for p in (where / "python").rglob("*") if p.is_file()}
    else:
        gd = [*git, f"--git-dir={where / '.git' if (where / '.git').exists() else where}"]
        names = subprocess.run([*gd, "ls-tree", "-r", "--name-only", PIN, "python/"], check=True,
                               capture_output=True, text=True).stdout.split()
        files = {n: subprocess.run([*gd, "show", f"{PIN}:{n}"], check=True, capture_output=True).stdout for n in names}
    for name, data in files.items():
        (into / name).parent.mkdir(parents=True, exist_ok=True)
        (into / name).write_bytes(data)
    main = into / "python" / "main.py"
    text = main.read_text()
    assert RANDOM[0] in text, "the seed's mobilenet line changed: update RANDOM"
    main.write_text(text.replace(*RANDOM))
    return into / "python"


def timed(args: list[str], cwd: Path, env: dict) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"{' '.join(args[:4])} … failed ({proc.returncode}): {proc.stderr.strip()[-400:]}")
    return wall


def pace() -> float:
    """A fixed CPU-bound reference (a pure-Python loop): how fast this machine is right now."""
    t0 = time.perf_counter()
    sum(i * i for i in range(8_000_000))
    return round(time.perf_counter() - t0, 3)


def statuses(out: Path) -> dict[str, str]:
    index = json.loads((out / "index.json").read_text())
    lists = ("models", "references", "outOfBudget", "notForApp", "failed")
    return {e["target"]: e["status"] for key in lists for e in index.get(key, [])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", help="the models repo: a git directory or a checkout (default: clone it)")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--json", default=str(Path(__file__).with_suffix(".json")))
    ap.add_argument("--default-run", action="store_true",
                    help="time the README's first command (every backend) in each round too (issue #72: <= 30 s)")
    args = ap.parse_args()
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    walls: dict[str, list[float]] = {"seed": [], "pteforge": []}
    paces = [pace()]
    with tempfile.TemporaryDirectory(prefix="seed-peer-") as tmp:
        tmp = Path(tmp)
        seed = seed_copy(args.seed, tmp / "seed")
        # one cache directory for every pteforge run, as for someone who exports twenty times a
        # day: what it keeps of this host (its runtime's backends) is asked once, here; every
        # run still does all its work (--no-cache: no artifact comes from the cache)
        cache = tmp / "cache"
        timed([sys.executable, "-m", "pteforge", "backends", "-q"], tmp, {**env, "PTEFORGE_CACHE_DIR": str(cache)})
        sides = ["seed", "pteforge"] + (["default"] if args.default_run else [])
        for i in range(args.rounds):
            for side in (sides if i % 2 == 0 else sides[::-1]):
                if side == "seed":
                    walls["seed"].append(timed([sys.executable, "main.py", "export", "--mobilenet", "--backends",
                                                *BACKENDS], seed, env))
                else:
                    chosen = ["--backends", *BACKENDS] if side == "pteforge" else []  # default: every backend
                    walls.setdefault(side, []).append(timed(
                        [sys.executable, "-m", "pteforge", "export", "--mobilenet", "--weights", "none", *chosen,
                         "--no-cache", "--out", str(tmp / f"{side}-{i}")], tmp, {**env, "PTEFORGE_CACHE_DIR": str(cache)}))
                print(f"round {i + 1}: {side} {walls[side][-1]:.1f} s", file=sys.stderr)
        made = statuses(tmp / "pteforge-0")
        made_default = statuses(tmp / "default-0") if args.default_run else {}
    paces.append(pace())
    median = {k: round(statistics.median(v), 2) for k, v in walls.items()}
    result = {
        "cpu": cpu_name(), "cores": os.cpu_count(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "seed": {"repo": URL, "commit": PIN, "command": f"python main.py export --mobilenet --backends {' '.join(BACKENDS)}"
                 " (weights='DEFAULT' replaced by weights=None)"},
        "pteforge": {"command": f"pteforge export --mobilenet --weights none --backends {' '.join(BACKENDS)} --no-cache",
                     "statuses": made},
        "walls_s": {k: [round(w, 2) for w in v] for k, v in walls.items()},
        "median_s": median,
        "ratio_median": round(median["pteforge"] / median["seed"], 3),
        "ratio_range": [round(min(walls["pteforge"]) / max(walls["seed"]), 3),
                        round(max(walls["pteforge"]) / min(walls["seed"]), 3)],
        "goal": "ratio_median <= 0.33",
        **({"default_run": {
            "command": "pteforge export --mobilenet --weights none --no-cache (the README's first command, every backend)",
            "statuses": made_default, "median_s": median["default"],
            "ratio_to_seed_median": round(median["default"] / median["seed"], 3), "goal": "median_s <= 30"}}
           if args.default_run else {}),
        "pace_s": {"start": paces[0], "end": paces[1]},
    }
    Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()

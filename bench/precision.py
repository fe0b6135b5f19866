"""int8 against fp32 on the backends that run here, measured side by side in one run.

    uv run python bench/precision.py [--weights none|pretrained] [--out DIR]

One ``pteforge export`` of mobilenet_v3_small, mobilenet_v2 and yolo11n to xnnpack,
xnnpack:int8, openvino and openvino:int8. pteforge itself times each int8 artifact
and its fp32 reference in one child process after the exports (the manifest's
``relative``), and compares both with fp32 eager on the seeded inputs and on the
validation photos. This script prints those numbers as ratios.
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

MODELS = ["--mobilenet", "mobilenet_v3_small", "mobilenet_v2", "--yolo", "yolo11n"]
TARGETS = ["xnnpack", "xnnpack:int8", "openvino", "openvino:int8"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--weights", default="none", help="none (seeded random, works offline) or pretrained")
    ap.add_argument("--out", default=None, help="keep the artifacts here (default: a temporary directory)")
    args = ap.parse_args()
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="pteforge-bench-precision-"))
    cmd = [sys.executable, "-m", "pteforge", "export", *MODELS, "--backends", *TARGETS,
           "--weights", args.weights, "--out", str(out)]
    print("$", " ".join(cmd[2:]), flush=True)
    t0 = time.perf_counter()
    # its own empty cache: every artifact is made and measured in this run
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "PTEFORGE_CACHE_DIR": str(out / ".cache")}
    proc = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    manifest = json.loads((out / "index.json").read_text())
    entries = manifest["models"] + manifest.get("references", []) + manifest.get("failed", [])
    print(f"\nexport: {wall:.0f} s, exit {proc.returncode}; artifacts in {out}\n")
    header = f"{'model':<20} {'target':<14} {'size':>7} {'latency':>9} {'p50 ms':>15} {'SQNR':>8} {'photos SQNR':>12} {'photos top-1':>12}"
    print(header)
    print("-" * len(header))
    ratios = []
    for e in sorted(entries, key=lambda e: (e.get("model") or e["modelName"], e["target"])):
        if e["precision"] != "int8":
            continue
        r = e.get("relative") or {}
        v = e.get("verification") or {}
        im = v.get("images") or {}
        size = f"{r['size']:.2f}×" if "size" in r else "—"
        lat = f"{r['latency']:.2f}×" if "latency" in r else "—"
        p50 = f"{r['p50_ms']:.2f}/{r['fp32_p50_ms']:.2f}" if "latency" in r else "—"
        top1 = f"{im['top1_agreement']:.0%}" if im.get("top1_agreement") is not None else "—"
        sqnr = f"{v['sqnr_db']:.1f} dB" if "sqnr_db" in v else "—"
        psqnr = f"{im['sqnr_db']:.1f} dB" if "sqnr_db" in im else "—"
        print(f"{e['modelName']:<20} {e['target']:<14} {size:>7} {lat:>9} {p50:>15} {sqnr:>8} {psqnr:>12} {top1:>12}  {e['status']}")
        if "latency" in r:
            ratios.append((r["size"], r["latency"]))
    if ratios:
        sizes, lats = [s for s, _ in ratios], [lt for _, lt in ratios]
        print(f"\nint8/fp32 size {min(sizes):.2f}–{max(sizes):.2f}×, latency {min(lats):.2f}–{max(lats):.2f}× "
              "(measured here before this tool: size 0.27–0.29×, latency 0.55–0.85×)")
    return proc.returncode


if __name__ == "__main__":
    raise SystemExit(main())

"""Artifact latency against eager PyTorch, ONNX Runtime and native OpenVINO, in one run.

    uv run python bench/artifact_latency.py [--models mobilenet_v3_small mobilenet_v2 yolo11n] [--runs 30]

For each model (``--weights none``, seed 0, so every runtime gets the same weights):
pteforge exports xnnpack, xnnpack:int8 and openvino; their artifacts are timed in one
child process (as ``pteforge bench`` does), then, in this process on the same seeded
input, eager PyTorch, ONNX Runtime (CPU, legacy ONNX export) and native OpenVINO
compiled with INFERENCE_PRECISION_HINT f32 and bf16. Each row is p50 and p90 in ms.
The ratio compares pteforge's best host artifact with the best of ONNX Runtime and
native OpenVINO at the same precision (fp32 with fp32, bf16 with bf16): goal ≤ 1.0.
Runs one after another, never two at once, on this machine's cores.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

TARGETS = {"xnnpack": "fp32", "xnnpack:int8": "int8", "openvino": None}  # openvino: its runtime precision


def native_openvino(model, inputs, hint: str, runs: int, warmup: int) -> dict:
    import openvino as ov

    from pteforge.timing import measure

    ov_model = ov.convert_model(model, example_input=tuple(inputs))
    compiled = ov.Core().compile_model(ov_model, "CPU", {"INFERENCE_PRECISION_HINT": hint})
    request = compiled.create_infer_request()
    feed = [x.numpy() for x in inputs]
    return {**measure(lambda: request.infer(feed), runs, warmup), "version": ov.__version__}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["mobilenet_v3_small", "mobilenet_v2", "yolo11n"])
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    args = ap.parse_args()

    import torch

    from pteforge.bench import latencies, time_eager, time_onnxruntime
    from pteforge.models.catalog import build_catalog
    from pteforge.models.synthetic import make_inputs
    from pteforge.stages.capture import build_model

    out = Path(tempfile.mkdtemp(prefix="pteforge-bench-latency-"))
    catalog = build_catalog()
    mobilenets = [m for m in args.models if catalog.get(m).family == "mobilenet"]
    yolos = [m for m in args.models if catalog.get(m).family == "yolo"]
    cmd = [sys.executable, "-m", "pteforge", "export", "--weights", "none", "--no-cache",
           *(["--mobilenet", *mobilenets] if mobilenets else []), *(["--yolo", *yolos] if yolos else []),
           "--backends", *TARGETS, "--out", str(out)]
    print("$", " ".join(cmd[2:]), flush=True)
    subprocess.run(cmd, env={**os.environ, "PYTHONWARNINGS": "ignore"}, stdout=subprocess.DEVNULL, check=False)
    manifest = json.loads((out / "index.json").read_text())
    entries = {(e["modelName"], e["target"]): e for e in manifest["models"]}
    paths = [out / e["file"] for e in entries.values() if e["status"] == "VERIFIED"]
    timed = latencies(paths, args.runs, args.warmup)

    print(f"\nthreads: torch {torch.get_num_threads()}, cores {os.cpu_count()}; p50 / p90 ms over {args.runs} runs\n")
    summary = []
    for name in args.models:
        spec = catalog.get(name)
        model = build_model(spec, "none", 0).eval()
        inputs = list(make_inputs(spec, 0))
        rows: list[tuple[str, str, dict]] = []
        for target, precision in TARGETS.items():
            e = entries.get((name, target))
            if e and str(out / e["file"]) in timed:
                runtime = precision or (e.get("verification") or {}).get("runtime_precision", "fp32")
                rows.append((f"pteforge {target}", runtime, timed[str(out / e["file"])]))
        rows.append(("eager PyTorch", "fp32", time_eager(model, inputs, args.runs, args.warmup)))
        ort = time_onnxruntime(model, inputs, args.runs, args.warmup)
        if ort and "p50_ms" in ort:
            rows.append(("ONNX Runtime", "fp32", ort))
        for hint, label in (("f32", "fp32"), ("bf16", "bf16")):
            try:
                rows.append((f"OpenVINO native {hint}", label, native_openvino(model, inputs, hint, args.runs, args.warmup)))
            except Exception as exc:  # a model native OpenVINO cannot convert: say so
                print(f"  native OpenVINO {hint} failed for {name}: {type(exc).__name__}")
        print(f"{name}")
        for label, prec, r in rows:
            print(f"  {label:<24} {prec:<5} {r['p50_ms']:8.2f} {r['p90_ms']:8.2f}")
        for prec in ("fp32", "bf16"):
            ours = [r["p50_ms"] for label, p, r in rows if p == prec and label.startswith("pteforge")]
            theirs = [(r["p50_ms"], label) for label, p, r in rows if p == prec and label.startswith(("ONNX", "OpenVINO"))]
            if ours and theirs:
                best, who = min(theirs)
                ratio = min(ours) / best
                summary.append((name, prec, ratio))
                print(f"  → pteforge best {prec} / best of ORT and native OpenVINO ({who}) = "
                      f"{min(ours):.2f} / {best:.2f} = {ratio:.2f}   (goal ≤ 1.0)")
        print(flush=True)
    print("ratios: " + ", ".join(f"{n} {p} {r:.2f}" for n, p, r in summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Artifact latency against eager PyTorch, ONNX Runtime and native OpenVINO, in one run.

    uv run python bench/artifact_latency.py [--models mobilenet_v3_small mobilenet_v2 yolo11n] [--runs 30] [--rounds 3]

For each model (``--weights none``, seed 0, so every runtime gets the same weights):
pteforge exports xnnpack, xnnpack:int8 and openvino. Their artifacts are timed in one
child process, as ``pteforge bench`` does. Then, in this process, on the same seeded
input: eager PyTorch, ONNX Runtime (CPU, legacy ONNX export) and native OpenVINO
compiled with INFERENCE_PRECISION_HINT f32 and bf16. Each runtime is timed in its own
block (one runtime's threads never compete with another's for the cores), and the
blocks take turns over ``--rounds`` rounds: a row is the median over rounds of each
block's p50 and p90 in ms, so a slow minute on a shared machine moves every runtime, not
one. The ratio compares pteforge's best host artifact with the best of ONNX Runtime and
native OpenVINO at the same precision (fp32 with fp32, bf16 with bf16): goal ≤ 1.0.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

TARGETS = {"xnnpack": "fp32", "xnnpack:int8": "int8", "openvino": None}  # openvino: its runtime precision


def native_openvino(model, inputs, hint: str):
    """A callable running ``model`` converted and compiled by OpenVINO itself, and its version."""
    import openvino as ov

    ov_model = ov.convert_model(model, example_input=tuple(inputs))
    compiled = ov.Core().compile_model(ov_model, "CPU", {"INFERENCE_PRECISION_HINT": hint})
    request = compiled.create_infer_request()
    feed = [x.numpy() for x in inputs]
    return (lambda: request.infer(feed)), {"version": ov.__version__}


def host_runners(model, inputs, openvino: bool = True) -> list[tuple[str, str, object]]:
    """(label, precision, callable) of every runtime timed in this process: eager PyTorch,
    ONNX Runtime and (``openvino``) native OpenVINO in f32 and bf16."""
    from pteforge.app.bench import onnxruntime_runner

    runners = [("eager PyTorch", "fp32", lambda: model(*inputs))]
    ort = onnxruntime_runner(model, inputs)
    if ort and ort[0]:
        runners.append(("ONNX Runtime", "fp32", ort[0]))
    elif ort:
        print(f"  ONNX Runtime: {ort[1]['error']}")
    for hint, label in (("f32", "fp32"), ("bf16", "bf16")) if openvino else ():
        try:
            runners.append((f"OpenVINO native {hint}", label, native_openvino(model, inputs, hint)[0]))
        except Exception as exc:  # a model native OpenVINO cannot convert: say so
            print(f"  native OpenVINO {hint} failed: {type(exc).__name__}")
    return runners


def timed_rounds(child, here, tmp: Path, ours, theirs, rounds: int, runs: int, warmup: int) -> dict:
    """{(label, precision): [numbers per round]}: every artifact of ``ours`` ((label,
    precision, path), timed in the ExecuTorch child) and every callable of ``theirs``
    ((label, precision, run), timed here), each in its own block, the blocks taking
    turns over ``rounds`` rounds."""
    from pteforge.app.bench import measure_artifact
    from pteforge.core.timing import measure

    samples: dict[tuple[str, str], list[dict]] = {}
    for _ in range(rounds):
        for label, prec, path in ours:
            status, reason, numbers, _ = measure_artifact(child, path, here, tmp, runs, warmup)
            if status is None:  # measured
                samples.setdefault((label, prec), []).append(numbers)
            else:
                print(f"  {label}: {status} ({reason})")
        for label, prec, run in theirs:
            samples.setdefault((label, prec), []).append(measure(run, runs, warmup))
    return samples


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["mobilenet_v3_small", "mobilenet_v2", "yolo11n"])
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()

    import torch

    from pteforge.runtime.host import Host
    from pteforge.runtime.isolate import IsolatedRuntime
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
    entries = {(e.get("model") or e["modelName"], e["target"]): e for e in manifest["models"] + manifest.get("references", [])}

    print(f"\nthreads: torch {torch.get_num_threads()} here, 1 in the ExecuTorch child; cores {os.cpu_count()}; "
          f"median over {args.rounds} rounds of each block's p50 / p90 in ms, {args.runs} runs per block\n")
    summary = []
    with IsolatedRuntime() as child, tempfile.TemporaryDirectory(prefix="pteforge-bench-") as tmp, torch.no_grad():
        here = Host.from_dict(child.request("host"))
        for name in args.models:
            spec = catalog.get(name)
            model = build_model(spec, "none", 0).eval()
            inputs = list(make_inputs(spec, 0))
            ours = []
            for target, precision in TARGETS.items():
                e = entries.get((name, target))
                if e and e["status"] == "VERIFIED":
                    runtime = precision or (e.get("verification") or {}).get("runtime_precision", "fp32")
                    ours.append((f"pteforge {target}", runtime, out / e["file"]))
                else:
                    print(f"  pteforge {target}: {e['status'] if e else 'not exported'}")
            theirs = host_runners(model, inputs)
            samples = timed_rounds(child, here, Path(tmp), ours, theirs, args.rounds, args.runs, args.warmup)
            rows = []
            print(f"{name}{'':<28}p50      p90   p50 per round")
            for (label, prec), stats in samples.items():
                p50 = statistics.median(s["p50_ms"] for s in stats)
                p90 = statistics.median(s["p90_ms"] for s in stats)
                rows.append((label, prec, p50))
                per_round = " ".join(f"{s['p50_ms']:.2f}" for s in stats)
                print(f"  {label:<24} {prec:<5} {p50:8.2f} {p90:8.2f}   {per_round}")
            for prec in ("fp32", "bf16"):
                best_ours = min((p50 for label, p, p50 in rows if p == prec and label.startswith("pteforge")), default=None)
                best_theirs = min(((p50, label) for label, p, p50 in rows if p == prec and label.startswith(("ONNX", "OpenVINO"))),
                                  default=None)
                if best_ours is not None and best_theirs is not None:
                    best, who = best_theirs
                    summary.append((name, prec, best_ours / best))
                    print(f"  → pteforge best {prec} / best of ORT and native OpenVINO ({who}) = "
                          f"{best_ours:.2f} / {best:.2f} = {best_ours / best:.2f}   (goal ≤ 1.0)")
            print(flush=True)
    print("ratios: " + ", ".join(f"{n} {p} {r:.2f}" for n, p, r in summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

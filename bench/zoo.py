"""A public model zoo through pteforge: delegation and speed on models outside the catalog.

    uv run --group bench python bench/zoo.py [--models resnet18 deit_tiny_patch16_224 ...] [--runs 20] [--rounds 3]
                               [--out DIR] [--json zoo.json] [--sqnr-budget 20]

Each model is exported as a new user would (``pteforge export --model REF --input-shape
... --weights none``) to XNNPACK fp32, XNNPACK int8 (static and dynamic) and the OpenVINO .pte, and every
artifact is verified against eager by that export. Then, side by side in one run, its
verified artifacts are timed in one ExecuTorch child (as ``pteforge bench`` does) and
eager PyTorch and ONNX Runtime (the same weights exported to ONNX) in this process, each
runtime in its own block, the blocks taking turns over ``--rounds`` rounds; a figure is
the median of the rounds' p50s.

Printed (and written as JSON beside the table): per target the delegated share of graph
nodes, the delegate subgraphs and the ops left on the portable kernels (with the reason
when XNNPACK has no equivalent); per model the p50s; then the goals:
- every XNNPACK fp32 program ≥ 99 % delegated unless an op has no XNNPACK equivalent;
- no artifact slower than eager PyTorch;
- geometric mean of XNNPACK fp32 p50 / ONNX Runtime p50 ≤ 1.0;
- per model, the best artifact within the accuracy budget (verified, and SQNR against
  eager ≥ ``--sqnr-budget`` dB) ≤ 1.0 × min(ONNX Runtime, eager).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from artifact_latency import host_runners, timed_rounds  # noqa: E402

TV = "torchvision.models"
IMAGE = ("1,3,224,224",)
# name: (family, factory, input shapes, input dtypes)
ZOO = {
    "resnet18": ("CNN", f"{TV}:resnet18(weights=None)", IMAGE, ()),
    "efficientnet_b0": ("CNN", f"{TV}:efficientnet_b0(weights=None)", IMAGE, ()),
    "regnet_y_400mf": ("CNN", f"{TV}:regnet_y_400mf(weights=None)", IMAGE, ()),
    "shufflenet_v2_x1_0": ("CNN", f"{TV}:shufflenet_v2_x1_0(weights=None)", IMAGE, ()),
    "mobilenetv4_conv_small": ("CNN", "timm:create_model('mobilenetv4_conv_small')", IMAGE, ()),
    "convnext_atto": ("CNN (LayerNorm)", "timm:create_model('convnext_atto')", IMAGE, ()),
    "deit_tiny_patch16_224": ("transformer", "timm:create_model('deit_tiny_patch16_224')", IMAGE, ()),
    "swin_t": ("transformer", f"{TV}:swin_t(weights=None)", IMAGE, ()),
    "maxvit_pico_rw_256": ("hybrid", "timm:create_model('maxvit_pico_rw_256')", ("1,3,256,256",), ()),
    "mobilevit_xs": ("hybrid", "timm:create_model('mobilevit_xs')", ("1,3,256,256",), ()),
    "efficientformer_l1": ("hybrid", "timm:create_model('efficientformer_l1')", IMAGE, ()),
    "lraspp_mobilenet_v3_large": ("segmentation",
                                  f"{TV}.segmentation:lraspp_mobilenet_v3_large(weights=None, weights_backbone=None)",
                                  ("1,3,320,320",), ()),
    "ssdlite_head": ("detection", "zoo_models:ssdlite_head", ("1,3,320,320",), ()),
    "bert_mini": ("text encoder", "zoo_models:bert_mini", ("1,128",), ("int64",)),
    "whisper_tiny_encoder": ("audio encoder", "zoo_models:whisper_tiny_encoder", ("1,80,3000",), ()),
}
# int8: static (calibrated) and dynamic (per-token activations, int8 weights: what
# transformers on XNNPACK use); openvino: fp32 here (bf16 on CPUs that have it)
TARGETS = ("xnnpack", "xnnpack:int8", "xnnpack:int8-dynamic", "openvino")


def export(name: str, out: Path) -> dict | str:
    """Export one zoo model with pteforge's CLI; its manifest entries by target, or why
    the export failed."""
    _, ref, shapes, dtypes = ZOO[name]
    cmd = [sys.executable, "-m", "pteforge", "export", "--model", ref, "--weights", "none", "--bench-runs", "0",
           *(a for s in shapes for a in ("--input-shape", s)), *(a for d in dtypes for a in ("--input-dtype", d)),
           "--backends", *TARGETS, "--out", str(out)]
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(cmd, env=env, cwd=HERE, capture_output=True, text=True, check=False)
    manifest = out / "index.json"
    if not manifest.is_file():
        why = f"export failed (exit {proc.returncode}): {''.join((proc.stderr or proc.stdout).strip().splitlines()[-1:])}"
        print(f"  {name}: {why}")
        return why
    data = json.loads(manifest.read_text())
    failed = json.loads((out / "report.json").read_text()).get("last_run_failures", [])
    return {e["target"]: e for e in data["models"] + data.get("references", []) + failed
            if (e.get("model") or e.get("modelName")) == name}


def delegation(entry: dict) -> dict:
    d = entry.get("delegation") or {}
    return {
        "status": entry["status"],
        "reason": entry.get("reason"),
        "delegated_percent": d.get("percent"),
        "subgraphs": sum((d.get("subgraphs_per_backend") or {}).values()),
        "portable_ops": {o["op"]: o["count"] for o in d.get("portable_ops") or []},
        "sqnr_db": (entry.get("verification") or {}).get("sqnr_db"),
        "runtime_precision": (entry.get("verification") or {}).get("runtime_precision"),
        "size_mb": entry.get("sizeMB"),
    }


def eager_and_onnxruntime(name: str):
    """The eager model pteforge built (same factory, seed and weights) and its ONNX Runtime twin."""
    from pteforge.models.own import custom_spec
    from pteforge.models.synthetic import make_inputs
    from pteforge.core.spec import InputSpec
    from pteforge.stages.capture import build_model

    _, ref, shapes, dtypes = ZOO[name]
    spec = custom_spec(ref, tuple(InputSpec.parse(s, *(dtypes[i:i + 1])) for i, s in enumerate(shapes)))
    model = build_model(spec, "none", 0).eval()
    labels = {"eager PyTorch": "eager", "ONNX Runtime": "onnxruntime"}
    return [(labels[label], prec, run) for label, prec, run in host_runners(model, list(make_inputs(spec, 0)), openvino=False)]


def judge(rows: dict, sqnr_budget: float) -> dict:
    """The goals, computed from the measured rows."""
    from pteforge.backends.xnnpack import NO_XNNPACK_EQUIVALENT

    ratios, best, slower, low = [], {}, [], []
    for name, row in rows.items():
        p50 = row["p50_ms"]
        fp32 = row["targets"].get("xnnpack", {})
        gaps = {op: n for op, n in fp32.get("portable_ops", {}).items() if op not in NO_XNNPACK_EQUIVALENT}
        if fp32.get("delegated_percent") is not None and fp32["delegated_percent"] < 99 and gaps:
            low.append(f"{name} {fp32['delegated_percent']:.1f} % ({', '.join(gaps)})")
        if "xnnpack" in p50 and "onnxruntime" in p50:
            ratios.append(p50["xnnpack"] / p50["onnxruntime"])
        for target in TARGETS:
            if target in p50 and "eager" in p50 and p50[target] > p50["eager"]:
                slower.append(f"{name} {target} {p50[target]:.2f} > eager {p50['eager']:.2f} ms")
        fits = [(p50[t], t) for t in TARGETS if t in p50 and (row["targets"][t].get("sqnr_db") or 0) >= sqnr_budget]
        refs = [p50[r] for r in ("eager", "onnxruntime") if r in p50]
        if fits and refs:
            ms, target = min(fits)
            best[name] = {"target": target, "p50_ms": ms, "ratio": ms / min(refs)}
    geomean = math.exp(statistics.fmean(math.log(r) for r in ratios)) if ratios else None
    return {
        "geomean_xnnpack_fp32_over_onnxruntime": geomean,
        "models_in_geomean": len(ratios),
        "best_over_min_onnxruntime_eager": best,
        "slower_than_eager": slower,
        "xnnpack_fp32_below_99_percent": low,
    }


def print_table(rows: dict) -> None:
    names = {"xnnpack": "xnnpack fp32", "xnnpack:int8": "int8", "xnnpack:int8-dynamic": "int8-dyn", "openvino": "openvino"}
    print("\n| model | family | " + " | ".join(f"{names[t]}: delegated, subgraphs" for t in TARGETS)
          + " | left on portable (xnnpack fp32) | " + " | ".join(f"{names[t]} p50" for t in TARGETS)
          + " | eager | ONNX Runtime | fp32/ORT |")
    print("|---" * (5 + 2 * len(TARGETS)) + "|")
    for name, row in rows.items():
        t, p = row["targets"], row["p50_ms"]

        def deleg(target):
            d = t.get(target)
            if not d:
                return "—"
            if d["status"] != "VERIFIED":
                return d["status"] + (f" ({d['sqnr_db'] or _sqnr(d['reason'])})" if d["status"] == "MISMATCH" else "")
            return f"{d['delegated_percent']:.1f} %, {d['subgraphs']}"

        left = row.get("failed") or ", ".join(f"{op}×{n}" for op, n in (t.get("xnnpack") or {}).get("portable_ops", {}).items()) or "none"
        ms = [f"{p[k]:.2f}" if k in p else "—" for k in (*TARGETS, "eager", "onnxruntime")]
        ratio = f"{p['xnnpack'] / p['onnxruntime']:.2f}" if "xnnpack" in p and "onnxruntime" in p else "—"
        print(f"| {name} | {row['family']} | " + " | ".join(deleg(x) for x in TARGETS) + f" | {left} | "
              + " | ".join(ms) + f" | {ratio} |")


def _sqnr(reason: str | None) -> str:
    return (reason or "").split(":")[-1].split("<")[0].strip()


def print_goals(goals: dict, budget: float) -> None:
    from pteforge.backends.xnnpack import NO_XNNPACK_EQUIVALENT

    g = goals["geomean_xnnpack_fp32_over_onnxruntime"]
    print(f"\ngeometric mean of XNNPACK fp32 p50 / ONNX Runtime p50 over {goals['models_in_geomean']} models: "
          + (f"{g:.3f}" if g else "—") + "   (goal ≤ 1.0)")
    best = goals["best_over_min_onnxruntime_eager"]
    worst = max((b["ratio"] for b in best.values()), default=None)
    print(f"best artifact within the budget (SQNR ≥ {budget:g} dB) / min(ONNX Runtime, eager), per model "
          f"(goal ≤ 1.0 each; worst {worst:.2f}):" if worst else "best artifact: none measured")
    for name, b in best.items():
        print(f"  {name}: {b['target']} {b['p50_ms']:.2f} ms → {b['ratio']:.2f}")
    print("artifacts slower than eager (goal: none): " + ("; ".join(goals["slower_than_eager"]) or "none"))
    print("XNNPACK fp32 below 99 % delegated with ops XNNPACK has an equivalent for (goal: none): "
          + ("; ".join(goals["xnnpack_fp32_below_99_percent"]) or "none"))
    print("ops left on the portable kernels because XNNPACK has no equivalent:")
    for op, why in NO_XNNPACK_EQUIVALENT.items():
        print(f"  {op}: {why}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=list(ZOO), choices=list(ZOO), metavar="NAME")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sqnr-budget", type=float, default=20.0)
    ap.add_argument("--out", type=Path, default=None, help="where the artifacts go (default: a temporary directory)")
    ap.add_argument("--json", type=Path, default=HERE / "zoo.json")
    args = ap.parse_args()

    import torch

    from pteforge.runtime.host import Host
    from pteforge.runtime.isolate import IsolatedRuntime

    out = args.out or Path(tempfile.mkdtemp(prefix="pteforge-zoo-"))
    print(f"threads: torch {torch.get_num_threads()} for eager, ONNX Runtime its default, 1 for torch in the "
          f"ExecuTorch child; cores {os.cpu_count()}; median over {args.rounds} rounds of {args.runs}-run p50s (ms)",
          flush=True)
    rows: dict[str, dict] = {}
    with IsolatedRuntime() as child, tempfile.TemporaryDirectory(prefix="pteforge-zoo-bench-") as tmp, torch.no_grad():
        here = Host.from_dict(child.request("host"))
        for name in args.models:
            print(f"{name}: exporting", flush=True)
            entries = export(name, out / name)
            if isinstance(entries, str):  # nothing to time: the row says why
                rows[name] = {"family": ZOO[name][0], "factory": ZOO[name][1], "targets": {}, "p50_ms": {},
                              "p50_per_round": {}, "failed": entries}
                continue
            targets = {t: delegation(e) for t, e in entries.items() if t in TARGETS}
            ours = [(t, "", out / name / e["file"]) for t, e in entries.items() if t in TARGETS and e["status"] == "VERIFIED"]
            for t, d in targets.items():
                if d["status"] != "VERIFIED":
                    print(f"  {t}: {d['status']} {d['reason'] or ''}")
            samples = timed_rounds(child, here, Path(tmp), ours, eager_and_onnxruntime(name), args.rounds, args.runs, args.warmup)
            p50 = {label: statistics.median(s["p50_ms"] for s in stats) for (label, _), stats in samples.items()}
            rows[name] = {"family": ZOO[name][0], "factory": ZOO[name][1], "targets": targets, "p50_ms": p50,
                          "p50_per_round": {label: [s["p50_ms"] for s in stats] for (label, _), stats in samples.items()}}
            print("  " + ", ".join(f"{k} {v:.2f}" for k, v in p50.items()), flush=True)
            args.json.write_text(json.dumps({"rows": rows}, indent=2) + "\n")  # kept as it goes
    goals = judge(rows, args.sqnr_budget)
    print_table(rows)
    print_goals(goals, args.sqnr_budget)
    args.json.write_text(json.dumps({"rows": rows, "goals": goals, "runs": args.runs, "rounds": args.rounds,
                                     "cores": os.cpu_count()}, indent=2) + "\n")
    print(f"\nJSON: {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

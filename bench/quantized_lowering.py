"""Quantized lowering with and without fake-tensor caching of quantize/dequantize, side by side.

    uv run python bench/quantized_lowering.py [--model mobilenet_v3_small] [--targets tosa cortex-m] [--pairs 2]

For each target (int8), a process per run quantizes and lowers the model's capture
(``--weights none``: torchvision's seeded random initialisation) the way a worker does,
under ``fast_fx``; one side has ``stages/lower.py: cached_quant_ops`` replaced by a
context that does nothing. The sides alternate, so a slow stretch of a shared machine
does not land on one side only. Prints each run's lowering time and program sha256, the
medians and their ratio (the programs must be the same bytes).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

RUN = r"""
import contextlib, hashlib, json, os, sys, time
import torch, torchvision
from pteforge.backends import default_registry
from pteforge.core.spec import Precision
from pteforge.stages import lower as L
from pteforge.stages.quantize import quantize

if os.environ["SIDE"] == "without":
    L.cached_quant_ops = contextlib.nullcontext
model_name, target = sys.argv[1], sys.argv[2]
torch.manual_seed(0)
torch.set_num_threads(1)
model = getattr(torchvision.models, model_name)().eval()
x = torch.rand(1, 3, 224, 224)
exported = torch.export.export(model, (x,))
backend = default_registry().get(target)
plan = backend.plan(Precision.INT8)
g = torch.Generator().manual_seed(1)
batches = [(torch.rand(1, 3, 224, 224, generator=g),) for _ in range(4)]
with L.fast_fx():
    t0 = time.perf_counter()
    quantized = quantize(backend.prepare(exported, Precision.INT8, (x,)), plan, batches, (x,))
    t1 = time.perf_counter()
    edge = L.lower(quantized, [backend], Precision.INT8, plan)
    t2 = time.perf_counter()
    data = edge.to_executorch().buffer
print(json.dumps({"quantize": t1 - t0, "lower": t2 - t1, "sha256": hashlib.sha256(data).hexdigest()}))
"""


def once(model: str, target: str, side: str) -> dict:
    env = {**os.environ, "SIDE": side, "PYTHONWARNINGS": "ignore"}
    out = subprocess.run([sys.executable, "-c", RUN, model, target], env=env, capture_output=True, text=True, check=False)
    if out.returncode:
        sys.exit(f"{target} ({side}) failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="mobilenet_v3_small")
    ap.add_argument("--targets", nargs="+", default=["tosa", "cortex-m"])
    ap.add_argument("--pairs", type=int, default=2)
    args = ap.parse_args()
    for target in args.targets:
        times: dict[str, list[float]] = {"without": [], "with": []}
        shas = set()
        for _ in range(args.pairs):
            for side in ("without", "with"):
                r = once(args.model, target, side)
                times[side].append(r["lower"])
                shas.add(r["sha256"])
                print(f"{args.model} {target}:int8 {side:>7} cached quantize/dequantize: lowering {r['lower']:6.1f} s "
                      f"(quantize {r['quantize']:.1f} s), sha256 {r['sha256'][:16]}", flush=True)
        a, b = statistics.median(times["without"]), statistics.median(times["with"])
        same = "the same bytes" if len(shas) == 1 else "DIFFERENT BYTES"
        print(f"  {target}: median {a:.1f} -> {b:.1f} s, ratio {b / a:.2f}; {same}\n", flush=True)
        if len(shas) != 1:
            return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

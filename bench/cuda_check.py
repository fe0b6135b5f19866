"""CUDA on a machine with an NVIDIA GPU: lower MobileNet V3 small to the CUDA backend, run it
on the GPU where this ExecuTorch runtime has the CUDA backend, and compare with eager on the
same GPU. Prints: status, delegated %, p50 of the program and of eager (same GPU, same run),
their ratio, and peak GPU memory.

    uv run python bench/cuda_check.py [--weights none] [--out /tmp/cuda-check]

Without a GPU it says so in one line and exits 2. The pip wheels' runtimes do not register
CudaBackend (Linux x86_64: OpenvinoBackend, QnnBackend, XnnpackBackend), so there the program
is lowered and reported NOT_RUNNABLE_HERE, never faked as run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--weights", default="none")
    ap.add_argument("--out", default="/tmp/cuda-check")
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--debug", action="store_true", help="pass --debug to pteforge export (tracebacks)")
    args = ap.parse_args()

    from pteforge.backends import default_registry

    check = default_registry().get("cuda").lower_check()
    if not check.ok:
        print(f"cuda: not run: {check.reason} ({check.fix})")
        return 2
    import subprocess

    import torch

    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "pteforge", "export", "--mobilenet", "--backends", "cuda",
                    "--weights", args.weights, "--out", args.out, *(["--debug"] if args.debug else [])], check=False)
    export_s = time.perf_counter() - t0
    out = Path(args.out)
    # index.json lists exported targets only; a failed one is in report.json's last_run_failures
    entries = [e for e in json.loads((out / "index.json").read_text())["models"] if e["target"] == "cuda"]
    if not entries and (out / "report.json").is_file():
        entries = [e for e in json.loads((out / "report.json").read_text()).get("last_run_failures", [])
                   if e.get("target") == "cuda"]
    if not entries:
        print("cuda: the export left no record of the cuda target (see its output above)")
        return 1
    entry = entries[0]
    report = {"device": torch.cuda.get_device_name(0), "status": entry["status"], "reason": entry.get("reason"),
              "export_s": round(export_s, 1), "delegated_percent": entry.get("delegation", {}).get("percent"),
              "sqnr_db": (entry.get("verification") or {}).get("sqnr_db")}

    from torchvision.models import mobilenet_v3_small

    model = mobilenet_v3_small().eval().cuda()
    x = torch.randn(1, 3, 224, 224, device="cuda")
    torch.cuda.reset_peak_memory_stats()
    eager = _p50(lambda: model(x), args.runs)
    report["eager_p50_ms"] = eager
    report["eager_peak_gpu_mb"] = torch.cuda.max_memory_allocated() / 2**20
    if entry["status"] == "VERIFIED":
        from executorch.runtime import Runtime

        method = Runtime.get().load_program(Path(args.out) / entry["file"]).load_method("forward")
        torch.cuda.reset_peak_memory_stats()
        program = _p50(lambda: method.execute([x.cpu()]), args.runs)
        report.update(program_p50_ms=program, vs_eager=program / eager,
                      program_peak_gpu_mb=torch.cuda.max_memory_allocated() / 2**20)
    print(json.dumps(report, indent=2))
    return 0 if entry["status"] in ("VERIFIED", "NOT_RUNNABLE_HERE") else 1


def _p50(fn, runs: int) -> float:
    import torch

    for _ in range(5):
        fn()
    times = []
    for _ in range(runs):
        torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


if __name__ == "__main__":
    sys.exit(main())

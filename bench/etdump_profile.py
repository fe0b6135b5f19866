"""Where a .pte spends its time: an ExecuTorch profile (ETDump), summed by operator.

    uv run python bench/etdump_profile.py model.pte [more.pte ...] [--runs 20] [--warmup 3] [--top 12]

Loads each program with ETDump on, runs it on seeded inputs, and reads the dump with
ExecuTorch's Inspector. Events are summed per name over the timed runs (warm-up runs
are left out) and shown per run: the portable kernels by operator, and inside an XNNPACK
delegate XNNPACK's own operators (convolution, fully-connected, transpose, ...). This is
how the README says where an upstream kernel is the limit.
"""

from __future__ import annotations

import argparse
import re
import tempfile
from collections import defaultdict
from pathlib import Path


def profile(path: Path, runs: int, warmup: int) -> tuple[dict[str, tuple[float, int]], float]:
    """({event name: (ms per run, how many such events a run has)}, ms per run of the whole
    method) from one ETDump."""
    import torch
    from executorch.devtools import Inspector
    from executorch.extension.pybindings.portable_lib import _load_for_executorch

    from pteforge.runtime.pte import DTYPES
    from pteforge.app.validate import seeded_inputs

    torch.set_num_threads(1)  # torch only copies outputs here, as in pteforge's runtime child
    module = _load_for_executorch(str(path), enable_etdump=True)
    meta = module.method_meta("forward")
    specs = [{"shape": list(meta.input_tensor_meta(i).sizes()), "dtype": DTYPES[int(meta.input_tensor_meta(i).dtype())]}
             for i in range(meta.num_inputs())]
    inputs = seeded_inputs(specs, 0)
    for _ in range(warmup + runs):
        module.forward(inputs)
    with tempfile.TemporaryDirectory() as tmp:
        dump = Path(tmp) / "profile.etdp"
        module.write_etdump_result_to_file(str(dump))
        inspector = Inspector(etdump_path=str(dump))
    by_name: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    total = 0.0
    blocks = [b for b in inspector.event_blocks if b.name == "Execute"] or inspector.event_blocks
    for block in blocks:
        for event in block.events:
            timed = (event.perf_data.raw if event.perf_data else [])[warmup:]
            if not timed:
                continue
            if event.name == "Method::execute":
                total += sum(timed)
            elif event.name != "DELEGATE_CALL":  # the delegate's own operators are listed instead
                kind = re.sub(r" #\d+$", "", event.name)  # one line per operator kind
                by_name[kind] += sum(timed)
                counts[kind] += 1
    return {k: (v / runs, counts[k]) for k, v in by_name.items()}, total / runs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("programs", nargs="+", type=Path)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--top", type=int, default=12)
    args = ap.parse_args()
    for path in args.programs:
        ops, total = profile(path, args.runs, args.warmup)
        print(f"{path.name}: {total:.2f} ms per run (Method::execute, mean of {args.runs} after {args.warmup} warm-up)")
        for name, (ms, count) in sorted(ops.items(), key=lambda kv: -kv[1][0])[: args.top]:
            share = f"{100 * ms / total:5.1f} %" if total else ""
            print(f"  {ms:8.3f} ms {share}  {name} (×{count})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

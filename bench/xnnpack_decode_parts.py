"""Two costs of a decoded token inside ExecuTorch's XNNPACK delegate, each measured side by side
in one process on this CPU, to say which would pay to fix upstream:

1. **A call into a delegate.** 64 small linear layers, each followed by a reshape that
   names the symbolic sequence length (which XNNPACK's partitioner leaves on the portable
   kernels: 64 XNNPACK programs and ~64 portable operators a call), against the same layers
   with the reshape's size inferred (-1: one XNNPACK program). The difference over the
   calls saved is what a delegate call costs.
2. **The attention's products over the cache.** Gemma 3 270M's shapes (4 query heads, one
   key head of 256, a 192-slot cache, 18 layers): ``q @ K^T`` and ``P @ V`` as XNNPACK's
   batched product (which packs its right operand, the cache, on every call), and
   ``K @ q^T`` (the cache as the left operand, not packed).

    uv run python bench/xnnpack_decode_parts.py [--threads 2] [--json bench/xnnpack_decode_parts.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))


def lowered(module, args, dynamic_shapes=None):
    """(the program's bytes kept alive, its forward method, XNNPACK programs, portable operators)."""
    import torch
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower
    from executorch.runtime import Runtime

    ep = torch.export.export(module, args, dynamic_shapes=dynamic_shapes)
    program = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()]).to_executorch()
    nodes = [n for n in program.exported_program().graph_module.graph.nodes
             if n.op == "call_function" and "getitem" not in str(n.target)]
    delegates = sum("call_delegate" in str(n.target) for n in nodes)
    buffer = program.buffer
    loaded = Runtime.get().load_program(buffer)
    return (buffer, loaded), loaded.load_method("forward"), delegates, len(nodes) - delegates


def side_by_side(methods: dict, inputs: dict, calls: int) -> dict:
    """Median µs a call of each method, the methods taking turns call by call."""
    seconds = {k: [] for k in methods}
    for _ in range(calls):
        for k, m in methods.items():
            t0 = time.perf_counter()
            m.execute(inputs[k])
            seconds[k].append(time.perf_counter() - t0)
    return {k: statistics.median(v[calls // 10:]) * 1e6 for k, v in seconds.items()}


def delegate_calls(calls: int) -> dict:
    import torch
    from torch import nn
    from torch.export import Dim

    class Layers(nn.Module):
        def __init__(self, symbolic: bool):
            super().__init__()
            self.layers, self.symbolic = nn.ModuleList(nn.Linear(64, 64) for _ in range(64)), symbolic

        def forward(self, x):
            for layer in self.layers:
                x = layer(x)
                x = (x.view(1, x.shape[1], 4, 16) if self.symbolic else x.view(1, -1, 4, 16)).view(1, -1, 64)
            return x

    keep, methods, counts = [], {}, {}
    for symbolic in (True, False):
        torch.manual_seed(0)
        k, method, delegates, portable = lowered(Layers(symbolic).eval(), (torch.randn(1, 4, 64),),
                                                 ({1: Dim("s", min=1, max=64)},))
        name = "symbolic reshapes" if symbolic else "inferred reshapes"
        keep.append(k)
        methods[name], counts[name] = method, {"xnnpackPrograms": delegates, "portableOperators": portable}
    x = [torch.randn(1, 1, 64)]
    us = side_by_side(methods, {k: x for k in methods}, calls)
    a, b = "symbolic reshapes", "inferred reshapes"
    saved = counts[a]["xnnpackPrograms"] - counts[b]["xnnpackPrograms"]
    return {"calls": {k: {**counts[k], "usPerCall": round(v, 2)} for k, v in us.items()},
            "usPerDelegateCallAndPortableOperator": round((us[a] - us[b]) / saved, 3)}


def attention(calls: int, layers: int = 18, heads: int = 4, dim: int = 256, slots: int = 192) -> dict:
    import torch
    from torch import nn

    class Products(nn.Module):
        def __init__(self, how: str):
            super().__init__()
            self.how = how

        def forward(self, *a):
            left, cache = a[:layers], a[layers:]
            if self.how == "q @ K^T":
                return tuple(torch.bmm(q, k.transpose(1, 2)) for q, k in zip(left, cache))
            if self.how == "K @ q^T":
                return tuple(torch.bmm(k, q.transpose(1, 2)) for q, k in zip(left, cache))
            return tuple(torch.bmm(p, v) for p, v in zip(left, cache))  # P @ V

    torch.manual_seed(0)
    caches = tuple(torch.randn(1, slots, dim) for _ in range(layers))
    args = {"q @ K^T": tuple(torch.randn(1, heads, dim) for _ in range(layers)) + caches,
            "K @ q^T": tuple(torch.randn(1, heads, dim) for _ in range(layers)) + caches,
            "P @ V": tuple(torch.randn(1, heads, slots) for _ in range(layers)) + caches}
    keep, methods = [], {}
    for how, a in args.items():
        k, methods[how], delegates, portable = lowered(Products(how), a)
        assert delegates == 1 and portable == 0, (how, delegates, portable)
        keep.append(k)
    us = side_by_side(methods, {k: list(v) for k, v in args.items()}, calls)
    return {"shapes": {"layers": layers, "queryHeads": heads, "headDim": dim, "cacheSlots": slots},
            "msPerToken": {k: round(v / 1000, 3) for k, v in us.items()},
            "usPerProduct": {k: round(v / layers, 2) for k, v in us.items()}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    import torch
    from executorch.extension.pybindings.portable_lib import _unsafe_reset_threadpool

    from pteforge.core import system

    torch.set_num_threads(1)
    _unsafe_reset_threadpool(args.threads)
    result = {"cpu": system.cpu_name(), "cores": os.cpu_count(), "threads": args.threads,
              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "delegateCalls": delegate_calls(args.calls), "attention": attention(max(args.calls // 4, 50))}
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

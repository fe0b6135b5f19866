"""Core ML's quantization: pteforge's quantizer (pattern graphs built only where they can
match) against ExecuTorch's own, side by side in one process.

    uv run python bench/coreml_quantize.py [--models weighty tinynet] [--precisions int8 int8-weight] [--rounds 2]

For each model and precision, ``stages.quantize.quantize`` (prepare_pt2e, calibration,
convert_pt2e, export) runs with each quantizer in turn, over ``--rounds`` rounds
(alternating which goes first), in this one process, with the pattern operators pteforge
ships. Each row: the median seconds of each side, their ratio (ours / ExecuTorch's), and
whether the two quantized programs are the same (graph code, state, constants).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))


def models() -> dict:
    """name -> (what builds the model, its input shape)."""
    import tiny_models

    return {"weighty": (tiny_models.weighty, (1, 3, 32, 32)), "tinynet": (tiny_models.TinyNet, (1, 3, 16, 16)),
            "mobilenet_v3_small": (lambda: __import__("torchvision").models.mobilenet_v3_small(), (1, 3, 224, 224))}


def same(a, b) -> bool:
    import torch

    if a.graph_module.code != b.graph_module.code:
        return False
    for x, y in ((a.state_dict, b.state_dict), (dict(a.constants), dict(b.constants))):
        if x.keys() != y.keys() or not all(torch.equal(x[k], y[k]) for k in x if isinstance(x[k], torch.Tensor)):
            return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["weighty", "tinynet"], choices=sorted(models()))
    parser.add_argument("--precisions", nargs="+", default=["int8", "int8-weight"])
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()

    import torch

    from pteforge.backends import default_registry
    from pteforge.backends.base import Backend
    from pteforge.core.spec import Precision
    from pteforge.stages.quantize import quantize

    coreml = default_registry().get("coreml")
    print(f"{'model':<20} {'precision':<12} {'ours s':>8} {'theirs s':>9} {'ratio':>6}  same program")
    for name in args.models:
        torch.manual_seed(0)
        build, shape = models()[name]
        model = build().eval()
        example = (torch.rand(*shape),)
        program = torch.export.export(model, example)
        batches = [tuple(torch.rand_like(x) for x in example) for _ in range(4)]
        for precision in map(Precision, args.precisions):
            plan = coreml.plan(precision)
            sides = {"ours": plan, "theirs": dataclasses.replace(plan, quantizer=Backend.plan(coreml, precision).quantizer)}
            times: dict[str, list[float]] = {k: [] for k in sides}
            made = {}
            for round_ in range(args.rounds):
                for side in (list(sides) if round_ % 2 == 0 else list(sides)[::-1]):
                    start = time.perf_counter()
                    made[side] = quantize(program, sides[side], batches, example)
                    times[side].append(time.perf_counter() - start)
            ours, theirs = statistics.median(times["ours"]), statistics.median(times["theirs"])
            print(f"{name:<20} {precision.value:<12} {ours:8.1f} {theirs:9.1f} {ours / theirs:6.2f}  "
                  f"{same(made['ours'], made['theirs'])}", flush=True)


if __name__ == "__main__":
    main()

"""Where a quantized program loses its accuracy: per-layer SQNR against fp32, by eager module.

Both programs, the captured fp32 one and the quantized one (PT2E's converted program, what
every int8 backend lowers), run in PyTorch on the same inputs; each operator's output is
matched across them by the eager module it came from (``nn_module_stack``), its operator
and its place in that module. A layer's SQNR says how far its output is from fp32; its
drop, how much of that it added itself (its low channels' SQNR against its inputs'). The
layers with the largest drops are where the int8 program breaks.
"""

from __future__ import annotations

import copy
import math
from collections import OrderedDict

from ..core.result import ONE_LAYER_DB, TOP_LEVEL, layer_name
from ..core.units import EXACT_DB

# quantize/dequantize and shape-only operators: not layers, and matched by nothing
_SKIP = ("quantize_per", "dequantize_per", "choose_qparams", "view", "reshape", "permute", "t.default", "transpose",
         "squeeze", "unsqueeze", "flatten", "expand", "clone", "_assert", "getitem", "sym_size", "contiguous", "alias")


def _module_of(node) -> str:
    stack = node.meta.get("nn_module_stack") or {}
    return next(reversed(stack.values()))[0] if stack else ""


def _rounded(node):
    """Where ``node``'s value ends after the quantize/dequantize pair a quantized program
    puts on it (itself when there is none): its float value as its consumers read it."""
    last = node
    while True:
        step = [u for u in last.users if "quantize_per" in str(u.target)]  # quantize and dequantize
        if len(step) != 1 and not (step and all("dequantize" in str(u.target) for u in step)):
            break
        last = step[0]
    return node if "quantize_per" in str(last.target) and "dequantize" not in str(last.target) else last


class _Recorded:
    """One program's layer operators, keyed (module, operator, n-th in that module) alike in
    both programs; each key's input keys and module type; ``run`` gives each key's output."""

    def __init__(self, program):
        gm = self.gm = program.module()
        keys, self.carried = {}, {}
        seen: dict[tuple, int] = {}  # (module, operator) -> the last n-th given
        # the inputs: in a quantized program, what its first quantize/dequantize makes of them
        # (the input's own rounding, which the first layer's drop is measured from)
        for i, node in enumerate(n for n in gm.graph.nodes if n.op == "placeholder"):
            keys[node] = ("(input)", "input", i)
            self.carried[_rounded(node)] = keys[node]
        for node in gm.graph.nodes:
            if node.op != "call_function" or any(s in str(node.target) for s in _SKIP):
                continue
            module, op = _module_of(node), getattr(node.target, "__name__", str(node.target))
            n = seen[(module, op)] = seen.get((module, op), -1) + 1
            keys[node] = (module, op, n)

        def producer(n):  # through the operators that are not layers (dequantize, view, ...)
            while n is not None and n not in keys and getattr(n, "op", None) == "call_function" and n.args:
                n = n.args[0] if hasattr(n.args[0], "op") else None
            return keys.get(n)

        self.sources, self.types = {}, {}
        for node, key in keys.items():
            self.sources[key] = [k for k in (producer(a) for a in node.all_input_nodes) if k is not None]
            # a layer's output as the next layer gets it: after its own int8 rounding, so a layer
            # whose output int8 cannot hold (one channel far above the rest) is where it breaks,
            # not the layer that reads it
            self.carried.setdefault(_rounded(node), key)
            stack = node.meta.get("nn_module_stack") or {}
            kind = next(reversed(stack.values()))[1] if stack else ""
            self.types[key] = getattr(kind, "__name__", str(kind)).rsplit(".", 1)[-1]

    def run(self, inputs: tuple) -> dict:
        import torch

        outputs, carried = {}, self.carried

        class Recorder(torch.fx.Interpreter):
            def run_node(self, n):
                out = super().run_node(n)
                if n in carried and isinstance(out, torch.Tensor) and out.is_floating_point():
                    outputs[carried[n]] = out.detach().double()
                return out

        with torch.no_grad():
            Recorder(self.gm).run(*inputs)
        return outputs


def _db(signal, noise) -> float | None:
    """SQNR in dB; EXACT_DB for no noise; None where undefined (no signal, NaN, a ratio
    that underflows): never a math error."""
    signal, noise = float(signal), float(noise)
    if not (math.isfinite(signal) and math.isfinite(noise)) or signal <= 0:
        return None
    if noise <= 0:
        return EXACT_DB
    ratio = signal / noise
    return min(10 * math.log10(ratio), EXACT_DB) if ratio > 0 else None


def layer_loss(before: float | None, after: float) -> float | None:
    """How much SQNR a layer lost itself: its inputs' against its output's, never more than
    the signal its inputs had (an output below 0 dB, noise above signal, has lost all of
    it: the loss is its inputs' SQNR). None where the inputs were exact (EXACT_DB: no
    finite SQNR to lose from; the layer is where the loss starts, ``from_exact``)."""
    if before is None or before >= EXACT_DB:
        return None
    return min(round(max(0.0, before - max(after, 0.0)), 2), max(before, 0.0))


def per_layer(fp32_program, quantized_program, inputs_list: list[tuple]) -> list[dict]:
    """Every matched layer in execution order: module, module type, operator, SQNR (dB)
    against fp32, its channels' 10th-percentile SQNR, and its drop (dB): how much that lost
    against its inputs' (a layer that crushes most channels under one huge one shows there,
    not where a later layer scales them back). Inputs are taken one at a time: memory for one."""
    ref, got = _Recorded(fp32_program), _Recorded(quantized_program)
    # a batch norm the quantizer folded into the convolution before it: that convolution's
    # output is the normalized one
    folded = {before[0]: key for key, before in ref.sources.items()
              if "batch_norm" in key[1] and len(before) == 1 and key not in got.sources and before[0] in got.sources}
    sums: dict = {}
    for inputs in inputs_list:
        expected, actual = ref.run(inputs), got.run(inputs)
        for key, a in actual.items():
            e = expected.get(folded.get(key, key))
            if e is None or e.shape != a.shape:
                sums[key] = None
                continue
            if key in sums and sums[key] is None:
                continue
            dims = [d for d in range(e.dim()) if d != (1 if e.dim() > 1 else 0)]
            signal = (e ** 2).sum(dim=dims) if dims else e ** 2
            noise = ((e - a) ** 2).sum(dim=dims) if dims else (e - a) ** 2
            s = sums.setdefault(key, [0.0, 0.0, 0, 0])
            s[0], s[1] = s[0] + float(signal.sum()), s[1] + float(noise.sum())
            s[2], s[3] = s[2] + signal, s[3] + noise
    rows, worst_of = [], {}
    for key in got.sources:
        s = sums.get(key)
        if not s:
            continue
        whole = _db(s[0], s[1])
        strongest = float(s[2].max())
        # the channels that carry signal (not a dead one's 1e-9 of it), their 10th percentile:
        # a layer that crushes most channels shows, a few nearly silent channels do not
        channels = sorted(c for sig, noi in zip(s[2].flatten().tolist(), s[3].flatten().tolist())
                          if sig > 1e-6 * strongest and (c := _db(sig, noi)) is not None)
        if whole is None or not channels:
            continue
        worst_of[key] = channels[len(channels) // 10]
        if key[0] == "(input)":
            continue
        before = [worst_of[k] for k in got.sources.get(key, []) if k in worst_of]
        exact = bool(before) and min(before) >= EXACT_DB and worst_of[key] < EXACT_DB
        drop = layer_loss(min(before), worst_of[key]) if before else 0.0  # fed by nothing matched: nothing to measure from
        rows.append({"module": key[0] or TOP_LEVEL, "type": got.types.get(key, ""), "op": key[1],
                     "sqnr_db": round(whole, 2), "low_channels_db": round(worst_of[key], 2),
                     "drop_db": drop if drop is not None else 0.0, "from_exact": exact})
    return rows


# What per_layer found, in this process, by the programs' content keys (``memo.tag``) and the
# inputs': the targets that lower one quantized program (TOSA, Ethos-U55 and U85 int8, on one
# worker: ``memo_group``) measure it once
_MEASURED: OrderedDict[tuple, list[dict]] = OrderedDict()


def per_layer_once(fp32_program, quantized_program, inputs_list: list[tuple], sources: tuple) -> list[dict]:
    """``per_layer``, once per process for the same programs and inputs. ``sources``: the
    two programs' content keys; any None (an untagged program), or inputs with no stable
    description (``describe``), measures again."""
    from .describe import Unstable, describe

    try:
        key = None if None in sources else (*sources, describe(inputs_list))
    except Unstable:
        key = None
    if key is None:
        return per_layer(fp32_program, quantized_program, inputs_list)
    if key not in _MEASURED:
        _MEASURED[key] = per_layer(fp32_program, quantized_program, inputs_list)
        while len(_MEASURED) > 16:
            _MEASURED.popitem(last=False)
    _MEASURED.move_to_end(key)
    return copy.deepcopy(_MEASURED[key])


def where_it_breaks(rows: list[dict], top: int = 5) -> list[dict]:
    """The ``top`` layers that lose the most, largest drop first. A layer that made exact
    inputs lossy (``from_exact``) is where the loss starts: it ranks by how far below exact
    it brought them (a ranking only: no such figure is shown, EXACT_DB is no signal)."""
    def loss(r):
        return EXACT_DB - max(r["low_channels_db"], 0.0) if r.get("from_exact") else r["drop_db"]

    return sorted(rows, key=lambda r: -loss(r))[:top]


# the backends whose quantizer leaves a module in fp32 when given None for its name (Arm's
# TOSAQuantizer); XNNPACK's asserts that a config is given
_NONE_BY_NAME = frozenset({"tosa", "ethos-u55", "ethos-u85", "vgf"})


def what_to_try(worst: list[dict], calibration: dict | None, backend: str, floats: list[str]) -> list[str]:
    """Remedies for the layers that break, in the order to try them."""
    tips = []
    if worst and (worst[0]["drop_db"] >= ONE_LAYER_DB or worst[0].get("from_exact")):
        w = worst[0]
        took = (f"it alone brings exact inputs to {w['sqnr_db']:.1f} dB" if w.get("from_exact")
                else f"it alone takes {w['drop_db']:.1f} dB")
        if w["module"] == TOP_LEVEL:  # an operator of forward() itself: no module name to leave out
            tips.append(f"leave the {layer_name(w)} in fp32: {took} (move it into a submodule of its own, "
                        f"which a quantizer can leave out by name)")
        elif any(r["module"].startswith(w["module"] + ".") for r in worst):  # an operator of its own forward
            op = w["op"].split(".")[0]
            tips.append(f"leave the {op} in {w['module']}'s own forward in fp32: {took} (move it into a submodule "
                        f"of its own: leaving {w['module']} out by name would leave the layers inside it too)")
        else:
            how = f" (PT2E: quantizer.set_module_name(\"{w['module']}\", None))" if backend in _NONE_BY_NAME else ""
            tips.append(f"leave {layer_name(w)} in fp32: {took}{how}")
    if calibration and not calibration.get("images") and not calibration.get("files"):
        tips.append("calibrate on real inputs (--calibration DIR, more --calibration-samples): it saw synthetic ones only")
    elif calibration and calibration.get("samples", 0) < 32:
        tips.append(f"calibrate on more real inputs (--calibration-samples 64; it saw {calibration.get('samples')})")
    if floats:
        tips.append(f"{' or '.join(f'{backend}:{p}' for p in floats)} keeps activations in floating point")
    return tips

"""Run an artifact on this host's ExecuTorch runtime and compare with eager PyTorch."""

from __future__ import annotations

import math
import time

from ..core.native_log import captured
from ..core.result import Verification
from ..core.spec import Precision
from ..core.units import EXACT_DB
from ..families import family
from ..families.vision import shipped_images
from ..runtime.host import load_forward
from .capture import tensor_outputs

# Minimum SQNR (dB) against fp32 eager, per precision the program computes in.
# fp32 programs differ from eager only by kernel rounding (measured > 60 dB);
# reduced precisions lose ~6 dB per bit they drop.
DEFAULT_MIN_SQNR_DB: dict[str, float] = {
    "fp32": 40.0,
    # OpenVINO's CPU plugin in bf16 (8-bit mantissa): mobilenet_v3_small 38 dB,
    # mobilenet_v2 16.5 dB measured with random weights; a wrong program is near 0 dB
    "bf16": 15.0,
    # XNNPACK fp16 on mobilenet_v3_small (random weights): 25 dB measured; eager .half() 36 dB
    "fp16": 20.0,
    "int8": 10.0,
    "int8-dynamic": 10.0,
    "int8-weight": 15.0,
    "int4-weight": 8.0,
    "8da4w": 8.0,
    "8da8w": 10.0,
}


def threshold_for(runtime_precision: str, override: float | None) -> float:
    return override if override is not None else DEFAULT_MIN_SQNR_DB[runtime_precision]


def compare(expected: list, actual: list) -> dict:
    """Error statistics between two lists of tensors (worst case over tensors)."""
    import torch

    if len(expected) != len(actual):
        raise ValueError(f"the program returned {len(actual)} outputs, eager returned {len(expected)}")
    # a class id or a mask is judged by agreement (integer_agreement), not by SQNR: "floats"
    # counts the outputs the figures are of (none: the SQNR is no one's)
    worst = {"max_abs": 0.0, "mean_abs": 0.0, "sqnr": math.inf, "cosine": 1.0, "floats": 0}
    for e, a in zip(expected, actual):
        skip = not e.is_floating_point()
        worst["floats"] += not skip
        e = e.detach().double().flatten()
        a = a.detach().double().flatten()
        if e.shape != a.shape:
            raise ValueError(f"output shape {tuple(a.shape)} differs from eager {tuple(e.shape)}")
        if skip:
            continue
        if nonfinite_differences(e, a):
            # NaN or infinity where eager has none (or another): no number of dB says how far
            # off that is, and NaN would slip through every comparison below.
            worst.update(max_abs=math.inf, mean_abs=math.inf, sqnr=-math.inf, cosine=min(worst["cosine"], 0.0))
            continue
        finite = torch.isfinite(e)  # eager's own infinities and NaNs, matched exactly above
        e, a = e[finite], a[finite]
        diff = e - a
        worst["max_abs"] = max(worst["max_abs"], float(diff.abs().max()) if diff.numel() else 0.0)
        worst["mean_abs"] = max(worst["mean_abs"], float(diff.abs().mean()) if diff.numel() else 0.0)
        noise = float((diff**2).sum())
        signal = float((e**2).sum())
        sqnr = math.inf if noise == 0 else (10 * math.log10(signal / noise) if signal > 0 else -math.inf)
        worst["sqnr"] = min(worst["sqnr"], sqnr)
        # identical outputs (all-zero ones too, whose cosine torch gives as 0) are at 1
        cos = 1.0 if noise == 0 else float(torch.nn.functional.cosine_similarity(e, a, dim=0))
        if not math.isfinite(cos):
            cos = 1.0 if torch.equal(e, a) else 0.0
        worst["cosine"] = min(worst["cosine"], cos)
    return worst


def integer_agreement(expected: list[list], actual: list[list]) -> float | None:
    """The fraction of the values of eager's integer and boolean outputs (class ids,
    indices, masks) the program gives equal, over every input; None where there are none."""
    equal = total = 0
    for outs_e, outs_a in zip(expected, actual):
        for e, a in zip(outs_e, outs_a):
            if e.is_floating_point() or e.is_complex():
                continue
            total += e.numel()
            if e.shape == a.shape:
                equal += int((e.detach().flatten() == a.detach().to(e.dtype).flatten()).sum())
    return equal / total if total else None


def nonfinite_differences(e, a) -> int:
    """How many values are NaN or infinite in one of ``e`` and ``a`` and not the same in the other."""
    return int(_nonfinite_mismatch(e, a).sum())


def degenerate(expected: list[list], actual: list[list], labels: list[str] | None = None) -> tuple[str, str] | None:
    """Outputs no SQNR can judge, as (whose, why): ``("eager", ...)`` when the model itself
    gives NaN on an input (nothing could be compared: the model's fault, not the
    lowering's); ``("artifact", ...)`` when the program gives NaN or infinity where eager
    does not give the same, or when the program's output is the same on every input while
    eager's changes. None when neither. An infinity of eager's own (the log of a zero
    probability, a masked score) is a value like another: the program must give it at the
    same place, and the rest is compared."""
    import torch

    labels = labels or [f"input {i + 1}" for i in range(len(expected))]
    for i, outs in enumerate(expected):
        for j, t in enumerate(outs):
            if t.is_floating_point() and bool(torch.isnan(t).any()):
                k = int(torch.isnan(t.detach().flatten()).nonzero()[0])
                return "eager", f"the model itself gives NaN on {labels[i]} (output {j}, index {k}): nothing could be compared"
    for i, outs in enumerate(actual):
        for j, t in enumerate(outs):
            if not t.is_floating_point() or j >= len(expected[i]) or expected[i][j].shape != t.shape:
                continue
            e, a = expected[i][j].detach().double().flatten(), t.detach().double().flatten()
            wrong = _nonfinite_mismatch(e, a)
            if bool(wrong.any()):
                k = int(wrong.nonzero()[0])
                return "artifact", (f"the program gives {_value(a[k])} on {labels[i]} at output {j}, index {k}, where "
                                    f"eager gives {_value(e[k])}")
    if len(actual) > 1:
        for j in range(len(actual[0])):
            if actual[0][j].is_floating_point() and _same_on_every_input([a[j] for a in actual]) \
                    and _changes([e[j] for e in expected]):
                return "artifact", (f"output {j} of the program is the same on all {len(actual)} inputs while eager's "
                                    "changes: the program ignores its input")
    return None


def _nonfinite_mismatch(e, a):
    """Where one of ``e`` and ``a`` is NaN or infinite and the other is not the same."""
    import torch

    e_bad, a_bad = ~torch.isfinite(e), ~torch.isfinite(a)
    return (e_bad ^ a_bad) | (e_bad & a_bad & (e.nan_to_num() != a.nan_to_num()))


def _value(x) -> str:
    """A value as words where it is not a number (NaN, infinity, minus infinity)."""
    v = float(x)
    return "NaN" if math.isnan(v) else ("infinity" if v > 0 else "minus infinity") if math.isinf(v) else f"{v:.4g}"


def constant_outputs(expected: list[list]) -> list[int]:
    """The outputs eager gives the same on every input: inputs that do not exercise the model."""
    if len(expected) < 2:
        return []
    return [j for j in range(len(expected[0])) if _same_on_every_input([e[j] for e in expected])]


def _changes(tensors: list) -> bool:
    """Whether eager's output moves with its input by more than rounding (a millionth of
    its largest value), so a program's output that does not is not just coarser."""
    first = tensors[0].detach().double()
    scale = float(first.abs().max()) if first.numel() else 0.0
    return any(t.shape != first.shape or float((t.detach().double() - first).abs().max()) > 1e-6 * max(scale, 1e-12)
               for t in tensors[1:])


def _same_on_every_input(tensors: list) -> bool:
    import torch

    return all(t.shape == tensors[0].shape and bool(torch.equal(t, tensors[0])) for t in tensors[1:])


SLOW = 5.0  # seconds of running after which each further input is reported


def run_program(data: bytes, inputs: list[list], progress=None) -> list[list]:
    """Load ``data`` with the host runtime and run it once per input list; once that has
    taken ``SLOW`` seconds (a portable YOLO: ~30 s an input), ``progress(i, n)`` before
    each further input."""
    t0, outputs = time.perf_counter(), []
    with captured():  # a failure says what the runtime logged about it (the bindings give a code only)
        program, method = load_forward(data)  # a failure here says so: the row is LOAD_FAILED
        for i, x in enumerate(inputs, 1):
            if progress and time.perf_counter() - t0 > SLOW:
                progress(i, len(inputs))
            # the runtime takes contiguous (or channels-last) tensors only: a permuted input is copied
            outputs.append(tensor_outputs(method.execute([t.contiguous() if hasattr(t, "contiguous") else t for t in x])))
    return outputs


def verify_outputs(
    reference: dict,
    actual: list[list],
    precision: Precision,
    runtime_precision: str | None,
    task: str,
    tolerance: float | None,
) -> Verification:
    import torch

    stats = [compare(e, a) for e, a in zip(reference["outputs"], actual)]
    top1 = top5 = None
    if task == "classification":
        agree1 = agree5 = 0
        for e, a in zip(reference["outputs"], actual):
            e0, a0 = e[0].flatten(), a[0].flatten()
            agree1 += int(int(e0.argmax()) == int(a0.argmax()))
            k = min(5, e0.numel())
            agree5 += int(set(torch.topk(e0, k).indices.tolist()) == set(torch.topk(a0, k).indices.tolist()))
        top1, top5 = agree1 / len(actual), agree5 / len(actual)
    effective = runtime_precision or precision.value
    threshold = threshold_for(effective, tolerance)
    sqnr = min(s["sqnr"] for s in stats)
    floats = any(s["floats"] for s in stats)  # else every output is an integer one: no SQNR, its agreement judges
    broken = degenerate(reference["outputs"], actual)
    free = set(reference.get("input_free", ()))  # a constant the model returns: no fault of the inputs'
    constant = [j for j in constant_outputs(reference["outputs"]) if j not in free]
    return Verification(
        inputs=len(actual),
        inputs_from=reference.get("inputs_from"),
        max_abs_error=max(s["max_abs"] for s in stats),
        mean_abs_error=max(s["mean_abs"] for s in stats),
        # identical outputs: 200 dB, not infinity; outputs no SQNR can judge: none at all
        sqnr_db=None if broken or not floats or not math.isfinite(sqnr) and sqnr < 0 else min(sqnr, EXACT_DB),
        cosine=min(s["cosine"] for s in stats),
        top1_agreement=top1,
        top5_agreement=top5,
        threshold_sqnr_db=threshold,
        passed=broken is None and sqnr >= threshold,
        runtime_precision=effective,
        degenerate=broken[1] if broken else None,
        model_fault=broken is not None and broken[0] == "eager",
        integer_agreement=integer_agreement(reference["outputs"], actual),
        warning=(f"eager's output {', '.join(map(str, constant))} is the same on all {len(actual)} verification inputs: "
                 "they do not exercise the model") if constant and not broken else None,
    )


def image_agreement(reference: dict, actual: list[list], spec) -> dict:
    """Agreement with eager fp32 on the validation photos: SQNR and cosine (worst over
    photos), the family's own metric per photo and its mean (``agreement``: same top-1,
    boxes at the same anchors, keypoint similarity, mask IoU, ...) and, for classifiers,
    the fraction of photos with the same top-1."""
    fam = family(spec.family)
    names = reference.get("image_names", [])
    photos = {p.name: p for p in shipped_images()}
    per_image = []
    for i, (e, a) in enumerate(zip(reference["image_outputs"], actual)):
        s = compare(e, a)
        name = names[i] if i < len(names) else f"image {i}"
        row = {"name": name, "sqnr_db": round(min(s["sqnr"], EXACT_DB), 2), "cosine": round(s["cosine"], 6)}
        if spec.task == "classification":
            row["top1_match"] = int(e[0].argmax()) == int(a[0].argmax())
        if name in photos:
            meta = fam.prepare(photos[name], spec).meta
            metric = fam.agreement(e, a, meta)
            if metric is not None:
                row["agreement"] = round(metric, 4)
            if spec.task == "detection" and hasattr(fam, "boxes_matched"):
                row["boxes_matched"] = round(fam.boxes_matched(e, a, meta), 4)
        per_image.append(row)
    out = {
        "images": len(actual),
        "names": names,
        "sqnr_db": min(r["sqnr_db"] for r in per_image),
        "cosine": min(r["cosine"] for r in per_image),
        "per_image": per_image,  # the metric against eager on each photo (the report's numerics)
    }
    if spec.task == "classification":
        out["top1_agreement"] = round(sum(r["top1_match"] for r in per_image) / len(per_image), 4)
    for key in ("agreement", "boxes_matched"):
        scored = [r[key] for r in per_image if key in r]
        if scored:
            out[key] = round(sum(scored) / len(scored), 4)
    return out

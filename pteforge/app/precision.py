"""Precision trade-offs, measured: each reduced-precision artifact against the fp32
artifact of the same chain, and ``--precision auto``'s choice per backend.

Planning adds what the comparison needs (the fp32 reference of every reduced
target; every precision of each backend under ``auto``); after the exports, one
child process times the artifacts that run here, side by side, while no worker
is busy.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..backends import default_registry
from ..core.result import Record, budget_missed, ran_here
from ..core.spec import AccuracyBudget, Precision, Target


def fp32_reference(target: Target) -> Target | None:
    """The fp32 target a reduced-precision ``target`` is measured against: the same
    chain at fp32, or the portable program when the backend takes no fp32."""
    if target.precision is Precision.FP32:
        return None
    registry = default_registry()
    primary = registry.get(target.primary)
    if Precision.FP32 in primary.precisions:
        return Target(target.backends, Precision.FP32, default_precision=primary.default_precision is Precision.FP32)
    reference = next(b for b in registry if b.fp32_reference)
    return Target((reference.name,), Precision.FP32)


@dataclass
class AutoGroup:
    """One backend under ``--precision auto``: the targets tried, in its precision order."""

    backend: str
    targets: list[str] = field(default_factory=list)


def expand_auto(targets: list[Target], host) -> tuple[list[Target], list[AutoGroup], list[str]]:
    """Every precision of each single-backend target whose programs run here.

    Returns the targets, the groups, and a note per backend left at its default
    (it cannot run here, so nothing could be measured to choose by)."""
    registry = default_registry()
    out: list[Target] = []
    groups: list[AutoGroup] = []
    notes: list[str] = []
    for t in targets:
        backend = registry.get(t.primary)
        if len(t.backends) > 1 or not backend.run_check(host).ok:
            out.append(t)
            if len(t.backends) == 1:
                notes.append(f"{backend.name}: cannot run here, exported at its default {backend.default_precision.value}")
            continue
        group = AutoGroup(backend.name)
        for p in backend.precisions:
            cand = Target(t.backends, p, default_precision=p is backend.default_precision)
            out.append(cand)
            group.targets.append(cand.name)
        groups.append(group)
    return out, groups, notes


def with_references(targets: list[Target], runs_here) -> tuple[list[Target], list[str]]:
    """``targets`` plus the fp32 reference of each reduced one that is not there yet, where a
    comparison executes it: both programs run here (``runs_here(target)``), so the reduced
    one's latency is measured against it. A device-only reduced program (Core ML, Vulkan,
    Ethos-U) brings none: its size is measured against the model's fp32 weights
    (``reference_pairs``), and a second lowering would only cost time."""
    names = {t.name for t in targets}
    added: list[str] = []
    out = list(targets)
    for t in targets:
        ref = fp32_reference(t)
        if ref is not None and ref.name not in names and runs_here(t) and runs_here(ref):
            out.append(ref)
            names.add(ref.name)
            added.append(ref.name)
    return out, added


# Below this many bytes of fp32 weights, a file's size is mostly the program around them (its
# graph, its delegate's headers): a ratio against the weights alone would say "23x" of a
# 448-byte convolution's fp16 Core ML file, and nothing about its precision.
WEIGHTS_SIZE_THEIR_FILE = 1 << 20


def reference_pairs(records: list[Record], fp32_bytes: dict[str, int] | None = None) -> list[tuple[Record, Record]]:
    """(reduced-precision row, its fp32 reference row) for every pair with both artifacts;
    sets each reduced row's ``relative`` size ratio: against its fp32 reference program, or
    where none was lowered, against the model's weights at fp32 (``fp32_bytes``: model ->
    bytes, from its capture) where they are most of a file (``WEIGHTS_SIZE_THEIR_FILE``)."""
    by_key = {(r.model, r.target_spec): r for r in records}
    pairs = []
    for rec in records:
        ref_target = fp32_reference(rec.target_spec) if rec.target_spec else None
        if rec.artifact is None or ref_target is None:
            continue
        ref = by_key.get((rec.model, ref_target))
        if ref is None or ref.artifact is None:
            weights = (fp32_bytes or {}).get(rec.model, 0)
            if weights >= WEIGHTS_SIZE_THEIR_FILE:
                rec.relative = {"fp32_weights_bytes": weights, "size": round(rec.artifact.size / weights, 3)}
            continue
        rec.relative = {"fp32": Path(ref.artifact.path).name, "size": round(rec.artifact.size / ref.artifact.size, 3)}
        pairs.append((rec, ref))
    return pairs


def relate_latency(pairs: list[tuple[Record, Record]]) -> None:
    """Latency ratio of each reduced row against its fp32 reference, where both were timed."""
    for rec, ref in pairs:
        if rec.latency and ref.latency and rec.latency.get("p50_ms") and ref.latency.get("p50_ms"):
            assert rec.relative is not None  # relate_size gave each pair's row its relative
            rec.relative.update(
                latency=round(rec.latency["p50_ms"] / ref.latency["p50_ms"], 3),
                p50_ms=rec.latency["p50_ms"],
                fp32_p50_ms=ref.latency["p50_ms"],
            )


def choose(model: str, group: AutoGroup, records: list[Record], task: str, budget: AccuracyBudget | None,
           token_ids: list[str] | None = None) -> dict:
    """The fastest precision of ``group`` within the accuracy budget, and why. A model fed
    token ids (``token_ids``: those inputs' names) gets dynamic int8 where it is within the
    budget (its activations are quantized as they come: no calibration on ids, which are
    synthetic without --calibration), or says why not; a static int8 program calibrated on
    synthetic ids is not chosen (``_on_token_ids``)."""
    budget = (budget or AccuracyBudget()).over(task)
    tried = _list_tried(model, group, records, budget)
    choice: dict[str, Any] = {"model": model, "backend": group.backend, "budget": budget.describe(), "tried": tried, "winner": None}
    preferred, prefix = _on_token_ids(tried, token_ids) if token_ids else (None, "")
    if token_ids:
        choice["tokenIds"] = token_ids
    fits = [t for t in tried if t["within_budget"]]
    if not fits:
        choice["why"] = prefix + "no precision of this backend was verified within the budget"
        return choice
    best = preferred or min(fits, key=lambda t: t["p50_ms"])
    choice["winner"] = best["target"]
    fp32 = next((t for t in tried if t["precision"] == Precision.FP32.value and t["p50_ms"]), None)
    speed = f", {best['p50_ms'] / fp32['p50_ms']:.2f}× the fp32 latency" if fp32 and best is not fp32 else ""
    others = [f"{t['precision']} {t['p50_ms']:.2f} ms" for t in fits if t is not best]
    choice["why"] = (
        prefix + (f"{best['precision']} at {best['p50_ms']:.2f} ms p50{speed}" if preferred else
                  f"fastest within the budget: {best['precision']} at {best['p50_ms']:.2f} ms p50{speed}")
        + (f" (also within: {', '.join(others)})" if others else "")
        + _left_out(tried)
    )
    return choice


def _left_out(tried: list[dict]) -> str:
    """The precisions not chosen from: those judged outside the budget, and apart those not
    judged at all (not timed, or not run here), each with its note."""
    said = ""
    for what, rows in (("outside the budget", [t for t in tried if not t["within_budget"] and t["judged"]]),
                       ("not compared", [t for t in tried if not t["within_budget"] and not t["judged"]])):
        if rows:
            said += f"; {what}: {', '.join(t['precision'] + ' (' + t['note'] + ')' for t in rows)}"
    return said


def _list_tried(model: str, group: AutoGroup, records: list[Record], budget: AccuracyBudget) -> list[dict]:
    """A row per precision of ``group`` that has a record: its figures, and whether it is
    within ``budget``."""
    rows = {r.target: r for r in records if r.model == model}
    tried = []
    for name in group.targets:
        rec = rows.get(name)
        if rec is None:
            continue
        images = (rec.verification.images if rec.verification else None) or {}
        row = {
            "target": name,
            "precision": rec.precision,
            "status": rec.status.value,
            "size": rec.artifact.size if rec.artifact else None,
            "p50_ms": (rec.latency or {}).get("p50_ms"),
            "top1_agreement": images.get("top1_agreement"),
            "boxes_matched": images.get("boxes_matched"),
            "sqnr_db": images.get("sqnr_db", rec.verification.sqnr_db if rec.verification else None),
        }
        row["within_budget"], row["note"] = _judge(rec, row, budget)
        row["judged"] = ran_here(rec) and row["p50_ms"] is not None  # else not compared: not run here, or not timed
        calibration = (rec.quantization or {}).get("calibration") or {}
        if calibration.get("tokenIds"):
            row["calibration"] = "synthetic token ids"
        tried.append(row)
    return tried


def _on_token_ids(tried: list[dict], token_ids: list[str]) -> tuple[dict | None, str]:
    """(the dynamic int8 row when it is within the budget, else None; the why's opening).
    A static int8 row calibrated on synthetic ids is taken out of the choice, saying so."""
    for t in (t for t in tried if t.get("calibration") == "synthetic token ids"):
        t["note"] = ("" if t["within_budget"] else f"{t['note']}; ") + "calibrated on synthetic token ids, not representative"
        t["within_budget"] = False
    dynamic = next((t for t in tried if t["precision"] == Precision.INT8_DYNAMIC.value), None)
    inputs = f"token-id inputs ({', '.join(token_ids)})"
    if dynamic is not None and dynamic["within_budget"]:
        return dynamic, f"{inputs}: dynamic int8 needs no calibration on ids; "
    why_not = ("is not a precision of this backend" if dynamic is None
               else f"is outside the budget ({dynamic['note']})")
    return None, f"{inputs}, but dynamic int8 {why_not}; "


def _judge(rec: Record, row: dict, budget: AccuracyBudget) -> tuple[bool, str]:
    if not ran_here(rec):  # below the run's budget is judged here, against auto's own budget
        return False, rec.status.value
    if row["p50_ms"] is None:
        return False, "not timed"
    missed = budget_missed(rec.task, rec.verification, budget)  # as every row is judged: integer outputs too
    return (False, missed) if missed else (True, "within budget")

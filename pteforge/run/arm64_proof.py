"""``export --prove-on arm64``: every XNNPACK and portable program of a run, run again by
ExecuTorch's aarch64 runtime under emulation (``runtime/arm64.py``), on the same inputs and
photos as the host's verification, judged by the same functions and tolerances
(``stages/verify.py``). The verdict goes beside the host's, in ``Record.arm64``:

``{"status", "method", "features", "executorch", "inputs", "sqnr_db", "cosine",
"top1_agreement", "threshold_sqnr_db", "images", "vs_host_sqnr_db", "reason", "fix"}``

``vs_host_sqnr_db`` is the Arm64 outputs against this host runtime's on the same inputs
(200: identical): where the two verdicts differ, it says by how much the kernels do.
Emulated seconds are not a phone's: none is reported as speed.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.native_log import captured
from ..core.result import Artifact, Record, Status, Verification, budget_missed, verdict
from ..core.spec import Precision
from ..core.units import EXACT_DB, sqnr_text
from ..stages.verify import compare, image_agreement, integer_agreement, run_program, verify_outputs

if TYPE_CHECKING:
    from ..core.spec import ExportConfig, ModelSpec, Precision

RUNS_ON_ARM64 = {"XnnpackBackend"}  # the delegates of ExecuTorch's aarch64 Linux wheel that pteforge lowers to
ARM64 = "arm64"


def eligible(rec: Record) -> bool:
    """A program the aarch64 runtime can run: it exists, ran here, and calls XNNPACK or no delegate."""
    if rec.artifact is None or rec.generation is not None or rec.verification is None or rec.verification.simulator:
        return False
    return set(rec.artifact.delegation.delegates_in_program) <= RUNS_ON_ARM64


def _program(rec: Record) -> Artifact:
    """The program of a row that has one (every row this module judges)."""
    assert rec.artifact is not None
    return rec.artifact


def _host_proof(rec: Record) -> Verification:
    """The host's verification of a row that ran here (``eligible``)."""
    assert rec.verification is not None
    return rec.verification


def unproven(records: list[Record], reason: str, fix: str | None) -> None:
    for rec in records:
        rec.arm64 = {"status": Status.NOT_RUNNABLE_HERE.value, "reason": reason, **({"fix": fix} if fix else {})}


def prove(records: list[Record], references: dict[str, str], specs: dict[str, ModelSpec], config: ExportConfig,
          work: Path) -> float:
    """Run every eligible row's program under emulation in one process and judge it; returns
    the seconds it took. Rows restored from the cache keep the Arm64 proof they were stored
    with; one without it is said to need ``--no-cache``."""
    from ..runtime.arm64 import availability, native, run_programs

    elsewhere = [r for r in records if r.artifact is not None and r.generation is None and not eligible(r)
                 and r.arm64 is None]
    for rec in elsewhere:
        others = sorted(set(_program(rec).delegation.delegates_in_program) - RUNS_ON_ARM64)
        rec.arm64 = {"status": Status.NOT_RUNNABLE_HERE.value,
                     "reason": f"not proven on Arm64: {', '.join(others) or 'it'} not in ExecuTorch's aarch64 Linux "
                               "runtime" if others else "not proven on Arm64: it did not run on this host"}
    todo = [r for r in records if eligible(r) and not (r.cache and r.arm64)]
    if native():
        for rec in todo:  # the host's own proof is on Arm64 already
            v = _host_proof(rec)
            rec.arm64 = {"status": rec.status.value, "method": f"{v.method} on this Arm64 host (native)",
                         "sqnr_db": v.sqnr_db, "top1_agreement": v.top1_agreement, "vs_host_sqnr_db": EXACT_DB}
        return 0.0
    check = availability()
    if not check.ok:
        unproven(todo, f"not proven on Arm64: {check.reason}", check.fix)
        return 0.0
    restored = [r for r in todo if r.model not in references]
    unproven(restored, "not proven on Arm64: restored from the cache, which holds no Arm64 proof of it",
             "export it again with --no-cache --prove-on arm64")
    # XNNPACK's programs first, the portable kernels' (the slowest under emulation) last: a
    # run that meets --timeout keeps what finished
    todo = sorted((r for r in todo if r.model in references), key=lambda r: not _program(r).delegation.delegates_in_program)
    if not todo:
        return 0.0
    t0 = time.perf_counter()  # the cost of the proof (emulated: never a speed)
    refs, inputs = _inputs(todo, references, work)
    run = run_programs([(_program(r).path, inputs[r.model]) for r in todo], work, config.timeout)
    for rec in todo:
        rec.arm64 = _judged(rec, run, refs[rec.model], specs.get(rec.model), config)
    return time.perf_counter() - t0


def _inputs(todo: list[Record], references: dict[str, str], work: Path) -> tuple[dict, dict]:
    """Each model's eager reference, and its inputs and photos written to an .npz."""
    import numpy as np
    import torch

    refs, paths = {}, {}
    for model in dict.fromkeys(r.model for r in todo):
        refs[model] = ref = torch.load(references[model], weights_only=True)
        lists = ref["inputs"] + ref.get("images", [])
        arrays = {f"i{n}_{k}": x.detach().contiguous().numpy() for n, xs in enumerate(lists) for k, x in enumerate(xs)}
        paths[model] = str(work / f"arm64-in-{model}.npz")
        np.savez(paths[model], **arrays)
    return refs, paths


def _outputs(path: str, lists: int) -> list[list]:
    import numpy as np
    import torch

    arrays = np.load(path)
    out: list[list] = [[] for _ in range(lists)]
    for key in sorted(arrays.files, key=lambda k: tuple(int(p) for p in k[1:].split("_"))):
        n, _ = (int(p) for p in key[1:].split("_"))
        out[n].append(torch.from_numpy(arrays[key]))
    return out


def _judged(rec: Record, run: Any, reference: dict, spec: ModelSpec | None, config: ExportConfig) -> dict:
    """The Arm64 verdict of one program, judged as the host's verification was."""
    from ..runtime.arm64 import method

    said = {"method": method(run.facts), "features": run.facts.get("features", []),
            "executorch": run.facts.get("executorch")}
    result = run.results.get(_program(rec).path)
    if result is None or not result.get("ok"):
        failed = Status.LOAD_FAILED if result and result.get("load") else Status.RUN_FAILED
        return {"status": failed.value, **said, "reason": (result or {}).get("error") or run.error or "no result",
                "fix": "run with --debug, or report it: the program ran on this host"}
    n = len(reference["inputs"])
    actual = _outputs(result["outputs"], n + len(reference.get("images", [])))
    return {**said, **_compared(rec, actual[:n], actual[n:], reference, spec, config)}


def _compared(rec: Record, actual: list, on_images: list, reference: dict, spec: ModelSpec | None,
              config: ExportConfig) -> dict:
    host = _host_proof(rec)
    v = verify_outputs(reference, actual, rec.target_spec.precision if rec.target_spec else _precision(rec),
                       host.runtime_precision, rec.task, config.tolerance)
    if on_images and spec is not None:
        v.images = image_agreement(reference, on_images, spec)
    missed = budget_missed(rec.task, v, config.accuracy_budget) if v.passed else None
    status = verdict("host", v.passed, missed)
    out: dict[str, Any] = {"status": status.value, "inputs": v.inputs, "sqnr_db": _rounded(v.sqnr_db), "cosine": round(v.cosine, 6),
           "top1_agreement": v.top1_agreement, "threshold_sqnr_db": v.threshold_sqnr_db,
           "vs_host_sqnr_db": _rounded(_against_host(rec, reference["inputs"], actual, compare))}
    if v.images:
        out["images"] = {k: v.images[k] for k in ("images", "sqnr_db", "top1_agreement", "agreement", "boxes_matched")
                        if k in v.images}
    if status is Status.MISMATCH:
        sqnr = sqnr_text(v.sqnr_db) if v.sqnr_db is not None else "no SQNR"
        out["reason"] = v.degenerate or f"output differs from eager on Arm64: {sqnr} < {v.threshold_sqnr_db} dB"
        out["fix"] = "the program computes differently on Arm's kernels: try a higher precision, or prove it on a device"
    elif missed:
        out["reason"] = f"misses its accuracy budget on Arm64 ({missed})"
    return out


def _precision(rec: Record) -> Precision:
    return Precision(rec.precision)


def _against_host(rec: Record, inputs: list, actual: list, compare: Any) -> float | None:
    """The Arm64 outputs against this host runtime's, on the verification inputs."""
    try:
        with captured(os.devnull):  # the runtime's first-load chatter (cpuinfo_utils), in this process
            host = run_program(Path(_program(rec).path).read_bytes(), inputs)
        if (ints := integer_agreement(host, actual)) is not None and ints < 1:
            return None  # class ids that differ: not "the same outputs", and no SQNR says how far
        return min(compare(h, a)["sqnr"] for h, a in zip(host, actual))
    except Exception:  # noqa: BLE001 - the comparison is a detail; the verdict stands without it
        return None


def _rounded(x: float | None) -> float | None:
    """dB as the records hold them: identical is 200, undefined (NaN, -inf) is None."""
    if x is None or math.isnan(x) or x == -math.inf:
        return None
    return round(min(x, EXACT_DB), 2)

"""One (model, target) from a capture to a verified artifact on disk.

``export_target`` takes and returns plain data (a Capture of file paths, frozen
specs, a Record), so it can run in this process or in a worker process.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from pathlib import Path

from .backends import default_registry
from .errors import one_line
from .result import Artifact, Record, Status
from .spec import ExportConfig, ModelSpec, Target
from .stages.capture import Capture

StageCallback = Callable[[str], None]


def artifact_path(out_dir: Path, spec: ModelSpec, target: Target, failed: bool = False) -> Path:
    """``<out>/<category>/<model>_<target>.pte``; a failed proof never takes that name."""
    suffix = ".mismatch.pte" if failed else ".pte"
    return Path(out_dir) / spec.family / f"{spec.name}_{target.slug}{suffix}"


def export_target(
    capture: Capture,
    spec: ModelSpec,
    target: Target,
    config: ExportConfig,
    registered: frozenset[str] | None = None,
    on_stage: StageCallback | None = None,
) -> Record:
    import torch

    from .stages.lower import delegation_of, lower, program_delegates, program_operators
    from .stages.quantize import calibration_set, quantize
    from .stages.verify import image_agreement, run_program, verify_outputs

    if registered is None:
        from .runtime import registered_backends

        registered = registered_backends()
    registry = default_registry()
    chain = [registry.get(name) for name in target.backends]
    primary = chain[0]
    record = Record(
        model=spec.name,
        family=spec.family,
        task=spec.task,
        target=target.name,
        backends=list(target.backends),
        precision=target.precision.value,
        status=Status.LOWER_FAILED,
        input_shapes=[list(i.shape) for i in spec.inputs],
    )
    stage = on_stage or (lambda _name: None)
    timings = record.timings

    def timed(name: str, fn):
        stage(name)
        t0 = time.perf_counter()
        try:
            return fn()
        finally:
            timings[name] = round(time.perf_counter() - t0, 3)

    from .stages.capture import variant_key

    precision = target.precision
    pt2 = capture.variants.get(variant_key(primary.name, precision), capture.pt2_path)
    exported = timed("load", lambda: torch.export.load(pt2))
    example = tuple(torch.load(capture.reference_path, weights_only=True)["inputs"][0])

    try:
        plan = primary.plan(precision)
        exported = primary.prepare(exported, precision, example)
    except Exception as exc:
        return _failed(record, Status.LOWER_FAILED, exc, config)
    if pt2 != capture.pt2_path:
        record.quantization = {"scheme": f"{primary.name} {precision.value} (torchao, before capture)", "recipe": plan.recipe}
    if plan.quantizer is not None or plan.quantize is not None:
        try:
            batches, facts = calibration_set(spec, config)
            exported = timed("quantize", lambda: quantize(exported, plan, batches, example))
        except Exception as exc:
            return _failed(record, Status.QUANTIZE_FAILED, exc, config)
        record.quantization = {
            "scheme": f"{primary.name} PT2E {precision.value} "
            f"({'NNCF quantize_pt2e' if plan.quantize else type(plan.quantizer).__name__})",
            "recipe": plan.recipe,
            "calibration": facts,
        }

    try:
        edge = timed("lower", lambda: lower(exported, chain, precision, plan))
        delegation = delegation_of(edge.exported_program().graph_module)
        program = timed("serialize", lambda: edge.to_executorch(plan.executorch_config))
        data = bytes(program.buffer)
        delegation.delegates_in_program = program_delegates(program.executorch_program)
    except Exception as exc:
        return _failed(record, Status.LOWER_FAILED, exc, config)

    missing = _missing_delegate(
        chain, delegation.delegates_in_program, program_operators(program.executorch_program)
    )
    if missing:
        record.reason = missing
        record.fix = "try another backend for this model; nothing was written"
        return record

    # Proof: run on this host when every delegate in the program is registered here.
    blockers = run_blockers(chain, delegation.delegates_in_program, registered)
    needs_reference = (not blockers and config.verify) or config.bundle
    reference = torch.load(capture.reference_path, weights_only=True) if needs_reference else None
    verification = None
    if blockers:
        record.status, record.reason, record.fix = Status.NOT_RUNNABLE_HERE, blockers[0].reason, blockers[0].fix
    elif not config.verify:
        record.status, record.reason = Status.NOT_VERIFIED, "verification skipped (--no-verify)"
    else:
        try:
            stage("verify")
            t0 = time.perf_counter()
            actual = run_program(data, reference["inputs"] + reference.get("images", []))
            timings["verify"] = round(time.perf_counter() - t0, 3)
            n = len(reference["inputs"])
            actual, on_images = actual[:n], actual[n:]
        except Exception as exc:
            status = Status.LOAD_FAILED if "load" in str(exc).lower() else Status.RUN_FAILED
            return _failed(record, status, exc, config)
        runtime_precision = None
        for b in chain:
            if b.expected_delegate() in delegation.delegates_in_program:
                runtime_precision = runtime_precision or b.runtime_precision(target.precision)
        verification = verify_outputs(
            reference, actual, target.precision, runtime_precision, spec.task, config.tolerance
        )
        if on_images:
            verification.images = image_agreement(reference, on_images, spec.task)
        record.verification = verification
        if verification.passed:
            record.status = Status.VERIFIED
        else:
            record.status = Status.MISMATCH
            record.reason = (
                f"output differs from eager PyTorch: SQNR {verification.sqnr_db:.1f} dB < "
                f"{verification.threshold_sqnr_db:.1f} dB (max abs {verification.max_abs_error:.3g})"
            )
            record.fix = "kept as a .mismatch.pte for inspection; try another precision or backend"

    path = artifact_path(config.out_dir, spec, target, failed=record.status is Status.MISMATCH)
    from .io import write_atomic

    timed("write", lambda: write_atomic(path, data))
    if config.bundle and record.status is not Status.MISMATCH:
        bpte = path.with_suffix(".bpte")
        timed("bundle", lambda: write_atomic(bpte, bundled_program(program, reference)))
        record.bundle = {"file": str(bpte), "testsets": len(reference["inputs"])}
    record.artifact = Artifact(
        path=str(path),
        size=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
        delegation=delegation,
    )
    return record


def run_blockers(chain, delegates: list[str], registered: frozenset[str]) -> list:
    """Why a program of this chain cannot run here (empty: it can)."""
    checks = [
        b.run_check(registered)
        for b in chain
        if b.expected_delegate() in delegates or getattr(b, "ops_namespace", None)
    ]
    return [c for c in checks if not c.ok]


def bundled_program(program, reference: dict) -> bytes:
    """A BundledProgram: the program plus its verification inputs and eager outputs,
    so an app can self-test on the device."""
    from executorch.devtools import BundledProgram
    from executorch.devtools.bundled_program.config import MethodTestCase, MethodTestSuite
    from executorch.devtools.bundled_program.serialize import (
        serialize_from_bundled_program_to_flatbuffer,
    )

    cases = [
        MethodTestCase(inputs=list(inputs), expected_outputs=list(outputs))
        for inputs, outputs in zip(reference["inputs"], reference["outputs"])
    ]
    bundled = BundledProgram(program, [MethodTestSuite(method_name="forward", test_cases=cases)])
    return serialize_from_bundled_program_to_flatbuffer(bundled)


def _missing_delegate(chain, delegates: list[str], operators: list[str]) -> str | None:
    """The program must contain exactly the delegates its target names."""
    expected = {b.expected_delegate() for b in chain if b.expected_delegate()}
    stray = sorted(set(delegates) - expected)
    if stray:
        return f"the program contains delegates the target does not name: {', '.join(stray)}"
    primary = chain[0]
    if primary.expected_delegate() and primary.expected_delegate() not in delegates:
        return (
            f"{primary.name} took no part of the graph (no {primary.expected_delegate()} in the program); "
            "an undelegated file is not written under its name"
        )
    namespace = getattr(primary, "ops_namespace", None)
    if namespace and not any(op.startswith(f"{namespace}::") for op in operators):
        return f"{primary.name} rewrote no operator to {namespace}:: kernels"
    return None


def _failed(record: Record, status: Status, exc: BaseException, config: ExportConfig) -> Record:
    if config.debug:
        import traceback

        traceback.print_exception(exc)
    record.status = status
    record.reason = one_line(exc)
    return record

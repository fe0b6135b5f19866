"""One (model, target) from a capture to a verified artifact on disk.

``export_target`` takes and returns plain data (a Capture of file paths, frozen
specs, a Record), so it can run in this process or in a worker process.
"""

from __future__ import annotations

import hashlib
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from importlib.metadata import version
from pathlib import Path

from ..backends import default_registry, program_check
from ..backends.toolkit.rewrite import with_kernels_for
from ..core.errors import ModelError, one_line
from ..core.kernels import in_no_kernel_library
from ..core.result import Artifact, Record, Stage, Status, verdict
from ..core.spec import ExportConfig, JobConfig, ModelSpec, Target, artifact_path
from ..core.units import EXACT_DB, db_text, sqnr_text
from ..patches.executorch_patches import scalar_ops_on_constants_left_alone
from ..runtime.host import host, load_runtime
from ..runtime.pte import program_delegates, program_io, program_operators
from .accuracy import per_layer_once, what_to_try, where_it_breaks
from .capture import Capture, capture, variant_key
from .lower import fast_fx
from .verify import compare, degenerate, image_agreement, run_program, verify_outputs

StageCallback = Callable[[str], None]


@dataclass(frozen=True)
class Ending:
    """How a row ends: its status, and for any but a proven artifact why and what to do;
    ``cause``, the exception a step failed with (its traceback with --debug)."""

    status: Status
    reason: str | None = None
    fix: str | None = None
    cause: BaseException | None = None


MISMATCH_FIX = "kept as a .mismatch.pte for inspection; try another precision or backend"


# How much further from eager than its quantized program run by PyTorch a program may be
# and still owe its loss to quantizing: beyond it (4x the noise), the backend loses too.
BACKEND_LOSS_DB = 6.0


def whose_loss(program_db: float | None, in_pytorch_db: float, threshold_db: float) -> tuple[str, bool]:
    """What a quantized program's MISMATCH owes to quantizing and to the backend, from how
    far the program (``program_db``, its worst SQNR against eager; None where undefined) and
    its quantized program run by PyTorch (``in_pytorch_db``) are from eager, on the same
    inputs: (the words, whether the fix is about quantizing). Quantizing is blamed alone only
    where PyTorch's run misses the threshold too and the program is within
    ``BACKEND_LOSS_DB`` of it: a Cortex-M ShuffleNet V2 at -25.1 dB beside 9.6 dB in PyTorch
    lost 35 dB in its lowering (a ReLU the Cortex-M passes could not fuse)."""
    if in_pytorch_db >= EXACT_DB:  # nothing it computes differs: no loss of quantizing's to weigh
        return "the quantized program run by PyTorch gives eager's outputs: the backend's lowering or kernels lose it", False
    quantized = f"the quantized program run by PyTorch is {db_text(in_pytorch_db)} from eager"
    if program_db is not None and program_db < in_pytorch_db - BACKEND_LOSS_DB:
        beyond = f"this program {db_text(in_pytorch_db - program_db)} further"
        if in_pytorch_db < threshold_db:
            return f"{quantized} and {beyond}: quantizing loses some, and the backend's lowering or kernels more", False
        return f"{quantized}, {beyond}: the backend's lowering or kernels lose the rest", False
    if in_pytorch_db < threshold_db:
        return f"{quantized} too: quantizing loses it, not the backend", True
    return f"{quantized}: the backend's lowering or kernels lose the rest", False


class StageFailed(Exception):
    """A step failed: the row ends in ``status`` with ``cause`` as its reason."""

    def __init__(self, status: Status, cause: BaseException):
        super().__init__(str(cause))
        self.status, self.cause = status, cause


def export_target(
    capture: Capture,
    spec: ModelSpec,
    target: Target,
    config: ExportConfig | JobConfig,
    here=None,
    on_stage: StageCallback | None = None,
    steps: "type[Steps] | None" = None,
) -> Record:
    """Quantize (when the precision asks), lower, prove and write one (model, target), with
    ``steps`` (the model family's: :class:`Steps` unless its family has its own)."""
    if here is None:
        from ..runtime.host import host

        here = host()
    job = (steps or Steps)(capture, spec, target, config, on_stage or (lambda _name: None))
    with fast_fx(), scalar_ops_on_constants_left_alone():  # quantizers' and lowerings' passes alike
        return _export(job, here)


def _export(job: "Steps", here) -> Record:
    """The one sequence every (model, target) goes through, and the one place its row ends."""
    try:
        ending = _steps(job, here)
    except StageFailed as failed:
        ending = Ending(failed.status, one_line(failed.cause), _fix_for(job, failed), failed.cause)
    finally:
        if job.staged is not None:
            job.staged.unlink(missing_ok=True)  # proven from a file that did not take the artifact's name
    if job.config.debug and ending.cause is not None:
        import traceback

        traceback.print_exception(ending.cause)
    job.record.status, job.record.reason, job.record.fix = ending.status, ending.reason, ending.fix
    return job.record


def _steps(job: "Steps", here) -> "Ending":
    unsupported = job.unsupported()
    if unsupported:
        return Ending(Status.UNAVAILABLE, *unsupported)
    exported, plan, example = job.load()
    exported = job.quantize(exported, plan, example)
    program, data, delegation = job.lower(exported, plan)
    if in_no_kernel_library(delegation.kernels, here.operators):
        try:  # the same values in operators a kernel library has (no sort kernel: a topk of all)
            rewritten = with_kernels_for(exported, delegation.kernels)
        except Exception:  # noqa: BLE001 - the rewrite's tracing failed: the row says what kernel is missing
            rewritten = None
        if rewritten is not None:
            program, data, delegation = job.lower(rewritten, plan)
    missing = _missing_delegate(job.chain, delegation.delegates_in_program, delegation.kernels)
    if missing:
        return Ending(Status.LOWER_FAILED, missing, "try another backend for this model; nothing was written" if not job.half
                      else f"the model computes in {job.half}, which {job.primary.name} took no part of: export it in "
                           "fp32 (model.float(), --input-dtype float32), or try another backend; nothing was written")
    nowhere = in_no_kernel_library(delegation.kernels, here.operators)
    if nowhere:
        return Ending(Status.LOWER_FAILED, nowhere[0], f"{nowhere[1]}; nothing was written")
    ending, reference = job.prove(program, data, delegation, here)
    job.write(program, data, delegation, reference, failed=ending.status is Status.MISMATCH)
    return ending


def _fix_for(job: "Steps", failed: "StageFailed") -> str | None:
    """What to do about a failed stage, when pteforge can tell from what failed."""
    if isinstance(failed.cause, ModelError) and failed.cause.fix:  # pteforge's own account of the failure
        return failed.cause.fix
    if failed.status is Status.RUN_FAILED and getattr(failed.cause, "plain", False):  # backends/toolkit/simulate.py
        return (f"the program fails on {job.primary.simulated_on} as it stands: try another backend or precision; "
                "nothing was written")
    if job.target.precision.quantized and job.half:
        return (f"the model computes in {job.half}, and quantizers calibrate fp32 programs: export it in "
                "fp32 for integer precisions (model.float(), --input-dtype float32)")
    if "Missing out variants" in str(failed.cause):
        return ("a custom operator reaches ExecuTorch only with an out variant and a kernel the runtime "
                "links (ExecuTorch's kernel registration guide), or a backend that delegates it")
    said = getattr(failed.cause, "runtime_account", None)
    if said and said.operator:
        refused = "does not take these inputs" if said.code == 0x12 else "failed on this program"
        return (f"ExecuTorch's kernel for {said.operator} {refused}: try a backend that delegates "
                "that operator, or change that part of the model; nothing was written")
    if said and said.delegate:
        return (f"{said.delegate} refused, when loading it, the program ExecuTorch lowered for it (a "
                f"lowering defect, not the model's): try {job.primary.name} at another precision, or "
                "another backend; nothing was written")
    if failed.status is Status.QUANTIZE_FAILED:
        precision = job.target.precision.value
        return (f"{job.primary.name}'s {precision} quantizer failed on this model: export {job.primary.name} at fp32, "
                f"or another backend at {precision}; --debug shows where it failed")
    if job.half and failed.status is Status.LOWER_FAILED:
        return (f"the model computes in {job.half}, which {job.primary.name} failed to lower: export it in "
                "fp32 (model.float(), --input-dtype float32), or try another backend")
    if failed.status is Status.LOWER_FAILED:  # a pass of the backend's own failed on this graph
        other = f" or {job.primary.name} at another precision," if len(job.primary.precisions) > 1 else ""
        return (f"try another backend{other} for this model; --debug shows where {job.primary.name}'s lowering "
                "failed; nothing was written")
    return None


class Steps:
    """The steps of one (model, target), sharing its record and stage timer: those of image,
    audio and imported models. A family with steps of its own (text generation: ``llm.py``)
    subclasses this and overrides the steps that differ; :func:`_export` runs them all."""

    # the class's: the step that makes the model's one capture, in its own job; an instance's:
    # that Capture (__init__). One name for the two: Any.
    capture: Any = staticmethod(capture)

    def __init__(self, capture: Capture, spec: ModelSpec, target: Target, config: ExportConfig | JobConfig, stage):
        registry = default_registry()
        self.capture, self.spec, self.target, self.config, self.stage = capture, spec, target, config, stage
        self.chain = [registry.get(name) for name in target.backends]
        self.half: str | None = None  # the captured program's float dtype, when all of it is float16 or bfloat16
        self.quantized: Any = None  # the quantized program (torch's ExportedProgram), when the target quantizes
        self.fp32: Any = None  # the captured program as loaded (load): its inputs' names are the model's
        self.primary = self.chain[0]
        self.staged: Path | None = None  # where the program was written to be proven, until it takes its name
        self.record = Record(
            model=spec.name, family=spec.family, task=spec.task, target=target.name, backends=list(target.backends),
            precision=target.precision.value, status=Status.LOWER_FAILED,
            input_shapes=[list(i.shape) for i in spec.fed], target_spec=target,
            caution=self.primary.caution(target.precision),
        )

    def unsupported(self) -> tuple[str, str] | None:
        """(reason, fix) when the family does not export to this target at all (UNAVAILABLE)."""
        return None

    def timed(self, name: Stage, fn):
        self.stage(name)
        t0 = time.perf_counter()
        try:
            return fn()
        finally:
            self.record.timings[name.value] = round(time.perf_counter() - t0, 3)

    def load(self):
        import torch

        from ..models.factory import import_for_capture
        from ..stages import memo

        precision = self.target.precision
        pt2 = self.capture.variants.get(variant_key(self.primary.name, precision), self.capture.pt2_path)
        import_for_capture(self.spec)  # a worker that did not capture it loads its custom operators too
        exported = self.timed(Stage.LOAD, lambda: memo.load(pt2, _file_identity(pt2)))
        self.fp32 = exported  # what a quantized program is held against, layer by layer
        self.half = _half_floats(exported)
        example = tuple(torch.load(self.capture.reference_path, weights_only=True)["inputs"][0])
        try:
            if precision not in self.primary.precisions:
                raise ValueError(f"{self.primary.name} takes {precision.value} for language models only (--gemma, --llm)")
            plan = self.primary.plan(precision)
            exported = memo.tag(self.primary.prepare(exported, precision, example), memo.source_of(exported))
        except Exception as exc:
            raise StageFailed(Status.LOWER_FAILED, exc) from exc
        if pt2 != self.capture.pt2_path:
            self.record.quantization = {"scheme": f"{self.primary.name} {precision.value} (torchao, before capture)",
                                        "recipe": plan.recipe}
        return exported, plan, example

    def quantize(self, exported, plan, example):
        from .quantize import (NothingQuantized, calibration_set, quantize_shared, quantized_share, quantizes_nothing,
                               unset_scales)

        if plan.quantizer is None and plan.quantize is None:
            return exported
        shared = Path(self.capture.pt2_path).parent / "quantized" if self.capture.share_quantized else None
        try:
            batches, facts = calibration_set(self.spec, self.config, self.target.precision)
            exported, key = self.timed(Stage.QUANTIZE, lambda: quantize_shared(exported, plan, batches, example, shared))
        except Exception as exc:
            raise StageFailed(Status.QUANTIZE_FAILED, exc) from exc
        how = "NNCF quantize_pt2e" if plan.quantize else type(plan.quantizer).__name__
        if quantizes_nothing(exported):
            precision = self.target.precision.value
            raise StageFailed(Status.QUANTIZE_FAILED, NothingQuantized(
                f"{how} quantized none of this model's operators: its {precision} program would compute in fp32",
                fix=f"export {self.primary.name} at fp32 (the same program, under its true name), or a backend "
                    f"whose {precision} quantizer takes this model's operators; nothing was written"))
        self.quantized = exported
        self.record.quantization = {"scheme": f"{self.primary.name} PT2E {self.target.precision.value} ({how})",
                                    "recipe": plan.recipe}
        unset = unset_scales(exported)
        if unset is None:
            self.record.quantization["calibration"] = facts
        else:  # its calibration runs set nothing: saying "calibrated on" would send someone after real data
            self.record.quantization["activations"] = unset
        self.record.quantization["operators"] = quantized_share(exported)
        if key:  # the prepared program's fingerprint: targets with the same one share its quantization
            self.record.quantization["prepared_program"] = key
        return exported

    def lower(self, exported, plan):
        from .lower import delegation_of, lower

        try:
            edge = self.timed(Stage.LOWER, lambda: lower(exported, self.chain, self.target.precision, plan, self.config.fallback))
            delegation = delegation_of(edge.exported_program().graph_module)
            delegation.decomposed_instead = getattr(edge, "decomposed_instead", [])
            delegation.left_out = getattr(edge, "left_out", [])
            program = self.timed(Stage.SERIALIZE, lambda: edge.to_executorch(plan.executorch_config))
            delegation.delegates_in_program = program_delegates(program.executorch_program)
            delegation.kernels = sorted(set(program_operators(program.executorch_program)))
            data = bytes(program.buffer)
        except Exception as exc:
            raise StageFailed(Status.LOWER_FAILED, exc) from exc
        if self.primary.runtime_name in delegation.delegates_in_program:
            from ..backends.toolkit.simulate import delegate_payloads

            self.record.estimates = self.primary.estimates(delegate_payloads(program.executorch_program,
                                                                              self.primary.runtime_name))
        return program, data, delegation

    def prove(self, program, data: bytes, delegation, here) -> tuple[Ending, dict | None]:
        """Run on this host when every delegate and kernel the program calls is here, or
        else on the target's reference simulator when it has one, and compare with eager;
        returns how the row ends, and the eager reference when it was loaded."""
        import torch

        from ..backends.toolkit.simulate import simulators_for

        config = self.config
        runnable = program_check(here, delegation.delegates_in_program, delegation.kernels)
        simulators = (None if runnable.ok or not (config.verify and config.simulate)
                      else simulators_for(self.chain, program.executorch_program))
        needs_reference = ((runnable.ok or simulators is not None) and config.verify) or config.bundle
        reference = torch.load(self.capture.reference_path, weights_only=True) if needs_reference else None
        ending = self.unproven(runnable, simulators is not None)
        if ending is None:
            assert reference is not None  # run (or simulated) and verified: loaded above
            ending = self._verify(data, delegation, reference, simulators)
        return ending, reference

    def unproven(self, runnable, simulated: bool = False) -> Ending | None:
        """How the row ends when the program is not to be run: nothing here runs it (and no
        simulator does), or --no-verify."""
        if not runnable.ok and not simulated:
            return Ending(runnable.not_here, runnable.reason, runnable.fix)
        if not self.config.verify:
            return Ending(Status.NOT_VERIFIED, "verification skipped (--no-verify)")
        return None

    def _run(self, data: bytes, reference: dict, simulators) -> tuple[list, str]:
        """The program's outputs on the verification inputs and photos, and what ran it."""
        from ..backends.toolkit.simulate import simulate

        inputs = reference["inputs"] + reference.get("images", [])
        if simulators is not None:
            try:
                done = self.timed(Stage.SIMULATE, lambda: simulate(
                    data, inputs, simulators, host().operators,  # this runtime's kernels, whatever ``here`` is
                    progress=lambda i, n: self.stage(f"{Stage.SIMULATE.value} input {i} of {n}"), runtime=load_runtime()))
            except Exception as exc:
                raise StageFailed(Status.RUN_FAILED, exc) from exc
            return done.outputs, done.method
        try:
            actual = self.timed(Stage.VERIFY, lambda: run_program(
                data, inputs, progress=lambda i, n: self.stage(f"{Stage.VERIFY.value} input {i} of {n}")))
        except Exception as exc:
            loading = getattr(exc, "stage", None) == "load"  # run_program says where it failed
            raise StageFailed(Status.LOAD_FAILED if loading else Status.RUN_FAILED, exc) from exc
        return actual, f"this host's ExecuTorch runtime (executorch {_executorch_version()})"

    def _verify(self, data: bytes, delegation, reference: dict, simulators=None) -> Ending:
        actual, method = self._run(data, reference, simulators)
        n = len(reference["inputs"])
        actual, on_images = actual[:n], actual[n:]
        computed = next((b.runtime_precision(self.target.precision) for b in self.chain
                         if b.expected_delegate() in delegation.delegates_in_program
                         and b.runtime_precision(self.target.precision)), None) or self.spec.quantized
        v = verify_outputs(reference, actual, self.target.precision, computed, self.spec.task, self.config.tolerance)
        if on_images:
            v.images = image_agreement(reference, on_images, self.spec)
            on_photos = degenerate(reference["image_outputs"], on_images,
                                   [f"photo {n}" for n in reference.get("image_names", [])] or None)
            if on_photos and not v.degenerate:
                v.passed, v.sqnr_db, v.degenerate, v.model_fault = False, None, on_photos[1], on_photos[0] == "eager"
        v.method, v.simulator = method, self.primary.simulated_on if simulators is not None else None
        self.record.verification = v
        if self.quantized is not None:
            self.record.accuracy = self._layers(reference)
        if not v.passed:
            return self._mismatch(v, reference)
        # ran and matched; the accuracy budget (a run option, not the artifact's) is judged by
        # the run on every row, fresh or from the cache (core.result.settle)
        return Ending(verdict("simulator" if simulators is not None else "host", True, None))

    def _mismatch(self, v, reference: dict) -> Ending:
        """Why the program's outputs are not eager's, and what to do."""
        if v.degenerate:
            return Ending(Status.MISMATCH, v.degenerate, MISMATCH_FIX if not v.model_fault else (
                "check the model on these inputs (NaN in its weights, a log or division of 0, an overflow): no "
                "lowering can be judged against it; the program is kept as a .mismatch.pte"))
        original = "ONNX Runtime on the file" if self.spec.source == "onnx" else "eager PyTorch"
        reason = (f"output differs from {original}: NaN or infinity in one of them where the other has a number"
                  if math.isinf(v.max_abs_error) else
                  f"output differs from {original}: its output is all zeros where the program's is not "
                  f"(max abs {v.max_abs_error:.3g})" if v.sqnr_db is None else
                  f"output differs from {original}: {sqnr_text(v.sqnr_db)} < "
                  f"{v.threshold_sqnr_db:.1f} dB (max abs {v.max_abs_error:.3g})")
        in_pytorch = self._quantized_in_pytorch(reference) if self.quantized is not None else None
        if in_pytorch is None:
            return Ending(Status.MISMATCH, reason, MISMATCH_FIX)
        said, quantizing = whose_loss(v.sqnr_db, in_pytorch, v.threshold_sqnr_db)
        fix = MISMATCH_FIX if not quantizing else "kept as a .mismatch.pte for inspection; " + (
            "calibrate on real inputs (--calibration DIR, more --calibration-samples) or choose a higher precision"
            if (self.record.quantization or {}).get("calibration") else "choose a higher precision")
        return Ending(Status.MISMATCH, f"{reason}; {said}", fix)

    def _layers(self, reference: dict) -> dict:
        """Where the quantized program loses against fp32, layer by layer, on the photos (or
        the verification inputs): the layers that lose most, by eager module, and what to
        try (stages/accuracy.py). A diagnosis only: when it fails, it says why."""
        from . import memo

        photos = reference.get("images") or []
        inputs = [tuple(x) for x in (photos or reference["inputs"])][:2]  # two: the order of the layers is clear by then
        on = f"{len(inputs)} photo(s)" if photos else f"{len(inputs)} verification input(s)"
        try:
            rows = per_layer_once(self.fp32, self.quantized, inputs,
                                  (memo.source_of(self.fp32), memo.source_of(self.quantized)))
        except Exception as exc:  # noqa: BLE001 - the row stands without it
            return {"on": on, "error": one_line(exc, 200)}
        worst = where_it_breaks(rows)
        calibration = (self.record.quantization or {}).get("calibration")
        return {"on": on, "layers": len(rows), "worst": worst,
                "try": what_to_try(worst, calibration, self.primary.name,
                                   [p.value for p in self.primary.precisions if p.value in ("int8-dynamic", "fp16", "fp32")])}

    def _quantized_in_pytorch(self, reference: dict) -> float | None:
        """How far the quantized program, run by PyTorch on the verification inputs, is
        from eager (worst SQNR): whether a MISMATCH is the precision's or the backend's
        (maxvit_t at int8 on random weights: 3.5 dB in PyTorch, 3.6 dB on XNNPACK)."""
        import torch


        try:
            module = self.quantized.module()
            with torch.no_grad():
                outputs = [[t for t in torch.utils._pytree.tree_leaves(module(*inputs)) if isinstance(t, torch.Tensor)]
                           for inputs in reference["inputs"]]
            return min(compare(e, a)["sqnr"] for e, a in zip(reference["outputs"], outputs))
        except Exception:  # noqa: BLE001 - a diagnosis only: the row stands without it
            return None

    def write(self, program, data: bytes, delegation, reference: dict | None, failed: bool = False) -> None:
        """The program under its name (``failed``: its proof did not pass), and its bundle."""
        from ..core.io import write_atomic

        record = self.record
        path = artifact_path(self.config.out_dir, self.spec, self.target, failed=failed)
        if self.staged is not None:  # proven from its file: that file takes the name the proof gives it
            os.replace(self.staged, path)
            self.staged = None
        else:
            self.timed(Stage.WRITE, lambda: write_atomic(path, data))
        if self.config.bundle and reference is not None and not failed:
            bpte = path.with_suffix(".bpte")
            self.timed(Stage.BUNDLE, lambda: write_atomic(bpte, bundled_program(program, reference)))
            record.bundle = {"file": str(bpte), "testsets": len(reference["inputs"])}
        named = [i.name or "" for i in self.spec.fed] if self.spec.source == "onnx" else None  # the file's own names
        io = program_io(program.executorch_program, program.exported_program(), inputs_from=self.fp32, names=named)
        for given, fed in zip(io["inputs"] if io else [], self.spec.fed):
            if fed.high:
                given["high"] = fed.high  # what its seeded ids are drawn below: bench and validate draw the same
        record.artifact = Artifact(path=str(path), size=len(data), sha256=hashlib.sha256(data).hexdigest(),
                                   delegation=delegation, io=io)


def _executorch_version() -> str:
    return version("executorch")


def _file_identity(path) -> str:
    """Where a program was loaded from, as the steps shared in a worker know it (stages/memo.py)."""
    st = Path(path).stat()
    return f"file {Path(path).resolve()} {st.st_size} {st.st_mtime_ns}"


def bundled_program(program, reference: dict) -> bytes:
    """A BundledProgram: the program plus its verification inputs and eager outputs,
    so an app can self-test on the device."""
    from executorch.devtools import BundledProgram
    from executorch.devtools.bundled_program.config import (
        MethodTestCase,
        MethodTestSuite,
    )
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
    namespace = primary.ops_namespace
    if namespace and not any(op.startswith(f"{namespace}::") for op in operators):
        return f"{primary.name} rewrote no operator to {namespace}:: kernels"
    return None


def _half_floats(exported) -> str | None:
    """'float16' or 'bfloat16' when every floating-point weight and input of ``exported`` is one."""
    import torch

    values = [*exported.state_dict.values(), *exported.constants.values(),
              *(n.meta.get("val") for n in exported.graph.nodes if n.op == "placeholder")]
    floats = {v.dtype for v in values if isinstance(v, torch.Tensor) and v.dtype.is_floating_point}
    return str(floats.pop()).replace("torch.", "") if floats in ({torch.float16}, {torch.bfloat16}) else None

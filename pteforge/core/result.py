"""What comes out of a run: per-stage status and the numbers, as plain dataclasses.

A :class:`Record` is one row per (model, target). Records are the single source
for the manifest, the terminal summary and every report.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from dataclasses import asdict as _asdict
from typing import TYPE_CHECKING, Any

from .spec import AccuracyBudget
from .units import pct, pct_below

if TYPE_CHECKING:  # pragma: no cover
    from .spec import AccuracyBudget, Target


@dataclass(frozen=True)
class Check:
    """A yes or no, why, and (for a no) what to do: can a backend lower here, can a program run here."""

    ok: bool
    reason: str
    fix: str | None = None
    anywhere: bool = True  # for a program that does not run here: whether any runtime could run it

    @property
    def not_here(self) -> "Status":
        """How a row whose program does not run here ends: it needs a device, or (no runtime
        has what it calls) it cannot load anywhere."""
        return Status.NOT_RUNNABLE_HERE if self.anywhere else Status.LOAD_FAILED

    def one_line(self) -> str:
        return self.reason if self.ok or not self.fix else f"{self.reason} — {self.fix}"


@dataclass
class Unavailable:
    """A target that cannot lower on this host, and why (a row of its own in the summary)."""

    target: str
    check: Check
    requested: bool = True  # named by the user (False: implied by --target PLATFORM)


class Status(str, enum.Enum):
    """Where a (model, target) row ended. VERIFIED: proven on this host's ExecuTorch runtime;
    SIMULATED: proven on the target's reference simulator (backends/toolkit/simulate.py); OUT_OF_BUDGET:
    ran and matched its program's tolerance, but misses its accuracy budget (not proven, not
    offered to the app). :func:`verdict` is the one place a row that ran gets one of these."""

    UNAVAILABLE = "UNAVAILABLE"
    CAPTURE_FAILED = "CAPTURE_FAILED"
    QUANTIZE_FAILED = "QUANTIZE_FAILED"
    LOWER_FAILED = "LOWER_FAILED"
    WRITE_FAILED = "WRITE_FAILED"
    LOAD_FAILED = "LOAD_FAILED"
    RUN_FAILED = "RUN_FAILED"
    MISMATCH = "MISMATCH"
    OUT_OF_BUDGET = "OUT_OF_BUDGET"  # ran and matched, but below its accuracy budget
    NOT_RUNNABLE_HERE = "NOT_RUNNABLE_HERE"
    NOT_VERIFIED = "NOT_VERIFIED"  # exported; verification skipped (--no-verify)
    SIMULATED = "SIMULATED"  # ran on the target's reference simulator and matched eager
    VERIFIED = "VERIFIED"

    @property
    def exported(self) -> bool:
        """An artifact exists on disk for this row."""
        return self in (
            Status.LOAD_FAILED,
            Status.RUN_FAILED,
            Status.MISMATCH,
            Status.OUT_OF_BUDGET,
            Status.NOT_RUNNABLE_HERE,
            Status.NOT_VERIFIED,
            Status.SIMULATED,
            Status.VERIFIED,
        )

    @property
    def ok(self) -> bool:
        """The target succeeded: exported and not proven wrong (an OUT_OF_BUDGET row is not
        wrong, it is not good enough: written, never proven, never offered to the app
        unless asked for with --offer-out-of-budget)."""
        return self in (Status.VERIFIED, Status.SIMULATED, Status.NOT_RUNNABLE_HERE, Status.NOT_VERIFIED,
                        Status.OUT_OF_BUDGET)

    @property
    def offered(self) -> bool:
        """The app is offered it by default: exported, and neither wrong nor below its budget."""
        return self.ok and self is not Status.OUT_OF_BUDGET

    @property
    def proven(self) -> bool:
        """Its outputs matched eager: on this host, or on the target's reference simulator."""
        return self in (Status.VERIFIED, Status.SIMULATED)


class Stage(str, enum.Enum):
    """The steps of a run. A value is the key of its time in ``Record.timings``; each stage
    knows its progress words, the status a row ends in when its worker dies there, and
    whether the report's export-time plot shows it."""

    BUILD = "model_build"  # the eager model (once per model)
    CAPTURE = "model_capture"  # torch.export (once per model)
    REFERENCE = "model_reference"  # eager outputs on the verification inputs and photos
    CAPTURE_VARIANTS = "model_capture_variants"  # captures after a backend's source transform
    LOAD = "load"
    QUANTIZE = "quantize"
    LOWER = "lower"
    SERIALIZE = "serialize"
    VERIFY = "verify"
    SIMULATE = "simulate"  # on the target's reference simulator, where this host cannot run it
    WRITE = "write"
    BUNDLE = "bundle"
    TIMING = "timing"  # p50 of what runs here, after the exports
    ARM64 = "arm64"  # --prove-on arm64: every XNNPACK and portable program again, under emulation, after the exports

    @property
    def words(self) -> str:
        return _STAGE_WORDS[self]

    @property
    def crash_status(self) -> Status:
        return _CRASH_STATUS.get(self, Status.LOWER_FAILED)

    @property
    def plotted(self) -> bool:
        return self in (Stage.BUILD, Stage.CAPTURE, Stage.QUANTIZE, Stage.LOWER, Stage.SERIALIZE, Stage.VERIFY,
                        Stage.SIMULATE, Stage.WRITE)


_STAGE_WORDS = {
    Stage.BUILD: "building the model", Stage.CAPTURE: "building and capturing (torch.export)",
    Stage.REFERENCE: "computing eager reference outputs", Stage.CAPTURE_VARIANTS: "capturing transformed variants",
    Stage.LOAD: "loading the capture", Stage.QUANTIZE: "quantizing (PT2E, calibrating)", Stage.LOWER: "lowering",
    Stage.SERIALIZE: "serializing", Stage.VERIFY: "verifying on this host against eager PyTorch",
    Stage.SIMULATE: "running on the target's reference simulator against eager PyTorch", Stage.WRITE: "writing",
    Stage.BUNDLE: "writing the bundled program", Stage.TIMING: "timing what runs here (p50 after warm-up)",
    Stage.ARM64: "proving on Arm64 under emulation (one emulated process for every program)",
}
# The status a row ends in when its worker dies during a stage (LOWER_FAILED otherwise).
_CRASH_STATUS = {
    Stage.QUANTIZE: Status.QUANTIZE_FAILED, Stage.VERIFY: Status.RUN_FAILED, Stage.SIMULATE: Status.RUN_FAILED,
    Stage.WRITE: Status.WRITE_FAILED, Stage.BUNDLE: Status.WRITE_FAILED,
}


@dataclass
class OpCount:
    op: str
    count: int


@dataclass
class Delegation:
    """How much of the graph each backend took; what stayed on the portable kernels."""

    total_nodes: int
    delegated_nodes: int
    nodes_per_backend: dict[str, int]  # runtime backend id -> nodes
    subgraphs_per_backend: dict[str, int]
    portable_ops: list[OpCount]  # non-delegated ops with counts, most frequent first
    delegates_in_program: list[str]  # backend ids recorded in the .pte, in order
    kernels: list[str] = field(default_factory=list)  # operators the program calls outside delegates
    # Evidence of the precision in the lowered graphs (delegated subgraphs included):
    # {"quantize_ops": n, "fp16_nodes": m}
    precision_ops: dict[str, int] = field(default_factory=dict)
    # Operators a partitioner keeps whole that were decomposed instead, because lowering
    # them whole failed upstream (stages/lower.py), e.g. ["aten.pixel_shuffle.default"]
    decomposed_instead: list[str] = field(default_factory=list)
    # Parts of a partition left to the portable kernels because a backend's own pass crashed
    # on them (stages/fallback.py): [{"partitioner": backend, "nodes": [...], "error": "..."}]
    left_out: list[dict[str, Any]] = field(default_factory=list)

    @property
    def percent(self) -> float:
        return 100.0 * self.delegated_nodes / self.total_nodes if self.total_nodes else 0.0

    def to_dict(self) -> dict:
        d = asdict(self)
        d["percent"] = round(self.percent, 2)
        return d


@dataclass
class Verification:
    """Host-runtime outputs against the eager model on the same inputs."""

    inputs: int
    max_abs_error: float
    mean_abs_error: float
    sqnr_db: float | None  # worst over inputs and outputs; None where undefined (NaN, infinity)
    cosine: float  # worst over inputs and outputs
    top1_agreement: float | None = None  # classifiers only: fraction of inputs
    top5_agreement: float | None = None
    threshold_sqnr_db: float = 0.0
    passed: bool = False
    runtime_precision: str | None = None  # what the backend really computed in, when known
    # Agreement with eager fp32 on the validation photos (image models):
    # {"images", "names", "sqnr_db", "cosine", "top1_agreement"}
    images: dict[str, Any] | None = None
    # outputs no SQNR can judge (stages.verify.degenerate): why, and whether the model itself is at fault
    degenerate: str | None = None
    model_fault: bool = False
    warning: str | None = None  # e.g. eager's output is the same on every input
    # the fraction of the integer and boolean outputs' values (class ids, indices, masks)
    # equal to eager's; None where the model has none. No SQNR says that a class id is wrong
    integer_agreement: float | None = None
    # what ran the program: this host's ExecuTorch runtime, or the reference simulator and
    # what exactly it ran (backends/toolkit/simulate.py)
    method: str | None = None
    simulator: str | None = None  # SIMULATED: the reference simulator, in a few words
    # where the inputs came from when they are the user's own (samples.py), not seeded
    inputs_from: str | None = None
    # the accuracy budget the row was judged by ({"top1", "boxes", "sqnr"}: AccuracyBudget),
    # and what of it the row missed (None: within it); validate judges by the same one
    budget: dict[str, Any] | None = None
    budget_missed: str | None = None


@dataclass
class Artifact:
    """A written ``.pte`` and the facts read from it."""

    path: str
    size: int
    sha256: str
    delegation: Delegation
    # what its forward takes and returns, in order (pte.program_io): {"inputs": [...], "outputs": [...]}
    io: dict[str, Any] | None = None


@dataclass
class Record:
    model: str
    family: str
    task: str
    target: str
    backends: list[str]
    precision: str
    status: Status
    reason: str | None = None  # one line: why it failed, or why not runnable here
    fix: str | None = None
    artifact: Artifact | None = None
    verification: Verification | None = None
    timings: dict[str, float] = field(default_factory=dict)  # stage -> seconds
    quantization: dict[str, Any] | None = None  # calibration facts for quantized targets
    bundle: dict[str, Any] | None = None  # {"file": ..., "testsets": n} when a .bpte was written
    input_shapes: list[list[int]] = field(default_factory=list)
    # Reduced precision against the fp32 artifact of the same chain:
    # {"fp32": name, "size": ratio, "latency": ratio, "p50_ms", "fp32_p50_ms"}
    relative: dict[str, Any] | None = None
    latency: dict[str, Any] | None = None  # bench numbers when the run timed this artifact
    auto_group: str | None = None  # the backend whose precision --precision auto chooses
    target_spec: "Target | None" = None  # the typed target ``target`` names
    cache: dict[str, Any] | None = None  # {"hit": true, "key", "created", "original_seconds"} when restored from the cache
    same_program_as: str | None = None  # the target whose lowering made this very program (lowered once)
    # text generation: maxSeqLen, vocabSize, bosId, eosIds, tokenizer, and the proof
    # (greedy tokens against eager, logits SQNR per step, perplexity, tokens/s, load, peak RSS)
    generation: dict[str, Any] | None = None
    caution: str | None = None  # what devices are known to do with such a program (the backend's caution())
    # the target compiler's own estimates (Vela: cycles and time at its clock, SRAM, flash): not measured
    estimates: dict[str, Any] | None = None
    # a quantized program against fp32, layer by layer (stages/accuracy.py): {"on", "layers",
    # "worst": [{"module", "type", "op", "sqnr_db", "drop_db"}], "try": [...]}
    accuracy: dict[str, Any] | None = None
    # export --prove-on arm64: the program run again by ExecuTorch's aarch64 runtime under
    # emulation, judged as the host's verification is (run/arm64_proof.py): {"status", "method",
    # "features", "sqnr_db", "top1_agreement", "vs_host_sqnr_db", "reason", "fix", ...}
    arm64: dict[str, Any] | None = None

    @property
    def arm64_failed(self) -> bool:
        """Proven wrong (or not run) on Arm64 under emulation, where the proof was asked for."""
        return bool(self.arm64 and self.arm64["status"] in (Status.MISMATCH.value, Status.RUN_FAILED.value,
                                                             Status.LOAD_FAILED.value))


def proof_counts(records: Iterable[Any]) -> str:
    """How a run's rows were proven, in words: "4 proven (3 on this host, 1 on a reference
    simulator), 3 out of their accuracy budget, 3 need a device". Only VERIFIED and SIMULATED
    rows count as proven."""
    statuses = [Status(r.status) for r in records]  # records, manifest entries or validated files
    host, simulated = statuses.count(Status.VERIFIED), statuses.count(Status.SIMULATED)
    device, unchecked = statuses.count(Status.NOT_RUNNABLE_HERE), statuses.count(Status.NOT_VERIFIED)
    below = statuses.count(Status.OUT_OF_BUDGET)
    where = [f"{host} on this host"] if host else []
    where += [f"{simulated} on reference simulators" if simulated != 1 else "1 on a reference simulator"] if simulated else []
    parts = [f"{host + simulated} proven" + (f" ({', '.join(where)})" if host and simulated else
                                             " on this host" if host else
                                             " on reference simulators" if simulated > 1 else
                                             " on a reference simulator" if simulated else "")]
    parts += [f"{below} out of {'its' if below == 1 else 'their'} accuracy budget (not proven)"] if below else []
    parts += [f"{device} need{'s' if device == 1 else ''} a device"] if device else []
    parts += [f"{unchecked} not verified"] if unchecked else []
    return ", ".join(parts)


def ran_here(record: Record) -> bool:
    """It ran on this host's runtime and matched (proven or only below its budget): what can
    be timed here and measured against fp32."""
    v = record.verification
    return record.status in (Status.VERIFIED, Status.OUT_OF_BUDGET) and not (v is not None and v.simulator)


def verdict(ran_on: str | None, matched: bool, missed: str | None) -> Status:
    """The one verdict of a program that ran (export, validate, the cache's restore): on
    ``ran_on`` (``"host"``: this host's runtime, ``"simulator"``: the target's reference
    simulator), whether its outputs ``matched`` eager within its precision's tolerance, and
    what of its accuracy budget it ``missed`` (None: within it). Proven = ran + matched +
    within budget; a row below its budget is OUT_OF_BUDGET, never proven."""
    if not matched:
        return Status.MISMATCH
    if missed:
        return Status.OUT_OF_BUDGET
    return Status.SIMULATED if ran_on == "simulator" else Status.VERIFIED


def measures(v: Any) -> tuple[float | None, float | None, float | None]:
    """(top-1 agreement, boxes matched, SQNR) a budget judges, from a verification (the
    dataclass or its dict): on the validation photos where they ran, else on the
    verification inputs."""
    get = (lambda k: v.get(k)) if isinstance(v, dict) else (lambda k: getattr(v, k, None))
    images = get("images") or {}
    top1 = images.get("top1_agreement", get("top1_agreement"))
    sqnr = images.get("sqnr_db") if images.get("sqnr_db") is not None else get("sqnr_db")
    return top1, images.get("boxes_matched"), sqnr


def budget_missed(task: str, v: Any, budget: AccuracyBudget | None = None) -> str | None:
    """What of ``budget`` (else its task's) a run program misses, in words, or None. A part
    of the budget nothing measured (no photos for a classifier's top-1) is not judged."""
    budget = (budget or AccuracyBudget()).over(task)
    top1, boxes, sqnr = measures(v)
    judged = AccuracyBudget(top1=budget.top1 if top1 is not None else None,
                            boxes=budget.boxes if boxes is not None else None,
                            sqnr=budget.sqnr if sqnr is not None else None)
    missed = judged.missed(top1, boxes, sqnr)
    ints = v.get("integer_agreement") if isinstance(v, dict) else getattr(v, "integer_agreement", None)
    least = budget.ids if budget.ids is not None else INTEGER_AGREEMENT
    if missed is None and ints is not None and ints < least:
        return (f"its integer outputs (class ids, indices) equal eager's in {pct_below(ints, least)}% of their values "
                f"< {pct(least)}%")
    return missed


INTEGER_AGREEMENT = 0.99  # the least fraction of integer output values equal to eager's, in every budget


def settle(record: Record, budget: AccuracyBudget | None = None) -> None:
    """Give a row that ran and matched its verdict against ``budget`` (else its task's):
    VERIFIED or SIMULATED when within it, OUT_OF_BUDGET when not, with why and what to try.
    Run on every such row, fresh or restored from the cache, so a changed budget is never
    skipped."""
    v = record.verification
    if v is None or record.status not in (Status.VERIFIED, Status.SIMULATED, Status.OUT_OF_BUDGET, Status.MISMATCH):
        return
    budget = (budget or AccuracyBudget()).over(record.task)
    v.budget = {k: val for k, val in _asdict(budget).items() if val is not None}
    v.budget_missed = budget_missed(record.task, v, budget)
    if record.status is Status.MISMATCH:
        return  # wrong already: what of the budget it misses is said beside it, its status stays
    record.status = verdict("simulator" if v.simulator else "host", True, v.budget_missed)
    if v.budget_missed:
        record.reason = f"misses its accuracy budget ({v.budget_missed}; budget: {budget.describe(bool(v.images))})"
        record.fix = (accuracy_text(record.accuracy) if record.accuracy else
                      "try a higher precision, or calibrate on real inputs (--calibration DIR)") + \
            "; it is not offered to the app (--offer-out-of-budget offers it)"
    elif record.reason and record.reason.startswith("misses its accuracy budget"):
        record.reason = record.fix = None


def estimate_text(estimates: dict) -> str:
    """A compiler's estimates in one phrase, said to be estimates."""
    e = estimates
    at = f" at {e['clock_mhz']} MHz" if e.get("clock_mhz") else ""
    time = f" ({e['inference_ms']:.3g} ms{at})" if e.get("inference_ms") is not None else ""
    return (f"{e.get('tool', 'compiler')} estimates {e.get('cycles', 0):,} cycles{time}, SRAM {e.get('sram_kib') or 0:.1f} KiB, "
            f"flash {e.get('flash_kib') or 0:.1f} KiB ({e.get('system', 'its default system')}; not measured)")


TOP_LEVEL = "(top level)"  # a row's module when its operator is in forward() itself, not in a submodule


def layer_name(row: dict, detail: str = "") -> str:
    """A row of ``per_layer`` as the user knows it, with ``detail`` in its parentheses:
    ``features.0.0 (Conv2d: detail)``, or for an operator of forward() itself,
    ``grid_sampler in Grid.forward (detail)``."""
    if row["module"] == TOP_LEVEL:
        return f"{row['op'].split('.')[0]} in {row['type'] or 'the model'}.forward" + (f" ({detail})" if detail else "")
    return f"{row['module']} ({row['type'] or row['op']}{': ' + detail if detail else ''})"


ONE_LAYER_DB = 3.0  # a layer's drop below this is no one layer's: the loss is spread over the network


def inputs_text(v: dict) -> str:
    """What a verification's inputs were: "4 seeded inputs", or the user's own files."""
    return v.get("inputs_from") or f"{v.get('inputs', '?')} seeded inputs"


def accuracy_text(accuracy: dict) -> str:
    """Where a quantized program loses most, in one phrase."""
    if accuracy.get("error"):
        return f"its layers could not be compared ({accuracy['error']})"
    worst = accuracy.get("worst") or []
    if not worst:
        return "no layer could be matched to fp32"
    w, tip = worst[0], f"; try: {accuracy['try'][0]}" if accuracy.get("try") else ""
    if w.get("from_exact"):
        return f"loses most at {layer_name(w, 'its inputs exact, %.1f dB after it' % w['sqnr_db'])}{tip}"
    if w["drop_db"] < ONE_LAYER_DB:
        most = w["module"] if w["module"] != TOP_LEVEL else layer_name(w)
        return f"no one layer loses it (the most, {most}, {w['drop_db']:.1f} dB): it is spread over the network{tip}"
    detail = "loses %.1f dB there, %.1f dB after it" % (w["drop_db"], w["sqnr_db"])
    return f"loses most at {layer_name(w, detail)}{tip}"

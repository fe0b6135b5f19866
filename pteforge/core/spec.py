"""What goes into a run: models, targets and options, as frozen plain data.

Everything here is picklable so that stages can run in worker processes.
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, ClassVar

from .errors import UsageError
from .options import ARTIFACT, RUN, config_fields
from .system import file_name
from .units import below, pct, pct_below


class Precision(str, enum.Enum):
    """Numeric precision of an artifact. ``int8`` is static PT2E quantization."""

    FP32 = "fp32"
    FP16 = "fp16"
    INT8 = "int8"
    INT8_DYNAMIC = "int8-dynamic"
    INT8_WEIGHT = "int8-weight"
    INT4_WEIGHT = "int4-weight"
    INT8_DYNAMIC_INT4 = "8da4w"  # language models: int8 dynamic activations, int4 weights in groups
    INT8_DYNAMIC_INT8 = "8da8w"  # language models: int8 dynamic activations, int8 weights per channel

    @property
    def quantized(self) -> bool:
        return self not in (Precision.FP32, Precision.FP16)

    @classmethod
    def parse(cls, text: str) -> "Precision":
        try:
            return cls(text.strip().lower())
        except ValueError:
            from .registry import unknown_name_message

            raise UsageError(
                unknown_name_message("precision", text, [p.value for p in cls]),
                fix="write a target as BACKEND[+BACKEND...][:PRECISION], e.g. xnnpack:int8",
            ) from None


_TARGET_RE = re.compile(r"^[A-Za-z0-9_\-]+(\+[A-Za-z0-9_\-]+)*(:[A-Za-z0-9_\-]+)?$")


@dataclass(frozen=True)
class TargetRequest:
    """A target as the user wrote it: ``vulkan+xnnpack``, ``xnnpack:int8``."""

    backends: tuple[str, ...]
    precision: Precision | None = None

    @classmethod
    def parse(cls, text: str) -> "TargetRequest":
        text = text.strip()
        if not _TARGET_RE.match(text):
            raise UsageError(
                f"malformed target '{text}'",
                fix="write a target as BACKEND[+BACKEND...][:PRECISION], e.g. vulkan+xnnpack or xnnpack:int8",
            )
        chain, _, prec = text.partition(":")
        return cls(tuple(b for b in chain.split("+")), Precision.parse(prec) if prec else None)


@dataclass(frozen=True)
class Target:
    """A resolved target: backend chain in partitioner priority order, and a precision.

    What the first backend cannot take goes to the next; what none takes runs on
    the portable CPU kernels.
    """

    backends: tuple[str, ...]
    precision: Precision
    default_precision: bool = True  # the precision was the first backend's default

    @property
    def name(self) -> str:
        """The target as the user writes it, e.g. ``vulkan+xnnpack`` or ``xnnpack:int8``."""
        chain = "+".join(self.backends)
        return chain if self.default_precision else f"{chain}:{self.precision.value}"

    @property
    def slug(self) -> str:
        """File-name form: ``vulkan-xnnpack``, ``xnnpack_int8`` (no '+' or ':' in URLs)."""
        return target_slug(self.name)

    @property
    def primary(self) -> str:
        return self.backends[0]


def target_slug(name: str) -> str:
    """``vulkan+xnnpack`` → ``vulkan-xnnpack``, ``xnnpack:int8-dynamic`` → ``xnnpack_int8dynamic``."""
    chain, _, precision = name.partition(":")
    chain = chain.replace("+", "-")
    return f"{chain}_{precision.replace('-', '')}" if precision else chain


def input_highs(inputs: list[dict] | None) -> list:
    """What the seeded ids of a program's inputs (a manifest entry's ``inputs``, a
    record's ``io["inputs"]``) are drawn below, per input (``InputSpec.high``; None: the usual)."""
    return [i.get("high") for i in inputs or []]


@dataclass(frozen=True)
class InputSpec:
    """One input of a model: its shape and dtype; ``name``, the input of a file (an ONNX
    graph's) it was given for (``--input-shape images=1,3,640,640``); ``value``, the value
    a scalar input is held at (``--input-shape sr=int64:16000``); ``high``, what seeded ids
    of an integer input are drawn below where the smallest embedding table it indexes has
    fewer rows than usual (``stages.capture.id_highs``)."""

    shape: tuple[int, ...]
    dtype: str = "float32"
    name: str | None = None
    value: float | None = None
    high: int | None = None

    @classmethod
    def parse(cls, text: str, dtype: str = "float32") -> "InputSpec":
        """``[NAME=][DTYPE:]N,C,H,W`` (or ``NxCxHxW``). One number that is no dimension (0,
        negative, a fraction) is a scalar's value; which input is a scalar, the file says."""
        name, _, rest = text.rpartition("=")
        head, colon, dims_text = rest.rpartition(":")
        if colon:
            dtype = cls.check_dtype(head.strip())
        fix = ("give positive integers separated by commas, optionally named and typed: --input-shape 1,3,224,224, "
               "--input-shape images=1,3,640,640, --input-shape sr=int64:16000")
        if name.strip() == "" and _:
            raise UsageError(f"malformed --input-shape '{text}': no input name before '='", fix=fix)
        tokens = [t for t in dims_text.replace("x", ",").split(",")]
        try:
            dims = tuple(int(t) for t in tokens)
        except ValueError:
            dims = ()
        if len(tokens) == 1 and (not dims or dims[0] <= 0):
            try:  # a value, not a shape: 0, -1, 0.5
                return cls((), cls.check_dtype(dtype), name.strip() or None, float(tokens[0]))
            except ValueError:
                pass
        if not dims or any(d <= 0 for d in dims):
            raise UsageError(f"malformed --input-shape '{text}'", fix=fix)
        return cls(dims, cls.check_dtype(dtype), name.strip() or None)

    @staticmethod
    def check_dtype(dtype: str) -> str:
        """``dtype`` (an ``--input-dtype``), when pteforge can feed it."""
        valid = ("float32", "float16", "bfloat16", "int64", "int32", "int8", "uint8", "bool")
        if dtype not in valid:
            raise UsageError(
                f"unsupported --input-dtype '{dtype}'", fix=f"use one of: {', '.join(valid)}"
            )
        return dtype


@dataclass(frozen=True)
class Preprocessing:
    """What an app must do to an image before feeding the model."""

    size: int  # the model's square input size
    resize: int | None = None  # crop: shorter side before the centre crop
    mean: tuple[float, float, float] = (0.0, 0.0, 0.0)
    std: tuple[float, float, float] = (1.0, 1.0, 1.0)
    layout: str = "NCHW"  # or NHWC
    # how the photo becomes a square: crop (resize the shorter side, centre crop),
    # letterbox (fit inside, pad with 114 grey, as Ultralytics), stretch (resize both sides)
    fit: str = "crop"
    scale: float = 1 / 255.0  # pixel value (0-255) x scale, then (x - mean) / std


@dataclass(frozen=True)
class ModelSpec:
    """A model the tool can build: where it comes from and what its inputs mean.

    ``factory`` is an import path ``package.module:function``; the function takes
    ``(spec, weights, seed)`` and returns an ``nn.Module`` (the catalog's builders),
    or, for user factories, no arguments.
    """

    name: str
    family: str  # the manifest's `category`: mobilenet, yolo, custom, ...
    task: str  # classification, detection, ...
    inputs: tuple[InputSpec, ...]
    factory: str
    source: str = "catalog"  # catalog | factory | pt2 | onnx
    preprocessing: Preprocessing | None = None
    labels: str | None = None  # the labels file its family writes (imagenet_classes.txt, ...)
    path: str | None = None  # the model file of a pt2 or onnx source
    names: tuple[str, ...] = ()  # class names of its own (an Ultralytics checkpoint's), written to ``labels``
    # the targets a config file's [[model]] table gives it (requests, then target names once
    # the run's plan is made: run.plan.own_targets); None: the run's
    targets: tuple[str, ...] | None = None
    # the precision a model file's own quantization computes at (a QDQ ONNX file: int8): what
    # its programs are judged at, whatever the target's precision
    quantized: str | None = None
    # a language model's KV cache written in place by ExecuTorch's llama::update_cache (False:
    # Hugging Face's static cache, kernels every runtime links: --llm-cache static)
    cache_in_place: bool = True

    def __post_init__(self) -> None:
        # the name becomes file and directory names (<name>_<target>.pte, <name>.pt2) and URLs:
        # one valid on every OS (a file 'net:v2.onnx' exports as net_v2_xnnpack.pte)
        object.__setattr__(self, "name", file_name(self.name))
        if self.labels:
            object.__setattr__(self, "labels", file_name(self.labels))

    @property
    def folder(self) -> str:
        """Where its programs are filed under ``--out``: a catalog model's (and a language
        model's) under its family, the app's category; one's own under its task, so that
        an own classifier is not filed as a catalog MobileNet."""
        return self.family if self.source == "catalog" or self.task == "text-generation" else self.task

    @property
    def source_ref(self) -> str | None:
        """Where the model comes from, as the manifest records it (``source``)."""
        return {"catalog": "catalog", "factory": self.factory}.get(self.source, self.path)

    @property
    def fed(self) -> tuple[InputSpec, ...]:
        """The inputs the program takes: not those held at a value (``InputSpec.value``)."""
        return tuple(i for i in self.inputs if i.value is None)

    def with_highs(self, highs: tuple) -> "ModelSpec":
        """This spec with ``highs`` (one per input the program takes, or None: ``InputSpec.high``)."""
        given = iter(highs)
        return replace(self, inputs=tuple(i if i.value is not None else replace(i, high=next(given, None))
                                          for i in self.inputs)) if any(highs) else self

    @property
    def held(self) -> dict[str | None, float]:
        """The file's inputs held at a value in the program, by name."""
        return {i.name: i.value for i in self.inputs if i.value is not None}

    @property
    def input_size(self) -> int | None:
        shape = self.inputs[0].shape
        return shape[-1] if len(shape) == 4 else None


WEIGHTS_PRETRAINED = "pretrained"
WEIGHTS_NONE = "none"


# The most inputs a run verifies on or calibrates with, and timed runs: every target runs
# each verification input (a reference simulator at seconds an input), and the inputs and
# eager's outputs are held in memory
MOST_INPUTS = 10_000
MOST_RUNS = 100_000


@dataclass(frozen=True)
class ExportConfig:
    """The ``ARTIFACT`` and ``RUN`` options of ``options.py`` (declared there once each with
    its default, flag and help), as a run holds them; ``tests/test_typed_config.py`` keeps
    these fields and the declarations the same. Its ``ARTIFACT_FIELDS`` define the artifact:
    they are hashed, all of them, into its cache key; ``RUN_FIELDS`` only say how this run
    runs and where its results go."""

    out_dir: Path
    accuracy_budget: AccuracyBudget | None = None
    offer_out_of_budget: bool = False
    calibration_dir: Path | None = None
    calibration_samples: int = 16
    weights: str = WEIGHTS_PRETRAINED
    seed: int = 0
    verify: bool = True
    simulate: bool = True
    fallback: bool = True
    verify_inputs: int = 3
    bench_runs: int = 10
    tolerance: float | None = None
    base_url: str | None = None
    timeout: float = 1200.0
    jobs: int | None = None
    executor: str = "local"
    ray_address: str | None = None
    oplist: bool = False
    cache: bool = True
    prove_on: Sequence[str] | None = None
    bundle: bool = False
    debug: bool = False

    ARTIFACT_FIELDS: ClassVar[tuple[str, ...]] = tuple(o.attr for o in config_fields() if o.role == ARTIFACT)
    RUN_FIELDS: ClassVar[tuple[str, ...]] = tuple(o.attr for o in config_fields() if o.role == RUN)

    def artifact_options(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.ARTIFACT_FIELDS}

    def for_jobs(self) -> JobConfig:
        """What the worker jobs see: the artifact options, and the run options they read."""
        return JobConfig(**{f.name: getattr(self, f.name) for f in fields(JobConfig)})

    @classmethod
    def from_options(cls, values: dict[str, Any], **given: Any) -> ExportConfig:
        """The config from option values by option name (the parsed command line, config
        file included), each as ``ExportConfig`` holds it; ``given`` by field name wins."""
        converted = {o.attr: _held(o.convert, values[o.name]) for o in config_fields() if o.name in values}
        return cls(**{**converted, **given})

    def __post_init__(self) -> None:
        """Refuse what the command line refuses, whoever builds the config."""
        if self.weights not in (WEIGHTS_PRETRAINED, WEIGHTS_NONE) and not Path(self.weights).is_file():
            raise UsageError(f"--weights {self.weights}: no such file",
                             fix="use --weights pretrained, --weights none, or the path of a local state dict")
        for flag, value, least, most in (("--verify-inputs", self.verify_inputs, 0, MOST_INPUTS),
                                         ("--bench-runs", self.bench_runs, 0, MOST_RUNS),
                                         ("--calibration-samples", self.calibration_samples, 1, MOST_INPUTS),
                                         ("--jobs", self.jobs, 1, None)):
            if value is not None and value < least:
                raise UsageError(f"{flag} must be >= {least} (got {value})", fix=f"give {flag} {least} or more")
            if value is not None and most is not None and value > most:  # a typo's zeros: hours of runs, or memory
                raise UsageError(f"{flag} must be at most {most:,} (got {value:,})", fix=f"give {flag} {most:,} or fewer")
        if not 0 <= self.seed < 2**32:  # torch's and numpy's seeds, with room for seed + i
            raise UsageError(f"--seed must be between 0 and {2**32 - 1} (got {self.seed})", fix="give a smaller --seed")
        if self.executor not in ("local", "ray"):
            raise UsageError(f"--executor {self.executor}: unknown executor", fix="use --executor local or --executor ray")
        if self.ray_address and self.executor != "ray":
            raise UsageError("--ray-address applies to --executor ray", fix="add --executor ray")
        if not self.timeout > 0 or self.timeout == float("inf"):  # NaN fails every comparison
            raise UsageError(f"--timeout must be a positive number of seconds (got {self.timeout:g})",
                             fix="give --timeout in seconds, e.g. 1200")
        if self.tolerance is not None and not -1e6 < self.tolerance < 1e6:  # NaN and infinities too
            raise UsageError(f"--tolerance must be a number of dB (got {self.tolerance:g})",
                             fix="give the minimum SQNR in dB, e.g. --tolerance 30")
        if self.base_url is not None:
            check_base_url(self.base_url, "--base-url")


def _held(convert: str | None, value: Any) -> Any:
    """An option's value as ``ExportConfig`` holds it (``Option.convert``)."""
    if convert in ("absolute", "budget") and not value:
        return None
    if value is None or convert is None:
        return value
    if convert == "path":
        return Path(value)
    if convert == "absolute":
        return Path(value).resolve()
    return AccuracyBudget.parse(value)  # "budget"


@dataclass(frozen=True)
class JobConfig:
    """What a worker job (a capture, a target) is given of the run's options: every
    ``ARTIFACT`` option and the ``RUN`` options marked ``jobs`` (``options.py``;
    ``tests/test_typed_config.py`` keeps the two the same). A run option that could change
    a program cannot reach the code that makes it."""

    out_dir: Path
    calibration_dir: Path | None = None
    calibration_samples: int = 16
    weights: str = WEIGHTS_PRETRAINED
    seed: int = 0
    verify: bool = True
    simulate: bool = True
    fallback: bool = True
    verify_inputs: int = 3
    tolerance: float | None = None
    timeout: float = 1200.0
    bundle: bool = False
    debug: bool = False


def check_base_url(url: str, flag: str) -> None:
    """The executorch_flutter app downloads ``remoteUrl`` as it is written, so the URL
    artifacts are served at must be an absolute http(s) URL."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        rest = url.split("://", 1)[-1].lstrip("/")
        if "." not in rest.split("/")[0]:  # no host in it: a path
            rest = "models.example.org/" + (rest or "pte")
        raise UsageError(f"{flag} {url!r} is not an http(s) URL, and the app downloads remoteUrl as it is written",
                         fix=f"give the whole URL, e.g. {flag} https://{rest}")


@dataclass(frozen=True)
class AccuracyBudget:
    """How much accuracy a reduced precision may give up against fp32 eager: what
    ``--precision auto`` chooses within, and what an int8 artifact is held to (missing it,
    pteforge says where it breaks: stages/accuracy.py).

    ``top1``: least fraction of validation photos whose top-1 class must agree
    (classifiers); ``boxes``: least fraction of eager's boxes the program must have at
    IoU ≥ 0.5 (detectors); ``sqnr``: least SQNR in dB on the validation photos (others,
    or with the others when given); ``ids``: least fraction of integer outputs' values
    (class ids, indices, masks) equal to eager's, for every model. Written ``top1=0.99`` /
    ``boxes=0.95`` / ``sqnr=20`` / ``top1=0.98,sqnr=15`` / ``ids=0.95``.
    """

    top1: float | None = None
    sqnr: float | None = None
    boxes: float | None = None
    ids: float | None = None  # integer outputs' values equal to eager's; None: result.INTEGER_AGREEMENT

    @classmethod
    def for_task(cls, task: str) -> "AccuracyBudget":
        if task == "classification":
            return cls(top1=0.99)
        return cls(boxes=0.95) if task == "detection" else cls(sqnr=20.0)

    def over(self, task: str) -> "AccuracyBudget":
        """This budget, with ``task``'s own top-1, boxes or SQNR where it gives none of them
        (``ids=0.95`` alone loosens the integer outputs' part, and keeps the task's)."""
        if (self.top1, self.boxes, self.sqnr) != (None, None, None):
            return self
        return replace(AccuracyBudget.for_task(task), ids=self.ids)

    def missed(self, top1: float | None, boxes: float | None, sqnr: float | None) -> str | None:
        """What of the budget a program misses, in words, or None when it is within it."""
        if self.top1 is not None and (top1 is None or top1 < self.top1):
            return "no top-1 agreement (not a classifier on photos)" if top1 is None else \
                f"top-1 agreement {pct_below(top1, self.top1)}% < {pct(self.top1)}%"
        if self.boxes is not None and (boxes is None or boxes < self.boxes):
            return "no boxes compared (not a detector on photos)" if boxes is None else \
                f"boxes matched at IoU ≥ 0.5 {pct_below(boxes, self.boxes)}% < {pct(self.boxes)}%"
        if self.sqnr is not None and (sqnr is None or sqnr < self.sqnr):
            return f"SQNR {below(sqnr, self.sqnr, 1)} dB < {self.sqnr:g} dB" if sqnr is not None else "no SQNR"
        return None

    @classmethod
    def parse(cls, text: str) -> "AccuracyBudget":
        values: dict[str, float] = {}
        for part in text.split(","):
            key, _, value = part.partition("=")
            key = key.strip().lower()
            try:
                number = float(value)
            except ValueError:
                number = None
            if key not in ("top1", "sqnr", "boxes", "ids") or number is None or not math.isfinite(number) \
                    or (key != "sqnr" and not 0 <= number <= 1):
                raise UsageError(
                    f"malformed --accuracy-budget '{text}'",
                    fix="write top1=FRACTION, boxes=FRACTION, sqnr=DB and/or ids=FRACTION, e.g. --accuracy-budget "
                        "top1=0.99 or sqnr=20",
                )
            values[key] = number
        return cls(**values)

    def describe(self, photos: bool = True) -> str:
        """The budget in words; ``photos``: judged on the validation photos (else on the
        verification inputs: a model of no photo)."""
        parts = ([f"top-1 agreement ≥ {pct(self.top1)}%"] if self.top1 is not None else []) + (
            [f"boxes matched at IoU ≥ 0.5 ≥ {pct(self.boxes)}%"] if self.boxes is not None else []) + (
            [f"SQNR ≥ {self.sqnr:g} dB"] if self.sqnr is not None else []) + (
            [f"integer outputs equal in ≥ {pct(self.ids)}%"] if self.ids is not None else []
        )
        return " and ".join(parts) + f" vs fp32 eager on {'the validation photos' if photos else 'its verification inputs'}"


def artifact_path(out_dir: Path, spec: ModelSpec, target: Target, failed: bool = False) -> Path:
    """``<out>/<folder>/<model>_<target>.pte`` (``ModelSpec.folder``: the category of a catalog
    model, the task of one's own); a failed proof never takes that name."""
    suffix = ".mismatch.pte" if failed else ".pte"
    return Path(out_dir) / spec.folder / f"{spec.name}_{target.slug}{suffix}"

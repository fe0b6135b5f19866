"""Orchestration in plain functions: resolve targets, capture once, export every target."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Protocol

from .backends import Availability, availability, default_registry
from .backends.base import Check
from .errors import CaptureError, NoBackendError, UsageError
from .registry import Registry
from .result import Record, Status
from .spec import ExportConfig, ModelSpec, Target, TargetRequest


class Reporter(Protocol):
    def model_started(self, spec: ModelSpec, index: int, total: int) -> None: ...
    def stage(self, model: str, target: str | None, stage: str) -> None: ...
    def record(self, record: Record) -> None: ...


class SilentReporter:
    def model_started(self, spec, index, total):
        pass

    def stage(self, model, target, stage):
        pass

    def record(self, record):
        pass


@dataclass
class Unavailable:
    target: str
    check: Check


@dataclass
class TargetPlan:
    targets: list[Target]
    unavailable: list[Unavailable] = field(default_factory=list)
    available_names: list[str] = field(default_factory=list)


def backends(registered: frozenset[str] | None = None) -> list[Availability]:
    """Every backend with its two answers: can it lower here, can it run here."""
    if registered is None:
        from .runtime import registered_backends

        registered = registered_backends()
    return [availability(b, registered) for b in default_registry()]


def plan_targets(requests: list[str] | None, registry: Registry | None = None) -> TargetPlan:
    """Turn ``--backends`` words into targets; sort out what cannot lower here.

    Unknown names and precisions a backend does not take are usage errors, raised
    before any work. ``None`` means every backend that can lower here.
    """
    registry = registry or default_registry()
    lowerable = [b.name for b in registry if b.lower_check().ok]
    if requests is None:
        targets = [Target((name,), registry.get(name).default_precision) for name in lowerable]
        return TargetPlan(targets, [], lowerable)
    plan = TargetPlan([], [], lowerable)
    seen: set[str] = set()
    for text in requests:
        req = TargetRequest.parse(text)
        chain = tuple(registry.resolve(name) for name in req.backends)
        if len(set(chain)) != len(chain):
            raise UsageError(f"target '{text}' names a backend twice", fix="name each backend once in a chain")
        primary = registry.get(chain[0])
        precision = req.precision or primary.default_precision
        if precision not in primary.precisions:
            raise UsageError(
                f"{primary.name} does not take precision {precision.value}; it takes: "
                f"{', '.join(p.value for p in primary.precisions)}",
                fix=f"use e.g. --backends {primary.name}:{primary.default_precision.value}",
            )
        target = Target(chain, precision, default_precision=precision == primary.default_precision)
        if target.name in seen:
            continue
        seen.add(target.name)
        blocked = next(((b, c) for b in chain if not (c := registry.get(b).lower_check()).ok), None)
        if blocked:
            plan.unavailable.append(Unavailable(target.name, blocked[1]))
        else:
            plan.targets.append(target)
    if not plan.targets:
        err = NoBackendError(
            f"No available backends from requested: {[u.target for u in plan.unavailable]}",
            fix=f"Available backends: {lowerable}",
        )
        err.plan = plan
        raise err
    return plan


def versions(chain_backends: set[str]) -> dict[str, str]:
    """pteforge, torch, executorch and the SDK packages the backends used."""
    from . import __version__

    names = ["torch", "torchvision", "executorch"]
    sdk = {
        "coreml": ["coremltools"],
        "openvino": ["openvino", "nncf"],
        "ethos-u55": ["ethos-u-vela", "tosa-tools"],
        "ethos-u85": ["ethos-u-vela", "tosa-tools"],
        "tosa": ["tosa-tools"],
        "vgf": ["tosa-tools"],
    }
    for b in sorted(chain_backends):
        names.extend(sdk.get(b, []))
    out = {"pteforge": __version__}
    for n in dict.fromkeys(names):
        try:
            out[n] = metadata.version(n)
        except metadata.PackageNotFoundError:
            pass
    return out


@dataclass
class RunResult:
    records: list[Record]
    unavailable: list[Unavailable]
    manifest_path: Path | None

    @property
    def ok(self) -> bool:
        return not self.unavailable and all(r.status.ok for r in self.records)


def export(
    models: list[ModelSpec],
    plan: TargetPlan,
    config: ExportConfig,
    reporter: Reporter | None = None,
    write_labels: bool = False,
) -> RunResult:
    """Capture each model once and lower it for every target; merge the manifest per model.

    A model that cannot be captured fails its rows (CAPTURE_FAILED) and the run goes
    on; each model's results land in the manifest as soon as it is done, so an
    interrupted run keeps what finished.
    """
    from .io import check_output_dir
    from .pipeline import export_target
    from .report.entries import labels_entries, manifest_entries, write_label_files
    from .report.manifest import MANIFEST_NAME, BackendEntry, load_manifest, merge
    from .runtime import registered_backends
    from .stages.capture import capture

    reporter = reporter or SilentReporter()
    out = Path(config.out_dir)
    check_output_dir(out)
    load_manifest(out / MANIFEST_NAME)  # refuse a broken manifest before any work

    label_kinds = {m.labels for m in models if m.labels}
    if write_labels:
        label_kinds |= {"imagenet", "coco"}
    labels = write_label_files(out, sorted(label_kinds))

    registry = default_registry()
    records: list[Record] = []
    manifest_path = out / MANIFEST_NAME if (models or labels) else None
    if labels and not models:
        merge(out, [], labels_entries(labels), {}, config.base_url)
    for index, spec in enumerate(models, 1):
        reporter.model_started(spec, index, len(models))
        model_records: list[Record] = []
        with tempfile.TemporaryDirectory(prefix="pteforge-") as work:
            reporter.stage(spec.name, None, "capture")
            try:
                cap = capture(spec, config, Path(work))
            except CaptureError as exc:
                for target in plan.targets:
                    rec = _row(spec, target, Status.CAPTURE_FAILED, str(exc), exc.fix)
                    model_records.append(rec)
                    reporter.record(rec)
                records.extend(model_records)
                continue
            for target in plan.targets:
                rec = export_target(
                    cap, spec, target, config, registered_backends(),
                    on_stage=lambda stage, t=target: reporter.stage(spec.name, t.name, stage),
                )
                rec.timings = {**{f"model_{k}": round(v, 3) for k, v in cap.timings.items()}, **rec.timings}
                model_records.append(rec)
                reporter.record(rec)
        records.extend(model_records)
        used = {b for r in model_records for b in r.backends}
        entries = manifest_entries(model_records, spec, out, config, labels, versions(used))
        backend_entries = {
            registry.get(b).manifest_name(): BackendEntry(description=registry.get(b).description)
            for r in model_records if r.artifact for b in r.backends[:1]
        }
        merge(out, entries, labels_entries(labels), backend_entries, config.base_url)
    return RunResult(records, plan.unavailable, manifest_path)


def _row(spec: ModelSpec, target: Target, status: Status, reason: str, fix: str | None) -> Record:
    return Record(
        model=spec.name, family=spec.family, task=spec.task, target=target.name,
        backends=list(target.backends), precision=target.precision.value,
        status=status, reason=reason, fix=fix,
        input_shapes=[list(i.shape) for i in spec.inputs],
    )

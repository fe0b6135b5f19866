"""What an export run measures after its jobs: the p50s of what runs here, reduced
precisions against their fp32 reference, --precision auto's choices, and with
--prove-on arm64 the programs again on Arm64 under emulation; each into the manifest.
``run`` is the engine's ``Run`` (``engine.py``): its rows, plan, config, reporter and pool."""

from __future__ import annotations

from pathlib import Path

from ..app.precision import choose, reference_pairs, relate_latency
from ..core.errors import one_line
from ..core.result import Record, Stage, ran_here
from ..core.samples import holds_samples, token_ids
from ..core.spec import ExportConfig, ModelSpec, input_highs
from ..report.manifest import set_precision_choices, update_entries
from .arm64_proof import prove
from .speed import time_artifacts, timing_plan
from .workers import Call


def measure(run, out: Path, models, seconds: float) -> list[dict]:
    """p50s of what runs here, reduced precisions against their fp32 reference (or the
    model's fp32 weights), and --precision auto's choices; written into the manifest."""
    records, plan, config, reporter, pool = run.records, run.plan, run.config, run.reporter, run.pool

    for group in plan.auto:
        for rec in records:
            if rec.target in group.targets:
                rec.auto_group = group.backend
    pairs = reference_pairs(records, run.fp32_bytes)
    # Only pairs whose both sides run here are compared: the portable fp32 reference of
    # device-only int8 targets (Ethos-U, Cortex-M) has nothing to be compared with.
    needed = [r for pair in pairs if all(ran_here(p) for p in pair) for r in pair]
    needed += [r for r in records if ran_here(r) and r.auto_group and r not in needed]
    # a language model's speed is its tokens/s, measured by its proof: not timed as one call
    _time_here([r for r in records if r.generation is None], [r for r in needed if r.generation is None],
          config, reporter, pool, seconds)
    relate_latency(pairs)
    fields = {}
    for rec in records:
        if rec.artifact and (rec.relative or rec.latency):
            name = Path(rec.artifact.path).name
            fields[name] = {k: v for k, v in (("relative", rec.relative), ("bench", rec.latency)) if v}
    update_entries(out, fields)
    choices = [
        choose(spec.name, group, records, spec.task, config.accuracy_budget,
               None if holds_samples(config.calibration_dir) else token_ids(spec))  # ids of one's own: static is fair
        for spec in models for group in plan.auto
    ]
    if choices:
        set_precision_choices(out, choices, plan.auto_notes)
    return choices


def prove_on_arm64(run, out: Path, models: list[ModelSpec]) -> None:
    """export --prove-on arm64: the XNNPACK and portable programs again, on Arm64 under
    emulation, one process for all; each verdict into its row, the manifest and the cache."""
    run.reporter.stage("*", None, Stage.ARM64)
    prove(run.records, run.references, {s.name: s for s in models}, run.config, run.work)
    update_entries(out, {Path(r.artifact.path).name: {"arm64": r.arm64} for r in run.records
                         if r.arm64 is not None and r.artifact is not None})


def _time_here(records: list[Record], needed: list[Record], config: ExportConfig, reporter, pool, seconds: float) -> None:
    """p50 after warm-up of what runs here, in one worker while no other job runs."""
    items = timing_plan(records, needed, seconds, config.bench_runs)
    if not items:
        return
    reporter.stage("*", None, Stage.TIMING)
    paths = [(rec, rec.artifact.path) for rec, _ in items if rec.artifact is not None]  # timing_plan's have one
    highs = [input_highs(((rec.artifact.io if rec.artifact else None) or {}).get("inputs")) for rec, _ in paths]
    job = Call(key="*/timing", fn=time_artifacts, args=([(p, n, h) for (_, p), (_, n), h in zip(paths, items, highs)],),
               timeout=config.timeout)
    [outcome] = list(pool.run([job]))
    for rec, path in paths:
        if outcome.ok:
            rec.latency = outcome.value[path]
        else:
            rec.latency = {"skipped": f"timing failed: {outcome.crash or one_line(outcome.error)}"}

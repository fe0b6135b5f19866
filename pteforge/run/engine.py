"""The export run engine: every model's capture job, then every (model, target) job, on a
pool; each row merged into the manifest and cached as it finishes, then what runs here
timed and the reports written. ``run_export`` builds a ``Run`` with its parts (the cache's
answers, the pools, the manifest sink, the work directory) and runs it."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ..backends import default_registry, lowering_key
from ..core.errors import CaptureError, PteforgeError, one_line
from ..core.io import remove_run_temporaries, work_dir, write_atomic
from ..core.result import Record, Stage, Status, Unavailable, settle
from ..core.spec import AccuracyBudget, ExportConfig, ModelSpec, Target, artifact_path
from ..families import family
from . import cache, schedule
from .checks import prepare_out_dir
from .jobs import CaptureJob, TargetJob, whose_steps
from .log import keep_log, start_run
from .measure import measure, prove_on_arm64
from .plan import TargetPlan, targets_of
from .pools import open_capture_pool, open_pool
from .reports import run_failures, write_run_reports
from .sink import ManifestSink, find_label_files, make_labels, versions
from .workers import CLUSTER_LOST, RESUME, start_fork_server


class Reporter(Protocol):
    """What hears of an export run's progress (``ui.render.Reporter`` on a terminal)."""

    def model_started(self, spec: ModelSpec, index: int, total: int) -> None: ...
    def stage(self, model: str, target: str | None, stage: Stage) -> None: ...
    # optional: ``step(model, target, stage, step)``, how far a long stage is ("input 4 of 9")
    def record(self, record: Record) -> None: ...


class SilentReporter:
    """A reporter that tells nothing: a library caller's default."""

    def model_started(self, spec, index, total):
        pass

    def stage(self, model, target, stage):
        pass

    def record(self, record):
        pass


@dataclass
class RunResult:
    """What an export run did: its rows, the targets unavailable here, the manifest written."""

    records: list[Record]
    unavailable: list[Unavailable]
    manifest_path: Path | None
    choices: list[dict] = field(default_factory=list)  # --precision auto's winners and why
    references: list[str] = field(default_factory=list)  # targets added to measure reduced precisions against
    log: Path | None = None  # what libraries printed in the run's processes (none: nothing, or --debug)
    budget: AccuracyBudget | None = None  # --accuracy-budget (None: each task's default)
    dropped: list[str] = field(default_factory=list)  # earlier entries listed no more: their file is gone

    @property
    def failures(self) -> list[dict]:
        """The failed rows and unavailable targets, as report.json's ``last_run_failures``."""
        return run_failures(self.records, self.unavailable)

    @property
    def ok(self) -> bool:
        return not any(u.requested for u in self.unavailable) and all(r.status.ok and not r.arm64_failed
                                                                      for r in self.records)


def run_export(models: list[ModelSpec], plan: TargetPlan, config: ExportConfig, reporter: Reporter | None = None,
               write_labels: bool = False) -> RunResult:
    """Capture each model once and lower it for every target, each job in a worker process
    (``api.export``'s engine)."""
    reporter = reporter or SilentReporter()
    created = not Path(config.out_dir).exists()
    out = prepare_out_dir(models, config, plan)
    started = time.monotonic()
    looked = look_up(models, plan, config)
    if _pending(looked) and config.executor == "local":
        # its imports (~4 s) overlap the labels' and the pool's start; not started when all came from the cache
        start_fork_server(quiet=not config.debug, also=_fork_server_imports(plan))
    run_id, log = start_run(config)
    needs = find_label_files(models, write_labels)
    progress = Progress(reporter)
    try:
        # Label names come from the families' libraries (torchvision: ~2.5 s of imports): read
        # in a thread, beside the pool's start (Ray's cluster, the workers' imports) and the
        # captures, and needed only when the first row is merged.
        with ThreadPoolExecutor(1, thread_name_prefix="pteforge-labels") as side:
            labels = side.submit(make_labels, needs, config.base_url)
            with open_pool(config, len(plan.targets) * len(models), progress.on_stage) as pool, \
                    open_capture_pool(config, pool, len(_pending(looked)), progress.on_stage) as captures, \
                    tempfile.TemporaryDirectory(prefix="pteforge-", dir=work_dir()) as work:  # shared by every Ray node
                sink = ManifestSink(out, config, labels, set(plan.references))
                if needs and not models:
                    sink.merge([], None)
                run = Run(plan, config, progress, looked, sink, pool, captures, Path(work))
                run.export_all(models)
                choices = measure(run, out, models, time.monotonic() - started) if models else []
                if models and "arm64" in (config.prove_on or ()):
                    prove_on_arm64(run, out, models)
                sink.labels  # noqa: B018 - a failure to write them is the run's, even with no row to merge
    except BaseException:
        remove_run_temporaries(out, run_id)
        if created:
            with contextlib.suppress(OSError):
                out.rmdir()  # made for this run, which wrote nothing in it: not left behind
        raise
    finally:
        log = keep_log(log)
    if models:
        _store(run.fresh)
        write_run_reports(out, run.records, plan, config)
    written = sink.path if (models or needs) and sink.path.exists() else None  # none when no row wrote anything
    if created and written is None:
        with contextlib.suppress(OSError):
            out.rmdir()  # made for this run, which wrote nothing in it: not left behind (rmdir: only if empty)
    return RunResult(run.records, plan.unavailable, written, choices, list(plan.references), log, config.accuracy_budget,
                     sink.dropped)


Looked = list[tuple[ModelSpec, list[Target], list[Record], dict]]  # (model, to do, restored, cache keys)


def look_up(models: list[ModelSpec], plan: TargetPlan, config: ExportConfig) -> Looked:
    """What the cache already holds of each model's targets, and what is left to do."""
    return [(spec, *_from_cache(spec, targets_of(spec, plan), config)) for spec in models]


def _pending(looked: Looked) -> list[tuple[ModelSpec, list[Target], dict]]:
    return [(spec, todo, keys) for spec, todo, _, keys in looked if todo]


@dataclass
class Progress:
    """Each job's stage as the pool tells it (``on_stage``), told to the reporter by its
    (model, target)."""

    reporter: Reporter
    stages: dict[str, Stage] = field(default_factory=dict)  # job key -> the stage it is in
    names: dict[str, tuple[str, str | None]] = field(default_factory=dict)  # job key -> (model, target)

    def on_stage(self, key: str, stage: Stage | str) -> None:
        name, _, step = (stage.value if isinstance(stage, Stage) else stage).partition(" ")
        self.stages[key] = Stage(name)
        if not step:
            self.reporter.stage(*self.names[key], self.stages[key])
        elif hasattr(self.reporter, "step"):  # "verify input 4 of 9": how far a long stage is
            self.reporter.step(*self.names[key], self.stages[key], step)


@dataclass
class Run:
    """One export run: every model's capture job, then every (model, target) job, longest
    first, on the pool; rows are merged into the manifest and cached as each finishes, so an
    interrupted run started again does only what is missing. Built with its parts."""

    plan: TargetPlan
    config: ExportConfig
    progress: Progress
    looked: Looked  # what the cache holds, and what is left to do (``look_up``)
    sink: ManifestSink
    pool: Any  # the target jobs' (``pools.open_pool``)
    capture_pool: Any  # the captures' (``pools.open_capture_pool``): the pool itself, or one closed after them
    work: Path  # the run's temporary directory
    records: list[Record] = field(default_factory=list)
    fresh: list[tuple[str | None, Record]] = field(default_factory=list)  # (cache key, row) of the work done in this run
    fp32_bytes: dict[str, int] = field(default_factory=dict)  # model -> its weights at fp32 (its capture's)
    references: dict[str, str] = field(default_factory=dict)  # model -> its eager reference (inputs, outputs), while the run lasts

    @property
    def reporter(self):
        return self.progress.reporter

    @property
    def pending(self) -> list[tuple[ModelSpec, list[Target], dict]]:
        return _pending(self.looked)

    def export_all(self, models: list[ModelSpec]) -> None:
        """The rows the cache held, then every capture and every target job."""
        for index, (spec, _, restored, _) in enumerate(self.looked, 1):
            self.reporter.model_started(spec, index, len(models))
            if restored:
                for rec in restored:
                    settle(rec, self.config.accuracy_budget)  # the verdict again, under this run's budget
                self.records.extend(restored)
                self.sink.merge(restored, spec)
                for rec in restored:
                    self.reporter.record(rec)
        pending = self.pending
        captures = self._capture(pending)
        ended = {(r.model, r.target) for r in self.records if r.status is Status.CAPTURE_FAILED}
        self._export_targets([(spec.with_highs(captures[spec.name].id_highs), captures[spec.name],
                                [t for t in todo if (spec.name, t.name) not in ended], keys)
                               for spec, todo, keys in pending if spec.name in captures])
        order = {spec.name: i for i, spec in enumerate(models)}
        targets = {t.name: i for i, t in enumerate(self.plan.targets)}
        self.records.sort(key=lambda r: (order.get(r.model, 0), targets.get(r.target, 0)))

    def _capture_jobs(self, pending) -> list[tuple]:
        """(job, model, the targets that need the job's files) of every capture to make: each
        model's main capture, and a job of its own for each precision of its variants, so
        that one that fails ends only the rows that need it. They run on as many workers as
        there are models, as one capture job did, so a model's jobs run in turn: on 2 cores,
        Gemma 3 270M's fp32 and 8da4w captures side by side made its export no sooner (230 s
        against 231 s, the 8da4w scale search in row blocks), each capture slowed by the
        other (the eager reference 4.8 -> 20.7 s: one thread, memory shared), and its peak
        memory 0.7 GB higher."""
        jobs = []
        for spec, todo, _ in pending:
            base = dict(spec=spec, config=self.config.for_jobs(), work_dir=self.work / spec.name,
                        timeout=self.config.timeout)
            jobs.append((CaptureJob(key=f"{spec.name}/capture", **base), spec, todo))
            for precision, pairs in _variant_groups(spec, todo).items():
                jobs.append((CaptureJob(key=f"{spec.name}/capture {precision}", variants=tuple(pairs), main=False, **base),
                             spec, [t for t in todo if (t.primary, t.precision) in pairs]))
        return jobs

    def _capture(self, pending) -> dict:
        """Each model captured once, then its variants, the models in parallel: {model name: Capture}."""
        jobs = {job.key: (job, spec, needs) for job, spec, needs in self._capture_jobs(pending)}
        for job, spec, _ in jobs.values():
            self.progress.names[job.key] = (spec.name, None)
            if job.main:
                self.reporter.stage(spec.name, None, Stage.CAPTURE)
        made: dict[str, list] = {}  # model -> the Captures its jobs made
        lost: dict[str, list] = {}  # model -> (outcome, the targets it leaves without a capture)
        refused: dict[str, PteforgeError] = {}
        for outcome in self.capture_pool.run([job for job, _, _ in jobs.values()]):
            _, spec, needs = jobs[outcome.job.key]
            if outcome.ok:
                made.setdefault(spec.name, []).append(outcome.value)
                continue
            if outcome.error is not None and not isinstance(outcome.error, CaptureError):
                if isinstance(outcome.error, PteforgeError):
                    refused.setdefault(spec.name, outcome.error)  # weights, model or output: the user must act
                else:
                    _print_traceback(self.config, outcome)
            lost.setdefault(spec.name, []).append((outcome, needs))
        if refused and len(refused) == len(self.looked):
            raise next(iter(refused.values()))  # no model to go on with: the first one's error, and its exit code
        captures = {}
        for spec, todo, _ in pending:
            failed = {t.name: outcome for outcome, needs in lost.get(spec.name, []) for t in needs}
            main = next((c for c in made.get(spec.name, []) if c.pt2_path), None)
            if main is not None:
                captures[spec.name] = _merge_captures(main, made[spec.name])
                self.references[spec.name] = main.reference_path
                self.fp32_bytes[spec.name] = main.fp32_bytes
            for target in todo:  # the other models, and this model's other targets, go on
                outcome = failed.get(target.name)
                if outcome is not None:
                    reason, fix = _explain_failure(outcome, capture=True)
                    rec = _make_row(spec, target, Status.CAPTURE_FAILED, reason, fix)
                    self.records.append(rec)
                    self.reporter.record(rec)
        if self.capture_pool is not self.pool:
            self.capture_pool.close()  # its processes' memory back before the targets' jobs
        return captures

    def _export_targets(self, work) -> None:
        """Each (model, target) job, longest first; targets whose program another's lowering makes share its job."""
        jobs: dict[str, tuple] = {}
        same: dict[str, list[tuple]] = {}  # job key -> the targets whose program that job's lowering makes too
        for spec, cap, todo, keys in work:
            leaders: dict[tuple, str] = {}
            if sum(t.precision.quantized for t in todo) > 1:
                cap = dataclasses.replace(cap, share_quantized=True)  # what one quantizes, the others may load
            for target in todo:
                lowering = (lowering_key(target), whose_steps(spec))
                if lowering in leaders:
                    same[leaders[lowering]].append((target, keys.get(target.name)))
                    continue
                key = leaders[lowering] = f"{spec.name}/{target.name}"
                self.progress.names[key], same[key] = (spec.name, target.name), []
                jobs[key] = (TargetJob(key=key, capture=cap, spec=spec, target=target, config=self.config.for_jobs(),
                                       timeout=self.config.timeout, group=_memo_group(spec, target)),
                             spec, cap, target, keys.get(target.name))
        ordered = schedule.order([(spec.name, target, cap.pt2_path, job) for job, spec, cap, target, _ in jobs.values()])
        for outcome in self.pool.run([job for *_, job in ordered]):
            _, spec, cap, target, cache_key = jobs[outcome.job.key]
            if outcome.ok:
                rec = outcome.value
            elif isinstance(outcome.error, PteforgeError):
                raise outcome.error  # e.g. the disk is full: stop, keep what finished
            else:
                _print_traceback(self.config, outcome)
                status = Stage(self.progress.stages.get(outcome.job.key, Stage.LOWER)).crash_status
                rec = _make_row(spec, target, status, *_explain_failure(outcome))
            rec.timings = {**{k: round(v, 3) for k, v in cap.timings.items()}, **rec.timings}
            self._finish(spec, rec, cache_key)
            for other, other_key in same[outcome.job.key]:
                self._finish(spec, _same_program(rec, spec, other, self.config), other_key)
        schedule.remember([rec for _, rec in self.fresh])

    def _finish(self, spec: ModelSpec, rec: Record, cache_key: str | None) -> None:
        settle(rec, self.config.accuracy_budget)  # its verdict: VERIFIED/SIMULATED, or OUT_OF_BUDGET
        self.sink.merge([rec], spec)  # on disk before it is reported
        if cache_key and rec.artifact is not None:
            cache.store(cache_key, rec)  # a run interrupted after this point will not redo it
        self.reporter.record(rec)
        self.fresh.append((cache_key, rec))
        self.records.append(rec)


def _variant_groups(spec: ModelSpec, todo: list[Target]) -> dict[str, list]:
    """The variants ``spec``'s targets need (``Family.capture_variants``), by precision: one
    capture job each (what one precision's variants share, such as a language model's
    quantized weights, is made once in it)."""
    groups: dict[str, list] = {}
    for backend, precision in family(spec.family).capture_variants(todo):
        groups.setdefault(getattr(precision, "value", str(precision)), []).append((backend, precision))
    return groups


def _merge_captures(main, variants: list):
    """The model's main capture, with the variants its other jobs captured, and their time
    (each variant job's own build of the model counted in it)."""
    others = [c for c in variants if c is not main]
    if not others:
        return main
    timings = dict(main.timings)
    seconds = main.timings.get(Stage.CAPTURE_VARIANTS.value, 0.0) + sum(
        c.timings.get(Stage.BUILD.value, 0.0) + c.timings.get(Stage.CAPTURE_VARIANTS.value, 0.0) for c in others)
    if seconds:
        timings[Stage.CAPTURE_VARIANTS.value] = seconds
    return dataclasses.replace(main, timings=timings, variants={k: v for c in [main, *others] for k, v in c.variants.items()})


def _fork_server_imports(plan: TargetPlan) -> tuple[str, ...]:
    """What the planned targets' backends have the fork server import (``Backend.fork_server_imports``)."""
    registry = default_registry()
    names = {name for target in plan.targets for name in target.backends if name in registry}
    return tuple(dict.fromkeys(m for name in sorted(names) for m in registry.get(name).fork_server_imports))


def _memo_group(spec: ModelSpec, target: Target) -> str | None:
    """Targets in one group run on one worker, one after another (``Backend.memo_group``)."""
    group = default_registry().get(target.backends[0]).memo_group
    return f"{spec.name}:{target.precision.value}:{group}" if group else None


def _from_cache(spec: ModelSpec, targets: list[Target], config: ExportConfig):
    """(targets still to do, rows restored from the cache, cache key per target name)."""
    keys, todo, restored = {}, [], []
    for t in targets:
        try:
            keys[t.name] = cache.key_for(spec, t, config, versions(set(t.backends)))
        except OSError:
            todo.append(t)  # an unreadable weights file: the capture will say so
            continue
        rec = cache.restore(keys[t.name], artifact_path(config.out_dir, spec, t)) if config.cache else None
        if rec is None:
            todo.append(t)
        else:
            restored.append(rec)
    return todo, restored, keys


def _store(fresh: list[tuple[str | None, Record]]) -> None:
    for key, rec in fresh:
        if key:
            cache.store(key, rec, update=True)  # stored as it finished; now with its p50


def _explain_failure(outcome, capture: bool = False) -> tuple[str, str | None]:
    """A failed job's reason and fix; ``capture``: the job was a model's capture, which no
    other backend would change."""
    if outcome.timed_out:
        return outcome.crash, "give a longer --timeout for a slow " + ("capture" if capture else "lowering, or try another backend")
    if outcome.crash and outcome.crash.startswith(CLUSTER_LOST):
        return outcome.crash, RESUME
    if outcome.crash:
        return outcome.crash, ("the native code crashed: run with --debug for its output" if capture else
                               "the native code crashed: try another backend (--debug shows its output)")
    exc = outcome.error
    if isinstance(exc, PteforgeError):
        return str(exc), exc.fix

    return one_line(exc), None


def _print_traceback(config: ExportConfig, outcome) -> None:
    if config.debug and outcome.traceback:
        print(outcome.traceback, file=sys.stderr)


def _make_row(spec: ModelSpec, target: Target, status: Status, reason: str, fix: str | None) -> Record:
    return Record(
        model=spec.name, family=spec.family, task=spec.task, target=target.name,
        backends=list(target.backends), precision=target.precision.value,
        status=status, reason=reason, fix=fix,
        input_shapes=[list(i.shape) for i in spec.fed], target_spec=target,
    )


def _same_program(record: Record, spec: ModelSpec, target: Target, config: ExportConfig) -> Record:
    """``record`` (a finished job) for ``target``, whose lowering is the same: the program,
    and its bundle, are copied under ``target``'s name instead of lowered again."""
    rec = copy.deepcopy(record)
    rec.target, rec.backends, rec.target_spec = target.name, list(target.backends), target
    rec.same_program_as, rec.timings = record.target, {}
    if record.artifact is not None and rec.artifact is not None:  # rec: a copy of record
        path = artifact_path(config.out_dir, spec, target, failed=record.status is Status.MISMATCH)
        write_atomic(path, Path(record.artifact.path).read_bytes())
        rec.artifact.path = str(path)
        if record.bundle and rec.bundle:
            bpte = path.with_suffix(".bpte")
            write_atomic(bpte, Path(record.bundle["file"]).read_bytes())
            rec.bundle["file"] = str(bpte)
    return rec

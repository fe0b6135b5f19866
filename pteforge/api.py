"""Orchestration in plain functions: resolve targets, capture once, export every target."""

from __future__ import annotations

import contextlib
import os
import dataclasses
import tempfile
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Protocol

from .backends import Availability, availability, default_registry
from .core.errors import CaptureError, NoBackendError, PteforgeError, UsageError, one_line
from .families import family
from .core.registry import Registry
from .core.result import Record, Stage, Status, Unavailable, ran_here, settle  # noqa: F401 - part of the API
from .core.spec import AccuracyBudget, ExportConfig, ModelSpec, Target, TargetRequest


class Reporter(Protocol):
    def model_started(self, spec: ModelSpec, index: int, total: int) -> None: ...
    def stage(self, model: str, target: str | None, stage: Stage) -> None: ...
    # optional: ``step(model, target, stage, step)``, how far a long stage is ("input 4 of 9")
    def record(self, record: Record) -> None: ...


class SilentReporter:
    def model_started(self, spec, index, total):
        pass

    def stage(self, model, target, stage):
        pass

    def record(self, record):
        pass


@dataclass
class TargetPlan:
    targets: list[Target]
    unavailable: list[Unavailable] = field(default_factory=list)
    available_names: list[str] = field(default_factory=list)
    references: list[str] = field(default_factory=list)  # fp32 targets added to measure reduced ones against
    auto: list = field(default_factory=list)  # AutoGroup per backend under --precision auto
    auto_notes: list[str] = field(default_factory=list)


def backends(here=None, on: str | None = None) -> list[Availability]:
    """Every backend with its two answers: can it lower here, can it run here. ``on``
    (linux, macos, windows) answers for that host OS instead: its wheel's recorded runtime,
    and the backends' declared lowering hosts (this host's own answers when it is that OS)."""
    from .runtime.host import Host, host
    from .core.system import os_name

    if on is None or on == os_name():
        return [availability(b, here or host()) for b in default_registry()]
    there = Host.recorded(on, (here or host()).operators)
    return [availability(b, there, on) for b in default_registry()]


def plan_targets(
    requests: list[str] | None,
    registry: Registry | None = None,
    platform: str | None = None,
    precision: str | None = None,
    here=None,
) -> TargetPlan:
    """Turn ``--backends`` words into targets; sort out what cannot lower here.

    Unknown names and precisions a backend does not take are usage errors, raised
    before any work. ``None`` means every backend that can lower here. ``platform``
    (``--target ios``) adds that platform's backends in priority order: when they
    cannot lower here they are listed, but do not fail the run. ``precision`` (``--precision``) is the precision
    of targets that name none, or ``auto``. A reduced-precision target that runs here brings
    its fp32 reference, to be timed against (see :mod:`pteforge.app.precision`).
    """
    from .app.precision import expand_auto, with_references
    from .core.spec import Precision

    registry = registry or default_registry()
    implied: frozenset[str] = frozenset()
    if platform:
        from .app.platforms import targets_for

        implied = frozenset(targets_for(platform)) - set(requests or [])
        requests = [*targets_for(platform), *(requests or [])]
    plan = _plan(requests, registry, implied, None if precision in (None, "auto") else Precision.parse(precision))
    from .runtime.host import host

    here = here or host()
    if precision == "auto":
        plan.targets, plan.auto, plan.auto_notes = expand_auto(plan.targets, here)
    plan.targets, plan.references = with_references(
        plan.targets, lambda t: all(registry.get(b).run_check(here).ok for b in t.backends))
    return plan


@dataclass
class Request:
    """What ``pteforge export`` was asked for, resolved before any work: the models, the
    target plan (None without models), and what to tell the user on the way."""

    models: list[ModelSpec]
    plan: TargetPlan | None
    notes: list[str] = field(default_factory=list)


def requested(values: dict) -> Request:
    """The export the options ask for. ``values``: each option by name (``options.py``),
    and each task family's word (``mobilenet``, ``yolo_pose``: its models), as the
    command line and the config file give them."""
    models, notes = _selected_models(values), []
    if values.get("calibration"):
        from .core.samples import holds_samples
        from .app.vision import image_dir

        if not holds_samples(values["calibration"]):
            _, note = image_dir(values["calibration"], "--calibration", values["calibration_samples"])
            notes += [note] if note else []
    requests, others = values.get("backends"), []
    if requests is None and values.get("target") is None and models and all(m.task == "text-generation" for m in models):
        from .text.llm import default_targets

        requests, others = default_targets()  # every precision of the backends that export language models
    models, requests = _own_targets(models, requests, values)
    plan = plan_targets(requests, platform=values.get("target"), precision=values.get("precision")) if models else None
    if plan:
        plan.unavailable += others
    return Request(models, plan, notes)


def _selected_models(values: dict) -> list:
    from .families import families
    from .models import select_models

    chosen = {fam.word.replace("-", "_"): values.get(fam.word.replace("-", "_")) for fam in families() if fam.models}
    own = {k: values.get(k) for k in ("task", "name", "labels_file", "fit", "mean", "std")}
    return select_models(**chosen, every=values.get("all", False), refs=values.get("model") or [],
                         llms=values.get("llm") or [], max_seq_len=values.get("max_seq_len"),
                         input_shapes=values.get("input_shape") or [], input_dtypes=values.get("input_dtype") or [],
                         labels_only=values.get("labels", False), own=own)


def _own_targets(models: list, requests, values: dict) -> tuple[list, list | None]:
    """Where a config file's [[model]] table gives a model its own backends or precision: the
    run's requests become those of every model together, and each model keeps the names of
    its own targets (``ModelSpec.targets``), the others the run's."""
    if not any(m.targets for m in models):
        return models, requests

    def asked(plan) -> tuple[str, ...]:
        return tuple(t.name for t in plan.targets if t.name not in plan.references)

    run = plan_targets(requests, platform=values.get("target"), precision=values.get("precision"))
    every, named = list(asked(run)), []
    for m in models:
        if not m.targets:
            named.append(dataclasses.replace(m, targets=asked(run)))
            continue
        own = [r.replace("*", b.split(":")[0], 1) for r in m.targets for b in (asked(run) if r.startswith("*:") else [r])]
        mine = asked(plan_targets(own, precision=values.get("precision")))
        every += [t for t in mine if t not in every]
        named.append(dataclasses.replace(m, targets=mine))
    return named, every


def check_surroundings(values: dict) -> list[str]:
    """Before any work: the site ``publish`` writes, refused when it cannot be; and a note
    when the cache directory cannot be written (the run goes on without it)."""
    from .core.io import CACHE_ENV, unwritable

    if values.get("publish"):
        from .app.publish import check_site, runtimes_for
        from .core.spec import check_base_url

        if values.get("publish_base_url") is not None:
            check_base_url(values["publish_base_url"], "--publish-base-url")
        elif not values.get("publish_relative") and not values.get("base_url"):  # --base-url: publish's default
            raise UsageError("--publish without --publish-base-url or --base-url: every remoteUrl published would be "
                             "relative, and the executorch_flutter app downloads remoteUrl as it is",
                             fix="give --publish-base-url URL (where SITE will be served), or --publish-relative")
        check_site(Path(values["publish"]), "--publish")
        if values.get("publish_runtime"):
            runtimes_for(metadata.version("executorch").split("+")[0], values["publish_runtime"], "--publish-runtime")
    why = unwritable()
    return [] if why is None else [f"cannot write the cache directory {why}: this run keeps nothing there for the next "
                                   f"one (fix: set {CACHE_ENV} to a writable directory)"]


def _plan(requests, registry: Registry, implied: frozenset[str], default) -> TargetPlan:
    lowerable = [b.name for b in registry if b.lower_check().ok]
    if requests is None:
        targets = []
        for name in lowerable:
            b = registry.get(name)
            p = default if default in b.precisions else b.default_precision
            targets.append(Target((name,), p, default_precision=p is b.default_precision))
        return TargetPlan(targets, [], lowerable)
    plan = TargetPlan([], [], lowerable)
    seen: set[str] = set()
    for text in requests:
        req = TargetRequest.parse(text)
        chain = tuple(registry.resolve(name) for name in req.backends)
        if len(set(chain)) != len(chain):
            raise UsageError(f"target '{text}' names a backend twice", fix="name each backend once in a chain")
        primary = registry.get(chain[0])
        precision = req.precision or default or primary.default_precision
        if precision not in primary.precisions and precision not in primary.llm_precisions:
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
            plan.unavailable.append(Unavailable(target.name, blocked[1], requested=text not in implied))
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

    registry = default_registry()
    names = ["torch", "torchvision", "executorch", "torchao"]  # torchao: PT2E quantization
    for b in sorted(chain_backends):
        names.extend(req.distribution for req in registry.get(b).requires)
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
    choices: list[dict] = field(default_factory=list)  # --precision auto's winners and why
    references: list[str] = field(default_factory=list)  # targets added to measure reduced precisions against
    log: Path | None = None  # what libraries printed in the run's processes (none: nothing, or --debug)
    budget: AccuracyBudget | None = None  # --accuracy-budget (None: each task's default)

    @property
    def ok(self) -> bool:
        return not any(u.requested for u in self.unavailable) and all(r.status.ok and not r.arm64_failed
                                                                      for r in self.records)


def export(
    models: list[ModelSpec],
    plan: TargetPlan,
    config: ExportConfig,
    reporter: Reporter | None = None,
    write_labels: bool = False,
) -> RunResult:
    """Capture each model once and lower it for every target, each job in a worker process.

    A model that cannot be captured fails its rows (CAPTURE_FAILED) and the run goes
    on; a worker that crashes or hangs fails its row with the signal or the timeout.
    Every finished row is merged into the manifest at once, so an interrupted or
    killed run keeps what finished.
    """
    from .core.io import remove_run_temporaries, work_dir

    reporter = reporter or SilentReporter()
    created = not Path(config.out_dir).exists()
    out = _checked_out(models, config, plan)
    started = time.monotonic()
    run = _Run(plan, config, reporter)
    run.look_up(models)
    if run.pending and config.executor == "local":
        from .run.workers import start_fork_server

        start_fork_server(quiet=not config.debug)  # its imports (~4 s) overlap the labels' and the pool's start; not started when all came from the cache
    run_id, log = _start_run(config)
    needs = _label_files(models, write_labels)
    try:
        # Label names come from the families' libraries (torchvision: ~2.5 s of imports): read
        # in a thread, beside the pool's start (Ray's cluster, the workers' imports) and the
        # captures, and needed only when the first row is merged.
        with ThreadPoolExecutor(1, thread_name_prefix="pteforge-labels") as side:
            labels = side.submit(_labels_made, needs, config.base_url)
            with _pool(config, len(plan.targets) * len(models), run.on_stage) as pool, \
                    _capture_pool(config, pool, len(run.pending), run.on_stage) as captures, \
                    tempfile.TemporaryDirectory(prefix="pteforge-", dir=work_dir()) as work:  # shared by every Ray node
                run.sink = sink = _ManifestSink(out, config, labels, set(plan.references))
                if needs and not models:
                    sink.merge([], None)
                run.pool, run.capture_pool, run.work = pool, captures, Path(work)
                run.all(models)
                choices = _measure(run, out, models, time.monotonic() - started) if models else []
                if models and "arm64" in (config.prove_on or ()):
                    _prove_on_arm64(run, out, models)
                sink.labels  # noqa: B018 - a failure to write them is the run's, even with no row to merge
    except BaseException:
        remove_run_temporaries(out, run_id)
        if created:
            with contextlib.suppress(OSError):
                out.rmdir()  # made for this run, which wrote nothing in it: not left behind
        raise
    finally:
        log = _kept_log(log)
    if models:
        _store(run.fresh)
        write_run_reports(out, run.records, plan, config)
    written = sink.path if (models or needs) and sink.path.exists() else None  # none when no row wrote anything
    return RunResult(run.records, plan.unavailable, written, choices, list(plan.references), log, config.accuracy_budget)


def _start_run(config: ExportConfig) -> tuple[str, Path | None]:
    """The run's id (the names of its temporary files; workers inherit it) and its log."""
    import uuid

    from .core.io import RUN_ID_ENV

    run_id = uuid.uuid4().hex[:12]
    os.environ[RUN_ID_ENV] = run_id
    return run_id, _run_log(run_id, config)


def _run_log(run_id: str, config: ExportConfig) -> Path | None:
    """Where what libraries print in this run's processes goes (``workers.silence``): a file
    of its own in the cache directory (the newest 20 runs' are kept); none with --debug,
    which shows it all on the terminal."""
    from .core.io import cache_root
    from .run.workers import RUN_LOG_ENV

    os.environ.pop(RUN_LOG_ENV, None)
    if config.debug:
        return None
    logs = cache_root() / "logs"
    try:
        logs.mkdir(parents=True, exist_ok=True)
        for old in sorted(logs.glob("run-*.log"), key=lambda p: p.stat().st_mtime)[:-19]:
            old.unlink(missing_ok=True)
    except OSError:
        return None
    path = logs / f"run-{run_id}.log"
    os.environ[RUN_LOG_ENV] = str(path)
    return path


def _kept_log(log: Path | None) -> Path | None:
    """The run's log when anything was written to it; an empty one is removed."""
    from .run.workers import RUN_LOG_ENV

    os.environ.pop(RUN_LOG_ENV, None)
    try:
        if log is not None and log.stat().st_size > 0:
            return log
        if log is not None:
            log.unlink()
    except OSError:
        pass
    return None


def _labels_made(needs: dict[tuple[str, str], tuple[str, ...]], base_url: str | None) -> dict:
    """The labels files' bytes and entries, each with its model's own names or, for ``()``,
    its family's (written when a row that uses one is merged: ``_ManifestSink``)."""
    from .families import labels_for
    from .report.entries import label_files

    return label_files({key: list(own) or labels_for(key[0]) for key, own in needs.items()}, base_url)


def _label_files(models: list[ModelSpec], every: bool) -> dict[tuple[str, str], tuple[str, ...]]:
    """The labels files the run writes, (category, file) -> the model's own names (``()``: the
    family's): its models', and with ``every`` (``--labels``) every family's."""
    from .models.catalog import build_catalog

    return {(m.family, m.labels): m.names for m in [*(build_catalog() if every else []), *models] if m.labels}


def _checked_out(models: list[ModelSpec], config: ExportConfig, plan: TargetPlan) -> Path:
    """The output directory, made, once everything ``check_before_work`` checks holds."""
    from .core.io import work_dir

    out = check_before_work(models, config, plan, create=True)
    work_dir()
    return out


def check_before_work(models: list[ModelSpec], config: ExportConfig, plan: TargetPlan | None,
                      create: bool = False) -> Path:
    """Every check a run makes before any work, the same for ``--dry-run`` (which creates
    nothing): the run's options, each factory importable and callable, the output directory
    writable and the manifest already in it (a broken one is refused) compatible."""
    from .core.io import check_output_dir
    from .models.custom import check_factory
    from .report.manifest import MANIFEST_NAME, load_manifest

    check_run(models, config, plan)
    for m in models:
        if m.source == "factory":
            check_factory(m.factory)
    out = Path(config.out_dir)
    check_output_dir(out, create=create)
    existing = load_manifest(out / MANIFEST_NAME) if out.is_dir() else None
    if existing is not None:
        _check_against(existing, models, out)
    return out


def planned_jobs(models: list[ModelSpec], plan: TargetPlan | None, config: ExportConfig) -> list[tuple]:
    """The run's jobs as ``export`` makes them: (model, its targets, how many of them the
    artifact cache holds), each model with the targets it takes (a [[model]] table's own, an
    fp32 reference only where a target it takes needs one)."""
    from .run import cache

    if plan is None:
        return []
    jobs = []
    for spec in models:
        targets, held = _targets_of(spec, plan), 0
        for t in targets if config.cache else ():
            with contextlib.suppress(OSError):  # an unreadable weights file: the capture will say so
                held += cache.holds(cache.key_for(spec, t, config, versions(set(t.backends))))
        jobs.append((spec, targets, held))
    return jobs


def _pool(config: ExportConfig, jobs: int, on_stage):
    """Where the jobs run: worker processes here, or Ray tasks (--executor ray)."""
    from .run.workers import WorkerPool, default_size

    if config.executor == "ray":
        from .run.ray_pool import RayPool

        return RayPool(config.ray_address, size=config.jobs, quiet=not config.debug, on_stage=on_stage,
                       resources=_ray_resources, jobs=jobs)
    return WorkerPool(config.jobs or default_size(jobs), quiet=not config.debug, on_stage=on_stage)


def _capture_pool(config: ExportConfig, pool, captures: int, on_stage):
    """Where the captures run: on the local executor, worker processes of their own, started
    fresh (spawn), which import torch and not ExecuTorch: the first capture then runs beside
    the fork server's imports (~4 s) instead of after them (the first target job started
    ~1 s sooner on mobilenet_v3_small). When an earlier run in this process left the fork
    server ready, forked from it: a fresh interpreter's imports took ~6 s of a tiny model's
    7 s capture. On Ray, the pool's tasks."""
    from .run.workers import WorkerPool, default_size, fork_server_ready

    if config.executor != "local":
        return contextlib.nullcontext(pool)
    return WorkerPool(config.jobs or default_size(captures), quiet=not config.debug, on_stage=on_stage,
                      fresh=not fork_server_ready())


def _ray_resources(job) -> dict:
    """A target job asks for the Ray resource of its backends' SDK nodes (``ray_resource``),
    when the cluster has such nodes; captures run anywhere."""
    import ray

    target = getattr(job, "target", None)  # a TargetJob's; captures run anywhere
    have = ray.cluster_resources() if target is not None else {}
    wanted = {default_registry().get(b).ray_resource for b in getattr(target, "backends", ())}
    return {r: 0.001 for r in wanted if r and have.get(r)}


class _Run:
    """One export run: every model's capture job, then every (model, target) job, longest
    first, on the pool; rows are merged into the manifest and cached as each finishes, so an
    interrupted run started again does only what is missing."""

    def __init__(self, plan: TargetPlan, config: ExportConfig, reporter):
        self.plan, self.config, self.reporter = plan, config, reporter
        self.pool = self.capture_pool = self.work = self.sink = None
        self.looked: list[tuple[ModelSpec, list[Target], list[Record], dict]] = []  # (model, to do, restored, cache keys)
        self.records: list[Record] = []
        self.fresh: list[tuple[str | None, Record]] = []  # (cache key, row) of the work done in this run
        self.stages: dict[str, Stage] = {}  # job key -> the stage it is in
        self.names: dict[str, tuple[str, str | None]] = {}  # job key -> (model, target)
        self.fp32_bytes: dict[str, int] = {}  # model -> its weights at fp32 (its capture's)
        self.references: dict[str, str] = {}  # model -> its eager reference (inputs, outputs), while the run lasts

    def on_stage(self, key: str, stage: Stage | str) -> None:
        name, _, step = (stage.value if isinstance(stage, Stage) else stage).partition(" ")
        self.stages[key] = Stage(name)
        if not step:
            self.reporter.stage(*self.names[key], self.stages[key])
        elif hasattr(self.reporter, "step"):  # "verify input 4 of 9": how far a long stage is
            self.reporter.step(*self.names[key], self.stages[key], step)

    def look_up(self, models: list[ModelSpec]) -> None:
        """What the cache already holds, and what is left to do."""
        self.looked = [(spec, *_from_cache(spec, _targets_of(spec, self.plan), self.config)) for spec in models]

    @property
    def pending(self) -> list[tuple[ModelSpec, list[Target], dict]]:
        return [(spec, todo, keys) for spec, todo, _, keys in self.looked if todo]

    def all(self, models: list[ModelSpec]) -> None:
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
        captures = self._captures(pending)
        ended = {(r.model, r.target) for r in self.records if r.status is Status.CAPTURE_FAILED}
        self._targets([(spec, captures[spec.name], [t for t in todo if (spec.name, t.name) not in ended], keys)
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
        from .run.jobs import CaptureJob

        jobs = []
        for spec, todo, _ in pending:
            base = dict(spec=spec, config=self.config.for_jobs(), work_dir=self.work / spec.name,
                        timeout=self.config.timeout)
            jobs.append((CaptureJob(key=f"{spec.name}/capture", **base), spec, todo))
            for precision, pairs in _variant_groups(spec, todo).items():
                jobs.append((CaptureJob(key=f"{spec.name}/capture {precision}", variants=tuple(pairs), main=False, **base),
                             spec, [t for t in todo if (t.primary, t.precision) in pairs]))
        return jobs

    def _captures(self, pending) -> dict:
        """Each model captured once, then its variants, the models in parallel: {model name: Capture}."""
        jobs = {job.key: (job, spec, needs) for job, spec, needs in self._capture_jobs(pending)}
        for job, spec, _ in jobs.values():
            self.names[job.key] = (spec.name, None)
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
                    _debug_traceback(self.config, outcome)
            lost.setdefault(spec.name, []).append((outcome, needs))
        if refused and len(refused) == len(self.looked):
            raise next(iter(refused.values()))  # no model to go on with: the first one's error, and its exit code
        captures = {}
        for spec, todo, _ in pending:
            failed = {t.name: outcome for outcome, needs in lost.get(spec.name, []) for t in needs}
            main = next((c for c in made.get(spec.name, []) if c.pt2_path), None)
            if main is not None:
                captures[spec.name] = _merged(main, made[spec.name])
                self.references[spec.name] = main.reference_path
                self.fp32_bytes[spec.name] = main.fp32_bytes
            for target in todo:  # the other models, and this model's other targets, go on
                outcome = failed.get(target.name)
                if outcome is not None:
                    reason, fix = _failure_text(outcome, capture=True)
                    rec = _row(spec, target, Status.CAPTURE_FAILED, reason, fix)
                    self.records.append(rec)
                    self.reporter.record(rec)
        if self.capture_pool is not self.pool:
            self.capture_pool.close()  # its processes' memory back before the targets' jobs
        return captures

    def _targets(self, work) -> None:
        from .run import schedule
        from .run.jobs import TargetJob, steps_of
        from .run.pipeline import lowering_key, same_program

        jobs, same = {}, {}  # job key -> the targets whose program that job's lowering makes too
        for spec, cap, todo, keys in work:
            leaders = {}
            if sum(t.precision.quantized for t in todo) > 1:
                cap = dataclasses.replace(cap, share_quantized=True)  # what one quantizes, the others may load
            for target in todo:
                lowering = (lowering_key(target), steps_of(spec))
                if lowering in leaders:
                    same[leaders[lowering]].append((target, keys.get(target.name)))
                    continue
                key = leaders[lowering] = f"{spec.name}/{target.name}"
                self.names[key], same[key] = (spec.name, target.name), []
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
                _debug_traceback(self.config, outcome)
                status = Stage(self.stages.get(outcome.job.key, Stage.LOWER)).crash_status
                rec = _row(spec, target, status, *_failure_text(outcome))
            rec.timings = {**{k: round(v, 3) for k, v in cap.timings.items()}, **rec.timings}
            self._finished(spec, rec, cache_key)
            for other, other_key in same[outcome.job.key]:
                self._finished(spec, same_program(rec, spec, other, self.config), other_key)
        schedule.remember([rec for _, rec in self.fresh])

    def _finished(self, spec: ModelSpec, rec: Record, cache_key: str | None) -> None:
        from .run import cache

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


def _merged(main, variants: list):
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


def _memo_group(spec: ModelSpec, target: Target) -> str | None:
    """Targets in one group run on one worker, one after another (``Backend.memo_group``)."""
    group = default_registry().get(target.backends[0]).memo_group
    return f"{spec.name}:{target.precision.value}:{group}" if group else None


def check_run(models: list[ModelSpec], config: ExportConfig, plan: TargetPlan | None = None) -> None:
    """What the command line refuses, refused here too, before any work."""
    if plan is not None and plan.auto and config.bench_runs == 0:
        raise UsageError("--precision auto picks the fastest precision, and --bench-runs 0 times none",
                         fix="drop --bench-runs 0, or give one precision")

    if config.calibration_dir is not None:
        _check_calibration(models, config)
    _check_names(models)
    for m in models:
        family(m.family).check(m, config)


def _check_calibration(models: list[ModelSpec], config: ExportConfig) -> None:
    """``--calibration DIR``: input files every model takes (each file read and checked
    against each model's inputs, where they are known), or photos for image models only."""
    from .core import samples
    from .app.vision import image_dir, takes_images

    if samples.holds_samples(config.calibration_dir):
        files = [p for part in samples.split(config) for p in part]
        for m in models:
            for p in files if m.fed else ():
                samples.load(p, m)
        return
    image_dir(config.calibration_dir, "--calibration", config.calibration_samples)
    others = [m.name for m in models if not takes_images(m)]
    if others:
        raise UsageError(
            f"--calibration DIR of photos applies to image models; {', '.join(others)} take(s) no image input",
            fix="give these models a directory of their own input files (.npy or .npz, one sample a file), "
                "or export them in a separate run",
        )


def _check_names(models: list[ModelSpec]) -> None:
    """Two models of one name would write the same files and manifest entries."""
    seen: dict[str, ModelSpec] = {}
    for m in models:
        other = seen.setdefault(m.name, m)
        if other is not m and other != m:
            raise UsageError(
                f"two models are named {m.name}: {_origin(other)} and {_origin(m)}; one would overwrite the other",
                fix="rename one factory, or export them in separate runs to different --out directories",
            )


def _check_against(manifest, models: list[ModelSpec], out: Path) -> None:
    """A model whose name an earlier run in ``out`` gave to another model is refused."""
    for m in models:
        for e in manifest.artifacts():
            if (e.model or e.modelName) == m.name and e.source is not None and e.source != m.source_ref:
                raise UsageError(
                    f"{out} already holds a model named {m.name} from {e.source}; {_origin(m)} would overwrite it",
                    fix="rename the factory, or export to another --out",
                )


def _origin(spec: ModelSpec) -> str:
    return {"catalog": f"catalog model {spec.name}", "factory": spec.factory}.get(spec.source, str(spec.path))


def _targets_of(spec: ModelSpec, plan: TargetPlan) -> list[Target]:
    """The run's targets for ``spec``: an fp32 reference only where a target that needs it
    is one the model's family takes (a language model asked for xnnpack:int8, which it is
    not exported at, got an unasked xnnpack program)."""
    from .app.precision import fp32_reference

    fam, references = family(spec.family), set(plan.references)
    asked = [t for t in plan.targets if t.name not in references and (spec.targets is None or t.name in spec.targets)]
    needed = {ref.name for t in asked if fam.supports(t) for ref in [fp32_reference(t)] if ref is not None}
    return [t for t in plan.targets if t in asked or t.name in needed]


def _from_cache(spec: ModelSpec, targets: list[Target], config: ExportConfig):
    """(targets still to do, rows restored from the cache, cache key per target name)."""
    from .run import cache
    from .run.pipeline import artifact_path

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
    from .run import cache

    for key, rec in fresh:
        if key:
            cache.store(key, rec, update=True)  # stored as it finished; now with its p50


def _measure(run: _Run, out: Path, models, seconds: float) -> list[dict]:
    """p50s of what runs here, reduced precisions against their fp32 reference (or the
    model's fp32 weights), and --precision auto's choices; written into the manifest."""
    from .app.precision import choose, reference_pairs, relate_latency
    from .core.samples import holds_samples, token_ids
    from .report.manifest import set_precision_choices, update_entries

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
    _time([r for r in records if r.generation is None], [r for r in needed if r.generation is None],
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


def _prove_on_arm64(run: _Run, out: Path, models: list[ModelSpec]) -> None:
    """export --prove-on arm64: the XNNPACK and portable programs again, on Arm64 under
    emulation, one process for all; each verdict into its row, the manifest and the cache."""
    from .report.manifest import update_entries
    from .run.arm64_proof import prove

    run.reporter.stage("*", None, Stage.ARM64)
    prove(run.records, run.references, {s.name: s for s in models}, run.config, run.work)
    update_entries(out, {Path(r.artifact.path).name: {"arm64": r.arm64} for r in run.records
                         if r.arm64 is not None and r.artifact is not None})


def setup_arm64(say) -> dict:
    """``pteforge setup arm64``: ExecuTorch's aarch64 runtime under emulation, in pteforge's cache."""
    from .runtime.arm64 import method
    from .runtime.arm64_setup import setup

    found = setup(say)
    return {**found, "method": method(found)}


def _time(records: list[Record], needed: list[Record], config: ExportConfig, reporter, pool, seconds: float) -> None:
    """p50 after warm-up of what runs here, in one worker while no other job runs."""
    from .run.speed import time_artifacts, timing_plan
    from .run.workers import Call

    items = timing_plan(records, needed, seconds, config.bench_runs)
    if not items:
        return
    reporter.stage("*", None, Stage.TIMING)
    job = Call(key="*/timing", fn=time_artifacts, args=([(r.artifact.path, n) for r, n in items],), timeout=config.timeout)
    [outcome] = list(pool.run([job]))
    for rec, _ in items:
        if outcome.ok:
            rec.latency = outcome.value[rec.artifact.path]
        else:
            rec.latency = {"skipped": f"timing failed: {outcome.crash or one_line(outcome.error)}"}


def write_run_reports(out: Path, records: list[Record], plan: TargetPlan, config: ExportConfig) -> None:
    """EXPORT_SUMMARY.md, report.json, report.html — and with --oplist the selective-build files."""
    from .report.manifest import MANIFEST_NAME, load_manifest
    from .report.summary import write_reports

    manifest = load_manifest(out / MANIFEST_NAME)
    if manifest is None:
        return
    failures = [
        {"model": r.model, "target": r.target, "status": r.status.value, "reason": r.reason}
        for r in records if not r.status.ok
    ] + [
        {"model": "*", "target": u.target, "status": "UNAVAILABLE", "reason": u.check.reason}
        for u in plan.unavailable
    ]
    write_reports(out, manifest, failures)
    if config.oplist:
        from .report.oplist import MERGED_NAME, artifact_oplist, cmake_lines, merge_oplists

        done = [r for r in records if r.artifact and r.status.ok]
        lists = [artifact_oplist(Path(r.artifact.path)) for r in done]
        merged = merge_oplists(lists, out / MERGED_NAME)
        delegates = {d for r in done for d in r.artifact.delegation.delegates_in_program}
        from .core.io import write_atomic

        kernels = {k for r in done for k in r.artifact.delegation.kernels}
        write_atomic(out / "executorch_link.cmake",
                     cmake_lines(delegates, [b for b in default_registry() if b.name in {n for r in done for n in r.backends}],
                                 merged.name, kernels))


class _ManifestSink:
    """Merges finished rows into ``<out>/index.json`` as they come."""

    def __init__(self, out: Path, config: ExportConfig, labels: Future, references: set[str]):
        from .report.manifest import MANIFEST_NAME

        self.out, self.config, self._labels = out, config, labels
        self.references = references  # targets added only to measure reduced precisions against
        self.path = out / MANIFEST_NAME
        self.written: set[tuple] = set()  # the labels files written so far, by (category, file)

    @property
    def labels(self) -> dict:
        """The labels files' entries written so far (``report.entries.label_files``)."""
        made = self._labels.result()
        return {key: entry for key, (_, entry) in made.items() if key in self.written}

    def _write_labels(self, keys) -> None:
        """The labels files of ``keys`` (every one for None), when a row that uses them is merged."""
        from .report.entries import write_label_file

        made = self._labels.result()
        for key in made if keys is None else keys:
            if key in made and key not in self.written:
                write_label_file(self.out, *made[key])
                self.written.add(key)

    def merge(self, records: list[Record], spec: ModelSpec | None) -> None:
        from .app.platforms import fallback_tables
        from .families import families
        from .report.entries import labels_entries, manifest_entries
        from .report.manifest import BackendEntry, merge

        if spec is not None and not any(r.artifact for r in records):
            return  # nothing of it on disk: the manifest and its labels stay as they were
        self._write_labels([(spec.family, spec.labels)] if spec else None)
        apps = app_backends()
        entries = (
            manifest_entries(records, spec, self.out, self.config, self.labels,
                             versions({b for r in records for b in r.backends}), apps)
            if spec else []
        )
        backend_entries = {apps[r.backends[0]].manifest_name: BackendEntry(description=apps[r.backends[0]].description)
                           for r in records if r.artifact}
        references = {e.name for e in entries if e.target in self.references}
        family_files = {fam.category: fam.labels_file for fam in families()}
        merge(self.out, entries, labels_entries(self.labels, family_files), backend_entries, self.config.base_url,
              fallback_tables(), references, self.config.offer_out_of_budget)


def app_backends() -> dict:
    """What the manifest tells the app of each backend (``report.entries.AppBackend``), by name."""
    from .report.entries import AppBackend

    return {b.name: AppBackend(b.name, b.manifest_name(), b.app_platforms(), list(b.platforms), b.description)
            for b in default_registry()}


def _failure_text(outcome, capture: bool = False) -> tuple[str, str | None]:
    """A failed job's reason and fix; ``capture``: the job was a model's capture, which no
    other backend would change."""
    from .run.workers import CLUSTER_LOST, RESUME

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


def _debug_traceback(config: ExportConfig, outcome) -> None:
    if config.debug and outcome.traceback:
        import sys

        print(outcome.traceback, file=sys.stderr)


def _row(spec: ModelSpec, target: Target, status: Status, reason: str, fix: str | None) -> Record:
    return Record(
        model=spec.name, family=spec.family, task=spec.task, target=target.name,
        backends=list(target.backends), precision=target.precision.value,
        status=status, reason=reason, fix=fix,
        input_shapes=[list(i.shape) for i in spec.fed], target_spec=target,
    )


# -- the other commands: each one function the CLI calls, then renders ----------------------
@dataclass
class ValidationRun:
    root: Path  # the export's directory
    results: list
    output: Path  # validation_report.json
    report_html: bool  # report.html was rewritten with this validation
    site: Path | None = None  # the published site the directory lies in: validate wrote nothing into it
    drawn: Path | None = None  # --draw: where the annotated photos went


def validate_dir(directory: str | None, models_dir: str | None, images_dir: str | None, timeout: float,
                 draw: str | None, output_file: str | None, on_file=None, warn=None) -> ValidationRun:
    """``pteforge validate``: every artifact of an export's directory run on the photos (the
    shipped ones, or ``images_dir``), decoded as the app would; the report written."""
    from .report.summary import rewrite_html
    from .app.validate import report_place, validate, write_report
    from .app.vision import image_dir, shipped_images

    if directory and models_dir and Path(directory).resolve() != Path(models_dir).resolve():
        raise UsageError(f"two directories to validate: {directory} and --models-dir {models_dir}", fix="give one of them")
    if not timeout > 0 or timeout == float("inf"):
        raise UsageError(f"--timeout must be a positive number of seconds (got {timeout:g})",
                         fix="give the seconds a file may take, e.g. --timeout 300")
    root = Path(directory or models_dir or "models")
    if not root.is_dir():
        raise UsageError(f"{root} is not a directory", fix="export first, or give the directory of your artifacts")
    images, note = image_dir(images_dir, "--images-dir") if images_dir else (shipped_images(), None)
    if note and warn is not None:
        warn(note)
    place = report_place(root, output_file, draw)  # never into a published site, which validate only reads
    results = validate(root, images, on_file=on_file, timeout=timeout, draw=place.draw)
    write_report(place.output, results, images, root)
    return ValidationRun(root, results, place.output, place.site is None and rewrite_html(root, place.output), place.site,
                         place.draw)


def bench_files(path: str, runs: int, warmup: int, against_eager: bool) -> list:
    """``pteforge bench``: p50 and peak memory of each artifact under ``path`` that runs here."""
    from .app.bench import bench

    if not Path(path).exists():
        raise UsageError(f"{path}: no such file or directory", fix="give a directory of artifacts or a .pte")
    if runs < 1 or warmup < 0:
        raise UsageError("--runs must be >= 1 and --warmup >= 0", fix="give positive numbers")
    return bench(Path(path), runs, warmup, against_eager)


def select_best(names: list[str], manifest: str | None, platform: str | None):
    """``pteforge select [MANIFEST] MODEL``: the artifact an app on ``platform`` loads."""
    from .app.selection import select

    if len(names) > 2:
        raise UsageError(f"select takes a manifest and a model, not {len(names)} names",
                         fix="pteforge select [models/index.json] MODEL")
    *given, model = names
    if given and manifest and Path(given[0]).resolve() != Path(manifest).resolve():
        raise UsageError(f"two manifests: {given[0]} and --manifest {manifest}", fix="give one of them")
    return select(given[0] if given else manifest or "models/index.json", model, platform)


@dataclass
class ManifestCheck:
    path: Path
    manifest: object  # report.manifest.Manifest
    notes: list[str]


def check_manifest(file: str) -> ManifestCheck:
    """``pteforge manifest check``: the file (or an export's directory) against pteforge's
    schema and what the executorch_flutter app's parsers (current and older) accept."""
    import json

    from .core.errors import ManifestError
    from .report.app import notes, rejections
    from .report.manifest import MANIFEST_NAME, load_manifest

    path = Path(file) / MANIFEST_NAME if Path(file).is_dir() else Path(file)
    try:
        manifest = load_manifest(path)
    except ManifestError as exc:  # its fix is the export's (move it away); here the file is the question
        raise ManifestError(exc.args[0], fix="compare it with `pteforge manifest schema`, or export again to rebuild it") from None
    if manifest is None:
        raise UsageError(f"no such file: {path}", fix="give the path of an index.json, or of its directory")
    raw = json.loads(path.read_text())
    for older, which in ((False, "the executorch_flutter app"), (True, "the older executorch_flutter app")):
        problems = rejections(raw, older)
        if problems:
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            raise ManifestError(f"{which} would reject this: {problems[0]}{more}",
                                fix="regenerate it with pteforge export, or add the field")
    return ManifestCheck(path, manifest, notes(raw))


def manifest_schema() -> dict:
    from .report.manifest import Manifest

    return Manifest.model_json_schema()


def artifact_cache(clear: bool) -> tuple[Path, int, int]:
    """``pteforge cache info|clear``: (its directory, artifacts, bytes) — held, or removed."""
    from .run import cache

    entries, size = cache.clear() if clear else cache.info()
    return cache.artifacts_dir(), entries, size


def catalog() -> list[tuple[ModelSpec, str]]:
    """``pteforge models``: every catalog model, with what its outputs are."""
    from .models.catalog import build_catalog

    return [(spec, family(spec.family).outputs) for spec in build_catalog()]


def backend_plugin_errors() -> list[str]:
    """The third-party backends that did not load, each in a line."""
    from .backends import PLUGIN_ERRORS

    return list(PLUGIN_ERRORS)

"""The library's public surface: one function per command, each a typed request in and a
typed result out. ``export`` runs the engine (``run/engine.py``); the planning of targets
(``run/plan.py``) and the checks before any work (``run/checks.py``) are the engine's, and
named here for the CLI and library callers."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from .app.bench import BenchResult, bench
from .app.publish import check_apart, check_site, runtimes_for
from .app.selection import Selection, select
from .app.validate import report_place, validate, write_report
from .backends import PLUGIN_ERRORS, Availability, availability, default_registry
from .core.errors import ManifestError, UsageError
from .core.io import CACHE_ENV, unwritable
from .core.request import ExportRequest
from .core.result import Record, Stage, Status, Unavailable, ran_here, settle  # noqa: F401 - part of the API
from .core.samples import holds_samples, skipped_note
from .core.spec import MOST_RUNS, ExportConfig, ModelSpec, check_base_url
from .core.system import os_name
from .families import families, family
from .families.vision import image_dir, shipped_images
from .models import select_models
from .models.catalog import build_catalog
from .report.app import notes, rejections
from .report.manifest import MANIFEST_NAME, Manifest, load_manifest, refuse_changed
from .report.summary import rewrite_html
from .run import cache
from .run.checks import check_before_work, check_run  # noqa: F401 - part of the API
from .run.engine import Reporter, RunResult, SilentReporter, run_export  # noqa: F401 - part of the API
from .run.plan import TargetPlan, own_targets, plan_targets, planned_jobs  # noqa: F401 - part of the API
from .run.sink import app_backends, versions  # noqa: F401 - part of the API
from .run.workers import ask_host_early  # noqa: F401 - part of the API
from .runtime.arm64 import method
from .runtime.arm64_setup import setup
from .runtime.host import Host, host


def backends(here=None, on: str | None = None) -> list[Availability]:
    """Every backend with its two answers: can it lower here, can it run here. ``on``
    (linux, macos, windows) answers for that host OS instead: its wheel's recorded runtime,
    and the backends' declared lowering hosts (this host's own answers when it is that OS)."""
    if on is None or on == os_name():
        return [availability(b, here or host()) for b in default_registry()]
    there = Host.recorded(on, (here or host()).operators)
    return [availability(b, there, on) for b in default_registry()]


@dataclass
class ResolvedRequest:
    """What ``pteforge export`` was asked for, resolved before any work: the models, the
    target plan (None without models), and what to tell the user on the way."""

    models: list[ModelSpec]
    plan: TargetPlan | None
    notes: list[str] = field(default_factory=list)


def resolve_request(request: ExportRequest) -> ResolvedRequest:
    """The models and targets ``request`` asks for (``ExportRequest.from_options``: the
    command line and the config file), each refused before any work when it cannot be."""
    models, notes = _select_models(request), []
    if request.calibration:
        note = skipped_note(request.calibration) if holds_samples(request.calibration) else \
            image_dir(request.calibration, "--calibration", request.calibration_samples)[1]
        notes += [note] if note else []
    requests = request.backends
    others: list[Unavailable] = []
    if requests is None and request.target is None and models and all(m.task == "text-generation" for m in models):
        from .text.llm import default_targets  # start-up cost: torch

        requests, others = default_targets()  # every precision of the backends that export language models
    models, requests = own_targets(models, requests, request.target, request.precision)
    plan = plan_targets(requests, platform=request.target, precision=request.precision) if models else None
    if plan:
        plan.unavailable += others
    return ResolvedRequest(models, plan, notes)


def _select_models(request: ExportRequest) -> list:
    chosen = {fam.word.replace("-", "_"): request.families.get(fam.word.replace("-", "_")) for fam in families() if fam.models}
    own = {"task": request.task, "name": request.name, "labels_file": request.labels_file, "fit": request.fit,
           "mean": request.mean, "std": request.std}
    return select_models(**chosen, every=request.all, refs=request.model or [], llms=request.llm or [],
                         max_seq_len=request.max_seq_len, llm_cache=request.llm_cache,
                         input_shapes=request.input_shape or [],
                         input_dtypes=request.input_dtype or [], labels_only=request.labels, own=own)


def check_surroundings(request: ExportRequest, out_dir: Path) -> list[str]:
    """Before any work: the site ``publish`` writes, refused when it cannot be (or overlaps
    ``out_dir``, the export's folder); and a note when the cache directory cannot be written
    (the run goes on without it)."""
    if request.publish:
        if request.publish_base_url is not None:
            check_base_url(request.publish_base_url, "--publish-base-url")
        elif not request.publish_relative and not request.base_url:  # --base-url: publish's default
            raise UsageError("--publish without --publish-base-url or --base-url: every remoteUrl published would be "
                             "relative, and the executorch_flutter app downloads remoteUrl as it is",
                             fix="give --publish-base-url URL (where SITE will be served), or --publish-relative")
        check_site(Path(request.publish), "--publish")
        check_apart(out_dir, Path(request.publish), "--publish")
        if request.publish_runtime:
            runtimes_for(metadata.version("executorch").split("+")[0], request.publish_runtime, "--publish-runtime")
    why = unwritable()
    return [] if why is None else [f"cannot write the cache directory {why}: this run keeps nothing there for the next "
                                   f"one (fix: set {CACHE_ENV} to a writable directory)"]


def export(models: list[ModelSpec], plan: TargetPlan, config: ExportConfig, reporter: Reporter | None = None,
           write_labels: bool = False) -> RunResult:
    """Capture each model once and lower it for every target, each job in a worker process.

    A model that cannot be captured fails its rows (CAPTURE_FAILED) and the run goes
    on; a worker that crashes or hangs fails its row with the signal or the timeout.
    Every finished row is merged into the manifest at once, so an interrupted or
    killed run keeps what finished.
    """
    return run_export(models, plan, config, reporter, write_labels)


def setup_arm64(say) -> dict:
    """``pteforge setup arm64``: ExecuTorch's aarch64 runtime under emulation, in pteforge's cache."""
    found = setup(say)
    return {**found, "method": method(found)}


# -- the other commands: each one function the CLI calls, then renders ----------------------
@dataclass
class ValidationRun:
    """What ``validate_dir`` did: each file's result, and where the report went."""

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
    if directory and models_dir and Path(directory).resolve() != Path(models_dir).resolve():
        raise UsageError(f"two directories to validate: {directory} and --models-dir {models_dir}", fix="give one of them")
    if not timeout > 0 or timeout == float("inf"):
        raise UsageError(f"--timeout must be a positive number of seconds (got {timeout:g})",
                         fix="give the seconds a file may take, e.g. --timeout 300")
    root = Path(directory or models_dir or "models")
    if not root.is_dir():
        raise UsageError(f"{root} is not a directory", fix="export first, or give the directory of your artifacts")
    _refuse_no_artifact(root)
    images, note = image_dir(images_dir, "--images-dir") if images_dir else (shipped_images(), None)
    if note and warn is not None:
        warn(note)
    place = report_place(root, output_file, draw)  # never into a published site, which validate only reads
    results = validate(root, images, on_file=on_file, timeout=timeout, draw=place.draw)
    write_report(place.output, results, images, root)
    return ValidationRun(root, results, place.output, place.site is None and rewrite_html(root, place.output), place.site,
                         place.draw)


def bench_files(path: str, runs: int, warmup: int, against_eager: bool) -> list[BenchResult]:
    """``pteforge bench``: p50 and peak memory of each artifact under ``path`` that runs here."""
    if not Path(path).exists():
        raise UsageError(f"{path}: no such file or directory", fix="give a directory of artifacts or a .pte")
    if runs < 1 or warmup < 0:
        raise UsageError("--runs must be >= 1 and --warmup >= 0", fix="give positive numbers")
    if runs + warmup > MOST_RUNS:  # a typo's zeros: hours of one file's runs
        raise UsageError(f"--runs and --warmup must be at most {MOST_RUNS:,} together (got {runs + warmup:,})",
                         fix=f"give --runs {MOST_RUNS // 10:,} or fewer")
    if Path(path).is_dir():
        _refuse_no_artifact(Path(path))
    return bench(Path(path), runs, warmup, against_eager)


def _refuse_no_artifact(root: Path) -> None:
    """A directory holding no program at any depth is refused: "0 proven" would read as a pass."""
    if not any(p.is_file() for pattern in ("*.pte", "*.bpte") for p in root.rglob(pattern)):
        raise UsageError(f"{root} holds no ExecuTorch program (.pte, .bpte) at any depth",
                         fix=f"export first (pteforge export --out {root}), or give the directory of your artifacts")


def select_best(names: list[str], manifest: str | None, platform: str | None) -> Selection:
    """``pteforge select [MANIFEST] MODEL``: the artifact an app on ``platform`` loads."""
    if len(names) > 2:
        raise UsageError(f"select takes a manifest and a model, not {len(names)} names",
                         fix="pteforge select [models/index.json] MODEL")
    *given, model = names
    if given and manifest and Path(given[0]).resolve() != Path(manifest).resolve():
        raise UsageError(f"two manifests: {given[0]} and --manifest {manifest}", fix="give one of them")
    if not given and not manifest and _a_manifest(model):  # `select DIR`: the manifest alone
        given, model = [model], _its_one_model(model)
    return select(given[0] if given else manifest or "models/index.json", model, platform)


def _a_manifest(name: str) -> bool:
    path = Path(name)
    return (path / MANIFEST_NAME).is_file() or (path.suffix == ".json" and path.is_file())


def _its_one_model(name: str) -> str:
    """The model a manifest given alone to ``select`` lists, when it lists one."""
    path = Path(name) / MANIFEST_NAME if Path(name).is_dir() else Path(name)
    manifest = load_manifest(path)
    models = sorted({e.model or e.modelName for e in manifest.artifacts()}) if manifest else []
    if len(models) == 1:
        return models[0]
    raise UsageError(f"select {name}: name the model too; {path} lists " + (", ".join(models) or "none"),
                     fix=f"pteforge select {name} {models[0] if models else 'MODEL'}")


@dataclass
class ManifestCheck:
    """A manifest that passed ``check_manifest``, and what the app will note of it."""

    path: Path
    manifest: Manifest
    notes: list[str]


def check_manifest(file: str) -> ManifestCheck:
    """``pteforge manifest check``: the file (or an export's directory) against pteforge's
    schema and what the executorch_flutter app's parsers (current and older) accept."""
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
    said = notes(raw)
    changed = manifest.changed(path.parent)
    listed = {e.file for e in manifest.artifacts()}
    if listed and listed <= {rel for rel, why in changed if why == "is missing"}:  # a manifest on its own
        said.append(f"none of the {len(listed)} file(s) it lists is beside it: their sizes and sha256 were not compared")
    else:
        refuse_changed(path, changed, "manifest check")
    return ManifestCheck(path, manifest, said)


def manifest_schema() -> dict:
    return Manifest.model_json_schema()


def artifact_cache(clear: bool) -> tuple[Path, int, int]:
    """``pteforge cache info|clear``: (its directory, artifacts, bytes) — held, or removed."""
    entries, size = cache.clear() if clear else cache.info()
    return cache.artifacts_dir(), entries, size


def catalog() -> list[tuple[ModelSpec, str]]:
    """``pteforge models``: every catalog model, with what its outputs are."""
    return [(spec, family(spec.family).outputs) for spec in build_catalog()]


def backend_plugin_errors() -> list[str]:
    """The third-party backends that did not load, each in a line."""
    return list(PLUGIN_ERRORS)

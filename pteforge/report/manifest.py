"""``index.json``: the manifest an app reads to pick its artifact.

It keeps the shape the executorch_flutter client parses (``version``,
``generated``, ``baseUrl``, ``models[]`` with ``name``, ``modelName``,
``category``, ``backend``, ``hash``, ``size`` (int), ``sizeMB``, ``inputSize``,
``remoteUrl``, ``platforms``, ``labelsFile``...) and adds pteforge's facts.
A later run merges into it: entries of other models and targets are kept.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Set as AbstractSet
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from filelock import FileLock
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..core.errors import ManifestError
from ..core.fallback import fallback_table
from ..core.io import differs, write_atomic

SCHEMA_VERSION = 2  # 2: labels in the app's shape, references, devices, model
MANIFEST_NAME = "index.json"
# the manifest's lists of artifacts; the app reads `models` only
ENTRY_LISTS = ("models", "references", "outOfBudget", "notForApp", "failed")


class LabelsEntry(BaseModel):
    """A labels file, in the shape the executorch_flutter app reads (it finds the labels
    of a model by ``category``); ``file`` and ``count`` are pteforge's."""

    model_config = ConfigDict(extra="allow")

    name: str
    category: str | None = None  # None only in manifests of pteforge 0.1 (upgraded on merge)
    remoteUrl: str | None = None
    size: int | None = None
    hash: str | None = None  # sha256
    file: str
    count: int


class BackendEntry(BaseModel):
    description: str


class ModelEntry(BaseModel):
    model_config = ConfigDict(extra="allow")

    # -- what the executorch_flutter client reads
    name: str  # unique per artifact: the file name
    modelName: str
    category: str
    backend: str
    hash: str
    size: int
    sizeMB: float = Field(description="the size in MB of 10^6 bytes (as the reports print it), to 0.01")
    inputSize: int | None = None
    remoteUrl: str
    platforms: list[str]  # the app's words: android, ios, macos, linux, windows, web
    labelsFile: str | None = None
    labelsRemoteUrl: str | None = None
    backendDescription: str | None = None
    # -- pteforge's own facts
    model: str | None = None  # the model's name (modelName adds a variant when one backend has several)
    devices: list[str] = Field(default_factory=list)  # pteforge's platforms (embedded included)
    file: str  # path relative to the manifest
    task: str
    target: str
    backends: list[str]
    precision: str
    status: str
    reason: str | None = None
    delegation: dict[str, Any]
    verification: dict[str, Any] | None = None
    quantization: dict[str, Any] | None = None
    timings: dict[str, float] = Field(default_factory=dict)
    inputShapes: list[list[int]] = Field(default_factory=list)
    # inputs of the source file held at a value in the program (an ONNX scalar such as a
    # sample rate, given with --input-shape sr=int64:16000): the app does not feed them
    heldInputs: dict[str, float] | None = None
    # what the program's forward takes and returns, in the runtime's order, read from the
    # program itself: {"name", "shape", "dtype"} per tensor ("dynamic": true when "shape"
    # is the largest it takes), {"name", "type"} per other value (pte.program_io)
    inputs: list[dict[str, Any]] | None = None
    outputs: list[dict[str, Any]] | None = None
    preprocessing: dict[str, Any] | None = None
    bundle: dict[str, Any] | None = None  # {"file": "<rel>.bpte", "testsets": n}
    bench: dict[str, Any] | None = None  # `pteforge bench`: load, first run, p50/p90, peak RSS, threads
    # reduced precision against the fp32 artifact of the same chain:
    # {"fp32": name, "size": ratio, "latency": ratio, "p50_ms", "fp32_p50_ms"}
    relative: dict[str, Any] | None = None
    # restored from pteforge's content-addressed cache: {"hit", "key", "created", "original_seconds"}
    cache: dict[str, Any] | None = None
    # the target whose lowering made this very program: lowered once, copied under this name
    sameProgramAs: str | None = None
    # the target compiler's own estimates, not measurements (Vela: cycles and time at its
    # clock, SRAM, flash); see pteforge.core.result.Record.estimates
    estimates: dict[str, Any] | None = None
    # a quantized program against fp32, layer by layer: the layers that lose most and what to
    # try (pteforge.core.result.Record.accuracy)
    accuracy: dict[str, Any] | None = None
    # export --prove-on arm64: the program run by ExecuTorch's aarch64 runtime under emulation,
    # judged as on this host: {"status", "method", "features", "sqnr_db", "top1_agreement",
    # "vs_host_sqnr_db", "reason", "fix", ...} (pteforge.run.arm64_proof); never a speed
    arm64: dict[str, Any] | None = None
    # how to rebuild the eager reference (validate compares with it)
    source: str | None = None  # catalog | package.module:factory | /path/model.pt2
    weights: str | None = None
    seed: int | None = None
    versions: dict[str, str] = Field(default_factory=dict)

    @property
    def base_model(self) -> str:
        """The model this artifact is of (``modelName`` may carry a variant suffix)."""
        return self.model or self.modelName


class Manifest(BaseModel):
    model_config = ConfigDict(extra="allow")

    version: str = "1.0"
    schema_version: int = SCHEMA_VERSION
    generated: str
    baseUrl: str = ""
    models: list[ModelEntry] = Field(default_factory=list)
    # Artifacts kept on disk whose proof failed (MISMATCH): out of `models`, so an app
    # that reads `models` never picks one.
    failed: list[ModelEntry] = Field(default_factory=list)
    # fp32 artifacts nobody asked for, made to measure reduced precisions against
    references: list[ModelEntry] = Field(default_factory=list)
    # Artifacts that ran and matched but miss their accuracy budget (OUT_OF_BUDGET): never
    # proven, out of `models` unless the export was given --offer-out-of-budget.
    outOfBudget: list[ModelEntry] = Field(default_factory=list)
    # Artifacts the app loads on no platform (microcontroller and NPU programs, host-only
    # runtimes: backends.base.APP_LOADS): on disk and listed here, never in `models`.
    notForApp: list[ModelEntry] = Field(default_factory=list)
    labels: list[LabelsEntry] = Field(default_factory=list)
    backends: dict[str, BackendEntry] = Field(default_factory=dict)
    # modelName -> platform -> artifact names, in the order an app should try them
    fallback: dict[str, dict[str, list[str]]] = Field(default_factory=dict)
    # --precision auto: per model and backend, the precisions tried, their numbers,
    # the winner and why
    precisionChoices: list[dict[str, Any]] = Field(default_factory=list)


    def artifacts(self) -> list[ModelEntry]:
        """Every artifact the manifest lists: for the app, references, out of budget, not for
        the app, failed."""
        return [*self.models, *self.references, *self.outOfBudget, *self.notForApp, *self.failed]

    def changed(self, base: Path) -> list[tuple[str, str]]:
        """(file, why) of each file the manifest lists with its size and sha256 (artifacts,
        labels) that is not that file under ``base``, the manifest's directory: missing,
        damaged or replaced since the export proved it."""
        listed: dict[str, tuple[int | None, str | None]] = {e.file: (e.size, e.hash) for e in self.artifacts()}
        listed.update({lab.file: (lab.size, lab.hash) for lab in self.labels if lab.size or lab.hash})
        found = ((rel, differs(Path(base) / rel, *held)) for rel, held in sorted(listed.items()))
        return [(rel, why) for rel, why in found if why]


def refuse_changed(index: Path, changed: list[tuple[str, str]], what: str) -> None:
    """Refuse (``what``: the command) when ``changed`` (``Manifest.changed`` of the manifest
    ``index``) names a file: the app would be offered, under that entry's hash, a file that
    is not the program proven. The first in full, then the others' names."""
    if not changed:
        return
    rel, why = changed[0]
    others = ", ".join(r for r, _ in changed[1:4]) + (", ..." if len(changed) > 4 else "")
    more = f" (and {len(changed) - 1} more: {others})" if len(changed) > 1 else ""
    raise ManifestError(f"{index.parent / rel} {why}{more}: {index} lists another file, and the app would be offered "
                        "a file that is not the program proven",
                        fix=f"export it again into {index.parent} (or restore the file), then {what}")


def now() -> str:
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


def load_manifest(path: Path) -> Manifest | None:
    """The manifest at ``path``; None when there is none. Refuses a broken one."""
    path = Path(path)
    if not path.exists():
        return None
    try:
        raw = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        what = f"not UTF-8 text (byte {exc.start})" if isinstance(exc, UnicodeDecodeError) else \
            f"{exc.__class__.__name__} at line {exc.lineno}, column {exc.colno}"
        raise ManifestError(
            f"{path} is not valid JSON ({what})",
            fix=f"move {path} away (pteforge export rebuilds it) or restore it from backup",
        ) from None
    try:
        manifest = Manifest.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        raise ManifestError(
            f"{path} is not a pteforge manifest: {where}: {err['msg']}",
            fix=f"move {path} away (pteforge export rebuilds it) or use another directory",
        ) from None
    check_paths(manifest, path)
    return manifest


def _paths(manifest: Manifest):
    """(where, relative path) of every file a manifest points at."""
    for key in ENTRY_LISTS:
        for i, e in enumerate(getattr(manifest, key)):
            yield f"{key}[{i}].file", e.file
            for field in ("remoteUrl", "labelsFile", "labelsRemoteUrl"):
                yield f"{key}[{i}].{field}", getattr(e, field, None)
            if e.bundle:
                yield f"{key}[{i}].bundle.file", e.bundle.get("file")
    for i, lab in enumerate(manifest.labels):
        yield f"labels[{i}].file", lab.file
        yield f"labels[{i}].remoteUrl", lab.remoteUrl


def check_paths(manifest: Manifest, path: Path) -> None:
    """Refuse a manifest whose relative paths resolve outside its own directory."""
    root = Path(path).parent.resolve()
    for where, rel in _paths(manifest):
        if not isinstance(rel, str) or not rel or "://" in rel:
            continue  # absent, or an absolute URL: nothing on this disk
        if not (root / rel).resolve().is_relative_to(root):
            raise ManifestError(
                f"{path}: {where} '{rel}' points outside the manifest's directory; refused",
                fix="paths in a manifest must stay under its directory; regenerate it with pteforge export",
            )


def update_entries(out_dir: Path, fields: dict[str, dict[str, Any]]) -> Manifest | None:
    """Set ``fields[name]`` on the entries named ``name`` (under the lock); keep the rest."""
    path = Path(out_dir) / MANIFEST_NAME
    with lock_for(out_dir):
        current = load_manifest(path)
        if current is None:
            return None
        for entry in current.artifacts():
            for key, value in fields.get(entry.name, {}).items():
                setattr(entry, key, value)
        current.generated = now()
        write_atomic(path, current.model_dump_json(indent=2, exclude_none=True) + "\n")
    return current


def set_precision_choices(out_dir: Path, choices: list[dict], notes: list[str]) -> None:
    """Record --precision auto's choices, replacing earlier ones for the same model and backend."""
    path = Path(out_dir) / MANIFEST_NAME
    with lock_for(out_dir):
        current = load_manifest(path)
        if current is None:
            return
        new = {(c["model"], c["backend"]) for c in choices}
        kept = [c for c in current.precisionChoices if (c.get("model"), c.get("backend")) not in new]
        current.precisionChoices = kept + [{**c, "notes": notes} if notes else c for c in choices]
        current.generated = now()
        write_atomic(path, current.model_dump_json(indent=2, exclude_none=True) + "\n")


def lock_for(out_dir: Path) -> FileLock:
    from ..core.io import path_lock

    return path_lock(out_dir)


def merge(
    out_dir: Path,
    entries: list[ModelEntry],
    labels: list[LabelsEntry],
    backends: dict[str, BackendEntry],
    base_url: str | None,
    fallback: tuple[dict[str, tuple[str, ...]], tuple[str, ...]],
    references: AbstractSet[str] = frozenset(),
    offer_out_of_budget: bool = False,
    dropped: list[str] | None = None,
) -> Manifest:
    """Add ``entries`` to ``<out>/index.json`` under a file lock; keep everything else.
    ``fallback``: each platform's backends in priority order, and the CPU fallbacks (what
    the manifest's ``fallback`` table is ordered by).

    An entry named in ``references`` (an fp32 artifact made only to compare against)
    goes to ``references`` unless the app list already holds it (an earlier run asked
    for it); a MISMATCH goes to ``failed``; one the app loads on no platform to
    ``notForApp``; an OUT_OF_BUDGET one to ``outOfBudget`` (to ``models`` with
    ``offer_out_of_budget``); the rest to ``models``. An earlier run's entry whose file is
    gone or has another size is listed no more (``dropped`` gets a line for each)."""
    path = Path(out_dir) / MANIFEST_NAME
    with lock_for(out_dir):
        current = load_manifest(path) or Manifest(generated=now())
        lists = {key: {m.name: m for m in getattr(current, key)} for key in ENTRY_LISTS}
        gone = _gone(Path(out_dir), lists, {e.name for e in entries})
        if dropped is not None:
            dropped += gone
        for entry in entries:
            where = list_for(entry, entry.name in references and entry.name not in lists["models"], offer_out_of_budget)
            for key, items in lists.items():
                items.pop(entry.name, None)
            lists[where][entry.name] = entry
        base = base_url if base_url is not None else current.baseUrl
        ordered = {k: sorted((_served_at(base, m) for m in v.values()), key=lambda m: (m.category, m.base_model, m.name))
                   for k, v in lists.items()}
        merged = Manifest(
            version=current.version,
            generated=now(),
            baseUrl=base,
            models=ordered["models"], references=ordered["references"], outOfBudget=ordered["outOfBudget"],
            notForApp=ordered["notForApp"], failed=ordered["failed"],  # ENTRY_LISTS
            fallback=fallback_table(ordered["models"], *fallback),
            labels=[_served_at(base, lab) for lab in _labels(out_dir, current, labels)],
            backends={**current.backends, **backends},
            precisionChoices=current.precisionChoices,
        )
        write_atomic(path, merged.model_dump_json(indent=2, exclude_none=True) + "\n")
    return merged


def _gone(out_dir: Path, lists: dict[str, dict[str, ModelEntry]], fresh: AbstractSet[str]) -> list[str]:
    """Take out of ``lists`` the entries not in ``fresh`` (this merge's) whose file is missing
    or another size than listed (deleted or cut short since: the app would be offered what
    is not there); a line for each. (Only the size: every merge of a run reads them.)"""
    said = []
    for items in lists.values():
        for name, entry in list(items.items()):
            if name not in fresh and (why := differs(out_dir / entry.file, entry.size, None)):
                del items[name]
                said.append(f"{entry.file} {why}")
    return said


def list_for(entry: ModelEntry, reference: bool, offer_out_of_budget: bool = False) -> str:
    """Which of the manifest's lists an entry belongs in (the app reads ``models`` only)."""
    if entry.status == "MISMATCH":
        return "failed"
    if reference:
        return "references"
    if not entry.platforms:
        return "notForApp"
    if entry.status == "OUT_OF_BUDGET" and not offer_out_of_budget:
        return "outOfBudget"
    return "models"


def _url(base_url: str | None, rel: str) -> str:
    return f"{base_url.rstrip('/')}/{rel}" if base_url else rel


def _served_at(base: str | None, entry):
    """``entry`` with its URLs under ``base``, the directory's one base URL: this run's
    ``--base-url``, else the manifest's. One directory is served from one place, so an
    entry an earlier run wrote under another base (or none) moves with the rest; before,
    two runs with two base URLs left a manifest of both."""
    urls = {"remoteUrl": _url(base, entry.file)}
    if isinstance(entry, ModelEntry) and entry.labelsFile:
        urls["labelsRemoteUrl"] = _url(base, entry.labelsFile)
    return entry.model_copy(update=urls)


def _labels(out_dir: Path, current: Manifest, new: list[LabelsEntry]) -> list[LabelsEntry]:
    """One labels entry per category; entries of pteforge 0.1 (no category) upgraded
    to the app's shape from the models that use their file."""
    by_category: dict[str, LabelsEntry] = {}
    for lab in current.labels:
        if lab.category is None:
            users = {m.category for m in current.artifacts() if m.labelsFile == lab.file}
            data = (Path(out_dir) / lab.file).read_bytes() if (Path(out_dir) / lab.file).is_file() else None
            if data is None or not users:
                continue  # nothing on disk or nobody uses it: not something an app could fetch
            for category in users:
                by_category[category] = lab.model_copy(update={
                    "category": category, "remoteUrl": lab.remoteUrl or lab.file,
                    "size": len(data), "hash": hashlib.sha256(data).hexdigest()})
        else:
            by_category[lab.category] = lab
    for lab in new:
        assert lab.category is not None  # this run's (entries.label_files): each has its category
        by_category[lab.category] = lab
    return [by_category[c] for c in sorted(by_category)]

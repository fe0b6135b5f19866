"""Records → manifest entries, and the label files an app needs."""

from __future__ import annotations

import hashlib
import os
from dataclasses import asdict
from pathlib import Path
from typing import cast

from dataclasses import dataclass

from ..core.io import write_atomic
from ..core.kernels import app_unlinked
from ..core.result import Record
from ..core.spec import ExportConfig, ModelSpec, target_slug
from ..core.units import size_mb
from .manifest import LabelsEntry, ModelEntry, _url


@dataclass(frozen=True)
class AppBackend:
    """What the manifest says of a backend, as the app names it (from the backends'
    registry, by the caller: the report does not read it)."""

    name: str
    manifest_name: str  # the app's word for it
    app_platforms: list[str]
    devices: list[str]
    description: str


def label_files(needs: dict[tuple[str, str], list[str]], base_url: str | None) -> dict[tuple, tuple[bytes, LabelsEntry]]:
    """Each labels file in ``needs`` ((category, file name) -> its class names): a family's
    own (``imagenet_classes.txt`` for ``mobilenet``), or a model's with its own class names
    (an Ultralytics checkpoint's): its bytes and its entry in the app's shape, by (category,
    file name). Nothing is written here: a file is written when a row that uses it is
    merged (``write_label_file``), so a refused or failed run replaces no labels file."""
    made = {}
    for (category, file), names in sorted(needs.items()):
        data = ("\n".join(names) + "\n").encode()
        made[category, file] = (data, LabelsEntry(
            name=file, category=category, remoteUrl=_url(base_url, file),
            size=len(data), hash=hashlib.sha256(data).hexdigest(), file=file, count=len(names),
        ))
    return made


def write_label_file(out: Path, data: bytes, entry: LabelsEntry) -> None:
    """A labels file under ``out``, unless it already holds these very bytes."""
    path = Path(out) / entry.file
    if not (path.is_file() and path.read_bytes() == data):
        write_atomic(path, data)


def labels_entries(labels: dict[tuple, LabelsEntry], family_files: dict[str, str | None]) -> list[LabelsEntry]:
    """The manifest's ``labels``: the families' files (``family_files``: category -> its
    file), one per category (the app looks them up by category); a model's own file is
    named by its entries only (``labelsFile``)."""
    return [lab for lab in labels.values() if lab.category is not None and lab.file == family_files.get(lab.category)]


def app_model_name(model: str, target: str, primary: AppBackend) -> str:
    """``modelName``: the app keys artifacts by ``${modelName}_${backend}``, so only one
    target per (model, app backend) may use the bare model name: the backend alone at
    its default precision, when the app spells the backend as pteforge does. Every other
    target adds its file-name slug (``mobilenet_v3_small_xnnpack_int8``,
    ``mobilenet_v3_small_ethos-u85``): unique, stable across runs and merges."""
    canonical = target == primary.name and primary.manifest_name == primary.name
    return model if canonical else f"{model}_{target_slug(target)}"


def text_generation_fields(rec: Record) -> dict:
    """A language model's entry: what a runner needs beside the program (``maxSeqLen``,
    ``vocabSize``, ``bosId``, ``eosIds``, ``tokenizer`` files) and ``generation``, the proof
    and speed (greedy tokens against eager, logits SQNR per step, perplexity, tokens/s)."""
    if not rec.generation:
        return {}
    g = dict(rec.generation)
    return {**{k: g.pop(k) for k in ("maxSeqLen", "vocabSize", "bosId", "eosIds", "tokenizer") if k in g},
            "generation": g.get("proof")}


def manifest_entries(
    records: list[Record],
    spec: ModelSpec,
    out: Path,
    config: ExportConfig,
    labels: dict[tuple, LabelsEntry],
    versions: dict[str, str],
    backends: dict[str, AppBackend],
) -> list[ModelEntry]:
    """One entry per record with an artifact on disk (a failed row keeps an earlier good
    entry); ``backends``: what the app is told of each backend, by pteforge's name."""
    label = labels.get((spec.family, spec.labels))
    return [_entry(rec, spec, out, config, label, versions, backends[rec.backends[0]])
            for rec in records if rec.artifact is not None]


def _entry(rec: Record, spec: ModelSpec, out: Path, config: ExportConfig, label: LabelsEntry | None,
           versions: dict[str, str], primary: AppBackend) -> ModelEntry:
    artifact = rec.artifact
    assert artifact is not None  # manifest_entries passes the records with an artifact only
    rel = Path(os.path.relpath(artifact.path, out)).as_posix()
    return ModelEntry(
        name=Path(artifact.path).name,
        modelName=app_model_name(spec.name, rec.target, primary),
        model=spec.name,
        category=spec.family,
        backend=primary.manifest_name,
        hash=artifact.sha256,
        size=artifact.size,
        sizeMB=size_mb(artifact.size),
        inputSize=spec.input_size,
        remoteUrl=_url(config.base_url, rel),
        platforms=[] if app_unlinked(artifact.delegation.kernels, spec.task) else primary.app_platforms,
        devices=primary.devices,
        labelsFile=label.file if label else None,
        labelsRemoteUrl=label.remoteUrl if label else None,
        backendDescription=primary.description,
        file=rel,
        task=spec.task,
        target=rec.target,
        backends=rec.backends,
        precision=rec.precision,
        status=rec.status.value,
        reason=rec.reason,
        delegation=artifact.delegation.to_dict(),
        verification=asdict(rec.verification) if rec.verification else None,
        quantization=rec.quantization,
        relative=rec.relative,
        bench=rec.latency,
        cache=rec.cache,
        sameProgramAs=rec.same_program_as,
        estimates=rec.estimates,
        accuracy=rec.accuracy,
        arm64=rec.arm64,
        timings=rec.timings,
        inputShapes=rec.input_shapes,
        heldInputs=cast("dict[str, float]", spec.held) or None,  # named: models/onnx/spec.py names every held input
        inputs=(artifact.io or {}).get("inputs"),
        outputs=(artifact.io or {}).get("outputs"),
        preprocessing=asdict(spec.preprocessing) if spec.preprocessing else None,
        bundle=({**rec.bundle, "file": Path(os.path.relpath(rec.bundle["file"], out)).as_posix()}
                if rec.bundle else None),
        source=spec.source_ref,
        weights=config.weights if config.weights in ("pretrained", "none") else str(Path(config.weights).resolve()),
        seed=config.seed,
        versions=versions,
        **text_generation_fields(rec),
    )

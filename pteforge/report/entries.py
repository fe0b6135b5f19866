"""Records → manifest entries, and the label files an app needs."""

from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path

from ..backends import default_registry
from ..io import write_atomic
from ..models.catalog import LABEL_FILES, labels_for
from ..result import Record
from ..spec import ExportConfig, ModelSpec
from .manifest import LabelsEntry, ModelEntry


def write_label_files(out: Path, kinds: list[str]) -> dict[str, LabelsEntry]:
    """``imagenet_classes.txt`` / ``coco_classes.txt`` from the libraries' own metadata."""
    written = {}
    for kind in kinds:
        names = labels_for(kind)
        path = Path(out) / LABEL_FILES[kind]
        write_atomic(path, "\n".join(names) + "\n")
        written[kind] = LabelsEntry(name=kind, file=LABEL_FILES[kind], count=len(names))
    return written


def labels_entries(labels: dict[str, LabelsEntry]) -> list[LabelsEntry]:
    return list(labels.values())


def _url(base_url: str | None, rel: str) -> str:
    return f"{base_url.rstrip('/')}/{rel}" if base_url else rel


def manifest_entries(
    records: list[Record],
    spec: ModelSpec,
    out: Path,
    config: ExportConfig,
    labels: dict[str, LabelsEntry],
    versions: dict[str, str],
) -> list[ModelEntry]:
    registry = default_registry()
    entries = []
    for rec in records:
        if rec.artifact is None:
            continue  # nothing on disk: an earlier good entry for this name stays
        primary = registry.get(rec.backends[0])
        rel = Path(os.path.relpath(rec.artifact.path, out)).as_posix()
        label = labels.get(spec.labels) if spec.labels else None
        entries.append(
            ModelEntry(
                name=Path(rec.artifact.path).name,
                modelName=spec.name,
                model=spec.name,
                category=spec.family,
                backend=primary.manifest_name(),
                hash=rec.artifact.sha256,
                size=rec.artifact.size,
                sizeMB=round(rec.artifact.size / (1024 * 1024), 2),
                inputSize=spec.input_size,
                remoteUrl=_url(config.base_url, rel),
                platforms=list(primary.platforms),
                labelsFile=label.file if label else None,
                labelsRemoteUrl=_url(config.base_url, label.file) if (label and config.base_url) else None,
                backendDescription=primary.description,
                file=rel,
                task=spec.task,
                target=rec.target,
                backends=rec.backends,
                precision=rec.precision,
                status=rec.status.value,
                reason=rec.reason,
                delegation=rec.artifact.delegation.to_dict(),
                verification=asdict(rec.verification) if rec.verification else None,
                quantization=rec.quantization,
                relative=rec.relative,
                bench=rec.latency,
                cache=rec.cache,
                timings=rec.timings,
                inputShapes=rec.input_shapes,
                preprocessing=asdict(spec.preprocessing) if spec.preprocessing else None,
                bundle=(
                    {**rec.bundle, "file": Path(os.path.relpath(rec.bundle["file"], out)).as_posix()}
                    if rec.bundle else None
                ),
                source=spec.source_ref,
                weights=config.weights if config.weights in ("pretrained", "none") else str(Path(config.weights).resolve()),
                seed=config.seed,
                versions=versions,
            )
        )
    return entries

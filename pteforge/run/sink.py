"""Where an export run's rows go as they finish: merged into ``<out>/index.json`` with the
labels files they use, and what the manifest records beside them (the versions that made
an artifact, what the app is told of each backend)."""

from __future__ import annotations

from concurrent.futures import Future
from importlib import metadata
from pathlib import Path

from .. import __version__
from ..app.platforms import fallback_tables
from ..backends import default_registry
from ..core.result import Record
from ..core.spec import ExportConfig, ModelSpec
from ..families import families, labels_for
from ..models.catalog import build_catalog
from ..report.entries import AppBackend, label_files, labels_entries, manifest_entries, write_label_file
from ..report.manifest import MANIFEST_NAME, BackendEntry, merge


def versions(chain_backends: set[str]) -> dict[str, str]:
    """pteforge, torch, executorch and the SDK packages the backends used."""
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


def make_labels(needs: dict[tuple[str, str], tuple[str, ...]], base_url: str | None) -> dict:
    """The labels files' bytes and entries, each with its model's own names or, for ``()``,
    its family's (written when a row that uses one is merged: ``ManifestSink``)."""
    return label_files({key: list(own) or labels_for(key[0]) for key, own in needs.items()}, base_url)


def find_label_files(models: list[ModelSpec], every: bool) -> dict[tuple[str, str], tuple[str, ...]]:
    """The labels files the run writes, (category, file) -> the model's own names (``()``: the
    family's): its models', and with ``every`` (``--labels``) every family's."""
    return {(m.family, m.labels): m.names for m in [*(build_catalog() if every else []), *models] if m.labels}


class ManifestSink:
    """Merges finished rows into ``<out>/index.json`` as they come."""

    def __init__(self, out: Path, config: ExportConfig, labels: Future, references: set[str]):
        self.out, self.config, self._labels = out, config, labels
        self.references = references  # targets added only to measure reduced precisions against
        self.path = out / MANIFEST_NAME
        self.written: set[tuple] = set()  # the labels files written so far, by (category, file)
        self.dropped: list[str] = []  # earlier runs' entries no longer listed: their file is gone

    @property
    def labels(self) -> dict:
        """The labels files' entries written so far (``report.entries.label_files``)."""
        made = self._labels.result()
        return {key: entry for key, (_, entry) in made.items() if key in self.written}

    def _write_labels(self, keys) -> None:
        """The labels files of ``keys`` (every one for None), when a row that uses them is merged."""
        made = self._labels.result()
        for key in made if keys is None else keys:
            if key in made and key not in self.written:
                write_label_file(self.out, *made[key])
                self.written.add(key)

    def merge(self, records: list[Record], spec: ModelSpec | None) -> None:
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
              fallback_tables(), references, self.config.offer_out_of_budget, self.dropped)


def app_backends() -> dict:
    """What the manifest tells the app of each backend (``report.entries.AppBackend``), by name."""
    return {b.name: AppBackend(b.name, b.manifest_name(), b.app_platforms(), list(b.platforms), b.description)
            for b in default_registry()}

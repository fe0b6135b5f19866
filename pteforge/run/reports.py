"""An export run's reports, written from its manifest once the run ends: EXPORT_SUMMARY.md,
report.json, report.html, and with --oplist the selective-build files."""

from __future__ import annotations

from pathlib import Path

from ..backends import default_registry
from ..core.io import write_atomic
from ..core.result import Record
from ..core.spec import ExportConfig
from ..report.manifest import MANIFEST_NAME, load_manifest
from ..report.oplist import MERGED_NAME, artifact_oplist, cmake_lines, merge_oplists
from ..report.summary import write_reports
from .plan import TargetPlan


def write_run_reports(out: Path, records: list[Record], plan: TargetPlan, config: ExportConfig) -> None:
    """EXPORT_SUMMARY.md, report.json, report.html — and with --oplist the selective-build files."""
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
        done = [(r, r.artifact) for r in records if r.artifact is not None and r.status.ok]
        lists = [artifact_oplist(Path(a.path)) for _, a in done]
        merged = merge_oplists(lists, out / MERGED_NAME)
        delegates = {d for _, a in done for d in a.delegation.delegates_in_program}
        kernels = {k for _, a in done for k in a.delegation.kernels}
        write_atomic(out / "executorch_link.cmake",
                     cmake_lines(delegates, [b for b in default_registry() if b.name in {n for r, _ in done for n in r.backends}],
                                 merged.name, kernels))

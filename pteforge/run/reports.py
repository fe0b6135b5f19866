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


def run_failures(records: list[Record], unavailable: list) -> list[dict]:
    """The run's failed rows and the targets unavailable here, each with its reason and fix:
    report.json's ``last_run_failures``, and ``export --json``'s ``lastRunFailures`` (also
    where no manifest was written)."""
    def row(model: str, target: str, status: str, reason: str | None, fix: str | None) -> dict:
        return {"model": model, "target": target, "status": status, "reason": reason, **({"fix": fix} if fix else {})}

    return [row(r.model, r.target, r.status.value, r.reason, r.fix) for r in records if not r.status.ok] + [
        row("*", u.target, "UNAVAILABLE", u.check.reason, u.check.fix) for u in unavailable]


def write_run_reports(out: Path, records: list[Record], plan: TargetPlan, config: ExportConfig) -> None:
    """EXPORT_SUMMARY.md, report.json, report.html — and with --oplist the selective-build files."""
    manifest = load_manifest(out / MANIFEST_NAME)
    if manifest is None:
        return
    write_reports(out, manifest, run_failures(records, plan.unavailable))
    if config.oplist:
        done = [(r, r.artifact) for r in records if r.artifact is not None and r.status.ok]
        lists = [artifact_oplist(Path(a.path)) for _, a in done]
        merged = merge_oplists(lists, out / MERGED_NAME)
        delegates = {d for _, a in done for d in a.delegation.delegates_in_program}
        kernels = {k for _, a in done for k in a.delegation.kernels}
        write_atomic(out / "executorch_link.cmake",
                     cmake_lines(delegates, [b for b in default_registry() if b.name in {n for r, _ in done for n in r.backends}],
                                 merged.name, kernels))

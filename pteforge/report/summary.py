"""Per-run reports from measured data: EXPORT_SUMMARY.md, report.json, report.html.

Every latency shown is a p50 measured after warm-up in the child process that runs
artifacts (the entry's ``bench``); an artifact without one shows none. The sections of both
documents are one list (:mod:`.sections`); their renderers are in :mod:`.markdown` and
:mod:`.html`, the helpers they share in :mod:`.rows`.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..core.io import write_atomic
from .manifest import Manifest
from .rows import recommendation  # noqa: F401 - part of this module's API (tests, the CLI)
from .sections import html_report, markdown


def last_run_failures(out: Path) -> list[dict]:
    """The failures the last export recorded in ``report.json`` (kept when reports are rewritten)."""
    try:
        return list(json.loads((Path(out) / "report.json").read_text()).get("last_run_failures", []))
    except (OSError, ValueError, AttributeError):
        return []


VALIDATION_NAME = "validation_report.json"


def _validation(path: Path) -> dict | None:
    try:
        data = json.loads(Path(path).read_text())
        return data if isinstance(data, dict) and isinstance(data.get("files"), list) else None
    except (OSError, ValueError):
        return None


def write_reports(out: Path, man: Manifest, failures: list[dict]) -> list[Path]:
    paths = [Path(out) / "EXPORT_SUMMARY.md", Path(out) / "report.json", Path(out) / "report.html"]
    write_atomic(paths[0], markdown(man, failures))
    write_atomic(paths[1], json.dumps({"manifest": json.loads(man.model_dump_json()), "last_run_failures": failures}, indent=2) + "\n")
    write_atomic(paths[2], html_report(man, failures, _validation(Path(out) / VALIDATION_NAME)))
    return paths


def rewrite_html(out: Path, validation: Path) -> bool:
    """report.html of the export in ``out`` again, with the validation report at
    ``validation`` (and its drawings); False when ``out`` holds no manifest."""
    from .manifest import MANIFEST_NAME, load_manifest

    man = load_manifest(Path(out) / MANIFEST_NAME)
    if man is None:
        return False
    found = _validation(validation)
    if found is not None:
        found["_relative_to"] = str(Path(out).resolve())
    write_atomic(Path(out) / "report.html", html_report(man, last_run_failures(out), found))
    return True

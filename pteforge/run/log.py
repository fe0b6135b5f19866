"""An export run's id (the names of its temporary files) and its log: what libraries print
in the run's processes, kept in a file of its own unless --debug shows it."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

from ..core.io import RUN_ID_ENV, cache_root
from ..core.spec import ExportConfig
from .workers import RUN_LOG_ENV


def start_run(config: ExportConfig) -> tuple[str, Path | None]:
    """The run's id (the names of its temporary files; workers inherit it) and its log."""
    run_id = uuid.uuid4().hex[:12]
    os.environ[RUN_ID_ENV] = run_id
    return run_id, _run_log(run_id, config)


def _run_log(run_id: str, config: ExportConfig) -> Path | None:
    """Where what libraries print in this run's processes goes (``workers.silence``): a file
    of its own in the cache directory (the newest 20 runs' are kept); none with --debug,
    which shows it all on the terminal."""
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


def keep_log(log: Path | None) -> Path | None:
    """The run's log when anything was written to it; an empty one is removed."""
    os.environ.pop(RUN_LOG_ENV, None)
    try:
        if log is not None and log.stat().st_size > 0:
            return log
        if log is not None:
            log.unlink()
    except OSError:
        pass
    return None

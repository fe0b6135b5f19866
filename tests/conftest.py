import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS))  # tiny_models importable as a --model factory

# Never the developer's cache: a session-wide one for module fixtures, and a fresh one
# per test (below), so no test is answered by another's work.
import tempfile  # noqa: E402

os.environ["PTEFORGE_CACHE_DIR"] = tempfile.mkdtemp(prefix="pteforge-test-cache-")


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PTEFORGE_CACHE_DIR", str(tmp_path / "pteforge-cache"))


@pytest.fixture(autouse=True, scope="session")
def _the_app_reads_every_manifest_written(tmp_path_factory):
    """Every index.json and versions.json a test leaves behind that pteforge itself accepts
    is read by the executorch_flutter app's parsers (tests/flutter_app.py), current and older."""
    yield
    import json

    from flutter_app import ModelVersions, assert_app_reads

    from pteforge.core.errors import ManifestError
    from pteforge.report.manifest import load_manifest

    root = tmp_path_factory.getbasetemp()
    for path in sorted(root.rglob("index.json")):
        try:
            load_manifest(path)
        except ManifestError:
            continue  # a test broke it on purpose: pteforge refuses it too
        assert_app_reads(path)
    from pteforge.app.publish import read_versions

    for path in sorted(root.rglob("versions.json")):
        try:
            read_versions(path.parent)
        except ManifestError:
            continue  # broken on purpose; publish refuses it too
        ModelVersions.from_json(json.loads(path.read_text()))


# Test files, heaviest first: their worker time in a full run on this 2-core machine (junit,
# 2026-11-29 21:00 UTC, 3,481 s over the two workers: test_llm 389 s, test_rewrite 372 s,
# test_verdict 238 s, ... down to ~25 s). pytest-xdist's loadfile hands whole files to the
# workers in this order (``--no-loadscope-reorder``; by default it orders them by their
# number of tests, which started a 286 s file among the last and left one core idle at the
# end). Files not named follow, in collection order.
HEAVIEST_FIRST = [
    "test_llm", "test_rewrite", "test_verdict", "test_integration", "test_scale", "test_reliability",
    "test_families_integration", "test_memo", "test_cli", "test_precision", "test_simulators", "test_process_tree",
    "test_validate", "test_output_modes", "test_plugins", "test_own_models", "test_cache", "test_recurrent",
    "test_contract", "test_portable", "test_arm64", "test_host", "test_files_from_elsewhere", "test_quantizer_patterns",
    "test_platforms", "test_no_silent_loss", "test_publish_cli", "test_config", "test_dry_run", "test_reports",
]


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(HEAVIEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.stem, len(rank)))  # stable: each file's own order kept


def pytest_configure(config):
    from pteforge.backends import backend_classes

    for cls in backend_classes():
        config.addinivalue_line("markers", f"{marker_name(cls.name)}: tests of the {cls.name} backend")


def marker_name(backend: str) -> str:
    return "backend_" + backend.replace("-", "_")


def run_cli(*args, cwd=None, timeout=900, env=None):
    """Run ``python main.py ...`` as a user would, in a subprocess."""
    env = env or {**os.environ, "PYTHONPATH": f"{TESTS}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    return subprocess.run(
        [sys.executable, str(ROOT / "main.py"), *map(str, args)],
        capture_output=True, text=True, cwd=cwd or ROOT, env=env, timeout=timeout,
    )


def run_here(capsys, *args) -> SimpleNamespace:
    """``pteforge ARGS`` in this process, as ``run_cli`` gives it (returncode, stdout, stderr):
    the runs of a test session share its fork server instead of each starting one (~10 s of
    imports). ``run_cli`` where the process itself is under test (its exit, its signals)."""
    from pteforge.cli import main

    code = main([str(a) for a in args])
    captured = capsys.readouterr()
    return SimpleNamespace(returncode=code, stdout=captured.out, stderr=captured.err)


@pytest.fixture
def out(tmp_path):
    return tmp_path / "out"


def written(index) -> list[dict]:
    """Every entry of a manifest (a dict, or its path) with a file written and not failed:
    those offered to the app (``models``) and those held back from it (``outOfBudget``,
    ``notForApp``: programs no build of the app loads)."""
    import json
    from pathlib import Path

    if not isinstance(index, dict):
        index = json.loads(Path(index).read_text())
    return [e for key in ("models", "outOfBudget", "notForApp") for e in index.get(key, [])]


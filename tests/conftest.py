import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent
sys.path.insert(0, str(TESTS))  # tiny_models importable as a --model factory


def pytest_configure(config):
    from pteforge.backends import ALL_BACKENDS

    for cls in ALL_BACKENDS:
        config.addinivalue_line("markers", f"{marker_name(cls.name)}: tests of the {cls.name} backend")


def marker_name(backend: str) -> str:
    return "backend_" + backend.replace("-", "_")


def run_cli(*args, cwd=None, timeout=900):
    """Run ``python main.py ...`` as a user would, in a subprocess."""
    env = {**os.environ, "PYTHONPATH": f"{TESTS}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    return subprocess.run(
        [sys.executable, str(ROOT / "main.py"), *map(str, args)],
        capture_output=True, text=True, cwd=cwd or ROOT, env=env, timeout=timeout,
    )


@pytest.fixture
def out(tmp_path):
    return tmp_path / "out"

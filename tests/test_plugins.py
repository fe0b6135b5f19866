"""A backend is one file: dropped into the package, or installed with an entry point, it
shows in `backends`, the --backends and --target choices, the docs and the contract tests."""

import json
import os
import shutil
import subprocess
import sys

import pytest
from conftest import ROOT

BACKEND = '''
from {base} import Backend, Docs


class {cls}(Backend):
    """XNNPACK under another name: enough to be lowered, run and verified for real."""

    name = "{name}"
    order = 15
    priority = {{"desktop": 0}}
    title = "{cls}"
    runtime_name = "XnnpackBackend"
    platforms = ("linux",)
    hardware = "CPU"
    use_case = "a test of backend discovery"
    description = "{cls} (test)"
    docs = Docs(overview="A backend that a test added.")
    code_sample = "partitioner = [XnnpackPartitioner()]"

    def partitioners(self, precision):
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

        return [XnnpackPartitioner()]
'''


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    """A copy of the package with one backend file dropped in, and a plugin distribution
    that declares another through the `pteforge.backends` entry-point group."""
    root = tmp_path_factory.mktemp("plugins")
    shutil.copytree(ROOT / "pteforge", root / "pteforge", ignore=shutil.ignore_patterns("__pycache__"))
    (root / "pteforge" / "backends" / "dropped.py").write_text(
        BACKEND.format(base=".base", cls="Dropped", name="dropped"))
    site = root / "site"
    (site / "plugpkg").mkdir(parents=True)
    (site / "plugpkg" / "__init__.py").write_text(
        BACKEND.format(base="pteforge.backends.base", cls="Plugged", name="plugged"))
    dist = site / "plugpkg-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: plugpkg\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[pteforge.backends]\nplugged = plugpkg:Plugged\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), str(site), str(ROOT / "tests")])}
    return root, env


def run(tree, *args, timeout=600):
    root, env = tree
    return subprocess.run([sys.executable, *map(str, args)], capture_output=True, text=True, cwd=root, env=env,
                          timeout=timeout)


def test_found_in_backends_choices_and_docs(tree):
    proc = run(tree, "-m", "pteforge", "backends", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = {r["name"]: r for r in json.loads(proc.stdout)}
    assert rows["dropped"]["lowers_here"] and rows["dropped"]["runs_here"]
    assert rows["plugged"]["lowers_here"] and rows["plugged"]["runs_here"]
    assert list(rows).index("dropped") == 1, "ordered by its declared order (15: after xnnpack)"

    help_text = " ".join(run(tree, "-m", "pteforge", "export", "--help").stdout.split())
    assert "dropped" in help_text and "plugged" in help_text
    assert "desktop: dropped plugged mlx cuda vulkan xnnpack" in help_text, "--target places them by their priority"

    root, _ = tree
    assert run(tree, "-m", "pteforge", "docs", "--out", root / "docs").returncode == 0
    assert "A backend that a test added." in (root / "docs" / "backends" / "dropped.md").read_text()
    assert (root / "docs" / "backends" / "plugged.md").exists()


@pytest.mark.slow
def test_contract_tests_run_them(tree):
    proc = run(tree, "-m", "pytest", ROOT / "tests" / "backends" / "test_contract.py", "-q", "-p", "no:cacheprovider",
               "-o", "addopts=-ra --strict-markers", "-m", "backend_dropped or backend_plugged", timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "6 passed, 2 skipped" in proc.stdout, proc.stdout[-1500:]


def test_a_broken_plugin_is_reported_not_fatal(tree, tmp_path):
    root, env = tree
    site = tmp_path / "site"
    dist = site / "broken-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: broken\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[pteforge.backends]\nbroken = no_such_module:Backend\n")
    env = {**env, "PYTHONPATH": f"{env['PYTHONPATH']}{os.pathsep}{site}"}
    proc = subprocess.run([sys.executable, "-m", "pteforge", "backends"], capture_output=True, text=True, cwd=root, env=env)
    assert proc.returncode == 0
    assert "backend plugin not loaded: broken (no_such_module:Backend): ModuleNotFoundError" in " ".join(proc.stderr.split())
    assert "xnnpack" in proc.stdout


@pytest.mark.slow
def test_a_plugins_code_is_in_the_cache_key(tree, tmp_path):
    """Edit a plugin's lowering and export again: a new artifact, not the cached one."""
    root, env = tree
    env = {**env, "PTEFORGE_CACHE_DIR": str(tmp_path / "cache")}
    plugin = root / "site" / "plugpkg" / "__init__.py"
    original = plugin.read_text()

    def export(out):
        proc = subprocess.run([sys.executable, "-m", "pteforge", "export", "--model", "tiny_models:tiny", "--input-shape",
                               "1,3,32,32", "--backends", "plugged", "--bench-runs", "0", "--out", str(tmp_path / out)],
                              capture_output=True, text=True, cwd=root, env=env, timeout=600)
        assert proc.returncode == 0, proc.stderr[-2000:]
        return proc.stdout

    assert "from the cache" not in export("a")
    assert "from the cache" in export("b"), "the same code: the cached artifact"
    try:
        plugin.write_text(original.replace("        return [XnnpackPartitioner()]",
                                           "        return [XnnpackPartitioner(force_fp32_dynamic_linear=True)]"))
        assert "from the cache" not in export("c"), "an edited lowering: a new artifact"
    finally:
        plugin.write_text(original)


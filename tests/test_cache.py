"""The content-addressed cache: an unchanged re-export is restored, anything that changes
the artifact misses, --no-cache does the work, `cache clear` empties it."""

import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT

from pteforge.cli import main
from pteforge.core.errors import ExitStatus

TINY = ["--model", "tiny_models:tiny", "--input-shape", "1,3,16,16", "--weights", "none", "--backends", "xnnpack"]


def _entry(out):
    [e] = json.loads((out / "index.json").read_text())["models"]
    return e


def test_unchanged_reexport_comes_from_the_cache(capsys, tmp_path):
    out = tmp_path / "out"
    assert main([*TINY, "--out", str(out)]) == ExitStatus.OK
    first = _entry(out)
    assert "cache" not in first and "lower" in first["timings"]
    pte = out / first["file"]
    pte.unlink()  # the cache restores the file, byte for byte

    assert main([*TINY, "--out", str(out)]) == ExitStatus.OK
    again = _entry(out)
    assert again["cache"]["hit"] is True and again["cache"]["original_seconds"] > 0
    assert again["hash"] == first["hash"] and pte.exists()
    import hashlib

    assert hashlib.sha256(pte.read_bytes()).hexdigest() == first["hash"]
    assert again["status"] == "VERIFIED" and again["verification"] == first["verification"]
    assert set(again["timings"]) == {"cache"}
    assert "from the cache" in capsys.readouterr().out

    # anything that determines the artifact misses: here the seed
    assert main([*TINY, "--seed", "3", "--out", str(tmp_path / "seed3")]) == ExitStatus.OK
    assert "cache" not in _entry(tmp_path / "seed3")
    # --no-cache does the work
    assert main([*TINY, "--no-cache", "--out", str(out)]) == ExitStatus.OK
    assert "cache" not in _entry(out) and "lower" in _entry(out)["timings"]


def test_a_row_from_the_cache_is_timed_when_its_first_run_did_not(capsys, tmp_path):
    """Why an earlier run did not time a row (--bench-runs 0) is that run's, not the
    program's: restored from the cache, the row is timed by a run that times."""
    out = tmp_path / "out"
    assert main([*TINY, "--bench-runs", "0", "--out", str(out)]) == ExitStatus.OK
    assert _entry(out)["bench"] == {"skipped": "timing turned off (--bench-runs 0)"}
    assert main([*TINY, "--bench-runs", "3", "--out", str(out)]) == ExitStatus.OK
    again = _entry(out)
    assert again["cache"]["hit"] is True and again["bench"]["p50_ms"] > 0, again["bench"]


def test_a_damaged_cache_entry_is_not_used(tmp_path):
    out = tmp_path / "out"
    assert main([*TINY, "--out", str(out)]) == ExitStatus.OK
    cache = tmp_path / "pteforge-cache" / "artifacts"
    [entry] = list(cache.iterdir())
    data = bytearray((entry / "program.pte").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (entry / "program.pte").unlink()  # a hard link to out/'s file: replace, do not edit in place
    (entry / "program.pte").write_bytes(bytes(data))
    assert main([*TINY, "--out", str(out)]) == ExitStatus.OK
    assert "cache" not in _entry(out), "a program whose sha256 does not match is redone"


def test_a_cache_directory_that_cannot_be_written_costs_the_cache_not_the_run(capsys, tmp_path, monkeypatch):
    """PTEFORGE_CACHE_DIR under a file: the export says so in one warning with the fix, and
    writes its artifacts. It had failed before any target ("cannot write
    .../runtime/host-….json: a parent is a file", with a fix about --out)."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("PTEFORGE_CACHE_DIR", str(blocker / "cache"))
    out = tmp_path / "out"
    code = main([*TINY, "--out", str(out)])
    err = capsys.readouterr().err
    assert code == ExitStatus.OK, err
    assert _entry(out)["status"] == "VERIFIED" and (out / _entry(out)["file"]).is_file()
    [warning] = [line for line in err.splitlines() if line.startswith("warning:")]
    assert f"cannot write the cache directory {blocker / 'cache'}" in warning, warning
    assert "set PTEFORGE_CACHE_DIR to a writable directory" in warning
    assert blocker.read_text() == "not a directory"


def test_cache_clear_empties_it(capsys, tmp_path):
    assert main([*TINY, "--out", str(tmp_path / "out")]) == ExitStatus.OK
    capsys.readouterr()
    assert main(["cache", "info"]) == ExitStatus.OK
    assert "1 cached artifact(s)" in capsys.readouterr().out
    assert main(["cache", "clear"]) == ExitStatus.OK
    assert "removed 1 cached artifact(s)" in capsys.readouterr().out
    assert not (tmp_path / "pteforge-cache" / "artifacts").exists()
    assert main([*TINY, "--out", str(tmp_path / "out")]) == ExitStatus.OK
    assert "cache" not in _entry(tmp_path / "out")


def test_backends_answers_without_the_compiler_once_the_runtime_was_asked(tmp_path):
    """`pteforge backends` needs the runtime's registered delegates; after the first time
    they come from the cache, so the command imports neither torch nor ExecuTorch."""
    code = (
        "import sys, pteforge.cli as c\n"
        "c.main(['backends', '--json'])\n"
        "print('LEAK' if any(m in sys.modules for m in ('torch', 'executorch.exir')) else 'CLEAN')"
    )
    env = {**os.environ, "PTEFORGE_CACHE_DIR": str(tmp_path / "cache")}
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env) for _ in range(2)]
    assert runs[0].stdout.strip().endswith("LEAK"), "the first time asks the runtime itself"
    assert runs[1].stdout.strip().endswith("CLEAN"), runs[1].stdout[-500:] + runs[1].stderr[-500:]
    first = json.loads(runs[0].stdout[: runs[0].stdout.rindex("]") + 1])
    second = json.loads(runs[1].stdout[: runs[1].stdout.rindex("]") + 1])
    assert first == second


def test_a_machines_first_export_asks_the_runtime_in_the_fork_server(tmp_path):
    """On a machine's first export (nothing kept in the cache directory) the runtime's
    delegates and kernels are asked in a worker of the fork server, whose imports the run's
    jobs then share: the command's own process imports neither torch nor ExecuTorch, and
    the answer kept is the one the runtime gives in-process (``Host.here()``)."""
    from pteforge.runtime.host import Host

    code = (
        "import sys, pteforge.cli as c\n"
        "code = c.main(['export', '--mobilenet', '--weights', 'none', '--input-shape', '1,3,64,64', '--backends', "
        f"'portable', '--out', {str(tmp_path / 'out')!r}])\n"
        "print('LEAK' if any(m in sys.modules for m in ('torch', 'executorch.exir')) else 'CLEAN', code)"
    )
    env = {**os.environ, "PTEFORGE_CACHE_DIR": str(tmp_path / "cache")}  # a catalog model: a factory's module imports torch
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env)
    assert run.stdout.strip().endswith("CLEAN 0"), run.stdout[-500:] + run.stderr[-800:]
    [kept] = (tmp_path / "cache" / "runtime").glob("host-*.json")
    assert Host.from_dict(json.loads(kept.read_text())) == Host.here()
    assert _entry(tmp_path / "out")["status"] == "VERIFIED"


def test_the_fork_servers_imports_are_never_the_commands_own_even_when_inherited():
    """A run names what the fork server imports last in the environment (Arm's passes for its
    backends); a command started from a process that ran one (a test session, a notebook)
    inherits that list. Its own process imported the modules then, when it named its own
    list (Arm's backend, ExecuTorch's compiler and torchao: seconds of a core, and torch's log
    line under the progress). Nor does a list it inherits reach a fork server it starts."""
    from pteforge.run.workers import ALSO

    code = (
        "import os, sys\n"
        "from pteforge.run.workers import ALSO, _context\n"
        "_context(True, also=('executorch.backends.arm._passes',))\n"
        "named = os.environ.get(ALSO)\n"
        "_context(True)\n"
        "print(sorted(m for m in ('torch', 'executorch.exir', 'torchao') if m in sys.modules), named, os.environ.get(ALSO))"
    )
    env = {**os.environ, ALSO: "executorch.backends.arm._passes,json"}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert run.stdout.split() == ["[]", "executorch.backends.arm._passes", "None"], run.stdout + run.stderr[-800:]


def test_every_option_either_defines_the_artifact_or_only_the_run(tmp_path):
    """Artifact options are hashed, all of them, into the cache key; run options never are."""
    import dataclasses

    from pteforge.run.cache import key_for
    from pteforge.models.factory import factory_spec
    from pteforge.core.spec import ExportConfig, InputSpec, Precision, Target

    names = {f.name for f in dataclasses.fields(ExportConfig)}
    assert names == set(ExportConfig.ARTIFACT_FIELDS) | set(ExportConfig.RUN_FIELDS), "classify every new option"
    assert not set(ExportConfig.ARTIFACT_FIELDS) & set(ExportConfig.RUN_FIELDS)

    spec = factory_spec("tiny_models:tiny", (InputSpec((1, 3, 16, 16)),))
    target = Target(("xnnpack",), Precision.FP32)
    base = ExportConfig(out_dir=tmp_path, weights="none")
    key = key_for(spec, target, base, {})
    for name, value in (("seed", 1), ("verify", False), ("verify_inputs", 5), ("tolerance", 30.0),
                        ("calibration_samples", 3), ("bundle", True)):
        assert key_for(spec, target, dataclasses.replace(base, **{name: value}), {}) != key, name
    for name, value in (("out_dir", tmp_path / "x"), ("jobs", 1), ("timeout", 5.0), ("debug", True), ("cache", False),
                        ("base_url", "https://x"), ("oplist", True), ("bench_runs", 0)):
        assert key_for(spec, target, dataclasses.replace(base, **{name: value}), {}) == key, name


@pytest.mark.slow
def test_a_reexport_all_from_the_cache_starts_no_fork_server(tmp_path):
    """The fork server imports torch and ExecuTorch (~10 s of CPU) and outlives a process
    that exits while it imports: started for a run that needs no worker, it slowed each
    following re-export (0.67 -> 2.07 s over five in a row). Only a run with work starts it."""
    code = (
        "import sys, pteforge.cli as c\n"
        "from multiprocessing import forkserver\n"
        f"c.main({[*TINY, '--out', str(tmp_path / 'out')]!r})\n"
        "print('SERVER' if forkserver._forkserver._forkserver_pid else 'NONE')"
    )
    env = {**os.environ, "PTEFORGE_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT / "tests")}
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env) for _ in range(2)]
    assert runs[0].stdout.strip().endswith("SERVER"), "the first run lowers in workers"
    assert "from the cache" in runs[1].stdout and runs[1].stdout.strip().endswith("NONE"), runs[1].stdout[-500:] + runs[1].stderr[-500:]


def test_a_factory_in_a_py_file_by_its_path_and_its_code_in_the_key(capsys, tmp_path, monkeypatch):
    """--model path/to/file.py:factory: imported from the file (its own imports from its
    directory), recorded by its absolute path, and an edit to the file misses the cache."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "helpers.py").write_text("import torch\n\ndef head():\n    return torch.nn.Linear(4, 2)\n")
    (src / "my_net.py").write_text("import torch\nfrom helpers import head\n\n"
                                   "def build(width=4):\n    return torch.nn.Sequential(torch.nn.Linear(3, width), head())\n")
    monkeypatch.chdir(tmp_path)
    args = ["export", "--model", "src/my_net.py:build(4)", "--input-shape", "1,3", "--weights", "none",
            "--backends", "portable", "--out", "out"]
    assert main(args) == ExitStatus.OK
    first = _entry(tmp_path / "out")
    assert first["status"] == "VERIFIED" and first["source"] == f"{src / 'my_net.py'}:build(4)"
    assert main(args) == ExitStatus.OK
    assert _entry(tmp_path / "out")["cache"]["hit"] is True
    with open(src / "my_net.py", "a") as f:
        f.write("# edited\n")
    assert main(args) == ExitStatus.OK
    assert "cache" not in _entry(tmp_path / "out"), "the file's code is part of the key"
    assert main(args) == ExitStatus.OK and _entry(tmp_path / "out")["cache"]["hit"] is True
    # and so is what it imports of the user's own: a sibling's new layer is another model (it
    # came from the cache, with the old model's program and proof)
    (src / "helpers.py").write_text("import torch\n\ndef head():\n    return torch.nn.Linear(4, 3)\n")
    assert main(args) == ExitStatus.OK
    edited = _entry(tmp_path / "out")
    assert "cache" not in edited and edited["outputs"][0]["shape"] == [1, 3], edited
    capsys.readouterr()
    assert main(["export", "--model", "src/missing.py:x", "--input-shape", "1,3", "--out", "out"]) == ExitStatus.USAGE
    [line] = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("error:")]
    assert "--model src/missing.py:x: no such file src/missing.py" in line, "printed as written (no :x: emoji)"


def test_a_factorys_key_holds_the_users_files_it_imports_and_the_libraries_it_uses(tmp_path, monkeypatch):
    """Read from the source, without importing it: a package's relative imports, absolute
    ones, imports inside functions; installed packages by name (their versions go in the
    key), the standard library and pteforge's own code (in the key already) not at all."""
    from pteforge.models.factory import factory_sources

    pkg = tmp_path / "zoo"
    (pkg / "layers").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "layers" / "__init__.py").write_text("from .conv import Conv\n")
    (pkg / "layers" / "conv.py").write_text("import os, json\nimport torch.nn\n")
    (pkg / "nets.py").write_text("from .layers import Conv\nfrom zoo import heads\n\n"
                                 "def build():\n    import numpy\n    from pteforge.core import spec\n")
    (pkg / "heads.py").write_text("import sklearn.base as b\n")
    (tmp_path / "unused.py").write_text("")
    monkeypatch.chdir(tmp_path)
    files, packages = factory_sources("zoo.nets")
    names = sorted(str(p.relative_to(tmp_path)) for p in map(__import__("pathlib").Path, files))
    assert names == ["zoo/__init__.py", "zoo/heads.py", "zoo/layers/__init__.py", "zoo/layers/conv.py",
                     "zoo/nets.py"] and files[0].endswith("nets.py")
    assert packages == ["numpy", "sklearn", "torch"]
    assert factory_sources("torchvision.models") == ([], ["torchvision"])
    assert factory_sources("no_such_module") == ([], [])


def test_the_runs_process_plans_and_looks_up_without_importing_torch(tmp_path):
    """A run's own process reads the cache, names the artifacts and groups targets that make
    the same program without torch or ExecuTorch: it imported torch (2 s of a core) before
    starting the capture, only to name an artifact's path. (The first run on a host asks the
    runtime for its facts once, as ``pteforge backends`` does.)"""
    code = (
        "import sys\nfrom pathlib import Path\n"
        "from pteforge import ExportConfig, plan_targets, select_models\n"
        "from pteforge.backends import lowering_key\n"
        "from pteforge.run.engine import look_up\n"
        "from pteforge.run.jobs import whose_steps\n"
        "models = select_models(mobilenet=[])\n"
        "plan = plan_targets(['xnnpack', 'vulkan', 'coreml', 'xnnpack:int8'])\n"
        f"looked = look_up(models, plan, ExportConfig(out_dir=Path({str(tmp_path / 'out')!r}), weights='none'))\n"
        "keys = {(lowering_key(t), whose_steps(s)) for s, todo, _, _ in looked for t in todo}\n"
        "print(len(keys), 'LEAK' if any(m in sys.modules for m in ('torch', 'executorch.exir')) else 'CLEAN')"
    )
    env = {**os.environ, "PTEFORGE_CACHE_DIR": str(tmp_path / "cache")}
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env) for _ in range(2)]
    assert runs[1].stdout.strip().endswith("4 CLEAN"), runs[1].stdout[-500:] + runs[1].stderr[-500:]

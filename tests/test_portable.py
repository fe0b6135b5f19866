"""The paths macOS and Windows take, run here: spawned workers, two renames instead of
renameat2, psutil instead of /proc (PTEFORGE_PORTABLE=1), file names valid on every OS,
and the host facts of a macOS runtime."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pteforge.core.system import file_name
from pteforge.backends import program_check

TESTS = Path(__file__).resolve().parent
WINDOWS_BAD = re.compile(r'[<>:"/\\|?*\x00-\x1f]')
DEVICES = {"con", "prn", "aux", "nul", *(f"com{i}" for i in range(10)), *(f"lpt{i}" for i in range(10))}


def valid_everywhere(name: str) -> bool:
    """A file name Windows, macOS and Linux all take, and a URL needs no escaping for."""
    return (bool(name) and not WINDOWS_BAD.search(name) and not name.endswith((".", " ")) and not name.startswith(".")
            and name.split(".")[0].lower() not in DEVICES and re.fullmatch(r"[A-Za-z0-9._\-]+", name) is not None)


@settings(max_examples=300, deadline=None)
@given(st.text(min_size=0, max_size=200))
def test_a_model_name_becomes_a_file_name_valid_on_every_os(name):
    safe = file_name(name)
    assert valid_everywhere(safe) and len(safe) <= 100, safe
    assert file_name(safe) == safe, "idempotent"


@given(st.from_regex(r"[a-z][a-z0-9_\-]{0,30}", fullmatch=True).filter(lambda n: n.split(".")[0] not in DEVICES))
def test_a_valid_name_is_kept(name):
    assert file_name(name) == name


@given(st.text(alphabet=st.characters(min_codepoint=0x4E00, max_codepoint=0x9FFF) | st.characters(min_codepoint=0x430, max_codepoint=0x44F),
               min_size=1, max_size=12), st.text(max_size=12))
def test_names_in_other_scripts_stay_apart(name, other):
    """A name in a script with no ASCII letters (Cyrillic, CJK, ...) would be all ``_``: two
    models named 猫 and 狗 would be one file name, one manifest entry. Each keeps a tag of its own."""
    assert valid_everywhere(file_name(name))
    if other != name:
        assert file_name(name) != file_name(other)


def test_accents_are_dropped_not_replaced():
    assert file_name("Mon modèle ü") == "Mon_modele_u"
    assert file_name("naïve net:v2.onnx") == "naive_net_v2.onnx"


def _run(args, cwd, env):
    proc = subprocess.run([sys.executable, "-m", "pteforge", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)
    return proc.returncode, proc.stdout, proc.stderr


@pytest.mark.slow
def test_the_portable_paths_export_verify_bench_and_publish(tmp_path):
    """A TorchScript file whose name Windows refuses, through export (spawned workers),
    bench (the runtime child without /proc) and publish twice (two renames), as on macOS
    and Windows; every file written has a name valid there."""
    import torch

    from tiny_models import tiny

    odd = tmp_path / "con:my net?.pt"
    torch.jit.save(torch.jit.trace(tiny().eval(), torch.randn(1, 3, 16, 16)), str(odd))
    env = {**os.environ, "PTEFORGE_PORTABLE": "1", "COLUMNS": "300", "PYTHONPATH": os.pathsep.join([str(TESTS), *sys.path])}
    out, site = tmp_path / "out", tmp_path / "site"

    code, stdout, err = _run(["export", "--model", odd, "--input-shape", "1,3,16,16", "--backends", "xnnpack",
                              "--out", out], tmp_path, env)
    assert code == 0, err + stdout
    [entry] = json.loads((out / "index.json").read_text())["models"]
    assert entry["status"] == "VERIFIED" and entry["name"] == "con_my_net__xnnpack.pte", entry
    code, stdout, err = _run(["bench", "out", "--runs", "3"], tmp_path, env)
    assert code == 0, err + stdout
    [row] = [line for line in stdout.splitlines() if "_xnnpack.pte" in line]
    assert re.search(r"│ +\d+\.\d\d ", row) and "1 timed on this host" in stdout, stdout  # in the runtime child, without /proc
    for _ in range(2):  # the second publish swaps the version directory: two renames, not renameat2
        code, stdout, err = _run(["publish", out, "--site", site, "--base-url", "https://example.org/m"], tmp_path, env)
        assert code == 0, err + stdout
    written = [p for p in [*out.rglob("*"), *site.rglob("*")] if not p.name.startswith(".")]
    assert written and all(valid_everywhere(p.name) for p in written), [p.name for p in written if not valid_everywhere(p.name)]
    assert not [p for p in site.rglob(".*") if p.name.endswith((".tmp", ".old"))], "no staging left in the site"


def test_the_rename_exchange_and_its_portable_path(tmp_path, monkeypatch):
    from pteforge.app import publish

    for portable in ("", "1"):
        monkeypatch.setenv("PTEFORGE_PORTABLE", portable)
        target, staging = tmp_path / f"v{portable}", tmp_path / f"staging{portable}"
        built = staging / "built"
        target.mkdir()
        (target / "old.txt").write_text("old")
        built.mkdir(parents=True)
        (built / "new.txt").write_text("new")
        publish._swap(built, target, staging)
        assert (target / "new.txt").read_text() == "new" and not (target / "old.txt").exists()
        # renameat2 leaves the old contents where the new were, in staging; two renames move the
        # old version aside to staging/old/ first, where a killed publish's successor finds it
        assert (built / "old.txt").exists() if not portable else (staging / "old" / target.name / "old.txt").exists()


def test_memory_and_threads_without_proc(monkeypatch):
    from pteforge.core import system

    monkeypatch.setenv("PTEFORGE_PORTABLE", "1")
    assert system.start_method() == "spawn" and not system.reset_peak_rss()
    assert system.peak_rss_mb(False) is None, "no peak without a reset: the process's whole life is not this artifact's"
    assert system.rss_mb() > 10 and system.thread_count() >= 1
    monkeypatch.setenv("PTEFORGE_PORTABLE", "")
    if sys.platform.startswith("linux"):
        assert system.start_method() == "forkserver" and system.reset_peak_rss()
        assert abs(system.rss_mb() - _psutil_rss()) < 50 and system.peak_rss_mb(True) >= system.rss_mb() - 1


def _psutil_rss():
    import psutil

    return psutil.Process().memory_info().rss / 2**20


def test_host_facts_of_a_recorded_macos_runtime():
    """On macOS the wheel registers Core ML and MLX: their programs run there and are proven,
    as XNNPACK's are here (no Mac runs here: its recorded registry stands in for its runtime)."""
    from pteforge.api import backends
    from pteforge.runtime.host import Host

    mac = Host.recorded("macos")
    assert program_check(mac, ["CoreMLBackend", "XnnpackBackend"], []).ok
    assert not program_check(mac, ["VulkanBackend"], []).ok
    assert "the macos wheel's runtime" in program_check(mac, ["VulkanBackend"], []).reason
    rows = {a.name: a for a in backends(on="macos")}
    assert rows["coreml"].run.ok and rows["coreml"].lower.ok and rows["xnnpack"].run.ok and rows["mlx"].run.ok
    assert not rows["openvino"].run.ok and not rows["vulkan"].run.ok
    windows = {a.name: a for a in backends(on="windows")}
    assert windows["xnnpack"].run.ok and not windows["coreml"].run.ok
    assert not windows["coreml"].lower.ok and "Windows wheels" in windows["coreml"].lower.reason
    assert not {a.name: a for a in backends(on="linux")}["metal"].lower.ok


def test_export_decides_to_prove_by_the_host_it_is_given(tmp_path):
    """The pipeline's one question, asked of a macOS runtime: a Core ML program is verified
    there (here it then fails to load, as this Linux wheel lacks Core ML), not set aside."""
    pytest.importorskip("coremltools")
    from pteforge.runtime.host import Host, host
    from pteforge.models.factory import factory_spec
    from pteforge.stages.pipeline import export_target
    from pteforge.core.result import Status
    from pteforge.core.spec import ExportConfig, InputSpec, Precision, Target
    from pteforge.stages.capture import capture

    spec = factory_spec("tiny_models:tiny", (InputSpec((1, 3, 16, 16)),), name="tiny")
    config = ExportConfig(out_dir=tmp_path / "out", weights="none", verify_inputs=1)
    cap = capture(spec, config, tmp_path / "work")
    coreml = Target(("coreml",), Precision.FP32)
    here = export_target(cap, spec, coreml, config, host())
    assert here.status is Status.NOT_RUNNABLE_HERE
    on_mac = export_target(cap, spec, coreml, config, Host.recorded("macos", host().operators))
    assert on_mac.status is Status.LOAD_FAILED and "CoreMLBackend" in (on_mac.reason or ""), on_mac.reason


def test_cli_backends_for_another_host(capsys):
    from pteforge.cli import main

    assert main(["backends", "--host", "windows", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["xnnpack"]["runs_here"] and not rows["coreml"]["lowers_here"] and rows["coreml"]["host"] == "windows"

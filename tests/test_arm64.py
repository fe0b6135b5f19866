"""Arm64 proof under emulation (issue #71): export --prove-on arm64, pteforge setup arm64.

The fast tests run the guest script with this host's Python (the same code the emulated
aarch64 CPython runs) and check what a row says without the setup. The slow one is CI's
proof from a clean machine: it runs the setup itself, then an export proven on Arm64.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pteforge.cli import main
from pteforge.core.errors import ExitStatus

TINY = ["--model", "tiny_models:tiny", "--input-shape", "1,3,16,16", "--weights", "none"]
ROOT = Path(__file__).resolve().parent.parent


def cli(capsys, *args):
    code = main([str(a) for a in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_guest_runs_every_program_of_a_job_file_and_says_what_it_is(tmp_path, capsys):
    """The guest's protocol, run by this host's Python: one process, several programs, their
    outputs as the host runtime gives them; a program it cannot load is that program's failure."""
    from pteforge.runtime import arm64_guest
    from pteforge.stages.verify import run_program

    out = tmp_path / "out"
    assert cli(capsys, *TINY, "--backends", "xnnpack", "portable", "--bench-runs", "0", "--out", out)[0] == 0
    x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)
    np.savez(tmp_path / "in.npz", i0_0=x, i1_0=x * 2)
    (tmp_path / "broken.pte").write_bytes(b"not a program")
    written = {e["target"]: out / e["file"] for e in json.loads((out / "index.json").read_text())["models"]}
    ptes = [written["xnnpack"], tmp_path / "broken.pte", written["portable"]]
    jobs = [{"pte": str(p), "inputs": str(tmp_path / "in.npz"), "outputs": str(tmp_path / f"o{i}.npz")}
            for i, p in enumerate(ptes)]
    (tmp_path / "jobs.json").write_text(json.dumps({"programs": jobs}))
    done = subprocess.run([sys.executable, arm64_guest.__file__, str(tmp_path / "jobs.json")],
                          capture_output=True, text=True, check=True)
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert lines[0]["machine"] == os.uname().machine and "XnnpackBackend" in lines[0]["backends"]
    assert [line["ok"] for line in lines[1:]] == [True, False, True]
    assert lines[2]["load"] is True
    import torch

    host = run_program(ptes[0].read_bytes(), [[torch.from_numpy(x)], [torch.from_numpy(x * 2)]])
    got = np.load(tmp_path / "o0.npz")
    assert np.array_equal(got["o0_0"], host[0][0].numpy()) and np.array_equal(got["o1_0"], host[1][0].numpy())


@pytest.mark.skipif(sys.platform != "linux" or os.uname().machine != "x86_64", reason="emulates Arm64 on Linux x86_64")
def test_without_the_setup_a_row_says_how_to_turn_the_arm64_proof_on(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PTEFORGE_ARM64_DIR", str(tmp_path / "no-arm64"))
    monkeypatch.setattr("pteforge.runtime.arm64.native", lambda: False)
    out = tmp_path / "out"
    code, stdout, _ = cli(capsys, *TINY, "--backends", "xnnpack", "--bench-runs", "0", "--out", out,
                          "--prove-on", "arm64")
    assert code == ExitStatus.OK  # the host's verdict stands; the Arm64 proof was not possible here
    [entry] = json.loads((out / "index.json").read_text())["models"]
    assert entry["status"] == "VERIFIED"
    assert entry["arm64"]["status"] == "NOT_RUNNABLE_HERE"
    assert "pteforge setup arm64" in entry["arm64"]["fix"]
    assert "Arm64: NOT_RUNNABLE_HERE" in stdout and "pteforge setup arm64" in stdout


def test_setup_on_an_arm64_host_says_there_is_nothing_to_set_up(capsys, monkeypatch):
    monkeypatch.setattr("pteforge.runtime.arm64_setup.native", lambda: True)
    code, _, err = cli(capsys, "setup", "arm64")
    assert code == ExitStatus.SETUP
    assert "this host is Arm64 itself" in err and "Traceback" not in err


def _arm64_home() -> Path:
    """The Arm64 runtime the developer's (or CI's) pteforge uses: its downloads are reused."""
    import platformdirs

    return Path(os.environ.get("PTEFORGE_TEST_ARM64_DIR")
                or Path(platformdirs.user_cache_dir("pteforge", appauthor=False)) / "arm64")


@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux" or os.uname().machine != "x86_64", reason="emulates Arm64 on Linux x86_64")
def test_setup_then_export_proven_on_arm64_under_emulation(tmp_path):
    """CI's Arm64 proof: `pteforge setup arm64` (idempotent: what is there is not fetched
    again), then a tiny model's XNNPACK fp16 and int8 programs proven under emulation."""
    env = {**os.environ, "PTEFORGE_ARM64_DIR": str(_arm64_home()), "PYTHONPATH": str(ROOT / "tests")}
    pteforge = [sys.executable, "-m", "pteforge"]
    setup = subprocess.run([*pteforge, "setup", "arm64"], env=env, capture_output=True, text=True, timeout=1800)
    assert setup.returncode == 0, setup.stderr[-2000:]
    again = subprocess.run([*pteforge, "--json", "setup", "arm64"], env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "already set up" in again.stderr
    out = tmp_path / "out"
    done = subprocess.run([*pteforge, "export", *TINY, "--backends", "xnnpack:fp16", "xnnpack:int8", "--bench-runs", "0",
                           "--out", str(out), "--prove-on", "arm64"], env=env, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    entries = json.loads((out / "index.json").read_text())["models"]
    assert {e["target"] for e in entries} == {"xnnpack:fp16", "xnnpack:int8"}
    for e in entries:
        a = e["arm64"]
        assert a["status"] == "VERIFIED", a
        assert "qemu-aarch64" in a["method"] and "fp16 arithmetic" in a["method"] and "dot product" in a["method"]
        assert "ExecuTorch 1.5.1" in a["method"] and a["sqnr_db"] >= a["threshold_sqnr_db"]
        assert e["verification"]["method"].startswith("this host's")  # the host's verdict stays beside it
    assert "Arm64 under qemu-aarch64" in done.stdout


def test_the_summary_says_both_verdicts_where_they_differ():
    from pteforge.core.result import Record, Status
    from pteforge.ui.render import _arm64_text

    method = ("ExecuTorch 1.5.1's aarch64 runtime under emulation (qemu-aarch64 7.2.22, -cpu max,sme=off: "
              "fp16 arithmetic, dot product)")
    rec = Record("m", "mobilenet", "classification", "xnnpack:fp16", ["xnnpack"], "fp16", Status.VERIFIED,
                 arm64={"status": "MISMATCH", "method": method, "sqnr_db": 14.2, "top1_agreement": 0.75,
                        "vs_host_sqnr_db": 15.0, "reason": "output differs from eager on Arm64"})
    text = _arm64_text(rec)
    assert "Arm64 under qemu-aarch64 7.2.22: MISMATCH (this host: VERIFIED) SQNR 14.2 dB" in text
    assert "15.0 dB from this host's outputs" in text
    assert rec.arm64_failed
    rec.arm64 = {**rec.arm64, "status": "VERIFIED", "vs_host_sqnr_db": 200.0, "reason": None}
    assert "also SQNR 14.2 dB" in _arm64_text(rec) and "the same outputs as this host" in _arm64_text(rec)
    assert not rec.arm64_failed

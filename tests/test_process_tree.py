"""A worker's whole process tree goes with it: at --timeout, at Ctrl-C and after a crash,
every process a model started (a subprocess, one that ignores SIGTERM, a grandchild, a
multiprocessing resource tracker) is ended. Linux (and POSIX) only: /proc is read."""

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest
from test_reliability import popen_cli, still_alive

from pteforge.core.errors import ExitStatus
from pteforge.runtime.isolate import GRACE_S, IsolatedRuntime, end_group

pytestmark = pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="reads /proc (Linux)")

# What a model may start, each with the marker on its command line: a sleeper, one that
# ignores SIGTERM, one with a child of its own, one with multiprocessing's resource tracker
# (its pid written to the pid file too). Written into the model file as it is, and run here.
KIT = textwrap.dedent("""
    import os, subprocess, sys, time

    SLEEPER = "import time; time.sleep(600)"
    STUBBORN = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
    PARENT = ("import subprocess, sys, time; "
              "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)', sys.argv[1]]); time.sleep(600)")
    TRACKER = ("import multiprocessing as mp, sys, time; from multiprocessing import resource_tracker as rt; "
               "lock = mp.get_context('spawn').Lock(); "
               "open(sys.argv[2], 'a').write(str(rt._resource_tracker._pid) + chr(10)); time.sleep(600)")


    def start_tree(marker, pids):
        kids = [subprocess.Popen([sys.executable, "-c", code, marker, pids])
                for code in (SLEEPER, STUBBORN, PARENT, TRACKER)]
        with open(pids, "a") as f:
            f.write("".join(str(k.pid) + chr(10) for k in kids))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(open(pids).read().split()) < 5:  # the tracker's too
            time.sleep(0.1)
        time.sleep(1)  # PARENT's child started
""")
_KIT: dict = {}
exec(KIT, _KIT)  # noqa: S102 - the test's own code
start_tree = _KIT["start_tree"]


def marked(marker: str) -> list[int]:
    """The running (not zombie) processes whose command line holds ``marker``."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
            zombie = "\nState:\tZ" in (proc / "status").read_text()
        except OSError:
            continue
        if marker.encode() in cmdline and not zombie and int(proc.name) != os.getpid():
            found.append(int(proc.name))
    return found


def recorded(pids: Path) -> list[int]:
    return [int(p) for p in pids.read_text().split()] if pids.exists() else []


def assert_tree_gone(marker: str, pids: Path, within: float = 30) -> None:
    started = recorded(pids)
    assert len(started) == 5, f"the model started its processes: {started}"  # the four and the tracker
    left = still_alive(sorted({*started, *marked(marker)}), within=within)
    assert not left, f"left running: {[Path(f'/proc/{p}/cmdline').read_bytes() for p in left if Path(f'/proc/{p}').exists()]}"
    assert not marked(marker)


@pytest.fixture
def tree(tmp_path):
    """(a model file whose forward starts the tree and hangs, its marker, its pid file)."""
    marker, pids = f"pteforge-tree-{uuid.uuid4().hex}", tmp_path / "pids"
    model = tmp_path / "tree_model.py"
    model.write_text(KIT + textwrap.dedent(f"""
        import torch


        class Tree(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = torch.nn.Linear(4, 4)

            def forward(self, x):
                start_tree({marker!r}, {str(pids)!r})
                time.sleep(600)
                return self.fc(x)


        def build():
            return Tree()
    """))
    yield model, marker, pids
    for pid in [*recorded(pids), *marked(marker)]:  # a failed test leaves nothing behind either
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
def test_at_timeout_every_process_a_model_started_is_ended(tree, tmp_path):
    model, marker, pids = tree
    proc = subprocess.run([sys.executable, "-m", "pteforge", "export", "--model", f"{model}:build", "--input-shape",
                           "1,4", "--weights", "none", "--backends", "xnnpack", "--timeout", "20", "--out",
                           tmp_path / "out"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == ExitStatus.TARGETS_FAILED, proc.stderr
    assert "timed out after 20 s (--timeout)" in proc.stdout
    assert_tree_gone(marker, pids)


@pytest.mark.slow
def test_on_ray_at_timeout_every_process_a_model_started_is_ended(tree, tmp_path):
    """A Ray task cancelled at --timeout: its worker is killed, and what the model started
    goes with it (Ray's kill_child_processes_on_worker_exit, which pteforge relies on)."""
    pytest.importorskip("ray", reason="needs pteforge[ray]")
    model, marker, pids = tree
    proc = subprocess.run([sys.executable, "-m", "pteforge", "export", "--model", f"{model}:build", "--input-shape",
                           "1,4", "--weights", "none", "--backends", "xnnpack", "--timeout", "30", "--executor", "ray",
                           "--out", tmp_path / "out"], capture_output=True, text=True, timeout=600)
    assert proc.returncode in (ExitStatus.TARGETS_FAILED, ExitStatus.MODEL), proc.stdout + proc.stderr
    assert "timed out after 30 s (--timeout)" in proc.stdout + proc.stderr
    assert_tree_gone(marker, pids)


def test_a_job_in_a_process_that_lives_on_ends_what_it_started():
    """``descendants_ended`` in this process (as in a Ray worker, which serves the next task):
    what the block started is ended at its end, this process spared."""
    from pteforge.runtime.isolate import descendants_ended

    marker = f"pteforge-tree-{uuid.uuid4().hex}"
    before = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", marker + "-kept"])
    try:
        with descendants_ended():
            child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", marker])
            time.sleep(0.5)
        assert child.wait(timeout=10) is not None and marked(marker) == [before.pid]
        assert before.poll() is None, "what the process had started before the job is spared"
    finally:
        before.kill()
        before.wait()


@pytest.mark.slow
def test_at_ctrl_c_every_process_a_model_started_is_ended(tree, tmp_path):
    model, marker, pids = tree
    proc = popen_cli("export", "--model", f"{model}:build", "--input-shape", "1,4", "--weights", "none", "--backends",
                     "xnnpack", "--out", tmp_path / "out")
    deadline = time.monotonic() + 300
    while len(recorded(pids)) < 5 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    assert len(recorded(pids)) == 5, "the model's forward ran"
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=120)
    assert proc.returncode == ExitStatus.INTERRUPTED
    assert_tree_gone(marker, pids)


def crash_after_starting(marker: str, pids: str, on_stage=None) -> None:
    """A worker job: starts the tree, then dies as native code can."""
    start_tree(marker, pids)
    os.kill(os.getpid(), signal.SIGSEGV)


def test_after_a_crash_every_process_the_worker_started_is_ended(tmp_path):
    from pteforge.run.workers import Call, WorkerPool

    marker, pids = f"pteforge-tree-{uuid.uuid4().hex}", tmp_path / "pids"
    try:
        with WorkerPool(1, fresh=True) as pool:
            [outcome] = pool.run([Call(key="crash", fn=crash_after_starting, args=(marker, str(pids)))])
            assert outcome.crash == "the worker process killed by SIGSEGV"
            assert_tree_gone(marker, pids, within=GRACE_S + 10)
    finally:
        for pid in [*recorded(pids), *marked(marker)]:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def test_a_group_is_ended_sigterm_first_then_sigkill(tmp_path):
    """``end_group``: what ends on SIGTERM ends at once, what ignores it is killed after the
    grace, and a resource tracker whose writers are gone exits by itself."""
    marker, pids = f"pteforge-tree-{uuid.uuid4().hex}", tmp_path / "pids"
    leader = subprocess.Popen([sys.executable, "-c", f"{KIT}\nstart_tree({marker!r}, {str(pids)!r}); time.sleep(600)"],
                              start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while len(recorded(pids)) < 5 and time.monotonic() < deadline:
            time.sleep(0.1)
        t0 = time.monotonic()
        end_group(leader.pid, grace=1.0, reap=leader.poll)
        assert time.monotonic() - t0 < 5
        assert leader.wait(timeout=10) == -signal.SIGTERM
        assert_tree_gone(marker, pids, within=5)
    finally:
        for pid in [leader.pid, *recorded(pids), *marked(marker)]:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def test_end_group_never_signals_its_own_group():
    end_group(os.getpgrp(), grace=0.1)  # returns at once; this test process is alive to say so
    end_group(0, grace=0.1)
    end_group(1, grace=0.1)


def test_the_runtime_child_leads_its_own_group():
    with IsolatedRuntime(timeout=60) as rt:
        rt.proc = rt._start()
        assert os.getpgid(rt.proc.pid) == rt.proc.pid != os.getpgrp()

"""Reliability: crashes, hangs, interrupts, kills, concurrent runs, untrusted and bad input."""

import hashlib
import json
import os
import pickle
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, TESTS, run_cli
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_cli import TINY, cli, error_lines

from pteforge.core.errors import ExitStatus, ManifestError
from pteforge.runtime.isolate import ChildCrashed, IsolatedRuntime
from pteforge.report.manifest import load_manifest


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def assert_manifest_matches_disk(out: Path) -> dict:
    manifest = json.loads((out / "index.json").read_text())
    for e in manifest["models"]:
        f = out / e["file"]
        assert f.exists() and sha(f) == e["hash"] and f.stat().st_size == e["size"], e["name"]
    assert not list(out.rglob("*.tmp")), "no partial file left behind"
    return manifest


def popen_cli(*args, **kw):
    """The CLI as a user's terminal starts it. SIGINT gets its default action in the child:
    a test runner started in the background by a non-interactive shell (``cmd &``)
    ignores SIGINT, every process it starts inherits that, and Python then installs no
    KeyboardInterrupt handler, so the Ctrl-C tests would test nothing."""
    env = {**os.environ, "PYTHONPATH": str(TESTS)}
    return subprocess.Popen([sys.executable, str(ROOT / "main.py"), *map(str, args)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL), **kw)


def wait_for_line(stream, needle: str, timeout: float = 600) -> list[str]:
    seen, deadline = [], time.monotonic() + timeout
    for line in stream:
        seen.append(line)
        if needle in line:
            return seen
        if time.monotonic() > deadline:
            break
    raise AssertionError(f"never saw {needle!r}: {''.join(seen)[-2000:]}")


def children_of(pid: int) -> set[int]:
    found, todo = set(), [pid]
    while todo:
        p = todo.pop()
        for task in Path(f"/proc/{p}/task").glob("*"):
            try:
                kids = (task / "children").read_text().split()
            except OSError:
                continue
            for k in map(int, kids):
                if k not in found:
                    found.add(k)
                    todo.append(k)
    return found


def alive(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in status


def still_alive(pids, within: float) -> list[int]:
    """Those of ``pids`` still running after ``within`` seconds (they end on their own,
    later on a loaded machine: polled, not slept on)."""
    deadline = time.monotonic() + within
    while [p for p in pids if alive(p)] and time.monotonic() < deadline:
        time.sleep(0.25)
    return [p for p in pids if alive(p)]


# ---- isolation ---------------------------------------------------------------------


@pytest.mark.slow
def test_worker_crashes_and_hangs_fail_their_rows_only(capsys, out):
    code, stdout, err = cli(
        capsys, "export",
        "--model", "tiny_models:segfaults", "--model", "tiny_models:tiny", "--model", "tiny_models:sigkills",
        "--model", "tiny_models:hangs", "--input-shape", "1,3,16,16", "--weights", "none",
        "--backends", "xnnpack", "portable", "--timeout", "25", "--out", out,
    )
    assert code == ExitStatus.TARGETS_FAILED
    assert "killed by SIGSEGV" in stdout and "killed by SIGKILL" in stdout and "timed out after 25 s" in stdout
    assert stdout.count("CAPTURE_FAILED") == 6
    # each with the fix for what happened to it (a capture: no other backend would change it)
    assert stdout.count("timed out after 25 s (--timeout) — fix: give a longer --timeout for a slow capture") == 2
    assert stdout.count("killed by SIGSEGV — fix: the native code crashed: run with --debug for its output") == 2
    manifest = assert_manifest_matches_disk(out)
    assert {e["name"]: e["status"] for e in manifest["models"]} == {
        "tiny_xnnpack.pte": "VERIFIED", "tiny_portable.pte": "VERIFIED"}


def test_workers_side_by_side_share_the_cores():
    """Jobs running side by side each get their share of torch's threads (both spinning on
    every core made calibration 2-5x slower); a job running alone gets every core."""
    import tiny_models

    from pteforge.run.workers import Call, WorkerPool

    cores = os.cpu_count() or 1
    with WorkerPool(2) as pool:
        # each takes 0.5 s: instant jobs could leave the last one to start alone, when the
        # two before it had both finished (it then rightly gets every core)
        together = [o.value for o in pool.run([Call(key=f"j{i}", fn=tiny_models.torch_threads, args=(0.5,))
                                               for i in range(4)])]
        alone = [o.value for o in pool.run([Call(key="alone", fn=tiny_models.torch_threads)])]
    assert together == [max(1, cores // 2)] * 4 and alone == [cores]


def test_a_forked_worker_asks_cuda_not_nvml_and_collects_less_often(monkeypatch):
    """Only the fork server asks NVML whether there is a GPU (so as not to initialise CUDA
    before it forks): a worker that did asked again at every fake-tensor operation, 45 us
    each. A worker freezes what it inherited from the fork server and collects at
    ``COLLECTION_THRESHOLDS`` (at Python's defaults, collections took 2.8 s of ~24 s of
    lowering)."""
    import tiny_models

    from pteforge.core.system import COLLECTION_THRESHOLDS
    from pteforge.run.workers import NVML_CHECK, Call, WorkerPool

    monkeypatch.delenv(NVML_CHECK, raising=False)  # not the user's own: pteforge sets it for its fork server
    with WorkerPool(1) as pool:
        [outcome] = list(pool.run([Call(key="facts", fn=tiny_models.worker_facts, args=(NVML_CHECK,))]))
    assert os.environ.get(NVML_CHECK) == "1", "set for the fork server"
    variable, thresholds, frozen = outcome.value
    assert variable is None and thresholds == COLLECTION_THRESHOLDS and frozen > 100_000, outcome.value


def test_a_worker_freezes_what_outlives_a_job_and_collects_what_the_memo_lets_go():
    """Between jobs a worker collects the last one's garbage and freezes what lives on,
    so the next collection walks only what the next job makes. A program ``stages.memo``
    kept (a graph module in a cycle with its graph) is frozen with the rest; when the memo
    pushes it out, the worker thaws before collecting, so it is freed, not kept forever."""
    import tiny_models

    from pteforge.run.workers import Call, WorkerPool

    with WorkerPool(1) as pool:
        outcomes = list(pool.run([Call(key=name, fn=tiny_models.keeps_a_program, args=(name,))
                                  for name in ("first", "second", "third", "fourth")]))
    assert all(o.ok for o in outcomes), [o.error for o in outcomes]
    frozen = [o.value[0] for o in outcomes]
    assert frozen[1] > frozen[0], "what the first job left alive was frozen before the second"
    assert [o.value[1:] for o in outcomes] == [
        (["first"], True), (["first", "second"], True), (["second", "third"], True), (["third", "fourth"], False)]


def test_the_fork_server_imports_what_the_planned_backends_name_for_every_worker():
    """A run that plans an Arm target has the fork server import Arm's passes (0.34 s that
    each worker's first Arm or Cortex-M job spent otherwise); every module a backend names
    imports; one that fails to import (or raises) is left to the jobs, and the fork server
    serves them all the same. In a fresh interpreter: this process's fork server may be
    running already."""
    import importlib

    from pteforge.backends import default_registry

    named = {m for b in default_registry() for m in b.fork_server_imports}
    assert "executorch.backends.arm._passes" in named
    for module in named:
        importlib.import_module(module)  # a rename upstream fails here, not in a user's run
    script = (
        "import sys, tiny_models\n"
        "from pteforge.run.engine import _fork_server_imports\n"
        "from pteforge.run.plan import plan_targets\n"
        "from pteforge.run.workers import Call, WorkerPool, start_fork_server\n"
        "for backends in (['xnnpack'], ['xnnpack', 'ethos-u85']):\n"
        "    print(_fork_server_imports(plan_targets(backends)))\n"
        "start_fork_server(also=('pteforge_no_such_module', 'tiny_models_broken')"
        " + _fork_server_imports(plan_targets(['ethos-u85'])))\n"
        "with WorkerPool(1) as pool:\n"
        "    [o] = pool.run([Call(key='m', fn=tiny_models.loaded, args=('executorch.backends.arm._passes',))])\n"
        "print(o.value)\n")
    out = subprocess.run([sys.executable, "-c", script], cwd=TESTS, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["()", "('executorch.backends.arm._passes',)", "True"], out.stdout


def test_a_spawned_worker_leaves_at_once_and_runs_its_exit_handlers(tmp_path):
    """A closed pool's spawned worker (a fresh interpreter, as the captures' are) exits
    without taking its interpreter apart: a thread a job left running does not hold it (a
    normal exit would wait for it until the pool killed it), and it exits with code 0 after
    running its exit handlers (a handler a job registered ran, a temporary folder it left
    was removed)."""
    import tiny_models

    from pteforge.run.workers import Call, WorkerPool

    with WorkerPool(1, fresh=True) as pool:
        [outcome] = list(pool.run([Call(key="left", fn=tiny_models.leaves_state, args=(str(tmp_path),))]))
        worker = pool.idle[0]
    assert outcome.ok and worker.proc.exitcode == 0
    assert (tmp_path / "atexit").exists() and not Path(outcome.value).exists()


def test_jobs_of_a_group_run_on_one_worker_and_no_core_idles():
    """Jobs of one group follow the worker that ran the first (what it kept in memory is
    reused) while other jobs take the other worker; when only jobs waiting for a busy
    worker are left, a free worker takes one rather than idle."""
    import tiny_models

    from pteforge.run.workers import Call, WorkerPool

    def job(key, seconds, group=None):
        return Call(key=key, fn=tiny_models.pid_after, args=(seconds,), group=group)

    with WorkerPool(2) as pool:
        jobs = [job("a1", 0.3, "a"), job("a2", 0.2, "a"), job("a3", 0.2, "a"), *(job(f"x{i}", 1.0) for i in range(3))]
        pids = {o.job.key: o.value for o in pool.run(jobs)}
        assert pids["a1"] == pids["a2"] == pids["a3"] != pids["x0"], "the group on one worker, x0 beside it"
        t0 = time.monotonic()
        pids = {o.job.key: o.value for o in pool.run([job("b1", 2.0, "b"), job("b2", 0.1, "b")])}
        assert pids["b1"] != pids["b2"] and time.monotonic() - t0 < 3.5, "b2 did not wait for b1's worker"


@pytest.mark.slow
def test_ctrl_c_stops_promptly_and_keeps_what_finished(tmp_path):
    out = tmp_path / "out"
    proc = popen_cli("export", *TINY, "--backends", "portable", "xnnpack", "vulkan", "coreml", "--jobs", "1",
                     "--out", out)
    wait_for_line(proc.stderr, "○ tiny coreml")  # then Ctrl-C, with jobs still to run (exit 130 below says so)
    workers = children_of(proc.pid)
    proc.send_signal(signal.SIGINT)
    t0 = time.monotonic()
    _, err = proc.communicate(timeout=60)
    assert time.monotonic() - t0 < 30, "Ctrl-C stops promptly"
    assert proc.returncode == ExitStatus.INTERRUPTED
    assert err.rstrip().splitlines()[-1].startswith("error: interrupted"), "the last line (multiprocessing's resource " \
        "tracker warned of 'leaked semaphore objects' after it: tqdm's lock in each killed worker)"
    manifest = assert_manifest_matches_disk(out)
    assert "tiny_coreml.pte" in {e["name"] for e in manifest["models"]}
    assert not still_alive(workers, within=15), "workers are ended"


@pytest.mark.slow
def test_sigkill_of_the_parent_leaves_intact_results(tmp_path):
    out = tmp_path / "out"
    proc = popen_cli("export", *TINY, "--backends", "portable", "xnnpack", "vulkan", "coreml", "--jobs", "1",
                     "--out", out)
    wait_for_line(proc.stderr, "tiny › ")  # the first target job is under way
    wait_for_line(proc.stderr, "✓ tiny ")  # and has finished; the next is mid-way
    workers = children_of(proc.pid)
    assert proc.poll() is None and workers, "killed mid-run"
    proc.kill()
    proc.wait(timeout=30)
    assert not still_alive(workers, within=30), "workers die with the parent"
    load_manifest(out / "index.json")  # parses and is our schema
    manifest = assert_manifest_matches_disk(out)
    assert manifest["models"], "what finished before the kill is listed"


@pytest.mark.slow
def test_two_runs_into_one_out_both_land(tmp_path):
    out = tmp_path / "out"
    a = popen_cli(*TINY, "--backends", "xnnpack", "--out", out)
    b = popen_cli(*TINY, "--backends", "portable", "--out", out)
    for p in (a, b):
        _, err = p.communicate(timeout=600)
        assert p.returncode == 0, err
    manifest = assert_manifest_matches_disk(out)
    assert {e["name"] for e in manifest["models"]} == {"tiny_xnnpack.pte", "tiny_portable.pte"}


# ---- untrusted input ---------------------------------------------------------------


class Payload:
    def __reduce__(self):
        return (os.system, (f"touch {os.environ['PTEFORGE_PAYLOAD_MARK']}",))


def test_pickle_payload_is_refused_and_never_runs(capsys, out, tmp_path, monkeypatch):
    mark = tmp_path / "pwned"
    monkeypatch.setenv("PTEFORGE_PAYLOAD_MARK", str(mark))
    evil = tmp_path / "weights.pt"
    evil.write_bytes(pickle.dumps({"conv.weight": Payload()}))
    code, _, err = cli(capsys, "--model", "tiny_models:tiny", "--input-shape", "1,3,16,16", "--weights", evil,
                       "--backends", "portable", "--out", out)
    assert code == ExitStatus.WEIGHTS
    [line] = error_lines(err)
    # torch's reason, without its two paragraphs of advice or its terminal styling
    assert "refused to load" in line and "(WeightsUnpickler error: Unsupported operand" in line, line
    assert "\x1b" not in line and "Weights only load failed" not in line and len(line) < 400, line
    assert not mark.exists(), "nothing in the pickle ran"


# ---- bad input everywhere else -----------------------------------------------------


@pytest.fixture(scope="module")
def earlier(tmp_path_factory):
    """An output directory with a good artifact that no bad input may touch."""
    from pteforge.cli import main

    out = tmp_path_factory.mktemp("earlier")
    assert main([*TINY, "--backends", "xnnpack", "--out", str(out)]) == 0
    return out


def snapshot(out: Path) -> dict:
    return {str(p.relative_to(out)): sha(p) for p in out.rglob("*") if p.is_file() and not p.name.startswith(".")}


def assert_intact(out: Path, before: dict) -> None:
    """Every file that was there before is there, byte for byte (new files may appear)."""
    now = snapshot(out)
    assert {k: now.get(k) for k in before} == before


M = ["--model", "tiny_models:tiny"]
S = ["--input-shape", "1,3,16,16"]
BAD_INPUTS = [
    # (args, exit status, text the one error line holds)
    (["export", "--yolo", "yolo12n"], ExitStatus.USAGE, "unknown model 'yolo12n'. Did you mean"),
    (["export", "--mobilenet", "mobilenet_v4"], ExitStatus.USAGE, "unknown model 'mobilenet_v4'"),
    (["export", "--mobilenet", "yolo11n"], ExitStatus.USAGE, "yolo11n is not one of --mobilenet's models"),
    ([*M, *S, "--backends", "xnnpak"], ExitStatus.USAGE, "Did you mean 'xnnpack'?"),
    ([*M, *S, "--backends", "vulcan"], ExitStatus.USAGE, "Did you mean 'vulkan'?"),
    ([*M, *S, "--backends", "xnnpack:"], ExitStatus.USAGE, "malformed target 'xnnpack:'"),
    ([*M, *S, "--backends", "xnnpack:int9"], ExitStatus.USAGE, "unknown precision 'int9'"),
    ([*M, *S, "--backends", "xnnpack+xnnpack"], ExitStatus.USAGE, "names a backend twice"),
    ([*M, *S, "--backends", "ethos-u55:fp16"], ExitStatus.USAGE, "ethos-u55 does not take precision fp16"),
    ([*M, *S, "--backends", "vulkan:int8"], ExitStatus.USAGE, "vulkan does not take precision int8; it takes: fp16, fp32"),
    ([*M, *S, "--backends", "vulkan", "--precision", "int4-weight"], ExitStatus.USAGE, "vulkan does not take precision int4-weight"),
    ([*M, *S, "--precision", "fp99"], ExitStatus.USAGE, "unknown precision 'fp99'"),
    ([*M, *S, "--precision", "auto", "--accuracy-budget", "top1=2"], ExitStatus.USAGE, "malformed --accuracy-budget 'top1=2'"),
    ([*M, *S, "--accuracy-budget", "sqnr=nan"], ExitStatus.USAGE, "malformed --accuracy-budget 'sqnr=nan'"),
    ([*M, *S, "--precision", "auto", "--bench-runs", "0"], ExitStatus.USAGE, "--bench-runs 0 times none"),
    ([*M, *S, "--backends", "xnnpack:int8", "--calibration", "/no/such/photos"], ExitStatus.USAGE,
     "--calibration /no/such/photos is not a directory"),
    ([*M, *S, "--backends", "xnnpack:int8", "--calibration", str(TESTS)], ExitStatus.USAGE,
     f"--calibration {TESTS}: none of its"),  # source files, no image: never a silent fallback
    # two factories of one name: one would overwrite the other's artifacts and entries
    ([*M, "--model", "other_models:tiny", *S, "--backends", "portable"], ExitStatus.USAGE,
     "two models are named tiny: tiny_models:tiny and other_models:tiny"),
    # the earlier run's tiny came from tiny_models:tiny
    (["--model", "other_models:tiny", *S, "--backends", "portable"], ExitStatus.USAGE,
     "already holds a model named tiny from tiny_models:tiny"),
    ([*M, *S, "--backends", "qnn"], ExitStatus.NO_BACKEND, "No available backends from requested: ['qnn']"),
    ([*M, "--input-shape", "1,3,x"], ExitStatus.USAGE, "malformed --input-shape '1,3,x'"),
    ([*M, "--input-shape", "1,0,3"], ExitStatus.USAGE, "malformed --input-shape '1,0,3'"),
    ([*M, *S, "--input-dtype", "complex64"], ExitStatus.USAGE, "unsupported --input-dtype 'complex64'"),
    ([*M, *S, "--input-shape", "1,2", "--input-shape", "3", "--input-dtype", "int64", "--input-dtype", "int64"],
     ExitStatus.USAGE, "one per --input-shape"),
    (["export", *S], ExitStatus.USAGE, "--input-shape applies to the models named"),
    (["export", "--movenet", *S], ExitStatus.USAGE, "does not suit movenet_lightning: its input is 1x192x192x3 only"),
    (["export", "--yolo", *S], ExitStatus.USAGE, "does not suit yolo11n: it takes one square image whose side is a multiple of 32"),
    (["export", "--mobilenet", *S, "--input-dtype", "float16"], ExitStatus.USAGE, "--input-dtype applies to --model"),
    (["--model", "tiny_models:tiny"], ExitStatus.USAGE, "needs its input shape"),
    (["--model", "tiny_models", *S], ExitStatus.USAGE, "malformed --model 'tiny_models'"),
    (["--model", "nope.nothing:f", *S], ExitStatus.MODEL, "cannot import 'nope.nothing'"),
    (["--model", "tiny_models:absent", *S], ExitStatus.MODEL, "has no callable 'absent'"),
    (["--model", "tiny_models:raises", *S], ExitStatus.MODEL, "raised RuntimeError"),
    (["--model", "tiny_models:needs_width", *S], ExitStatus.USAGE,
     "needs_width(width, depth=2) missing a required argument: 'width' (fix: give its arguments as Python literals: "
     "--model 'tiny_models:needs_width(width=...)')"),  # was MODEL, "raised TypeError", once the run had started
    (["--model", "tiny_models:needs_width(8, 2, 1)", *S], ExitStatus.USAGE, "needs_width(width, depth=2) too many"),
    (["--model", "tiny_models:downloads", *S], ExitStatus.WEIGHTS, "could not download what it loads: URLError"),
    (["--model", "tiny_models:not_a_module", *S], ExitStatus.MODEL, "returned dict, not a torch.nn.Module"),
    (["--model", "missing.pt2"], ExitStatus.USAGE, "model file 'missing.pt2' does not exist"),
    ([*M, *S, "--weights", "/no/such/weights.pt"], ExitStatus.USAGE, "--weights /no/such/weights.pt: no such file"),
    ([*M, *S, "--verify-inputs", "-1"], ExitStatus.USAGE, "--verify-inputs must be >= 0"),
    ([*M, *S, "--bench-runs", "-1"], ExitStatus.USAGE, "--bench-runs must be >= 0 (got -1)"),
    ([*M, *S, "--calibration-samples", "0"], ExitStatus.USAGE, "--calibration-samples must be >= 1"),
    ([*M, *S, "--seed", str(2**64)], ExitStatus.USAGE, "--seed must be between 0 and 4294967295"),  # was CAPTURE_FAILED
    ([*M, *S, "--seed", "-1"], ExitStatus.USAGE, "--seed must be between 0 and 4294967295"),
    ([*M, *S, "--timeout", "0"], ExitStatus.USAGE, "must be a positive number of seconds"),
    ([*M, *S, "--timeout", "nan"], ExitStatus.USAGE, "must be a positive number of seconds (got nan)"),
    ([*M, *S, "--tolerance", "nan"], ExitStatus.USAGE, "--tolerance must be a number of dB (got nan)"),
    ([*M, *S, "--base-url", "models.example.org/pte"], ExitStatus.USAGE,
     "--base-url 'models.example.org/pte' is not an http(s) URL"),
    (["validate", "--models-dir", "/no/such/dir"], ExitStatus.USAGE, "/no/such/dir is not a directory"),
    (["validate", "/no/such/dir"], ExitStatus.USAGE, "/no/such/dir is not a directory"),
    (["validate", "/tmp", "--models-dir", "/no/such/dir"], ExitStatus.USAGE, "two directories to validate"),
    (["validate", "/tmp", "--timeout", "0"], ExitStatus.USAGE, "--timeout must be a positive number of seconds (got 0)"),
]


@pytest.mark.parametrize("args, status, needle", BAD_INPUTS, ids=[" ".join(map(str, a[0]))[:60] for a in BAD_INPUTS])
def test_bad_input_table(capsys, earlier, args, status, needle):
    before = snapshot(earlier)
    extra = [] if args[0] == "validate" else ["--out", earlier]
    code, stdout, err = cli(capsys, *args, *extra)
    assert code == status, err + stdout
    lines = error_lines(err)
    assert len(lines) == 1 and needle in lines[0], err
    assert "Traceback" not in err + stdout
    assert_intact(earlier, before)


@pytest.mark.parametrize("where", ["missing", "a-file"])
def test_a_work_directory_that_cannot_be_is_refused_before_any_work(capsys, earlier, tmp_path, monkeypatch, where):
    """PTEFORGE_WORK_DIR that is not a directory: one line naming it, before any work (it
    was an "internal error: NotADirectoryError" once the captures were about to start)."""
    path = tmp_path / where
    if where == "a-file":
        path.write_text("not a directory")
    monkeypatch.setenv("PTEFORGE_WORK_DIR", str(path))
    before = snapshot(earlier)
    code, stdout, err = cli(capsys, *M, *S, "--backends", "xnnpack", "--weights", "none", "--out", earlier)
    assert code == ExitStatus.OUTPUT, err + stdout
    [line] = error_lines(err)
    assert f"PTEFORGE_WORK_DIR={path} is not a directory" in line and "fix: point PTEFORGE_WORK_DIR" in line, line
    assert "Traceback" not in err + stdout and "building and capturing" not in err
    assert_intact(earlier, before)


def test_a_site_or_base_url_the_app_cannot_use_is_refused_before_any_work(capsys, earlier, tmp_path):
    """--publish/--site that cannot be a directory and a base URL that is not http(s): one
    line before any work. A file as the site had been an internal error (FileExistsError)
    after the whole export; "models.example.org/pte" went into every remoteUrl as it was."""
    a_file = tmp_path / "a-file"
    a_file.write_text("not a directory")
    export = [*M, *S, "--backends", "portable", "--weights", "none", "--out", earlier]
    cases = [
        ([*export, "--publish", a_file, "--publish-relative"], f"--publish {a_file} is a file, not a directory"),
        ([*export, "--publish", a_file / "site", "--publish-base-url", "https://x.org"],
         f"--publish {a_file / 'site'} is under {a_file}, a file"),
        ([*export, "--publish", tmp_path / "site", "--publish-base-url", "ftp://x.org"],
         "--publish-base-url 'ftp://x.org' is not an http(s) URL"),
        (["publish", earlier, "--site", a_file, "--relative"], f"--site {a_file} is a file, not a directory"),
        (["publish", earlier, "--site", tmp_path / "site", "--base-url", "/pte"],
         "fix: give the whole URL, e.g. --base-url https://models.example.org/pte"),
    ]
    before = snapshot(earlier)
    for args, needle in cases:
        code, stdout, err = cli(capsys, *args)
        assert code == ExitStatus.USAGE, err + stdout
        [line] = error_lines(err)
        assert needle in line, line
        assert "building and capturing" not in err and "Traceback" not in err + stdout
    assert not (tmp_path / "site").exists() and a_file.read_text() == "not a directory"
    assert_intact(earlier, before)


def write_bad_file(tmp_path, kind):
    if kind == "bad-pt2":
        p = tmp_path / "model.pt2"
        p.write_bytes(b"PK\x03\x04 not really a zip")
    elif kind == "garbage-weights":
        p = tmp_path / "weights.pt"
        p.write_bytes(os.urandom(256))
    elif kind == "wrong-weights":
        import torch

        p = tmp_path / "weights.pt"
        torch.save({"something.else": torch.zeros(3)}, p)
    return p


@pytest.mark.parametrize(
    "kind, args, status, needle",
    [
        ("bad-pt2", lambda p: ["--model", p], ExitStatus.MODEL, "is not a torch.export program"),
        ("garbage-weights", lambda p: [*M, *S, "--weights", p], ExitStatus.WEIGHTS, "weights.pt"),
        ("wrong-weights", lambda p: [*M, *S, "--weights", p], ExitStatus.WEIGHTS, "does not match the model"),
    ],
)
def test_bad_files(capsys, earlier, tmp_path, kind, args, status, needle):
    before = snapshot(earlier)
    code, _, err = cli(capsys, *args(write_bad_file(tmp_path, kind)), "--backends", "portable", "--out", earlier)
    assert code == status
    assert needle in error_lines(err)[0]
    assert_intact(earlier, before)


def test_bad_output_locations(capsys, tmp_path):
    f = tmp_path / "a_file"
    f.write_text("keep me")
    for out, needle in ((f, "is a file, not a directory"), ("/proc/pteforge-out", "cannot write")):
        code, _, err = cli(capsys, *M, *S, "--backends", "portable", "--out", out)
        assert code == ExitStatus.OUTPUT
        assert needle in error_lines(err)[0]
    assert f.read_text() == "keep me"


def test_manifest_not_ours_is_refused(capsys, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "index.json").write_text(json.dumps({"models": [{"name": 3}]}))
    code, _, err = cli(capsys, *M, *S, "--backends", "portable", "--out", out)
    assert code == ExitStatus.MANIFEST
    assert "is not a pteforge manifest" in error_lines(err)[0]


@pytest.mark.slow
def test_disk_full_while_writing(tmp_path, earlier):
    import shutil

    out = tmp_path / "out"
    shutil.copytree(earlier, out)
    before = snapshot(out)

    def small_disk():  # files over 1 MiB cannot be written (EFBIG), like a full disk
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))

    env = {**os.environ, "PYTHONPATH": str(TESTS)}
    proc = subprocess.run([sys.executable, str(ROOT / "main.py"), "export", "--mobilenet", "--weights", "none",
                           "--backends", "portable", "--out", str(out)],
                          capture_output=True, text=True, cwd=ROOT, env=env, preexec_fn=small_disk, timeout=600)
    assert proc.returncode == ExitStatus.OUTPUT, proc.stderr
    [line] = error_lines(proc.stderr)
    assert "no space left" in line
    assert_intact(out, before)
    assert_manifest_matches_disk(out)


# ---- property-based: the parent never crashes --------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_mutated_manifests_never_crash_the_loader(tmp_path_factory, earlier, data):
    original = (earlier / "index.json").read_text()
    doc = json.loads(original)
    choice = data.draw(st.sampled_from(["bytes", "field", "json"]))
    if choice == "bytes":
        raw = bytearray(original.encode())
        for _ in range(data.draw(st.integers(1, 8))):
            raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
        text = bytes(raw).decode("utf-8", errors="replace")
    elif choice == "field":
        entry = doc["models"][0]
        key = data.draw(st.sampled_from(sorted(entry)))
        entry[key] = data.draw(json_values)
        text = json.dumps(doc)
    else:
        text = json.dumps(data.draw(json_values))
    path = tmp_path_factory.mktemp("m") / "mutant.json"  # not index.json: conftest checks those against the app
    path.write_text(text)
    try:
        load_manifest(path)
    except ManifestError as exc:
        assert exc.fix and "\n" not in exc.one_line()


@pytest.fixture(scope="module")
def child_runtime():
    with IsolatedRuntime(timeout=60) as rt:
        yield rt


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_mutated_programs_never_crash_the_parent(tmp_path_factory, earlier, child_runtime, data):
    import torch

    good = (earlier / "custom" / "tiny_xnnpack.pte").read_bytes()
    raw = bytearray(good)
    mode = data.draw(st.sampled_from(["flip", "truncate", "splice"]))
    if mode == "flip":
        for _ in range(data.draw(st.integers(1, 64))):
            raw[data.draw(st.integers(0, len(raw) - 1))] ^= data.draw(st.integers(1, 255))
    elif mode == "truncate":
        raw = raw[: data.draw(st.integers(0, len(raw) - 1))]
    else:
        at = data.draw(st.integers(0, len(raw)))
        raw[at:at] = data.draw(st.binary(min_size=1, max_size=512))
    d = tmp_path_factory.mktemp("pte")
    path = d / "mutant.pte"
    path.write_bytes(bytes(raw))
    torch.save([[torch.rand(1, 3, 16, 16)]], d / "in.pt")
    for op, fields in (("inspect", {}), ("run", {"inputs": str(d / "in.pt"), "outputs": str(d / "out.pt")})):
        try:
            reply = child_runtime.request(op, path=str(path), **fields)
        except ChildCrashed as exc:
            assert str(exc)  # a crash is that file's failure, described
            continue
        assert reply["ok"] or reply["error"]


def test_a_run_where_every_target_fails_says_so_and_select_says_why(capsys, tmp_path):
    """No ✅ for 0 of 1, no "Manifest: …" naming a file that was never written, and a model
    whose every artifact failed is not an "unknown model" to select."""
    out = tmp_path / "none"
    code, stdout, _ = cli(capsys, "export", "--model", "tiny_models:data_dependent", "--input-shape", "1,4",
                          "--weights", "none", "--backends", "portable", "--out", out)
    assert code == ExitStatus.TARGETS_FAILED
    assert "❌ Exported 0/1 backends" in stdout and "✅" not in stdout
    assert "No manifest written: no target produced an artifact" in stdout and "Manifest:" not in stdout
    assert not (out / "index.json").exists()

    out = tmp_path / "mismatch"
    code, stdout, _ = cli(capsys, *TINY, "--backends", "portable", "--tolerance", "500", "--out", out)
    assert code == ExitStatus.TARGETS_FAILED and "MISMATCH" in stdout and f"Manifest: {out / 'index.json'}" in stdout
    code, _, err = cli(capsys, "select", "tiny", "--manifest", out / "index.json")
    assert code == ExitStatus.USAGE
    [line] = error_lines(err)
    assert "offers the app no artifact of tiny (portable: MISMATCH)" in line, line


def test_a_runtime_error_code_is_named_with_the_operator_and_the_check_that_refused(capsys, out):
    """The runtime's Python bindings give "failed with error 0x12"; the row says what 0x12 is,
    and what the runtime logged on stderr: the kernel it was in and the check that failed.
    Nothing of it reaches the terminal otherwise (the worker's stderr is /dev/null)."""
    code, stdout, err = cli(capsys, "export", "--model", "tiny_models:conv_transpose3d", "--input-shape", "1,3,4,8,8",
                            "--weights", "none", "--backends", "portable", "--out", out)
    assert code == ExitStatus.TARGETS_FAILED
    assert "RUN_FAILED" in stdout and "failed with error 0x12 (InvalidArgument: a kernel refused its inputs" in stdout, stdout
    assert ("the runtime logged: aten::convolution.out: Expect input tensor to be 3-D or 4-D, but got, 5." in stdout
            and "fix: ExecuTorch's kernel for aten::convolution.out does not take these inputs: try a backend that "
                "delegates that operator" in stdout), stdout
    assert "Check failed" not in stdout + err and "type id" not in stdout + err


@pytest.mark.slow
def test_a_delegate_that_refuses_its_program_at_load_time_is_named_with_the_fix(tmp_path):
    """ExecuTorch 1.5.1's XNNPACK quantizer and partitioner make, of a residual 3-D
    convolution block (torchvision's r3d_18), an int8 program whose load fails ("Failed to
    create StaticConstantPad node 10 with code: xnn_status_invalid_parameter"; pteforge
    quantizes such paddings itself, so here its quantizer is ExecuTorch's alone). The row
    says which delegate refused, that the lowering is at fault, and what to try."""
    from pteforge.models.factory import factory_spec
    from pteforge.core.spec import ExportConfig, InputSpec
    from pteforge.stages.capture import capture

    spec = factory_spec("tiny_models:residual_conv3d", (InputSpec((1, 3, 2, 8, 8)),), name="residual_conv3d")
    config = ExportConfig(out_dir=tmp_path / "out", weights="none", verify_inputs=1)
    job = tmp_path / "job.pkl"
    job.write_bytes(pickle.dumps((capture(spec, config, tmp_path / "work"), spec, config)))
    code = ("import pickle; from pteforge.backends import xnnpack; from pteforge.stages.pipeline import export_target; "
            "from pteforge.core.spec import Target, Precision; "
            "xnnpack._with_quantized_pads = lambda quantizer: quantizer; "
            f"cap, spec, config = pickle.loads(open({str(job)!r}, 'rb').read()); "
            "r = export_target(cap, spec, Target(('xnnpack',), Precision.INT8), config); "
            "print(r.status.value, r.reason, '|', r.fix, '|', r.artifact)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=TESTS, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("LOAD_FAILED ") and "Init failed for backend XnnpackBackend" in proc.stdout, proc.stdout
    assert ("| XnnpackBackend refused, when loading it, the program ExecuTorch lowered for it (a lowering defect, not "
            "the model's): try xnnpack at another precision, or another backend; nothing was written | None") in proc.stdout


def test_what_every_first_load_logs_is_not_a_reason():
    """OpenVINO's delegate and cpuinfo log on the first load of a process, failure or not:
    the account of a failed run leaves them out (the lines are the runtime's own, recorded
    from a delegate that failed here)."""
    from pteforge.core.native_log import account

    said = account(
        "[cpuinfo_utils.cpp:125] CPU info and manual query on # of cpus dont match.\n"
        "[OpenvinoBackend.cpp:98] OpenVINO: runtime loaded successfully from '/venv/openvino/libs/libopenvino_c.so.2541'\n"
        "[method.cpp:1528] CALL_DELEGATE execute failed at instruction 0: 0x1\n")
    assert said.messages == ["CALL_DELEGATE execute failed at instruction 0: 0x1"]


def test_a_failing_pass_is_named_with_what_it_raised():
    """ExecuTorch's pass manager wraps a pass's error in "An error occurred when running the
    'P' pass after the following passes: […]", without it (a half-precision model to the Arm
    int8 targets showed only that); the row's reason says which pass and what it raised."""
    import torch
    from executorch.exir.pass_manager import ExportedProgramPassManager

    from pteforge.core.errors import one_line

    def refuses(graph_module):
        raise RuntimeError("cortex_m::dequantize_per_tensor() expected at most 6 argument(s)\nDeclaration: …")

    program = torch.export.export(torch.nn.Linear(2, 2), (torch.randn(1, 2),))
    with pytest.raises(Exception) as caught:
        ExportedProgramPassManager([refuses])(program)
    assert "An error occurred when running the 'refuses' pass" in str(caught.value)
    assert one_line(caught.value) == ("the refuses pass failed: RuntimeError: cortex_m::dequantize_per_tensor() "
                                      "expected at most 6 argument(s) Declaration: …")


def test_an_integer_target_that_fails_on_a_half_precision_model_says_to_export_it_in_fp32(capsys, out):
    """Quantizers calibrate fp32 programs: on a model in float16 the Arm int8 targets fail
    inside a pass (ExecuTorch 1.5.1: cortex_m::dequantize_per_tensor gets an fp16 output
    dtype it has no argument for). The row names the pass, what it raised, and the fix."""
    code, stdout, _ = cli(capsys, "export", "--model", "tiny_models:half", "--input-shape", "1,8", "--input-dtype", "float16",
                          "--weights", "none", "--backends", "cortex-m", "--bench-runs", "0", "--out", out)
    assert code == ExitStatus.TARGETS_FAILED, stdout
    [line] = [line for line in stdout.splitlines() if "cortex-m: LOWER_FAILED" in line]
    assert "the ReplaceQuantNodesPass pass failed: RuntimeError: cortex_m::dequantize_per_tensor()" in line, line
    assert "While executing %" not in line, "torch.fx's note on the node it ran is left out"
    assert line.endswith("— fix: the model computes in float16, and quantizers calibrate fp32 programs: export it "
                         "in fp32 for integer precisions (model.float(), --input-dtype float32)"), line


def test_a_half_precision_model_fed_float32_is_told_the_input_dtype_to_give(capsys, out):
    """torch.export's own words ("mat1 and mat2 must have the same dtype") do not say which
    flag fixes it: the row names the dtype of the model's weights."""
    code, stdout, _ = cli(capsys, "export", "--model", "tiny_models:half('bfloat16')", "--input-shape", "1,8",
                          "--weights", "none", "--backends", "portable", "--bench-runs", "0", "--out", out)
    assert code == ExitStatus.TARGETS_FAILED, stdout
    [line] = [line for line in stdout.splitlines() if "portable: CAPTURE_FAILED" in line]
    assert line.endswith("— fix: the model's weights are bfloat16 and its inputs float32: give --input-dtype bfloat16 "
                         "for each float input, or return model.float() from the factory"), line


def test_a_model_quantized_by_torch_ao_eager_mode_is_told_to_give_the_float_model(capsys, out):
    code, stdout, _ = cli(capsys, "export", "--model", "tiny_models:eager_quantized", "--input-shape", "1,3,8,8",
                          "--backends", "portable", "--bench-runs", "0", "--out", out)
    assert code == ExitStatus.TARGETS_FAILED, stdout
    [line] = [line for line in stdout.splitlines() if "portable: CAPTURE_FAILED" in line]
    assert "fix: the model is already quantized by torch.ao's eager mode, whose packed weights torch.export cannot " \
           "capture: give the float model, and a quantized target (e.g. xnnpack:int8)" in line, line


def test_a_backend_that_takes_no_part_of_a_bfloat16_model_says_to_export_it_in_fp32(capsys, out):
    """XNNPACK has no bfloat16: it takes none of such a model, and OpenVINO's frontend has
    no bfloat16 type ("KeyError: torch.bfloat16"); the portable kernels compute it."""
    code, stdout, _ = cli(capsys, "export", "--model", "tiny_models:half('bfloat16')", "--input-shape", "1,8",
                          "--input-dtype", "bfloat16", "--weights", "none", "--backends", "xnnpack", "portable",
                          "--bench-runs", "0", "--out", out)
    assert code == ExitStatus.TARGETS_FAILED, stdout
    assert "portable: tiny" in stdout or "• portable:" in stdout, stdout
    [line] = [line for line in stdout.splitlines() if "xnnpack: LOWER_FAILED" in line]
    assert "fix: the model computes in bfloat16, which xnnpack took no part of: export it in fp32 " \
           "(model.float(), --input-dtype float32), or try another backend" in line, line


def test_a_worker_that_did_not_capture_a_model_loads_its_custom_operators(tmp_path):
    """A capture file naming a torch.library operator loads only where the operator is
    registered: a worker that did not build the model imports the factory's module first
    (it said "We ran into an error when deserializing the saved file"), and the row then
    names the real obstacle, the operator's missing out variant, with the fix."""
    from pteforge.models.factory import factory_spec
    from pteforge.core.spec import ExportConfig, InputSpec
    from pteforge.stages.capture import capture

    spec = factory_spec("tiny_models:custom_op", (InputSpec((1, 8)),), name="custom_op")
    config = ExportConfig(out_dir=tmp_path / "out", weights="none", verify_inputs=1)
    job = tmp_path / "job.pkl"
    job.write_bytes(pickle.dumps((capture(spec, config, tmp_path / "work"), spec, config)))
    code = ("import pickle, sys; from pteforge.stages.pipeline import export_target; from pteforge.core.spec import Target, Precision; "
            f"cap, spec, config = pickle.loads(open({str(job)!r}, 'rb').read()); "
            "assert 'tiny_models' not in sys.modules; "
            "r = export_target(cap, spec, Target(('portable',), Precision.FP32), config); print(r.status.value, r.reason, '|', r.fix)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=TESTS, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "LOWER_FAILED RuntimeError: Missing out variants: {'pteforge_test::double'} | " in proc.stdout, proc.stdout
    assert "out variant and a kernel the runtime links" in proc.stdout


def _model_that_says_what_its_process_imported(tmp_path) -> tuple[str, Path]:
    """A factory (``--model``) whose process writes to ``seen`` whether it had imported ExecuTorch."""
    seen = tmp_path / "seen.json"
    (tmp_path / "m.py").write_text(
        "import json, sys\n\nimport torch\n\n\n"
        "def build():\n"
        f"    open({str(seen)!r}, 'w').write(json.dumps({{'executorch imported': 'executorch.exir' in sys.modules}}))\n"
        "    return torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())\n")
    return f"{tmp_path / 'm.py'}:build", seen


@pytest.mark.slow
@pytest.mark.parametrize("start, imported", [("fresh", False), ("fork", True)])
def test_the_capture_runs_in_a_worker_of_its_own_fresh_or_forked_from_the_fork_server(tmp_path, out, start, imported):
    """Captures need torch only: on a machine with a core to spare their workers start fresh
    beside the fork server (which imports torch and ExecuTorch, ~4 s); with every core busy
    they fork from it once it is done. Either way the capture is proven the same."""
    from pteforge.run.pools import CAPTURE_START_ENV

    model, seen = _model_that_says_what_its_process_imported(tmp_path)
    env = {**os.environ, "PYTHONPATH": f"{TESTS}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", CAPTURE_START_ENV: start}
    proc = run_cli("export", "--model", model, "--input-shape", "1,4", "--weights", "none",
                   "--backends", "portable", "--out", out, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(seen.read_text()) == {"executorch imported": imported}
    [row] = json.loads((out / "index.json").read_text())["models"]
    assert row["status"] == "VERIFIED", row


@pytest.mark.parametrize("busy, method", [(False, "spawn"), (True, "forkserver")])
def test_captures_start_fresh_only_where_a_core_is_idle(monkeypatch, tmp_path, busy, method):
    """By default (no PTEFORGE_CAPTURE_START) the machine's load decides: a fresh interpreter
    where a core is idle, a fork of the fork server where every core is busy."""
    from pteforge.core.spec import ExportConfig
    from pteforge.run import pools
    from pteforge.run.workers import start_method

    if start_method() != "forkserver":
        pytest.skip("workers are spawned on this host either way")
    monkeypatch.delenv(pools.CAPTURE_START_ENV, raising=False)
    monkeypatch.setattr(pools, "cores_busy", lambda: busy)
    monkeypatch.setattr(pools, "fork_server_ready", lambda: False)
    with pools.open_capture_pool(ExportConfig(out_dir=tmp_path), None, 1, lambda key, stage: None) as pool:
        assert pool.ctx.get_start_method() == method


def test_cores_are_busy_while_other_processes_use_them_not_after_nor_with_this_process_own_work(monkeypatch):
    """``cores_busy`` measures the other processes' use of the cores since the command
    started, not the 1-minute load average, which stays high for a minute after a run has
    ended: the next run then waited for the fork server before its capture."""
    from pteforge.core import system

    cores = os.cpu_count() or 1
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(cores)]
    try:
        time.sleep(0.5)
        monkeypatch.setattr(system, "_STARTED", system._cpu_times())
        assert system.cores_busy(), "every core spun by another process"
    finally:
        for p in spinners:
            p.kill()
            p.wait()
    # (seconds, busy ticks, all ticks, this process's CPU seconds): 100 ticks a second a core
    readings = iter([(0.0, 0, 0, 0.0), (1.0, 0.1 * 100 * cores, 100 * cores, 0.0),  # idle
                     (0.0, 0, 0, 0.0), (1.0, 100 * cores, 100 * cores, cores * 1.0)])  # all this process's own threads
    for _ in range(2):
        monkeypatch.setattr(system, "_STARTED", next(readings))
        monkeypatch.setattr(system, "_cpu_times", lambda: next(readings))
        assert not system.cores_busy()


def test_a_later_run_in_the_same_process_forks_its_capture_from_the_ready_fork_server(capsys, tmp_path):
    """Once a run has forked a worker, the fork server has done its imports: a later run in
    that process (the API called again, a notebook) forks its capture from it instead of
    starting an interpreter that imports torch again."""
    model, seen = _model_that_says_what_its_process_imported(tmp_path)
    for run in ("first", "later"):
        code, stdout, _ = cli(capsys, "export", "--model", model, "--input-shape", "1,4",
                              "--weights", "none", "--backends", "portable", "--no-cache", "--out", tmp_path / run)
        assert code == ExitStatus.OK, stdout
        [row] = json.loads((tmp_path / run / "index.json").read_text())["models"]
        assert row["status"] == "VERIFIED", row
    assert json.loads(seen.read_text()) == {"executorch imported": True}, "forked from the fork server"


def test_a_long_verification_says_how_far_it_is(monkeypatch):
    """A portable YOLO runs ~30 s an input, and verification runs nine: the progress line
    said "verifying…" for four minutes. Once running has taken ``verify.SLOW`` seconds, each
    further input is reported, and the terminal shows how far it is; a reporter of the
    API's without ``step`` hears of the stage only."""
    import io

    import torch
    from executorch.exir import to_edge
    from rich.console import Console

    from pteforge.run.engine import Progress
    from pteforge.ui.render import Reporter
    from pteforge.core.result import Stage
    from pteforge.stages import verify

    data = to_edge(torch.export.export(torch.nn.Linear(4, 2), (torch.ones(1, 4),))).to_executorch().buffer
    seen = []
    assert len(verify.run_program(data, [[torch.ones(1, 4)]] * 3, progress=lambda i, n: seen.append((i, n)))) == 3
    assert seen == [], "a quick program says nothing more"
    monkeypatch.setattr(verify, "SLOW", 0.0)
    verify.run_program(data, [[torch.ones(1, 4)]] * 3, progress=lambda i, n: seen.append((i, n)))
    assert seen == [(1, 3), (2, 3), (3, 3)]

    shown = io.StringIO()
    run = Progress(Reporter(Console(file=shown, width=200)))
    run.names["k"] = ("yolov8n", "portable")
    run.on_stage("k", Stage.VERIFY)
    run.on_stage("k", f"{Stage.VERIFY.value} input 4 of 9")
    assert run.stages["k"] is Stage.VERIFY, "a crash now is a crash while verifying"
    lines = shown.getvalue().splitlines()
    assert lines[-1].endswith("yolov8n › portable: verifying on this host against eager PyTorch (input 4 of 9)…"), lines

    class Plain:  # the Reporter protocol's three methods only
        def __init__(self):
            self.stages = []

        def stage(self, model, target, stage):
            self.stages.append(stage)

    run = Progress(Plain())
    run.names["k"] = ("yolov8n", "portable")
    run.on_stage("k", Stage.VERIFY)
    run.on_stage("k", f"{Stage.VERIFY.value} input 4 of 9")
    assert run.reporter.stages == [Stage.VERIFY]

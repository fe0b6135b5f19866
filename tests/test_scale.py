"""Many jobs: longest first, resuming an interrupted run, and the same run on Ray."""

import json
import os
import re
from pathlib import Path
import signal
import time

import pytest
from conftest import run_cli, written
from test_cli import TINY
from test_reliability import assert_manifest_matches_disk, popen_cli, wait_for_line

from pteforge.backends import default_registry
from pteforge.core.spec import Precision, Target

ray = pytest.importorskip("ray", reason="the Ray tests need pteforge[ray]")


def target(text: str) -> Target:
    """``vulkan+xnnpack`` or ``xnnpack:int8`` as a Target (the first backend's default precision)."""
    chain, _, precision = text.partition(":")
    backends = tuple(chain.split("+"))
    if precision:
        return Target(backends, Precision(precision), default_precision=False)
    return Target(backends, default_registry().get(backends[0]).default_precision)


def test_longest_jobs_start_first_measured_or_guessed():
    from pteforge.run.schedule import order

    targets = [target(t) for t in ("portable", "xnnpack", "tosa", "openvino", "xnnpack:int8")]
    jobs = [("m", t, "/nonexistent", t.name) for t in targets]
    guessed = [j[3] for j in order(jobs, known={})]
    assert guessed[0] == "tosa" and guessed[-1] == "portable", guessed
    assert guessed.index("xnnpack") < guessed.index("openvino") and guessed.index("xnnpack:int8") < guessed.index("xnnpack")
    measured = [j[3] for j in order(jobs, known={"m|portable": 90.0, "m|xnnpack": 0.5})]
    assert measured[0] == "portable" and measured[-1] == "xnnpack", "a measured duration beats the guess"


def test_a_job_is_remembered_with_everything_it_spent_and_nothing_of_the_models_capture(tmp_path, monkeypatch):
    """A simulated target's runs on its simulator are part of its job: Cortex-M's were left
    out (9 s remembered of a 15 s job), so it started after shorter jobs."""
    from pteforge.core.io import CACHE_ENV
    from pteforge.core.result import Artifact, Delegation, Record, Status
    from pteforge.run import schedule

    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    artifact = Artifact(path="m_cortex-m.pte", size=1, sha256="0", delegation=Delegation(1, 0, {}, {}, [], []))
    timings = {"model_build": 1.0, "model_capture": 2.0, "model_reference": 0.5, "load": 0.5, "quantize": 5.0,
               "lower": 4.0, "serialize": 0.5, "simulate": 4.0, "write": 0.25, "timing": 3.0}
    rows = [Record(model="m", family="f", task="classification", target=t, backends=[t.replace("-", "_")],
                   precision="int8", status=Status.SIMULATED, artifact=artifact, timings=timings)
            for t in ("cortex-m", "ethos-u85")]
    rows[1].same_program_as = "cortex-m"  # made by the other's lowering: no job of its own to remember
    schedule.remember(rows)
    assert schedule.measured() == {"m|cortex-m": 14.25}


@pytest.mark.slow
def test_an_interrupted_run_started_again_does_only_what_is_missing(tmp_path):
    out = tmp_path / "out"
    proc = popen_cli(*TINY, "--backends", "portable", "xnnpack", "openvino", "--jobs", "1", "--out", out)
    wait_for_line(proc.stderr, "✓ tiny openvino")  # the longest job, first; then Ctrl-C
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=120)
    first = {e["target"] for e in written(out / "index.json")}
    assert "openvino" in first and first != {"portable", "xnnpack", "openvino"}, first
    again = run_cli(*TINY, "--backends", "portable", "xnnpack", "openvino", "--jobs", "1", "--out", out)
    assert again.returncode == 0, again.stdout + again.stderr
    for target in first:
        assert f"tiny {target}: VERIFIED" in again.stderr
    done_again = [t for t in ("portable", "xnnpack", "openvino") if f"tiny › {t}: lowering" in again.stderr]
    assert set(done_again) == {"portable", "xnnpack", "openvino"} - first, "only the missing jobs ran"
    assert "(from the cache" in again.stdout
    assert_manifest_matches_disk(out)


def _without_run_facts(manifest: dict) -> list[dict]:
    """The entries without what differs between any two runs: times, dates, p50s."""
    drop = {"timings", "bench", "generated", "cache", "relative"}
    return sorted(({k: v for k, v in e.items() if k not in drop} for e in manifest["models"]), key=lambda e: e["name"])


@pytest.mark.slow
def test_ray_gives_the_same_manifest_as_the_local_pool(tmp_path, monkeypatch):
    runs = {}
    for executor in ("local", "ray"):
        out = tmp_path / executor
        monkeypatch.setenv("PTEFORGE_TEST_PROBE", str(tmp_path / f"probe-{executor}"))
        proc = run_cli(*TINY, "--backends", "xnnpack", "portable", "xnnpack:int8", "--no-cache", "--executor", executor,
                       "--out", out)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "tiny › xnnpack: lowering" in proc.stderr, "progress as tasks run"
        runs[executor] = json.loads((out / "index.json").read_text())
        probe = json.loads((tmp_path / f"probe-{executor}").read_text())
        assert len(probe["run_id"]) == 12, "a task sees pteforge's variables: the user's (the probe) and the run's (its id)"
        assert probe["niceness"] == os.nice(0), "a task runs at the run's priority (Ray's default, 15, starved it)"
    local, ray_ = (_without_run_facts(runs[k]) for k in ("local", "ray"))
    assert [e["hash"] for e in local] == [e["hash"] for e in ray_], "the same bytes"
    assert local == ray_


@pytest.mark.slow
def test_on_ray_a_crashing_task_fails_its_row_and_the_rest_lands(tmp_path):
    out = tmp_path / "out"
    proc = run_cli("--model", "tiny_models:segfaults", "--model", "tiny_models:tiny", "--input-shape", "1,3,16,16",
                   "--weights", "none", "--backends", "xnnpack", "--executor", "ray", "--out", out)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "the Ray worker process died" in proc.stdout and "CAPTURE_FAILED" in proc.stdout
    manifest = assert_manifest_matches_disk(out)
    assert {e["name"]: e["status"] for e in manifest["models"]} == {"tiny_xnnpack.pte": "VERIFIED"}


@pytest.mark.slow
def test_ctrl_c_cancels_the_ray_tasks(tmp_path):
    import psutil

    out = tmp_path / "out"
    proc = popen_cli(*TINY, "--backends", "openvino", "xnnpack", "portable", "--executor", "ray", "--out", out)
    wait_for_line(proc.stderr, "lowering")
    workers = [p for p in psutil.Process(proc.pid).children(recursive=True)]
    assert workers, "Ray's processes are the run's children"
    proc.send_signal(signal.SIGINT)
    stdout, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "interrupted" in err, f"stdout: {stdout[-2000:]}\nstderr: {err[-3000:]}"
    deadline = time.monotonic() + 60
    while any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in workers) and time.monotonic() < deadline:
        time.sleep(1)
    assert not [p for p in workers if p.is_running() and p.status() != psutil.STATUS_ZOMBIE], "no task keeps running"


@pytest.mark.slow
def test_on_ray_a_group_runs_in_one_worker_and_a_crash_in_it_fails_one_job(monkeypatch):
    """As on the local pool, a group's jobs run one after another in one worker (what the
    first kept is reused); each result comes as it finishes; a job that kills the worker
    fails alone, and the ones after it still run."""
    from conftest import TESTS

    import tiny_models

    from pteforge.run.ray_pool import RayPool
    from pteforge.run.workers import Call

    monkeypatch.setenv("PYTHONPATH", str(TESTS))  # tiny_models, for the cluster's workers

    def job(key, group=None, fn="pid_after", args=(0.2,)):
        return Call(key=key, fn=getattr(tiny_models, fn), args=args, group=group)

    jobs = [job("a1", "a"), job("b1", "b"), job("a2", "a"), job("a3", "a", args=(3.0,)), job("b2", "b", "dies", ()),
            job("b3", "b")]
    with RayPool(size=2, jobs=2) as pool:
        order = [(o.job.key, o) for o in pool.run(jobs)]
    got = dict(order)
    assert got["a1"].value == got["a2"].value == got["a3"].value, "a's jobs in one worker"
    assert [k for k, _ in order].index("a2") < [k for k, _ in order].index("a3") and "a2" != order[-1][0]
    assert got["b1"].ok and got["b3"].ok and "died" in got["b2"].crash, "b2's crash failed b2 alone"


def test_jobs_route_to_the_nodes_with_their_sdk_when_the_cluster_has_them():
    from pteforge.run.pools import ray_resources
    from pteforge.run.jobs import CaptureJob, TargetJob
    from pteforge.core.spec import ExportConfig

    def job(name):
        return TargetJob(key="m/t", capture=None, spec=None, target=target(name), config=ExportConfig(out_dir="."))

    ray.init(num_cpus=1, resources={"macos": 1}, include_dashboard=False, configure_logging=False)
    try:
        assert ray_resources(job("coreml")) == {"macos": 0.001}
        assert ray_resources(job("vulkan+xnnpack")) == {}
        assert ray_resources(CaptureJob(key="m/capture", spec=None, config=None, work_dir=".")) == {}
    finally:
        ray.shutdown()
    ray.init(num_cpus=1, include_dashboard=False, configure_logging=False)
    try:
        assert ray_resources(job("coreml")) == {}, "no macOS node: Core ML lowers anywhere it can"
    finally:
        ray.shutdown()


def _children_named(proc, text: str, wait_s: float = 120.0) -> list:
    """The run's processes whose command line holds ``text`` (Ray's actors are titled
    ``ray::<class>``), once there is one."""
    import psutil

    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        found = []
        for p in psutil.Process(proc.pid).children(recursive=True):
            try:
                if text in " ".join(p.cmdline()):
                    found.append(p)
            except psutil.Error:
                continue
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"no process '{text}' in the run")


@pytest.mark.slow
def test_losing_ray_processes_keeps_what_finished_and_says_how_to_resume(tmp_path):
    """The progress actor killed: the run goes on without it. Then the node's raylet killed,
    as an out-of-memory kill would: every finished row stays in the manifest, each
    unfinished one fails with what the cluster lost, exit 1, and the last line says that
    the same command resumes. No internal error, no traceback."""
    out = tmp_path / "out"
    proc = popen_cli("--model", "tiny_models:tiny", "--model", "tiny_models:weighty", "--input-shape", "1,3,16,16",
                     "--weights", "none", "--backends", "xnnpack", "xnnpack:int8", "portable", "openvino",
                     "--executor", "ray", "--out", out)
    for board in _children_named(proc, "ray::_Board"):
        board.kill()
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and not (out / "index.json").exists():
        time.sleep(0.2)
    for raylet in _children_named(proc, "raylet/raylet"):
        raylet.kill()
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 1, stdout[-2000:] + stderr[-2000:]
    assert "internal error" not in stderr and "Traceback" not in stdout + stderr
    kept = json.loads((out / "index.json").read_text())["models"]
    assert kept and all(e["status"] == "VERIFIED" for e in kept), "what finished before the loss is kept"
    lost = [line for line in stdout.splitlines() if re.search(r"• \S+: [A-Z_]+: the Ray cluster lost", line)]
    assert lost and len(kept) + len(lost) == 8, stdout
    assert "run the same command again" in lost[0]
    last = stdout.strip().splitlines()[-1]
    assert last.startswith("The Ray cluster lost") and "run the same command again" in last, last
    # what Ray reported ("(raylet) A worker died ...") went to the run's log, not the terminal
    assert "(raylet)" not in stdout + stderr
    [log] = [line.split(": ", 1)[1] for line in stdout.splitlines() if line.startswith("What libraries printed")]
    assert Path(log).stat().st_size > 0

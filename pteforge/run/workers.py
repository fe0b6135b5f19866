"""Long-lived worker processes that may die: a crash or a hang is one job's failure.

Lowering and running ExecuTorch programs is native code: a segfault, an abort, a
hang or running out of memory must end one (model, target) row, not the run. Each
worker imports torch and ExecuTorch once and serves many jobs; a worker that dies or
overruns its job's deadline is killed and replaced, and its job fails with the
signal or the timeout. Workers ignore Ctrl-C (the parent ends them) and die with
the parent (PR_SET_PDEATHSIG), so a killed run leaves no orphan writing files.

A worker's whole process tree goes with it: each leads a session of its own
(``isolate.new_group``), so whatever a model starts (a subprocess, a multiprocessing pool,
its resource tracker) is in the worker's process group, and a worker ended at --timeout,
at Ctrl-C, after a crash, when its pipe broke, or at the pool's close has its group ended
(``isolate.end_group``: SIGTERM, SIGKILL after a grace). The same on macOS; on Windows
only the worker is ended (see ``runtime/isolate.py``). What a model's processes do not
survive: the parent's own SIGKILL, which runs none of this (the worker dies by
PR_SET_PDEATHSIG, its children are left to init).
"""

from __future__ import annotations

import atexit
import importlib
import multiprocessing as mp
import os
import signal
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import AbstractSet, Any

from ..core.quiet import quiet_libraries
from ..core.system import collect_job_garbage, fewer_collections, start_method
from ..runtime.isolate import describe_exit, end_group, new_group, signal_group

# How long a worker that finished a job waits for the pool's next word before it collects
# the job's garbage: told to leave (the run's last job, a capture), it leaves without
# collecting; given a job, it collects first; idle, it collects then.
NEXT_WORD_WITHIN = 0.5


@dataclass(kw_only=True)
class Job:
    """One piece of work for a worker: a typed callable. Its inputs are its fields (plain
    data that pickles: specs, file paths, options); calling it with ``on_stage`` (which
    reports the stage it is in) does the work in the worker and returns plain data. The
    export's jobs are in :mod:`pteforge.run.jobs`; :class:`Call` makes one of a function."""

    key: str
    timeout: float = 1200.0
    # Jobs of one group run on one worker, one after another: the later ones reuse what
    # the first kept in that worker's memory (stages/memo.py).
    group: str | None = None

    def __call__(self, on_stage: Callable[[str], None]) -> Any:
        raise NotImplementedError


@dataclass(kw_only=True)
class Call(Job):
    """A module-level function as a job: ``fn(*args, on_stage=on_stage)``."""

    fn: Callable[..., Any]
    args: tuple[Any, ...] = ()

    def __call__(self, on_stage: Callable[[str], None]) -> Any:
        return self.fn(*self.args, on_stage=on_stage)


CLUSTER_LOST = "the Ray cluster lost"  # how an Outcome's crash begins when the cluster, not the job, failed
RESUME = "run the same command again: the finished rows are kept (manifest and cache), and only the rest runs"


@dataclass
class Outcome:
    job: Job
    value: Any = None
    error: BaseException | None = None  # raised by the job (re-raised domain errors keep their type)
    crash: str | None = None  # the worker died or was killed: "killed by SIGSEGV", "timed out after 30 s"
    timed_out: bool = False  # the crash was --timeout's
    traceback: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.crash is None


def _die_with_parent() -> None:
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _worker_main(conn: Connection, quiet: bool, env: dict[str, str], spawned: bool = False) -> None:
    if new_group():  # first, before any job: its own process group, ended whole with it
        conn.send(("group", os.getpid()))
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent()
    # Forked from the fork server: take the parent's environment as it is now, plus
    # what the preloaded libraries set for themselves when the fork server imported them.
    for key in [k for k in os.environ if k not in env and k not in PRELOAD_ENV]:
        del os.environ[key]
    os.environ.update(env)
    if quiet:
        silence()
    fewer_collections()  # forked: the fork server's imports are frozen; spawned (a capture): its thresholds
    _thread_lock_for_progress_bars()
    garbage = False  # a job ran since the last collection
    while True:
        if garbage and not conn.poll(NEXT_WORD_WITHIN):
            collect_job_garbage()  # idle: what the job left is freed now, not when the next comes
            garbage = False
        try:
            job = conn.recv()
        except EOFError:
            return _leave(spawned)
        if job is None:
            return _leave(spawned)  # the last job's garbage goes with the process
        if garbage:
            collect_job_garbage()  # the last job's cycles (graphs holding weights) freed before this one
            garbage = False
        job, threads = job
        set_threads(threads)

        def stage(stage_name: str, key: str = job.key) -> None:
            conn.send(("stage", key, stage_name))

        try:
            value = job(on_stage=stage)
            conn.send(("ok", job.key, value))
        except BaseException as exc:  # noqa: BLE001 - everything goes back to the parent
            tb = traceback.format_exc()
            try:
                conn.send(("error", job.key, exc, tb))
            except Exception:  # an unpicklable exception: send its text
                conn.send(("error", job.key, RuntimeError(f"{type(exc).__name__}: {exc}"), tb))
        value = None
        garbage = True


def _leave(spawned: bool) -> None:
    """End this worker without taking its interpreter apart. A spawned worker (a fresh
    interpreter: the captures') runs its exit handlers (temporary folders, multiprocessing's
    and libraries' clean-up) and flushes its output, as a normal exit would, and then exits
    at once: after capturing a language model it holds millions of objects, and the first
    target starts only once the captures' pool has closed. Freeing 3 million small objects
    one by one took 5.3 s (the pool's 5 s wait, then killed) against 0.2 s. A thread a job
    left running no longer holds it either. One forked from the fork server returns, and
    multiprocessing ends it at once as it always has (``os._exit``, its exit handlers those
    of the fork server, not run)."""
    if not spawned:
        return

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(0)


def _thread_lock_for_progress_bars() -> None:
    """tqdm's lock, a thread lock in this worker. By default tqdm makes a multiprocessing
    lock (a named semaphore) in each process that constructs a bar, and torch.fx's
    interpreter constructs one (disabled) for every graph it runs: a worker killed mid-job
    (Ctrl-C, --timeout) left it to multiprocessing's resource tracker, which warned about
    "leaked semaphore objects" on the terminal after the run's one-line message. A worker
    draws no bars beside another process's."""
    try:
        from tqdm import tqdm
    except ImportError:
        return
    tqdm.set_lock(threading.RLock())


def silence() -> None:
    """No library chatter on the terminal from this process: warnings ignored, logging above
    INFO only, and its stdout and stderr to the run's log file (``PTEFORGE_RUN_LOG``; /dev/null
    outside a run). Native libraries and SDK tools (cpuinfo, coremltools' progress bars,
    Vela's reports) write straight to file descriptors 1 and 2, so they land there too; a
    worker's results and errors come back through its pipe, and --debug shows everything."""
    quiet_libraries()
    sink = _open_run_log()
    os.dup2(sink, 1)
    os.dup2(sink, 2)
    os.close(sink)


RUN_LOG_ENV = "PTEFORGE_RUN_LOG"  # the run's log file: what libraries print in its processes


def _open_run_log() -> int:
    """The run's log (``PTEFORGE_RUN_LOG``, appended to), or /dev/null outside a run."""
    path = os.environ.get(RUN_LOG_ENV)
    if path:
        try:
            return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        except OSError:
            pass
    return os.open(os.devnull, os.O_WRONLY)


def set_threads(threads: int) -> None:
    """Torch's intra-op threads for the next job: this worker's share of the cores.

    Two workers with a thread per core each would both spin on both cores: on 2 cores
    that made calibration 2-5x slower (PT2E quantize of mobilenet_v3_small 11-12 s
    against 2.4 s), and the whole default run's job time 142 s against 100 s.
    """
    torch = sys.modules.get("torch")  # preloaded by the fork server; never imported just for this
    if torch is not None and torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


class _Worker:
    def __init__(self, ctx: Any, quiet: bool) -> None:
        parent, child = ctx.Pipe()
        self.conn = parent
        self.proc = ctx.Process(target=_worker_main, daemon=True,
                                args=(child, quiet, {k: v for k, v in os.environ.items() if k not in _FORK_SERVER_ONLY},
                                      ctx.get_start_method() == "spawn"))
        self.proc.start()  # with the fork server: returns once it has forked, its imports done
        child.close()
        if ctx.get_start_method() == "forkserver":
            global _forked
            _forked = True
        self.job: Job | None = None
        self.deadline = 0.0
        # its process group, once it has said it leads one (its first message): never guessed
        # from its pid, which may be another's by the time it is ended
        self.group: int | None = None

    def terminate(self) -> None:
        """SIGTERM to its process group (or to it alone, not knowing its group): ``kill``
        follows. Several workers ended together get their grace side by side."""
        if self.group is not None:
            signal_group(self.group, signal.SIGTERM)
        elif self.proc.is_alive():
            self.proc.terminate()

    def kill(self) -> None:
        """End it and everything it started (its process group), then close its pipe."""
        if self.group is not None:
            end_group(self.group, reap=self.proc.is_alive)
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(timeout=10)
        self.conn.close()


class WorkerPool:
    """Run jobs on ``size`` worker processes; yield each job's Outcome as it finishes.

    Workers fork from the fork server, with torch and ExecuTorch imported; ``fresh``
    workers are new interpreters (spawn) that import only what their jobs do, and start
    without waiting for the fork server's imports.
    """

    def __init__(self, size: int = 1, quiet: bool = True, on_stage: Callable[[str, str], None] | None = None,
                 fresh: bool = False) -> None:
        self.size = max(1, size)
        self.quiet = quiet
        self.on_stage = on_stage or (lambda key, stage: None)
        self.ctx = mp.get_context("spawn") if fresh else _context(quiet)
        self.idle: list[_Worker] = []
        self.busy: list[_Worker] = []
        self.owners: dict[str, _Worker] = {}  # group -> the worker that ran its first job

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for w in self.idle:
            try:
                w.conn.send(None)
            except OSError:
                pass
        for w in self.idle:
            w.proc.join(timeout=5)
            w.kill()  # what its models left running, too
        for w in self.busy:
            w.terminate()
        for w in self.busy:
            w.kill()
        self.idle, self.busy = [], []

    def _next(self, pending: deque) -> tuple[Job, _Worker]:
        """The next job to start, in order, and its worker.

        A job of a group goes to the worker that ran the group's first job; while that
        worker is busy, the next job that does not wait for it starts instead. When every
        job left waits for a busy worker, a free one takes the first, so no core idles.
        """
        waiting = {id(self.owners[j.group]) for j in pending if j.group in self.owners}
        for i, job in enumerate(pending):
            owner = self.owners.get(job.group) if job.group else None
            if owner is not None and owner in self.busy:
                continue
            del pending[i]
            if owner is not None and owner in self.idle:
                self.idle.remove(owner)
                return job, owner
            w = self._worker(avoid=waiting)
            if job.group:
                self.owners[job.group] = w  # the first of its group, or its owner died
            return job, w
        return pending.popleft(), self._worker(avoid=waiting)

    def _worker(self, avoid: AbstractSet[int] = frozenset()) -> _Worker:
        """An idle worker, preferring one no waiting group needs, or a new one."""
        free = [w for w in self.idle if id(w) not in avoid]
        if free:
            self.idle.remove(free[0])
            return free[0]
        if self.idle and len(self.idle) + len(self.busy) >= self.size:
            return self.idle.pop()
        return _Worker(self.ctx, self.quiet)

    def run(self, jobs: Iterable[Job]) -> Iterator[Outcome]:
        pending = deque(jobs)
        while pending or self.busy:
            while pending and len(self.busy) < self.size:
                # the cores shared by the jobs that will run side by side
                threads = max(1, (os.cpu_count() or 1) // min(self.size, len(self.busy) + len(pending)))
                job, w = self._next(pending)
                w.job, w.deadline = job, time.monotonic() + job.timeout
                try:
                    w.conn.send((job, threads))
                except (OSError, BrokenPipeError):
                    w.kill()
                    pending.appendleft(job)
                    continue
                self.busy.append(w)
            now = time.monotonic()
            timeout = max(0.0, min(w.deadline for w in self.busy) - now) if self.busy else None
            ready = wait([w.conn for w in self.busy] + [w.proc.sentinel for w in self.busy], timeout=timeout)
            for w in list(self.busy):
                outcome = self._poll(w, ready)
                if outcome is not None:
                    yield outcome

    def _poll(self, w: _Worker, ready: list[Any]) -> Outcome | None:
        job = w.job
        assert job is not None
        if w.conn in ready:
            try:
                while w.conn.poll():
                    msg = w.conn.recv()
                    if msg[0] == "group":
                        w.group = msg[1]
                        continue
                    if msg[0] == "stage":
                        self.on_stage(msg[1], msg[2])
                        continue
                    self.busy.remove(w)
                    w.job = None
                    self.idle.append(w)
                    if msg[0] == "ok":
                        return Outcome(job, value=msg[2])
                    return Outcome(job, error=msg[2], traceback=msg[3])
            except (EOFError, OSError):
                pass  # the worker died mid-message: handled below
        if not w.proc.is_alive() or w.proc.sentinel in ready:
            w.proc.join(timeout=5)
            code = w.proc.exitcode
            self.busy.remove(w)
            w.kill()
            return Outcome(job, crash=f"the worker process {describe_exit(code)}")
        if time.monotonic() >= w.deadline:
            self.busy.remove(w)
            w.kill()
            return Outcome(job, crash=f"timed out after {job.timeout:.0f} s (--timeout)", timed_out=True)
        return None


# Imported once by the fork server; every worker forks from it with them loaded
# (``import executorch.runtime`` alone costs ~10 s; ``executorch.devtools.backend_debug``,
# read for every lowering's delegation, imports ExecuTorch's inspector and pandas: ~0.4 s
# in each worker otherwise).
# Set by ExecuTorch's pybindings at import so its OpenVINO backend finds libopenvino_c.
PRELOAD_ENV = ("OPENVINO_LIB_PATH",)
PRELOAD = ["torch", "executorch.exir", "executorch.runtime", "executorch.devtools.backend_debug", "pteforge.stages.pipeline",
           "pteforge.stages.capture"]


def preload() -> None:
    """What the fork server imports, imported in this process (a Ray worker's first task)."""
    for module in PRELOAD:
        importlib.import_module(module)


NVML_CHECK = "PYTORCH_NVML_BASED_CUDA_CHECK"
# the modules the fork server imports last (``fork_server_also``). Named here, not there:
# importing that module imports them, which the command's own process must never do (an
# inherited list made it import Arm's backend, ExecuTorch's compiler and torchao: seconds of
# a core, and torch's log line on the terminal)
ALSO = "PTEFORGE_FORK_SERVER_IMPORTS"
_FORK_SERVER_ONLY: set[str] = set()  # variables set here for the fork server, left out of the workers' environment


def _context(quiet: bool = True, also: tuple[str, ...] = ()) -> mp.context.BaseContext:
    """The fork server's context. ``quiet``: its first import silences it (``silence``), as
    the workers are: ``import executorch.exir`` logs a torch warning to the terminal. The
    process's first pool or ``start_fork_server`` starts it; later ones share it. ``also``:
    modules it imports after ``PRELOAD`` when this call starts it (``fork_server_also``)."""
    if start_method() != "forkserver":
        return mp.get_context("spawn")
    # torchao, which ``executorch.exir`` imports, asks torch.cuda.is_available() at import: by
    # default that initialises CUDA in the fork server, and every worker forked from it then
    # fails "Cannot re-initialize CUDA in forked subprocess" (CUDA lowering compiles on the
    # GPU). Asked through NVML instead, CUDA stays uninitialised until a worker uses it.
    # Only the fork server asks that way: NVML's answer is not kept, and every fake-tensor
    # operation asks (45 us a time, loading the NVML library: 1.1 s of a run's ~27 s of
    # mobilenet_v3_small jobs); a worker asks CUDA, which keeps its answer (1 us).
    if NVML_CHECK not in os.environ:
        os.environ[NVML_CHECK] = "1"
        _FORK_SERVER_ONLY.add(NVML_CHECK)
    # read by the fork server's last import, if this call starts it; a list inherited from the
    # process that started this one (a run of its own) is not this call's
    if also:
        os.environ[ALSO] = ",".join(also)
    else:
        os.environ.pop(ALSO, None)
    _FORK_SERVER_ONLY.add(ALSO)
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["pteforge.run.fork_server_first"] + (["pteforge.run.silent"] if quiet else []) + PRELOAD
                               + ["pteforge.run.fork_server_also"])
    return ctx


_forked = False  # a worker has forked from this process's fork server


def fork_server_ready() -> bool:
    """Whether this process's fork server has forked a worker already, so has done its
    imports: a later run in the same process (the API called again, a notebook, a test
    session) forks in milliseconds what a fresh interpreter would start in ~6 s."""
    return _forked


def start_fork_server(quiet: bool = True, also: tuple[str, ...] = ()) -> None:
    """Start the fork server now and return at once: its imports (~4 s of torch and
    ExecuTorch) then overlap what the caller does before its first job. ``also``: modules
    the run's jobs will import (``Backend.fork_server_imports``), imported after those
    when this call starts it (a server already running keeps what it has)."""
    from multiprocessing import forkserver

    if start_method() != "forkserver":
        return  # spawned workers start without one
    _context(quiet, also)
    forkserver.ensure_running()


def ask_host_early(quiet: bool = True) -> None:
    """On a machine's first run (no answer kept yet), ask this host's runtime which delegates
    and kernels it registers in a worker forked from the fork server, and keep the answer.

    Asked in the command's own process, the question imports torch and ExecuTorch there
    (~4 s) before any work, and the fork server then imports them again; asked here, those
    imports are the fork server's, which the run's workers and captures then fork from. Where
    workers are spawned (macOS, Windows) or the worker fails, the run asks as before."""
    from ..runtime.host import Host, known_host, remember_host

    if known_host() is not None or start_method() != "forkserver":
        return
    try:
        start_fork_server(quiet)
        with WorkerPool(1, quiet=quiet) as pool:
            for outcome in pool.run([Call(key="*/host", fn=_host_answer, timeout=600)]):
                if outcome.ok:
                    remember_host(Host.from_dict(outcome.value))
    except Exception:  # noqa: BLE001 - only time is at stake: the run asks in its own process, and says what fails
        return


def _host_answer(on_stage: Callable[[str], None]) -> dict:
    from ..runtime.host import Host

    return Host.here().to_dict()


def default_size(jobs: int) -> int:
    return max(1, min(jobs, os.cpu_count() or 1))

"""``--executor ray``: every capture and every (model, target) job as a Ray task.

``RayPool`` has the local ``WorkerPool``'s interface (``run(jobs)`` yields each job's
``Outcome`` as it finishes), so the export is the same code on one machine or many:

- isolation: a task whose process dies (segfault, abort, out of memory) fails its row with
  the cause; a task past its deadline is cancelled and fails its row as a timeout. Ray's own
  retries are off (they would rerun a crashing lowering); only infrastructure failures (the
  node died, the object was lost, the cluster could not place the task) are retried, up to
  ``INFRA_RETRIES`` times;
- routing: a job asks for the Ray resources its backends declare (``Backend.ray_resources``,
  e.g. Core ML asks for ``macos``), so it runs on a node that has the SDK;
- groups: the jobs of a group (``Job.group``, the Arm int8 targets of a model) run as one
  streaming task, one after another in one worker, which yields each result as it finishes:
  the later ones reuse what the first kept in that worker (stages/memo.py), as they do on
  the local pool. When the group's worker dies, the job whose result was next and the
  ones after it run again as tasks of their own, where a crash fails that job alone (the
  death may have been a later job's); a timeout fails the job that was running and runs
  the ones after it as tasks of their own;
- Ctrl-C cancels every task still running, then stops the run;
- progress: the reporter hears of each job as it starts and finishes.

Without an address a local cluster is started (and stopped at the end). Paths: jobs read
and write the export's work and output directories, so on a cluster of several machines
these must be on a filesystem every node mounts (``PTEFORGE_WORK_DIR`` and ``--out``).
"""

from __future__ import annotations

import os
import pickle
import signal
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from ..core.errors import UsageError
from ..core.system import fewer_collections
from ..runtime.isolate import descendants_ended, signal_group
from .workers import CLUSTER_LOST, Job, Outcome

INFRA_RETRIES = 3


def _run_job(job: Job, board: Any) -> Any:
    """The body of a Ray task: call the job, as a worker does; its stages go to ``board``
    (progress, and the stage a crash happened in)."""
    import ray
    import torch  # noqa: F401 - every job is torch work: its threads are set before it starts

    from .workers import set_threads

    # the CPUs Ray gave this task, as a local worker gets its share of the cores
    # (torch would spin a thread per core in every task on the node)
    set_threads(max(1, int(ray.get_runtime_context().get_assigned_resources().get("CPU", 1))))
    def on_stage(stage: str) -> None:
        if board is not None:
            board.set.remote(job.key, stage)

    if board is not None and hasattr(os, "getpgid") and os.getpgid(0) == os.getpid():
        board.started.remote(job.key, os.getpid())  # the worker's own process group (Ray's per-worker groups)
    # what the model starts ends with the job (the worker lives on to serve the next task);
    # a worker Ray kills takes its children with it (runtime/isolate.py)
    try:
        with descendants_ended():
            return job(on_stage=on_stage)
    finally:
        if board is not None:
            board.finished.remote(job.key)  # this worker may serve another task next: not this job's to end


def _run_chain(jobs: list[Job], board: Any) -> Iterator[tuple[str, str, Any, str | None]]:
    """The body of a group's streaming Ray task: its jobs one after another in one worker,
    yielding (key, "ok", value, None) or (key, "error", exception, traceback) for each as
    it finishes, so the driver has each result as soon as it is there."""
    for job in jobs:
        try:
            yield job.key, "ok", _run_job(job, board), None
        except Exception as exc:  # noqa: BLE001 - the job's failure, not the task's
            tb = traceback.format_exc()
            try:
                pickle.dumps(exc)
            except Exception:  # an unpicklable exception: its text
                exc = RuntimeError(f"{type(exc).__name__}: {exc}")
            yield job.key, "error", exc, tb


def _errors_to_run_log(ray: Any) -> Callable[[], None]:
    """What the cluster reports to the driver ("(raylet) A worker died ...") goes to the run's
    log, as the workers' own output does, not to the terminal (--debug shows it there)."""
    from .workers import RUN_LOG_ENV

    try:
        worker = ray._private.worker
        original = worker.print_to_stdstream
    except AttributeError:
        return lambda: None

    def to_log(data: dict, ignore_prefix: bool = False, *args: Any, **kwargs: Any) -> None:
        path = os.environ.get(RUN_LOG_ENV)
        if path:
            try:
                with open(path, "a") as f:
                    f.writelines(f"({data.get('pid', 'ray')}) {line}\n" for line in data.get("lines", []))
            except OSError:
                pass

    worker.print_to_stdstream = to_log

    def restore() -> None:
        worker.print_to_stdstream = original

    return restore


@dataclass
class _Unit:
    """What one Ray task runs: a job, or a group's jobs still to come (the first is running)."""

    jobs: list[Job]
    deadline: float  # of the first
    tries: int = 0


def _units(jobs: Iterable[Job]) -> list[list[Job]]:
    """Each job alone, except a group's jobs together (at its first job's place)."""
    units: list[list[Job]] = []
    groups: dict[str, list[Job]] = {}
    for job in jobs:
        if job.group in groups:
            groups[job.group].append(job)
            continue
        units.append([job])
        if job.group:
            groups[job.group] = units[-1]
    return units


def _preload() -> None:
    """A task importing what every job needs, into the worker that runs it."""
    from .workers import preload

    fewer_collections(freeze=False)
    preload()
    fewer_collections()  # what it imported: frozen


class _Board:
    """A Ray actor: the stage each job last reported, and the stages reported since the
    driver last read them (every one, in order: a quick stage between two reads was lost,
    and the run's progress skipped "lowering" under load)."""

    def __init__(self) -> None:
        self.stages: dict[str, str] = {}
        self.new: dict[str, list[str]] = {}
        self.groups: dict[str, int] = {}  # job -> the process group of the worker running it

    def started(self, key: str, group: int) -> None:
        self.groups[key] = group

    def finished(self, key: str) -> None:
        self.groups.pop(key, None)

    def groups_of(self, keys: list[str]) -> list[int]:
        return [self.groups[key] for key in keys if key in self.groups]

    def set(self, key: str, stage: str) -> None:
        self.stages[key] = stage
        self.new.setdefault(key, []).append(stage)

    def changes(self) -> dict[str, list[str]]:
        new, self.new = self.new, {}
        return new


class RayPool:
    """Run jobs as Ray tasks on the cluster at ``address`` (None: a local one); ``jobs``:
    how many the run has, for starting its workers ahead."""

    def __init__(self, address: str | None = None, size: int | None = None, quiet: bool = True,
                 on_stage: Callable[[str, str], None] | None = None, resources: Callable[[Job], dict] | None = None,
                 jobs: int = 1) -> None:
        # Workers use this interpreter and its environment as it is; Ray's `uv run`
        # integration would rebuild one per worker from the current directory's project.
        os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
        try:
            import ray
        except ImportError:
            raise UsageError("--executor ray needs Ray, which is not installed",
                             fix="install pteforge[ray] (pip install 'pteforge[ray]' or uv sync --extra ray)") from None
        self.ray = ray
        self.on_stage = on_stage or (lambda key, stage: None)
        self.resources = resources or (lambda job: {})
        self.started_here = not ray.is_initialized()
        # a cluster of this machine that this run started and stops: its workers are processes here
        self.local = self.started_here and address is None and not os.environ.get("RAY_ADDRESS")
        if self.started_here:
            from .workers import PRELOAD_ENV

            # A cluster's workers get pteforge's variables (the run id, the cache, ...) as a
            # runtime env; a local cluster's inherit this process's environment, and leaving
            # its runtime env empty lets the first tasks take the workers Ray starts with it
            # (a runtime env makes Ray start others: ~0.5 s before each first task). A local
            # cluster's workers run at this process's priority, as the local pool's do: Ray
            # starts them at niceness 15, where any other busy process on the machine starved
            # them (a run beside a second CPU-bound process took 4.7x as long, against ~2x).
            # Ray adds worker_niceness to the niceness its workers inherit from this process
            # (through the raylet): 0 keeps this process's (a run under `nice -n 2` gave its
            # tasks 4 with os.nice(0) there).
            env = {k: v for k, v in os.environ.items() if k.startswith(("PTEFORGE", "YOLO_")) or k in PRELOAD_ENV}
            try:
                ray.init(address=address, num_cpus=size if address is None else None, log_to_driver=not quiet,
                         include_dashboard=False, configure_logging=not quiet, logging_level="ERROR",
                         runtime_env={"env_vars": env} if env and address else None,
                         _system_config={"worker_niceness": 0} if self.local and hasattr(os, "nice")
                         else None)  # Windows has no niceness
            except (ConnectionError, ValueError, RuntimeError) as exc:
                where = f"reach the Ray cluster at {address}" if address else "start a local Ray cluster"
                raise UsageError(f"cannot {where}: {str(exc).splitlines()[0][:160]}",
                                 fix="give --ray-address HOST:PORT of a running cluster (ray start --head), or omit it for a local one") from None
        self.restore_printer = _errors_to_run_log(ray) if quiet else (lambda: None)
        self.task = ray.remote(max_retries=0, num_cpus=1)(_run_job)
        self.chain = ray.remote(max_retries=0, num_cpus=1)(_run_chain)
        self.board: Any = ray.remote(num_cpus=0)(_Board).remote()  # an actor handle (None once lost)
        cpus = int(ray.cluster_resources().get("CPU", 1))
        self.to_warm = max(0, min(jobs, size or cpus, cpus))  # workers to start with the first jobs
        self.warming: list = []

    def __enter__(self) -> RayPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self.started_here and self.ray.is_initialized():
            self.ray.shutdown()
        self.restore_printer()

    def _submit(self, jobs: list[Job], tries: int = 0) -> tuple:
        """One task for a job, or a streaming task for a group's jobs one after another (they
        reuse what the first kept in its worker, as on the local pool): (ref, _Unit)."""
        resources = {k: v for job in jobs for k, v in self.resources(job).items()} or None
        if len(jobs) == 1:
            ref = self.task.options(resources=resources).remote(jobs[0], self.board)
        else:
            ref = self.chain.options(resources=resources).remote(jobs, self.board)
        return ref, _Unit(jobs, time.monotonic() + jobs[0].timeout, tries)

    def _progress(self) -> None:
        """The stages the tasks reported. The board is no single point of failure: once its
        actor is gone (its node lost), the run goes on without stage progress."""
        if self.board is None:
            return
        try:
            changes = self.ray.get(self.board.changes.remote(), timeout=10)
        except Exception:  # noqa: BLE001 - ActorDiedError, a lost node, a timeout: progress only
            self.board = None
            return
        for key, stages in changes.items():
            for stage in stages:
                self.on_stage(key, stage)

    def run(self, jobs: Iterable[Job]) -> Iterator[Outcome]:
        ray = self.ray
        running: dict = {}  # ObjectRef or ObjectRefGenerator -> _Unit
        for unit in _units(jobs):
            ref, state = self._submit(unit)
            running[ref] = state
        self._warm(len(running))
        try:
            yield from self._drain(running)
        except ray.exceptions.RayError as exc:  # the driver lost its cluster (its node, its raylet, the GCS)
            yield from self._cluster_lost(running, exc)
        except BaseException:  # Ctrl-C, or the consumer stopped: nothing keeps running
            # A local cluster goes with its workers at close(). Cancelling there raced a task
            # finishing at that moment: Ray 2.60 aborts the driver ("Tried to complete task
            # that was not pending", exit 1 instead of 130; seen in CI).
            if not self.started_here:
                for ref in running:
                    ray.cancel(ref, force=True)
            self._end_worker_groups([unit.jobs[0] for unit in running.values()])
            raise

    def _drain(self, running: dict) -> Iterator[Outcome]:
        """Each unit's outcome as it finishes; a unit leaves ``running`` only once it has one,
        so a cluster lost meanwhile fails every unit still in it (``_cluster_lost``)."""
        ray = self.ray
        while running:
            soonest = min(u.deadline for u in running.values())
            done, _ = ray.wait(list(running), num_returns=1, timeout=min(1.0, max(0.0, soonest - time.monotonic())))
            self._progress()
            if not done:
                yield from self._expired(running)
                continue
            ref = done[0]
            unit = running[ref]
            if isinstance(ref, ray.ObjectRefGenerator):  # a group's task
                del running[ref]
                yield from self._chain_step(ref, unit, running)
                continue
            outcome = self._outcome(unit.jobs[0], lambda: ray.get(ref))
            del running[ref]
            if outcome is None and unit.tries < INFRA_RETRIES:  # infrastructure: run it again
                again, state = self._submit(unit.jobs, unit.tries + 1)
                running[again] = state
                continue
            yield outcome or self._lost(unit)

    def _warm(self, busy: int) -> None:
        """Ray starts workers on demand and keeps them for the next task: with the run's first
        tasks (the captures, which take a worker each at once), a task per CPU left starts
        the workers the target jobs will need, each importing torch and ExecuTorch (as the
        local fork server does) while the captures run."""
        if self.to_warm:
            preload = self.ray.remote(num_cpus=1)(_preload)
            self.warming = [preload.remote() for _ in range(self.to_warm - min(busy, self.to_warm))]
            self.to_warm = 0

    def _chain_step(self, gen: Any, unit: _Unit, running: dict) -> Iterator[Outcome]:
        """The next result of a group's task. When its worker died, this job and the ones after
        it run again, each as a task of its own, where a crash is that job's alone: the
        death may be a later job's, with this one's result lost on its way (Ray reports a
        streamed item asynchronously; seen once in CI). An infrastructure failure retries
        the group."""
        job = unit.jobs[0]
        try:
            outcome = self._outcome(job, lambda: self.ray.get(next(gen)))
        except StopIteration:
            return
        if outcome is None:
            if unit.tries < INFRA_RETRIES:
                again, state = self._submit(unit.jobs, unit.tries + 1)
                running[again] = state
            else:
                yield self._lost(unit)
            return
        if outcome.ok:  # what the job itself gave: a value, or the error it raised
            _, kind, value, tb = outcome.value
            outcome = Outcome(job, value=value) if kind == "ok" else Outcome(job, error=value, traceback=tb)
            if unit.jobs[1:]:
                running[gen] = _Unit(unit.jobs[1:], time.monotonic() + unit.jobs[1].timeout, unit.tries)
        else:
            for each in unit.jobs:
                ref, state = self._submit([each])
                running[ref] = state
            return
        yield outcome

    def _end_worker_groups(self, jobs: list[Job]) -> None:
        """On a local cluster, end the process groups of the workers running ``jobs`` (cancelled),
        with what the model started: Ray's raylet ends it too once it sees the worker die,
        but a cluster stopped right after (a run's last job timed out) could stop first and
        leave a grandchild running (seen in CI). On a remote cluster the raylet lives on."""
        if not self.local or self.board is None:
            return
        try:
            groups = self.ray.get(self.board.groups_of.remote([job.key for job in jobs]), timeout=5)
        except Exception:  # noqa: BLE001 - the board lost: Ray's own cleanup is what is left
            return
        for group in groups:
            signal_group(group, signal.SIGKILL)

    @staticmethod
    def _lost(unit: "_Unit") -> Outcome:
        return Outcome(unit.jobs[0], crash=f"{CLUSTER_LOST} its node or its result {unit.tries + 1} times "
                                           f"(retried up to {INFRA_RETRIES} times)")

    def _cluster_lost(self, running: dict, exc: BaseException) -> Iterator[Outcome]:
        """Every unfinished job fails with what the cluster lost; what finished is kept."""
        what = str(exc).strip().splitlines()[0][:120] if str(exc).strip() else type(exc).__name__
        for unit in running.values():
            for job in unit.jobs:
                yield Outcome(job, crash=f"{CLUSTER_LOST} the driver's connection ({type(exc).__name__}: {what}); "
                                         "not retried: no cluster was left to run it")
        running.clear()

    def _expired(self, running: dict) -> Iterator[Outcome]:
        now = time.monotonic()
        for ref, unit in list(running.items()):
            if now >= unit.deadline:
                self.ray.cancel(ref, force=True)
                self._end_worker_groups([unit.jobs[0]])
                del running[ref]
                job, *rest = unit.jobs
                for other in rest:  # a group's later jobs, not started: tasks of their own
                    again, state = self._submit([other])
                    running[again] = state
                yield Outcome(job, crash=f"timed out after {job.timeout:.0f} s (--timeout)", timed_out=True)

    def _outcome(self, job: Job, get: Callable) -> Outcome | None:
        """The job's outcome from ``get()``; None for an infrastructure failure worth retrying."""
        from ray import exceptions as rx

        try:
            return Outcome(job, value=get())
        except rx.RayTaskError as exc:  # the job raised: its own exception, as the local pool gives it
            cause = exc.as_instanceof_cause() if hasattr(exc, "as_instanceof_cause") else exc
            original = getattr(exc, "cause", None)
            return Outcome(job, error=original if isinstance(original, BaseException) else cause, traceback=str(exc))
        except rx.WorkerCrashedError:
            return Outcome(job, crash="the Ray worker process died while running it (a crash in native code, or out of memory)")
        except rx.OutOfMemoryError:
            return Outcome(job, crash="killed by Ray's memory monitor (out of memory)")
        except (rx.NodeDiedError, rx.ObjectLostError, rx.RaySystemError, rx.LocalRayletDiedError):
            return None

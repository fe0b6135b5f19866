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
- Ctrl-C cancels every task still running, then stops the run;
- progress: the reporter hears of each job as it starts and finishes.

Without an address a local cluster is started (and stopped at the end). Paths: jobs read
and write the export's work and output directories, so on a cluster of several machines
these must be on a filesystem every node mounts (``PTEFORGE_WORK_DIR`` and ``--out``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator

from .errors import UsageError
from .workers import Job, Outcome

INFRA_RETRIES = 3


def _run_job(job: Job, board):
    """The body of a Ray task: import the job's function and call it, as a worker does; its
    stages go to ``board`` (progress, and the stage a crash happened in)."""
    import importlib

    import ray
    import torch  # noqa: F401 - every job is torch work: its threads are set before it starts

    from .workers import set_threads

    # the CPUs Ray gave this task, as a local worker gets its share of the cores
    # (torch would spin a thread per core in every task on the node)
    set_threads(max(1, int(ray.get_runtime_context().get_assigned_resources().get("CPU", 1))))
    module, _, name = job.fn.partition(":")
    fn = getattr(importlib.import_module(module), name)
    return fn(*job.args, on_stage=lambda stage: board.set.remote(job.key, stage), **job.kwargs)


class _Board:
    """A Ray actor: the stage each job last reported, read by the driver."""

    def __init__(self):
        self.stages: dict[str, str] = {}
        self.new: dict[str, str] = {}

    def set(self, key: str, stage: str) -> None:
        self.stages[key] = self.new[key] = stage

    def changes(self) -> dict[str, str]:
        new, self.new = self.new, {}
        return new


class RayPool:
    """Run jobs as Ray tasks on the cluster at ``address`` (None: a local one)."""

    def __init__(self, address: str | None = None, size: int | None = None, quiet: bool = True,
                 on_stage: Callable[[str, str], None] | None = None, resources: Callable[[Job], dict] | None = None):
        import os

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
        if self.started_here:
            from .workers import PRELOAD_ENV

            env = {k: v for k, v in os.environ.items() if k.startswith(("PTEFORGE", "YOLO_")) or k in PRELOAD_ENV}
            try:
                ray.init(address=address, num_cpus=size if address is None else None, log_to_driver=not quiet,
                         include_dashboard=False, configure_logging=not quiet, logging_level="ERROR",
                         runtime_env={"env_vars": env} if env else None)
            except (ConnectionError, ValueError, RuntimeError) as exc:
                where = f"reach the Ray cluster at {address}" if address else "start a local Ray cluster"
                raise UsageError(f"cannot {where}: {str(exc).splitlines()[0][:160]}",
                                 fix="give --ray-address HOST:PORT of a running cluster (ray start --head), or omit it for a local one") from None
        self.task = ray.remote(max_retries=0, num_cpus=1)(_run_job)
        self.board = ray.remote(num_cpus=0)(_Board).remote()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        if self.started_here and self.ray.is_initialized():
            self.ray.shutdown()

    def _submit(self, job: Job):
        return self.task.options(resources=self.resources(job) or None).remote(job, self.board)

    def _progress(self) -> None:
        for key, stage in self.ray.get(self.board.changes.remote()).items():
            self.on_stage(key, stage)

    def run(self, jobs: Iterable[Job]) -> Iterator[Outcome]:
        ray = self.ray
        running: dict = {}  # ObjectRef -> (job, deadline, tries)
        for job in jobs:
            running[self._submit(job)] = (job, time.monotonic() + job.timeout, 0)
        try:
            while running:
                soonest = min(deadline for _, deadline, _ in running.values())
                done, _ = ray.wait(list(running), num_returns=1, timeout=min(1.0, max(0.0, soonest - time.monotonic())))
                self._progress()
                if not done:
                    yield from self._expired(running)
                    continue
                ref = done[0]
                job, deadline, tries = running.pop(ref)
                outcome = self._outcome(job, ref)
                if outcome is None and tries < INFRA_RETRIES:  # infrastructure: run it again
                    running[self._submit(job)] = (job, time.monotonic() + job.timeout, tries + 1)
                    continue
                yield outcome or Outcome(job, crash=f"the Ray cluster failed it {tries + 1} times (node or object lost)")
        except BaseException:  # Ctrl-C, or the consumer stopped: nothing keeps running
            for ref in running:
                ray.cancel(ref, force=True)
            raise

    def _expired(self, running: dict) -> Iterator[Outcome]:
        now = time.monotonic()
        for ref, (job, deadline, _) in list(running.items()):
            if now >= deadline:
                self.ray.cancel(ref, force=True)
                del running[ref]
                yield Outcome(job, crash=f"timed out after {job.timeout:.0f} s (--timeout)")

    def _outcome(self, job: Job, ref) -> Outcome | None:
        """The job's outcome; None for an infrastructure failure worth retrying."""
        from ray import exceptions as rx

        try:
            return Outcome(job, value=self.ray.get(ref))
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

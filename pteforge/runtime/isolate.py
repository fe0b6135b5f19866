"""Run requests in a child process that may crash: a crash is one request's failure.

One long-lived child serves many requests (``import executorch.runtime`` costs
~10 s, paid once); when it dies — signal, timeout, out of memory — the request it
was serving fails with the cause, and the next request starts a fresh child.

A child's whole process tree goes with it. On POSIX (Linux, macOS) each child, and each
worker of ``run/workers.py``, leads a session of its own (``setsid``), so every process it
starts is in its process group; ending it ends the group (:func:`end_group`): SIGTERM,
then SIGKILL to what is left after ``GRACE_S``. A multiprocessing resource tracker started
in the group ignores SIGTERM and exits by itself once the processes writing to it are
gone, having removed what they left (semaphores, shared memory); the grace gives it that
time. A process that starts a session of its own escapes the group, as it escapes any
process group. On Windows there are no process groups to end: ``new_group`` and
``end_group`` do nothing, and only the child itself is ended (``TerminateProcess``, as
``kill`` is there); what it started is left running. Ending its tree would need a Job
object (``JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE``) the child is assigned to when it starts,
which pteforge does not make yet.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable

from ..core.native_log import account, noted


class ChildCrashed(Exception):
    """The child died serving a request; ``str()`` says how (signal, exit code, timeout)."""


def describe_exit(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"killed by {name}"
    return f"exited with code {code}"


GRACE_S = 2.0  # between SIGTERM to a group and SIGKILL to what is left of it


def new_group() -> bool:
    """Make this process lead a new session, so its process group, of its own: what it
    starts, and what they start, is ended with it (:func:`end_group`). False where it
    cannot (Windows) or could not."""
    if not hasattr(os, "setsid"):
        return False
    try:
        os.setsid()
    except OSError:  # already a group leader (EPERM): then it leads its own group only if it is its id
        pass
    return os.getpgid(0) == os.getpid()


def end_group(pgid: int, grace: float = GRACE_S, reap: Callable[[], object] = lambda: None) -> None:
    """End every process of process group ``pgid`` (a child made by :func:`new_group` or
    ``start_new_session``): SIGTERM, then, after up to ``grace`` seconds, SIGKILL to those
    left. ``reap`` is called while waiting, to reap the leader where this process is its
    parent (a zombie stays in its group). Never this process's own group."""
    if not signal_group(pgid, signal.SIGTERM):
        return  # no process left in it (or not a group to end)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        reap()
        if not _group_alive(pgid):
            return
        time.sleep(0.02)
    signal_group(pgid, signal.SIGKILL)


def signal_group(pgid: int, sig: int) -> bool:
    """Whether ``sig`` reached a process of group ``pgid``; never sent to this process's
    own group, nor where there are no process groups (Windows)."""
    if not hasattr(os, "killpg") or pgid <= 1 or pgid == os.getpgrp():
        return False
    try:
        os.killpg(pgid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def _group_alive(pgid: int) -> bool:
    """Whether a process of group ``pgid`` still runs. A killed process whose parent has not
    reaped it yet (a zombie) does not count, where /proc says so (Linux): an orphan is
    reaped by init, and some containers' init never reaps."""
    if not signal_group(pgid, 0):
        return False
    if not os.path.isdir("/proc/self"):
        return True
    with os.scandir("/proc") as entries:
        for entry in entries:
            if entry.name.isdigit() and _running_in(entry.name, pgid):
                return True
    return False


def _running_in(pid: str, pgid: int) -> bool:
    """Whether process ``pid`` (of /proc) is in group ``pgid`` and not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state, _, group = f.read().rsplit(")", 1)[1].split()[:3]
    except (OSError, ValueError, IndexError):
        return False  # gone meanwhile
    return int(group) == pgid and state != "Z"


def _descendants() -> dict[int, float]:
    """This process's descendants: pid -> start time (a recycled pid is another process)."""
    import psutil

    found = {}
    for p in psutil.Process().children(recursive=True):
        try:
            found[p.pid] = p.create_time()
        except psutil.Error:
            pass
    return found


def end_descendants(spare: dict[int, float] | None = None, grace: float = GRACE_S) -> int:
    """End every process this one started, and theirs (SIGTERM, SIGKILL after ``grace``),
    but those of ``spare`` (``_descendants()`` taken before: what the process had started
    for itself, a fork server, a pool). Returns how many were ended."""
    import psutil

    spare = spare or {}
    procs = []
    for p in psutil.Process().children(recursive=True):
        try:
            if spare.get(p.pid) != p.create_time():
                procs.append(p)
        except psutil.Error:
            pass
    for p in procs:
        try:
            p.terminate()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(procs, timeout=grace)
    for p in alive:
        try:
            p.kill()
        except psutil.Error:
            pass
    return len(procs)


@contextlib.contextmanager
def descendants_ended():
    """``with descendants_ended():`` what this process starts in the block is ended when the
    block ends (what it had started before, and its children, are spared): the process tree
    of a job run in a process that lives on to serve the next (a Ray worker,
    ``run/ray_pool.py``). When Ray kills a worker (a task cancelled at --timeout or Ctrl-C,
    a lost node), Ray itself ends that worker's children on Linux
    (``kill_child_processes_on_worker_exit``; tests/test_process_tree.py holds it to that)."""
    before = _descendants()
    try:
        yield
    finally:
        end_descendants(before)


class IsolatedRuntime:
    def __init__(self, timeout: float = 300.0):
        self.timeout = timeout
        self.proc: subprocess.Popen | None = None
        # what the child's native code logs during a request: read here when it dies serving it
        fd, self._log = tempfile.mkstemp(prefix="pteforge-runtime-", suffix=".log")
        os.close(fd)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *exc):
        if exc_type is not None:  # Ctrl-C (a child of its own session is not sent the terminal's) or a failure:
            self._kill()          # a request may be under way, not waited for
        self.close()

    def _start(self) -> subprocess.Popen:
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "PTEFORGE_RUNTIME_LOG": self._log}
        proc = subprocess.Popen(
            [sys.executable, "-m", "pteforge.runtime.child"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
            bufsize=1,
            start_new_session=True,  # its process group: ended whole with it (end_group); ignored on Windows
        )
        # a thread reads the child's answers, so a request waits on a queue with a timeout:
        # select() on a pipe is POSIX-only
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=_read_lines, args=(proc.stdout, self._lines), daemon=True).start()
        return proc

    def request(self, op: str, timeout: float | None = None, **fields) -> dict:
        if self.proc is None or self.proc.poll() is not None:
            if self.proc is not None:
                _release(self.proc)
            self.proc = self._start()
        proc = self.proc
        assert proc.stdin and proc.stdout
        proc.stdin.write(json.dumps({"op": op, **fields}) + "\n")
        proc.stdin.flush()
        limit = timeout or self.timeout
        try:
            line = self._lines.get(timeout=limit)  # "" once the child has closed its stdout
        except queue.Empty:
            line = None
        if line:
            return json.loads(line)
        if line is None:
            self._kill()
            raise ChildCrashed(self._with_log(f"timed out after {limit:.0f} s"))
        code = proc.wait(timeout=10)
        _release(proc)
        self.proc = None
        raise ChildCrashed(self._with_log(describe_exit(code)))

    def call(self, fn: Callable[[dict], dict], timeout: float | None = None, **fields) -> dict:
        """Run ``fn(fields)`` in the child: a module-level function of pteforge's, named by
        its module and name (as pickle names a function), so this floor needs no import of
        the code above it that asks (text generation's proof, a reference simulator)."""
        return self.request("call", timeout=timeout, call=f"{fn.__module__}:{fn.__qualname__}", **fields)

    def _with_log(self, how: str) -> str:
        """How the child died, and what the runtime logged before (a damaged program's checks)."""
        try:
            with open(self._log, errors="replace") as f:
                said = account(f.read())
        except OSError:
            return how
        return noted(how, said)

    def _kill(self) -> None:
        if self.proc is not None:
            end_group(self.proc.pid, reap=self.proc.poll)  # its tree; POSIX only
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            _release(self.proc)
            self.proc = None

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                assert self.proc.stdin  # stdin=PIPE (_start); a failure here is caught below
                self.proc.stdin.close()
                self.proc.wait(timeout=10)
            except Exception:
                self._kill()
        if self.proc is not None:
            _release(self.proc)
        self.proc = None
        with contextlib.suppress(OSError):
            os.unlink(self._log)


def _read_lines(stream, lines: queue.Queue) -> None:
    try:
        for line in stream:
            lines.put(line)
    except (OSError, ValueError):  # closed under it: the child is gone
        pass
    lines.put("")


def _release(proc: subprocess.Popen) -> None:
    """End what a child that is gone left running (its process group), and close its pipes."""
    end_group(proc.pid, reap=proc.poll)
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None:
            try:
                stream.close()
            except OSError:
                pass

"""Run requests in a child process that may crash: a crash is one request's failure.

One long-lived child serves many requests (``import executorch.runtime`` costs
~10 s, paid once); when it dies — signal, timeout, out of memory — the request it
was serving fails with the cause, and the next request starts a fresh child.
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


class IsolatedRuntime:
    def __init__(self, timeout: float = 300.0):
        self.timeout = timeout
        self.proc: subprocess.Popen | None = None
        # what the child's native code logs during a request: read here when it dies serving it
        fd, self._log = tempfile.mkstemp(prefix="pteforge-runtime-", suffix=".log")
        os.close(fd)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
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
            self.proc.kill()
            self.proc.wait()
            _release(self.proc)
            self.proc = None

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
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
    """Close the pipes of a child that is gone."""
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None:
            try:
                stream.close()
            except OSError:
                pass

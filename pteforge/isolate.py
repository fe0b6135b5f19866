"""Run requests in a child process that may crash: a crash is one request's failure.

One long-lived child serves many requests (``import executorch.runtime`` costs
~10 s, paid once); when it dies — signal, timeout, out of memory — the request it
was serving fails with the cause, and the next request starts a fresh child.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from collections import deque


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
        self._stderr_tail: deque[str] = deque(maxlen=20)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _start(self) -> subprocess.Popen:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        return subprocess.Popen(
            [sys.executable, "-m", "pteforge.child"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            bufsize=1,
        )

    def request(self, op: str, timeout: float | None = None, **fields) -> dict:
        if self.proc is None or self.proc.poll() is not None:
            if self.proc is not None:
                _release(self.proc)
            self.proc = self._start()
        proc = self.proc
        assert proc.stdin and proc.stdout and proc.stderr
        proc.stdin.write(json.dumps({"op": op, **fields}) + "\n")
        proc.stdin.flush()
        deadline = time.monotonic() + (timeout or self.timeout)
        streams = [proc.stdout, proc.stderr]
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self._kill()
                raise ChildCrashed(f"timed out after {timeout or self.timeout:.0f} s")
            ready, _, _ = select.select(streams, [], [], min(left, 1.0))
            if proc.stderr in ready:
                line = proc.stderr.readline()
                if line:
                    self._stderr_tail.append(line.rstrip())
                else:
                    streams = [proc.stdout]
            if proc.stdout in ready:
                line = proc.stdout.readline()
                if line:
                    return json.loads(line)
                code = proc.wait(timeout=10)
                _release(proc)
                self.proc = None
                raise ChildCrashed(describe_exit(code))

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


def _release(proc: subprocess.Popen) -> None:
    """Close the pipes of a child that is gone."""
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None:
            try:
                stream.close()
            except OSError:
                pass

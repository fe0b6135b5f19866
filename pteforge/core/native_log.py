"""Why ExecuTorch's runtime refused a program, from what it logged.

The runtime's Python bindings raise an error code only ("method->execute() failed with
error 0x12"). The reason is what native code logs on stderr just before, e.g.::

    [kernel_ops_util.cpp:394] Check failed (in.dim() == 3 || in.dim() == 4): Expect input tensor to be 3-D or 4-D, but got, 5.
    [op_convolution.cpp:363] Check failed (check_convolution_args(...)): 
    [method.cpp:1483] KernelCall failed at instruction 0:3 in operator aten::convolution.out: 0x12
    [method.cpp:1493] arg 0 with type id 1

:func:`captured` collects file descriptor 2 while the runtime works and, when the block
raises, adds :func:`account` of the log ("aten::convolution.out: Expect input tensor to be
3-D or 4-D, but got, 5.") to the exception's message.
"""

from __future__ import annotations

import io
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

# "[file.cpp:123] message" (the wheel's format) or "E 00:00:00.123 executorch:file.cpp:123] message"
_LINE = re.compile(r"^(?:\[|[IDEWF] [\d:.]+ executorch:)(?P<file>[\w.+-]+):\d+\]\s?(?P<msg>.*)$")
_KERNEL = re.compile(r"KernelCall failed at instruction (?P<at>\S+) in operator (?P<op>[\w:.]+?):? (?P<code>0x[0-9a-fA-F]+)$")
_CHECK = re.compile(r"^Check failed \((?P<cond>.*)\):\s*(?P<msg>.*)$")
_INIT = re.compile(r"Init failed for backend (?P<backend>\w+)")
_NOISE_FILES = {"cpuinfo_utils.cpp"}  # logged on every first load, failure or not
# the failing kernel's argument types by number, a missing kernel's tensors' dtype and dim
# order, line by line, and OpenVINO's delegate saying where it found its library
_NOISE = re.compile(r"^(arg \d+ with type id \d+|dtype: \d+ \| dim order: \[|\d+,|\]|OpenVINO: runtime loaded successfully .*)$")
_NOTE = "the runtime logged: "


@dataclass
class Account:
    operator: str | None = None  # the kernel the runtime was in, e.g. aten::convolution.out
    code: int | None = None  # the error that kernel returned (0x12: it refused its arguments)
    delegate: str | None = None  # the backend whose init refused the program it was given, e.g. XnnpackBackend
    messages: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        text = "; ".join(self.messages[:3])
        return f"{self.operator}: {text}" if self.operator and text else self.operator or text

    def __bool__(self) -> bool:
        return bool(self.operator or self.messages)


def account(log: str) -> Account:
    """The runtime's log lines as one account: the failing operator, the checks that failed
    with their messages, and anything else it said, in order, without repeats."""
    found = Account()
    bare_checks = []
    for raw in log.splitlines():
        m = _LINE.match(raw.strip())
        if not m or m["file"] in _NOISE_FILES or _NOISE.match(m["msg"].strip()):
            continue
        msg = m["msg"].strip()
        if kernel := _KERNEL.search(msg):
            found.operator, found.code = kernel["op"], int(kernel["code"], 16)
            continue
        if init := _INIT.search(msg):
            found.delegate = init["backend"]
        if check := _CHECK.match(msg):
            if not check["msg"]:
                bare_checks.append(f"{check['cond']} does not hold")
                continue
            msg = check["msg"]
        if msg and msg not in found.messages:
            found.messages.append(msg)
    if not found.messages:
        found.messages = bare_checks[:1]
    return found


def annotate(exc: BaseException, log: str) -> Account:
    """Add the runtime's account of ``log`` to ``exc``'s message (same type, same traceback)."""
    said = account(log)
    if said:
        message = exc.args[0] if exc.args and isinstance(exc.args[0], str) else None
        exc.args = (noted(message or "", said), *(exc.args[1:] if message is not None else exc.args))
        setattr(exc, "runtime_account", said)  # an attribute of ours, on any exception
    return said


def noted(text: str, said: Account) -> str:
    """``text``, then what the runtime logged, if it logged anything worth saying."""
    if not said:
        return text
    return f"{text}; {_NOTE}{said}" if text else f"{_NOTE}{said}"


@contextmanager
def captured(path: str | None = None) -> Iterator[None]:
    """Native writes to stderr go to ``path`` (or a temporary file) during the block; when the
    block raises, the runtime's account is added to the exception. Without ``path`` what was
    captured is passed on to the previous stderr afterwards, so ``--debug`` still shows it."""
    sys.stderr.flush()
    saved, saved_stream = os.dup(2), sys.stderr
    sink = open(path, "w+b") if path else tempfile.TemporaryFile()
    os.dup2(sink.fileno(), 2)
    # ExecuTorch's Python bindings log through sys.stderr, not file descriptor 2: where
    # something else holds sys.stderr (pytest's capture) the log went there
    sys.stderr = io.TextIOWrapper(os.fdopen(os.dup(sink.fileno()), "wb"), errors="replace", write_through=True)

    def restore() -> str:
        sys.stderr.close()
        sys.stderr = saved_stream
        os.dup2(saved, 2)
        os.close(saved)
        sink.seek(0)
        data = sink.read()
        sink.close()
        if not path and data:
            os.write(2, data)
        return data.decode(errors="replace")

    failure = None
    try:
        yield
    except Exception as exc:
        failure = exc
        raise
    finally:  # also on KeyboardInterrupt: stderr is given back whatever happens
        log = restore()
        if failure is not None:
            annotate(failure, log)

"""Domain errors and the exit codes the command line maps them to.

The library raises :class:`PteforgeError` subclasses; it never prints or exits.
The CLI turns each into one line (cause and fix) and the error's exit code; a
traceback is shown only with ``--debug``.
"""

from __future__ import annotations

import enum
import re
from typing import Any


class ExitStatus(enum.IntEnum):
    """Process exit codes. Every user-facing failure has its own."""

    OK = 0
    TARGETS_FAILED = 1  # the run finished, some (model, target) rows failed
    USAGE = 2  # bad command line (argparse uses 2 as well)
    NO_BACKEND = 3  # none of the requested backends can lower here
    MODEL = 4  # a model could not be built, loaded or captured
    WEIGHTS = 5  # weights could not be fetched or loaded
    OUTPUT = 6  # the output location cannot be written
    MANIFEST = 7  # a manifest is not valid JSON or not our schema
    RESOURCES = 8  # this machine has too little memory for the work asked
    SETUP = 9  # `pteforge setup` could not fetch or build what it sets up
    INTERNAL = 70  # a bug in pteforge (EX_SOFTWARE)
    INTERRUPTED = 130  # Ctrl-C (128 + SIGINT)


# What each exit code means, as the CLI reference prints it (``cli.cli_reference``: the one
# place the table is written; tests/test_cli.py holds each to what a command returns).
EXIT_MEANINGS = {
    ExitStatus.OK: "every requested target was written and none failed: proven, out of its accuracy budget "
                   "(OUT_OF_BUDGET: written, not offered to the app), needing a device or not verified; every "
                   "validated file ran and matched, or needs a device",
    ExitStatus.TARGETS_FAILED: "the run finished; a requested target failed (a *_FAILED or MISMATCH row) or is "
                               "unavailable here (targets implied by --target PLATFORM do not count); a program "
                               "proven on this host mismatched or failed on Arm64 (--prove-on arm64); a validated "
                               "file failed or mismatched",
    ExitStatus.USAGE: "usage error: an unknown command, flag, model or backend (with the closest match), a malformed "
                      "target or shape, an input shape the model takes only by broadcasting, an unreadable file given",
    ExitStatus.NO_BACKEND: "none of the requested backends can lower here",
    ExitStatus.MODEL: "a model could not be built, loaded or captured (factory raised, not an nn.Module, a broken file, "
                      "its labels count differs from its output)",
    ExitStatus.WEIGHTS: "weights could not be downloaded or loaded",
    ExitStatus.OUTPUT: "the output directory or the site cannot be written",
    ExitStatus.MANIFEST: "an existing index.json is not valid JSON or not our schema (left untouched); a file it "
                         "lists is missing or not the file it lists (its size, its sha256): publish and manifest "
                         "check refuse it; publish refuses a file that names a folder of this machine's disk",
    ExitStatus.RESOURCES: "this machine has too little memory for the work asked (refused before any work)",
    ExitStatus.SETUP: "pteforge setup could not fetch or build what it sets up (a registry unreachable, a step "
                      "that needs root, a host it does not run on)",
    ExitStatus.INTERNAL: "internal error (a bug: run with --debug for the traceback)",
    ExitStatus.INTERRUPTED: "interrupted (Ctrl-C); a rerun resumes from what finished",
}


class PteforgeError(Exception):
    """A failure the user can act on: ``str(err)`` is the cause, ``fix`` the remedy."""

    exit_status: ExitStatus = ExitStatus.USAGE

    def __init__(self, message: str, fix: str | None = None) -> None:
        super().__init__(message)
        self.fix = fix

    def one_line(self) -> str:
        msg = message_line(self) or type(self).__name__
        return f"{msg} (fix: {self.fix})" if self.fix else msg


class UsageError(PteforgeError):
    exit_status = ExitStatus.USAGE


class UnknownNameError(UsageError):
    """An unknown model, backend or precision; the message lists the valid names."""


class NoBackendError(PteforgeError):
    exit_status = ExitStatus.NO_BACKEND
    plan: Any  # the run's TargetPlan (run/plan.py), none of whose targets can lower here: set by its raiser


class ModelError(PteforgeError):
    exit_status = ExitStatus.MODEL


class CaptureError(ModelError):
    """torch.export could not capture a model: that model's rows fail, the run goes on."""


class WeightsError(PteforgeError):
    exit_status = ExitStatus.WEIGHTS


class OutputError(PteforgeError):
    exit_status = ExitStatus.OUTPUT


class ManifestError(PteforgeError):
    exit_status = ExitStatus.MANIFEST


class ResourceError(PteforgeError):
    exit_status = ExitStatus.RESOURCES


class UpstreamChangedError(PteforgeError):
    """An upstream library is not the version a patch of ``pteforge/patches`` was written
    for, or lacks what the patch replaces: the patch refuses to apply (its message names
    the patch, the version it targets and the one found)."""

    exit_status = ExitStatus.INTERNAL


class SetupError(PteforgeError):
    """A step of ``pteforge setup`` failed: its message names the step, its fix what to do."""

    exit_status = ExitStatus.SETUP


# Lines that say where in native code an error was raised, not what went wrong:
# "Exception from src/frontends/pytorch/src/frontend.cpp:180:",
# "Check 'x' failed at src/core/src/node.cpp:90:", Python traceback frames.
_WHERE = re.compile(
    r"^(Exception from \S+:\d+:?|Check .* failed at \S+:\d+:?|\S+\.(cpp|cc|cxx|c|h|hpp)(:\d+)+:?"
    r"|Traceback \(most recent call last\):|File \".*\", line \d+.*|\^+|~+)$"
)


# torch.fx's interpreter appends the node it was running, its graph and tlparse advice
_FX_NOTE = re.compile(r"\n\s*While executing %")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")  # terminal styling some libraries put in messages (torch.load's bold)


# ExecuTorch's runtime errors (runtime/core/error.h) by code: its Python bindings give the code only
_ET_ERRORS = {
    0x01: "Internal", 0x02: "InvalidState", 0x03: "EndOfMethod", 0x04: "AlreadyLoaded",
    0x10: "NotSupported", 0x11: "NotImplemented",
    0x12: "InvalidArgument: a kernel refused its inputs (e.g. a shape or rank it does not take)",
    0x13: "InvalidType", 0x14: "OperatorMissing: an operator is not in this runtime", 0x20: "NotFound",
    0x21: "MemoryAllocationFailed", 0x22: "AccessFailed", 0x23: "InvalidProgram", 0x24: "InvalidExternalData",
    0x25: "OutOfResources", 0x30: "DelegateInvalidCompatibility", 0x31: "DelegateMemoryAllocationFailed",
    0x32: "DelegateInvalidHandle",
}
_ET_CODE = re.compile(r"(failed with error (?:code )?)(0x[0-9a-fA-F]+)")


def _named_codes(text: str) -> str:
    def name(m: re.Match) -> str:
        known = _ET_ERRORS.get(int(m.group(2), 16))
        return f"{m.group(0)} ({known})" if known else m.group(0)

    return _ET_CODE.sub(name, text)


def message_line(exc: BaseException, limit: int = 400) -> str:
    """An error's message as one line that keeps its cause: native location lines,
    traceback frames and torch.fx's "While executing %node" notes dropped, ExecuTorch's
    error codes named, the remaining lines joined, cut at ``limit`` characters."""
    message = _FX_NOTE.split(str(exc))[0]
    lines = [line.strip() for line in _named_codes(_ANSI.sub("", message)).splitlines()]
    kept = [line for line in lines if line and not _WHERE.match(line)]
    return _cut(" ".join(kept) if kept else " ".join(line for line in lines if line), limit)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


# torch's and ExecuTorch's pass managers wrap what a pass raised in a message without it
_PASS_FAILED = re.compile(r"An error occurred when running the '([^']+)' pass")


def one_line(exc: BaseException, limit: int = 400) -> str:
    """``Type: message`` on one line (see :func:`message_line`); a pass manager's
    "An error occurred when running the 'P' pass after the following passes: […]" becomes
    "the P pass failed: " and what the pass raised."""
    wrapped = _PASS_FAILED.match(str(exc))
    if wrapped and exc.__cause__ is not None:
        return _cut(f"the {wrapped.group(1)} pass failed: {one_line(exc.__cause__, limit)}", limit)
    text = message_line(exc, limit)
    if text and getattr(exc, "plain", False):  # its message names the cause itself
        return text
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__

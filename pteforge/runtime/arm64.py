"""Arm64 programs run under emulation: ExecuTorch's aarch64 runtime (the wheel whose XNNPACK
kernels Android's builds use) in an aarch64 CPython, run by ``qemu-aarch64-static`` on this
x86_64 host. ``pteforge setup arm64`` (``arm64_setup.py``) builds it in pteforge's cache;
this module says whether it is there and runs programs with it, one emulated process for
all the programs of a run (its start-up, ~9 s, is mostly ``import torch``).

What ran is said in :func:`method`: the emulator, the CPU features it gave (fp16
arithmetic, dot product, ...) and the runtime's version. Emulated time is not a device's:
nothing here is reported as speed.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..core.io import cache_root
from ..core.result import Check

QEMU_CPU = "max,sme=off"  # plain max has SME, whose int8 kernels gave wrong results under qemu 7.2
SETUP = "pteforge setup arm64"
GUEST = Path(__file__).with_name("arm64_guest.py")
# the features that change what XNNPACK computes, in words
FEATURE_WORDS = {"asimdhp": "fp16 arithmetic", "asimddp": "dot product", "i8mm": "int8 matrix multiply",
                 "sve2": "SVE2", "sme": "SME"}


HOME_ENV = "PTEFORGE_ARM64_DIR"  # moves the Arm64 runtime alone (CI keeps it between runs; the tests share one)


def home() -> Path:
    """Where the Arm64 runtime lives: ``PTEFORGE_ARM64_DIR``, else ``arm64/`` in pteforge's cache."""
    return Path(os.environ[HOME_ENV]) if os.environ.get(HOME_ENV) else cache_root() / "arm64"


def native() -> bool:
    """This host is Arm64 itself (Apple silicon, an Arm Linux machine): its own runtime's
    proof is already the Arm64 one."""
    return platform.machine().lower() in ("arm64", "aarch64")


@dataclass(frozen=True)
class Layout:
    """The files of the Arm64 runtime under ``home``."""

    home: Path

    @property
    def root(self) -> Path:  # Debian's arm64 CPython and libraries, unpacked
        return self.home / "root"

    @property
    def site(self) -> Path:  # the aarch64 wheels of executorch, torch and numpy, unzipped
        return self.home / "site-packages"

    @property
    def qemu(self) -> Path:  # Debian's qemu-user-static, unpacked
        return self.home / "qemu" / "usr" / "bin" / "qemu-aarch64-static"

    @property
    def ready(self) -> Path:  # written by the setup's last step: what it checked
        return self.home / "ready.json"


def facts(layout: Layout | None = None) -> dict | None:
    """What the setup found when it finished (the emulator, features, runtime version), or
    None where it has not finished."""
    layout = layout or Layout(home())
    try:
        found = json.loads(layout.ready.read_text())
    except (OSError, ValueError):
        return None
    return found if layout.qemu.is_file() and (layout.root / "usr/bin/python3.11").is_file() else None


def availability() -> Check:
    """Can programs be proven on Arm64 here; if not, how to make it so."""
    if native():
        return Check(False, f"this host is Arm64 ({platform.machine()}): its own runtime's proof is the Arm64 one")
    if sys.platform != "linux" or platform.machine().lower() not in ("x86_64", "amd64"):
        return Check(False, f"Arm64 emulation runs on Linux x86_64 hosts, not {sys.platform} {platform.machine()}",
                     "on Windows, run pteforge in WSL (Debian or Ubuntu); on a Mac with Apple silicon the host "
                     "runtime is Arm64 already")
    if facts() is None:
        return Check(False, "the Arm64 runtime under emulation is not set up",
                     f"run `{SETUP}` once (about 0.5 GB from Debian's and the Python registries; docs/install.md)")
    return Check(True, "ExecuTorch's aarch64 runtime under qemu-user")


def method(found: dict) -> str:
    """What ran the program, in words: the emulator, the features it gave, the runtime."""
    words = [FEATURE_WORDS[f] for f in FEATURE_WORDS if f in found.get("features", [])]
    return (f"ExecuTorch {found.get('executorch', '?')}'s aarch64 runtime under emulation "
            f"({found.get('qemu', 'qemu-aarch64')}, -cpu {found.get('cpu', QEMU_CPU)}: "
            f"{', '.join(words) or 'no fp16 arithmetic or dot product'})")


def command(layout: Layout, args: list[str]) -> tuple[list[str], dict]:
    """The emulated Python's command line running the guest script, and its environment."""
    env = {**os.environ, "PYTHONPATH": str(layout.site), "PYTHONDONTWRITEBYTECODE": "1", "PYTHONNOUSERSITE": "1"}
    for var in ("PYTHONHOME", "VIRTUAL_ENV", "LD_LIBRARY_PATH", "LD_PRELOAD"):
        env.pop(var, None)
    return [str(layout.qemu), "-cpu", QEMU_CPU, "-L", str(layout.root), str(layout.root / "usr/bin/python3.11"),
            str(GUEST), *args], env


@dataclass
class Arm64Run:
    """One emulated process's results: what it was, and each program's outcome
    (``{"ok", "error", "load", "load_s", "run_s", "outputs"}``) by its path."""

    facts: dict
    results: dict[str, dict] = field(default_factory=dict)
    seconds: float = 0.0
    error: str | None = None  # the process itself failed: every program without a result says this


def run_programs(programs: list[tuple[str, str]], work: Path, timeout: float, layout: Layout | None = None) -> Arm64Run:
    """Run each (program, inputs .npz) in one emulated process; the outputs of program i
    are written to ``work/arm64-i.npz``."""
    layout = layout or Layout(home())
    found = facts(layout) or {}
    jobs = [{"pte": str(pte), "inputs": str(inputs), "outputs": str(work / f"arm64-{i}.npz")}
            for i, (pte, inputs) in enumerate(programs)]
    listing = work / "arm64-jobs.json"
    listing.write_text(json.dumps({"programs": jobs}))
    cmd, env = command(layout, [str(listing)])
    t0 = time.perf_counter()
    run = Arm64Run(found)
    try:
        done = subprocess.run(["nice", "-n", "10", *cmd], env=env, capture_output=True, text=True, timeout=timeout)
        stdout, stderr, code = done.stdout, done.stderr, done.returncode
    except subprocess.TimeoutExpired as exc:  # what finished before the limit keeps its result
        stdout, stderr, code = _text(exc.stdout), "", None
    run.seconds = time.perf_counter() - t0
    lines = [json.loads(line) for line in stdout.splitlines() if line.startswith("{") and line.endswith("}")]
    if lines and "machine" in lines[0]:
        run.facts = {**found, **lines[0]}
    outputs = {j["pte"]: j["outputs"] for j in jobs}
    run.results = {line["pte"]: {**line, "outputs": outputs[line["pte"]]} for line in lines[1:] if "pte" in line}
    if code is None:
        run.error = f"the emulated runtime did not finish every program in {timeout:g} s (--timeout)"
    elif code != 0 or len(run.results) < len(jobs):
        tail = [t for t in stderr.strip().splitlines() if "cpuinfo" not in t][-1:] or ["no message"]
        run.error = f"the emulated runtime exited with {code}: {tail[0][:300]}"
    return run


def _text(data) -> str:
    return data.decode(errors="replace") if isinstance(data, bytes) else data or ""

"""What differs between operating systems, in one place.

Linux has faster or finer paths: a fork server (workers fork with torch and ExecuTorch
already imported), ``renameat2`` (a site directory swapped in one step), ``/proc`` (a
resettable peak RSS). macOS and Windows take the portable paths: ``spawn``, two renames,
psutil. ``PTEFORGE_PORTABLE=1`` makes a Linux run take the portable paths too, so the tests
run them here (tests/test_portable.py).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import platform
import re
import sys
import time
import unicodedata
from collections.abc import Iterator

PORTABLE_ENV = "PTEFORGE_PORTABLE"


def linux_paths() -> bool:
    """Take Linux's own paths: this is Linux, and ``PTEFORGE_PORTABLE`` does not say otherwise."""
    return sys.platform.startswith("linux") and os.environ.get(PORTABLE_ENV, "") in ("", "0")


def os_name() -> str:
    """This host as the platform tables name it: ``linux``, ``macos`` or ``windows``."""
    return {"darwin": "macos", "win32": "windows", "cygwin": "windows"}.get(sys.platform, "linux")


def start_method() -> str:
    """The workers' start method: the fork server on Linux; ``spawn`` (macOS's and Windows'
    default: forking a process that has loaded Apple's frameworks is unsafe) elsewhere."""
    return "forkserver" if linux_paths() else "spawn"


def rename_exchange(a: bytes, b: bytes) -> bool:
    """Swap two paths in one step where the kernel can (Linux ``renameat2`` with
    ``RENAME_EXCHANGE``); False where it cannot, and the caller renames twice."""
    if not linux_paths():
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.renameat2(-100, a, -100, b, 2) == 0  # AT_FDCWD, RENAME_EXCHANGE
    except (OSError, AttributeError, TypeError):
        return False


def _proc_status(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])  # kB
    return 0


def reset_peak_rss() -> bool:
    """Start measuring this process's peak RSS from now; False where the OS cannot (the peak
    is then the process's whole life, and :func:`peak_rss_mb` says nothing)."""
    if not linux_paths():
        return False
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def rss_mb() -> float:
    if linux_paths():
        return _proc_status("VmRSS") / 1024
    import psutil

    return psutil.Process().memory_info().rss / 2**20


def peak_rss_mb(since_reset: bool) -> float | None:
    """The peak RSS since :func:`reset_peak_rss` succeeded; None when it did not."""
    if not since_reset:
        return None
    return _proc_status("VmHWM") / 1024


def thread_count() -> int:
    if linux_paths():
        return len(os.listdir("/proc/self/task"))
    import psutil

    return psutil.Process().num_threads()


def cores_busy() -> bool:
    """Whether other work keeps every core of this machine busy (within half a core of the
    core count), so that one more interpreter importing torch would only compete with it.

    On Linux, measured since this process started (``/proc/stat``, less this process's own
    CPU time; over at least 0.2 s, and only the last 0.2 s when that was over 10 s ago).
    Elsewhere the 1-minute load average, which lags: after a 2-core run it says "busy" for a
    minute, and a run started right after (the next export of someone exporting all day)
    waited for the fork server's imports before its capture (its first jobs 3-4 s later)."""
    now = _cpu_times()
    if now is None:
        try:
            return os.getloadavg()[0] >= (os.cpu_count() or 1) - 0.5
        except (AttributeError, OSError):
            return False  # not known (Windows)
    start = _STARTED if _STARTED is not None and now[0] - _STARTED[0] <= 10 else now
    if now[0] - start[0] < 0.2:
        time.sleep(0.2 - (now[0] - start[0]))
        now = _cpu_times() or now
    elapsed, cores = now[0] - start[0], os.cpu_count() or 1
    used = (now[1] - start[1]) / max(1, now[2] - start[2]) * cores  # cores busy, on average
    others = used - (now[3] - start[3]) / max(elapsed, 1e-9)
    return others >= cores - 0.5


def _cpu_times() -> tuple[float, int, int, float] | None:
    """(now, busy and all CPU time of this machine in ticks, this process's CPU seconds), or
    None without ``/proc/stat``."""
    try:
        with open("/proc/stat") as f:
            ticks = [int(v) for v in f.readline().split()[1:9]]  # user nice system idle iowait irq softirq steal
    except (OSError, ValueError):
        return None
    return time.monotonic(), sum(ticks) - ticks[3] - ticks[4], sum(ticks), time.process_time()


_STARTED = _cpu_times()  # when this module was imported: a command's start


def cpu_name() -> str:
    """The CPU's model name (``Intel(R) Xeon(R) Processor``), which every benchmark names
    beside its figures."""
    for line in cpu_flags().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def cpu_flags() -> str:
    """The CPU's feature flags as Linux lists them (``avx512_bf16`` ...); empty elsewhere."""
    try:
        with open("/proc/cpuinfo") as f:
            return f.read()
    except OSError:
        return ""


def file_name(name: str, limit: int = 100) -> str:
    """``name`` as a file-name part valid on Linux, macOS and Windows, and in a URL: every
    character but letters, digits, ``.``, ``-`` and ``_`` becomes ``_``; no leading dot
    (hidden) or trailing dot; Windows' device names (``con``, ``nul``, ``com1``...) get a
    ``_`` suffix; at most ``limit`` characters. Names already valid are kept as they are.
    Accents are dropped (``modèle`` is ``modele``); a name with letters no ASCII letter
    stands for (``猫``, ``кот``) ends with 8 hex digits of its sha256, so that two such
    names never become one file name."""
    folded = unicodedata.normalize("NFKD", name)
    folded = "".join(c for c in folded if not unicodedata.combining(c))
    lost = any(ord(c) > 127 for c in folded)
    out = re.sub(r"[^\w.\-]", "_", folded, flags=re.ASCII)
    if lost:
        tag = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:8]
        out = f"{out.strip('_.')[:limit - 9] or 'model'}_{tag}"
    out = out.lstrip(".")[:limit].rstrip(".") or "model"
    first, dot, rest = out.partition(".")
    if first.lower() in _WINDOWS_DEVICES:  # Windows reserves them with any extension
        out = f"{first}_{dot}{rest}"
    return out


_WINDOWS_DEVICES = frozenset(
    ["con", "prn", "aux", "nul", "conin$", "conout$"]
    + [f"{d}{i}" for d in ("com", "lpt") for i in [*range(10), "¹", "²", "³"]]
)


# The collector's thresholds for a process that imports torch and ExecuTorch and lowers
# (``fewer_collections``): its youngest generation collected after 10,000 allocations, not 700.
COLLECTION_THRESHOLDS = (10_000, 10, 10)


def fewer_collections(freeze: bool = True) -> None:
    """The garbage collector of a process that lowers, tuned for it; ``freeze``: once its
    libraries are imported.

    Imports and lowerings build many small objects (modules, graph nodes, metadata, fake
    tensors), and at Python's default thresholds the collector ran often and walked them
    all: 1.2 s of the fork server's 5.9 s of imports (0.4 s at these thresholds), and
    2.8 s of a worker's ~24 s over three mobilenet_v3_small lowerings, each full
    collection walking every object torch and ExecuTorch made at import, which live as
    long as the process. Frozen (``gc.freeze``), those are never walked again, and a
    forked worker's pages of them stay shared with its fork server: 1.1 s. Cycles are
    still collected; only objects made before the freeze are left out."""
    import gc

    if freeze:
        gc.freeze()
    gc.set_threshold(*COLLECTION_THRESHOLDS)


_thaw = False  # something frozen may have become garbage since the last collect_job_garbage


def thaw_before_collecting() -> None:
    """Something that lived through a job was let go (``stages.memo`` dropping a kept
    program): frozen, its cycles would never be collected, so ``collect_job_garbage``
    looks at everything once more."""
    global _thaw
    _thaw = True


def collect_job_garbage() -> None:
    """A worker between two jobs: the last one's cycles collected, and what lives on
    (the programs ``stages.memo`` keeps, the modules a job imported) frozen, so the next
    collection walks only what the next job makes. Walking them after every job took
    0.1-0.24 s of a core each time, growing with what was kept (160,000-380,000 objects on
    mobilenet_v3_small's default run): the gaps between its jobs summed to 2.5-3.2 s,
    1.3-1.9 s frozen. When something frozen is let go (``thaw_before_collecting``) all is
    thawed first: a one-off walk of everything (~0.3 s, and a worker's pages of the fork
    server's objects, ~120 MB, become its own)."""
    import gc

    global _thaw
    if _thaw:
        gc.unfreeze()
        _thaw = False
    gc.collect()
    gc.freeze()


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """Numbers that end up in an artifact or the manifest (``--weights none``'s BatchNorm
    statistics, the eager references, calibration) are computed on one torch thread: a
    job's share of the cores changes with what runs beside it and where (2 alone, 1 beside
    another job or in a Ray task), and a reduction split across threads rounds otherwise
    (mobilenet_v3_small's BatchNorm statistics differed in the last bits, so did every .pte)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)

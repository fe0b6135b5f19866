"""Durable file writes: temporary file, fsync, rename. Nothing half-written under a final name."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import OutputError

if TYPE_CHECKING:
    from filelock import FileLock


RUN_ID_ENV = "PTEFORGE_RUN_ID"


@contextlib.contextmanager
def check_writable_tmp(directory: Path, probe_bytes: int = 4 << 20) -> Iterator[None]:
    """Map a failed write in pteforge's scratch space to one OutputError line.

    torch's serializers report a short write as ``RuntimeError: unexpected pos``;
    a probe write tells a full disk (or file-size limit) from any other error.
    """
    try:
        yield
    except OSError as exc:
        raise _output_error(Path(directory), exc) from None
    except RuntimeError:
        probe = Path(directory) / f".pteforge-probe-{os.getpid()}"
        try:
            with open(probe, "wb") as f:
                f.write(b"\0" * probe_bytes)
                f.flush()
                os.fsync(f.fileno())
        except OSError as exc:
            raise _output_error(Path(directory), exc) from None
        finally:
            with contextlib.suppress(OSError):
                probe.unlink()
        raise


def link_or_copy(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
    """``dst`` a hard link of ``src`` (files here are replaced by rename, never rewritten in
    place, so sharing an inode is safe), or a copy where the file system has no hard links."""
    try:
        os.link(src, dst)
    except OSError:
        import shutil

        shutil.copyfile(src, dst)


def remove_run_temporaries(out: Path, run_id: str) -> None:
    """Delete the temporary files a killed worker of this run left behind."""
    for tmp in Path(out).rglob(f".*.{run_id}.*.tmp"):
        with contextlib.suppress(OSError):
            tmp.unlink()


def write_atomic(path: Path, data: bytes | str) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the new one, never a mix."""
    path = Path(path)
    payload = data.encode() if isinstance(data, str) else data
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        run_id = os.environ.get(RUN_ID_ENV, "x")
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{run_id}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise _output_error(path, exc) from None
    try:
        if hasattr(os, "fchmod"):  # POSIX (Windows has it from Python 3.13, and ACLs instead of modes)
            os.fchmod(fd, 0o666 & ~_umask())  # as open() would: a web server serving --out can read it
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise _output_error(path, exc) from None


def keep(path: Path, data: bytes | str) -> bool:
    """``write_atomic`` for what is kept only to save time later (the cache directory's
    host facts, durations, label names, pattern operators): False when it cannot be
    written, for the caller to do without, instead of failing the run."""
    try:
        write_atomic(path, data)
    except OutputError:
        return False
    return True


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _fsync_dir(directory: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _output_error(path: Path, exc: OSError) -> OutputError:
    if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        return OutputError(f"no space left writing {path}", fix="free disk space or choose another --out")
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return OutputError(f"cannot write {path}: permission denied", fix="choose a writable --out directory")
    if exc.errno in (errno.ENOTDIR, errno.EEXIST):
        return OutputError(f"cannot write {path}: a parent is a file, not a directory", fix="choose another --out")
    return OutputError(f"cannot write {path}: {exc.strerror}", fix="check the --out directory")


WORK_DIR_ENV = "PTEFORGE_WORK_DIR"


def work_dir() -> str | None:
    """Where a run keeps its captures and other files of its own (``PTEFORGE_WORK_DIR``;
    None: the system's temporary directory), refused before any work when it cannot be."""
    value = os.environ.get(WORK_DIR_ENV)
    if not value:
        return None
    fix = f"point {WORK_DIR_ENV} at a writable directory (on several machines, one every node mounts), or unset it"
    if not Path(value).is_dir():
        raise OutputError(f"{WORK_DIR_ENV}={value} is not a directory", fix=fix)
    if not os.access(value, os.W_OK):
        raise OutputError(f"{WORK_DIR_ENV}={value} is not writable", fix=fix)
    return value


def check_output_dir(out: Path, create: bool = True) -> None:
    """Fail early, before any work, when ``out`` cannot hold results (made here unless not
    ``create``: then its nearest existing folder must be writable)."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise OutputError(f"--out {out} is a file, not a directory", fix="choose a directory for --out")
    if not create:
        nearest = next((p for p in (out, *out.absolute().parents) if p.exists()), out)
        if not nearest.is_dir():
            raise OutputError(f"--out {out}: {nearest} is a file, not a directory", fix="choose a directory for --out")
        if not os.access(nearest, os.W_OK):
            raise OutputError(f"--out {out} is not writable", fix="choose a writable --out directory")
        return
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _output_error(out, exc) from None
    if not os.access(out, os.W_OK):
        raise OutputError(f"--out {out} is not writable", fix="choose a writable --out directory")


# Where pteforge keeps what outlives a run (the artifact cache, downloads, locks).
CACHE_ENV = "PTEFORGE_CACHE_DIR"  # overrides the user cache directory (tests, CI)


def cache_root() -> Path:
    override = os.environ.get(CACHE_ENV)
    if override:
        return Path(override)
    import platformdirs

    return Path(platformdirs.user_cache_dir("pteforge", appauthor=False))


def path_lock(path: Path, timeout: float = 600) -> FileLock:
    """A file lock for ``path`` (a directory others may serve or sync), kept in the cache's
    ``locks/`` rather than beside it: processes on this machine that write ``path`` take
    turns, and no ``.lock`` file is left where a web server or an app's assets would pick it up."""
    from filelock import FileLock

    key = hashlib.sha256(str(Path(path).resolve()).encode()).hexdigest()[:16]
    locks = cache_root() / "locks"
    try:
        locks.mkdir(parents=True, exist_ok=True)
    except OSError:  # an unwritable cache (the run goes on without it): the machine's temporary directory
        import tempfile

        locks = Path(tempfile.gettempdir()) / "pteforge-locks"
        locks.mkdir(exist_ok=True)
    return FileLock(str(locks / f"{Path(path).name[:40] or 'root'}-{key}.lock"), timeout=timeout)


def unwritable() -> str | None:
    """Why the cache directory cannot be written to, as "DIR: reason"; None when it can."""
    root = cache_root()
    try:
        root.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=root, prefix=".writable-"):
            pass
    except OSError as exc:
        return f"{root}: {exc.strerror or exc}"
    return None


def link_unshared_or_copy(src: Path, dst: Path) -> None:
    """``dst`` a hard link of ``src`` when ``src`` is a regular file no other path links
    (``st_nlink == 1``: its inode belongs to its directory alone); a copy otherwise, or where
    the file system has no hard links. A link is never followed: ``src`` must be a file."""
    status = os.lstat(src)
    if not stat.S_ISREG(status.st_mode):
        raise OutputError(f"{src} is not a regular file", fix=f"move {src} away, then try again")
    if status.st_nlink == 1:
        try:
            os.link(src, dst, follow_symlinks=False)
            return
        except (OSError, NotImplementedError):  # no hard links here, or no linkat
            pass
    shutil.copyfile(src, dst, follow_symlinks=False)


def differs(path: Path, size: int | None, sha256: str | None) -> str | None:
    """Why the file at ``path`` is not the one a manifest lists with ``size`` and ``sha256``
    (missing, another size, another content), or None when it is (what is not listed is not
    compared). A file changed after its export is not the program that was proven."""
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):  # never opened: a FIFO would hang the read
            return "is not a regular file"
        if size is not None and info.st_size != size:
            return f"is {info.st_size:,} bytes, not the {size:,} its manifest entry lists"
        if sha256 is not None:
            h = hashlib.sha256()
            with open(path, "rb") as f:
                while chunk := f.read(1 << 20):
                    h.update(chunk)
            if h.hexdigest() != sha256:
                return "differs from its manifest entry (another sha256" + (", the same size)" if size else ")")
    except FileNotFoundError:
        return "is missing"
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    return None


def replace_durably(src: Path, dst: Path) -> None:
    """``os.replace(src, dst)``, then the directory of ``dst`` synced: the rename outlives a crash."""
    os.replace(src, dst)
    _fsync_dir(Path(dst).parent)


@contextlib.contextmanager
def directory_lock(directory: Path, timeout: float = 600) -> Iterator[None]:
    """Exclusive use of ``directory`` (which exists) among all processes of this machine,
    whatever their users, caches or the path they reach it by; no file is left in it.

    POSIX: ``flock`` on a descriptor of the directory itself (``O_RDONLY|O_DIRECTORY``).
    The kernel keys it on the directory's inode and drops it when its holder dies, SIGKILL
    included, so a killed writer leaves no stale lock to break by hand, and nothing appears
    in a tree a web server serves. Compare-and-swap instead (a generation number in one
    file, retried on conflict) orders one file's writes only: a writer that rebuilds
    several files from what they held, as ``publish`` rebuilds each version directory,
    would still lose another writer's entries. Cost: open, flock, unlock and close of a
    directory took 3 µs on Linux 6.x ext4, against ~0.4 s for a publish of one small model.

    Windows (no ``flock``), and file systems that refuse ``flock`` on a directory (NFS,
    whose client emulates it with byte-range locks a read-only descriptor cannot take):
    a lock file beside ``directory``, ``.<name>.pteforge-lock`` in its parent, outside the
    served tree; in the cache (``path_lock``) where that parent cannot be written.
    """
    fd = _flock_directory(Path(directory), timeout)
    if fd is None:
        with _sibling_lock(Path(directory), timeout):
            yield
        return
    try:
        yield
    finally:
        os.close(fd)  # closing the last descriptor releases the flock


def _flock_directory(directory: Path, timeout: float) -> int | None:
    """A descriptor of ``directory`` holding its exclusive flock; None where flock cannot be had."""
    try:
        import fcntl
    except ImportError:  # Windows
        return None

    try:
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError as exc:
        raise OutputError(f"cannot open {directory}: {exc.strerror}", fix=f"make {directory} a directory you can read") from None
    deadline = time.monotonic() + timeout
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() >= deadline:
                os.close(fd)
                raise _held(directory, timeout) from None
            time.sleep(0.05)
        except OSError:  # EBADF, ENOLCK, EOPNOTSUPP: this file system locks no directory
            os.close(fd)
            return None


def _sibling_lock(directory: Path, timeout: float) -> contextlib.AbstractContextManager[None]:
    """A lock file in ``directory``'s parent (outside the served tree), or in the cache."""
    from filelock import FileLock, Timeout

    place = directory.parent / f".{directory.name}.pteforge-lock"
    if place.is_symlink():
        raise OutputError(f"{place} is a symbolic link to {os.readlink(place)}: the lock of {directory} is never "
                          "taken through a link", fix=f"remove the link {place}, then try again")
    lock = FileLock(str(place), timeout=timeout) if os.access(directory.parent, os.W_OK) else path_lock(directory, timeout)

    @contextlib.contextmanager
    def held() -> Iterator[None]:
        try:
            lock.acquire()
        except Timeout:
            raise _held(directory, timeout) from None
        try:
            yield
        finally:
            lock.release()

    return held()


def _held(directory: Path, timeout: float) -> OutputError:
    return OutputError(f"another process has been writing {directory} for over {timeout:.0f} s",
                       fix="wait for it to finish (or end it), then try again")


def json_text(data, **kwargs) -> str:
    """``data`` as standard JSON: a NaN or an infinity (a max abs error of a program that
    gave NaN) is ``null``, not Python's ``NaN``, which JSON parsers (Dart's, browsers')
    refuse. ``kwargs`` as ``json.dumps`` takes them."""
    import json
    import math

    def finite(value):
        if isinstance(value, float):
            return value if math.isfinite(value) else None
        if isinstance(value, dict):
            return {k: finite(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [finite(v) for v in value]
        return value

    return json.dumps(finite(data), allow_nan=False, **kwargs)

"""Limits on what an untrusted file may make pteforge read, judged from its headers first.

A zip archive (a ``.pt2``, a TorchScript or ``torch.save`` file, an ``.npz`` sample) says
each member's uncompressed size in its central directory, and the readers (Python's
``zipfile``, torch's miniz) allocate that much before they inflate it; ONNX external data
says each tensor's length. These are checked against :class:`ArchiveLimits` before anything
is inflated or read, so a file of a few kilobytes cannot ask for terabytes.

The defaults, and why:

- 4 GiB a member: one tensor of a model meant for a device. A 128k-token embedding 4096
  wide in fp32, larger than any tensor of the 1-3B language models phones run, is 2 GiB.
- 8 GiB in all: a 2B-parameter model in fp32 or a 4B one in bf16, more than a phone gives
  one app.
- 10,000 members: ``torch.export.save`` writes one a weight plus about ten; a large
  language model has a few hundred weights. Each member costs a ``ZipInfo`` in memory.
- 1000:1 compression, for members over 1 MiB: deflate cannot do better than about 1032:1,
  so only data of one repeated byte (a zip bomb's) reaches it; ``torch.export.save``
  stores members uncompressed (1:1). Smaller members are not judged: they cannot inflate
  to much.

Raising them: ``PTEFORGE_ARCHIVE_LIMIT_GB=N`` lets each member and the whole archive
declare N GiB; ``PTEFORGE_ARCHIVE_MEMBERS`` and ``PTEFORGE_ARCHIVE_RATIO`` raise the other
two (:func:`limits_from_env`). A command-line flag may set them the same way.
"""

from __future__ import annotations

import math
import os
import zipfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from .errors import PteforgeError, UsageError

MiB = 1 << 20
GiB = 1 << 30

ENV_GB = "PTEFORGE_ARCHIVE_LIMIT_GB"
ENV_MEMBERS = "PTEFORGE_ARCHIVE_MEMBERS"
ENV_RATIO = "PTEFORGE_ARCHIVE_RATIO"


@dataclass(frozen=True)
class ArchiveLimits:
    """The most an archive (or an ONNX file's external data) may declare."""

    member_bytes: int = 4 * GiB  # uncompressed, one member (one external tensor)
    total_bytes: int = 8 * GiB  # uncompressed, all members together
    members: int = 10_000  # members (external tensors)
    ratio: float = 1000.0  # uncompressed / compressed, of one member ...
    ratio_from: int = MiB  # ... whose uncompressed size is over this


DEFAULT = ArchiveLimits()


@dataclass(frozen=True)
class Entry:
    """What a file says of one of its parts before it is read: its name, the bytes it
    will take once read, and the bytes it takes on disk where compressed (else None)."""

    name: str
    size: int
    stored: int | None = None


def limits_from_env(environ: dict[str, str] | None = None) -> ArchiveLimits:
    """:data:`DEFAULT`, raised (or lowered) by ``PTEFORGE_ARCHIVE_LIMIT_GB`` (both sizes, in
    GiB), ``PTEFORGE_ARCHIVE_MEMBERS`` and ``PTEFORGE_ARCHIVE_RATIO``. A value that is not a
    positive number is refused in one line naming the variable."""
    env = os.environ if environ is None else environ
    limits = DEFAULT
    if env.get(ENV_GB):
        size = int(_positive(env, ENV_GB) * GiB)
        limits = replace(limits, member_bytes=size, total_bytes=size)
    if env.get(ENV_MEMBERS):
        limits = replace(limits, members=int(_positive(env, ENV_MEMBERS)))
    if env.get(ENV_RATIO):
        limits = replace(limits, ratio=_positive(env, ENV_RATIO))
    return limits


def _positive(env: Mapping[str, str], name: str) -> float:
    text = env[name]
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise UsageError(f"{name}={text} is not a positive number",
                         fix=f"set {name} to a number, e.g. {name}=16, or unset it")
    return value


def size_text(n: float) -> str:
    """Bytes for a person: ``4 GiB``, ``1.5 MiB``, ``512 bytes``."""
    for unit, scale in (("GiB", GiB), ("MiB", MiB), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.4g} {unit}"
    return f"{int(n)} bytes"


def check_entries(path: Path | str, entries: Iterable[Entry], limits: ArchiveLimits | None = None,
                  error: type[PteforgeError] = UsageError, part: str = "member") -> None:
    """Refuse, in one line naming the file, the part and the limit (and the variable that
    raises it), a file whose parts are too many, too large, alone or together, or
    compressed beyond the ratio a real file reaches. Nothing is read but ``entries``."""
    limits = limits or limits_from_env()
    entries = list(entries)
    _check_count(path, len(entries), limits, error, part)
    for entry in entries:
        if entry.size > limits.member_bytes:
            raise error(f"'{path}': {part} '{entry.name}' declares {size_text(entry.size)}, over the limit of "
                        f"{size_text(limits.member_bytes)} per {part}", fix=_raise_gb(entry.size))
        ratio = entry.size / max(entry.stored, 1) if entry.stored is not None else 0.0
        if entry.stored is not None and entry.size > limits.ratio_from and ratio > limits.ratio:
            raise error(f"'{path}': {part} '{entry.name}' inflates {ratio:.0f}:1 ({size_text(entry.size)} from "
                        f"{size_text(entry.stored)}), beyond the limit of {limits.ratio:g}:1 for {part}s over "
                        f"{size_text(limits.ratio_from)}",
                        fix=f"if you trust this file, set {ENV_RATIO}={math.ceil(ratio)} and run again")
    total = sum(entry.size for entry in entries)
    if total > limits.total_bytes:
        raise error(f"'{path}': its {len(entries)} {part}s declare {size_text(total)} in all, over the limit of "
                    f"{size_text(limits.total_bytes)}", fix=_raise_gb(total))


def _check_count(path: Path | str, count: int, limits: ArchiveLimits, error: type[PteforgeError],
                 part: str = "member") -> None:
    if count > limits.members:
        raise error(f"'{path}' holds {count} {part}s, over the limit of {limits.members}",
                    fix=f"if you trust this file, set {ENV_MEMBERS}={count} and run again")


def _raise_gb(needed: int) -> str:
    gb = max(1, math.ceil(needed / GiB))
    return f"if you trust this file, run again with --archive-limit-gb {gb} (or {ENV_GB}={gb})"


def check_archive(path: Path | str, limits: ArchiveLimits | None = None,
                  error: type[PteforgeError] = UsageError) -> list[zipfile.ZipInfo]:
    """The members of zip archive ``path``, read from its central directory alone, once
    :func:`check_entries` has passed them; a file that is not a zip archive raises
    ``zipfile.BadZipFile`` (the caller says what it expected instead)."""
    limits = limits or limits_from_env()
    count = _declared_count(path)
    if count is not None and count > limits.members:  # before a ZipInfo is made for each
        _check_count(path, count, limits, error)
    with zipfile.ZipFile(path) as archive:
        members = archive.infolist()
    # a stored member's two sizes are equal (1:1); one that says otherwise is judged as compressed
    check_entries(path, (Entry(m.filename, m.file_size, m.compress_size) for m in members), limits, error)
    return members


def _declared_count(path: Path | str) -> int | None:
    """The member count a zip archive's end record declares, or None where it cannot be read
    here (``zipfile`` then reads and judges the directory itself)."""
    try:
        with open(path, "rb") as f:
            end = getattr(zipfile, "_EndRecData")(f)  # private (no stub), unchanged since Python 2.6
        return int(end[getattr(zipfile, "_ECD_ENTRIES_TOTAL")]) if end else None
    except (AttributeError, IndexError, OSError, TypeError, ValueError):
        return None


def read_text_file(path: Path, what: str) -> str:
    """The text of ``path`` (UTF-8, a byte order mark dropped). A file that is missing or
    is not UTF-8 is refused in one line naming ``what`` (``--labels-file``), the file and,
    for bad text, the first byte and line that are not UTF-8."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"{what} {path}: cannot be read ({exc.strerror or type(exc).__name__})",
                         fix="give the path of a readable text file") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise UsageError(f"{what} {path} is not UTF-8 text (byte 0x{data[exc.start]:02x} at line {line})",
                         fix="save it as UTF-8, e.g. iconv -f LATIN1 -t UTF-8 old.txt > new.txt") from None

"""Numbers as people read them, the same in every report: sizes in MB (10^6 bytes, as app
stores and Finder count them; the manifest's ``sizeMB`` too) and percentages that never
round a part up to the whole (99.57 % delegated is not "100 %") nor a little down to nothing."""

from __future__ import annotations

import math


def listed(names, at_most: int) -> str:
    """The first ``at_most`` of ``names``, comma-separated, and how many more: ``a, b and 3 more``."""
    names = list(names)
    return ", ".join(names[:at_most]) + (f" and {len(names) - at_most} more" if len(names) > at_most else "")


def counted(n: int, noun: str) -> str:
    """``1 real image``, ``16 real images``."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def size_text(size: int) -> str:
    return f"{size / 1e6:.2f} MB" if size >= 1e6 else f"{size / 1e3:.1f} kB"


def size_mb(size: int) -> float:
    """The manifest's ``sizeMB``: MB of 10^6 bytes, to 0.01."""
    return round(size / 1e6, 2)


def pct(fraction: float) -> str:
    """``fraction`` (0..1) as a percentage's digits, without the sign: whole numbers, with one
    decimal (cut, not rounded) where rounding would make a part 100 or a little 0."""
    value = fraction * 100
    whole = f"{value:.0f}"
    if whole == "100" and value < 100:
        return f"{math.floor(value * 10) / 10:.1f}"  # 99.96 -> 99.9
    if whole == "0" and value > 0:
        return f"{math.floor(value * 10) / 10:.1f}" if value >= 0.1 else "<0.1"
    return whole


def below(value: float, bound: float, digits: int) -> str:
    """``value`` with ``digits`` decimals as it reads under ``bound``: rounded, or cut with more
    decimals where rounding would reach it ("98.7 % < 99 %", not "99 % < 99 %")."""
    text = f"{value:.{digits}f}"
    for more in range(digits + 1, digits + 4):
        if float(text) < bound:
            break
        text = f"{math.floor(value * 10**more) / 10**more:.{more}f}"
    return text


def pct_below(fraction: float, bound: float) -> str:
    """``pct`` of a fraction under ``bound`` (0..1), as it reads under it."""
    text = pct(fraction)
    return text if text.startswith("<") or float(text) < bound * 100 else below(fraction * 100, bound * 100, 1)


EXACT_DB = 200.0  # an SQNR stored for outputs identical to the reference's: no noise, no finite SQNR


def db_text(value: float) -> str:
    """An SQNR as read: ``37.8 dB``, or ``identical`` where the outputs had no noise at all
    (stored as EXACT_DB, which is a cap, not a measurement)."""
    return "identical" if value >= EXACT_DB else f"{round(value, 1) + 0.0:.1f} dB"  # + 0.0: never "-0.0"


def sqnr_text(value: float) -> str:
    """``SQNR 37.8 dB``, or ``identical outputs`` where there was no noise to measure."""
    return "identical outputs" if value >= EXACT_DB else f"SQNR {db_text(value)}"

"""What the Markdown and the HTML reports both show of a manifest: rows per model, status
words, the figures' formats, the recommendation per platform."""

from __future__ import annotations

from typing import Any

from ..core.errors import message_line
from ..core.fallback import host_platform
from ..core.result import Stage, estimate_text
from ..core.units import db_text
from ..core.units import pct as pct_digits
from ..core.units import size_text  # noqa: F401 - the reports' size format
from .manifest import Manifest

STAGES = tuple(s.value for s in Stage if s.plotted)  # the export-time plot's segments

# What a status means when the row carries no reason of its own.
STATUS_NOTE = {
    "VERIFIED": "ran on this host and matched eager PyTorch",
    "SIMULATED": "ran on the target's reference simulator and matched eager PyTorch",
    "NOT_RUNNABLE_HERE": "exported; needs a device to run",
    "NOT_VERIFIED": "exported; not checked (--no-verify)",
    "OUT_OF_BUDGET": "ran and matched, but misses its accuracy budget: not proven, not offered to the app",
}


def status_kind(status: str) -> str:
    """ok (proven here), sim (proven on a reference simulator), budget (ran, matched, below its
    accuracy budget: not proven), device (exported, needs a device), unchecked, or fail."""
    return {"VERIFIED": "ok", "SIMULATED": "sim", "OUT_OF_BUDGET": "budget", "NOT_RUNNABLE_HERE": "device",
            "NOT_VERIFIED": "unchecked"}.get(status, "fail")


def status_why(status: str, reason, entry) -> str:
    """A row's why: its reason, else what ran a simulated one (verification.method), else
    what its status means; with its compiler's estimates where it has them."""
    method = ((entry.verification or {}).get("method") if entry is not None else None) if status == "SIMULATED" else None
    text = one_line(reason) or method or STATUS_NOTE.get(status, "")
    if entry is not None and entry.estimates:
        text += f"; {estimate_text(entry.estimates)}"
    note = ((entry.quantization or {}).get("calibration") or {}).get("note") if entry is not None else None
    return f"{text}; {note}" if note and text else note or text


def one_line(text) -> str:
    """A reason on one line (see :func:`pteforge.core.errors.message_line`)."""
    return message_line(text) if text else ""


def p50(e) -> float | None:
    """The measured p50 (ms, after warm-up) of an entry, or None: the only latency shown."""
    v = (e.bench or {}).get("p50_ms")
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def ms_text(v: float) -> str:
    return f"{v:.0f} ms" if v >= 100 else f"{v:.3g} ms"


def pct(v) -> str:
    """A fraction as "NN%" (never rounded up to 100 %: ``units.pct``); blank for no number."""
    return f"{pct_digits(v)}%" if isinstance(v, (int, float)) else ""


def _db(v) -> str:
    return db_text(v) if isinstance(v, (int, float)) else ""


def export_seconds(e) -> float:
    """The time the row's export took: for a row restored from the cache, the export that
    made it (``export_time`` says so), not the copy's milliseconds."""
    if e.cache and isinstance(e.cache.get("original_seconds"), (int, float)):
        return round(float(e.cache["original_seconds"]), 2)
    return round(sum(v for k, v in e.timings.items()), 2)


def export_time(e) -> str:
    """``export_seconds`` in words: "12.3 s", or "12.3 s (from the cache)"."""
    return f"{export_seconds(e):.1f} s" + (" (from the cache)" if e.cache else "")


def model_names(man: Manifest, failures: list[dict]) -> list[str]:
    names = [e.base_model for e in man.artifacts()] + [f["model"] for f in failures if f.get("model") != "*"]
    return list(dict.fromkeys(names)) or (["*"] if failures else [])


def rows_for(man: Manifest, failures: list[dict], model: str) -> list[dict]:
    """Every target of ``model``: manifest entries, kept failures, then the last run's
    failures with no artifact and the targets unavailable here (model "*")."""
    rows: list[dict[str, Any]] = [{"target": e.target, "status": e.status, "reason": e.reason, "entry": e}
            for e in man.artifacts() if e.base_model == model]
    seen = {r["target"]: r for r in rows}
    for f in failures:
        if f.get("model") not in (model, "*"):
            continue
        known = seen.get(f.get("target"))
        if known is not None and known["status"] == f.get("status"):  # the artifact's own row
            known["reason"] = known["reason"] or f.get("reason")
            continue
        reason = f.get("reason") if known is None else f"last run: {one_line(f.get('reason'))}"
        seen[f.get("target")] = row = {"target": f.get("target", "?"), "status": f.get("status", "?"),
                                       "reason": reason, "entry": None}
        rows.append(row)
    for r in rows:
        r["reason"] = status_why(r["status"], r["reason"], r["entry"])
    return rows


def recommendation(man: Manifest, model: str, platform: str | None = None):
    """The first artifact in ``platform``'s fallback order that VERIFIED here, or None."""
    by_name = {e.name: e for e in man.models}
    for name in man.fallback.get(model, {}).get(platform or host_platform(), []):
        e = by_name.get(name)
        if e is not None and e.status == "VERIFIED":
            return e
    return None


def per_image(e) -> list[dict]:
    images = ((e.verification or {}).get("images") or {})
    return [r for r in images.get("per_image") or [] if isinstance(r, dict)]

"""Per-run reports from measured data: EXPORT_SUMMARY.md, report.json, report.html.

Every latency shown is a p50 measured after warm-up in the child process that runs
artifacts (the entry's ``bench``); an artifact without one shows none. The helpers
here are shared by the Markdown and the HTML (:mod:`.html`).
"""

from __future__ import annotations

import json
from pathlib import Path

from ..io import write_atomic
from ..result import Stage, inputs_text
from ..platforms import host_platform
from ..units import pct as pct_digits
from ..units import size_text
from .manifest import Manifest

STAGES = tuple(s.value for s in Stage if s.plotted)  # the export-time plot's segments

# What a status means when the row carries no reason of its own.
STATUS_NOTE = {
    "VERIFIED": "ran on this host and matched eager PyTorch",
    "SIMULATED": "ran on the target's reference simulator and matched eager PyTorch",
    "NOT_RUNNABLE_HERE": "exported; needs a device to run",
    "NOT_VERIFIED": "exported; not checked (--no-verify)",
}


def status_kind(status: str) -> str:
    """ok (proven here), sim (proven on a reference simulator), device (exported, needs a
    device), unchecked, or fail."""
    return {"VERIFIED": "ok", "SIMULATED": "sim", "NOT_RUNNABLE_HERE": "device",
            "NOT_VERIFIED": "unchecked"}.get(status, "fail")


def status_why(status: str, reason, entry) -> str:
    """A row's why: its reason, else what ran a simulated one (verification.method), else
    what its status means; with its compiler's estimates where it has them."""
    from ..result import estimate_text

    method = ((entry.verification or {}).get("method") if entry is not None else None) if status == "SIMULATED" else None
    text = one_line(reason) or method or STATUS_NOTE.get(status, "")
    if entry is not None and entry.estimates:
        text += f"; {estimate_text(entry.estimates)}"
    return text


def one_line(text) -> str:
    """A reason on one line (see :func:`pteforge.errors.message_line`)."""
    from ..errors import message_line

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
    return f"{v:.1f} dB" if isinstance(v, (int, float)) else ""


def export_seconds(e) -> float:
    return round(sum(v for k, v in e.timings.items()), 2)


def model_names(man: Manifest, failures: list[dict]) -> list[str]:
    names = [e.base_model for e in man.artifacts()] + [f["model"] for f in failures if f.get("model") != "*"]
    return list(dict.fromkeys(names)) or (["*"] if failures else [])


def rows_for(man: Manifest, failures: list[dict], model: str) -> list[dict]:
    """Every target of ``model``: manifest entries, kept failures, then the last run's
    failures with no artifact and the targets unavailable here (model "*")."""
    rows = [{"target": e.target, "status": e.status, "reason": e.reason, "entry": e}
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


def _md(text) -> str:
    return str(text if text is not None else "").replace("|", "\\|").replace("\n", " ")


def markdown(man: Manifest, failures: list[dict]) -> str:
    models = list(dict.fromkeys(e.base_model for e in man.models))
    targets = list(dict.fromkeys(e.target for e in man.models))
    cell = {(e.base_model, e.target): e for e in man.models}
    lines = ["# Export summary", "", f"Generated {man.generated}. Every number below was measured in the run that produced "
             "the artifact; latencies are p50s measured after warm-up in the child process that runs artifacts.", ""]
    from ..result import proof_counts

    lines += ["## Artifacts", "", f"Of {len(man.models)}: {proof_counts(man.models)}.", "",
              "| model | target | precision | status | why | size | delegated | export time | p50 (ms, after warm-up) |",
              "|---|---|---|---|---|---|---|---|---|"]
    for e in man.models:
        v = p50(e)
        why = _md(status_why(e.status, e.reason, e))
        lines.append(f"| {e.base_model} | {e.target} | {e.precision} | {e.status} | {why} | {size_text(e.size)} | "
                     f"{pct_digits(e.delegation.get('percent', 0) / 100)} % | {export_seconds(e):.1f} s | {ms_text(v) if v is not None else ''} |")
    for title, fn in (("Export time (seconds, measured)", lambda e: f"{export_seconds(e):.1f} s"),
                      ("File size (measured)", lambda e: size_text(e.size))):
        lines += ["", f"## {title}", "", "| model | " + " | ".join(targets) + " |", "|---" * (len(targets) + 1) + "|"]
        for m in models:
            lines.append(f"| {m} | " + " | ".join(fn(cell[(m, t)]) if (m, t) in cell else "—" for t in targets) + " |")
    lines += io_lines(man) + precision_lines(man) + fallback_lines(man) + numerics_lines(man)
    failed = [(m, r) for m in model_names(man, failures) for r in rows_for(man, failures, m) if status_kind(r["status"]) == "fail"]
    if failed:
        lines += ["", "## Failed or unavailable", "", "| model | target | status | reason |", "|---|---|---|---|"]
        lines += [f"| {m} | {r['target']} | {r['status']} | {_md(r['reason'])} |" for m, r in failed]
    return "\n".join(lines) + "\n"


def io_lines(man: Manifest) -> list[str]:
    """Per model, what its programs take and return (the manifest's ``inputs`` and
    ``outputs``), once for the targets whose programs agree."""
    rows: dict[tuple, list[str]] = {}
    for e in man.models:
        if e.inputs is not None and e.outputs is not None:
            key = (e.base_model, _values(e.inputs), _values(e.outputs))
            rows.setdefault(key, []).append(e.target)
    if not rows:
        return []
    lines = _section("Inputs and outputs", "What each program takes and returns, in order (the manifest's `inputs` "
                     "and `outputs`); `≤` marks a dynamic size, at its largest.", "model", "targets", "inputs", "outputs")
    for (model, inputs, outputs), targets in rows.items():
        lines.append(f"| {model} | {', '.join(targets)} | {_md(inputs)} | {_md(outputs)} |")
    return lines


def _section(title: str, note: str, *columns: str) -> list[str]:
    """A section's heading, its note and its table's header."""
    return ["", f"## {title}", "", note, "", "| " + " | ".join(columns) + " |", "|---" * len(columns) + "|"]


def _values(values: list[dict]) -> str:
    def one(v: dict) -> str:
        if "shape" not in v:
            return f"{v['name']}: {v.get('type', '?')}"
        shape = ", ".join(str(d) for d in v["shape"])
        return f"{v['name']}: {v.get('dtype', '?')}[{'≤' if v.get('dynamic') else ''}{shape}]"

    return "; ".join(one(v) for v in values)


def fallback_lines(man: Manifest) -> list[str]:
    """Per model and platform, the order an app should try the artifacts; this host's pick."""
    if not man.fallback:
        return []
    host = host_platform()
    status = {e.name: e.status for e in man.models}
    lines = _section("Load order per platform", f"The order an app should try the artifacts (the manifest's `fallback`). "
                     f"This host is `{host}`: it recommends the first artifact that was verified here.",
                     "model", "platform", "try in order", "this host")
    for model, platforms in man.fallback.items():
        for platform, names in platforms.items():
            order = " → ".join(f"{n} ({status.get(n, '?')})" for n in names) or "no artifact serves it"
            pick = ""
            if platform == host:
                rec = recommendation(man, model, host)
                pick = f"**{rec.name}**" if rec else "none verified here"
            lines.append(f"| {model} | {platform} | {order} | {pick} |")
    return lines


def numerics_lines(man: Manifest) -> list[str]:
    """Per artifact, the metric against eager on the seeded inputs and on each photo."""
    checked = [e for e in man.artifacts() if e.verification]
    if not checked:
        return []
    lines = _section("Numerics against eager PyTorch", "Pass or fail is judged on the seeded inputs (worst SQNR against "
                     "the threshold); the photos are shown against the same threshold.",
                     "artifact", "computed in", "input", "SQNR", "cosine", "top-1", "threshold")
    for e in checked:
        v = e.verification
        thr, rt = _db(v.get("threshold_sqnr_db")), v.get("runtime_precision") or e.precision
        lines.append(f"| {e.name} | {rt} | {_md(inputs_text(v))} (worst) | {_db(v.get('sqnr_db'))} | "
                     f"{_cos(v.get('cosine'))} | {pct(v.get('top1_agreement'))} | {thr} |")
        for r in per_image(e):
            lines.append(f"| {e.name} | {rt} | {_md(r.get('name', '?'))} | {_db(r.get('sqnr_db'))} | {_cos(r.get('cosine'))} | "
                         f"{_match(r.get('top1_match'))} | {thr} |")
    return lines


def _cos(v) -> str:
    return f"{v:.6f}" if isinstance(v, (int, float)) else ""


def _match(v) -> str:
    return "" if v is None else ("same" if v else "differs")


def precision_lines(man: Manifest) -> list[str]:
    """Reduced precisions against their fp32 artifact, and --precision auto's choices."""
    lines: list[str] = []
    reduced = [e for e in man.models if e.relative]
    if reduced:
        lines += ["", "## Reduced precision vs fp32 (measured)", "",
                  "Size and latency relative to the fp32 artifact of the same chain; agreement with fp32 eager "
                  "on the seeded inputs (SQNR) and on the validation photos (SQNR, cosine, top-1).", "",
                  "| model | target | vs | size | latency | SQNR | photos SQNR | photos cosine | photos top-1 |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for e in reduced:
            r, v = e.relative, e.verification or {}
            im = v.get("images") or {}
            lat = f"{r['latency']:.2f}× ({r['p50_ms']:.2f} vs {r['fp32_p50_ms']:.2f} ms)" if "latency" in r else "needs a device"
            lat += " **slower than fp32**" if r.get("latency", 0) > 1.0 else ""
            top1 = pct(im.get("top1_agreement"))
            lines.append(f"| {e.base_model} | {e.target} | {r['fp32']} | {r['size']:.2f}× | {lat} | "
                         f"{_db(v.get('sqnr_db'))} | {_db(im.get('sqnr_db'))} | {im.get('cosine', '')} | {top1} |")
    for c in man.precisionChoices:
        lines += ["", f"## Precision auto: {c['model']} on {c['backend']}", "",
                  f"Budget: {c['budget']}. Winner: **{c.get('winner') or 'none'}** — {c.get('why', '')}", "",
                  "| target | status | size | p50 (after warm-up) | photos top-1 | photos SQNR | within budget |", "|---|---|---|---|---|---|---|"]
        for t in c["tried"]:
            t50 = ms_text(t["p50_ms"]) if isinstance(t.get("p50_ms"), (int, float)) else ""
            top1 = pct(t.get("top1_agreement"))
            size = size_text(t["size"]) if t.get("size") else ""
            lines.append(f"| {t['target']} | {t['status']} | {size} | {t50} | {top1} | {_db(t.get('sqnr_db'))} | "
                         f"{'yes' if t['within_budget'] else 'no: ' + t['note']} |")
    return lines


def html_report(man: Manifest, failures: list[dict] | None = None, validation: dict | None = None) -> str:
    from .html import html_report as render

    return render(man, failures or [], validation)


def last_run_failures(out: Path) -> list[dict]:
    """The failures the last export recorded in ``report.json`` (kept when reports are rewritten)."""
    try:
        return list(json.loads((Path(out) / "report.json").read_text()).get("last_run_failures", []))
    except (OSError, ValueError, AttributeError):
        return []


VALIDATION_NAME = "validation_report.json"


def _validation(path: Path) -> dict | None:
    try:
        data = json.loads(Path(path).read_text())
        return data if isinstance(data, dict) and isinstance(data.get("files"), list) else None
    except (OSError, ValueError):
        return None


def write_reports(out: Path, man: Manifest, failures: list[dict]) -> list[Path]:
    paths = [Path(out) / "EXPORT_SUMMARY.md", Path(out) / "report.json", Path(out) / "report.html"]
    write_atomic(paths[0], markdown(man, failures))
    write_atomic(paths[1], json.dumps({"manifest": json.loads(man.model_dump_json()), "last_run_failures": failures}, indent=2) + "\n")
    write_atomic(paths[2], html_report(man, failures, _validation(Path(out) / VALIDATION_NAME)))
    return paths


def rewrite_html(out: Path, validation: Path) -> bool:
    """report.html of the export in ``out`` again, with the validation report at
    ``validation`` (and its drawings); False when ``out`` holds no manifest."""
    from .manifest import MANIFEST_NAME, load_manifest

    man = load_manifest(Path(out) / MANIFEST_NAME)
    if man is None:
        return False
    found = _validation(validation)
    if found is not None:
        found["_relative_to"] = str(Path(out).resolve())
    write_atomic(Path(out) / "report.html", html_report(man, last_run_failures(out), found))
    return True

"""The Markdown report's sections (EXPORT_SUMMARY.md), each a function of the manifest and
the run's failures; :mod:`.sections` lists them beside the HTML ones."""

from __future__ import annotations

from ..core.fallback import host_platform
from ..core.result import inputs_text, proof_counts
from ..core.units import pct as pct_digits
from ..core.units import size_text
from .manifest import Manifest
from .rows import (
    _db,
    export_time,
    model_names,
    ms_text,
    p50,
    pct,
    per_image,
    recommendation,
    rows_for,
    status_kind,
    status_why,
)


def _md(text) -> str:
    return str(text if text is not None else "").replace("|", "\\|").replace("\n", " ")


def header_lines(man: Manifest, failures: list[dict]) -> list[str]:
    return ["# Export summary", "", f"Generated {man.generated}. Every number below was measured in the run that produced "
            "the artifact; latencies are p50s measured after warm-up in the child process that runs artifacts.", ""]


def artifact_lines(man: Manifest, failures: list[dict]) -> list[str]:
    written = [*man.models, *man.outOfBudget, *man.notForApp]
    offered = {e.name for e in man.models}
    lines = ["## Artifacts", "", f"Of {len(written)}: {proof_counts(written)}; {len(offered)} offered to the app.", "",
             "| model | target | precision | status | why | in the app | size | delegated | export time | "
             "p50 (ms, after warm-up) |", "|---|---|---|---|---|---|---|---|---|---|"]
    for e in written:
        v = p50(e)
        why = _md(status_why(e.status, e.reason, e))
        app = ", ".join(e.platforms) if e.name in offered else "no: below its budget" if e.platforms else \
            "no: loaded on no platform"
        lines.append(f"| {e.base_model} | {e.target} | {e.precision} | {e.status} | {why} | {app} | {size_text(e.size)} | "
                     f"{pct_digits(e.delegation.get('percent', 0) / 100)} % | {export_time(e)} | {ms_text(v) if v is not None else ''} |")
    return lines


def measured_lines(man: Manifest, failures: list[dict]) -> list[str]:
    """Export time and file size, model by target."""
    models = list(dict.fromkeys(e.base_model for e in man.models))
    targets = list(dict.fromkeys(e.target for e in man.models))
    cell = {(e.base_model, e.target): e for e in man.models}
    lines: list[str] = []
    for title, fn in (("Export time (seconds, measured)", export_time),
                      ("File size (measured)", lambda e: size_text(e.size))):
        lines += ["", f"## {title}", "", "| model | " + " | ".join(targets) + " |", "|---" * (len(targets) + 1) + "|"]
        for m in models:
            lines.append(f"| {m} | " + " | ".join(fn(cell[(m, t)]) if (m, t) in cell else "—" for t in targets) + " |")
    return lines


def failed_lines(man: Manifest, failures: list[dict]) -> list[str]:
    failed = [(m, r) for m in model_names(man, failures) for r in rows_for(man, failures, m) if status_kind(r["status"]) == "fail"]
    if not failed:
        return []
    return ["", "## Failed or unavailable", "", "| model | target | status | reason |", "|---|---|---|---|",
            *(f"| {m} | {r['target']} | {r['status']} | {_md(r['reason'])} |" for m, r in failed)]


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
        v = e.verification or {}  # checked: each has one
        thr, rt = _db(v.get("threshold_sqnr_db")), v.get("runtime_precision") or e.precision
        lines.append(f"| {e.name} | {rt} | {_md(inputs_text(v))} (worst) | {_db(v.get('sqnr_db'))} | "
                     f"{_cos(v.get('cosine'))} | {pct(v.get('top1_agreement'))} | {thr} |")
        for r in per_image(e):
            lines.append(f"| {e.name} | {rt} | {_md(r.get('name', '?'))} | {_db(r.get('sqnr_db'))} | {_cos(r.get('cosine'))} | "
                         f"{_match(r.get('top1_match'))} | {thr} |")
        a = e.arm64 or {}
        if a.get("sqnr_db") is not None or a.get("status") in ("MISMATCH", "RUN_FAILED", "LOAD_FAILED"):
            lines.append(f"| {e.name} | {rt}, on Arm64 under emulation: {a['status']} | {a.get('inputs', '?')} seeded inputs"
                         f"{' and the photos' if a.get('images') else ''} (worst) | {_db(a.get('sqnr_db'))} | "
                         f"{_cos(a.get('cosine'))} | {pct(a.get('top1_agreement'))} | {_db(a.get('threshold_sqnr_db'))} |")
    return lines


def _cos(v) -> str:
    return f"{v:.6f}" if isinstance(v, (int, float)) else ""


def _match(v) -> str:
    return "" if v is None else ("same" if v else "differs")


def precision_lines(man: Manifest) -> list[str]:
    """Reduced precisions against their fp32 artifact, and --precision auto's choices."""
    lines: list[str] = []
    # the rows held back for their accuracy budget too: their size and speed were measured all the same
    reduced = [(e, "") for e in man.models if e.relative] + \
        [(e, " (out of its budget: not offered)") for e in man.outOfBudget if e.relative]
    if reduced:
        lines += ["", "## Reduced precision vs fp32 (measured)", "",
                  "Size relative to the fp32 artifact of the same chain (where one was lowered: it runs here, and "
                  "latency is measured against it) or to the model's weights at fp32; agreement with fp32 eager "
                  "on the seeded inputs (SQNR) and on the validation photos (SQNR, cosine, top-1).", "",
                  "| model | target | vs | size | latency | SQNR | photos SQNR | photos cosine | photos top-1 |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for e, held in reduced:
            r, v = e.relative or {}, e.verification or {}  # reduced: each has its relative
            im = v.get("images") or {}
            lat = f"{r['latency']:.2f}× ({r['p50_ms']:.2f} vs {r['fp32_p50_ms']:.2f} ms)" if "latency" in r else "needs a device"
            lat += " **slower than fp32**" if r.get("latency", 0) > 1.0 else ""
            top1 = pct(im.get("top1_agreement"))
            vs = r.get("fp32") or f"its weights at fp32 ({size_text(r.get('fp32_weights_bytes', 0))})"
            lines.append(f"| {e.base_model} | {e.target}{held} | {vs} | {r['size']:.2f}× | {lat} | "
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

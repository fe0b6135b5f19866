"""report.html: one self-contained page (inline CSS, inline SVG, no network), printable.

Sections, in order: ``#matrix`` (per model, every target with its status and one-line
reason, precision, size, delegated share, SQNR against eager, agreement on the photos
and the measured p50), ``#fallback`` (per platform, the order an app should try the
artifacts and the one this host recommends), ``#numerics`` (per artifact, the metric
against eager on the seeded inputs and on each photo, and the threshold it was judged
by) and ``#plots`` (size, p50 latency, delegated share, export time per stage).
Every latency is a p50 measured after warm-up; an artifact without one shows none.
"""

from __future__ import annotations

import html
import re

from ..core.fallback import host_platform
from ..core.result import inputs_text
from ..core.spec import AccuracyBudget
from ..core.units import pct as pct_digits
from .manifest import Manifest
from .rows import (
    STAGES,
    _db,
    export_seconds,
    model_names,
    ms_text,
    one_line,
    p50,
    pct,
    per_image,
    recommendation,
    rows_for,
    size_text,
    status_kind,
)


def _e(text) -> str:
    return html.escape(str(text if text is not None else ""))


def _anchor(name: str) -> str:
    return "model-" + re.sub(r"[^A-Za-z0-9_-]", "-", name)


def _label(e) -> str:
    return f"{e.base_model} · {e.target}"


def _badge(status: str) -> str:
    return f'<span class="badge st-{status_kind(status)}">{_e(status)}</span>'


# ---------------------------------------------------------------------------- matrix

MATRIX_HEAD = ("target", "status", "precision", "size", "delegated", "SQNR vs eager", "on the photos", "p50 (after warm-up)")


def _precision_cell(e) -> str:
    computed = (e.verification or {}).get("runtime_precision")
    extra = f'<div class="sub">computed in {_e(computed)}</div>' if computed and computed != e.precision else ""
    return f"{_e(e.precision)}{extra}"


def _sqnr_cell(e) -> str:
    v = e.verification or {}
    if not isinstance(v.get("sqnr_db"), (int, float)):
        return "—"
    thr = v.get("threshold_sqnr_db")
    judged = ""
    if isinstance(thr, (int, float)):
        judged = f'<div class="sub">{"≥" if v["sqnr_db"] >= thr else "&lt;"} {_db(thr)} threshold</div>'
    top1 = f'<div class="sub">top-1 {pct(v["top1_agreement"])}</div>' if v.get("top1_agreement") is not None else ""
    return f"{_db(v['sqnr_db'])}{judged}{top1}"


def _photos_cell(e) -> str:
    im = (e.verification or {}).get("images") or {}
    if not im:
        return "—"
    worst = f"min {_db(im['sqnr_db'])}" if isinstance(im.get("sqnr_db"), (int, float)) else "—"
    top1 = f'<div class="sub">top-1 {pct(im["top1_agreement"])}</div>' if im.get("top1_agreement") is not None else ""
    if not top1 and im.get("agreement") is not None:
        top1 = f'<div class="sub">agreement {pct(im["agreement"])}</div>'
    count = im.get("images") or len(im.get("names") or [])
    return f'{_e(worst)}{top1}<div class="sub">{_e(count)} photo(s)</div>'


def _p50_cell(e) -> str:
    v = p50(e)
    bench = e.bench or {}
    if v is None:
        why = bench.get("skipped") or {"NOT_RUNNABLE_HERE": "not timed: runs only on a device",
                                       "SIMULATED": "not timed: a reference simulator times nothing"}.get(e.status, "not timed")
        return f'—<div class="sub">{_e(one_line(why))}</div>'
    runs = f'<div class="sub">{_e(bench["runs"])} runs</div>' if bench.get("runs") is not None else ""
    return f"{_e(ms_text(v))}{runs}"


def _matrix_row(row: dict) -> str:
    e, status = row["entry"], row["status"]
    head = (f'<td class="target">{_e(row["target"])}' + (f'<div class="sub file">{_e(e.name)}</div>' if e else "") + "</td>"
            f'<td class="status">{_badge(status)}<div class="why">{_e(row["reason"])}</div></td>')
    if e is None:
        cells = '<td colspan="6" class="none">no artifact</td>'
    else:
        cells = "".join(f'<td class="{cls}">{val}</td>' for cls, val in (
            ("", _precision_cell(e)), ("num", _e(size_text(e.size))),
            ("num", _e(f"{pct_digits(float(e.delegation.get('percent', 0.0)) / 100)} %")),
            ("num", _sqnr_cell(e)), ("num", _photos_cell(e)), ("num", _p50_cell(e))))
    name = f' data-name="{_e(e.name)}"' if e else ""
    return (f'<tr class="row st-{status_kind(status)}" data-target="{_e(row["target"])}" '
            f'data-status="{_e(status)}"{name}>{head}{cells}</tr>')


def _recommend_line(man: Manifest, model: str) -> str:
    host = host_platform()
    if model not in man.fallback:
        return ""
    rec = recommendation(man, model, host)
    pick = (f"load <b>{_e(rec.name)}</b> ({_e(rec.target)}, {_badge(rec.status)})" if rec
            else "<b>none verified here</b>")
    return f'<p class="recommend">This host ({_e(host)}) recommends: {pick}.</p>'


def matrix_section(man: Manifest, failures: list[dict]) -> str:
    parts = ['<section id="matrix"><h2>Artifacts per model</h2>',
             "<p>Each target, its status and why, and what was measured. "
             f'{_badge("VERIFIED")} ran on this host and matched eager PyTorch; {_badge("SIMULATED")} ran on the '
             "target's reference simulator (its why says what ran) and matched it too.</p>"]
    models = model_names(man, failures)
    if not models:
        parts.append("<p>No artifact in this manifest.</p>")
    for model in models:
        rows = rows_for(man, failures, model)
        parts.append(f'<h3 id="{_e(_anchor(model))}">{_e("every model" if model == "*" else model)}</h3>')
        parts.append(_recommend_line(man, model))
        parts.append(f'<table class="matrix" data-model="{_e(model)}"><thead><tr>'
                     + "".join(f"<th>{_e(h)}</th>" for h in MATRIX_HEAD) + "</tr></thead><tbody>"
                     + "".join(_matrix_row(r) for r in rows) + "</tbody></table>")
    parts.append("</section>")
    return "".join(parts)


# ---------------------------------------------------------------------------- fallback

def fallback_section(man: Manifest) -> str:
    host = host_platform()
    by_name = {e.name: e for e in man.models}
    parts = ['<section id="fallback"><h2>Which artifact to load, per platform</h2>',
             "<p>The order an app should try the artifacts (the manifest's <code>fallback</code>): the first that "
             f"loads wins. This host is <b>{_e(host)}</b>; it recommends the first artifact verified here. "
             f'{_badge("NOT_RUNNABLE_HERE")} means it needs a device.</p>']
    if not man.fallback:
        parts.append("<p>No fallback order in this manifest.</p>")
    for model, platforms in man.fallback.items():
        rec = recommendation(man, model, host)
        rows = []
        for platform, names in platforms.items():
            order = "".join(
                f'<li>{_e(n)} ({_e(by_name[n].target) if n in by_name else "?"}) '
                f'{_badge(by_name[n].status if n in by_name else "UNKNOWN")}</li>' for n in names)
            order = f"<ol>{order}</ol>" if order else "no artifact serves this platform"
            here = ""
            if platform == host:
                here = f"<b>{_e(rec.name)}</b>" if rec else "<b>none verified here</b>"
            cls = ' class="host"' if platform == host else ""
            rows.append(f'<tr data-platform="{_e(platform)}"{cls}>'
                        f"<td>{_e(platform)}</td><td>{order}</td><td>{here}</td></tr>")
        parts.append(f'<h3>{_e(model)}</h3><table class="fallback" data-model="{_e(model)}"><thead><tr>'
                     "<th>platform</th><th>try in this order</th><th>this host recommends</th></tr></thead>"
                     f"<tbody>{''.join(rows)}</tbody></table>")
    parts.append("</section>")
    return "".join(parts)


# ---------------------------------------------------------------------------- numerics

def _numerics_table(e) -> str:
    v = e.verification or {}
    thr = v.get("threshold_sqnr_db")
    worst = v.get("sqnr_db")
    verdict = ""
    if isinstance(thr, (int, float)) and isinstance(worst, (int, float)):
        verdict = "pass" if worst >= thr else "fail"
    caption = (f"{_e(e.name)} — {_e(e.target)}, {_e(e.precision)} computed in {_e(v.get('runtime_precision') or e.precision)}; "
               f"threshold {_e(_db(thr) or '?')} SQNR (judged on the seeded inputs: {_e(verdict or 'not judged')})")
    rows = [("seeded", f"{inputs_text(v)} (worst)", worst, v.get("cosine"),
             pct(v.get("top1_agreement")) if v.get("top1_agreement") is not None else "")]
    for r in per_image(e):
        match = r.get("top1_match")
        metric = "" if match is None else ("same" if match else "differs")
        if match is None and r.get("agreement") is not None:
            metric = pct(r["agreement"])
        rows.append(("photo", r.get("name", "?"), r.get("sqnr_db"), r.get("cosine"), metric))
    body = []
    for kind, name, sqnr, cos, top1 in rows:
        above = ""
        if isinstance(thr, (int, float)) and isinstance(sqnr, (int, float)):
            above = '<span class="good">≥ threshold</span>' if sqnr >= thr else '<span class="bad">below threshold</span>'
        body.append(f'<tr class="{kind}"><td>{_e(name)}</td><td class="num">{_e(_db(sqnr))}</td>'
                    f'<td class="num">{_e(f"{cos:.6f}" if isinstance(cos, (int, float)) else "")}</td>'
                    f"<td>{_e(top1)}</td><td>{above}</td></tr>")
    return (f'<table class="numerics st-{status_kind(e.status)}" data-name="{_e(e.name)}"><caption>{caption}</caption>'
            "<thead><tr><th>input</th><th>SQNR vs eager</th><th>cosine</th><th>agreement (top-1, boxes, keypoints, masks)</th>"
            f"<th>vs threshold</th></tr></thead><tbody>{''.join(body)}</tbody></table>")


def numerics_section(man: Manifest) -> str:
    checked = [e for e in man.artifacts() if e.verification]
    intro = ("<p>Per artifact, the output against eager PyTorch on the same inputs: the seeded inputs decide pass "
             "or fail against the threshold for the precision it computed in; each validation photo is shown "
             "against the same threshold.</p>")
    tables = "".join(_numerics_table(e) for e in checked) or "<p>No artifact was checked against eager in this manifest.</p>"
    return f'<section id="numerics"><h2>Numerics against eager PyTorch</h2>{intro}{tables}</section>'


def _loss(w: dict) -> str:
    """A layer's own loss, or that it made exact inputs lossy (``stages.accuracy.layer_loss``)."""
    return "from exact inputs" if w.get("from_exact") else f"{w['drop_db']:.1f}"


def accuracy_section(man: Manifest) -> str:
    """Every quantized artifact against fp32, layer by layer: whether it is within its task's
    accuracy budget, the layers that lose most (by eager module), and what to try."""
    parts = []
    for e in man.artifacts():
        acc = e.accuracy
        if not acc:
            continue
        v = e.verification or {}
        budget = AccuracyBudget(**v["budget"]) if v.get("budget") else AccuracyBudget.for_task(e.task or "")
        missed = v.get("budget_missed") if "budget" in v else None  # the row's own verdict (core.result.settle)
        verdict = (f'<span class="bad">misses its budget: {_e(missed)}</span>' if missed
                   else f'<span class="good">within its budget ({_e(budget.describe())})</span>' if "budget" in v
                   else '<span>not judged against a budget (it did not run here)</span>')
        rows = "".join(f"<tr><td>{_e(w['module'])}</td><td>{_e(w['type'])}</td><td>{_e(w['op'])}</td>"
                       f'<td class="num">{w["sqnr_db"]:.1f}</td><td class="num">{_loss(w)}</td></tr>'
                       for w in acc.get("worst") or [])
        tips = "".join(f"<li>{_e(t)}</li>" for t in acc.get("try") or [])
        parts.append(f'<div class="accuracy" data-name="{_e(e.name)}"><h3>{_e(e.name)} ({_e(e.precision)})</h3>'
                     f"<p>{verdict}. Compared on {_e(acc.get('on', ''))}"
                     f"{'; ' + _e(acc['error']) if acc.get('error') else ''}.</p>"
                     + (f"<table><thead><tr><th>eager module</th><th>type</th><th>operator</th><th>SQNR after it (dB)</th>"
                        f"<th>lost there (dB)</th></tr></thead><tbody>{rows}</tbody></table>" if rows else "")
                     + (f"<p>What to try:</p><ul>{tips}</ul>" if tips else "") + "</div>")
    if not parts:
        return ""
    intro = ("<p>Each quantized artifact's quantized program run in PyTorch beside the fp32 one, each operator's "
             "output matched by eager module: the SQNR after each layer, and how much of it that layer lost itself. "
             "The layers that lose most are where int8 breaks.</p>")
    return f'<section id="accuracy"><h2>Where int8 loses accuracy</h2>{intro}{"".join(parts)}</section>'


# ---------------------------------------------------------------------------- plots

CACHED = "from the cache"  # the export-time plot's one segment for a row restored from the cache
_CHAR_PX = 7.2  # a generous width of one character of the plots' 12 px sans-serif text


def _geometry(labels: list[str]) -> tuple[int, int]:
    """(width, left): the label column as wide as its longest label, so that none is cut
    off at the left edge; the SVG scales down to the page (``svg.plot{max-width:100%}``)."""
    left = int(min(max(120, 16 + _CHAR_PX * max((len(x) for x in labels), default=0)), 520))
    return left + 460, left


def _bars(title: str, rows: list[tuple[str, float]], unit: str, plot_id: str, empty: str = "no data in this run") -> str:
    """A horizontal bar chart as inline SVG; the <title> of each bar is its exact value."""
    (width, left), bar, gap = _geometry([label for label, _ in rows]), 18, 6
    height = 40 + max(len(rows), 1) * (bar + gap)
    top = max((v for _, v in rows), default=0) or 1
    parts = [f'<figure><figcaption>{_e(title)}</figcaption>'
             f'<svg class="plot" id="{plot_id}" data-bars="{len(rows)}" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">']
    if not rows:
        parts.append(f'<text class="empty" x="10" y="24">{_e(empty)}</text>')
    for i, (label, value) in enumerate(rows):
        y = 20 + i * (bar + gap)
        w = max(1.0, (width - left - 90) * value / top)
        parts.append(f'<text x="{left - 8}" y="{y + bar - 5}" text-anchor="end">{_e(label)}</text>'
                     f'<rect class="bar" x="{left}" y="{y}" width="{w:.1f}" height="{bar}"><title>{value:g} {unit}</title></rect>'
                     f'<text x="{left + w + 6:.1f}" y="{y + bar - 5}">{value:.3g} {unit}</text>')
    parts.append("</svg></figure>")
    return "".join(parts)


def _legend(names: list[str], colors: dict[str, str], width: int, y: int) -> tuple[list[str], int]:
    """The stacked plot's legend, wrapped onto as many lines as the width needs: (its SVG
    parts, the height it takes)."""
    parts, x, line = [], 10.0, 0
    for name in names:
        room = 14 + _CHAR_PX * len(name) + 16
        if x + room > width - 10 and x > 10:
            x, line = 10.0, line + 1
        top = y + line * 18
        parts.append(f'<rect x="{x:.0f}" y="{top}" width="10" height="10" fill="{colors[name]}"/>'
                     f'<text x="{x + 14:.0f}" y="{top + 10}" font-size="10">{_e(name)}</text>')
        x += room
    return parts, (line + 1) * 18


def _stacked(title: str, rows: list[tuple[str, dict[str, float]]], plot_id: str) -> str:
    (width, left), bar, gap = _geometry([label for label, _ in rows]), 18, 6
    palette = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7"]
    shown = [*STAGES, CACHED]
    colors = {st: palette[j % len(palette)] for j, st in enumerate(STAGES)} | {CACHED: "#9e9e9e"}
    used = [st for st in shown if any(d.get(st, 0.0) > 0 for _, d in rows)]
    legend, legend_height = _legend(used, colors, width, 30 + len(rows) * (bar + gap))
    height = 40 + len(rows) * (bar + gap) + legend_height
    top = max((sum(d.values()) for _, d in rows), default=0) or 1
    segments = sum(1 for _, d in rows for st in shown if d.get(st, 0.0) > 0)
    parts = [f'<figure><figcaption>{_e(title)}</figcaption>'
             f'<svg class="plot" id="{plot_id}" data-bars="{segments}" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">']
    if not segments:
        parts.append('<text class="empty" x="10" y="14">no stage timings in this run</text>')
    for i, (label, parts_s) in enumerate(rows):
        y = 20 + i * (bar + gap)
        x = float(left)
        parts.append(f'<text x="{left - 8}" y="{y + bar - 5}" text-anchor="end">{_e(label)}</text>')
        for stage in shown:
            v = parts_s.get(stage, 0.0)
            if v <= 0:
                continue
            w = (width - left - 90) * v / top
            said = f"made in {v:.2f} s by an earlier run; restored from the cache" if stage == CACHED else f"{stage}: {v:.2f} s"
            parts.append(f'<rect class="bar" x="{x:.1f}" y="{y}" width="{max(w, 0.5):.1f}" height="{bar}" '
                         f'style="fill:{colors[stage]}"><title>{said}</title></rect>')
            x += w
        parts.append(f'<text x="{x + 6:.1f}" y="{y + bar - 5}">{sum(parts_s.values()):.1f} s</text>')
    parts += legend
    parts.append("</svg></figure>")
    return "".join(parts)


def _stages(e) -> dict[str, float]:
    """A row's export time by stage; a row restored from the cache: the time the export that
    made it took, as one segment (its stages are not kept)."""
    if e.cache:
        return {CACHED: export_seconds(e)}
    return {s: float(e.timings.get(s, 0.0)) for s in STAGES}


def latency_rows(man: Manifest) -> list[tuple[str, float]]:
    """Only measured p50s (after warm-up, in the child that runs artifacts); nothing else."""
    rows = []
    for e in man.models:
        v = p50(e)
        if v is not None:
            runs = (e.bench or {}).get("runs")
            rows.append((_label(e) + (f" ({runs} runs)" if runs is not None else ""), v))
    return rows


def plots_section(man: Manifest) -> str:
    entries = man.models
    size = [(_label(e), round(e.size / 1e6, 3)) for e in entries]
    delegated = [(_label(e), float(e.delegation.get("percent", 0.0))) for e in entries]
    stages = [(_label(e) + (" (cached)" if e.cache else ""), _stages(e)) for e in entries]
    return "".join([
        '<section id="plots"><h2>Plots</h2>',
        _bars("Artifact size per target (MB)", size, "MB", "size"),
        _bars("Latency p50 per runnable target (ms, after warm-up, on this host)", latency_rows(man), "ms", "latency",
              empty="no p50 measured in this run"),
        _bars("Share of the graph delegated per target (%)", delegated, "%", "delegation"),
        _stacked("Export time per stage (s)", stages, "stages"),
        "</section>",
    ])


# ---------------------------------------------------------------------------- page

# Lets a headless browser prove every plot rendered: each SVG is laid out and draws as
# many bars (non-zero boxes) as it declares; an empty plot declares 0, draws 0 and says why.
_CHECK_JS = """
window.addEventListener('load', function () {
  var plots = document.querySelectorAll('svg.plot'), ok = 0;
  plots.forEach(function (svg) {
    var box = svg.getBoundingClientRect(), drawn = 0, declared = Number(svg.dataset.bars);
    svg.querySelectorAll('rect.bar').forEach(function (r) { var b = r.getBBox(); if (b.width > 0 && b.height > 0) drawn++; });
    var said = declared > 0 || svg.querySelector('text.empty') !== null;
    if (box.width > 0 && box.height > 0 && drawn == declared && said) ok++;
  });
  document.body.dataset.plots = ok + '/' + plots.length;
});
"""

_CSS = """
body{font-family:system-ui,sans-serif;margin:1.5em;color:#1b1b1b;line-height:1.35}
h1{margin:.2em 0} h2{margin-top:1.6em;border-bottom:2px solid #ddd} h3{margin:1.2em 0 .3em}
table{border-collapse:collapse;width:100%;margin:.4em 0 1em;font-size:13px}
th,td{border:1px solid #ccc;padding:3px 6px;vertical-align:top;text-align:left;overflow-wrap:break-word}
.file,.why,ol,caption{overflow-wrap:anywhere}
th{background:#f2f2f2} td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
td.num .sub{white-space:normal}
caption{text-align:left;font-weight:600;padding:.3em 0}
div.photo{display:inline-block;margin:0 .5em .5em 0;vertical-align:top;max-width:260px} img.drawn{max-width:260px;display:block}
.sub{font-size:11px;color:#555} .why{font-size:12px} .none{color:#777;font-style:italic}
.badge{display:inline-block;padding:0 .45em;border-radius:3px;font-size:11px;font-weight:700;color:#fff;white-space:nowrap}
.badge.st-ok{background:#2e7d32} .badge.st-sim{background:#00796b} .badge.st-device{background:#1f6fb2} .badge.st-unchecked{background:#a86b00}
.badge.st-fail{background:#c62828} .badge.st-budget{background:#b34700}
tr.st-budget{background:#fff0e0} tr.st-budget>td:first-child{border-left-color:#b34700}
tr.st-ok{background:#eaf6ea} tr.st-sim{background:#e6f4f1} tr.st-device{background:#e8f1fb} tr.st-unchecked{background:#fff5dc} tr.st-fail{background:#fdeaea}
tr.row>td:first-child{border-left:5px solid #999} tr.st-ok>td:first-child{border-left-color:#2e7d32}
tr.st-sim>td:first-child{border-left-color:#00796b} tr.st-device>td:first-child{border-left-color:#1f6fb2} tr.st-unchecked>td:first-child{border-left-color:#a86b00}
tr.st-fail>td:first-child{border-left-color:#c62828}
table.numerics.st-fail caption{color:#c62828} .good{color:#2e7d32} .bad{color:#c62828;font-weight:700}
tr.host{outline:2px solid #2e7d32} ol{margin:0;padding-left:1.4em} .recommend{margin:.2em 0}
figure{margin:1.2em 0} figcaption{font-weight:bold;margin-bottom:.4em}
svg.plot{max-width:100%;height:auto} svg text{font-size:12px;font-family:sans-serif} rect.bar{fill:#4e79a7}
@media print{
  body{margin:0;font-size:10pt} *{-webkit-print-color-adjust:exact;print-color-adjust:exact}
  nav{display:none} h2{break-after:avoid} h3{break-after:avoid} tr,figure{break-inside:avoid}
  img.drawn{max-width:2.5in} table{font-size:9pt} thead{display:table-header-group} #plots{break-before:page}
}
"""


NAV = (("matrix", "artifacts"), ("fallback", "load order"), ("numerics", "numerics"), ("accuracy", "int8 accuracy"),
       ("validation", "validation"), ("plots", "plots"))


def _header(man: Manifest, failures: list[dict], sections: str) -> str:
    """The title, the counts, the legend, and links to the sections the page has."""
    kinds = [status_kind(r["status"]) for m in model_names(man, failures) for r in rows_for(man, failures, m)]
    counts = (f"{kinds.count('ok') + kinds.count('sim')} proven ({kinds.count('ok')} on this host, "
              f"{kinds.count('sim')} on reference simulators), {kinds.count('budget')} out of their accuracy budget "
              f"(not proven), {kinds.count('device')} need a device, "
              f"{kinds.count('unchecked')} not checked, {kinds.count('fail')} failed or unavailable")
    legend = " ".join(_badge(s) for s in ("VERIFIED", "SIMULATED", "OUT_OF_BUDGET", "NOT_RUNNABLE_HERE", "NOT_VERIFIED",
                                          "MISMATCH"))
    return (f"<header><h1>pteforge report</h1><p>Generated {_e(man.generated)} · this host: {_e(host_platform())} · "
            f'<span id="counts">{_e(counts)}</span>. Every number was measured in the run that produced it; every '
            "latency is a p50 measured after warm-up in the child process that runs artifacts.</p>"
            f'<p class="legend">Status: {legend} (and every other failure status in red).</p>'
            "<nav>" + " · ".join(f'<a href="#{i}">{label}</a>' for i, label in NAV if f'<section id="{i}"' in sections)
            + "</nav></header>")


def _found(image: dict) -> str:
    results = image.get("results")
    if results is None:
        return ""
    if results and "prob" in results[0]:
        return ", ".join(f"{r.get('name', r.get('class'))} {r['prob']:.2f}" for r in results[:3])
    return f"{len(results)} found (eager: {image.get('eager_results', '?')})"


def validation_section(validation: dict | None) -> str:
    """``pteforge validate``'s results, when it ran on this directory: per artifact and
    photo what the program found, its agreement with eager, and the annotated photo."""
    if not validation:
        return ""
    rows = []
    for f in validation.get("files", []):
        images = f.get("images") or []
        cells = []
        for im in images:
            link = im.get("drawn")
            thumb = (f'<a href="{_e(link)}"><img class="drawn" src="{_e(link)}" alt="{_e(im.get("image"))} annotated" '
                     'onload="this.dataset.loaded=this.naturalWidth"></a>') if link else ""
            agree = f" · agreement {pct(im['agreement'])}" if im.get("agreement") is not None else ""
            cells.append(f'<div class="photo">{thumb}<div class="sub">{_e(im.get("image"))}: {_e(_found(im))}{_e(agree)}</div></div>')
        status = f.get("status", "")
        reason = f'<div class="why">{_e(f.get("reason") or "")}</div>'
        rows.append(f'<tr class="row st-{status_kind(status)}" data-file="{_e(f.get("file"))}"><td>{_e(f.get("file"))}</td>'
                    f"<td>{_badge(status)}{reason}</td><td class=\"num\">{_e(pct(f['agreement']) if f.get('agreement') is not None else '')}</td>"
                    f"<td class=\"num\">{_e(_db(f.get('sqnr_db')))}</td><td>{''.join(cells)}</td></tr>")
    return ('<section id="validation"><h2>Validation on real photos</h2>'
            f"<p>pteforge validate, {_e(validation.get('generated'))}: every artifact run on "
            f"{_e(len(validation.get('images') or []))} photo(s), decoded as the app does and compared with eager.</p>"
            "<table><thead><tr><th>file</th><th>status</th><th>agreement</th><th>SQNR</th><th>photos</th></tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table></section>")


def page(man: Manifest, failures: list[dict], sections: str) -> str:
    """The whole document: its header (title, counts, the sections' links) and ``sections``."""
    body = _header(man, failures, sections) + sections
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>pteforge report</title>
<style>{_CSS}</style>
<script>{_CHECK_JS}</script></head>
<body>{body}</body></html>
"""

"""Per-run reports from measured data: EXPORT_SUMMARY.md, report.json, report.html.

The seed's export-time and file-size tables come from the manifest's numbers; the
HTML is self-contained (inline SVG, no network) with four plots: size per target,
latency per runnable target, delegation % per target, export time per stage.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

from ..io import write_atomic
from .manifest import Manifest

STAGES = ("model_build", "model_capture", "quantize", "lower", "serialize", "verify", "write")


def _label(e) -> str:
    return f"{e.modelName} · {e.target}"


def export_seconds(e) -> float:
    return round(sum(v for k, v in e.timings.items()), 2)


def markdown(man: Manifest, failures: list[dict]) -> str:
    models = list(dict.fromkeys(e.modelName for e in man.models))
    targets = list(dict.fromkeys(e.target for e in man.models))
    cell = {(e.modelName, e.target): e for e in man.models}
    lines = ["# Export summary", "", f"Generated {man.generated}. Every number below was measured in the run that produced the artifact.", ""]
    lines += ["## Artifacts", "", "| model | target | precision | status | size | delegated | export time | latency p50 |",
              "|---|---|---|---|---|---|---|---|"]
    for e in man.models:
        bench = e.bench or {}
        p50 = f"{bench['p50_ms']:.2f} ms" if bench.get("p50_ms") is not None else ""
        lines.append(f"| {e.modelName} | {e.target} | {e.precision} | {e.status} | {e.sizeMB:.2f} MB | "
                     f"{e.delegation.get('percent', 0):.0f} % | {export_seconds(e):.1f} s | {p50} |")
    for title, fn in (("Export time (seconds, measured)", lambda e: f"{export_seconds(e):.1f} s"),
                      ("File size (measured)", lambda e: f"{e.sizeMB:.2f} MB")):
        lines += ["", f"## {title}", "", "| model | " + " | ".join(targets) + " |", "|---" * (len(targets) + 1) + "|"]
        for m in models:
            lines.append(f"| {m} | " + " | ".join(fn(cell[(m, t)]) if (m, t) in cell else "—" for t in targets) + " |")
    lines += precision_lines(man)
    if failures:
        lines += ["", "## Failed or unavailable in the last run", "", "| model | target | status | reason |", "|---|---|---|---|"]
        lines += [f"| {f['model']} | {f['target']} | {f['status']} | {f['reason']} |" for f in failures]
    return "\n".join(lines) + "\n"


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
            top1 = f"{im['top1_agreement']:.0%}" if im.get("top1_agreement") is not None else ""
            lines.append(f"| {e.modelName} | {e.target} | {r['fp32']} | {r['size']:.2f}× | {lat} | "
                         f"{_db(v.get('sqnr_db'))} | {_db(im.get('sqnr_db'))} | {im.get('cosine', '')} | {top1} |")
    for c in man.precisionChoices:
        lines += ["", f"## Precision auto: {c['model']} on {c['backend']}", "",
                  f"Budget: {c['budget']}. Winner: **{c.get('winner') or 'none'}** — {c.get('why', '')}", "",
                  "| target | status | size | p50 | photos top-1 | photos SQNR | within budget |", "|---|---|---|---|---|---|---|"]
        for t in c["tried"]:
            p50 = f"{t['p50_ms']:.2f} ms" if t.get("p50_ms") is not None else ""
            top1 = f"{t['top1_agreement']:.0%}" if t.get("top1_agreement") is not None else ""
            size = f"{t['size'] / 1e6:.2f} MB" if t.get("size") else ""
            lines.append(f"| {t['target']} | {t['status']} | {size} | {p50} | {top1} | {_db(t.get('sqnr_db'))} | "
                         f"{'yes' if t['within_budget'] else 'no: ' + t['note']} |")
    return lines


def _db(v) -> str:
    return f"{v:.1f} dB" if isinstance(v, (int, float)) else ""


def _bars(title: str, rows: list[tuple[str, float]], unit: str, plot_id: str) -> str:
    """A horizontal bar chart as inline SVG."""
    width, bar, gap, left = 760, 18, 6, 300
    height = 40 + len(rows) * (bar + gap)
    top = max((v for _, v in rows), default=0) or 1
    parts = [f'<figure><figcaption>{html.escape(title)}</figcaption>'
             f'<svg class="plot" id="{plot_id}" data-bars="{len(rows)}" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">']
    if not rows:
        parts.append('<text x="10" y="24">no data in this run</text>')
    for i, (label, value) in enumerate(rows):
        y = 20 + i * (bar + gap)
        w = max(1.0, (width - left - 90) * value / top)
        parts.append(f'<text x="{left - 8}" y="{y + bar - 5}" text-anchor="end">{html.escape(label)}</text>'
                     f'<rect class="bar" x="{left}" y="{y}" width="{w:.1f}" height="{bar}"><title>{value:g} {unit}</title></rect>'
                     f'<text x="{left + w + 6:.1f}" y="{y + bar - 5}">{value:.3g} {unit}</text>')
    parts.append("</svg></figure>")
    return "".join(parts)


def _stacked(title: str, rows: list[tuple[str, dict[str, float]]], plot_id: str) -> str:
    width, bar, gap, left = 760, 18, 6, 300
    colors = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1"]
    height = 60 + len(rows) * (bar + gap)
    top = max((sum(d.values()) for _, d in rows), default=0) or 1
    segments = sum(1 for _, d in rows for st in STAGES if d.get(st, 0.0) > 0)
    parts = [f'<figure><figcaption>{html.escape(title)}</figcaption>'
             f'<svg class="plot" id="{plot_id}" data-bars="{segments}" width="{width}" height="{height}" '
             f'viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">']
    for i, (label, parts_s) in enumerate(rows):
        y = 20 + i * (bar + gap)
        x = float(left)
        parts.append(f'<text x="{left - 8}" y="{y + bar - 5}" text-anchor="end">{html.escape(label)}</text>')
        for j, stage in enumerate(STAGES):
            v = parts_s.get(stage, 0.0)
            if v <= 0:
                continue
            w = (width - left - 90) * v / top
            parts.append(f'<rect class="bar" x="{x:.1f}" y="{y}" width="{max(w, 0.5):.1f}" height="{bar}" '
                         f'style="fill:{colors[j % len(colors)]}"><title>{stage}: {v:.2f} s</title></rect>')
            x += w
        parts.append(f'<text x="{x + 6:.1f}" y="{y + bar - 5}">{sum(parts_s.values()):.1f} s</text>')
    legend_y = 30 + len(rows) * (bar + gap)
    for j, stage in enumerate(STAGES):
        parts.append(f'<rect x="{left + j * 65}" y="{legend_y}" width="10" height="10" fill="{colors[j % len(colors)]}"/>'
                     f'<text x="{left + j * 65 + 14}" y="{legend_y + 10}" font-size="10">{stage.replace("model_", "")}</text>')
    parts.append("</svg></figure>")
    return "".join(parts)


# Lets a headless browser prove every plot rendered: each SVG is laid out and holds
# as many drawn bars (non-zero boxes) as it declares.
_CHECK_JS = """
window.addEventListener('load', function () {
  var plots = document.querySelectorAll('svg.plot'), ok = 0;
  plots.forEach(function (svg) {
    var box = svg.getBoundingClientRect(), drawn = 0;
    svg.querySelectorAll('rect.bar').forEach(function (r) { var b = r.getBBox(); if (b.width > 0 && b.height > 0) drawn++; });
    if (box.width > 0 && box.height > 0 && drawn > 0 && drawn == Number(svg.dataset.bars)) ok++;
  });
  document.title = 'plots rendered: ' + ok + '/' + plots.length;
});
"""


def html_report(man: Manifest) -> str:
    entries = man.models
    size = [(_label(e), round(e.size / 1e6, 3)) for e in entries]
    latency = [(_label(e), (e.bench or {}).get("p50_ms")) for e in entries]
    latency = [(k, v) for k, v in latency if v is not None]
    if not latency:  # no bench yet: the verification runs' mean time is what was measured
        latency = [(_label(e), round(e.timings["verify"] * 1000 / max(e.verification.get("inputs", 1), 1), 3))
                   for e in entries if e.verification and "verify" in e.timings]
    delegated = [(_label(e), float(e.delegation.get("percent", 0.0))) for e in entries]
    stages = [(_label(e), {s: float(e.timings.get(s, 0.0)) for s in STAGES}) for e in entries]
    body = "".join([
        _bars("Artifact size per target (MB)", size, "MB", "size"),
        _bars("Latency per runnable target (ms, on this host)", latency, "ms", "latency"),
        _bars("Share of the graph delegated per target (%)", delegated, "%", "delegation"),
        _stacked("Export time per stage (s)", stages, "stages"),
    ])
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>pteforge report</title>
<style>body{{font-family:sans-serif;margin:2em}} figure{{margin:1.5em 0}} figcaption{{font-weight:bold;margin-bottom:.5em}}
svg text{{font-size:12px;font-family:sans-serif}} rect.bar{{fill:#4e79a7}}</style>
<script>{_CHECK_JS}</script></head>
<body><h1>pteforge report</h1><p>Generated {html.escape(man.generated)} — {len(entries)} artifact(s). Numbers measured in the runs that produced them.</p>
{body}</body></html>
"""


def write_reports(out: Path, man: Manifest, failures: list[dict]) -> list[Path]:
    paths = [Path(out) / "EXPORT_SUMMARY.md", Path(out) / "report.json", Path(out) / "report.html"]
    write_atomic(paths[0], markdown(man, failures))
    write_atomic(paths[1], json.dumps({"manifest": json.loads(man.model_dump_json()), "last_run_failures": failures}, indent=2) + "\n")
    write_atomic(paths[2], html_report(man))
    return paths

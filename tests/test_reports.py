"""Reports, benchmarks and selective build from a real run."""

import html as htmllib
import json
import os
import re
import shutil
import subprocess

import pytest
import yaml
from test_cli import TINY, cli

from pteforge.core.errors import ExitStatus
from pteforge.core.result import Status


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    from pteforge.cli import main

    out = tmp_path_factory.mktemp("reports")
    assert main([*TINY, "--backends", "xnnpack", "portable", "coreml", "--oplist", "--out", str(out)]) == 0
    return out


def test_each_run_writes_the_reports(run):
    md = (run / "EXPORT_SUMMARY.md").read_text()
    assert "## Export time (seconds, measured)" in md and "## File size (measured)" in md
    assert "| tiny | xnnpack | fp32 | VERIFIED |" in md
    report = json.loads((run / "report.json").read_text())
    assert {e["target"] for e in report["manifest"]["models"]} == {"xnnpack", "portable", "coreml"}
    assert report["manifest"]["references"] == [], "coreml (fp16) runs nowhere here: no fp32 program to compare with"
    coreml = next(e for e in report["manifest"]["models"] if e["target"] == "coreml")
    assert coreml["relative"] is None, "1.3 kB of weights, less than the program around them: no size ratio"
    html = (run / "report.html").read_text()
    assert html.count('class="plot"') == 4
    assert "http://" not in html.replace("http://www.w3.org/2000/svg", "") and "https://" not in html, "self-contained"
    assert "<link" not in html and " src=" not in html and "@import" not in html and "url(" not in html
    sections = [html.index(f'<section id="{s}">') for s in ("matrix", "fallback", "numerics", "plots")]
    assert sections == sorted(sections), "the matrix opens the page"
    assert "@media print" in html
    assert "## Load order per platform" in md and "## Numerics against eager PyTorch" in md


def test_a_device_only_reduced_program_is_sized_against_weights_that_are_most_of_its_file(capsys, tmp_path):
    """Core ML fp16 brings no fp32 program (it runs nowhere here): its size is set against the
    model's weights at fp32 where they are most of the file (1.3 MB here), and is about half."""
    out = tmp_path / "o"
    code, printed, _ = cli(capsys, "--model", "tiny_models:sized(8, 40000)", "--input-shape", "1,3,16,16",
                           "--weights", "none", "--backends", "coreml", "--no-verify", "--out", out)
    assert code == ExitStatus.OK
    [entry] = json.loads((out / "index.json").read_text())["models"]
    assert entry["relative"]["fp32_weights_bytes"] == (8 * 40000 + 40000 + 3 * 8 * 9 + 8) * 4
    assert 0.45 < entry["relative"]["size"] < 0.6, entry["relative"]
    assert "vs fp32 weights: 0.5" in printed


def test_a_slow_program_gets_fewer_timed_runs_within_its_budget_and_says_so():
    """An export times each artifact in about 0.1 s per run asked for: a slower program gets
    fewer timed runs, never fewer than timing.MIN_RUNS, and fewer warm-up runs, never fewer
    than one; ``runs`` and ``warmup`` are how many there were."""
    import time

    from pteforge.core.timing import MIN_RUNS, measure

    calls = []
    slow = measure(lambda: calls.append(time.sleep(0.03)), runs=10, warmup=2, budget_s=0.1)
    assert slow["runs"] == MIN_RUNS == len(calls) - 1 - 1 and slow["warmup"] == 1
    assert slow["p50_ms"] >= 30
    fast = measure(lambda: None, runs=10, warmup=2, budget_s=0.1)
    assert (fast["runs"], fast["warmup"]) == (10, 2), "a fast one gets them all"
    unbudgeted = measure(lambda: time.sleep(0.03), runs=10, warmup=2)
    assert (unbudgeted["runs"], unbudgeted["warmup"]) == (10, 2), "no budget: pteforge bench"
    assert measure(lambda: time.sleep(0.03), runs=3, warmup=1, budget_s=0.01)["runs"] == 3, "never more than asked"


def test_bench_measures_what_runs_here_and_records_it(capsys, run):
    code, stdout, _ = cli(capsys, "bench", run, "--runs", "5", "--compare", "eager")
    assert code == ExitStatus.OK
    entries = {e["target"]: e for e in json.loads((run / "index.json").read_text())["models"]}
    b = entries["xnnpack"]["bench"]
    assert b["runs"] == 5 and 0 < b["p50_ms"] <= b["p90_ms"] and b["load_ms"] > 0 and b["first_run_ms"] > 0
    assert b["peak_rss_mb"] > 0 and b["threads"] >= 1
    assert b["torch_threads"] == 1, "torch's OpenMP workers would spin on the delegate's cores"
    assert b["eager"]["p50_ms"] > 0 and b["eager"]["p10_ms"] <= b["eager"]["p50_ms"] <= b["eager"]["p90_ms"]
    assert b["onnxruntime"]["p50_ms"] > 0, "ONNX Runtime (a dev dependency) timed beside it"
    # eager and ONNX Runtime timed once per model: every row of the model shows the same figures
    timed = [e["bench"]["eager"] for e in entries.values() if "bench" in e and "eager" in e["bench"]]
    assert len(timed) >= 2 and all(t == timed[0] for t in timed)
    # it says what it rewrote, with the spread of each figure
    assert f"entries in {run / 'index.json'} (each entry's `bench`, replacing the export's)" in stdout
    assert "p10–p90" in stdout
    assert "bench" not in entries["coreml"]
    assert "| tiny | xnnpack | fp32 | VERIFIED |" in (run / "EXPORT_SUMMARY.md").read_text()
    assert " ms |" in (run / "EXPORT_SUMMARY.md").read_text()


def test_oplist_and_link_lines(run):
    merged = yaml.safe_load((run / "selected_operators.yaml").read_text())
    per = yaml.safe_load((run / "custom" / "tiny_portable.selected_operators.yaml").read_text())
    assert "aten::convolution.out" in per["operators"]
    assert set(per["operators"]) <= set(merged["operators"])
    cmake = (run / "executorch_link.cmake").read_text()
    assert '"$<LINK_LIBRARY:WHOLE_ARCHIVE,xnnpack_backend>"' in cmake
    assert "-DEXECUTORCH_BUILD_XNNPACK=ON" in cmake and "-DEXECUTORCH_BUILD_COREML=ON" in cmake
    assert "-DEXECUTORCH_SELECT_OPS_YAML=selected_operators.yaml" in cmake
    assert "vulkan" not in cmake.lower(), "only the delegates the artifacts contain"


def chromium():
    return shutil.which("chromium") or shutil.which("chromium-browser")


def browser_or_skip():
    browser = chromium()
    if browser is None:
        if os.environ.get("CI"):
            pytest.fail("CI must have Chromium (.ci/run installs Debian's chromium)")
        pytest.skip("Chromium is not installed (apt-get install chromium)")
    return browser


def dump_dom(page, tmp_path) -> str:
    """The DOM of ``page`` after headless Chromium loaded it and ran its scripts."""
    proc = subprocess.run(
        [browser_or_skip(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=5000", "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=120,
    )
    assert "<title>pteforge report</title>" in proc.stdout and 'data-plots="4/4"' in proc.stdout, \
        proc.stdout[:500] + proc.stderr[-2000:]
    return proc.stdout


def text(fragment: str) -> str:
    """What a reader sees of an HTML fragment: tags stripped, entities decoded, spaces collapsed."""
    return " ".join(htmllib.unescape(re.sub(r"<[^>]+>", " ", fragment)).split())


def section(dom: str, sid: str) -> str:
    m = re.search(rf'<section id="{sid}">(.*?)</section>', dom, re.S)
    assert m, f"no #{sid} section"
    return m.group(1)


def row(fragment: str, **attrs) -> str:
    """The text of the one table row whose data-* attributes are ``attrs``."""
    rows = [m.group(0) for m in re.finditer(r"<tr\b[^>]*>.*?</tr>", fragment, re.S)
            if all(f'data-{k}="{htmllib.escape(str(v))}"' in m.group(0).split(">", 1)[0] for k, v in attrs.items())]
    assert len(rows) == 1, (attrs, len(rows))
    return text(rows[0])


def size_text(size: int) -> str:
    return f"{size / 1e6:.2f} MB" if size >= 1e6 else f"{size / 1e3:.1f} kB"


def p50_text(ms: float) -> str:
    return f"{ms:.0f} ms" if ms >= 100 else f"{ms:.3g} ms"


def test_report_html_renders_every_plot_in_headless_chromium(run, tmp_path):
    dump_dom(run / "report.html", tmp_path)


def test_report_matrix_shows_every_status_and_figure_in_headless_chromium(run, tmp_path):
    index = json.loads((run / "index.json").read_text())
    dom = dump_dom(run / "report.html", tmp_path)
    matrix = section(dom, "matrix")
    for e in index["models"] + index["failed"]:
        shown = row(matrix, name=e["name"])
        assert e["status"] in shown and e["target"] in shown and size_text(e["size"]) in shown, shown
        assert f"{e['delegation']['percent']:.0f} %" in shown, shown
        if e["status"] != "VERIFIED":
            assert (e.get("reason") or "").splitlines()[0] in shown, shown
        if (e.get("verification") or {}).get("sqnr_db") is not None:
            assert f"{e['verification']['sqnr_db']:.1f} dB" in shown, shown
        bench = e.get("bench") or {}
        if bench.get("p50_ms") is not None:
            assert p50_text(bench["p50_ms"]) in shown and f"{bench['runs']} runs" in shown, shown
        else:
            assert " ms" not in shown, "no p50, no latency"
    # per platform: the manifest's fallback order, each with its status; this host's pick
    by_name = {e["name"]: e for e in index["models"]}
    for model, platforms in index["fallback"].items():
        fallback = re.search(rf'<table class="fallback" data-model="{model}">.*?</table>', dom, re.S).group(0)
        for platform, names in platforms.items():
            shown = row(fallback, platform=platform)
            positions = [shown.index(f"{n} ({by_name[n]['target']}) {by_name[n]['status']}") for n in names]
            assert positions == sorted(positions), (platform, shown)
        pick = next(n for n in platforms["desktop"] if by_name[n]["status"] == "VERIFIED")
        assert f"This host (desktop) recommends: load {pick}" in text(matrix)
        assert row(fallback, platform="desktop").endswith(pick)
    # numerics: every checked artifact, with the threshold it was judged by
    numerics = text(section(dom, "numerics"))
    for e in index["models"]:
        if e.get("verification"):
            v = e["verification"]
            assert f"{e['name']} — {e['target']}" in numerics
            assert f"threshold {v['threshold_sqnr_db']:.1f} dB SQNR" in numerics and f"{v['sqnr_db']:.1f} dB" in numerics


def with_failures(run):
    """The real run's manifest plus what a bad run leaves: a MISMATCH kept on disk with its
    numbers on two photos, a target that failed to lower, one unavailable on this host."""
    from pteforge.report.manifest import Manifest

    man = Manifest.model_validate(json.loads((run / "index.json").read_text()))
    good = next(e for e in man.models if e.target == "xnnpack")
    photos = [{"name": "bus.jpg", "sqnr_db": 2.5, "cosine": 0.8, "top1_match": False},
              {"name": "grace_hopper.jpg", "sqnr_db": 12.25, "cosine": 0.97, "top1_match": True}]
    bad = good.model_copy(deep=True, update={
        "name": "tiny_xnnpack_int8.pte", "target": "xnnpack:int8", "precision": "int8", "status": "MISMATCH",
        "reason": "SQNR 3.1 dB is below the int8 threshold of 10.0 dB", "bench": None,
        "verification": {**good.verification, "sqnr_db": 3.1, "threshold_sqnr_db": 10.0, "runtime_precision": "int8",
                         "images": {"images": 2, "names": ["bus.jpg", "grace_hopper.jpg"], "sqnr_db": 2.5,
                                    "cosine": 0.8, "top1_agreement": 0.5, "per_image": photos}}})
    man.failed.append(bad)
    failures = [{"model": "tiny", "target": "xnnpack:int8", "status": "MISMATCH", "reason": bad.reason},
                {"model": "tiny", "target": "vulkan", "status": "LOWER_FAILED", "reason": "aten.mean <dim=-1> not supported"},
                {"model": "*", "target": "qnn", "status": "UNAVAILABLE", "reason": "QNN SDK not found (set QNN_SDK_ROOT)"}]
    return man, failures


def test_failed_rows_reasons_and_numerics_in_headless_chromium(run, tmp_path):
    from pteforge.report.summary import write_reports

    man, failures = with_failures(run)
    for e in man.models:
        e.bench = None  # nothing timed: the latency plot is empty, says so, and still counts as rendered
    write_reports(tmp_path, man, failures)
    dom = dump_dom(tmp_path / "report.html", tmp_path)
    matrix = section(dom, "matrix")
    for f in failures:
        shown = row(matrix, target=f["target"], status=f["status"])
        assert f["status"] in shown and f["reason"] in shown, shown
    assert 'class="row st-fail"' in matrix and "st-ok" in matrix
    numerics = section(dom, "numerics")
    mismatch = text(re.search(r'<table class="numerics[^"]*" data-name="tiny_xnnpack_int8.pte".*?</table>', numerics, re.S).group(0))
    assert "threshold 10.0 dB SQNR (judged on the seeded inputs: fail)" in mismatch
    assert "bus.jpg 2.5 dB 0.800000 differs below threshold" in mismatch
    assert "grace_hopper.jpg 12.2 dB 0.970000 same ≥ threshold" in mismatch
    latency = re.search(r'<svg[^>]*id="latency".*?</svg>', dom, re.S).group(0)
    assert 'data-bars="0"' in latency and "no p50 measured in this run" in latency and 'class="bar"' not in latency
    md = (tmp_path / "EXPORT_SUMMARY.md").read_text()
    assert "| tiny | vulkan | LOWER_FAILED | aten.mean <dim=-1> not supported |" in md
    assert "| tiny_xnnpack_int8.pte | int8 | bus.jpg | 2.5 dB | 0.800000 | differs | 10.0 dB |" in md


# In the page, after layout: every numerics table's cells, row by row, start where the
# header's do (aligned columns) and no two boxes of text overlap; the verdict goes on <body>.
_LAYOUT_JS = """<script>window.addEventListener('load', function () {
  var bad = [];
  document.querySelectorAll('table.numerics').forEach(function (t) {
    var head = Array.from(t.tHead.rows[0].cells).map(function (c) { return c.getBoundingClientRect(); });
    Array.from(t.tBodies[0].rows).forEach(function (r) {
      Array.from(r.cells).forEach(function (c, i) {
        var b = c.getBoundingClientRect();
        if (Math.abs(b.left - head[i].left) > 1 || Math.abs(b.width - head[i].width) > 1) bad.push(t.dataset.name + ' column ' + i);
        var text = document.createRange(); text.selectNodeContents(c);
        var tb = text.getBoundingClientRect();
        if (tb.width > 0 && (tb.left < b.left - 1 || tb.right > b.right + 1)) bad.push(t.dataset.name + ' text out of cell ' + i);
      });
    });
  });
  // every plot inside the page, and every label and legend entry inside its plot
  var page = document.documentElement.clientWidth;
  document.querySelectorAll('svg.plot').forEach(function (svg) {
    var box = svg.getBoundingClientRect(), vb = svg.viewBox.baseVal;
    if (box.right > page + 1) bad.push(svg.id + ' wider than the page');
    svg.querySelectorAll('text').forEach(function (t) {
      var b = t.getBBox();
      if (b.x < -1 || b.x + b.width > vb.width + 1 || b.y < -1 || b.y + b.height > vb.height + 1)
        bad.push(svg.id + ' clips "' + t.textContent + '"');
    });
  });
  document.body.dataset.layout = bad.length ? bad.slice(0, 5).join('; ') : 'ok';
});</script>"""


def test_numerics_are_one_aligned_table_per_artifact_at_1300_and_800_px(run, tmp_path):
    from pteforge.report.summary import write_reports

    man, failures = with_failures(run)
    cached = next(e for e in man.models if e.target == "xnnpack")
    cached.modelName = cached.model = "a_much_longer_model_name_of_ones_own_for_the_labels"  # the plots' longest label
    cached.timings, cached.cache = {"cache": 0.004}, {"hit": True, "key": "0" * 16, "created": "2026-11-28T00:00:00Z",
                                                      "original_seconds": 12.34}
    write_reports(tmp_path, man, failures)
    page = tmp_path / "report.html"
    html_text = page.read_text()
    stages = re.search(r'<svg[^>]*id="stages".*?</svg>', html_text, re.S).group(0)
    assert "made in 12.34 s by an earlier run; restored from the cache" in stages and "12.3 s</text>" in stages
    assert "· xnnpack (cached)" in stages and ">from the cache</text>" in stages, "labelled, with a legend entry"
    assert "| xnnpack | fp32 | VERIFIED |" in (md := (tmp_path / "EXPORT_SUMMARY.md").read_text()) and \
        "| 12.3 s (from the cache) |" in md
    page.write_text(html_text.replace("</body>", _LAYOUT_JS + "</body>"))
    for width in (1300, 800):
        proc = subprocess.run(
            [browser_or_skip(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-sync",
             f"--user-data-dir={tmp_path / 'profile'}", f"--window-size={width},900", "--virtual-time-budget=5000",
             "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120)
        assert 'data-layout="ok"' in proc.stdout, (width, re.findall(r'data-layout="[^"]*"', proc.stdout), proc.stderr[-1000:])
        assert proc.stdout.count('<table class="numerics') == len([e for e in man.artifacts() if e.verification])


def latency_bars(page: str) -> dict[str, float]:
    """Label → value of each bar of the latency plot (the value from the bar's <title>)."""
    svg = re.search(r'<svg[^>]*id="latency".*?</svg>', page, re.S).group(0)
    bars = re.findall(r'text-anchor="end">([^<]*)</text><rect class="bar"[^>]*><title>([0-9.e+-]+) ms</title>', svg)
    assert len(bars) == svg.count('class="bar"') == int(re.search(r'data-bars="(\d+)"', svg).group(1))
    return {htmllib.unescape(label): float(v) for label, v in bars}


def test_latency_chart_shows_only_measured_p50s(run):
    from pteforge.report.manifest import Manifest
    from pteforge.report.summary import html_report, markdown

    man = Manifest.model_validate(json.loads((run / "index.json").read_text()))
    by_target = {e.target: e for e in man.artifacts()}
    by_target["xnnpack"].bench = {"p50_ms": 1.234, "p90_ms": 1.5, "runs": 10, "warmup": 3}
    by_target["portable"].bench, by_target["portable"].timings["verify"] = None, 123.0
    by_target["coreml"].bench = {"skipped": "CoreMLBackend is not registered in this runtime"}
    by_target["coreml"].timings["verify"] = 123.0
    assert latency_bars(html_report(man)) == {"tiny · xnnpack (10 runs)": 1.234}
    shown = row(section(html_report(man), "matrix"), target="portable")
    assert "—" in shown and " ms" not in shown, "the verification's wall time is no p50"
    md = markdown(man, []).splitlines()
    assert "| model | target | precision | status | why | in the app | size | delegated | export time | p50 (ms, after warm-up) |" in md
    assert next(line for line in md if line.startswith("| tiny | xnnpack |")).endswith("| 1.23 ms |")
    assert next(line for line in md if line.startswith("| tiny | portable |")).endswith("|  |")

    by_target["xnnpack"].bench = None  # no p50 anywhere: no bar at all, not the verification's wall time
    page = html_report(man)
    assert latency_bars(page) == {}
    assert "no p50 measured in this run" in page


def test_bench_says_why_an_artifact_cannot_be_measured(run):
    from pteforge.app.bench import bench

    [r] = bench(run / "custom" / "tiny_coreml.pte", runs=2)
    assert r.status is Status.NOT_RUNNABLE_HERE and r.reason == "CoreMLBackend is not registered in this runtime"

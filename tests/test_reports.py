"""Reports, benchmarks and selective build from a real run."""

import json
import os
import shutil
import subprocess

import pytest
import yaml
from test_cli import TINY, cli

from pteforge.errors import ExitStatus


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
    assert {e["target"] for e in report["manifest"]["models"]} == {"xnnpack", "portable", "coreml", "coreml:fp32"}
    html = (run / "report.html").read_text()
    assert html.count('class="plot"') == 4
    assert "http://" not in html.replace("http://www.w3.org/2000/svg", "") and "https://" not in html, "self-contained"


def test_bench_measures_what_runs_here_and_records_it(capsys, run):
    code, stdout, _ = cli(capsys, "bench", run, "--runs", "5", "--compare", "eager")
    assert code == ExitStatus.OK
    entries = {e["target"]: e for e in json.loads((run / "index.json").read_text())["models"]}
    b = entries["xnnpack"]["bench"]
    assert b["runs"] == 5 and 0 < b["p50_ms"] <= b["p90_ms"] and b["load_ms"] > 0 and b["first_run_ms"] > 0
    assert b["peak_rss_mb"] > 0 and b["threads"] >= 1
    assert b["torch_threads"] == 1, "torch's OpenMP workers would spin on the delegate's cores"
    assert b["eager"]["p50_ms"] > 0
    assert b["onnxruntime"]["p50_ms"] > 0, "ONNX Runtime (a dev dependency) timed beside it"
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


def test_report_html_renders_every_plot_in_headless_chromium(run, tmp_path):
    browser = chromium()
    if browser is None:
        if os.environ.get("CI"):
            pytest.fail("CI must have Chromium (.ci/run installs Debian's chromium)")
        pytest.skip("Chromium is not installed (apt-get install chromium)")
    proc = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=5000", "--dump-dom",
         (run / "report.html").as_uri()],
        capture_output=True, text=True, timeout=120,
    )
    assert "<title>plots rendered: 4/4</title>" in proc.stdout, proc.stdout[:500] + proc.stderr[-2000:]


def test_bench_says_why_an_artifact_cannot_be_measured(run):
    from pteforge.bench import bench

    [r] = bench(run / "custom" / "tiny_coreml.pte", runs=2)
    assert r.status == "not runnable here" and r.reason == "CoreMLBackend is not registered in this runtime"

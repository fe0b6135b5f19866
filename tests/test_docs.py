"""The backend pages are generated from the backend files and committed: they must be current."""

from pathlib import Path

from pteforge.backends import default_registry
from pteforge.ui.docs import write_docs
from pteforge.runtime.host import host

DOCS = Path(__file__).resolve().parent.parent / "docs" / "backends"
TEMPLATE_SECTIONS = ["## Features", "## Target Requirements", "## Development Requirements", "## Using ",
                     "## Runtime Integration", "## Reference"]


def test_backend_pages_are_current(tmp_path):
    fresh = write_docs(tmp_path, host())
    assert {p.name for p in fresh} == {p.name for p in DOCS.glob("*.md")}, "one page per backend, and the host OS table"
    for page in fresh:
        assert page.read_text() == (DOCS / page.name).read_text(), f"stale {page.name}: run `pteforge docs`"


def test_the_host_table_names_every_backend_and_the_recorded_wheels():
    text = (DOCS / "index.md").read_text()
    for backend in default_registry():
        assert f"| [{backend.name}]({backend.name}.md) |" in text
    assert "macosx_14_0_arm64.whl`: CoreMLBackend" in text


def test_pages_follow_the_seed_template():
    for backend in default_registry():
        text = (DOCS / f"{backend.name}.md").read_text()
        positions = [text.index(section) for section in TEMPLATE_SECTIONS]
        assert positions == sorted(positions), backend.name
        # ExecuTorch's API from the model to the file: partitioned, or the backend's own flow
        assert "to_edge_transform_and_lower" in text or "edge.to_executorch()" in text, backend.name
        assert "example_inputs = " in text and "write_to_file" in text, backend.name


def test_the_cli_reference_is_the_parsers(capsys, tmp_path):
    from pteforge.cli import main

    assert main(["docs", "--out", str(tmp_path)]) == 0
    committed = DOCS.parent / "cli.md"
    assert (tmp_path / "cli.md").read_text() == committed.read_text(), "stale docs/cli.md: run `pteforge docs`"
    assert {p.name for p in (tmp_path / "backends").glob("*.md")} == {p.name for p in DOCS.glob("*.md")}
    for command in ("export", "validate", "bench", "select", "manifest", "publish", "backends", "models", "cache"):
        assert f"## `pteforge {command}`" in committed.read_text()


# After load, in the page: every image drawn, and every link's target; the verdict on <body>.
_LINKS_JS = """<script>window.addEventListener('load', function () {
  var broken = Array.from(document.images).filter(function (i) { return !(i.complete && i.naturalWidth > 0); })
    .map(function (i) { return 'image ' + i.getAttribute('src'); });
  document.body.dataset.images = broken.length ? broken.join(' ') : 'ok';
  document.body.dataset.links = Array.from(document.links).map(function (a) { return a.href; }).join(' ');
});</script>"""


def broken_links(page: Path, tmp_path: Path) -> list[str]:
    """What headless Chromium finds broken in ``page``: images that do not draw, and links
    to a file that is not there or to an anchor its page lacks (links off the machine aside)."""
    import re
    import subprocess
    from urllib.parse import unquote, urlparse

    from test_reports import browser_or_skip

    probe = page.with_name(".probe-" + page.name)
    probe.write_text(page.read_text().replace("</body>", _LINKS_JS + "</body>"))
    proc = subprocess.run([browser_or_skip(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                           f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=5000", "--dump-dom",
                           probe.as_uri()], capture_output=True, text=True, timeout=120)
    probe.unlink()
    images = re.search(r'data-images="([^"]*)"', proc.stdout)
    links = re.search(r'data-links="([^"]*)"', proc.stdout)
    assert images and links, proc.stderr[-1000:]
    broken = [] if images.group(1) == "ok" else [images.group(1)]
    for href in links.group(1).split():
        url = urlparse(href)
        if url.scheme != "file":
            continue
        target = Path(unquote(url.path))
        target = target / "index.html" if target.is_dir() else target
        if target.name.startswith(".probe-"):
            target = page
        if not target.is_file():
            broken.append(f"link {href}")
        elif url.fragment and f'id="{url.fragment}"' not in target.read_text(errors="replace"):
            broken.append(f"anchor {href}")
    return broken


def test_the_docs_site_builds_and_getting_started_has_no_broken_link(tmp_path):
    import os
    import subprocess
    import sys

    import pytest

    try:
        import mkdocs  # noqa: F401 - the docs group: .ci/run installs it
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail("CI must have the docs group (.ci/run builds the site)")
        pytest.skip("mkdocs is not installed (uv sync --group docs)")
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-d", str(site)],
                   cwd=DOCS.parent.parent, check=True, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    page = site / "getting-started" / "index.html"
    assert broken_links(page, tmp_path) == []
    assert "uv sync --locked" in page.read_text()


def test_the_report_has_no_broken_link(tmp_path):
    from pteforge.cli import main

    out = tmp_path / "out"
    (tmp_path / "parts.txt").write_text("bolt\nnut\n")
    assert main(["export", "--model", "tiny_models:my_detector", "--input-shape", "1,3,64,64", "--task", "detection",
                 "--labels-file", str(tmp_path / "parts.txt"), "--backends", "xnnpack", "coreml", "--bench-runs", "2",
                 "--out", str(out), "-q"]) == 0
    assert main(["validate", str(out), "--draw", "-q"]) == 0  # photos drawn into the report
    assert "<img" in (out / "report.html").read_text()
    assert broken_links(out / "report.html", tmp_path) == []

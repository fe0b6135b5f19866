"""The backend pages are generated from the backend files and committed: they must be current."""

from pathlib import Path

from pteforge.backends import default_registry
from pteforge.report.docs import write_docs
from pteforge.host import host

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
        assert "to_edge_transform_and_lower" in text and "write_to_file" in text


def test_the_cli_reference_is_the_parsers(capsys, tmp_path):
    from pteforge.cli import main

    assert main(["docs", "--out", str(tmp_path)]) == 0
    committed = DOCS.parent / "cli.md"
    assert (tmp_path / "cli.md").read_text() == committed.read_text(), "stale docs/cli.md: run `pteforge docs`"
    assert {p.name for p in (tmp_path / "backends").glob("*.md")} == {p.name for p in DOCS.glob("*.md")}
    for command in ("export", "validate", "bench", "select", "manifest", "publish", "backends", "models", "cache"):
        assert f"## `pteforge {command}`" in committed.read_text()

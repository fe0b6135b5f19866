"""`pteforge export -c FILE`: options from a pteforge.toml or [tool.pteforge]; flags win."""

import json

import pytest
from test_cli import cli, error_lines

from pteforge.errors import ExitStatus

CONFIG = """\
# the export's options, under the flags' names
model = ["tiny_models:sized(classes=3)"]
input-shape = ["1,3,16,16"]
weights = "none"
backends = ["xnnpack", "portable"]
bench-runs = 0
"""


def test_a_config_file_runs_the_export_and_flags_override_it(capsys, tmp_path):
    (tmp_path / "pteforge.toml").write_text(CONFIG + f'out = "{tmp_path / "from-file"}"\n')
    code, _, err = cli(capsys, "export", "-c", tmp_path / "pteforge.toml")
    assert code == ExitStatus.OK, err
    entries = json.loads((tmp_path / "from-file" / "index.json").read_text())["models"]
    assert {e["target"] for e in entries} == {"xnnpack", "portable"} and entries[0]["source"] == "tiny_models:sized(classes=3)"

    # flags win: another --out, one backend, another model
    code, _, err = cli(capsys, "export", "-c", tmp_path / "pteforge.toml", "--out", tmp_path / "flags",
                       "--backends", "portable", "--model", "tiny_models:tiny")
    assert code == ExitStatus.OK, err
    [e] = json.loads((tmp_path / "flags" / "index.json").read_text())["models"]
    assert e["target"] == "portable" and e["source"] == "tiny_models:tiny"


def test_pyproject_tool_table(capsys, tmp_path):
    body = "\n".join(f"{line}" for line in CONFIG.splitlines() if not line.startswith("#"))
    (tmp_path / "pyproject.toml").write_text(f'[project]\nname = "app"\n\n[tool.pteforge]\n{body}\nout = "{tmp_path / "o"}"\n')
    code, _, err = cli(capsys, "export", "-c", tmp_path / "pyproject.toml", "--backends", "portable")
    assert code == ExitStatus.OK, err
    assert json.loads((tmp_path / "o" / "index.json").read_text())["models"][0]["target"] == "portable"


@pytest.mark.parametrize(
    "text, needle",
    [
        ('out = "x"\nbackend = ["xnnpack"]\n', "pteforge.toml:2: backend is not an option; did you mean backends?"),
        ('seed = "seven"\n', "pteforge.toml:1: seed has a wrong value"),
        ("backends = [xnnpack]\n", "pteforge.toml: not valid TOML"),
    ],
)
def test_errors_name_the_key_and_the_line(capsys, tmp_path, text, needle):
    (tmp_path / "pteforge.toml").write_text(text)
    code, _, err = cli(capsys, "export", "-c", tmp_path / "pteforge.toml")
    assert code == ExitStatus.USAGE
    [line] = error_lines(err)
    assert needle in line, line


def test_the_file_can_publish_too(capsys, tmp_path):
    site = tmp_path / "site"
    (tmp_path / "pteforge.toml").write_text(CONFIG + f'out = "{tmp_path / "o"}"\npublish = "{site}"\n'
                                            'publish-base-url = "https://example.org/pte"\n')
    code, stdout, err = cli(capsys, "export", "-c", tmp_path / "pteforge.toml", "--backends", "portable")
    assert code == ExitStatus.OK, err
    assert "published" in stdout
    versions = json.loads((site / "versions.json").read_text())
    [e] = json.loads((site / versions["latest"] / "index.json").read_text())["models"]
    assert e["remoteUrl"] == f"https://example.org/pte/{versions['latest']}/custom/sized_portable.pte"


def test_the_example_config_names_the_apps_whole_catalogue():
    from conftest import ROOT

    from pteforge.config import load_config
    from pteforge.models import select_models
    from pteforge.report.app import APP_CATEGORIES

    values = load_config(ROOT / "examples" / "pteforge.toml")
    families = {k: v for k, v in values.items() if k not in {"labels", "backends", "weights", "out"}}
    specs = select_models(**families)
    # gemma is in the file, commented out: ~1 GB per program, and only xnnpack and coreml
    # of the seed's backends export language models
    assert {s.family for s in specs} == set(APP_CATEGORIES) - {"gemma"}, "every category the app shows"
    assert "# gemma = true" in (ROOT / "examples" / "pteforge.toml").read_text()
    assert values["backends"] == ["xnnpack", "coreml", "mps", "vulkan"], "the seed's backends"

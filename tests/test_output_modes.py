"""-q, -v and --json on every command, and tables that fit the terminal."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from test_cli import cli, error_lines

from pteforge.core.errors import ExitStatus

ROOT = Path(__file__).resolve().parent.parent
TINY = ("export", "--model", "tiny_models:tiny", "--input-shape", "1,3,32,32", "--bench-runs", "2")


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    """A tiny export: one artifact run here, one that needs a device."""
    from pteforge.cli import main

    out = tmp_path_factory.mktemp("modes") / "out"
    assert main([*TINY, "--backends", "xnnpack", "coreml", "--out", str(out)]) == ExitStatus.OK
    return out


@pytest.mark.slow
def test_json_is_one_document_with_the_files_fields(capsys, out, tmp_path):
    code, stdout, _ = cli(capsys, *TINY, "--backends", "xnnpack", "coreml", "--out", out, "--json")
    assert code == ExitStatus.OK
    doc = json.loads(stdout)  # all of stdout: one document, nothing else
    index = json.loads((out / "index.json").read_text())
    assert [m["name"] for m in doc["models"]] == [m["name"] for m in index["models"]] and doc["lastRunFailures"] == []
    for args, check in (
        (("validate", out, "--json"), lambda d: {Path(f["file"]).name for f in d["files"]} >= {"tiny_xnnpack.pte"}),
        (("bench", out, "--runs", "2", "--json"), lambda d: {f["status"] for f in d["files"]} == {"measured", "NOT_RUNNABLE_HERE"}),
        (("select", out / "index.json", "tiny", "--json"), lambda d: d["selected"] == "tiny_xnnpack.pte"),
        (("manifest", "check", out, "--json"), lambda d: d["valid"] and d["artifacts"] + d["references"] == 2),
        (("models", "--json"), lambda d: "mobilenet_v3_small" in {m["name"] for m in d}),
        (("backends", "--json"), lambda d: {"xnnpack", "coreml"} <= {b["name"] for b in d}),
    ):
        code, stdout, err = cli(capsys, *args)
        assert check(json.loads(stdout)), (args, stdout[:300], err[-300:])
    # a failure is a document too, and its line is on stderr
    code, stdout, err = cli(capsys, "manifest", "check", tmp_path / "missing.json", "--json")
    assert code == ExitStatus.USAGE and json.loads(stdout)["exitCode"] == ExitStatus.USAGE
    assert "no such file" in error_lines(err)[0]


@pytest.mark.slow
def test_quiet_prints_the_final_line_only(capsys, out):
    from pteforge.models.catalog import build_catalog

    code, stdout, err = cli(capsys, "-q", *TINY, "--backends", "xnnpack", "coreml", "--out", out)
    assert code == ExitStatus.OK and err == ""
    [line] = stdout.splitlines()
    assert line.startswith("exported 2/2 target(s): 1 proven on this host, 1 needs a device; manifest ")
    for args, start in ((("-q", "validate", out), "validated 2 file(s): 1 proven on this host, 1 needs a device"),
                        (("bench", out, "--runs", "2", "-q"), "timed 1 of 2 file(s) on this host"),
                        (("manifest", "check", out, "-q"), f"{out / 'index.json'}: valid"),  # not under the cwd: whole
                        (("models", "-q"), f"{len(list(build_catalog()))} catalog models")):
        code, stdout, err = cli(capsys, *args)
        assert code == ExitStatus.OK and len(stdout.splitlines()) == 1 and stdout.startswith(start), (args, stdout)


@pytest.mark.slow
def test_only_proven_rows_get_a_check_mark_and_measured_rows_come_first(capsys, out):
    code, stdout, err = cli(capsys, *TINY, "--backends", "xnnpack", "coreml", "--out", out)
    assert "  ✓ tiny xnnpack: VERIFIED" in err and "  ○ tiny coreml: NOT_RUNNABLE_HERE" in err
    assert "○ Successfully exported 2/2 backends" in stdout and "✅" not in stdout
    code, stdout, _ = cli(capsys, "bench", out, "--runs", "2")
    table, folded = stdout.index("tiny_xnnpack.pte"), stdout.index("not run here (1): tiny_coreml.pte")
    assert table < folded and stdout.count("tiny_coreml.pte") == 1
    code, stdout, _ = cli(capsys, "validate", out)
    table, folded = stdout.index("tiny_xnnpack.pte"), stdout.index("not run here (1): tiny_coreml.pte")
    assert table < folded and stdout.count("tiny_coreml.pte") == 1


@pytest.mark.parametrize("columns", [80, 120])
def test_tables_fit_the_terminal_without_breaking_words(columns):
    env = {**os.environ, "COLUMNS": str(columns)}
    for command in ("backends", "models"):
        proc = subprocess.run([sys.executable, "-m", "pteforge", command], capture_output=True, text=True, env=env,
                              cwd=ROOT, check=True)
        lines = proc.stdout.splitlines()
        assert max(len(ln) for ln in lines) <= columns, (command, columns)
        names = ["xnnpack", "coreml", "openvino", "ethos-u55", "cortex-m"] if command == "backends" else \
            ["mobilenet_v3_small", "yolov10n-face", "movenet_lightning"]
        for name in names:  # each on one line, whole
            assert any(f"│ {name} " in ln for ln in lines), (command, columns, name)


def test_options_of_every_command_go_before_it_too(capsys, out):
    code, stdout, _ = cli(capsys, "--json", "select", out / "index.json", "tiny")
    assert code == ExitStatus.OK and json.loads(stdout)["selected"] == "tiny_xnnpack.pte"


def test_the_plan_says_what_runs_downloads_and_how_long(capsys, tmp_path):
    code, stdout, _ = cli(capsys, "--mobilenet", "--yolo", "--backends", "xnnpack", "portable", "--dry-run",
                          "--out", tmp_path / "out")
    assert code == ExitStatus.OK and not (tmp_path / "out").exists()
    assert "Plan: 2 model(s), 4 job(s)" in stdout
    assert "downloads: pretrained weights of mobilenet_v3_small, yolo11n" in stdout
    assert "time: about 25 s for 4 vision job(s)" in stdout and stdout.rstrip().endswith("dry run: nothing was written")


def test_json_of_a_run_that_wrote_nothing_still_names_its_failures(capsys, tmp_path):
    """No manifest and no report.json are written when no row wrote a file: the document
    carries the run's failures itself, each with its reason and fix."""
    code, stdout, _ = cli(capsys, "export", "--model", "tiny_models:data_dependent", "--input-shape", "1,4",
                          "--backends", "portable", "qnn", "--out", tmp_path / "out", "--json")
    assert code == ExitStatus.TARGETS_FAILED
    failed = {f["target"]: f for f in json.loads(stdout)["lastRunFailures"]}
    assert failed["portable"]["status"] == "CAPTURE_FAILED" and "branches on tensor values" in failed["portable"]["reason"]
    assert failed["qnn"]["status"] == "UNAVAILABLE" and "QNN_SDK_ROOT" in failed["qnn"]["fix"]
    assert not (tmp_path / "out").exists()


def test_json_documents_hold_no_nan_or_infinity():
    """Python writes NaN and Infinity into JSON, which Dart's and browsers' parsers refuse:
    --json's document and validate's report write them as null."""
    import json

    from pteforge.core.io import json_text

    text = json_text({"max_abs_error": float("inf"), "rows": [float("nan"), 1.5, (2.0, float("-inf"))]})
    assert json.loads(text) == {"max_abs_error": None, "rows": [None, 1.5, [2.0, None]]}
    assert "NaN" not in text and "Infinity" not in text


@pytest.mark.parametrize("held", [False, True])
def test_torch_imported_late_in_a_commands_process_logs_no_warning_to_its_terminal(held):
    """The command's process may import torch mid-run (a result unpickled there, the runtime
    asked there): torch sets its loggers up at import, so a level set before has no effect,
    and torchao's import then logs a deprecation to the terminal. Held, only errors show."""
    code = ("from pteforge.core.quiet import quiet_libraries\n"
            f"quiet_libraries(torch_logs={held})\n"
            "import logging, torchao\n"
            "logging.getLogger('torch.somewhere').error('an error still shows')\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr
    warned = [ln for ln in proc.stderr.splitlines() if ln.startswith("W") and "register_constant" in ln]
    assert bool(warned) != held, proc.stderr  # unheld: the warning this guards against is there to see
    assert "an error still shows" in proc.stderr

"""The command line, in-process (fast) and as a subprocess (as users run it)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, run_cli, written

from pteforge.cli import main
from pteforge.core.errors import ExitStatus

TINY = ["--model", "tiny_models:tiny", "--input-shape", "1,3,16,16", "--weights", "none"]


def cli(capsys, *args):
    code = main([str(a) for a in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def error_lines(err: str) -> list[str]:
    return [ln for ln in err.splitlines() if ln.startswith("error:")]


def test_help_does_not_import_the_compiler():
    code = (
        "import sys, pteforge.cli as c\n"
        "try:\n    c.main(['--help'])\nexcept SystemExit:\n    pass\n"
        "print('LEAK' if any(m in sys.modules for m in ('torch', 'executorch')) else 'CLEAN')"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert proc.stdout.strip().endswith("CLEAN"), proc.stdout + proc.stderr


def test_executorch_reads_its_edge_dialect_table_with_the_c_yaml_parser():
    """``import executorch.exir`` parses a 138 KB YAML file with ruamel.yaml in every process
    that lowers; the pure-Python parser took ~1.2 s more (the dependency is for this)."""
    from ruamel.yaml import YAML

    assert YAML(typ="safe").Parser.__module__.endswith("_ruamel_yaml"), "ruamel.yaml.clib is not installed"


def test_unknown_backend_names_the_closest(capsys, out):
    code, _, err = cli(capsys, *TINY, "--backends", "xnnpak", "--out", out)
    assert code == ExitStatus.USAGE
    [line] = error_lines(err)
    assert "unknown backend 'xnnpak'" in line and "Did you mean 'xnnpack'?" in line


def test_unknown_model_names_the_closest(capsys, out):
    code, _, err = cli(capsys, "export", "--yolo", "yolo11", "--out", out)
    assert code == ExitStatus.USAGE
    assert "Did you mean 'yolo11n'?" in error_lines(err)[0]


def test_precision_the_backend_does_not_take(capsys, out):
    code, _, err = cli(capsys, *TINY, "--backends", "ethos-u55:fp32", "--out", out)
    assert code == ExitStatus.USAGE
    assert "ethos-u55 does not take precision fp32; it takes: int8" in error_lines(err)[0]
    assert not out.exists(), "refused before any work"


def test_only_unavailable_backends_prints_the_seed_lines(capsys, out):
    code, _, err = cli(capsys, *TINY, "--backends", "qnn", "mps", "--out", out)
    assert code == ExitStatus.NO_BACKEND
    assert "No available backends from requested: ['qnn', 'mps']" in err
    assert "Available backends: ['xnnpack'" in err
    assert "QNN_SDK_ROOT" in err and "use --backends metal" in err


@pytest.mark.parametrize(
    "args, status, needle",
    [
        (["--model", "tiny_models:tiny", "--input-shape", "1,x,3"], ExitStatus.USAGE, "malformed --input-shape"),
        (["--model", "tiny_models:tiny", "--input-shape", "1,3", "--input-dtype", "complex"], ExitStatus.USAGE, "--input-dtype"),
        (["--model", "tiny_models:tiny"], ExitStatus.USAGE, "needs its input shape"),
        (["--model", "tiny_models"], ExitStatus.USAGE, "malformed --model"),
        (["--model", "tiny_models:not_a_module", "--input-shape", "1,3"], ExitStatus.MODEL, "returned dict, not a torch.nn.Module"),
        (["--model", "tiny_models:raises", "--input-shape", "1,3"], ExitStatus.MODEL, "raised RuntimeError: the checkpoint server is down"),
        (["--model", "no_such_module:f", "--input-shape", "1,3"], ExitStatus.MODEL, "cannot import 'no_such_module'"),
        (["--model", "tiny_models:tiny", "--input-shape", "1,3,16,16", "--weights", "/nonexistent.pt"], ExitStatus.USAGE, "no such file"),
        (["--model", "tiny_models:two_inputs", "--input-shape", "x=2,5", "--input-shape", "ids=int64:2,3"], ExitStatus.USAGE,
         "give the shapes in forward's order, without names: --input-shape 2,5 --input-shape int64:2,3"),
    ],
)
def test_bad_input_is_one_line_with_its_exit_code(capsys, out, args, status, needle):
    code, stdout, err = cli(capsys, *args, "--backends", "xnnpack", "--out", out)
    assert code == status
    [line] = error_lines(err)
    assert needle in line
    assert "Traceback" not in err + stdout
    assert not out.exists(), "a directory made for a run that wrote nothing is not left behind"
    if "cannot import" in needle:
        assert "capturing" not in err, "a module that is not there is refused before any work"


def test_bad_pt2_file(capsys, out, tmp_path):
    bad = tmp_path / "model.pt2"
    bad.write_bytes(b"not a zip")
    code, _, err = cli(capsys, "--model", bad, "--backends", "xnnpack", "--out", out)
    assert code == ExitStatus.MODEL
    assert "is not a torch.export program" in error_lines(err)[0]


def test_out_is_a_file(capsys, tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    code, _, err = cli(capsys, *TINY, "--backends", "xnnpack", "--out", f)
    assert code == ExitStatus.OUTPUT
    assert "is a file, not a directory" in error_lines(err)[0]


def test_broken_manifest_is_refused_and_left_alone(capsys, out):
    out.mkdir()
    (out / "index.json").write_text("{not json")
    code, _, err = cli(capsys, *TINY, "--backends", "xnnpack", "--out", out)
    assert code == ExitStatus.MANIFEST
    assert "index.json is not valid JSON" in error_lines(err)[0]
    assert (out / "index.json").read_text() == "{not json"
    assert not list(out.rglob("*.pte"))


def test_debug_shows_the_traceback(capsys, out):
    code, _, err = cli(capsys, "--debug", "export", "--model", "tiny_models:raises", "--input-shape", "1,3", "--out", out)
    assert code == ExitStatus.MODEL
    assert "Traceback" in err


def test_export_success_and_manifest_contract(capsys, out):
    code, stdout, err = cli(capsys, *TINY, "--backends", "xnnpack", "portable", "--out", out, "--base-url", "https://example.org/m")
    assert code == ExitStatus.OK, err
    assert "Successfully exported 2/2 backends" in stdout
    assert "xnnpack: tiny_xnnpack.pte (" in stdout and "% delegated" in stdout and "verified" in stdout
    manifest = json.loads((out / "index.json").read_text())
    assert {"version", "generated", "baseUrl", "models", "labels", "backends"} <= set(manifest)
    entries = {e["name"]: e for e in manifest["models"]}
    e = entries["tiny_xnnpack.pte"]
    assert isinstance(e["size"], int) and e["size"] == (out / "custom" / "tiny_xnnpack.pte").stat().st_size
    assert e["remoteUrl"] == "https://example.org/m/custom/tiny_xnnpack.pte"
    assert e["backend"] == "xnnpack" and e["category"] == "custom" and e["status"] == "VERIFIED"
    assert e["delegation"]["nodes_per_backend"]["XnnpackBackend"] > 0
    assert e["versions"]["executorch"] == "1.5.1"
    import hashlib

    assert e["hash"] == hashlib.sha256((out / "custom" / "tiny_xnnpack.pte").read_bytes()).hexdigest()
    assert entries["tiny_portable.pte"]["delegation"]["delegated_nodes"] == 0

    # one directory, one base URL: a later run's moves every entry (two runs with two base
    # URLs left a manifest of both), and a run without one keeps the manifest's
    from pteforge.app.platforms import fallback_tables
    from pteforge.report.manifest import merge

    for given, base in (("https://cdn.example.org/v2", "https://cdn.example.org/v2"), (None, "https://cdn.example.org/v2")):
        merged = merge(out, [], [], {}, given, fallback_tables())
        assert merged.baseUrl == base
        for entry in merged.models:
            assert entry.remoteUrl == f"{base}/{entry.file}"
            assert entry.labelsRemoteUrl is None or entry.labelsRemoteUrl == f"{base}/{entry.labelsFile}"
        assert all(lab.remoteUrl == f"{base}/{lab.file}" for lab in merged.labels)


def test_a_later_run_adds_to_the_manifest(capsys, out):
    assert cli(capsys, *TINY, "--backends", "portable", "--out", out)[0] == ExitStatus.OK
    assert cli(capsys, *TINY, "--backends", "xnnpack", "--out", out)[0] == ExitStatus.OK
    names = {e["name"] for e in json.loads((out / "index.json").read_text())["models"]}
    assert names == {"tiny_portable.pte", "tiny_xnnpack.pte"}


def test_a_later_run_lists_no_earlier_file_that_is_gone(capsys, out):
    """An earlier row whose file was deleted or cut short is taken out of the manifest, with
    a warning, so the app is never offered it; the file cut short stays on disk."""
    assert cli(capsys, *TINY, "--backends", "portable", "xnnpack", "--out", out)[0] == ExitStatus.OK
    (out / "custom" / "tiny_portable.pte").unlink()
    code, _, err = cli(capsys, *TINY, "--backends", "xnnpack", "--out", out)
    assert code == ExitStatus.OK and "warning: custom/tiny_portable.pte is missing: its entry is no longer in" in err
    assert {e["name"] for e in json.loads((out / "index.json").read_text())["models"]} == {"tiny_xnnpack.pte"}
    (out / "custom" / "tiny_xnnpack.pte").write_bytes(b"cut")
    code, _, err = cli(capsys, *TINY, "--name", "other", "--backends", "portable", "--out", out)
    assert code == ExitStatus.OK and "custom/tiny_xnnpack.pte is 3 bytes, not the" in err, err
    assert {e["name"] for e in json.loads((out / "index.json").read_text())["models"]} == {"other_portable.pte"}
    assert (out / "custom" / "tiny_xnnpack.pte").read_bytes() == b"cut"
    assert cli(capsys, "manifest", "check", out)[0] == ExitStatus.OK


def test_some_targets_unavailable_exit_code_and_summary(capsys, out):
    code, stdout, err = cli(capsys, *TINY, "--backends", "portable", "qnn", "--out", out)
    assert code == ExitStatus.TARGETS_FAILED
    assert "Unavailable backends from requested: ['qnn']" in err
    assert "Successfully exported 1/2 backends" in stdout
    assert "Failed 1 backend(s):" in stdout and "qnn: UNAVAILABLE" in stdout
    assert (out / "custom" / "tiny_portable.pte").exists()


def test_capture_failure_keeps_the_earlier_artifact(capsys, out, monkeypatch):
    """A failed target never replaces an earlier good artifact of the same name."""
    assert cli(capsys, *TINY, "--backends", "portable", "--out", out)[0] == ExitStatus.OK
    good = out / "custom" / "tiny_portable.pte"
    before = good.read_bytes()
    manifest_before = json.loads((out / "index.json").read_text())["models"]
    monkeypatch.setenv("TINY_BREAK", "1")
    code, stdout, _ = cli(capsys, "--model", "tiny_models:tiny", "--input-shape", "1,4", "--weights", "none",
                          "--backends", "portable", "--out", out)
    assert code == ExitStatus.TARGETS_FAILED
    assert "CAPTURE_FAILED" in stdout and "torch.export failed" in stdout and "torch.cond" in stdout
    assert good.read_bytes() == before
    assert json.loads((out / "index.json").read_text())["models"] == manifest_before


def test_capture_runs_once_per_model(capsys, out, monkeypatch, tmp_path):
    log = tmp_path / "traces.log"
    monkeypatch.setenv("TINY_TRACE_LOG", str(log))
    code, _, err = cli(capsys, *TINY, "--backends", "xnnpack", "portable", "xnnpack:int8", "--out", out, "--no-verify")
    assert code == ExitStatus.OK, err
    assert len(log.read_text().splitlines()) == 1, "one torch.export trace for three targets"
    assert len(json.loads((out / "index.json").read_text())["models"]) == 3


def test_a_variant_capture_is_a_job_of_its_own_and_its_failure_ends_only_its_targets(capsys, out, tmp_path):
    """A target whose backend transforms the eager model before capture (Core ML's int4
    weights) has a capture job of its own, after the model's main capture. A model that
    cannot be deep-copied for that transform (it holds a lock) ends that target's row with
    the reason; the other targets, from the main capture, are exported as ever."""
    (tmp_path / "locked.py").write_text(
        "import threading\nimport torch\n\n"
        "class Locked(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.fc = torch.nn.Linear(64, 8)\n"
        "        self.lock = threading.Lock()  # no deep copy of it\n\n"
        "    def forward(self, x):\n"
        "        return self.fc(x)\n\n"
        "def build():\n    return Locked().eval()\n")
    code, stdout, _ = cli(capsys, "--model", f"{tmp_path / 'locked.py'}:build", "--input-shape", "1,64", "--weights",
                          "none", "--backends", "xnnpack", "coreml:int4-weight", "--bench-runs", "0", "--out", out)
    assert code == ExitStatus.TARGETS_FAILED
    manifest = json.loads((out / "index.json").read_text())
    assert {m["target"]: m["status"] for m in manifest["models"]}.get("xnnpack") == "VERIFIED"
    [failed] = json.loads((out / "report.json").read_text())["last_run_failures"]
    assert failed["target"] == "coreml:int4-weight" and failed["status"] == "CAPTURE_FAILED", failed
    assert "cannot pickle '_thread.lock' object" in failed["reason"] and "CAPTURE_FAILED" in stdout
    assert not list(out.rglob("*int4weight*.pte")), "nothing written for the target without its capture"


def test_chain_reports_the_split_as_it_is(capsys, out):
    code, stdout, err = cli(capsys, *TINY, "--backends", "openvino+xnnpack", "--out", out)
    assert code == ExitStatus.OK, err
    entry = written(out / "index.json")[0]
    assert entry["backends"] == ["openvino", "xnnpack"] and entry["backend"] == "openvino"
    split = entry["delegation"]["nodes_per_backend"]
    assert split.get("OpenvinoBackend", 0) > 0
    assert sum(split.values()) == entry["delegation"]["delegated_nodes"]


def test_labels_only(capsys, out):
    code, _, err = cli(capsys, "export", "--labels", "--out", out)
    assert code == ExitStatus.OK, err
    assert len((out / "imagenet_classes.txt").read_text().splitlines()) == 1000
    assert len((out / "coco_classes.txt").read_text().splitlines()) == 80
    assert (out / "imagenet_classes.txt").read_text().splitlines()[0] == "tench"
    assert (out / "coco_classes.txt").read_text().splitlines()[0] == "person"


def test_main_py_behaves_like_pteforge(tmp_path):
    """Same exit code and output through `python main.py` and the `pteforge` script."""
    args = ["export", "--model", "tiny_models:tiny", "--input-shape", "1,3,16,16", "--backends", "xnnpk"]
    via_main = run_cli(*args, "--out", tmp_path / "a")
    script = Path(sys.executable).parent / "pteforge"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "tests")}
    via_script = subprocess.run([str(script), *args, "--out", str(tmp_path / "a")],
                                capture_output=True, text=True, env=env)
    assert via_main.returncode == via_script.returncode == ExitStatus.USAGE
    assert via_main.stderr == via_script.stderr and "Did you mean 'xnnpack'?" in via_main.stderr


@pytest.mark.slow
def test_subprocess_export_and_exit_codes(tmp_path):
    ok = run_cli("export", *TINY, "--backends", "xnnpack", "--out", tmp_path / "o")
    assert ok.returncode == 0, ok.stderr
    assert "Successfully exported 1/1 backends" in ok.stdout
    assert (tmp_path / "o" / "custom" / "tiny_xnnpack.pte").exists()
    usage = run_cli("export", "--no-such-flag")
    assert usage.returncode == 2


def test_pretrained_offline_names_the_alternatives(capsys, out):
    code, _, err = cli(capsys, "export", "--mobilenet", "--backends", "portable", "--out", out)
    if code == ExitStatus.OK:
        pytest.skip("this machine can download weights")
    assert code == ExitStatus.WEIGHTS
    line = error_lines(err)[0]
    assert "--weights none" in line and "--weights PATH" in line


def test_mismatch_is_kept_marked_failed_and_never_replaces_a_good_artifact(capsys, out):
    assert cli(capsys, *TINY, "--backends", "xnnpack", "--out", out)[0] == ExitStatus.OK
    good = out / "custom" / "tiny_xnnpack.pte"
    before = good.read_bytes()
    # An impossible SQNR floor: the proof fails, as it would for a wrong program.
    code, stdout, _ = cli(capsys, *TINY, "--backends", "xnnpack", "--out", out, "--tolerance", "500")
    assert code == ExitStatus.TARGETS_FAILED
    assert "MISMATCH" in stdout and "< 500.0 dB" in stdout
    assert good.read_bytes() == before
    assert (out / "custom" / "tiny_xnnpack.mismatch.pte").exists()
    manifest = json.loads((out / "index.json").read_text())
    entries = {e["name"]: e for e in manifest["models"]}
    assert set(entries) == {"tiny_xnnpack.pte"} and entries["tiny_xnnpack.pte"]["status"] == "VERIFIED"
    [bad] = manifest["failed"]  # kept, marked failed, out of the list an app reads
    assert bad["status"] == "MISMATCH" and bad["verification"]["passed"] is False
    assert bad["verification"]["threshold_sqnr_db"] == 500


def test_same_seed_same_artifact(capsys, tmp_path):
    hashes = []
    for run in ("a", "b"):
        out = tmp_path / run
        assert cli(capsys, *TINY, "--backends", "xnnpack", "--seed", "7", "--no-cache", "--out", out)[0] == ExitStatus.OK
        hashes.append(json.loads((out / "index.json").read_text())["models"][0]["hash"])
    assert hashes[0] == hashes[1]
    out = tmp_path / "c"
    assert cli(capsys, *TINY, "--backends", "xnnpack", "--seed", "8", "--out", out)[0] == ExitStatus.OK
    assert json.loads((out / "index.json").read_text())["models"][0]["hash"] != hashes[0]


def test_pt2_model_file(capsys, out, tmp_path):
    import torch

    import tiny_models

    pt2 = tmp_path / "exported_tiny.pt2"
    torch.export.save(torch.export.export(tiny_models.tiny().eval(), (torch.rand(1, 3, 16, 16),)), str(pt2))
    code, stdout, err = cli(capsys, "export", "--model", pt2, "--backends", "xnnpack", "--out", out)
    assert code == ExitStatus.OK, err
    [e] = json.loads((out / "index.json").read_text())["models"]
    assert e["name"] == "exported_tiny_xnnpack.pte" and e["status"] == "VERIFIED"
    assert e["inputShapes"] == [[1, 3, 16, 16]] and e["source"] == str(pt2.resolve())


def test_a_pt2_with_a_dynamic_dim_takes_an_input_shape_in_its_range(capsys, out, tmp_path):
    """--input-shape was ignored for a .pt2 (the artifact kept the example's batch of 2,
    and a batch beyond the program's range was accepted); reading the dims also made the
    dynamic one static (``int()`` of it), so no range was left to check."""
    import torch

    import tiny_models

    pt2 = tmp_path / "batched.pt2"
    batch = torch.export.Dim("batch", min=1, max=8)
    torch.export.save(torch.export.export(tiny_models.tiny().eval(), (torch.rand(2, 3, 16, 16),),
                                          dynamic_shapes=({0: batch},)), str(pt2))
    code, _, err = cli(capsys, "export", "--model", pt2, "--input-shape", "4,3,16,16", "--weights", "none",
                       "--backends", "portable", "--bench-runs", "0", "--out", out)
    assert code == ExitStatus.OK, err
    [e] = json.loads((out / "index.json").read_text())["models"]
    assert e["inputShapes"] == [[4, 3, 16, 16]] and e["inputs"][0]["shape"] == [4, 3, 16, 16]
    assert e["status"] == "VERIFIED"
    for shape, dims in (("16,3,16,16", "1..8, 3, 16, 16"), ("4,3,8,8", "1..8, 3, 16, 16")):
        code, _, err = cli(capsys, "export", "--model", pt2, "--input-shape", shape, "--weights", "none",
                           "--backends", "portable", "--out", tmp_path / "o")
        assert code == ExitStatus.USAGE
        [line] = error_lines(err)
        assert f"--input-shape {shape} does not fit input x of '{pt2}', whose dims are {dims}" in line, line
    code, _, err = cli(capsys, "export", "--model", pt2, "--input-shape", "4,3,16,16", "--input-dtype", "int64",
                       "--weights", "none", "--backends", "portable", "--out", tmp_path / "o")
    assert code == ExitStatus.USAGE
    assert f"--input-dtype int64 for input x of '{pt2}', whose program takes float32" in error_lines(err)[0]
    assert not (tmp_path / "o").exists()


def test_an_input_dtype_a_model_file_does_not_take_is_refused_with_or_without_shapes(capsys, tmp_path):
    """A .pt2 and an .onnx say their inputs' dtypes. An --input-dtype without --input-shape
    was silently ignored (the .pt2 exported as float32, the run said nothing), and an .onnx
    replaced a given dtype by its own even with shapes."""
    import onnx
    import torch

    import tiny_models

    pt2, onnx_file = tmp_path / "two.pt2", tmp_path / "net.onnx"
    model, example = tiny_models.tiny().eval(), torch.rand(1, 3, 16, 16)
    torch.export.save(torch.export.export(model, (example,)), str(pt2))
    onnx.save(onnx.helper.make_model(onnx.helper.make_graph(
        [onnx.helper.make_node("Relu", ["x"], ["y"])], "net",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 4])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4])])), str(onnx_file))
    cases = [
        ([pt2, "--input-dtype", "float16"], f"--input-dtype float16 for input x of '{pt2}', whose program takes float32"),
        ([pt2, "--input-dtype", "float32", "--input-dtype", "float32"],
         f"--input-dtype given 2 times for '{pt2}', whose program takes 1 input(s)"),
        ([onnx_file, "--input-dtype", "int64"], f"--input-dtype int64 for input x of '{onnx_file}', whose program takes float32"),
        ([onnx_file, "--input-shape", "1,4", "--input-dtype", "int64"],
         f"--input-dtype int64 for input x of '{onnx_file}', whose program takes float32"),
        # a static dim ONNX Runtime, the reference, holds the input to (it was taken, and the reference failed)
        ([onnx_file, "--input-shape", "2,4"], f"--input-shape 2,4 does not fit input x of '{onnx_file}', whose dims are 1, 4"),
        ([pt2, "--input-dtype", "float"], "unsupported --input-dtype 'float'"),
    ]
    for args, said in cases:
        code, _, err = cli(capsys, "export", "--model", *args, "--weights", "none", "--backends", "portable",
                           "--out", tmp_path / "o")
        assert code == ExitStatus.USAGE, (args, err)
        assert said in error_lines(err)[0], error_lines(err)
    assert not (tmp_path / "o").exists()


def test_factory_with_several_inputs_and_dtypes(capsys, out):
    code, _, err = cli(capsys, "export", "--model", "tiny_models:two_inputs", "--input-shape", "2,5",
                       "--input-dtype", "int64", "--input-shape", "1", "--input-dtype", "float32",
                       "--weights", "none", "--backends", "portable", "--out", out)
    assert code == ExitStatus.OK, err
    [e] = json.loads((out / "index.json").read_text())["models"]
    assert e["inputShapes"] == [[2, 5], [1]] and e["status"] == "VERIFIED"
    assert e["inputs"] == [{"name": "tokens", "shape": [2, 5], "dtype": "int64"},
                           {"name": "scale", "shape": [1], "dtype": "float32"}], "what an app feeds the program"
    assert e["outputs"] == [{"name": "output", "shape": [2, 3], "dtype": "float32"}]
    assert "| tokens: int64[2, 5]; scale: float32[1] | output: float32[2, 3] |" in (out / "EXPORT_SUMMARY.md").read_text()


@pytest.mark.parametrize("shapes", [["2,5"], ["2,5", "1", "1"]], ids=["one-too-few", "one-too-many"])
def test_a_wrong_number_of_inputs_says_to_give_one_shape_per_input(capsys, out, shapes):
    args = [a for s in shapes for a in ("--input-shape", s)]
    code, stdout, _ = cli(capsys, "export", "--model", "tiny_models:two_inputs", *args, "--weights", "none",
                          "--backends", "portable", "--out", out)
    assert code == ExitStatus.TARGETS_FAILED
    said = " ".join(stdout.split())
    fix = ("forward(tokens, scale) takes 2 input(s) and 1 was given: give one --input-shape per input, in forward's "
           "order (tokens, scale): --input-shape 2,5 --input-shape SHAPE") if len(shapes) == 1 else (
           "forward(tokens, scale) takes 2 input(s) and 3 were given: give one --input-shape per input, in forward's "
           "order (tokens, scale): --input-shape 2,5 --input-shape 1")
    assert "CAPTURE_FAILED" in stdout and f"— fix: {fix}" in said, stdout


def test_a_forward_that_changes_its_inputs_in_place_gives_a_program_that_leaves_them(capsys, out):
    """ExecuTorch returns an input changed in place as an output before the model's own
    (the run failed: "the program returned 3 outputs, eager returned 1"), and the eager
    reference changed the inputs the program was then fed. The program works on copies.
    Its int8 program: the write into a view of ``y`` reached ``y`` through no quantize/
    dequantize pair (-2 dB from eager); XNNPACK's layout pass crashed on the 0-dim mean
    it takes as an input, and the program cut around the crash computed wrong values."""
    code, _, err = cli(capsys, "export", "--model", "tiny_models:in_place", "--input-shape", "1,3,8,8",
                       "--input-shape", "1,3,4", "--weights", "none", "--bench-runs", "0",
                       "--backends", "xnnpack", "portable", "xnnpack:int8", "--out", out)
    assert code == ExitStatus.OK, err
    entries = json.loads((out / "index.json").read_text())["models"]
    assert {e["status"] for e in entries} == {"VERIFIED"}, entries
    assert all(len(e["outputs"]) == 1 for e in entries), entries
    assert all(e["verification"]["sqnr_db"] > (30 if e["precision"] == "int8" else 100) for e in entries), entries
    assert all(e["delegation"]["percent"] > 75 for e in entries if e["backends"] == ["xnnpack"]), entries
    import tiny_models
    import torch
    from executorch.runtime import Runtime

    x, y = torch.rand(1, 3, 8, 8), torch.rand(1, 3, 4)
    given = (x.clone(), y.clone())
    program = Runtime.get().load_program(out / entries[0]["file"])
    [got] = program.load_method("forward").execute(list(given))
    assert torch.equal(given[0], x) and torch.equal(given[1], y), "the app's buffers are left as they were"
    torch.testing.assert_close(got, tiny_models.in_place()(x, y))


@pytest.mark.parametrize("model, shapes, parts", [
    ("in_place", ("1,3,1000000,1000000", "1,3,4"),
     ("CAPTURE_FAILED: building in_place, its inputs or its reference outputs asked for 12,000.0 GB in one allocation; "
      "this machine has", "(inputs: --input-shape 1,3,1000000,1000000 --input-shape 1,3,4) — fix: give smaller input "
      "shapes")),
    ("shifted_levels", ("int64:1,6", "int64:1,6"),
     ("CAPTURE_FAILED: IndexError: index out of range in self — fix: seeded ids are drawn in [0, 10) and level "
      "(Embedding) holds 3: give real inputs with --calibration DIR",)),
    ("lookups(shift=2)", ("1,16", "int64:1,4", "int64:2"),
     ("CAPTURE_FAILED: RuntimeError: index 8 is out of bounds for dimension 1 with size 3 — fix: seeded ids are "
      "drawn in [0, 10), more than the model indexes with them: give real inputs with --calibration DIR",)),
])
def test_a_capture_that_cannot_run_says_why_in_one_line(capsys, out, model, shapes, parts):
    """Inputs larger than memory (torch's C++ "enforce fail" line before), seeded ids past a
    small embedding table that no table's size bounds (``id_highs``)."""
    args = [a for shape in shapes for a in ("--input-shape", shape)]
    code, stdout, _ = cli(capsys, "export", "--model", f"tiny_models:{model}", *args, "--weights", "none",
                          "--backends", "portable", "--out", out)
    assert code == ExitStatus.TARGETS_FAILED
    said = " ".join(stdout.split())
    assert all(part in said for part in parts) and "enforce fail" not in said, stdout


@pytest.mark.slow  # over 20 s: the fast subset stays under 10 minutes
def test_seeded_ids_stay_within_the_smallest_table_they_index_everywhere(capsys, out):
    """A categorical feature of 3 levels beside 1,000 token ids: seeded ids were drawn in
    [0, 10) for both (CAPTURE_FAILED: "index out of range"). Its ids are now drawn below 3
    for the capture, calibration, timing, bench and validate alike (``high`` in the
    manifest's inputs)."""
    code, _, err = cli(capsys, "export", "--model", "tiny_models:categorical", "--input-shape", "int64:1,6",
                       "--input-shape", "int64:1,6", "--weights", "none", "--backends", "portable", "xnnpack:int8",
                       "--bench-runs", "3", "--out", out)
    assert code == ExitStatus.OK, err
    entries = json.loads((out / "index.json").read_text())["models"]
    assert all(e["status"] == "VERIFIED" and "p50_ms" in e["bench"] for e in entries), entries
    assert all([i.get("high") for i in e["inputs"]] == [None, 3] for e in entries), entries
    for command in ("validate", "bench"):
        code, stdout, err = cli(capsys, command, out)
        assert code == ExitStatus.OK and "failed" not in stdout.lower(), stdout + err


def test_seeded_ids_stay_within_what_a_gather_or_an_index_reads(capsys, out):
    """Seeded ids drawn in [0, 10) went past a gather over 3 scores and a 5-row table
    indexed with ``table[rows]`` (CAPTURE_FAILED: "index 6 is out of bounds"): the bound
    came only from embedding tables. Now from what a gather, index_select, ``x[ids]`` or
    scatter indexes too."""
    code, _, err = cli(capsys, "export", "--model", "tiny_models:lookups", "--input-shape", "1,16",
                       "--input-shape", "int64:1,4", "--input-shape", "int64:2", "--weights", "none",
                       "--backends", "portable", "--out", out)
    assert code == ExitStatus.OK, err
    [e] = json.loads((out / "index.json").read_text())["models"]
    assert e["status"] == "VERIFIED" and [i.get("high") for i in e["inputs"]] == [None, 3, 5], e


def test_a_lazy_layer_takes_its_shape_and_a_meta_model_its_weights(capsys, out, tmp_path):
    """``nn.LazyLinear`` failed the capture ("Attempted to use an uninitialized parameter"),
    and a model built on the meta device was "the model itself fails on inputs of shape
    ...: give the input shapes". A lazy layer is given its shape by one call on a seeded
    input; a meta model takes its values from --weights FILE, or is refused saying so."""
    import torch
    import tiny_models

    code, _, err = cli(capsys, "export", "--model", "tiny_models:lazy_head", "--input-shape", "1,3,8,8",
                       "--weights", "none", "--backends", "portable", "--out", out)
    assert code == ExitStatus.OK, err
    [e] = json.loads((out / "index.json").read_text())["models"]
    assert e["status"] == "VERIFIED" and e["outputs"][0]["shape"] == [1, 5], e
    code, _, err = cli(capsys, "--model", "tiny_models:on_meta", "--input-shape", "1,3,16,16", "--weights", "none",
                       "--backends", "portable", "--out", tmp_path / "meta")
    assert code == ExitStatus.MODEL and "returned a model on the meta device" in error_lines(err)[0], err
    weights = tmp_path / "tiny.pt"
    torch.save(tiny_models.tiny().state_dict(), weights)
    code, _, err = cli(capsys, "--model", "tiny_models:on_meta", "--input-shape", "1,3,16,16", "--weights", weights,
                       "--backends", "portable", "--out", tmp_path / "meta")
    assert code == ExitStatus.OK, err
    [e] = json.loads((tmp_path / "meta" / "index.json").read_text())["models"]
    assert e["status"] == "VERIFIED", e


@pytest.mark.slow
def test_gpt2_quantizes_for_tosa_where_its_mask_is_a_constant(capsys, out):
    """GPT-2's mask compares positions folded into a constant with a scalar (``ne.Scalar``):
    Arm's quantizer failed on it ("'Parameter' object has no attribute 'to_tensor'",
    QUANTIZE_FAILED); the operator on a constant is now left as it is
    (``scalar_ops_on_constants_left_alone``)."""
    code, _, err = cli(capsys, "export", "--model", "tiny_models:gpt2_tiny", "--input-shape", "int64:1,16",
                       "--weights", "none", "--backends", "tosa", "--out", out)
    assert code == ExitStatus.OK, err
    [e] = written(out / "index.json")
    assert e["status"] == "SIMULATED" and e["verification"]["sqnr_db"] > 20, e


def test_a_model_with_torch_cond_lowers_outside_its_branches_and_verifies(capsys, out):
    """XNNPACK keeps `linear` whole, but partitions only outside cond branches: the branches'
    linear was left neither decomposed nor delegated (LOWER_FAILED); and folding constants
    in a program with branches made it compute wrong values (MISMATCH)."""
    code, _, err = cli(capsys, "export", "--model", "tiny_models:branches", "--input-shape", "1,4", "--weights", "none",
                       "--verify-inputs", "7", "--backends", "xnnpack", "--out", out)
    assert code == ExitStatus.OK, err
    [e] = json.loads((out / "index.json").read_text())["models"]
    assert e["status"] == "VERIFIED" and e["verification"]["sqnr_db"] > 100, e
    assert 0 < e["delegation"]["percent"] < 100, "the first linear delegated, the branches on portable"


@pytest.mark.parametrize("how, names", [("dict", ["logits", "features"]), ("namedtuple", ["wide", "narrow"]),
                                        ("mixed", ["0", "3.0"])])
def test_structured_outputs_are_compared_in_the_programs_order(capsys, out, how, names):
    """The program returns a model's tensors in torch's pytree order (a dict's insertion
    order); a namedtuple or an int in the output does not stop the capture or the bundle.
    The manifest names each output by its place in what the model returns (the int and
    None are not returned by the program)."""
    code, _, err = cli(capsys, "export", "--model", f"tiny_models:structured('{how}')", "--input-shape", "1,3,8,8",
                       "--weights", "none", "--backends", "portable", "--bundle", "--out", out)
    assert code == ExitStatus.OK, err
    [e] = json.loads((out / "index.json").read_text())["models"]
    assert e["status"] == "VERIFIED" and e["verification"]["sqnr_db"] > 60, e
    import torch
    from tiny_models import structured

    from pteforge.stages.capture import flatten_outputs

    eager = flatten_outputs(structured(how)(torch.rand(1, 3, 8, 8)))
    assert e["outputs"] == [{"name": n, "shape": list(t.shape), "dtype": "float32"} for n, t in zip(names, eager)]
    assert e["inputs"] == [{"name": "x", "shape": [1, 3, 8, 8], "dtype": "float32"}]


def test_a_model_that_returns_no_tensor_fails_its_capture_saying_so(capsys, out):
    """It failed in torch.export.save: "ValueError: not enough values to unpack (expected 2, got 0)"."""
    code, stdout, _ = cli(capsys, "export", "--model", "tiny_models:structured('nothing')", "--input-shape", "1,3,8,8",
                          "--weights", "none", "--backends", "portable", "--out", out)
    assert code == ExitStatus.TARGETS_FAILED
    [line] = [ln for ln in stdout.splitlines() if "portable: CAPTURE_FAILED" in ln]
    assert "the model returns no tensor" in line and "fix: return from forward() the tensors an app reads" in line, line


@pytest.mark.parametrize(
    "cli_args, api_call",
    [
        (["--verify-inputs", "-1", *TINY], lambda tmp: __import__("pteforge").ExportConfig(out_dir=tmp, verify_inputs=-1)),
        (["--verify-inputs", "100000000", *TINY],
         lambda tmp: __import__("pteforge").ExportConfig(out_dir=tmp, verify_inputs=100_000_000)),
        (["--mobilenet", "yolo11n"], lambda tmp: __import__("pteforge").select_models(mobilenet=["yolo11n"])),
        (["--model", "tiny_models:tiny", "--model", "other_models:tiny", "--input-shape", "1,3,16,16"],
         lambda tmp: __import__("pteforge").export(
             __import__("pteforge").select_models(refs=["tiny_models:tiny", "other_models:tiny"], input_shapes=["1,3,16,16"]),
             __import__("pteforge").plan_targets(["portable"]), __import__("pteforge").ExportConfig(out_dir=tmp, weights="none"))),
        ([*TINY, "--weights", "/no/such/file.pt"], lambda tmp: __import__("pteforge").ExportConfig(out_dir=tmp, weights="/no/such/file.pt")),
    ],
    ids=["verify-inputs", "verify-inputs-typo", "not-a-mobilenet", "name-collision", "weights-file"],
)
def test_the_library_refuses_what_the_command_line_refuses(capsys, tmp_path, cli_args, api_call):
    from pteforge.core.errors import UsageError

    code, _, err = cli(capsys, *cli_args, "--backends", "portable", "--out", tmp_path / "cli")
    assert code == ExitStatus.USAGE
    with pytest.raises(UsageError) as info:
        api_call(tmp_path / "api")
    assert error_lines(err) == [f"error: {info.value.one_line()}"]


def test_factory_arguments_are_literals_recorded_and_rebuilt(capsys, out):
    ref = "tiny_models:sized(4, classes=3, bias=False)"
    code, _, err = cli(capsys, "--model", ref, "--input-shape", "1,3,16,16", "--weights", "none",
                       "--backends", "xnnpack", "--out", out)
    assert code == ExitStatus.OK, err
    [e] = json.loads((out / "index.json").read_text())["models"]
    assert e["source"] == ref and e["modelName"] == "sized" and e["status"] == "VERIFIED"
    # validate rebuilds the same eager model from the recorded reference (3 classes, no bias)
    code, _, err = cli(capsys, "validate", "--models-dir", out)
    assert code == ExitStatus.OK, err
    [f] = json.loads((out / "validation_report.json").read_text())["files"]
    assert f["status"] == "VERIFIED" and f["sqnr_db"] > 40

    for bad in ("tiny_models:sized(__import__('os').getpid())", "tiny_models:sized(*[1])", "tiny_models:sized(width=)"):
        code, _, err = cli(capsys, "--model", bad, "--input-shape", "1,3,16,16", "--backends", "xnnpack", "--out", out)
        assert code == ExitStatus.USAGE
        [line] = error_lines(err)
        assert "the factory's arguments must be Python literals" in line, line


@pytest.mark.slow
def test_targets_with_the_same_lowering_are_lowered_once(out):
    """WebGPU's partitioner is Vulkan's with the same options: one run lowers the program
    once, writes it under both names, and says so in the summary and the manifest."""
    from conftest import run_cli

    result = run_cli(*TINY, "--backends", "vulkan", "webgpu", "--no-cache", "--out", out)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "tiny › vulkan: lowering" in result.stderr and "tiny › webgpu: lowering" not in result.stderr
    assert "(the same program as vulkan's, lowered once)" in result.stdout
    entries = {e["target"]: e for e in written(out / "index.json")}
    vulkan, webgpu = entries["vulkan"], entries["webgpu"]
    assert webgpu["sameProgramAs"] == "vulkan" and "sameProgramAs" not in vulkan
    assert webgpu["hash"] == vulkan["hash"] and webgpu["file"] != vulkan["file"]
    assert (out / webgpu["file"]).read_bytes() == (out / vulkan["file"]).read_bytes()
    assert webgpu["status"] == vulkan["status"] == "NOT_RUNNABLE_HERE"


def test_weights_saved_from_a_wrapped_model_load(tmp_path):
    """``torch.save(model.state_dict())`` of a DataParallel / DDP model prefixes every key
    with ``module.``, of a torch.compile'd one with ``_orig_mod.``, of a Lightning module
    with ``model.``: each was "does not match the model: Missing key(s)"."""
    import torch

    import tiny_models
    from pteforge.core.errors import WeightsError
    from pteforge.models.weights import load_state_dict_file

    torch.manual_seed(1)
    trained = tiny_models.tiny()
    for prefix in ("module.", "_orig_mod.", "module._orig_mod.", "model."):
        path = tmp_path / "w.pt"
        torch.save({"state_dict": {prefix + k: v for k, v in trained.state_dict().items()}, "epoch": 3}, path)
        torch.manual_seed(2)
        fresh = tiny_models.tiny()
        load_state_dict_file(fresh, str(path))
        for (name, a), b in zip(trained.state_dict().items(), fresh.state_dict().values()):
            assert torch.equal(a, b), (prefix, name)
    torch.save({"module.other." + k: v for k, v in trained.state_dict().items()}, path)
    with pytest.raises(WeightsError, match="does not match the model"):
        load_state_dict_file(tiny_models.tiny(), str(path))


def test_weights_in_safetensors_load_and_a_broken_file_is_refused_in_one_line(capsys, tmp_path):
    """Hugging Face's format: ``torch.load`` refused it as "not a plain state dict"."""
    import torch
    from safetensors.torch import save_file

    import tiny_models

    torch.manual_seed(1)
    trained = tiny_models.tiny()
    save_file({"module." + k: v for k, v in trained.state_dict().items()}, tmp_path / "w.safetensors")
    code, _, err = cli(capsys, "export", "--model", "tiny_models:tiny", "--input-shape", "1,3,8,8", "--weights",
                       tmp_path / "w.safetensors", "--backends", "portable", "--bench-runs", "0", "--out", tmp_path / "o")
    assert code == ExitStatus.OK, err
    (tmp_path / "bad.safetensors").write_bytes(b"not tensors")
    code, _, err = cli(capsys, "export", "--model", "tiny_models:tiny", "--input-shape", "1,3,8,8", "--weights",
                       tmp_path / "bad.safetensors", "--backends", "portable", "--out", tmp_path / "o2")
    [said] = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == ExitStatus.WEIGHTS and "Traceback" not in err, err
    assert "cannot read safetensors file" in said and "fix: give a file written by safetensors" in said, err
    assert not (tmp_path / "o2").exists()


def test_an_ultralytics_checkpoint_is_read_without_running_it(tmp_path):
    """``best.pt`` from ``yolo train`` pickles Ultralytics' model classes. It was refused
    (pickles are never run); it is now read with stand-ins for every class it names, so
    ``--weights best.pt`` takes its weights and ``--model best.pt`` builds its own
    architecture and classes at its training size, loaded as the file holds them. What
    no model needs is refused, and a pose model the app cannot read is refused too."""
    import os

    import torch
    from ultralytics.nn.tasks import DetectionModel

    import tiny_models
    from pteforge.core.errors import ModelError, UsageError, WeightsError
    from pteforge.models import ultralytics_models
    from pteforge.models.own import custom_spec
    from pteforge.models.weights import load_state_dict_file
    from pteforge.core.spec import InputSpec

    tiny_models.ultralytics_checkpoint(tmp_path / "pets.pt", imgsz=96)
    spec = custom_spec(str(tmp_path / "pets.pt"), ())
    assert (spec.family, spec.task, spec.names, spec.labels) == ("yolo", "detection", ("cat", "dog", "fox"), "pets_labels.txt")
    assert spec.inputs[0].shape == (1, 3, 96, 96) and spec.preprocessing.size == 96
    saved = torch.load(tmp_path / "pets.pt", weights_only=False)["model"].float()  # this test's own file
    same = DetectionModel(saved.yaml, nc=3, verbose=False)
    load_state_dict_file(same, str(tmp_path / "pets.pt"))  # --weights best.pt of the same architecture
    assert all(torch.equal(a, b) for a, b in zip(same.state_dict().values(), saved.state_dict().values()))
    built, x = ultralytics_models.build(spec, "pretrained", 0), torch.rand(1, 3, 96, 96)
    assert torch.equal(built(x)[0], ultralytics_models.to_export_mode(saved)(x)[0])
    with pytest.raises(WeightsError) as other:  # --yolo yolov8n --weights pets.pt: not its architecture
        load_state_dict_file(DetectionModel("yolov8n.yaml", nc=80, verbose=False), str(tmp_path / "pets.pt"))
    assert other.value.fix == f"export it with its own architecture and classes: --model {tmp_path / 'pets.pt'}"
    with pytest.raises(UsageError, match="a multiple of 32"):
        custom_spec(str(tmp_path / "pets.pt"), (InputSpec((1, 3, 100, 100)),))
    assert custom_spec(str(tmp_path / "pets.pt"), (InputSpec((1, 3, 320, 320)),)).preprocessing.size == 320
    from pteforge.models.task import as_task  # --name names a checkpoint too, its labels file with it

    named = as_task(spec, name="garden")
    assert (named.name, named.labels, named.names, named.family) == ("garden", "garden_labels.txt", spec.names, "yolo")

    tiny_models.ultralytics_checkpoint(tmp_path / "system.pt", evil=tiny_models.Calls(os.system, f"touch {tmp_path / 'ran'}"))
    with pytest.raises(ModelError, match="it names posix.system, which no model needs"):
        custom_spec(str(tmp_path / "system.pt"), ())
    assert not (tmp_path / "ran").exists()
    tiny_models.ultralytics_checkpoint(tmp_path / "obb.pt", kind="OBBModel", base="yolov8n-obb.yaml")
    with pytest.raises(ModelError, match="is an Ultralytics OBBModel") as obb:
        custom_spec(str(tmp_path / "obb.pt"), ())
    assert "format=onnx" in obb.value.fix
    tiny_models.ultralytics_checkpoint(tmp_path / "hand.pt", kind="PoseModel", names=("hand",), base="yolov8n-pose.yaml",
                                       kpt_shape=[21, 3])
    with pytest.raises(ModelError, match="a pose model of 21 keypoints"):
        custom_spec(str(tmp_path / "hand.pt"), ())
    torch.save({"model": torch.nn.Linear(2, 2)}, tmp_path / "other.pt")  # another pickle: the general refusal
    with pytest.raises(WeightsError, match="it is not a plain state dict"):
        load_state_dict_file(same, str(tmp_path / "other.pt"))



def test_a_catalog_model_at_another_size_is_built_and_validated_at_it():
    """``--yolo yolov8n --input-shape 1,3,320,320`` (YOLO at 320 for a phone): refused
    before ("--input-shape and --input-dtype apply to --model"). The spec takes the size
    and its preprocessing scales with it; the head's anchors are made for it; and
    ``validate`` rebuilds the eager model at the entry's size (it rebuilt it at the
    catalog's, and every such artifact was a MISMATCH)."""
    import torch

    from pteforge.models import select_models
    from pteforge.report.manifest import ModelEntry
    from pteforge.stages.capture import build_model
    from pteforge.app.validate import EagerCache

    specs = {s.family: s for s in select_models(yolo=["yolov8n"], mobilenet=[], input_shapes=["1,3,64,64"])}
    yolo, mobilenet = specs["yolo"], specs["mobilenet"]
    assert yolo.inputs[0].shape == mobilenet.inputs[0].shape == (1, 3, 64, 64)
    assert (yolo.preprocessing.size, mobilenet.preprocessing.size, mobilenet.preprocessing.resize) == (64, 64, 73)
    x = torch.rand(1, 3, 64, 64)
    for spec in (yolo, mobilenet):
        exported = build_model(spec, "none", 0)
        entry = ModelEntry.model_construct(model=spec.name, source="catalog", inputShapes=[[1, 3, 64, 64]], weights="none", seed=0)
        rebuilt = EagerCache().get(entry)
        with torch.no_grad():
            assert torch.equal(exported(x)[0], rebuilt(x)[0]), spec.name
    assert exported(x).shape == (1, 1000) and build_model(yolo, "none", 0)(x).shape == (1, 84, 84), "anchors for 64 x 64"


def test_validate_and_bench_refuse_a_folder_without_a_program(capsys, tmp_path):
    """"0 proven", exit 0, read as a pass: a folder holding no .pte at any depth (the wrong
    folder, an export that wrote nothing) is a usage error, and nothing is written into it."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "notes.txt").write_text("not a program\n")
    for args in (("validate", tmp_path), ("bench", tmp_path)):
        code, _, err = cli(capsys, *args)
        assert code == ExitStatus.USAGE, (args, err)
        [line] = error_lines(err)
        assert f"{tmp_path} holds no ExecuTorch program (.pte, .bpte) at any depth" in line and "(fix: export" in line
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["notes.txt", "sub"]


def test_every_precision_names_the_inputs_as_the_model_does(capsys, out):
    """Quantizing and fp16 export the program again, whose inputs torch then calls args_0:
    the manifest told the app ``args_0`` for int8 and fp16 and ``x`` for fp32."""
    code, _, err = cli(capsys, *TINY, "--backends", "xnnpack", "xnnpack:int8", "xnnpack:fp16", "--out", out,
                       "--bench-runs", "0")
    assert code == ExitStatus.OK, err
    names = {e["target"]: [i["name"] for i in e["inputs"]] for e in json.loads((out / "index.json").read_text())["models"]}
    assert names == {"xnnpack": ["x"], "xnnpack:int8": ["x"], "xnnpack:fp16": ["x"]}, names

"""validate: real runtime in a child process, real files (good, damaged, foreign), real images."""

import copy
import json
import os
import signal
import threading

import pytest
import torch
from test_cli import TINY, cli

from pteforge.core.errors import ExitStatus
from pteforge.runtime.isolate import ChildCrashed, IsolatedRuntime
from pteforge.families.detection import Detection, decode_yolo, matched_fraction
from pteforge.families.vision import detection_input, shipped_images


@pytest.fixture(scope="module")
def tiny_out(tmp_path_factory):
    from pteforge.cli import main

    out = tmp_path_factory.mktemp("tiny")
    assert main([*TINY, "--backends", "xnnpack", "portable", "coreml", "--bundle", "--out", str(out)]) == 0
    return out


def report(path):
    data = json.loads(path.read_text())
    return {f["file"]: f for f in data["files"]}


def test_validate_runs_every_artifact_and_compares_with_eager(capsys, tiny_out):
    code, stdout, _ = cli(capsys, "validate", tiny_out)  # the same as --models-dir, as bench DIR
    assert code == ExitStatus.OK, stdout
    files = report(tiny_out / "validation_report.json")
    assert files["custom/tiny_xnnpack.pte"]["status"] == "VERIFIED"
    assert files["custom/tiny_xnnpack.pte"]["sqnr_db"] > 40
    assert files["custom/tiny_portable.pte"]["status"] == "VERIFIED"
    assert files["custom/tiny_coreml.pte"]["status"] == "NOT_RUNNABLE_HERE"
    assert files["custom/tiny_coreml.pte"]["reason"] == "CoreMLBackend is not registered in this runtime"
    assert files["custom/tiny_xnnpack.bpte"]["status"] == "VERIFIED"
    assert "bundled test case(s) matched" in files["custom/tiny_xnnpack.bpte"]["reason"]
    assert "Validation on real images" in stdout


def test_bad_files_are_one_line_each_and_the_rest_is_validated(capsys, tiny_out, tmp_path):
    import shutil

    d = tmp_path / "models"
    shutil.copytree(tiny_out, d)
    good = (d / "custom" / "tiny_xnnpack.pte").read_bytes()
    (d / "random.pte").write_bytes(os.urandom(4096))
    (d / "truncated.pte").write_bytes(good[: len(good) // 3])
    (d / "empty.pte").write_bytes(b"")
    shutil.copy(d / "custom" / "tiny_xnnpack.bpte", d / "bundle_named.pte")
    (d / "orphan.pte").write_bytes(good)  # no manifest entry: facts from the file itself
    code, _, _ = cli(capsys, "validate", "--models-dir", d, "--output-file", d / "r.json")
    assert code == ExitStatus.TARGETS_FAILED
    files = report(d / "r.json")
    expected = {
        "random.pte": "not an ExecuTorch program",
        "truncated.pte": "damaged ExecuTorch program",
        "empty.pte": "the file is empty",
        "bundle_named.pte": "bundled program (.bpte), not a .pte",
    }
    for name, needle in expected.items():
        assert files[name]["status"] == "LOAD_FAILED" and needle in files[name]["reason"], files[name]
        assert "\n" not in files[name]["reason"]
    assert files["orphan.pte"]["status"] == "NOT_VERIFIED"
    assert files["orphan.pte"]["delegates"] == ["XnnpackBackend"] * len(files["orphan.pte"]["delegates"])
    assert files["custom/tiny_xnnpack.pte"]["status"] == "VERIFIED"


@pytest.fixture(scope="module")
def many_inputs(tiny_out):
    """Enough runs of a real program that a kill lands mid-request."""
    path = tiny_out / "many.pt"
    torch.save([[torch.rand(1, 3, 16, 16)] for _ in range(30_000)], path)
    return path


def _slow_request(child, tiny_out, many_inputs):
    return child.request("run", path=str(tiny_out / "custom" / "tiny_portable.pte"),
                         inputs=str(many_inputs), outputs=str(tiny_out / "many.out.pt"))


def test_a_crash_in_the_child_is_that_request_only(tiny_out, many_inputs):
    with IsolatedRuntime(timeout=120) as child:
        assert child.request("host")["ok"]
        timer = threading.Timer(1.0, os.kill, (child.proc.pid, signal.SIGSEGV))
        timer.start()
        with pytest.raises(ChildCrashed, match="killed by SIGSEGV"):
            _slow_request(child, tiny_out, many_inputs)
        timer.join()
        assert child.request("inspect", path=str(tiny_out / "custom" / "tiny_portable.pte"))["ok"]


def test_a_program_the_runtime_refuses_says_why_and_a_crash_after_it_says_only_how(tiny_out, many_inputs, tmp_path):
    """The child adds what the runtime logged while serving a request to that request's error
    (the bindings give "0x12" only); what it logged for an earlier request is not carried
    into a later one's failure."""
    from executorch.exir import to_edge_transform_and_lower

    from tiny_models import conv3d

    x = torch.randn(1, 3, 4, 8, 8)
    pte = tmp_path / "conv3d.pte"
    pte.write_bytes(to_edge_transform_and_lower(torch.export.export(conv3d().eval(), (x,))).to_executorch().buffer)
    torch.save([[x]], tmp_path / "in.pt")
    with IsolatedRuntime(timeout=120) as child:
        reply = child.request("run", path=str(pte), inputs=str(tmp_path / "in.pt"), outputs=str(tmp_path / "out.pt"))
        assert not reply["ok"]
        assert reply["error"].endswith("the runtime logged: aten::convolution.out: Expect input tensor to be 3-D or "
                                       "4-D, but got, 5."), reply["error"]
        timer = threading.Timer(1.0, os.kill, (child.proc.pid, signal.SIGSEGV))
        timer.start()
        with pytest.raises(ChildCrashed) as crashed:
            _slow_request(child, tiny_out, many_inputs)
        timer.join()
        assert str(crashed.value) == "killed by SIGSEGV"


def test_a_hang_past_the_timeout_is_killed(tiny_out, many_inputs):
    with IsolatedRuntime(timeout=120) as child:
        child.request("host")
        child.timeout = 1
        with pytest.raises(ChildCrashed, match="timed out after 1 s"):
            _slow_request(child, tiny_out, many_inputs)
        child.timeout = 120
        assert child.request("host")["ok"]


@pytest.mark.slow
def test_yolo_decoding_agrees_with_ultralytics_predictor():
    from test_families import _seeded, _threshold  # spread, untied class scores (random ones saturate)

    from pteforge.models.ultralytics_models import to_export_mode

    yolo, _ = _seeded("yolo11n.yaml")
    ours = to_export_mode(copy.deepcopy(yolo.model))
    bus = next(p for p in shipped_images() if p.name == "bus.jpg")
    x, lb = detection_input(bus, 640)
    with torch.no_grad():
        out = ours(x)
    conf = _threshold(out, 80)
    result = yolo.predict(str(bus), conf=conf, iou=0.45, imgsz=640, rect=False, verbose=False)[0]
    theirs = [Detection(tuple(b.tolist()), float(s), int(c))
              for b, s, c in zip(result.boxes.xyxy, result.boxes.conf, result.boxes.cls)]
    mine = decode_yolo(out, lb, conf=conf)
    assert 5 <= len(theirs) < 300, "the test needs a handful of distinct boxes"
    assert len(mine) == len(theirs)
    assert matched_fraction(theirs, mine, iou=0.99) == 1.0
    assert [d.cls for d in mine] == [d.cls for d in theirs]


NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize("eager, program, why", [
    ([1.0, 2.0, 3.0, 4.0], [NAN] * 4, "the program gives NaN on input 1 at output 0, index 0"),  # NaN compared false with everything
    ([1.0, 2.0, 3.0, 4.0], [1.0, INF, 3.0, 4.0], "the program gives infinity on input 1 at output 0, index 1"),
    # eager's own NaN: nothing can be compared, however alike the program is (it was 200 dB)
    ([1.0, 2.0, NAN, -INF], [1.0, 2.0, NAN, -INF], "the model itself gives NaN on input 1 (output 0, index 2)"),
    ([1.0, 2.0, NAN, -INF], [1.0, 2.0, 0.0, -INF], "the model itself gives NaN"),
    # eager's own infinity is a value (a log of 0): the program must give the same one
    ([1.0, 2.0, 3.0, -INF], [1.0, 2.0, 3.0, INF],
     "the program gives infinity on input 1 at output 0, index 3, where eager gives minus infinity"),
])
def test_nan_and_infinity_are_never_a_match(eager, program, why):
    from pteforge.app.precision import Precision
    from pteforge.stages.verify import verify_outputs

    v = verify_outputs({"outputs": [[torch.tensor(eager)]]}, [[torch.tensor(program)]], Precision.FP32, None, "custom", None)
    assert not v.passed and v.sqnr_db is None and v.degenerate.startswith(why), v
    assert v.model_fault is why.startswith("the model itself")


def test_integer_inputs_are_valid_ids_for_a_small_embedding(capsys, tmp_path):
    """Seeded integer inputs are ids below synthetic.INTEGER_HIGH, as bench and validate
    draw them: a model whose embedding has 16 rows exports and verifies (ids up to 99 made
    its capture fail with 'index out of range'), and validate reruns it."""
    from pteforge.models.synthetic import INTEGER_HIGH, make_inputs
    from pteforge.models.factory import factory_spec
    from pteforge.core.spec import InputSpec

    spec = factory_spec("tiny_models:embedding", (InputSpec((1, 6), "int64"),))
    assert all(int(make_inputs(spec, seed)[0].max()) < INTEGER_HIGH for seed in range(20))
    out = tmp_path / "out"
    code, stdout, err = cli(capsys, "export", "--model", "tiny_models:embedding(rows=16)", "--input-shape", "1,6",
                            "--input-dtype", "int64", "--weights", "none", "--backends", "portable", "--out", out)
    assert code == ExitStatus.OK, stdout + err
    [e] = json.loads((out / "index.json").read_text())["models"]
    assert e["status"] == "VERIFIED" and e["bench"]["p50_ms"] > 0, e
    code, stdout, err = cli(capsys, "validate", "--models-dir", out)
    assert code == ExitStatus.OK, stdout + err

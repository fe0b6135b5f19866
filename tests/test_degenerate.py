"""Outputs no SQNR can judge are never proof: NaN or infinity in eager (the model's fault),
in the program only, or a program whose output ignores its input."""

import json
from pathlib import Path

import torch
from test_cli import cli

from pteforge.core.errors import ExitStatus
from pteforge.stages.verify import constant_outputs, degenerate


def test_nan_in_eager_is_the_models_fault_and_never_verified(capsys, tmp_path):
    out = tmp_path / "out"
    code, stdout, err = cli(capsys, "export", "--model", "tiny_models:degenerate", "--input-shape", "1,3,8,8",
                            "--weights", "none", "--backends", "xnnpack", "portable", "--out", out)
    assert code == ExitStatus.TARGETS_FAILED, stdout + err
    for e in json.loads((out / "index.json").read_text())["models"]:
        assert e["status"] == "MISMATCH" and e["reason"].startswith("the model itself gives NaN on input"), e["reason"]
        assert "nothing could be compared" in e["reason"] and "check the model" in e["fix"]
        assert e["verification"]["sqnr_db"] is None and e["verification"]["model_fault"] is True
    assert "SQNR" not in stdout and "200.0 dB" not in stdout, "an undefined SQNR is never printed as a number"

    code, stdout, _ = cli(capsys, "validate", "--models-dir", out)
    files = json.loads((out / "validation_report.json").read_text())["files"]
    assert files and all(f["status"] == "MISMATCH" and "the model itself gives NaN" in f["reason"] for f in files)


def test_an_output_eager_gives_the_same_on_every_input_is_a_warning(capsys, tmp_path):
    out = tmp_path / "out"
    code, stdout, err = cli(capsys, "export", "--model", "tiny_models:degenerate(how='constant')", "--input-shape",
                            "1,3,8,8", "--weights", "none", "--backends", "xnnpack", "--out", out)
    assert code == ExitStatus.OK, stdout + err
    [e] = json.loads((out / "index.json").read_text())["models"]
    assert e["status"] == "VERIFIED" and "do not exercise the model" in e["verification"]["warning"]
    assert "warning: eager's output 0 is the same on all" in stdout


def test_the_program_alone_giving_nan_or_ignoring_its_input_is_named():
    a, b = torch.tensor([[1.0, 2.0, 3.0]]), torch.tensor([[2.0, 1.0, 0.5]])
    nan = torch.tensor([[1.0, float("nan"), 3.0]])
    whose, why = degenerate([[a], [b]], [[a], [nan]])
    assert whose == "artifact" and why == "the program gives NaN on input 2 at output 0, index 1, where eager gives 1"
    whose, why = degenerate([[a], [b]], [[torch.full((1, 3), float("inf"))], [b]], ["photo bus.jpg", "photo z.jpg"])
    assert whose == "artifact" and why.startswith("the program gives infinity on photo bus.jpg")
    whose, why = degenerate([[a], [b]], [[a], [a]])
    assert whose == "artifact" and "same on all 2 inputs while eager's changes" in why
    assert degenerate([[a], [b]], [[a], [b]]) is None
    assert degenerate([[a], [a]], [[a], [a]]) is None and constant_outputs([[a, b], [a, a]]) == [0]
    whose, why = degenerate([[nan]], [[nan]])
    assert whose == "eager" and why == "the model itself gives NaN on input 1 (output 0, index 1): nothing could be compared"


def test_eagers_own_infinities_are_values_the_program_must_give_at_the_same_places():
    """The log of a zero probability, a masked score: eager's infinity is an output, not a
    fault (every such model was MISMATCH, "the model itself gives infinity"). The program
    must give the same infinity at the same place; the rest is compared."""
    from pteforge.stages.verify import compare

    e = torch.tensor([[float("-inf"), 0.5, 2.0]])
    assert degenerate([[e]], [[e.clone()]]) is None and compare([e], [e + torch.tensor([[0, 1e-3, 0]])])["sqnr"] > 50
    whose, why = degenerate([[e]], [[torch.tensor([[-88.7, 0.5, 2.0]])]])
    assert whose == "artifact" and why == ("the program gives -88.7 on input 1 at output 0, index 0, where eager gives "
                                           "minus infinity")
    whose, why = degenerate([[e]], [[e.abs()]])
    assert whose == "artifact" and why.startswith("the program gives infinity on input 1 at output 0, index 0")


def test_a_model_whose_outputs_hold_minus_infinity_is_verified(capsys, tmp_path):
    out = tmp_path / "out"
    code, _, err = cli(capsys, "export", "--model", "tiny_models:degenerate(how='log_zero')", "--input-shape",
                       "1,3,8,8", "--weights", "none", "--backends", "portable", "--out", str(out))
    assert code == ExitStatus.OK, err
    [e] = json.loads((out / "index.json").read_text())["models"]
    assert e["status"] == "VERIFIED" and e["verification"]["sqnr_db"] > 100, e


def test_what_libraries_print_goes_to_the_runs_log(capsys, tmp_path):
    """A run that ends in failed rows shows pteforge's lines only; what the model and its
    libraries printed in the workers, from Python or native code, is in the run's log."""
    from pathlib import Path

    out = tmp_path / "out"
    code, stdout, err = cli(capsys, "export", "--model", "tiny_models:noisy", "--input-shape", "1,3,8,8",
                            "--weights", "none", "--backends", "portable", "--out", out)
    assert code == ExitStatus.TARGETS_FAILED
    assert "NOISE" not in stdout + err
    [log] = [line.split(": ", 1)[1] for line in stdout.splitlines() if line.startswith("What libraries printed")]
    said = Path(log).read_text()
    assert "NOISE on stdout from the model" in said and "NOISE from native code" in said


def test_a_program_no_runtime_loads_is_a_failure_not_a_device_row(capsys, tmp_path):
    """A program calling an aten:: kernel that no ExecuTorch library has (rand_like) was
    written, called "needs a device" and offered to the app, which cannot load it either."""
    out = tmp_path / "out"
    code, stdout, err = cli(capsys, "export", "--model", "tiny_models:dithered", "--input-shape", "1,8",
                            "--weights", "none", "--backends", "xnnpack", "portable", "--out", out)
    assert code == ExitStatus.TARGETS_FAILED, stdout + err
    said = " ".join((stdout + err).split())
    for target in ("xnnpack", "portable"):  # portable's said ExecuTorch's "not in Core ATen opset" and what to try
        assert f"{target}: LOWER_FAILED: the program calls aten::rand_like.out, which no ExecuTorch kernel library has" \
            in said, said
    assert "nothing was written" in said and not list(tmp_path.rglob("*.pte"))

    # such a file made elsewhere: validate and bench say it loads nowhere, not "needs a device"
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower
    from tiny_models import dithered

    program = torch.export.export(dithered().eval(), (torch.rand(1, 8),))
    pte = tmp_path / "made" / "dithered.pte"
    pte.parent.mkdir()
    pte.write_bytes(to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()],
                                               compile_config=EdgeCompileConfig(_check_ir_validity=False)).to_executorch().buffer)
    for command in ("validate", "bench"):
        code, stdout, err = cli(capsys, command, pte.parent, "-q")
        assert code == ExitStatus.TARGETS_FAILED, stdout + err
        assert "LOAD_FAILED: the program calls aten::rand_like.out" in stdout + err, stdout + err


def test_a_constant_the_model_returns_is_no_warning_and_identical_outputs_are_said_in_words():
    """An output no input reaches (``torch.ones(3)`` returned beside the logits) is the
    same on every input by design: no warning that the inputs do not exercise the model.
    Outputs with no noise are "identical", not a 200 dB figure, and all-zero ones that
    match have a cosine of 1, not torch's 0."""
    from pteforge.core.units import EXACT_DB, db_text, sqnr_text
    from pteforge.stages.capture import input_free_outputs
    from pteforge.stages.verify import compare

    class Const(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 2)
            self.register_buffer("table", torch.arange(3.0))

        def forward(self, x):
            return self.fc(x), torch.ones(3), self.table * 2, x * 0

    exported = torch.export.export(Const(), (torch.randn(1, 4),))
    assert input_free_outputs(exported) == [1, 2], "x * 0 is reached by the input: its sameness is worth a warning"
    zeros = torch.zeros(5)
    assert compare([zeros], [zeros.clone()])["cosine"] == 1.0 and compare([zeros], [zeros])["sqnr"] == float("inf")
    assert sqnr_text(EXACT_DB) == "identical outputs" and sqnr_text(37.84) == "SQNR 37.8 dB"
    assert db_text(EXACT_DB) == "identical" and db_text(12.0) == "12.0 dB"


def test_a_model_returning_a_constant_beside_its_output_is_verified_without_warning(capsys, tmp_path):
    out = tmp_path / "out"
    code, stdout, err = cli(capsys, "export", "--model", "tiny_models:degenerate(how='with_constant')", "--input-shape",
                            "1,3,8,8", "--weights", "none", "--backends", "xnnpack", "--bench-runs", "0", "--out", out)
    assert code == ExitStatus.OK, stdout + err
    [e] = json.loads((out / "index.json").read_text())["models"]
    assert e["status"] == "VERIFIED" and not e["verification"].get("warning"), e["verification"]


def test_a_class_id_output_is_judged_by_agreement_not_by_sqnr(capsys, tmp_path):
    """Beside its logits, a model returns their argmax, which int8's rounding flips where two
    logits nearly tie. The logits' SQNR is high and a class id has no SQNR (class 3 is not
    "near" class 4): the int8 row is OUT_OF_BUDGET for its class ids, and validate, run
    again on the files, says the same."""
    from pteforge.core.result import budget_missed
    from pteforge.stages.verify import compare, integer_agreement

    ids, logits = torch.tensor([3, 1]), torch.tensor([[0.5, 2.0]])
    assert integer_agreement([[logits, ids]], [[logits, torch.tensor([3, 2])]]) == 0.5
    assert integer_agreement([[logits]], [[logits]]) is None
    assert compare([logits, ids], [logits, torch.tensor([4, 0])])["sqnr"] == float("inf"), "ids are not in the SQNR"
    from pteforge.core.spec import Precision
    from pteforge.stages.verify import verify_outputs

    only = verify_outputs({"outputs": [[ids], [ids]]}, [[ids], [torch.tensor([3, 2])]], Precision.INT8, None, "custom", None)
    assert only.sqnr_db is None and only.passed and only.integer_agreement == 0.75, "class ids alone: no SQNR, agreement"
    assert budget_missed("custom", {"sqnr_db": 40.0, "integer_agreement": 0.5}).startswith(
        "its integer outputs (class ids, indices) equal eager's in 50% of their values < 99%")
    assert budget_missed("custom", {"sqnr_db": 40.0, "integer_agreement": 1.0}) is None

    out = tmp_path / "out"
    code, stdout, err = cli(capsys, "export", "--model", "tiny_models:near_tie", "--input-shape", "8,16", "--weights",
                            "none", "--backends", "xnnpack", "xnnpack:int8", "--bench-runs", "0", "--out", out)
    man = json.loads((out / "index.json").read_text())
    rows = {e["target"]: e for e in man["models"] + man.get("outOfBudget", [])}
    assert rows["xnnpack"]["status"] == "VERIFIED" and rows["xnnpack"]["verification"]["integer_agreement"] == 1.0
    int8 = rows["xnnpack:int8"]
    assert int8["status"] == "OUT_OF_BUDGET" and int8["verification"]["integer_agreement"] < 0.99, int8
    assert "its integer outputs (class ids, indices) equal eager's in" in int8["reason"]
    assert "on its verification inputs" in int8["reason"], "a model of no photo is not judged on photos"
    cli(capsys, "validate", "--models-dir", out)
    files = {f["file"]: f for f in json.loads((out / "validation_report.json").read_text())["files"]}
    assert {Path(k).name: f["status"] for k, f in files.items()} == {
        "near_tie_xnnpack.pte": "VERIFIED", "near_tie_xnnpack_int8.pte": "OUT_OF_BUDGET"}, files

    # --accuracy-budget ids=F loosens that part alone: the task's SQNR budget still holds
    code, stdout, err = cli(capsys, "export", "--model", "tiny_models:near_tie", "--input-shape", "8,16", "--weights",
                            "none", "--backends", "xnnpack:int8", "--bench-runs", "0", "--out", out,
                            "--accuracy-budget", "ids=0.5")
    [int8] = [e for e in json.loads((out / "index.json").read_text())["models"] if e["target"] == "xnnpack:int8"]
    assert int8["status"] == "VERIFIED" and int8["verification"]["budget"] == {"sqnr": 20.0, "ids": 0.5}, int8

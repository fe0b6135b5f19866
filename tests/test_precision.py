"""Precision: what ExecuTorch's recipes give us, --calibration, and --precision auto on a real model."""

import json
import re
import shutil

import pytest
from conftest import TESTS, run_cli, written

from pteforge.core.spec import AccuracyBudget, Precision


def _precisions(partitioner) -> set:
    return {t for c in partitioner.target_partitioner_configs.values() for t in c.enabled_precision_types}


def test_executorch_xnnpack_recipe_drops_its_precision_so_ours_sets_it():
    """ExecuTorch 1.5.1's XNNPACK recipe builds XnnpackPartitioner(precision_type=...);
    the keyword is config_precisions, so the recipe's dynamic-quant partitioner takes
    fp32 ops too. When this test fails upstream fixed it: drop our override."""
    from executorch.backends.xnnpack.partition.config.xnnpack_config import ConfigPrecisionType
    from executorch.backends.xnnpack.recipes import XNNPACKRecipeProvider
    from executorch.backends.xnnpack.recipes.xnnpack_recipe_types import XNNPackRecipeType

    from pteforge.backends import default_registry

    recipe = XNNPACKRecipeProvider().create_recipe(XNNPackRecipeType.PT2E_INT8_DYNAMIC_PER_CHANNEL)
    [theirs] = recipe.lowering_recipe.partitioners
    assert ConfigPrecisionType.FP32 in _precisions(theirs), "the recipe's precision is dropped"
    plan = default_registry().get("xnnpack").plan(Precision.INT8_DYNAMIC)
    # one partitioner, dynamic and fp32 (see test_int8_dynamic_keeps_max_pool_in_xnnpack)
    assert [_precisions(p) for p in plan.partitioners] == [{ConfigPrecisionType.DYNAMIC_QUANT, ConfigPrecisionType.FP32}]
    assert plan.recipe == "xnnpack_pt2e_int8_dynamic_per_channel"  # its quantizer and configs are used
    assert type(plan.quantizer) is type(recipe.quantization_recipe.quantizers[0])


def test_arm_targets_follow_executorchs_arm_recipe():
    """The Arm recipe keeps the delegate payload inline (what the Arm runtime expects)."""
    from pteforge.backends import default_registry

    plan = default_registry().get("ethos-u55").plan(Precision.INT8)
    assert plan.recipe == "arm_ethos_u55_int8"
    assert plan.executorch_config.extract_delegate_segments is False
    assert plan.quantizer is not None and plan.edge_passes


@pytest.mark.parametrize(
    "text, budget",
    [("top1=0.99", AccuracyBudget(top1=0.99)), ("sqnr=20", AccuracyBudget(sqnr=20.0)),
     ("top1=0.98,sqnr=15", AccuracyBudget(top1=0.98, sqnr=15.0))],
)
def test_accuracy_budget_parses(text, budget):
    assert AccuracyBudget.parse(text) == budget


@pytest.fixture(scope="module")
def auto_run(tmp_path_factory):
    """mobilenet_v3_small, every XNNPACK precision, calibrated on a directory of photos."""
    from pteforge.families.vision import shipped_images

    photos = tmp_path_factory.mktemp("photos")
    for p in shipped_images()[:2]:
        shutil.copy(p, photos / p.name)
    out = tmp_path_factory.mktemp("auto")
    proc = run_cli("export", "--mobilenet", "--weights", "none", "--backends", "xnnpack", "--precision", "auto",
                   "--calibration", photos, "--calibration-samples", "6", "--out", out)
    return proc, out, sorted(p.name for p in photos.iterdir())


@pytest.mark.slow
def test_precision_auto_picks_the_fastest_within_budget(auto_run):
    proc, out, _ = auto_run
    assert proc.returncode in (0, 1), proc.stderr
    manifest = json.loads((out / "index.json").read_text())
    [choice] = manifest["precisionChoices"]
    assert choice["model"] == "mobilenet_v3_small" and choice["backend"] == "xnnpack"
    assert "top-1 agreement ≥ 99%" in choice["budget"]
    tried = {t["precision"]: t for t in choice["tried"]}
    assert set(tried) == {"fp32", "fp16", "int8", "int8-dynamic"}
    for t in tried.values():  # every candidate was measured, not assumed
        if t["status"] == "VERIFIED":
            assert t["p50_ms"] > 0 and t["top1_agreement"] is not None and t["size"] > 0
    fits = [t for t in choice["tried"] if t["within_budget"]]
    assert fits, "fp32 XNNPACK agrees with fp32 eager, so something is within budget"
    winner = min(fits, key=lambda t: t["p50_ms"])
    assert choice["winner"] == winner["target"]
    assert winner["precision"] in choice["why"] and "fastest within the budget" in choice["why"]
    for t in choice["tried"]:
        if not t["within_budget"]:
            assert t["precision"] in choice["why"], "the losers say why"
    assert f"precision auto, xnnpack: {choice['winner']}" in proc.stdout
    summary = (out / "EXPORT_SUMMARY.md").read_text()
    assert "## Precision auto: mobilenet_v3_small on xnnpack" in summary
    assert "## Reduced precision vs fp32 (measured)" in summary  # offered or not (fp32 may win: all others out of budget)
    for t in choice["tried"]:
        if t["precision"] != "fp32" and t["status"] in ("VERIFIED", "OUT_OF_BUDGET"):
            held = "" if t["within_budget"] else " (out of its budget: not offered)"
            assert f"| mobilenet_v3_small | {t['target']}{held} | mobilenet_v3_small_xnnpack.pte |" in summary


@pytest.mark.slow
def test_calibration_directory_and_relative_numbers_are_recorded(auto_run):
    _, out, photos = auto_run
    manifest = json.loads((out / "index.json").read_text())
    entries = {e["target"]: e for e in written(manifest) + manifest["failed"]}
    int8 = entries["xnnpack:int8"]
    cal = int8["quantization"]["calibration"]
    assert cal["source"].startswith("--calibration ") and cal["images"] == len(photos) == 2
    assert cal["samples"] == 6 and cal["synthetic"] == 4
    assert int8["quantization"]["recipe"] == "xnnpack_pt2e_int8_static_per_channel"
    dynamic = entries["xnnpack:int8-dynamic"]["quantization"]
    assert "calibration" not in dynamic and dynamic["activations"] == "scaled at run time"
    rel = int8["relative"]
    assert rel["fp32"] == "mobilenet_v3_small_xnnpack.pte"
    assert 0.2 < rel["size"] < 0.4, "int8 weights are a quarter of fp32's"
    assert rel["latency"] > 0 and rel["p50_ms"] > 0 and rel["fp32_p50_ms"] > 0
    images = int8["verification"]["images"]
    assert images["images"] >= 2 and "bus.jpg" in images["names"] and images["top1_agreement"] is not None
    assert entries["xnnpack:fp16"]["delegation"]["precision_ops"]["fp16_nodes"] > 0


def test_fp16_of_a_model_that_upcasts_to_fp32_lowers_and_runs(capsys, tmp_path):
    """The capture asserts the dtype of what a ``.to(torch.float32)`` makes (Hugging Face
    attention upcasts its softmax); in the fp16 program that assertion is false, and
    xnnpack:fp16 failed ("Tensor dtype mismatch! Expected: torch.float32, Got:
    torch.float16": CLIP's image tower). The fp16 program leaves it out."""
    from test_cli import cli

    code, stdout, _ = cli(capsys, "export", "--model", "tiny_models:upcast", "--input-shape", "2,8", "--weights", "none",
                          "--backends", "xnnpack:fp16", "--bench-runs", "0", "--out", tmp_path)
    assert code == 0, stdout
    [row] = [line for line in stdout.splitlines() if "• xnnpack:fp16:" in line]
    assert "verified" in row, row


def test_fp16_of_a_model_with_named_outputs_lowers_and_runs(capsys, tmp_path):
    """The fp16 program casts its outputs back to fp32 whatever their structure: a dict of
    named outputs (an ONNX import of several outputs) failed at xnnpack:fp16
    ("'str' object has no attribute 'is_floating_point'": its keys were taken for tensors)."""
    from test_cli import cli

    code, stdout, _ = cli(capsys, "export", "--model", "tiny_models:structured('dict')", "--input-shape", "1,3,8,8",
                          "--weights", "none", "--backends", "xnnpack:fp16", "--bench-runs", "0", "--out", tmp_path)
    assert code == 0, stdout
    [row] = [line for line in stdout.splitlines() if "• xnnpack:fp16:" in line]
    assert "verified" in row, row


def test_int8_zero_padding_no_convolution_absorbs_is_quantized_and_loads(capsys, tmp_path):
    """ExecuTorch 1.5.1's XNNPACK quantizer left such a padding unannotated and its
    partitioner took it from int8 to float; XNNPACK refused the program at load
    (torchvision's Swin-T and r3d_18; here the time padding of a residual 3-D block).
    Quantized with its input's scale, the program loads, verifies and is all XNNPACK's."""
    from test_cli import cli

    code, stdout, _ = cli(capsys, "export", "--model", "tiny_models:residual_conv3d", "--input-shape", "1,3,2,8,8",
                          "--weights", "none", "--backends", "xnnpack:int8", "--bench-runs", "0", "--out", tmp_path)
    assert code == 0, stdout
    [row] = [line for line in stdout.splitlines() if "• xnnpack:int8:" in line]
    assert "100 % delegated" in row and "verified" in row, row
    [ref] = [line for line in stdout.splitlines() if "↳ fp32 reference" in line]
    for line in (row, ref):  # the pair too: it was timed (20 runs each) whatever --bench-runs said
        assert "not timed: timing turned off (--bench-runs 0)" in line, line


def test_a_layer_applied_twice_gets_a_bias_per_use_in_int8(capsys, tmp_path):
    """An int8 bias is at its input's scale times its weight's: one bias shared by two
    calls of a convolution took one call's scale, and XNNPACK refused the program at
    load (``xnn_status_invalid_parameter``). Each use has its own bias; TOSA took the
    shared one too and still does."""
    from test_cli import cli

    code, stdout, _ = cli(capsys, "export", "--model", "tiny_models:conv_twice", "--input-shape", "1,3,12,12",
                          "--weights", "none", "--backends", "xnnpack:int8", "tosa", "--bench-runs", "0",
                          "--out", tmp_path)
    assert code == 0, stdout
    rows = {e["target"]: e for e in written(json.loads((tmp_path / "index.json").read_text()))}
    assert rows["xnnpack:int8"]["status"] == "VERIFIED" and rows["xnnpack:int8"]["delegation"]["percent"] == 100, rows
    assert rows["tosa"]["status"] == "SIMULATED", rows
    assert all(e["verification"]["sqnr_db"] > 30 for e in rows.values()), rows


def test_integer_positions_a_model_computes_stay_integers_in_int8(capsys, tmp_path):
    """``torch.arange(n) + 2`` indexing a table (a Hugging Face attention mask): XNNPACK's
    quantizer made the 2 a float32 tensor, the positions came out float, and calibration
    failed ("tensors used as indices must be long": BERT at xnnpack:int8)."""
    from test_cli import cli

    code, stdout, _ = cli(capsys, "export", "--model", "tiny_models:positions", "--input-shape", "1,8,4",
                          "--weights", "none", "--backends", "xnnpack:int8", "--bench-runs", "0", "--out", tmp_path)
    assert code == 0, stdout
    [row] = [e for e in written(json.loads((tmp_path / "index.json").read_text())) if e["target"] == "xnnpack:int8"]
    assert row["status"] == "VERIFIED" and row["verification"]["sqnr_db"] > 30, row


def test_int8_dynamic_keeps_max_pool_in_xnnpack():
    """A dynamic-quant partitioner run before the fp32 one decomposed max_pool2d, which
    then ran on the portable kernels (resnet18: 37 of 61 ms). One partitioner keeps the
    whole CNN in one XNNPACK subgraph, computing what eager computes."""
    import torch
    from executorch.devtools.backend_debug import get_delegation_info
    from executorch.runtime import Runtime

    from pteforge.backends import default_registry
    from pteforge.stages.quantize import quantize

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(3, 2, 1),
                                torch.nn.Conv2d(16, 16, 3, padding=1), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                                torch.nn.Linear(16, 10)).eval()
    x = torch.rand(1, 3, 32, 32)
    xnnpack = default_registry().get("xnnpack")
    plan = xnnpack.plan(Precision.INT8_DYNAMIC)
    exported = xnnpack.prepare(torch.export.export(model, (x,)), Precision.INT8_DYNAMIC, (x,))
    edge = xnnpack.lower(quantize(exported, plan, [(x,)], (x,)), plan, [])
    info = get_delegation_info(edge.exported_program().graph_module)
    assert info.num_delegated_subgraphs == 1
    assert not {op for op, n in info.delegation_by_operator.items() if n.non_delegated and op != "getitem"}
    program = Runtime.get().load_program(edge.to_executorch().buffer)  # holds the bytes the method reads
    [got] = program.load_method("forward").execute([x])
    want = model(x)
    assert 10 * torch.log10(want.pow(2).sum() / (got - want).pow(2).sum()) > 20  # dB


@pytest.mark.slow
def test_a_quantized_mismatch_says_whether_quantizing_or_the_backend_loses_it(tmp_path):
    """An int8 MISMATCH runs the quantized program in PyTorch on the same inputs: when it is
    as far from eager there, the row says that quantizing loses it, not the backend, and the
    fix is about calibration and precision (maxvit_t at int8 on random weights: 3.5 dB in
    PyTorch, 3.6 dB on XNNPACK)."""
    out = tmp_path / "out"
    proc = run_cli("export", "--model", "tiny_models:crushed", "--input-shape", "1,32", "--weights", "none",
                   "--backends", "xnnpack:int8", "--out", out)
    assert proc.returncode == 1, proc.stderr  # nothing verified
    [row] = json.loads((out / "index.json").read_text())["failed"]
    assert row["status"] == "MISMATCH"
    said = re.search(r"the quantized program run by PyTorch is (-?[\d.]+) dB from eager too: quantizing loses it, not the "
                     r"backend", row["reason"])
    assert said and float(said[1]) < row["verification"]["threshold_sqnr_db"], row["reason"]
    assert "fix: kept as a .mismatch.pte for inspection; calibrate on real inputs (--calibration DIR" in proc.stdout


def test_a_mismatch_is_put_on_quantizing_alone_only_where_the_program_keeps_up_with_pytorchs_run():
    """The program against its quantized program run by PyTorch, both against eager: within
    BACKEND_LOSS_DB of it, a loss both share is quantizing's; far below it, the backend loses
    too (a Cortex-M ShuffleNet V2 at -25.1 dB beside 9.6 dB in PyTorch was once said to be
    quantizing's alone)."""
    from pteforge.stages.pipeline import BACKEND_LOSS_DB, whose_loss

    said, quantizing = whose_loss(3.6, 3.5, 10.0)  # maxvit_t at int8 on XNNPACK
    assert quantizing and said == ("the quantized program run by PyTorch is 3.5 dB from eager too: quantizing loses "
                                   "it, not the backend")
    said, quantizing = whose_loss(-25.1, 9.6, 10.0)
    assert not quantizing and said == ("the quantized program run by PyTorch is 9.6 dB from eager and this program "
                                       "34.7 dB further: quantizing loses some, and the backend's lowering or kernels more")
    said, quantizing = whose_loss(-8.4, 36.5, 10.0)
    assert not quantizing and said.endswith("this program 44.9 dB further: the backend's lowering or kernels lose the rest")
    assert whose_loss(9.6 - BACKEND_LOSS_DB + 0.1, 9.6, 10.0)[1], "just within: quantizing's"
    assert not whose_loss(9.6 - BACKEND_LOSS_DB - 0.1, 9.6, 10.0)[1]
    assert whose_loss(None, 9.6, 10.0)[1], "no SQNR of the program's (all zeros): PyTorch's run decides"
    from pteforge.core.units import EXACT_DB

    assert whose_loss(4.0, EXACT_DB, 10.0) == ("the quantized program run by PyTorch gives eager's outputs: the "
                                              "backend's lowering or kernels lose it", False)
    assert whose_loss(8.0, 12.0, 10.0) == ("the quantized program run by PyTorch is 12.0 dB from eager: the backend's "
                                          "lowering or kernels lose the rest", False)


def test_calibrating_and_reestimating_batchnorm_leave_a_models_own_state_as_it_was():
    """A streaming model keeps state in a buffer its forward changes in place. Neither
    the re-estimated BatchNorm statistics of --weights none nor int8 calibration may
    leave their forward passes counted in it: the program starts where the model does
    (calibration left 8 steps in it, and every output was off by 8)."""
    import copy

    import torch
    from tiny_models import Stepper

    from pteforge.backends import default_registry
    from pteforge.models.weights import recalibrate_batchnorm
    from pteforge.stages.quantize import quantize

    torch.manual_seed(0)
    model = Stepper()
    recalibrate_batchnorm(model, lambda i: (torch.rand(8, 3, 8, 8),))
    assert model.steps.item() == 0 and model.bn.running_mean.abs().sum() > 0  # statistics re-estimated, count kept
    x = torch.rand(1, 3, 8, 8)
    reference = copy.deepcopy(model)  # the program's tensors are the model's
    exported = torch.export.export(model, (x,))
    plan = default_registry().get("xnnpack").plan(Precision.INT8)
    quantized = quantize(exported, plan, [(torch.rand(1, 3, 8, 8),) for _ in range(8)], (x,))
    assert [v.item() for k, v in quantized.state_dict.items() if k.endswith("steps")] == [0.0]
    program = quantized.module()
    for step in range(3):  # it counts, from where the model starts
        want, got = reference(x), program(x)
        assert 10 * torch.log10(want.pow(2).sum() / (got - want).pow(2).sum()) > 20, step  # dB


def test_targets_whose_quantizers_prepare_the_same_program_quantize_it_once(tmp_path, monkeypatch):
    """TOSA and Ethos-U85 prepare the same program for a conv net (their TOSA specs differ
    in features it does not use): what the first quantized, the second takes instead of
    calibrating and converting again, with the edge program the first made from it (one
    worker, stages/memo.py), and its artifact is byte for byte what quantizing and
    lowering on its own gives. Without sharing (one quantized target in the run) nothing
    is saved."""
    import dataclasses

    import torchao.quantization.pt2e.quantize_pt2e as pt2e

    from pteforge.runtime.host import host
    from pteforge.models.factory import factory_spec
    from pteforge.stages.pipeline import export_target
    from pteforge.core.spec import ExportConfig, InputSpec, Target
    from pteforge.stages import memo
    from pteforge.stages.capture import capture

    converted = []
    real = pt2e.convert_pt2e
    monkeypatch.setattr(pt2e, "convert_pt2e", lambda *a, **k: converted.append(1) or real(*a, **k))
    spec = factory_spec("tiny_models:weighty", (InputSpec((1, 3, 16, 16)),), name="weighty")
    config = ExportConfig(out_dir=tmp_path / "out", weights="none", calibration_samples=4, verify_inputs=1)
    cap = capture(spec, config, tmp_path / "work")
    store = tmp_path / "work" / "quantized"
    shared = dataclasses.replace(cap, share_quantized=True)
    tosa, u85 = (Target((name,), Precision.INT8) for name in ("tosa", "ethos-u85"))

    first = export_target(shared, spec, tosa, config, host())
    [saved] = store.glob("*.pt2")
    assert len(converted) == 1
    before = memo.stats.copy()
    loaded = export_target(shared, spec, u85, config, host())
    assert len(converted) == 1, "the second target loaded the program, it did not quantize again"
    assert memo.stats["edge hit"] == before["edge hit"] + 1, "and took the first one's edge program"
    assert memo.stats["decompose miss"] == before["decompose miss"]
    assert first.quantization["prepared_program"] == loaded.quantization["prepared_program"] == saved.stem
    shutil.rmtree(store)
    alone = export_target(cap, spec, u85, config, host())
    assert len(converted) == 2 and not store.exists() and "prepared_program" not in alone.quantization
    assert loaded.artifact.sha256 == alone.artifact.sha256


def test_a_different_quantizer_configuration_or_calibration_is_another_fingerprint():
    """The fingerprint covers each observer's configuration (dtype, scheme, ranges, the
    derived bias qparams by code and closure), every tensor and the calibration inputs;
    two prepares of the same configuration agree, whatever the objects' addresses."""
    import torch
    from executorch.backends.arm.quantizer import get_symmetric_quantization_config
    from executorch.backends.arm.tosa.compile_spec import TosaCompileSpec
    from executorch.backends.arm.util._factory import create_quantizer
    from tiny_models import weighty
    from torchao.quantization.pt2e.quantize_pt2e import prepare_pt2e

    from pteforge.stages.quantize import fingerprint

    x = torch.rand(1, 3, 16, 16)
    exported = torch.export.export(weighty().eval(), (x,))

    def prepared(per_channel: bool):
        quantizer = create_quantizer(TosaCompileSpec("TOSA-1.0+INT"))
        quantizer.set_global(get_symmetric_quantization_config(is_per_channel=per_channel))
        return prepare_pt2e(exported.module(check_guards=False), quantizer)

    batches = [(x,), (x * 2,)]
    key = fingerprint(prepared(True), batches)
    assert key and fingerprint(prepared(True), batches) == key
    assert fingerprint(prepared(False), batches) != key
    assert fingerprint(prepared(True), [(x,), (x * 3,)]) != key


def test_a_program_whose_observers_see_only_weights_calibrates_on_one_input(tmp_path, monkeypatch):
    """Dynamic int8 observes only the weights (its activations' observers are placeholders):
    one calibration call makes the same program, to the byte, as one per sample. Static
    int8 observes activations, so calibrates on every sample."""
    import pteforge.stages.quantize as quantize
    from pteforge.runtime.host import host
    from pteforge.models.factory import factory_spec
    from pteforge.stages.pipeline import export_target
    from pteforge.core.spec import ExportConfig, InputSpec, Target
    from pteforge.stages.capture import capture

    said = []
    real = quantize.records_activations
    monkeypatch.setattr(quantize, "records_activations", lambda prepared: said.append(real(prepared)) or said[-1])
    spec = factory_spec("tiny_models:weighty", (InputSpec((1, 3, 16, 16)),), name="weighty")
    config = ExportConfig(out_dir=tmp_path / "out", weights="none", calibration_samples=4, verify_inputs=1)
    cap = capture(spec, config, tmp_path / "work")
    dynamic, static = Target(("xnnpack",), Precision.INT8_DYNAMIC), Target(("xnnpack",), Precision.INT8)
    once = export_target(cap, spec, dynamic, config, host())
    export_target(cap, spec, static, config, host())
    assert said == [False, True]
    monkeypatch.setattr(quantize, "records_activations", lambda prepared: True)
    every = export_target(cap, spec, dynamic, config, host())
    assert once.status == every.status and once.artifact.sha256 == every.artifact.sha256


@pytest.mark.slow
def test_what_a_capture_and_a_quantization_compute_does_not_depend_on_the_threads(tmp_path):
    """A job's torch threads are its share of the cores (1 beside another job, 2 alone,
    1 in a Ray task): BatchNorm statistics (``--weights none``), eager references and
    calibration must come out bit for bit the same whatever the share, or the same seeded
    export gives other bytes alone, in a full run, or on Ray. (mobilenet_v3_small: its
    BatchNorm statistics differed between 2 threads and 1; a tiny net's did not.)"""
    import torch

    from pteforge.backends import default_registry
    from pteforge.models.catalog import build_catalog
    from pteforge.core.spec import ExportConfig
    from pteforge.stages.capture import capture
    from pteforge.stages.quantize import quantize

    spec = next(s for s in build_catalog() if s.name == "mobilenet_v3_small")
    config = ExportConfig(out_dir=tmp_path / "out", weights="none", verify_inputs=0)
    plan = default_registry().get("tosa").plan(Precision.INT8)
    runs = []
    before = torch.get_num_threads()
    try:
        for threads in (2, 1):
            torch.set_num_threads(threads)
            cap = capture(spec, config, tmp_path / f"work{threads}")
            program = torch.export.load(cap.pt2_path)
            reference = torch.load(cap.reference_path, weights_only=True)
            example = tuple(reference["inputs"][0])
            quantized = quantize(program, plan, [example], example)
            runs.append((program.state_dict, reference["outputs"], {**quantized.state_dict, **quantized.constants}))
    finally:
        torch.set_num_threads(before)
    (weights2, outputs2, quantized2), (weights1, outputs1, quantized1) = runs
    assert [k for k in weights2 if not torch.equal(weights2[k], weights1[k])] == [], "BatchNorm statistics"
    assert all(torch.equal(a, b) for x, y in zip(outputs2, outputs1) for a, b in zip(x, y)), "eager references"
    assert [k for k in quantized2 if not torch.equal(quantized2[k], quantized1[k])] == [], "quantized weights, scales"


def test_precision_auto_says_apart_what_it_did_not_compare():
    """A precision not timed (or not run here) was not judged against the budget: it is said
    "not compared", never "outside the budget"."""
    from pteforge.app.precision import _left_out

    rows = [{"precision": "fp32", "within_budget": False, "judged": False, "note": "not timed"},
            {"precision": "int8", "within_budget": False, "judged": True, "note": "top-1 agreement 60% < 99%"},
            {"precision": "fp16", "within_budget": True, "judged": True, "note": "within budget"}]
    assert _left_out(rows) == "; outside the budget: int8 (top-1 agreement 60% < 99%); not compared: fp32 (not timed)"
    assert _left_out(rows[2:]) == ""


def test_an_int8_target_whose_quantizer_takes_no_operator_fails_and_writes_nothing(capsys, tmp_path):
    """An LSTM alone: XNNPACK's int8 quantizer annotates none of it, so its "int8" program
    would be the fp32 one under an int8 name (a Keras LSTM's file was byte for byte its fp32
    row's, and VERIFIED at int8's 10 dB). The row fails and says what to export instead."""
    from test_cli import cli

    out = tmp_path / "out"
    cli(capsys, "export", "--model", f"{TESTS}/tiny_models.py:only_recurrent", "--input-shape",
        "1,5,8", "--backends", "xnnpack:int8", "xnnpack", "--out", out, "--bench-runs", "0", "--weights", "none")
    [int8] = json.loads((out / "report.json").read_text())["last_run_failures"]
    assert int8["target"] == "xnnpack:int8" and int8["status"] == "QUANTIZE_FAILED", int8
    assert int8["reason"].startswith("ComposableQuantizer quantized none of this model's operators"), int8
    assert "export xnnpack at fp32" in int8["fix"]
    assert [e["status"] for e in written(out / "index.json")] == ["VERIFIED"]
    assert not list(out.rglob("*int8*.pte")), "nothing written under an int8 name"


def test_a_row_says_how_many_of_its_weighted_operators_its_precision_is(capsys, tmp_path):
    """XNNPACK's int8 quantizer takes the Linear, not the matmul after the LSTM: the row says
    int8 on 1 of its 2 such operators, the rest fp32 (in the record and the summary)."""
    from test_cli import cli

    out = tmp_path / "out"
    code, stdout, _ = cli(capsys, "export", "--model", f"{TESTS}/tiny_models.py:linear_recurrent_matmul",
                          "--input-shape", "1,5,8", "--backends", "xnnpack:int8", "--out", out, "--bench-runs", "0", "--weights", "none")
    [row] = written(out / "index.json")
    assert row["quantization"]["operators"] == {"quantized": 1, "weighted": 2}, row["quantization"]
    assert "int8 on 1 of its 2 convolutions, linears and matmuls (the rest fp32)" in stdout

"""One verdict, earned: proven = ran + matched + within its accuracy budget, decided once
(``core.result.verdict`` / ``settle``) and read by export, validate, the manifest and
``select``; a refused run changes nothing; "where int8 breaks" has figures that mean
something. Real exports, real runtime, through the CLI."""

import hashlib
import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import run_cli
from conftest import run_here as run
from pteforge.core.result import Record, Status, Verification, proof_counts, settle, verdict
from pteforge.core.spec import AccuracyBudget

BN_NET = """
import torch.nn as nn
def build():
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                         nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))
"""

NORMALISED = """
import torch, torch.nn as nn
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("mean", torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1))
        self.conv = nn.Conv2d(3, 8, 3)
    def forward(self, x):
        return self.conv(x - self.mean).mean((2, 3))
def build():
    return Net()
"""


def _model(tmp_path: Path, text: str, name: str = "own_net") -> str:
    path = tmp_path / f"{name}.py"
    path.write_text(text)
    return f"{path}:build"


def _labels(tmp_path: Path, n: int, name: str = "labels.txt") -> Path:
    path = tmp_path / name
    path.write_text("".join(f"class {i}\n" for i in range(n)))
    return path


def _tree(root: Path) -> dict[str, str]:
    """Every file under ``root`` and its sha256: what a refusal must leave alone."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _row(status: Status, task: str = "classification", top1=1.0, sqnr=40.0, simulator=None) -> Record:
    v = Verification(inputs=4, max_abs_error=0.0, mean_abs_error=0.0, sqnr_db=sqnr, cosine=1.0, passed=True,
                     images={"images": 5, "sqnr_db": sqnr, "top1_agreement": top1}, simulator=simulator)
    return Record(model="m", family="mobilenet", task=task, target="xnnpack:int8", backends=["xnnpack"],
                  precision="int8", status=status, verification=v)


# -- the one function ------------------------------------------------------------------

def test_verdict_is_proven_only_when_it_ran_matched_and_met_its_budget():
    assert verdict("host", True, None) is Status.VERIFIED
    assert verdict("simulator", True, None) is Status.SIMULATED
    assert verdict("host", True, "top-1 agreement 80% < 99%") is Status.OUT_OF_BUDGET
    assert verdict("simulator", False, None) is Status.MISMATCH
    assert not Status.OUT_OF_BUDGET.proven and not Status.OUT_OF_BUDGET.offered and Status.OUT_OF_BUDGET.exported


def test_settle_judges_every_row_again_under_the_budget_it_is_given():
    rec = _row(Status.VERIFIED, top1=0.8)
    settle(rec)
    assert rec.status is Status.OUT_OF_BUDGET and "80% < 99%" in rec.reason
    assert rec.verification.budget == {"top1": 0.99}
    settle(rec, AccuracyBudget(top1=0.5))  # a laxer budget on a later run (a row from the cache)
    assert rec.status is Status.VERIFIED and rec.reason is None
    sim = _row(Status.SIMULATED, top1=0.6, simulator="Arm's TOSA reference model")
    settle(sim)
    assert sim.status is Status.OUT_OF_BUDGET
    settle(sim, AccuracyBudget(top1=0.5))
    assert sim.status is Status.SIMULATED
    assert proof_counts([rec, _row(Status.OUT_OF_BUDGET)]) == \
        "1 proven on this host, 1 out of its accuracy budget (not proven)"


def test_a_part_of_the_budget_nothing_measured_is_not_judged():
    rec = _row(Status.VERIFIED, task="pose", sqnr=35.0)
    rec.verification.images = None
    settle(rec)  # pose: sqnr=20 on the verification inputs' SQNR
    assert rec.status is Status.VERIFIED
    rec.verification.sqnr_db = 12.0
    settle(rec)
    assert rec.status is Status.OUT_OF_BUDGET and "SQNR 12.0 dB < 20 dB" in rec.reason


# -- "where int8 breaks" ---------------------------------------------------------------

@settings(max_examples=300, deadline=None)
@given(st.floats(allow_nan=True, allow_infinity=True), st.floats(allow_nan=True, allow_infinity=True))
def test_a_layers_sqnr_is_a_number_or_undefined_never_a_math_error(signal, noise):
    from pteforge.stages.accuracy import EXACT_DB, _db

    db = _db(signal, noise)
    assert db is None or (math.isfinite(db) and db <= EXACT_DB)


@settings(max_examples=300, deadline=None)
@given(st.floats(-50, 200), st.floats(-80, 200))
def test_a_layer_never_loses_more_than_the_signal_it_had(before, after):
    from pteforge.stages.accuracy import EXACT_DB, layer_loss

    loss = layer_loss(before, after)
    if before >= EXACT_DB:
        assert loss is None  # exact inputs: no finite figure to lose from
    else:
        assert 0.0 <= loss <= max(before, 0.0)


def test_one_quantized_program_is_measured_layer_by_layer_once_per_worker(monkeypatch):
    """TOSA, Ethos-U55 and U85 lower one quantized program on one worker: the layer-by-layer
    comparison runs once for it; other inputs, another program or an untagged one measure
    again, and each caller gets rows of its own."""
    import torch
    import torch.nn as nn
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (XNNPACKQuantizer,
                                                                         get_symmetric_quantization_config)
    from pteforge.stages import accuracy

    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Conv2d(4, 2, 1)).eval()
    example = (torch.randn(1, 3, 8, 8),)
    fp32 = torch.export.export(model, example)
    prepared = prepare_pt2e(fp32.module(), XNNPACKQuantizer().set_global(get_symmetric_quantization_config()))
    prepared(*example)
    quantized = torch.export.export(convert_pt2e(prepared), example)
    calls, measure = [], accuracy.per_layer
    monkeypatch.setattr(accuracy, "per_layer", lambda *a: calls.append(a) or measure(*a))
    monkeypatch.setattr(accuracy, "_MEASURED", type(accuracy._MEASURED)())
    inputs = [(torch.randn(1, 3, 8, 8),)]
    first = accuracy.per_layer_once(fp32, quantized, inputs, ("capture", "quantized a"))
    assert first and len(calls) == 1
    again = accuracy.per_layer_once(fp32, quantized, [(inputs[0][0].clone(),)], ("capture", "quantized a"))
    assert again == first and again is not first and len(calls) == 1, "the same programs, equal inputs"
    again[0]["module"] = "changed by one caller"
    assert accuracy.per_layer_once(fp32, quantized, inputs, ("capture", "quantized a")) == first
    accuracy.per_layer_once(fp32, quantized, [(torch.randn(1, 3, 8, 8),)], ("capture", "quantized a"))
    accuracy.per_layer_once(fp32, quantized, inputs, ("capture", "quantized b"))
    accuracy.per_layer_once(fp32, quantized, inputs, ("capture", None))
    assert len(calls) == 4


def test_the_worst_layer_from_exact_inputs_is_said_in_words_not_as_a_200_db_drop():
    from pteforge.core.result import accuracy_text
    from pteforge.stages.accuracy import where_it_breaks

    rows = [{"module": "dense", "type": "Linear", "op": "linear", "sqnr_db": 26.2, "low_channels_db": 26.2,
             "drop_db": 0.0, "from_exact": True},
            {"module": "conv", "type": "Conv2d", "op": "conv2d", "sqnr_db": 20.0, "low_channels_db": 20.0,
             "drop_db": 4.0, "from_exact": False}]
    worst = where_it_breaks(rows)
    text = accuracy_text({"worst": worst})
    assert worst[0]["module"] == "dense" and "its inputs exact, 26.2 dB after it" in text
    assert "173" not in text and "−" not in text


def test_an_operator_of_forward_itself_is_named_by_its_op_and_told_no_module_name_to_give():
    """A loss in forward() itself (no submodule) names the operator and the model's class,
    and its tip is not a set_module_name("(top level)") that would leave nothing out; the
    module tip names PT2E's None only where the backend's quantizer takes it (XNNPACK's
    asserts a config)."""
    from pteforge.core.result import accuracy_text
    from pteforge.stages.accuracy import what_to_try

    row = {"module": "(top level)", "type": "Grid", "op": "grid_sampler.default", "sqnr_db": 18.0,
           "low_channels_db": 17.8, "drop_db": 18.8, "from_exact": False}
    tips = what_to_try([row], None, "xnnpack", [])
    text = accuracy_text({"worst": [row], "try": tips})
    assert text.startswith("loses most at grid_sampler in Grid.forward (loses 18.8 dB there, 18.0 dB after it); try: "
                           "leave the grid_sampler in Grid.forward in fp32"), text
    assert "(top level)" not in text and "set_module_name" not in text
    conv = dict(row, module="features.0", type="Conv2d", op="conv2d.default")
    assert "set_module_name" not in what_to_try([conv], None, "xnnpack", [])[0]
    assert 'quantizer.set_module_name("features.0", None)' in what_to_try([conv], None, "ethos-u55", [])[0]
    assert accuracy_text({"worst": [conv]}).startswith("loses most at features.0 (Conv2d: loses 18.8 dB there")
    # an operator of a module's own forward, around layers of its own (a classifier picking its
    # CLS token, ``[:, 0]``): leaving the module out would leave the whole model in fp32
    select = dict(row, module="m", type="ViTForImageClassification", op="select.int")
    inner = dict(conv, module="m.vit.layers.0.norm", drop_db=9.0)
    [tip] = what_to_try([select, inner], None, "ethos-u55", [])
    assert tip.startswith("leave the select in m's own forward in fp32: it alone takes 18.8 dB (move it into a "
                          "submodule of its own"), tip


# -- the app is offered what it loads --------------------------------------------------

def test_the_manifest_lists_a_backend_only_where_the_apps_builds_link_it():
    from pteforge.backends import default_registry
    from pteforge.backends.base import APP_LOADS

    for backend in default_registry():
        words = backend.app_platforms()
        assert set(words) <= set(APP_LOADS.get(backend.manifest_name(), ())), backend.name
    registry = default_registry()
    for name in ("tosa", "ethos-u55", "ethos-u85", "cortex-m", "openvino", "vgf", "mps"):
        if name in registry:
            assert registry.get(name).app_platforms() == [], name
    assert registry.get("metal").app_platforms() == ["macos"]
    assert set(registry.get("coreml").app_platforms()) == {"ios", "macos"}


def test_entries_go_to_the_list_their_status_and_platforms_say():
    from pteforge.report.manifest import ModelEntry, list_for

    base = dict(name="m.pte", modelName="m", category="mobilenet", backend="xnnpack", hash="0", size=1, sizeMB=0.0,
                remoteUrl="m.pte", platforms=["android"], file="m.pte", task="classification", target="xnnpack",
                backends=["xnnpack"], precision="int8", delegation={})
    assert list_for(ModelEntry(**base, status="VERIFIED"), False) == "models"
    assert list_for(ModelEntry(**base, status="OUT_OF_BUDGET"), False) == "outOfBudget"
    assert list_for(ModelEntry(**base, status="OUT_OF_BUDGET"), False, offer_out_of_budget=True) == "models"
    assert list_for(ModelEntry(**{**base, "platforms": []}, status="SIMULATED"), False) == "notForApp"
    assert list_for(ModelEntry(**base, status="MISMATCH"), False) == "failed"


def test_an_offered_out_of_budget_file_is_never_first_in_the_fallback_order():
    from types import SimpleNamespace

    from pteforge.app.platforms import fallback_order

    def entry(name, backend, status):
        return SimpleNamespace(name=name, backends=[backend], precision="int8", status=status, devices=["android"],
                               platforms=["android"])

    order = fallback_order([entry("a", "qnn", "OUT_OF_BUDGET"), entry("b", "xnnpack", "VERIFIED"),
                            entry("c", "vulkan", "NOT_RUNNABLE_HERE")], "android")
    assert [e.name for e in order][-1] == "a"


# -- through the CLI -------------------------------------------------------------------

def test_an_input_shape_taken_only_by_broadcasting_is_refused_before_anything_is_written(capsys, tmp_path):
    out = tmp_path / "out"
    r = run(capsys, "export", "--model", _model(tmp_path, NORMALISED), "--input-shape", "1,1,32,32", "--weights", "none",
                    "--backends", "xnnpack", "--out", out, "--no-cache")
    assert r.returncode == 2, r.stderr
    line = r.stderr.strip().splitlines()[-1]
    assert "takes 3 at dim 1" in line and "give --input-shape 1,3,32,32" in line
    assert "Traceback" not in r.stderr and not out.exists()


@pytest.mark.slow
def test_a_refused_run_changes_nothing_the_user_had_and_the_cache_checks_what_capture_checks(capsys, tmp_path):
    """A good export; then refusals in the same --out (labels of another count, even with
    every row in the cache; a shape taken only by broadcasting): the folder's bytes are the
    same after each, and no stray labels file is left."""
    out, model = tmp_path / "out", _model(tmp_path, BN_NET)
    good = run(capsys, "export", "--model", model, "--input-shape", "1,3,32,32", "--weights", "none", "--task",
                       "classification", "--labels-file", _labels(tmp_path, 10), "--backends", "xnnpack", "--out", out)
    assert good.returncode == 0, good.stdout + good.stderr
    before = _tree(out)
    assert any(name.endswith("_labels.txt") for name in before)
    wrong = run(capsys, "export", "--model", model, "--input-shape", "1,3,32,32", "--weights", "none", "--task",
                        "classification", "--labels-file", _labels(tmp_path, 5, "five.txt"), "--backends", "xnnpack",
                        "--out", out)
    assert wrong.returncode == 4, wrong.stdout + wrong.stderr
    assert "scores 10 classes" in wrong.stderr and "names 5" in wrong.stderr
    assert _tree(out) == before
    other = run(capsys, "export", "--model", _model(tmp_path, NORMALISED, "other_net"), "--input-shape", "1,1,32,32",
                        "--weights", "none", "--task", "classification", "--labels-file", _labels(tmp_path, 8, "eight.txt"),
                        "--backends", "xnnpack", "--out", out)
    assert other.returncode == 2, other.stdout + other.stderr
    assert _tree(out) == before  # no other_net_labels.txt, no manifest change
    latin = tmp_path / "latin.txt"
    latin.write_bytes("".join(f"caf\u00e9 {i}\n" for i in range(10)).encode("latin-1"))
    bad_text = run(capsys, "export", "--model", model, "--input-shape", "1,3,32,32", "--weights", "none", "--task",
                           "classification", "--labels-file", latin, "--backends", "xnnpack", "--out", out)
    assert bad_text.returncode == 2 and "is not UTF-8 text" in bad_text.stderr, bad_text.stderr
    assert "Traceback" not in bad_text.stderr and _tree(out) == before


@pytest.mark.slow
def test_a_missed_budget_is_out_of_budget_everywhere_and_a_new_budget_judges_the_cached_row(capsys, tmp_path):
    out, model = tmp_path / "out", _model(tmp_path, BN_NET)
    args = ("export", "--model", model, "--input-shape", "1,3,32,32", "--weights", "none", "--task", "classification",
            "--labels-file", _labels(tmp_path, 10), "--backends", "xnnpack:int8", "--out", out, "--json")
    strict = run(capsys, *args, "--accuracy-budget", "sqnr=100")  # int8 never reaches 100 dB (its fp32 reference does)
    assert strict.returncode == 0, strict.stderr
    index = json.loads((out / "index.json").read_text())
    assert [e["target"] for e in index["models"]] == [] and \
        [(e["target"], e["status"]) for e in index["outOfBudget"]] == [("xnnpack:int8", "OUT_OF_BUDGET")]
    assert "SQNR" in index["outOfBudget"][0]["verification"]["budget_missed"]
    assert (out / index["outOfBudget"][0]["file"]).is_file()
    quiet = run(capsys, *args[:-1], "--accuracy-budget", "sqnr=100", "-q")
    lines = quiet.stdout.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("⚠") and "OUT_OF_BUDGET" in lines[0] and ".pte" in lines[0]
    assert "1 out of its accuracy budget" in lines[1]
    lax = run(capsys, *args, "--accuracy-budget", "sqnr=1")  # the same row from the cache, judged again
    assert lax.returncode == 0, lax.stderr
    index = json.loads((out / "index.json").read_text())
    assert [(e["target"], e["status"]) for e in index["models"]] == [("xnnpack:int8", "VERIFIED")]
    assert index["outOfBudget"] == []
    assert index["models"][0]["cache"]["hit"]
    sel = run(capsys, "select", out, "own_net")
    assert sel.returncode == 0 and "VERIFIED" in sel.stdout


@pytest.mark.slow
def test_export_and_validate_give_every_kind_of_file_the_same_status(capsys, tmp_path):
    """Eight kinds (a catalog model with its own weights and int8, a task model of one's own
    on XNNPACK and simulated on TOSA and Ethos-U85, YOLO detection and pose, ONNX, TorchScript), exported
    in four runs, then validated: the same status for each file."""
    import torch

    out = tmp_path / "out"
    weights = tmp_path / "mnv3.pt"
    import torchvision

    torch.manual_seed(1)
    torch.save(torchvision.models.mobilenet_v3_small(num_classes=1000).state_dict(), weights)
    ts = tmp_path / "scripted.pt"
    torch.jit.trace(torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU()).eval(),
                    torch.randn(1, 3, 32, 32)).save(str(ts))
    onnx_file = tmp_path / "tiny.onnx"
    torch.onnx.export(torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.Sigmoid()).eval(),
                      (torch.randn(1, 3, 32, 32),), str(onnx_file), dynamo=False)
    runs = [
        ("--mobilenet", "mobilenet_v3_small", "--weights", str(weights), "--input-shape", "1,3,96,96",  # 224: +15 s
         "--backends", "xnnpack", "xnnpack:int8"),
        ("--model", _model(tmp_path, BN_NET), "--input-shape", "1,3,64,64", "--weights", "none", "--task",
         "classification", "--labels-file", str(_labels(tmp_path, 10)), "--backends", "xnnpack", "tosa", "tosa:fp32",
         "ethos-u85"),
        ("--yolo", "yolo11n", "--yolo-pose", "yolo11n-pose", "--weights", "none", "--input-shape", "1,3,160,160",
         "--backends", "xnnpack"),
        ("--model", str(onnx_file), "--model", str(ts), "--input-shape", "1,3,32,32", "--backends", "xnnpack"),
    ]
    exported = {}
    for i, extra in enumerate(runs):  # a folder each (two runs write mobilenet_v3_small_xnnpack.pte); validate finds all
        r = run(capsys, "export", *extra, "--out", out / str(i), "--bench-runs", "0")
        assert r.returncode in (0, 1), r.stdout + r.stderr
        index = json.loads((out / str(i) / "index.json").read_text())
        lists = ("models", "references", "outOfBudget", "notForApp", "failed")
        exported.update({f"{i}/{e['file']}": e["status"] for key in lists for e in index.get(key, [])})
    assert len(exported) >= 9 and {"VERIFIED", "SIMULATED"} <= set(exported.values())
    assert any("int8" in f for f in exported) and any("tosa" in f for f in exported)
    assert any("ethos-u85" in f for f in exported)
    # a subprocess: validate rebuilds the YOLO models, and Ultralytics, imported into this
    # process, would keep its log handler on this test's captured stream (closed after it),
    # where a later test's image decoding logs ("--- Logging error ---")
    v = run_cli("validate", out, "--json")
    report = json.loads(v.stdout)
    validated = {f["file"]: f["status"] for f in report["files"] if f["file"].endswith(".pte")}
    for file, status in exported.items():
        assert validated.get(file) == status, (file, status, validated.get(file), [
            f["reason"] for f in report["files"] if f["file"] == file])


# -- "where int8 breaks" on real quantized programs ---------------------------------------

PLANTED = """
import torch, torch.nn as nn
class Planted(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU())
        self.broken = nn.Sequential(nn.Conv2d(16, 16, 3, padding=1), nn.ReLU())
        self.tail = nn.Sequential(nn.Conv2d(16, 16, 3, padding=1), nn.ReLU())
        self.head = nn.Linear(16, 10)
        with torch.no_grad():  # one channel ~100x the others: per-tensor int8 crushes the rest there
            self.broken[0].bias[0] = 60.0
    def forward(self, x):
        return self.head(self.tail(self.broken(self.stem(x))).mean((2, 3)))
def build():
    return Planted()
"""

LSTM = """
import torch.nn as nn
class Speaker(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(16, 32, num_layers=2, batch_first=True)
        self.proj = nn.Linear(32, 8)
    def forward(self, x):
        out, _ = self.lstm(x)
        return self.proj(out[:, -1])
def build():
    return Speaker()
"""

ENCODER = """
import torch, torch.nn as nn
class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(50, 32)
        layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.dense = nn.Linear(32, 4)
    def forward(self, ids):
        return self.dense(self.encoder(self.embed(ids)).mean(1))
def build():
    return Encoder()
"""


def _accuracy_of(capsys, tmp_path: Path, text: str, name: str, *shape: str) -> dict:
    out = tmp_path / f"out_{name}"
    r = run(capsys, "export", "--model", _model(tmp_path, text, name), *shape, "--weights", "none",
                    "--backends", "xnnpack:int8", "--accuracy-report", "--bench-runs", "0", "--out", out)
    assert r.returncode in (0, 1), r.stdout + r.stderr
    assert "math domain" not in r.stdout + r.stderr and "−" not in r.stdout
    index = json.loads((out / "index.json").read_text())
    [entry] = [e for key in ("models", "outOfBudget", "failed") for e in index.get(key, [])
               if e["target"] == "xnnpack:int8"]
    return entry["accuracy"]


def _meaningful(accuracy: dict) -> None:
    """Figures that mean something: a loss is never negative nor more than an input can
    have; where layers could not be compared, the row says why."""
    from pteforge.stages.accuracy import EXACT_DB

    if accuracy.get("error"):
        assert "math domain" not in accuracy["error"] and len(accuracy["error"]) > 10
        return
    assert accuracy["worst"], accuracy
    for w in accuracy["worst"]:
        assert 0.0 <= w["drop_db"] <= EXACT_DB
        assert w["sqnr_db"] <= EXACT_DB and math.isfinite(w["sqnr_db"])
        assert w["from_exact"] in (True, False)


def test_where_int8_breaks_names_the_planted_broken_layer(capsys, tmp_path):
    accuracy = _accuracy_of(capsys, tmp_path, PLANTED, "planted", "--input-shape", "1,3,16,16")
    _meaningful(accuracy)
    assert accuracy["worst"][0]["module"].startswith("broken"), accuracy["worst"]


@pytest.mark.slow
@pytest.mark.parametrize("name, text, shape", [("speaker", LSTM, "1,20,16"), ("encoder", ENCODER, "int64:1,12")])
def test_where_int8_breaks_means_something_on_recurrent_and_attention_models(capsys, tmp_path, name, text, shape):
    _meaningful(_accuracy_of(capsys, tmp_path, text, name, "--input-shape", shape))


def test_a_row_not_offered_to_the_app_says_why_in_the_summary():
    from pteforge.core.result import Artifact, Delegation
    from pteforge.ui.render import Renderer

    rec = _row(Status.OUT_OF_BUDGET, top1=0.6)
    rec.artifact = Artifact(path="m_xnnpack_int8.pte", size=1000, sha256="0",
                            delegation=Delegation(10, 10, {}, {}, [], ["XnnpackBackend"]))
    assert "below its budget: manifest outOfBudget; --offer-out-of-budget offers it" in Renderer._artifact_line(rec)
    rec.status, rec.backends = Status.SIMULATED, ["tosa"]
    assert "no build of it links this backend: manifest notForApp" in Renderer._artifact_line(rec)
    rec.backends = ["xnnpack"]
    assert "not offered" not in Renderer._artifact_line(rec)

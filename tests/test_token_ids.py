"""Models fed token ids (int64 inputs to an embedding): ``--precision auto`` picks dynamic
int8, which needs no calibration on ids, or says why not; static int8 calibrated on seeded
synthetic ids says so in its row (manifest, terminal and EXPORT_SUMMARY.md), and is not
chosen. Exported for real through the command line, with a tiny embedding + linear text
classifier."""

import json

from test_cli import cli

from pteforge.core.samples import TOKEN_IDS_NOTE, token_ids
from pteforge.core.spec import InputSpec, ModelSpec

TEXT_MODEL = '''
import torch


class TextClassifier(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.embed = torch.nn.Embedding(64, 32)
        self.hidden = torch.nn.Linear(32, 64)
        self.head = torch.nn.Linear(64, 4)

    def forward(self, ids):
        return self.head(torch.relu(self.hidden(self.embed(ids).mean(1))))


def classifier():
    return TextClassifier().eval()
'''


def test_token_ids_are_the_integer_tensors_fed():
    spec = ModelSpec(name="m", family="custom", task="custom", factory="", inputs=(
        InputSpec((1, 16), "int64", "input_ids"), InputSpec((1, 16), "float32", "mask"), InputSpec((1, 16), "int32"),
        InputSpec((), "int64", "sr", 16000.0)))
    assert token_ids(spec) == ["input_ids", "input 2"], "a held scalar is no token id; a float mask neither"


def test_precision_auto_picks_dynamic_int8_for_token_ids(capsys, tmp_path):
    factory = tmp_path / "text_model.py"
    factory.write_text(TEXT_MODEL)
    out = tmp_path / "out"
    code, stdout, err = cli(capsys, "export", "--model", f"{factory}:classifier", "--input-shape", "1,16",
                            "--input-dtype", "int64", "--backends", "xnnpack", "--precision", "auto",
                            "--calibration-samples", "4", "--out", out)
    assert code in (0, 1), stdout + err
    manifest = json.loads((out / "index.json").read_text())
    [choice] = manifest["precisionChoices"]
    tried = {t["precision"]: t for t in choice["tried"]}
    assert tried["int8-dynamic"]["within_budget"], tried["int8-dynamic"]
    assert choice["winner"] == "xnnpack:int8-dynamic", choice["why"]
    assert choice["tokenIds"] == ["input 0"] and choice["why"].startswith("token-id inputs (input 0): dynamic int8")
    static = tried["int8"]
    assert static["calibration"] == "synthetic token ids" and not static["within_budget"]
    assert "calibrated on synthetic token ids" in static["note"] and "calibrated on synthetic token ids" in choice["why"]

    [row] = [e for e in manifest["models"] if e["target"] == "xnnpack:int8"]
    assert row["quantization"]["calibration"]["note"] == TOKEN_IDS_NOTE
    assert row["quantization"]["calibration"]["tokenIds"] == ["input 0"]
    assert "4 seeded synthetic token ids (not representative: give real ids with --calibration DIR)" in stdout
    assert TOKEN_IDS_NOTE in (out / "EXPORT_SUMMARY.md").read_text()
    [dynamic] = [e for e in manifest["models"] if e["target"] == "xnnpack:int8-dynamic"]
    # dynamic int8 scales its activations at run time: its calibration runs set nothing, and it does not claim them
    assert "calibration" not in dynamic["quantization"] and dynamic["quantization"]["activations"] == "scaled at run time"
    assert "activations scaled at run time (nothing calibrated)" in " ".join(stdout.split())


def test_where_dynamic_int8_cannot_win_auto_says_why():
    from pteforge.app.precision import _on_token_ids

    def row(precision, within, note="within budget", calibration=None):
        return {"precision": precision, "within_budget": within, "note": note, "p50_ms": 1.0,
                **({"calibration": calibration} if calibration else {})}

    tried = [row("fp32", True), row("int8", True, calibration="synthetic token ids"),
             row("int8-dynamic", False, "SQNR 12.0 dB < 20 dB")]
    preferred, why = _on_token_ids(tried, ["input_ids"])
    assert preferred is None
    assert why == "token-id inputs (input_ids), but dynamic int8 is outside the budget (SQNR 12.0 dB < 20 dB); "
    assert not tried[1]["within_budget"] and tried[1]["note"] == "calibrated on synthetic token ids, not representative"
    _, why = _on_token_ids([row("fp32", True)], ["input_ids"])
    assert why.endswith("dynamic int8 is not a precision of this backend; ")

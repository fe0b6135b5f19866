"""TorchScript programs whose ``forward`` takes optional arguments, as a scripted BERT does
(``input_ids`` plus eleven ``Optional[...] = None``): exported through the real command line
with the tensors given, in order or by name, the rest left at their defaults, and verified
against the TorchScript module; a refusal names only what is truly missing."""

import json
from typing import Optional

import pytest
import torch
from test_cli import cli, error_lines
from test_files_from_elsewhere import entries, export

from pteforge.core.errors import ExitStatus


class OptionalBert(torch.nn.Module):
    """A text classifier whose every argument is optional, as Hugging Face's BERT's are."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.words = torch.nn.Embedding(30, 16)
        self.types = torch.nn.Embedding(10, 16)  # seeded ids are < 10
        self.head = torch.nn.Linear(16, 3)

    def forward(self, input_ids: Optional[torch.Tensor] = None, attention_mask: Optional[torch.Tensor] = None,
                token_type_ids: Optional[torch.Tensor] = None, head_mask: Optional[torch.Tensor] = None,
                output_attentions: Optional[bool] = None, return_dict: bool = True, scale: float = 1.0):
        assert input_ids is not None
        x = self.words(input_ids)
        if token_type_ids is not None:
            x = x + self.types(token_type_ids)
        if attention_mask is not None:
            x = x * attention_mask.unsqueeze(-1).to(x.dtype)
        if output_attentions is not None and output_attentions:
            x = x * 2.0
        return self.head(x.mean(1)) * scale


class TwoTensors(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor, mask: Optional[torch.Tensor] = None):
        out = torch.relu(x) + y
        return out if mask is None else out * mask


class Counted(torch.nn.Module):
    def forward(self, x: torch.Tensor, times: int):
        return x * times


def test_a_scripted_bert_exports_with_input_ids_alone(capsys, tmp_path):
    path = tmp_path / "bert.pt"
    torch.jit.script(OptionalBert().eval()).save(str(path))
    out = tmp_path / "out"
    code, said = export(capsys, "--model", path, "--input-shape", "1,12", "--input-dtype", "int64",
                        "--backends", "portable", "--out", out)
    assert code == 0, said
    [e] = entries(out).values()
    assert e["status"] == "VERIFIED", e
    assert [i["name"] for i in e["inputs"]] == ["input_ids"] and e["inputs"][0]["dtype"] == "int64"


@pytest.mark.slow
def test_optional_tensors_are_given_by_name_in_any_order_and_validate_again(capsys, tmp_path):
    """attention_mask left out between the two given: validate and bench rebuild the eager
    reference from the manifest's input names, not from their places."""
    path = tmp_path / "bert.pt"
    torch.jit.script(OptionalBert().eval()).save(str(path))
    out = tmp_path / "out"
    code, said = export(capsys, "--model", path, "--input-shape", "token_type_ids=int64:1,12",
                        "--input-shape", "input_ids=int64:1,12", "--backends", "portable", "--out", out)
    assert code == 0, said
    [e] = entries(out).values()
    assert e["status"] == "VERIFIED", e
    assert [i["name"] for i in e["inputs"]] == ["input_ids", "token_type_ids"]  # forward's order
    code, stdout, err = cli(capsys, "validate", "--models-dir", out)
    assert code == 0, stdout + err
    assert {f["status"] for f in json.loads((out / "validation_report.json").read_text())["files"]} == {"VERIFIED"}
    code, stdout, err = cli(capsys, "bench", out, "--runs", "2", "--compare", "eager")
    assert code == 0, stdout + err
    assert entries(out)["portable"]["bench"]["eager"]["p50_ms"] > 0


def test_a_traced_program_binds_its_tensors_by_name(capsys, tmp_path):
    path = tmp_path / "traced.pt"
    torch.jit.trace(TwoTensors().eval(), (torch.rand(1, 6), torch.rand(1, 6))).save(str(path))
    out = tmp_path / "out"
    code, said = export(capsys, "--model", path, "--input-shape", "y=1,6", "--input-shape", "x=1,6",
                        "--backends", "portable", "--out", out)
    assert code == 0, said
    [e] = entries(out).values()
    assert e["status"] == "VERIFIED", e
    assert [i["name"] for i in e["inputs"]] == ["x", "y"]


def test_a_refusal_names_only_what_is_missing(capsys, tmp_path):
    scripted = tmp_path / "two.pt"
    torch.jit.script(TwoTensors().eval()).save(str(scripted))
    code, said = export(capsys, "--model", scripted, "--input-shape", "y=1,6", "--out", tmp_path / "o1")
    assert code == ExitStatus.USAGE, said
    [line] = error_lines(said)
    assert "needs x: Tensor, which no --input-shape gives" in line and "--input-shape x=..." in line
    assert "y:" not in line and "mask" not in line

    code, said = export(capsys, "--model", scripted, "--input-shape", "z=1,6", "--out", tmp_path / "o2")
    assert code == ExitStatus.USAGE and "forward takes no 'z'" in error_lines(said)[0]

    counted = tmp_path / "counted.pt"
    torch.jit.script(Counted().eval()).save(str(counted))
    code, said = export(capsys, "--model", counted, "--input-shape", "1,6", "--out", tmp_path / "o3")
    assert code == ExitStatus.MODEL, said
    [line] = error_lines(said)
    assert "times: int without a default" in line and "x: Tensor" not in line

    bert = tmp_path / "bert.pt"
    torch.jit.script(OptionalBert().eval()).save(str(bert))
    code, said = export(capsys, "--model", bert, "--input-shape", "scale=1,6", "--out", tmp_path / "o4")
    assert code == ExitStatus.USAGE and "scale: float" in error_lines(said)[0]
    assert "input_ids" not in error_lines(said)[0].split("(fix")[0]
    code, _, err = cli(capsys, "export", "--model", bert, "--input-shape", "input_ids=int64:0.5", "--out", tmp_path / "o5")
    assert code == ExitStatus.USAGE and "gives a value" in error_lines(err)[0]


FACTORY = '''
from typing import Optional

import torch


class Masked(torch.nn.Module):
    def forward(self, x: torch.Tensor, mask: Optional[torch.Tensor] = None, k: int = 2):
        return x * k if mask is None else x * mask


def scripted():
    return torch.jit.script(Masked().eval())
'''


def test_a_factorys_scripted_module_keeps_its_defaults(capsys, tmp_path):
    """A factory returning a ScriptModule goes through the same converter: the arguments
    after the tensors given stay at their defaults."""
    factory = tmp_path / "masked.py"
    factory.write_text(FACTORY)
    out = tmp_path / "out"
    code, said = export(capsys, "--model", f"{factory}:scripted", "--input-shape", "1,6", "--backends", "portable",
                        "--out", out)
    assert code == 0, said
    [e] = entries(out).values()
    assert e["status"] == "VERIFIED", e


class LastStep(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(16, 8)

    def forward(self, x):
        return self.lstm(x)[0][-1]


def test_a_scripted_model_given_the_wrong_shape_says_so_in_its_own_words(capsys, tmp_path):
    """A scripted LSTM at an input size it does not take: torch.export said "INTERNAL ASSERT
    FAILED ... expected int"; the model's own sentence says what is wrong."""
    path = tmp_path / "lstm.pt"
    torch.jit.script(LastStep().eval()).save(str(path))
    code, stdout, err = cli(capsys, "export", "--model", path, "--input-shape", "5,1,10", "--backends", "xnnpack",
                            "--out", tmp_path / "out")
    assert code == ExitStatus.TARGETS_FAILED, stdout + err
    said = " ".join((stdout + err).split())
    assert ("CAPTURE_FAILED: the model itself fails on inputs of shape (5, 1, 10): RuntimeError: "
            "input.size(-1) must be equal to input_size. Expected 16, got 10") in said, said
    assert "INTERNAL ASSERT" not in said

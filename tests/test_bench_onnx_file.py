"""``pteforge bench --compare eager`` on a model of an ONNX file: ONNX Runtime is timed on
the user's own file (fed the program's inputs and the scalar the export held as a
constant), not on a re-export of the reference; eager PyTorch is the file's import."""

import torch
from test_cli import cli
from test_files_from_elsewhere import entries, export


class Scaled(torch.nn.Module):
    """A linear layer scaled by a sample rate given as a scalar input, as a VAD's is."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.linear = torch.nn.Linear(6, 4)

    def forward(self, x, sr):
        return self.linear(x) * (sr.to(torch.float32) / 16000.0)


def test_bench_times_onnx_runtime_on_the_users_own_onnx_file(capsys, tmp_path):
    path = tmp_path / "scaled.onnx"
    torch.onnx.export(Scaled().eval(), (torch.rand(1, 6), torch.tensor(16000)), str(path), dynamo=False,
                      input_names=["x", "sr"], output_names=["y"])
    out = tmp_path / "out"
    code, said = export(capsys, "--model", path, "--input-shape", "x=1,6", "--input-shape", "sr=int64:16000",
                        "--backends", "xnnpack", "--out", out)
    assert code == 0, said
    assert entries(out)["xnnpack"]["heldInputs"] == {"sr": 16000}
    code, stdout, err = cli(capsys, "bench", out, "--runs", "3", "--compare", "eager")
    assert code == 0, stdout + err
    b = entries(out)["xnnpack"]["bench"]
    ort = b["onnxruntime"]
    assert "error" not in ort and ort["p50_ms"] > 0 and ort["version"], ort
    assert ort["of"] == "the ONNX file itself (scaled.onnx)"
    assert b["eager"]["p50_ms"] > 0 and b["eager"]["of"] == "its PyTorch import", b["eager"]
    assert "ONNX Runtime on the ONNX file itself (scaled.onnx); eager p50: its PyTorch import" in stdout

"""A model captured at an input shape its layers do not take: the capture failure says, in
words, which layer takes what and what it got, and an input shape the model runs at, when
one is found by running it (never a guess)."""

import pytest
import torch
from test_cli import cli

from pteforge.core.errors import ExitStatus
from pteforge.stages.capture_failure import shape_mismatch

NETS = '''
import torch


class Classifier(torch.nn.Module):
    """conv, pool, flatten, fc: built for 32x32 images (8 channels of 16x16 after the pool)."""

    def __init__(self):
        super().__init__()
        self.features = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2))
        self.fc = torch.nn.Linear(8 * 16 * 16, 10)

    def forward(self, x):
        return self.fc(self.features(x).flatten(1))


def classifier():
    return Classifier()


def gray():
    return torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3), torch.nn.ReLU())


class Positions(torch.nn.Module):
    """adds a learned position table of 16 steps: takes sequences of 16."""

    def __init__(self):
        super().__init__()
        self.pos = torch.nn.Parameter(torch.zeros(1, 16, 8))

    def forward(self, x):
        return x + self.pos


def positions():
    return Positions()
'''


def failure(capsys, tmp_path, factory: str, shape: str) -> tuple[str, str]:
    """The reason and fix of the CAPTURE_FAILED row of exporting ``factory`` at ``shape``,
    as the run's summary prints them (no target written: no report.json)."""
    (tmp_path / "nets.py").write_text(NETS)
    code, stdout, err = cli(capsys, "export", "--model", f"{tmp_path / 'nets.py'}:{factory}", "--input-shape", shape,
                            "--weights", "none", "--backends", "portable", "--bench-runs", "0", "--out", tmp_path / "out")
    assert code == ExitStatus.TARGETS_FAILED, stdout + err
    [line] = [ln.strip() for ln in stdout.splitlines() if ln.strip().startswith("• portable: CAPTURE_FAILED: ")]
    reason, _, fix = line.removeprefix("• portable: CAPTURE_FAILED: ").partition(" — fix: ")
    assert "torch.export failed" not in line and "pytorch.org" not in line, line
    return reason, fix


def test_a_linear_after_a_flatten_says_the_features_it_takes_and_a_shape_that_runs(capsys, tmp_path):
    reason, fix = failure(capsys, tmp_path, "classifier", "1,3,64,64")
    assert reason == "the model's layer 'fc' (Linear) takes 2048 features but got 8192 from --input-shape 1,3,64,64"
    assert fix == "give the input shape the model was built for (--input-shape 1,3,32,32 runs it)"


def test_a_convolution_says_the_channels_it_takes(capsys, tmp_path):
    reason, fix = failure(capsys, tmp_path, "gray", "1,3,16,16")
    assert reason == "the model's layer '0' (Conv2d) takes 1 channel but got 3 from --input-shape 1,3,16,16"
    assert fix == "give the input shape the model was built for (--input-shape 1,1,16,16 runs it)"


def test_sizes_that_must_match_say_so(capsys, tmp_path):
    reason, fix = failure(capsys, tmp_path, "positions", "1,10,8")
    assert reason == "the model's forward combines sizes 10 and 16 at dimension 1, which must match, from --input-shape 1,10,8"
    assert fix == "give the input shape the model was built for (--input-shape 1,16,8 runs it)"


class Inconsistent(torch.nn.Module):
    """Its layers do not fit each other: no input shape runs it."""

    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU())
        self.head = torch.nn.Linear(16, 2)

    def forward(self, x):
        return self.head(self.body(x))


def test_no_shape_is_suggested_unless_the_model_ran_at_it():
    message, fix = shape_mismatch(Inconsistent().eval(), (torch.rand(1, 4),))
    assert message == "the model's layer 'head' (Linear) takes 16 features but got 8 from --input-shape 1,4"
    assert fix == "give the input shape the model was built for"


class Projection(torch.nn.Module):
    """A matmul in the model's own forward, no layer of its own."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.rand(3, 2))

    def forward(self, x):
        return x @ self.w


@pytest.mark.parametrize("model, shape, said, runs", [
    # nested: the layer's full name; a Linear fed the input itself: its last dim
    (torch.nn.Sequential(torch.nn.Sequential(torch.nn.Linear(6, 3))), (2, 5),
     "the model's layer '0.0' (Linear) takes 6 features but got 5 from --input-shape 2,5", "2,6"),
    (Projection(), (1, 5), "the model's forward takes 3 features but got 5 from --input-shape 1,5", "1,3"),
])
def test_layers_are_named_by_their_place_in_the_model(model, shape, said, runs):
    message, fix = shape_mismatch(model.eval(), (torch.rand(*shape),))
    assert message == said and fix.endswith(f"(--input-shape {runs} runs it)"), (message, fix)


def test_a_model_that_runs_is_no_shape_mismatch():
    assert shape_mismatch(torch.nn.Linear(4, 2).eval(), (torch.rand(1, 4),)) is None

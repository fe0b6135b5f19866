"""pteforge's own decomposition of LSTM and GRU (backends/toolkit/rewrite.py, ``_recurrent_steps``):
the values PyTorch computes, through real export, lowering and the ExecuTorch runtime."""

from __future__ import annotations

import pytest
import torch

from pteforge.core.spec import Precision
from pteforge.backends.toolkit.rewrite import xnnpack_friendly


class Recurrent(torch.nn.Module):
    """One recurrent layer, its output and final states, from a given initial state or none."""

    def __init__(self, kind, size, hidden, layers, bidirectional, batch_first, bias, initial):
        super().__init__()
        self.rnn = getattr(torch.nn, kind)(size, hidden, layers, bias=bias, batch_first=batch_first,
                                           bidirectional=bidirectional)
        self.lstm, self.initial = kind == "LSTM", initial

    def forward(self, x, h0, c0):
        if not self.initial:
            out, state = self.rnn(x)
        else:
            out, state = self.rnn(x, (h0, c0) if self.lstm else h0)
        return (out, *state) if self.lstm else (out, state)


# kind, layers, bidirectional, batch_first, bias, initial state, batch
CASES = [
    ("LSTM", 3, False, True, True, False, 1),
    ("LSTM", 2, True, False, True, True, 2),
    ("LSTM", 2, True, True, False, True, 3),
    ("LSTM", 1, False, False, True, False, 1),
    ("GRU", 2, False, True, True, False, 1),
    ("GRU", 2, True, False, True, True, 2),
    ("GRU", 1, True, True, False, True, 3),
]


def _case(kind, layers, bidirectional, batch_first, bias, initial, batch, steps=5, size=6, hidden=8):
    torch.manual_seed(0)
    model = Recurrent(kind, size, hidden, layers, bidirectional, batch_first, bias, initial).eval()
    dirs = 2 if bidirectional else 1
    x = torch.randn(batch, steps, size) if batch_first else torch.randn(steps, batch, size)
    states = torch.randn(layers * dirs, batch, hidden), torch.randn(layers * dirs, batch, hidden)
    return model, (x, *states)


def _targets(program) -> set[str]:
    return {str(n.target) for n in program.graph.nodes if n.op == "call_function"}


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
def test_the_steps_compute_what_pytorch_computes(case):
    model, inputs = _case(*case)
    exported = torch.export.export(model, inputs)
    late = xnnpack_friendly(exported, late=True)
    assert not {"aten.lstm.input", "aten.gru.input"} & _targets(late)
    for want, got in zip(model(*inputs), late.module()(*inputs), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_a_step_is_one_linear_with_a_constant_weight():
    """The input projection is one linear over every step (not one per step), and each step
    has exactly one linear more: the recurrent weight, a parameter, never a transpose made
    at run time. (From a zero initial state the first step's recurrent linear is a
    constant, folded.)"""
    model, inputs = _case("LSTM", 2, True, True, True, False, 1, steps=7)
    late = xnnpack_friendly(torch.export.export(model, inputs), late=True)
    linears = [n for n in late.graph.nodes if n.target == torch.ops.aten.linear.default]
    assert len(linears) == 2 * 2 * (1 + 7 - 1)
    placeholders = {n.name for n in late.graph.nodes if n.op == "placeholder"}
    assert all(n.args[1].name in placeholders for n in linears)  # folded: constants, as placeholders


@pytest.mark.slow
@pytest.mark.parametrize("case", [CASES[1], CASES[5]], ids=["bilstm", "bigru"])
def test_lowered_and_run_by_executorch_they_compute_what_pytorch_computes(case):
    from tests.test_rewrite import _run, _xnnpack_lowered

    model, inputs = _case(*case, steps=3)
    _, (edge, subgraphs, outside) = _xnnpack_lowered(torch.export.export(model, inputs))
    assert not outside, f"left on the portable kernels: {outside}"
    assert subgraphs == 1
    for want, got in zip(model(*inputs), _run(edge, inputs), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_int8_keeps_the_recurrent_weights_fp32():
    """Quantized for XNNPACK int8, the steps stay fp32 (rewritten after quantization) and the
    program still computes what eager computes."""
    from tests.test_rewrite import _backend_program, _run

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 6), Unpack(torch.nn.LSTM(6, 8, 2, batch_first=True))).eval()
    x = torch.randn(1, 4, 6)
    edge, _, _ = _backend_program(model, x, Precision.INT8)
    [got] = _run(edge, (x,))
    want = model(x)
    sqnr = 10 * torch.log10(want.pow(2).mean() / (got - want).pow(2).mean())
    assert sqnr > 20, f"int8 SQNR {sqnr:.1f} dB"


class Unpack(torch.nn.Module):
    def __init__(self, rnn):
        super().__init__()
        self.rnn = rnn

    def forward(self, x):
        return self.rnn(x)[0]


@pytest.mark.parametrize("proj", [0, 4], ids=["lstm", "lstm-projected"])
def test_fp16_makes_the_zero_initial_state_in_fp16(proj):
    """An LSTM called without a state makes its zeros with dtype=float32 written into the
    capture; in the fp16 program they met half weights (with a projection: "mat1 and mat2
    must have the same dtype"). They are made in fp16 there."""
    from pteforge.backends.toolkit.fp16 import half_program

    torch.manual_seed(0)
    model = torch.nn.Sequential(Unpack(torch.nn.LSTM(6, 8, 2, proj_size=proj)), torch.nn.Linear(proj or 8, 3)).eval()
    x = torch.randn(5, 1, 6)
    half = half_program(torch.export.export(model, (x,)), (x,))
    made = [n for n in half.graph.nodes if n.op == "call_function" and "zeros" in str(n.target)]
    assert made and all(n.kwargs.get("dtype") == torch.float16 for n in made)
    torch.testing.assert_close(half.module()(x), model(x), rtol=2e-2, atol=2e-2)



def test_fp16_takes_an_image_of_integers_made_float_in_fp16():
    """``x.float() / 255`` of a uint8 image met half weights ("Input type (float) and bias
    type (c10::Half) should be the same"): a cast of integers is to fp16 in the fp16 program;
    a cast of floats to float32 (a softmax's upcast) stays."""
    from pteforge.backends.toolkit.fp16 import half_program

    class Image(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 3)

        def forward(self, x):
            y = self.conv(x.permute(0, 3, 1, 2).float() / 255.0)
            return torch.softmax(y.float(), dim=1)

    torch.manual_seed(0)
    model, x = Image().eval(), torch.randint(0, 255, (1, 8, 8, 3), dtype=torch.uint8)
    half = half_program(torch.export.export(model, (x,)), (x,))
    casts = [n.args[1] for n in half.graph.nodes if n.target == torch.ops.aten.to.dtype]
    assert torch.float16 in casts and torch.float32 in casts, casts  # the image's to fp16; the upcast kept
    torch.testing.assert_close(half.module()(x), model(x), rtol=2e-2, atol=2e-2)

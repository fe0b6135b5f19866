"""``LSTM`` (silero-vad, ddddocr's recognizer) and ``GRU`` as ``torch.nn.LSTM``/``GRU``."""

from __future__ import annotations

import functools

import torch
from onnx2torch.node_converters.registry import add_converter
from onnx2torch.utils.common import OnnxMapping, OperationConverterResult

from .common import _add, _constant, _missing, _result, _text


@functools.cache
def _lstm_module():
    class LSTM(torch.nn.Module):
        """ONNX's LSTM (gates i, o, f, c) as ``torch.nn.LSTM`` (gates i, f, g, o): outputs
        Y [seq, directions, batch, hidden] (layout 0) or [batch, seq, directions, hidden]
        (layout 1), Y_h and Y_c [directions, batch, hidden] (batch first for layout 1)."""
        def __init__(self, weights, recurrent, bias, hidden: int, direction: str, layout: int,
                     states: tuple[bool, bool] = (False, False)):
            super().__init__()
            self.states = states
            directions = 2 if direction == "bidirectional" else 1
            self.hidden, self.directions, self.layout, self.reverse = hidden, directions, layout, direction == "reverse"
            self.lstm = torch.nn.LSTM(weights.shape[-1], hidden, bidirectional=directions == 2, batch_first=layout == 1)
            order = torch.cat([torch.arange(hidden) + k * hidden for k in (0, 2, 3, 1)])  # iofc -> ifgo
            with torch.no_grad():
                for d in range(directions):
                    suffix = "_reverse" if d == 1 else ""
                    getattr(self.lstm, f"weight_ih_l0{suffix}").copy_(weights[d][order])
                    getattr(self.lstm, f"weight_hh_l0{suffix}").copy_(recurrent[d][order])
                    b = bias[d] if bias is not None else torch.zeros(8 * hidden)
                    getattr(self.lstm, f"bias_ih_l0{suffix}").copy_(b[: 4 * hidden][order])
                    getattr(self.lstm, f"bias_hh_l0{suffix}").copy_(b[4 * hidden:][order])

        def forward(self, x, *states):
            given = iter(states)  # the initial states the node gives, of (initial_h, initial_c)
            initial_h, initial_c = (next(given) if has else None for has in self.states)
            seq_dim = 1 if self.layout == 1 else 0
            x = x.flip(seq_dim) if self.reverse else x
            state = None
            if initial_h is not None or initial_c is not None:
                batch = x.shape[1 - seq_dim]
                zeros = x.new_zeros(self.directions, batch, self.hidden)
                h = zeros if initial_h is None else (initial_h.transpose(0, 1) if self.layout == 1 else initial_h)
                c = zeros if initial_c is None else (initial_c.transpose(0, 1) if self.layout == 1 else initial_c)
                state = (h.contiguous(), c.contiguous())
            y, (h, c) = self.lstm(x, state)
            y = y.flip(seq_dim) if self.reverse else y
            if self.layout == 1:
                y = y.reshape(y.shape[0], y.shape[1], self.directions, self.hidden)
                return y, h.transpose(0, 1), c.transpose(0, 1)
            y = y.reshape(y.shape[0], y.shape[1], self.directions, self.hidden).permute(0, 2, 1, 3)
            return y, h, c

    return LSTM


def _register_lstm() -> None:

    LSTM = _lstm_module()

    def lstm(node, graph):
        a = node.attributes
        refused = [name for name, ok in (
            ("clip", a.get("clip") is None), ("input_forget", not a.get("input_forget", 0)),
            ("activations", [s.decode() if isinstance(s, bytes) else s for s in a.get("activations", [])]
             in ([], ["Sigmoid", "Tanh", "Tanh"], ["Sigmoid", "Tanh", "Tanh"] * 2)),
            ("peepholes", len(node.input_values) < 8 or not node.input_values[7]),
        ) if not ok]
        names = list(node.input_values) + [""] * (8 - len(node.input_values))
        if any(n and n not in graph.initializers for n in names[1:4]):
            refused.append("weights that are not constants")
        if names[4]:
            refused.append("sequence_lens (per-batch lengths)")
        if refused:
            raise NotImplementedError(f"LSTM with {', '.join(refused)}")

        def value(name):
            return graph.initializers[name].to_torch().float() if name else None

        direction = a.get("direction", "forward")
        direction = direction.decode() if isinstance(direction, bytes) else direction
        module = LSTM(value(names[1]), value(names[2]), value(names[3]), int(a["hidden_size"]), direction,
                      int(a.get("layout", 0)), (bool(names[5]), bool(names[6])))
        # the inputs given only: "" would be read as the output of a node's left-out output
        return OperationConverterResult(torch_module=module, onnx_mapping=OnnxMapping(
            inputs=(names[0], *(n for n in names[5:7] if n)), outputs=node.output_values))

    for version in (7, 14):
        if _missing("LSTM", version):
            add_converter(operation_type="LSTM", version=version)(lstm)


def _gru_unrolled(gru, x, h0, hidden: int, directions: int, layout: int):
    """``gru``'s layer with the reset gate applied to the state before its product (ONNX's
    ``linear_before_reset`` 0), each direction's steps unrolled."""
    xs = x.transpose(0, 1) if layout == 1 else x  # [seq, batch, input]
    outputs, finals = [], []
    for d in range(directions):
        suffix = "_reverse" if d == 1 else ""
        w_ih, w_hh = (getattr(gru, f"weight_{k}_l0{suffix}") for k in ("ih", "hh"))
        b_ih, b_hh = (getattr(gru, f"bias_{k}_l0{suffix}") for k in ("ih", "hh"))
        h = xs.new_zeros(xs.shape[1], hidden) if h0 is None else h0[d]
        projected = torch.nn.functional.linear(xs, w_ih, b_ih)  # every step's input product at once
        steps = range(xs.shape[0] - 1, -1, -1) if d == 1 else range(xs.shape[0])
        ys = [None] * xs.shape[0]
        for t in steps:
            p_r, p_z, p_n = projected[t].chunk(3, dim=-1)
            w_r, w_z, w_n = w_hh.chunk(3, dim=0)
            b_r, b_z, b_n = b_hh.chunk(3, dim=0)
            r = torch.sigmoid(p_r + h @ w_r.T + b_r)
            z = torch.sigmoid(p_z + h @ w_z.T + b_z)
            n = torch.tanh(p_n + (r * h) @ w_n.T + b_n)
            h = (1 - z) * n + z * h
            ys[t] = h
        outputs.append(torch.stack(ys))
        finals.append(h)
    y = torch.cat(outputs, dim=-1)
    return (y.transpose(0, 1) if layout == 1 else y), torch.stack(finals)


@functools.cache
def _gru_module():
    class GRU(torch.nn.Module):
        """ONNX's GRU (gates z, r, h) as ``torch.nn.GRU`` (gates r, z, n) when
        ``linear_before_reset`` is 1, which is how PyTorch computes it (torch.onnx writes
        1); with 0 (ONNX's default: the reset gate applied before the recurrent product),
        its steps unrolled. Outputs Y [seq, directions, batch, hidden] (layout 0) or
        [batch, seq, directions, hidden] (layout 1) and Y_h [directions, batch, hidden]."""
        def __init__(self, weights, recurrent, bias, hidden: int, direction: str, layout: int, before_reset: bool):
            super().__init__()
            directions = 2 if direction == "bidirectional" else 1
            self.hidden, self.directions, self.layout = hidden, directions, layout
            self.reverse, self.before_reset = direction == "reverse", before_reset
            self.gru = torch.nn.GRU(weights.shape[-1], hidden, bidirectional=directions == 2, batch_first=layout == 1)
            order = torch.cat([torch.arange(hidden) + k * hidden for k in (1, 0, 2)])  # zrh -> rzn
            with torch.no_grad():
                for d in range(directions):
                    suffix = "_reverse" if d == 1 else ""
                    b = bias[d] if bias is not None else torch.zeros(6 * hidden)
                    getattr(self.gru, f"weight_ih_l0{suffix}").copy_(weights[d][order])
                    getattr(self.gru, f"weight_hh_l0{suffix}").copy_(recurrent[d][order])
                    getattr(self.gru, f"bias_ih_l0{suffix}").copy_(b[: 3 * hidden][order])
                    getattr(self.gru, f"bias_hh_l0{suffix}").copy_(b[3 * hidden:][order])

        def forward(self, x, initial_h=None):
            seq_dim = 1 if self.layout == 1 else 0
            x = x.flip(seq_dim) if self.reverse else x
            h0 = None if initial_h is None else (initial_h.transpose(0, 1) if self.layout == 1 else initial_h).contiguous()
            y, h = self.gru(x, h0) if self.before_reset else \
                _gru_unrolled(self.gru, x, h0, self.hidden, self.directions, self.layout)
            y = y.flip(seq_dim) if self.reverse else y
            if self.layout == 1:
                return y.reshape(y.shape[0], y.shape[1], self.directions, self.hidden), h.transpose(0, 1)
            return y.reshape(y.shape[0], y.shape[1], self.directions, self.hidden).permute(0, 2, 1, 3), h

    return GRU


def _register_gru() -> None:
    GRU = _gru_module()

    def gru(node, graph):
        a = node.attributes
        names = list(node.input_values) + [""] * (6 - len(node.input_values))
        refused = [name for name, ok in (
            ("clip", a.get("clip") is None),
            ("activations", [_text(s) for s in a.get("activations", [])]
             in ([], ["Sigmoid", "Tanh"], ["Sigmoid", "Tanh"] * 2)),
        ) if not ok]
        if names[4]:
            refused.append("sequence_lens (per-batch lengths)")
        if refused:
            raise NotImplementedError(f"GRU with {', '.join(refused)}")
        value = {n: _constant(graph, n).float() if n else None for n in names[1:4]}
        module = GRU(value[names[1]], value[names[2]], value[names[3]], int(a["hidden_size"]),
                     _text(a.get("direction", "forward")), int(a.get("layout", 0)), bool(a.get("linear_before_reset", 0)))
        return _result(module, node, (names[0], names[5]) if names[5] else (names[0],))

    _add("GRU", (7, 14), gru)

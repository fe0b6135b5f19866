"""onnx2torch converters for operators it lacks that real files use: ``LSTM`` (silero-vad,
ddddocr's recognizer: CNN + LSTM + CTC) as ``torch.nn.LSTM``, ``GlobalMaxPool`` (Magika,
a Keras model through tf2onnx) as an ``amax``. Each takes what ONNX allows that PyTorch
computes the same way, and raises ``NotImplementedError`` naming what it does not take
(peepholes, clipping, custom activations, per-batch sequence lengths), which the import's
error then names with its node."""

from __future__ import annotations

import functools


@functools.cache
def register() -> None:
    """Add the converters to onnx2torch's registry (once per process)."""
    _register_global_max_pool()
    _register_lstm()


def _missing(op: str, version: int) -> bool:
    from onnx2torch.node_converters.registry import _CONVERTER_REGISTRY, OperationDescription

    return OperationDescription(domain="", operation_type=op, version=version) not in _CONVERTER_REGISTRY


def _register_global_max_pool() -> None:
    import torch
    from onnx2torch.node_converters.registry import add_converter
    from onnx2torch.utils.common import OperationConverterResult, onnx_mapping_from_node

    class GlobalMaxPool(torch.nn.Module):
        def forward(self, x):
            return torch.amax(x, dim=tuple(range(2, x.dim())), keepdim=True)

    if _missing("GlobalMaxPool", 1):
        @add_converter(operation_type="GlobalMaxPool", version=1)
        def _global_max_pool(node, graph):  # noqa: ARG001 - onnx2torch's converter signature
            return OperationConverterResult(torch_module=GlobalMaxPool(), onnx_mapping=onnx_mapping_from_node(node))


@functools.cache
def _lstm_module():
    import torch

    class LSTM(torch.nn.Module):
        """ONNX's LSTM (gates i, o, f, c) as ``torch.nn.LSTM`` (gates i, f, g, o): outputs
        Y [seq, directions, batch, hidden] (layout 0) or [batch, seq, directions, hidden]
        (layout 1), Y_h and Y_c [directions, batch, hidden] (batch first for layout 1)."""

        def __init__(self, weights, recurrent, bias, hidden: int, direction: str, layout: int):
            super().__init__()
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

        def forward(self, x, sequence_lens=None, initial_h=None, initial_c=None):
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
    from onnx2torch.node_converters.registry import add_converter
    from onnx2torch.utils.common import OnnxMapping, OperationConverterResult

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
                      int(a.get("layout", 0)))
        return OperationConverterResult(torch_module=module, onnx_mapping=OnnxMapping(
            inputs=(names[0], "", names[5], names[6]), outputs=node.output_values))  # "": absent, None to forward

    for version in (7, 14):
        if _missing("LSTM", version):
            add_converter(operation_type="LSTM", version=version)(lstm)

"""onnx2torch converters for what real files and current exporters write that onnx2torch
1.5 lacks or computes differently from ONNX: ``LSTM`` (silero-vad, ddddocr's recognizer)
and ``GRU`` as ``torch.nn.LSTM``/``GRU``; ``Attention`` and ``RMSNormalization`` (opset
23); ``LayerNormalization`` on any axis; ``Resize`` in all its modes; pools and convolutions
ONNX pads differently from torch; ``Pad`` and the reductions of opset 18 on; ``Gelu``,
``Size``, ``CumSum``, ``ConvInteger``, ``Clip``, ``Flatten``, ``Pow``; ``GlobalMaxPool``
(Magika). Then each operator version onnx2torch lacks that means what an older one means
(``same_meaning``). Each converter takes what ONNX allows that PyTorch computes the same
way, and raises ``NotImplementedError`` naming what it does not take (peepholes, clipping,
custom activations, per-batch sequence lengths, an attribute a newer version added), which
the import's error then names with its node. ``bench/onnx_conformance.py`` measures them
on ONNX's own node tests."""

from __future__ import annotations

import functools
import math


@functools.cache
def register() -> None:
    """Add the converters to onnx2torch's registry (once per process): pteforge's own, then
    each operator's versions onnx2torch lacks that mean what an older one it has means."""
    _register_global_max_pool()
    _register_lstm()
    _register_gru()
    _register_attention()
    _register_norms()
    _register_small()
    _register_shapes()
    _register_pools()
    _register_same_padding()
    _register_resize()
    _register_elementwise()
    _misfiled_versions()
    same_meaning()


# Versions whose signature is an older one's but whose meaning changed (Softmax-13 normalizes
# one axis, Softmax-11 the 2-D coerced input): never read as an older version.
CHANGED_MEANING = frozenset({("Softmax", 13), ("LogSoftmax", 13), ("Hardmax", 13)})


def _schemas(op: str) -> dict:
    """ONNX's schemas of ``op`` (default domain), by the version that introduced each."""
    import onnx.defs

    return {s.since_version: s for s in onnx.defs.get_all_schemas_with_history() if s.name == op and s.domain == ""}


def _misfiled_versions() -> None:
    """A converter onnx2torch files under a version that introduced nothing (``Slice`` 9:
    Slice-1 holds from opset 1 to 9, and its lookup asks for 1) filed under the version that did."""
    import onnx.defs
    from onnx2torch.node_converters.registry import _CONVERTER_REGISTRY, OperationDescription

    for description, convert in list(_CONVERTER_REGISTRY.items()):
        if description.domain != "":
            continue
        try:
            since = onnx.defs.get_schema(description.operation_type, description.version, "").since_version
        except onnx.defs.SchemaError:
            continue
        if since != description.version and _missing(description.operation_type, since):
            _CONVERTER_REGISTRY[OperationDescription("", description.operation_type, since)] = convert


def added(newer, older) -> tuple[dict, int] | None:
    """What schema ``newer`` adds to ``older`` when it keeps all of it, under the same names and
    in the same places (attributes, inputs and outputs, optional ones appended): (its new
    attributes with the default that keeps the older meaning, None for none; the older's input
    count); None when it renames, moves or drops something."""
    from onnx import helper

    if (newer.name, newer.since_version) in CHANGED_MEANING and older.since_version < newer.since_version:
        return None
    if not set(older.attributes) <= set(newer.attributes):
        return None
    for new, old in ((newer.inputs, older.inputs), (newer.outputs, older.outputs)):
        if [p.name for p in new[:len(old)]] != [p.name for p in old] or \
                any(p.option.name != "Optional" for p in new[len(old):]):
            return None
    attributes = {name: (helper.get_attribute_value(a.default_value) if a.default_value.type else None)
                  for name, a in newer.attributes.items() if name not in older.attributes}
    return attributes, len(older.inputs)


def same_meaning() -> None:
    """Each version of an operator that onnx2torch lacks, read as the newest older version it
    has, when the newer only adds types, or attributes and optional inputs that the node leaves
    at the older meaning (Conv-22, Pad-19 to 25, Reshape-21 to 25, Resize-18 and 19: bfloat16,
    int4 and float8 types; Resize's antialias). A node that uses what was added is refused,
    naming it."""
    from onnx2torch.node_converters.registry import _CONVERTER_REGISTRY, OperationDescription

    ops = {d.operation_type for d in _CONVERTER_REGISTRY if d.domain == ""}
    for op in sorted(ops):
        schemas = _schemas(op)
        for version in sorted(schemas):
            if not _missing(op, version):
                continue
            for older in sorted((v for v in schemas if v < version), reverse=True):
                change = added(schemas[version], schemas[older])
                if change is None:
                    break
                convert = _CONVERTER_REGISTRY.get(OperationDescription("", op, older))
                if convert is not None:
                    _CONVERTER_REGISTRY[OperationDescription("", op, version)] = _as_older(op, version, *change, convert)
                    break


def _as_older(op: str, version: int, attributes: dict, inputs: int, convert):
    def plain(value):
        return value.decode() if isinstance(value, bytes) else value

    def converter(node, graph):
        for name, default in attributes.items():
            value = node.attributes.get(name, default)
            if plain(value) != plain(default):
                raise NotImplementedError(f"{op}-{version} with {name}={plain(value)!r}")
        if any(node.input_values[inputs:]):
            raise NotImplementedError(f"{op}-{version} with its input {inputs + 1} (new in version {version})")
        return convert(node, graph)
    return converter


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
                      int(a.get("layout", 0)), (bool(names[5]), bool(names[6])))
        # the inputs given only: "" would be read as the output of a node's left-out output
        return OperationConverterResult(torch_module=module, onnx_mapping=OnnxMapping(
            inputs=(names[0], *(n for n in names[5:7] if n)), outputs=node.output_values))

    for version in (7, 14):
        if _missing("LSTM", version):
            add_converter(operation_type="LSTM", version=version)(lstm)


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _constant(graph, name: str):
    """The initializer ``name`` as a tensor; None when absent; raises naming it when it is
    computed at run time."""
    if not name:
        return None
    if name not in graph.initializers:
        raise NotImplementedError(f"input {name} computed at run time (pteforge takes it as a constant)")
    return graph.initializers[name].to_torch()


def _result(module, node, inputs=None):
    from onnx2torch.utils.common import OnnxMapping, OperationConverterResult, onnx_mapping_from_node

    mapping = onnx_mapping_from_node(node) if inputs is None else OnnxMapping(inputs=inputs, outputs=node.output_values)
    return OperationConverterResult(torch_module=module, onnx_mapping=mapping)


def _add(op: str, versions, convert) -> None:
    from onnx2torch.node_converters.registry import add_converter

    for version in versions:
        if _missing(op, version):
            add_converter(operation_type=op, version=version)(convert)


def _attention_bias(q, k, mask, past: int, nonpad, causal: bool):
    """What ONNX's Attention adds to the scores: the mask (a boolean one as 0 / -inf, padded
    with -inf to the keys past it), the causal mask after ``past`` keys, and the keys past
    each batch's ``nonpad_kv_seqlen``."""
    import torch

    bias = q.new_zeros(q.shape[2], k.shape[2])
    if mask is not None:
        if mask.shape[-1] < k.shape[2]:  # a mask of the new keys only: the rest masked
            fill = False if mask.dtype == torch.bool else float("-inf")
            mask = torch.nn.functional.pad(mask, (0, k.shape[2] - mask.shape[-1]), value=fill)
        if mask.dtype == torch.bool:
            mask = torch.zeros_like(mask, dtype=q.dtype).masked_fill(~mask, float("-inf"))
        bias = bias + mask.to(q.dtype)
    if causal:
        future = torch.ones(q.shape[2], k.shape[2] - past, dtype=torch.bool, device=q.device).triu(1)
        future = torch.nn.functional.pad(future, (past, 0), value=False)
        bias = bias.masked_fill(future, float("-inf"))
    if nonpad is not None:
        kept = torch.arange(k.shape[2], device=q.device) < nonpad.reshape(-1, 1)
        bias = bias + torch.zeros_like(kept, dtype=q.dtype).masked_fill(~kept, float("-inf"))[:, None, None, :]
    return bias


@functools.cache
def _attention_module():
    import torch

    class Attention(torch.nn.Module):
        """ONNX's Attention (opset 23, 24): scaled dot-product attention of 3-D inputs (heads
        given by ``q_num_heads``/``kv_num_heads``) or 4-D ones, with a boolean or additive
        mask, causal masking, past keys and values, grouped key/value heads, a soft cap and
        each of its outputs (Y, present key, present value, the QK product at ``mode``)."""

        def __init__(self, scale, causal: bool, q_heads, kv_heads, softcap: float, mode: int, outputs: int,
                     given: tuple[int, ...]):
            super().__init__()
            self.given = given  # the places of the inputs the node gives
            self.scale, self.causal, self.q_heads, self.kv_heads = scale, causal, q_heads, kv_heads
            self.softcap, self.mode, self.outputs = softcap, mode, outputs

        def heads(self, x, count):
            return x.reshape(x.shape[0], x.shape[1], count, x.shape[2] // count).transpose(1, 2)

        def forward(self, *given):
            args = [None] * 7
            for place, value in zip(self.given, given):
                args[place] = value
            return self.attend(*args)

        def attend(self, q, k, v, mask=None, past_key=None, past_value=None, nonpad=None):
            three = q.dim() == 3
            if three:
                q, k, v = self.heads(q, self.q_heads), self.heads(k, self.kv_heads), self.heads(v, self.kv_heads)
            scale = self.scale if self.scale is not None else q.shape[-1] ** -0.5
            past = 0 if past_key is None else past_key.shape[2]
            k = k if past_key is None else torch.cat([past_key, k], dim=2)
            v = v if past_value is None else torch.cat([past_value, v], dim=2)
            present_k, present_v = k, v
            if q.shape[1] != k.shape[1]:  # grouped key/value heads
                k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
                v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
            product = (q * scale ** 0.5) @ (k.transpose(2, 3) * scale ** 0.5)
            scores = product + _attention_bias(q, k, mask, past, nonpad, self.causal)
            kept = {0: product, 1: scores}
            if self.softcap > 0:
                scores = torch.tanh(scores / self.softcap) * self.softcap
            kept[2] = scores
            weights = torch.softmax(scores, dim=-1)
            kept[3] = weights
            y = weights @ v
            if three:
                y = y.transpose(1, 2).reshape(y.shape[0], y.shape[2], -1)
            values = (y, present_k, present_v, kept.get(self.mode, product))
            return values[0] if self.outputs == 1 else values[:self.outputs]

    return Attention


def _register_attention() -> None:
    Attention = _attention_module()

    def attention(node, graph):  # noqa: ARG001 - onnx2torch's converter signature
        a = node.attributes
        names = list(node.input_values) + [""] * (7 - len(node.input_values))
        module = Attention(a.get("scale"), bool(a.get("is_causal", 0)), a.get("q_num_heads"), a.get("kv_num_heads"),
                           float(a.get("softcap", 0.0)), int(a.get("qk_matmul_output_mode", 0)),
                           len(node.output_values), tuple(i for i, n in enumerate(names) if n))
        return _result(module, node, tuple(n for n in names if n))

    _add("Attention", (23, 24), attention)


@functools.cache
def _norm_modules():
    import torch

    class LayerNorm(torch.nn.Module):
        """ONNX's LayerNormalization over the dims from ``axis`` on (any axis, not only the
        last), with its optional Mean and InvStdDev outputs (the reduced dims kept as 1)."""

        def __init__(self, axis: int, epsilon: float, scale, bias, outputs: int):
            super().__init__()
            self.axis, self.epsilon, self.outputs = axis, epsilon, outputs
            self.scale = torch.nn.Parameter(scale, requires_grad=False)
            self.bias = None if bias is None else torch.nn.Parameter(bias, requires_grad=False)

        def forward(self, x):
            axis = self.axis % x.dim()
            shape = tuple(x.shape[axis:])
            if self.outputs == 1 and tuple(self.scale.shape) == shape and \
                    (self.bias is None or tuple(self.bias.shape) == shape):
                return torch.nn.functional.layer_norm(x, shape, self.scale, self.bias, self.epsilon)
            dims = tuple(range(axis, x.dim()))
            mean = x.mean(dim=dims, keepdim=True)
            inverse = torch.rsqrt((x - mean).pow(2).mean(dim=dims, keepdim=True) + self.epsilon)
            y = (x - mean) * inverse * self.scale
            y = y if self.bias is None else y + self.bias
            return (y, mean, inverse)[:self.outputs] if self.outputs > 1 else y

    class RMSNorm(torch.nn.Module):
        """ONNX's RMSNormalization (opset 23): x over the root mean square of the dims from
        ``axis`` on, times ``scale``."""

        def __init__(self, axis: int, epsilon: float, scale):
            super().__init__()
            self.axis, self.epsilon = axis, epsilon
            self.scale = torch.nn.Parameter(scale, requires_grad=False)

        def forward(self, x):
            axis = self.axis % x.dim()
            if axis == x.dim() - 1 and tuple(self.scale.shape) == (x.shape[-1],):
                return torch.nn.functional.rms_norm(x, (x.shape[-1],), self.scale, self.epsilon)
            dims = tuple(range(axis, x.dim()))
            return x * torch.rsqrt(x.pow(2).mean(dim=dims, keepdim=True) + self.epsilon) * self.scale

    return LayerNorm, RMSNorm


def _register_norms() -> None:
    from onnx2torch.node_converters.registry import _CONVERTER_REGISTRY, OperationDescription

    LayerNorm, RMSNorm = _norm_modules()

    def layer_norm(node, graph):
        a, names = node.attributes, node.input_values
        scale, bias = _constant(graph, names[1]).float(), _constant(graph, names[2] if len(names) > 2 else "")
        module = LayerNorm(int(a.get("axis", -1)), float(a.get("epsilon", 1e-5)), scale,
                           None if bias is None else bias.float(), len([o for o in node.output_values if o]))
        return _result(module, node, (names[0],))

    def rms_norm(node, graph):
        a, names = node.attributes, node.input_values
        module = RMSNorm(int(a.get("axis", -1)), float(a.get("epsilon", 1e-5)), _constant(graph, names[1]).float())
        return _result(module, node, (names[0],))

    # onnx2torch's LayerNormalization-17 takes the last axis and the output Y only
    _CONVERTER_REGISTRY[OperationDescription("", "LayerNormalization", 17)] = layer_norm
    _add("RMSNormalization", (23,), rms_norm)


@functools.cache
def _small_modules():
    import torch

    class Gelu(torch.nn.Module):
        def __init__(self, approximate: str):
            super().__init__()
            self.approximate = approximate

        def forward(self, x):
            return torch.nn.functional.gelu(x, approximate=self.approximate)

    class Size(torch.nn.Module):
        def forward(self, x):
            return torch.tensor(x.numel(), dtype=torch.int64)

    class CumSum(torch.nn.Module):
        """ONNX's CumSum along a constant axis, ``exclusive`` and ``reverse``, in the input's dtype."""

        def __init__(self, axis: int, exclusive: bool, reverse: bool):
            super().__init__()
            self.axis, self.exclusive, self.reverse = axis, exclusive, reverse

        def forward(self, x):
            axis = self.axis % x.dim()
            y = x.flip(axis) if self.reverse else x
            y = torch.cumsum(y, dim=axis).to(x.dtype)
            if self.exclusive:
                y = torch.cat([torch.zeros_like(y.narrow(axis, 0, 1)), y.narrow(axis, 0, y.shape[axis] - 1)], dim=axis)
            return y.flip(axis) if self.reverse else y

    class ConvInteger(torch.nn.Module):
        """ONNX's ConvInteger: (x - x_zero_point) convolved with (w - w_zero_point), in int32;
        computed in float32, exact while the sums stay below 2**24."""

        def __init__(self, weight, x_zero, w_zero, stride, padding, dilation, groups: int):
            super().__init__()
            w_zero = w_zero.reshape(-1, *([1] * (weight.dim() - 1))) if w_zero.numel() > 1 else w_zero
            self.weight = torch.nn.Parameter((weight.float() - w_zero.float()), requires_grad=False)
            self.x_zero = float(x_zero.reshape(-1)[0])
            self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups

        def forward(self, x):
            conv = (None, torch.nn.functional.conv1d, torch.nn.functional.conv2d, torch.nn.functional.conv3d)
            y = conv[self.weight.dim() - 2](x.float() - self.x_zero, self.weight, None, self.stride, self.padding,
                                            self.dilation, self.groups)
            return y.round().to(torch.int32)

    return Gelu, Size, CumSum, ConvInteger


def _register_small() -> None:
    import torch
    from onnx2torch.node_converters.registry import _CONVERTER_REGISTRY, OperationDescription

    Gelu, Size, CumSum, ConvInteger = _small_modules()

    def gelu(node, graph):  # noqa: ARG001
        return _result(Gelu(_text(node.attributes.get("approximate", "none"))), node)

    def size(node, graph):  # noqa: ARG001
        return _result(Size(), node)

    def cumsum(node, graph):
        a = node.attributes
        module = CumSum(int(_constant(graph, node.input_values[1]).reshape(-1)[0]), bool(a.get("exclusive", 0)),
                        bool(a.get("reverse", 0)))
        return _result(module, node, (node.input_values[0],))

    def conv_integer(node, graph):
        a, names = node.attributes, list(node.input_values) + [""] * 2
        weight = _constant(graph, names[1])
        zero = torch.zeros(1, dtype=torch.int32)
        x_zero, w_zero = (_constant(graph, n) if n else zero for n in names[2:4])
        if _text(a.get("auto_pad", "NOTSET")) not in ("NOTSET", "VALID"):
            raise NotImplementedError(f"ConvInteger with auto_pad={_text(a['auto_pad'])}")
        dims = weight.dim() - 2
        pads = list(a.get("pads", [0] * 2 * dims))
        if pads[:dims] != pads[dims:]:
            raise NotImplementedError("ConvInteger with pads that differ at the start and the end")
        module = ConvInteger(weight, x_zero, w_zero, list(a.get("strides", [1] * dims)), pads[:dims],
                             list(a.get("dilations", [1] * dims)), int(a.get("group", 1)))
        return _result(module, node, (names[0],))

    _add("Gelu", (20,), gelu)
    _add("Size", (1, 13, 19, 21, 23, 24, 25), size)
    _add("ConvInteger", (10,), conv_integer)
    for version in (11, 14):  # onnx2torch's reads the axis when it runs, and gave wrong sums of a constant one
        _CONVERTER_REGISTRY[OperationDescription("", "CumSum", version)] = cumsum


REDUCTIONS = ("ReduceMax", "ReduceMin", "ReduceMean", "ReduceSum", "ReduceProd", "ReduceL1", "ReduceL2",
              "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare")


@functools.cache
def _shape_modules():
    return _reduce_module(), _pad_module()


@functools.cache
def _reduce_module():
    import torch

    class Reduce(torch.nn.Module):
        """An ONNX reduction over constant axes (all of them when none are given, or none with
        ``noop_with_empty_axes``)."""

        def __init__(self, op: str, axes: list[int] | None, keepdims: bool, noop: bool):
            super().__init__()
            self.op, self.axes, self.keepdims, self.noop = op, axes, keepdims, noop

        def forward(self, x):
            if not self.axes and self.noop:
                return x
            dims = tuple(a % x.dim() for a in self.axes) if self.axes else tuple(range(x.dim()))
            if not dims:
                return x
            keep, op = self.keepdims, self.op
            if op in ("ReduceMax", "ReduceMin"):
                if x.dtype == torch.bool:
                    y = x.to(torch.uint8)
                    return (y.amax(dims, keep) if op == "ReduceMax" else y.amin(dims, keep)).to(torch.bool)
                return x.amax(dims, keep) if op == "ReduceMax" else x.amin(dims, keep)
            if op == "ReduceProd":
                for d in sorted(dims, reverse=True):
                    x = x.prod(d, keepdim=keep)
                return x
            if op == "ReduceLogSumExp":
                return torch.logsumexp(x, dims, keep)
            value = {"ReduceL1": lambda: x.abs(), "ReduceL2": lambda: x * x, "ReduceSumSquare": lambda: x * x}
            total = value.get(op, lambda: x)().sum(dims, keepdim=keep, dtype=x.dtype)
            if op == "ReduceMean":
                return x.mean(dims, keepdim=keep)
            return {"ReduceL2": torch.sqrt, "ReduceLogSum": torch.log}.get(op, lambda t: t)(total)

    return Reduce


@functools.cache
def _pad_module():
    import torch

    class Pad(torch.nn.Module):
        """ONNX's Pad (opset 11 on) with constant pads, value and axes: constant, reflect,
        edge and wrap modes, negative pads (crops) included, any dims."""

        def __init__(self, pads: list[int], axes: list[int] | None, mode: str, value: float):
            super().__init__()
            self.pads, self.axes, self.mode, self.value = pads, axes, mode, value

        def forward(self, x):
            axes = [a % x.dim() for a in (self.axes if self.axes is not None else range(x.dim()))]
            half = len(self.pads) // 2
            if self.mode == "constant":  # one F.pad (negative pads crop): what XNNPACK takes
                pads = [0] * (2 * x.dim())
                for axis, before, after in zip(axes, self.pads[:half], self.pads[half:]):
                    pads[2 * (x.dim() - 1 - axis)], pads[2 * (x.dim() - 1 - axis) + 1] = before, after
                while pads and pads[-2:] == [0, 0]:
                    pads = pads[:-2]
                return torch.nn.functional.pad(x, pads, value=self.value) if pads else x
            for axis, before, after in zip(axes, self.pads[:half], self.pads[half:]):
                x = self.one(x, axis, before, after)
            return x

        def one(self, x, axis: int, before: int, after: int):
            if before < 0:
                x = x.narrow(axis, -before, x.shape[axis] + before)
            if after < 0:
                x = x.narrow(axis, 0, x.shape[axis] + after)
            before, after = max(before, 0), max(after, 0)
            if not before and not after:
                return x
            size = x.shape[axis]
            if self.mode == "reflect":
                index = [abs(i) if i < 0 else (2 * (size - 1) - i if i >= size else i) for i in range(-before, size + after)]
            elif self.mode == "edge":
                index = [min(max(i, 0), size - 1) for i in range(-before, size + after)]
            else:  # wrap
                index = [i % size for i in range(-before, size + after)]
            return x.index_select(axis, torch.tensor(index))

    return Pad


def _register_shapes() -> None:
    from onnx2torch.node_converters.registry import _CONVERTER_REGISTRY, OperationDescription

    Reduce, Pad = _shape_modules()
    older_pad = _CONVERTER_REGISTRY[OperationDescription("", "Pad", 13)]

    def reduce(node, graph):
        a, names = node.attributes, node.input_values
        axes = _constant(graph, names[1]) if len(names) > 1 else None
        module = Reduce(node.operation_type, None if axes is None else [int(v) for v in axes.reshape(-1)],
                        bool(a.get("keepdims", 1)), bool(a.get("noop_with_empty_axes", 0)))
        return _result(module, node, (names[0],))

    def pad(node, graph):
        a, names = node.attributes, list(node.input_values) + [""] * 3
        if any(n and n not in graph.initializers for n in names[1:3]) and not names[3]:
            return older_pad(node, graph)  # onnx2torch's, reading them when it runs
        value = _constant(graph, names[2])
        axes = _constant(graph, names[3])
        module = Pad([int(v) for v in _constant(graph, names[1]).reshape(-1)],
                     None if axes is None else [int(v) for v in axes.reshape(-1)], _text(a.get("mode", "constant")),
                     0.0 if value is None or value.numel() == 0 else value.reshape(-1)[0].item())
        return _result(module, node, (names[0],))

    for op in REDUCTIONS:
        _add(op, (18,) if op != "ReduceSum" else (), reduce)
    _add("ReduceMax", (20,), reduce)
    _add("ReduceMin", (20,), reduce)
    _add("Pad", (18, 19, 21, 23, 24, 25), pad)


def _gru_unrolled(gru, x, h0, hidden: int, directions: int, layout: int):
    """``gru``'s layer with the reset gate applied to the state before its product (ONNX's
    ``linear_before_reset`` 0), each direction's steps unrolled."""
    import torch

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
    import torch

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


def _pool_geometry(size: int, k: int, s: int, d: int, begin: int, end: int, auto: str, ceil: bool):
    """(pad before, pad after) of one spatial dim that give ONNX's output size, the windows
    that ``ceil_mode`` adds past the end padded too (the last counted only if it starts
    inside the input or its padding); ``auto``: ONNX's auto_pad."""
    span = (k - 1) * d + 1
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        out = -(-size // s)
        total = max((out - 1) * s + span - size, 0)
        begin = total // 2 if auto == "SAME_UPPER" else total - total // 2
        return begin, total - begin, 0
    if auto == "VALID":
        begin = end = 0
    room = size + begin + end - span
    out = (-(-room // s) if ceil else room // s) + 1
    if ceil and (out - 1) * s >= size + begin:
        out -= 1
    return begin, end, max((out - 1) * s + span - (size + begin + end), 0)


@functools.cache
def _pool_module():
    import torch

    class Pool(torch.nn.Module):
        """ONNX's AveragePool and MaxPool where torch's pools differ: dilations of an average,
        pads over half the kernel or uneven, SAME auto_pad, ``count_include_pad`` with
        ``ceil_mode``. The input padded first (zeros, -inf for a max); an average divides
        the windows' sums (a depthwise convolution with ones) by the count of what they
        hold of the input, and of its pads with ``count_include_pad``."""

        def __init__(self, average: bool, kernel, strides, dilations, pads, auto: str, ceil: bool, include: bool):
            super().__init__()
            self.average, self.kernel, self.strides, self.dilations = average, kernel, strides, dilations
            self.pads, self.auto, self.ceil, self.include = pads, auto, ceil, include

        def forward(self, x):
            n = len(self.kernel)
            geometry = [_pool_geometry(x.shape[2 + i], self.kernel[i], self.strides[i], self.dilations[i],
                                       self.pads[i], self.pads[n + i], self.auto, self.ceil) for i in range(n)]
            outer = [p for b, e, extra in reversed(geometry) for p in (b, e + extra)]
            if not self.average:
                padded = torch.nn.functional.pad(x, outer, value=float("-inf"))
                pool = (None, torch.nn.functional.max_pool1d, torch.nn.functional.max_pool2d,
                        torch.nn.functional.max_pool3d)[n]
                return pool(padded, self.kernel, self.strides, 0, self.dilations)
            conv = (None, torch.nn.functional.conv1d, torch.nn.functional.conv2d, torch.nn.functional.conv3d)[n]
            ones = x.new_ones(x.shape[1], 1, *self.kernel)
            sums = conv(torch.nn.functional.pad(x, outer), ones, None, self.strides, 0, self.dilations, x.shape[1])
            inside = [p for b, e, extra in reversed(geometry) for p in (b, e)]
            mask = torch.nn.functional.pad(x.new_ones(1, 1, *x.shape[2:]), inside, value=1.0 if self.include else 0.0)
            mask = torch.nn.functional.pad(mask, [p for _, _, extra in reversed(geometry) for p in (0, extra)])
            counts = conv(mask, x.new_ones(1, 1, *self.kernel), None, self.strides, 0, self.dilations)
            return sums / counts

    return Pool


def _register_pools() -> None:
    from onnx2torch.node_converters.registry import _CONVERTER_REGISTRY, OperationDescription

    Pool = _pool_module()

    def wrapped(op: str, convert):
        def converter(node, graph):
            a = node.attributes
            kernel = list(a["kernel_shape"])
            n = len(kernel)
            pads, dilations = list(a.get("pads", [0] * 2 * n)), list(a.get("dilations", [1] * n))
            auto, ceil, include = _text(a.get("auto_pad", "NOTSET")), bool(a.get("ceil_mode", 0)), \
                bool(a.get("count_include_pad", 0))
            plain = auto in ("NOTSET", "VALID") and pads[:n] == pads[n:] and \
                all(p <= k // 2 for p, k in zip(pads, kernel)) and not (op == "AveragePool" and (
                    any(d != 1 for d in dilations) or (ceil and include)))
            if plain or len([o for o in node.output_values if o]) > 1:
                return convert(node, graph)
            module = Pool(op == "AveragePool", kernel, list(a.get("strides", [1] * n)), dilations, pads, auto,
                          ceil, include)
            return _result(module, node, (node.input_values[0],))
        return converter

    for op, versions, newest in (("AveragePool", (7, 10, 11, 19, 22), 11), ("MaxPool", (8, 10, 11, 12, 22), 12)):
        for version in versions:
            description = OperationDescription("", op, version)
            convert = _CONVERTER_REGISTRY.get(description) or _CONVERTER_REGISTRY[OperationDescription("", op, newest)]
            _CONVERTER_REGISTRY[description] = wrapped(op, convert)


@functools.cache
def _same_pad_module():
    import torch

    class SamePad(torch.nn.Module):
        """The zeros ONNX's SAME_UPPER / SAME_LOWER auto_pad adds before a convolution, from
        the input's size: an output of ceil(size / stride)."""

        def __init__(self, kernel, strides, dilations, auto: str, conv):
            super().__init__()
            self.kernel, self.strides, self.dilations, self.auto, self.conv = kernel, strides, dilations, auto, conv

        def forward(self, x, *rest):
            n = len(self.kernel)
            geometry = [_pool_geometry(x.shape[2 + i], self.kernel[i], self.strides[i], self.dilations[i], 0, 0,
                                       self.auto, False) for i in range(n)]
            return self.conv(torch.nn.functional.pad(x, [p for b, e, _ in reversed(geometry) for p in (b, e)]), *rest)

    return SamePad


def _register_same_padding() -> None:
    import copy

    from onnx2torch.node_converters.registry import _CONVERTER_REGISTRY, OperationDescription

    SamePad = _same_pad_module()

    def wrapped(convert):
        def converter(node, graph):
            a = node.attributes
            auto = _text(a.get("auto_pad", "NOTSET"))
            if auto not in ("SAME_UPPER", "SAME_LOWER"):
                return convert(node, graph)
            valid = copy.copy(node)
            valid._proto_attributes = {**a, "auto_pad": "VALID"}  # noqa: SLF001 - the converter reads it there
            kernel = a.get("kernel_shape")
            if kernel is None:
                kernel = list(_constant(graph, node.input_values[1]).shape[2:])
            n = len(kernel)
            result = convert(valid, graph)
            module = SamePad(list(kernel), list(a.get("strides", [1] * n)), list(a.get("dilations", [1] * n)), auto,
                             result.torch_module)
            return _result(module, node) if result.onnx_mapping is None else \
                type(result)(torch_module=module, onnx_mapping=result.onnx_mapping)
        return converter

    for version in (1, 11):
        description = OperationDescription("", "Conv", version)
        _CONVERTER_REGISTRY[description] = wrapped(_CONVERTER_REGISTRY[description])


def _source(x, scale: float, size: int, out: int, mode: str, roi: tuple[float, float]):
    """ONNX Resize's coordinate in the input of output coordinates ``x`` (a float64 array)."""
    if mode == "half_pixel_symmetric":
        offset = size / 2 * (1 - out / (scale * size))
        return offset + (x + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (x + 0.5) / scale - 0.5 if out > 1 else x * 0.0
    if mode == "align_corners":
        return x * (size - 1) / (out - 1) if out > 1 else x * 0.0
    if mode == "asymmetric":
        return x / scale
    if mode == "tf_crop_and_resize":
        start, end = roi
        return start * (size - 1) + x * (end - start) * (size - 1) / (out - 1) if out > 1 else \
            x * 0.0 + 0.5 * (start + end) * (size - 1)
    return (x + 0.5) / scale - 0.5  # half_pixel


def _coefficients(ratio, scale: float, mode: str, a: float, antialias: bool):
    """Each output's weights on its neighbours base + (1 - n/2 .. n/2), from its ``ratio`` in
    (0, 1] past ``base`` (ONNX's reference, vectorized)."""
    import numpy as np

    scale = min(scale, 1.0) if antialias else 1.0
    reach = 1 if mode == "linear" else 2
    start = int(np.floor(-reach / scale) + 1)
    offsets = np.arange(start, 2 - start)
    t = np.abs((offsets[None, :] - ratio[:, None]) * scale)
    if mode == "linear":
        w = np.clip(1 - t, 0, 1)
    else:
        w = np.where(t <= 1, (a + 2) * t ** 3 - (a + 3) * t ** 2 + 1,
                     np.where(t < 2, a * t ** 3 - 5 * a * t ** 2 + 8 * a * t - 4 * a, 0.0))
    return offsets, w / w.sum(axis=1, keepdims=True) if antialias else w


def resize_weights(size: int, out: int, scale: float, how: dict, roi=(0.0, 1.0)):
    """One axis of ONNX's Resize: for ``nearest``, (indices of the input, mask of outputs
    outside a crop); else (an [out, size] weight matrix, that mask)."""
    import numpy as np

    x = _source(np.arange(out, dtype=np.float64), scale, size, out, how["coordinate"], roi)
    outside = (x < 0) | (x > size - 1) if how["coordinate"] == "tf_crop_and_resize" else np.zeros(out, bool)
    if how["mode"] == "nearest":
        rounding = {"round_prefer_floor": lambda v: np.ceil(v - 0.5), "round_prefer_ceil": lambda v: np.floor(v + 0.5),
                    "floor": np.floor, "ceil": np.ceil}[how["nearest"]]
        return np.clip(rounding(x), 0, size - 1).astype(np.int64), outside
    base = np.where(x == np.floor(x), x - 1, np.floor(x))  # a whole coordinate: its pixel is the right neighbour
    offsets, w = _coefficients(x - base, scale, how["mode"], how["cubic_a"], how["antialias"])
    index = base[:, None] + offsets[None, :]
    if how["exclude_outside"]:
        w = np.where((index < 0) | (index > size - 1), 0.0, w)
        w = w / w.sum(axis=1, keepdims=True)
    matrix = np.zeros((out, size))
    np.add.at(matrix, (np.repeat(np.arange(out), index.shape[1]), np.clip(index, 0, size - 1).astype(int).ravel()),
              w.ravel())
    return matrix, outside


def _interpolated(module, x, plan):
    """``F.interpolate`` of ``x`` where it computes what ``module`` (a Resize) asks, else None."""
    import numpy as np
    import torch

    how, spatial = module.how, range(2, x.dim())
    if not plan or x.dim() not in (3, 4, 5) or any(a not in spatial for a, _, _ in plan) or \
            how["antialias"] or how["exclude_outside"]:
        return None
    planned = {a: (n, s) for a, n, s in plan}
    sizes = [planned.get(a, (x.shape[a], 1.0))[0] for a in spatial]
    scales = [planned.get(a, (x.shape[a], 1.0))[1] for a in spatial]
    if module.sizes is None and any(n != x.shape[a] * planned.get(a, (n, 1.0))[1] for a, n in zip(spatial, sizes)):
        return None  # ONNX computes coordinates with the scale given, XNNPACK with the sizes' ratio
    by = {"size": sizes} if module.sizes is not None else {"scale_factor": scales}
    if how["mode"] == "nearest":
        for a in spatial:
            n, s = planned.get(a, (x.shape[a], 1.0))
            index, _ = resize_weights(x.shape[a], n, s, how)
            step = x.shape[a] / n if module.sizes is not None else 1 / s
            if not np.array_equal(index, np.minimum(np.floor(np.arange(n) * step), x.shape[a] - 1)):
                return None
        return torch.nn.functional.interpolate(x, mode="nearest", **by)
    corners = how["coordinate"] == "align_corners"
    if how["coordinate"] not in ("half_pixel", "pytorch_half_pixel", "align_corners") or \
            (how["coordinate"] == "pytorch_half_pixel" and min(sizes) == 1):
        return None
    if how["mode"] == "cubic" and (x.dim() != 4 or how["cubic_a"] != -0.75):
        return None
    mode = {"linear": ("linear", "bilinear", "trilinear")[x.dim() - 3], "cubic": "bicubic"}[how["mode"]]
    return torch.nn.functional.interpolate(x, mode=mode, align_corners=corners, **by)


@functools.cache
def _resize_module():
    import numpy as np
    import torch

    class Resize(torch.nn.Module):
        """ONNX's Resize with constant scales or sizes: each mode, coordinate transformation,
        rounding, cubic coefficient, ``exclude_outside``, antialias, axes, aspect-ratio
        policy and crop (tf_crop_and_resize). Where PyTorch's interpolation computes the same
        (nearest, bilinear and bicubic of an image's spatial dims at the coordinates it uses),
        ``F.interpolate``; otherwise one axis at a time: a gather of the input's rows for
        nearest, a product with the axis's weight matrix for linear and cubic."""

        def __init__(self, how: dict, scales, sizes, axes, roi):
            super().__init__()
            self.how, self.scales, self.sizes, self.axes, self.roi = how, scales, sizes, axes, roi

        def plan(self, shape) -> list[tuple[int, int, float]]:
            """(axis, output size, scale) of each axis resized."""
            axes = [a % len(shape) for a in (self.axes or range(len(shape)))]
            if self.sizes is None:
                return [(a, int(np.floor(shape[a] * s)), s) for a, s in zip(axes, self.scales)]
            ratios = [n / shape[a] for a, n in zip(axes, self.sizes)]
            policy = self.how["policy"]
            if policy != "stretch":
                r = min(ratios) if policy == "not_larger" else max(ratios)
                return [(a, int(np.floor(shape[a] * r + 0.5)), r) for a in axes]
            return [(a, n, r) for a, n, r in zip(axes, self.sizes, ratios)]

        def forward(self, x):
            plan = [(a, n, s) for a, n, s in self.plan(tuple(x.shape)) if n != x.shape[a] or s != 1 or
                    self.how["coordinate"] == "tf_crop_and_resize"]
            fast = _interpolated(self, x, plan)
            if fast is not None:
                return fast
            axes = [a % x.dim() for a in (self.axes or range(x.dim()))]
            for axis, out, scale in plan:
                i, half = axes.index(axis), len(axes)
                roi = (self.roi[i], self.roi[i + half]) if self.roi is not None else (0.0, 1.0)
                values, outside = resize_weights(x.shape[axis], out, scale, self.how, roi)
                moved = x.movedim(axis, -1)
                if self.how["mode"] == "nearest":
                    moved = moved.index_select(-1, torch.from_numpy(values))
                else:
                    moved = moved @ torch.from_numpy(np.ascontiguousarray(values.T)).to(moved.dtype)
                if outside.any():
                    moved = moved.masked_fill(torch.from_numpy(outside), self.how["extrapolation"])
                x = moved.movedim(-1, axis)
            return x

    return Resize


def _register_resize() -> None:
    from onnx2torch.node_converters.registry import _CONVERTER_REGISTRY, OperationDescription

    Resize = _resize_module()

    def wrapped(convert, version: int):
        def converter(node, graph):
            a = node.attributes
            names = list(node.input_values) + [""] * 4
            roi, scales, sizes = (names[1], names[2], names[3]) if version > 10 else ("", names[1], "")
            if any(n and n not in graph.initializers for n in (roi, scales, sizes)):
                return convert(node, graph)  # onnx2torch's, reading them when it runs
            values = {k: _constant(graph, n) for k, n in (("roi", roi), ("scales", scales), ("sizes", sizes))}
            values = {k: v for k, v in values.items() if v is not None and v.numel()}
            how = {"mode": _text(a.get("mode", "nearest")),
                   "coordinate": _text(a.get("coordinate_transformation_mode", "half_pixel" if version > 10
                                             else "asymmetric")),
                   "nearest": _text(a.get("nearest_mode", "round_prefer_floor" if version > 10 else "floor")),
                   "cubic_a": float(a.get("cubic_coeff_a", -0.75)), "exclude_outside": bool(a.get("exclude_outside", 0)),
                   "antialias": bool(a.get("antialias", 0)), "policy": _text(a.get("keep_aspect_ratio_policy", "stretch")),
                   "extrapolation": float(a.get("extrapolation_value", 0.0))}
            module = Resize(how, [float(s) for s in values["scales"].tolist()] if "scales" in values else None,
                            [int(s) for s in values["sizes"].tolist()] if "sizes" in values else None,
                            list(a["axes"]) if "axes" in a else None,
                            [float(r) for r in values["roi"].tolist()] if "roi" in values else None)
            return _result(module, node, (names[0],))
        return converter

    for version in (10, 11, 13, 18, 19):
        description = OperationDescription("", "Resize", version)
        older = _CONVERTER_REGISTRY.get(description) or _CONVERTER_REGISTRY[OperationDescription("", "Resize", 13)]
        _CONVERTER_REGISTRY[description] = wrapped(older, version)


@functools.cache
def _elementwise_modules():
    import torch

    class Clip(torch.nn.Module):
        def __init__(self, low, high):
            super().__init__()
            self.low, self.high = low, high

        def forward(self, x):
            return x.clone() if self.low is None and self.high is None else torch.clamp(x, self.low, self.high)

    class Flatten(torch.nn.Module):
        def __init__(self, axis: int):
            super().__init__()
            self.axis = axis

        def forward(self, x):
            axis = self.axis % x.dim() if self.axis < 0 else self.axis
            return x.reshape(math.prod(x.shape[:axis]), -1)

    class Pow(torch.nn.Module):
        """In the base's dtype, as ONNX computes it (an int32 base to a float exponent is int32)."""

        def forward(self, x, y):
            return torch.pow(x, y).to(x.dtype)

    class Slice(torch.nn.Module):
        """ONNX's Slice-1 (opset 1 to 9): bounds as attributes, step 1, Python's clamping."""

        def __init__(self, starts: list[int], ends: list[int], axes: list[int]):
            super().__init__()
            self.starts, self.ends, self.axes = starts, ends, axes

        def forward(self, x):
            index = [slice(None)] * x.dim()
            for axis, start, end in zip(self.axes, self.starts, self.ends):
                index[axis] = slice(start, end)
            return x[tuple(index)]

    return Clip, Flatten, Pow, Slice


def _register_elementwise() -> None:
    from onnx2torch.node_converters.registry import _CONVERTER_REGISTRY, OperationDescription

    Clip, Flatten, Pow, Slice = _elementwise_modules()

    def clip(node, graph):
        names = list(node.input_values) + [""] * 2
        low, high = (_constant(graph, n) for n in names[1:3])
        if low is None and high is None:
            return _result(Clip(None, None), node, (names[0],))
        module = Clip(None if low is None else low.reshape(-1)[0].item(), None if high is None else high.reshape(-1)[0].item())
        return _result(module, node, (names[0],))

    def flatten(node, graph):  # noqa: ARG001
        return _result(Flatten(int(node.attributes.get("axis", 1))), node)

    def power(node, graph):  # noqa: ARG001
        return _result(Pow(), node)

    def slice_1(node, graph):  # noqa: ARG001
        a = node.attributes
        starts, ends = [int(v) for v in a["starts"]], [int(v) for v in a["ends"]]
        return _result(Slice(starts, ends, [int(v) for v in a.get("axes", range(len(starts)))]), node)

    # onnx2torch's Clip read an absent min ("") as a constant's name; its Flatten took no
    # axis 0 or -rank; its Pow gave a float for an integer base; its Slice-1 did not run
    for version in (11, 12, 13):
        _CONVERTER_REGISTRY[OperationDescription("", "Clip", version)] = clip
    for version in (9, 11, 13):
        _CONVERTER_REGISTRY[OperationDescription("", "Flatten", version)] = flatten
    for version in (7, 12, 13, 15):
        _CONVERTER_REGISTRY[OperationDescription("", "Pow", version)] = power
    for version in (1, 9):  # onnx2torch files its Slice-1 under 9, and it fails (a list where it reads a tensor)
        _CONVERTER_REGISTRY[OperationDescription("", "Slice", version)] = slice_1
    for version in (9, 11, 13):
        description = OperationDescription("", "Gemm", version)
        _CONVERTER_REGISTRY[description] = _full_bias(_CONVERTER_REGISTRY[description])


def _full_bias(convert):
    """onnx2torch's Gemm, with a ``Linear``'s bias of one value (C broadcast over the
    outputs) given one value per output: XNNPACK's linear read N values from a bias of 1."""
    import torch

    def converter(node, graph):
        result = convert(node, graph)
        linear = result.torch_module
        if isinstance(linear, torch.nn.Linear) and linear.bias is not None and \
                linear.bias.numel() != linear.out_features:
            with torch.no_grad():
                linear.bias = torch.nn.Parameter(linear.bias.expand(linear.out_features).clone(), requires_grad=False)
        return result
    return converter

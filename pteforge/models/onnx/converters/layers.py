"""``Attention`` and ``RMSNormalization`` (opset 23), ``LayerNormalization`` on any axis,
``GlobalMaxPool`` (Magika), and the small ones: ``Gelu``, ``Size``, ``CumSum``,
``ConvInteger``, ``Clip``, ``Flatten``, ``Pow``."""

from __future__ import annotations

import functools
from typing import Any

import torch
from onnx2torch.node_converters.registry import _CONVERTER_REGISTRY, OperationDescription, add_converter
from onnx2torch.utils.common import OperationConverterResult, onnx_mapping_from_node

from .common import _add, _constant, _missing, _result, _text


def _register_global_max_pool() -> None:

    class GlobalMaxPool(torch.nn.Module):
        def forward(self, x):
            return torch.amax(x, dim=tuple(range(2, x.dim())), keepdim=True)

    if _missing("GlobalMaxPool", 1):
        @add_converter(operation_type="GlobalMaxPool", version=1)
        def _global_max_pool(node, graph):  # noqa: ARG001 - onnx2torch's converter signature
            return OperationConverterResult(torch_module=GlobalMaxPool(), onnx_mapping=onnx_mapping_from_node(node))


def _attention_bias(q, k, mask, past: int, nonpad, causal: bool):
    """What ONNX's Attention adds to the scores: the mask (a boolean one as 0 / -inf, padded
    with -inf to the keys past it), the causal mask after ``past`` keys, and the keys past
    each batch's ``nonpad_kv_seqlen``."""
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
            conv: tuple[Any, ...] = (None, torch.nn.functional.conv1d, torch.nn.functional.conv2d, torch.nn.functional.conv3d)
            y = conv[self.weight.dim() - 2](x.float() - self.x_zero, self.weight, None, self.stride, self.padding,
                                            self.dilation, self.groups)
            return y.round().to(torch.int32)

    return Gelu, Size, CumSum, ConvInteger


def _register_small() -> None:

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

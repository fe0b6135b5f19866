"""``Pad`` and the reductions of opset 18 on, and pools and convolutions ONNX pads
differently from torch."""

from __future__ import annotations

import copy
import functools
from typing import Any

import torch
from onnx2torch.node_converters.registry import _CONVERTER_REGISTRY, OperationDescription

from .common import _add, _constant, _result, _text

REDUCTIONS = ("ReduceMax", "ReduceMin", "ReduceMean", "ReduceSum", "ReduceProd", "ReduceL1", "ReduceL2",
              "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare")


@functools.cache
def _shape_modules():
    return _reduce_module(), _pad_module()


@functools.cache
def _reduce_module():
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
                pool: Any = (None, torch.nn.functional.max_pool1d, torch.nn.functional.max_pool2d,
                        torch.nn.functional.max_pool3d)[n]
                return pool(padded, self.kernel, self.strides, 0, self.dilations)
            conv: Any = (None, torch.nn.functional.conv1d, torch.nn.functional.conv2d, torch.nn.functional.conv3d)[n]
            ones = x.new_ones(x.shape[1], 1, *self.kernel)
            sums = conv(torch.nn.functional.pad(x, outer), ones, None, self.strides, 0, self.dilations, x.shape[1])
            inside = [p for b, e, extra in reversed(geometry) for p in (b, e)]
            mask = torch.nn.functional.pad(x.new_ones(1, 1, *x.shape[2:]), inside, value=1.0 if self.include else 0.0)
            mask = torch.nn.functional.pad(mask, [p for _, _, extra in reversed(geometry) for p in (0, extra)])
            counts = conv(mask, x.new_ones(1, 1, *self.kernel), None, self.strides, 0, self.dilations)
            return sums / counts

    return Pool


def _register_pools() -> None:

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


class _Cropped(torch.nn.Module):
    """A transposed convolution computed without padding, then cropped as ONNX pads it:
    ``pads`` (begins, then ends: uneven ones, Keras's ``Conv2DTranspose(padding="same")``
    through tf2onnx), or what ``auto_pad`` SAME_* or ``output_shape`` ask, split by ONNX's
    rule (SAME_UPPER puts the odd one at the end, otherwise at the start)."""

    def __init__(self, conv, pads, upper: bool, output_shape, strides):
        super().__init__()
        self.conv, self.pads, self.upper, self.output_shape, self.strides = conv, pads, upper, output_shape, strides

    def forward(self, x):
        y = self.conv(x)
        n = y.dim() - 2
        for i in range(n):
            full = y.shape[2 + i]
            if self.pads is not None:
                begin, end = self.pads[i], self.pads[n + i]
            else:
                wanted = self.output_shape[i] if self.output_shape else x.shape[2 + i] * self.strides[i]
                total = full - wanted
                if total < 0:
                    raise NotImplementedError(f"ConvTranspose to an output_shape of {wanted} past its {full}")
                begin = total // 2 if self.upper else total - total // 2
                end = total - begin
            y = y.narrow(2 + i, begin, full - begin - end)
        return y


def _register_transposed_padding() -> None:
    """onnx2torch's ``ConvTranspose`` (1, 11) takes only even pads and no ``auto_pad`` or
    ``output_shape``: the rest convolve unpadded and crop (``_Cropped``)."""
    def wrapped(convert):
        def converter(node, graph):
            a = node.attributes
            auto, output_shape = _text(a.get("auto_pad", "NOTSET")), a.get("output_shape")
            pads = list(a.get("pads", []))
            n = len(pads) // 2
            if auto not in ("SAME_UPPER", "SAME_LOWER") and not output_shape and (auto == "VALID" or pads[:n] == pads[n:]):
                return convert(node, graph)  # onnx2torch's own: even pads, or none
            unpadded = copy.copy(node)
            unpadded._proto_attributes = {k: v for k, v in a.items()  # noqa: SLF001 - the converter reads it there
                                          if k not in ("pads", "auto_pad", "output_shape")}
            result = convert(unpadded, graph)
            kernel = a.get("kernel_shape") or list(_constant(graph, node.input_values[1]).shape[2:])
            strides = list(a.get("strides", [1] * len(kernel)))
            given = list(output_shape)[-len(kernel):] if output_shape else None
            module = _Cropped(result.torch_module, pads if pads and not given and auto == "NOTSET" else None,
                              auto == "SAME_UPPER", given, strides)
            return type(result)(torch_module=module, onnx_mapping=result.onnx_mapping)
        return converter

    for version in (1, 11):
        description = OperationDescription("", "ConvTranspose", version)
        _CONVERTER_REGISTRY[description] = wrapped(_CONVERTER_REGISTRY[description])

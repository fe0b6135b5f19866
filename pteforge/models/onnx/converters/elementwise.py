"""Element-wise operators onnx2torch computes differently from ONNX (broadcasting,
integer and bias cases)."""

from __future__ import annotations

import functools
import math

import torch
from onnx2torch.node_converters.registry import _CONVERTER_REGISTRY, OperationDescription

from .common import _constant, _full_bias, _result


@functools.cache
def _elementwise_modules():
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

"""``Resize`` in all its modes (ONNX's own coefficients)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from onnx2torch.node_converters.registry import _CONVERTER_REGISTRY, OperationDescription

from .common import _constant, _result, _text


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
    x = _source(np.arange(out, dtype=np.float64), scale, size, out, how["coordinate"], roi)
    outside = (x < 0) | (x > size - 1) if how["coordinate"] == "tf_crop_and_resize" else np.zeros(out, bool)
    if how["mode"] == "nearest":
        roundings: dict[str, Callable[[Any], Any]] = {
            "round_prefer_floor": lambda v: np.ceil(v - 0.5), "round_prefer_ceil": lambda v: np.floor(v + 0.5),
            "floor": np.floor, "ceil": np.ceil}
        rounding = roundings[how["nearest"]]
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

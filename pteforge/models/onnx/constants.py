"""onnx2torch's modules that read their arguments from tensors when they run (Pad,
Reshape, Resize, Slice, Split, axes and shapes), replaced where the file gives those as
constants with modules holding them as numbers, which torch.export captures; and the
converter for ``Split`` 18 that onnx2torch lacks."""

from __future__ import annotations

import functools

import torch
from onnx2torch.node_converters.expand import OnnxExpand
from onnx2torch.node_converters.gather import OnnxGather
from onnx2torch.node_converters.pad import OnnxPadDynamic, _onnx_padding_to_torch
from onnx2torch.node_converters.reduce import OnnxReduceSumDynamicAxes
from onnx2torch.node_converters.registry import _CONVERTER_REGISTRY, OperationDescription, add_converter
from onnx2torch.node_converters.reshape import OnnxReshape
from onnx2torch.node_converters.resize import OnnxResize, OnnxResizeV10, _onnx_mode_to_torch_mode
from onnx2torch.node_converters.slice import OnnxSlice, _do_slice, _get_slices
from onnx2torch.node_converters.split import OnnxSplit13
from onnx2torch.node_converters.squeeze import OnnxSqueezeDynamicAxes
from onnx2torch.node_converters.tile import OnnxTile
from onnx2torch.node_converters.unsqueeze import OnnxUnsqueezeDynamicAxes
from onnx2torch.utils.common import OperationConverterResult, onnx_mapping_from_node


@functools.cache
def register_newer_converters() -> tuple:
    """Register an onnx2torch converter for ``Split`` 18 (Split 13 with an optional
    ``num_outputs``, which ONNX's version converter cannot take down to 17); the module types
    it adds. The other versions onnx2torch lacks that mean what an older one means are read
    as that one (``converters.versions.register_same_meaning``)."""
    class OnnxSplit18(OnnxSplit13):
        def forward(self, input_tensor, split=None):
            if split is not None:
                return super().forward(input_tensor, split)
            size = input_tensor.shape[self.axis]  # num_outputs chunks, the last one smaller
            return torch.split(input_tensor, -(-size // self.num_splits), dim=self.axis)

    if OperationDescription(domain="", operation_type="Split", version=18) not in _CONVERTER_REGISTRY:
        @add_converter(operation_type="Split", version=18)
        def _split18(node, graph):  # noqa: ARG001 - onnx2torch's converter signature
            module = OnnxSplit18(axis=node.attributes.get("axis", 0), num_splits=len(node.output_values))
            return OperationConverterResult(torch_module=module, onnx_mapping=onnx_mapping_from_node(node=node))
    return (OnnxSplit18,)


def with_constant_arguments(graph):
    """onnx2torch's ``Pad`` (opset 11+), ``Reshape``, ``Resize``, ``Slice`` and ``Gather`` modules
    read their pads, shape, scales, bounds and indices from tensor inputs when they run (``.tolist()``,
    ``.numpy()``), which torch.export refuses as data-dependent even where the file gives
    those inputs as constants (Ultralytics' YOLO files: the upsampling's scales, the head's
    slices); each of those whose arguments are the file's constants is replaced with one
    holding them as numbers (the same ``F.pad``, ``reshape``, ``interpolate`` or slicing)."""
    builders = _by_numbers()

    def constant(arg):
        if not isinstance(arg, torch.fx.Node) or arg.op != "get_attr":
            return None
        value = graph
        for part in arg.target.split("."):
            value = getattr(value, part, None)
        return value.detach() if isinstance(value, torch.Tensor) else None

    changed = False
    for node in list(graph.graph.nodes):
        module = graph.get_submodule(node.target) if node.op == "call_module" else None
        names, build = builders.get(type(module), ((), None))
        if build is None:
            continue
        given = dict(zip(names, node.args[1:]))
        given.update(node.kwargs)
        values = {k: constant(v) for k, v in given.items() if v is not None}
        if not values or any(v is None for v in values.values()):
            continue
        fixed = build(module, values)
        if fixed is None:
            continue
        name = f"{node.target}/fixed"
        graph.add_submodule(name, fixed)
        with graph.graph.inserting_before(node):
            node.replace_all_uses_with(graph.graph.call_module(name, (node.args[0],)))
        graph.graph.erase_node(node)
        changed = True
    if changed:
        graph.graph.eliminate_dead_code()
        graph.delete_all_unused_submodules()
        graph.recompile()
    return graph


@functools.cache
def _by_numbers() -> dict:
    """onnx2torch's module type -> (its tensor arguments after the input, by name; how to
    make the module doing the same with their constant values as numbers, or None to keep it)."""
    FixedPad, FixedReshape, FixedResize, FixedSplit, FixedSlice = _fixed_modules()

    def pad(module, v):
        """Pads of the dims padded only (the leading unpadded ones dropped): FixedPad takes
        reflect and edge padding of any tensor's last 1-3 dims, where torch's F.pad (and
        onnx2torch) take it with batch and channel dims only (a [1, 576] audio frame)."""
        pads = _onnx_padding_to_torch(v["pads"].tolist())
        while len(pads) > 2 and pads[-2:] == [0, 0]:
            pads = pads[:-2]
        if module.mode != "constant" and len(pads) > 6:
            return None
        return FixedPad(pads, module.mode, float(v["constant_value"].item()) if "constant_value" in v else 0.0)

    def resize(module, v):
        """By constant scales only (Ultralytics' upsampling): not output sizes, a region of
        interest, or a batch or channel scale."""
        inner = getattr(module, "_resize", module)  # OnnxResizeV10 wraps an OnnxResize
        scales = v["scales"].tolist() if "scales" in v else []
        if any(v[k].nelement() for k in ("roi", "sizes") if k in v) or len(scales) < 3 or scales[:2] != [1, 1]:
            return None
        mode = _onnx_mode_to_torch_mode(inner.onnx_mode, len(scales) - 2)
        return FixedResize([float(s) for s in scales[2:]], mode, inner.align_corners)

    def slice_(module, v):
        if not {"starts", "ends"} <= set(v):
            return None
        flip_dims, pos, neg = _get_slices(v["starts"].tolist(), v["ends"].tolist(), v.get("axes"), v.get("steps"))

        def ints(slices: list) -> list:  # numpy's integers (axes, steps) as Python's
            return [slice(*(None if b is None else int(b) for b in (s.start, s.stop, s.step))) if isinstance(s, slice)
                    else s for s in slices]

        return FixedSlice([int(d) for d in flip_dims], ints(pos), ints(neg))

    return {
        OnnxPadDynamic: (("pads", "constant_value"), pad),
        OnnxReshape: (("shape",), lambda module, v: FixedReshape(v["shape"].tolist())),
        OnnxResize: (("roi", "scales", "sizes"), resize),
        OnnxResizeV10: (("scales",), resize),
        OnnxSlice: (("starts", "ends", "axes", "steps"), slice_),
        **{split: (("split",), lambda module, v: FixedSplit([int(n) for n in v["split"].tolist()], module.axis))
           for split in (OnnxSplit13, *register_newer_converters())},
        **_tensor_arguments(_by_numbers_module),
    }


def _tensor_arguments(by_numbers) -> dict:
    """``_by_numbers``' entries for axes, shapes and repeats given as tensors (opset 13+,
    tf2onnx's and spox's files)."""
    return {
        OnnxSqueezeDynamicAxes: (("axes",), lambda module, v: by_numbers("squeeze", sorted(v["axes"].tolist())[::-1])),
        OnnxUnsqueezeDynamicAxes: (("axes",), lambda module, v: by_numbers("unsqueeze", sorted(v["axes"].tolist()))),
        OnnxReduceSumDynamicAxes: (("axes",), lambda module, v: by_numbers(
            "sum", (sorted(v["axes"].tolist()), bool(module._keepdims))) if v["axes"].nelement() else None),
        OnnxExpand: (("shape",), lambda module, v: by_numbers("expand", v["shape"].tolist())),
        OnnxTile: (("repeats",), lambda module, v: by_numbers("repeat", v["repeats"].tolist())),
        # a 0-d index is read with .item() when it runs (``x[:, tensor(-1)]``: the last step of a
        # recurrent layer's outputs), which torch.export refuses as data-dependent
        OnnxGather: (("indices",), lambda module, v: by_numbers(
            "take", (module._axis, v["indices"].reshape(-1).tolist(), list(v["indices"].shape)))
            if v["indices"].nelement() <= TAKE_LIMIT else None),
    }


@functools.cache
def _fixed_modules() -> tuple:
    """The modules ``_by_numbers`` puts in: a pad, reshape, resize, split and slice by numbers."""
    class FixedPad(torch.nn.Module):
        def __init__(self, pads: list[int], mode: str, value: float):
            super().__init__()
            self.pads, self.mode, self.value = pads, mode, value

        def forward(self, x):
            if self.mode == "constant":
                return torch.nn.functional.pad(x, self.pads, value=self.value)
            padded = len(self.pads) // 2  # reflect, replicate: as [1, C, *padded dims], C all the others
            lead = x.shape[:x.dim() - padded]
            y = torch.nn.functional.pad(x.reshape(1, -1, *x.shape[x.dim() - padded:]), self.pads, mode=self.mode)
            return y.reshape(*lead, *y.shape[2:])

    class FixedReshape(torch.nn.Module):
        def __init__(self, shape: list[int]):
            super().__init__()
            self.shape = shape

        def forward(self, x):  # ONNX's 0: that dimension of the input
            return torch.reshape(x, [x.shape[i] if d == 0 else d for i, d in enumerate(self.shape)])

    class FixedResize(torch.nn.Module):
        def __init__(self, scales: list[float], mode: str, align_corners: bool | None):
            super().__init__()
            self.scales, self.mode, self.align_corners = scales, mode, align_corners

        def forward(self, x):
            return torch.nn.functional.interpolate(x, scale_factor=self.scales, mode=self.mode,
                                                   align_corners=self.align_corners)

    class FixedSplit(torch.nn.Module):
        def __init__(self, sizes: list[int], axis: int):
            super().__init__()
            self.sizes, self.axis = sizes, axis

        def forward(self, x):
            return torch.split(x, self.sizes, dim=self.axis)

    class FixedSlice(torch.nn.Module):
        def __init__(self, flip_dims: list, pos: list, neg: list):
            super().__init__()
            self.flip_dims, self.pos, self.neg = flip_dims, pos, neg

        def forward(self, x):
            return _do_slice(x, self.flip_dims, self.pos, self.neg)

    return FixedPad, FixedReshape, FixedResize, FixedSplit, FixedSlice


TAKE_LIMIT = 4096  # indices held as numbers in a Gather; more stay the file's tensor


def _by_numbers_module(op: str, numbers):
    """``op`` with its numbers as a module (``_tensor_arguments``)."""
    return _by_numbers_class()(op, [int(n) for n in numbers] if op not in ("sum", "take") else numbers)


@functools.cache
def _by_numbers_class():
    class ByNumbers(torch.nn.Module):
        """``op`` with its numbers: squeeze or unsqueeze by axes (in the order to apply them),
        sum over (axes, keepdims), expand to a shape (ONNX's broadcasting), repeat, take
        along (axis, the indices flat, their shape) as ONNX's Gather (numpy's take)."""
        def __init__(self, op: str, numbers):
            super().__init__()
            self.op, self.numbers = op, numbers

        def forward(self, x):
            if self.op in ("squeeze", "unsqueeze"):
                for axis in self.numbers:
                    x = x.squeeze(axis) if self.op == "squeeze" else x.unsqueeze(axis)
                return x
            if self.op == "sum":
                return torch.sum(x, dim=self.numbers[0], keepdim=self.numbers[1])
            if self.op == "expand":
                return x.expand(torch.broadcast_shapes(tuple(x.shape), tuple(self.numbers)))
            if self.op == "take":
                return self._take(x, *self.numbers)
            return x.repeat(*self.numbers)

        @staticmethod
        def _take(x, axis: int, flat: list[int], shape: list[int]):
            axis = axis % x.dim()
            if not shape:  # one index, the axis dropped
                return x.select(axis, flat[0])
            size = x.shape[axis]
            index = torch.tensor([i + size if i < 0 else i for i in flat], dtype=torch.long)
            taken = torch.index_select(x, axis, index)
            return taken.reshape(*x.shape[:axis], *shape, *x.shape[axis + 1:])

    return ByNumbers

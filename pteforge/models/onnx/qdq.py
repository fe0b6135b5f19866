"""Quantized ONNX files in the QDQ format (ONNX Runtime's quantization tool, TensorRT's and
Qualcomm's exporters): ``QuantizeLinear``/``DequantizeLinear`` around float operators,
rewritten as float operators that compute the same values, which onnx2torch converts.

- A ``DequantizeLinear`` of constants (the int8 weights, the int32 biases), and a
  ``QuantizeLinear`` of a float weight with the ``DequantizeLinear`` that reads it (how
  TensorRT's quantization tools write weights), are computed here: the float constant they
  give, per tensor or per axis.
- A ``QuantizeLinear`` read only by ``DequantizeLinear``s (an activation's fake
  quantization) becomes ``Div``, ``Add``, ``Floor``, ``Clip``, ``Sub``, ``Mul``: rounded
  and saturated as ONNX defines them (but for an exact tie, which ONNX rounds to even), so
  the values are ONNX Runtime's, in operators XNNPACK takes whole, at any precision.

The program is then a float program whose activations take the file's int8 values. What
this does not take (int4 and float8 types, blocked or per-axis activation scales, a
quantized graph output, the QOperator format's ``QLinearConv``) is left as it is, and the
import names the operator it has no converter for."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

_RANGE = {onnx.TensorProto.INT8: (-128, 127), onnx.TensorProto.UINT8: (0, 255),
          onnx.TensorProto.INT16: (-32768, 32767), onnx.TensorProto.UINT16: (0, 65535)}


def fake_quantized(model):
    """``model`` with its QDQ nodes rewritten as float operators (module docstring), or None
    when it has none, or has one this does not take."""
    graph = model.graph
    constants = {i.name: i for i in graph.initializer}
    if not any(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in graph.node):
        return None
    readers: dict[str, list] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    made: list = []
    instead: dict[int, list] = {}  # a DequantizeLinear's id: the float nodes computed in its place
    dropped: set[int] = set()
    for node in graph.node:
        if node.op_type == "DequantizeLinear" and _all_constant(node.input, constants):
            value = _dequantized(node, constants)
            if value is None:
                return None
            made.append(numpy_helper.from_array(value, node.output[0]))
            dropped.add(id(node))
    outputs = {o.name for o in graph.output}
    for node in graph.node:
        if node.op_type != "QuantizeLinear":
            continue
        users = readers.get(node.output[0], [])
        if not users or node.output[0] in outputs or any(u.op_type != "DequantizeLinear" for u in users):
            return None
        for k, user in enumerate(users):
            rewritten: tuple[list, list] | None
            if node.input[0] in constants:  # a float weight quantized in the graph: computed here
                value = _quantized_constant(node, user, constants)
                rewritten = None if value is None else ([], [numpy_helper.from_array(value, user.output[0])])
            else:
                rewritten = _fake_quantization(node, user, constants, f"{node.output[0]}__fq{k}")
            if rewritten is None:
                return None
            instead[id(user)] = rewritten[0]
            made += rewritten[1]
            dropped.add(id(user))
        dropped.add(id(node))
    if any(n.op_type in ("QuantizeLinear", "DequantizeLinear") and id(n) not in dropped for n in graph.node):
        return None
    # in the graph's own order: each rewritten pair where its DequantizeLinear was
    nodes = [new for n in graph.node for new in instead.get(id(n), [] if id(n) in dropped else [n])]
    return _rebuilt(model, nodes, made)


def _all_constant(names, constants) -> bool:
    return all(name in constants for name in names if name)


def _array(constants, names, i, like=None):
    """The constant of input ``i`` (None when it is not given: a zero point left out)."""
    if len(names) > i and names[i]:
        return numpy_helper.to_array(constants[names[i]])
    return None if like is None else np.zeros((), dtype=like)


def _parameters(node, constants, ndim: int, zero_type):
    """(scale, zero point) of a QuantizeLinear or DequantizeLinear with constant ones, laid
    along its axis of an ``ndim``-dimensional input; None for blocked or non-float scales."""
    attributes = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    scale = _array(constants, node.input, 1)
    zero = _array(constants, node.input, 2, like=zero_type)
    if attributes.get("block_size") or scale is None or scale.dtype.kind != "f":
        return None
    if scale.size > 1:  # per axis: the scale's values along ``axis``
        shape = [1] * ndim
        shape[attributes.get("axis", 1) % ndim] = scale.size
        scale, zero = scale.reshape(shape), zero.reshape(shape)
    return scale, zero


def _dequantized(node, constants, x=None):
    """A ``DequantizeLinear`` of constants (or of ``x``), computed: ``(x - zero) * scale``."""
    x = numpy_helper.to_array(constants[node.input[0]]) if x is None else x
    given = _parameters(node, constants, x.ndim, x.dtype)
    if given is None or x.dtype.kind not in "iuf":
        return None
    scale, zero = given
    return ((x.astype(np.float64) - zero.astype(np.float64)) * scale.astype(np.float64)).astype(scale.dtype)


def _quantized_constant(quantize, dequantize, constants):
    """``dequantize(quantize(w))`` of a constant ``w``, computed: rounded half to even and
    saturated in the zero point's type, as ONNX Runtime computes it."""
    w = numpy_helper.to_array(constants[quantize.input[0]])
    given = _parameters(quantize, constants, w.ndim, np.uint8)
    if given is None or w.dtype.kind != "f":
        return None
    scale, zero = given
    kind = constants[quantize.input[2]].data_type if len(quantize.input) > 2 and quantize.input[2] else onnx.TensorProto.UINT8
    if kind not in _RANGE:
        return None
    low, high = _RANGE[kind]
    q = np.clip(np.round(w.astype(np.float32) / scale.astype(np.float32)) + zero, low, high)
    return _dequantized(dequantize, constants, q.astype(np.float32))


def _fake_quantization(quantize, dequantize, constants, prefix: str):
    """(nodes, constants) computing ``dequantize(quantize(x))`` in float, or None."""
    if not _all_constant(quantize.input[1:], constants) or not _all_constant(dequantize.input[1:], constants):
        return None
    given = quantize.input[2] if len(quantize.input) > 2 and quantize.input[2] else None
    kind = constants[given].data_type if given else onnx.TensorProto.UINT8
    scales = [_array(constants, n.input, 1) for n in (quantize, dequantize)]
    zeros = [_array(constants, n.input, 2, like=np.uint8) for n in (quantize, dequantize)]
    if kind not in _RANGE or any(s.size != 1 or s.dtype.kind != "f" for s in scales):
        return None
    low, high = _RANGE[kind]
    values = {"s1": scales[0], "m": 0.5, "z1": zeros[0], "lo": low, "hi": high, "z2": zeros[1], "s2": scales[1]}
    made = [numpy_helper.from_array(np.asarray(v, dtype=scales[0].dtype).reshape(()), f"{prefix}_{k}")
            for k, v in values.items()]
    x, p = quantize.input[0], prefix
    nodes = [
        helper.make_node("Div", [x, f"{p}_s1"], [f"{p}_d"]),
        # rounded as floor(x + 0.5): XNNPACK computes Floor (Round would cut its graph at each
        # activation), at every precision; QuantizeLinear's half to even differs only on an
        # exact tie, a value halfway between two steps of the grid
        helper.make_node("Add", [f"{p}_d", f"{p}_m"], [f"{p}_h"]),
        helper.make_node("Floor", [f"{p}_h"], [f"{p}_r"]),
        helper.make_node("Add", [f"{p}_r", f"{p}_z1"], [f"{p}_a"]),
        helper.make_node("Clip", [f"{p}_a", f"{p}_lo", f"{p}_hi"], [f"{p}_c"]),  # saturated
        helper.make_node("Sub", [f"{p}_c", f"{p}_z2"], [f"{p}_u"]),
        helper.make_node("Mul", [f"{p}_u", f"{p}_s2"], [dequantize.output[0]]),
    ]
    return nodes, made


def _rebuilt(model, nodes: list, made: list):
    """``model`` with ``nodes`` (in the order they compute) and the constants they read
    (``made`` among them); a constant no longer read leaves the graph's inputs too."""
    graph = model.graph
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    read = {name for n in nodes for name in n.input} | {o.name for o in graph.output}
    kept = [i for i in [*graph.initializer, *made] if i.name in read]
    gone = {i.name for i in graph.initializer} - {i.name for i in kept}
    del out.graph.initializer[:]
    out.graph.initializer.extend(kept)
    inputs = [i for i in graph.input if i.name not in gone]
    del out.graph.input[:]
    out.graph.input.extend(inputs)
    return out

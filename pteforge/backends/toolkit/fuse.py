"""Operators written out in elementary ones, as the one operator they are (same values).

Graphs made elsewhere write common operators out, and XNNPACK then runs each elementary
operator as a pass over memory, or on the portable kernels:

- **Hard-swish**, ``x * relu6(x + 3) / 6``: PaddlePaddle's ONNX files as ``Add``, ``Clip``,
  ``Mul`` and ``Div``, or as ``x * HardSigmoid(x)``, which ONNX Runtime's own inlining of
  ``HardSwish`` makes too; Keras and hand-written PyTorch as ``x * F.relu6(x + 3) / 6``.
  XNNPACK has it as one operator (PP-LCNet's page-orientation classifier: 28 of them, four
  passes each, about a third of its time). Found by its values (the constants numbers or
  one-value tensors, the operands of add and mul in either order), replaced by
  ``aten.hardswish``: the same function, to float rounding.
- **A one-hot matrix product**, ``one_hot(i, N) @ W``: JAX's and Keras' embedding of bytes or
  tokens (``Equal`` against ``0..N-1``, ``Cast``, ``MatMul``). The comparison and the cast
  ran on the portable kernels over every position times N (Magika: 2048 x 257, two thirds of
  its time). It is the row lookup ``W[i]``, and a row of zeros where ``i`` is outside
  ``0..N-1``, as the one-hot's was: exactly the same values.

Only a pattern's own nodes go (each intermediate read by the pattern alone); a quantized
program, where quantize and dequantize nodes stand between them, is left as it is.
"""

from __future__ import annotations

from dataclasses import dataclass

from .copying import deepcopied

_TOLERANCE = 1e-6


def fused(exported):
    """``exported`` with each pattern above as its one operator: a new program where there
    is one, ``exported`` itself where there is none."""
    rules = ((_hardswish_input, _hardswish), (_one_hot_product, _lookup))
    values = _constant_values(exported)
    if not any(find(n, values) is not None for n in exported.graph.nodes for find, _ in rules):
        return exported
    exported = deepcopied(exported)
    graph, values = exported.graph, _constant_values(exported)
    for node in list(graph.nodes):
        for find, build in rules:
            match = find(node, values)
            if match is None:
                continue
            with graph.inserting_before(node):
                new = build(graph, match)
            new.meta = dict(node.meta)
            node.replace_all_uses_with(new)
            break
    graph.eliminate_dead_code()
    for node in list(graph.nodes):  # a check of a value nothing else reads any more
        if _is(node, ("aten::_assert_tensor_metadata",)) and not _readers(node.args[0]):
            graph.erase_node(node)
    graph.eliminate_dead_code()
    _drop_unused_constants(exported)
    exported.graph_module.recompile()
    return exported


def _call(graph, target, *args):
    """A new node of ``target`` on ``args``, its value's metadata made from theirs."""
    import torch
    from torch._guards import detect_fake_mode
    from torch.fx import Node
    from torch.utils import _pytree as pytree

    node = graph.call_function(target, args)
    fake = pytree.tree_map_only(Node, lambda a: a.meta.get("val"), args)
    with detect_fake_mode(pytree.tree_leaves(fake)), torch.no_grad():
        node.meta["val"] = target(*fake)
    return node


def _hardswish(graph, x):
    import torch

    return graph.call_function(torch.ops.aten.hardswish.default, (x,))


@dataclass
class _Constants:
    """A program's constant placeholders: ``tensors`` by name, and ``numbers`` for those of
    one float value."""

    tensors: dict
    numbers: dict


def _constant_values(exported) -> _Constants:
    sig = exported.graph_signature
    stored = {**exported.state_dict, **exported.constants}
    named = {**sig.inputs_to_parameters, **sig.inputs_to_buffers, **sig.inputs_to_lifted_tensor_constants}
    tensors = {name: stored[t] for name, t in named.items() if t in stored}
    return _Constants(tensors, {name: float(t.reshape(())) for name, t in tensors.items()
                                if t.numel() == 1 and t.is_floating_point()})


def _number(arg, values: _Constants) -> float | None:
    from torch.fx import Node

    if isinstance(arg, bool):
        return None
    if isinstance(arg, (int, float)):
        return float(arg)
    if isinstance(arg, Node) and arg.op == "placeholder":
        return values.numbers.get(arg.name)
    return None


def _near(a: float | None, b: float) -> bool:
    return a is not None and abs(a - b) <= _TOLERANCE * max(1.0, abs(b))


def _is(node, names: tuple[str, ...]) -> bool:
    from torch.fx import Node

    return isinstance(node, Node) and node.op == "call_function" and \
        getattr(getattr(node.target, "_schema", None), "name", None) in names


def _readers(node) -> list:
    """What reads ``node``'s value, its metadata checks left out."""
    return [u for u in getattr(node, "users", ()) if not _is(u, ("aten::_assert_tensor_metadata",))]


def _only_for(node, user) -> bool:
    """``node`` is an intermediate ``user`` alone reads."""
    return _readers(node) == [user]


def _clamped(node, values: _Constants) -> tuple | None:
    """(input, low, high) of a clamp, clip, hardtanh or relu6 with constant bounds."""
    if _is(node, ("aten::relu6",)):
        return node.args[0], 0.0, 6.0
    if not _is(node, ("aten::clamp", "aten::clip", "aten::hardtanh")):
        return None
    args = list(node.args) + [None] * 3
    low = node.kwargs.get("min", node.kwargs.get("min_val", args[1]))
    high = node.kwargs.get("max", node.kwargs.get("max_val", args[2]))
    if node.target._schema.name == "aten::hardtanh":
        low = -1.0 if low is None else low
        high = 1.0 if high is None else high
    return args[0], _number(low, values), _number(high, values)


def _binary(node, names: tuple[str, ...], values: _Constants):
    """The (tensor operand, constant) pairs of a binary ``names`` node: both orders for a
    commutative one, as written for the others."""
    if not _is(node, names) or len(node.args) < 2 or node.kwargs.get("alpha", 1) != 1:
        return []
    a, b = node.args[:2]
    pairs = [(a, _number(b, values))]
    if node.target._schema.name in ("aten::add", "aten::mul"):
        pairs.append((b, _number(a, values)))
    return [(t, c) for t, c in pairs if c is not None]


def _relu6_of_plus_three(node, values: _Constants, user):
    """x where ``node`` is ``clamp(x + 3, 0, 6)`` read by ``user`` alone."""
    clamp = _clamped(node, values)
    if clamp is None or not _only_for(node, user) or not _near(clamp[1], 0.0) or not _near(clamp[2], 6.0):
        return None
    for x, three in _binary(clamp[0], ("aten::add",), values):
        if _near(three, 3.0) and _only_for(clamp[0], node):
            return x
    return None


def _hardsigmoid_of(node, values: _Constants, user):
    """x where ``node`` is a hard-sigmoid of x read by ``user`` alone: ``hardsigmoid(x)``,
    ``clamp(x/6 + 0.5, 0, 1)`` (ONNX's HardSigmoid with alpha 1/6), ``relu6(x + 3) / 6``."""
    if not _only_for(node, user):
        return None
    if _is(node, ("aten::hardsigmoid",)):
        return node.args[0]
    clamp = _clamped(node, values)
    if clamp is not None and _near(clamp[1], 0.0) and _near(clamp[2], 1.0):
        for scaled, half in _binary(clamp[0], ("aten::add",), values):
            if not _near(half, 0.5) or not _only_for(clamp[0], node):
                continue
            x = _divided_by_six(scaled, values, clamp[0])
            if x is not None:
                return x
    x = _divided_by_six(node, values, user)
    return _relu6_of_plus_three(x, values, node) if x is not None else None


def _over_six(node, values: _Constants):
    """y where ``node`` is ``y / 6`` or ``y * (1/6)``."""
    for y, c in _binary(node, ("aten::div",), values):
        if _near(c, 6.0):
            return y
    for y, c in _binary(node, ("aten::mul",), values):
        if _near(c, 1 / 6):
            return y
    return None


def _divided_by_six(node, values: _Constants, user):
    """y where ``node`` is ``y / 6`` or ``y * (1/6)`` read by ``user`` alone."""
    return _over_six(node, values) if _only_for(node, user) else None


def _hardswish_input(node, values: _Constants):
    """x where ``node`` computes hard-swish of x: ``x * hardsigmoid(x)`` in any of its
    forms, or ``(x * relu6(x + 3)) / 6``; None otherwise."""
    if _is(node, ("aten::mul",)) and len(node.args) == 2:
        a, b = node.args
        for x, gate in ((a, b), (b, a)):
            if x is not None and _hardsigmoid_of(gate, values, node) is x:
                return x
    product = _over_six(node, values)
    if not _is(product, ("aten::mul",)) or len(product.args) != 2 or not _only_for(product, node):
        return None
    a, b = product.args
    for x, gate in ((a, b), (b, a)):
        if x is not None and _relu6_of_plus_three(gate, values, product) is x:
            return x
    return None


def _one_hot_product(node, values: _Constants):
    """(i, W, N) where ``node`` is ``one_hot(i, N) @ W``: a matrix product of a float cast
    of ``i == 0..N-1`` (i integers with a last dim of one, the N values a constant in
    order along the last dim) with a constant W of N rows."""
    import torch

    if not _is(node, ("aten::matmul", "aten::mm")) or len(node.args) != 2:
        return None
    cast, weight = node.args
    w = _constant(weight, values)
    if w is None or w.dim() != 2 or not w.is_floating_point() or not _only_for(cast, node):
        return None
    if not _is(cast, ("aten::to", "aten::_to_copy")) or not cast.meta["val"].is_floating_point():
        return None
    eq = cast.args[0]
    if not _is(eq, ("aten::eq",)) or not _only_for(eq, cast) or len(eq.args) != 2:
        return None
    n = w.shape[0]
    for i, table in (eq.args, eq.args[::-1]):
        t = _constant(table, values)
        iv = getattr(i, "meta", {}).get("val")
        if t is None or iv is None or iv.is_floating_point() or iv.dim() < 1 or iv.shape[-1] != 1 or \
                t.shape[-1] != n or t.numel() != n or t.is_floating_point():
            continue
        if torch.equal(t.reshape(-1), torch.arange(n, dtype=t.dtype)):
            return i, weight, n
    return None


def _constant(arg, values: _Constants):
    """The tensor a constant placeholder holds, else None."""
    from torch.fx import Node

    return values.tensors.get(arg.name) if isinstance(arg, Node) and arg.op == "placeholder" else None


def _lookup(graph, match):
    """``W[i]`` where ``i`` is in ``0..N-1``, zeros elsewhere."""
    import torch

    aten = torch.ops.aten
    i, weight, n = match
    index = _call(graph, aten.squeeze.dim, i, -1)
    inside = _call(graph, aten.logical_and.default, _call(graph, aten.ge.Scalar, index, 0),
                   _call(graph, aten.lt.Scalar, index, n))
    rows = _call(graph, aten.embedding.default, weight, _call(graph, aten.clamp.default, index, 0, n - 1))
    dtype = weight.meta["val"].dtype
    return _call(graph, aten.mul.Tensor, rows,
                 _call(graph, aten.unsqueeze.default, _call(graph, aten.to.dtype, inside, dtype), -1))


def _drop_unused_constants(exported) -> None:
    """The constant placeholders nothing reads any more, out of the program and its signature."""
    sig = exported.graph_signature
    kinds = {**{k: "state" for k in sig.inputs_to_parameters}, **{k: "state" for k in sig.inputs_to_buffers},
             **{k: "constant" for k in sig.inputs_to_lifted_tensor_constants}}
    unused = [n for n in exported.graph.nodes if n.op == "placeholder" and not n.users and n.name in kinds]
    if not unused:
        return
    names = {n.name for n in unused}
    targets = {s.target for s in sig.input_specs if s.arg.name in names}
    still = {s.target for s in sig.input_specs if s.arg.name not in names}
    sig.input_specs = [s for s in sig.input_specs if s.arg.name not in names]
    for target in targets - still:
        exported.state_dict.pop(target, None)
        exported.constants.pop(target, None)
    for node in unused:
        exported.graph.erase_node(node)

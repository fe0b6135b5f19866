"""A captured program in half precision, for backends whose fp16 is the model's fp16 (XNNPACK,
MLX): their ``prepare`` step."""

from __future__ import annotations

import copy


def half_program(exported, example: tuple):
    """The captured program with fp16 weights and compute, keeping fp32 inputs and
    outputs: an app feeds the same tensors as for fp32, and the casts at the edges
    run in the delegate."""
    import torch
    from torch.utils._pytree import tree_map

    class Half(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = copy.deepcopy(inner).to(torch.float16)

        def forward(self, *args):
            out = self.inner(*[a.half() if a.is_floating_point() else a for a in args])
            # any output structure (a tensor, a tuple, a dict of named outputs)
            return tree_map(lambda o: o.float() if isinstance(o, torch.Tensor) and o.is_floating_point() else o, out)

    module = exported.module(check_guards=False)
    # what the capture asserted of its fp32 values (a ``.to(torch.float32)`` in the model:
    # Hugging Face attention's softmax upcast) is false in fp16 ("Tensor dtype mismatch!")
    for node in list(module.graph.nodes):
        if node.target is torch.ops.aten._assert_tensor_metadata.default:
            module.graph.erase_node(node)
        elif _made_in_float32(node):  # an LSTM's zero initial state: its float32 output met half weights
            node.kwargs = {**node.kwargs, "dtype": torch.float16}
        elif _integers_to_float32(node):  # an image of uint8 made float (x.float() / 255): for half weights
            node.args = (node.args[0], torch.float16, *node.args[2:]) if len(node.args) > 1 else node.args
            node.kwargs = {**node.kwargs, "dtype": torch.float16} if "dtype" in node.kwargs else node.kwargs
    module.recompile()
    return torch.export.export(Half(module), example)


# tensors made from nothing, whose dtype the capture wrote down (torch.zeros(..., dtype=x.dtype)
# in fp32 is dtype=float32): in the fp16 program, in fp16 (not arange: fp16 counts exactly to 2048 only)
_FACTORIES = frozenset({"zeros", "ones", "full", "empty", "scalar_tensor", "zeros_like", "ones_like", "full_like",
                        "empty_like", "new_zeros", "new_ones", "new_full", "new_empty"})


def _made_in_float32(node) -> bool:
    import torch

    name = getattr(getattr(node.target, "_schema", None), "name", "").split("::")[-1]
    return node.op == "call_function" and name in _FACTORIES and node.kwargs.get("dtype") == torch.float32


def _integers_to_float32(node) -> bool:
    """A cast of integers (or booleans) to float32: in the fp16 program, to fp16. A cast of
    floats to float32 (an upcast for a softmax) stays."""
    import torch

    if node.op != "call_function" or node.target not in (torch.ops.aten.to.dtype, torch.ops.aten._to_copy.default):
        return False
    dtype = node.kwargs.get("dtype", node.args[1] if len(node.args) > 1 else None)
    source = getattr(node.args[0], "meta", {}).get("val") if node.args else None
    return dtype == torch.float32 and isinstance(source, torch.Tensor) and not source.is_floating_point()

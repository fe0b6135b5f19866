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
    module.recompile()
    return torch.export.export(Half(module), example)

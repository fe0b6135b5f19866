"""A copy of an ExportedProgram whose nodes are named as the original's."""

from __future__ import annotations

import copy


def deepcopied(program, memo: dict | None = None):
    """``copy.deepcopy(program, memo)``, each node of the copy named as in ``program``.

    Copying a graph names every node again through torch.fx's namespace, which gives no
    node a builtin's name: the input of ``forward(self, input)`` (``nn.Sequential``'s)
    came out ``input_1`` while the copy's signature still said ``input``. A whole trace
    goes by position and does not mind; what reads the graph by its signature's names
    does (MLX's partitioner: "Support for placeholder input_1 is not implemented", on the
    copy a worker handed its third job). The names are set as torch.export sets them
    (``placeholder_naming_pass``: directly, then the code made again)."""
    import torch

    copied = copy.deepcopy(program, memo)
    modules = dict(copied.graph_module.named_modules())
    for name, before in program.graph_module.named_modules():
        after = modules.get(name)
        if not isinstance(before, torch.fx.GraphModule) or not isinstance(after, torch.fx.GraphModule):
            continue
        renamed = False
        for old, new in zip(before.graph.nodes, after.graph.nodes):
            if new.name != old.name:
                new.name = old.name
                renamed = True
        if renamed:
            after.recompile()
    return copied

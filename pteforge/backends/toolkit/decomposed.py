"""What ``run_decompositions`` made of a program, marked on it: ``stages/memo.py``'s
``sharing`` skips a re-trace that would give it back as it is, and a backend's rewrite that
only folds constants (``still_decomposed``) says the program is still what it was."""

from __future__ import annotations

import hashlib

DECOMPOSED = "_pteforge_decomposed"


def structure(program) -> str:
    """The program's graph as text: what a pass changing it in place changes. An operator
    ExecuTorch swapped for its kept-whole stand-in (``EDGE_DO_NOT_DECOMP``: the same
    schema, the same kernel) reads as the operator itself."""
    import torch

    try:
        from executorch.exir.program._program import transform_op_to_aten_op as stand_ins
    except ImportError:
        stand_ins = {}
    lines = [f"{node.name}={node.op}:{stand_ins.get(str(node.target), node.target)}{node.args}{node.kwargs}"
             for module in program.graph_module.modules() if isinstance(module, torch.fx.GraphModule)
             for node in module.graph.nodes]
    return digest(*lines)


def decomposed(program):
    """Mark ``program`` as made by ``run_decompositions``: functional and re-traced, so
    ``run_decompositions`` with a table naming none of its operators (``{}``: functionalize,
    decompose nothing) would give it back as it is, while its graph stays the same.
    ExecuTorch asks for that of every program it lowers (~0.5 s on mobilenet_v3_small
    after XNNPACK's or OpenVINO's rewrites), and again with its whole table after swapping
    the operators a partitioner keeps whole for their stand-ins (1.0-1.5 s a target: the
    Arm targets, Vulkan, OpenVINO)."""
    setattr(program, DECOMPOSED, structure(program))
    return program


def still_decomposed(program):
    """Say that a pass which only folds constants kept ``program`` what ``run_decompositions``
    made of it, when it was (a language model's means as linears, then folded: re-traced for
    nothing otherwise, ~4 s a lowering of a 4-layer Gemma 3)."""
    if getattr(program, DECOMPOSED, None) is not None:
        decomposed(program)
    return program


def digest(*parts) -> str:
    return hashlib.sha256(" ".join(map(str, parts)).encode()).hexdigest()

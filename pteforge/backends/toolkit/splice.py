"""``run_decompositions`` traced only where its table takes an op.

A backend's same-value rewrites (``rewrite.py``) take a handful of a program's ops:
XNNPACK's late table takes mobilenet_v3_small's ten adaptive average poolings, and
nothing else among its ~250 ops. ``run_decompositions(table)`` traces the whole program
again for them (~1.2 s on a warm 2-core Xeon, ~2.8 s as a worker's first trace). On a
program that is already what ``run_decompositions`` makes (functional, its composite ops
kept or decomposed as they will stay: ``decomposed.DECOMPOSED``), tracing the rest again
gives it back as it is, so only the ops the table takes are traced: as a small program of
their own, by ``run_decompositions`` itself, with the same table and their own metadata
(module stack, source), whose graph then takes each op's place. The functional program
it starts from is the one ExecuTorch's lowering makes first anyway, shared by every
lowering of the program in a worker (``stages/memo.py``). ExecuTorch's own decomposition
of that program with its table (less what a partitioner keeps whole) is spliced the same
way inside a worker (``memo.sharing``): mobilenet_v3_small for Vulkan, 73 of 436 nodes.

Where a splice could differ from tracing the whole program, it is not made and
``spliced`` returns None: control flow (branches are programs of their own), an op the
table takes whose users do not take its outputs one by one, a rewrite that fails on the
op's fake values (the whole trace then says why), a rewritten tensor laid out otherwise
than the one it replaces (what reads it was traced for that layout), small programs
sharing a node, or a program whose inputs are not named as its signature says.
"""

from __future__ import annotations

import operator
from typing import Any


def spliced(program, table, ask: bool = True):
    """``program.run_decompositions(table)`` for a program ``run_decompositions`` made,
    traced only where ``table`` takes an op; None where that could differ. ``ask``: ask
    each of the table's functions on the op's fake values whether it takes it (a same-value
    rewrite declines with NotImplemented); otherwise every op in the table is taken
    (a decomposition table: ExecuTorch's, less what a partitioner keeps whole)."""
    import torch

    # a program with symbolic sizes: its small programs would need the shape environment's ranges too
    if any(isinstance(sub, torch.fx.GraphModule) for sub in program.graph_module.children()) or symbolic(program) \
            or not _named_by_its_signature(program):
        return None
    taken = _taken(program, table, ask)
    if taken is None:
        return None
    if not taken:
        return program
    small, read = _small_program(taken)
    return _with_graphs_of(program, taken, small.run_decompositions(table), read)


def symbolic(exported) -> bool:
    """Whether any of the program's inputs has a symbolic size."""
    import torch

    return any(
        isinstance(d, torch.SymInt)
        for n in exported.graph.nodes
        if n.op == "placeholder" and isinstance(n.meta.get("val"), torch.Tensor)
        for d in n.meta["val"].shape
    )


def _named_by_its_signature(program) -> bool:
    """Whether the program's inputs are named as its signature names them. ExecuTorch
    hands ``run_decompositions`` programs whose copied graph renamed a placeholder that
    shadows a builtin (``input`` -> ``input_1``, the signature still saying ``input``): a
    whole trace goes by position and does not mind; a splice is made only of a program
    that would pass torch's verifier."""
    names = [n.name for n in program.graph.nodes if n.op == "placeholder"]
    return names == [getattr(spec.arg, "name", None) for spec in program.graph_signature.input_specs]


def _taken(program, table, ask: bool) -> list | None:
    """The nodes whose op ``table`` takes (``spliced``), or None when a function of the
    table fails on one's fake values or one has users that are not its outputs' ``getitem``."""
    import contextlib

    import torch
    from torch._guards import detect_fake_mode
    from torch.fx import Node
    from torch.utils import _pytree as pytree

    taken = []
    for node in program.graph.nodes:
        if node.op != "call_function" or node.target not in table:
            continue
        if ask:
            args, kwargs = pytree.tree_map_only(Node, lambda a: a.meta.get("val"), (node.args, node.kwargs))
            mode = detect_fake_mode(pytree.tree_leaves((args, kwargs)))
            try:
                with mode or contextlib.nullcontext(), torch.no_grad():
                    if table[node.target](*args, **kwargs) is NotImplemented:
                        continue
            except Exception:  # noqa: BLE001 - tracing the whole program says why
                return None
        if not _outputs(node) or (isinstance(node.meta["val"], (tuple, list))
                                  and any(u.target is not operator.getitem for u in node.users)):
            return None
        taken.append(node)
    return taken


def _outputs(node) -> list:
    """The tensors ``node`` makes, in order ([] when it makes anything else)."""
    import torch

    val = node.meta.get("val")
    values = list(val) if isinstance(val, (tuple, list)) else [val]
    return values if values and all(isinstance(v, torch.Tensor) for v in values) else []


def _used(node) -> list[int]:
    """Which of ``node``'s tensors its users read (all of one it makes alone): tracing the
    whole program makes nothing for the others (``max.dim``'s unread indices)."""
    if not isinstance(node.meta["val"], (tuple, list)):
        return [0]
    return sorted({user.args[1] for user in node.users})


def _small_program(taken):
    """A program of the ``taken`` nodes alone, and the nodes its inputs stand for: each
    taken node reads placeholders standing for its inputs and keeps its metadata; the
    program returns their tensors one by one."""
    import torch
    from torch.export.exported_program import ExportedProgram, ModuleCallEntry, ModuleCallSignature
    from torch.export.graph_signature import (ExportGraphSignature, InputKind, InputSpec, OutputKind, OutputSpec,
                                              TensorArgument)
    from torch.fx import Node
    from torch.utils import _pytree as pytree

    graph, inputs, outputs = torch.fx.Graph(), {}, []
    for node in taken:
        for arg in pytree.tree_leaves((node.args, node.kwargs)):
            if isinstance(arg, Node) and arg not in inputs:
                inputs[arg] = graph.placeholder(arg.name)
                inputs[arg].meta["val"] = arg.meta["val"]
    for node in taken:
        copy = graph.node_copy(node, lambda a: inputs[a])
        many = isinstance(node.meta["val"], (tuple, list))
        for i in _used(node):
            out = graph.call_function(operator.getitem, (copy, i)) if many else copy
            out.meta = {**node.meta, "val": _outputs(node)[i]}
            outputs.append(out)
    graph.output(tuple(outputs))
    placeholders = list(inputs.values())
    in_spec, out_spec = pytree.tree_structure((tuple(placeholders), {})), pytree.tree_structure(tuple(outputs))
    graph._codegen = torch.fx.graph._PyTreeCodeGen(
        torch.fx.graph._PyTreeInfo([p.name for p in placeholders], in_spec, out_spec))
    module = torch.fx.GraphModule(torch.nn.Module(), graph)
    signature = ExportGraphSignature(
        input_specs=[InputSpec(InputKind.USER_INPUT, TensorArgument(p.name), None) for p in placeholders],
        output_specs=[OutputSpec(OutputKind.USER_OUTPUT, TensorArgument(o.name), None) for o in outputs])
    call = ModuleCallEntry("", ModuleCallSignature(inputs=[], outputs=[], in_spec=in_spec, out_spec=out_spec))
    return ExportedProgram(root=module, graph=module.graph, graph_signature=signature, state_dict={},
                           range_constraints={}, module_call_graph=[call]), list(inputs)


def _with_graphs_of(program, taken, made, read):
    """``program`` with each taken node's place taken by the graph ``made`` traced for it
    (its tensors in ``made``'s outputs, in order; its inputs stand for ``read``), or None
    when two such graphs share a node or one makes a tensor laid out otherwise."""
    import copy

    import torch

    parts = _parts(taken, made) if _reads_only(made, read) else None
    if parts is None:
        return None
    stands_for = dict(zip((n for n in made.graph.nodes if n.op == "placeholder"), read))
    graph, renamed = _spliced_graph(program.graph, parts, stands_for)
    graph.eliminate_dead_code()  # what a rewrite no longer reads, as tracing the whole program drops it
    graph._codegen = copy.deepcopy(program.graph._codegen)
    module = torch.fx.GraphModule(program.graph_module, graph)
    module.meta.update(program.graph_module.meta)
    signature = copy.copy(program.graph_signature)
    signature.input_specs = [_renamed(spec, renamed) for spec in signature.input_specs]
    signature.output_specs = [_renamed(spec, renamed) for spec in signature.output_specs]
    return program._update(module, signature)


def _reads_only(made, read) -> bool:
    """Whether the traced small program takes the inputs it was given and nothing else,
    and only returns: a decomposition that makes a constant of its own has it lifted as
    one more input, which the whole program's trace would lift as its own."""
    from torch.export.graph_signature import InputKind, OutputKind

    signature = made.graph_signature
    return (len(signature.input_specs) == len(read)
            and all(spec.kind is InputKind.USER_INPUT for spec in signature.input_specs)
            and all(spec.kind is OutputKind.USER_OUTPUT for spec in signature.output_specs))


def _parts(taken, made) -> dict | None:
    """For each taken node, the nodes of ``made`` traced for it (in order) and its tensors
    there by output index; None when two share a node or a tensor is laid out otherwise."""
    results = list(next(n for n in made.graph.nodes if n.op == "output").args[0])
    parts: dict[Any, tuple] = {}
    seen: set = set()
    at = 0
    for node in taken:
        used = _used(node)
        outs = dict(zip(used, results[at:at + len(used)]))
        part = _ancestors(outs.values())
        if part & seen or not all(_alike(_outputs(node)[i], out.meta.get("val")) for i, out in outs.items()):
            return None
        seen |= part
        parts[node] = ([n for n in made.graph.nodes if n in part], outs)
        at += len(used)
    return parts


def _spliced_graph(graph, parts: dict, stands_for: dict):
    """A copy of ``graph`` with the ``parts`` in place of their nodes, and what it renamed."""
    import torch

    new = torch.fx.Graph()
    env: dict[Any, Any] = {}
    small: dict[Any, Any] = {}  # a node of the small programs -> its copy
    renamed: dict[str, str] = {}
    for node in graph.nodes:
        if node in parts:
            nodes, outs = parts[node]
            for n in nodes:
                small[n] = new.node_copy(n, lambda a: env[stands_for[a]] if a in stands_for else small[a])
            made = {i: env[stands_for[o]] if o in stands_for else small[o] for i, o in outs.items()}
            env[node] = made if isinstance(node.meta["val"], (tuple, list)) else made[0]
        elif node.op == "call_function" and node.target is operator.getitem and node.args[0] in parts:
            env[node] = env[node.args[0]][node.args[1]]
        else:
            env[node] = new.node_copy(node, lambda a: env[a])
    _named_as_before(new, {env[n]: n.name for n in graph.nodes if n not in parts and isinstance(env[n], torch.fx.Node)})
    for node in graph.nodes:
        if isinstance(env[node], torch.fx.Node) and env[node].name != node.name:
            renamed[node.name] = env[node].name
    return new, renamed


def _named_as_before(graph, names: dict) -> None:
    """Each copy named as its node was, where no other node of ``graph`` took the name: fx
    names a copy anew where the name shadows a builtin (a placeholder ``input``), and
    programs made from this one name their inputs by the signature's names."""
    used = {n.name for n in graph.nodes}
    for node, name in names.items():
        if node.name != name and name not in used:
            used.discard(node.name)
            node.name = name  # as torch.export names its placeholders
            graph._graph_namespace._rename_object(node, name)
            used.add(name)


def _alike(was, now) -> bool:
    """Whether a rewritten tensor is laid out as the one it replaces: what reads it was
    traced for that layout (a ``reshape`` made a ``view`` of a contiguous tensor, which a
    strided one would not take)."""
    import torch

    return isinstance(now, torch.Tensor) and (was.shape, was.dtype, was.stride(), was.storage_offset()) == (
        now.shape, now.dtype, now.stride(), now.storage_offset())


def _ancestors(nodes) -> set:
    """``nodes`` and what they are made from, up to (not with) the placeholders."""
    found, todo = set(), list(nodes)
    while todo:
        node = todo.pop()
        if node in found or node.op == "placeholder":
            continue
        found.add(node)
        todo.extend(node.all_input_nodes)
    return found


def _renamed(spec, renamed: dict):
    import copy

    name = getattr(spec.arg, "name", None)
    if renamed.get(name, name) == name:
        return spec
    spec = copy.copy(spec)
    spec.arg = type(spec.arg)(name=renamed[name])
    return spec

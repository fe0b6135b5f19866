"""The steps lowerings repeat, done once per worker process for the same program.

``to_edge_transform_and_lower`` re-traces its input up to three times
(``run_decompositions``) and converts it to the edge dialect before any partitioner
lowers anything. Targets of one model repeat those steps on the same program: the
Arm int8 targets (TOSA, Ethos-U55, Ethos-U85) start from one quantized program and
make the same edge program (7 of their 14 s each on mobilenet_v3_small), and every
fp32 target starts with the same functionalizing ``run_decompositions({})``.

Both steps are pure functions of what they read, so inside ``sharing()`` each result
is kept under a key of all of it: the program (``program_key``: where it came from,
its graph code, each node's metadata, its tensors and signature) and the call's
arguments (the decomposition table op by op, the edge config, the ops to preserve).
A later call with the same key gets a copy of the kept result instead. Only programs
the pipeline ``tag``\\s (the capture, a quantized program) and those made from them
take part; a program holding anything but tensors and graphs is never shared.

The loaded captures and the quantized programs are kept here too (``load``,
``keep``/``kept``), by file and by the fingerprint of what was prepared, so a second
target of the same worker reads nothing from disk.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import hashlib
from collections import Counter, OrderedDict
from collections.abc import Iterable

from ..backends.toolkit.copying import deepcopied
from ..backends.toolkit.decomposed import DECOMPOSED, decomposed, digest, structure
from ..backends.toolkit.splice import spliced
from ..core.system import thaw_before_collecting
from ..patches.executorch_patches import edge_program_wrapped
from ..patches.torch_patches import run_decompositions_wrapped
from .describe import Unstable, describe

_TAG = "_pteforge_source"
# What a worker keeps, by the size of the programs' tensors: a mobilenet_v3_small program
# is 2.5-10 MB, ~40 results of its default run; a bigger program may push the others out.
BUDGET = 512 * 2**20
_kept: OrderedDict[str, tuple] = OrderedDict()  # key -> (program, its bytes, objects the key names by identity)
stats: Counter[str] = Counter()  # "decompose hit", "edge miss", ...: what this process shared
# Provenance, for debugging: only debug handles read it, by the oldest ancestor's name.
_PROVENANCE = {"from_node", "stack_trace"}


def tag(program, source: str | None):
    """Mark ``program`` as made from ``source`` (a content key): its steps may be shared."""
    if source is not None:
        setattr(program, _TAG, source)
    return program


def source_of(program) -> str | None:
    return getattr(program, _TAG, None)


def keep(key: str, program, pinned: Iterable = ()) -> None:
    """Keep a copy of ``program`` under ``key`` (the least recently used go first)."""
    size = _size(program)
    if size > BUDGET // 2:
        return
    try:
        if program.range_constraints:  # its copies could not have values of their own
            raise _NotCopied
        copied = _copy(program, fresh=False)  # each copy handed out gets values of its own (``kept``)
    except _NotCopied:
        stats["keep refused"] += 1
        return
    if key in _kept:
        thaw_before_collecting()  # the program kept before goes
    _kept[key] = (copied, size, list(pinned))
    _kept.move_to_end(key)
    while sum(entry[1] for entry in _kept.values()) > BUDGET:
        _kept.popitem(last=False)
        thaw_before_collecting()  # a worker froze it after a job (core.system.collect_job_garbage)


def load(path, source: str):
    """``torch.export.load(path)``, tagged with ``source`` (the file's identity): read once
    per worker, a copy for each later job (0.24 s -> 0.015 s for mobilenet_v3_small)."""
    import torch

    return _shared("load", f"load {source}", source, lambda: torch.export.load(path))


def _size(program) -> int:
    import torch

    values = {**program.state_dict, **program.constants}.values()
    return sum(v.numel() * v.element_size() for v in values if isinstance(v, torch.Tensor))


def kept(key: str):
    """A copy of the program kept under ``key``, or None."""
    if key not in _kept:
        return None
    _kept.move_to_end(key)
    try:
        return _copy(_kept[key][0])
    except _NotCopied:  # symbolic values the range constraints did not show
        del _kept[key]
        thaw_before_collecting()
        return None


class _NotCopied(Exception):
    """A program ``_copy`` cannot give a state of its own: one with symbolic shapes."""


def _copy(program, fresh: bool = True, tensors: bool = True):
    """A copy sharing nothing a pass may change in place (``fresh``: nor the fake mode;
    without ``tensors``, it shares the weights and constants, as ``run_decompositions``'s
    output does its input's: a copy of a language model's 1 GB of weights for each skipped
    re-trace raised an export's peak memory by 3 GB).

    ``deepcopy`` gives each node a new metadata dict, but its values stay shared: the
    containers among them (``custom``, module stacks) are copied (``_containers``), and
    each fake tensor of ``val`` is made again in a fake mode of the copy's own. Tracing a
    program (``run_decompositions``, a quantizer's export) records guards in the shape
    environment of its values' fake mode; a copy sharing it inherited another job's
    guards, and ``run_decompositions`` then failed on code naming tensors the copy does
    not have ("name '__meta_utils_unknown_tensor35' is not defined": a transformer's
    fp32 lowering after the Arm quantizer had traced its attention mask). A program with
    symbolic shapes is not copied fresh (``_NotCopied``): its values' symbols belong to that
    environment, which a copy that is not ``fresh`` shares, as ``run_decompositions``'s
    output shares its input's.
    """
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    if program.range_constraints and fresh:
        raise _NotCopied
    values = () if tensors else (*program.state_dict.values(), *program.constants.values())
    program = deepcopied(program, {id(v): v for v in values if isinstance(v, torch.Tensor)})
    nodes = [node for module in program.graph_module.modules() if isinstance(module, torch.fx.GraphModule)
             for node in module.graph.nodes]
    if fresh:  # as torch.export.load makes one for a program it reads
        mode = FakeTensorMode(allow_fallback_kernels=False, allow_non_fake_inputs=True,
                              shape_env=ShapeEnv(assume_static_by_default=True))
        shared = Counter(_storage(t) for node in nodes for t in _fakes(node.meta.get("val")))
    for node in nodes:
        for k, v in node.meta.items():
            if k == "val" and fresh:
                node.meta[k] = _rehomed(v, mode, shared)
            elif k not in ("val", "from_node") and isinstance(v, (dict, list)):
                node.meta[k] = _containers(v)
    return program


def _fakes(value):
    from torch._subclasses.fake_tensor import FakeTensor

    if isinstance(value, FakeTensor):
        yield value
    elif type(value) in (list, tuple):
        for v in value:
            yield from _fakes(v)


def _storage(fake) -> int:
    return fake.untyped_storage()._cdata


def _rehomed(value, mode, shared: Counter):
    """``value`` (a node's ``val``) with each fake tensor made again in ``mode``. A plain
    tensor alone in its storage is made directly (9x faster than torch's converter,
    which ``mode.from_tensor`` runs); the others go through the converter, which keeps
    views sharing their base's storage."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensor

    if isinstance(value, FakeTensor):
        if any(isinstance(d, torch.SymInt) for d in (*value.shape, *value.stride())):
            raise _NotCopied
        if (type(value) is FakeTensor and value.layout == torch.strided and not value.requires_grad
                and value._base is None and value.storage_offset() == 0 and shared[_storage(value)] == 1):
            meta = torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device="meta")
            return FakeTensor(mode, meta, value.device)
        return mode.from_tensor(value, static_shapes=True)
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        raise _NotCopied
    if type(value) in (list, tuple):
        return type(value)(_rehomed(v, mode, shared) for v in value)
    return value


def _containers(value):
    """``value`` with every dict, list and tuple in it copied, and what they hold kept as it
    is: a pass changes metadata containers in place, never the nodes, operators and
    tensors they name. (``deepcopy`` would copy those too: a ``source_fn_stack`` naming a
    node of a quantized program copied that node's whole graph, and failed on a tensor
    that autograd had made.)"""
    if isinstance(value, dict):
        out = copy.copy(value)
        for k, v in value.items():
            out[k] = _containers(v)
        return out
    if type(value) in (list, tuple):
        return type(value)(_containers(v) for v in value)
    return value


def program_key(program) -> str | None:
    """A tagged program's key: its source, graph code, node metadata, tensors and
    signature; None (not shared) when untagged, or holding what is not described here:
    an attribute that is neither tensor nor graph, a tensor subclass (torchao's int4
    weights), a quantized or sparse tensor."""
    if source_of(program) is None:
        return None
    try:
        return _program_key(program)
    except _NotDescribed:
        return None


class _NotDescribed(Exception):
    pass


def _program_key(program) -> str:
    import torch

    source = source_of(program)
    assert source is not None  # program_key: a tagged program's
    h = hashlib.sha256(source.encode())
    for name, module in program.graph_module.named_modules():
        if not isinstance(module, torch.fx.GraphModule):
            raise _NotDescribed  # e.g. a lowered delegate
        h.update(f"{name}\n{module.graph.python_code('self').src}".encode())
        for node in module.graph.nodes:
            if node.op == "get_attr" and not isinstance(getattr(module, node.target, None),
                                                        (torch.Tensor, torch.fx.GraphModule)):
                raise _NotDescribed
            meta = sorted((k, _meta_repr(k, v)) for k, v in node.meta.items() if k not in _PROVENANCE)
            h.update(f"{node.name} {_ancestor(node)} {meta}\n".encode())
    h.update(f"{program.graph_signature}\n{program.range_constraints}\n".encode())
    for name, value in sorted({**program.state_dict, **program.constants}.items()):
        h.update(name.encode())
        if isinstance(value, torch.Tensor):
            if type(value) not in (torch.Tensor, torch.nn.Parameter) or value.layout != torch.strided \
                    or value.is_quantized:
                raise _NotDescribed
            t = value.detach().cpu().contiguous()
            h.update(f"{t.dtype}{tuple(t.shape)}".encode())
            h.update(t.view(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
        else:
            h.update(repr(value).encode())
    return h.hexdigest()


def _meta_repr(key: str, value) -> str:
    if key == "custom" and isinstance(value, dict):
        # Tracing through a torch._dynamo.disable'd function marks the node it came from
        # (``_torchdynamo_disable*``), in place: bookkeeping of the trace, not of the program.
        value = {k: v for k, v in value.items() if not str(k).startswith("_torchdynamo_disable")}
    if key == "val":
        return _val_repr(value)
    return repr(value)


def _val_repr(value) -> str:
    """A node's ``val`` as its fake tensors' type, shape, strides, dtype, device, layout and
    whether they require grad (all their ``repr`` says, and more), in nested tuples and
    lists as they are: ``repr`` of a fake tensor goes through torch's tensor printing,
    22 us each, 0.6 s of the default run's keys."""
    from torch._subclasses.fake_tensor import FakeTensor

    if type(value) is FakeTensor:
        return (f"FakeTensor({tuple(value.shape)}, {value.stride()}, {value.dtype}, {value.device}, "
                f"{value.layout}, {value.requires_grad})")
    if type(value) in (tuple, list):
        inner = ", ".join(_val_repr(v) for v in value)
        return f"({inner})" if type(value) is tuple else f"[{inner}]"
    return repr(value)


def _ancestor(node) -> str:
    """The name of the node ``node`` came from in the captured graph (its debug handle's group)."""
    chain = node.meta.get("from_node")
    source = chain[-1] if chain else None
    while source is not None and source.from_node:
        source = source.from_node[-1]
    return getattr(source, "name", "")


def _shared(step: str, key: str | None, source: str | None, call, pinned: Iterable = ()):
    """``call()``, or a copy of what an earlier call with ``key`` made; tagged with ``source``."""
    if key is None:
        return call()
    result = kept(key)
    stats[f"{step} {'miss' if result is None else 'hit'}"] += 1
    if result is not None:
        return tag(result, source)
    result = tag(call(), source)
    keep(key, result, pinned)
    return result


def _table_key(table, pinned: list) -> str:
    """The decomposition table, op by op: each function by its code and closure (the
    table is rebuilt for every call, with new closures), or else by its identity, kept
    alive in ``pinned`` for as long as a key names it."""
    if table is None:
        return "default"
    entries = []
    for op, fn in table.items():
        try:
            entries.append(f"{op}={describe(fn)}")
        except Unstable:
            pinned.append(fn)
            entries.append(f"{op}=object@{id(fn)}")
    return ";".join(sorted(entries))


def _names_any(program, table) -> bool:
    """Whether a node of ``program`` (or of a branch) calls an operator of ``table``."""
    import torch

    def operator(target):  # an edge operator by the ATen operator it wraps, as tables name it
        return target if isinstance(target, torch._ops.OpOverload) else getattr(target, "_op", target)

    # a symbolic size read: tracing writes one wherever a size is symbolic, whatever the table
    # says of it (the default table names ``sym_size.int``; a language model's graph reads its
    # sequence length with it)
    sizes = {torch.ops.aten.sym_size.int, torch.ops.aten.sym_stride.int, torch.ops.aten.sym_numel.default,
             torch.ops.aten.sym_storage_offset.default}
    return any(node.op == "call_function" and operator(node.target) in table and operator(node.target) not in sizes
               for module in program.graph_module.modules() if isinstance(module, torch.fx.GraphModule)
               for node in module.graph.nodes)


@contextlib.contextmanager
def sharing():
    """Inside, ``run_decompositions`` and the edge dialect conversion of tagged programs
    are shared by key (see the module's docstring; the patches: ``pteforge/patches``)."""
    with run_decompositions_wrapped(_sharing_decompositions), edge_program_wrapped(_sharing_edge_programs):
        yield


def _sharing_decompositions(run_decompositions):
    """``ExportedProgram.run_decompositions`` as ``sharing`` makes it."""

    @functools.wraps(run_decompositions)
    def decompose(self, decomp_table=None, decompose_custom_triton_ops=False):
        made = getattr(self, DECOMPOSED, None)
        if made is not None and decomp_table is not None and made == structure(self) \
                and not _names_any(self, decomp_table):
            # a table naming none of the operators of what run_decompositions made, unchanged
            # since: the same program (one with symbolic shapes keeps its shape environment, as
            # run_decompositions would: a language model's, re-traced twice a lowering for nothing)
            with contextlib.suppress(_NotCopied):
                again = decomposed(tag(_copy(self, fresh=not self.range_constraints, tensors=False), source_of(self)))
                stats["decompose again"] += 1
                return again
        key = program_key(self)
        pinned: list = []
        if key is not None:
            key = digest("decompose", key, decompose_custom_triton_ops, _table_key(decomp_table, pinned))
        return decomposed(_shared("decompose", key, source_of(self),
                                  lambda: _decompose(run_decompositions, self, decomp_table, decompose_custom_triton_ops),
                                  pinned))

    return decompose


def _decompose(run_decompositions, program, table, triton_ops):
    """``run_decompositions``; on a program it made, unchanged since, traced only where the
    table takes an op (``backends/toolkit/splice.py``): ExecuTorch decomposes every program
    it lowers with its table, less the operators the partitioner keeps whole, after
    functionalizing it (mobilenet_v3_small for Vulkan: 73 of 436 nodes taken, 0.65-0.96 s
    against 1.2-1.6 s for the whole program)."""
    if table and not triton_ops and getattr(program, DECOMPOSED, None) == structure(program):
        made = spliced(program, table, ask=False)
        if made is not None and made is not program:
            stats["decompose spliced"] += 1
            return made
    return run_decompositions(program, table, triton_ops)


def _sharing_edge_programs(generate_edge_program):
    """ExecuTorch's ``_program._generate_edge_program`` as ``sharing`` makes it."""

    @functools.wraps(generate_edge_program)
    def edge(config, program, core_aten_ops_exception_list=None, preserve_ops=None):
        key = program_key(program)
        if key is not None:
            ops = [sorted(map(str, o or [])) for o in (core_aten_ops_exception_list, preserve_ops)]
            key = digest("edge", key, repr(config), ops)
        return _shared("edge", key, source_of(program),
                       lambda: generate_edge_program(config, program, core_aten_ops_exception_list, preserve_ops))

    return edge

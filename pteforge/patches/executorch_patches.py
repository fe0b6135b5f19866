"""pteforge's patches of ExecuTorch 1.5.1 (the version uv.lock pins): its pass base's
re-traces, its partition step, its group partitioner, XNNPACK's channels-last pass and
partitioner, the edge dialect conversion, and the attributes a backend's pattern graphs
are replaced through (``replaced_in_executorch``).

Each patch checks, when applied, that ExecuTorch is ``VERSION`` (and torch is
``torch_patches.VERSION`` where it reaches into torch too) and still has what it replaces
(``pteforge.patches.require``; where a patch gives the answer of a method it was written
from, that method's source digest), and raises ``UpstreamChangedError`` otherwise; each
puts back what it replaced on exit. Every one makes the same programs and bytes.
"""

from __future__ import annotations

import collections
import contextlib
import copy
import functools
import logging
import operator
from collections import Counter
from typing import Any

import torch

from . import replaced, require, source_changed, source_digest
from . import torch_patches

LIBRARY, VERSION = "executorch", "1.5.1"
_MODULE = __name__.rpartition(".")[2]


def check(patch: str, *targets: tuple) -> None:
    """Raise ``UpstreamChangedError`` unless ExecuTorch is ``VERSION`` and has each ``(object, attribute)``."""
    require(patch, LIBRARY, VERSION, _MODULE, *targets)


@contextlib.contextmanager
def replaced_in_executorch(obj, attr: str, value, patch: str | None = None):
    """``obj.attr`` (an ExecuTorch class, module or object) is ``value`` inside, after
    checking ExecuTorch's version and that ``attr`` exists (``patch`` names the patch in
    the error; by default, what it replaces). How a backend's pattern graphs are made only
    where they can match (``backends/toolkit/patterns.py``, ``backends/vulkan.py``):
    XNNPACK's passes' ``call``, their pattern modules' getters, Core ML's quantizer's
    ``_get_aten_graph_module``, Vulkan's fusable-pattern functions."""
    name = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", type(obj).__name__)
    check(patch or f"replacing {name}.{attr}", (obj, attr))
    with replaced(obj, attr, value):
        yield


@contextlib.contextmanager
def edge_program_wrapped(wrap):
    """Inside, ExecuTorch's edge dialect conversion (``_program._generate_edge_program``) is
    ``wrap(original)``: what ``stages/memo.py``'s ``sharing`` makes of it (the Arm int8
    targets of one model make the same edge program: 7 of their 14 s each on
    mobilenet_v3_small, done once)."""
    from executorch.exir.program import _program

    check("edge_program_wrapped", (_program, "_generate_edge_program"))
    with replaced(_program, "_generate_edge_program", wrap(_program._generate_edge_program)):
        yield


retraces: Counter[str] = Counter()  # what ``retrace_only_what_changed`` saw in this process: "run", "skipped"


@contextlib.contextmanager
def retrace_only_what_changed():
    """An ExecuTorch pass that edits the graph in place and then re-traces all of it (``super().call``:
    every node run again on fake values) skips the re-trace when its edits changed nothing.

    Each of XNNPACK's 17 passes runs on each of its partitions (a language model: 128), and
    most find nothing to do (no batch norm, upsampling, PReLU, 1-D convolution, concatenation
    in a decoder layer): their re-traces took most of XNNPACK's preprocessing, a third of a
    4-layer Gemma 3's 8da4w lowering. The re-trace of an unchanged graph makes the same
    graph. A pass whose own work is its ``call`` is skipped so; one that overrides what the
    re-trace runs (``call_operator``, ``placeholder``, ...) does its work in the re-trace, and
    is skipped only when it is one of ExecuTorch's whose rewrite is known here
    (``_RETRACE_FOR``) and the program has none of the operators it rewrites: constant
    folding and dim-order reverting on each of XNNPACK's 128 partitions of Gemma 3 270M
    (~3.8 s each), the view rewrite of the edge-dialect conversion (~4.4 s)."""
    from executorch.exir.pass_base import ExportPass, PassResult, _ExportPassBase

    check("retrace_only_what_changed", (_ExportPassBase, "call"), (_ExportPassBase, "__call__"))
    hooks = [name for base in (_ExportPassBase, ExportPass) for name, value in vars(base).items()
             if callable(value) and name not in ("call", "__init__", "__call__") and not name.startswith("__")]
    call, dunder = _ExportPassBase.call, _ExportPassBase.__call__

    def enter(self, graph_module):
        outer = self.__dict__.get("_pteforge_before")  # a pass that runs itself on a branch
        self._pteforge_before = _graph_text(graph_module)
        try:
            return dunder(self, graph_module)
        finally:
            self._pteforge_before = outer

    def retrace(self, graph_module):
        cls = type(self)
        own = [name for name in hooks if getattr(cls, name, None) is not getattr(ExportPass, name, None)]
        if (cls.call is not retrace and getattr(self, "_pteforge_before", None) is not None and not own
                and self._pteforge_before == _graph_text(graph_module)) \
                or (cls.call is retrace and own == ["call_operator"] and _leaves_alone(cls, graph_module)):
            retraces["skipped"] += 1
            return PassResult(graph_module, False)
        retraces["run"] += 1
        return call(self, graph_module)

    with replaced(_ExportPassBase, "__call__", enter), replaced(_ExportPassBase, "call", retrace):
        yield


values: Counter[str] = Counter()  # what ``retraces_reuse_values`` did in this process: "reused", "computed", "kept"


@contextlib.contextmanager
def retraces_reuse_values():
    """A re-trace runs each operator on fake values again only when it reads other values
    than the last run of that operator did.

    Every ExecuTorch pass that re-traces the program (``ExportPass``: scalars to tensors,
    views to copies, mixed-type operators, dim order, symbolic sizes to tensors, ...) runs
    every node on fake tensors anew, and after partitioning each delegate's whole graph
    again. The values it reads are the same objects from one re-trace to the next (the
    program's inputs are kept, and each output is the value made for it), so an operator
    called with the same inputs (the same objects; scalars equal and of the same type) gives
    back the value it gave before: its output depends on nothing else. What a pass rewrote
    reads new values, and is run. Operators that change an input in place are always run.

    A rewritten node whose new value describes the same tensor as its old one (the same
    sizes, strides, offset, dtype, device; neither a view nor a known constant) keeps the
    old value, so what reads it is not run again for it: scalars made tensors, operators
    made edge operators change nothing the nodes after them read. Two nodes making the same
    call in one graph get a value each.

    Gemma 3 270M's 8da4w program is re-traced 8 times, ~4 s each; with this, one re-trace
    runs every operator, the others 0-400 of ~2,700: its lowering 81.7 -> 62.4 s and
    serialization 10.7 -> 6.9 s (run alone, in process, AMD EPYC), the same bytes.
    """
    from executorch.exir.pass_base import _ExportPassBase
    from torch._export.pass_base import _ExportPassBaseDeprecatedDoNotUse

    bases = (_ExportPassBase, _ExportPassBaseDeprecatedDoNotUse)
    for base, check_library in zip(bases, (check, torch_patches.check)):
        check_library("retraces_reuse_values", (base, "_fx"), (base, "call_submodule"), (base, "ExportInterpreter"),
                      (base.ExportInterpreter, "run_node"))
    remembered = _Remembered()
    with contextlib.ExitStack() as stack:
        for base in bases:  # each method as the class itself holds it
            stack.enter_context(replaced(base, "_fx", remembered.fx(base.__dict__["_fx"])))
            stack.enter_context(replaced(base.ExportInterpreter, "run_node",
                                         remembered.run_node(base.ExportInterpreter.__dict__["run_node"])))
            stack.enter_context(replaced(base, "call_submodule",
                                         remembered.call_submodule(base.__dict__["call_submodule"])))
        yield


# ExecuTorch's _ExportPassBase._fx, whose steps ``traced_arguments_read_directly`` takes
_FX_SOURCE = "d21aacbb"


@contextlib.contextmanager
def traced_arguments_read_directly():
    """Each node an ExecuTorch pass re-traces reads its arguments' values and proxies, and
    makes its node's arguments, without walking them with torch's generic tree functions.

    ``_ExportPassBase._fx`` maps every node's arguments twice with ``pytree.tree_map_only``
    (their fake values, then their proxies), and the tracer turns each argument into the
    node's (``create_arg``) through five classes' type checks, down to torch's own table
    of plain types: 11 % of the default run's target-job time, most of it in the Arm
    backends' ~145 re-traces of a program. Inside, tuples, lists and dicts of values are
    mapped directly, and plain values (numbers, strings, dtypes, devices, operators,
    proxies) are taken as torch's base tracer takes them; anything else goes the way it
    went. Used only while ExecuTorch's ``_fx`` is the one it was written from (its source
    digest); otherwise ``UpstreamChangedError``. The same programs and bytes (tested)."""
    from executorch.exir.pass_base import ExportPass, ProxyValue, _ExportPassBase
    from torch.fx import proxy

    patch = "traced_arguments_read_directly"
    check(patch, (_ExportPassBase, "_fx"), (_ExportPassBase.ExportTracer, "create_arg"),
          (ExportPass.ExportTracer, "create_arg"), (proxy, "_create_arg_bypass"))
    known = source_digest(_ExportPassBase.__dict__["_fx"])
    if known != _FX_SOURCE:
        raise source_changed(patch, LIBRARY, VERSION, _MODULE, "_ExportPassBase._fx", (_FX_SOURCE, known))
    taken, mapped = _argument_readers(ProxyValue)

    def fx(self, kind, target, args, kwargs, meta):
        res_data = getattr(self.interpreter, kind)(target, mapped(args, _data), mapped(kwargs, _data))
        name = None
        if isinstance(target, torch._ops.OpOverload):
            name = self.tracer.graph._target_to_str(target.overloadpacket.__name__)
        res_proxy = self.tracer.create_proxy(kind, target, mapped(args, _proxy), mapped(kwargs, _proxy), name=name)
        res_proxy.node.meta.update(meta.data)
        self.tracer.set_metadata(res_proxy.node, res_data)
        return ProxyValue(res_data, res_proxy)

    tracers = (_ExportPassBase.ExportTracer, ExportPass.ExportTracer)
    with contextlib.ExitStack() as stack:
        stack.enter_context(replaced(_ExportPassBase, "_fx", fx))
        for tracer in tracers:
            stack.enter_context(replaced(tracer, "create_arg", _taking(taken, tracer.__dict__["create_arg"])))
        yield


def _argument_readers(value_type):
    """``traced_arguments_read_directly``'s readers: torch's base tracer's own table of what
    it takes without a check (containers: their items through ``create_arg``), less the
    tensors and symbolic values the tracers above it handle; and ``mapped(tree, pick)``,
    ``pytree.tree_map_only(value_type, pick, tree)`` without the tree walk for the
    containers and plain values a node's arguments are made of."""
    from torch._subclasses.fake_tensor import FakeTensor
    from torch.fx import proxy
    from torch.fx.immutable_collections import immutable_dict, immutable_list
    from torch.utils import _pytree as pytree

    taken = {kind: take for kind, take in proxy._create_arg_bypass.items()
             if kind not in (torch.Tensor, torch.SymInt, torch.SymBool, torch.SymFloat)}
    leaves = {kind for kind in taken if kind is not proxy.Proxy and kind not in (
        tuple, list, dict, immutable_list, immutable_dict)} | {torch.Tensor, FakeTensor}

    def mapped(tree, pick):
        kind = type(tree)
        if kind is value_type:
            return pick(tree)
        if kind is tuple or kind is list or kind is immutable_list:
            return kind([mapped(x, pick) for x in tree])
        if kind is dict or kind is immutable_dict:
            return kind({k: mapped(v, pick) for k, v in tree.items()})
        if kind in leaves:
            return tree
        return pytree.tree_map_only(value_type, pick, tree)

    return taken, mapped


def _taking(taken: dict, create_arg):
    """A tracer's ``create_arg`` that takes what ``taken`` names as torch's base tracer does."""
    @functools.wraps(create_arg)
    def create(self, a):
        take = taken.get(type(a))
        return take(self, a) if take is not None else create_arg(self, a)
    return create


def _data(value):
    return value.data


def _proxy(value):
    return value.proxy


class _Remembered:
    """What ``retraces_reuse_values`` remembers, and the pass-base methods it wraps with it."""

    def __init__(self):
        self.memo: dict = {}  # (operator, what it reads) -> (value, the objects read by identity)
        self.made: dict = {}  # id(value) -> (its key in memo, the value): its id not reused while here
        self.handed: list[set] = []  # for each graph being re-traced: the values its nodes were given

    def call_function(self, interpreter, target, args, kwargs, mode):
        """``mode``: the fake mode the pass runs in. It is part of the key: a call reading
        no tensor (``full([1, 4, 4], -inf)``) would otherwise get a value made in another
        program's fake mode, which torch then refuses to mix with this one's."""
        key, held = _call_key(target, args, kwargs)
        if key is not None:
            key = (id(mode), key)
            held.append(mode)
        here = self.handed[-1] if self.handed else set()
        if key is not None and key in self.memo and id(self.memo[key][0]) not in here:
            values["reused"] += 1
            value = self.memo[key][0]
        else:  # not called so before, or its value given to another node of this graph already
            value = interpreter.call_function(target, args, kwargs)
            if key is None:
                return value
            if key not in self.memo:  # held: no object read by identity is freed and its id reused
                self.memo[key] = (value, held)
            values["computed"] += 1
        self.made[id(value)] = (key, value)
        if not isinstance(value, (bool, int, float, type(None))):
            here.add(id(value))
        return value

    def keep(self, n, result, last, graph) -> None:
        """A rewritten node keeps its old value where the new one describes the same tensor."""
        old = n.meta.get("val") if n.op == "call_function" else None
        new = getattr(result, "data", None)
        if old is None or new is None or new is old or not _equivalent(new, old) \
                or not _made_after(result.node, last, graph):
            return
        result.data = result.node.meta["val"] = old
        key, _ = self.made.pop(id(new), (None, None))
        if key is not None and self.memo[key][0] is new:  # the next call of it gives the value kept
            self.memo[key], self.made[id(old)] = (old, self.memo[key][1]), (key, old)
        if self.handed:
            self.handed[-1].add(id(old))
        values["kept"] += 1

    def fx(self, fx):
        remembered = self

        class Interpreter:
            def __init__(self, interpreter, mode):
                self.interpreter, self.mode = interpreter, mode

            def call_function(self, target, args, kwargs):
                return remembered.call_function(self.interpreter, target, args, kwargs, self.mode)

        @functools.wraps(fx)
        def remembering(self, kind, target, args, kwargs, meta):
            if kind != "call_function":
                return fx(self, kind, target, args, kwargs, meta)
            interpreter = self.interpreter
            self.interpreter = Interpreter(interpreter, getattr(self, "fake_tensor_mode", None))
            try:
                return fx(self, kind, target, args, kwargs, meta)
            finally:
                self.interpreter = interpreter
        return remembering

    def run_node(self, run_node):
        remembered = self

        @functools.wraps(run_node)
        def run(self, n):
            graph = self.callback.tracer.graph
            last = graph._root.prev  # the new graph's last node before this one's
            result = run_node(self, n)
            remembered.keep(n, result, last, graph)
            return result
        return run

    def call_submodule(self, call_submodule):
        handed = self.handed

        @functools.wraps(call_submodule)
        def retrace(self, graph_module, inputs):
            handed.append(set())  # two nodes that make the same call get values of their own
            try:
                return call_submodule(self, graph_module, inputs)
            finally:
                handed.pop()
        return retrace


def _made_after(node, last, graph) -> bool:
    """Whether ``node`` is one of the nodes added to ``graph`` after ``last``."""
    walk = graph._root.prev
    while walk is not last and walk is not graph._root:
        if walk is node:
            return True
        walk = walk.prev
    return False


def _equivalent(new, old) -> bool:
    """Whether two fake values describe the same tensors (or the same symbolic sizes):
    structurally, without asking the shape environment (no guard is made)."""
    from torch._subclasses.fake_tensor import FakeTensor

    if isinstance(new, (tuple, list)):
        return type(new) is type(old) and len(new) == len(old) and all(map(_equivalent, new, old))
    if isinstance(new, torch.SymInt):
        return isinstance(old, torch.SymInt) and new.node.expr == old.node.expr
    if not isinstance(new, FakeTensor) or not isinstance(old, FakeTensor):
        return False
    return (new.fake_mode is old.fake_mode and new.dtype == old.dtype and new.device == old.device
            and new.layout == old.layout == torch.strided and new.requires_grad == old.requires_grad
            and not new._is_view() and not old._is_view()
            and getattr(new, "constant", None) is None and getattr(old, "constant", None) is None
            and _same_sizes(new.shape, old.shape) and _same_sizes(new.stride(), old.stride())
            and _same_sizes((new.storage_offset(),), (old.storage_offset(),)))


def _same_sizes(a, b) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if isinstance(x, torch.SymInt) or isinstance(y, torch.SymInt):
            if not (isinstance(x, torch.SymInt) and isinstance(y, torch.SymInt) and x.node.expr == y.node.expr):
                return False
        elif x != y:
            return False
    return True


def _call_key(target, args, kwargs):
    """A key of an operator call: what it runs and everything it reads, each object by
    identity and each scalar by its type and text (``-0.0`` is not ``0.0``; a list and a
    tuple alike, as an operator reads them); and the objects read by identity.
    ``(None, ...)`` for an operator that changes an input in place."""
    schema = getattr(target, "_schema", None)
    if schema is not None and schema.is_mutable:
        return None, ()
    held: list = []
    op = getattr(target, "_op", None) if type(target).__name__ == "EdgeOpOverload" else None
    # an edge operator runs its ATen operator (``EdgeOpOverload.__call__``): the same call
    return (op or target, _read(args, held), _read(kwargs, held)), held


def _read(value, held: list):
    if isinstance(value, (list, tuple)):
        return tuple(_read(v, held) for v in value)
    if isinstance(value, dict):
        return ("{}", *((k, _read(v, held)) for k, v in value.items()))
    if isinstance(value, (bool, int, float, complex, str, bytes, type(None), torch.dtype, torch.device, torch.layout,
                          torch.memory_format)):
        return type(value), repr(value)
    held.append(value)
    return id(value)


@contextlib.contextmanager
def partitions_without_debug_text():
    """ExecuTorch's partition step writes no text of the whole program for a debug log that is off.

    ``_create_partitions_in_graph_module`` formats ``f"Partitioned graph module: {gm}"`` for
    ``logging.debug`` after each partition it makes into a submodule: the text of the whole
    program (its Python code, written anew as the program changed), made whether the debug
    level is on or not, then thrown away. A language model's 8da4w program has 128
    partitions: half of the 21 s that step took for Gemma 3 270M. Inside, while the root
    logger does not write debug lines, the program's text is a placeholder line for that
    call; the partitions are made as before."""
    from executorch.exir.backend import backend_api

    check("partitions_without_debug_text", (backend_api, "_create_partitions_in_graph_module"))
    create = backend_api._create_partitions_in_graph_module

    def unprinted(graph_module, *args, **kwargs):
        own: Any = type(graph_module)  # torch.fx gives each GraphModule a class of its own
        if logging.getLogger().isEnabledFor(logging.DEBUG) or "__str__" in vars(own):
            return create(graph_module, *args, **kwargs)
        own.__str__ = lambda self: f"<{len(self.graph.nodes)} nodes; text written with the debug level on>"
        try:
            return create(graph_module, *args, **kwargs)
        finally:
            del own.__str__

    with replaced(backend_api, "_create_partitions_in_graph_module", unprinted):
        yield


# ExecuTorch's GroupBasedPartitioner._can_merge_partitions, whose answer ``_can_merge`` gives
_MERGE_SOURCE = "08428a6b"


@contextlib.contextmanager
def partitions_merged_by_set_checks():
    """ExecuTorch's group partitioner asks whether two partitions may merge with a set
    intersection instead of a loop in Python.

    For each pair of partitions it tries (O(n²) in the program's partitions), it loops in
    Python over every node downstream of each node that uses them, asking whether it is in
    either: 132 million steps for Gemma 3 270M's 8da4w program, ~8 s. Inside,
    :func:`_can_merge` gives the same answer from ``set.isdisjoint``. Used only while
    ExecuTorch's method is the one it was written from (its source's digest); otherwise
    ``UpstreamChangedError``."""
    from executorch.exir.backend.canonical_partitioners.group_partitioner import GroupBasedPartitioner

    patch = "partitions_merged_by_set_checks"
    check(patch, (GroupBasedPartitioner, "_can_merge_partitions"))
    known = source_digest(GroupBasedPartitioner.__dict__["_can_merge_partitions"])
    if known != _MERGE_SOURCE:
        raise source_changed(patch, LIBRARY, VERSION, _MODULE, "GroupBasedPartitioner._can_merge_partitions",
                             (_MERGE_SOURCE, known))
    with replaced(GroupBasedPartitioner, "_can_merge_partitions", _can_merge):
        yield


def _can_merge(self, p1, p2, partitions_by_id) -> bool:
    """``GroupBasedPartitioner._can_merge_partitions``: no node that uses either partition
    from outside leads back into them, and torch's own check of the merged nodes."""
    from torch.fx.passes.utils.fuser_utils import validate_partition

    combined = set(partitions_by_id[p1].nodes.keys()).union(set(partitions_by_id[p2].nodes.keys()))
    for node in combined:
        for user in node.users:
            if user not in combined and not combined.isdisjoint(self.dependency_viewer.downstreams_of(user)):
                return False
    return validate_partition(list(combined))


# torch.fx.passes.tools_common.legalize_graph's source, whose order ``sort_in_place`` gives
_LEGALIZE_SOURCE = "6dc8094b"


@contextlib.contextmanager
def partitions_sorted_in_place():
    """ExecuTorch's partition step sorts the program where it is, instead of into a copy.

    After it makes each partition into a submodule, ExecuTorch sorts the whole program
    topologically again (torch's ``legalize_graph``): each node copied into a new graph, in
    the order of a queue. A language model's 8da4w program has 128 partitions and some
    7,000 nodes: 900,000 node copies, most of the ~12 s that step still took for Gemma 3
    270M. Inside, :func:`sort_in_place` gives the program the order, names, users and node
    tables the copy would have, moving its nodes instead. Used only while torch's function
    is the one it was written from (its source's digest), and the one ExecuTorch calls;
    otherwise ``UpstreamChangedError``."""
    from executorch.exir import lowered_backend_module
    from torch.fx.passes import tools_common

    patch = "partitions_sorted_in_place"
    check(patch, (lowered_backend_module, "legalize_graph"))
    torch_patches.check(patch, (tools_common, "legalize_graph"))
    known = source_digest(tools_common.legalize_graph)
    if known != _LEGALIZE_SOURCE:
        raise source_changed(patch, "torch", torch_patches.VERSION, _MODULE,
                             "torch.fx.passes.tools_common.legalize_graph", (_LEGALIZE_SOURCE, known))
    if lowered_backend_module.legalize_graph is not tools_common.legalize_graph:
        raise source_changed(patch, LIBRARY, VERSION, _MODULE, "lowered_backend_module.legalize_graph",
                             ("torch's legalize_graph", "another function"))
    with replaced(lowered_backend_module, "legalize_graph", sort_in_place):
        yield


def sort_in_place(gm):
    """``torch.fx.passes.tools_common.legalize_graph`` without copying the graph: its queue
    (what has all its inputs, in the order the graph and each node's users give; runtime
    assertions first), and then what its copy would hold: each node's users in the new
    order, a shallow copy of its metadata, the names in a fresh namespace, the lookup
    table of ``find_nodes`` in the new order, and no tracer of the graph's."""
    from torch.fx.graph import _FindNodesLookupTable, _Namespace

    first = {operator.add, operator.mul, operator.sub, operator.floordiv, operator.truediv, operator.mod,
             operator.le, operator.lt, operator.ge, operator.gt, operator.eq, operator.ne,
             torch.ops.aten.sym_constrain_range.default, torch.ops.aten.sym_constrain_range_for_size.default,
             torch.ops.aten._assert_async.msg, torch.ops.aten.scalar_tensor.default, torch.ops.aten._assert_scalar.default}
    graph = gm.graph
    nodes = list(graph.nodes)
    waiting = dict.fromkeys(nodes, 0)
    for node in nodes:
        for user in node.users:
            waiting[user] += 1
    queue = collections.deque(node for node in nodes if waiting[node] == 0)
    order = []
    while queue:
        node = queue.popleft()
        order.append(node)
        for user in node.users:
            waiting[user] -= 1
            if waiting[user] == 0:
                if user.op == "call_function" and user.target in first:
                    queue.appendleft(user)
                else:
                    queue.append(user)
    if len(order) < len(nodes):
        raise RuntimeError(f"Input graph has cycles, unable to add {[n for n in waiting if waiting[n] != 0]}")
    names = _Namespace()
    if any(names.create_name(node.name, None) != node.name for node in order):
        from torch.fx.passes.tools_common import legalize_graph

        return legalize_graph(gm)  # a name the copy would change: the copy itself
    place, table = {node: i for i, node in enumerate(order)}, _FindNodesLookupTable()
    for node in order:
        graph._root._prepend(node)  # moved to the end: after all, the nodes stand in ``order``
        node.users = dict.fromkeys(sorted(node.users, key=place.__getitem__))
        node.meta = copy.copy(node.meta)
        table.insert(node)
    graph._graph_namespace, graph._find_nodes_lookup_table = names, table
    graph._tracer_cls = graph._tracer_extras = None
    graph._co_fields = {}
    gm.graph = graph  # as legalize_graph's ``gm.graph = new_graph``: the code is made again
    return gm


def _leaves_alone(cls, graph_module) -> bool:
    """Whether a pass whose only work is its ``call_operator`` (one of ExecuTorch's whose
    rewrite is known here) would give every operator of ``graph_module`` back as it is."""
    which = _RETRACE_FOR.get(f"{cls.__module__}.{cls.__qualname__}")
    if which is None:
        return False
    ops = [node for module in graph_module.modules() if isinstance(module, torch.fx.GraphModule)
           for node in module.graph.nodes if node.op == "call_function"]
    return not any(which(node) for node in ops)


def _dim_order_op(node) -> bool:
    from executorch.exir.passes.dim_order_ops_registry import MemoryFormatOpsMap

    return node.target in MemoryFormatOpsMap


def _constant_inputs(node) -> bool:
    """Every tensor it reads is a constant of the module (or it reads none): ``ConstPropPass``
    computes it, whatever it is (and whatever ``propogate_quant`` says)."""
    from torch.fx.node import map_arg

    read: list = []
    map_arg((node.args, node.kwargs), read.append)
    return all(n.op == "get_attr" for n in read)


_RETRACE_FOR = {  # a pass that re-traces the graph to rewrite some operators: which ones
    # dim-order copies back to memory formats (XNNPACK's preprocessing, each partition)
    "executorch.exir.passes.memory_format_ops_pass.DimOrderOpsRevertPass": _dim_order_op,
    # an operator of constants alone folded to its value (XNNPACK's preprocessing, each partition)
    "executorch.exir.passes.const_prop_pass.ConstPropPass": _constant_inputs,
    # views to their copying forms (the edge dialect conversion, once a lowering)
    "executorch.exir.passes.replace_broken_ops_with_function_ops_pass.ReplaceBrokenOpsWithFunctionalOpsPass":
        lambda node: bool(getattr(node.target, "is_view", False)),
}


def _graph_text(graph_module) -> str:
    """Every node of the module and its branches: name, kind, operator, arguments."""
    return "\n".join(f"{node.name}={node.op}:{node.target}{node.args}{node.kwargs}"
                     for module in graph_module.modules() if isinstance(module, torch.fx.GraphModule)
                     for node in module.graph.nodes)




@contextlib.contextmanager
def softmax_reads_nchw():
    """Inside, XNNPACK's channels-last pass gives softmax its input in NCHW order.

    ExecuTorch 1.5.1's pass runs a convolution's output on in NHWC memory through the
    operators it takes for layout-agnostic, and counts softmax among them: after
    ``conv -> permute(0, 2, 3, 1)`` the softmax over the last dim reduced over another
    dim in memory (max abs error 0.24 against eager; a segmentation head's class
    probabilities, and pteforge's own rewrite of ``softmax(dim=1)`` into a last-dim
    softmax between permutes, which XNNPACK then takes). A softmax is not agnostic: it
    reads its input as it is laid out logically, like the operators listed as needing
    NCHW (the pass converts a channels-last input back first)."""
    from executorch.backends.xnnpack._passes.channels_last_tagged_reshape_pass import ChannelsLastTaggedReshapePass
    from executorch.exir.dialects._ops import ops as exir_ops

    check("softmax_reads_nchw", (ChannelsLastTaggedReshapePass, "memory_sensitive_ops_nchw"))
    listed = ChannelsLastTaggedReshapePass.memory_sensitive_ops_nchw
    with replaced(ChannelsLastTaggedReshapePass, "memory_sensitive_ops_nchw",
                  {*listed, exir_ops.edge.aten._softmax.default}):
        yield


@contextlib.contextmanager
def one_value_constants_take_any_layout():
    """Inside, XNNPACK's channels-last pass lets a one-value tensor meet a channels-last
    tensor as it is.

    ExecuTorch 1.5.1's pass gives every input of a layout-agnostic operator (add, mul, div,
    ...) one memory layout; a constant it cannot lay out as NHWC (any that is not 4-D) sends
    the operator, and the convolution's output with it, back to NCHW and forward again. A
    graph made by another framework writes its scalars as constant tensors (PaddlePaddle's
    hardswish ``x * clip(x + 3, 0, 6) / 6``, ``()``-shaped): each activation then cost two
    transposes (PP-LCNet's page-orientation classifier: a third of its time, PicoDet's
    document layout: half). A constant of one value reads the same in any layout and
    broadcasts as it is, so it is left untouched and the operator stays NHWC."""
    from executorch.backends.xnnpack._passes.channels_last_tagged_reshape_pass import ChannelsLastTaggedReshapePass

    cls = ChannelsLastTaggedReshapePass
    check("one_value_constants_take_any_layout", (cls, "can_be_converted_to_nhwc"), (cls, "input_to_nhwc"),
          (cls, "input_to_nchw"))
    can, to_nhwc, to_nchw = cls.can_be_converted_to_nhwc, cls.input_to_nhwc, cls.input_to_nchw

    def one_value(node) -> bool:
        # any one-value tensor: XNNPACK's partitioner leaves a binary operator's constant
        # out of the partition, so the delegate takes it as an input, not as a parameter
        val = node.meta.get("val")
        return isinstance(val, torch.Tensor) and val.numel() == 1

    def can_be_converted_to_nhwc(self, node):
        return one_value(node) or can(self, node)

    def input_to_nhwc(self, graph_module, input_node, target_node):
        if not one_value(input_node):
            to_nhwc(self, graph_module, input_node, target_node)

    def input_to_nchw(self, graph_module, input_node, target_node):
        if not one_value(input_node):
            to_nchw(self, graph_module, input_node, target_node)

    with replaced(cls, "can_be_converted_to_nhwc", can_be_converted_to_nhwc), \
            replaced(cls, "input_to_nhwc", input_to_nhwc), replaced(cls, "input_to_nchw", input_to_nchw):
        yield


@contextlib.contextmanager
def zero_dim_inputs_read_as_nchw():
    """Inside, XNNPACK's channels-last pass reads a quantized 0-dim input of the delegate
    (``x + y.mean()``, the mean left outside) as NCHW. It took a quantized input's layout
    from its value's first element (``val[0]``): of a 0-dim one that raised IndexError,
    and the program cut around the crash computed wrong values. A 0-dim value has no
    layout, and the operator reading it then takes the other inputs' (with
    ``one_value_constants_take_any_layout``)."""
    from executorch.backends.xnnpack._passes.channels_last_tagged_reshape_pass import ChannelsLastTaggedReshapePass
    from executorch.backends.xnnpack.utils.quant_utils import is_dequant

    cls = ChannelsLastTaggedReshapePass
    check("zero_dim_inputs_read_as_nchw", (cls, "is_nhwc_node"), (cls, "is_nchw_node"))
    is_nhwc, is_nchw = cls.is_nhwc_node, cls.is_nchw_node

    def zero_dim_input(node) -> bool:
        quantized = node.args[0] if is_dequant(node) and node.args else None
        source = quantized.args[0] if isinstance(quantized, torch.fx.Node) and quantized.args else None
        return isinstance(source, torch.fx.Node) and source.op == "placeholder" \
            and isinstance(source.meta.get("val"), torch.Tensor) and source.meta["val"].dim() == 0

    def is_nhwc_node(node):
        return False if zero_dim_input(node) else is_nhwc(node)

    def is_nchw_node(node):
        return True if zero_dim_input(node) else is_nchw(node)

    with replaced(cls, "is_nhwc_node", staticmethod(is_nhwc_node)), \
            replaced(cls, "is_nchw_node", staticmethod(is_nchw_node)):
        yield


def _views_a_written_buffer(node, ep) -> bool:
    """Whether ``node`` (a ``view_copy``) views, through views only, a buffer the program
    writes (a KV cache), as it is after a custom operator wrote it in place."""
    from torch._higher_order_ops.auto_functionalize import auto_functionalized, auto_functionalized_v2

    while node.op == "call_function" and "view_copy" in str(node.target):
        node = node.args[0]
    if node.op == "placeholder":
        return ep.graph_signature.inputs_to_buffers.get(node.name) in ep.graph_signature.buffers_to_mutate.values()
    return node.op == "call_function" and node.target is operator.getitem \
        and getattr(node.args[0], "target", None) in (auto_functionalized, auto_functionalized_v2)


@contextlib.contextmanager
def views_of_written_buffers_outside():
    """Inside, XNNPACK's partitioner leaves out a reshape of a buffer the program writes (a KV
    cache): outside XNNPACK, ExecuTorch makes it a view of the same memory; inside, XNNPACK's
    static reshape copies it.

    A language model's attention read its cache through reshapes ([B, max, H, D] to
    [B*H, max, D]): Gemma 3 270M copied 14 MB a decoded token that way (four copies of
    192 x 256 a layer, and a transpose that then kept XNNPACK from reading the keys
    transposed in its product). Its 8da4w program decodes 1.15x faster without them."""
    from executorch.backends.xnnpack.partition.config.generic_node_configs import ViewCopyConfig

    check("views_of_written_buffers_outside", (ViewCopyConfig, "check_constraints"))
    original = ViewCopyConfig.check_constraints

    def check_constraints(self, node, ep):
        return not _views_a_written_buffer(node, ep) and original(self, node, ep)

    with replaced(ViewCopyConfig, "check_constraints", check_constraints):
        yield


@contextlib.contextmanager
def matmuls_of_constants_left_alone():
    """Inside, ExecuTorch's Cortex-M ``MatmulToBmmPass`` leaves a matmul that reads a constant
    (a model's own weight, ``x @ self.w``; an ONNX file's MatMul by an initializer) as it is.

    The pass asked both arguments for their fake values (``to_tensor``), which a constant,
    a real tensor in the module the quantizer annotates, has not: every such model failed to
    quantize ("'Parameter' object has no attribute 'to_tensor'"). The pass rewrites only a
    matmul of two 3-D or 4-D values (to ``bmm``, which the quantizer takes); a matmul of a
    constant stays one, as a 2-D one always did."""
    import torch
    from executorch.backends.cortex_m.passes.matmul_to_bmm_pass import MatmulToBmmPass
    from executorch.exir.pass_base import ExportPass, ProxyValue

    check("matmuls_of_constants_left_alone", (MatmulToBmmPass, "call_operator"))
    original = MatmulToBmmPass.call_operator

    def call_operator(self, op, args, kwargs, meta):
        if op == torch.ops.aten.matmul.default and not all(isinstance(a, ProxyValue) for a in args[:2]):
            return ExportPass.call_operator(self, op, args, kwargs, meta)
        return original(self, op, args, kwargs, meta)

    with replaced(MatmulToBmmPass, "call_operator", call_operator):
        yield


@contextlib.contextmanager
def fused_activations_clamp_in_tosa():
    """Inside, Arm's ``RewriteConvPass`` ends an int8 convolution whose output range is
    narrower than int8's with a TOSA ``CLAMP`` to that range.

    ExecuTorch 1.5.1's ``FuseQuantizedActivationPass`` removes a ReLU after a convolution
    (or linear) and keeps its effect by raising the quantize node's ``qmin`` to its zero
    point; the convolution's output ``RESCALE`` then saturates to the int8 range alone and
    ``qmin`` is lost. Where the ReLU's output shares its quantization with other values (a
    concatenation of a ReLU branch and a plain convolution's, as in ShuffleNet V2's blocks),
    its zero point is above -128, and negative values went on unclamped: such a block's TOSA
    and Ethos-U programs were 0.9 dB from eager where its quantized program in PyTorch is
    36.4 dB (``tests/tiny_models.py:relu_beside_conv``; a U-Net's skip join: 8.3 dB against
    36.7 dB, ``unetish``; after an upsample: 5.0 against 35.5 dB). The clamp gives the ReLU back: the
    programs are then at 36.4 dB too. Where the range is the type's whole, nothing is added
    (mobilenet_v3_small's Arm programs: the same bytes)."""
    from executorch.backends.arm._passes.arm_pass_utils import create_node
    from executorch.backends.arm._passes.rewrite_conv_pass import RewriteConvPass
    from executorch.exir.dialects._ops import ops as exir_ops

    check("fused_activations_clamp_in_tosa", (RewriteConvPass, "insert_output_rescale"),
          (RewriteConvPass, "_get_effective_output_qparams"))
    original = RewriteConvPass.insert_output_rescale

    def insert_output_rescale(self, graph_module, source_node, conv_node, conv_fake_tensor):
        rescale, fake = original(self, graph_module, source_node, conv_node, conv_fake_tensor)
        qparams = self._get_effective_output_qparams(source_node)[0]
        whole = torch.iinfo(torch.int8)  # int8 only: int16 activations' rescales are rewired after this
        if qparams.dtype != torch.int8 or (qparams.qmin <= whole.min and qparams.qmax >= whole.max):
            return rescale, fake
        clamp = exir_ops.backend.tosa.CLAMP.default
        with graph_module.graph.inserting_after(rescale):
            node = create_node(graph=graph_module.graph, op_target=clamp, args=(rescale, qparams.qmin, qparams.qmax),
                               from_node=source_node)
        node.meta["val"] = clamp(fake, qparams.qmin, qparams.qmax)
        return node, node.meta["val"]

    with replaced(RewriteConvPass, "insert_output_rescale", insert_output_rescale):
        yield


@contextlib.contextmanager
def boundary_quantizes_join_their_producer():
    """Inside, Arm's TOSA partitioner for an integer-only TOSA profile puts a quantize node
    that its partitions left on the CPU into the partition that makes its input.

    The capability partitioner can put a quantize in the partition of its reader rather than
    of its producer; ``_detag_boundary_nodes`` then takes it out (its input is outside), and
    the producing partition ends on the value before it: a float in the graph, the int8
    values of that TOSA graph on the device, which the CPU then quantized again as floats.
    A split convolution whose branches met in a concatenation beside a ReLU6 the CPU runs
    (``torch.cat([relu6(a), tanh(b).abs()])``): -2.0 dB from eager on TOSA and Ethos-U,
    where its quantized program in PyTorch is 34.8 dB. In the producer's partition the
    quantize makes the int8 values the graph says it does: 34.8 dB. No cycle can come of it:
    the quantize's one input is in the partition, and none of its readers lead back there
    (the partition was valid with the quantize outside it)."""
    from executorch.backends.arm.constants import QUANT_PER_TENSOR_OP
    from executorch.backends.arm.tosa.partitioner import TOSAPartitioner

    check("boundary_quantizes_join_their_producer", (TOSAPartitioner, "_tag_module"),
          (TOSAPartitioner, "_preserve_io_quantization_enabled"))
    original = TOSAPartitioner._tag_module

    def _tag_module(self, module, containing_program, reporter, tag_iterator=None):
        tags = original(self, module, containing_program, reporter, tag_iterator)
        if self.tosa_spec.support_float() or self._preserve_io_quantization_enabled():
            return tags  # a float profile's partitions may end on floats; or kept outside on purpose
        for node in module.graph.nodes:
            if node.target != QUANT_PER_TENSOR_OP or "delegation_tag" in node.meta or not node.args:
                continue
            source = node.args[0]
            tag = source.meta.get("delegation_tag") if isinstance(source, torch.fx.Node) else None
            if tag in tags:
                node.meta["delegation_tag"] = tag
        return tags

    with replaced(TOSAPartitioner, "_tag_module", _tag_module):
        yield


@contextlib.contextmanager
def activations_fuse_into_a_wider_range():
    """Inside, Cortex-M's ``ActivationFusionPass`` fuses a ReLU (hardtanh, clamp) whose
    bounds lie inside its output's quantized range by narrowing the producer's ``qmin`` and
    ``qmax`` to them, as it already does after a max-pool.

    ExecuTorch 1.5.1's pass refused such an activation ("qmin is out of range"): a range
    wider than the activation's, which a ReLU sharing its quantization with other values has
    (a concatenation of a ReLU branch and a plain convolution's: ShuffleNet V2's blocks).
    Refused, the convolution before it, annotated with the ReLU as one pattern and so without
    output parameters of its own, was left an ``aten.convolution`` on int8 values and computed
    garbage (a conv-ReLU-chunk-cat block: -8.4 dB from eager, 36.5 dB patched; a U-Net's skip
    join, or a ReLU and max-pool joined with a convolution: -2.7 dB, 36.8 and 37.6 dB patched;
    shufflenet_v2_x0_5 on random weights: -25.1 dB, 10.0 dB patched, its quantized program in
    PyTorch 9.6 dB).
    CMSIS-NN's kernels clamp to the producer's ``activation_min``/``max``, which the narrowed
    ``qmin``/``qmax`` become: the ReLU, exactly. Hardsigmoid, which moves the zero point
    instead, is left as it was."""
    from executorch.backends.arm._passes.quant_args import QuantArgs
    from executorch.backends.cortex_m.passes.activation_fusion_pass import ActivationFusionPass
    from executorch.backends.cortex_m.passes.passes_utils import get_activation_bounds, quantize_val
    from executorch.exir.dialects._ops import ops as exir_ops

    check("activations_fuse_into_a_wider_range", (ActivationFusionPass, "_get_validated_qparams"))
    original = ActivationFusionPass._get_validated_qparams

    def narrowed(node) -> QuantArgs | None:
        found = node.meta.get("output_qparams") or {}
        qparams, bounds = found.get(0), get_activation_bounds(node)
        if node.target == exir_ops.edge.aten.hardsigmoid.default or bounds is None \
                or not isinstance(qparams, QuantArgs) or not isinstance(qparams.scale, float) \
                or not isinstance(qparams.zp, int):
            return None

        def quantized(bound, unbounded: int) -> int:
            return unbounded if bound is None else int(quantize_val(bound, qparams.scale, qparams.zp, qparams.qmin,
                                                                    qparams.qmax))

        low, high = quantized(bounds[0], qparams.qmin), quantized(bounds[1], qparams.qmax)
        return qparams._replace(qmin=low, qmax=high) if (low, high) != (qparams.qmin, qparams.qmax) else None

    def _get_validated_qparams(self, node, input_node):
        narrower = narrowed(node)
        if narrower is None:
            return original(self, node, input_node)
        wide = node.meta["output_qparams"][0]
        node.meta["output_qparams"][0] = narrower  # what the original checks the bounds against
        try:
            return original(self, node, input_node)
        finally:
            node.meta["output_qparams"][0] = wide

    with replaced(ActivationFusionPass, "_get_validated_qparams", _get_validated_qparams):
        yield


@contextlib.contextmanager
def quantized_linears_read_by_matmuls():
    """Inside, Cortex-M's ``FoldAndAnnotateQParamsPass`` makes a quantized linear that a batch
    matmul reads a ``cortex_m::quantized_linear`` at once, as its ``AtenToCortexMPass`` does
    at the end.

    Folded, such a linear reads int8 values and an int32 bias, and every pass after it
    retraces it as torch types it: int32 out. A batch matmul of it and an int8 value (a
    projected query against raw keys, ``torch.bmm(self.q(x), x.transpose(1, 2))``) then
    failed its retrace in the next pass ("ReplaceScalarWithTensorArgPass: expected scalar
    type torch.int32 but found torch.int8"): the row was LOWER_FAILED. The Cortex-M op is
    typed int8, as its kernel computes. A linear an activation reads is left to the last
    pass, which fuses the activation into it."""
    import torch
    from executorch.backends.arm._passes.fold_qdq_with_annotated_qparams_pass import FoldAndAnnotateQParamsPass
    from executorch.backends.cortex_m.passes import aten_to_cortex_m_pass as to_cortex_m
    from executorch.backends.cortex_m.passes.activation_fusion_pass import ActivationFusionPass
    from executorch.backends.cortex_m.passes.cortex_m_pass_manager import CortexMPassManager
    from executorch.exir.dialects._ops import ops as exir_ops

    check("quantized_linears_read_by_matmuls", (FoldAndAnnotateQParamsPass, "call"),
          (to_cortex_m, "_get_linear_replacement"), (to_cortex_m, "AtenToCortexMPass"),
          (ActivationFusionPass, "TARGETS"))
    original = FoldAndAnnotateQParamsPass.call
    linear, bmm = exir_ops.edge.aten.linear.default, exir_ops.edge.aten.bmm.default

    def call(self, graph_module):
        result = original(self, graph_module)
        graph = result.graph_module.graph
        chosen = [n for n in graph.nodes if n.target == linear and any(u.target == bmm for u in n.users)
                  and not any(u.target in ActivationFusionPass.TARGETS for u in n.users)
                  and (n.meta.get("output_qparams") or {}).get(0) is not None
                  and getattr(n.meta.get("val"), "dtype", None) not in (None, torch.float32)]
        if not chosen or self.exported_program is None:
            return result
        converter = to_cortex_m.AtenToCortexMPass(self.exported_program, CortexMPassManager(None).target_config)
        for node in chosen:
            spec = to_cortex_m._get_linear_replacement(node, converter)
            if spec is None:
                continue
            with graph.inserting_before(node):
                made = graph.create_node("call_function", target=spec.op, args=spec.args, kwargs=spec.kwargs or {})
            node.replace_all_uses_with(made)
            made.meta = node.meta
            made.meta["val"] = node.meta["val"].to(torch.int8)
            graph.erase_node(node)
        result.graph_module.recompile()
        return type(result)(result.graph_module, True)

    with replaced(FoldAndAnnotateQParamsPass, "call", call):
        yield


@contextlib.contextmanager
def scalar_ops_on_constants_left_alone():
    """Inside, ExecuTorch's ``ReplaceScalarWithTensorArgPass`` (and Arm's per-profile
    subclass of it) leaves an operator with a scalar (``ne.Scalar``, ``mul.Scalar``) whose
    tensor is a constant as it is: a constant's value, not a traced one.

    The pass asked the tensor for its fake value (``to_tensor``), which a constant, a real
    tensor in the module the quantizer annotates, has not. A causal mask computed from
    positions alone (GPT-2's) is folded into a constant before the pass, and the model then
    failed to quantize for TOSA and Ethos-U ("'Parameter' object has no attribute
    'to_tensor'"). Left alone, the operator on a constant computes a constant, as it did
    before folding."""
    from executorch.backends.transforms.replace_scalar_with_tensor import ReplaceScalarWithTensorArgPass
    from executorch.exir.pass_base import ExportPass, ProxyValue

    check("scalar_ops_on_constants_left_alone", (ReplaceScalarWithTensorArgPass, "get_replacement"))
    original = ReplaceScalarWithTensorArgPass.get_replacement

    def get_replacement(self, op, args, kwargs, meta):
        if not isinstance(args[0], ProxyValue):
            return ExportPass.call_operator(self, op, args, kwargs, meta)
        return original(self, op, args, kwargs, meta)

    with replaced(ReplaceScalarWithTensorArgPass, "get_replacement", get_replacement):
        yield


@contextlib.contextmanager
def integer_arithmetic_keeps_its_scalars():
    """Inside, the XNNPACK and Vulkan quantizers' preparation leaves the scalar of an
    integer ``add``/``mul`` (``torch.arange(n) + offset``: a Hugging Face attention mask's
    indices) a scalar.

    Their ``_convert_scalars_to_attrs`` made every such scalar a float32 tensor, so the
    integer sum came out float and the indexing it fed failed the calibration ("tensors
    used as indices must be long, int, byte or bool tensors": BERT at xnnpack:int8)."""
    import torch
    from executorch.backends.vulkan.quantizer import vulkan_quantizer
    from executorch.backends.xnnpack.quantizer import xnnpack_quantizer

    check("integer_arithmetic_keeps_its_scalars", (xnnpack_quantizer, "_convert_scalars_to_attrs"),
          (vulkan_quantizer, "_convert_scalars_to_attrs"))
    original = xnnpack_quantizer._convert_scalars_to_attrs

    def convert(model):
        integer = {n: n.args for n in model.graph.nodes if n.op == "call_function"
                   and n.target in (torch.ops.aten.add.Tensor, torch.ops.aten.mul.Tensor)
                   and isinstance(n.meta.get("val"), torch.Tensor) and not n.meta["val"].is_floating_point()}
        model = original(model)
        for node, args in integer.items():
            node.args = args
        model.graph.eliminate_dead_code()
        model.recompile()
        return model

    with replaced(xnnpack_quantizer, "_convert_scalars_to_attrs", convert), \
            replaced(vulkan_quantizer, "_convert_scalars_to_attrs", convert):
        yield


@contextlib.contextmanager
def ambiguous_strides_read_as_torch_does():
    """Inside, a tensor spec's dim order is the one torch reads from its tensor where the
    strides alone leave it open.

    A tensor with a dimension of size 1 has strides that fit more than one dim order:
    ``[1, 1, 64, 64]`` laid out channels-last has strides ``(4096, 1, 64, 1)``. ExecuTorch
    1.5.1's ``dim_order_from_stride`` sorts the strides alone and calls that ``(0, 2, 1, 3)``,
    an order no kernel takes; the ``_clone_dim_order`` that made the tensor, asked for
    ``(0, 2, 3, 1)``, then refuses its own output (a Cortex-M program whose pixel shuffle
    ends in one channel). ``Tensor.dim_order()`` reads sizes and strides together and says
    ``(0, 2, 3, 1)``. Where the two differ, the spec takes torch's; both describe the same
    memory."""
    from executorch.exir.tensor import TensorSpec

    check("ambiguous_strides_read_as_torch_does", (TensorSpec, "from_tensor"))
    made = TensorSpec.__dict__["from_tensor"].__func__

    def from_tensor(cls, tensor, const: bool = False):
        spec = made(cls, tensor, const)
        if not const and tensor.dim() > 1:
            try:
                order = tuple(tensor.dim_order())
            except (RuntimeError, TypeError, ValueError):  # symbolic strides: as ExecuTorch reads them
                return spec
            if order != tuple(spec.dim_order):
                spec.dim_order = order
        return spec

    with replaced(TensorSpec, "from_tensor", classmethod(from_tensor)):
        yield


@contextlib.contextmanager
def coreai_without_source_paths():
    """Inside, ExecuTorch's Core AI delegate converts with coreai-torch's release mode.

    ``_convert_to_aiprogram`` makes its ``TorchConverter()`` in coreai-torch's default mode,
    DEBUG, which writes every operation's Python stack into the Core AI model carried inside
    the .pte: the absolute path of the model's own source file and of the exporting
    machine's site-packages (``/home/jane/nets/net.py``, ``/home/jane/.venv/...``), served
    to every app that downloads the file. RELEASE keeps the operation ids and drops the
    stacks. Used only while ExecuTorch's function is the one it was written from (its
    source's digest); otherwise ``UpstreamChangedError``."""
    from executorch.backends.apple.coreai.compiler import preprocess

    patch = "coreai_without_source_paths"
    check(patch, (preprocess, "_convert_to_aiprogram"))
    known = source_digest(preprocess._convert_to_aiprogram)
    if known != _COREAI_CONVERT_SOURCE:
        raise source_changed(patch, LIBRARY, VERSION, _MODULE, "coreai preprocess._convert_to_aiprogram",
                             (_COREAI_CONVERT_SOURCE, known))

    def convert(edge_program):
        from coreai_torch import TorchConverter

        converter = TorchConverter(mode=TorchConverter.Mode.RELEASE)
        converter.add_exported_program(preprocess._prepare_program_for_conversion(edge_program))
        return converter.to_coreai()

    with replaced(preprocess, "_convert_to_aiprogram", convert):
        yield


# executorch.backends.apple.coreai.compiler.preprocess._convert_to_aiprogram's source
_COREAI_CONVERT_SOURCE = "dfd55ef6"

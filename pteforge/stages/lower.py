"""Lower an ExportedProgram through a backend chain and read back what happened."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import hashlib
import re
from collections import Counter

from ..core.result import Delegation, OpCount


@contextlib.contextmanager
def shared_provenance():
    """torch.fx's provenance records, shared instead of deep-copied (same content).

    Every node a pass makes records the node it came from, with a deep copy of that node's
    own record, so after k passes each new node copies a chain k deep: the Arm pass
    manager's ~145 passes spent a fifth of TOSA lowering in ``copy.deepcopy``. The records
    are never changed once made (a pass gives a node a new list), so sharing the chain
    keeps every record as it was. Measured on mobilenet_v3_small's TOSA INT lowering, two
    runs each, alternated: 22.6 and 25.6 s -> 19.5 and 18.9 s, the same program bytes.
    """
    try:
        from torch.fx.traceback import NodeSource
    except ImportError:
        yield
        return
    original = NodeSource.__init__

    def init(self, node, pass_name="", action=None):
        chain = node.meta.get("from_node") if node is not None and getattr(node, "meta", None) else None
        if chain is None:
            return original(self, node, pass_name, action)
        node.meta["from_node"] = []
        try:
            original(self, node, pass_name, action)
        finally:
            node.meta["from_node"] = chain
        self.from_node = list(chain)

    NodeSource.__init__ = init
    try:
        yield
    finally:
        NodeSource.__init__ = original


_CODE_ATTRIBUTES = ("_in_spec", "_out_spec", "_code", "_lineno_map", "_prologue_start")


@contextlib.contextmanager
def lazy_codegen():
    """Every torch.fx GraphModule made inside writes its Python code when first used, not
    at each ``recompile()``.

    Lowering passes rebuild and recompile the graph hundreds of times and rarely run
    it; the code each recompile generates and compiles is mostly thrown away. torch's
    own ``_LazyGraphModule`` (what inductor uses) defers it until the module is called,
    printed, pickled or its code read; here it also covers the pytree specs some passes
    read. Measured on mobilenet_v3_small, one run each: Ethos-U85 lowering 17.1/18.2 s ->
    13.7/13.8 s, XNNPACK 10.9 -> 8.5 s, the same program bytes.
    """
    try:
        from torch.fx._lazy_graph_module import _LazyGraphModule
        from torch.fx.graph_module import GraphModule
    except ImportError:
        yield
        return
    lazy = _lazy_class(_LazyGraphModule)
    original = GraphModule.__dict__["__new__"]  # the staticmethod itself, put back as it was

    def new(cls, *args, **kwargs):
        return original.__func__(lazy if cls is GraphModule else cls, *args, **kwargs)

    GraphModule.__new__ = staticmethod(new)
    try:
        yield
    finally:
        GraphModule.__new__ = original


@functools.cache
def _lazy_class(base):
    class LazyCode(base):
        def __getattr__(self, name):
            if name in _CODE_ATTRIBUTES and self._needs_recompile():
                self.real_recompile()
                return getattr(self, name)
            return super().__getattr__(name)

    return LazyCode


# Operator namespaces whose fake kernels are functions of their inputs' metadata and their
# arguments alone: torch's own quantize/dequantize family (``torch.ao``'s Meta kernels make
# ``empty_like(input, dtype=...)`` after checking dtypes). Not ``tosa``: its fake kernels
# read the TOSA specification in effect, which a cache key does not hold.
CACHEABLE_NAMESPACES = frozenset({"quantized_decomposed"})


@contextlib.contextmanager
def cached_quant_ops():
    """Fake-tensor dispatch caches the quantize/dequantize operators as it does aten's.

    torch caches a fake operator's output metadata by its inputs' metadata, but only for
    operators of the aten and prims namespaces; any other is dispatched anew each time.
    Every pass that re-traces a quantized program runs its quantize and dequantize nodes
    on fake tensors again: 5,531 such dispatches in one TOSA INT lowering of
    mobilenet_v3_small, each 2.6x the cost of a cache hit. Inside, those of
    ``CACHEABLE_NAMESPACES`` are cached like aten's (every other check of torch's still
    applies; views are left out, as torch leaves out composite views), so the program is
    the one made without (tested, with torch's own cross-check of cached outputs). The
    entries made inside stay in torch's cache after it: each is the output a dispatch gives.
    ``bench/quantized_lowering.py``: Cortex-M's lowering of mobilenet_v3_small 12.6 -> 9.7 s;
    TOSA INT's 32.7 -> 32.6 s (its calls were cached too; why that saved no time is not known).
    """
    try:
        from torch._subclasses.fake_tensor import (
            FakeTensorMode,
            _BypassDispatchCache,
            _DispatchCacheBypassEntry,
        )
        original = FakeTensorMode._validate_cache_key
    except (ImportError, AttributeError):
        yield
        return
    # what was dispatched outside left entries saying "not cacheable": forget those
    for key, entry in list(FakeTensorMode.cache.items()):
        if isinstance(entry, _DispatchCacheBypassEntry) and entry.reason == "non-builtin" \
                and getattr(key.key[0], "namespace", None) in CACHEABLE_NAMESPACES:
            del FakeTensorMode.cache[key]

    def validate(self, func, args, kwargs):
        try:
            return original(self, func, args, kwargs)
        except _BypassDispatchCache as bypass:
            # torch checks the namespace last but for composite views: the rest passed
            if bypass.reason != "non-builtin" or getattr(func, "namespace", None) not in CACHEABLE_NAMESPACES \
                    or func.is_view or _symbolic(args, kwargs):
                raise

    FakeTensorMode._validate_cache_key = validate
    try:
        yield
    finally:
        FakeTensorMode._validate_cache_key = original


def _symbolic(args, kwargs) -> bool:
    """Whether a tensor argument has symbolic sizes. Those are left to torch as they were: with
    them cached, a tiny language model's 8da4w lowering took 50.3 and 52.5 s against 42.3 and
    46.3 s without (alternated); with them left out, 50.6 and 46.9 s against 50.7 and 47.5 s."""
    return any(getattr(a, "_has_symbolic_sizes_strides", False) for a in (*args, *kwargs.values()))


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
    try:
        from executorch.exir.pass_base import ExportPass, PassResult, _ExportPassBase
    except ImportError:
        yield
        return
    hooks = [name for base in (_ExportPassBase, ExportPass) for name, value in vars(base).items()
             if callable(value) and name not in ("call", "__init__", "__call__") and not name.startswith("__")]
    call, had_dunder = _ExportPassBase.call, "__call__" in vars(_ExportPassBase)
    dunder = _ExportPassBase.__call__

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

    _ExportPassBase.__call__, _ExportPassBase.call = enter, retrace
    try:
        yield
    finally:
        _ExportPassBase.call = call
        if had_dunder:
            _ExportPassBase.__call__ = dunder
        else:
            del _ExportPassBase.__call__


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
    try:
        from executorch.exir.pass_base import _ExportPassBase
        from torch._export.pass_base import _ExportPassBaseDeprecatedDoNotUse
    except ImportError:
        yield
        return
    bases = (_ExportPassBase, _ExportPassBaseDeprecatedDoNotUse)
    originals = [(base.__dict__["_fx"], base.ExportInterpreter.__dict__["run_node"], base.__dict__["call_submodule"])
                 for base in bases]
    remembered = _Remembered()
    for base, (fx, run_node, call_submodule) in zip(bases, originals):
        base._fx, base.ExportInterpreter.run_node = remembered.fx(fx), remembered.run_node(run_node)
        base.call_submodule = remembered.call_submodule(call_submodule)
    try:
        yield
    finally:
        for base, (fx, run_node, call_submodule) in zip(bases, originals):
            base._fx, base.ExportInterpreter.run_node, base.call_submodule = fx, run_node, call_submodule


class _Remembered:
    """What ``retraces_reuse_values`` remembers, and the pass-base methods it wraps with it."""

    def __init__(self):
        self.memo: dict = {}  # (operator, what it reads) -> (value, the objects read by identity)
        self.made: dict = {}  # id(value) -> (its key in memo, the value): its id not reused while here
        self.handed: list[set] = []  # for each graph being re-traced: the values its nodes were given

    def call_function(self, interpreter, target, args, kwargs):
        key, held = _call_key(target, args, kwargs)
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
            def __init__(self, interpreter):
                self.interpreter = interpreter

            def call_function(self, target, args, kwargs):
                return remembered.call_function(self.interpreter, target, args, kwargs)

        @functools.wraps(fx)
        def remembering(self, kind, target, args, kwargs, meta):
            if kind != "call_function":
                return fx(self, kind, target, args, kwargs, meta)
            interpreter, self.interpreter = self.interpreter, Interpreter(self.interpreter)
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
    import torch
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
    import torch

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
    import torch

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
    import logging

    try:
        from executorch.exir.backend import backend_api
        create = backend_api._create_partitions_in_graph_module
    except (ImportError, AttributeError):
        yield
        return

    def unprinted(graph_module, *args, **kwargs):
        own = type(graph_module)  # torch.fx gives each GraphModule a class of its own
        if logging.getLogger().isEnabledFor(logging.DEBUG) or "__str__" in vars(own):
            return create(graph_module, *args, **kwargs)
        own.__str__ = lambda self: f"<{len(self.graph.nodes)} nodes; text written with the debug level on>"
        try:
            return create(graph_module, *args, **kwargs)
        finally:
            del own.__str__

    backend_api._create_partitions_in_graph_module = unprinted
    try:
        yield
    finally:
        backend_api._create_partitions_in_graph_module = create


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
    ExecuTorch's method is the one it was written from (its source's digest)."""
    try:
        import inspect

        from executorch.exir.backend.canonical_partitioners.group_partitioner import GroupBasedPartitioner

        original = GroupBasedPartitioner.__dict__["_can_merge_partitions"]
        known = hashlib.sha256(inspect.getsource(original).encode()).hexdigest()[:8]
    except (ImportError, AttributeError, KeyError, OSError, TypeError):
        yield
        return
    if known != _MERGE_SOURCE:
        yield
        return
    GroupBasedPartitioner._can_merge_partitions = _can_merge
    try:
        yield
    finally:
        GroupBasedPartitioner._can_merge_partitions = original


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
    is the one it was written from (its source's digest)."""
    try:
        import inspect

        from executorch.exir import lowered_backend_module
        from torch.fx.passes import tools_common

        original = lowered_backend_module.legalize_graph
        known = hashlib.sha256(inspect.getsource(tools_common.legalize_graph).encode()).hexdigest()[:8]
    except (ImportError, AttributeError, OSError, TypeError):
        yield
        return
    if original is not tools_common.legalize_graph or known != _LEGALIZE_SOURCE:
        yield
        return
    lowered_backend_module.legalize_graph = sort_in_place
    try:
        yield
    finally:
        lowered_backend_module.legalize_graph = original


def sort_in_place(gm):
    """``torch.fx.passes.tools_common.legalize_graph`` without copying the graph: its queue
    (what has all its inputs, in the order the graph and each node's users give; runtime
    assertions first), and then what its copy would hold: each node's users in the new
    order, a shallow copy of its metadata, the names in a fresh namespace, the lookup
    table of ``find_nodes`` in the new order, and no tracer of the graph's."""
    import collections
    import operator

    import torch
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
    import torch

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
    import torch

    return "\n".join(f"{node.name}={node.op}:{node.target}{node.args}{node.kwargs}"
                     for module in graph_module.modules() if isinstance(module, torch.fx.GraphModule)
                     for node in module.graph.nodes)


@contextlib.contextmanager
def fast_fx():
    """``shared_provenance``, ``lazy_codegen``, ``cached_quant_ops``, ``retrace_only_what_changed``,
    ``retraces_reuse_values``, ``partitions_without_debug_text``, ``partitions_sorted_in_place``,
    ``partitions_merged_by_set_checks``, ``memo.sharing`` and ``memo.fast_serde``:
    what every target job (loading its capture, lowering it) runs under."""
    from .memo import fast_serde, sharing

    with shared_provenance(), lazy_codegen(), cached_quant_ops(), retrace_only_what_changed(), \
            retraces_reuse_values(), partitions_without_debug_text(), partitions_sorted_in_place(), \
            partitions_merged_by_set_checks(), sharing(), fast_serde():
        yield


def lower(exported, chain, precision, plan, fallback: bool = True):
    """Lower with the chain's partitioners in priority order; return the edge program manager.

    The first backend drives lowering (its plan: edge config, passes, its special
    flow if any); the partitioners of the others follow it: what the first cannot
    take goes to the next, and what none takes stays on the portable kernels. A
    later backend that does not take the target's precision lowers at its default.

    A partitioner keeps the operators it means to take whole (out of decomposition).
    When lowering then fails on one of them, naming its node (it was neither delegated
    nor decomposed: OpenVINO with ``pixel_shuffle``; coremltools could not convert it:
    ``max_pool1d`` with a default stride), it is lowered again with that operator
    decomposed into the core operators it is made of, which the backend or the portable
    kernels take; ``edge.decomposed_instead`` names those operators.

    When a backend's own pass crashes on a partition (``fallback``), the smallest part
    that crashes is left to the portable kernels (``stages/fallback.py``);
    ``edge.left_out`` says what, with the upstream error.
    """
    from .fallback import Cut, lower_leaving_out

    cut = Cut()

    def attempt():
        return _lower_decomposing(exported, chain, precision, plan, cut)

    try:
        edge, left_out = attempt(), []
    except Exception as exc:
        if not fallback or cut.last is None:
            raise
        edge, left_out = lower_leaving_out(attempt, cut, exc)
        _quantized_kernels()  # the out variants of what a quantized part left out calls (quantized_decomposed::)
    edge.left_out = left_out
    return edge


def _quantized_kernels() -> None:
    import importlib

    try:
        importlib.import_module("executorch.kernels.quantized")
    except ImportError:  # a wheel without them: serializing names the missing out variants
        pass


def _lower_decomposing(exported, chain, precision, plan, cut):
    dropped: set = set()
    while True:
        kept: set = set()
        try:
            edge = _lower(exported, chain, precision, plan, dropped, kept, cut)
        except Exception as exc:
            op = _kept_whole_in(exc, kept - dropped)
            if op is None:
                raise
            dropped.add(op)
            continue
        if left := _left_whole(edge, kept - dropped):
            dropped |= left
            continue
        edge.decomposed_instead = sorted(str(op) for op in dropped)
        return edge


def _lower(exported, chain, precision, plan, dropped: set, kept: set, cut):
    rest = zip(chain[1:], chain_precisions(chain, precision)[1:])
    others = [p for b, at in rest for p in b.fit(exported, b.partitioners(at))]
    mine = chain[0].fit(exported, plan.partitioners)
    guarded = cut.guard([*mine, *others])
    plan = dataclasses.replace(plan, partitioners=guarded[:len(mine)])
    others = guarded[len(mine):]
    with contextlib.ExitStack() as inside:
        for backend in chain:
            inside.enter_context(backend.lowering_context())
        inside.enter_context(kept_whole(exported, [*plan.partitioners, *others], dropped, kept))
        return chain[0].lower(exported, plan, others)


def _left_whole(edge, kept: set) -> set:
    """The operators kept whole that no backend then took and that have no out variant:
    no kernel could run them, and the program would not serialize (Core ML keeps
    ``aten.stft`` whole, then left it out of its delegate for its complex result:
    "Missing out variants: {'aten::stft'}")."""
    from executorch.exir.operator.convert import to_out_variant

    found = set()
    for node in edge.exported_program().graph.nodes:
        op = getattr(node.target, "_op", node.target) if node.op == "call_function" else None
        if op in kept and op not in found:
            try:
                to_out_variant(op)
            except Exception:  # noqa: BLE001 - ExecuTorch raises several kinds for "none"
                found.add(op)
    return found


def _kept_whole_in(exc: BaseException, kept: set):
    """The operator kept whole whose node ``exc`` names first (``aten_pixel_shuffle_default``,
    ``aten_max_pool1d_default_1``, ``<EdgeOpOverload: aten.pixel_shuffle.default>``), if any;
    not one of the operators ExecuTorch lists after "The following ops:"."""
    text = str(exc).split("The following ops:")[0]
    found = []
    for op in kept:
        name = str(op)
        node = re.search(rf"\b{re.escape(name.replace('.', '_'))}(_\d+)?\b|<EdgeOpOverload: {re.escape(name)}>", text)
        if node:
            found.append((node.start(), name, op))
    return min(found, key=lambda f: f[:2])[2] if found else None


@contextlib.contextmanager
def kept_whole(exported, partitioners, dropped: set = frozenset(), kept: set | None = None):
    """While ``partitioners`` lower ``exported``, the operators they keep whole, less those
    in ``dropped`` and those inside ``torch.cond``/``while_loop`` branches (collected into
    ``kept``). Partitioners keep their operators whole everywhere but delegate only
    outside branches: an operator kept whole inside a branch was neither decomposed nor
    delegated, and lowering failed ("aten.linear.default … was not decomposed or
    delegated"), so a program with branches keeps whole only the operators no branch holds."""
    excluded = ops_in_branches(exported.graph_module) | set(dropped)
    changing = [p for p in partitioners if hasattr(p, "ops_to_not_decompose")]
    for p in changing:
        def filtered(program, _original=p.ops_to_not_decompose):
            ops, check = _original(program)
            if kept is not None:
                kept.update(ops)
            return [op for op in ops if op not in excluded], check

        p.ops_to_not_decompose = filtered  # this instance, for this lowering
    try:
        yield
    finally:
        for p in changing:
            del p.ops_to_not_decompose


def ops_in_branches(gm, inside: bool = False) -> set:
    """The call_function targets in the subgraphs of ``gm`` (control-flow branches and bodies)."""
    import torch

    found = set()
    for node in gm.graph.nodes:
        if inside and node.op == "call_function":
            found.add(node.target)
        elif node.op == "get_attr" and isinstance(sub := getattr(gm, node.target, None), torch.fx.GraphModule):
            found |= ops_in_branches(sub, True)
    return found


def chain_precisions(chain, precision) -> list:
    """The precision each backend of a chain lowers at: the first at ``precision``, a later
    one at ``precision`` when it takes it, else at its default."""
    return [precision if i == 0 or precision in b.precisions else b.default_precision for i, b in enumerate(chain)]


# Graph bookkeeping, not kernels: left out of the portable op counts.
_NOT_OPS = {"getitem", "alloc"}


def delegation_of(gm) -> Delegation:
    """Delegation facts from the lowered edge graph module.

    Call it before ``to_executorch``, which adds memory-planning nodes; the caller
    fills ``delegates_in_program`` from the serialized program.
    """
    from executorch.devtools.backend_debug import get_delegation_info

    info = get_delegation_info(gm)
    nodes: Counter[str] = Counter()
    subgraphs: Counter[str] = Counter()
    graphs = [gm.graph]
    for node in gm.graph.nodes:
        if node.op == "get_attr" and node.name.startswith("lowered_module_"):
            lowered = getattr(gm, node.name)
            subgraphs[lowered.backend_id] += 1
            graphs.append(lowered.original_module.graph)
            nodes[lowered.backend_id] += sum(
                1 for n in lowered.original_module.graph.nodes if n.op == "call_function"
            )
    portable = sorted(
        (
            (op, b.non_delegated)
            for op, b in info.delegation_by_operator.items()
            if b.non_delegated and op not in _NOT_OPS
        ),
        key=lambda kv: (-kv[1], kv[0]),
    )
    non_delegated = sum(n for _, n in portable)
    return Delegation(
        total_nodes=info.num_delegated_nodes + non_delegated,
        delegated_nodes=info.num_delegated_nodes,
        nodes_per_backend=dict(nodes),
        subgraphs_per_backend=dict(subgraphs),
        portable_ops=[OpCount(op, n) for op, n in portable],
        delegates_in_program=[],
        precision_ops=precision_evidence(graphs),
    )


def precision_evidence(graphs) -> dict[str, int]:
    """What in the lowered graphs (delegated subgraphs included) shows the precision:
    quantize/dequantize nodes, nodes computing in fp16, int8/int4 weights."""
    import torch

    counts: Counter[str] = Counter()
    for graph in graphs:
        for n in graph.nodes:
            if n.op != "call_function":
                continue
            name = str(getattr(n.target, "__name__", n.target))
            if "quantize" in name:
                counts["quantize_ops"] += 1
            val = n.meta.get("val")
            if isinstance(val, torch.Tensor) and val.dtype == torch.float16:
                counts["fp16_nodes"] += 1
    return dict(counts)


def program_delegates(program) -> list[str]:
    """Delegate ids recorded in a deserialized/serialized ExecuTorch program, in order."""
    ids: list[str] = []
    for plan in program.execution_plan:
        ids.extend(d.id for d in plan.delegates)
    return ids


def program_operators(program) -> list[str]:
    ops: list[str] = []
    for plan in program.execution_plan:
        ops.extend(f"{op.name}.{op.overload}" if op.overload else op.name for op in plan.operators)
    return ops

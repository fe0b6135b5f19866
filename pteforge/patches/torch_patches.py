"""pteforge's patches of torch 2.14.0 (the version uv.lock pins): torch.fx's provenance
records and code generation, fake-tensor dispatch caching, ``ExportedProgram.run_decompositions``,
the CIA operators' list it reads, custom class checks, and ``torch.export``'s serializer.

Each patch checks, when applied, that torch is ``VERSION`` and still has what it replaces
(``pteforge.patches.require``), and raises ``UpstreamChangedError`` otherwise; each puts
back what it replaced on exit. Every one makes the same programs and bytes as torch alone.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import inspect
import pickle
import typing
import weakref

from torch._subclasses import fake_tensor
from torch.export import ExportedProgram
from torch.fx import traceback as fx_traceback
from torch.fx._lazy_graph_module import _LazyGraphModule
from torch.fx.graph_module import GraphModule

from . import replaced, require, source_changed, source_digest

LIBRARY, VERSION = "torch", "2.14.0"


def check(patch: str, *targets: tuple) -> None:
    """Raise ``UpstreamChangedError`` unless torch is ``VERSION`` and has each ``(object, attribute)``."""
    require(patch, LIBRARY, VERSION, __name__.rpartition(".")[2], *targets)


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
    check("shared_provenance", (fx_traceback, "NodeSource"))
    NodeSource = fx_traceback.NodeSource
    check("shared_provenance", (NodeSource, "__init__"))
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

    with replaced(NodeSource, "__init__", init):
        yield


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
    check("lazy_codegen", (GraphModule, "__new__"), (_LazyGraphModule, "real_recompile"),
          (_LazyGraphModule, "_needs_recompile"))
    lazy = _lazy_class(_LazyGraphModule)
    original = GraphModule.__dict__["__new__"]  # the staticmethod itself, put back as it was

    def new(cls, *args, **kwargs):
        return original.__func__(lazy if cls is GraphModule else cls, *args, **kwargs)

    with replaced(GraphModule, "__new__", staticmethod(new)):
        yield


@functools.cache
def _lazy_class(base: typing.Any) -> type:  # base: torch's _LazyGraphModule, read as Any
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
    check("cached_quant_ops", (fake_tensor, "FakeTensorMode"), (fake_tensor, "_BypassDispatchCache"),
          (fake_tensor, "_DispatchCacheBypassEntry"), (fake_tensor.FakeTensorMode, "_validate_cache_key"),
          (fake_tensor.FakeTensorMode, "cache"))
    FakeTensorMode, _BypassDispatchCache = fake_tensor.FakeTensorMode, fake_tensor._BypassDispatchCache
    _DispatchCacheBypassEntry = fake_tensor._DispatchCacheBypassEntry
    original = FakeTensorMode._validate_cache_key
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

    with replaced(FakeTensorMode, "_validate_cache_key", validate):
        yield


def _symbolic(args, kwargs) -> bool:
    """Whether a tensor argument has symbolic sizes. Those are left to torch as they were: with
    them cached, a tiny language model's 8da4w lowering took 50.3 and 52.5 s against 42.3 and
    46.3 s without (alternated); with them left out, 50.6 and 46.9 s against 50.7 and 47.5 s."""
    return any(getattr(a, "_has_symbolic_sizes_strides", False) for a in (*args, *kwargs.values()))



@contextlib.contextmanager
def fast_serde():
    """``torch.export.save`` and ``load`` without the work they repeat; the same files and
    programs.

    Loading makes the JSON into the serialization schema's dataclasses field by field, each
    time asking ``typing.get_type_hints`` of the class again (113,000 times for Gemma 3
    270M's 8da4w program), and parses each symbolic size from its text with
    ``sympy.sympify`` (10,000 times, a few dozen texts). Inside, each is answered once: the
    hints of a class do not change, and a text parsed with the same symbols gives the same
    expression (the loader only adds symbols, so the names it passes and the objects they
    name make the key).

    Saving deep-copies the whole serialized program before putting it in canonical order
    (``canonicalize``: half of the 8da4w program's save); inside, that copy is made by a
    pickle round trip (the same plain dataclasses, shared parts shared alike): the 8da4w
    program's save 10.3 and 8.0 s -> 8.8 and 7.4 s (alternated, with another job running)."""
    import sympy
    from torch._export.serde import schema, serialize

    check("fast_serde", (serialize, "typing"), (serialize, "sympy"), (serialize, "copy"),
          (schema, "ExportedProgram"))
    with replaced(serialize, "typing", _HintsOnce(typing, vars(schema))), \
            replaced(serialize, "sympy", _ParsedOnce(sympy)), \
            replaced(serialize, "copy", _CopiedByPickle(copy, schema.ExportedProgram)):
        yield


class _Forwarding:
    """A module as torch's serializer reads it, with one function of its own."""

    def __init__(self, module):
        self._module = module

    def __getattr__(self, name):
        return getattr(self._module, name)


class _HintsOnce(_Forwarding):
    """``typing`` whose ``get_type_hints`` of a schema class is asked once."""

    def __init__(self, module, names: dict):
        super().__init__(module)
        self._names = names
        self._hints: dict[object, dict[str, typing.Any]] = {}

    def get_type_hints(self, obj, globalns=None, localns=None, include_extras=False):
        if globalns is not self._names or localns is not None or include_extras:
            return self._module.get_type_hints(obj, globalns, localns, include_extras)
        if obj not in self._hints:
            self._hints[obj] = self._module.get_type_hints(obj, globalns)
        return dict(self._hints[obj])


class _ParsedOnce(_Forwarding):
    """``sympy`` whose ``sympify`` of a text with the same symbols is parsed once."""

    def __init__(self, module):
        super().__init__(module)
        self._parsed: dict = {}

    def sympify(self, text, locals=None, **kwargs):  # noqa: A002 - sympy's own name
        if not isinstance(text, str) or kwargs or locals is None:
            return self._module.sympify(text, locals=locals, **kwargs)
        key = (text, tuple((name, id(value)) for name, value in locals.items()))
        if key not in self._parsed:  # the objects the key names kept alive with it
            self._parsed[key] = (self._module.sympify(text, locals=locals), list(locals.values()))
        return self._parsed[key][0]


class _CopiedByPickle(_Forwarding):
    """``copy`` whose ``deepcopy`` of a serialized program is a pickle round trip."""

    def __init__(self, module, program_type):
        super().__init__(module)
        self._program_type = program_type

    def deepcopy(self, value, memo=None):
        if memo is None and isinstance(value, self._program_type):
            try:
                return pickle.loads(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))
            except Exception:  # noqa: BLE001 - whatever pickle refuses, copy does as before
                pass
        return self._module.deepcopy(value, memo)


@contextlib.contextmanager
def cia_ops_materialized_once():
    """torch's CompositeImplicitAutograd operators made into ``torch.ops`` objects again only
    when the dispatcher's list of them changed.

    ``run_decompositions`` (and ``default_decompositions``) ask for the preservable CIA
    operators of each of ~40 namespaces, and each ask walks the dispatcher's whole list
    (~2,000 ``getattr``\s on ``torch.ops``): 0.13 s a call, ~0.5 s of a mobilenet_v3_small run's
    three lowerings. What it makes stays in ``torch.ops``; a library that registers more
    operators changes the list, and the next ask walks it again."""
    import torch
    from torch._export import utils

    check("cia_ops_materialized_once", (utils, "_materialize_cpp_cia_ops"))
    original = utils._materialize_cpp_cia_ops
    seen: list = []

    def materialize() -> None:
        now = torch._C._dispatch_get_registrations_for_dispatch_key("CompositeImplicitAutograd")
        if seen != now:
            original()
            seen[:] = now

    with replaced(utils, "_materialize_cpp_cia_ops", materialize):
        yield


@contextlib.contextmanager
def custom_class_checks_by_type():
    """``isinstance(value, CustomClassBase)`` answered by the value's type, remembered, for
    every value that is not a ``FakeScriptObject`` (whose answer is its wrapped object's).

    Every argument of every node a trace makes is asked whether it is a custom class object
    (``PythonKeyTracer.create_arg``); each ask imports and walks torch's registry of opaque
    types again (~3 µs): 3 % of the default run's job time, in the Arm pass manager's ~145
    retraces mostly. The answer depends on the type alone, and on torch's registry of
    opaque types: what it remembers is forgotten when a library registers one (either of
    the registry's tables grows)."""
    from torch import _custom_class_base as base
    from torch._library import opaque_object
    from torch._library.fake_class_registry import FakeScriptObject

    check("custom_class_checks_by_type", (base.CustomClassBaseMeta, "__instancecheck__"), (base, "CustomClassBase"),
          (opaque_object, "_OPAQUE_TYPES"), (opaque_object, "_OPAQUE_TYPES_BY_NAME"))
    original = base.CustomClassBaseMeta.__instancecheck__
    answers: dict[type, bool] = {}
    registered: list = [None]

    def instancecheck(cls, instance):
        kind = type(instance)
        if cls is not base.CustomClassBase or issubclass(kind, FakeScriptObject):
            return original(cls, instance)
        now = (len(opaque_object._OPAQUE_TYPES), len(opaque_object._OPAQUE_TYPES_BY_NAME))
        if now != registered[0]:
            answers.clear()
            registered[0] = now
        answer = answers.get(kind)
        if answer is None:
            answer = answers[kind] = bool(original(cls, instance))
        return answer

    with replaced(base.CustomClassBaseMeta, "__instancecheck__", instancecheck):
        yield


@contextlib.contextmanager
def signature_maps_kept():
    """An export graph signature's name maps (``inputs_to_parameters``, ``inputs_to_buffers``,
    ``user_inputs``) built once per state of its input specs, not at every ask.

    Each ask builds the map anew from every input spec, and passes ask it per node
    (``torch._export.utils.is_param``/``is_buffer``/``get_buffer``, over each placeholder):
    ~4 % of the default run's target-job time, in the Arm passes, the memory planning and
    the emitter. Inside, each map is kept for its signature (beside it, not in it: a
    signature copies and pickles as before) with the specs it was built from, and built
    again when the list holds other specs, or when any spec or argument of any signature
    had a field set since (a rename, a new target: every such write counts).
    The same answers, so the same programs and bytes."""
    from torch.export import graph_signature as gs

    classes = (gs.InputSpec, gs.OutputSpec, gs.TensorArgument, gs.TokenArgument, gs.SymIntArgument,
               gs.SymFloatArgument, gs.SymBoolArgument, gs.CustomObjArgument, gs.ConstantArgument)
    names = ("inputs_to_parameters", "inputs_to_buffers", "user_inputs")
    check("signature_maps_kept", *((gs.ExportGraphSignature, name) for name in names),
          *((cls, "__setattr__") for cls in classes))
    writes = [0]  # fields set on any spec or argument, ever: what a kept map was built after

    def counted(cls):
        setter = cls.__setattr__

        def set_field(self, name, value):
            writes[0] += 1
            setter(self, name, value)
        return set_field

    kept: dict[int, tuple] = {}  # id(signature) -> (a weak reference to it, {name: (writes, specs, ids, value)})

    def forget(key: int, _ref) -> None:
        kept.pop(key, None)

    def keeping(name, build):
        def get(self):
            ids = tuple(map(id, self.input_specs))
            held = kept.get(id(self))
            if held is None or held[0]() is not self:
                held = kept[id(self)] = (weakref.ref(self, functools.partial(forget, id(self))), {})
            entry = held[1].get(name)
            if entry is not None and entry[0] == writes[0] and entry[2] == ids:  # entry[1] holds the specs: no id reused
                return entry[3]
            value = build(self)
            held[1][name] = (writes[0], tuple(self.input_specs), ids, value)
            return value
        return property(get)

    with contextlib.ExitStack() as stack:
        for cls in classes:
            stack.enter_context(replaced(cls, "__setattr__", counted(cls)))
        for name in names:
            build = vars(gs.ExportGraphSignature)[name].fget
            stack.enter_context(replaced(gs.ExportGraphSignature, name, keeping(name, build)))
        yield


# torch._ops.OperatorBase.py_impl's source, whose steps ``py_kernels_registered_without_annotations`` takes
_PY_IMPL_SOURCE = "8173bd20"


@contextlib.contextmanager
def py_kernels_registered_without_annotations():
    """``OperatorBase.py_impl`` registers a Python kernel as torch's does, without building
    its inner function's type annotations at each call.

    ``run_decompositions`` overrides the decomposition of each CompositeImplicitAutograd
    operator it keeps (``_override_composite_implicit_decomp``), a few ``py_impl`` calls per
    operator per call; each defines an inner function annotated ``Callable[_P, _T]``,
    which Python evaluates at every definition (torch's ``_ops.py`` has no postponed
    annotations): ~4 % of a TOSA int8 lowering of mobilenet_v3_small. Used only while
    torch's method is the one it was written from (its source digest); otherwise
    ``UpstreamChangedError``."""
    from torch import _ops
    from torch._C import DispatchKey
    from torch._functorch.pyfunctorch import TransformType
    from torch.utils._python_dispatch import TorchDispatchMode

    patch = "py_kernels_registered_without_annotations"
    check(patch, (_ops.OperatorBase, "py_impl"))
    known = source_digest(_ops.OperatorBase.__dict__["py_impl"])
    if known != _PY_IMPL_SOURCE:
        raise source_changed(patch, LIBRARY, VERSION, __name__.rpartition(".")[2], "torch._ops.OperatorBase.py_impl",
                             (_PY_IMPL_SOURCE, known))
    import torch

    def py_impl(self, k):
        def inner(fn):
            if inspect.isclass(k) and (issubclass(k, TorchDispatchMode) or issubclass(k, torch.Tensor)):
                if k in self.python_key_table:
                    raise AssertionError(f"{k} already registered in python_key_table")
                self.python_key_table[k] = fn
                self._dispatch_cache.clear()
                return fn
            if isinstance(k, TransformType):
                if k in self.functorch_table:
                    raise AssertionError(f"{k} already registered in functorch_table")
                self.functorch_table[k] = fn
                return fn
            if not isinstance(k, DispatchKey):
                raise AssertionError(f"expected DispatchKey, got {type(k)}")
            if k == DispatchKey.Python:
                raise AssertionError("Please register a mode for the DispatchKey.Python key instead.")
            if k in self.py_kernels:
                raise RuntimeError(f"Trying to override a python impl for {k} on operator {self.name()}")
            self.py_kernels[k] = fn
            self._dispatch_cache.clear()
            return fn
        return inner

    with replaced(_ops.OperatorBase, "py_impl", functools.wraps(_ops.OperatorBase.__dict__["py_impl"])(py_impl)):
        yield


@contextlib.contextmanager
def run_decompositions_wrapped(wrap):
    """Inside, ``ExportedProgram.run_decompositions`` is ``wrap(original)``: what
    ``stages/memo.py``'s ``sharing`` makes of it (each result kept under a key of all it
    reads, a copy for a later call with the same key; Arm int8 targets of one model made the
    same edge program, 7 of their 14 s each on mobilenet_v3_small)."""
    check("run_decompositions_wrapped", (ExportedProgram, "run_decompositions"))
    with replaced(ExportedProgram, "run_decompositions", wrap(ExportedProgram.run_decompositions)):
        yield
